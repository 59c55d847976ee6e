"""safewrite for kopf operators (the ``kopf`` extra: ``pip install 'safewrite-client[kopf]'``).

- :func:`to_kopf` / :func:`kopf_errors`: a :class:`~safewrite_client.SafewriteError` a
  retry may fix becomes ``kopf.TemporaryError`` (``delay`` = the sidecar's RetryInfo,
  else :data:`DEFAULT_DELAY`), and one only a different request can fix becomes
  ``kopf.PermanentError``, so kopf retries exactly the handlers worth retrying.
- :func:`patch_status` / :func:`apatch_status`: a handler's status write (fields and
  :class:`~safewrite_client.conditions.Condition` s) through safewrite, on the fresh object,
  to the object the handler was called for (its uid), with errors mapped as above.

::

    client = safewrite_client.AsyncClient()  # module level is fine: channels are made lazily

    @kopf.on.create("example.com", "v1", "widgets")
    async def reconcile(body, **_):
        ready = Condition("Ready", "True", "Reconciled", observed_generation=body.metadata.generation)
        await apatch_status(client, body, {"phase": "Ready"}, conditions=[ready])
"""

from __future__ import annotations

import contextlib
from typing import Any, Dict, Iterator, Mapping, Optional, Sequence

import kopf as _kopf

from ._aio import AsyncClient
from ._errors import SafewriteError, is_retryable
from ._sync import Client
from ._types import ObjectRef, Preconditions, Result
from .conditions import Condition

__all__ = ["DEFAULT_DELAY", "apatch_status", "kopf_errors", "object_ref", "patch_status", "to_kopf"]

#: Seconds kopf waits before retrying a handler whose retryable error carried no
#: RetryInfo (e.g. conflicts outlasted the retry policy).
DEFAULT_DELAY = 5.0


def to_kopf(err: SafewriteError, *, default_delay: float = DEFAULT_DELAY) -> Exception:
    """The kopf exception for a safewrite error: ``kopf.TemporaryError`` when
    :attr:`~safewrite_client.SafewriteError.retryable` (delay from RetryInfo, else
    ``default_delay``), and also when a write may have been applied by a call without
    an idempotency key (its outcome unknown, or its timeout cut it off): the advice is
    to read the object before deciding again, and kopf runs the handler again with the
    object as it then is. Else ``kopf.PermanentError``. Its message is ``str(err)``."""
    if is_retryable(err.code, err.write_failure_reason, idempotent=True):
        delay = err.retry_delay if err.retry_delay is not None else default_delay
        return _kopf.TemporaryError(str(err), delay=delay)
    return _kopf.PermanentError(str(err))


@contextlib.contextmanager
def kopf_errors(*, default_delay: float = DEFAULT_DELAY) -> Iterator[None]:
    """Raises :func:`to_kopf` of any :class:`~safewrite_client.SafewriteError` raised
    inside the block (chained to it); works in sync and async handlers."""
    try:
        yield
    except SafewriteError as err:
        raise to_kopf(err, default_delay=default_delay) from err


def object_ref(body: Mapping[str, Any]) -> ObjectRef:
    """The :class:`~safewrite_client.ObjectRef` of a kopf ``body`` (or any object)."""
    meta = body["metadata"]
    return ObjectRef(body["apiVersion"], body["kind"], meta.get("namespace") or "", meta["name"])


def _merge(into: Dict[str, Any], patch: Mapping[str, Any]) -> None:
    # RFC 7386: None deletes, maps merge, anything else replaces.
    for key, value in patch.items():
        if value is None:
            into.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        elif isinstance(value, Mapping):
            into[key] = {}
            _merge(into[key], value)
        else:
            into[key] = value


class _StatusChange:
    """A transaction function merging ``status`` fields and setting conditions."""

    def __init__(self, status: Optional[Mapping[str, Any]], conditions: Sequence[Condition]) -> None:
        self.status = status or {}
        self.conditions = list(conditions)

    def __call__(self, obj: Dict[str, Any]) -> None:
        if not isinstance(obj.get("status"), dict):
            obj["status"] = {}
        _merge(obj["status"], self.status)
        for condition in self.conditions:
            condition.apply(obj)


def _args(body: Mapping[str, Any], field_manager: Optional[str], timeout: Optional[float]) -> Dict[str, Any]:
    uid = body["metadata"].get("uid")
    return {
        "status": True,
        "preconditions": Preconditions(uid=uid) if uid else None,
        "field_manager": field_manager,
        "timeout": timeout,
    }


def patch_status(
    client: Client,
    body: Mapping[str, Any],
    status: Optional[Mapping[str, Any]] = None,
    *,
    conditions: Sequence[Condition] = (),
    field_manager: Optional[str] = None,
    timeout: Optional[float] = None,
    default_delay: float = DEFAULT_DELAY,
) -> Result:
    """Writes a handler's status through safewrite (for sync handlers): merges
    ``status`` (a merge patch of the status: None deletes a field) and sets
    ``conditions`` on the fresh object's status, with a uid precondition so that a
    deleted-and-recreated object of the same name is never written. Nothing is written
    (``Outcome.UNCHANGED``) when that changes nothing.

    Raises:
        kopf.TemporaryError: a retryable failure (see :func:`to_kopf`).
        kopf.PermanentError: any other failure.
    """
    with kopf_errors(default_delay=default_delay):
        return client.transact(
            object_ref(body), _StatusChange(status, conditions), **_args(body, field_manager, timeout)
        )


async def apatch_status(
    client: AsyncClient,
    body: Mapping[str, Any],
    status: Optional[Mapping[str, Any]] = None,
    *,
    conditions: Sequence[Condition] = (),
    field_manager: Optional[str] = None,
    timeout: Optional[float] = None,
    default_delay: float = DEFAULT_DELAY,
) -> Result:
    """:func:`patch_status` for async handlers and an
    :class:`~safewrite_client.AsyncClient`."""
    with kopf_errors(default_delay=default_delay):
        return await client.transact(
            object_ref(body), _StatusChange(status, conditions), **_args(body, field_manager, timeout)
        )
