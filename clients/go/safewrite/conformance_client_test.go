package safewrite_test

// The conformance cases' mutations of one list entry (conditions, finalizers, owner
// references, keyed lists), made with this client's constructors instead of read from
// their proto3 JSON, with no sidecar: a client's Update sends a fake WriterService
// exactly the mutation the case sends, or refuses it before sending, naming the field
// the case expects the sidecar to name. TestConformance sends the cases' own messages
// to the real sidecar; together they show the constructors ask for what the cases test.
// And the list semantics of the cases' expectations, which every runner shares.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"safewrite.dev/clients/go/safewrite"
	safewritev1 "safewrite.dev/clients/go/safewrite/v1"
)

// clientMutation makes m with this client's constructors; ok is false for kinds other
// than the list-entry ones.
func clientMutation(t *testing.T, m *safewritev1.Mutation) (safewrite.Mutation, bool) {
	t.Helper()
	switch kind := m.GetKind().(type) {
	case *safewritev1.Mutation_SetCondition:
		var conditions []metav1.Condition
		for _, c := range kind.SetCondition.GetConditions() {
			cond := metav1.Condition{Type: c.GetType(), Status: metav1.ConditionStatus(c.GetStatus()),
				Reason: c.GetReason(), Message: c.GetMessage(), ObservedGeneration: c.GetObservedGeneration()}
			if text := c.GetLastTransitionTime(); text != "" {
				at, err := time.Parse(time.RFC3339, text)
				if err != nil {
					t.Fatalf("lastTransitionTime %q: %v", text, err)
				}
				cond.LastTransitionTime = metav1.NewTime(at)
			}
			conditions = append(conditions, cond)
		}
		return safewrite.SetConditionsAt(kind.SetCondition.GetPath(), conditions...), true
	case *safewritev1.Mutation_RemoveCondition:
		return safewrite.RemoveConditionsAt(kind.RemoveCondition.GetPath(), kind.RemoveCondition.GetTypes()...), true
	case *safewritev1.Mutation_Finalizer:
		if kind.Finalizer.GetRemove() {
			return safewrite.RemoveFinalizer(kind.Finalizer.GetFinalizer()), true
		}
		return safewrite.AddFinalizer(kind.Finalizer.GetFinalizer()), true
	case *safewritev1.Mutation_OwnerReference:
		return ownerMutation(kind.OwnerReference), true
	case *safewritev1.Mutation_ListEntry:
		e := kind.ListEntry
		if e.GetRemove() {
			return safewrite.RemoveListEntry(e.GetPath(), e.GetKeys(), e.GetEntryJson()), true
		}
		return safewrite.UpsertListEntry(e.GetPath(), e.GetKeys(), e.GetEntryJson()), true
	}
	return safewrite.Mutation{}, false
}

// ownerMutation makes an owner reference change the way a controller would: from the
// owner as an object when its kind is known and the change is one controllerutil makes,
// else from the reference as it is.
func ownerMutation(change *safewritev1.OwnerReferenceChange) safewrite.Mutation {
	o := change.GetOwner()
	owner := &unstructured.Unstructured{}
	owner.SetAPIVersion(o.GetApiVersion())
	owner.SetKind(o.GetKind())
	owner.SetName(o.GetName())
	owner.SetUID(types.UID(o.GetUid()))
	fromObject := o.GetApiVersion() != "" && o.GetKind() != ""
	switch {
	case fromObject && change.GetRemove():
		return safewrite.RemoveOwnerReference(owner)
	case fromObject && o.GetController() && o.GetBlockOwnerDeletion():
		return safewrite.SetControllerReference(owner)
	case fromObject && !o.GetController() && !o.GetBlockOwnerDeletion():
		return safewrite.SetOwnerReference(owner)
	}
	ref := metav1.OwnerReference{APIVersion: o.GetApiVersion(), Kind: o.GetKind(), Name: o.GetName(), UID: types.UID(o.GetUid())}
	if o.GetController() {
		ref.Controller = proto.Bool(true)
	}
	if o.GetBlockOwnerDeletion() {
		ref.BlockOwnerDeletion = proto.Bool(true)
	}
	if change.GetRemove() {
		return safewrite.RemoveOwnerReferenceTo(ref)
	}
	return safewrite.EnsureOwnerReference(ref)
}

func TestConformanceMutationsThroughTheClient(t *testing.T) {
	var sent *safewritev1.Mutation
	c := failingSidecar(t, func(req *safewritev1.UpdateWithRetryRequest) error {
		sent = req.GetMutation()
		return errors.New("recorded")
	})
	made := 0
	for i, tc := range loadConformanceFile(t).Cases {
		for s, step := range tc.Steps {
			if step.Call != "update" && step.Call != "patch_status" {
				continue
			}
			req := &safewritev1.UpdateWithRetryRequest{} // PatchStatusRequest has the same fields
			protoFromJSON(t, substitute(t, step.Request, stepVars{ns: "ns", name: fmt.Sprintf("case-%d", i)}), req)
			m, ok := clientMutation(t, req.GetMutation())
			if !ok {
				continue
			}
			made++
			where := fmt.Sprintf("%s step %d", tc.Name, s+1)
			sent = nil
			_, err := c.Update(testContext(t), refOf(req.GetTarget()), m)
			if sent != nil {
				if !proto.Equal(sent, req.GetMutation()) {
					t.Errorf("%s: the client sends\n  %v\nwhere the case sends\n  %v", where, sent, req.GetMutation())
				}
				continue
			}
			// Refused here: the case must expect the sidecar to refuse it too, naming
			// the same field.
			swErr := asError(t, err)
			var fields []string
			for _, v := range swErr.FieldViolations {
				fields = append(fields, v.Field)
			}
			if step.Expect.Code != "INVALID_ARGUMENT" || !errors.Is(err, safewrite.ErrInvalid) ||
				(step.Expect.FieldViolations != nil && !reflect.DeepEqual(fields, step.Expect.FieldViolations)) {
				t.Errorf("%s: the client refuses it (%v, fields %v); the case expects %s %v", where, err, fields,
					step.Expect.Code+step.Expect.Outcome, step.Expect.FieldViolations)
			}
		}
	}
	if made == 0 {
		t.Fatal("cases.json has no mutation of a list entry")
	}
	t.Logf("%d list-entry mutations of cases.json made through the client", made)
}

// getRecorder is a WriterService whose Get records its request and fails.
type getRecorder struct {
	safewritev1.UnimplementedWriterServiceServer
	sent *safewritev1.GetRequest
}

func (g *getRecorder) Get(_ context.Context, req *safewritev1.GetRequest) (*safewritev1.GetResponse, error) {
	g.sent = req
	return nil, status.Error(codes.NotFound, "recorded")
}

// TestConformanceGetsThroughTheClient: the runner sends a get step through Client.Get
// with WithMinResourceVersion, and the client sends the sidecar exactly the case's
// GetRequest, with $RV standing for a resourceVersion or for none.
func TestConformanceGetsThroughTheClient(t *testing.T) {
	recorder := &getRecorder{}
	c := fakeSidecar(t, recorder)
	gets := 0
	for i, tc := range loadConformanceFile(t).Cases {
		for s, step := range tc.Steps {
			if step.Call != "get" {
				continue
			}
			for _, rv := range []string{"", "12345"} {
				req := &safewritev1.GetRequest{}
				protoFromJSON(t, substitute(t, step.Request, stepVars{ns: "ns", name: fmt.Sprintf("case-%d", i), rv: rv}), req)
				recorder.sent = nil
				if _, err := conformanceGet(testContext(t), c, req); !errors.Is(err, safewrite.ErrNotFound) {
					t.Fatalf("%s step %d: %v, want the recorder's NotFound", tc.Name, s+1, err)
				}
				if !proto.Equal(recorder.sent, req) {
					t.Errorf("%s step %d ($RV %q): the client sends\n  %v\nwhere the case sends\n  %v", tc.Name, s+1, rv, recorder.sent, req)
				}
			}
			gets++
		}
	}
	if gets == 0 {
		t.Fatal("cases.json has no get step")
	}
	t.Logf("%d get steps of cases.json sent through the client", gets)
}

// TestConformanceSubset pins the comparison the conformance README describes for
// `object` and `current_object`: maps are subsets, every other value (a list above all)
// is equal as a whole, so a list holds exactly the entries named, in their order, each
// with exactly the fields named; numbers compare by value.
func TestConformanceSubset(t *testing.T) {
	got := map[string]any{"metadata": map[string]any{"name": "x", "finalizers": []any{"a", "b"}},
		"status": map[string]any{"conditions": []any{map[string]any{"type": "Ready", "observedGeneration": int64(1)}}}}
	for _, tc := range []struct {
		want string
		ok   bool
	}{
		{`{"metadata": {"finalizers": ["a", "b"]}}`, true},
		{`{"status": {"conditions": [{"type": "Ready", "observedGeneration": 1}]}}`, true},
		{`{"metadata": {"finalizers": ["b", "a"]}}`, false},        // order counts
		{`{"metadata": {"finalizers": ["a"]}}`, false},             // every entry
		{`{"status": {"conditions": [{"type": "Ready"}]}}`, false}, // an entry is whole
		{`{"status": {"conditions": [{"type": "Ready", "observedGeneration": 1.5}]}}`, false},
		{`{"metadata": {"uid": "u"}}`, false},
	} {
		var want map[string]any
		if err := json.Unmarshal([]byte(tc.want), &want); err != nil {
			t.Fatal(err)
		}
		if _, ok := subset(want, got); ok != tc.ok {
			t.Errorf("subset(%s) = %v, want %v", strings.Join(strings.Fields(tc.want), " "), ok, tc.ok)
		}
	}
}
