#!/usr/bin/env bash
# The soak, by hand (not part of the test command; it runs for many minutes):
# 100,000 read-dependent increments with idempotency keys from 3 sidecars on a few hot
# ConfigMaps while the API server and etcd are stopped and started and the fault proxy
# hangs and resets, then a check that every OK was applied exactly once. See tests/soak.rs.
#
#   bash tests/soak.sh                          # the full soak
#   SOAK_INCREMENTS=5000 bash tests/soak.sh     # a short one
#
# Tunables: SOAK_INCREMENTS (100000), SOAK_OBJECTS (4), SOAK_CALLERS per sidecar (8),
# SOAK_LIMIT_SECS (3600).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
echo "soak: building (release) ..." >&2
exec cargo test --release --test soak -- --ignored --nocapture "$@"
