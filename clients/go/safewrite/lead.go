package safewrite

// Leadership: Lead campaigns for a Lease through the sidecar and streams what happens;
// RunWhileLeading runs work only while leading, its writes fenced through its context.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	safewritev1 "safewrite.dev/clients/go/safewrite/v1"
)

// LeadState says whether the caller leads: the proto's LeadState.
type LeadState int32

const (
	// LeadStateUnspecified is never sent.
	LeadStateUnspecified LeadState = LeadState(safewritev1.LeadState_LEAD_STATE_UNSPECIFIED)
	// LeadStateLeading: the caller holds the Lease and leads, under [LeadEvent.Epoch].
	LeadStateLeading LeadState = LeadState(safewritev1.LeadState_LEAD_STATE_LEADING)
	// LeadStateNotLeading: the caller does not hold the Lease; [LeadEvent.Reason] says
	// why.
	LeadStateNotLeading LeadState = LeadState(safewritev1.LeadState_LEAD_STATE_NOT_LEADING)
)

// String returns "Leading", "NotLeading" or "Unspecified".
func (s LeadState) String() string {
	switch s {
	case LeadStateLeading:
		return "Leading"
	case LeadStateNotLeading:
		return "NotLeading"
	case LeadStateUnspecified:
		return "Unspecified"
	default:
		return fmt.Sprintf("LeadState(%d)", int32(s))
	}
}

// NotLeadingReason says why the caller does not lead: the proto's NotLeadingReason.
type NotLeadingReason int32

const (
	// NotLeadingUnspecified: no reason (the caller leads).
	NotLeadingUnspecified NotLeadingReason = NotLeadingReason(safewritev1.NotLeadingReason_NOT_LEADING_REASON_UNSPECIFIED)
	// NotLeadingOtherHolder: another holder holds the Lease and it has not expired;
	// [LeadEvent.Holder] names it. Sent when the caller stops leading because someone
	// else took the Lease, and whenever the holder a waiting caller sees changes.
	NotLeadingOtherHolder NotLeadingReason = NotLeadingReason(safewritev1.NotLeadingReason_NOT_LEADING_REASON_OTHER_HOLDER)
	// NotLeadingLostRenewal: no renewal succeeded within the renew deadline (the API
	// server was unreachable, too slow, or refused, or the sidecar was paused). Stop
	// acting as the leader; the campaign goes on.
	NotLeadingLostRenewal NotLeadingReason = NotLeadingReason(safewritev1.NotLeadingReason_NOT_LEADING_REASON_LOST_RENEWAL)
	// NotLeadingReleased: the sidecar is shutting down and released the Lease; this is
	// the stream's last event.
	NotLeadingReleased NotLeadingReason = NotLeadingReason(safewritev1.NotLeadingReason_NOT_LEADING_REASON_RELEASED)
)

// String returns "OtherHolder", "LostRenewal", "Released" or "Unspecified".
func (r NotLeadingReason) String() string {
	switch r {
	case NotLeadingOtherHolder:
		return "OtherHolder"
	case NotLeadingLostRenewal:
		return "LostRenewal"
	case NotLeadingReleased:
		return "Released"
	case NotLeadingUnspecified:
		return "Unspecified"
	default:
		return fmt.Sprintf("NotLeadingReason(%d)", int32(r))
	}
}

// LeadEvent is one event of a campaign ([Client.Lead]): a change of the caller's
// leadership, or of the Lease's holder. Renewals make no event.
type LeadEvent struct {
	// State says whether the caller leads.
	State LeadState
	// Epoch is the epoch of the caller's leadership while it leads: a number kept on
	// the Lease that grows by one with every acquisition by anyone. 0 when not leading.
	Epoch uint64
	// Holder is the Lease's holder as last read: the caller's identity when it leads,
	// empty when the Lease is free or was never read.
	Holder string
	// Reason says why the caller does not lead (State [LeadStateNotLeading]).
	Reason NotLeadingReason
	// Identity is the identity the campaign runs under ([WithIdentity], or one the
	// sidecar made for the stream).
	Identity string
	// Lease is the Lease campaigned for; Fence makes the fence of a Leading event.
	Lease LeaseRef
}

// Leading reports whether the event says the caller leads.
func (e LeadEvent) Leading() bool { return e.State == LeadStateLeading }

// Fence is the fence of the caller's leadership (the Lease and Epoch) when the event
// says it leads, else the zero Fence.
func (e LeadEvent) Fence() Fence {
	if !e.Leading() || e.Epoch == 0 {
		return Fence{}
	}
	return Fence{LeaseNamespace: e.Lease.Namespace, LeaseName: e.Lease.Name, Epoch: e.Epoch}
}

// String returns e.g. "Leading epoch 3 as pod-a" or "NotLeading (OtherHolder: pod-b)".
func (e LeadEvent) String() string {
	if e.Leading() {
		return fmt.Sprintf("Leading epoch %d as %s", e.Epoch, e.Identity)
	}
	return fmt.Sprintf("%v (%v: %s)", e.State, e.Reason, e.Holder)
}

// LeaseRef names a coordination.k8s.io/v1 Lease.
type LeaseRef struct {
	// Namespace is the Lease's namespace: a DNS-1123 label.
	Namespace string
	// Name is the Lease's name: a DNS-1123 subdomain.
	Name string
}

// String returns "namespace/name".
func (l LeaseRef) String() string { return l.Namespace + "/" + l.Name }

// LeadOption sets an option of a campaign ([Client.Lead], [Client.RunWhileLeading]).
type LeadOption func(*leadConfig)

type leadConfig struct {
	req     *safewritev1.LeadRequest
	onEvent func(LeadEvent)
}

// WithIdentity campaigns under identity (the Lease's spec.holderIdentity while the
// caller leads), e.g. the pod's name: 1 to 253 printable ASCII characters, no spaces.
// Without it the sidecar makes one unique to the stream. Two campaigns under the same
// identity never both lead: a candidate waits out a Lease held under its own identity
// by another campaign.
func WithIdentity(identity string) LeadOption {
	return func(cfg *leadConfig) { cfg.req.Identity = identity }
}

// WithLeaseDuration sets how long the Lease lasts after its last renewal, as other
// candidates see it: whole seconds, 1 s to 1 h, longer than the renew deadline. The
// sidecar's default is 15 s.
func WithLeaseDuration(d time.Duration) LeadOption {
	return func(cfg *leadConfig) { cfg.req.LeaseDuration = durationpb.New(d) }
}

// WithRenewDeadline sets how long the leader keeps leading without a successful
// renewal: shorter than the lease duration and longer than 1.2 retry periods. The
// sidecar's default is 10 s.
func WithRenewDeadline(d time.Duration) LeadOption {
	return func(cfg *leadConfig) { cfg.req.RenewDeadline = durationpb.New(d) }
}

// WithRetryPeriod sets how often the sidecar tries to acquire or renew the Lease: at
// least 10 ms. The sidecar's default is 2 s.
func WithRetryPeriod(d time.Duration) LeadOption {
	return func(cfg *leadConfig) { cfg.req.RetryPeriod = durationpb.New(d) }
}

// WithLeadEventHandler calls fn with every event of the campaign, in order, as it
// arrives and before it is delivered on [Leadership.Events] (or acted on by
// [Client.RunWhileLeading]), e.g. to log it. fn must return quickly.
func WithLeadEventHandler(fn func(LeadEvent)) LeadOption {
	return func(cfg *leadConfig) { cfg.onEvent = fn }
}

// Leadership is a campaign for a Lease through the sidecar, as [Client.Lead] started
// it: its events, and the caller's current [Fence]. It lasts until its context ends,
// [Leadership.Close] is called, or the sidecar ends it; the sidecar then releases the
// Lease if the caller held it, so another candidate takes over within its retry period
// instead of a lease duration.
type Leadership struct {
	lease    LeaseRef
	cancel   context.CancelFunc
	events   chan LeadEvent
	done     chan struct{} // closed once the stream ended and events is closed
	onEvent  func(LeadEvent)
	mu       sync.Mutex
	current  LeadEvent
	identity string
	err      error
}

// Lead campaigns for the Lease namespace/name through the sidecar (the Lead stream),
// the way client-go's leader election does: the sidecar acquires the Lease when it is
// missing, free or expired, renews it every retry period while the caller leads, and
// reports [NotLeadingLostRenewal] once no renewal succeeded within the renew deadline.
// Every write of the Lease is conditional, so two candidates never both acquire it.
// Each acquisition has an epoch, which the caller's fenced writes carry ([WithFence],
// [ContextWithFence]): leadership alone does not fence, a paused leader may still write
// after its successor took over, but its fenced writes are refused.
//
// Lead returns once the sidecar accepted the campaign. It refuses, with an [*Error],
// a request the sidecar finds wrong ([ErrInvalid], [Error.FieldViolations] naming the
// field, e.g. "name" or "renew_deadline"), a Lease the sidecar's policy does not let it
// lead ([ErrPermissionDenied], reason POLICY_DENIED), and a sidecar it cannot reach
// ([ErrUnavailable]; see [WithWaitForReady]). [WithDefaultTimeout] does not apply: the
// campaign lasts until ctx ends or [Leadership.Close].
//
// Read [Leadership.Events] until it is closed; [Leadership.Err] then says why the
// stream ended. Ending ctx, or Close, ends the stream, and the sidecar releases the
// Lease at once.
func (c *Client) Lead(ctx context.Context, namespace, name string, opts ...LeadOption) (*Leadership, error) {
	cfg := &leadConfig{req: &safewritev1.LeadRequest{Namespace: namespace, Name: name}}
	for _, opt := range opts {
		if opt != nil {
			opt(cfg)
		}
	}
	lease := LeaseRef{Namespace: namespace, Name: name}
	if err := c.check(ctx, safewritev1.WriterService_Lead_FullMethodName, cfg.req); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	stream, err := c.stub.Lead(ctx, cfg.req, c.callOpts...)
	if err != nil {
		cancel()
		return nil, FromError(err)
	}
	// The sidecar answers headers once it accepted the campaign; a refusal ends the
	// stream at once, with no headers, and Recv returns it.
	if md, _ := stream.Header(); md == nil {
		defer cancel()
		_, err := stream.Recv()
		if err == nil || errors.Is(err, io.EOF) {
			return nil, clientError(codes.Internal, "the Lead stream of %s ended before it began", lease)
		}
		return nil, FromError(err)
	}
	l := &Leadership{
		lease:   lease,
		cancel:  cancel,
		events:  make(chan LeadEvent),
		done:    make(chan struct{}),
		onEvent: cfg.onEvent,
	}
	go l.run(ctx, stream)
	return l, nil
}

// leadStream is the receiving side of the Lead stream.
type leadStream interface {
	Recv() (*safewritev1.LeadResponse, error)
}

// run receives the stream's events, keeps the current one, and delivers them on
// l.events in order, never blocking the receiving on a slow reader.
func (l *Leadership) run(ctx context.Context, stream leadStream) {
	type received struct {
		event LeadEvent
		err   error
	}
	incoming := make(chan received)
	go func() {
		for {
			resp, err := stream.Recv()
			if err != nil {
				select {
				case incoming <- received{err: err}:
				case <-ctx.Done():
				}
				return
			}
			ev := LeadEvent{
				State:    LeadState(resp.GetState()),
				Epoch:    resp.GetEpoch(),
				Holder:   resp.GetHolder(),
				Reason:   NotLeadingReason(resp.GetReason()),
				Identity: resp.GetIdentity(),
				Lease:    l.lease,
			}
			select {
			case incoming <- received{event: ev}:
			case <-ctx.Done():
				return
			}
		}
	}()
	defer close(l.done)
	defer close(l.events)
	defer l.cancel()
	var queue []LeadEvent
	ended := false
	for !ended || len(queue) > 0 {
		var out chan<- LeadEvent
		var next LeadEvent
		if len(queue) > 0 {
			out, next = l.events, queue[0]
		}
		var in <-chan received
		if !ended {
			in = incoming
		}
		select {
		case r := <-in:
			if r.err != nil {
				ended = true
				l.end(ctx, r.err)
				continue
			}
			l.mu.Lock()
			l.current = r.event
			l.identity = r.event.Identity
			l.mu.Unlock()
			if l.onEvent != nil {
				l.onEvent(r.event)
			}
			queue = append(queue, r.event)
		case out <- next:
			queue = queue[1:]
		case <-ctx.Done():
			if !ended {
				ended = true
				l.end(ctx, ctx.Err())
			}
			return // the caller ended it: undelivered events are dropped
		}
	}
}

// end records why the stream ended: nil when the caller ended it, else the sidecar's
// error, or an [ErrUnavailable] error when the sidecar released the Lease and ended the
// stream (it is shutting down).
func (l *Leadership) end(ctx context.Context, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.current = LeadEvent{State: LeadStateNotLeading, Reason: l.current.Reason, Identity: l.identity, Lease: l.lease}
	switch {
	case ctx.Err() != nil:
		l.err = nil
	case errors.Is(err, io.EOF):
		l.err = clientError(codes.Unavailable, "the sidecar ended the Lead stream of %s: it released the Lease (it is shutting down)", l.lease)
	default:
		l.err = FromError(err)
	}
	if l.current.Reason == NotLeadingUnspecified {
		l.current.Reason = NotLeadingReleased
	}
}

// Events returns the campaign's events, in order, as they happen; the channel is closed
// once the stream ended (read [Leadership.Err] then). Read it until it is closed:
// events wait for their reader (the campaign and [Leadership.Fence] do not).
func (l *Leadership) Events() <-chan LeadEvent { return l.events }

// Done is closed once the stream ended and [Leadership.Events] is closed.
func (l *Leadership) Done() <-chan struct{} { return l.done }

// Err says why the stream ended, once [Leadership.Done] is closed: nil when the caller
// ended it (its context, [Leadership.Close]); the sidecar's error otherwise, an
// [*Error] (e.g. [ErrUnavailable] when the sidecar went away, or when it released the
// Lease because it is shutting down). Nil while the stream lasts.
func (l *Leadership) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Lease returns the Lease campaigned for.
func (l *Leadership) Lease() LeaseRef { return l.lease }

// Identity returns the identity the campaign runs under, once the sidecar sent its
// first event; empty before.
func (l *Leadership) Identity() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.identity
}

// Current returns the last event received, before it is read from
// [Leadership.Events]; the zero LeadEvent before the first. Once the stream ended it is
// NotLeading.
func (l *Leadership) Current() LeadEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.current
}

// Fence returns the fence of the caller's current leadership, and true, while the last
// event received says it leads; the zero Fence and false otherwise. Pass it to writes
// ([WithFence], or [ContextWithFence] for every write under a context) so that they are
// refused once a later leader took over.
func (l *Leadership) Fence() (Fence, bool) {
	f := l.Current().Fence()
	return f, f != (Fence{})
}

// Close ends the campaign (the sidecar releases the Lease if the caller held it) and
// waits until the stream ended. It returns nil; calling it again does nothing.
func (l *Leadership) Close() error {
	l.cancel()
	<-l.done
	return nil
}

// LeaderWork is work to run only while leading ([Client.RunWhileLeading]). ctx carries
// the leadership's fence ([FenceFromContext]), so every write through a [Client] under
// it is fenced, and ends when leadership ends: work must then return.
type LeaderWork func(ctx context.Context) error

// RunWhileLeading campaigns for the Lease namespace/name ([Client.Lead]) and runs work
// while the caller leads: it starts work at every Leading event, with a context that
// carries that leadership's fence ([ContextWithFence]), so every write through a
// [Client] under it is fenced with no code at the call site (see [ContextWithFence]
// for how an explicit [WithFence] combines), and cancels that context at the next
// NotLeading event or when the stream ends. It waits for work to return before it
// starts it again at the next Leading event, so two runs never overlap.
//
// It returns when ctx ends (nil), releasing the Lease; when work returns by itself
// (not because its context was canceled), with what work returned, releasing the
// Lease; and when the stream ends otherwise, with [Leadership.Err] (an [*Error]: e.g.
// [ErrUnavailable] when the sidecar released the Lease on shutdown). A campaign the
// sidecar refuses is returned as [Client.Lead] returns it. In every case work has
// returned.
func (c *Client) RunWhileLeading(ctx context.Context, namespace, name string, work LeaderWork, opts ...LeadOption) error {
	if work == nil {
		return clientError(codes.InvalidArgument, "RunWhileLeading: no work")
	}
	l, err := c.Lead(ctx, namespace, name, opts...)
	if err != nil {
		return err
	}
	defer l.Close()
	type finished struct{ err error }
	var (
		stop   context.CancelFunc
		result chan finished
	)
	// halt cancels the running work and waits for it to return.
	halt := func() {
		if stop != nil {
			stop()
			<-result
			stop, result = nil, nil
		}
	}
	defer halt()
	for {
		select {
		case ev, ok := <-l.Events():
			if !ok {
				halt()
				if ctx.Err() != nil {
					return nil
				}
				return l.Err()
			}
			if !ev.Leading() {
				halt()
				continue
			}
			halt() // a Leading event while running: a new epoch, a new run
			workCtx, cancel := context.WithCancel(ContextWithFence(ctx, ev.Fence()))
			stop, result = cancel, make(chan finished, 1)
			go func(done chan<- finished) { done <- finished{work(workCtx)} }(result)
		case r := <-result:
			canceled := stop != nil && ctx.Err() != nil
			stop()
			stop, result = nil, nil
			if canceled {
				return nil
			}
			return r.err
		case <-ctx.Done():
			return nil
		}
	}
}

// fenceKey is the context key of [ContextWithFence].
type fenceKey struct{}

// ContextWithFence returns a copy of ctx that carries f: every write through a
// [Client] under it ([Client.Update], [Client.PatchStatus], [Client.Transact],
// [Client.Delete], the [Typed] calls and the helpers built on them) is sent with
// [WithFence](f), so the sidecar refuses it once a later leader took over
// ([ErrPreconditionFailed], REASON_NOT_LEADER or REASON_FENCED). [Client.RunWhileLeading]
// gives its work such a context. An explicit [WithFence] on a call wins over the
// context's fence: the call is sent with the fence it names. A zero f removes the
// context's fence. Reads ([Client.Get]) are not fenced.
func ContextWithFence(ctx context.Context, f Fence) context.Context {
	return context.WithValue(ctx, fenceKey{}, f)
}

// FenceFromContext returns the fence ctx carries ([ContextWithFence]), and whether it
// carries one.
func FenceFromContext(ctx context.Context) (Fence, bool) {
	f, ok := ctx.Value(fenceKey{}).(Fence)
	return f, ok && f != (Fence{})
}

// fenceFromContext sets the fence of cfg to ctx's when cfg has none of its own.
func (cfg *writeConfig) fenceFromContext(ctx context.Context) {
	if cfg.options.GetFence() != nil {
		return
	}
	if f, ok := FenceFromContext(ctx); ok {
		WithFence(f)(cfg)
	}
}
