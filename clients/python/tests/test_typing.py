"""The package type-checks under mypy --strict, and so do a caller of it (py.typed) and
the README's examples; every public call names its parameters (no ``**kwargs`` that
help() or a type checker would show), so Python itself, help() and a type checker all
see them."""

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
        client.update(ref, sw.cel("{}"), preconditions=sw.Preconditions(uid="u"))
    except sw.PreconditionFailedError as err:
        current: Any = err.current_object
        print(current, err.retry_delay, err.field_violations, err.attempts)
    key: str = str(uuid.uuid4())
    try:
        once = client.update(ref, sw.cel("{}"), idempotency_key=key)
        applied: bool = once.already_applied
        print(applied)
    except sw.OutcomeUnknownError as lost:
        reason: Optional[str] = lost.reason
        print(reason == sw.WRITE_OUTCOME_UNKNOWN)
    quiet = sw.Client("127.0.0.1:50051", propagate_trace=False, token="s3cret")
    trace_id: str = quiet.update(ref, sw.merge_patch({})).trace_id
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
        client.update(ref, sw.merge_patch({}), write_alone=True)
    except sw.SafewriteError as err:
        retryable: bool = err.retryable
        reason: int = err.write_failure_reason
        print(outcome, retryable, reason, sw.Reason.Name(reason), to_kopf(err))


def named_changes(client: sw.Client, body: Dict[str, Any]) -> bool:
    from safewrite_client.kopf import add_finalizer, get, remove_finalizer, set_conditions
    fresh: Dict[str, Any] = get(client, body, at_least=client.update(
        sw.ObjectRef("v1", "ConfigMap", "default", "c"), sw.merge_patch({}))).object
    print(fresh)
    ref = sw.ObjectRef("test.safewrite.dev/v1", "Widget", "default", "w")
    ready = sw.Condition("Ready", True, "Done", last_transition_time="2026-01-01T00:00:00Z")
    client.patch_status(ref, sw.set_conditions([ready], path="status.conditions"), )
    client.patch_status(ref, sw.set_conditions(ready))
    client.patch_status(ref, sw.remove_conditions("Ready"))
    client.update(ref, sw.add_finalizer("example.com/cleanup"))
    gone: bool = client.update(ref, sw.remove_finalizer("example.com/cleanup")).gone
    try:
        client.update(ref, sw.ensure_owner(sw.OwnerReference.of(body, controller=True)))
    except sw.AlreadyOwnedError as owned:
        controller: Optional[Dict[str, Any]] = owned.controller
        print(controller)
    except sw.ObjectDeletingError:
        pass
    client.update(ref, sw.remove_owner(body))
    parent = sw.ListEntry("status.parents", ["controllerName"], {"controllerName": "a"})
    client.patch_status(ref, sw.upsert_list_entry(parent))
    client.patch_status(ref, sw.remove_list_entry(parent))
    proposal = sw.add_finalizer("example.com/cleanup")
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
    print((await quiet.update(ref, sw.merge_patch({}))).trace_id)
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
    client.update(ref, sw.merge_patch({}), field_manger="m")
    client.patch_status(ref, sw.merge_patch({}), idempotency_key="k")
    sw.cel(42)
    sw.add_finalizer(["example.com/cleanup"])
    client.get(ref, at_leat=None)
    client.get(ref, min_resource_version=7)
    client.patch_status(ref, sw.merge_patch({}), create_if_missing={})
    client.transact(ref, lambda obj: None, write_alone=True)
    client.update(ref, "{}")
    client.update(ref, cel="{}")
    client.update(ref)
    sw.apply({}, True)
    sw.set_conditions([], conditions_path="status.gates")


async def amain(client: sw.AsyncClient) -> None:
    ref = sw.ObjectRef("v1", "ConfigMap", "default", "counter")
    await client.update(ref, sw.cel("{}"), idempotency_key=7)
'''


def mypy(*paths: Path) -> "subprocess.CompletedProcess[str]":
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "safewrite" / "mypy"
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
         "--cache-dir", str(cache), *map(str, paths)],
        cwd=str(ROOT), capture_output=True, text=True,
    )


def test_mypy_checks_every_keyword(tmp_path: Path) -> None:
    """A misspelt keyword, one the method does not take, a value of the wrong type, a
    mutation that is not a Mutation or is missing, and an old-style mutation keyword
    are type errors, in both clients (whose parameters are declared once, in _core)."""
    pytest.importorskip("mypy")
    caller = tmp_path / "wrong.py"
    caller.write_text(WRONG, encoding="utf-8")
    out = mypy(caller).stdout
    assert 'Unexpected keyword argument "field_manger" for "update" of "Client"' in out, out
    assert 'Unexpected keyword argument "idempotency_key" for "patch_status" of "Client"' in out, out
    assert 'Argument 1 to "cel" has incompatible type "int"' in out, out
    assert 'Argument 1 to "add_finalizer" has incompatible type "list[str]"' in out, out
    assert '"at_leat"' in out, out
    assert '"min_resource_version"' in out, out
    assert 'Unexpected keyword argument "create_if_missing"' in out, out
    assert 'Unexpected keyword argument "write_alone"' in out, out
    assert 'Argument 2 to "update" of "Client" has incompatible type "str"; expected "Mutation"' in out, out
    assert 'Unexpected keyword argument "cel" for "update" of "Client"' in out, out
    assert 'Missing positional argument "mutation" in call to "update" of "Client"' in out, out
    assert 'Too many positional arguments for "apply"' in out, out
    assert 'Unexpected keyword argument "conditions_path" for "set_conditions"' in out, out
    assert 'Argument "idempotency_key" to "update" of "AsyncClient" has incompatible type "int"' in out, out


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
    **{name: getattr(sw, name) for name in ("cel", "merge_patch", "json_patch", "apply",
       "set_conditions", "remove_conditions", "add_finalizer", "remove_finalizer", "ensure_owner",
       "remove_owner", "upsert_list_entry", "remove_list_entry")},
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

    for method in (sw.Client.update, sw.AsyncClient.update):
        text = pydoc.render_doc(method, renderer=pydoc.plaintext)
        for keyword in ("ref", "mutation", "preconditions", "idempotency_key", "timeout"):
            assert keyword + ":" in text, text[:2000]
        assert "**kwargs" not in text and "*args" not in text, text[:2000]


def test_python_checks_a_call_against_the_one_signature() -> None:
    """The methods take ``*args, **kwargs`` and hand them to the one definition in
    _core, so Python refuses a wrong call there, naming the method."""
    client = sw.Client("127.0.0.1:1")
    try:
        with pytest.raises(TypeError, match=r"update\(\) got an unexpected keyword argument 'cel'"):
            client.update(sw.ObjectRef("v1", "ConfigMap", "ns", "cm"), cel="{}")  # type: ignore[call-arg]
        with pytest.raises(TypeError, match=r"patch_status\(\) got an unexpected keyword argument 'idempotency_key'"):
            client.patch_status(  # type: ignore[call-arg]
                sw.ObjectRef("v1", "ConfigMap", "ns", "cm"), sw.cel("{}"), idempotency_key="k"
            )
        with pytest.raises(TypeError, match=r"transact\(\) missing 1 required positional argument: 'fn'"):
            client.transact(sw.ObjectRef("v1", "ConfigMap", "ns", "cm"))  # type: ignore[call-arg]
        with pytest.raises(TypeError, match=r"get\(\) got an unexpected keyword argument 'atleast'"):
            client.get(sw.ObjectRef("v1", "ConfigMap", "ns", "cm"), atleast=None)  # type: ignore[call-arg]
        with pytest.raises(TypeError, match=r"delete\(\) takes 1 positional argument but 2 were given"):
            client.delete(sw.ObjectRef("v1", "ConfigMap", "ns", "cm"), None)  # type: ignore[misc]
        with pytest.raises(TypeError, match=r"lead\(\) missing 1 required positional argument: 'name'"):
            client.lead("ns")  # type: ignore[call-arg]
    finally:
        client.close()


def declarations() -> Dict[str, Callable[..., Any]]:
    """The one definition of each method's parameters that both clients share."""
    from safewrite_client import _core as core
    from safewrite_client import _lead

    return {
        "update": core.update, "patch_status": core.patch_status, "transact": core.transact,
        "get": core.get, "delete": core.delete, "lead": _lead.lead,
    }


def test_the_two_clients_and_the_two_writes_take_the_same_keywords() -> None:
    """update, patch_status, transact, get and delete are declared once (in _core), and
    lead once (in _lead), for both clients. These are the rules that keep them one
    shape."""
    for method in ("update", "patch_status", "transact", "get", "delete"):
        sync = inspect.signature(getattr(sw.Client, method))
        aio = inspect.signature(getattr(sw.AsyncClient, method))
        assert str(sync) == str(aio), method
    for method, declaration in declarations().items():
        declared = list(inspect.signature(declaration).parameters.values())
        for client in (sw.Client, sw.AsyncClient):
            params = list(inspect.signature(getattr(client, method)).parameters.values())
            assert params[0].name == "self" and params[1:] == declared, (client, method)
    # Leadership: the same keywords; only the return (Leadership / AsyncLeadership) and
    # run's work (a thread's function / a coroutine function) differ.
    for method in ("lead", "run_while_leading"):
        sync_params = inspect.signature(getattr(sw.Client, method)).parameters
        aio_params = inspect.signature(getattr(sw.AsyncClient, method)).parameters
        assert list(sync_params) == list(aio_params), method
    # The mutation is one parameter, positional or by name.
    update = inspect.signature(sw.Client.update).parameters
    assert list(update)[:3] == ["self", "ref", "mutation"]
    assert update["mutation"].kind == inspect.Parameter.POSITIONAL_OR_KEYWORD
    options = keyword_names(sw.Client.update)
    # The status write: the same keywords but the two a status cannot take.
    assert keyword_names(sw.Client.patch_status) == [
        k for k in options if k not in ("create_if_missing", "idempotency_key")
    ]
    # A transaction: the write options, and not the mutation (its function is).
    assert keyword_names(sw.Client.transact) == ["status"] + [k for k in options if k != "write_alone"]


def test_the_type_hints_are_the_declarations() -> None:
    """typing.get_type_hints of a method declared once sees the declaration's parameters
    (resolved where it is written) and the method's own return."""
    import typing

    leadership = {sw.Client: sw.Leadership, sw.AsyncClient: sw.AsyncLeadership}
    returns = {"get": sw.ReadResult, "delete": sw.DeleteResult}
    for method, declaration in declarations().items():
        declared = typing.get_type_hints(declaration)
        del declared["return"]
        for client in (sw.Client, sw.AsyncClient):
            hints = typing.get_type_hints(getattr(client, method))
            want = leadership[client] if method == "lead" else returns.get(method, sw.Result)
            assert hints.pop("return") is want, (client, method)
            assert hints == declared, (client, method)


MUTATIONS = ["cel", "merge_patch", "json_patch", "apply", "set_conditions", "remove_conditions",
             "add_finalizer", "remove_finalizer", "ensure_owner", "remove_owner",
             "upsert_list_entry", "remove_list_entry"]


def test_one_function_per_kind_of_mutation() -> None:
    """Each kind of mutation is one function returning a Mutation whose kind is its
    name; the mutation keywords are gone from the writes."""
    import typing

    assert list(typing.get_args(sw.MutationKind)) == MUTATIONS
    for name in MUTATIONS:
        assert getattr(sw, name).__module__ == "safewrite_client._mutation", name
        assert name in sw.__all__, name
    for method in ("update", "patch_status"):
        assert not set(MUTATIONS) & set(inspect.signature(getattr(sw.Client, method)).parameters)
    assert not hasattr(sw, "mutation")
