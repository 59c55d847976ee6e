#!/usr/bin/env bash
# Runs the java-operator-sdk example's test against a real control plane and sidecar
# (../../../../tests/harness/with-sidecar.sh):
#
#   bash run.sh
#
# Installs the client from ../.. into the normal ~/.m2 cache first (tests skipped there;
# ../../test.sh runs them), compiles, then runs WidgetReconcilerTest offline inside the
# harness. The first run downloads java-operator-sdk and fabric8 from Maven Central.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here"

started=$SECONDS
(cd ../.. && mvn -q -B install -DskipTests)
mvn -q -B test-compile
bash ../../../../tests/harness/with-sidecar.sh mvn -q -B -o surefire:test
echo "run.sh: the operator example passed in $((SECONDS - started))s"
