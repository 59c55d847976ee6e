package safewrite_test

// The skew check against fake sidecars of either age: a sidecar older than 0.2.0
// (rpc Capabilities UNIMPLEMENTED), one that says it lacks a field, one whose
// Capabilities fails (the call fails with nothing sent), calls whose context ends
// while another asks, and many calls at once. What the fake receives shows what was
// sent. conformance_test.go runs the shared skew cases against the real sidecar.

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"safewrite.dev/clients/go/safewrite"
	safewritev1 "safewrite.dev/clients/go/safewrite/v1"
)

// skewWriter is a fake sidecar that counts its Capabilities calls and the other calls
// it receives; capabilities answers Capabilities (nil: UNIMPLEMENTED, as before 0.2.0).
type skewWriter struct {
	safewritev1.UnimplementedWriterServiceServer
	capabilities func(asked int) (*safewritev1.CapabilitiesResponse, error)
	update       func(*safewritev1.UpdateWithRetryRequest) error

	mu    sync.Mutex
	asked int
	sent  []string
}

func (w *skewWriter) Capabilities(ctx context.Context, req *safewritev1.CapabilitiesRequest) (*safewritev1.CapabilitiesResponse, error) {
	w.mu.Lock()
	w.asked++
	asked := w.asked
	w.mu.Unlock()
	if w.capabilities == nil {
		return w.UnimplementedWriterServiceServer.Capabilities(ctx, req)
	}
	return w.capabilities(asked)
}

func (w *skewWriter) received(method string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sent = append(w.sent, method)
}

func (w *skewWriter) counts() (asked int, sent []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.asked, append([]string(nil), w.sent...)
}

func (w *skewWriter) UpdateWithRetry(_ context.Context, req *safewritev1.UpdateWithRetryRequest) (*safewritev1.UpdateWithRetryResponse, error) {
	w.received("UpdateWithRetry")
	if w.update != nil {
		if err := w.update(req); err != nil {
			return nil, err
		}
	}
	return &safewritev1.UpdateWithRetryResponse{Result: &safewritev1.WriteResult{
		Outcome: safewritev1.Outcome_OUTCOME_UPDATED, ObjectJson: `{"metadata":{"resourceVersion":"2"}}`, ResourceVersion: "2", Attempts: 1}}, nil
}

func (w *skewWriter) Delete(context.Context, *safewritev1.DeleteRequest) (*safewritev1.DeleteResponse, error) {
	w.received("Delete")
	return &safewritev1.DeleteResponse{Outcome: safewritev1.DeleteOutcome_DELETE_OUTCOME_GONE, Attempts: 1}, nil
}

func (w *skewWriter) Lead(*safewritev1.LeadRequest, grpc.ServerStreamingServer[safewritev1.LeadResponse]) error {
	w.received("Lead")
	return status.Error(codes.PermissionDenied, "fake")
}

func (w *skewWriter) Transact(stream grpc.BidiStreamingServer[safewritev1.TransactRequest, safewritev1.TransactResponse]) error {
	w.received("Transact")
	if _, err := stream.Recv(); err != nil {
		return err
	}
	return status.Error(codes.Unavailable, "fake")
}

// capabilitiesOf answers as a sidecar of version that knows every RPC, field and enum
// value of this client's proto but those in lacking.
func capabilitiesOf(version string, lacking ...string) *safewritev1.CapabilitiesResponse {
	lack := map[string]bool{}
	for _, name := range lacking {
		lack[name] = true
	}
	resp := &safewritev1.CapabilitiesResponse{Version: version}
	add := func(list *[]string, name string) {
		if !lack[name] {
			*list = append(*list, name)
		}
	}
	file := safewritev1.File_safewrite_v1_writer_proto
	for i := 0; i < file.Services().Len(); i++ {
		svc := file.Services().Get(i)
		for j := 0; j < svc.Methods().Len(); j++ {
			add(&resp.Methods, string(svc.FullName())+"/"+string(svc.Methods().Get(j).Name()))
		}
	}
	enums := func(es protoreflect.EnumDescriptors) {
		for i := 0; i < es.Len(); i++ {
			for j := 0; j < es.Get(i).Values().Len(); j++ {
				add(&resp.EnumValues, string(es.Get(i).FullName())+"."+string(es.Get(i).Values().Get(j).Name()))
			}
		}
	}
	var messages func(protoreflect.MessageDescriptors)
	messages = func(ms protoreflect.MessageDescriptors) {
		for i := 0; i < ms.Len(); i++ {
			for j := 0; j < ms.Get(i).Fields().Len(); j++ {
				add(&resp.Fields, string(ms.Get(i).Fields().Get(j).FullName()))
			}
			enums(ms.Get(i).Enums())
			messages(ms.Get(i).Messages())
		}
	}
	enums(file.Enums())
	messages(file.Messages())
	return resp
}

var (
	skewRef   = safewrite.ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "cm"}
	skewFence = safewrite.Fence{LeaseNamespace: "ns", LeaseName: "leader", Epoch: 1}
)

// wantSkewRefusal checks that err is the client's refusal of feature (since 0.2.0) before
// sending, naming the sidecar as sidecar says.
func wantSkewRefusal(t *testing.T, err error, feature, sidecar string) {
	t.Helper()
	var swErr *safewrite.Error
	if !errors.As(err, &swErr) || !errors.Is(err, safewrite.ErrPreconditionFailed) {
		t.Fatalf("%v; want ErrPreconditionFailed", err)
	}
	if swErr.Code != codes.FailedPrecondition || swErr.Reason != "UNKNOWN_FIELD" || swErr.Domain != safewrite.Domain ||
		swErr.ReasonCode != safewritev1.Reason_REASON_UNKNOWN_FIELD {
		t.Errorf("%v: code %s, reason %q (%s), domain %q", err, swErr.Code, swErr.Reason, swErr.ReasonCode, swErr.Domain)
	}
	if swErr.Retryable() || safewrite.Retryable(err) {
		t.Errorf("%v is retryable", err)
	}
	for _, want := range []string{feature, sidecar, "0.2.0 or newer", "nothing was sent", "docs/compatibility.md"} {
		if !strings.Contains(swErr.Message, want) {
			t.Errorf("message %q does not say %q", swErr.Message, want)
		}
	}
	if swErr.Metadata["feature"] != feature || swErr.Metadata["since"] != "0.2.0" {
		t.Errorf("metadata %v", swErr.Metadata)
	}
	if st, ok := status.FromError(err); !ok || st.Code() != codes.FailedPrecondition || len(st.Details()) != 2 {
		t.Errorf("GRPCStatus: %v", st)
	}
}

func TestSkewOlderSidecarGetsNoNewFeature(t *testing.T) {
	w := &skewWriter{}
	c := fakeSidecar(t, w)
	ctx := testContext(t)
	older := "older than 0.2.0 (it has no rpc Capabilities)"

	// A call that needs nothing new is sent without asking.
	if _, err := c.Update(ctx, skewRef, safewrite.MergePatch(`{}`)); err != nil {
		t.Fatal(err)
	}
	if asked, _ := w.counts(); asked != 0 {
		t.Errorf("a call of 0.1.0 asked Capabilities %d times", asked)
	}

	_, err := c.Update(ctx, skewRef, safewrite.MergePatch(`{}`), safewrite.WithFence(skewFence))
	wantSkewRefusal(t, err, "safewrite.v1.WriteOptions.fence", older)
	var swErr *safewrite.Error
	if errors.As(err, &swErr) && (swErr.Target != skewRef || swErr.Metadata["field"] != "options" || swErr.Metadata["number"] != "6") {
		t.Errorf("target %v, metadata %v", swErr.Target, swErr.Metadata)
	}
	_, err = c.PatchStatus(safewrite.ContextWithFence(ctx, skewFence), skewRef, safewrite.MergePatch(`{}`))
	wantSkewRefusal(t, err, "safewrite.v1.WriteOptions.fence", older)
	_, err = c.Transact(ctx, skewRef, func(*unstructured.Unstructured) error { return nil }, safewrite.WithFence(skewFence))
	wantSkewRefusal(t, err, "safewrite.v1.WriteOptions.fence", older)
	_, err = c.Delete(ctx, skewRef)
	wantSkewRefusal(t, err, "safewrite.v1.WriterService/Delete", older)
	_, err = c.Lead(ctx, "ns", "leader")
	wantSkewRefusal(t, err, "safewrite.v1.WriterService/Lead", older)

	// Transact without a fence is sent; the fake fails it.
	if _, err := c.Transact(ctx, skewRef, func(*unstructured.Unstructured) error { return nil }); !errors.Is(err, safewrite.ErrUnavailable) {
		t.Errorf("an unfenced transaction: %v", err)
	}
	asked, sent := w.counts()
	if asked != 1 {
		t.Errorf("Capabilities asked %d times, want once", asked)
	}
	if strings.Join(sent, ",") != "UpdateWithRetry,Transact" {
		t.Errorf("sent %v; want only the update and the transaction without a fence", sent)
	}
}

func TestSkewSidecarOfThisVersionGetsEverything(t *testing.T) {
	w := &skewWriter{capabilities: func(int) (*safewritev1.CapabilitiesResponse, error) {
		return capabilitiesOf(safewrite.Version), nil
	}}
	c := fakeSidecar(t, w)
	ctx := testContext(t)
	if _, err := c.Update(ctx, skewRef, safewrite.MergePatch(`{}`), safewrite.WithFence(skewFence)); err != nil {
		t.Fatal(err)
	}
	if res, err := c.Delete(ctx, skewRef); err != nil || res.Outcome != safewrite.DeleteOutcomeGone {
		t.Fatalf("delete: %v, %v", res, err)
	}
	if _, err := c.Lead(ctx, "ns", "leader"); !errors.Is(err, safewrite.ErrPermissionDenied) {
		t.Fatalf("lead: %v; want the fake's refusal", err)
	}
	asked, sent := w.counts()
	if asked != 1 || strings.Join(sent, ",") != "UpdateWithRetry,Delete,Lead" {
		t.Errorf("asked %d, sent %v", asked, sent)
	}
}

func TestSkewSidecarThatLacksAField(t *testing.T) {
	w := &skewWriter{capabilities: func(int) (*safewritev1.CapabilitiesResponse, error) {
		return capabilitiesOf("0.2.0", "safewrite.v1.WriteOptions.fence"), nil
	}}
	c := fakeSidecar(t, w)
	_, err := c.Update(testContext(t), skewRef, safewrite.MergePatch(`{}`), safewrite.WithFence(skewFence))
	wantSkewRefusal(t, err, "safewrite.v1.WriteOptions.fence", "this sidecar is 0.2.0;")
	var swErr *safewrite.Error
	if errors.As(err, &swErr) && swErr.Metadata["sidecar_version"] != "0.2.0" {
		t.Errorf("metadata %v", swErr.Metadata)
	}
	if _, sent := w.counts(); len(sent) != 0 {
		t.Errorf("sent %v", sent)
	}
}

// wantUnlearned checks that err is the client's failure of a call that needs feature
// when the sidecar's features could not be learned: the Capabilities status's code,
// and a message that names the feature and says what Capabilities said (capabilities).
func wantUnlearned(t *testing.T, err error, code codes.Code, feature, capabilities string) *safewrite.Error {
	t.Helper()
	var swErr *safewrite.Error
	if !errors.As(err, &swErr) {
		t.Fatalf("%v; want an *Error", err)
	}
	if swErr.Code != code || status.Code(err) != code {
		t.Errorf("%v: code %s, want %s", err, swErr.Code, code)
	}
	for _, want := range []string{feature + " needs a sidecar of 0.2.0 or newer", "this sidecar's features could not be learned",
		"(rpc Capabilities: " + capabilities + ")", "nothing was sent", "the next call asks again", "docs/compatibility.md"} {
		if !strings.Contains(swErr.Message, want) {
			t.Errorf("message %q does not say %q", swErr.Message, want)
		}
	}
	return swErr
}

// A Capabilities call that fails (but UNIMPLEMENTED) leaves the sidecar unknown: a call
// that needs something added after 0.1.0 fails with its code, nothing sent (an older
// sidecar would drop the fence and write unfenced), and the next one asks again. Calls
// that need nothing new neither ask nor fail.
func TestSkewCapabilitiesFailureAsksAgain(t *testing.T) {
	w := &skewWriter{capabilities: func(asked int) (*safewritev1.CapabilitiesResponse, error) {
		if asked == 1 {
			return nil, status.Error(codes.Unavailable, "not yet")
		}
		return capabilitiesOf("0.2.0", "safewrite.v1.WriteOptions.fence"), nil
	}}
	c := fakeSidecar(t, w)
	ctx := testContext(t)
	_, err := c.Update(ctx, skewRef, safewrite.MergePatch(`{}`), safewrite.WithFence(skewFence))
	swErr := wantUnlearned(t, err, codes.Unavailable, "safewrite.v1.WriteOptions.fence", "not yet")
	if !errors.Is(err, safewrite.ErrUnavailable) || !safewrite.Retryable(err) || swErr.Target != skewRef ||
		swErr.ReasonCode != safewritev1.Reason_REASON_UNSPECIFIED {
		t.Errorf("%v: not a retryable ErrUnavailable about %v (reason %s, target %v)", err, skewRef, swErr.ReasonCode, swErr.Target)
	}
	if asked, sent := w.counts(); asked != 1 || len(sent) != 0 {
		t.Fatalf("asked %d times (want 1), sent %v (want nothing)", asked, sent)
	}

	// A call of 0.1.0 asks nothing.
	if _, err := c.Update(ctx, skewRef, safewrite.MergePatch(`{}`)); err != nil {
		t.Fatal(err)
	}
	if asked, _ := w.counts(); asked != 1 {
		t.Errorf("a call of 0.1.0 asked Capabilities: %d times in all", asked)
	}
	// The next call that needs something new asks again; the answer is kept.
	for range 2 {
		_, err := c.Update(ctx, skewRef, safewrite.MergePatch(`{}`), safewrite.WithFence(skewFence))
		wantSkewRefusal(t, err, "safewrite.v1.WriteOptions.fence", "this sidecar is 0.2.0;")
	}
	if _, err := c.Delete(ctx, skewRef); err != nil {
		t.Errorf("delete: %v", err)
	}
	if asked, sent := w.counts(); asked != 2 || strings.Join(sent, ",") != "UpdateWithRetry,Delete" {
		t.Errorf("asked %d times (want 2), sent %v (want the update without a fence, and the delete)", asked, sent)
	}
}

// The hole a fail-open check would leave: a sidecar older than 0.2.0 whose
// Capabilities fails once (here RESOURCE_EXHAUSTED, with details) and then answers
// UNIMPLEMENTED. The first fenced write fails with that code and its details, nothing
// sent; the next one learns the sidecar is older and is refused; neither is written.
func TestSkewCapabilitiesFailureKeepsItsCodeAndDetails(t *testing.T) {
	shed, err := status.New(codes.ResourceExhausted, "too many calls in flight").WithDetails(
		protoadapt.MessageV1Of(&errdetails.ErrorInfo{Reason: "OVERLOADED", Domain: safewrite.Domain, Metadata: map[string]string{"in_flight": "64"}}),
		protoadapt.MessageV1Of(&errdetails.RetryInfo{RetryDelay: durationpb.New(2 * time.Second)}),
		protoadapt.MessageV1Of(&safewritev1.WriteFailure{Reason: safewritev1.Reason_REASON_OVERLOADED}))
	if err != nil {
		t.Fatal(err)
	}
	w := &skewWriter{capabilities: func(asked int) (*safewritev1.CapabilitiesResponse, error) {
		if asked == 1 {
			return nil, shed.Err()
		}
		return nil, status.Error(codes.Unimplemented, "unknown method Capabilities")
	}}
	c := fakeSidecar(t, w)
	ctx := testContext(t)

	_, err = c.Update(ctx, skewRef, safewrite.MergePatch(`{}`), safewrite.WithFence(skewFence))
	swErr := wantUnlearned(t, err, codes.ResourceExhausted, "safewrite.v1.WriteOptions.fence", "too many calls in flight")
	if !errors.Is(err, safewrite.ErrResourceExhausted) || !safewrite.Retryable(err) {
		t.Errorf("%v: not a retryable ErrResourceExhausted", err)
	}
	if delay, ok := swErr.RetryDelay(); !ok || delay != 2*time.Second {
		t.Errorf("retry delay %v, %v; want the status's 2s", delay, ok)
	}
	if swErr.Reason != "OVERLOADED" || swErr.Domain != safewrite.Domain || swErr.ReasonCode != safewritev1.Reason_REASON_OVERLOADED ||
		swErr.Metadata["in_flight"] != "64" {
		t.Errorf("reason %q (%s), domain %q, metadata %v: not the status's", swErr.Reason, swErr.ReasonCode, swErr.Domain, swErr.Metadata)
	}
	if st, _ := status.FromError(err); len(st.Details()) != 3 || st.Message() != swErr.Message {
		t.Errorf("GRPCStatus %v: want the status's 3 details and the client's message", st)
	}
	if asked, sent := w.counts(); asked != 1 || len(sent) != 0 {
		t.Fatalf("asked %d times (want 1), sent %v (want nothing)", asked, sent)
	}

	_, err = c.Update(ctx, skewRef, safewrite.MergePatch(`{}`), safewrite.WithFence(skewFence))
	wantSkewRefusal(t, err, "safewrite.v1.WriteOptions.fence", "older than 0.2.0 (it has no rpc Capabilities)")
	if asked, sent := w.counts(); asked != 2 || len(sent) != 0 {
		t.Errorf("asked %d times (want 2), sent %v (want nothing)", asked, sent)
	}
}

// waitUntilWaiting returns once n calls wait for another call's Capabilities answer
// (a goroutine blocked in the select of the client's features), as the goroutines'
// stacks show, so that a test can act on them then without sleeping a guessed while.
func waitUntilWaiting(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	buf := make([]byte, 1<<20)
	for {
		waiting := 0
		for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			// "goroutine 41 [select]:", then its innermost frame: the function whose
			// select it is.
			lines := strings.SplitN(g, "\n", 3)
			if len(lines) >= 2 && strings.Contains(lines[0], " [select") &&
				strings.HasPrefix(lines[1], "safewrite.dev/clients/go/safewrite.(*Client).features(") {
				waiting++
			}
		}
		if waiting >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls wait for the Capabilities answer, want %d", waiting, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// blockingCapabilities is a fake's Capabilities whose first call signals entered and
// answers what first returns once release is closed; later calls answer at once, as a
// sidecar of this version.
func blockingCapabilities(entered, release chan struct{}, first func() (*safewritev1.CapabilitiesResponse, error)) func(int) (*safewritev1.CapabilitiesResponse, error) {
	return func(asked int) (*safewritev1.CapabilitiesResponse, error) {
		if asked != 1 {
			return capabilitiesOf(safewrite.Version), nil
		}
		close(entered)
		<-release
		return first()
	}
}

// A call whose context ends while it waits for another call's Capabilities fails with
// its context's error, nothing sent and nothing asked; the other call's answer is kept.
func TestSkewWaitingCallsContextEnds(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	w := &skewWriter{capabilities: blockingCapabilities(entered, release, func() (*safewritev1.CapabilitiesResponse, error) {
		return capabilitiesOf(safewrite.Version), nil
	})}
	c := fakeSidecar(t, w)
	ctx := testContext(t)
	first := make(chan error, 1)
	go func() {
		_, err := c.Update(ctx, skewRef, safewrite.MergePatch(`{}`), safewrite.WithFence(skewFence))
		first <- err
	}()
	<-entered // the first call is asking; the calls below wait for its answer

	// Canceled while it waits.
	canceled, cancel := context.WithCancel(ctx)
	second := make(chan error, 1)
	go func() {
		_, err := c.Delete(canceled, skewRef)
		second <- err
	}()
	waitUntilWaiting(t, 1)
	cancel()
	err := <-second
	wantUnlearned(t, err, codes.Canceled, "safewrite.v1.WriterService/Delete", "context canceled, waiting for another call's answer")
	if !errors.Is(err, safewrite.ErrCanceled) || !errors.Is(err, context.Canceled) {
		t.Errorf("%v: not ErrCanceled", err)
	}
	if !safewrite.Retryable(err) {
		t.Errorf("%v: nothing was sent, so it is retryable (without a key)", err)
	}
	// Past its deadline when it comes.
	expired, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	defer cancel()
	_, err = c.Update(expired, skewRef, safewrite.MergePatch(`{}`), safewrite.WithFence(skewFence))
	wantUnlearned(t, err, codes.DeadlineExceeded, "safewrite.v1.WriteOptions.fence", "context deadline exceeded, waiting for another call's answer")
	if !errors.Is(err, safewrite.ErrDeadlineExceeded) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("%v: not ErrDeadlineExceeded", err)
	}
	if !safewrite.Retryable(err) {
		t.Errorf("%v: nothing was sent, so it is retryable (without a key)", err)
	}
	if asked, sent := w.counts(); asked != 1 || len(sent) != 0 {
		t.Errorf("asked %d times (want 1), sent %v (want nothing)", asked, sent)
	}

	close(release)
	if err := <-first; err != nil {
		t.Fatalf("the asking call: %v", err)
	}
	if _, err := c.Delete(ctx, skewRef); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if asked, sent := w.counts(); asked != 1 || strings.Join(sent, ",") != "UpdateWithRetry,Delete" {
		t.Errorf("asked %d times (want 1), sent %v", asked, sent)
	}
}

// Calls that wait for a Capabilities call that fails fail with its status, as it does,
// without asking again themselves; the next call asks again.
func TestSkewWaitingCallsShareTheFailure(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	w := &skewWriter{capabilities: blockingCapabilities(entered, release, func() (*safewritev1.CapabilitiesResponse, error) {
		return nil, status.Error(codes.Unavailable, "not yet")
	})}
	c := fakeSidecar(t, w)
	ctx := testContext(t)
	errs := make(chan error, 3)
	go func() {
		_, err := c.Update(ctx, skewRef, safewrite.MergePatch(`{}`), safewrite.WithFence(skewFence))
		errs <- err
	}()
	<-entered
	for range 2 {
		go func() {
			_, err := c.Delete(ctx, skewRef)
			errs <- err
		}()
	}
	waitUntilWaiting(t, 2)
	close(release)
	for range 3 {
		err := <-errs
		var swErr *safewrite.Error
		if !errors.As(err, &swErr) || swErr.Code != codes.Unavailable || !strings.Contains(swErr.Message, "(rpc Capabilities: not yet); nothing was sent") {
			t.Errorf("%v; want the Capabilities call's UNAVAILABLE, nothing sent", err)
		}
	}
	if asked, sent := w.counts(); asked != 1 || len(sent) != 0 {
		t.Errorf("asked %d times (want 1), sent %v (want nothing)", asked, sent)
	}
	if _, err := c.Delete(ctx, skewRef); err != nil {
		t.Fatalf("the next call: %v", err)
	}
	if asked, sent := w.counts(); asked != 2 || strings.Join(sent, ",") != "Delete" {
		t.Errorf("asked %d times (want 2), sent %v", asked, sent)
	}
}

// A Capabilities call that fails because its own caller's context ended says nothing
// to a call waiting for it: that call asks again, and is checked and sent.
func TestSkewAskersContextEndsOthersAskAgain(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	w := &skewWriter{capabilities: blockingCapabilities(entered, release, func() (*safewritev1.CapabilitiesResponse, error) {
		return capabilitiesOf(safewrite.Version), nil
	})}
	c := fakeSidecar(t, w)
	ctx := testContext(t)
	askers, cancel := context.WithCancel(ctx)
	first := make(chan error, 1)
	go func() {
		_, err := c.Update(askers, skewRef, safewrite.MergePatch(`{}`), safewrite.WithFence(skewFence))
		first <- err
	}()
	<-entered
	second := make(chan error, 1)
	go func() {
		_, err := c.Delete(ctx, skewRef)
		second <- err
	}()
	waitUntilWaiting(t, 1)
	cancel()
	err := <-first
	wantUnlearned(t, err, codes.Canceled, "safewrite.v1.WriteOptions.fence", "context canceled")
	if !errors.Is(err, safewrite.ErrCanceled) {
		t.Errorf("the call whose context ended: %v; want ErrCanceled", err)
	}
	if err := <-second; err != nil {
		t.Errorf("the waiting call: %v; want it checked and sent", err)
	}
	if asked, sent := w.counts(); asked != 2 || strings.Join(sent, ",") != "Delete" {
		t.Errorf("asked %d times (want 2), sent %v (want the delete)", asked, sent)
	}
}

func TestSkewAsksOnceUnderConcurrentCalls(t *testing.T) {
	w := &skewWriter{capabilities: func(int) (*safewritev1.CapabilitiesResponse, error) {
		time.Sleep(50 * time.Millisecond) // the other calls arrive meanwhile
		return capabilitiesOf(safewrite.Version), nil
	}}
	c := fakeSidecar(t, w)
	ctx := testContext(t)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.Update(ctx, skewRef, safewrite.MergePatch(`{}`), safewrite.WithFence(skewFence))
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if asked, sent := w.counts(); asked != 1 || len(sent) != 16 {
		t.Errorf("asked %d times, sent %d calls; want 1 and 16", asked, len(sent))
	}
}

// The sidecar's own refusal of a field it does not know is the same kind of error as
// the client's refusal.
func TestSkewSidecarsRefusalIsTheClientsError(t *testing.T) {
	refuse := func(*safewritev1.UpdateWithRetryRequest) error {
		st, err := status.New(codes.FailedPrecondition,
			"the request's `options` sets field 6 of safewrite.v1.WriteOptions, which this sidecar does not know (safewrite 0.2.0): the client is newer than this sidecar; upgrade the sidecar, or leave that feature unused (docs/compatibility.md); nothing was sent").
			WithDetails(
				protoadapt.MessageV1Of(&errdetails.ErrorInfo{Reason: "UNKNOWN_FIELD", Domain: safewrite.Domain, Metadata: map[string]string{
					"field": "options", "message": "safewrite.v1.WriteOptions", "number": "6", "sidecar_version": "0.2.0"}}),
				protoadapt.MessageV1Of(&safewritev1.WriteFailure{Reason: safewritev1.Reason_REASON_UNKNOWN_FIELD}))
		if err != nil {
			t.Fatal(err)
		}
		return st.Err()
	}
	// A sidecar whose Capabilities says it has the fence, so the client sends the call.
	w := &skewWriter{update: refuse, capabilities: func(int) (*safewritev1.CapabilitiesResponse, error) {
		return capabilitiesOf(safewrite.Version), nil
	}}
	c := fakeSidecar(t, w)
	_, sidecars := c.Update(testContext(t), skewRef, safewrite.MergePatch(`{}`), safewrite.WithFence(skewFence))
	_, clients := fakeSidecar(t, &skewWriter{}).Update(testContext(t), skewRef, safewrite.MergePatch(`{}`), safewrite.WithFence(skewFence))
	for _, err := range []error{sidecars, clients} {
		var swErr *safewrite.Error
		if !errors.As(err, &swErr) || !errors.Is(err, safewrite.ErrPreconditionFailed) || swErr.Code != codes.FailedPrecondition ||
			swErr.Reason != "UNKNOWN_FIELD" || swErr.ReasonCode != safewritev1.Reason_REASON_UNKNOWN_FIELD || swErr.Retryable() ||
			swErr.Target != skewRef {
			t.Errorf("%v: not the refusal of an unknown field", err)
		}
	}
	if _, sent := w.counts(); len(sent) != 1 {
		t.Errorf("sent %v", sent)
	}
}
