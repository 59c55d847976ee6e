"""safewrite_client.kopf: errors mapped to kopf's, and the example operator
(examples/kopf_widget) run with `kopf run` against the real API server and sidecar."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, Optional

import grpc
import pytest

import safewrite_client as sw
from safewrite_client.conditions import Condition, find_condition

kopf = pytest.importorskip("kopf")
from safewrite_client.kopf import kopf_errors, patch_status, to_kopf  # noqa: E402

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


def kubeconfig(path: Path) -> Path:
    env: Dict[str, str] = {}
    for line in Path(os.environ["SAFEWRITE_CP_ENV"]).read_text(encoding="utf-8").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            env[key.strip()] = value.strip().strip("'\"")
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


def test_the_kopf_example_operator_writes_status_through_safewrite(
    client: sw.Client,
    namespace: str,
    new_name: Callable[[], str],
    read: Callable[[sw.ObjectRef], Dict[str, Any]],
    tmp_path: Path,
) -> None:
    ref = sw.ObjectRef("test.safewrite.dev/v1", "Widget", namespace, new_name())
    client.update(ref, merge_patch={}, create_if_missing={"spec": {"size": 3}})
    env = dict(os.environ, KUBECONFIG=str(kubeconfig(tmp_path / "kubeconfig")))
    log = (tmp_path / "kopf.log").open("w+")
    operator = subprocess.Popen(
        [sys.executable, "-m", "kopf", "run", "--standalone", "--namespace", namespace, str(EXAMPLE)],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        def ready_is(status: str, generation: int) -> Callable[[Dict[str, Any]], bool]:
            def ok(obj: Dict[str, Any]) -> bool:
                cond = find_condition(obj, "Ready")
                return bool(cond) and cond["status"] == status and cond.get("observedGeneration") == generation  # type: ignore[index]
            return ok

        obj = wait_for(lambda: read(ref), ready_is("True", 1), "Ready=True")
        assert obj["status"]["replicas"] == 3
        client.update(ref, merge_patch={"spec": {"size": 0}})
        obj = wait_for(lambda: read(ref), ready_is("False", 2), "Ready=False")
        assert obj["status"]["replicas"] == 0
        assert find_condition(obj, "Ready")["reason"] == "NoReplicas"  # type: ignore[index]
    finally:
        operator.send_signal(signal.SIGINT)
        try:
            operator.wait(timeout=30)
        except subprocess.TimeoutExpired:
            operator.kill()
            operator.wait()
        log.seek(0)
        output = log.read()
        log.close()
    assert "status UPDATED" in output, output
    assert "Traceback" not in output, output
