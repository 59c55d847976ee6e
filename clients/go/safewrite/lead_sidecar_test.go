package safewrite_test

// Leadership and Delete against the real sidecars: two replicas, each with a sidecar of
// its own (SAFEWRITE_PEER_ADDRS), campaign for one Lease; one sidecar is paused
// (SIGSTOP, as a paused pod) while the other takes over.

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"safewrite.dev/clients/go/safewrite"
	safewritev1 "safewrite.dev/clients/go/safewrite/v1"
)

// Short timings, so that a paused leader's Lease expires within seconds: lease >
// renew deadline > 1.2 x retry period.
var shortTimings = []safewrite.LeadOption{
	safewrite.WithLeaseDuration(2 * time.Second),
	safewrite.WithRenewDeadline(1500 * time.Millisecond),
	safewrite.WithRetryPeriod(200 * time.Millisecond),
}

// peer is one of the two peer sidecars: a replica's own sidecar, as in its pod.
type peer struct {
	client *safewrite.Client
	pid    int
}

// peers returns clients of the two peer sidecars and their process ids.
func peers(t *testing.T) [2]peer {
	t.Helper()
	addrs := strings.Split(sidecarEnv(t, "SAFEWRITE_PEER_ADDRS"), ",")
	pids := strings.Split(sidecarEnv(t, "SAFEWRITE_PEER_PIDS"), ",")
	if len(addrs) != 2 || len(pids) != 2 {
		t.Fatalf("SAFEWRITE_PEER_ADDRS %q and SAFEWRITE_PEER_PIDS %q: want two of each", addrs, pids)
	}
	var out [2]peer
	for i := range out {
		pid, err := strconv.Atoi(pids[i])
		if err != nil {
			t.Fatalf("SAFEWRITE_PEER_PIDS: %v", err)
		}
		out[i] = peer{client: dial(t, addrs[i]), pid: pid}
	}
	return out
}

// pause stops the sidecar process pid (SIGSTOP) and returns the function that resumes
// it (SIGCONT); the test's cleanup resumes it too, whatever happens.
func pause(t *testing.T, pid int) (resume func()) {
	t.Helper()
	var once sync.Once
	resume = func() {
		once.Do(func() {
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				t.Errorf("SIGCONT %d: %v", pid, err)
			}
		})
	}
	t.Cleanup(resume)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP %d: %v", pid, err)
	}
	return resume
}

// refusedAsDeposed reports whether err is a fenced write's refusal: NOT_LEADER or
// FENCED, nothing written.
func refusedAsDeposed(err error) bool {
	var swErr *safewrite.Error
	return errors.Is(err, safewrite.ErrPreconditionFailed) && errors.As(err, &swErr) &&
		(swErr.ReasonCode == safewritev1.Reason_REASON_NOT_LEADER || swErr.ReasonCode == safewritev1.Reason_REASON_FENCED)
}

// olderVersion reports whether resourceVersion a is older than b (KEP-5504: the shorter
// is older, equal lengths compare lexically).
func olderVersion(a, b string) bool {
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	return a < b
}

// counterReplica is one replica of the counter controller: while it leads, it
// increments data.n of the counter by one per write, fenced through its work's context.
type counterReplica struct {
	name    string
	peer    peer
	counter safewrite.ObjectRef

	acked atomic.Int64 // increments the sidecar acknowledged

	mu       sync.Mutex
	events   []safewrite.LeadEvent
	versions []string // the resourceVersion of each acknowledged increment
	refused  []error  // writes refused NOT_LEADER or FENCED
	failed   []error  // any other failure: none expected
}

func (r *counterReplica) record(ev safewrite.LeadEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, ev)
}

// leadingEpoch returns the epoch of the replica's last Leading event, 0 if none.
func (r *counterReplica) leadingEpoch() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.events) - 1; i >= 0; i-- {
		if r.events[i].Leading() {
			return r.events[i].Epoch
		}
	}
	return 0
}

// work is the replica's LeaderWork. Each write has a deadline of its own, 30 s, not
// canceled with leadership (context.WithoutCancel keeps the fence), so that every write
// gets a definite answer, also one sent to a paused sidecar.
func (r *counterReplica) work(ctx context.Context) error {
	for ctx.Err() == nil {
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		res, err := r.peer.client.Update(wctx, r.counter, safewrite.CEL(increment))
		cancel()
		r.mu.Lock()
		switch {
		case err == nil:
			r.acked.Add(1)
			r.versions = append(r.versions, res.ResourceVersion)
		case refusedAsDeposed(err):
			r.refused = append(r.refused, err)
		default:
			r.failed = append(r.failed, err)
		}
		r.mu.Unlock()
		if err != nil {
			<-ctx.Done() // deposed: wait to be told
			return nil
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// waitFor polls cond every 20 ms until it holds or within passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestTwoReplicasPausedCountStaysExact: replicas A and B, each with its own sidecar,
// share one Lease and increment one counter while leading, every write fenced. A leads
// first; its sidecar is paused past the lease, B takes over under a higher epoch and
// writes, then A's sidecar resumes. A is told it no longer leads, none of its writes
// lands after B's first, its stale fence is refused, and the counter equals the sum of
// the increments both were acknowledged.
func TestTwoReplicasPausedCountStaysExact(t *testing.T) {
	ps := peers(t)
	admin := newClient(t)
	api := newAPIServer(t)
	counter := newCounter(t, admin)
	ns, lease := namespace(t), newName(t)
	ctx, cancel := context.WithTimeout(t.Context(), 55*time.Second)
	defer cancel()
	began := time.Now()

	a := &counterReplica{name: "replica-a", peer: ps[0], counter: counter}
	b := &counterReplica{name: "replica-b", peer: ps[1], counter: counter}
	run := func(r *counterReplica) <-chan error {
		done := make(chan error, 1)
		opts := append([]safewrite.LeadOption{safewrite.WithIdentity(r.name), safewrite.WithLeadEventHandler(r.record)}, shortTimings...)
		go func() { done <- r.peer.client.RunWhileLeading(ctx, ns, lease, r.work, opts...) }()
		return done
	}
	aDone := run(a)
	waitFor(t, 10*time.Second, "A leads and writes", func() bool { return a.acked.Load() >= 3 })
	bDone := run(b)
	waitFor(t, 5*time.Second, "B sees A hold the Lease", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.events) > 0
	})
	epochA := a.leadingEpoch()

	paused := time.Now()
	resume := pause(t, a.peer.pid)
	ackedBeforePause := a.acked.Load()
	waitFor(t, 15*time.Second, "B takes over and writes", func() bool { return b.acked.Load() >= 3 })
	if epochB := b.leadingEpoch(); epochB <= epochA {
		t.Errorf("B leads under epoch %d, not above A's %d", epochB, epochA)
	}
	time.Sleep(time.Until(paused.Add(4 * time.Second)))
	resume()
	t.Logf("A's sidecar paused %v; A acknowledged %d before", time.Since(paused).Round(time.Millisecond), ackedBeforePause)

	waitFor(t, 10*time.Second, "A is told it does not lead", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		last := a.events[len(a.events)-1]
		return !last.Leading() && (last.Reason == safewrite.NotLeadingLostRenewal || last.Reason == safewrite.NotLeadingOtherHolder)
	})
	// A deposed leader that missed the news writes with its old fence: refused.
	stale := safewrite.Fence{LeaseNamespace: ns, LeaseName: lease, Epoch: epochA}
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	_, err := a.peer.client.Update(safewrite.ContextWithFence(wctx, stale), counter, safewrite.CEL(increment))
	wcancel()
	if !refusedAsDeposed(err) {
		t.Errorf("a write under A's old fence after the takeover: %v, want NOT_LEADER or FENCED", err)
	}
	waitFor(t, 5*time.Second, "B writes after A's resume", func() bool { return b.acked.Load() >= 6 })

	cancel()
	for name, done := range map[string]<-chan error{"A": aDone, "B": bDone} {
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("RunWhileLeading of %s: %v", name, err)
			}
		case <-time.After(35 * time.Second):
			t.Fatalf("RunWhileLeading of %s did not return", name)
		}
	}

	a.mu.Lock()
	b.mu.Lock()
	defer a.mu.Unlock()
	defer b.mu.Unlock()
	for _, r := range []*counterReplica{a, b} {
		for _, err := range r.failed {
			t.Errorf("%s: a write failed otherwise than NOT_LEADER or FENCED: %v", r.name, err)
		}
		t.Logf("%s: %d acknowledged, %d refused %v; events %v", r.name, r.acked.Load(), len(r.refused), r.refused, r.events)
	}
	if len(b.versions) == 0 {
		t.Fatal("B acknowledged no write")
	}
	for _, v := range a.versions {
		if !olderVersion(v, b.versions[0]) {
			t.Errorf("A's increment at resourceVersion %s landed after B's first, at %s", v, b.versions[0])
		}
	}
	n, err := strconv.Atoi(api.dataN(t, counter))
	if err != nil {
		t.Fatal(err)
	}
	if sum := a.acked.Load() + b.acked.Load(); int64(n) != sum {
		t.Errorf("data.n is %d; A and B were acknowledged %d + %d = %d increments", n, a.acked.Load(), b.acked.Load(), sum)
	}
	t.Logf("n = %d, A %d + B %d, in %v", n, a.acked.Load(), b.acked.Load(), time.Since(began).Round(time.Millisecond))
}

// TestCancelReleasesTheLease: ending a leader's campaign releases the Lease, so the
// other candidate leads within a retry period or so, far sooner than the 15 s lease
// would expire.
func TestCancelReleasesTheLease(t *testing.T) {
	ps := peers(t)
	ns, lease := namespace(t), newName(t)
	ctx := testContext(t)
	timings := []safewrite.LeadOption{safewrite.WithLeaseDuration(15 * time.Second),
		safewrite.WithRenewDeadline(10 * time.Second), safewrite.WithRetryPeriod(200 * time.Millisecond)}

	aCtx, aCancel := context.WithCancel(ctx)
	defer aCancel()
	a, err := ps[0].client.Lead(aCtx, ns, lease, timings...)
	if err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, a, 10*time.Second); !ev.Leading() || ev.Epoch == 0 {
		t.Fatalf("A's first event on a new Lease: %v, want Leading", ev)
	}
	b, err := ps[1].client.Lead(ctx, ns, lease, timings...)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if ev := nextEvent(t, b, 10*time.Second); ev.Leading() || ev.Reason != safewrite.NotLeadingOtherHolder || ev.Holder != a.Identity() {
		t.Fatalf("B's first event: %v, want NotLeading (OtherHolder: %s)", ev, a.Identity())
	}
	epochA, _ := a.Fence()
	released := time.Now()
	aCancel()
	<-a.Done()
	if a.Err() != nil {
		t.Errorf("A's campaign, canceled: Err %v", a.Err())
	}
	for {
		ev := nextEvent(t, b, 5*time.Second-time.Since(released))
		if ev.Leading() {
			if ev.Epoch <= epochA.Epoch {
				t.Errorf("B leads under epoch %d, not above A's %d", ev.Epoch, epochA.Epoch)
			}
			t.Logf("B leads %v after A's release", time.Since(released).Round(time.Millisecond))
			return
		}
	}
}

// nextEvent returns l's next event, failing the test when none comes within d.
func nextEvent(t *testing.T, l *safewrite.Leadership, d time.Duration) safewrite.LeadEvent {
	t.Helper()
	select {
	case ev, ok := <-l.Events():
		if !ok {
			t.Fatalf("the Lead stream of %s ended: %v", l.Lease(), l.Err())
		}
		return ev
	case <-time.After(d):
		t.Fatalf("no event of %s within %v", l.Lease(), d)
	}
	panic("unreachable")
}

// TestLeadRefusesBadInput: the sidecar refuses a bad request before it campaigns, and
// Lead returns the refusal naming the field.
func TestLeadRefusesBadInput(t *testing.T) {
	c := newClient(t)
	ns := namespace(t)
	for _, tc := range []struct {
		name, lease string
		opts        []safewrite.LeadOption
		field       string
	}{
		{"bad lease name", "Not_A_Name", nil, "name"},
		{"renew deadline past the lease", newName(t), []safewrite.LeadOption{
			safewrite.WithLeaseDuration(2 * time.Second), safewrite.WithRenewDeadline(3 * time.Second)}, "lease_duration"},
		{"bad identity", newName(t), []safewrite.LeadOption{safewrite.WithIdentity("a b")}, "identity"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := c.Lead(testContext(t), ns, tc.lease, tc.opts...)
			if err == nil {
				_ = l.Close()
				t.Fatal("the campaign was accepted")
			}
			swErr := asError(t, err)
			if !errors.Is(err, safewrite.ErrInvalid) || len(swErr.FieldViolations) == 0 || swErr.FieldViolations[0].Field != tc.field {
				t.Fatalf("%v (fields %v), want ErrInvalid naming %q", err, swErr.FieldViolations, tc.field)
			}
			err = c.RunWhileLeading(testContext(t), ns, tc.lease, func(context.Context) error {
				t.Error("the work ran")
				return nil
			}, tc.opts...)
			if !errors.Is(err, safewrite.ErrInvalid) {
				t.Fatalf("RunWhileLeading: %v, want ErrInvalid", err)
			}
		})
	}
	// A sidecar whose policy lets it campaign in another namespace only.
	env := controlPlaneEnv(t)
	elsewhere := startSidecar(t, writeKubeconfig(t, env["SERVER"], env["ADMIN_TOKEN"]),
		"--allow", "coordination.k8s.io/Lease:elsewhere:main:lead")
	_, err := elsewhere.Lead(testContext(t), ns, newName(t))
	if !errors.Is(err, safewrite.ErrPermissionDenied) || asError(t, err).ReasonCode != safewritev1.Reason_REASON_POLICY_DENIED {
		t.Fatalf("a campaign the policy does not allow: %v, want ErrPermissionDenied (POLICY_DENIED)", err)
	}
}

// TestDelete: the outcomes and refusals of Delete on ConfigMaps.
func TestDelete(t *testing.T) {
	c := newClient(t)
	api := newAPIServer(t)
	ctx := testContext(t)
	exists := func(ref safewrite.ObjectRef) bool { return api.configMap(t, ref) != nil }

	t.Run("existing object is deleted", func(t *testing.T) {
		ref := newCounter(t, c)
		res, err := c.Delete(ctx, ref, safewrite.WithPropagationPolicy(safewrite.PropagationBackground))
		if err != nil || res.Outcome != safewrite.DeleteOutcomeDeleted || res.Attempts < 1 {
			t.Fatalf("%+v, %v; want Deleted", res, err)
		}
		if exists(ref) {
			t.Fatal("the ConfigMap still exists")
		}
	})
	t.Run("object with a finalizer is being deleted", func(t *testing.T) {
		ref := newCounter(t, c)
		if _, err := c.Update(ctx, ref, safewrite.AddFinalizer("example.com/hold")); err != nil {
			t.Fatal(err)
		}
		res, err := c.Delete(ctx, ref)
		if err != nil || res.Outcome != safewrite.DeleteOutcomeDeleting || res.DeletionTimestamp.IsZero() || res.Object == nil {
			t.Fatalf("%+v, %v; want Deleting with a deletion timestamp and the object", res, err)
		}
		if got := res.Object.GetDeletionTimestamp(); got == nil || !got.Time.Equal(res.DeletionTimestamp) {
			t.Errorf("DeletionTimestamp %v, the object's %v", res.DeletionTimestamp, got)
		}
		if fin, err := c.Update(ctx, ref, safewrite.RemoveFinalizer("example.com/hold")); err != nil || !fin.Gone() {
			t.Fatalf("removing the finalizer: %v, %v", fin, err)
		}
	})
	t.Run("typed object takes the answer", func(t *testing.T) {
		ref := newCounter(t, c)
		if _, err := c.Update(ctx, ref, safewrite.AddFinalizer("example.com/hold")); err != nil {
			t.Fatal(err)
		}
		obj := &unstructured.Unstructured{}
		obj.SetAPIVersion(ref.APIVersion)
		obj.SetKind(ref.Kind)
		obj.SetNamespace(ref.Namespace)
		obj.SetName(ref.Name)
		res, err := c.Typed(runtime.NewScheme()).Delete(ctx, obj)
		if err != nil || res.Outcome != safewrite.DeleteOutcomeDeleting || obj.GetDeletionTimestamp() == nil || obj.GetUID() == "" {
			t.Fatalf("%+v, %v; the object %v", res, err, obj.Object)
		}
		if _, err := c.Update(ctx, ref, safewrite.RemoveFinalizer("example.com/hold")); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("missing object is gone", func(t *testing.T) {
		res, err := c.Delete(ctx, configMapRef(t))
		if err != nil || res.Outcome != safewrite.DeleteOutcomeGone || res.Object != nil {
			t.Fatalf("%+v, %v; want Gone and no error", res, err)
		}
	})
	t.Run("dry run deletes nothing", func(t *testing.T) {
		ref := newCounter(t, c)
		res, err := c.Delete(ctx, ref, safewrite.WithDryRun())
		if err != nil || res.Outcome != safewrite.DeleteOutcomeDeleted || !exists(ref) {
			t.Fatalf("%+v, %v; the object exists: %v", res, err, exists(ref))
		}
	})
	t.Run("uid of another object fails and keeps it", func(t *testing.T) {
		ref := newCounter(t, c)
		_, err := c.Delete(ctx, ref, safewrite.WithUID("00000000-0000-0000-0000-000000000000"))
		if !errors.Is(err, safewrite.ErrPreconditionFailed) || asError(t, err).ReasonCode != safewritev1.Reason_REASON_PRECONDITION_FAILED {
			t.Fatalf("%v, want ErrPreconditionFailed (PRECONDITION_FAILED)", err)
		}
		if !exists(ref) {
			t.Fatal("the ConfigMap was deleted")
		}
	})
	t.Run("false CEL condition fails with the current object", func(t *testing.T) {
		ref := newCounter(t, c)
		_, err := c.Delete(ctx, ref, safewrite.WithPreconditionCEL(`object.data.n == "5"`))
		swErr := asError(t, err)
		if !errors.Is(err, safewrite.ErrPreconditionFailed) || swErr.CurrentObject == nil {
			t.Fatalf("%v, want ErrPreconditionFailed with the current object", err)
		}
		if n, _, _ := unstructured.NestedString(swErr.CurrentObject.Object, "data", "n"); n != "0" || !exists(ref) {
			t.Fatalf("current object's n %q; exists %v", n, exists(ref))
		}
	})
	t.Run("stale resourceVersion is a conflict", func(t *testing.T) {
		ref := newCounter(t, c)
		_, err := c.Delete(ctx, ref, safewrite.WithResourceVersion("1"))
		if !errors.Is(err, safewrite.ErrConflict) || asError(t, err).ReasonCode != safewritev1.Reason_REASON_RESOURCE_VERSION_MISMATCH || !exists(ref) {
			t.Fatalf("%v, want ErrConflict (RESOURCE_VERSION_MISMATCH), the object kept", err)
		}
	})
	t.Run("forbidden to the sidecar", func(t *testing.T) {
		ref := newCounter(t, c)
		_, err := dial(t, sidecarEnv(t, "SAFEWRITE_RESTRICTED_ADDR")).Delete(ctx, ref)
		if !errors.Is(err, safewrite.ErrPermissionDenied) || !exists(ref) {
			t.Fatalf("%v, want ErrPermissionDenied, the object kept", err)
		}
	})
}

// TestFencedDelete: a delete fenced with the leader's epoch goes through the leader's
// sidecar, and is refused NOT_LEADER through the sidecar of a candidate that does not
// lead that Lease; the object is kept.
func TestFencedDelete(t *testing.T) {
	ps := peers(t)
	admin := newClient(t)
	api := newAPIServer(t)
	ns, lease := namespace(t), newName(t)
	ctx := testContext(t)
	leader, err := ps[0].client.Lead(ctx, ns, lease, shortTimings...)
	if err != nil {
		t.Fatal(err)
	}
	defer leader.Close()
	if ev := nextEvent(t, leader, 10*time.Second); !ev.Leading() {
		t.Fatalf("the leader's first event: %v", ev)
	}
	candidate, err := ps[1].client.Lead(ctx, ns, lease, shortTimings...)
	if err != nil {
		t.Fatal(err)
	}
	defer candidate.Close()
	if ev := nextEvent(t, candidate, 10*time.Second); ev.Leading() {
		t.Fatalf("the candidate's first event: %v, want NotLeading", ev)
	}
	fence, _ := leader.Fence()
	fenced := safewrite.ContextWithFence(ctx, fence)

	ref := newCounter(t, admin)
	_, err = ps[1].client.Delete(fenced, ref)
	if !errors.Is(err, safewrite.ErrPreconditionFailed) || asError(t, err).ReasonCode != safewritev1.Reason_REASON_NOT_LEADER {
		t.Fatalf("a fenced delete through a sidecar not leading: %v, want NOT_LEADER", err)
	}
	if api.configMap(t, ref) == nil {
		t.Fatal("the ConfigMap was deleted")
	}
	res, err := ps[0].client.Delete(fenced, ref)
	if err != nil || res.Outcome != safewrite.DeleteOutcomeDeleted {
		t.Fatalf("a fenced delete through the leader's sidecar: %+v, %v", res, err)
	}
	if code, _ := api.do(t, http.MethodGet, "/api/v1/namespaces/"+ns+"/configmaps/"+ref.Name, nil); code != http.StatusNotFound {
		t.Fatalf("after the leader's delete: HTTP %d", code)
	}
}
