// Command check checks histories of calls to the safewrite sidecar for
// linearizability (see the package check and the README).
//
//	go run ./cmd/check [--html-dir DIR] [--timeout 60s] FILE...
//
// It prints one line per history and exits 0 when every history is linearizable, 1
// on a violation, 2 when a history cannot be read, and 3 when a check ran out of
// time. With several histories the exit code is the worst: 1, then 2, then 3.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"safewrite.dev/tests/linearizability/check"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	flags := flag.NewFlagSet("check", flag.ContinueOnError)
	flags.SetOutput(stderr)
	htmlDir := flags.String("html-dir", "", "where to write the visualisation of a violation (default: the history file's directory)")
	timeout := flags.Duration("timeout", 60*time.Second, "the longest a history's check may take (0: no limit)")
	flags.Usage = func() {
		fmt.Fprintln(flags.Output(), "usage: check [--html-dir DIR] [--timeout 60s] FILE...")
		flags.PrintDefaults()
	}
	if err := flags.Parse(args); err != nil {
		return 2
	}
	if flags.NArg() == 0 {
		flags.Usage()
		return 2
	}
	violation, unreadable, timedOut := false, false, false
	for _, path := range flags.Args() {
		report, err := check.File(path, check.Options{HTMLDir: *htmlDir, Timeout: *timeout})
		if err != nil {
			var ie *check.InputError
			if errors.As(err, &ie) {
				fmt.Fprintf(stdout, "UNREADABLE %s\n", ie)
			} else {
				fmt.Fprintf(stdout, "UNREADABLE %s: %v\n", path, err)
			}
			unreadable = true
			continue
		}
		fmt.Fprintln(stdout, report.Line())
		switch report.Verdict {
		case check.Violation:
			violation = true
		case check.TimedOut:
			timedOut = true
		}
	}
	switch {
	case violation:
		return 1
	case unreadable:
		return 2
	case timedOut:
		return 3
	}
	return 0
}
