"""Delete against a real sidecar and API server: the outcomes, the preconditions that keep
the object, the fence, on both clients."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any, Callable, Dict

import pytest

import safewrite_client as sw

Read = Callable[[sw.ObjectRef], Dict[str, Any]]


def test_delete_an_object_then_it_is_gone(client: sw.Client, counter: sw.ObjectRef) -> None:
    deleted = client.delete(counter)
    assert deleted.outcome == sw.DeleteOutcome.DELETED and not deleted.gone
    assert deleted.attempts == len(deleted.attempt_records) >= 1
    with pytest.raises(sw.NotFoundError):
        client.get(counter)
    again = client.delete(counter)  # safe to send again: not there is an answer
    assert again.outcome == sw.DeleteOutcome.GONE and again.gone
    assert again.object == {} and again.deletion_timestamp is None


def test_an_object_with_a_finalizer_is_deleting_until_it_is_removed(
    client: sw.Client, counter: sw.ObjectRef, read: Read
) -> None:
    client.update(counter, sw.add_finalizer("test.safewrite.dev/keep"))
    deleting = client.delete(counter, propagation_policy=sw.PropagationPolicy.BACKGROUND)
    assert deleting.outcome == sw.DeleteOutcome.DELETING and deleting.deleting
    assert isinstance(deleting.deletion_timestamp, datetime.datetime)
    assert deleting.deletion_timestamp.tzinfo is not None
    assert deleting.object["metadata"]["deletionTimestamp"]
    assert read(counter)["metadata"]["deletionTimestamp"]
    assert client.update(counter, sw.remove_finalizer("test.safewrite.dev/keep")).gone


def test_a_false_precondition_keeps_the_object(
    client: sw.Client, counter: sw.ObjectRef, read: Read
) -> None:
    with pytest.raises(sw.PreconditionFailedError) as uid:
        client.delete(counter, preconditions=sw.Preconditions(uid="00000000-0000-0000-0000-000000000000"))
    assert uid.value.current_object is not None
    with pytest.raises(sw.PreconditionFailedError) as cel:
        client.delete(counter, preconditions=sw.Preconditions(cel="object.data.n == '7'"))
    assert cel.value.reason == "PRECONDITION_FAILED"
    assert cel.value.current_object is not None and cel.value.current_object["data"] == {"n": "0"}
    assert read(counter)["data"] == {"n": "0"}  # kept
    current = read(counter)["metadata"]
    gone = client.delete(
        counter, preconditions=sw.Preconditions(uid=current["uid"], cel="object.data.n == '0'")
    )
    assert gone.outcome == sw.DeleteOutcome.DELETED


def test_dry_run_deletes_nothing(client: sw.Client, counter: sw.ObjectRef, read: Read) -> None:
    assert client.delete(counter, dry_run=True).outcome == sw.DeleteOutcome.DELETED
    assert read(counter)["data"] == {"n": "0"}


def test_a_fenced_delete_through_a_sidecar_not_leading_is_refused(
    client: sw.Client, counter: sw.ObjectRef, read: Read, new_name: Callable[[], str]
) -> None:
    fence = sw.Fence(counter.namespace, new_name(), 1)  # a Lease nobody leads
    with pytest.raises(sw.NotLeaderError) as refused:
        client.delete(counter, fence=fence)
    assert not refused.value.retryable
    with sw.fenced(fence):  # the current fence counts as well
        with pytest.raises(sw.NotLeaderError):
            client.delete(counter)
    assert read(counter)["data"] == {"n": "0"}


def test_async_delete(addr: str, counter: sw.ObjectRef, read: Read) -> None:
    async def main() -> None:
        async with sw.AsyncClient(addr, timeout=30) as aclient:
            version = (await aclient.get(counter)).resource_version
            with pytest.raises(sw.ConflictError) as mismatch:
                await aclient.delete(counter, preconditions=sw.Preconditions(resource_version=version + "0"))
            assert mismatch.value.reason == "RESOURCE_VERSION_MISMATCH"
            deleted = await aclient.delete(
                counter,
                preconditions=sw.Preconditions(resource_version=version),
                propagation_policy=sw.PropagationPolicy.FOREGROUND,
            )
            assert deleted.outcome in (sw.DeleteOutcome.DELETED, sw.DeleteOutcome.DELETING)
            gone = await aclient.delete(counter)
            assert gone.outcome in (sw.DeleteOutcome.GONE, sw.DeleteOutcome.DELETING)

    asyncio.run(main())
