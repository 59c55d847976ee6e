"""AsyncClient against a real sidecar (each test runs its own event loop)."""

from __future__ import annotations

import asyncio
import os
from typing import Any, Callable, Dict, List

import grpc
import pytest

import safewrite_client as sw
from safewrite_client import Outcome

from conftest import INCREMENT

Read = Callable[[sw.ObjectRef], Dict[str, Any]]


def test_async_update_and_patch_status(addr: str, widget: sw.ObjectRef) -> None:
    async def main() -> None:
        async with sw.AsyncClient(addr, timeout=30) as client:
            spec = await client.update(widget, sw.cel('{"spec": {"size": object.spec.size + 1}}'))
            assert spec.outcome == Outcome.UPDATED
            assert spec.object["spec"] == {"size": 2}
            status = await client.patch_status(
                widget, sw.cel('{"status": {"count": object.status.count + 1}}')
            )
            assert status.object["status"] == {"count": 1}
            same = await client.update(widget, sw.merge_patch({"spec": {"size": 2}}))
            assert same.outcome == Outcome.UNCHANGED

    asyncio.run(main())


def test_async_lost_update(addr: str, counter: sw.ObjectRef, read: Read) -> None:
    """8 tasks x 10 increments through AsyncClient.transact, with coroutine and plain
    functions: none is lost."""
    tasks_n, per_task = 8, 10

    async def bump_async(obj: Dict[str, Any]) -> Dict[str, Any]:
        await asyncio.sleep(0)  # let the other tasks interleave
        obj["data"]["n"] = str(int(obj["data"]["n"]) + 1)
        return obj

    def bump_sync(obj: Dict[str, Any]) -> None:
        obj["data"]["n"] = str(int(obj["data"]["n"]) + 1)

    async def main() -> List[int]:
        async with sw.AsyncClient(addr, timeout=120) as client:

            async def worker(i: int) -> List[int]:
                fn = bump_async if i % 2 == 0 else bump_sync
                out = []
                for _ in range(per_task):
                    result = await client.transact(
                        counter, fn, retry_policy=sw.RetryPolicy(max_attempts=200)
                    )
                    assert result.outcome == Outcome.UPDATED
                    out.append(result.attempts)
                return out

            done = await asyncio.gather(*(worker(i) for i in range(tasks_n)))
            return [a for attempts in done for a in attempts]

    attempts = asyncio.run(main())
    assert len(attempts) == tasks_n * per_task
    assert read(counter)["data"]["n"] == str(tasks_n * per_task)
    print("lost-update (asyncio): %d writes took %d attempts" % (len(attempts), sum(attempts)))


def test_async_transact_abort_and_exception(
    addr: str, counter: sw.ObjectRef, read: Read
) -> None:
    class Boom(Exception):
        pass

    async def abort(obj: Dict[str, Any]) -> None:
        raise sw.Abort("changed my mind")

    async def explode(obj: Dict[str, Any]) -> None:
        obj["data"]["n"] = "999"
        raise Boom()

    async def main() -> None:
        async with sw.AsyncClient(addr, timeout=30) as client:
            aborted = await client.transact(counter, abort)
            assert aborted.outcome == Outcome.ABORTED
            assert aborted.object["data"] == {"n": "0"}
            with pytest.raises(Boom):
                await client.transact(counter, explode)
            unchanged = await client.transact(counter, lambda obj: None)
            assert unchanged.outcome == Outcome.UNCHANGED

    asyncio.run(main())
    assert read(counter)["data"] == {"n": "0"}


def test_async_errors(addr: str, counter: sw.ObjectRef) -> None:
    async def main() -> None:
        async with sw.AsyncClient(addr, timeout=30) as client:
            with pytest.raises(sw.InvalidError) as invalid:
                await client.update(counter, sw.merge_patch({"metadata": {"labels": {"a": "-bad-"}}}))
            assert invalid.value.field_violations
            with pytest.raises(sw.PreconditionFailedError) as failed:
                await client.transact(
                    counter, lambda o: o, preconditions=sw.Preconditions(uid="nope")
                )
            assert failed.value.current_object is not None
            assert failed.value.current_object["metadata"]["name"] == counter.name
            await asyncio.sleep(0.2)  # let the shared rate limit refill (see test_errors.py)
            with pytest.raises(sw.DeadlineExceededError) as late:
                await client.update(counter, sw.cel(INCREMENT), timeout=1e-6)
            assert late.value.code == grpc.StatusCode.DEADLINE_EXCEEDED

        restricted = os.environ["SAFEWRITE_RESTRICTED_ADDR"]
        async with sw.AsyncClient(restricted, timeout=30) as denied:
            with pytest.raises(sw.PermissionDeniedError):
                await denied.transact(counter, lambda o: {**o, "data": {"n": "5"}})

    asyncio.run(main())


def test_async_unix_socket(addr: str, counter: sw.ObjectRef) -> None:
    async def main() -> None:
        path = os.environ["SAFEWRITE_UNIX_SOCKET"]
        async with sw.AsyncClient("unix://" + path, timeout=30) as client:
            result = await client.update(counter, sw.cel(INCREMENT))
            assert result.object["data"]["n"] == "1"

    asyncio.run(main())
