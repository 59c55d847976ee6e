// Command clientgo-bench is the client-go contender of `cargo bench --bench writes`:
// K writers incrementing counters in ConfigMaps with retry.RetryOnConflict (Get, change,
// Update), as a Go controller does today. It runs for a fixed time and prints one JSON
// line: successes, failures (increments whose retries ran out), p50 and p99 latency.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
)

type result struct {
	Successes int     `json:"successes"`
	Failures  int     `json:"failures"`
	P50Ms     float64 `json:"p50_ms"`
	P99Ms     float64 `json:"p99_ms"`
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the API server")
	namespace := flag.String("namespace", "default", "namespace of the ConfigMaps")
	names := flag.String("names", "", "comma-separated ConfigMap names; writers are spread over them")
	writers := flag.Int("writers", 1, "concurrent writers")
	duration := flag.Duration("duration", 4*time.Second, "how long to write")
	backoffName := flag.String("backoff", "retry", "retry.DefaultRetry (retry) or retry.DefaultBackoff (backoff)")
	flag.Parse()

	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fail(err)
	}
	// The sidecar's own limits in the benchmark, so that neither side is throttled locally.
	config.QPS, config.Burst = 5000, 10000
	clientset, err := kubernetes.NewForConfig(config)
	if err != nil {
		fail(err)
	}
	var backoff wait.Backoff
	switch *backoffName {
	case "retry":
		backoff = retry.DefaultRetry
	case "backoff":
		backoff = retry.DefaultBackoff
	default:
		fail(fmt.Errorf("-backoff must be retry or backoff, got %q", *backoffName))
	}
	objects := strings.Split(*names, ",")
	ctx := context.Background()
	until := time.Now().Add(*duration)

	var mu sync.Mutex
	var latencies []time.Duration
	failures := 0
	var group sync.WaitGroup
	for w := 0; w < *writers; w++ {
		name := objects[w%len(objects)]
		group.Add(1)
		go func() {
			defer group.Done()
			configMaps := clientset.CoreV1().ConfigMaps(*namespace)
			for time.Now().Before(until) {
				started := time.Now()
				err := retry.RetryOnConflict(backoff, func() error {
					cm, err := configMaps.Get(ctx, name, metav1.GetOptions{})
					if err != nil {
						return err
					}
					n, _ := strconv.Atoi(cm.Data["n"])
					cm.Data["n"] = strconv.Itoa(n + 1)
					_, err = configMaps.Update(ctx, cm, metav1.UpdateOptions{})
					return err
				})
				took := time.Since(started)
				mu.Lock()
				if err != nil {
					failures++
				} else {
					latencies = append(latencies, took)
				}
				mu.Unlock()
			}
		}()
	}
	group.Wait()

	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	out := result{Successes: len(latencies), Failures: failures}
	if len(latencies) > 0 {
		out.P50Ms = percentile(latencies, 0.50)
		out.P99Ms = percentile(latencies, 0.99)
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fail(err)
	}
}

func percentile(sorted []time.Duration, p float64) float64 {
	index := int(float64(len(sorted)-1)*p + 0.5)
	return float64(sorted[index].Microseconds()) / 1000
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "clientgo-bench:", err)
	os.Exit(1)
}
