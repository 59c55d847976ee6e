package safewrite_test

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"safewrite.dev/clients/go/safewrite"
)

// TestConditions sets conditions through the sidecar: lastTransitionTime moves only
// when the status does, and setting a condition that is already there writes nothing.
func TestConditions(t *testing.T) {
	c := newClient(t)
	typed := c.Typed(widgetScheme(t))
	ref := newWidget(t, c)
	ctx := testContext(t)
	t1 := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	t2 := metav1.NewTime(t1.Add(time.Hour))
	t3 := metav1.NewTime(t1.Add(2 * time.Hour))
	ready := func(status metav1.ConditionStatus, reason string, at metav1.Time) metav1.Condition {
		return metav1.Condition{Type: "Ready", Status: status, Reason: reason, Message: "size 1",
			ObservedGeneration: 1, LastTransitionTime: at}
	}

	w := &widget{ObjectMeta: metav1.ObjectMeta{Namespace: ref.Namespace, Name: ref.Name}}
	res, err := typed.SetCondition(ctx, w, ready(metav1.ConditionTrue, "Sized", t1))
	if err != nil || res.Outcome != safewrite.OutcomeUpdated {
		t.Fatalf("the first set: %v, %v", res, err)
	}
	want := []metav1.Condition{ready(metav1.ConditionTrue, "Sized", t1)}
	wantConditions(t, w.Status.Conditions, want)
	rv := w.ResourceVersion

	// The same condition again, later: nothing is written, and the time stays t1.
	res, err = typed.SetCondition(ctx, w, ready(metav1.ConditionTrue, "Sized", t2))
	if err != nil || res.Outcome != safewrite.OutcomeUnchanged || w.ResourceVersion != rv || res.ResourceVersion != rv {
		t.Fatalf("an identical set: %v, %v", res, err)
	}
	wantConditions(t, w.Status.Conditions, want)

	// Another reason, same status: written, the time stays t1.
	if res, err = c.SetCondition(ctx, ref, ready(metav1.ConditionTrue, "Resized", t2)); err != nil || res.Outcome != safewrite.OutcomeUpdated {
		t.Fatalf("a new reason: %v, %v", res, err)
	}
	// A second condition is added beside it; the first is left as it is.
	if res, err = c.SetCondition(ctx, ref, metav1.Condition{Type: "Degraded", Status: metav1.ConditionFalse, Reason: "Fine", LastTransitionTime: t2}); err != nil || res.Outcome != safewrite.OutcomeUpdated {
		t.Fatalf("a second condition: %v, %v", res, err)
	}
	// The status changes: the time moves to t3.
	if _, err = typed.SetCondition(ctx, w, ready(metav1.ConditionFalse, "Shrunk", t3)); err != nil {
		t.Fatal(err)
	}
	wantConditions(t, w.Status.Conditions, []metav1.Condition{
		ready(metav1.ConditionFalse, "Shrunk", t3),
		{Type: "Degraded", Status: metav1.ConditionFalse, Reason: "Fine", LastTransitionTime: t2},
	})

	// As read straight from the API server.
	var stored widget
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(newAPIServer(t).widget(t, ref).Object, &stored); err != nil {
		t.Fatal(err)
	}
	wantConditions(t, stored.Status.Conditions, w.Status.Conditions)

	// Without a time, now: a new status gets the time of the set, to the second.
	before := time.Now().Truncate(time.Second)
	if _, err = typed.SetCondition(ctx, w, metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Sized", Message: "size 1", ObservedGeneration: 1}); err != nil {
		t.Fatal(err)
	}
	if at := w.Status.Conditions[0].LastTransitionTime.Time; at.Before(before) || at.After(time.Now()) {
		t.Fatalf("lastTransitionTime %v, want about now (%v)", at, before)
	}
}

func wantConditions(t *testing.T, got, want []metav1.Condition) {
	t.Helper()
	if mustJSON(got) != mustJSON(want) {
		t.Fatalf("conditions %s, want %s", mustJSON(got), mustJSON(want))
	}
}
