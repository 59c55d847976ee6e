package safewrite

// Leadership and Delete as seen by a fake in-process WriterService: the requests they
// send, and RunWhileLeading's start, stop and restart of its work.

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	safewritev1 "safewrite.dev/clients/go/safewrite/v1"
)

// leadWriter is a fake WriterService whose Lead runs lead and whose Delete runs del.
type leadWriter struct {
	safewritev1.UnimplementedWriterServiceServer
	lead func(*safewritev1.LeadRequest, grpc.ServerStreamingServer[safewritev1.LeadResponse]) error
	del  func(*safewritev1.DeleteRequest) (*safewritev1.DeleteResponse, error)
}

func (f *leadWriter) Lead(req *safewritev1.LeadRequest, stream grpc.ServerStreamingServer[safewritev1.LeadResponse]) error {
	return f.lead(req, stream)
}

func (f *leadWriter) Delete(_ context.Context, req *safewritev1.DeleteRequest) (*safewritev1.DeleteResponse, error) {
	return f.del(req)
}

func leading(epoch uint64) *safewritev1.LeadResponse {
	return &safewritev1.LeadResponse{State: safewritev1.LeadState_LEAD_STATE_LEADING, Epoch: epoch, Holder: "me", Identity: "me"}
}

func notLeading(reason safewritev1.NotLeadingReason) *safewritev1.LeadResponse {
	return &safewritev1.LeadResponse{State: safewritev1.LeadState_LEAD_STATE_NOT_LEADING, Reason: reason, Holder: "other", Identity: "me"}
}

func TestDeleteRequest(t *testing.T) {
	ref := ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "cm"}
	ctxFence := Fence{LeaseNamespace: "ns", LeaseName: "leader", Epoch: 4}
	req, err := deleteRequest(ContextWithFence(context.Background(), ctxFence), ref, []WriteOption{
		WithUID("u-1"), WithResourceVersion("41"), WithPreconditionCEL("true"),
		WithPropagationPolicy(PropagationForeground), WithDryRun(),
		WithRetryPolicy(RetryPolicy{MaxAttempts: 3}),
	})
	if err != nil {
		t.Fatal(err)
	}
	want := &safewritev1.DeleteRequest{
		Target:            ref.proto(),
		Preconditions:     &safewritev1.Preconditions{Uid: "u-1", ResourceVersion: "41", Cel: "true"},
		PropagationPolicy: safewritev1.PropagationPolicy_PROPAGATION_POLICY_FOREGROUND,
		DryRun:            true,
		RetryPolicy:       &safewritev1.RetryPolicy{MaxAttempts: 3},
		Fence:             &safewritev1.Fence{LeaseNamespace: "ns", LeaseName: "leader", Epoch: 4},
	}
	if !proto.Equal(req, want) {
		t.Fatalf("%v, want %v", req, want)
	}
	// An explicit fence wins over the context's.
	explicit := Fence{LeaseNamespace: "ns", LeaseName: "other", Epoch: 9}
	req, err = deleteRequest(ContextWithFence(context.Background(), ctxFence), ref, []WriteOption{WithFence(explicit)})
	if err != nil || req.GetFence().GetLeaseName() != "other" || req.GetFence().GetEpoch() != 9 {
		t.Fatalf("explicit fence: %v, %v", req, err)
	}
	// A zero fence in the context removes it.
	req, err = deleteRequest(ContextWithFence(ContextWithFence(context.Background(), ctxFence), Fence{}), ref, nil)
	if err != nil || req.GetFence() != nil {
		t.Fatalf("zero context fence: %v, %v", req, err)
	}
	for _, opt := range []WriteOption{WithFieldManager("me"), WithCreateIfMissing("{}"), WithIdempotencyKey("k"), WithWriteAlone()} {
		if _, err := deleteRequest(context.Background(), ref, []WriteOption{opt}); !errors.Is(err, ErrInvalid) {
			t.Errorf("a write-only option: %v, want ErrInvalid", err)
		}
	}
	c := &Client{}
	if _, _, err := c.prepare(ref, CEL("{}"), []WriteOption{WithPropagationPolicy(PropagationOrphan)}); !errors.Is(err, ErrInvalid) {
		t.Errorf("a propagation policy on a write: %v, want ErrInvalid", err)
	}
}

func TestWritesTakeTheContextsFence(t *testing.T) {
	var got []*safewritev1.Fence
	c := fakeClient(t, &fakeWriter{update: func(req *safewritev1.UpdateWithRetryRequest) error {
		got = append(got, req.GetOptions().GetFence())
		return status.Error(codes.Unavailable, "fake")
	}})
	ref := ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "cm"}
	ctx := ContextWithFence(context.Background(), Fence{LeaseNamespace: "ns", LeaseName: "l", Epoch: 2})
	_, _ = c.Update(ctx, ref, CEL("{}"))
	_, _ = c.Update(ctx, ref, CEL("{}"), WithFence(Fence{LeaseNamespace: "ns", LeaseName: "l", Epoch: 7}))
	_, _ = c.Update(context.Background(), ref, CEL("{}"))
	if len(got) != 3 || got[0].GetEpoch() != 2 || got[1].GetEpoch() != 7 || got[2] != nil {
		t.Fatalf("fences sent: %v; want epoch 2 (the context's), 7 (explicit), none", got)
	}
	if f, ok := FenceFromContext(ctx); !ok || f.Epoch != 2 {
		t.Errorf("FenceFromContext: %v, %v", f, ok)
	}
	if _, ok := FenceFromContext(context.Background()); ok {
		t.Error("FenceFromContext of a context without one: ok")
	}
}

func TestLeadSendsItsRequestAndDecodesEvents(t *testing.T) {
	requests := make(chan *safewritev1.LeadRequest, 1)
	released := make(chan struct{})
	c := fakeClient(t, &leadWriter{lead: func(req *safewritev1.LeadRequest, stream grpc.ServerStreamingServer[safewritev1.LeadResponse]) error {
		requests <- req
		for _, ev := range []*safewritev1.LeadResponse{notLeading(safewritev1.NotLeadingReason_NOT_LEADING_REASON_OTHER_HOLDER), leading(5)} {
			if err := stream.Send(ev); err != nil {
				return err
			}
		}
		<-stream.Context().Done()
		close(released)
		return nil
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := c.Lead(ctx, "ns", "leader", WithIdentity("me"), WithLeaseDuration(2*time.Second),
		WithRenewDeadline(1500*time.Millisecond), WithRetryPeriod(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	want := &safewritev1.LeadRequest{Namespace: "ns", Name: "leader", Identity: "me", LeaseDuration: durationpb.New(2 * time.Second),
		RenewDeadline: durationpb.New(1500 * time.Millisecond), RetryPeriod: durationpb.New(200 * time.Millisecond)}
	if req := <-requests; !proto.Equal(req, want) {
		t.Fatalf("request %v, want %v", req, want)
	}
	first, second := <-l.Events(), <-l.Events()
	if first.Leading() || first.Reason != NotLeadingOtherHolder || first.Holder != "other" || first.Identity != "me" {
		t.Errorf("first event %+v", first)
	}
	if !second.Leading() || second.Epoch != 5 || second.Fence() != (Fence{LeaseNamespace: "ns", LeaseName: "leader", Epoch: 5}) {
		t.Errorf("second event %+v", second)
	}
	if f, ok := l.Fence(); !ok || f.Epoch != 5 || l.Identity() != "me" {
		t.Errorf("Fence %v %v, Identity %q", f, ok, l.Identity())
	}
	_ = l.Close()
	select {
	case <-released:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end the stream")
	}
	if _, ok := <-l.Events(); ok {
		t.Error("Events is open after Close")
	}
	if _, ok := l.Fence(); ok || l.Err() != nil {
		t.Errorf("after Close: leading, or Err %v", l.Err())
	}
}

func TestLeadRefusalIsReturnedByLead(t *testing.T) {
	c := fakeClient(t, &leadWriter{lead: func(*safewritev1.LeadRequest, grpc.ServerStreamingServer[safewritev1.LeadResponse]) error {
		return status.Error(codes.InvalidArgument, "name: not a DNS-1123 subdomain")
	}})
	_, err := c.Lead(context.Background(), "ns", "Bad_Name")
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("%v, want ErrInvalid", err)
	}
	if err := c.RunWhileLeading(context.Background(), "ns", "Bad_Name", func(context.Context) error { return nil }); !errors.Is(err, ErrInvalid) {
		t.Fatalf("RunWhileLeading: %v, want ErrInvalid", err)
	}
}

// TestRunWhileLeadingRestartsItsWork: work starts at each Leading event with that
// epoch's fence in its context, is canceled at NotLeading, never overlaps itself, and
// the Lease is released when the caller's context ends.
func TestRunWhileLeadingRestartsItsWork(t *testing.T) {
	started := make(chan Fence)
	stopped := make(chan struct{})
	released := make(chan struct{})
	c := fakeClient(t, &leadWriter{lead: func(_ *safewritev1.LeadRequest, stream grpc.ServerStreamingServer[safewritev1.LeadResponse]) error {
		script := []*safewritev1.LeadResponse{
			notLeading(safewritev1.NotLeadingReason_NOT_LEADING_REASON_OTHER_HOLDER),
			leading(1),
			notLeading(safewritev1.NotLeadingReason_NOT_LEADING_REASON_LOST_RENEWAL),
			leading(2),
		}
		for _, ev := range script {
			if err := stream.Send(ev); err != nil {
				return err
			}
			time.Sleep(50 * time.Millisecond)
		}
		<-stream.Context().Done()
		close(released)
		return nil
	}})
	var running, overlaps atomic.Int32
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- c.RunWhileLeading(ctx, "ns", "leader", func(ctx context.Context) error {
			if running.Add(1) > 1 {
				overlaps.Add(1)
			}
			defer running.Add(-1)
			f, _ := FenceFromContext(ctx)
			started <- f
			<-ctx.Done()
			stopped <- struct{}{}
			return ctx.Err()
		})
	}()
	for epoch := uint64(1); epoch <= 2; epoch++ {
		select {
		case f := <-started:
			if f != (Fence{LeaseNamespace: "ns", LeaseName: "leader", Epoch: epoch}) {
				t.Fatalf("run %d: fence %+v", epoch, f)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("run %d never started", epoch)
		}
		if epoch == 1 {
			<-stopped // canceled by LOST_RENEWAL
		}
	}
	cancel()
	<-stopped
	if err := <-done; err != nil {
		t.Errorf("RunWhileLeading after its context ended: %v", err)
	}
	select {
	case <-released:
	case <-time.After(5 * time.Second):
		t.Fatal("the stream was not ended")
	}
	if overlaps.Load() != 0 {
		t.Error("two runs of the work overlapped")
	}
}

// TestRunWhileLeadingEndsWithItsWork: work that returns by itself ends the campaign,
// with its error.
func TestRunWhileLeadingEndsWithItsWork(t *testing.T) {
	c := fakeClient(t, &leadWriter{lead: func(_ *safewritev1.LeadRequest, stream grpc.ServerStreamingServer[safewritev1.LeadResponse]) error {
		if err := stream.Send(leading(1)); err != nil {
			return err
		}
		<-stream.Context().Done()
		return nil
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	boom := errors.New("boom")
	if err := c.RunWhileLeading(ctx, "ns", "leader", func(context.Context) error { return boom }); err != boom {
		t.Fatalf("%v, want the work's error", err)
	}
}

// TestLeadStreamEndedBySidecar: a stream the sidecar ends after RELEASED is an
// ErrUnavailable, for Err and for RunWhileLeading.
func TestLeadStreamEndedBySidecar(t *testing.T) {
	c := fakeClient(t, &leadWriter{lead: func(_ *safewritev1.LeadRequest, stream grpc.ServerStreamingServer[safewritev1.LeadResponse]) error {
		for _, ev := range []*safewritev1.LeadResponse{leading(1), notLeading(safewritev1.NotLeadingReason_NOT_LEADING_REASON_RELEASED)} {
			if err := stream.Send(ev); err != nil {
				return err
			}
		}
		return nil
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var runs atomic.Int32
	err := c.RunWhileLeading(ctx, "ns", "leader", func(ctx context.Context) error {
		runs.Add(1)
		<-ctx.Done()
		return nil
	})
	if !errors.Is(err, ErrUnavailable) || runs.Load() != 1 {
		t.Fatalf("%v after %d run(s), want ErrUnavailable after 1", err, runs.Load())
	}
}
