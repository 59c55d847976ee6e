package safewrite

// One request shape for both unary writes: Update and PatchStatus are one code path
// (Client.write) that differs only in the RPC, and the sidecar receives from each
// exactly the request the generated stub would have sent.

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	safewritev1 "safewrite.dev/clients/go/safewrite/v1"
)

// TestWriteRequestsHaveOneShape: UpdateWithRetryRequest and PatchStatusRequest (and
// their responses) have the same fields, so the one message [Client.write] sends is,
// byte for byte, what either RPC expects. Fails when the proto lets them drift apart.
func TestWriteRequestsHaveOneShape(t *testing.T) {
	for _, pair := range [][2]proto.Message{
		{&safewritev1.UpdateWithRetryRequest{}, &safewritev1.PatchStatusRequest{}},
		{&safewritev1.UpdateWithRetryResponse{}, &safewritev1.PatchStatusResponse{}},
	} {
		a, b := fieldsOf(pair[0].ProtoReflect().Descriptor()), fieldsOf(pair[1].ProtoReflect().Descriptor())
		if fmt.Sprint(a) != fmt.Sprint(b) {
			t.Errorf("%T and %T differ:\n%v\n%v", pair[0], pair[1], a, b)
		}
	}
}

// fieldsOf lists what decides a message's wire format: each field's number, name,
// kind, cardinality and message or enum type.
func fieldsOf(md protoreflect.MessageDescriptor) []string {
	var fields []string
	for i := range md.Fields().Len() {
		f := md.Fields().Get(i)
		typ := ""
		if f.Message() != nil {
			typ = string(f.Message().FullName())
		} else if f.Enum() != nil {
			typ = string(f.Enum().FullName())
		}
		fields = append(fields, fmt.Sprintf("%d %s %v %v %s", f.Number(), f.Name(), f.Kind(), f.Cardinality(), typ))
	}
	return fields
}

// shapeWriter records the unary writes it receives, as their own request types, and
// answers each with a result naming the RPC.
type shapeWriter struct {
	fakeWriter
	updates  []*safewritev1.UpdateWithRetryRequest
	statuses []*safewritev1.PatchStatusRequest
}

func (w *shapeWriter) UpdateWithRetry(_ context.Context, req *safewritev1.UpdateWithRetryRequest) (*safewritev1.UpdateWithRetryResponse, error) {
	w.updates = append(w.updates, req)
	return &safewritev1.UpdateWithRetryResponse{Result: &safewritev1.WriteResult{
		Outcome: safewritev1.Outcome_OUTCOME_UPDATED, ObjectJson: `{"rpc":"UpdateWithRetry"}`, ResourceVersion: "1", Attempts: 1,
	}}, nil
}

func (w *shapeWriter) PatchStatus(_ context.Context, req *safewritev1.PatchStatusRequest) (*safewritev1.PatchStatusResponse, error) {
	w.statuses = append(w.statuses, req)
	return &safewritev1.PatchStatusResponse{Result: &safewritev1.WriteResult{
		Outcome: safewritev1.Outcome_OUTCOME_UNCHANGED, ObjectJson: `{"rpc":"PatchStatus"}`, ResourceVersion: "2", Attempts: 3,
	}}, nil
}

// TestUpdateAndPatchStatusSendTheSameRequest: the same call through Update and through
// PatchStatus reaches the sidecar's two RPCs as the same fields, and each answer is
// read from its own RPC's response.
func TestUpdateAndPatchStatusSendTheSameRequest(t *testing.T) {
	w := &shapeWriter{}
	c := fakeClient(t, w)
	ref := ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "cm"}
	opts := []WriteOption{WithUID("u-1"), WithPreconditionCEL("true"), WithFieldManager("me"), WithDryRun(),
		WithRetryPolicy(RetryPolicy{MaxAttempts: 4})}
	updated, err := c.Update(context.Background(), ref, MergePatch(`{"data":{"a":"b"}}`), opts...)
	if err != nil {
		t.Fatal(err)
	}
	patched, err := c.PatchStatus(context.Background(), ref, MergePatch(`{"data":{"a":"b"}}`), opts...)
	if err != nil {
		t.Fatal(err)
	}
	if len(w.updates) != 1 || len(w.statuses) != 1 {
		t.Fatalf("%d UpdateWithRetry and %d PatchStatus calls, want one each", len(w.updates), len(w.statuses))
	}
	// The PatchStatusRequest as received, read as an UpdateWithRetryRequest.
	wire, err := proto.Marshal(w.statuses[0])
	if err != nil {
		t.Fatal(err)
	}
	status := &safewritev1.UpdateWithRetryRequest{}
	if err := proto.Unmarshal(wire, status); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(status, w.updates[0]) || w.updates[0].GetMutation() == nil || w.updates[0].GetTarget().GetName() != "cm" {
		t.Errorf("PatchStatus sent %v, UpdateWithRetry %v: want the same fields", w.statuses[0], w.updates[0])
	}
	if updated.Outcome != OutcomeUpdated || updated.Object.Object["rpc"] != "UpdateWithRetry" || updated.Attempts != 1 {
		t.Errorf("Update: %+v", updated)
	}
	if patched.Outcome != OutcomeUnchanged || patched.Object.Object["rpc"] != "PatchStatus" || patched.Attempts != 3 || patched.ResourceVersion != "2" {
		t.Errorf("PatchStatus: %+v", patched)
	}
}
