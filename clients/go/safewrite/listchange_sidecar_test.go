package safewrite_test

// The list-entry mutations through this client's API against the real sidecar, as a
// controller uses them: finalizers through an object's deletion (OutcomeGone, the
// OBJECT_DELETING refusal), owner references from owner objects (the ALREADY_OWNED
// refusal), conditions with the object's generation, and a keyed list shared by two
// writers. (The cases of ../../conformance test the sidecar's semantics in detail.)

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"safewrite.dev/clients/go/safewrite"
	safewritev1 "safewrite.dev/clients/go/safewrite/v1"
)

// wantRefusal checks that err is the sidecar's FAILED_PRECONDITION with reason, not
// retryable, with the current object.
func wantRefusal(t *testing.T, err error, reason safewritev1.Reason) *safewrite.Error {
	t.Helper()
	swErr := asError(t, err)
	if !errors.Is(err, safewrite.ErrPreconditionFailed) || swErr.ReasonCode != reason ||
		swErr.Reason != strings.TrimPrefix(reason.String(), "REASON_") || swErr.Retryable() || !apierrors.IsInvalid(err) {
		t.Fatalf("%v (reason %s, retryable %v); want FAILED_PRECONDITION %s, not retryable", err, swErr.ReasonCode, swErr.Retryable(), reason)
	}
	if swErr.CurrentObject == nil {
		t.Fatalf("%v: no current object", err)
	}
	return swErr
}

func TestFinalizersThroughAnObjectsDeletion(t *testing.T) {
	c := newClient(t)
	ctx := testContext(t)
	ref := newCounter(t, c)
	const cleanup, other = "test.safewrite.dev/cleanup", "test.safewrite.dev/other"
	t.Cleanup(func() { // a failed test must not leave an object that cannot be deleted
		_, _ = c.Update(testContext(t), ref, safewrite.MergePatch(`{"metadata": {"finalizers": null}}`))
	})

	res, err := c.Update(ctx, ref, safewrite.AddFinalizer(cleanup))
	if err != nil || res.Outcome != safewrite.OutcomeUpdated || !contains(res.Object.GetFinalizers(), cleanup) {
		t.Fatalf("adding a finalizer: %v, %v", res, err)
	}
	if res, err = c.Update(ctx, ref, safewrite.AddFinalizer(cleanup)); err != nil || res.Outcome != safewrite.OutcomeUnchanged {
		t.Fatalf("adding it again: %v, %v", res, err)
	}

	// Deleted, the object stays for its finalizer, and takes no new one.
	api := newAPIServer(t)
	if code, body := api.do(t, http.MethodDelete, "/api/v1/namespaces/"+ref.Namespace+"/configmaps/"+ref.Name, nil); code != http.StatusOK {
		t.Fatalf("DELETE: HTTP %d %s", code, body)
	}
	_, err = c.Update(ctx, ref, safewrite.AddFinalizer(other))
	if swErr := wantRefusal(t, err, safewritev1.Reason_REASON_OBJECT_DELETING); swErr.CurrentObject.GetDeletionTimestamp() == nil {
		t.Fatalf("the current object has no deletionTimestamp: %v", swErr.CurrentObject)
	}

	// Its last finalizer removed, the API server deletes it: Gone, with the object as
	// last written; then Gone without one, nothing written.
	res, err = c.Update(ctx, ref, safewrite.RemoveFinalizer(cleanup))
	if err != nil || !res.Gone() || res.Object == nil || contains(res.Object.GetFinalizers(), cleanup) {
		t.Fatalf("removing the last finalizer: %+v, %v", res, err)
	}
	if obj := api.configMap(t, ref); obj != nil {
		t.Fatalf("the API server still has the object: %v", obj)
	}
	typed := c.Typed(nil)
	obj := &unstructured.Unstructured{}
	obj.SetAPIVersion("v1")
	obj.SetKind("ConfigMap")
	obj.SetNamespace(ref.Namespace)
	obj.SetName(ref.Name)
	if res, err = typed.Update(ctx, obj, safewrite.RemoveFinalizer(cleanup)); err != nil || !res.Gone() || res.Object != nil || obj.GetName() != ref.Name {
		t.Fatalf("removing a finalizer from a missing object: %+v, %v, %v", res, err, obj)
	}
	// Adding one to a missing object is the API server's NotFound.
	if _, err = c.Update(ctx, ref, safewrite.AddFinalizer(cleanup)); !apierrors.IsNotFound(err) {
		t.Fatalf("adding a finalizer to a missing object: %v", err)
	}
}

func TestOwnerReferencesFromOwnerObjects(t *testing.T) {
	c := newClient(t)
	ctx := testContext(t)
	owner := func() *unstructured.Unstructured {
		ref := newCounter(t, c)
		res, err := c.Update(ctx, ref, safewrite.MergePatch(`{}`))
		if err != nil || res.Object.GetUID() == "" {
			t.Fatalf("reading %s: %v", ref, err)
		}
		return res.Object
	}
	first, second := owner(), owner()
	ref := newCounter(t, c)
	refTo := func(o *unstructured.Unstructured, controller bool) map[string]any {
		r := map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "name": o.GetName(), "uid": string(o.GetUID())}
		if controller {
			r["controller"], r["blockOwnerDeletion"] = true, true
		}
		return r
	}
	wantOwners := func(res *safewrite.Result, want ...map[string]any) {
		t.Helper()
		got, _, _ := unstructured.NestedSlice(res.Object.Object, "metadata", "ownerReferences")
		if mustJSON(got) != mustJSON(want) {
			t.Fatalf("ownerReferences %s, want %s", mustJSON(got), mustJSON(want))
		}
	}

	res, err := c.Update(ctx, ref, safewrite.SetControllerReference(first))
	if err != nil || res.Outcome != safewrite.OutcomeUpdated {
		t.Fatalf("the controller reference: %v, %v", res, err)
	}
	wantOwners(res, refTo(first, true))
	if res, err = c.Update(ctx, ref, safewrite.SetControllerReference(first)); err != nil || res.Outcome != safewrite.OutcomeUnchanged {
		t.Fatalf("the same again: %v, %v", res, err)
	}

	// Another controller is refused, naming the one there is.
	_, err = c.Update(ctx, ref, safewrite.SetControllerReference(second))
	if swErr := wantRefusal(t, err, safewritev1.Reason_REASON_ALREADY_OWNED); !strings.Contains(swErr.Message, first.GetName()) {
		t.Fatalf("the refusal does not name the controller %s: %v", first.GetName(), err)
	}
	// As a plain owner it is added beside it; the first removed, it stays alone.
	if res, err = c.Update(ctx, ref, safewrite.SetOwnerReference(second)); err != nil {
		t.Fatal(err)
	}
	wantOwners(res, refTo(first, true), refTo(second, false))
	if res, err = c.Update(ctx, ref, safewrite.RemoveOwnerReference(first)); err != nil {
		t.Fatal(err)
	}
	wantOwners(res, refTo(second, false))
}

func TestSetConditionsTakeTheObjectsGeneration(t *testing.T) {
	c := newClient(t)
	ctx := testContext(t)
	ref := newWidget(t, c)
	typed := c.Typed(widgetScheme(t))
	w := &widget{ObjectMeta: metav1.ObjectMeta{Namespace: ref.Namespace, Name: ref.Name}}
	before := time.Now().Truncate(time.Second)

	// No time and no generation given: the time of the write and the object's
	// generation.
	ready := metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Reconciled", Message: "all good"}
	res, err := typed.PatchStatus(ctx, w, safewrite.SetConditions(ready))
	if err != nil || res.Outcome != safewrite.OutcomeUpdated || len(w.Status.Conditions) != 1 {
		t.Fatalf("setting Ready: %v, %v, %+v", res, err, w.Status)
	}
	got := w.Status.Conditions[0]
	if got.ObservedGeneration != w.Generation || w.Generation == 0 || got.LastTransitionTime.Time.Before(before) ||
		got.LastTransitionTime.Time.After(time.Now()) || got.Message != "all good" {
		t.Fatalf("Ready is %+v; want generation %d and about now (%v)", got, w.Generation, before)
	}
	if res, err = typed.PatchStatus(ctx, w, safewrite.SetConditions(ready)); err != nil || res.Outcome != safewrite.OutcomeUnchanged {
		t.Fatalf("setting it again: %v, %v", res, err)
	}
	if res, err = typed.PatchStatus(ctx, w, safewrite.RemoveConditions("Ready")); err != nil || res.Outcome != safewrite.OutcomeUpdated || len(w.Status.Conditions) != 0 {
		t.Fatalf("removing it: %v, %v, %+v", res, err, w.Status)
	}
}

func TestKeyedListEntriesOfTwoWriters(t *testing.T) {
	c := newClient(t)
	ctx := testContext(t)
	ref := newWidget(t, c)
	type parent struct {
		ControllerName string `json:"controllerName"`
		Accepted       bool   `json:"accepted"`
		Message        *string
	}
	keys := []string{"controllerName"}
	for _, p := range []parent{{ControllerName: "a.example/gw", Accepted: true}, {ControllerName: "b.example/gw"}} {
		if _, err := c.Update(ctx, ref, safewrite.UpsertListEntry("spec.parents", keys, p)); err != nil {
			t.Fatal(err)
		}
	}
	res, err := c.Update(ctx, ref, safewrite.UpsertListEntry("spec.parents", keys, parent{ControllerName: "a.example/gw"}))
	if err != nil {
		t.Fatal(err)
	}
	parents, _, _ := unstructured.NestedSlice(res.Object.Object, "spec", "parents")
	if want := `[{"accepted":false,"controllerName":"a.example/gw"},{"accepted":false,"controllerName":"b.example/gw"}]`; mustJSON(parents) != want {
		t.Fatalf("spec.parents %s, want %s", mustJSON(parents), want)
	}
	if res, err = c.Update(ctx, ref, safewrite.RemoveListEntry("spec.parents", keys, parent{ControllerName: "a.example/gw"})); err != nil {
		t.Fatal(err)
	}
	parents, _, _ = unstructured.NestedSlice(res.Object.Object, "spec", "parents")
	if want := `[{"accepted":false,"controllerName":"b.example/gw"}]`; mustJSON(parents) != want {
		t.Fatalf("spec.parents %s, want %s", mustJSON(parents), want)
	}
}
