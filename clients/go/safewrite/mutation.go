package safewrite

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"google.golang.org/grpc/codes"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	safewritev1 "safewrite.dev/clients/go/safewrite/v1"
)

// Mutation is the change to make to an object, re-applied by the sidecar to the fresh
// object on every attempt. Make one with a patch ([CEL], [MergePatch],
// [MergePatchObject], [MergeFrom], [JSONPatch], [Apply], [ApplyObject]) or a change to one entry of a list: conditions
// ([SetConditions], [RemoveConditions]), finalizers ([AddFinalizer],
// [RemoveFinalizer]), owner references ([SetControllerReference],
// [SetOwnerReference], [RemoveOwnerReference]) or any keyed list ([UpsertListEntry],
// [RemoveListEntry]). The zero Mutation is refused with [ErrInvalid].
type Mutation struct {
	pb  *safewritev1.Mutation
	err error
	// ownerNamespace is the namespace of the owner object an owner reference was made
	// from; a target in another namespace is refused (see checkTarget).
	ownerNamespace string
}

// CEL is a CEL expression evaluated against the fresh object (bound to the variable
// `object`) that returns a map, applied to the object as a JSON merge patch:
//
//	safewrite.CEL(`{"data": {"n": string(int(object.data.n) + 1)}}`)
func CEL(expression string) Mutation {
	if strings.TrimSpace(expression) == "" {
		return Mutation{err: clientError(codes.InvalidArgument, "the CEL mutation is empty")}
	}
	return Mutation{pb: &safewritev1.Mutation{Kind: &safewritev1.Mutation_Cel{
		Cel: &safewritev1.CelMutation{Expression: expression},
	}}}
}

// JSONObject is the constraint of the arguments that give a JSON object as a document
// ([MergePatch], [Apply], [WithCreateIfMissing]): JSON text of an object (a string, a
// []byte, a json.RawMessage, or any type whose underlying type is string or []byte), a
// map[string]any, or an *unstructured.Unstructured. A value of any other type does not
// compile. The values of a map, at every depth, are any values that encoding/json
// marshals; one that does not (a func, a channel) makes the mutation or option fail with
// [ErrInvalid], as do text that is not a JSON object and a nil map or pointer. A nil
// value in a map or an Unstructured is JSON null, which in a merge patch deletes the
// field.
//
// A typed object (a *corev1.ConfigMap, a Go type made with controller-gen) is no
// JSONObject: give it to [MergePatchObject], [ApplyObject] or
// [WithCreateIfMissingObject], which take any [Object].
type JSONObject interface {
	~string | ~[]byte | ~map[string]any | *unstructured.Unstructured
}

// JSONPatchOps is the constraint of [JSONPatch]'s argument: JSON text of an array (a
// string, a []byte, a json.RawMessage, or any type whose underlying type is string or
// []byte) or a []JSONPatchOp. A value of any other type (a map, a single JSONPatchOp)
// does not compile.
type JSONPatchOps interface {
	~string | ~[]byte | ~[]JSONPatchOp
}

// MergePatch is an RFC 7386 JSON merge patch, given as JSON text, a map[string]any or an
// *unstructured.Unstructured (see [JSONObject]):
//
//	safewrite.MergePatch(`{"metadata": {"labels": {"tier": "web"}}}`)
//	safewrite.MergePatch(map[string]any{"metadata": map[string]any{"labels": map[string]any{"tier": "web"}}})
//
// A nil value in a map or an Unstructured is kept and deletes the field. For a typed
// object as the patch, use [MergePatchObject]; to send exactly what changed between two
// typed objects, deletions included, use [MergeFrom].
func MergePatch[P JSONObject](patch P) Mutation {
	return mergePatch(patch)
}

// MergePatchObject is an RFC 7386 JSON merge patch given as an [Object], typically a
// typed object holding only the fields to set:
//
//	safewrite.MergePatchObject(&corev1.ConfigMap{Data: map[string]string{"tier": "web"}})
//
// A Go struct is marshalled and every null in it dropped, so the zero values that
// marshal as null (metadata's creationTimestamp, nil slices and maps without omitempty)
// are not sent: as a merge patch, null deletes. Zero values that marshal as values (a 0
// or "" without omitempty) are sent as they are. To send exactly what changed,
// deletions included, use [MergeFrom]. An *unstructured.Unstructured is sent as it is,
// its nulls included. A nil obj fails with [ErrInvalid].
func MergePatchObject(obj Object) Mutation {
	if obj == nil || isNilPointer(obj) {
		return mergePatch(nil)
	}
	return mergePatch(obj)
}

func mergePatch(patch any) Mutation {
	text, err := jsonText(patch, '{')
	if err != nil {
		return Mutation{err: clientError(codes.InvalidArgument, "merge patch: %v", err)}
	}
	return Mutation{pb: &safewritev1.Mutation{Kind: &safewritev1.Mutation_MergePatch{
		MergePatch: &safewritev1.MergePatch{PatchJson: text},
	}}}
}

// JSONPatchOp is one operation of an RFC 6902 JSON Patch.
type JSONPatchOp struct {
	// Op is "add", "remove", "replace", "move", "copy" or "test".
	Op string
	// Path is the JSON Pointer the operation applies to, e.g. "/data/n".
	Path string
	// From is the source of "move" and "copy".
	From string
	// Value is the value of "add", "replace" and "test": any value that encoding/json
	// marshals (nil is JSON null). One that does not marshal (a func, a channel) makes
	// the [JSONPatch] fail with [ErrInvalid].
	Value any
}

// MarshalJSON renders the operation with only the members its op takes.
func (op JSONPatchOp) MarshalJSON() ([]byte, error) {
	m := map[string]any{"op": op.Op, "path": op.Path}
	switch op.Op {
	case "add", "replace", "test":
		m["value"] = op.Value
	case "move", "copy":
		m["from"] = op.From
	default:
		if op.From != "" {
			m["from"] = op.From
		}
		if op.Value != nil {
			m["value"] = op.Value
		}
	}
	return json.Marshal(m)
}

// JSONPatch is an RFC 6902 JSON Patch, given as JSON text of an array or a
// []JSONPatchOp (see [JSONPatchOps]). Its "test" operations are preconditions: when one
// fails on the fresh object nothing is written and the call fails with
// [ErrPreconditionFailed], without retrying:
//
//	safewrite.JSONPatch([]safewrite.JSONPatchOp{
//		{Op: "test", Path: "/data/phase", Value: "pending"},
//		{Op: "replace", Path: "/data/phase", Value: "running"},
//	})
//
// Text that is not a JSON array, and a nil slice, fail with [ErrInvalid].
func JSONPatch[P JSONPatchOps](patch P) Mutation {
	text, err := jsonText(patch, '[')
	if err != nil {
		return Mutation{err: clientError(codes.InvalidArgument, "JSON patch: %v", err)}
	}
	return Mutation{pb: &safewritev1.Mutation{Kind: &safewritev1.Mutation_JsonPatch{
		JsonPatch: &safewritev1.JsonPatch{PatchJson: text},
	}}}
}

// Apply is a server-side apply configuration: an object with apiVersion, kind,
// metadata.name and the fields this field manager owns, given as JSON text, a
// map[string]any or an *unstructured.Unstructured (see [JSONObject]); for a typed
// object use [ApplyObject]. (A client-go apply configuration, such as
// corev1ac.ConfigMap(name, namespace).WithData(...), is neither: give its json.Marshal
// output.) A conflict with another field manager fails with [ErrConflict] (reason
// FieldManagerConflict) unless force is set, which takes ownership of those fields
// instead. Give the field manager with [WithFieldManager].
func Apply[C JSONObject](configuration C, force bool) Mutation {
	return apply(configuration, force)
}

// ApplyObject is [Apply] with the configuration given as an [Object], typically a typed
// object holding apiVersion, kind, metadata.name and the fields this field manager
// owns. Its nulls are dropped as [MergePatchObject] drops them. A nil obj fails with
// [ErrInvalid].
func ApplyObject(obj Object, force bool) Mutation {
	if obj == nil || isNilPointer(obj) {
		return apply(nil, force)
	}
	return apply(obj, force)
}

func apply(configuration any, force bool) Mutation {
	text, err := jsonText(configuration, '{')
	if err != nil {
		return Mutation{err: clientError(codes.InvalidArgument, "apply configuration: %v", err)}
	}
	return Mutation{pb: &safewritev1.Mutation{Kind: &safewritev1.Mutation_Apply{
		Apply: &safewritev1.ServerSideApply{ConfigurationJson: text, Force: force},
	}}}
}

// MergeFrom is the JSON merge patch that turns before into after: the fields after
// adds or changes, and a null for each field it removed; lists are replaced whole, as
// merge patches do. before and after are objects of the same Go type (two of another
// type do not compile), as for controller-runtime's client.MergeFrom:
//
//	before := widget.DeepCopy()
//	widget.Spec.Size = 3
//	res, err := typed.Update(ctx, widget, safewrite.MergeFrom(before, widget))
//
// Equal objects make the empty patch {}, which changes nothing ([OutcomeUnchanged]). A
// nil before or after fails with [ErrInvalid]. (For maps, wrap them in
// *unstructured.Unstructured values.)
func MergeFrom[O Object](before, after O) Mutation {
	var patch string
	var err error
	switch {
	case any(before) == nil || isNilPointer(before):
		err = fmt.Errorf("before: it is nil")
	case any(after) == nil || isNilPointer(after):
		err = fmt.Errorf("after: it is nil")
	default:
		patch, err = mergeDiff(before, after)
	}
	if err != nil {
		return Mutation{err: clientError(codes.InvalidArgument, "merge patch from a diff: %v", err)}
	}
	return Mutation{pb: &safewritev1.Mutation{Kind: &safewritev1.Mutation_MergePatch{
		MergePatch: &safewritev1.MergePatch{PatchJson: patch},
	}}}
}

// mergeDiff returns the JSON merge patch from before to after as JSON text.
func mergeDiff(before, after any) (string, error) {
	from, err := jsonObject(before)
	if err != nil {
		return "", fmt.Errorf("before: %w", err)
	}
	to, err := jsonObject(after)
	if err != nil {
		return "", fmt.Errorf("after: %w", err)
	}
	data, err := json.Marshal(diffObjects(from, to))
	if err != nil {
		return "", err
	}
	return string(data), nil
}

// diffObjects returns the merge patch that turns from into to.
func diffObjects(from, to map[string]any) map[string]any {
	patch := map[string]any{}
	for key := range from {
		if _, ok := to[key]; !ok {
			patch[key] = nil
		}
	}
	for key, value := range to {
		old, ok := from[key]
		if !ok {
			if value != nil { // null for an absent field: nothing to delete
				patch[key] = pruneNulls(value)
			}
			continue
		}
		oldMap, oldIsMap := old.(map[string]any)
		newMap, newIsMap := value.(map[string]any)
		if oldIsMap && newIsMap {
			if sub := diffObjects(oldMap, newMap); len(sub) > 0 {
				patch[key] = sub
			}
			continue
		}
		if !reflect.DeepEqual(old, value) {
			if newIsMap {
				value = pruneNulls(newMap)
			}
			patch[key] = value
		}
	}
	return patch
}

// pruneNulls returns v without its null members, at every depth (list items that are
// null are values and stay).
func pruneNulls(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for key, value := range t {
			if value == nil {
				delete(t, key)
				continue
			}
			t[key] = pruneNulls(value)
		}
	case []any:
		for i, value := range t {
			t[i] = pruneNulls(value)
		}
	}
	return v
}

// isGoStruct reports whether v is a Go struct (or a pointer to one) other than an
// Unstructured, whose JSON is its own content.
func isGoStruct(v any) bool {
	switch v.(type) {
	case *unstructured.Unstructured, unstructured.Unstructured:
		return false
	}
	rv := reflect.ValueOf(v)
	for rv.Kind() == reflect.Pointer && !rv.IsNil() {
		rv = rv.Elem()
	}
	return rv.Kind() == reflect.Struct
}

// decodeJSON parses JSON text keeping numbers exactly as written.
func decodeJSON(data []byte) (any, error) {
	decoder := json.NewDecoder(bytes.NewReader(data))
	decoder.UseNumber()
	var v any
	if err := decoder.Decode(&v); err != nil {
		return nil, err
	}
	if decoder.More() {
		return nil, fmt.Errorf("more than one JSON value")
	}
	return v, nil
}

// jsonObject renders v (as for [MergePatch]) as a JSON object, decoded.
func jsonObject(v any) (map[string]any, error) {
	text, err := jsonText(v, '{')
	if err != nil {
		return nil, err
	}
	decoded, err := decodeJSON([]byte(text))
	if err != nil {
		return nil, err
	}
	return decoded.(map[string]any), nil
}

// proto returns the mutation's message, or the error that making it found.
func (m Mutation) proto() (*safewritev1.Mutation, error) {
	if m.err != nil {
		return nil, m.err
	}
	if m.pb == nil {
		return nil, clientError(codes.InvalidArgument,
			"no mutation: make one with safewrite.CEL, MergePatch, JSONPatch, Apply, SetConditions, AddFinalizer, ...")
	}
	return m.pb, nil
}

// checkTarget refuses, as controllerutil.SetOwnerReference does, an owner reference
// to an owner of another namespace than target's, or to a namespaced owner of a
// cluster-scoped target: the garbage collector would take such an owner for absent
// and delete the target.
func (m Mutation) checkTarget(target ObjectRef) error {
	switch {
	case m.ownerNamespace == "" || m.ownerNamespace == target.Namespace:
		return nil
	case target.Namespace == "":
		return fieldError("mutation.owner_reference.owner",
			"a cluster-scoped object cannot have an owner in namespace %q", m.ownerNamespace)
	default:
		return fieldError("mutation.owner_reference.owner",
			"the owner is in namespace %q, the object in %q: owner references across namespaces are not allowed",
			m.ownerNamespace, target.Namespace)
	}
}

// jsonText renders v as JSON text whose first character is want ('{' or '['): v is
// JSON text when its type's underlying type is string or []byte, else it is marshalled
// (and when it is a Go struct, its nulls dropped). A nil v, or a nil map, pointer or
// slice, is refused.
func jsonText(v any, want byte) (string, error) {
	var data []byte
	rv := reflect.ValueOf(v)
	switch {
	case v == nil:
		return "", fmt.Errorf("it is nil")
	case rv.Kind() == reflect.String:
		data = []byte(rv.String())
	case rv.Kind() == reflect.Slice && rv.Type().Elem().Kind() == reflect.Uint8:
		if rv.IsNil() {
			return "", fmt.Errorf("it is nil")
		}
		data = rv.Bytes()
	case (rv.Kind() == reflect.Map || rv.Kind() == reflect.Pointer || rv.Kind() == reflect.Slice) && rv.IsNil():
		return "", fmt.Errorf("it is nil")
	default:
		var err error
		if data, err = json.Marshal(v); err != nil {
			return "", err
		}
		if isGoStruct(v) {
			// A typed object: its zero values that marshal as null are not meant.
			decoded, err := decodeJSON(data)
			if err != nil {
				return "", err
			}
			if data, err = json.Marshal(pruneNulls(decoded)); err != nil {
				return "", err
			}
		}
	}
	text := strings.TrimSpace(string(data))
	if !json.Valid([]byte(text)) {
		return "", fmt.Errorf("not valid JSON")
	}
	if text[0] != want {
		if want == '[' {
			return "", fmt.Errorf("not a JSON array")
		}
		return "", fmt.Errorf("not a JSON object")
	}
	return text, nil
}
