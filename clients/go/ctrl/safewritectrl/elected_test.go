package safewritectrl_test

// ElectedManager against the real control plane and the two peer sidecars
// (SAFEWRITE_PEER_ADDRS): a real controller-runtime manager whose gated runnable starts
// only once this process leads, writes fenced, and stops when leadership ends.

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"safewrite.dev/clients/go/ctrl/safewritectrl"
	"safewrite.dev/clients/go/safewrite"
)

// needEnv returns the variables with-sidecar.sh sets; the test fails without them
// (-short skips it).
func needEnv(t *testing.T, names ...string) []string {
	t.Helper()
	var values []string
	for _, name := range names {
		value := os.Getenv(name)
		if value == "" {
			if testing.Short() {
				t.Skipf("%s is unset; -short skips the tests that need a sidecar", name)
			}
			t.Fatalf("%s is unset: run this through clients/go/test.sh", name)
		}
		values = append(values, value)
	}
	return values
}

// controlPlane is the rest.Config of the harness's API server (SAFEWRITE_CP_ENV).
func controlPlane(t *testing.T, path string) *rest.Config {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	env := map[string]string{}
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		if key, value, ok := strings.Cut(scanner.Text(), "="); ok {
			env[key] = value
		}
	}
	return &rest.Config{Host: env["SERVER"], BearerToken: env["ADMIN_TOKEN"],
		TLSClientConfig: rest.TLSClientConfig{CAFile: env["CA_FILE"]}}
}

func randomName(prefix string) string {
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	return prefix + hex.EncodeToString(suffix[:])
}

// probe is a gated runnable: it records its runs and, in each, increments a counter
// through the sidecar once, with no fence at the call site.
type probe struct {
	sidecar *safewrite.Client
	counter safewrite.ObjectRef

	mu      sync.Mutex
	running bool
	starts  int
	fences  []safewrite.Fence
	writes  []error
	stopped chan struct{} // closed when a run returned
}

func (p *probe) Start(ctx context.Context) error {
	fence, _ := safewrite.FenceFromContext(ctx)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_, err := p.sidecar.Update(wctx, p.counter, safewrite.CEL(`{"data": {"n": string(int(object.data.n) + 1)}}`))
	cancel()
	p.mu.Lock()
	p.running, p.starts = true, p.starts+1
	p.fences, p.writes = append(p.fences, fence), append(p.writes, err)
	p.mu.Unlock()
	<-ctx.Done()
	p.mu.Lock()
	p.running = false
	p.mu.Unlock()
	close(p.stopped)
	return nil
}

func (p *probe) state() (running bool, starts int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.running, p.starts
}

// TestElectedManagerRunsOnlyWhileLeading: with another candidate holding the Lease, the
// gated runnable does not start; once that candidate releases it, it starts with the
// leadership's fence in its context, and its unfenced-looking write records that epoch
// on the object. When its sidecar is paused past the lease, it is canceled and Start
// returns ErrLeadershipLost; a second manager, canceled while leading, stops its
// runnable and returns nil, releasing the Lease.
func TestElectedManagerRunsOnlyWhileLeading(t *testing.T) {
	env := needEnv(t, "SAFEWRITE_CP_ENV", "SAFEWRITE_PEER_ADDRS", "SAFEWRITE_PEER_PIDS", "SAFEWRITE_NAMESPACE", "SAFEWRITE_ADDRESS")
	cfg, ns := controlPlane(t, env[0]), env[3]
	addrs, pids := strings.Split(env[1], ","), strings.Split(env[2], ",")
	ctrl.SetLogger(zap.New(zap.WriteTo(t.Output()), zap.Level(zapcore.ErrorLevel)))
	dial := func(addr string) *safewrite.Client {
		c, err := safewrite.NewClient(addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	mine, other, admin := dial(addrs[0]), dial(addrs[1]), dial(env[4])
	minePID, err := strconv.Atoi(pids[0])
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Second)
	defer cancel()
	lease := randomName("go-ctrl-lease-")
	timings := []safewrite.LeadOption{safewrite.WithLeaseDuration(2 * time.Second),
		safewrite.WithRenewDeadline(1500 * time.Millisecond), safewrite.WithRetryPeriod(200 * time.Millisecond)}
	counter := safewrite.ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: ns, Name: randomName("go-ctrl-counter-")}
	if _, err := admin.Update(ctx, counter, safewrite.MergePatch(`{}`), safewrite.WithCreateIfMissing(`{"data": {"n": "0"}}`)); err != nil {
		t.Fatal(err)
	}

	// Another candidate leads first.
	holder, err := other.Lead(ctx, ns, lease, timings...)
	if err != nil {
		t.Fatal(err)
	}
	if ev := <-holder.Events(); !ev.Leading() {
		t.Fatalf("the other candidate's first event: %v", ev)
	}
	otherFence, _ := holder.Fence()

	newManager := func(p *probe) (*safewritectrl.ElectedManager, <-chan error, context.CancelFunc) {
		mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: runtime.NewScheme(),
			Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
		if err != nil {
			t.Fatal(err)
		}
		elected := safewritectrl.NewElectedManager(mgr, mine, ns, lease, timings...)
		if err := elected.Add(p); err != nil {
			t.Fatal(err)
		}
		// A runnable that needs no election runs at once.
		ungated := make(chan struct{})
		if err := elected.Add(noElection(func(ctx context.Context) error { close(ungated); <-ctx.Done(); return nil })); err != nil {
			t.Fatal(err)
		}
		mctx, mcancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- elected.Start(mctx) }()
		select {
		case <-ungated:
		case <-time.After(10 * time.Second):
			t.Fatal("the runnable that needs no election did not start")
		}
		return elected, done, mcancel
	}

	first := &probe{sidecar: mine, counter: counter, stopped: make(chan struct{})}
	elected, done, stop := newManager(first)
	defer stop()
	time.Sleep(time.Second)
	if running, starts := first.state(); running || starts != 0 {
		t.Fatal("the gated runnable started while another candidate held the Lease")
	}
	select {
	case <-elected.Elected():
		t.Fatal("Elected is closed while another candidate holds the Lease")
	default:
	}
	_ = holder.Close() // released: this manager takes over
	select {
	case <-elected.Elected():
	case <-time.After(5 * time.Second):
		t.Fatal("not elected within 5 s of the other candidate's release")
	}
	waitUntil(t, 5*time.Second, func() bool { running, _ := first.state(); return running })
	first.mu.Lock()
	fence, writeErr := first.fences[0], first.writes[0]
	first.mu.Unlock()
	if writeErr != nil || fence.LeaseName != lease || fence.Epoch <= otherFence.Epoch {
		t.Fatalf("the gated runnable's fence %+v (the other's epoch %d), its write: %v", fence, otherFence.Epoch, writeErr)
	}
	got, err := admin.Get(ctx, counter)
	if err != nil {
		t.Fatal(err)
	}
	var recorded map[string]uint64
	if err := json.Unmarshal([]byte(got.Object.GetAnnotations()["safewrite.dev/fence"]), &recorded); err != nil || recorded[ns+"/"+lease] != fence.Epoch {
		t.Fatalf("the counter records fences %v (%v), want %s/%s: %d", recorded, err, ns, lease, fence.Epoch)
	}

	// Its sidecar paused past the lease: leadership is lost, the runnable is canceled.
	var once sync.Once
	resume := func() { once.Do(func() { _ = syscall.Kill(minePID, syscall.SIGCONT) }) }
	t.Cleanup(resume)
	if err := syscall.Kill(minePID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	resume()
	select {
	case err := <-done:
		if !errors.Is(err, safewritectrl.ErrLeadershipLost) {
			t.Fatalf("Start after leadership was lost: %v, want ErrLeadershipLost", err)
		}
		t.Logf("Start returned: %v", err)
	case <-time.After(15 * time.Second):
		t.Fatal("Start did not return after leadership was lost")
	}
	select {
	case <-first.stopped:
	default:
		t.Fatal("Start returned before the gated runnable did")
	}

	// A second manager leads (the Lease expired while paused), and is canceled.
	second := &probe{sidecar: mine, counter: counter, stopped: make(chan struct{})}
	_, done, stop = newManager(second)
	waitUntil(t, 10*time.Second, func() bool { running, _ := second.state(); return running })
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Start after its context ended: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Start did not return after its context ended")
	}
	if running, starts := second.state(); running || starts != 1 {
		t.Fatalf("the second runnable: running %v after %d start(s)", running, starts)
	}
	// Released: another candidate leads within a few retry periods, well before the
	// 2 s lease would have expired (its first read may still see the holder, if the
	// release was in flight).
	next, err := other.Lead(ctx, ns, lease, timings...)
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	asked := time.Now()
	for {
		select {
		case ev := <-next.Events():
			if ev.Leading() {
				t.Logf("after the second manager's release, a candidate led in %v", time.Since(asked))
				return
			}
		case <-time.After(1500*time.Millisecond - time.Since(asked)):
			t.Fatalf("after the second manager's release, no candidate led within 1.5 s (the lease is 2 s)")
		}
	}
}

// noElection is a runnable that needs no leader election.
type noElection func(context.Context) error

func (f noElection) Start(ctx context.Context) error { return f(ctx) }
func (noElection) NeedLeaderElection() bool          { return false }

var _ manager.LeaderElectionRunnable = noElection(nil)

func waitUntil(t *testing.T, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v", within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
