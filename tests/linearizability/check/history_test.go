package check

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const goodHistory = `{
  "name": "cel-counter-1sidecar-group",
  "objects": [
    {"key": "ns/name", "model": "counter", "initial": "0"},
    {"key": "ns/name2", "model": "register", "initial": "a", "initial_rv": "1234"},
    {"key": "ns/name3", "model": "set", "initial": ""}
  ],
  "operations": [
    {"client": 7, "object": "ns/name", "call": 1200, "return": 4500, "kind": "inc", "via": "cel",
     "input": {"from": "", "to": "", "value": "", "rv": ""},
     "result": "ok", "code": "OK", "reason": "", "value": "1", "rv": "1301"},
    {"client": 8, "object": "ns/name2", "call": 1300, "return": 4000, "kind": "cas", "via": "json_patch_test",
     "input": {"from": "a", "to": "b", "value": "", "rv": ""},
     "result": "ok", "code": "OK", "reason": "", "value": "b", "rv": "1302"},
    {"client": 9, "object": "ns/name3", "call": 1400, "return": 4100, "kind": "append", "via": "cel",
     "input": {"from": "", "to": "", "value": "x", "rv": ""},
     "result": "unknown", "code": "UNKNOWN", "reason": "WRITE_OUTCOME_UNKNOWN", "value": "", "rv": ""},
    {"client": 9, "object": "ns/name3", "call": 5000, "return": 6000, "kind": "read", "via": "live_read",
     "result": "ok", "code": "OK", "value": "x", "rv": "1303"}
  ]
}`

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadGood(t *testing.T) {
	path := writeFile(t, "good.json", goodHistory)
	r, err := File(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Verdict != Linearizable || r.Operations != 4 || r.Unknown != 1 || len(r.Objects) != 3 {
		t.Fatalf("report: %+v", r)
	}
	line := r.Line()
	for _, want := range []string{"cel-counter-1sidecar-group: 4 ops, 1 unknown", "ok=3", "unknown=1",
		"codes UNKNOWN/WRITE_OUTCOME_UNKNOWN=1,", "3 objects", ": ok"} {
		if !strings.Contains(line, want) {
			t.Errorf("line %q lacks %q", line, want)
		}
	}
}

// Bad input is refused with the file and the field named.
func TestLoadBad(t *testing.T) {
	cases := []struct {
		name, from, to, field string
	}{
		{"syntax", `"kind": "inc"`, `"kind": "inc",,`, "invalid JSON at line 9"},
		{"missing return", `"call": 1200, "return": 4500,`, `"call": 1200,`, "operations[0].return: missing"},
		{"unknown kind", `"kind": "inc"`, `"kind": "incr"`, `operations[0].kind: "incr" is not a kind of the counter model`},
		{"kind of another model", `"kind": "cas"`, `"kind": "inc"`, `operations[1].kind: "inc" is not a kind of the register model`},
		{"unknown result", `"result": "ok", "code": "OK", "reason": "", "value": "b"`, `"result": "fine", "code": "OK", "reason": "", "value": "b"`, `operations[1].result: "fine" is not one of`},
		{"string for a number", `"call": 1200`, `"call": "1200"`, `operations[0]: field "call": string where int64 was expected`},
		{"misspelt field", `"initial_rv": "1234"`, `"initial_rev": "1234"`, `objects[1]: unknown field "initial_rev"`},
		{"unknown object", `"object": "ns/name2"`, `"object": "ns/nope"`, `operations[1].object: "ns/nope" is not in objects`},
		{"counter value", `"value": "1", "rv": "1301"`, `"value": "one", "rv": "1301"`, `operations[0].value: "one" is not a decimal integer`},
		{"counter initial", `"initial": "0"`, `"initial": "zero"`, `objects[0].initial: "zero" is not a decimal integer`},
		{"return before call", `"return": 4500`, `"return": 1100`, "operations[0].return: 1100 is before its call 1200"},
		{"item with a comma", `"value": "x", "rv": ""`, `"value": "x,y", "rv": ""`, `operations[2].input.value: "x,y" contains a comma`},
		{"missing objects", `"objects": [`, `"objectz": [`, `unknown field "objectz"`},
		{"unknown model", `"model": "set"`, `"model": "bag"`, `objects[2].model: "bag" is not one of counter, register, set`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if !strings.Contains(goodHistory, c.from) {
				t.Fatalf("the good history lacks %q", c.from)
			}
			path := writeFile(t, "bad.json", strings.Replace(goodHistory, c.from, c.to, 1))
			_, err := File(path, Options{})
			var ie *InputError
			if !errors.As(err, &ie) {
				t.Fatalf("error %v, want an *InputError", err)
			}
			if !strings.HasPrefix(err.Error(), path+": ") || !strings.Contains(err.Error(), c.field) {
				t.Fatalf("error %q, want the file and %q", err, c.field)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %q is more than one line", err)
			}
		})
	}
	t.Run("no file", func(t *testing.T) {
		_, err := File(filepath.Join(t.TempDir(), "none.json"), Options{})
		var ie *InputError
		if !errors.As(err, &ie) || !strings.Contains(err.Error(), "none.json") {
			t.Fatalf("error %v", err)
		}
	})
}

// A violation is written as porcupine's HTML visualisation beside the history (or
// into the directory asked for).
func TestViolationWritesHTML(t *testing.T) {
	bad := strings.Replace(goodHistory, `"value": "x", "rv": "1303"`, `"value": "y", "rv": "1303"`, 1)
	path := writeFile(t, "run-7.json", bad)
	r, err := File(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Verdict != Violation || r.ExitCode() != 1 {
		t.Fatalf("verdict %v", r.Verdict)
	}
	want := filepath.Join(filepath.Dir(path), "run-7.ns_name3.html")
	if !strings.Contains(r.Line(), "VIOLATION in object ns/name3 (set model") || !strings.Contains(r.Line(), "see "+want) {
		t.Fatalf("line %q", r.Line())
	}
	html, err := os.ReadFile(want)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(html), "<html") || !strings.Contains(string(html), "read → [y] @1303") {
		t.Fatalf("%s does not look like the visualisation", want)
	}
	// Only the violating object gets one.
	if _, err := os.Stat(filepath.Join(filepath.Dir(path), "run-7.ns_name.html")); err == nil {
		t.Fatal("a visualisation for a linearizable object")
	}

	dir := filepath.Join(t.TempDir(), "html")
	r, err = File(path, Options{HTMLDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "run-7.ns_name3.html")); err != nil || r.Objects[2].HTML == "" {
		t.Fatalf("no visualisation in --html-dir: %v", err)
	}
}

func TestTimeout(t *testing.T) {
	path := writeFile(t, "good.json", goodHistory)
	r, err := File(path, Options{Timeout: 1})
	if err != nil {
		t.Fatal(err)
	}
	if r.Verdict != TimedOut || r.ExitCode() != 3 || !strings.Contains(r.Line(), "shorten the workload") {
		t.Fatalf("%v: %s", r.Verdict, r.Line())
	}
}

const listsHistory = `{
  "name": "lists",
  "objects": [
    {"key": "ns/c", "model": "conditions", "initial": "", "initial_rv": "1"},
    {"key": "ns/f", "model": "finalizers", "initial": "", "initial_rv": "1"}
  ],
  "operations": [
    {"client": 1, "object": "ns/c", "call": 0, "return": 10, "kind": "set_condition", "via": "patch_status",
     "input": {"from": "", "to": "", "value": "", "rv": "", "type": "Ready", "status": "True", "reason": "Done", "ltt": "2001-01-01T00:00:01Z"},
     "result": "ok", "code": "OK", "reason": "", "value": "Ready=True/Done@2001-01-01T00:00:01Z", "rv": "2"},
    {"client": 2, "object": "ns/f", "call": 0, "return": 10, "kind": "add", "via": "finalizer",
     "input": {"from": "", "to": "", "value": "x.dev/f", "rv": ""},
     "result": "ok", "code": "OK", "reason": "", "value": "x.dev/f", "rv": "3"}
  ]
}`

// The conditions and finalizers models read their own fields, and refuse what they
// cannot model, naming the field.
func TestLoadLists(t *testing.T) {
	path := writeFile(t, "lists.json", listsHistory)
	r, err := File(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Verdict != Linearizable || r.Operations != 2 {
		t.Fatalf("%s", r.Line())
	}
	cases := []struct {
		name, from, to, field string
	}{
		{"no type", `"type": "Ready"`, `"type": ""`, "operations[0].input.type: empty"},
		{"no reason", `"reason": "Done"`, `"reason": ""`, "operations[0].input.reason: empty"},
		{"a type with a separator", `"type": "Ready"`, `"type": "Re;ady"`, `operations[0].input: condition type "Re;ady"`},
		{"not a conditions list", `"value": "Ready=True/Done@2001-01-01T00:00:01Z"`, `"value": "Ready True"`, `operations[0].value: "Ready True" is not a conditions list`},
		{"a type twice", `"value": "Ready=True/Done@2001-01-01T00:00:01Z"`, `"value": "R=True/D@t;R=False/D@t"`, `holds the condition type "R" twice`},
		{"no finalizer", `"value": "x.dev/f", "rv": ""`, `"value": "", "rv": ""`, "operations[1].input.value: empty: add needs the finalizer"},
		{"a finalizer with a comma", `"value": "x.dev/f", "rv": ""`, `"value": "x,y", "rv": ""`, `operations[1].input.value: "x,y" contains a comma`},
		{"a kind of another model", `"kind": "add"`, `"kind": "append"`, `operations[1].kind: "append" is not a kind of the finalizers model`},
		{"an unknown model", `"model": "finalizers"`, `"model": "finalisers"`, `objects[1].model: "finalisers" is not one of counter, register, set, conditions, finalizers`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if !strings.Contains(listsHistory, c.from) {
				t.Fatalf("the history lacks %q", c.from)
			}
			_, err := File(writeFile(t, "bad.json", strings.Replace(listsHistory, c.from, c.to, 1)), Options{})
			var ie *InputError
			if !errors.As(err, &ie) || !strings.Contains(err.Error(), c.field) {
				t.Fatalf("error %v, want an *InputError with %q", err, c.field)
			}
		})
	}
	// gone is a result like any other: read, then refused by the model.
	gone := strings.Replace(listsHistory, `"result": "ok", "code": "OK", "reason": "", "value": "x.dev/f"`,
		`"result": "gone", "code": "OK", "reason": "", "value": "x.dev/f"`, 1)
	r, err = File(writeFile(t, "gone.json", gone), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Verdict != Violation || r.Results[ResultGone] != 1 {
		t.Fatalf("%s", r.Line())
	}
}
