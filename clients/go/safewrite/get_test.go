package safewrite

// Get without a sidecar: the GetRequest each option builds, the answer and the
// failures as a caller reads them, and a typed Get, through an in-process WriterService.

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	safewritev1 "safewrite.dev/clients/go/safewrite/v1"
)

const gotJSON = `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm","namespace":"ns","resourceVersion":"42"},"data":{"n":"1"}}`

func TestGetRequest(t *testing.T) {
	var sent *safewritev1.GetRequest
	c := fakeClient(t, &fakeWriter{get: func(_ context.Context, req *safewritev1.GetRequest) (*safewritev1.GetResponse, error) {
		sent = req
		return &safewritev1.GetResponse{ObjectJson: gotJSON, ResourceVersion: "42", Remembered: true, TraceId: "0123"}, nil
	}})
	ref := ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "cm"}
	target := &safewritev1.ObjectRef{ApiVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "cm"}
	written := &Result{Outcome: OutcomeUpdated, ResourceVersion: "41"}
	for _, tc := range []struct {
		name string
		opts []GetOption
		min  string
	}{
		{"no minimum: a live read", nil, ""},
		{"AtLeast a write's result", []GetOption{AtLeast(written)}, "41"},
		{"AtLeast nil", []GetOption{AtLeast(nil)}, ""},
		{"AtLeast a gone result that wrote nothing", []GetOption{AtLeast(&Result{Outcome: OutcomeGone})}, ""},
		{"WithMinResourceVersion", []GetOption{WithMinResourceVersion("7")}, "7"},
		{"the last option wins", []GetOption{WithMinResourceVersion("7"), AtLeast(written)}, "41"},
		{"a nil option is ignored", []GetOption{nil, WithMinResourceVersion("9")}, "9"},
	} {
		sent = nil
		got, err := c.Get(context.Background(), ref, tc.opts...)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		want := &safewritev1.GetRequest{Target: target, MinResourceVersion: tc.min}
		if !proto.Equal(sent, want) {
			t.Errorf("%s: sent %v, want %v", tc.name, sent, want)
		}
		if got.ResourceVersion != "42" || !got.Remembered || got.TraceID != "0123" {
			t.Errorf("%s: %+v", tc.name, got)
		}
		if n, _, _ := unstructured.NestedString(got.Object.Object, "data", "n"); n != "1" || got.Object.GetResourceVersion() != "42" {
			t.Errorf("%s: object %v", tc.name, got.Object.Object)
		}
	}
}

// TestGetErrors: a refusal reads as a write's does, with the target, and a read is
// always safe to send again: a deadline met on this side, retryable for a write only
// with an idempotency key, is retryable for a Get.
func TestGetErrors(t *testing.T) {
	notFound, err := status.New(codes.NotFound, `configmaps "cm" not found`).WithDetails(
		protoadapt.MessageV1Of(&errdetails.ErrorInfo{Reason: "NotFound", Domain: Domain}),
		protoadapt.MessageV1Of(&safewritev1.WriteFailure{Reason: safewritev1.Reason_REASON_API_SERVER, TraceId: "abc"}))
	if err != nil {
		t.Fatal(err)
	}
	denied, err := status.New(codes.PermissionDenied, "the policy does not allow get of secrets").WithDetails(
		protoadapt.MessageV1Of(&errdetails.ErrorInfo{Reason: "POLICY_DENIED", Domain: Domain}),
		protoadapt.MessageV1Of(&safewritev1.WriteFailure{Reason: safewritev1.Reason_REASON_POLICY_DENIED}))
	if err != nil {
		t.Fatal(err)
	}
	c := fakeClient(t, &fakeWriter{get: func(ctx context.Context, req *safewritev1.GetRequest) (*safewritev1.GetResponse, error) {
		switch req.GetTarget().GetName() {
		case "missing":
			return nil, notFound.Err()
		case "secret":
			return nil, denied.Err()
		case "slow":
			<-ctx.Done()
			return nil, ctx.Err()
		case "garbled":
			return &safewritev1.GetResponse{ObjectJson: "[]"}, nil
		}
		return nil, status.Error(codes.Internal, "unexpected")
	}})
	ref := func(name string) ObjectRef {
		return ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: name}
	}

	_, err = c.Get(context.Background(), ref("missing"), WithMinResourceVersion("3"))
	var swErr *Error
	if !errors.Is(err, ErrNotFound) || !errors.As(err, &swErr) {
		t.Fatalf("missing: %v, want ErrNotFound", err)
	}
	if swErr.Target != ref("missing") || swErr.Reason != "NotFound" || swErr.ReasonCode != safewritev1.Reason_REASON_API_SERVER ||
		swErr.TraceID != "abc" || !swErr.Idempotent {
		t.Errorf("missing: %+v", swErr)
	}

	_, err = c.Get(context.Background(), ref("secret"))
	if !errors.Is(err, ErrPermissionDenied) || !errors.As(err, &swErr) || swErr.ReasonCode != safewritev1.Reason_REASON_POLICY_DENIED || swErr.Retryable() {
		t.Errorf("secret: %v, want ErrPermissionDenied, POLICY_DENIED, not retryable", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = c.Get(ctx, ref("slow"))
	if !errors.Is(err, ErrDeadlineExceeded) || !errors.Is(err, context.DeadlineExceeded) || !Retryable(err) {
		t.Errorf("slow: %v, want a retryable ErrDeadlineExceeded", err)
	}

	_, err = c.Get(context.Background(), ref("garbled"))
	if !errors.Is(err, ErrInternal) {
		t.Errorf("garbled: %v, want ErrInternal", err)
	}
}

// gotThing is a typed object for a typed Get.
type gotThing struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Data              map[string]string `json:"data,omitempty"`
}

func (g *gotThing) DeepCopyObject() runtime.Object {
	out := *g
	g.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

func TestTypedGet(t *testing.T) {
	var sent *safewritev1.GetRequest
	c := fakeClient(t, &fakeWriter{get: func(_ context.Context, req *safewritev1.GetRequest) (*safewritev1.GetResponse, error) {
		sent = req
		if req.GetTarget().GetName() == "missing" {
			return nil, status.Error(codes.NotFound, "not found")
		}
		return &safewritev1.GetResponse{ObjectJson: gotJSON, ResourceVersion: "42"}, nil
	}})
	scheme := runtime.NewScheme()
	scheme.AddKnownTypeWithName(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, &gotThing{})
	typed := c.Typed(scheme)

	obj := &gotThing{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm"}, Data: map[string]string{"stale": "yes"}}
	got, err := typed.Get(context.Background(), obj, AtLeast(&Result{ResourceVersion: "41"}))
	if err != nil {
		t.Fatal(err)
	}
	want := &safewritev1.GetRequest{Target: &safewritev1.ObjectRef{ApiVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "cm"}, MinResourceVersion: "41"}
	if !proto.Equal(sent, want) {
		t.Errorf("sent %v, want %v", sent, want)
	}
	if got.ResourceVersion != "42" || obj.ResourceVersion != "42" || len(obj.Data) != 1 || obj.Data["n"] != "1" {
		t.Errorf("the object as read: %+v (result %+v)", obj, got)
	}

	missing := &gotThing{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "missing"}, Data: map[string]string{"kept": "yes"}}
	if _, err := typed.Get(context.Background(), missing); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing: %v, want ErrNotFound", err)
	}
	if missing.Data["kept"] != "yes" {
		t.Errorf("a failed Get changed the object: %+v", missing)
	}
}
