package safewrite_test

// Checks on the package's sources: the generated code matches the proto, the install
// steps in README.md work as written, and its examples compile and run against the real
// sidecar.

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"safewrite.dev/clients/go/safewrite"
)

// TestGeneratedCodeIsFresh fails when safewrite/v1 is not what generate.sh makes from
// ../../proto now (it runs buf with the pinned plugins: see generate.sh).
func TestGeneratedCodeIsFresh(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: generate.sh --check needs buf and the pinned protoc plugins")
	}
	cmd := exec.Command("bash", filepath.Join("..", "generate.sh"), "--check")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("generate.sh --check: %v\n%s", err, out)
	}
}

var goBlock = regexp.MustCompile("(?s)```go\n(.*?)```")

// readmeExamples returns the Go code blocks of ../README.md.
func readmeExamples(t *testing.T) []string {
	t.Helper()
	text, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	for _, m := range goBlock.FindAllStringSubmatch(string(text), -1) {
		blocks = append(blocks, m[1])
	}
	if len(blocks) == 0 {
		t.Fatal("README.md has no ```go example")
	}
	return blocks
}

// TestReadmeExamplesRun runs every Go program of README.md with `go run` in this
// module: the first as it is written (it finds the sidecar through SAFEWRITE_ADDRESS),
// the others against the admin sidecar and in the test namespace. A block that is not
// a whole program (package main) must be a verbatim excerpt of the example controller,
// ../ctrl/examples/widgets/main.go, whose own test runs it.
func TestReadmeExamplesRun(t *testing.T) {
	addr := sidecarEnv(t, "SAFEWRITE_ADDRESS")
	ns := namespace(t)
	controller, err := os.ReadFile(filepath.Join("..", "ctrl", "examples", "widgets", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	for i, block := range readmeExamples(t) {
		if !strings.HasPrefix(block, "package main\n") {
			if !strings.Contains(string(controller), block) {
				t.Fatalf("README block %d is neither a whole program nor an excerpt of ctrl/examples/widgets/main.go:\n%s", i+1, block)
			}
			continue
		}
		code := block
		if i > 0 {
			code = strings.ReplaceAll(code, `"127.0.0.1:50051"`, `"`+addr+`"`)
			code = strings.ReplaceAll(code, `"default"`, `"`+ns+`"`)
		}
		dir := t.TempDir()
		file := filepath.Join(dir, "main.go")
		if err := os.WriteFile(file, []byte(code), 0o644); err != nil {
			t.Fatal(err)
		}
		vet := exec.Command("go", "vet", file)
		vet.Dir = ".."
		if out, err := vet.CombinedOutput(); err != nil {
			t.Fatalf("README example %d: go vet: %v\n%s", i+1, err, out)
		}
		run := exec.Command("go", "run", file)
		run.Dir = ".." // in this module, so the example builds against this checkout
		var stdout, stderr bytes.Buffer
		run.Stdout, run.Stderr = &stdout, &stderr
		began := time.Now()
		if err := run.Run(); err != nil {
			t.Fatalf("README example %d: %v\nstdout:\n%s\nstderr:\n%s", i+1, err, stdout.String(), stderr.String())
		}
		if strings.TrimSpace(stdout.String()) == "" {
			t.Fatalf("README example %d printed nothing", i+1)
		}
		t.Logf("README example %d (%v):\n%s", i+1, time.Since(began).Round(time.Millisecond), stdout.String())
	}
}

var (
	installSection = regexp.MustCompile(`(?s)<!-- begin: install\b[^>]*-->(.*?)<!-- end: install -->`)
	shBlock        = regexp.MustCompile("(?s)```sh\n(.*?)```")
)

// TestReadmeInstallSteps runs the install steps of ../README.md (the two sh blocks
// between its install markers), each as written, in a new module beside a checkout of
// this repository (a symbolic link to this one, at ../safewrite as the README has it):
// the first after adding the README's reconcile example, the second after adding a
// program calling safewritectrl. Then both must vet and build, and go.mod require both
// modules. The new module starts with this checkout's go.sum lines, the checksums of the
// very module versions it will require, so that once the module cache is warm nothing
// needs the network (not even the checksum database).
func TestReadmeInstallSteps(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs the go command on a new module")
	}
	text, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	section := installSection.FindSubmatch(text)
	if section == nil {
		t.Fatal("README.md has no <!-- begin: install --> ... <!-- end: install --> section")
	}
	steps := shBlock.FindAllSubmatch(section[1], -1)
	if len(steps) != 2 {
		t.Fatalf("README.md's install section has %d sh blocks, want 2: the client's, then ctrl's", len(steps))
	}
	var reconcileExample string
	for _, block := range readmeExamples(t) {
		if strings.Contains(block, "func reconcile(") {
			reconcileExample = block
		}
	}
	if reconcileExample == "" {
		t.Fatal("README.md has no reconcile example")
	}

	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Symlink(root, filepath.Join(dir, "safewrite")); err != nil {
		t.Fatal(err)
	}
	app := filepath.Join(dir, "app")
	// The programs each block is for, and the checksums.
	files := []map[string]string{{
		"main.go": reconcileExample,
		"go.sum":  goSumLines(t, filepath.Join("..", "go.sum"), filepath.Join("..", "ctrl", "go.sum")),
	}, {
		"ctrlcheck/main.go": `package main

import (
	"fmt"

	"safewrite.dev/clients/go/ctrl/safewritectrl"
)

func main() { fmt.Println(safewritectrl.Result(nil)) }
`,
	}}
	if err := os.Mkdir(app, 0o755); err != nil {
		t.Fatal(err)
	}
	// The commands run in a module of their own, outside any go.work.
	env := append(os.Environ(), "GOWORK=off")
	run := func(what string, args ...string) {
		t.Helper()
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir, cmd.Env = app, env
		began := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil {
			gomod, _ := os.ReadFile(filepath.Join(app, "go.mod"))
			t.Fatalf("%s: %v\n%s\ngo.mod:\n%s", what, err, out, gomod)
		}
		t.Logf("%s (%v)", what, time.Since(began).Round(time.Millisecond))
	}
	run("go mod init", "go", "mod", "init", "example.com/app")
	for i, step := range steps {
		for name, content := range files[i] {
			path := filepath.Join(app, name)
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		run(fmt.Sprintf("README install block %d:\n%s", i+1, step[1]), "bash", "-euo", "pipefail", "-c", string(step[1]))
	}
	run("go vet", "go", "vet", "./...")
	run("go build", "go", "build", "-o", os.DevNull, "./...")

	gomod, err := os.ReadFile(filepath.Join(app, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, module := range []string{"safewrite.dev/clients/go", "safewrite.dev/clients/go/ctrl"} {
		if !strings.Contains(string(gomod), "\t"+module+" v"+safewrite.Version+"\n") {
			t.Errorf("go.mod after the install steps does not require %s directly:\n%s", module, gomod)
		}
	}
}

// goSumLines returns the lines of the go.sum files, each once.
func goSumLines(t *testing.T, paths ...string) string {
	t.Helper()
	seen := map[string]bool{}
	var b strings.Builder
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			if line != "" && !seen[line] {
				seen[line] = true
				b.WriteString(line + "\n")
			}
		}
	}
	return b.String()
}
