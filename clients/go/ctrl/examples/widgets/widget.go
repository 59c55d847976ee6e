package main

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the group and version of the Widget kind (the CRD
// widgets.test.safewrite.dev that the test harness installs).
var GroupVersion = schema.GroupVersion{Group: "test.safewrite.dev", Version: "v1"}

// AddToScheme registers Widget and WidgetList.
func AddToScheme(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(GroupVersion, &Widget{}, &WidgetList{})
	metav1.AddToGroupVersion(scheme, GroupVersion)
	return nil
}

// Widget is a small custom resource with a status subresource.
type Widget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   WidgetSpec   `json:"spec,omitempty"`
	Status WidgetStatus `json:"status,omitempty"`
}

// WidgetSpec is what the user asks for.
type WidgetSpec struct {
	// Size is how large the widget is; 0 means it is not ready.
	Size int64 `json:"size"`
}

// WidgetStatus is what the controller reports.
type WidgetStatus struct {
	// ObservedGeneration is the generation the status was computed from.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Capacity is ten times the size.
	Capacity int64 `json:"capacity,omitempty"`
	// Conditions holds the Ready condition.
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// WidgetList is a list of Widgets, for the manager's cache.
type WidgetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Widget `json:"items"`
}

// DeepCopyInto copies w into out (what controller-gen would generate).
func (w *Widget) DeepCopyInto(out *Widget) {
	*out = *w
	out.TypeMeta = w.TypeMeta
	w.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Spec = w.Spec
	out.Status = w.Status
	if w.Status.Conditions != nil {
		out.Status.Conditions = make([]metav1.Condition, len(w.Status.Conditions))
		for i := range w.Status.Conditions {
			w.Status.Conditions[i].DeepCopyInto(&out.Status.Conditions[i])
		}
	}
}

// DeepCopyObject implements runtime.Object.
func (w *Widget) DeepCopyObject() runtime.Object {
	out := &Widget{}
	w.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (l *WidgetList) DeepCopyObject() runtime.Object {
	out := &WidgetList{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	if l.Items != nil {
		out.Items = make([]Widget, len(l.Items))
		for i := range l.Items {
			l.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
	return out
}
