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
// With RECORD=1 (and KEYED=1) each write also records its value of n under a data key of
// its own (WORKER.I) in the same change, and after the writes every write's answer is
// printed as one JSON line (its key, the value its answer shows for it, whether it was
// already applied, how often it was sent again, when it was first sent and answered, in
// Unix milliseconds), before the figures: the final object then shows whether each key
// was applied exactly once. PACE (a Go duration) is slept after each write, and with
// DURATION the workers start no new write after that long.
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

// recordingIncrement is increment that also records the new value of n under the
// write's own data key (%s, WORKER.I): RECORD mode.
const recordingIncrement = `{"data": {"n": string(int(object.data.n) + 1), "%s": string(int(object.data.n) + 1)}}`

// answer is what one write's answer said, RECORD mode: printed as a JSON line.
type answer struct {
	Write    string `json:"write"`
	Value    int    `json:"value"`
	Already  bool   `json:"already_applied"`
	Resent   int    `json:"resent"`
	Sent     int64  `json:"sent_ms"`
	Answered int64  `json:"answered_ms"`
	Error    string `json:"error,omitempty"`
}

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
	record := keyed && os.Getenv("RECORD") == "1"
	pace := durationOf("PACE", 0)
	// write makes one increment and returns the attempts it took; with RECORD, what its
	// answer says of it goes into *seen.
	write := func(ctx context.Context, key, slot string, seen *answer) (int, error) {
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
		mutation := increment
		if record {
			mutation = fmt.Sprintf(recordingIncrement, slot)
		}
		for {
			res, err := client.Update(ctx, ref, safewrite.CEL(mutation),
				safewrite.WithIdempotencyKey(key))
			if err == nil {
				if record {
					seen.Already = res.AlreadyApplied
					if data, ok := res.Object.Object["data"].(map[string]any); ok {
						seen.Value, _ = strconv.Atoi(fmt.Sprint(data[slot]))
					}
				}
				return res.Attempts, nil
			}
			if !safewrite.Retryable(err) || ctx.Err() != nil {
				return 0, err
			}
			retried.Add(1)
			seen.Resent++
			time.Sleep(20 * time.Millisecond)
		}
	}

	stopping := make(chan struct{})
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	go func() { <-signals; close(stopping) }()
	enough := make(chan struct{})
	if d := durationOf("DURATION", 0); d > 0 {
		time.AfterFunc(d, func() { close(enough) })
	}
	if lease := os.Getenv("LEASE"); lease != "" {
		runLeading(client, ref, lease, workers, stopping) // lead.go
		return
	}

	var mu sync.Mutex
	var latencies []time.Duration
	attempts := make([]int, workers*writes)
	var answers []answer
	if record {
		answers = make([]answer, workers*writes)
	}
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
				case <-enough:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				begin := time.Now()
				slot := fmt.Sprintf("%d.%d", w, i)
				seen := answer{Write: slot, Sent: begin.UnixMilli()}
				n, err := write(ctx, os.Getenv("HOSTNAME")+"."+slot, slot, &seen)
				cancel()
				if record {
					seen.Answered = time.Now().UnixMilli()
					if err != nil {
						seen.Error = err.Error()
					}
					answers[w*writes+i] = seen
				}
				mu.Lock()
				latencies = append(latencies, time.Since(begin))
				mu.Unlock()
				if err != nil {
					failures.Store(fmt.Sprintf("%d/%d", w, i), err.Error())
					continue
				}
				attempts[w*writes+i] = n
				if pace > 0 {
					time.Sleep(pace)
				}
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

	for _, a := range answers {
		if a.Sent != 0 {
			line, _ := json.Marshal(a)
			fmt.Println(string(line))
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
