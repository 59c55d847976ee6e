package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const history = `{
  "name": "register-run",
  "objects": [{"key": "ns/r", "model": "register", "initial": "a", "initial_rv": "10"}],
  "operations": [
    {"client": 1, "object": "ns/r", "call": 0, "return": 100, "kind": "write", "via": "merge",
     "input": {"from": "", "to": "", "value": "b", "rv": ""},
     "result": "ok", "code": "OK", "reason": "", "value": "b", "rv": "11"},
    {"client": 2, "object": "ns/r", "call": 200, "return": 300, "kind": "read", "via": "live_read",
     "input": {"from": "", "to": "", "value": "", "rv": ""},
     "result": "ok", "code": "OK", "reason": "", "value": "READ", "rv": "11"}
  ]
}`

func file(t *testing.T, dir, name, read string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(strings.Replace(history, "READ", read, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestExitCodes(t *testing.T) {
	dir := t.TempDir()
	good := file(t, dir, "good.json", "b")
	bad := file(t, dir, "bad.json", "a")
	unreadable := filepath.Join(dir, "unreadable.json")
	if err := os.WriteFile(unreadable, []byte(`{"name": "x", "objects": [], "operations": [{"client": 1}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	htmlDir := filepath.Join(dir, "html")
	cases := []struct {
		name  string
		args  []string
		code  int
		lines []string
	}{
		{"linearizable", []string{good}, 0, []string{"register-run: 2 ops, 0 unknown", ": ok"}},
		{"violation", []string{"--html-dir", htmlDir, good, bad}, 1, []string{": ok", "VIOLATION in object ns/r (register model", filepath.Join(htmlDir, "bad.ns_r.html")}},
		{"unreadable", []string{good, unreadable}, 2, []string{"UNREADABLE " + unreadable + ": operations[0].object: missing"}},
		{"violation beats unreadable", []string{unreadable, bad}, 1, []string{"UNREADABLE", "VIOLATION"}},
		{"timed out", []string{"--timeout", "1ns", good}, 3, []string{"TIMED OUT checking object ns/r", "shorten the workload"}},
		{"no file", nil, 2, nil},
		{"missing file", []string{filepath.Join(dir, "none.json")}, 2, []string{"UNREADABLE"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(c.args, &stdout, &stderr)
			if code != c.code {
				t.Fatalf("exit %d, want %d; stdout %q stderr %q", code, c.code, stdout.String(), stderr.String())
			}
			for _, want := range c.lines {
				if !strings.Contains(stdout.String(), want) {
					t.Errorf("stdout %q lacks %q", stdout.String(), want)
				}
			}
			files := 0
			for i := 0; i < len(c.args); i++ {
				if strings.HasPrefix(c.args[i], "--") {
					i++ // and its value
					continue
				}
				files++
			}
			if n := strings.Count(stdout.String(), "\n"); n != files {
				t.Errorf("%d lines for %d files: %q", n, files, stdout.String())
			}
		})
	}
	if _, err := os.Stat(filepath.Join(htmlDir, "bad.ns_r.html")); err != nil {
		t.Fatalf("no visualisation: %v", err)
	}
}
