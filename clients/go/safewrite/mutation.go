package safewrite

import (
	"encoding/json"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"

	safewritev1 "safewrite.dev/clients/go/safewrite/v1"
)

// Mutation is the change to make to an object, re-applied by the sidecar to the fresh
// object on every attempt. Make one with [CEL], [MergePatch], [JSONPatch] or [Apply];
// the zero Mutation is refused with [ErrInvalid].
type Mutation struct {
	pb  *safewritev1.Mutation
	err error
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

// MergePatch is an RFC 7386 JSON merge patch. patch is JSON text ([]byte, string or
// json.RawMessage) or any value that marshals to a JSON object, such as a
// map[string]any or an *unstructured.Unstructured:
//
//	safewrite.MergePatch(map[string]any{"metadata": map[string]any{"labels": map[string]any{"tier": "web"}}})
func MergePatch(patch any) Mutation {
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
	// Value is the value of "add", "replace" and "test" (nil is JSON null).
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

// JSONPatch is an RFC 6902 JSON Patch. patch is JSON text ([]byte, string or
// json.RawMessage) or any value that marshals to a JSON array, such as a
// []JSONPatchOp. Its "test" operations are preconditions: when one fails on the fresh
// object nothing is written and the call fails with [ErrPreconditionFailed], without
// retrying:
//
//	safewrite.JSONPatch([]safewrite.JSONPatchOp{
//		{Op: "test", Path: "/data/phase", Value: "pending"},
//		{Op: "replace", Path: "/data/phase", Value: "running"},
//	})
func JSONPatch(patch any) Mutation {
	text, err := jsonText(patch, '[')
	if err != nil {
		return Mutation{err: clientError(codes.InvalidArgument, "JSON patch: %v", err)}
	}
	return Mutation{pb: &safewritev1.Mutation{Kind: &safewritev1.Mutation_JsonPatch{
		JsonPatch: &safewritev1.JsonPatch{PatchJson: text},
	}}}
}

// Apply is a server-side apply configuration: an object with apiVersion, kind,
// metadata.name and the fields this field manager owns, as JSON text ([]byte, string
// or json.RawMessage) or any value that marshals to a JSON object (a typed object, a
// map, an *unstructured.Unstructured). A conflict with another field manager fails
// with [ErrConflict] (reason FieldManagerConflict) unless force is set, which takes
// ownership of those fields instead. Give the field manager with [WithFieldManager].
func Apply(configuration any, force bool) Mutation {
	text, err := jsonText(configuration, '{')
	if err != nil {
		return Mutation{err: clientError(codes.InvalidArgument, "apply configuration: %v", err)}
	}
	return Mutation{pb: &safewritev1.Mutation{Kind: &safewritev1.Mutation_Apply{
		Apply: &safewritev1.ServerSideApply{ConfigurationJson: text, Force: force},
	}}}
}

// proto returns the mutation's message, or the error that making it found.
func (m Mutation) proto() (*safewritev1.Mutation, error) {
	if m.err != nil {
		return nil, m.err
	}
	if m.pb == nil {
		return nil, clientError(codes.InvalidArgument,
			"no mutation: make one with safewrite.CEL, MergePatch, JSONPatch or Apply")
	}
	return m.pb, nil
}

// jsonText renders v as JSON text whose first character is want ('{' or '[').
func jsonText(v any, want byte) (string, error) {
	var data []byte
	switch t := v.(type) {
	case nil:
		return "", fmt.Errorf("it is nil")
	case []byte:
		data = t
	case json.RawMessage:
		data = t
	case string:
		data = []byte(t)
	default:
		var err error
		if data, err = json.Marshal(v); err != nil {
			return "", err
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
