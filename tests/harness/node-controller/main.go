// The controller container of tests/integration/node.rs: a small static program built
// from the Go client (clients/go) by tests/harness/node.sh. WORKERS goroutines each make
// WRITES read-dependent increments of ConfigMap COUNTER in POD_NAMESPACE through the
// sidecar at SAFEWRITE_ADDRESS, then it writes its figures as one JSON line to
// /dev/termination-log (the pod's status carries it) and exits 0 only if every write
// succeeded. With HOLD=1 it then stays up until SIGTERM, as a Deployment's controller
// does (a Deployment restarts containers that exit). SIGTERM stops it from starting new
// writes; those in flight finish. With REPORT=NAME it then records how many writes were
// acknowledged in ConfigMap NAME (data.acked), through the sidecar, which outlives it.
// With KEYED=1 every write carries an idempotency key of its own (POD_NAME.worker.i) and
// is sent again, with the same key, while its error says that is safe and may succeed
// (safewrite.Retryable): a write whose answer was lost is applied at most once. With
// DIRECT=1 it writes without the sidecar, as a controller without safewrite does: GET,
// change, PUT with the resourceVersion read, again on 409, straight to the API server
// with the pod's service-account token (the baseline for the sidecar's added latency).
// With LEASE=NAME it is one replica of a leader-elected Deployment (lead.go).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"safewrite.dev/clients/go/safewrite"
)

const increment = `{"data": {"n": string(int(object.data.n) + 1)}}`

// retried counts the keyed calls sent again after a retryable error.
var retried atomic.Int64

func number(name string, fallback int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return fallback
}

func main() {
	workers, writes := number("WORKERS", 16), number("WRITES", 50)
	counter := os.Getenv("COUNTER")
	if counter == "" {
		counter = "counter"
	}
	keyed, direct := os.Getenv("KEYED") == "1", os.Getenv("DIRECT") == "1"
	client, err := safewrite.NewClient("")
	if err != nil {
		fmt.Fprintln(os.Stderr, "controller:", err)
		os.Exit(2)
	}
	defer client.Close()
	ref := safewrite.ObjectRef{APIVersion: "v1", Kind: "ConfigMap",
		Namespace: os.Getenv("POD_NAMESPACE"), Name: counter}
	var api *apiServer
	if direct {
		if api, err = inCluster(); err != nil {
			fmt.Fprintln(os.Stderr, "controller:", err)
			os.Exit(2)
		}
	}
	// write makes one increment and returns the attempts it took.
	write := func(ctx context.Context, key string) (int, error) {
		if direct {
			return api.increment(ctx, ref.Namespace, ref.Name)
		}
		if !keyed {
			res, err := client.Update(ctx, ref, safewrite.CEL(increment))
			if err != nil {
				return 0, err
			}
			return res.Attempts, nil
		}
		for {
			res, err := client.Update(ctx, ref, safewrite.CEL(increment),
				safewrite.WithIdempotencyKey(key))
			if err == nil {
				return res.Attempts, nil
			}
			if !safewrite.Retryable(err) || ctx.Err() != nil {
				return 0, err
			}
			retried.Add(1)
			time.Sleep(20 * time.Millisecond)
		}
	}

	stopping := make(chan struct{})
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	go func() { <-signals; close(stopping) }()
	if lease := os.Getenv("LEASE"); lease != "" {
		runLeading(client, ref, lease, workers, stopping) // lead.go
		return
	}

	var mu sync.Mutex
	var latencies []time.Duration
	attempts := make([]int, workers*writes)
	var failures sync.Map
	var wg sync.WaitGroup
	started := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range writes {
				select {
				case <-stopping:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				begin := time.Now()
				n, err := write(ctx, fmt.Sprintf("%s.%d.%d", os.Getenv("HOSTNAME"), w, i))
				cancel()
				mu.Lock()
				latencies = append(latencies, time.Since(begin))
				mu.Unlock()
				if err != nil {
					failures.Store(fmt.Sprintf("%d/%d", w, i), err.Error())
					continue
				}
				attempts[w*writes+i] = n
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(started)
	acked := 0
	for _, a := range attempts {
		if a > 0 {
			acked++
		}
	}
	if report := os.Getenv("REPORT"); report != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		reportRef := ref
		reportRef.Name = report
		_, err := client.Update(ctx, reportRef, safewrite.MergePatch(map[string]any{
			"data": map[string]any{"acked": strconv.Itoa(acked)}}))
		cancel()
		if err != nil {
			fmt.Fprintln(os.Stderr, "controller: report:", err)
			os.Exit(3)
		}
	}

	sort.Slice(latencies, func(a, b int) bool { return latencies[a] < latencies[b] })
	quantile := func(q float64) float64 {
		if len(latencies) == 0 {
			return 0
		}
		return float64(latencies[int(q*float64(len(latencies)-1))].Microseconds()) / 1000
	}
	total := 0
	for _, a := range attempts {
		total += a
	}
	failed := map[string]string{}
	failures.Range(func(k, v any) bool {
		if len(failed) < 5 {
			failed[k.(string)] = v.(string)
		}
		return true
	})
	n := 0
	failures.Range(func(any, any) bool { n++; return true })
	figures, _ := json.Marshal(map[string]any{
		"workers": workers, "writes": len(latencies), "acked": acked, "failed": n, "examples": failed,
		"attempts": total, "retried": retried.Load(), "seconds": elapsed.Seconds(),
		"p50_ms": quantile(0.50), "p99_ms": quantile(0.99),
	})
	fmt.Println(string(figures))
	_ = os.WriteFile("/dev/termination-log", figures, 0o644)
	if n > 0 {
		os.Exit(1)
	}
	if os.Getenv("HOLD") == "1" {
		<-stopping
	}
}
