#!/usr/bin/env bash
# Regenerates the Go code of the safewrite API (safewrite/v1/*.pb.go) from
# ../../proto/safewrite/v1/writer.proto with buf and the protoc-gen-go and
# protoc-gen-go-grpc plugins, at pinned versions:
#
#   bash generate.sh            # rewrite safewrite/v1 in place
#   bash generate.sh DIR        # generate into DIR instead (DIR/safewrite/v1/...)
#   bash generate.sh --check    # fail when the committed code is stale
#
# buf is the one tests/harness/binaries.sh caches (buf compiles the proto itself: no
# protoc is needed). The plugins are installed once with `go install` into
#   ${SAFEWRITE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/safewrite}/go-plugins/<plugin>-<version>
# protoc-gen-go's version is the google.golang.org/protobuf version go.mod requires, so
# the generated code always matches the runtime it links with.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)

PROTOC_GEN_GO_GRPC_VERSION=v1.6.1
PROTOC_GEN_GO_VERSION=$(cd "$here" && go list -m -f '{{.Version}}' google.golang.org/protobuf)

cache=${SAFEWRITE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/safewrite}
plugins="$cache/go-plugins"

# install_plugin NAME PACKAGE VERSION: prints the directory holding NAME at VERSION.
install_plugin() {
  local name=$1 package=$2 version=$3
  local dir="$plugins/$name-$version"
  if [ ! -x "$dir/$name" ]; then
    echo "generate.sh: installing $name $version into $dir" >&2
    mkdir -p "$dir"
    # Outside this module, so its go.mod is neither read nor changed.
    (cd "$dir" && GOBIN="$dir" GOFLAGS= go install "$package@$version")
  fi
  echo "$dir"
}

gen_go=$(install_plugin protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go "$PROTOC_GEN_GO_VERSION")
gen_grpc=$(install_plugin protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc "$PROTOC_GEN_GO_GRPC_VERSION")
tools=$(bash "$root/tests/harness/binaries.sh" | tail -n 1)

# generate OUTDIR: writes OUTDIR/safewrite/v1/writer.pb.go and writer_grpc.pb.go.
generate() {
  local out=$1
  mkdir -p "$out"
  (cd "$here" && PATH="$gen_go:$gen_grpc:$PATH" \
    "$tools/buf" generate ../../proto --template buf.gen.yaml --output "$out")
}

case "${1:-}" in
  --check)
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    generate "$tmp"
    if ! diff -r -u "$here/safewrite/v1" "$tmp/safewrite/v1" >"$tmp/diff"; then
      cat "$tmp/diff" >&2
      echo "generate.sh: safewrite/v1 is stale: run 'bash clients/go/generate.sh' and commit the result" >&2
      exit 1
    fi
    echo "generate.sh: generated code is up to date"
    ;;
  "")
    generate "$here"
    ;;
  *)
    generate "$1"
    ;;
esac
