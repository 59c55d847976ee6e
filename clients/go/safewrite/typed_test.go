package safewrite_test

// The typed path and the apierrors view of errors, against the real sidecar: a Go type
// for the harness's Widget kind registered in a scheme, written through Typed, and
// errors checked with the predicates of k8s.io/apimachinery/pkg/api/errors.

import (
	"context"
	"errors"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"safewrite.dev/clients/go/safewrite"
)

// widget is a Go type for the harness's Widget (test.safewrite.dev/v1). Its status
// knows only phase, capacity and conditions; the tests' widgets also carry status.count.
type widget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              widgetSpec   `json:"spec,omitempty"`
	Status            widgetStatus `json:"status,omitempty"`
}

type widgetSpec struct {
	Size int64 `json:"size"`
}

type widgetStatus struct {
	Phase      string             `json:"phase,omitempty"`
	Capacity   int64              `json:"capacity,omitempty"`
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

func (w *widget) DeepCopyObject() runtime.Object {
	out := *w
	w.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Status.Conditions = append([]metav1.Condition(nil), w.Status.Conditions...)
	return &out
}

var widgetGVK = schema.GroupVersionKind{Group: "test.safewrite.dev", Version: "v1", Kind: "Widget"}

func widgetScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	scheme := runtime.NewScheme()
	scheme.AddKnownTypeWithName(widgetGVK, &widget{})
	metav1.AddToGroupVersion(scheme, widgetGVK.GroupVersion())
	return scheme
}

func TestTypedWrites(t *testing.T) {
	c := newClient(t)
	typed := c.Typed(widgetScheme(t))
	ref := newWidget(t, c) // spec {"size": 1}, status {"count": 0}
	ctx := testContext(t)

	// No TypeMeta: the kind comes from the scheme; the result is decoded into w.
	w := &widget{ObjectMeta: metav1.ObjectMeta{Namespace: ref.Namespace, Name: ref.Name}}
	if got, err := typed.RefOf(w); err != nil || got != ref {
		t.Fatalf("RefOf: %v, %v; want %v", got, err, ref)
	}
	if got := safewrite.RefOf(w); got.Kind != "" || got.Name != ref.Name {
		t.Fatalf("safewrite.RefOf of an object without TypeMeta: %v", got)
	}
	before := w.DeepCopyObject().(*widget) // MergeFrom takes two objects of one type
	w.Spec.Size = 5
	res, err := typed.Update(ctx, w, safewrite.MergeFrom(before, w))
	if err != nil || res.Outcome != safewrite.OutcomeUpdated {
		t.Fatalf("Update: %v, %v", res, err)
	}
	if w.Spec.Size != 5 || w.ResourceVersion != res.ResourceVersion || w.UID == "" || w.Kind != "Widget" {
		t.Fatalf("the object decoded into w: %+v", w)
	}
	if got := safewrite.RefOf(w); got != ref {
		t.Fatalf("safewrite.RefOf of a decoded object: %v, want %v", got, ref)
	}

	// MergePatchObject of a typed object sends no nulls: creationTimestamp: null is not sent.
	patch := &widget{Status: widgetStatus{Phase: "Ready"}}
	res, err = typed.PatchStatus(ctx, w, safewrite.MergePatchObject(patch))
	if err != nil || res.Outcome != safewrite.OutcomeUpdated {
		t.Fatalf("PatchStatus: %v, %v", res, err)
	}
	if w.Status.Phase != "Ready" || w.CreationTimestamp.IsZero() {
		t.Fatalf("after PatchStatus: %+v", w)
	}
	if count, found, _ := unstructured.NestedInt64(res.Object.Object, "status", "count"); !found || count != 0 {
		t.Fatalf("status.count, unknown to the Go type, was lost: %v", res.Object.Object["status"])
	}

	// A transaction proposes what fn changed, as a merge patch: fields the Go type does
	// not know (status.count) survive, and fn sees the fresh object each time.
	calls := 0
	res, err = typed.TransactStatus(ctx, w, func() error {
		calls++
		w.Status.Capacity = w.Spec.Size * 10
		return nil
	})
	if err != nil || res.Outcome != safewrite.OutcomeUpdated || w.Status.Capacity != 50 || calls != 1 {
		t.Fatalf("TransactStatus: %v, %v, %+v, %d call(s)", res, err, w.Status, calls)
	}
	if count, found, _ := unstructured.NestedInt64(res.Object.Object, "status", "count"); !found || count != 0 {
		t.Fatalf("a typed transaction lost status.count: %v", res.Object.Object["status"])
	}
	// The same change again changes nothing: nothing is written.
	rv := w.ResourceVersion
	res, err = typed.TransactStatus(ctx, w, func() error { w.Status.Capacity = w.Spec.Size * 10; return nil })
	if err != nil || res.Outcome != safewrite.OutcomeUnchanged || w.ResourceVersion != rv {
		t.Fatalf("an unchanged typed transaction: %v, %v", res, err)
	}
	// The main resource, with a conflict made by another writer between two attempts.
	other := &widget{ObjectMeta: metav1.ObjectMeta{Namespace: ref.Namespace, Name: ref.Name}}
	calls = 0
	res, err = typed.Transact(ctx, w, func() error {
		calls++
		if calls == 1 {
			if _, err := c.Update(ctx, ref, safewrite.MergePatch(`{"metadata": {"labels": {"other": "yes"}}}`)); err != nil {
				return err
			}
		}
		w.Spec.Size++
		return nil
	})
	if err != nil || res.Outcome != safewrite.OutcomeUpdated || calls != 2 || w.Spec.Size != 6 || w.Labels["other"] != "yes" {
		t.Fatalf("Transact with a conflict: %v, %v, %d call(s), %+v", res, err, calls, w)
	}
	if _, err := typed.Transact(ctx, other, func() error { return safewrite.ErrAbort }); err != nil || other.Spec.Size != 6 {
		t.Fatalf("an aborted transaction decodes the object as read: %v, %+v", err, other)
	}

	// Unstructured objects go the same way, kind from their own apiVersion and kind.
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(widgetGVK)
	u.SetNamespace(ref.Namespace)
	u.SetName(ref.Name)
	if res, err := typed.Update(ctx, u, safewrite.MergePatch(`{"spec": {"size": 7}}`)); err != nil || res.Outcome != safewrite.OutcomeUpdated {
		t.Fatalf("Update of an unstructured object: %v, %v", res, err)
	}
	if size, _, _ := unstructured.NestedInt64(u.Object, "spec", "size"); size != 7 {
		t.Fatalf("the unstructured object: %v", u.Object)
	}

	// A type the scheme does not know is refused before anything is sent.
	_, err = c.Typed(runtime.NewScheme()).Update(ctx, w, safewrite.MergePatch(`{}`))
	if !errors.Is(err, safewrite.ErrInvalid) || !apierrors.IsBadRequest(err) {
		t.Fatalf("an unregistered type: %v", err)
	}
}

// TestErrorsAreAPIStatus checks the apierrors predicates on real failures.
func TestErrorsAreAPIStatus(t *testing.T) {
	c := newClient(t)
	ctx := testContext(t)
	typed := c.Typed(widgetScheme(t))
	missing := &widget{ObjectMeta: metav1.ObjectMeta{Namespace: namespace(t), Name: newName(t)}}

	_, err := typed.Update(ctx, missing, safewrite.MergePatch(`{"spec": {"size": 1}}`))
	if !apierrors.IsNotFound(err) || apierrors.IsConflict(err) || !errors.Is(err, safewrite.ErrNotFound) {
		t.Fatalf("a missing object: %v (reason %q)", err, apierrors.ReasonForError(err))
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Code != 404 || status.Status().Details.Name != missing.Name ||
		status.Status().Details.Group != "test.safewrite.dev" || status.Status().Details.Kind != "Widget" {
		t.Fatalf("the Status of a missing object: %+v", status)
	}
	if safewrite.Retryable(err) {
		t.Fatal("a missing object is retryable")
	}

	ref := newCounter(t, c)
	// A stale resourceVersion: 409 Conflict, as the API server answers it.
	_, err = c.Update(ctx, ref, safewrite.CEL(increment), safewrite.WithResourceVersion("1"))
	if !apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		t.Fatalf("a stale resourceVersion: %v (reason %q)", err, apierrors.ReasonForError(err))
	}
	// Conflicts that outlast the retry policy: the API server's own Conflict.
	res, err := c.Transact(ctx, ref, func(obj *unstructured.Unstructured) error {
		if _, err := c.Update(ctx, ref, safewrite.CEL(increment)); err != nil {
			return err
		}
		return bump(obj)
	}, safewrite.WithRetryPolicy(safewrite.RetryPolicy{Requeue: true}))
	if !apierrors.IsConflict(err) || !errors.Is(err, safewrite.ErrConflict) || !safewrite.Retryable(err) {
		t.Fatalf("a requeued conflict: %v, %v (reason %q)", res, err, apierrors.ReasonForError(err))
	}
	if swErr := asError(t, err); swErr.Reason != "Conflict" || swErr.Status().Code != 409 {
		t.Fatalf("a requeued conflict: reason %q, status %+v", swErr.Reason, swErr.Status())
	}

	// An invalid object: 422 Invalid with the API server's causes.
	_, err = c.Update(ctx, ref, safewrite.MergePatch(`{"metadata": {"labels": {"app": "-bad-"}}}`))
	if !apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) {
		t.Fatalf("an invalid object: %v (reason %q)", err, apierrors.ReasonForError(err))
	}
	if st := asError(t, err).Status(); st.Details == nil || len(st.Details.Causes) == 0 {
		t.Fatalf("an invalid object's Status has no causes: %+v", st)
	}
	// A request the sidecar refuses itself, naming the field: 422 Invalid too.
	_, err = c.Update(ctx, ref, safewrite.CEL("object.data.n +"))
	if !apierrors.IsInvalid(err) {
		t.Fatalf("a CEL that does not compile: %v (reason %q)", err, apierrors.ReasonForError(err))
	}
	// Forbidden by the sidecar's own policy, and by RBAC (the restricted sidecar).
	secret := safewrite.ObjectRef{APIVersion: "v1", Kind: "Secret", Namespace: ref.Namespace, Name: newName(t)}
	if _, err = c.Update(ctx, secret, safewrite.MergePatch(`{}`)); !apierrors.IsForbidden(err) {
		t.Fatalf("a secret: %v (reason %q)", err, apierrors.ReasonForError(err))
	}
	restricted := dial(t, sidecarEnv(t, "SAFEWRITE_RESTRICTED_ADDR"))
	if _, err = restricted.Update(ctx, ref, safewrite.CEL(increment)); !apierrors.IsForbidden(err) {
		t.Fatalf("a write by a read-only identity: %v (reason %q)", err, apierrors.ReasonForError(err))
	}
	// A deadline that cuts the call off here: 504 Timeout. A write may have been in
	// flight, so the same call is retryable only with an idempotency key.
	short, cancel := context.WithTimeout(ctx, time.Millisecond)
	defer cancel()
	time.Sleep(2 * time.Millisecond)
	if _, err = c.Update(short, ref, safewrite.CEL(increment)); !apierrors.IsTimeout(err) || safewrite.Retryable(err) {
		t.Fatalf("a deadline: %v (reason %q, retryable %v)", err, apierrors.ReasonForError(err), safewrite.Retryable(err))
	}
	if _, err = c.Update(short, ref, safewrite.CEL(increment), safewrite.WithIdempotencyKey(newName(t))); !apierrors.IsTimeout(err) || !safewrite.Retryable(err) {
		t.Fatalf("a deadline, with a key: %v (reason %q, retryable %v)", err, apierrors.ReasonForError(err), safewrite.Retryable(err))
	}
	// Nothing listening: 503 ServiceUnavailable, retryable.
	nothing := dial(t, closedPort(t))
	if _, err = nothing.Update(ctx, ref, safewrite.CEL(increment)); !apierrors.IsServiceUnavailable(err) || !safewrite.Retryable(err) {
		t.Fatalf("no sidecar: %v (reason %q)", err, apierrors.ReasonForError(err))
	}
}
