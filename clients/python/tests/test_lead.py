"""Lead against real sidecars: two replicas of examples/lead_counter, each beside its own
peer sidecar (two pods), one of them paused past the lease; the release on leaving the
context manager; refusals; the fence of Leadership.run applied without per-call code."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import pytest

import safewrite_client as sw

from conftest import INCREMENT

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "lead_counter" / "counter.py"


def load_example() -> Any:
    spec = importlib.util.spec_from_file_location("lead_counter", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


counter_example = load_example()

#: Short timings: lease 2 s > renew deadline 1.5 s > 1.2 x retry period 0.2 s.
FAST = dict(lease_duration=2, renew_deadline=1.5, retry_period=0.2)


@pytest.fixture
def peers(addr: str) -> List[Tuple[str, int]]:
    """The two peer sidecars, (address, pid), each a pod's own sidecar."""
    addrs = os.environ.get("SAFEWRITE_PEER_ADDRS", "").split(",")
    pids = os.environ.get("SAFEWRITE_PEER_PIDS", "").split(",")
    if len(addrs) != 2 or len(pids) != 2 or not all(addrs):
        pytest.skip("SAFEWRITE_PEER_ADDRS/PIDS unset: run through test.sh")
    return [(a, int(p)) for a, p in zip(addrs, pids)]


@contextlib.contextmanager
def paused(pid: int) -> Iterator[None]:
    """The sidecar ``pid`` stopped (a paused pod) within the block, and always resumed."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


async def until(ok: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not ok():
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %.0f s waiting for %s" % (seconds, what))
        await asyncio.sleep(0.05)


def test_leaving_the_context_manager_releases_the_lease(
    peers: List[Tuple[str, int]], namespace: str, new_name: Callable[[], str]
) -> None:
    """With a 15 s lease, B can only lead within 5 s of A leaving its block because A's
    stream end released the Lease (sync client for A, asyncio for B)."""
    lease = new_name()
    slow = dict(lease_duration=15, renew_deadline=10, retry_period=0.5)
    with sw.Client(peers[0][0]) as a_client:
        with a_client.lead(namespace, lease, identity="replica-a", **slow) as a:
            first = a.wait_leading(timeout=10)
            assert first is not None and first.epoch >= 1 and a.last is not None
            assert a.last.identity == "replica-a" and a.last.holder == "replica-a"

            async def b_waits() -> Tuple[Optional[sw.Fence], float]:
                async with sw.AsyncClient(peers[1][0]) as b_client:
                    async with b_client.lead(namespace, lease, **slow) as b:
                        await until(lambda: b.last is not None, 10, "B's first event")
                        assert b.last is not None and not b.last.leading
                        assert b.last.reason == sw.NotLeadingReason.OTHER_HOLDER
                        assert b.last.holder == "replica-a"
                        released.set()
                        fence = await b.wait_leading(timeout=5)
                        return fence, time.monotonic()

            released = threading.Event()
            result: List[Any] = []
            thread = threading.Thread(target=lambda: result.append(asyncio.run(b_waits())))
            thread.start()
            assert released.wait(15), "B never saw A hold the Lease"
            left_at = time.monotonic()
        thread.join(20)
    assert not thread.is_alive() and result
    fence, led_at = result[0]
    assert fence is not None, "B did not lead within 5 s of the release"
    assert fence.epoch == first.epoch + 1
    assert led_at - left_at < 5
    with pytest.raises(sw.CancelledError):
        a.wait_leading()
    assert a.fence is None


@pytest.mark.parametrize(
    "name,durations,field",
    [
        ("Not_A_Name", {}, "name"),
        ("ok-name", dict(lease_duration=2, renew_deadline=3, retry_period=0.2), "lease_duration"),
        ("ok-name", dict(lease_duration=10, renew_deadline=1, retry_period=1), "renew_deadline"),
    ],
)
def test_a_refused_campaign_names_the_field(
    addr: str, namespace: str, name: str, durations: Dict[str, float], field: str
) -> None:
    with sw.Client(addr) as client:
        with pytest.raises(sw.InvalidError) as refused:
            with client.lead(namespace, name, **durations):
                pass
    fields = [v.field for v in refused.value.field_violations]
    assert any(field in f for f in fields), (fields, refused.value)

    async def main() -> sw.InvalidError:
        async with sw.AsyncClient(addr) as aclient:
            with pytest.raises(sw.InvalidError) as arefused:
                async with aclient.lead(namespace, name, **durations):
                    pass
            return arefused.value

    assert any(field in v.field for v in asyncio.run(main()).field_violations)


def test_run_fences_the_writes_of_the_work_without_per_call_code(
    peers: List[Tuple[str, int]], counter: sw.ObjectRef, read: Callable[[sw.ObjectRef], Dict[str, Any]],
    new_name: Callable[[], str],
) -> None:
    """The work's writes carry the term's fence (recorded on the object) without fence=;
    an explicit fence= wins (a stale one is refused); outside run nothing is fenced."""
    lease = new_name()

    async def main() -> Tuple[sw.Fence, Optional[sw.Fence]]:
        async with sw.AsyncClient(peers[0][0], timeout=30) as client:

            async def work(fence: sw.Fence) -> Tuple[sw.Fence, Optional[sw.Fence]]:
                assert sw.current_fence() == fence
                await client.update(counter, sw.cel(INCREMENT))
                with pytest.raises(sw.NotLeaderError):
                    await client.update(
                        counter, sw.cel(INCREMENT), fence=sw.Fence(fence.lease_namespace, lease, fence.epoch + 7)
                    )
                inner = await asyncio.ensure_future(asyncio.sleep(0, result=sw.current_fence()))
                return fence, inner

            result = await client.run_while_leading(counter.namespace, lease, work, **FAST)
            assert sw.current_fence() is None
            return result

    fence, inner = asyncio.run(main())
    assert inner == fence  # tasks the work starts inherit it
    obj = read(counter)
    assert obj["data"]["n"] == "1"
    assert obj["metadata"]["annotations"]["safewrite.dev/fence"].replace(" ", "") == (
        '{"%s/%s":%d}' % (counter.namespace, lease, fence.epoch)
    )


def test_sync_run_while_leading_returns_what_the_work_returns(
    peers: List[Tuple[str, int]], counter: sw.ObjectRef, read: Callable[[sw.ObjectRef], Dict[str, Any]],
    new_name: Callable[[], str],
) -> None:
    """Client.run_while_leading: the work runs in a thread of its own once leading, its
    writes fenced without fence=; its return ends the campaign (the Lease released)."""
    lease = new_name()
    terms: List[sw.Fence] = []

    def work(fence: sw.Fence, stop: threading.Event) -> str:
        terms.append(fence)
        assert not stop.is_set() and sw.current_fence() == fence
        client.update(counter, sw.cel(INCREMENT))
        return "one write"

    with sw.Client(peers[1][0], timeout=30) as client:
        assert client.run_while_leading(counter.namespace, lease, work, **FAST) == "one write"
    assert len(terms) == 1 and terms[0].epoch >= 1
    annotation = read(counter)["metadata"]["annotations"]["safewrite.dev/fence"]
    assert '"%s/%s"' % (counter.namespace, lease) in annotation


# Last in this file: pausing a peer sidecar can leave its later Lease campaigns silent
# (a sidecar issue, reported), so no test here uses a peer after this one.
def test_two_replicas_one_paused_count_exactly(
    peers: List[Tuple[str, int]], counter: sw.ObjectRef, read: Callable[[sw.ObjectRef], Dict[str, Any]],
    new_name: Callable[[], str],
) -> None:
    """Replica A and B (examples/lead_counter) each write through their own sidecar under
    one Lease. The leader's sidecar is paused for 4 s (past the 2 s lease): the other
    takes over under a higher epoch and writes; the paused one, resumed, hears
    NOT_LEADING and its old fence is refused. n is exactly the sum of the increments the
    two were answered OK: the deposed leader's writes were never applied."""
    lease = new_name()
    tallies = [counter_example.Tally(), counter_example.Tally()]
    started = time.monotonic()

    async def main() -> Tuple[int, int]:
        stop = asyncio.Event()
        clients = [sw.AsyncClient(address) for address, _ in peers]
        replicas = [
            asyncio.ensure_future(counter_example.replica(c, lease, counter, stop, t))
            for c, t in zip(clients, tallies)
        ]
        try:
            await until(lambda: any(t.acknowledged >= 3 for t in tallies), 15, "a leader's writes")
            first = 0 if tallies[0].acknowledged >= 3 else 1
            other = 1 - first
            old_epoch = tallies[first].events[-1].epoch
            with paused(peers[first][1]):
                paused_at = time.monotonic()
                await until(lambda: tallies[other].acknowledged >= 3, 10, "the takeover's writes")
                await asyncio.sleep(max(0.0, 4 - (time.monotonic() - paused_at)))
                taken = [e for e in tallies[other].events if e.leading]
                assert taken and taken[-1].epoch > old_epoch, tallies[other].events
            # Resumed: it hears it no longer leads, and its old fence is refused.
            await until(
                lambda: any(not e.leading for e in tallies[first].events), 10, "NOT_LEADING"
            )
            lost = [e for e in tallies[first].events if not e.leading][0]
            assert lost.reason in (sw.NotLeadingReason.LOST_RENEWAL, sw.NotLeadingReason.OTHER_HOLDER)
            stale = sw.Fence(counter.namespace, lease, old_epoch)
            with pytest.raises((sw.NotLeaderError, sw.FencedError)):
                await clients[first].update(counter, sw.cel(INCREMENT), fence=stale, timeout=30)
            before = tallies[other].acknowledged
            await until(lambda: tallies[other].acknowledged > before, 10, "the new leader writing on")
            return first, taken[-1].epoch
        finally:
            stop.set()
            await asyncio.gather(*replicas, return_exceptions=True)
            for c in clients:
                await c.close()

    first, new_epoch = asyncio.run(main())
    n = int(read(counter)["data"]["n"])
    assert n == tallies[0].acknowledged + tallies[1].acknowledged, (n, tallies)
    assert tallies[first].acknowledged >= 3 and tallies[1 - first].acknowledged >= 4
    fence_annotation = read(counter)["metadata"]["annotations"]["safewrite.dev/fence"]
    assert str(new_epoch) in fence_annotation
    assert time.monotonic() - started < 60
