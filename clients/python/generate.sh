#!/usr/bin/env bash
# Regenerates the protobuf and gRPC modules of the safewrite package from the API in
# ../../proto (safewrite/v1/writer.proto) with grpcio-tools, which bundles protoc:
#
#   bash generate.sh [OUTDIR]
#
# OUTDIR defaults to src (the modules land in src/safewrite/v1). tests/test_generated.py
# runs this into a temporary directory and fails when the committed modules are stale.
# The Python is $PYTHON, else python3; it needs the grpcio-tools version pinned in
# pyproject.toml (test.sh's virtualenv has it: pip install -e '.[test]').
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${1:-$here/src}
python=${PYTHON:-python3}
proto_root="$here/../../proto"

want=$(sed -n 's/.*"grpcio-tools==\([^"]*\)".*/\1/p' "$here/pyproject.toml")
have=$("$python" -c 'from importlib.metadata import version; print(version("grpcio-tools"))' 2>/dev/null || true)
if [ -z "$want" ] || [ "$have" != "$want" ]; then
  echo "generate.sh: needs grpcio-tools==$want in $python (found: ${have:-none}); try: $python -m pip install 'grpcio-tools==$want'" >&2
  exit 1
fi

mkdir -p "$out"
out=$(cd "$out" && pwd)
(cd "$proto_root" && "$python" -m grpc_tools.protoc -I . \
  --python_out="$out" --pyi_out="$out" --grpc_python_out="$out" \
  safewrite/v1/writer.proto)

# The gRPC module imports its messages as the top-level path of the proto file
# (`from safewrite.v1 import writer_pb2`); import them relative to the package instead,
# so the modules work wherever the package is installed or vendored.
"$python" - "$out/safewrite/v1/writer_pb2_grpc.py" <<'PY'
import re
import sys

path = sys.argv[1]
with open(path, encoding="utf-8") as f:
    text = f.read()
fixed, n = re.subn(r"^from safewrite\.v1 import writer_pb2 as ", "from . import writer_pb2 as ", text, flags=re.M)
if n != 1:
    sys.exit("generate.sh: expected one absolute import of writer_pb2 in %s, found %d" % (path, n))
with open(path, "w", encoding="utf-8") as f:
    f.write(fixed)
PY
