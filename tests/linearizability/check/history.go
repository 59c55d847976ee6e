// Package check checks histories of calls to the safewrite sidecar for
// linearizability, one object at a time, with porcupine.
//
// A history is a JSON file (see Load and the README): the objects written, each with
// its model (counter, register, set, conditions or finalizers) and initial value, and
// the operations made on them, each with its call and return times, what it asked and
// what it was answered.
package check

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// History is one workload run.
type History struct {
	Name       string      `json:"name"`
	Objects    []Object    `json:"objects"`
	Operations []Operation `json:"operations"`
}

// Object is one Kubernetes object of a history, checked with its own model.
type Object struct {
	Key       string `json:"key"`
	Model     string `json:"model"`
	Initial   string `json:"initial"`
	InitialRV string `json:"initial_rv,omitempty"`
}

// Input is what an operation asked for.
type Input struct {
	From  string `json:"from"`
	To    string `json:"to"`
	Value string `json:"value"`
	RV    string `json:"rv"`
	// A set_condition's condition: its type, status and reason, and the
	// lastTransitionTime asked for ("" for the time of the write).
	Type   string `json:"type,omitempty"`
	Status string `json:"status,omitempty"`
	Reason string `json:"reason,omitempty"`
	LTT    string `json:"ltt,omitempty"`
}

// Operation is one call and its answer.
type Operation struct {
	Client int    `json:"client"`
	Object string `json:"object"`
	// Call and Return are nanoseconds since the history began.
	Call   int64  `json:"call"`
	Return int64  `json:"return"`
	Kind   string `json:"kind"`
	Via    string `json:"via"`
	Input  Input  `json:"input"`
	Result string `json:"result"`
	Code   string `json:"code"`
	Reason string `json:"reason"`
	// Value and RV are the model's value and the resourceVersion of the object the
	// answer carried; both empty when it carried none.
	Value string `json:"value"`
	RV    string `json:"rv"`
}

// The models.
const (
	ModelCounter  = "counter"
	ModelRegister = "register"
	ModelSet      = "set"
	// ModelConditions is the conditions list of an object's status.
	ModelConditions = "conditions"
	// ModelFinalizers is an object's metadata.finalizers.
	ModelFinalizers = "finalizers"
)

// The kinds of operation.
const (
	KindInc    = "inc"
	KindRead   = "read"
	KindWrite  = "write"
	KindCAS    = "cas"
	KindCASRV  = "cas_rv"
	KindAppend = "append"
	// KindSetCondition upserts one condition (conditions).
	KindSetCondition = "set_condition"
	// KindAdd and KindRemove add and remove one finalizer (finalizers).
	KindAdd    = "add"
	KindRemove = "remove"
)

// The results.
const (
	ResultOK                 = "ok"
	ResultUnchanged          = "unchanged"
	ResultAlreadyApplied     = "already_applied"
	ResultPreconditionFailed = "precondition_failed"
	ResultAborted            = "aborted"
	ResultUnknown            = "unknown"
	// ResultGone: the sidecar said the object does not exist any more. No workload
	// deletes its objects, so every model refuses it.
	ResultGone = "gone"
)

var (
	modelKinds = map[string][]string{
		ModelCounter:    {KindInc, KindRead},
		ModelRegister:   {KindWrite, KindCAS, KindCASRV, KindRead},
		ModelSet:        {KindAppend, KindRead},
		ModelConditions: {KindSetCondition, KindRead},
		ModelFinalizers: {KindAdd, KindRemove, KindRead},
	}
	modelNames = []string{ModelCounter, ModelRegister, ModelSet, ModelConditions, ModelFinalizers}
	allResults = []string{ResultOK, ResultUnchanged, ResultAlreadyApplied,
		ResultPreconditionFailed, ResultAborted, ResultUnknown, ResultGone}
)

// InputError says why a history cannot be read: the file, the field and what is wrong
// with it.
type InputError struct {
	File  string // the history file, or the history's name when it has none
	Field string // e.g. "operations[12].kind"; empty for the file as a whole
	Msg   string
}

func (e *InputError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("%s: %s", e.File, e.Msg)
	}
	return fmt.Sprintf("%s: %s: %s", e.File, e.Field, e.Msg)
}

// The wire forms: pointers tell a missing field from a zero one.
type wireHistory struct {
	Name       *string           `json:"name"`
	Objects    []json.RawMessage `json:"objects"`
	Operations []json.RawMessage `json:"operations"`
}

type wireObject struct {
	Key       *string `json:"key"`
	Model     *string `json:"model"`
	Initial   *string `json:"initial"`
	InitialRV string  `json:"initial_rv"`
}

type wireOperation struct {
	Client *int    `json:"client"`
	Object *string `json:"object"`
	Call   *int64  `json:"call"`
	Return *int64  `json:"return"`
	Kind   *string `json:"kind"`
	Via    string  `json:"via"`
	Input  Input   `json:"input"`
	Result *string `json:"result"`
	Code   string  `json:"code"`
	Reason string  `json:"reason"`
	Value  string  `json:"value"`
	RV     string  `json:"rv"`
}

// Load reads and validates a history file. Every error is an *InputError naming the
// file and the field.
func Load(path string) (*History, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &InputError{File: path, Msg: err.Error()}
	}
	return Parse(path, data)
}

// Parse reads and validates a history; file names it in errors.
func Parse(file string, data []byte) (*History, error) {
	var w wireHistory
	if err := strict(data, &w); err != nil {
		return nil, &InputError{File: file, Msg: jsonMessage(data, err)}
	}
	h := &History{}
	if w.Name == nil {
		return nil, &InputError{File: file, Field: "name", Msg: "missing"}
	}
	h.Name = *w.Name
	if w.Objects == nil {
		return nil, &InputError{File: file, Field: "objects", Msg: "missing"}
	}
	if w.Operations == nil {
		return nil, &InputError{File: file, Field: "operations", Msg: "missing"}
	}
	for i, raw := range w.Objects {
		field := fmt.Sprintf("objects[%d]", i)
		var o wireObject
		if err := strict(raw, &o); err != nil {
			return nil, &InputError{File: file, Field: field, Msg: jsonMessage(raw, err)}
		}
		for _, f := range []struct {
			name string
			v    *string
		}{{"key", o.Key}, {"model", o.Model}, {"initial", o.Initial}} {
			if f.v == nil {
				return nil, &InputError{File: file, Field: field + "." + f.name, Msg: "missing"}
			}
		}
		h.Objects = append(h.Objects, Object{Key: *o.Key, Model: *o.Model, Initial: *o.Initial, InitialRV: o.InitialRV})
	}
	h.Operations = make([]Operation, 0, len(w.Operations))
	for i, raw := range w.Operations {
		field := fmt.Sprintf("operations[%d]", i)
		var o wireOperation
		if err := strict(raw, &o); err != nil {
			return nil, &InputError{File: file, Field: field, Msg: jsonMessage(raw, err)}
		}
		missing := ""
		switch {
		case o.Client == nil:
			missing = "client"
		case o.Object == nil:
			missing = "object"
		case o.Call == nil:
			missing = "call"
		case o.Return == nil:
			missing = "return"
		case o.Kind == nil:
			missing = "kind"
		case o.Result == nil:
			missing = "result"
		}
		if missing != "" {
			return nil, &InputError{File: file, Field: field + "." + missing, Msg: "missing"}
		}
		h.Operations = append(h.Operations, Operation{
			Client: *o.Client, Object: *o.Object, Call: *o.Call, Return: *o.Return,
			Kind: *o.Kind, Via: o.Via, Input: o.Input, Result: *o.Result,
			Code: o.Code, Reason: o.Reason, Value: o.Value, RV: o.RV,
		})
	}
	if err := h.Validate(); err != nil {
		var ie *InputError
		if errors.As(err, &ie) {
			ie.File = file
		}
		return nil, err
	}
	return h, nil
}

// strict decodes one JSON value, refusing unknown fields (a misspelt field would
// otherwise read as empty) and anything after the value.
func strict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("unexpected data after the JSON value")
	}
	return nil
}

// jsonMessage turns a decoding error into a message that says where.
func jsonMessage(data []byte, err error) string {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		line := 1 + bytes.Count(data[:min(int(syntax.Offset), len(data))], []byte("\n"))
		return fmt.Sprintf("invalid JSON at line %d: %s", line, syntax.Error())
	case errors.As(err, &typ):
		return fmt.Sprintf("field %q: %s where %s was expected", typ.Field, typ.Value, typ.Type)
	case errors.Is(err, io.EOF):
		return "empty: no JSON value"
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

// Validate checks what the JSON decoding cannot: the models, kinds and results named,
// the objects referred to, the times and the values. Errors are *InputError with the
// history's name as the file.
func (h *History) Validate() error {
	bad := func(field, format string, args ...any) error {
		return &InputError{File: h.Name, Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	models := map[string]string{}
	for i, o := range h.Objects {
		field := fmt.Sprintf("objects[%d]", i)
		if o.Key == "" {
			return bad(field+".key", "empty")
		}
		if _, dup := models[o.Key]; dup {
			return bad(field+".key", "%q appears twice", o.Key)
		}
		if _, ok := modelKinds[o.Model]; !ok {
			return bad(field+".model", "%q is not one of %s", o.Model, strings.Join(modelNames, ", "))
		}
		models[o.Key] = o.Model
		switch o.Model {
		case ModelCounter:
			if _, err := strconv.ParseInt(o.Initial, 10, 64); err != nil {
				return bad(field+".initial", "%q is not a decimal integer (a counter's data.n)", o.Initial)
			}
		case ModelSet, ModelFinalizers:
			if err := validList(o.Initial); err != nil {
				return bad(field+".initial", "%v", err)
			}
		case ModelConditions:
			if _, err := parseConditions(o.Initial); err != nil {
				return bad(field+".initial", "%v", err)
			}
		}
	}
	for i, op := range h.Operations {
		field := fmt.Sprintf("operations[%d]", i)
		model, ok := models[op.Object]
		if !ok {
			return bad(field+".object", "%q is not in objects", op.Object)
		}
		if !contains(modelKinds[model], op.Kind) {
			return bad(field+".kind", "%q is not a kind of the %s model (one of %s)",
				op.Kind, model, strings.Join(modelKinds[model], ", "))
		}
		if !contains(allResults, op.Result) {
			return bad(field+".result", "%q is not one of %s", op.Result, strings.Join(allResults, ", "))
		}
		if op.Call < 0 {
			return bad(field+".call", "negative (%d)", op.Call)
		}
		if op.Return < op.Call {
			return bad(field+".return", "%d is before its call %d", op.Return, op.Call)
		}
		if op.Client < 0 {
			return bad(field+".client", "negative (%d)", op.Client)
		}
		switch op.Kind {
		case KindAppend:
			if op.Input.Value == "" {
				return bad(field+".input.value", "empty: an append needs the item it appends")
			}
			if strings.Contains(op.Input.Value, ",") {
				return bad(field+".input.value", "%q contains a comma, the separator of a set's items", op.Input.Value)
			}
		case KindCASRV:
			if op.Input.RV == "" {
				return bad(field+".input.rv", "empty: a cas_rv needs the resourceVersion it requires")
			}
		case KindAdd, KindRemove:
			if op.Input.Value == "" {
				return bad(field+".input.value", "empty: %s needs the finalizer it changes", op.Kind)
			}
			if strings.Contains(op.Input.Value, ",") {
				return bad(field+".input.value", "%q contains a comma, the separator of a list's items", op.Input.Value)
			}
		case KindSetCondition:
			c := condition{typ: op.Input.Type, status: op.Input.Status, reason: op.Input.Reason, ltt: op.Input.LTT}
			for _, f := range []struct{ name, v string }{{"type", c.typ}, {"status", c.status}, {"reason", c.reason}} {
				if f.v == "" {
					return bad(field+".input."+f.name, "empty: a set_condition needs the condition's %s", f.name)
				}
			}
			if err := c.valid(); err != nil {
				return bad(field+".input", "%v", err)
			}
			if c.ltt == unknownLTT {
				return bad(field+".input.ltt", "%q is not a time", c.ltt)
			}
		}
		if op.Result == ResultUnknown {
			continue // its value, if any, is not used
		}
		switch model {
		case ModelCounter:
			if op.Value != "" {
				if _, err := strconv.ParseInt(op.Value, 10, 64); err != nil {
					return bad(field+".value", "%q is not a decimal integer (a counter's data.n)", op.Value)
				}
			}
		case ModelSet, ModelFinalizers:
			if err := validList(op.Value); err != nil {
				return bad(field+".value", "%v", err)
			}
		case ModelConditions:
			list, err := parseConditions(op.Value)
			if err != nil {
				return bad(field+".value", "%v", err)
			}
			for _, c := range list {
				if c.ltt == unknownLTT {
					return bad(field+".value", "%q is not a time", c.ltt)
				}
			}
		}
	}
	return nil
}

func validList(s string) error {
	if s == "" {
		return nil
	}
	for _, item := range strings.Split(s, ",") {
		if item == "" {
			return fmt.Errorf("%q has an empty item (a set's items are comma-separated, \"\" is the empty list)", s)
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Write writes the history as JSON (the format Load reads).
func (h *History) Write(path string) error {
	data, err := json.MarshalIndent(h, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}
