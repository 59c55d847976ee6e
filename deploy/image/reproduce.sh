#!/usr/bin/env bash
# Checks that the image is reproducible: two builds of the same commit, in two different
# directories with two separate cargo target directories, give the same manifest digest
# (and so the same config, layer and binary, byte for byte). By hand, not in the test
# command: the second build compiles the release binary from nothing (many minutes).
#
#   deploy/image/reproduce.sh           # this checkout's image (deploy/image/build.sh,
#                                       # its warm target/image/cargo) against a fresh
#                                       # clone of HEAD built from nothing elsewhere
#   deploy/image/reproduce.sh --fresh   # two fresh clones of HEAD, both from nothing
#
# Needs a clean work tree (the image must be the commit's). Prints both digests; exits
# non-zero, with the first differing blob, when they differ. What it takes is in
# docs/supply-chain.md: SOURCE_DATE_EPOCH (the commit's time), --remap-path-prefix,
# --locked dependencies, the same toolchain (rustc -V) and a sorted, root-owned tar.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
say() { echo "reproduce: $*" >&2; }
fail() { echo "reproduce: FAIL: $*" >&2; exit 1; }
fresh=false
[ "${1:-}" != --fresh ] || fresh=true
[ -z "$(git -C "$root" status --porcelain --untracked-files=no)" ] ||
  fail "the work tree has uncommitted changes: commit or stash them (the image must be HEAD's)"
commit=$(git -C "$root" rev-parse HEAD)
work=$(mktemp -d -t safewrite-reproduce.XXXXXX)
trap 'rm -rf "$work"' EXIT

# build DIR LABEL: deploy/image/build.sh in DIR; copies its layout to $work/LABEL.
build() {
  local dir=$1 label=$2 started=$SECONDS layout
  say "$label: building in $dir"
  layout=$(bash "$dir/deploy/image/build.sh" | tail -n 1)
  cp -r "$layout" "$work/$label"
  cp "$dir/target/image/sbom/safewrite.cdx.json" "$work/$label.cdx.json"
  say "$label: $(jq -r '.manifests[0].digest' "$work/$label/index.json") in $((SECONDS - started))s"
}
clone() { # LABEL -> a fresh clone of HEAD at a path of its own
  git clone --quiet --no-hardlinks "$root" "$work/src-$1" 2>/dev/null
  git -C "$work/src-$1" checkout --quiet --detach "$commit"
  echo "$work/src-$1"
}

if $fresh; then
  build "$(clone a)" a
else
  build "$root" a
fi
build "$(clone b)" b
a=$(jq -r '.manifests[0].digest' "$work/a/index.json")
b=$(jq -r '.manifests[0].digest' "$work/b/index.json")
echo "commit $commit"
echo "build a: $a"
echo "build b: $b"
if [ "$a" != "$b" ]; then
  for blob in "$work/a/blobs/sha256/"*; do
    [ -f "$work/b/blobs/sha256/$(basename "$blob")" ] || say "only in a: $(basename "$blob") ($(stat -c %s "$blob") bytes)"
  done
  fail "two builds of $commit differ"
fi
cmp -s "$work/a.cdx.json" "$work/b.cdx.json" || say "note: the two SBOMs differ (the images do not)"
echo "reproducible: both builds of ${commit:0:12} are $a"
