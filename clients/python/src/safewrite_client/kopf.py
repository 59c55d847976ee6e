"""safewrite for kopf operators (the ``kopf`` extra: ``pip install 'safewrite-client[kopf]'``).

- :func:`to_kopf` / :func:`kopf_errors`: a :class:`~safewrite_client.SafewriteError` a
  retry may fix becomes ``kopf.TemporaryError`` (``delay`` = the sidecar's RetryInfo,
  else :data:`DEFAULT_DELAY`), and one only a different request can fix becomes
  ``kopf.PermanentError``, so kopf retries exactly the handlers worth retrying.
- :func:`patch_status` / :func:`apatch_status`: a handler's status write (fields and
  :class:`~safewrite_client.Condition` s) through safewrite, on the fresh object.
- :func:`set_conditions` / :func:`aset_conditions`: only conditions, with the sidecar's
  ``set_conditions`` (``meta.SetStatusCondition``'s semantics), in place of
  ``patch.status["conditions"] = [...]``, which replaces the whole list.
- :func:`add_finalizer` / :func:`aadd_finalizer` and :func:`remove_finalizer` /
  :func:`aremove_finalizer`: one finalizer of the handler's object, the others kept.
- :func:`get` / :func:`aget`: the handler's object at least as new as its body, or as
  a write of the handler's own: kopf hands the handlers of one reaction the body of the
  event that started it, so a handler after one that wrote reads that write here,
  without waiting for the watch to bring it.
- :func:`leading`: a handler's block runs only while this replica leads (kopf's peering
  is not an election), every safewrite write in it fenced; a deposed replica's handler
  becomes ``kopf.TemporaryError``. examples/kopf_widget shows the whole recipe: kopf
  starts handling only once the replica leads, and stops when it no longer does.

Each writes the object the handler was called for (a uid precondition: a deleted and
recreated object of the same name is never written), maps errors as above, and gives
conditions without an ``observed_generation`` the generation of the body the handler
was called with: the generation it observed, not the newer one the sidecar may read
after a spec change.

::

    client = safewrite_client.AsyncClient()  # module level is fine: channels are made lazily

    @kopf.on.create("example.com", "v1", "widgets")
    async def reconcile(body, **_):
        await aadd_finalizer(client, body, "example.com/cleanup")
        await aset_conditions(client, body, Condition("Ready", True, "Reconciled"))
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Union

import kopf as _kopf

from . import _mutation
from ._aio import AsyncClient, AsyncLeadership
from ._core import AtLeast
from ._errors import FencedError, NotLeaderError, SafewriteError, is_retryable
from ._lead import fenced
from ._sync import Client, Leadership
from ._types import Fence, ObjectRef, Preconditions, ReadResult, Result
from .conditions import Condition

__all__ = [
    "DEFAULT_DELAY",
    "aadd_finalizer",
    "aget",
    "apatch_status",
    "aremove_finalizer",
    "aset_conditions",
    "add_finalizer",
    "get",
    "kopf_errors",
    "leading",
    "object_ref",
    "patch_status",
    "remove_finalizer",
    "set_conditions",
    "to_kopf",
]

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


@contextlib.contextmanager
def leading(
    leadership: Union[AsyncLeadership, Leadership], *, delay: float = DEFAULT_DELAY
) -> Iterator[Fence]:
    """Runs a handler's block only while this replica leads, and fences its writes:
    every write of a safewrite client in the block made without ``fence=`` (the
    helpers of this module included) carries the current leadership's fence
    (:func:`~safewrite_client.fenced`), so a replica deposed in the meantime cannot
    overwrite its successor's writes. Yields that fence. Works in sync and async
    handlers.

    Raises:
        kopf.TemporaryError: this replica does not lead (``delay`` seconds), or it was
            deposed within the block: a write refused with
            :class:`~safewrite_client.NotLeaderError` or
            :class:`~safewrite_client.FencedError` (also as the ``kopf.PermanentError``
            the helpers make of it). kopf runs the handler again later, and it does its
            work on the replica that leads then.
    """
    fence = leadership.fence
    if fence is None:
        raise _kopf.TemporaryError("this replica does not lead; another one handles it", delay=delay)
    try:
        with fenced(fence):
            yield fence
    except (NotLeaderError, FencedError) as err:
        raise _kopf.TemporaryError("deposed: %s" % err, delay=delay) from err
    except _kopf.PermanentError as err:
        cause = err.__cause__
        if isinstance(cause, (NotLeaderError, FencedError)):
            raise _kopf.TemporaryError("deposed: %s" % cause, delay=delay) from cause
        raise


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


def _observed(body: Mapping[str, Any], conditions: Union[Condition, Sequence[Condition]]) -> List[Condition]:
    """The conditions, those without an observed_generation given the body's generation."""
    given = [conditions] if isinstance(conditions, Condition) else list(conditions)
    generation = body["metadata"].get("generation")
    if not isinstance(generation, int):
        return given
    return [
        c if c.observed_generation is not None else dataclasses.replace(c, observed_generation=generation)
        for c in given
    ]


class _StatusChange:
    """A transaction function merging ``status`` fields and setting conditions."""

    def __init__(self, status: Optional[Mapping[str, Any]], conditions: List[Condition]) -> None:
        self.status = status or {}
        self.conditions = conditions

    def __call__(self, obj: Dict[str, Any]) -> None:
        if not isinstance(obj.get("status"), dict):
            obj["status"] = {}
        _merge(obj["status"], self.status)
        for condition in self.conditions:
            condition.apply(obj)


def _same_uid(body: Mapping[str, Any]) -> Optional[Preconditions]:
    """The precondition that the object is the body's (not one made again with its name)."""
    uid = body["metadata"].get("uid")
    return Preconditions(uid=uid) if uid else None


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
    ``conditions`` on the fresh object's status, in one transaction, with a uid
    precondition so that a deleted-and-recreated object of the same name is never
    written. A condition without ``observed_generation`` gets the body's generation.
    Nothing is written (``Outcome.UNCHANGED``) when that changes nothing.

    Raises:
        kopf.TemporaryError: a retryable failure (see :func:`to_kopf`).
        kopf.PermanentError: any other failure.
    """
    with kopf_errors(default_delay=default_delay):
        return client.transact(
            object_ref(body),
            _StatusChange(status, _observed(body, conditions)),
            status=True,
            preconditions=_same_uid(body),
            field_manager=field_manager,
            timeout=timeout,
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
            object_ref(body),
            _StatusChange(status, _observed(body, conditions)),
            status=True,
            preconditions=_same_uid(body),
            field_manager=field_manager,
            timeout=timeout,
        )


def set_conditions(
    client: Client,
    body: Mapping[str, Any],
    conditions: Union[Condition, Sequence[Condition]],
    *,
    field_manager: Optional[str] = None,
    timeout: Optional[float] = None,
    default_delay: float = DEFAULT_DELAY,
) -> Result:
    """Sets conditions on the status of the handler's object (for sync handlers) with
    the sidecar's ``set_conditions`` (``PatchStatus``): each entry of those types is
    updated in place or appended, its lastTransitionTime moves only with its status,
    every other entry is kept, and a condition set to what it is writes nothing
    (``Outcome.UNCHANGED``). A condition without ``observed_generation`` gets the body's
    generation. For kinds with a status subresource.

    Raises:
        ValueError, TypeError: conditions the sidecar would refuse (before sending).
        kopf.TemporaryError: a retryable failure (see :func:`to_kopf`).
        kopf.PermanentError: any other failure, e.g. the object was recreated.
    """
    change = _observed(body, conditions)
    with kopf_errors(default_delay=default_delay):
        return client.patch_status(
            object_ref(body),
            _mutation.set_conditions(change),
            preconditions=_same_uid(body),
            field_manager=field_manager,
            timeout=timeout,
        )


async def aset_conditions(
    client: AsyncClient,
    body: Mapping[str, Any],
    conditions: Union[Condition, Sequence[Condition]],
    *,
    field_manager: Optional[str] = None,
    timeout: Optional[float] = None,
    default_delay: float = DEFAULT_DELAY,
) -> Result:
    """:func:`set_conditions` for async handlers and an
    :class:`~safewrite_client.AsyncClient`."""
    change = _observed(body, conditions)
    with kopf_errors(default_delay=default_delay):
        return await client.patch_status(
            object_ref(body),
            _mutation.set_conditions(change),
            preconditions=_same_uid(body),
            field_manager=field_manager,
            timeout=timeout,
        )


def add_finalizer(
    client: Client,
    body: Mapping[str, Any],
    finalizer: str,
    *,
    field_manager: Optional[str] = None,
    timeout: Optional[float] = None,
    default_delay: float = DEFAULT_DELAY,
) -> Result:
    """Adds ``finalizer`` (a qualified name, e.g. ``"example.com/cleanup"``) to the
    handler's object, keeping the others (for sync handlers); ``Outcome.UNCHANGED``
    when it is there. An object being deleted gets none: that fails with
    ``kopf.PermanentError`` from
    :class:`~safewrite_client.ObjectDeletingError` (run the cleanup instead).

    Raises:
        ValueError: ``finalizer`` is not a qualified name (before sending).
        kopf.TemporaryError: a retryable failure (see :func:`to_kopf`).
        kopf.PermanentError: any other failure.
    """
    with kopf_errors(default_delay=default_delay):
        return client.update(
            object_ref(body),
            _mutation.add_finalizer(finalizer),
            preconditions=_same_uid(body),
            field_manager=field_manager,
            timeout=timeout,
        )


async def aadd_finalizer(
    client: AsyncClient,
    body: Mapping[str, Any],
    finalizer: str,
    *,
    field_manager: Optional[str] = None,
    timeout: Optional[float] = None,
    default_delay: float = DEFAULT_DELAY,
) -> Result:
    """:func:`add_finalizer` for async handlers and an
    :class:`~safewrite_client.AsyncClient`."""
    with kopf_errors(default_delay=default_delay):
        return await client.update(
            object_ref(body),
            _mutation.add_finalizer(finalizer),
            preconditions=_same_uid(body),
            field_manager=field_manager,
            timeout=timeout,
        )


def remove_finalizer(
    client: Client,
    body: Mapping[str, Any],
    finalizer: str,
    *,
    field_manager: Optional[str] = None,
    timeout: Optional[float] = None,
    default_delay: float = DEFAULT_DELAY,
) -> Result:
    """Removes ``finalizer`` from the handler's object, keeping the others (for sync
    handlers), typically once its cleanup is done. When the object is gone already, or
    this was its last finalizer and it was being deleted (so the API server deleted
    it), the result is ``Outcome.GONE`` (``result.gone``): skip any status write.

    Raises:
        ValueError: ``finalizer`` is not a qualified name (before sending).
        kopf.TemporaryError: a retryable failure (see :func:`to_kopf`).
        kopf.PermanentError: any other failure.
    """
    with kopf_errors(default_delay=default_delay):
        return client.update(
            object_ref(body),
            _mutation.remove_finalizer(finalizer),
            preconditions=_same_uid(body),
            field_manager=field_manager,
            timeout=timeout,
        )


async def aremove_finalizer(
    client: AsyncClient,
    body: Mapping[str, Any],
    finalizer: str,
    *,
    field_manager: Optional[str] = None,
    timeout: Optional[float] = None,
    default_delay: float = DEFAULT_DELAY,
) -> Result:
    """:func:`remove_finalizer` for async handlers and an
    :class:`~safewrite_client.AsyncClient`."""
    with kopf_errors(default_delay=default_delay):
        return await client.update(
            object_ref(body),
            _mutation.remove_finalizer(finalizer),
            preconditions=_same_uid(body),
            field_manager=field_manager,
            timeout=timeout,
        )


def _at_least(
    body: Mapping[str, Any], at_least: Optional[AtLeast]
) -> AtLeast:
    return body if at_least is None else at_least


def _same_object(body: Mapping[str, Any], read: ReadResult) -> ReadResult:
    """``read``, unless it is another object of the same name than the body's (a uid
    that differs): then the handler's object was deleted, which no retry changes."""
    uid = body["metadata"].get("uid")
    found = read.object.get("metadata", {}).get("uid")
    if uid and found and found != uid:
        raise _kopf.PermanentError(
            "%s %s was deleted and made again (uid %s, the handler's is %s)"
            % (body.get("kind"), body["metadata"].get("name"), found, uid)
        )
    return read


def get(
    client: Client,
    body: Mapping[str, Any],
    *,
    at_least: Optional[AtLeast] = None,
    timeout: Optional[float] = None,
    default_delay: float = DEFAULT_DELAY,
) -> ReadResult:
    """Reads the handler's object (for sync handlers) at least as new as ``at_least``
    (the result of a write, e.g. of an earlier handler of this reaction), by default as
    new as ``body``: that state or a newer one, from the sidecar's remembered copy when
    it is new enough (``remembered``: the sidecar's own last write, with no request to
    the API server), else live. kopf hands the handlers of one reaction the body of the
    event that started it, so a handler after one that wrote through safewrite sees
    that write here.

    Raises:
        kopf.TemporaryError: a retryable failure (see :func:`to_kopf`).
        kopf.PermanentError: any other failure, e.g. the object is gone, or it was
            deleted and made again (another uid than the body's).
    """
    with kopf_errors(default_delay=default_delay):
        read = client.get(object_ref(body), at_least=_at_least(body, at_least), timeout=timeout)
    return _same_object(body, read)


async def aget(
    client: AsyncClient,
    body: Mapping[str, Any],
    *,
    at_least: Optional[AtLeast] = None,
    timeout: Optional[float] = None,
    default_delay: float = DEFAULT_DELAY,
) -> ReadResult:
    """:func:`get` for async handlers and an :class:`~safewrite_client.AsyncClient`."""
    with kopf_errors(default_delay=default_delay):
        read = await client.get(object_ref(body), at_least=_at_least(body, at_least), timeout=timeout)
    return _same_object(body, read)
