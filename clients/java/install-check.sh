#!/usr/bin/env bash
# Follows README.md's Install section as a newcomer would, as written:
#
#   bash ../../tests/harness/with-sidecar.sh bash install-check.sh   # test.sh does this
#
# Runs the block after "<!-- install: build -->" from the repository's root (it installs
# the client into the normal ~/.m2), makes a project in a temporary directory whose
# pom.xml is the block after "<!-- install: pom -->" and whose src/main/java/Example.java
# is the README's first example, and runs the block after "<!-- install: run -->" in it
# against the sidecar at SAFEWRITE_ADDRESS. The README's dependency snippet must be the
# one in that pom, and its version this client's. Fails when a step fails, a block is
# missing, or the example does not print what the README says it prints.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
readme=$here/README.md

fail() {
  echo "install-check: $*" >&2
  exit 1
}

# The fenced block that follows the line "<!-- install: NAME -->", without its fences.
block() {
  local text
  text=$(awk -v marker="<!-- install: $1 -->" '
    $0 == marker { found = 1; next }
    found && /^```/ { if (inside) exit; inside = 1; next }
    inside { print }
  ' "$readme")
  [ -n "$text" ] || fail "README.md has no block after <!-- install: $1 -->"
  printf '%s\n' "$text"
}

# Each line without its indentation, to compare snippets indented differently.
unindented() {
  sed 's/^[[:space:]]*//'
}

[ -n "${SAFEWRITE_ADDRESS:-}" ] || fail "SAFEWRITE_ADDRESS is not set: run this through ../../tests/harness/with-sidecar.sh"

version=$(awk '/<artifactId>safewrite-client<\/artifactId>/ { getline; print; exit }' "$here/pom.xml" |
  sed -n 's:.*<version>\(.*\)</version>.*:\1:p')
[ -n "$version" ] || fail "no version of safewrite-client in pom.xml"
build=$(block build)
dependency=$(block dependency)
pom=$(block pom)
run=$(block run)
grep -qF "<version>$version</version>" <<<"$dependency" ||
  fail "the README's dependency snippet does not name version $version (pom.xml's)"
[[ "$(unindented <<<"$pom")" == *"$(unindented <<<"$dependency")"* ]] ||
  fail "the README's consumer pom does not hold its dependency snippet"

started=$SECONDS
project=$(mktemp -d)
trap 'rm -rf "$project"' EXIT

(cd "$root" && bash -euo pipefail -c "$build") || fail "the build block failed"

mkdir -p "$project/src/main/java"
printf '%s\n' "$pom" >"$project/pom.xml"
awk '/^```java$/ { inside = 1; next } inside && /^```/ { exit } inside { print }' "$readme" \
  >"$project/src/main/java/Example.java"
[ -s "$project/src/main/java/Example.java" ] || fail "README.md has no java block"

output=$(cd "$project" && bash -euo pipefail -c "$run" 2>&1) || {
  printf '%s\n' "$output" >&2
  fail "the run block failed"
}
# Maven colours even quiet output; the example's line is the one to find.
printed=$(printf '%s\n' "$output" | sed $'s/\e\\[[0-9;]*m//g' |
  grep -E '^(CREATED|UPDATED) \{"n":"[0-9]+"\}$' || true)
[ -n "$printed" ] || {
  printf '%s\n' "$output" >&2
  fail "the example did not print CREATED or UPDATED with the counter"
}
echo "install-check: installed $version, built a project from the README and ran it: $printed ($((SECONDS - started))s)"
