"""The plain data types of the safewrite client: what to write, and what was written."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple


@dataclass(frozen=True)
class ObjectRef:
    """Names one Kubernetes object.

    Attributes:
        api_version: The object's apiVersion, e.g. ``"v1"``, ``"apps/v1"``,
            ``"example.com/v1alpha1"``.
        kind: The object's kind, e.g. ``"ConfigMap"``; safewrite resolves it to a
            resource through API discovery.
        namespace: The namespace; empty for cluster-scoped kinds.
        name: The object's ``metadata.name``.
    """

    api_version: str
    kind: str
    namespace: str
    name: str


class Outcome(enum.IntEnum):
    """What a successful write did (``safewrite.v1.Outcome``)."""

    #: Never sent by safewrite; stands for an outcome this client does not know.
    UNSPECIFIED = 0
    #: The object was changed and written.
    UPDATED = 1
    #: The mutation left the object as it was: nothing was written.
    UNCHANGED = 2
    #: The object did not exist and was created from ``create_if_missing``.
    CREATED = 3
    #: A transaction was aborted by the caller: nothing was written.
    ABORTED = 4

    @classmethod
    def _missing_(cls, value: object) -> "Outcome":
        # A newer sidecar may answer with an outcome added after this client was built.
        return cls.UNSPECIFIED


@dataclass(frozen=True)
class AttemptRecord:
    """A short record of one attempt of safewrite's retry loop.

    Attributes:
        number: The attempt's number, starting at 1.
        resource_version_read: The resourceVersion of the fresh object it read.
        http_status: The HTTP status of the write (or of a refused read); 0 when no
            write was sent, or when no answer came.
        reason: The Kubernetes Status reason of the answer (e.g. ``"Conflict"``),
            empty on success.
        backoff: Seconds safewrite slept after this attempt; 0 for the last.
        batch_size: How many requests this attempt's write carried: 1 for a write made
            alone, more when concurrent writes to the same object were committed
            together (group commit); 0 when no write was sent.
    """

    number: int
    resource_version_read: str
    http_status: int
    reason: str
    backoff: float
    batch_size: int = 0


@dataclass(frozen=True)
class Result:
    """The result of a successful write.

    Attributes:
        outcome: What happened (:class:`Outcome`).
        object: The object as this call left it: as written by the write that carried
            its change (or as read, when unchanged or aborted). When the call was
            committed together with others (:attr:`AttemptRecord.batch_size` above 1),
            the object right after this call's own change, in the batch's order,
            without the changes of the calls after it; an unchanged call gets the
            object as it stood at its turn.
        resource_version: The resourceVersion of :attr:`object`: of the write that
            carried it, or of the read when it is the object as read.
        attempts: The number of attempts made, the last included.
        attempt_records: One :class:`AttemptRecord` per attempt, in order.
        trace_id: The W3C trace id (32 hex digits) of the sidecar's span for the call:
            the caller's own trace id when its OpenTelemetry context was propagated
            (see ``propagate_trace`` of :class:`~safewrite_client.Client`), else a new
            trace's; empty when the sidecar runs without OpenTelemetry.
        already_applied: True when the call's ``idempotency_key`` was already recorded
            on the object: an earlier call (or attempt) with this key made the change,
            and nothing was written this time. The outcome is then
            :attr:`Outcome.UPDATED` and :attr:`object` is the object as read (committed
            together with others: as it stood at this call's turn).
    """

    outcome: Outcome
    object: Dict[str, Any]
    resource_version: str
    attempts: int
    attempt_records: Tuple[AttemptRecord, ...] = ()
    trace_id: str = ""
    already_applied: bool = False

    @property
    def written(self) -> bool:
        """True when the object was written (updated or created), by this call or, when
        :attr:`already_applied`, by an earlier call with the same idempotency key."""
        return self.outcome in (Outcome.UPDATED, Outcome.CREATED)


@dataclass(frozen=True)
class Preconditions:
    """Conditions safewrite checks on the fresh object before every write.

    When one is false nothing is written and the call fails with
    :class:`~safewrite_client.PreconditionFailedError` carrying the current object (or
    :class:`~safewrite_client.ConflictError` for a resourceVersion mismatch); it is not
    retried.

    Attributes:
        uid: The object's ``metadata.uid`` must equal this.
        resource_version: Strict compare-and-swap: the object's
            ``metadata.resourceVersion`` must equal this, and a conflict is not retried.
        cel: A CEL expression over ``object`` that must return true.
    """

    uid: Optional[str] = None
    resource_version: Optional[str] = None
    cel: Optional[str] = None


@dataclass(frozen=True)
class RetryPolicy:
    """Bounds safewrite's retry loop for one call; unset fields take the sidecar's defaults.

    The call's ``timeout`` always bounds the loop as well: safewrite never sleeps past it.

    Attributes:
        max_attempts: The most attempts to make, the first included; 0 takes the default.
        initial_backoff: Seconds of backoff before the second attempt.
        max_backoff: The cap, in seconds, on any single backoff.
        requeue: Make one attempt only: a conflict comes back at once as
            :class:`~safewrite_client.ConflictError`, for controllers that prefer to requeue.
    """

    max_attempts: int = 0
    initial_backoff: Optional[float] = None
    max_backoff: Optional[float] = None
    requeue: bool = False


@dataclass(frozen=True)
class FieldViolation:
    """One field at fault in a refused request (from ``google.rpc.BadRequest``).

    Attributes:
        field: The path of the field, e.g. ``"metadata.labels"``.
        description: Why it is at fault.
    """

    field: str
    description: str


class Abort(Exception):
    """Raise from a :meth:`~safewrite_client.Client.transact` function to end it without writing.

    The transaction then returns a :class:`Result` whose outcome is
    :attr:`Outcome.ABORTED`, with the object as last read.

    Args:
        reason: Why the transaction was aborted; recorded in safewrite's trace.
    """

    def __init__(self, reason: str = "") -> None:
        super().__init__(reason)
        self.reason = reason

