"""Writes whose answer is lost after the API server committed them, against the real
sidecar at $SAFEWRITE_LOSSY_ADDR (tests/harness/with-sidecar.sh puts a fault proxy
between it and the API server that resets every write's stream once the API server
has answered). Objects are created and read through the normal sidecar."""

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
    lossy: sw.Client, counter: sw.ObjectRef, read: Read
) -> None:
    with pytest.raises(sw.OutcomeUnknownError) as lost:
        lossy.update(counter, cel=INCREMENT)
    assert_lost_unkeyed(lost.value)
    # The API server committed the increment; only its answer was lost.
    assert read(counter)["data"] == {"n": "1"}

    with pytest.raises(sw.OutcomeUnknownError) as lost_transact:
        lossy.transact(counter, bump)
    assert_lost_unkeyed(lost_transact.value)
    assert read(counter)["data"] == {"n": "2"}


def test_a_lost_answer_with_a_key_is_found_on_the_object(
    lossy: sw.Client, client: sw.Client, counter: sw.ObjectRef, read: Read
) -> None:
    # The sidecar retries the lost write itself: its next read finds the key on the
    # object, so the call succeeds as already applied, and the change was made once.
    key = str(uuid.uuid4())
    result = lossy.update(counter, cel=INCREMENT, idempotency_key=key)
    assert result.outcome == Outcome.UPDATED
    assert result.already_applied is True
    assert result.object["data"] == {"n": "1"}
    assert result.attempts == 2
    assert result.attempt_records[0].http_status == 0  # the write whose answer was lost
    assert read(counter)["data"] == {"n": "1"}
    # The same change with the same key, through the normal sidecar: made once.
    again = client.update(counter, cel=INCREMENT, idempotency_key=key)
    assert again.already_applied is True and again.object["data"] == {"n": "1"}

    calls = []

    def counted(obj: Dict[str, Any]) -> None:
        calls.append(obj["data"]["n"])
        bump(obj)

    transacted = lossy.transact(counter, counted, idempotency_key=str(uuid.uuid4()))
    assert transacted.outcome == Outcome.UPDATED and transacted.already_applied is True
    assert calls == ["1"]  # once: the retry found the key and did not call it again
    assert read(counter)["data"] == {"n": "2"}


def test_the_async_client_says_the_same(
    lossy_addr: str, counter: sw.ObjectRef, read: Read
) -> None:
    async def run() -> None:
        client = sw.AsyncClient(lossy_addr, timeout=30)
        try:
            with pytest.raises(sw.OutcomeUnknownError) as lost:
                await client.update(counter, cel=INCREMENT)
            assert_lost_unkeyed(lost.value)
            result = await client.update(counter, cel=INCREMENT, idempotency_key=str(uuid.uuid4()))
            assert result.already_applied is True and result.object["data"] == {"n": "2"}
        finally:
            await client.close()

    asyncio.run(run())
    assert read(counter)["data"] == {"n": "2"}
