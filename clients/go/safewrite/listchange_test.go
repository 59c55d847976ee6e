package safewrite

// The mutations that change one entry of a list (conditions, finalizers, owner
// references, keyed lists), with no sidecar: each builds exactly the proto message the
// contract describes, and input it can tell is wrong is refused before anything is sent,
// naming the field as the sidecar names it.

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	safewritev1 "safewrite.dev/clients/go/safewrite/v1"
)

var deploymentGVK = schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}

// deployment is an owner: a typed object with TypeMeta set, or without it.
func deployment(withTypeMeta bool) *metav1.PartialObjectMetadata {
	owner := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "u-1"}}
	if withTypeMeta {
		owner.SetGroupVersionKind(deploymentGVK)
	}
	return owner
}

func ownerChange(apiVersion, kind, name, uid string, controller, block, remove bool) *safewritev1.Mutation {
	return &safewritev1.Mutation{Kind: &safewritev1.Mutation_OwnerReference{OwnerReference: &safewritev1.OwnerReferenceChange{
		Owner: &safewritev1.OwnerReference{ApiVersion: apiVersion, Kind: kind, Name: name, Uid: uid,
			Controller: controller, BlockOwnerDeletion: block},
		Remove: remove,
	}}}
}

func TestListChangeMutations(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("CET", 3600)))
	ready := metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Done", Message: "m",
		ObservedGeneration: 7, LastTransitionTime: at}
	bare := metav1.Condition{Type: "Synced", Status: metav1.ConditionFalse, Reason: "Waiting"}
	scheme := runtime.NewScheme()
	scheme.AddKnownTypeWithName(deploymentGVK, &metav1.PartialObjectMetadata{})
	typed := (&Client{}).Typed(scheme)
	unstructuredOwner := &unstructured.Unstructured{}
	unstructuredOwner.SetAPIVersion("test.safewrite.dev/v1")
	unstructuredOwner.SetKind("Widget")
	unstructuredOwner.SetName("gear")
	yes, no := true, false
	type entry struct {
		Name  string  `json:"name"`
		Port  int     `json:"port"`
		Notes *string `json:"notes"`
	}

	for name, tc := range map[string]struct {
		m    Mutation
		want *safewritev1.Mutation
	}{
		// Times go in UTC, to the second; a zero time and generation are left unset.
		"set conditions": {SetConditions(ready, bare), &safewritev1.Mutation{Kind: &safewritev1.Mutation_SetCondition{SetCondition: &safewritev1.SetCondition{
			Conditions: []*safewritev1.Condition{
				{Type: "Ready", Status: "True", Reason: "Done", Message: "m", ObservedGeneration: proto.Int64(7), LastTransitionTime: "2026-01-02T02:04:05Z"},
				{Type: "Synced", Status: "False", Reason: "Waiting"},
			}}}}},
		"set conditions at": {SetConditionsAt("status.nested.conditions", bare), &safewritev1.Mutation{Kind: &safewritev1.Mutation_SetCondition{SetCondition: &safewritev1.SetCondition{
			Path: "status.nested.conditions", Conditions: []*safewritev1.Condition{{Type: "Synced", Status: "False", Reason: "Waiting"}}}}}},
		"remove conditions": {RemoveConditions("Ready", "Synced"), &safewritev1.Mutation{Kind: &safewritev1.Mutation_RemoveCondition{RemoveCondition: &safewritev1.RemoveCondition{
			Types: []string{"Ready", "Synced"}}}}},
		"remove conditions at": {RemoveConditionsAt("status.nested.conditions", "Ready"), &safewritev1.Mutation{Kind: &safewritev1.Mutation_RemoveCondition{RemoveCondition: &safewritev1.RemoveCondition{
			Types: []string{"Ready"}, Path: "status.nested.conditions"}}}},
		"add finalizer": {AddFinalizer("example.com/cleanup"), &safewritev1.Mutation{Kind: &safewritev1.Mutation_Finalizer{Finalizer: &safewritev1.FinalizerChange{
			Finalizer: "example.com/cleanup"}}}},
		"remove finalizer": {RemoveFinalizer("example.com/cleanup"), &safewritev1.Mutation{Kind: &safewritev1.Mutation_Finalizer{Finalizer: &safewritev1.FinalizerChange{
			Finalizer: "example.com/cleanup", Remove: true}}}},
		// The controller reference blocks the owner's deletion unless told not to.
		"controller reference":                  {SetControllerReference(deployment(true)), ownerChange("apps/v1", "Deployment", "web", "u-1", true, true, false)},
		"controller reference, no blocking":     {SetControllerReference(deployment(true), WithBlockOwnerDeletion(false)), ownerChange("apps/v1", "Deployment", "web", "u-1", true, false, false)},
		"owner reference":                       {SetOwnerReference(deployment(true)), ownerChange("apps/v1", "Deployment", "web", "u-1", false, false, false)},
		"owner reference, blocking":             {SetOwnerReference(deployment(true), WithBlockOwnerDeletion(true)), ownerChange("apps/v1", "Deployment", "web", "u-1", false, true, false)},
		"remove owner reference":                {RemoveOwnerReference(deployment(true)), ownerChange("apps/v1", "Deployment", "web", "u-1", false, false, true)},
		"unstructured owner without a uid":      {SetControllerReference(unstructuredOwner), ownerChange("test.safewrite.dev/v1", "Widget", "gear", "", true, true, false)},
		"typed: the kind from the scheme":       {typed.SetControllerReference(deployment(false)), ownerChange("apps/v1", "Deployment", "web", "u-1", true, true, false)},
		"typed: owner reference":                {typed.SetOwnerReference(deployment(false)), ownerChange("apps/v1", "Deployment", "web", "u-1", false, false, false)},
		"typed: remove owner reference":         {typed.RemoveOwnerReference(deployment(false)), ownerChange("apps/v1", "Deployment", "web", "u-1", false, false, true)},
		"typed: unstructured owner":             {typed.SetOwnerReference(unstructuredOwner), ownerChange("test.safewrite.dev/v1", "Widget", "gear", "", false, false, false)},
		"ensure a reference as given":           {EnsureOwnerReference(metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "c", UID: "u-2", Controller: &yes, BlockOwnerDeletion: &no}), ownerChange("v1", "ConfigMap", "c", "u-2", true, false, false)},
		"remove a reference without a uid":      {RemoveOwnerReferenceTo(metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "c"}), ownerChange("v1", "ConfigMap", "c", "", false, false, true)},
		"upsert an entry from a map":            {UpsertListEntry("status.parents", []string{"controllerName"}, map[string]any{"controllerName": "a", "gone": nil}), listChange("status.parents", `{"controllerName":"a","gone":null}`, false, "controllerName")},
		"upsert an entry from JSON text":        {UpsertListEntry("spec.routes", []string{"name", "port"}, ` {"name": "r", "port": 80} `), listChange("spec.routes", `{"name": "r", "port": 80}`, false, "name", "port")},
		"upsert an entry from a struct":         {UpsertListEntry("spec.routes", []string{"name", "port"}, entry{Name: "r", Port: 80}), listChange("spec.routes", `{"name":"r","port":80}`, false, "name", "port")},
		"remove an entry":                       {RemoveListEntry("spec.routes", []string{"name"}, map[string]any{"name": "r", "port": 80}), listChange("spec.routes", `{"name":"r","port":80}`, true, "name")},
		"remove an entry given by its key only": {RemoveListEntry("status.parents", []string{"controllerName"}, `{"controllerName":"a"}`), listChange("status.parents", `{"controllerName":"a"}`, true, "controllerName")},
	} {
		got, err := tc.m.proto()
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if !proto.Equal(got, tc.want) {
			t.Errorf("%s:\n got %v\nwant %v", name, got, tc.want)
		}
	}
}

func listChange(path, entryJSON string, remove bool, keys ...string) *safewritev1.Mutation {
	return &safewritev1.Mutation{Kind: &safewritev1.Mutation_ListEntry{ListEntry: &safewritev1.ListEntryChange{
		Path: path, Keys: keys, EntryJson: entryJSON, Remove: remove}}}
}

func TestListChangeMutationsRefuseBadInput(t *testing.T) {
	ready := metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Done"}
	with := func(change func(*metav1.Condition)) metav1.Condition {
		c := ready
		change(&c)
		return c
	}
	var nilOwner *metav1.PartialObjectMetadata
	nameless := deployment(true)
	nameless.Name = ""
	typed := (&Client{}).Typed(runtime.NewScheme()) // knows no kind

	for name, tc := range map[string]struct {
		m     Mutation
		field string // the field violation, or "" for none
	}{
		"no condition":                 {SetConditions(), "mutation.set_condition.conditions"},
		"a condition without a type":   {SetConditions(ready, with(func(c *metav1.Condition) { c.Type = "" })), "mutation.set_condition.conditions[1].type"},
		"a type twice":                 {SetConditions(ready, ready), "mutation.set_condition.conditions[1].type"},
		"a condition without a status": {SetConditions(with(func(c *metav1.Condition) { c.Status = "" })), "mutation.set_condition.conditions[0].status"},
		"a condition without a reason": {SetConditionsAt("status.x", with(func(c *metav1.Condition) { c.Reason = "" })), "mutation.set_condition.conditions[0].reason"},
		"no type to remove":            {RemoveConditions(), "mutation.remove_condition.types"},
		"an empty type to remove":      {RemoveConditions("Ready", ""), "mutation.remove_condition.types[1]"},
		"an empty finalizer":           {AddFinalizer(""), "mutation.finalizer.finalizer"},
		"an empty finalizer to remove": {RemoveFinalizer(""), "mutation.finalizer.finalizer"},
		"no owner":                     {SetControllerReference(nil), "mutation.owner_reference.owner"},
		"a nil owner":                  {SetOwnerReference(nilOwner), "mutation.owner_reference.owner"},
		"a typed nil owner":            {typed.RemoveOwnerReference(nilOwner), "mutation.owner_reference.owner"},
		"an owner without a name":      {RemoveOwnerReference(nameless), "mutation.owner_reference.owner.name"},
		// Not the proto's field: the Go object lacks what would make it.
		"an owner without TypeMeta":             {SetControllerReference(deployment(false)), ""},
		"an owner the scheme does not know":     {typed.SetControllerReference(deployment(false)), ""},
		"a reference without an apiVersion":     {EnsureOwnerReference(metav1.OwnerReference{Kind: "ConfigMap", Name: "c"}), "mutation.owner_reference.owner.api_version"},
		"a reference without a kind":            {EnsureOwnerReference(metav1.OwnerReference{APIVersion: "apps/v1", Name: "web", UID: "u-1"}), "mutation.owner_reference.owner.kind"},
		"a reference to remove without a name":  {RemoveOwnerReferenceTo(metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap"}), "mutation.owner_reference.owner.name"},
		"a list without a path":                 {UpsertListEntry("", []string{"k"}, `{"k":1}`), "mutation.list_entry.path"},
		"a list without keys":                   {UpsertListEntry("spec.l", nil, `{"k":1}`), "mutation.list_entry.keys"},
		"an empty key":                          {RemoveListEntry("spec.l", []string{"k", ""}, `{"k":1}`), "mutation.list_entry.keys[1]"},
		"an entry that is not an object":        {UpsertListEntry("spec.l", []string{"k"}, `[{"k":1}]`), "mutation.list_entry.entry_json"},
		"an entry that is not JSON":             {UpsertListEntry("spec.l", []string{"k"}, `{"k":`), "mutation.list_entry.entry_json"},
		"no entry":                              {RemoveListEntry("spec.l", []string{"k"}, nil), "mutation.list_entry.entry_json"},
		"an entry without its key":              {UpsertListEntry("status.parents", []string{"controllerName"}, map[string]any{"other": 1}), "mutation.list_entry.entry_json"},
		"an entry whose key is null":            {UpsertListEntry("spec.l", []string{"k"}, `{"k":null}`), "mutation.list_entry.entry_json"},
		"an entry that does not marshal at all": {UpsertListEntry("spec.l", []string{"k"}, map[string]any{"k": func() {}}), "mutation.list_entry.entry_json"},
	} {
		_, err := tc.m.proto()
		var swErr *Error
		if !errors.Is(err, ErrInvalid) || !errors.As(err, &swErr) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
			continue
		}
		var fields []string
		for _, v := range swErr.FieldViolations {
			fields = append(fields, v.Field)
		}
		if (tc.field == "" && len(fields) != 0) || (tc.field != "" && (len(fields) != 1 || fields[0] != tc.field)) {
			t.Errorf("%s: field violations %v, want %q (%v)", name, fields, tc.field, err)
		}
		if swErr.ReasonCode != safewritev1.Reason_REASON_INVALID_REQUEST {
			t.Errorf("%s: reason %s", name, swErr.ReasonCode)
		}
	}
}

// An owner reference across namespaces is refused before anything is sent, as
// controllerutil refuses it; removing one is not.
func TestOwnerReferenceNamespaces(t *testing.T) {
	owner := deployment(true) // in "ns"
	clusterOwner := deployment(true)
	clusterOwner.Namespace = ""
	for name, tc := range map[string]struct {
		m      Mutation
		target string
		ok     bool
	}{
		"same namespace":                                {SetControllerReference(owner), "ns", true},
		"a cluster-scoped owner":                        {SetOwnerReference(clusterOwner), "ns", true},
		"a cluster-scoped owner's":                      {SetOwnerReference(clusterOwner), "", true},
		"another namespace":                             {SetControllerReference(owner), "other", false},
		"a namespaced owner of a cluster-scoped object": {SetOwnerReference(owner), "", false},
		"removed from another namespace":                {RemoveOwnerReference(owner), "other", true},
		"a reference given as it is":                    {EnsureOwnerReference(metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "c"}), "", true},
	} {
		err := tc.m.checkTarget(ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: tc.target, Name: "x"})
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrInvalid)) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// Through a call: refused before the (absent) sidecar is asked.
	c, err := NewClient("unix:///nonexistent/safewrite.sock")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ref := ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: "other", Name: "x"}
	if _, err := c.Update(t.Context(), ref, SetControllerReference(owner)); !errors.Is(err, ErrInvalid) {
		t.Errorf("a call with an owner in another namespace: %v, want ErrInvalid", err)
	}
}

func TestOutcomeGone(t *testing.T) {
	res, err := resultFrom(&safewritev1.WriteResult{Outcome: safewritev1.Outcome_OUTCOME_GONE, Attempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Gone() || res.Outcome != OutcomeGone || res.Outcome.String() != "Gone" || res.Outcome.Wrote() || res.Object != nil {
		t.Errorf("a gone object: %+v", res)
	}
	if (&Result{Outcome: OutcomeUnchanged}).Gone() || (*Result)(nil).Gone() {
		t.Error("Gone of another outcome, or of no result")
	}
}
