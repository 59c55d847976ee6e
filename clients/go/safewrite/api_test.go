package safewrite_test

import (
	"bufio"
	"bytes"
	"fmt"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// apiFile is the exported API of package safewrite, one declaration a line, as
// TestExportedAPI computes it.
const apiFile = "testdata/api.txt"

// TestExportedAPI fails when the exported API of package safewrite is not what
// testdata/api.txt says: every change to it, added or removed, shows in that file's
// diff, and one that breaks callers belongs in ../CHANGELOG.md. Until the module has a
// tag for gorelease to compare with (test.sh runs it with -base=none), this is its API
// check. After a deliberate change, SAFEWRITE_UPDATE_API=1 rewrites the file.
func TestExportedAPI(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs go list -export")
	}
	got := exportedAPI(t, "safewrite.dev/clients/go/safewrite")
	if os.Getenv("SAFEWRITE_UPDATE_API") == "1" {
		if err := os.WriteFile(apiFile, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(apiFile)
	if err != nil {
		t.Fatal(err)
	}
	if got == string(want) {
		return
	}
	wantLines, gotLines := lineSet(string(want)), lineSet(got)
	for _, line := range strings.Split(strings.TrimSpace(string(want)), "\n") {
		if !gotLines[line] {
			t.Errorf("removed or changed: %s", line)
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(got), "\n") {
		if !wantLines[line] {
			t.Errorf("added or changed:   %s", line)
		}
	}
	t.Errorf("the exported API is not %s: if the change is meant, run SAFEWRITE_UPDATE_API=1 go test -run TestExportedAPI ./safewrite and list breaking changes in CHANGELOG.md", apiFile)
}

func lineSet(text string) map[string]bool {
	set := map[string]bool{}
	for _, line := range strings.Split(text, "\n") {
		set[line] = true
	}
	return set
}

// exportedAPI lists the exported declarations of the package at path, sorted, with
// types named by package path: each package-level object (a struct type as its
// exported fields), and each exported method of every named type.
func exportedAPI(t *testing.T, path string) string {
	t.Helper()
	// The compiler's export data of the package and of everything it imports.
	cmd := exec.Command("go", "list", "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}", path)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -export: %v", err)
	}
	exports := map[string]string{}
	scanner := bufio.NewScanner(bytes.NewReader(out))
	for scanner.Scan() {
		if importPath, file, ok := strings.Cut(scanner.Text(), "\t"); ok && file != "" {
			exports[importPath] = file
		}
	}
	lookup := func(importPath string) (io.ReadCloser, error) {
		file, ok := exports[importPath]
		if !ok {
			return nil, fmt.Errorf("no export data for %s", importPath)
		}
		return os.Open(filepath.Clean(file))
	}
	pkg, err := importer.ForCompiler(token.NewFileSet(), "gc", lookup).Import(path)
	if err != nil {
		t.Fatal(err)
	}
	qualifier := func(p *types.Package) string {
		if p == pkg {
			return ""
		}
		return p.Path()
	}
	var lines []string
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		typeName, ok := obj.(*types.TypeName)
		if !ok || typeName.IsAlias() {
			lines = append(lines, types.ObjectString(obj, qualifier))
			continue
		}
		named := typeName.Type().(*types.Named)
		// A struct is its exported fields, one a line: unexported ones are no API.
		if st, ok := named.Underlying().(*types.Struct); ok {
			lines = append(lines, "type "+name+" struct")
			for i := range st.NumFields() {
				if field := st.Field(i); field.Exported() {
					lines = append(lines, fmt.Sprintf("field %s.%s %s", name, field.Name(), types.TypeString(field.Type(), qualifier)))
				}
			}
		} else {
			lines = append(lines, types.ObjectString(obj, qualifier))
		}
		methods := types.NewMethodSet(types.NewPointer(named))
		for i := range methods.Len() {
			if fn := methods.At(i).Obj(); fn.Exported() {
				lines = append(lines, types.ObjectString(fn, qualifier))
			}
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n") + "\n"
}
