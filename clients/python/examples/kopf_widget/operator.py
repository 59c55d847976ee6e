"""A kopf operator that reconciles Widgets (widgets.test.safewrite.dev/v1) and writes
their status through safewrite.

    SAFEWRITE_ADDRESS=127.0.0.1:50051 kopf run --standalone --namespace NS operator.py

For each Widget it sets ``status.replicas`` to ``spec.size`` and a ``Ready`` condition
(True when the size is positive) computed on the fresh object: concurrent writers
never lose each other's status, a repeated reconcile writes nothing, and a failed write
becomes kopf.TemporaryError (retried after the sidecar's RetryInfo) or
kopf.PermanentError.
"""

from __future__ import annotations

from typing import Any

import kopf

import safewrite_client as sw
from safewrite_client.conditions import Condition
from safewrite_client.kopf import apatch_status

# Made at import time, before kopf starts its event loop: the client makes its channel
# on the loop that first uses it.
client = sw.AsyncClient(timeout=30)


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.posting.enabled = False  # no Events: this operator writes status only


@kopf.on.cleanup()
async def close_client(**_: Any) -> None:
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
    result = await apatch_status(client, body, {"replicas": size}, conditions=[ready])
    logger.info("status %s after %d attempt(s)", result.outcome.name, result.attempts)
