"""Writes whose answer is lost after the API server committed them, against the real
sidecar at $SAFEWRITE_LOSSY_ADDR (tests/harness/with-sidecar.sh puts a fault proxy
between it and the API server that resets every write's stream once the API server
has answered). Objects are created and read through the normal sidecar, and each call
through the lossy one writes an object that sidecar has not touched before: its first
write to an object reads it live, so the change it sends is valid and is committed."""

from __future__ import annotations

import asyncio
import os
import uuid
from typing import Any, Callable, Dict, Iterator

import grpc
import pytest

import safewrite_client as sw
from safewrite_client import Outcome
from safewrite_client.v1 import writer_pb2

from conftest import INCREMENT

Read = Callable[[sw.ObjectRef], Dict[str, Any]]


@pytest.fixture
def lossy_addr(addr: str) -> str:
    value = os.environ.get("SAFEWRITE_LOSSY_ADDR")
    if not value:
        pytest.skip("SAFEWRITE_LOSSY_ADDR is unset: run through test.sh")
    return value


@pytest.fixture
def lossy(lossy_addr: str) -> Iterator[sw.Client]:
    with sw.Client(lossy_addr, timeout=30) as c:
        yield c


@pytest.fixture
def new_counter(
    client: sw.Client, namespace: str, new_name: Callable[[], str]
) -> Callable[[], sw.ObjectRef]:
    """Returns a function creating a ConfigMap {"data": {"n": "0"}} through the normal
    sidecar."""

    def make() -> sw.ObjectRef:
        ref = sw.ObjectRef("v1", "ConfigMap", namespace, new_name())
        created = client.update(ref, sw.merge_patch({}), create_if_missing={"data": {"n": "0"}})
        assert created.outcome == Outcome.CREATED
        return ref

    return make


def bump(obj: Dict[str, Any]) -> None:
    obj["data"]["n"] = str(int(obj["data"]["n"]) + 1)


def assert_lost_unkeyed(err: sw.SafewriteError) -> None:
    assert type(err) is sw.OutcomeUnknownError
    assert err.code == grpc.StatusCode.UNKNOWN
    assert err.reason == sw.WRITE_OUTCOME_UNKNOWN
    assert err.write_failure_reason == writer_pb2.REASON_WRITE_OUTCOME_UNKNOWN
    # The change may have been applied: sending the same call again could apply it twice.
    assert err.idempotent is False
    assert err.retryable is False
    assert "idempotency" in err.message  # the sidecar says how to make it retryable
    assert err.attempts == 1 and err.attempt_records[0].http_status == 0


def test_a_lost_answer_without_a_key_is_not_retryable_and_was_applied(
    lossy: sw.Client, new_counter: Callable[[], sw.ObjectRef], read: Read
) -> None:
    updated = new_counter()
    with pytest.raises(sw.OutcomeUnknownError) as lost:
        lossy.update(updated, sw.cel(INCREMENT))
    assert_lost_unkeyed(lost.value)
    # The API server committed the increment; only its answer was lost.
    assert read(updated)["data"] == {"n": "1"}

    transacted = new_counter()
    with pytest.raises(sw.OutcomeUnknownError) as lost_transact:
        lossy.transact(transacted, bump)
    assert_lost_unkeyed(lost_transact.value)
    assert read(transacted)["data"] == {"n": "1"}


def test_a_lost_answer_with_a_key_is_found_on_the_object(
    lossy: sw.Client, client: sw.Client, new_counter: Callable[[], sw.ObjectRef], read: Read
) -> None:
    # The sidecar retries the lost write itself: its next read finds the key on the
    # object, so the call succeeds as already applied, and the change was made once.
    counter = new_counter()
    key = str(uuid.uuid4())
    result = lossy.update(counter, sw.cel(INCREMENT), idempotency_key=key)
    assert result.outcome == Outcome.UPDATED
    assert result.already_applied is True
    assert result.object["data"] == {"n": "1"}
    assert result.attempts == 2
    assert result.attempt_records[0].http_status == 0  # the write whose answer was lost
    assert read(counter)["data"] == {"n": "1"}
    # The same change with the same key, through the normal sidecar: made once.
    again = client.update(counter, sw.cel(INCREMENT), idempotency_key=key)
    assert again.already_applied is True and again.object["data"] == {"n": "1"}

    calls = []

    def counted(obj: Dict[str, Any]) -> None:
        calls.append(obj["data"]["n"])
        bump(obj)

    transacted = new_counter()
    result = lossy.transact(transacted, counted, idempotency_key=str(uuid.uuid4()))
    assert result.outcome == Outcome.UPDATED and result.already_applied is True
    assert calls == ["0"]  # once: the retry found the key and did not call it again
    assert read(transacted)["data"] == {"n": "1"}


def test_the_async_client_says_the_same(
    lossy_addr: str, new_counter: Callable[[], sw.ObjectRef], read: Read
) -> None:
    unkeyed, keyed = new_counter(), new_counter()

    async def run() -> None:
        client = sw.AsyncClient(lossy_addr, timeout=30)
        try:
            with pytest.raises(sw.OutcomeUnknownError) as lost:
                await client.update(unkeyed, sw.cel(INCREMENT))
            assert_lost_unkeyed(lost.value)
            result = await client.update(keyed, sw.cel(INCREMENT), idempotency_key=str(uuid.uuid4()))
            assert result.already_applied is True and result.object["data"] == {"n": "1"}
        finally:
            await client.close()

    asyncio.run(run())
    assert read(unkeyed)["data"] == {"n": "1"}
    assert read(keyed)["data"] == {"n": "1"}
