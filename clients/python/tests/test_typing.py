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
import safewrite_client as sw

def bump(obj: Dict[str, Any]) -> None:
    obj["data"]["n"] = str(int(obj["data"]["n"]) + 1)

def main(client: sw.Client) -> int:
    ref = sw.ObjectRef("v1", "ConfigMap", "default", "counter")
    result: sw.Result = client.transact(ref, bump, timeout=5.0)
    try:
        client.update(ref, cel="{}", preconditions=sw.Preconditions(uid="u"))
    except sw.PreconditionFailedError as err:
        current: Any = err.current_object
        print(current, err.retry_delay, err.field_violations, err.attempts)
    key: str = str(uuid.uuid4())
    try:
        once = client.update(ref, cel="{}", idempotency_key=key)
        applied: bool = once.already_applied
        print(applied)
    except sw.OutcomeUnknownError as lost:
        reason: Optional[str] = lost.reason
        print(reason == sw.WRITE_OUTCOME_UNKNOWN)
    quiet = sw.Client("127.0.0.1:50051", propagate_trace=False, token="s3cret")
    trace_id: str = quiet.update(ref, merge_patch={}).trace_id
    print(trace_id)
    read: sw.ReadResult = client.get(ref, at_least=result, timeout=5.0)
    again = client.get(ref, at_least=read)
    remembered: bool = client.get(ref, min_resource_version=again.resource_version).remembered
    from safewrite_client.v1 import writer_pb2
    sent: sw.ReadResult = client.send(writer_pb2.GetRequest())
    live: Dict[str, Any] = client.get(ref, at_least=read.object).object
    print(remembered, sent, live)
    return result.attempts


def conditions_and_kopf(client: sw.Client, body: Dict[str, Any]) -> None:
    from safewrite_client.conditions import Condition
    from safewrite_client.kopf import patch_status, to_kopf
    ref = sw.ObjectRef("test.safewrite.dev/v1", "Widget", "default", "w")
    ready = Condition("Ready", True, "Reconciled", observed_generation=1)
    outcome: sw.Outcome = client.transact(ref, ready, status=True).outcome
    patch_status(client, body, {"phase": "Ready"}, conditions=[ready])
    try:
        client.update(ref, merge_patch={}, write_alone=True)
    except sw.SafewriteError as err:
        retryable: bool = err.retryable
        reason: int = err.write_failure_reason
        print(outcome, retryable, reason, sw.Reason.Name(reason), to_kopf(err))


def named_changes(client: sw.Client, body: Dict[str, Any]) -> bool:
    from safewrite_client.kopf import add_finalizer, get, remove_finalizer, set_conditions
    fresh: Dict[str, Any] = get(client, body, at_least=client.update(
        sw.ObjectRef("v1", "ConfigMap", "default", "c"), merge_patch={})).object
    print(fresh)
    ref = sw.ObjectRef("test.safewrite.dev/v1", "Widget", "default", "w")
    ready = sw.Condition("Ready", True, "Done", last_transition_time="2026-01-01T00:00:00Z")
    client.patch_status(ref, set_conditions=[ready], conditions_path="status.conditions")
    client.patch_status(ref, set_conditions=ready)
    client.patch_status(ref, remove_conditions="Ready")
    client.update(ref, add_finalizer="example.com/cleanup")
    gone: bool = client.update(ref, remove_finalizer="example.com/cleanup").gone
    try:
        client.update(ref, ensure_owner=sw.OwnerReference.of(body, controller=True))
    except sw.AlreadyOwnedError as owned:
        controller: Optional[Dict[str, Any]] = owned.controller
        print(controller)
    except sw.ObjectDeletingError:
        pass
    client.update(ref, remove_owner=body)
    parent = sw.ListEntry("status.parents", ["controllerName"], {"controllerName": "a"})
    client.patch_status(ref, upsert_list_entry=parent)
    client.patch_status(ref, remove_list_entry=parent)
    proposal = sw.mutation(add_finalizer="example.com/cleanup")
    print(proposal)
    set_conditions(client, body, [ready])
    add_finalizer(client, body, "example.com/cleanup")
    return gone or remove_finalizer(client, body, "example.com/cleanup").gone


async def amain(client: sw.AsyncClient) -> bool:
    ref = sw.ObjectRef("v1", "ConfigMap", "default", "counter")
    result = await client.transact(ref, bump, idempotency_key="k-1")
    read: sw.ReadResult = await client.get(ref, at_least=result)
    print(read.remembered)
    quiet = sw.AsyncClient("127.0.0.1:50051", propagate_trace=False, token=None)
    print((await quiet.update(ref, merge_patch={})).trace_id)
    return result.already_applied
'''


WRONG = '''
import safewrite_client as sw

def main(client: sw.Client) -> None:
    ref = sw.ObjectRef("v1", "ConfigMap", "default", "counter")
    client.update(ref, merge_ptch={})
    client.patch_status(ref, merge_patch={}, idempotency_key="k")
    client.update(ref, cel=42)
    client.update(ref, add_finalizer=["example.com/cleanup"])
    client.get(ref, at_leat=None)
    client.get(ref, min_resource_version=7)
'''


def mypy(*paths: Path) -> "subprocess.CompletedProcess[str]":
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "safewrite" / "mypy"
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
         "--cache-dir", str(cache), *map(str, paths)],
        cwd=str(ROOT), capture_output=True, text=True,
    )


def test_mypy_sees_the_keywords_declared_once(tmp_path: Path) -> None:
    """The keywords live in one TypedDict per method family (no copied signatures), and
    a type checker still checks every one of them, on both clients."""
    pytest.importorskip("mypy")
    caller = tmp_path / "wrong.py"
    caller.write_text(WRONG, encoding="utf-8")
    out = mypy(caller).stdout
    assert '"merge_ptch"' in out, out
    assert '"idempotency_key"' in out, out
    assert '"cel"' in out and "int" in out, out
    assert '"add_finalizer"' in out, out
    assert '"at_leat"' in out, out
    assert '"min_resource_version"' in out, out


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
            str(ROOT / "src" / "safewrite_client"),
            str(caller),
        ],
        cwd=str(ROOT),
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
