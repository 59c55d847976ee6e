#!/usr/bin/env bash
# Regenerates the TypeScript code of the safewrite API (src/gen/) from
# ../../proto/safewrite/v1/writer.proto and the google.rpc error details vendored in
# proto/google/rpc, with buf (the one ../../tests/harness/binaries.sh caches; buf compiles
# the proto itself, no protoc is needed) and protoc-gen-es (pinned in package.json,
# installed by `npm ci`; it matches the @bufbuild/protobuf runtime):
#
#   bash generate.sh            # rewrite src/gen in place
#   bash generate.sh DIR        # generate into DIR instead (DIR/safewrite/v1/..., DIR/google/rpc/...)
#   bash generate.sh --check    # fail when the committed code is stale
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here"
[ -x node_modules/.bin/protoc-gen-es ] ||
  { echo "generate.sh: run 'npm ci' first (protoc-gen-es comes from node_modules)" >&2; exit 1; }
tools=$(bash ../../tests/harness/binaries.sh | tail -n 1)

# generate OUTDIR: writes OUTDIR/safewrite/v1/writer_pb.ts and OUTDIR/google/rpc/*_pb.ts.
generate() {
  local out=$1 tmp
  tmp=$(mktemp -d)
  # buf writes where the template says (src/gen); point it at OUTDIR through a copy.
  sed "s#out: src/gen#out: $out#" buf.gen.yaml >"$tmp/buf.gen.yaml"
  rm -rf "$out"
  mkdir -p "$out"
  PATH="$here/node_modules/.bin:$PATH" "$tools/buf" generate --template "$tmp/buf.gen.yaml"
  rm -rf "$tmp"
}

case "${1:-}" in
  --check)
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    generate "$tmp/gen"
    if ! diff -r -u src/gen "$tmp/gen" >"$tmp/diff"; then
      cat "$tmp/diff" >&2
      echo "generate.sh: src/gen is stale: run 'bash clients/typescript/generate.sh' and commit the result" >&2
      exit 1
    fi
    echo "generate.sh: generated code is up to date"
    ;;
  "")
    generate "$here/src/gen"
    ;;
  *)
    generate "$1"
    ;;
esac
