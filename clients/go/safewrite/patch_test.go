package safewrite

import (
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

type typedThing struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		Size  int64             `json:"size"`
		Tags  []string          `json:"tags"`
		Extra map[string]string `json:"extra,omitempty"`
	} `json:"spec"`
}

// DeepCopyObject makes typedThing a runtime.Object, and so an Object; a shallow copy
// does for these tests.
func (t *typedThing) DeepCopyObject() runtime.Object {
	c := *t
	return &c
}

func ptr[T any](v T) *T { return &v }

func mergePatchText(t *testing.T, m Mutation) string {
	t.Helper()
	pb, err := m.proto()
	if err != nil {
		t.Fatal(err)
	}
	return pb.GetMergePatch().GetPatchJson()
}

func TestMergePatchOfATypedObjectSendsNoNulls(t *testing.T) {
	obj := &typedThing{}
	obj.Name = "x"
	obj.Labels = map[string]string{"a": "b"}
	if got, want := mergePatchText(t, MergePatchObject(obj)), `{"metadata":{"labels":{"a":"b"},"name":"x"},"spec":{"size":0}}`; got != want {
		t.Errorf("MergePatchObject(typed) = %s, want %s", got, want)
	}
	// Maps and unstructured objects keep their nulls: there they delete.
	if got := mergePatchText(t, MergePatch(map[string]any{"a": nil})); got != `{"a":null}` {
		t.Errorf("MergePatch(map) = %s", got)
	}
	u := &unstructured.Unstructured{Object: map[string]any{"a": nil}}
	if got := mergePatchText(t, MergePatch(u)); got != `{"a":null}` {
		t.Errorf("MergePatch(unstructured) = %s", got)
	}
	if got := mergePatchText(t, MergePatchObject(u)); got != `{"a":null}` {
		t.Errorf("MergePatchObject(unstructured) = %s", got)
	}
}

func TestMergeFrom(t *testing.T) {
	before := &typedThing{}
	before.Name = "x"
	before.Labels = map[string]string{"a": "b", "gone": "1"}
	before.Spec.Size = 1
	before.Spec.Tags = []string{"t1"}
	after := &typedThing{}
	after.Name = "x"
	after.Labels = map[string]string{"a": "c"}
	after.Spec.Size = 2
	after.Spec.Tags = []string{"t1", "t2"}
	after.Spec.Extra = map[string]string{"k": "v"}
	want := `{"metadata":{"labels":{"a":"c","gone":null}},"spec":{"extra":{"k":"v"},"size":2,"tags":["t1","t2"]}}`
	if got := mergePatchText(t, MergeFrom(before, after)); got != want {
		t.Errorf("MergeFrom = %s, want %s", got, want)
	}
	if got := mergePatchText(t, MergeFrom(before, before)); got != `{}` {
		t.Errorf("MergeFrom of equal objects = %s", got)
	}
	if got := mergePatchText(t, MergeFrom(
		&unstructured.Unstructured{Object: map[string]any{"a": 1, "b": map[string]any{"c": 2}}},
		&unstructured.Unstructured{Object: map[string]any{"b": map[string]any{"c": 2}}})); got != `{"a":null}` {
		t.Errorf("MergeFrom of Unstructured = %s", got)
	}
	// Objects of two types as one interface type compile, and are diffed as JSON.
	var from, to Object = before, &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "x"}}}
	if got := mergePatchText(t, MergeFrom(from, to)); got != `{"metadata":{"labels":null},"spec":null}` {
		t.Errorf("MergeFrom(Object, Object) = %s", got)
	}
	if _, err := MergeFrom(before, (*typedThing)(nil)).proto(); !errors.Is(err, ErrInvalid) {
		t.Errorf("MergeFrom to nil: %v, want ErrInvalid", err)
	}
}

func TestSetUnstructuredCondition(t *testing.T) {
	t1 := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	t2 := metav1.NewTime(t1.Add(time.Minute))
	obj, err := decodeObject(`{"status": {"conditions": [{"type": "Other", "status": "True", "extra": "kept"}]}}`)
	if err != nil {
		t.Fatal(err)
	}
	cond := metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "R", Message: "m", ObservedGeneration: 3, LastTransitionTime: t1}
	steps := []struct {
		cond    metav1.Condition
		changed bool
		want    string
	}{
		{cond, true, `[{"extra":"kept","status":"True","type":"Other"},{"lastTransitionTime":"2026-01-02T03:04:05Z","message":"m","observedGeneration":3,"reason":"R","status":"True","type":"Ready"}]`},
		{func() metav1.Condition { c := cond; c.LastTransitionTime = t2; return c }(), false, ""},
		{func() metav1.Condition {
			c := cond
			c.Message = "n"
			c.LastTransitionTime = t2
			c.ObservedGeneration = 0
			return c
		}(), true,
			`[{"extra":"kept","status":"True","type":"Other"},{"lastTransitionTime":"2026-01-02T03:04:05Z","message":"n","reason":"R","status":"True","type":"Ready"}]`},
		{func() metav1.Condition {
			c := cond
			c.Status = metav1.ConditionFalse
			c.LastTransitionTime = t2
			return c
		}(), true,
			`[{"extra":"kept","status":"True","type":"Other"},{"lastTransitionTime":"2026-01-02T03:05:05Z","message":"m","observedGeneration":3,"reason":"R","status":"False","type":"Ready"}]`},
	}
	last := ""
	for i, step := range steps {
		changed, err := SetUnstructuredCondition(obj, step.cond)
		if err != nil {
			t.Fatal(err)
		}
		list, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
		got, _ := encodeObject(&unstructured.Unstructured{Object: map[string]any{"l": list}})
		got = got[len(`{"l":`) : len(got)-1]
		if step.want == "" {
			step.want = last
		}
		if changed != step.changed || got != step.want {
			t.Errorf("step %d: changed %v, conditions %s; want %v, %s", i+1, changed, got, step.changed, step.want)
		}
		last = got
	}
	// The typed helper: the time moves only with the status.
	var conditions []metav1.Condition
	if !SetCondition(&conditions, cond) || SetCondition(&conditions, func() metav1.Condition { c := cond; c.LastTransitionTime = t2; return c }()) {
		t.Error("SetCondition: an identical set changed the list")
	}
	if conditions[0].LastTransitionTime != t1 {
		t.Errorf("SetCondition moved the time: %v", conditions[0].LastTransitionTime)
	}
}
