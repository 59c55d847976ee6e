// Command gozip writes what the Go module proxy serves for one version of a module (the
// GOPROXY protocol: $module/@v/$version.info, .mod, .zip and the list), made from the
// module's directory with golang.org/x/mod/zip, the code the go command itself uses to
// make and check module zips. Run by deploy/release.sh:
//
//	go run . -dir MODULE_DIR -version vX.Y.Z -time RFC3339 -out PROXY_DIR
//
// The module path is read from MODULE_DIR/go.mod. Nested modules (subdirectories with
// their own go.mod), vendor directories and files the go command leaves out are left out,
// as in a zip the real proxy would make from the tag. The zip's entries carry no times,
// so the same files give the same bytes; .info carries the given time (the commit's).
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	modzip "golang.org/x/mod/zip"
)

func main() {
	dir := flag.String("dir", "", "the module's directory (holding go.mod)")
	version := flag.String("version", "", "the version, e.g. v0.2.0")
	when := flag.String("time", "", "the version's time, RFC 3339 (the tagged commit's)")
	out := flag.String("out", "", "the proxy directory to write into (GOPROXY=file://OUT)")
	flag.Parse()
	if err := run(*dir, *version, *when, *out); err != nil {
		fmt.Fprintln(os.Stderr, "gozip:", err)
		os.Exit(1)
	}
}

func run(dir, version, when, out string) error {
	if dir == "" || version == "" || when == "" || out == "" {
		return fmt.Errorf("usage: gozip -dir MODULE_DIR -version vX.Y.Z -time RFC3339 -out PROXY_DIR")
	}
	if !semver.IsValid(version) || semver.Canonical(version) != version {
		return fmt.Errorf("%q is not a canonical semantic version (vX.Y.Z)", version)
	}
	stamp, err := time.Parse(time.RFC3339, when)
	if err != nil {
		return fmt.Errorf("-time: %w", err)
	}
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return fmt.Errorf("failed to read the module's go.mod: %w", err)
	}
	path := modfile.ModulePath(gomod)
	if path == "" {
		return fmt.Errorf("%s/go.mod names no module", dir)
	}
	mv := module.Version{Path: path, Version: version}
	if err := module.Check(path, version); err != nil {
		return err
	}
	escaped, err := module.EscapePath(path)
	if err != nil {
		return err
	}
	at := filepath.Join(out, filepath.FromSlash(escaped), "@v")
	if err := os.MkdirAll(at, 0o755); err != nil {
		return err
	}

	var zipped bytes.Buffer
	if err := modzip.CreateFromDir(&zipped, mv, dir); err != nil {
		return fmt.Errorf("failed to zip %s: %w", path, err)
	}
	info, err := json.Marshal(struct {
		Version string
		Time    string
	}{version, stamp.UTC().Format(time.RFC3339)})
	if err != nil {
		return err
	}
	files := map[string][]byte{
		version + ".zip":  zipped.Bytes(),
		version + ".mod":  gomod,
		version + ".info": append(info, '\n'),
		"list":            []byte(version + "\n"),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(at, name), data, 0o644); err != nil {
			return err
		}
	}
	// The zip, checked as the go command checks a downloaded one.
	zipFile := filepath.Join(at, version+".zip")
	if _, err := modzip.CheckZip(mv, zipFile); err != nil {
		return fmt.Errorf("the zip fails the go command's checks: %w", err)
	}
	fmt.Println(zipFile)
	return nil
}
