"""The committed generated modules must be what generate.sh makes from ../../proto now."""

from __future__ import annotations

import filecmp
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PACKAGE = HERE.parent / "src" / "safewrite" / "v1"
GENERATED = ("writer_pb2.py", "writer_pb2.pyi", "writer_pb2_grpc.py")


def test_generated_modules_are_fresh(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHON=sys.executable)
    subprocess.run(
        ["bash", str(HERE.parent / "generate.sh"), str(tmp_path)], check=True, env=env
    )
    fresh = tmp_path / "safewrite" / "v1"
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
    assert "from safewrite.v1 import" not in text

    from safewrite.v1 import writer_pb2, writer_pb2_grpc

    assert writer_pb2_grpc.safewrite_dot_v1_dot_writer__pb2 is writer_pb2
    assert writer_pb2.DESCRIPTOR.package == "safewrite.v1"
    assert set(writer_pb2.DESCRIPTOR.services_by_name) == {"WriterService"}
