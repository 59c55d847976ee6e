#!/usr/bin/env bash
# The advisories half of the dependency policy (deny.toml): `cargo deny check advisories`
# needs the RustSec advisory database, a git repository that cargo-deny clones from
# GitHub. The test command runs it
#   - when SAFEWRITE_ADVISORIES=1: cargo-deny fetches (or updates) the database first;
#     CI and release machines that reach GitHub should set it;
#   - when a copy of the database is already on the machine (cargo-deny keeps it under
#     $CARGO_HOME/advisory-dbs): checked against that copy without fetching, and its age
#     is printed;
#   - otherwise not at all, and it says so: this is a skip, not a pass.
#
#   tests/supply/advisories.sh [DIR_WITH_CARGO_DENY]
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
tools=${1:-$(bash "$root/tests/harness/cargo-tools.sh" cargo-deny | tail -n 1)}
export PATH="$tools:$PATH"
dbs=${CARGO_HOME:-$HOME/.cargo}/advisory-dbs
deny=(cargo deny --manifest-path "$root/Cargo.toml" --locked check --hide-inclusion-graph)

if [ "${SAFEWRITE_ADVISORIES:-}" = 1 ]; then
  echo "advisories: fetching the RustSec advisory database (SAFEWRITE_ADVISORIES=1)"
  "${deny[@]}" advisories
  echo "advisories: ok"
  exit 0
fi
copy=""
for dir in "$dbs"/*/; do
  if [ -d "$dir/crates" ] || [ -d "$dir/.git" ]; then copy=${dir%/}; fi
done
if [ -n "$copy" ]; then
  age=$(git -C "$copy" log -1 --format=%cs 2>/dev/null || echo "unknown date")
  echo "advisories: checking against the database already on this machine (last entry $age; not fetched)"
  "${deny[@]}" --disable-fetch advisories
  echo "advisories: ok (database of $age)"
else
  echo "advisories: SKIPPED: the RustSec advisory database is not on this machine and this"
  echo "  machine cannot fetch it (cargo-deny clones it from GitHub). Licences, bans and"
  echo "  sources were checked above. Where GitHub is reachable, run"
  echo "  SAFEWRITE_ADVISORIES=1 bash tests/run-all.sh (or bash tests/supply/advisories.sh)."
fi
