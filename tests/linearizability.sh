#!/usr/bin/env bash
# The long linearizability run, by hand (not part of the test command; it runs for at
# least 20 minutes): the workloads of tests/integration/linearizability.rs (counters,
# registers, sets, status conditions, finalizers) for 20 minutes and 200,000
# operations, in rounds with one fault each (proxy hang, reset,
# dropped answers, 429/503/latency, kube-apiserver and etcd stopped and started), then
# the Go checker (tests/linearizability, porcupine) on every history. See
# tests/linearizability_long.rs.
#
#   bash tests/linearizability.sh                          # the full run
#   LIN_SECS=150 LIN_OPS=20000 bash tests/linearizability.sh   # a short one
#
# Tunables: LIN_SECS (1200), LIN_OPS (200000), LIN_ROUND_SECS (40), LIN_WRITERS per
# object (12), LIN_LIST_WRITERS per conditions or finalizers object (6), LIN_OBJECTS per
# model (1), LIN_THINK_MS (300), LIN_DEADLINE_SECS (10), LIN_LIMIT_SECS (3600),
# LIN_CHECK_TIMEOUT (600s); SAFEWRITE_LINEARIZABILITY_BIN runs another sidecar binary.
# Histories and the checker's HTML: target/linearizability/.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
echo "linearizability: building (release) ..." >&2
exec cargo test --release --test linearizability_long -- --ignored --nocapture "$@"
