"""The package type-checks under mypy --strict, and so do a caller of it (py.typed) and
the README's examples; every public call names its parameters (no ``**kwargs``), so
Python itself, help() and a type checker all see them."""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List

import pytest

import safewrite_client as sw
import safewrite_client.kopf as sw_kopf

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"

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


def leadership(client: sw.Client, ref: sw.ObjectRef) -> int:
    import datetime
    import threading
    with client.lead("ns", "lease", identity="pod-0", lease_duration=15,
                     renew_deadline=datetime.timedelta(seconds=10), retry_period=2.0) as lead:
        fence: sw.Fence = lead.wait_leading()
        maybe: Optional[sw.Fence] = lead.wait_leading(newer_than=fence, timeout=1.0)
        current: Optional[sw.Fence] = lead.fence
        for event in lead:
            state: sw.LeadState = event.state
            reason: sw.NotLeadingReason = event.reason
            print(state, reason, event.epoch, event.holder, event.identity, event.fence, maybe, current)
            break
    with sw.fenced(fence):
        deleted: sw.DeleteResult = client.delete(
            ref, preconditions=sw.Preconditions(uid="u"),
            propagation_policy=sw.PropagationPolicy.FOREGROUND, dry_run=True, fence=fence,
        )
        print(deleted.outcome == sw.DeleteOutcome.GONE, deleted.deletion_timestamp, sw.current_fence())

    def work(fence: sw.Fence, stop: threading.Event) -> int:
        return fence.epoch

    return client.run_while_leading("ns", "lease", work, lease_duration=15)


async def aleadership(client: sw.AsyncClient, ref: sw.ObjectRef) -> int:
    async with client.lead("ns", "lease") as lead:
        fence: sw.Fence = await lead.wait_leading()
        async for event in lead:
            print(event.leading, fence)
            break
    print((await client.delete(ref)).gone)

    async def work(fence: sw.Fence) -> int:
        return fence.epoch

    return await client.run_while_leading("ns", "lease", work)
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
    client.patch_status(ref, merge_patch={}, create_if_missing={})
    client.transact(ref, lambda obj: None, write_alone=True)
    client.update(ref, "{}")
    sw.mutation(cel="{}", timeout=1.0)
'''


def mypy(*paths: Path) -> "subprocess.CompletedProcess[str]":
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "safewrite" / "mypy"
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
         "--cache-dir", str(cache), *map(str, paths)],
        cwd=str(ROOT), capture_output=True, text=True,
    )


def test_mypy_checks_every_keyword(tmp_path: Path) -> None:
    """A misspelt keyword, one the method does not take, or a value of the wrong type is
    a type error, and so is a mutation given by position."""
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
    assert 'Unexpected keyword argument "create_if_missing"' in out, out
    assert 'Unexpected keyword argument "write_alone"' in out, out
    assert "Too many positional arguments" in out, out
    assert 'Unexpected keyword argument "timeout" for "mutation"' in out, out


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
            # The examples the README shows and the tests run.
            str(ROOT / "examples" / "lead_counter" / "counter.py"),
            str(ROOT / "examples" / "kopf_widget" / "operator.py"),
        ],
        cwd=str(ROOT),
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


# --- the README's examples ------------------------------------------------------------

README_BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def test_mypy_strict_on_the_readme_examples(tmp_path: Path) -> None:
    """Every ```python block of the README, as written, passes mypy --strict."""
    pytest.importorskip("mypy")
    assert README_BLOCKS
    paths = []
    for index, block in enumerate(README_BLOCKS):
        path = tmp_path / ("readme_example_%d.py" % index)
        path.write_text(block, encoding="utf-8")
        paths.append(path)
    proc = mypy(*paths)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# --- the signatures help() shows ------------------------------------------------------

PUBLIC_CALLS: Dict[str, Callable[..., Any]] = {
    "Client.update": sw.Client.update,
    "Client.patch_status": sw.Client.patch_status,
    "Client.transact": sw.Client.transact,
    "Client.get": sw.Client.get,
    "Client.send": sw.Client.send,
    "Client.delete": sw.Client.delete,
    "Client.lead": sw.Client.lead,
    "Client.run_while_leading": sw.Client.run_while_leading,
    "AsyncClient.delete": sw.AsyncClient.delete,
    "AsyncClient.lead": sw.AsyncClient.lead,
    "AsyncClient.run_while_leading": sw.AsyncClient.run_while_leading,
    "AsyncClient.update": sw.AsyncClient.update,
    "AsyncClient.patch_status": sw.AsyncClient.patch_status,
    "AsyncClient.transact": sw.AsyncClient.transact,
    "AsyncClient.get": sw.AsyncClient.get,
    "AsyncClient.send": sw.AsyncClient.send,
    "Client": sw.Client,
    "AsyncClient": sw.AsyncClient,
    "mutation": sw.mutation,
    **{"kopf." + name: getattr(sw_kopf, name) for name in sw_kopf.__all__ if callable(getattr(sw_kopf, name))},
}


def keyword_names(fn: Callable[..., Any]) -> List[str]:
    return [
        p.name for p in inspect.signature(fn).parameters.values() if p.kind == p.KEYWORD_ONLY
    ]


@pytest.mark.parametrize("name", sorted(PUBLIC_CALLS))
def test_every_public_call_names_its_parameters(name: str) -> None:
    """No ``**kwargs``: help(), an IDE and Python's own argument checks see each one."""
    signature = inspect.signature(PUBLIC_CALLS[name])
    kinds = {p.kind for p in signature.parameters.values()}
    assert inspect.Parameter.VAR_KEYWORD not in kinds, "%s%s" % (name, signature)
    assert inspect.Parameter.VAR_POSITIONAL not in kinds, "%s%s" % (name, signature)
    for parameter in signature.parameters.values():
        if parameter.name != "self":
            assert parameter.annotation is not inspect.Parameter.empty, (name, parameter.name)


def test_help_shows_the_keywords() -> None:
    import pydoc

    text = pydoc.render_doc(sw.Client.update, renderer=pydoc.plaintext)
    for keyword in ("cel", "merge_patch", "set_conditions", "idempotency_key", "timeout"):
        assert keyword + ":" in text, text[:2000]
    assert "**kwargs" not in text


def test_the_two_clients_and_the_two_writes_take_the_same_keywords() -> None:
    """The signatures are written out per method, for help() and type checkers; these
    are the rules that keep them one shape."""
    for method in ("update", "patch_status", "transact", "get", "delete"):
        sync = inspect.signature(getattr(sw.Client, method))
        aio = inspect.signature(getattr(sw.AsyncClient, method))
        assert str(sync) == str(aio), method
    # Leadership: the same keywords; only the return (Leadership / AsyncLeadership) and
    # run's work (a thread's function / a coroutine function) differ.
    for method in ("lead", "run_while_leading"):
        sync_params = inspect.signature(getattr(sw.Client, method)).parameters
        aio_params = inspect.signature(getattr(sw.AsyncClient, method)).parameters
        assert list(sync_params) == list(aio_params), method
    update = keyword_names(sw.Client.update)
    mutation = keyword_names(sw.mutation)
    assert update[: len(mutation)] == mutation
    # The status write: the same keywords but the two a status cannot take.
    assert keyword_names(sw.Client.patch_status) == [
        k for k in update if k not in ("create_if_missing", "idempotency_key")
    ]
    # A transaction: the write options, and not the mutation (its function is).
    options = update[len(mutation) :]
    assert keyword_names(sw.Client.transact) == ["status"] + [k for k in options if k != "write_alone"]
    for name, parameter in inspect.signature(sw.Client.update).parameters.items():
        if name in mutation:
            assert parameter.default == inspect.signature(sw.mutation).parameters[name].default, name
