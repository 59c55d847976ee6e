#!/usr/bin/env bash
# Regenerates the protobuf and gRPC modules of the safewrite_client package from the API
# in ../../proto (safewrite/v1/writer.proto) with grpcio-tools, which bundles protoc:
#
#   bash generate.sh [OUTDIR]
#
# OUTDIR defaults to src (the modules land in src/safewrite_client/v1).
# tests/test_generated.py runs this into a temporary directory and fails when the
# committed modules are stale. The Python is $PYTHON, else python3; it needs the
# grpcio-tools version pinned in tests/floor-constraints.txt (test.sh's floor
# virtualenv has it).
#
# Why that old grpcio-tools: the code protoc writes requires a protobuf runtime at least
# as new as the protoc that wrote it (newer releases check it at import time, and their
# gRPC module checks grpcio's version too). grpcio-tools 1.49.1 bundles protoc 3.21, whose
# code runs on protobuf 4.21.3 and every later release, and on grpcio 1.49.1 and later:
# those are the package's floors (pyproject.toml), and test.sh tests them.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${1:-$here/src}
python=${PYTHON:-python3}
proto_root="$here/../../proto"

want=$(sed -n 's/^grpcio-tools==\(.*\)$/\1/p' "$here/tests/floor-constraints.txt")
have=$("$python" -c 'from importlib.metadata import version; print(version("grpcio-tools"))' 2>/dev/null || true)
if [ -z "$want" ] || [ "$have" != "$want" ]; then
  echo "generate.sh: needs grpcio-tools==$want in $python (found: ${have:-none}); try: $python -m pip install -c tests/floor-constraints.txt grpcio-tools" >&2
  exit 1
fi

mkdir -p "$out"
out=$(cd "$out" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/safewrite-generate.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
(cd "$proto_root" && "$python" -m grpc_tools.protoc -I . \
  --python_out="$tmp" --pyi_out="$tmp" --grpc_python_out="$tmp" \
  safewrite/v1/writer.proto)

# protoc names the modules after the proto file's path (safewrite/v1, module
# safewrite.v1.writer_pb2); they live in the safewrite_client package instead, so the
# gRPC module imports its messages relative to the package, and the message classes
# name their real module.
mkdir -p "$out/safewrite_client/v1"
"$python" - "$tmp/safewrite/v1" "$out/safewrite_client/v1" <<'PY'
import os
import re
import sys

src, dst = sys.argv[1], sys.argv[2]
rules = {
    "writer_pb2_grpc.py": [(r"^from safewrite\.v1 import writer_pb2 as ", "from . import writer_pb2 as ")],
    "writer_pb2.py": [(r"'safewrite\.v1\.writer_pb2'", "'safewrite_client.v1.writer_pb2'")],
    "writer_pb2.pyi": [],
}
for name, subs in rules.items():
    with open(os.path.join(src, name), encoding="utf-8") as f:
        text = f.read()
    for pattern, repl in subs:
        text, n = re.subn(pattern, repl, text, flags=re.M)
        if n != 1:
            sys.exit("generate.sh: expected one match of %r in %s, found %d" % (pattern, name, n))
    with open(os.path.join(dst, name), "w", encoding="utf-8") as f:
        f.write(text)
PY
