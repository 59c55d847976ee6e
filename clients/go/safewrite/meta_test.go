package safewrite_test

// Checks on the package's sources: the generated code matches the proto, and the
// examples in README.md compile and run against the real sidecar.

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
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
