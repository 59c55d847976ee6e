package main

// LEASE mode (LEASE=NAME): the controller of a replicated Deployment. It campaigns for
// the Lease NAME in POD_NAMESPACE through its sidecar (identity: the pod's name, timings
// LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD) and, only while it leads, WORKERS
// goroutines make read-dependent increments of COUNTER, each fenced by the leadership's
// epoch (carried in the context RunWhileLeading gives). A write is never canceled: it
// gets its answer, and only a success counts, so the acknowledged count is exact even
// when leadership ends mid-write (the sidecar then refuses it: NOT_LEADER or FENCED).
// On SIGTERM it stops campaigning (the Lease is released when its stream ends), records
// how many writes were acknowledged to it as data[POD NAME] of ConfigMap REPORT, and
// exits 0.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"safewrite.dev/clients/go/safewrite"
)

func durationOf(name string, fallback time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(name)); err == nil && d > 0 {
		return d
	}
	return fallback
}

func runLeading(client *safewrite.Client, ref safewrite.ObjectRef, lease string, workers int, stopping <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-stopping; cancel() }()
	who := os.Getenv("HOSTNAME")
	var acked, refused atomic.Int64
	work := func(leading context.Context) error {
		fence, _ := safewrite.FenceFromContext(leading)
		fmt.Printf("leading under epoch %d\n", fence.Epoch)
		var wg sync.WaitGroup
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for leading.Err() == nil {
					// The fence, not the cancellation: a write in flight gets its answer.
					call, done := context.WithTimeout(context.WithoutCancel(leading), time.Minute)
					_, err := client.Update(call, ref, safewrite.CEL(increment))
					done()
					switch {
					case err == nil:
						acked.Add(1)
					case errors.Is(err, safewrite.ErrPreconditionFailed):
						refused.Add(1)
						return // deposed: wait for the next leadership
					default:
						time.Sleep(50 * time.Millisecond)
					}
				}
			}()
		}
		wg.Wait()
		return nil
	}
	for ctx.Err() == nil {
		err := client.RunWhileLeading(ctx, ref.Namespace, lease, func(leading context.Context) error {
			if err := work(leading); err != nil {
				return err
			}
			<-leading.Done() // deposed workers wait here for the end of this leadership
			return nil
		},
			safewrite.WithIdentity(who),
			safewrite.WithLeaseDuration(durationOf("LEASE_DURATION", 15*time.Second)),
			safewrite.WithRenewDeadline(durationOf("RENEW_DEADLINE", 10*time.Second)),
			safewrite.WithRetryPeriod(durationOf("RETRY_PERIOD", 2*time.Second)))
		if err != nil && ctx.Err() == nil {
			fmt.Fprintln(os.Stderr, "controller: campaign:", err)
			time.Sleep(time.Second)
		}
	}
	report := ref
	report.Name = os.Getenv("REPORT")
	if report.Name != "" {
		call, done := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := client.Update(call, report, safewrite.MergePatch(map[string]any{
			"data": map[string]any{who: strconv.FormatInt(acked.Load(), 10)}}))
		done()
		if err != nil {
			fmt.Fprintln(os.Stderr, "controller: report:", err)
			os.Exit(3)
		}
	}
	fmt.Printf(`{"acked": %d, "refused": %d}`+"\n", acked.Load(), refused.Load())
}
