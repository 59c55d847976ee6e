#!/usr/bin/env bash
# The skew policy, tested both ways (docs/compatibility.md): clients and sidecars of
# different versions work together, or the client says why not before sending.
#
#   bash tests/skew.sh
#
# EARLIER is the pinned earlier version: the commit that 0.1.0 names (CHANGELOG.md),
# before rpc Lead, rpc Delete, fenced writes and rpc Capabilities. Its tree is taken
# from this repository's history (git archive) and its sidecar built once per machine,
# both kept in ${XDG_CACHE_HOME:-$HOME/.cache}/safewrite/skew-<commit>/ (the build's
# target/ is shared by every earlier commit: skew-target/).
#
#   1. Today's clients against the earlier sidecar: each client's conformance runner
#      (clients/conformance/cases.json, with its `skew` cases, which the clients must
#      refuse before sending, naming the feature, the sidecar's version and the version
#      that has it), under today's harness with SAFEWRITE_BIN set to the earlier sidecar.
#   2. The earlier clients against today's sidecar: the earlier commit's own runners and
#      cases, under its own harness, with SAFEWRITE_BIN set to today's sidecar.
#
# SKEW_CLIENTS picks clients (default: "python go typescript java"). Fails when a runner
# fails in either direction.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

EARLIER=b014967384bf39dce3066325cdf3c7063de1ea52 # 0.1.0
clients=${SKEW_CLIENTS:-python go typescript java}

cache=${XDG_CACHE_HOME:-$HOME/.cache}/safewrite
earlier_src=$cache/skew-${EARLIER:0:12}/src
earlier_target=$cache/skew-target

log() { printf 'skew.sh: %s\n' "$*" >&2; }

git cat-file -e "$EARLIER^{commit}" 2>/dev/null || {
  log "commit $EARLIER (0.1.0) is not in this clone's history: clone the repository with its history (not --depth) to run the skew tests"
  exit 1
}

# The earlier tree, once.
if [ ! -f "$earlier_src/.complete" ]; then
  log "extracting $EARLIER into $earlier_src"
  rm -rf "$earlier_src"
  mkdir -p "$earlier_src"
  git archive "$EARLIER" | tar -x -C "$earlier_src"
  # A repository of its own: its scripts list files with git ls-files.
  (cd "$earlier_src" && git init -q && git add -A &&
    git -c user.name=skew -c user.email=skew@localhost.invalid commit -q -m "${EARLIER:0:12}")
  touch "$earlier_src/.complete"
fi

# Its sidecar, built once (cargo keeps it fresh in the shared target).
log "building the earlier sidecar (${EARLIER:0:12}; the first run on a machine takes minutes)"
(cd "$earlier_src" && CARGO_TARGET_DIR=$earlier_target cargo build --locked --quiet --bin safewrite)
earlier_bin=$earlier_target/debug/safewrite
# Today's sidecar, as the rest of the test command builds it.
cargo build --quiet --bin safewrite
today_bin=$root/target/debug/safewrite
log "earlier sidecar: $("$earlier_bin" --version); today's: $("$today_bin" --version)"

# conformance DIR CLIENT: runs CLIENT's conformance runner of the tree at DIR, through
# that tree's own test.sh (its harness, its generated code, its cases).
conformance() {
  local dir=$1 client=$2
  case $client in
  python) (cd "$dir/clients/python" && bash test.sh tests/test_conformance.py -q) ;;
  go) (cd "$dir/clients/go" && bash test.sh -run 'TestConformance') ;;
  typescript) (cd "$dir/clients/typescript" && bash test.sh build/test/conformance.test.js) ;;
  java) (cd "$dir/clients/java" && bash test.sh -Dtest=ConformanceTest) ;;
  *) log "unknown client '$client' in SKEW_CLIENTS"; return 2 ;;
  esac
}

results=()
failed=0
run() {
  local direction=$1 dir=$2 bin=$3 client=$4 started=$SECONDS status=0
  log "$direction: $client"
  SAFEWRITE_BIN=$bin conformance "$dir" "$client" >"$work/$direction-$client.log" 2>&1 || status=$?
  if [ "$status" = 0 ]; then
    results+=("$(printf '%-44s %-11s passed (%ss)' "$direction" "$client" $((SECONDS - started)))")
  else
    results+=("$(printf '%-44s %-11s FAILED (%ss)' "$direction" "$client" $((SECONDS - started)))")
    log "$direction, $client failed; its log:"
    tail -n 60 "$work/$direction-$client.log" >&2
    failed=1
  fi
}

work=$(mktemp -d "${TMPDIR:-/tmp}/safewrite-skew.XXXXXX")
trap 'rm -rf "$work"' EXIT

for client in $clients; do
  run "today's clients -> 0.1.0 sidecar" "$root" "$earlier_bin" "$client"
  run "0.1.0 clients -> today's sidecar" "$earlier_src" "$today_bin" "$client"
done

printf '%s\n' "${results[@]}"
[ "$failed" = 0 ] || exit 1
echo "skew.sh: both ways passed"
