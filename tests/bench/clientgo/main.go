// Command clientgo-bench is the Go contender of `cargo bench --bench writes`: K writers
// incrementing counters in ConfigMaps with retry.RetryOnConflict (read, change, Update),
// as a Go controller does today. It runs for a fixed time and prints one JSON line:
// successes, failures (increments whose retries ran out), p50 and p99 latency, and its
// own CPU time over the writing and peak RSS.
//
// -read live reads with a Get from the API server (client-go's plain clientset);
// -read cache reads from a shared informer's lister on the namespace's ConfigMaps, the
// way controller-runtime's default (cached) client reads. The cache lags the API
// server: a read from it may be older than the writer's own last Update, and the write
// made from it is then refused with a conflict and retried. That cost is what the cache
// mode measures.
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
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
)

type result struct {
	Successes int     `json:"successes"`
	Failures  int     `json:"failures"`
	Conflicts int     `json:"conflicts"`
	P50Ms     float64 `json:"p50_ms"`
	P99Ms     float64 `json:"p99_ms"`
	CPUSecs   float64 `json:"cpu_seconds"`
	MaxRSSKiB int64   `json:"max_rss_kib"`
}

// reader returns a copy of ConfigMap name that the caller may change.
type reader func(ctx context.Context, name string) (*corev1.ConfigMap, error)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the API server")
	namespace := flag.String("namespace", "default", "namespace of the ConfigMaps")
	names := flag.String("names", "", "comma-separated ConfigMap names; writers are spread over them")
	writers := flag.Int("writers", 1, "concurrent writers")
	duration := flag.Duration("duration", 4*time.Second, "how long to write")
	backoffName := flag.String("backoff", "retry", "retry.DefaultRetry (retry) or retry.DefaultBackoff (backoff)")
	readFrom := flag.String("read", "live", "live (Get from the API server) or cache (a shared informer's lister)")
	protobuf := flag.Bool("protobuf", false, "requests and answers in Kubernetes' protobuf encoding instead of JSON")
	flag.Parse()

	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fail(err)
	}
	// The sidecar's own limits in the benchmark, so that neither side is throttled locally.
	config.QPS, config.Burst = 5000, 10000
	if *protobuf {
		// What the API server spends per write when it decodes and encodes protobuf.
		config.ContentType = "application/vnd.kubernetes.protobuf"
		config.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	}
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
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	configMaps := clientset.CoreV1().ConfigMaps(*namespace)

	var read reader
	switch *readFrom {
	case "live":
		read = func(ctx context.Context, name string) (*corev1.ConfigMap, error) {
			return configMaps.Get(ctx, name, metav1.GetOptions{})
		}
	case "cache":
		factory := informers.NewSharedInformerFactoryWithOptions(clientset, 0, informers.WithNamespace(*namespace))
		lister := factory.Core().V1().ConfigMaps().Lister().ConfigMaps(*namespace)
		factory.Start(ctx.Done())
		for informer, synced := range factory.WaitForCacheSync(ctx.Done()) {
			if !synced {
				fail(fmt.Errorf("informer %v did not sync", informer))
			}
		}
		read = func(_ context.Context, name string) (*corev1.ConfigMap, error) {
			cached, err := lister.Get(name)
			if err != nil {
				return nil, err
			}
			// The cache's objects are shared; controller-runtime hands out copies too.
			return cached.DeepCopy(), nil
		}
	default:
		fail(fmt.Errorf("-read must be live or cache, got %q", *readFrom))
	}

	objects := strings.Split(*names, ",")
	cpuBefore := cpuSeconds()
	until := time.Now().Add(*duration)

	var mu sync.Mutex
	var latencies []time.Duration
	failures, conflicts := 0, 0
	var group sync.WaitGroup
	for w := 0; w < *writers; w++ {
		name := objects[w%len(objects)]
		group.Add(1)
		go func() {
			defer group.Done()
			for time.Now().Before(until) {
				started := time.Now()
				attempts := 0
				err := retry.RetryOnConflict(backoff, func() error {
					attempts++
					cm, err := read(ctx, name)
					if err != nil {
						return err
					}
					if cm.Data == nil {
						cm.Data = map[string]string{}
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
				conflicts += attempts - 1
				mu.Unlock()
			}
		}()
	}
	group.Wait()
	cpu := cpuSeconds() - cpuBefore

	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	out := result{Successes: len(latencies), Failures: failures, Conflicts: conflicts, CPUSecs: cpu, MaxRSSKiB: maxRSSKiB()}
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

// cpuSeconds is the user and system CPU time this process has used so far.
func cpuSeconds() float64 {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		fail(err)
	}
	return time.Duration(usage.Utime.Nano() + usage.Stime.Nano()).Seconds()
}

// maxRSSKiB is this process's peak resident set size (Linux reports KiB).
func maxRSSKiB() int64 {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		fail(err)
	}
	return int64(usage.Maxrss)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "clientgo-bench:", err)
	os.Exit(1)
}
