"""UpdateWithRetry, PatchStatus and Transact against a real sidecar and API server."""

from __future__ import annotations

import os
import threading
from typing import Any, Callable, Dict, List

import pytest

import safewrite_client as sw
from safewrite_client import Outcome

from conftest import INCREMENT

Read = Callable[[sw.ObjectRef], Dict[str, Any]]


def test_update_with_cel(client: sw.Client, counter: sw.ObjectRef, read: Read) -> None:
    result = client.update(counter, sw.cel(INCREMENT))
    assert result.outcome == Outcome.UPDATED
    assert result.written
    assert result.object["data"] == {"n": "1"}
    assert result.object["metadata"]["name"] == counter.name
    assert result.resource_version == result.object["metadata"]["resourceVersion"]
    assert result.attempts == len(result.attempt_records) >= 1
    assert result.attempt_records[-1].number == result.attempts
    assert read(counter)["data"] == {"n": "1"}


def test_create_if_missing_applies_the_mutation_once(
    client: sw.Client, configmap_ref: sw.ObjectRef
) -> None:
    created = client.update(configmap_ref, sw.cel(INCREMENT), create_if_missing={"data": {"n": "0"}})
    assert created.outcome == Outcome.CREATED
    assert created.object["data"] == {"n": "1"}
    again = client.update(configmap_ref, sw.cel(INCREMENT), create_if_missing={"data": {"n": "0"}})
    assert again.outcome == Outcome.UPDATED
    assert again.object["data"] == {"n": "2"}


def test_merge_patch_json_patch_and_apply(
    client: sw.Client, counter: sw.ObjectRef
) -> None:
    merged = client.update(counter, sw.merge_patch({"data": {"colour": "blue"}}))
    assert merged.object["data"] == {"n": "0", "colour": "blue"}

    patched = client.update(
        counter, sw.json_patch([
            {"op": "test", "path": "/data/colour", "value": "blue"},
            {"op": "replace", "path": "/data/colour", "value": "green"},
        ]),
    )
    assert patched.object["data"]["colour"] == "green"

    applied = client.update(
        counter, sw.apply({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": counter.name, "namespace": counter.namespace},
            "data": {"owner": "python"},
        }, force=True),
        field_manager="safewrite-python-test",
    )
    assert applied.outcome == Outcome.UPDATED
    assert applied.object["data"]["owner"] == "python"
    managers = [m["manager"] for m in applied.object["metadata"]["managedFields"]]
    assert "safewrite-python-test" in managers


def test_unchanged_writes_nothing(client: sw.Client, counter: sw.ObjectRef) -> None:
    before = client.update(counter, sw.merge_patch({"data": {"n": "0"}}))
    assert before.outcome == Outcome.UNCHANGED
    assert not before.written
    assert before.object["data"] == {"n": "0"}
    assert before.attempt_records[0].http_status == 0  # no write was sent

    same = client.transact(counter, lambda obj: obj)
    assert same.outcome == Outcome.UNCHANGED
    assert same.resource_version == before.resource_version


def test_dry_run_does_not_persist(
    client: sw.Client, counter: sw.ObjectRef, read: Read
) -> None:
    result = client.update(counter, sw.cel(INCREMENT), dry_run=True)
    assert result.outcome == Outcome.UPDATED
    assert result.object["data"] == {"n": "1"}
    assert read(counter)["data"] == {"n": "0"}


def test_patch_status(client: sw.Client, widget: sw.ObjectRef, read: Read) -> None:
    result = client.patch_status(widget, sw.cel('{"status": {"count": object.status.count + 1}}'))
    assert result.outcome == Outcome.UPDATED
    assert result.object["status"] == {"count": 1}
    # PatchStatus never changes the spec, even when the mutation tries to.
    again = client.patch_status(widget, sw.merge_patch({"spec": {"size": 99}, "status": {"count": 2}}))
    assert again.object["status"] == {"count": 2}
    assert again.object["spec"] == {"size": 1}
    # ...and UpdateWithRetry never changes the status.
    client.update(widget, sw.merge_patch({"spec": {"size": 2}, "status": {"count": 50}}))
    now = read(widget)
    assert now["spec"] == {"size": 2}
    assert now["status"] == {"count": 2}


def test_transact_update(client: sw.Client, counter: sw.ObjectRef) -> None:
    seen: List[Dict[str, Any]] = []

    def bump(obj: Dict[str, Any]) -> None:
        seen.append(obj)
        obj["data"]["n"] = str(int(obj["data"]["n"]) + 1)

    result = client.transact(counter, bump)
    assert result.outcome == Outcome.UPDATED
    assert result.object["data"] == {"n": "1"}
    assert len(seen) == result.attempts == 1

    def replace(obj: Dict[str, Any]) -> Dict[str, Any]:
        return {**obj, "data": {"n": "10", "by": "transact"}}

    replaced = client.transact(counter, replace)
    assert replaced.object["data"] == {"n": "10", "by": "transact"}


def test_transact_status(client: sw.Client, widget: sw.ObjectRef) -> None:
    def count(obj: Dict[str, Any]) -> Dict[str, Any]:
        obj["status"]["count"] += 5
        return obj

    result = client.transact(widget, count, status=True)
    assert result.outcome == Outcome.UPDATED
    assert result.object["status"] == {"count": 5}


def test_transact_create_if_missing(
    client: sw.Client, configmap_ref: sw.ObjectRef
) -> None:
    def set_n(obj: Dict[str, Any]) -> None:
        assert "resourceVersion" not in obj.get("metadata", {})
        obj["data"]["n"] = "7"

    result = client.transact(configmap_ref, set_n, create_if_missing={"data": {"n": "0"}})
    assert result.outcome == Outcome.CREATED
    assert result.object["data"] == {"n": "7"}


def test_transact_abort(client: sw.Client, counter: sw.ObjectRef, read: Read) -> None:
    def give_up(obj: Dict[str, Any]) -> None:
        obj["data"]["n"] = "999"
        raise sw.Abort("not today")

    result = client.transact(counter, give_up)
    assert result.outcome == Outcome.ABORTED
    assert not result.written
    assert result.object["data"] == {"n": "0"}
    assert read(counter)["data"] == {"n": "0"}


def test_transact_exception_aborts_and_propagates(
    client: sw.Client, counter: sw.ObjectRef, read: Read
) -> None:
    class Boom(Exception):
        pass

    def explode(obj: Dict[str, Any]) -> None:
        obj["data"]["n"] = "999"
        raise Boom("no")

    with pytest.raises(Boom):
        client.transact(counter, explode)
    assert read(counter)["data"] == {"n": "0"}

    with pytest.raises(TypeError):
        client.transact(counter, lambda obj: ["not", "an", "object"])  # type: ignore
    assert read(counter)["data"] == {"n": "0"}


def test_lost_update_threads(client: sw.Client, counter: sw.ObjectRef, read: Read) -> None:
    """8 threads x 25 read-modify-write increments through transact: none is lost."""
    threads_n, per_thread = 8, 25
    errors: List[BaseException] = []
    attempts: List[int] = []
    lock = threading.Lock()
    start = threading.Barrier(threads_n)

    def bump(obj: Dict[str, Any]) -> Dict[str, Any]:
        obj["data"]["n"] = str(int(obj["data"]["n"]) + 1)
        return obj

    def worker() -> None:
        try:
            start.wait()
            for _ in range(per_thread):
                result = client.transact(
                    counter, bump, retry_policy=sw.RetryPolicy(max_attempts=200)
                )
                assert result.outcome == Outcome.UPDATED
                with lock:
                    attempts.append(result.attempts)
        except BaseException as exc:  # reported below
            with lock:
                errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(threads_n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    assert len(attempts) == threads_n * per_thread
    assert read(counter)["data"]["n"] == str(threads_n * per_thread)
    print("lost-update (threads): %d writes took %d attempts" % (len(attempts), sum(attempts)))


def test_unix_socket(addr: str, counter: sw.ObjectRef) -> None:
    path = os.environ["SAFEWRITE_UNIX_SOCKET"]
    with sw.Client("unix://" + path, timeout=30) as unix:
        result = unix.update(counter, sw.cel(INCREMENT))
        assert result.outcome == Outcome.UPDATED
        assert result.object["data"]["n"] == "1"
        bumped = unix.transact(counter, lambda o: {**o, "data": {"n": "2"}})
        assert bumped.object["data"]["n"] == "2"
