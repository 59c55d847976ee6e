#!/usr/bin/env bash
# Runs the TypeScript client's test suite against a real control plane and real sidecars
# (../../tests/harness/with-sidecar.sh):
#
#   bash test.sh                              # every test file
#   bash test.sh build/test/errors.test.js    # some of the compiled test files
#
# 1. `npm ci --ignore-scripts` into node_modules/ here, only when package-lock.json (or
#    the Node major version) changed since the last install;
# 2. type-checks and builds the package (tsconfig.json -> dist/) and the tests
#    (tsconfig.test.json -> build/test/; they import the package by its name);
# 3. `node --test` inside with-sidecar.sh, which exports SAFEWRITE_ADDRESS and the rest;
#    tests that need them fail when they are missing. Among them, test/readme.test.ts
#    runs test/install.sh: the README's install steps in a new project (npm install of
#    this directory, then typescript from npm's cache when it holds it).
# Prints the conformance matrix and the counts; fails when a test fails or none ran.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here"
started=$SECONDS

command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 ||
  { echo "test.sh: Node.js 20 or newer and npm are needed" >&2; exit 1; }
major=$(node -p 'process.versions.node.split(".")[0]')
[ "$major" -ge 20 ] || { echo "test.sh: Node.js 20 or newer is needed (found $(node --version))" >&2; exit 1; }

# The install is keyed by the lockfile and Node's major version; a matching stamp skips it.
stamp=node_modules/.safewrite-install
want="$(node -e 'const c = require("node:crypto"), fs = require("node:fs");
  process.stdout.write(c.createHash("sha256").update(fs.readFileSync("package-lock.json")).digest("hex"))') node$major"
if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]; then
  echo "test.sh: installing dependencies (npm ci)"
  # No package needs its install script: grpc-js is plain JavaScript, and buf's binary
  # comes in its platform package.
  npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
  echo "$want" >"$stamp"
fi

echo "test.sh: type-checking and building"
# Incremental builds (their state is in build/tsbuildinfo); a source file added or removed
# starts them over, so no output of a removed file is left behind.
sources=$(find src test -name '*.ts' | LC_ALL=C sort | tr '\n' ' ')
if [ "$(cat build/.sources 2>/dev/null || true)" != "$sources" ]; then
  rm -rf dist build
fi
rm -rf build/readme build/no-otel build/conformance-matrix.txt
node_modules/.bin/tsc -p tsconfig.json
node_modules/.bin/tsc -p tsconfig.test.json
echo "$sources" >build/.sources

if [ $# -eq 0 ]; then
  set -- build/test/*.test.js
fi
log=$(mktemp "${TMPDIR:-/tmp}/safewrite-ts-test.XXXXXX")
trap 'rm -f "$log"' EXIT
status=0
# The spec reporter for people, TAP into the log for the counts.
bash ../../tests/harness/with-sidecar.sh \
  node --test --test-reporter=spec --test-reporter-destination=stdout \
  --test-reporter=tap --test-reporter-destination="$log" "$@" || status=$?

if [ -f build/conformance-matrix.txt ]; then
  echo "test.sh: conformance cases (../conformance/cases.json):"
  sed 's/^/  /' build/conformance-matrix.txt
fi
count() { sed -n "s/^# $1 \([0-9]*\)$/\1/p" "$log" | tail -n 1; }
passed=$(count pass)
failed=$(count fail)
cancelled=$(count cancelled)
skipped=$(count skipped)
failed=$((${failed:-0} + ${cancelled:-0}))
echo "test.sh: ${passed:-0} passed, $failed failed, ${skipped:-0} skipped"
echo "test.sh: took $((SECONDS - started))s, the control plane's start included"
if [ "$status" -ne 0 ] || [ "$failed" -ne 0 ]; then
  exit 1
fi
if [ "${passed:-0}" -eq 0 ]; then
  echo "test.sh: no tests ran; that counts as a failure" >&2
  exit 1
fi
