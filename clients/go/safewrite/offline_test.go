package safewrite

// Client behaviour that needs no sidecar: dial targets, request building, error
// decoding, and the Transact protocol as seen by a fake in-process WriterService.

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	safewritev1 "safewrite.dev/clients/go/safewrite/v1"
)

func TestNewTargets(t *testing.T) {
	ctx := context.Background()
	t.Setenv(AddressEnv, "")
	for target, want := range map[string]string{
		"":                      DefaultTarget,
		"  ":                    DefaultTarget,
		"127.0.0.1:7000":        "127.0.0.1:7000",
		"unix:///run/sw.sock":   "unix:///run/sw.sock",
		"/run/sw.sock":          "unix:///run/sw.sock",
		"dns:///localhost:5005": "dns:///localhost:5005",
	} {
		c, err := NewClient(target)
		if err != nil {
			t.Fatalf("NewClient(%q): %v", target, err)
		}
		if c.target != want || c.conn.Target() != want {
			t.Errorf("NewClient(%q) dials %q (%q), want %q", target, c.target, c.conn.Target(), want)
		}
		_ = c.Close()
	}
	if DefaultTarget != "127.0.0.1:50051" {
		t.Errorf("DefaultTarget = %q, want the sidecar's default --listen", DefaultTarget)
	}
	// With no target, the address in SAFEWRITE_ADDRESS; an explicit target wins.
	for env, want := range map[string]string{
		"127.0.0.1:7000":         "127.0.0.1:7000",
		"http://127.0.0.1:7000/": "127.0.0.1:7000",
		"unix:///run/sw.sock":    "unix:///run/sw.sock",
		"/run/sw.sock":           "unix:///run/sw.sock",
	} {
		t.Setenv(AddressEnv, env)
		c, err := NewClient("")
		if err != nil {
			t.Fatalf("NewClient with %s=%q: %v", AddressEnv, env, err)
		}
		if c.target != want {
			t.Errorf("NewClient with %s=%q dials %q, want %q", AddressEnv, env, c.target, want)
		}
		_ = c.Close()
	}
	if c, err := NewClient("127.0.0.1:7001"); err != nil || c.target != "127.0.0.1:7001" {
		t.Errorf("an explicit target must win over %s: %v", AddressEnv, err)
	} else {
		_ = c.Close()
	}
	t.Setenv(AddressEnv, "")

	// NewClient does no I/O: nothing listens there, yet it returns a client, whose calls
	// fail with ErrUnavailable.
	c, err := NewClient("unix:///nonexistent/safewrite.sock")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Update(ctx, ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Name: "x"}, CEL("{}")); !errors.Is(err, ErrUnavailable) {
		t.Errorf("a call to nothing: %v, want ErrUnavailable", err)
	}
	_ = c.Close()
	if _, err := NewClient("dns:///bad target\x00"); !errors.Is(err, ErrInvalid) {
		t.Errorf("NewClient of an unusable target: %v, want ErrInvalid", err)
	}

	// WithWaitForReady: a call to nothing waits within its deadline.
	c, err = NewClient("unix:///nonexistent/safewrite.sock", WithWaitForReady())
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := c.Update(short, ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Name: "x"}, CEL("{}")); !errors.Is(err, ErrDeadlineExceeded) {
		t.Errorf("a call to nothing WithWaitForReady: %v, want ErrDeadlineExceeded", err)
	}
	_ = c.Close()
}

// patchText and patchMap are types of a caller's own whose underlying types JSONObject
// admits: MergePatch takes them as JSON text and as a map.
type (
	patchText string
	patchMap  map[string]any
)

// TestMutations covers every form each constructor's type admits. The forms it does
// not admit (a func, a typed object given to MergePatch, a map given to JSONPatch, two
// objects of different types given to MergeFrom) do not compile, so they are not here;
// what the types admit but is still wrong (text that is not JSON, nil, a value that
// does not marshal) fails with ErrInvalid.
func TestMutations(t *testing.T) {
	obj := &unstructured.Unstructured{Object: map[string]any{"data": map[string]any{"a": "b"}}}
	typed := &typedThing{}
	typed.Name = "x"
	for name, tc := range map[string]struct {
		m    Mutation
		want *safewritev1.Mutation
	}{
		"cel":                {CEL("{}"), &safewritev1.Mutation{Kind: &safewritev1.Mutation_Cel{Cel: &safewritev1.CelMutation{Expression: "{}"}}}},
		"merge string":       {MergePatch(` {"a":1} `), &safewritev1.Mutation{Kind: &safewritev1.Mutation_MergePatch{MergePatch: &safewritev1.MergePatch{PatchJson: `{"a":1}`}}}},
		"merge map":          {MergePatch(map[string]any{"a": 1}), &safewritev1.Mutation{Kind: &safewritev1.Mutation_MergePatch{MergePatch: &safewritev1.MergePatch{PatchJson: `{"a":1}`}}}},
		"merge unstructured": {MergePatch(obj), &safewritev1.Mutation{Kind: &safewritev1.Mutation_MergePatch{MergePatch: &safewritev1.MergePatch{PatchJson: `{"data":{"a":"b"}}`}}}},
		"merge raw":          {MergePatch(json.RawMessage(`{}`)), &safewritev1.Mutation{Kind: &safewritev1.Mutation_MergePatch{MergePatch: &safewritev1.MergePatch{PatchJson: `{}`}}}},
		"json patch ops": {JSONPatch([]JSONPatchOp{{Op: "test", Path: "/a", Value: nil}, {Op: "move", From: "/a", Path: "/b"}, {Op: "remove", Path: "/b"}}),
			&safewritev1.Mutation{Kind: &safewritev1.Mutation_JsonPatch{JsonPatch: &safewritev1.JsonPatch{PatchJson: `[{"op":"test","path":"/a","value":null},{"from":"/a","op":"move","path":"/b"},{"op":"remove","path":"/b"}]`}}}},
		"apply":              {Apply([]byte(`{"kind":"ConfigMap"}`), true), &safewritev1.Mutation{Kind: &safewritev1.Mutation_Apply{Apply: &safewritev1.ServerSideApply{ConfigurationJson: `{"kind":"ConfigMap"}`, Force: true}}}},
		"apply unstructured": {Apply(obj, false), &safewritev1.Mutation{Kind: &safewritev1.Mutation_Apply{Apply: &safewritev1.ServerSideApply{ConfigurationJson: `{"data":{"a":"b"}}`}}}},
		"apply object":       {ApplyObject(typed, true), &safewritev1.Mutation{Kind: &safewritev1.Mutation_Apply{Apply: &safewritev1.ServerSideApply{ConfigurationJson: `{"metadata":{"name":"x"},"spec":{"size":0}}`, Force: true}}}},
		"merge object":       {MergePatchObject(typed), &safewritev1.Mutation{Kind: &safewritev1.Mutation_MergePatch{MergePatch: &safewritev1.MergePatch{PatchJson: `{"metadata":{"name":"x"},"spec":{"size":0}}`}}}},
		"merge named text":   {MergePatch(patchText(`{"b":2}`)), &safewritev1.Mutation{Kind: &safewritev1.Mutation_MergePatch{MergePatch: &safewritev1.MergePatch{PatchJson: `{"b":2}`}}}},
		"merge named map":    {MergePatch(patchMap{"c": 3}), &safewritev1.Mutation{Kind: &safewritev1.Mutation_MergePatch{MergePatch: &safewritev1.MergePatch{PatchJson: `{"c":3}`}}}},
		"json patch text":    {JSONPatch(`[{"op":"remove","path":"/a"}]`), &safewritev1.Mutation{Kind: &safewritev1.Mutation_JsonPatch{JsonPatch: &safewritev1.JsonPatch{PatchJson: `[{"op":"remove","path":"/a"}]`}}}},
		"json patch bytes":   {JSONPatch([]byte(`[]`)), &safewritev1.Mutation{Kind: &safewritev1.Mutation_JsonPatch{JsonPatch: &safewritev1.JsonPatch{PatchJson: `[]`}}}},
	} {
		got, err := tc.m.proto()
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if !proto.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", name, got, tc.want)
		}
	}
	for name, m := range map[string]Mutation{
		"zero":                        {},
		"empty cel":                   CEL("  "),
		"merge nil map":               MergePatch(map[string]any(nil)),
		"merge nil bytes":             MergePatch([]byte(nil)),
		"merge nil unstructured":      MergePatch((*unstructured.Unstructured)(nil)),
		"merge array":                 MergePatch("[]"),
		"merge bad json":              MergePatch("{"),
		"merge empty":                 MergePatch(""),
		"merge unmarshals":            MergePatch(map[string]any{"f": func() {}}),
		"merge object nil":            MergePatchObject(nil),
		"merge object nil pointer":    MergePatchObject((*typedThing)(nil)),
		"json patch object text":      JSONPatch(`{}`),
		"json patch nil ops":          JSONPatch([]JSONPatchOp(nil)),
		"json patch value unmarshals": JSONPatch([]JSONPatchOp{{Op: "add", Path: "/a", Value: make(chan int)}}),
		"apply not json":              Apply("x", false),
		"apply object nil":            ApplyObject(nil, true),
		"merge from nil before":       MergeFrom(nil, typed),
		"merge from nil after":        MergeFrom(typed, nil),
	} {
		if _, err := m.proto(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

func TestWriteOptions(t *testing.T) {
	cfg, err := newWriteConfig([]WriteOption{
		WithUID("u-1"),
		WithResourceVersion("41"),
		WithPreconditionCEL("true"),
		WithRetryPolicy(RetryPolicy{MaxAttempts: 7, InitialBackoff: 5 * time.Millisecond, MaxBackoff: time.Second, Requeue: true}),
		WithFieldManager("me"),
		WithDryRun(),
		WithCreateIfMissing(map[string]any{"data": map[string]any{}}),
		WithIdempotencyKey("k-1"),
		WithFence(Fence{LeaseNamespace: "ns", LeaseName: "leader", Epoch: 3}),
		nil,
	})
	if err != nil {
		t.Fatal(err)
	}
	want := &safewritev1.UpdateWithRetryRequest{
		Preconditions: &safewritev1.Preconditions{Uid: "u-1", ResourceVersion: "41", Cel: "true"},
		RetryPolicy: &safewritev1.RetryPolicy{MaxAttempts: 7, InitialBackoff: durationpb.New(5 * time.Millisecond),
			MaxBackoff: durationpb.New(time.Second), Requeue: true},
		Options: &safewritev1.WriteOptions{FieldManager: "me", DryRun: true, CreateIfMissingJson: `{"data":{}}`, IdempotencyKey: "k-1",
			Fence: &safewritev1.Fence{LeaseNamespace: "ns", LeaseName: "leader", Epoch: 3}},
	}
	got := &safewritev1.UpdateWithRetryRequest{Preconditions: cfg.preconditions, RetryPolicy: cfg.retryPolicy, Options: cfg.options}
	if !proto.Equal(got, want) {
		t.Fatalf("%v, want %v", got, want)
	}
	if cfg, _ := newWriteConfig(nil); cfg.preconditions != nil || cfg.retryPolicy != nil || cfg.options != nil {
		t.Fatal("no options still sent some")
	}
	typed := &typedThing{}
	typed.Name = "x"
	for opt, want := range map[*WriteOption]string{
		ptr(WithCreateIfMissing(`{"data":{}}`)):                                                      `{"data":{}}`,
		ptr(WithCreateIfMissing(json.RawMessage(`{}`))):                                              `{}`,
		ptr(WithCreateIfMissingObject(typed)):                                                        `{"metadata":{"name":"x"},"spec":{"size":0}}`,
		ptr(WithCreateIfMissingObject(&unstructured.Unstructured{Object: map[string]any{"a": nil}})): `{"a":null}`,
	} {
		cfg, err := newWriteConfig([]WriteOption{*opt})
		if err != nil || cfg.options.GetCreateIfMissingJson() != want {
			t.Errorf("create-if-missing %s: %v, want %s", cfg.options.GetCreateIfMissingJson(), err, want)
		}
	}
	for _, opt := range []WriteOption{WithRetryPolicy(RetryPolicy{MaxAttempts: -1}), WithCreateIfMissing("[]"),
		WithCreateIfMissing(map[string]any(nil)), WithCreateIfMissingObject(nil), WithCreateIfMissingObject((*typedThing)(nil))} {
		if _, err := newWriteConfig([]WriteOption{opt}); !errors.Is(err, ErrInvalid) {
			t.Errorf("%v, want ErrInvalid", err)
		}
	}
}

// statusWithDetails is a status as the sidecar builds it.
func statusWithDetails(t *testing.T, code codes.Code, current string) *status.Status {
	t.Helper()
	st, err := status.New(code, "nope").WithDetails(
		protoadapt.MessageV1Of(&errdetails.ErrorInfo{Reason: "PRECONDITION_FAILED", Domain: Domain, Metadata: map[string]string{"attempts": "2"}}),
		protoadapt.MessageV1Of(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "metadata.uid", Description: "x"}}}),
		protoadapt.MessageV1Of(&errdetails.RetryInfo{RetryDelay: durationpb.New(1500 * time.Millisecond)}),
		protoadapt.MessageV1Of(&safewritev1.WriteFailure{
			AttemptRecords: []*safewritev1.AttemptRecord{
				{Number: 1, ResourceVersionRead: "40", HttpStatus: 409, Reason: "Conflict", Backoff: durationpb.New(250 * time.Millisecond)},
				{Number: 2, ResourceVersionRead: "41"},
			},
			CurrentObjectJson: current,
			TraceId:           "abc",
		}),
	)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestErrorDecoding(t *testing.T) {
	st := statusWithDetails(t, codes.FailedPrecondition, `{"metadata": {"name": "cm"}, "spec": {"replicas": 3}}`)
	err := FromError(st.Err())
	var swErr *Error
	if !errors.As(err, &swErr) {
		t.Fatalf("%T is not an *Error", err)
	}
	if !errors.Is(err, ErrPreconditionFailed) || errors.Is(err, ErrConflict) {
		t.Fatalf("%v matches the wrong sentinels", err)
	}
	if swErr.Code != codes.FailedPrecondition || swErr.Message != "nope" || swErr.Reason != "PRECONDITION_FAILED" ||
		swErr.Domain != Domain || swErr.Metadata["attempts"] != "2" || swErr.TraceID != "abc" {
		t.Fatalf("decoded %+v", swErr)
	}
	if len(swErr.FieldViolations) != 1 || swErr.FieldViolations[0] != (FieldViolation{Field: "metadata.uid", Description: "x"}) {
		t.Fatalf("field violations %+v", swErr.FieldViolations)
	}
	if delay, ok := swErr.RetryDelay(); !ok || delay != 1500*time.Millisecond {
		t.Fatalf("retry delay %v (given: %v)", delay, ok)
	}
	if swErr.Attempts != 2 || swErr.AttemptRecords[0] != (AttemptRecord{Number: 1, ResourceVersionRead: "40", HTTPStatus: 409, Reason: "Conflict", Backoff: 250 * time.Millisecond}) {
		t.Fatalf("attempts %d %+v", swErr.Attempts, swErr.AttemptRecords)
	}
	if swErr.CurrentObject.GetName() != "cm" {
		t.Fatalf("current object %v", swErr.CurrentObject)
	}
	// Integral numbers decode as int64, as the unstructured helpers expect.
	if replicas, found, err := unstructured.NestedInt64(swErr.CurrentObject.Object, "spec", "replicas"); !found || err != nil || replicas != 3 {
		t.Fatalf("spec.replicas: %v %v %v", replicas, found, err)
	}
	if got := err.Error(); got != "safewrite: FailedPrecondition (PRECONDITION_FAILED): nope" {
		t.Fatalf("Error() = %q", got)
	}
	if status.Code(err) != codes.FailedPrecondition || !proto.Equal(status.Convert(err).Proto(), st.Proto()) {
		t.Fatal("the gRPC status is not kept")
	}
	wrapped := errors.Join(errors.New("reconcile"), err)
	if FromError(wrapped) != wrapped || !errors.Is(wrapped, ErrPreconditionFailed) {
		t.Fatal("a wrapped *Error is not kept")
	}
	if FromError(nil) != nil {
		t.Fatal("FromError(nil) != nil")
	}
}

func TestSentinels(t *testing.T) {
	all := []error{ErrConflict, ErrInvalid, ErrPreconditionFailed, ErrUnavailable, ErrResourceExhausted,
		ErrPermissionDenied, ErrUnauthenticated, ErrNotFound, ErrDeadlineExceeded, ErrCanceled, ErrOutcomeUnknown, ErrInternal, ErrUnimplemented}
	for code, want := range map[codes.Code]error{
		codes.Aborted:            ErrConflict,
		codes.InvalidArgument:    ErrInvalid,
		codes.OutOfRange:         ErrInvalid,
		codes.FailedPrecondition: ErrPreconditionFailed,
		codes.Unavailable:        ErrUnavailable,
		codes.ResourceExhausted:  ErrResourceExhausted,
		codes.PermissionDenied:   ErrPermissionDenied,
		codes.Unauthenticated:    ErrUnauthenticated,
		codes.NotFound:           ErrNotFound,
		codes.DeadlineExceeded:   ErrDeadlineExceeded,
		codes.Canceled:           ErrCanceled,
		codes.Internal:           ErrInternal,
		codes.Unknown:            ErrInternal,
		codes.DataLoss:           ErrInternal,
		codes.Unimplemented:      ErrUnimplemented,
	} {
		err := FromError(status.Error(code, "x"))
		for _, sentinel := range all {
			if got := errors.Is(err, sentinel); got != (sentinel == want) {
				t.Errorf("%v: errors.Is(%v) = %v", code, sentinel, got)
			}
		}
		if got := errors.Is(err, context.DeadlineExceeded); got != (code == codes.DeadlineExceeded) {
			t.Errorf("%v: errors.Is(context.DeadlineExceeded) = %v", code, got)
		}
		if got := errors.Is(err, context.Canceled); got != (code == codes.Canceled) {
			t.Errorf("%v: errors.Is(context.Canceled) = %v", code, got)
		}
	}
	unknown, err := status.New(codes.Unknown, "lost").WithDetails(
		protoadapt.MessageV1Of(&errdetails.ErrorInfo{Reason: "WRITE_OUTCOME_UNKNOWN", Domain: Domain}))
	if err != nil {
		t.Fatal(err)
	}
	if err := FromError(unknown.Err()); !errors.Is(err, ErrOutcomeUnknown) || errors.Is(err, ErrInternal) {
		t.Errorf("UNKNOWN with reason WRITE_OUTCOME_UNKNOWN: %v", err)
	}
	if err := FromError(context.DeadlineExceeded); !errors.Is(err, ErrDeadlineExceeded) {
		t.Errorf("a context error: %v", err)
	}
	if err := FromError(io.ErrUnexpectedEOF); !errors.Is(err, ErrInternal) {
		t.Errorf("a plain error: %v", err)
	}
}

// fakeWriter is an in-process WriterService whose Transact runs script, whose
// UpdateWithRetry, when update is set, answers with update's error, and whose Get,
// when get is set, answers as get does.
type fakeWriter struct {
	safewritev1.UnimplementedWriterServiceServer
	script func(stream grpc.BidiStreamingServer[safewritev1.TransactRequest, safewritev1.TransactResponse]) error
	update func(*safewritev1.UpdateWithRetryRequest) error
	get    func(context.Context, *safewritev1.GetRequest) (*safewritev1.GetResponse, error)
}

func (f *fakeWriter) Get(ctx context.Context, req *safewritev1.GetRequest) (*safewritev1.GetResponse, error) {
	if f.get == nil {
		return f.UnimplementedWriterServiceServer.Get(ctx, req)
	}
	return f.get(ctx, req)
}

func (f *fakeWriter) Transact(stream grpc.BidiStreamingServer[safewritev1.TransactRequest, safewritev1.TransactResponse]) error {
	return f.script(stream)
}

func (f *fakeWriter) UpdateWithRetry(ctx context.Context, req *safewritev1.UpdateWithRetryRequest) (*safewritev1.UpdateWithRetryResponse, error) {
	if f.update == nil {
		return f.UnimplementedWriterServiceServer.UpdateWithRetry(ctx, req)
	}
	return nil, f.update(req)
}

// TestLostAnswerIsRetryableOnlyWithAKey checks that every call path tells its error
// whether the call carried an idempotency key: a write whose answer was lost may be
// sent again only then.
func TestLostAnswerIsRetryableOnlyWithAKey(t *testing.T) {
	lost := func() error {
		st, err := status.New(codes.Unknown, "answer lost").WithDetails(
			protoadapt.MessageV1Of(&errdetails.ErrorInfo{Reason: "WRITE_OUTCOME_UNKNOWN", Domain: Domain}),
			protoadapt.MessageV1Of(&safewritev1.WriteFailure{Reason: safewritev1.Reason_REASON_WRITE_OUTCOME_UNKNOWN}))
		if err != nil {
			t.Fatal(err)
		}
		return st.Err()
	}
	c := fakeClient(t, &fakeWriter{
		script: func(stream grpc.BidiStreamingServer[safewritev1.TransactRequest, safewritev1.TransactResponse]) error {
			if _, err := stream.Recv(); err != nil {
				return err
			}
			return lost()
		},
		update: func(*safewritev1.UpdateWithRetryRequest) error { return lost() },
	})
	ref := ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "cm"}
	fn := func(*unstructured.Unstructured) error { return nil }
	for _, tc := range []struct {
		opts      []WriteOption
		retryable bool
	}{{nil, false}, {[]WriteOption{WithIdempotencyKey("k-1")}, true}} {
		_, updateErr := c.Update(context.Background(), ref, CEL("{}"), tc.opts...)
		_, transactErr := c.Transact(context.Background(), ref, fn, tc.opts...)
		for name, err := range map[string]error{"Update": updateErr, "Transact": transactErr} {
			var swErr *Error
			if !errors.Is(err, ErrOutcomeUnknown) || !errors.As(err, &swErr) {
				t.Fatalf("%s: %v, want ErrOutcomeUnknown", name, err)
			}
			if swErr.Idempotent != tc.retryable || swErr.Retryable() != tc.retryable || Retryable(err) != tc.retryable {
				t.Errorf("%s with %d option(s): Idempotent %v, Retryable %v; want %v", name, len(tc.opts), swErr.Idempotent, swErr.Retryable(), tc.retryable)
			}
		}
	}
}

func fakeClient(t *testing.T, fake safewritev1.WriterServiceServer) *Client {
	t.Helper()
	listener := bufconn.Listen(1 << 20)
	server := grpc.NewServer()
	safewritev1.RegisterWriterServiceServer(server, fake)
	go func() { _ = server.Serve(listener) }()
	t.Cleanup(server.Stop)
	c, err := NewClient("passthrough:///fake",
		WithGRPCDialOptions(grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return listener.DialContext(ctx)
		})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func fresh(attempt uint32, object string) *safewritev1.TransactResponse {
	return &safewritev1.TransactResponse{Message: &safewritev1.TransactResponse_Fresh{Fresh: &safewritev1.FreshObject{
		Attempt: attempt, ObjectJson: object, ResourceVersion: "1",
	}}}
}

func TestTransactProtocol(t *testing.T) {
	ref := ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "cm"}
	received := make(chan *safewritev1.TransactRequest, 10)
	fake := &fakeWriter{script: func(stream grpc.BidiStreamingServer[safewritev1.TransactRequest, safewritev1.TransactResponse]) error {
		for attempt := uint32(1); ; attempt++ {
			req, err := stream.Recv()
			if err != nil {
				return err
			}
			received <- req
			if p := req.GetProposal(); p != nil {
				if p.GetAttempt() != attempt-1 {
					return status.Errorf(codes.InvalidArgument, "attempt %d, want %d", p.GetAttempt(), attempt-1)
				}
				if p.GetAbort() != nil || attempt == 3 {
					outcome := safewritev1.Outcome_OUTCOME_UPDATED
					if p.GetAbort() != nil {
						outcome = safewritev1.Outcome_OUTCOME_ABORTED
					}
					return stream.Send(&safewritev1.TransactResponse{Message: &safewritev1.TransactResponse_Result{Result: &safewritev1.WriteResult{
						Outcome: outcome, ObjectJson: p.GetObjectJson(), ResourceVersion: "3", Attempts: attempt - 1,
					}}})
				}
			}
			if err := stream.Send(fresh(attempt, `{"data": {"n": "1"}}`)); err != nil {
				return err
			}
		}
	}}
	c := fakeClient(t, fake)

	// Two attempts (the fake conflicts once): the function runs on each fresh object.
	calls := 0
	res, err := c.Transact(context.Background(), ref, func(obj *unstructured.Unstructured) error {
		calls++
		obj.Object["data"] = map[string]any{"n": "2"}
		return nil
	}, WithFieldManager("me"))
	if err != nil {
		t.Fatal(err)
	}
	if calls != 2 || res.Outcome != OutcomeUpdated || res.Attempts != 2 || res.ResourceVersion != "3" {
		t.Fatalf("%d call(s), result %+v", calls, res)
	}
	begin := (<-received).GetBegin()
	if begin.GetTarget().GetName() != "cm" || begin.GetStatus() || begin.GetOptions().GetFieldManager() != "me" {
		t.Fatalf("begin %v", begin)
	}
	for i := 0; i < 2; i++ {
		if p := (<-received).GetProposal(); p.GetObjectJson() != `{"data":{"n":"2"}}` {
			t.Fatalf("proposal %v", p)
		}
	}

	// An error wrapping ErrAbort aborts, its text the reason; any other error is returned.
	res, err = c.TransactStatus(context.Background(), ref, func(*unstructured.Unstructured) error {
		return errors.Join(ErrAbort, errors.New("already done"))
	})
	if err != nil || res.Outcome != OutcomeAborted {
		t.Fatalf("%v, %v", res, err)
	}
	if !(<-received).GetBegin().GetStatus() {
		t.Fatal("TransactStatus did not ask for the status subresource")
	}
	if reason := (<-received).GetProposal().GetAbort().GetReason(); !strings.Contains(reason, "already done") {
		t.Fatalf("abort reason %q", reason)
	}
	mine := errors.New("mine")
	if _, err := c.Transact(context.Background(), ref, func(*unstructured.Unstructured) error { return mine }); err != mine {
		t.Fatalf("%v, want the function's error", err)
	}
	<-received
	if reason := (<-received).GetProposal().GetAbort().GetReason(); reason != "mine" {
		t.Fatalf("abort reason %q", reason)
	}
	if _, err := c.Transact(context.Background(), ref, nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a nil function: %v", err)
	}
}

func TestTransactStreamEndsWithoutResult(t *testing.T) {
	c := fakeClient(t, &fakeWriter{script: func(stream grpc.BidiStreamingServer[safewritev1.TransactRequest, safewritev1.TransactResponse]) error {
		if _, err := stream.Recv(); err != nil {
			return err
		}
		return stream.Send(fresh(1, `[1]`)) // not an object, then the stream ends
	}})
	ref := ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "cm"}
	_, err := c.Transact(context.Background(), ref, func(*unstructured.Unstructured) error {
		t.Error("the function ran on a fresh object that is no object")
		return nil
	})
	if !errors.Is(err, ErrInternal) {
		t.Fatalf("%v, want ErrInternal", err)
	}
}

func TestDefaultTimeout(t *testing.T) {
	c := fakeClient(t, &fakeWriter{script: func(stream grpc.BidiStreamingServer[safewritev1.TransactRequest, safewritev1.TransactResponse]) error {
		<-stream.Context().Done()
		return stream.Context().Err()
	}})
	c.timeout = 100 * time.Millisecond
	ref := ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "cm"}
	began := time.Now()
	_, err := c.Transact(context.Background(), ref, func(*unstructured.Unstructured) error { return nil })
	if !errors.Is(err, ErrDeadlineExceeded) || time.Since(began) > 5*time.Second {
		t.Fatalf("%v after %v, want ErrDeadlineExceeded after 100ms", err, time.Since(began))
	}
}
