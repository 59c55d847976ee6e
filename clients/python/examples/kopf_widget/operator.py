"""A kopf operator that reconciles Widgets (widgets.test.safewrite.dev/v1) and writes
their status through safewrite, as one replica of several under a leader election.

    SAFEWRITE_ADDRESS=127.0.0.1:50051 POD_NAMESPACE=NS \
        kopf run --standalone --namespace NS operator.py

``--standalone``: kopf's peering is not an election, the Lease ``NS/kopf-widget`` is.
A replica handles nothing until it leads (kopf waits for its startup handlers), writes
every status under its leadership's fence, and stops (SIGTERM to itself) when it no
longer leads, for its supervisor to restart it as a candidate; stopping releases the
Lease, so a standby leads within its retry period.

For each Widget it sets ``status.replicas`` to ``spec.size`` and a ``Ready`` condition
(True when the size is positive) computed on the fresh object: concurrent writers
never lose each other's status, a repeated reconcile writes nothing, and a failed write
becomes kopf.TemporaryError (retried after the sidecar's RetryInfo) or
kopf.PermanentError.
"""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any, List

import kopf

import safewrite_client as sw
from safewrite_client.conditions import Condition
from safewrite_client.kopf import apatch_status, leading

# Made at import time, before kopf starts its event loop: the client makes its channel
# (and the leadership its stream) on the loop that first uses it.
client = sw.AsyncClient(timeout=30)
leadership = client.lead(
    os.environ.get("POD_NAMESPACE", "default"), "kopf-widget", identity=os.environ.get("POD_NAME")
)
background: List["asyncio.Future[None]"] = []


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, logger: Any, **_: Any) -> None:
    settings.posting.enabled = False  # no Events: this operator writes status only
    fence = await leadership.wait_leading()  # a standby replica waits here
    logger.info("leading %s/%s under epoch %d", fence.lease_namespace, fence.lease_name, fence.epoch)
    background.append(asyncio.ensure_future(stop_when_deposed(logger)))


async def stop_when_deposed(logger: Any) -> None:
    led = False
    try:
        async for event in leadership:
            led = led or event.leading
            if led and not event.leading:
                break
    except sw.SafewriteError as err:
        logger.warning("the Lead stream failed: %s", err)
    logger.warning("no longer leading: stopping")
    os.kill(os.getpid(), signal.SIGTERM)


@kopf.on.cleanup()
async def close_client(**_: Any) -> None:
    for task in background:
        task.cancel()
    await leadership.aclose()  # releases the Lease: a standby leads within its retry period
    await client.close()


@kopf.on.resume("test.safewrite.dev", "v1", "widgets")
@kopf.on.create("test.safewrite.dev", "v1", "widgets")
@kopf.on.update("test.safewrite.dev", "v1", "widgets", field="spec")
async def reconcile(body: kopf.Body, spec: kopf.Spec, meta: kopf.Meta, logger: Any, **_: Any) -> None:
    size = int(spec.get("size", 0))
    ready = Condition(
        "Ready",
        size > 0,
        "Reconciled" if size > 0 else "NoReplicas",
        "%d replica(s)" % size,
        observed_generation=meta.get("generation"),
    )
    with leading(leadership) as fence:  # kopf.TemporaryError unless leading; writes fenced
        result = await apatch_status(client, body, {"replicas": size}, conditions=[ready])
    logger.info("status %s after %d attempt(s) under epoch %d", result.outcome.name, result.attempts, fence.epoch)
