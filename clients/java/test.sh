#!/usr/bin/env bash
# Runs the Java client's test suite against a real control plane and real sidecars
# (../../tests/harness/with-sidecar.sh):
#
#   bash test.sh [SUREFIRE FLAGS...]     # e.g. -Dtest='ErrorsTest,TransactTest'
#
# First `mvn fmt:check test` outside the harness: it checks google-java-format, generates the gRPC code from ../../proto,
# compiles, and runs the tests that need no sidecar (the first run downloads Maven,
# protoc and the dependencies from Maven Central into the normal ~/.m2 cache). Then the
# whole suite, offline (`mvn -o surefire:test`), inside with-sidecar.sh, which exports
# SAFEWRITE_ADDRESS and the rest. Then, unless surefire flags pick a part of the suite,
# install-check.sh follows the README's Install section as written, against a sidecar of
# its own: it installs the client into ~/.m2 and builds and runs a project made from the
# README, and examples/operator/run.sh runs the java-operator-sdk example in a real
# Operator against a control plane and sidecar of its own (its log goes to
# target/operator-example.log, shown when it fails). Prints the counts, the conformance
# matrix and the time; fails when a test, the install check or the example fails and when
# no test ran at all.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here"

command -v java >/dev/null 2>&1 || { echo "test.sh: a JDK is needed (17 or newer)" >&2; exit 1; }
command -v mvn >/dev/null 2>&1 || { echo "test.sh: Maven is needed (3.8 or newer)" >&2; exit 1; }

started=$SECONDS
mvn -q -B fmt:check test
echo "test.sh: compiled, offline tests passed in $((SECONDS - started))s; starting the control plane and sidecars"

reports=target/surefire-reports
rm -rf "$reports" target/conformance-matrix.txt
status=0
bash ../../tests/harness/with-sidecar.sh \
  mvn -q -B -o surefire:test -Dsafewrite.excludedGroups= "$@" || status=$?

if [ $# -eq 0 ]; then
  bash ../../tests/harness/with-sidecar.sh bash install-check.sh || status=$?
  if bash examples/operator/run.sh >target/operator-example.log 2>&1; then
    tail -n 1 target/operator-example.log
  else
    example=$?
    cat target/operator-example.log
    echo "test.sh: the java-operator-sdk example failed; its log is target/operator-example.log"
    status=$example
  fi
else
  echo "test.sh: a part of the suite: install-check.sh and the operator example not run"
fi

# Every test class leaves TEST-<class>.xml: sum its counts.
read -r tests failures errors skipped < <(
  cat "$reports"/TEST-*.xml 2>/dev/null | awk '
    /<testsuite / {
      for (i = 1; i <= NF; i++) {
        if (split($i, kv, "=") == 2) { gsub(/[">\/]/, "", kv[2]); n[kv[1]] += kv[2] }
      }
    }
    END { printf "%d %d %d %d\n", n["tests"], n["failures"], n["errors"], n["skipped"] }'
)
if [ -f target/conformance-matrix.txt ]; then
  echo "test.sh: conformance cases (../conformance/cases.json):"
  sed 's/^/  /' target/conformance-matrix.txt
fi
passed=$((tests - failures - errors - skipped))
echo "test.sh: $tests tests: $passed passed, $((failures + errors)) failed, $skipped skipped in $((SECONDS - started))s"
if [ "$status" -ne 0 ]; then
  exit "$status"
fi
if [ "$((failures + errors))" -ne 0 ]; then
  exit 1 # cannot happen with surefire's exit code, but never pass on a failure
fi
if [ "$tests" -eq 0 ]; then
  echo "test.sh: no tests ran; that counts as a failure" >&2
  exit 1
fi
