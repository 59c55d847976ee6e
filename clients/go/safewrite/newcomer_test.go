package safewrite_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestReadmeFirstExampleInANewModule is a newcomer's first try: a new Go module
// (`go mod init`) beside a checkout of this repository, the README's first example
// copied into it as written, the README's first install block run as written (a
// require and a replace of the checkout, then go mod tidy), and `go run .` twice
// against the real sidecar, whose address the example reads from SAFEWRITE_ADDRESS.
// The first example is that of the README's top, a counter: the second run prints a
// count one higher than the first. The new module starts with this module's go.sum
// lines, so that once the module cache is warm nothing needs the network.
func TestReadmeFirstExampleInANewModule(t *testing.T) {
	sidecarEnv(t, "SAFEWRITE_ADDRESS")
	text, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	section := installSection.FindSubmatch(text)
	if section == nil {
		t.Fatal("README.md has no <!-- begin: install --> ... <!-- end: install --> section")
	}
	steps := shBlock.FindAllSubmatch(section[1], -1)
	if len(steps) == 0 {
		t.Fatal("README.md's install section has no sh block")
	}
	example := readmeExamples(t)[0]
	if !strings.HasPrefix(example, "package main\n") {
		t.Fatalf("README.md's first example is not a whole program:\n%s", example)
	}

	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Symlink(root, filepath.Join(dir, "safewrite")); err != nil {
		t.Fatal(err)
	}
	app := filepath.Join(dir, "counter")
	if err := os.Mkdir(app, 0o755); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "GOWORK=off")
	run := func(what string, args ...string) string {
		t.Helper()
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir, cmd.Env = app, env
		began := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil {
			gomod, _ := os.ReadFile(filepath.Join(app, "go.mod"))
			t.Fatalf("%s: %v\n%s\ngo.mod:\n%s", what, err, out, gomod)
		}
		t.Logf("%s (%v):\n%s", what, time.Since(began).Round(time.Millisecond), out)
		return string(out)
	}
	run("go mod init", "go", "mod", "init", "example.com/counter")
	for name, content := range map[string]string{
		"main.go": example,
		"go.sum":  goSumLines(t, filepath.Join("..", "go.sum")),
	} {
		if err := os.WriteFile(filepath.Join(app, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run("README install block 1:\n"+string(steps[0][1]), "bash", "-euo", "pipefail", "-c", string(steps[0][1]))
	run("go vet", "go", "vet", "./...")

	count := func(out string) int {
		t.Helper()
		fields := strings.Fields(out)
		if len(fields) < 4 || fields[len(fields)-3] != "n" || fields[len(fields)-2] != "=" {
			t.Fatalf("the example printed %q, want \"<outcome> n = <count>\"", out)
		}
		n, err := strconv.Atoi(fields[len(fields)-1])
		if err != nil {
			t.Fatalf("the example printed %q: %v", out, err)
		}
		return n
	}
	first := count(run("go run . (first)", "go", "run", "."))
	second := count(run("go run . (second)", "go", "run", "."))
	if second != first+1 {
		t.Fatalf("the second run counted %d, want %d (one more than the first)", second, first+1)
	}
}
