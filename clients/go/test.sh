#!/usr/bin/env bash
# Runs the Go client's test suite against a real control plane and real sidecars
# (../../tests/harness/with-sidecar.sh):
#
#   bash test.sh [GO TEST FLAGS...]    # e.g. -run 'TestConflict|TestNotFound'; always ./...
#
# Every Go module here is tested: this one (safewrite.dev/clients/go) and the nested ones
# (ctrl/: controller-runtime support and the example controller). First the checks of a
# module ready for a v0.x tag: gofmt, go vet and staticcheck of each, and gorelease of
# this one (the library; see check_release below). Then `go test -v ./...` of each, one
# module after the other, inside one with-sidecar.sh, which exports SAFEWRITE_ADDRESS
# and the rest; tests that need them fail when they are missing. The run fails when a
# test fails and when no test ran at all. Modules come from the normal Go module cache
# (outside the checkout), so only the first run downloads them, and the build cache
# keeps later runs fast.
#
# staticcheck and gorelease are Go modules too, installed at the versions below by
# `go install` into $SAFEWRITE_GO_TOOLS (default: safewrite-go-tools in the user's cache
# directory), one folder per version, so that only the first run builds them.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here"

command -v go >/dev/null 2>&1 || { echo "test.sh: Go is needed (1.24 or newer)" >&2; exit 1; }

staticcheck_version=v0.8.2                               # honnef.co/go/tools
gorelease_version=v0.0.0-20261113113407-e3970619a1a4     # golang.org/x/exp
# gorelease compares the module with release_base, the last tag (none yet), and checks
# that release_version, the next one, suits the change.
release_base=none
release_version=v0.2.0

tools=${SAFEWRITE_GO_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/safewrite-go-tools}

# tool NAME PACKAGE VERSION: the path of the binary, installed once per version.
tool() {
  local bin="$tools/$1@$3"
  if [ ! -x "$bin/$1" ]; then
    echo "test.sh: installing $2@$3 into $bin" >&2
    mkdir -p "$bin"
    GOBIN="$bin" go install "$2@$3" >&2
  fi
  echo "$bin/$1"
}

# check_release: gorelease on this module as it would be tagged. It runs on a copy of
# the module's files (the nested modules are not part of it) outside this repository,
# since gorelease refuses a repository with uncommitted changes, and the version list
# it asks for is served empty by a local file proxy: the module has no tag yet, and its
# path is not served. (ctrl/ is not checked: as a released module it would require a
# tagged version of this one, which does not exist yet.)
check_release() {
  local gorelease work
  gorelease=$(tool gorelease golang.org/x/exp/cmd/gorelease "$gorelease_version")
  work=$(mktemp -d "${TMPDIR:-/tmp}/safewrite-gorelease.XXXXXX")
  mkdir -p "$work/module" "$work/proxy/safewrite.dev/clients/go/@v"
  : >"$work/proxy/safewrite.dev/clients/go/@v/list"
  git ls-files -co --exclude-standard . | grep -v '^ctrl/' | tar -cf - -T - | tar -xf - -C "$work/module"
  local status=0
  (cd "$work/module" &&
    GOPROXY="file://$work/proxy,$(go env GOPROXY)" GOWORK=off \
      "$gorelease" -base="$release_base" -version="$release_version") || status=$?
  rm -rf "$work"
  return "$status"
}

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
staticcheck=$(tool staticcheck honnef.co/go/tools/cmd/staticcheck "$staticcheck_version")
for mod in "${modules[@]}"; do
  echo "test.sh: go vet and staticcheck in $mod"
  (cd "$mod" && go vet ./... && "$staticcheck" ./...)
done
echo "test.sh: gorelease of safewrite.dev/clients/go as $release_version"
check_release

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
