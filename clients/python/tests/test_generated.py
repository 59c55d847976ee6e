"""The committed generated modules must be what generate.sh makes from ../../proto now."""

from __future__ import annotations

import filecmp
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
PACKAGE = HERE.parent / "src" / "safewrite_client" / "v1"
GENERATED = ("writer_pb2.py", "writer_pb2.pyi", "writer_pb2_grpc.py")


def generator_version() -> str:
    for line in (HERE / "floor-constraints.txt").read_text(encoding="utf-8").splitlines():
        if line.startswith("grpcio-tools=="):
            return line.split("==", 1)[1].strip()
    raise AssertionError("floor-constraints.txt pins no grpcio-tools")


def test_generated_modules_are_fresh(tmp_path: Path) -> None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        have = version("grpcio-tools")
    except PackageNotFoundError:
        have = None
    if have != generator_version():
        # Only test.sh's floor virtualenv has the generator (it needs the floor protobuf).
        pytest.skip("grpcio-tools==%s is not installed here" % generator_version())
    env = dict(os.environ, PYTHON=sys.executable)
    subprocess.run(
        ["bash", str(HERE.parent / "generate.sh"), str(tmp_path)], check=True, env=env
    )
    fresh = tmp_path / "safewrite_client" / "v1"
    made = sorted(p.name for p in fresh.iterdir())
    assert made == sorted(GENERATED)
    stale = [
        name for name in GENERATED if not filecmp.cmp(fresh / name, PACKAGE / name, shallow=False)
    ]
    assert not stale, (
        "the generated modules %s are stale: run `bash generate.sh` in clients/python "
        "and commit the result" % ", ".join(stale)
    )


def test_grpc_module_imports_messages_relative_to_the_package() -> None:
    text = (PACKAGE / "writer_pb2_grpc.py").read_text(encoding="utf-8")
    assert "from . import writer_pb2 as" in text
    assert "from safewrite_client.v1 import" not in text

    from safewrite_client.v1 import writer_pb2, writer_pb2_grpc

    assert writer_pb2_grpc.safewrite_dot_v1_dot_writer__pb2 is writer_pb2
    assert writer_pb2.DESCRIPTOR.package == "safewrite.v1"
    assert set(writer_pb2.DESCRIPTOR.services_by_name) == {"WriterService"}
    assert writer_pb2.WriteResult.__module__ == "safewrite_client.v1.writer_pb2"


def test_generated_code_has_no_runtime_version_guard() -> None:
    """Code from a newer protoc refuses older protobuf runtimes at import time (and its
    gRPC module refuses older grpcio): the committed modules must not, so that the
    floors in pyproject.toml hold."""
    for name in ("writer_pb2.py", "writer_pb2_grpc.py"):
        text = (PACKAGE / name).read_text(encoding="utf-8")
        assert "_runtime_version" not in text, name
        assert "GRPC_GENERATED_VERSION" not in text, name
