"""The package type-checks under mypy --strict, and so does a caller of it (py.typed)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

CALLER = '''
import uuid
from typing import Any, Dict, Optional
import safewrite

def bump(obj: Dict[str, Any]) -> None:
    obj["data"]["n"] = str(int(obj["data"]["n"]) + 1)

def main(client: safewrite.Client) -> int:
    ref = safewrite.ObjectRef("v1", "ConfigMap", "default", "counter")
    result: safewrite.Result = client.transact(ref, bump, timeout=5.0)
    try:
        client.update(ref, cel="{}", preconditions=safewrite.Preconditions(uid="u"))
    except safewrite.PreconditionFailedError as err:
        current: Any = err.current_object
        print(current, err.retry_delay, err.field_violations, err.attempts)
    key: str = str(uuid.uuid4())
    try:
        once = client.update(ref, cel="{}", idempotency_key=key)
        applied: bool = once.already_applied
        print(applied)
    except safewrite.OutcomeUnknownError as lost:
        reason: Optional[str] = lost.reason
        print(reason == safewrite.WRITE_OUTCOME_UNKNOWN)
    quiet = safewrite.Client("127.0.0.1:50051", propagate_trace=False)
    trace_id: str = quiet.update(ref, merge_patch={}).trace_id
    print(trace_id)
    return result.attempts


async def amain(client: safewrite.AsyncClient) -> bool:
    ref = safewrite.ObjectRef("v1", "ConfigMap", "default", "counter")
    result = await client.transact(ref, bump, idempotency_key="k-1")
    quiet = safewrite.AsyncClient("127.0.0.1:50051", propagate_trace=False)
    print((await quiet.update(ref, merge_patch={})).trace_id)
    return result.already_applied
'''


def test_mypy_strict(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    caller = tmp_path / "caller.py"
    caller.write_text(CALLER, encoding="utf-8")
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "safewrite" / "mypy"
    proc = subprocess.run(
        [
            sys.executable, "-m", "mypy",
            "--config-file", str(ROOT / "pyproject.toml"),
            "--cache-dir", str(cache),
            str(ROOT / "src" / "safewrite"),
            str(caller),
        ],
        cwd=str(ROOT),
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
