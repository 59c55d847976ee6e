"""One replica of a counter under a Lease: while it leads, it increments data.n of one
ConfigMap, every write fenced with its leadership's epoch, and counts the increments
the sidecar acknowledged.

    SAFEWRITE_ADDRESS=127.0.0.1:50051 python counter.py NAMESPACE LEASE CONFIGMAP SECONDS
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass, field
from typing import List, Optional

import safewrite_client as sw

INCREMENT = '{"data": {"n": string(int(object.data.n) + 1)}}'


@dataclass
class Tally:
    acknowledged: int = 0  # increments the sidecar answered OK: each one landed
    refused: int = 0  # NotLeaderError / FencedError: deposed, nothing was written
    events: List[sw.LeadEvent] = field(default_factory=list)


async def watch(leadership: sw.AsyncLeadership, tally: Tally) -> None:
    async for event in leadership:
        tally.events.append(event)
        print(event.state.name, event.reason.name, "epoch", event.epoch, flush=True)


async def replica(
    client: sw.AsyncClient, lease: str, ref: sw.ObjectRef, stop: asyncio.Event, tally: Tally
) -> None:
    async with client.lead(
        ref.namespace, lease, lease_duration=2, renew_deadline=1.5, retry_period=0.2
    ) as leadership:
        watcher = asyncio.ensure_future(watch(leadership, tally))
        refused: Optional[sw.Fence] = None
        while not stop.is_set():
            fence = await leadership.wait_leading(newer_than=refused, timeout=0.2)
            if fence is None:
                continue  # not leading
            try:
                # A long deadline: every write gets a definite answer, even across a pause.
                await client.update(ref, sw.cel(INCREMENT), fence=fence, timeout=30)
                tally.acknowledged += 1
            except (sw.NotLeaderError, sw.FencedError):
                tally.refused += 1
                refused = fence  # wait for a later leadership
    await asyncio.gather(watcher, return_exceptions=True)


async def main(namespace: str, lease: str, name: str, seconds: float) -> None:
    ref = sw.ObjectRef("v1", "ConfigMap", namespace, name)
    stop, tally = asyncio.Event(), Tally()
    async with sw.AsyncClient() as client:
        await client.update(ref, sw.merge_patch({}), create_if_missing={"data": {"n": "0"}})
        asyncio.get_running_loop().call_later(seconds, stop.set)
        await replica(client, lease, ref, stop, tally)
    print("acknowledged", tally.acknowledged, "refused", tally.refused)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])))
