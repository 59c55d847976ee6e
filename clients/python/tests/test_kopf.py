"""safewrite_client.kopf: errors mapped to kopf's, the helpers' requests (to an
in-process WriterService) and writes (to the real sidecar), and the example operator
(examples/kopf_widget) run with `kopf run` against the real API server and sidecar."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from concurrent import futures
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import grpc
import pytest

import safewrite_client as sw
from conftest import capabilities_of
from safewrite_client.conditions import Condition, find_condition
from safewrite_client.v1 import writer_pb2, writer_pb2_grpc

kopf = pytest.importorskip("kopf")
from safewrite_client.kopf import (  # noqa: E402
    aadd_finalizer,
    add_finalizer,
    aget,
    aremove_finalizer,
    aset_conditions,
    get,
    kopf_errors,
    leading,
    patch_status,
    remove_finalizer,
    set_conditions,
    to_kopf,
)

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "kopf_widget" / "operator.py"


def error(code: grpc.StatusCode, reason: int, retry_delay: Optional[float] = None) -> sw.SafewriteError:
    return sw.error_class(code)(code, "m", write_failure_reason=reason, retry_delay=retry_delay)


def test_retryable_errors_become_temporary_with_the_sidecars_delay() -> None:
    from safewrite_client.v1 import writer_pb2

    temporary = to_kopf(error(grpc.StatusCode.UNAVAILABLE, writer_pb2.REASON_CIRCUIT_OPEN, 2.5))
    assert isinstance(temporary, kopf.TemporaryError) and temporary.delay == 2.5
    conflict = to_kopf(error(grpc.StatusCode.ABORTED, writer_pb2.REASON_API_SERVER), default_delay=7)
    assert isinstance(conflict, kopf.TemporaryError) and conflict.delay == 7
    # A write that may have been applied, from a call without a key: not retryable as
    # it stands, but kopf runs the handler again on the object as it then is, which is
    # the read the advice asks for.
    unknown = error(grpc.StatusCode.UNKNOWN, writer_pb2.REASON_WRITE_OUTCOME_UNKNOWN)
    assert not unknown.retryable
    assert isinstance(to_kopf(unknown), kopf.TemporaryError)
    cut_off = error(grpc.StatusCode.DEADLINE_EXCEEDED, writer_pb2.REASON_UNSPECIFIED)
    assert isinstance(to_kopf(cut_off), kopf.TemporaryError)
    final = to_kopf(error(grpc.StatusCode.INVALID_ARGUMENT, writer_pb2.REASON_INVALID_REQUEST))
    assert isinstance(final, kopf.PermanentError)
    with pytest.raises(kopf.PermanentError) as info:
        with kopf_errors():
            raise error(grpc.StatusCode.NOT_FOUND, writer_pb2.REASON_UNKNOWN_KIND)
    assert isinstance(info.value.__cause__, sw.NotFoundError)


BODY = kopf.Body({
    "apiVersion": "test.safewrite.dev/v1",
    "kind": "Widget",
    "metadata": {"namespace": "ns", "name": "w", "uid": "u-1", "generation": 3},
    "spec": {"size": 1},
})


class Recorder(writer_pb2_grpc.WriterServiceServicer):
    """Records every unary request (with its method) and answers GONE to a finalizer
    removal, UPDATED to anything else."""

    def __init__(self) -> None:
        self.requests: List[Tuple[str, Any]] = []

    def Capabilities(self, request: Any, context: Any) -> Any:
        return capabilities_of()  # a sidecar of this client's version

    def _answer(self, method: str, request: Any) -> writer_pb2.WriteResult:
        self.requests.append((method, request))
        mutation = request.mutation
        gone = mutation.WhichOneof("kind") == "finalizer" and mutation.finalizer.remove
        return writer_pb2.WriteResult(
            outcome=writer_pb2.OUTCOME_GONE if gone else writer_pb2.OUTCOME_UPDATED, attempts=1
        )

    def UpdateWithRetry(self, request: Any, context: Any) -> Any:
        return writer_pb2.UpdateWithRetryResponse(result=self._answer("UpdateWithRetry", request))

    def PatchStatus(self, request: Any, context: Any) -> Any:
        return writer_pb2.PatchStatusResponse(result=self._answer("PatchStatus", request))

    def Get(self, request: Any, context: Any) -> Any:
        """The object with uid u-1, or u-2 for the name "recreated"; "gone" is not found."""
        self.requests.append(("Get", request))
        if request.target.name == "gone":
            context.abort(grpc.StatusCode.NOT_FOUND, "gone")
        uid = "u-2" if request.target.name == "recreated" else "u-1"
        version = request.min_resource_version or "9"
        return writer_pb2.GetResponse(
            object_json='{"metadata": {"uid": "%s", "resourceVersion": "%s"}}' % (uid, version),
            resource_version=version,
            remembered=bool(request.min_resource_version),
        )


@pytest.fixture
def recorder() -> Iterator[Tuple[Recorder, str]]:
    servicer = Recorder()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    writer_pb2_grpc.add_WriterServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield servicer, "127.0.0.1:%d" % port
    server.stop(None)


def test_helpers_write_the_handlers_object_with_its_uid_and_generation(
    recorder: Tuple[Recorder, str],
) -> None:
    servicer, target = recorder
    ready = Condition("Ready", True, "Reconciled")
    synced = Condition("Synced", False, "Pending", observed_generation=2)
    with sw.Client(target, timeout=10) as client:
        assert set_conditions(client, BODY, [ready, synced], field_manager="op").outcome == sw.Outcome.UPDATED
        add_finalizer(client, BODY, "example.com/cleanup")
        assert remove_finalizer(client, BODY, "example.com/cleanup").gone

    async def async_helpers() -> bool:
        async with sw.AsyncClient(target, timeout=10) as aclient:
            await aset_conditions(aclient, BODY, ready)
            await aadd_finalizer(aclient, BODY, "example.com/cleanup")
            return (await aremove_finalizer(aclient, BODY, "example.com/cleanup")).gone

    assert asyncio.run(async_helpers())
    methods = [method for method, _ in servicer.requests]
    assert methods == ["PatchStatus", "UpdateWithRetry", "UpdateWithRetry"] * 2
    for _, request in servicer.requests:
        assert request.target == writer_pb2.ObjectRef(
            api_version="test.safewrite.dev/v1", kind="Widget", namespace="ns", name="w"
        )
        assert request.preconditions.uid == "u-1"
    conditions = servicer.requests[0][1].mutation.set_condition.conditions
    # The body's generation, the one the handler observed; one given is kept.
    assert [(c.type, c.observed_generation) for c in conditions] == [("Ready", 3), ("Synced", 2)]
    assert servicer.requests[0][1].options.field_manager == "op"
    assert servicer.requests[1][1].mutation.finalizer == writer_pb2.FinalizerChange(
        finalizer="example.com/cleanup"
    )
    assert servicer.requests[2][1].mutation.finalizer.remove
    assert servicer.requests[3][1].mutation.set_condition.conditions[0].observed_generation == 3


def test_get_reads_the_handlers_object_at_least_as_new_as_its_body_or_a_write(
    recorder: Tuple[Recorder, str],
) -> None:
    servicer, target = recorder
    body = kopf.Body({**BODY, "metadata": {**BODY["metadata"], "resourceVersion": "7"}})
    written = sw.Result(sw.Outcome.UPDATED, {}, "8", 1)
    with sw.Client(target, timeout=10) as client:
        read = get(client, body)
        assert (read.resource_version, read.remembered) == ("7", True)
        assert get(client, body, at_least=written).resource_version == "8"
        assert get(client, BODY).remembered is False  # a body without a version: live

    async def async_get() -> sw.ReadResult:
        async with sw.AsyncClient(target, timeout=10) as aclient:
            return await aget(aclient, body, at_least=written)

    assert asyncio.run(async_get()).resource_version == "8"
    assert [method for method, _ in servicer.requests] == ["Get"] * 4
    assert [r.min_resource_version for _, r in servicer.requests] == ["7", "8", "", "8"]
    assert servicer.requests[0][1].target == writer_pb2.ObjectRef(
        api_version="test.safewrite.dev/v1", kind="Widget", namespace="ns", name="w"
    )


def test_get_of_an_object_gone_or_made_again_is_permanent(recorder: Tuple[Recorder, str]) -> None:
    _, target = recorder
    meta = BODY["metadata"]
    with sw.Client(target, timeout=10) as client:
        with pytest.raises(kopf.PermanentError, match="made again"):
            get(client, {**BODY, "metadata": {**meta, "name": "recreated"}})
        with pytest.raises(kopf.PermanentError) as gone:
            get(client, {**BODY, "metadata": {**meta, "name": "gone"}})
    assert isinstance(gone.value.__cause__, sw.NotFoundError)


def test_helpers_refuse_bad_input_before_sending(recorder: Tuple[Recorder, str]) -> None:
    servicer, target = recorder
    with sw.Client(target, timeout=10) as client:
        with pytest.raises(ValueError, match="qualified name"):
            add_finalizer(client, BODY, "not/a/qualified name")
        with pytest.raises(ValueError, match="at least one"):
            set_conditions(client, BODY, [])
    assert servicer.requests == []


class Standing:
    """A leadership as `leading` reads it: only its current fence."""

    def __init__(self, fence: Optional[sw.Fence]) -> None:
        self.fence = fence


def test_leading_runs_the_block_only_while_leading_with_its_writes_fenced() -> None:
    with pytest.raises(kopf.TemporaryError, match="does not lead") as waiting:
        with leading(Standing(None), delay=3):  # type: ignore[arg-type]
            pytest.fail("ran while not leading")
    assert waiting.value.delay == 3
    fence = sw.Fence("ns", "lease", 2)
    with leading(Standing(fence)) as given:  # type: ignore[arg-type]
        assert given == fence and sw.current_fence() == fence
    assert sw.current_fence() is None
    deposed = sw.NotLeaderError(
        grpc.StatusCode.FAILED_PRECONDITION, "m", write_failure_reason=writer_pb2.REASON_NOT_LEADER
    )
    with pytest.raises(kopf.TemporaryError, match="deposed"):
        with leading(Standing(fence)):  # type: ignore[arg-type]
            raise deposed
    fenced = sw.FencedError(
        grpc.StatusCode.FAILED_PRECONDITION, "m", write_failure_reason=writer_pb2.REASON_FENCED
    )
    with pytest.raises(kopf.TemporaryError, match="deposed") as later:
        with leading(Standing(fence)):  # type: ignore[arg-type]
            with kopf_errors():  # as the helpers map it: permanent, on its own
                raise fenced
    assert later.value.__cause__ is fenced
    with pytest.raises(kopf.PermanentError):
        with leading(Standing(fence)):  # type: ignore[arg-type]
            with kopf_errors():
                raise error(grpc.StatusCode.INVALID_ARGUMENT, writer_pb2.REASON_INVALID_REQUEST)


def test_an_object_being_deleted_gets_no_finalizer_and_kopf_is_told_permanently() -> None:
    deleting = error(grpc.StatusCode.FAILED_PRECONDITION, writer_pb2.REASON_OBJECT_DELETING)
    assert isinstance(to_kopf(deleting), kopf.PermanentError)


def test_conditions_and_finalizers_from_a_handler(
    client: sw.Client, widget: sw.ObjectRef, read: Callable[[sw.ObjectRef], Dict[str, Any]]
) -> None:
    body = read(widget)
    first = set_conditions(client, body, Condition("Ready", True, "Reconciled", "1 replica"))
    cond = find_condition(first.object, "Ready")
    assert first.outcome == sw.Outcome.UPDATED and cond is not None
    assert cond["observedGeneration"] == body["metadata"]["generation"]
    assert first.object["status"]["count"] == 0  # the rest of the status is kept
    again = set_conditions(client, body, Condition("Ready", True, "Reconciled", "1 replica"))
    assert again.outcome == sw.Outcome.UNCHANGED

    added = add_finalizer(client, body, "test.safewrite.dev/cleanup")
    assert added.object["metadata"]["finalizers"] == ["test.safewrite.dev/cleanup"]
    assert add_finalizer(client, body, "test.safewrite.dev/cleanup").outcome == sw.Outcome.UNCHANGED
    removed = remove_finalizer(client, body, "test.safewrite.dev/cleanup")
    assert removed.outcome == sw.Outcome.UPDATED
    assert not removed.object["metadata"].get("finalizers")


def test_patch_status_from_a_handler(
    client: sw.Client, widget: sw.ObjectRef, read: Callable[[sw.ObjectRef], Dict[str, Any]]
) -> None:
    body = read(widget)
    ready = Condition("Ready", True, "Reconciled", observed_generation=body["metadata"]["generation"])
    first = patch_status(client, body, {"phase": "Ready"}, conditions=[ready])
    assert first.outcome == sw.Outcome.UPDATED
    assert first.object["status"]["phase"] == "Ready" and first.object["status"]["count"] == 0
    assert patch_status(client, body, {"phase": "Ready"}, conditions=[ready]).outcome == (
        sw.Outcome.UNCHANGED
    )
    # A body of another object with the same name (another uid) is never written.
    stale = {**body, "metadata": {**body["metadata"], "uid": "00000000-0000-0000-0000-000000000000"}}
    with pytest.raises(kopf.PermanentError, match="PRECONDITION_FAILED"):
        patch_status(client, stale, {"phase": "Gone"})


def test_a_handler_reads_the_write_of_the_handler_before_it(
    client: sw.Client, widget: sw.ObjectRef, read: Callable[[sw.ObjectRef], Dict[str, Any]]
) -> None:
    body = read(widget)  # what kopf hands every handler of the reaction
    ready = Condition("Ready", True, "Reconciled")
    written = set_conditions(client, body, ready)  # one handler writes
    fresh = get(client, body)  # the next reads, with the same body
    assert fresh.remembered and fresh.resource_version == written.resource_version
    assert find_condition(fresh.object, "Ready") is not None
    assert get(client, body, at_least=written).object == fresh.object


def kubeconfig(path: Path, env: Dict[str, str]) -> Path:
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        "clusters: [{name: cp, cluster: {server: '%s', certificate-authority: '%s'}}]\n"
        "users: [{name: admin, user: {token: '%s'}}]\n"
        "contexts: [{name: cp, context: {cluster: cp, user: admin}}]\n"
        "current-context: cp\n" % (env["SERVER"], env["CA_FILE"], env["ADMIN_TOKEN"]),
        encoding="utf-8",
    )
    return path


def wait_for(read: Callable[[], Dict[str, Any]], ok: Callable[[Dict[str, Any]], bool], what: str) -> Dict[str, Any]:
    deadline = time.monotonic() + 60
    while True:
        obj = read()
        if ok(obj):
            return obj
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for %s; last: %r" % (what, obj.get("status")))
        time.sleep(0.2)


class Operator:
    """examples/kopf_widget run with `kopf run` in a process of its own (a replica)."""

    def __init__(self, env: Dict[str, str], namespace: str, log: Path) -> None:
        self.log_path = log
        self.log = log.open("w+")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "kopf", "run", "--standalone", "--namespace", namespace, str(EXAMPLE)],
            env=env, stdout=self.log, stderr=subprocess.STDOUT,
        )

    def output(self) -> str:
        return self.log_path.read_text(encoding="utf-8")

    def stop(self) -> str:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()
        return self.output()


def test_the_kopf_example_operator_writes_status_through_safewrite_while_leading(
    client: sw.Client,
    namespace: str,
    new_name: Callable[[], str],
    read: Callable[[sw.ObjectRef], Dict[str, Any]],
    control_plane: Dict[str, str],
    tmp_path: Path,
) -> None:
    """Two replicas of the example operator under the Lease NS/kopf-widget: the first
    leads and reconciles (its status writes fenced: the Widget records its epoch); the
    second waits in its startup; the first stopped releases the Lease, and the second
    leads and reconciles the next change."""
    ref = sw.ObjectRef("test.safewrite.dev/v1", "Widget", namespace, new_name())
    client.update(ref, sw.merge_patch({}), create_if_missing={"spec": {"size": 3}})
    env = dict(
        os.environ, POD_NAMESPACE=namespace,
        KUBECONFIG=str(kubeconfig(tmp_path / "kubeconfig", control_plane)),
    )

    def ready_is(status: str, generation: int) -> Callable[[Dict[str, Any]], bool]:
        def ok(obj: Dict[str, Any]) -> bool:
            cond = find_condition(obj, "Ready")
            return bool(cond) and cond["status"] == status and cond.get("observedGeneration") == generation  # type: ignore[index]
        return ok

    def fence_of(obj: Dict[str, Any]) -> str:
        return str(obj["metadata"].get("annotations", {}).get("safewrite.dev/fence", ""))

    first = Operator(dict(env, POD_NAME="replica-a"), namespace, tmp_path / "a.log")
    second: Optional[Operator] = None
    outputs: List[str] = []
    try:
        obj = wait_for(lambda: read(ref), ready_is("True", 1), "Ready=True")
        assert obj["status"]["replicas"] == 3
        assert '"%s/kopf-widget"' % namespace in fence_of(obj)
        second = Operator(dict(env, POD_NAME="replica-b"), namespace, tmp_path / "b.log")
        time.sleep(3)  # B campaigns meanwhile: it waits in its startup, handling nothing
        assert second.process.poll() is None, second.output()
        assert "under epoch" not in second.output(), second.output()
        outputs.append(first.stop())  # releases the Lease
        b = second
        wait_for(lambda: {"log": b.output()}, lambda o: "leading " in o["log"], "B leading")
        client.update(ref, sw.merge_patch({"spec": {"size": 0}}))
        obj = wait_for(lambda: read(ref), ready_is("False", 2), "Ready=False")
        assert obj["status"]["replicas"] == 0
        assert find_condition(obj, "Ready")["reason"] == "NoReplicas"  # type: ignore[index]
    finally:
        if first.log and not first.log.closed:
            outputs.append(first.stop())
        if second is not None:
            outputs.append(second.stop())
    a_out, b_out = outputs[0], outputs[-1]
    assert "leading %s/kopf-widget under epoch" % namespace in a_out, a_out
    assert "status UPDATED" in a_out, a_out
    assert "under epoch" in b_out and "status UPDATED" in b_out, b_out
    for out in (a_out, b_out):
        assert "Traceback" not in out, out
