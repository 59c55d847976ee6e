#!/usr/bin/env bash
# Runs the Go client's test suite against a real control plane and real sidecars
# (../../tests/harness/with-sidecar.sh):
#
#   bash test.sh [GO TEST FLAGS...]    # e.g. -run 'TestConflict|TestNotFound'; always ./...
#
# First gofmt and go vet, then `go test -v ./...` inside with-sidecar.sh, which exports
# SAFEWRITE_ADDRESS and the rest; tests that need them fail when they are missing. The run
# fails when a test fails and when no test ran at all. Modules come from the normal Go
# module cache (outside the checkout), so only the first run downloads them.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here"

command -v go >/dev/null 2>&1 || { echo "test.sh: Go is needed (1.24 or newer)" >&2; exit 1; }

unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
  echo "test.sh: not gofmt-formatted (run gofmt -w):" >&2
  echo "$unformatted" >&2
  exit 1
fi
go vet ./...

log=$(mktemp "${TMPDIR:-/tmp}/safewrite-go-test.XXXXXX")
trap 'rm -f "$log"' EXIT
started=$SECONDS
status=0
# -v so that every test's result can be counted; the RUN/PAUSE/CONT lines are dropped.
bash ../../tests/harness/with-sidecar.sh \
  go test -count=1 -v -timeout 15m "$@" ./... 2>&1 |
  tee "$log" | awk '!/^ *=== (RUN|PAUSE|CONT|NAME)/ { print; fflush() }' || status=$?

passed=$(grep -cE '^ *--- PASS: ' "$log" || true)
failed=$(grep -cE '^ *--- FAIL: ' "$log" || true)
skipped=$(grep -cE '^ *--- SKIP: ' "$log" || true)
echo "test.sh: $passed passed, $failed failed, $skipped skipped in $((SECONDS - started))s"
if [ "$status" -ne 0 ]; then
  exit "$status"
fi
if [ "$failed" -ne 0 ] || grep -qE '^(FAIL|panic:)' "$log"; then
  exit 1 # cannot happen with go test's exit code, but never pass on a failure
fi
if [ "$((passed + failed))" -eq 0 ]; then
  echo "test.sh: no tests ran; that counts as a failure" >&2
  exit 1
fi
