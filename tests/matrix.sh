#!/usr/bin/env bash
# The version matrix (docs/versions.md): the contract subset of the integration suite,
# listed in tests/matrix.tests, against every Kubernetes of KUBERNETES_MATRIX
# (tests/harness/versions.env) but the default, which `cargo test` runs in full.
#
#   bash tests/matrix.sh              # every entry but the default
#   bash tests/matrix.sh 1.32 v1.35.4 # these entries (the default too, when named)
#
# Each entry's kube-apiserver and etcd are built on its first run on a machine (about
# four minutes each; tests/harness/binaries.sh, cached like the default's); a build that
# fails ends the run with one line saying how to build that version alone. Nothing is
# skipped: a filter of tests/matrix.tests that matches no test fails the run, and so
# does a failure on any entry (its whole output is printed). Prints each entry's build
# and test time at the end.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
# shellcheck source=tests/harness/versions.env
. tests/harness/versions.env

mapfile -t filters < <(sed -e 's/#.*//' -e 's/[[:space:]]*$//' tests/matrix.tests | grep -v '^$')
[ "${#filters[@]}" -gt 0 ] || { echo "matrix: tests/matrix.tests lists no test" >&2; exit 1; }

# Every filter names at least one test of the suite as it is now.
listed=$(cargo test --quiet --test integration -- --list 2>/dev/null | sed -n 's/: test$//p')
for filter in "${filters[@]}"; do
  grep -qF -- "$filter" <<<"$listed" ||
    { echo "matrix: tests/matrix.tests names '$filter', which matches no test of tests/integration: rename it there" >&2; exit 1; }
done

entries=()
if [ "$#" -gt 0 ]; then
  entries=("$@")
else
  for entry in $KUBERNETES_MATRIX; do
    [ "${entry%%=*}" = "$KUBERNETES_VERSION" ] || entries+=("${entry%%=*}")
  done
fi

# Build every entry first (one at a time: each build takes both cores), then run the
# subsets SAFEWRITE_MATRIX_JOBS at a time (default 2): a subset spends most of its time
# waiting on its own control plane, backoffs and deadlines, not on the cores.
jobs=${SAFEWRITE_MATRIX_JOBS:-2}
declare -A built took status
for version in "${entries[@]}"; do
  printf '== Kubernetes %s: build (once per machine)\n' "$version"
  started=$SECONDS
  SAFEWRITE_KUBERNETES=$version bash tests/harness/binaries.sh >/dev/null
  built[$version]=$((SECONDS - started))
done

logs=$(mktemp -d "${TMPDIR:-/tmp}/safewrite-matrix.XXXXXX")
trap 'rm -rf "$logs"' EXIT
run_subset() {
  local version=$1 started=$SECONDS rc=0
  SAFEWRITE_KUBERNETES=$version cargo test --quiet --test integration -- "${filters[@]}" \
    >"$logs/$version.log" 2>&1 || rc=$?
  echo "$rc $((SECONDS - started))" >"$logs/$version.done"
}
started_all=$SECONDS
running=0
for version in "${entries[@]}"; do
  if [ "$running" -ge "$jobs" ]; then
    wait -n || true
    running=$((running - 1))
  fi
  printf '== Kubernetes %s: the contract subset (tests/matrix.tests), started\n' "$version"
  run_subset "$version" &
  running=$((running + 1))
done
wait || true

failed=()
for version in "${entries[@]}"; do
  read -r rc seconds <"$logs/$version.done"
  took[$version]=$seconds
  status[$version]=$([ "$rc" = 0 ] && echo passed || echo FAILED)
  printf '\n== Kubernetes %s: the contract subset %s in %ss\n' "$version" "${status[$version]}" "$seconds"
  if [ "$rc" = 0 ]; then
    tail -n 2 "$logs/$version.log"
  else
    cat "$logs/$version.log"
    failed+=("$version")
  fi
done

echo
for version in "${entries[@]}"; do
  printf '  %-9s build %4ss  subset %4ss  %s\n' "$version" "${built[$version]}" "${took[$version]}" "${status[$version]}"
done
echo "matrix: ${#entries[@]} versions in $((SECONDS - started_all))s of tests, $jobs at a time"
if [ "${#failed[@]}" -gt 0 ]; then
  echo "matrix: the contract subset failed on ${failed[*]}; rerun one with: bash tests/matrix.sh ${failed[0]}" >&2
  exit 1
fi
