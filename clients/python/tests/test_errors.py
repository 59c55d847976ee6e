"""One test per error class, each provoked for real against the sidecar."""

from __future__ import annotations

import os
import socket
import time
from typing import Any, Callable, Dict

import grpc
import pytest

import safewrite_client as sw

from conftest import INCREMENT

Read = Callable[[sw.ObjectRef], Dict[str, Any]]


def test_invalid_object_has_field_violations(
    client: sw.Client, counter: sw.ObjectRef, read: Read
) -> None:
    with pytest.raises(sw.InvalidError) as info:
        client.update(counter, sw.merge_patch({"metadata": {"labels": {"app": "-bad-"}}}))
    err = info.value
    assert isinstance(err, sw.SafewriteError)
    assert err.code == grpc.StatusCode.INVALID_ARGUMENT
    assert err.reason == "Invalid"
    assert err.domain == sw.DOMAIN
    assert err.error_metadata.get("http_status") == "422"
    assert err.field_violations, err
    assert any("labels" in v.field for v in err.field_violations), err.field_violations
    assert err.retry_delay is None
    assert err.attempts == 1 and err.attempt_records[0].http_status == 422
    assert "Invalid" in str(err)
    assert "labels" not in read(counter)["metadata"]


def test_invalid_request_names_the_field(client: sw.Client, counter: sw.ObjectRef) -> None:
    with pytest.raises(sw.InvalidError) as info:
        client.update(counter, sw.cel("object.data.n +"))  # does not compile
    assert info.value.field_violations
    assert info.value.attempts == 0


def test_precondition_failed_carries_current_object(
    client: sw.Client, counter: sw.ObjectRef
) -> None:
    with pytest.raises(sw.PreconditionFailedError) as info:
        client.update(
            counter, sw.cel(INCREMENT),
            preconditions=sw.Preconditions(uid="00000000-0000-0000-0000-000000000000"),
        )
    err = info.value
    assert err.code == grpc.StatusCode.FAILED_PRECONDITION
    assert err.reason == "PRECONDITION_FAILED"
    assert err.current_object is not None
    assert err.current_object["metadata"]["name"] == counter.name
    assert err.current_object["data"] == {"n": "0"}

    # The uid of the current object satisfies the precondition.
    uid = err.current_object["metadata"]["uid"]
    ok = client.update(counter, sw.cel(INCREMENT), preconditions=sw.Preconditions(uid=uid))
    assert ok.object["data"] == {"n": "1"}

    # A false CEL precondition fails the same way, in a transaction too.
    with pytest.raises(sw.PreconditionFailedError) as cel_info:
        client.transact(
            counter,
            lambda obj: obj,
            preconditions=sw.Preconditions(cel='object.data.n == "42"'),
        )
    assert cel_info.value.current_object is not None
    assert cel_info.value.current_object["data"] == {"n": "1"}


def test_conflict_on_strict_resource_version(
    client: sw.Client, counter: sw.ObjectRef, read: Read
) -> None:
    stale = read(counter)["metadata"]["resourceVersion"]
    client.update(counter, sw.cel(INCREMENT))  # moves the resourceVersion on
    with pytest.raises(sw.ConflictError) as info:
        client.update(
            counter, sw.cel(INCREMENT), preconditions=sw.Preconditions(resource_version=stale)
        )
    err = info.value
    assert err.code == grpc.StatusCode.ABORTED
    assert err.reason == "RESOURCE_VERSION_MISMATCH"
    assert read(counter)["data"] == {"n": "1"}


def test_permission_denied(addr: str, namespace: str, new_name: Callable[[], str]) -> None:
    restricted = os.environ["SAFEWRITE_RESTRICTED_ADDR"]
    ref = sw.ObjectRef("v1", "ConfigMap", namespace, new_name())
    with sw.Client(restricted, timeout=30) as client:
        with pytest.raises(sw.PermissionDeniedError) as info:
            client.update(ref, sw.merge_patch({"data": {"n": "1"}}), create_if_missing={})
    err = info.value
    assert err.code == grpc.StatusCode.PERMISSION_DENIED
    assert err.reason == "Forbidden"
    assert err.error_metadata.get("http_status") == "403"


def test_not_found(client: sw.Client, configmap_ref: sw.ObjectRef) -> None:
    with pytest.raises(sw.NotFoundError) as info:
        client.update(configmap_ref, sw.cel(INCREMENT))
    assert info.value.code == grpc.StatusCode.NOT_FOUND
    assert info.value.reason == "NotFound"
    # The advice names this client's option, not the proto's field.
    assert "create_if_missing=" in info.value.message, info.value.message
    assert "create_if_missing_json" not in info.value.message

    with pytest.raises(sw.NotFoundError) as kind_info:
        client.update(
            sw.ObjectRef("test.safewrite.dev/v1", "Gadget", configmap_ref.namespace, "x"), sw.merge_patch({}),
        )
    assert kind_info.value.reason == "UNKNOWN_KIND"

    with pytest.raises(sw.NotFoundError):
        client.transact(configmap_ref, lambda obj: obj)


def test_deadline_exceeded(
    client: sw.Client, counter: sw.ObjectRef, read: Read
) -> None:
    # A tiny timeout runs out before the call can finish. (The sidecar's API server
    # rate limit is shared by all callers: when earlier tests have drained it, a call
    # that would have to wait past its deadline is refused with RESOURCE_EXHAUSTED
    # instead; give it a moment to refill.)
    time.sleep(0.2)
    with pytest.raises(sw.DeadlineExceededError) as info:
        client.update(counter, sw.cel(INCREMENT), timeout=1e-6)
    assert info.value.code == grpc.StatusCode.DEADLINE_EXCEEDED

    # A transaction whose function outlasts the timeout writes nothing.
    def slow(obj: Dict[str, Any]) -> None:
        time.sleep(1.0)
        obj["data"]["n"] = "5"

    with pytest.raises(sw.DeadlineExceededError):
        client.transact(counter, slow, timeout=0.3)
    assert read(counter)["data"] == {"n": "0"}


def test_unavailable_when_nothing_listens(counter: sw.ObjectRef) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again at once: nothing listens there
    with sw.Client("127.0.0.1:%d" % port, timeout=10) as client:
        with pytest.raises(sw.UnavailableError) as info:
            client.update(counter, sw.cel(INCREMENT))
    assert info.value.code == grpc.StatusCode.UNAVAILABLE
