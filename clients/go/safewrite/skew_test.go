package safewrite_test

// The skew check against fake sidecars of either age: a sidecar older than 0.2.0
// (rpc Capabilities UNIMPLEMENTED), one that says it lacks a field, one whose
// Capabilities fails, and many calls at once. What the fake receives shows what was
// sent. conformance_test.go runs the shared skew cases against the real sidecar.

import (
	"context"
	"errors"
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

// A Capabilities call that fails (but UNIMPLEMENTED) leaves the sidecar unknown: the
// call goes out unchecked (the sidecar refuses what it does not know itself), and the
// next one asks again.
func TestSkewCapabilitiesFailureAsksAgain(t *testing.T) {
	w := &skewWriter{capabilities: func(asked int) (*safewritev1.CapabilitiesResponse, error) {
		if asked == 1 {
			return nil, status.Error(codes.Unavailable, "not yet")
		}
		return capabilitiesOf("0.2.0", "safewrite.v1.WriteOptions.fence"), nil
	}}
	c := fakeSidecar(t, w)
	ctx := testContext(t)
	if _, err := c.Update(ctx, skewRef, safewrite.MergePatch(`{}`), safewrite.WithFence(skewFence)); err != nil {
		t.Fatalf("unknown sidecar: %v; want the call sent", err)
	}
	for range 2 {
		_, err := c.Update(ctx, skewRef, safewrite.MergePatch(`{}`), safewrite.WithFence(skewFence))
		wantSkewRefusal(t, err, "safewrite.v1.WriteOptions.fence", "this sidecar is 0.2.0;")
	}
	if asked, sent := w.counts(); asked != 2 || len(sent) != 1 {
		t.Errorf("asked %d times (want 2), sent %v (want the first)", asked, sent)
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
	// A sidecar whose Capabilities is unknown (it fails), so the client sends the call.
	w := &skewWriter{update: refuse, capabilities: func(int) (*safewritev1.CapabilitiesResponse, error) {
		return nil, status.Error(codes.Internal, "fake")
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
