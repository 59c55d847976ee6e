package safewrite_test

// The shared conformance cases of every client library (../../conformance/cases.json;
// its README says how a case runs), one subtest per case against the real sidecar, and
// its skew cases, sent through the client, which must refuse them before sending when
// the sidecar lacks their feature (TestConformanceSkew).
// Requests are the proto3 JSON of the RPC's request and are sent as they are through
// the generated stub, but for a get, which goes through Client.Get with the request's
// target and minimum; answers are read through this package (FromError and the
// decoding of objects), the way a caller reads them. The file's retry advice table is
// checked without a sidecar, through a client's calls to a fake WriterService that
// fails each call as the sidecar would.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"safewrite.dev/clients/go/safewrite"
	safewritev1 "safewrite.dev/clients/go/safewrite/v1"
)

type conformanceCase struct {
	Name  string            `json:"name"`
	Steps []conformanceStep `json:"steps"`
}

type conformanceStep struct {
	Call      string            `json:"call"`
	Request   json.RawMessage   `json:"request"`
	Begin     json.RawMessage   `json:"begin"`
	Proposals []json.RawMessage `json:"proposals"`
	Expect    struct {
		Outcome            string         `json:"outcome"`
		AlreadyApplied     *bool          `json:"already_applied"`
		Remembered         *bool          `json:"remembered"`
		Object             map[string]any `json:"object"`
		Code               string         `json:"code"`
		Reason             string         `json:"reason"`
		WriteFailureReason string         `json:"write_failure_reason"`
		FieldViolations    []string       `json:"field_violations"`
		CurrentObject      map[string]any `json:"current_object"`
	} `json:"expect"`
}

// beginMessage is a transact step's TransactBegin: its `begin`, which the README names,
// or else its `request`, which some cases use for it as for the unary calls.
func (s conformanceStep) beginMessage() json.RawMessage {
	if len(s.Begin) > 0 {
		return s.Begin
	}
	return s.Request
}

// adviceRow is a row of cases.json's "advice": whether a failure with this Reason and
// gRPC code is retryable, without and with an idempotency key.
type adviceRow struct {
	Reason           string     `json:"reason"`
	Code             codes.Code `json:"code"` // e.g. "DEADLINE_EXCEEDED"
	Retryable        bool       `json:"retryable"`
	RetryableWithKey bool       `json:"retryable_with_key"`
}

type conformanceFile struct {
	Cases  []conformanceCase `json:"cases"`
	Advice struct {
		Cases []adviceRow `json:"cases"`
	} `json:"advice"`
	Skew struct {
		Cases []skewCase `json:"cases"`
	} `json:"skew"`
}

// skewCase is a case of cases.json's "skew": a call that needs feature, which a
// sidecar before since lacks.
type skewCase struct {
	Name    string          `json:"name"`
	Feature string          `json:"feature"`
	Since   string          `json:"since"`
	Call    string          `json:"call"`
	Request json.RawMessage `json:"request"`
	// ExpectWhenPresent is what the call meets when the sidecar has feature, as a
	// step's expect.
	ExpectWhenPresent json.RawMessage `json:"expect_when_present"`
}

// loadConformanceFile reads cases.json.
func loadConformanceFile(t *testing.T) conformanceFile {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "conformance", "cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	var file conformanceFile
	if err := json.Unmarshal(data, &file); err != nil {
		t.Fatalf("cases.json: %v", err)
	}
	return file
}

// loadConformanceCases reads the cases of cases.json.
func loadConformanceCases(t *testing.T, ns string) []conformanceCase {
	t.Helper()
	cases := loadConformanceFile(t).Cases
	if len(cases) == 0 {
		t.Fatal("cases.json has no case")
	}
	return cases
}

// stepVars are what $NS, $NAME and $RV stand for in a step's strings: the namespace,
// the case's object name, and the resourceVersion the step before answered with.
type stepVars struct{ ns, name, rv string }

// substitute replaces $NS, $NAME and $RV in every string of a JSON document.
func substitute(t *testing.T, raw json.RawMessage, v stepVars) []byte {
	t.Helper()
	replacer := strings.NewReplacer("$NS", v.ns, "$NAME", v.name, "$RV", v.rv)
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	var walk func(any) any
	walk = func(v any) any {
		switch x := v.(type) {
		case string:
			return replacer.Replace(x)
		case map[string]any:
			for k, e := range x {
				x[k] = walk(e)
			}
		case []any:
			for i, e := range x {
				x[i] = walk(e)
			}
		}
		return v
	}
	out, err := json.Marshal(walk(doc))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func protoFromJSON(t *testing.T, data []byte, m proto.Message) {
	t.Helper()
	if err := protojson.Unmarshal(data, m); err != nil {
		t.Fatalf("%T from %s: %v", m, data, err)
	}
}

func TestConformance(t *testing.T) {
	c := newClient(t)
	ns := namespace(t)
	stub := c.Stub()
	var mu sync.Mutex
	matrix := map[string]string{}
	t.Cleanup(func() {
		names := make([]string, 0, len(matrix))
		for name := range matrix {
			names = append(names, name)
		}
		sort.Strings(names)
		var b strings.Builder
		passed := 0
		for _, name := range names {
			fmt.Fprintf(&b, "  %-40s %s\n", name, matrix[name])
			if matrix[name] == "PASS" {
				passed++
			}
		}
		t.Logf("conformance matrix (go): %d/%d passed\n%s", passed, len(names), b.String())
	})

	for i, tc := range loadConformanceCases(t, ns) {
		t.Run(tc.Name, func(t *testing.T) {
			t.Parallel()
			defer func() {
				mu.Lock()
				defer mu.Unlock()
				matrix[tc.Name] = map[bool]string{true: "FAIL", false: "PASS"}[t.Failed()]
			}()
			name := fmt.Sprintf("conf-go-%d-%s", i, newName(t)[3:])
			if len(name) > 63 {
				name = name[:63]
			}
			name = strings.TrimRight(name, "-")
			vars := stepVars{ns: ns, name: name}
			for s, step := range tc.Steps {
				ctx := testContext(t)
				var answer *stepAnswer
				var err error
				switch step.Call {
				case "update":
					req := &safewritev1.UpdateWithRetryRequest{}
					protoFromJSON(t, substitute(t, step.Request, vars), req)
					var resp *safewritev1.UpdateWithRetryResponse
					if resp, err = stub.UpdateWithRetry(ctx, req); err == nil {
						answer = writeAnswer(resp.GetResult())
					}
				case "patch_status":
					req := &safewritev1.PatchStatusRequest{}
					protoFromJSON(t, substitute(t, step.Request, vars), req)
					var resp *safewritev1.PatchStatusResponse
					if resp, err = stub.PatchStatus(ctx, req); err == nil {
						answer = writeAnswer(resp.GetResult())
					}
				case "transact":
					var res *safewritev1.WriteResult
					if res, err = conformanceTransact(t, stub, step, vars); err == nil {
						answer = writeAnswer(res)
					}
				case "get":
					req := &safewritev1.GetRequest{}
					protoFromJSON(t, substitute(t, step.Request, vars), req)
					var got *safewrite.GetResult
					if got, err = conformanceGet(ctx, c, req); err == nil {
						answer = getAnswer(got)
					}
				default:
					t.Fatalf("step %d: unknown call %q", s+1, step.Call)
				}
				checkConformanceStep(t, s+1, step, answer, err)
				vars.rv = answer.rv()
			}
		})
	}
}

// stepAnswer is what a step that succeeded answered, as the cases check it.
type stepAnswer struct {
	outcome         string // the Outcome's enum name; empty for a get
	alreadyApplied  bool
	remembered      bool // a get's
	objectJSON      string
	resourceVersion string
}

// rv is the answer's resourceVersion, or empty for no answer (the step failed): what
// $RV stands for in the next step.
func (a *stepAnswer) rv() string {
	if a == nil {
		return ""
	}
	return a.resourceVersion
}

func writeAnswer(r *safewritev1.WriteResult) *stepAnswer {
	return &stepAnswer{
		outcome:         r.GetOutcome().String(),
		alreadyApplied:  r.GetAlreadyApplied(),
		objectJSON:      r.GetObjectJson(),
		resourceVersion: r.GetResourceVersion(),
	}
}

func getAnswer(got *safewrite.GetResult) *stepAnswer {
	return &stepAnswer{
		remembered:      got.Remembered,
		objectJSON:      mustJSON(got.Object.Object),
		resourceVersion: got.ResourceVersion,
	}
}

// conformanceGet sends a get step's request through the client: Client.Get of its
// target with its minimum.
func conformanceGet(ctx context.Context, c *safewrite.Client, req *safewritev1.GetRequest) (*safewrite.GetResult, error) {
	return c.Get(ctx, refOf(req.GetTarget()), safewrite.WithMinResourceVersion(req.GetMinResourceVersion()))
}

// refOf is the ObjectRef of a request's target.
func refOf(target *safewritev1.ObjectRef) safewrite.ObjectRef {
	return safewrite.ObjectRef{APIVersion: target.GetApiVersion(), Kind: target.GetKind(),
		Namespace: target.GetNamespace(), Name: target.GetName()}
}

// conformanceTransact runs a transact step: begin, then one proposal per fresh object.
func conformanceTransact(t *testing.T, stub safewritev1.WriterServiceClient, step conformanceStep, vars stepVars) (*safewritev1.WriteResult, error) {
	t.Helper()
	ctx := testContext(t)
	stream, err := stub.Transact(ctx)
	if err != nil {
		return nil, err
	}
	begin := &safewritev1.TransactBegin{}
	protoFromJSON(t, substitute(t, step.beginMessage(), vars), begin)
	if err := stream.Send(&safewritev1.TransactRequest{Message: &safewritev1.TransactRequest_Begin{Begin: begin}}); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	next := 0
	for {
		resp, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				t.Fatal("the stream ended without a result")
			}
			return nil, err
		}
		switch msg := resp.GetMessage().(type) {
		case *safewritev1.TransactResponse_Result:
			return msg.Result, nil
		case *safewritev1.TransactResponse_Fresh:
			if next >= len(step.Proposals) {
				t.Fatalf("fresh object %d, but the case has %d proposal(s)", msg.Fresh.GetAttempt(), len(step.Proposals))
			}
			proposal := &safewritev1.TransactProposal{}
			protoFromJSON(t, substitute(t, step.Proposals[next], vars), proposal)
			if proposal.Attempt == 0 {
				proposal.Attempt = msg.Fresh.GetAttempt()
			}
			next++
			if err := stream.Send(&safewritev1.TransactRequest{Message: &safewritev1.TransactRequest_Proposal{Proposal: proposal}}); err != nil && !errors.Is(err, io.EOF) {
				return nil, err
			}
			if next == len(step.Proposals) {
				_ = stream.CloseSend()
			}
		}
	}
}

func checkConformanceStep(t *testing.T, n int, step conformanceStep, answer *stepAnswer, err error) {
	t.Helper()
	want := step.Expect
	if want.Code == "" {
		if err != nil {
			t.Fatalf("step %d: %v; want success (outcome %q)", n, err, want.Outcome)
		}
		if answer.outcome != want.Outcome {
			t.Fatalf("step %d: outcome %q, want %q", n, answer.outcome, want.Outcome)
		}
		if want.AlreadyApplied != nil && answer.alreadyApplied != *want.AlreadyApplied {
			t.Fatalf("step %d: already_applied %v, want %v", n, answer.alreadyApplied, *want.AlreadyApplied)
		}
		if want.Remembered != nil && answer.remembered != *want.Remembered {
			t.Fatalf("step %d: remembered %v, want %v", n, answer.remembered, *want.Remembered)
		}
		if want.Object != nil {
			obj := &unstructured.Unstructured{}
			if err := obj.UnmarshalJSON([]byte(answer.objectJSON)); err != nil {
				t.Fatalf("step %d: the object: %v", n, err)
			}
			if path, ok := subset(want.Object, obj.Object); !ok {
				t.Fatalf("step %d: object %s does not have %s (at %s)", n, answer.objectJSON, mustJSON(want.Object), path)
			}
		}
		return
	}
	if err == nil {
		t.Fatalf("step %d: succeeded (outcome %q); want %s (%s)", n, answer.outcome, want.Code, want.Reason)
	}
	swErr := asError(t, safewrite.FromError(err))
	if got := codeName(swErr); got != want.Code {
		t.Fatalf("step %d: code %s, want %s (%v)", n, got, want.Code, err)
	}
	if swErr.Reason != want.Reason || swErr.Domain != safewrite.Domain {
		t.Fatalf("step %d: reason %q (domain %q), want %q", n, swErr.Reason, swErr.Domain, want.Reason)
	}
	if want.WriteFailureReason != "" && swErr.ReasonCode.String() != want.WriteFailureReason {
		t.Fatalf("step %d: WriteFailure.reason %s, want %s", n, swErr.ReasonCode, want.WriteFailureReason)
	}
	if want.FieldViolations != nil {
		var fields []string
		for _, v := range swErr.FieldViolations {
			fields = append(fields, v.Field)
		}
		if !reflect.DeepEqual(fields, want.FieldViolations) {
			t.Fatalf("step %d: field violations %v, want %v", n, fields, want.FieldViolations)
		}
	}
	if want.CurrentObject != nil {
		if swErr.CurrentObject == nil {
			t.Fatalf("step %d: no current object; want %s", n, mustJSON(want.CurrentObject))
		}
		if path, ok := subset(want.CurrentObject, swErr.CurrentObject.Object); !ok {
			t.Fatalf("step %d: current object %s does not have %s (at %s)", n, mustJSON(swErr.CurrentObject.Object), mustJSON(want.CurrentObject), path)
		}
	}
}

// codeName is the gRPC code's proto name (NOT_FOUND), as the cases spell it.
func codeName(e *safewrite.Error) string {
	name := strings.ToUpper(e.Code.String()) // "NotFound" -> "NOTFOUND"
	for _, known := range []string{"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
		"ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
		"UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"} {
		if strings.ReplaceAll(known, "_", "") == name || (known == "CANCELLED" && name == "CANCELED") {
			return known
		}
	}
	return name
}

// subset reports whether got has every field of want with its value: maps compared as
// subsets, everything else by equality of its JSON form, so a list must hold exactly
// the entries want lists, in its order, each entry whole (TestConformanceSubset); path
// says where not.
func subset(want, got any) (string, bool) {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return "", false
		}
		for key, value := range w {
			if path, ok := subset(value, g[key]); !ok {
				return "." + key + path, false
			}
		}
		return "", true
	default:
		return "", mustJSON(want) == mustJSON(got)
	}
}

// TestConformanceAdvice checks every row of cases.json's retry advice through this
// client's own path for a failed call: a fake WriterService fails an Update with the
// status the sidecar sends for the row's reason and code (an ErrorInfo of domain
// safewrite.dev whose reason is the Reason's name without REASON_, and a WriteFailure
// with the Reason; no details at all for REASON_UNSPECIFIED, as when the sidecar was
// not reached), and the client's error must be Retryable as the row says, for the call
// without and with WithIdempotencyKey. Every value of the generated Reason enum must
// have a row. No sidecar is needed.
func TestConformanceAdvice(t *testing.T) {
	rows := loadConformanceFile(t).Advice.Cases
	covered := map[string]bool{}
	for _, row := range rows {
		covered[row.Reason] = true
	}
	for _, name := range safewritev1.Reason_name {
		if !covered[name] {
			t.Errorf("cases.json's advice has no row for %s", name)
		}
	}

	failures := map[string]*status.Status{} // by the target's name
	for i, row := range rows {
		value, ok := safewritev1.Reason_value[row.Reason]
		if !ok {
			t.Fatalf("advice row %d: %s is not a value of this client's Reason enum (regenerate safewrite/v1)", i+1, row.Reason)
		}
		st := status.New(row.Code, "advice row")
		if reason := safewrite.Reason(value); reason != safewritev1.Reason_REASON_UNSPECIFIED {
			var err error
			st, err = st.WithDetails(
				protoadapt.MessageV1Of(&errdetails.ErrorInfo{Reason: strings.TrimPrefix(row.Reason, "REASON_"), Domain: safewrite.Domain}),
				protoadapt.MessageV1Of(&safewritev1.WriteFailure{Reason: reason}))
			if err != nil {
				t.Fatal(err)
			}
		}
		failures[fmt.Sprintf("row-%d", i+1)] = st
	}
	c := failingSidecar(t, func(req *safewritev1.UpdateWithRetryRequest) error {
		return failures[req.GetTarget().GetName()].Err()
	})

	passed := 0
	for i, row := range rows {
		ref := safewrite.ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: "advice", Name: fmt.Sprintf("row-%d", i+1)}
		ok := true
		for _, call := range []struct {
			opts []safewrite.WriteOption
			want bool
		}{{nil, row.Retryable}, {[]safewrite.WriteOption{safewrite.WithIdempotencyKey("advice-key")}, row.RetryableWithKey}} {
			_, err := c.Update(testContext(t), ref, safewrite.MergePatch(`{}`), call.opts...)
			swErr := asError(t, err)
			if swErr.Code != row.Code || swErr.ReasonCode.String() != row.Reason {
				t.Errorf("advice row %d (%s, %s): decoded as %s, %s", i+1, row.Reason, codeName(swErr), swErr.ReasonCode, codeName(swErr))
				ok = false
			}
			if got := swErr.Retryable(); got != call.want || safewrite.Retryable(err) != call.want {
				t.Errorf("advice row %d (%s, %s), idempotency key %v: Retryable() = %v, want %v", i+1, row.Reason, codeName(swErr), swErr.Idempotent, got, call.want)
				ok = false
			}
		}
		if ok {
			passed++
		}
	}
	t.Logf("conformance advice (go): %d/%d rows passed", passed, len(rows))
}

// adviceWriter is a WriterService whose UpdateWithRetry always fails with fail's error.
type adviceWriter struct {
	safewritev1.UnimplementedWriterServiceServer
	fail func(*safewritev1.UpdateWithRetryRequest) error
}

func (w *adviceWriter) UpdateWithRetry(_ context.Context, req *safewritev1.UpdateWithRetryRequest) (*safewritev1.UpdateWithRetryResponse, error) {
	return nil, w.fail(req)
}

// failingSidecar returns a client of an in-process WriterService (over an in-memory
// connection) whose UpdateWithRetry fails with fail's error.
func failingSidecar(t *testing.T, fail func(*safewritev1.UpdateWithRetryRequest) error) *safewrite.Client {
	t.Helper()
	return fakeSidecar(t, &adviceWriter{fail: fail})
}

// fakeSidecar returns a client of srv, an in-process WriterService, over an in-memory
// connection.
func fakeSidecar(t *testing.T, srv safewritev1.WriterServiceServer) *safewrite.Client {
	t.Helper()
	listener := bufconn.Listen(1 << 20)
	server := grpc.NewServer()
	safewritev1.RegisterWriterServiceServer(server, srv)
	go func() { _ = server.Serve(listener) }()
	t.Cleanup(server.Stop)
	conn, err := grpc.NewClient("passthrough:///advice",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return listener.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return fromConn(t, conn)
}

// TestConformanceSkew runs cases.json's skew cases against the real sidecar, whatever
// its version: the runner asks its Capabilities itself (UNIMPLEMENTED: older than
// 0.2.0, which has only what has no since option), and sends each case's call through
// the client. When the sidecar lacks the case's feature the call must fail as the
// client's own refusal, before anything is sent (FAILED_PRECONDITION, UNKNOWN_FIELD, a
// message naming the feature, the sidecar's version and the case's since, and the
// feature in the ErrorInfo metadata, which the sidecar's own refusal does not carry);
// else it must meet expect_when_present.
func TestConformanceSkew(t *testing.T) {
	cases := loadConformanceFile(t).Skew.Cases
	if len(cases) == 0 {
		t.Fatal("cases.json has no skew case")
	}
	c := newClient(t)
	ns := namespace(t)
	has := map[string]bool{}
	sidecar := "older than 0.2.0"
	caps, err := c.Stub().Capabilities(testContext(t), &safewritev1.CapabilitiesRequest{})
	switch {
	case err == nil:
		sidecar = caps.GetVersion()
		for _, names := range [][]string{caps.GetMethods(), caps.GetFields(), caps.GetEnumValues()} {
			for _, name := range names {
				has[name] = true
			}
		}
	case status.Code(err) == codes.Unimplemented:
	default:
		t.Fatalf("Capabilities: %v", err)
	}
	t.Logf("the sidecar is %s", sidecar)
	passed := 0
	for i, tc := range cases {
		ok := t.Run(tc.Name, func(t *testing.T) {
			name := fmt.Sprintf("skew-go-%d-%s", i, newName(t)[3:])
			if len(name) > 50 {
				name = name[:50]
			}
			vars := stepVars{ns: ns, name: strings.TrimRight(name, "-")}
			answer, err := skewCall(t, c, tc, substitute(t, tc.Request, vars))
			if has[tc.Feature] {
				var step conformanceStep
				if err := json.Unmarshal(tc.ExpectWhenPresent, &step.Expect); err != nil {
					t.Fatal(err)
				}
				checkConformanceStep(t, 1, step, answer, err)
				return
			}
			if err == nil {
				t.Fatalf("%s was sent to a sidecar without %s (%s); want the client's refusal", tc.Call, tc.Feature, sidecar)
			}
			swErr := asError(t, err)
			if codeName(swErr) != "FAILED_PRECONDITION" || swErr.Reason != "UNKNOWN_FIELD" || swErr.Domain != safewrite.Domain ||
				swErr.ReasonCode != safewritev1.Reason_REASON_UNKNOWN_FIELD || swErr.Retryable() {
				t.Fatalf("%v; want FAILED_PRECONDITION, reason UNKNOWN_FIELD, not retryable", err)
			}
			for _, want := range []string{tc.Feature, sidecar, tc.Since} {
				if !strings.Contains(swErr.Message, want) {
					t.Errorf("message %q does not name %q", swErr.Message, want)
				}
			}
			if swErr.Metadata["feature"] != tc.Feature {
				t.Errorf("metadata %v: not the client's refusal of %s (was it sent?)", swErr.Metadata, tc.Feature)
			}
		})
		if ok {
			passed++
		}
	}
	t.Logf("conformance skew (go) against a sidecar %s: %d/%d passed", sidecar, passed, len(cases))
}

// skewCall makes a skew case's call through the client: an update as Client.Update of
// the request's target, mutation and options, a delete as Client.Delete. A request
// field the translation does not know fails the test.
func skewCall(t *testing.T, c *safewrite.Client, tc skewCase, request []byte) (*stepAnswer, error) {
	t.Helper()
	ctx := testContext(t)
	switch tc.Call {
	case "update":
		req := &safewritev1.UpdateWithRetryRequest{}
		protoFromJSON(t, request, req)
		var m safewrite.Mutation
		switch kind := req.GetMutation().GetKind().(type) {
		case *safewritev1.Mutation_MergePatch:
			m = safewrite.MergePatch(kind.MergePatch.GetPatchJson())
		case *safewritev1.Mutation_Cel:
			m = safewrite.CEL(kind.Cel.GetExpression())
		default:
			t.Fatalf("a skew case's mutation %T: add it to skewCall", kind)
		}
		if req.GetPreconditions() != nil || req.GetRetryPolicy() != nil {
			t.Fatal("a skew case's preconditions or retry policy: add them to skewCall")
		}
		opts := skewWriteOptions(req.GetOptions().GetFence(), req.GetOptions().GetDryRun())
		o := req.GetOptions()
		if text := o.GetCreateIfMissingJson(); text != "" {
			opts = append(opts, safewrite.WithCreateIfMissing(text))
		}
		if o.GetFieldManager() != "" || o.GetIdempotencyKey() != "" || o.GetWriteAlone() {
			t.Fatal("a skew case's write option: add it to skewCall")
		}
		res, err := c.Update(ctx, refOf(req.GetTarget()), m, opts...)
		if err != nil {
			return nil, err
		}
		return &stepAnswer{outcome: safewritev1.Outcome(res.Outcome).String(), objectJSON: mustJSON(res.Object.Object),
			resourceVersion: res.ResourceVersion, alreadyApplied: res.AlreadyApplied}, nil
	case "delete":
		req := &safewritev1.DeleteRequest{}
		protoFromJSON(t, request, req)
		if req.GetPreconditions() != nil || req.GetRetryPolicy() != nil {
			t.Fatal("a skew case's preconditions or retry policy: add them to skewCall")
		}
		opts := skewWriteOptions(req.GetFence(), req.GetDryRun())
		if p := req.GetPropagationPolicy(); p != safewritev1.PropagationPolicy_PROPAGATION_POLICY_UNSPECIFIED {
			opts = append(opts, safewrite.WithPropagationPolicy(safewrite.PropagationPolicy(p)))
		}
		res, err := c.Delete(ctx, refOf(req.GetTarget()), opts...)
		if err != nil {
			return nil, err
		}
		return &stepAnswer{outcome: safewritev1.DeleteOutcome(res.Outcome).String()}, nil
	}
	t.Fatalf("a skew case's call %q: add it to skewCall", tc.Call)
	return nil, nil
}

// skewWriteOptions are the options of a fence and dry_run.
func skewWriteOptions(fence *safewritev1.Fence, dryRun bool) []safewrite.WriteOption {
	var opts []safewrite.WriteOption
	if fence != nil {
		opts = append(opts, safewrite.WithFence(safewrite.Fence{LeaseNamespace: fence.GetLeaseNamespace(),
			LeaseName: fence.GetLeaseName(), Epoch: fence.GetEpoch()}))
	}
	if dryRun {
		opts = append(opts, safewrite.WithDryRun())
	}
	return opts
}
