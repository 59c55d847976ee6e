#!/usr/bin/env bash
# Runs the Go client's test suite against a real control plane and real sidecars
# (../../tests/harness/with-sidecar.sh):
#
#   bash test.sh [GO TEST FLAGS...]    # e.g. -run 'TestConflict|TestNotFound'; always ./...
#
# Every Go module here is tested: this one (safewrite.dev/clients/go) and the nested ones
# (ctrl/: controller-runtime support and the example controller). First gofmt and
# go vet of each, then `go test -v ./...` of each, one module after the other, inside one
# with-sidecar.sh, which exports SAFEWRITE_ADDRESS and the rest; tests that need them fail
# when they are missing. The run fails when a test fails and when no test ran at all.
# Modules come from the normal Go module cache (outside the checkout), so only the first
# run downloads them, and the build cache keeps later runs fast.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here"

command -v go >/dev/null 2>&1 || { echo "test.sh: Go is needed (1.24 or newer)" >&2; exit 1; }

# This module first, then the nested ones.
modules=(.)
while IFS= read -r mod; do
  modules+=("$(dirname "$mod")")
done < <(find . -mindepth 2 -name go.mod -not -path '*/testdata/*' | sort)

unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
  echo "test.sh: not gofmt-formatted (run gofmt -w):" >&2
  echo "$unformatted" >&2
  exit 1
fi
for mod in "${modules[@]}"; do
  echo "test.sh: go vet in $mod"
  (cd "$mod" && go vet ./...)
done

log=$(mktemp "${TMPDIR:-/tmp}/safewrite-go-test.XXXXXX")
trap 'rm -f "$log"' EXIT
started=$SECONDS
status=0
# -v so that every test's result can be counted; the RUN/PAUSE/CONT lines are dropped.
# go test of every module, each in its directory; the first failure does not stop the
# others, and the exit code is the last failing one's.
test_modules='
status=0
for mod in "${MODULES[@]}"; do
  echo "test.sh: go test in $mod"
  (cd "$mod" && go test -count=1 -v -timeout 15m "$@" ./...) || status=$?
done
exit "$status"'
export MODULES_LIST="${modules[*]}"
bash ../../tests/harness/with-sidecar.sh \
  bash -c 'read -r -a MODULES <<<"$MODULES_LIST"; '"$test_modules" test-modules "$@" 2>&1 |
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
