package safewritectrl

// Leader election through the sidecar for a controller-runtime manager: its controllers
// run only while this process leads a Lease, their writes fenced.

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"safewrite.dev/clients/go/safewrite"
)

// ErrLeadershipLost is what [ElectedManager.Start] returns (wrapped, with the event
// that ended it) when this process stops leading: controller-runtime's controllers
// cannot be started twice, so, as with controller-runtime's own leader election, the
// manager stops and the process should exit, to be restarted as a new candidate.
var ErrLeadershipLost = errors.New("safewritectrl: leadership lost")

// ElectedManager is a controller-runtime manager whose leader-election runnables (its
// controllers, and every runnable whose NeedLeaderElection is true or that does not
// say) run only while this process leads a Lease through the safewrite sidecar
// ([safewrite.Client.Lead]), instead of through controller-runtime's own election.
// Their context carries the leadership's fence ([safewrite.ContextWithFence]), and a
// controller's Reconcile context derives from it, so every write through a
// [safewrite.Client] inside them is fenced, with no code at the call site: once a later
// leader took over, the sidecar refuses a deposed leader's writes (NOT_LEADER, FENCED),
// even one paused past its Lease.
//
// Make the manager with Options.LeaderElection off (this replaces it), and pass the
// ElectedManager, not the manager inside, to the builder (ctrl.NewControllerManagedBy)
// and to Add, so that it sees the runnables to gate. Caches, webhooks and runnables
// that need no leader election run at once, as before.
type ElectedManager struct {
	manager.Manager
	sidecar *safewrite.Client
	lease   safewrite.LeaseRef
	opts    []safewrite.LeadOption

	mu      sync.Mutex
	gated   []manager.Runnable
	term    *term // the runnables running while leading; nil when not leading
	elected chan struct{}
	once    sync.Once
}

// NewElectedManager wraps mgr, made with Options.LeaderElection off, so that its
// leader-election runnables run only while this process leads the Lease
// namespace/name through sidecar; opts are the campaign's ([safewrite.WithIdentity],
// the timings).
//
//	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme}) // LeaderElection off
//	...
//	elected := safewritectrl.NewElectedManager(mgr, sidecar, namespace, "widgets-leader",
//		safewrite.WithIdentity(os.Getenv("POD_NAME")))
//	err = ctrl.NewControllerManagedBy(elected).For(&Widget{}).Complete(r)
//	...
//	err = elected.Start(ctx) // ErrLeadershipLost when this process stops leading
func NewElectedManager(mgr manager.Manager, sidecar *safewrite.Client, namespace, name string, opts ...safewrite.LeadOption) *ElectedManager {
	return &ElectedManager{
		Manager: mgr,
		sidecar: sidecar,
		lease:   safewrite.LeaseRef{Namespace: namespace, Name: name},
		opts:    opts,
		elected: make(chan struct{}),
	}
}

// Add adds r to the manager: a runnable that needs leader election (as controller-runtime
// decides it: NeedLeaderElection true, or not said, and not a cache, webhook server or
// other server) runs only while leading, started at once when added while leading; any
// other goes to the manager inside.
func (m *ElectedManager) Add(r manager.Runnable) error {
	if !needsLeaderElection(r) {
		return m.Manager.Add(r)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gated = append(m.gated, r)
	if m.term != nil {
		m.term.start(r)
	}
	return nil
}

// needsLeaderElection says whether controller-runtime would put r in its
// leader-election group.
func needsLeaderElection(r manager.Runnable) bool {
	switch r := r.(type) {
	case interface{ GetCache() cache.Cache }:
		return false
	case webhook.Server:
		return false
	case manager.LeaderElectionRunnable:
		return r.NeedLeaderElection()
	}
	return true
}

// Elected is closed once this process leads (and its gated runnables start).
func (m *ElectedManager) Elected() <-chan struct{} { return m.elected }

// Lease returns the Lease campaigned for.
func (m *ElectedManager) Lease() safewrite.LeaseRef { return m.lease }

// Start starts the manager, with a runnable that campaigns for the Lease once the
// caches are synced and runs the gated runnables while this process leads. It blocks
// until ctx ends (then it returns nil, after the gated runnables returned, and the
// Lease is released at once), a gated runnable fails (its error), the campaign is
// refused or ends ([safewrite.Client.Lead]'s errors, wrapped), or this process stops
// leading: then the gated runnables are canceled and Start returns an error wrapping
// [ErrLeadershipLost] once they returned; exit, and let the process be restarted.
func (m *ElectedManager) Start(ctx context.Context) error {
	if err := m.Manager.Add(manager.RunnableFunc(m.lead)); err != nil {
		return err
	}
	return m.Manager.Start(ctx)
}

// lead campaigns for the Lease and runs the gated runnables while leading.
func (m *ElectedManager) lead(ctx context.Context) error {
	log := m.GetLogger().WithValues("lease", m.lease.String())
	l, err := m.sidecar.Lead(ctx, m.lease.Namespace, m.lease.Name, m.opts...)
	if err != nil {
		return fmt.Errorf("safewritectrl: campaigning for Lease %s: %w", m.lease, err)
	}
	defer l.Close()
	defer m.stop()
	for {
		m.mu.Lock()
		var failed <-chan error
		if m.term != nil {
			failed = m.term.failed
		}
		m.mu.Unlock()
		select {
		case ev, ok := <-l.Events():
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("safewritectrl: the campaign for Lease %s ended: %w", m.lease, l.Err())
			}
			log.Info("leadership", "state", ev.State.String(), "epoch", ev.Epoch, "holder", ev.Holder,
				"reason", ev.Reason.String(), "identity", ev.Identity)
			m.mu.Lock()
			leading := m.term != nil
			m.mu.Unlock()
			switch {
			case ev.Leading() && !leading:
				m.begin(ctx, ev.Fence())
			case leading:
				// Not leading any more, or leading under a new epoch: the runnables'
				// fence is stale, and controllers cannot be started again.
				m.stop()
				return fmt.Errorf("%w: Lease %s: %v", ErrLeadershipLost, m.lease, ev)
			}
		case err := <-failed:
			return err
		case <-ctx.Done():
			return nil
		}
	}
}

// begin starts the gated runnables under fence.
func (m *ElectedManager) begin(ctx context.Context, fence safewrite.Fence) {
	ctx, cancel := context.WithCancel(safewrite.ContextWithFence(ctx, fence))
	m.mu.Lock()
	defer m.mu.Unlock()
	m.term = &term{ctx: ctx, cancel: cancel, failed: make(chan error, 1)}
	for _, r := range m.gated {
		m.term.start(r)
	}
	m.once.Do(func() { close(m.elected) })
}

// stop cancels the gated runnables and waits until they returned.
func (m *ElectedManager) stop() {
	m.mu.Lock()
	t := m.term
	m.term = nil
	m.mu.Unlock()
	if t != nil {
		t.cancel()
		t.running.Wait()
	}
}

// term is the gated runnables running under one leadership.
type term struct {
	ctx     context.Context
	cancel  context.CancelFunc
	running sync.WaitGroup
	failed  chan error // the first error a runnable returned
}

func (t *term) start(r manager.Runnable) {
	t.running.Go(func() {
		if err := r.Start(t.ctx); err != nil && t.ctx.Err() == nil {
			select {
			case t.failed <- err:
			default:
			}
		}
	})
}
