"""The plain data types of the safewrite client: what to write, and what was written."""

from __future__ import annotations

import datetime
import enum
from dataclasses import dataclass
import json
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple, Union


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
    #: The object does not exist any more: a finalizer removal found it gone (nothing
    #: was written, and the result's object is empty), or the write removed the last
    #: finalizer of an object being deleted, so the API server deleted it (the result's
    #: object is the object as last written). Skip any status write that would follow.
    GONE = 5

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

    @property
    def gone(self) -> bool:
        """True when the object does not exist any more (:attr:`Outcome.GONE`): a
        finalizer removal found it deleted, or let the API server delete it. A
        controller then skips the status write it would make next."""
        return self.outcome == Outcome.GONE


@dataclass(frozen=True)
class ReadResult:
    """An object as :meth:`~safewrite_client.Client.get` read it.

    Attributes:
        object: The object, at least as new as the minimum resourceVersion the call
            named (e.g. the one its own write answered with): that state or a newer one,
            never an older one.
        resource_version: Its ``metadata.resourceVersion``; pass the result itself as
            ``at_least=`` of a later call to read at least this state again.
        remembered: True when the sidecar answered from its remembered copy of the
            object (as it last read or wrote it, at or past the minimum), without a
            request to the API server; False for a live read (always, without a
            minimum).
        trace_id: The W3C trace id of the sidecar's span for the call, as
            :attr:`Result.trace_id`; empty when the sidecar runs without OpenTelemetry.
    """

    object: Dict[str, Any]
    resource_version: str
    remembered: bool = False
    trace_id: str = ""


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
class Fence:
    """The leadership a write is made under: a write with a fence is one a deposed
    leader cannot make.

    The sidecar refuses it with :class:`~safewrite_client.NotLeaderError` unless it
    leads under this Lease and epoch, and with :class:`~safewrite_client.FencedError`
    when the object records a later epoch of the Lease (a later leader wrote it).
    Nothing is written then, and neither is retried.

    Attributes:
        lease_namespace: The Lease's namespace.
        lease_name: The Lease's name.
        epoch: The caller's epoch of that Lease, as the ``Lead`` RPC answered it
            (``LeadResponse.epoch``); not 0.
    """

    lease_namespace: str
    lease_name: str
    epoch: int


class PropagationPolicy(enum.IntEnum):
    """What a delete does to the object's dependents (``safewrite.v1.PropagationPolicy``,
    the API server's ``DeleteOptions.propagationPolicy``)."""

    #: The API server's default for the kind (usually background); what ``None`` sends.
    UNSPECIFIED = 0
    #: The object is deleted at once; the garbage collector deletes its dependents after.
    BACKGROUND = 1
    #: The object is kept, being deleted (a deletionTimestamp and the
    #: ``foregroundDeletion`` finalizer), until its blocking dependents are deleted.
    FOREGROUND = 2
    #: The object is deleted; its dependents are kept, their owner references to it removed.
    ORPHAN = 3


class DeleteOutcome(enum.IntEnum):
    """What a successful delete did (``safewrite.v1.DeleteOutcome``)."""

    #: Never sent by safewrite; stands for an outcome this client does not know.
    UNSPECIFIED = 0
    #: The API server deleted the object (or, with ``dry_run``, would have).
    DELETED = 1
    #: The API server only marked the object for deletion: it has finalizers (or
    #: foreground propagation added one) and stays readable, with a
    #: ``deletionTimestamp``, until they are removed.
    DELETING = 2
    #: The object was not there: nothing was deleted by this call (another writer, or an
    #: earlier attempt whose answer was lost, deleted it). An answer, not an error.
    GONE = 3

    @classmethod
    def _missing_(cls, value: object) -> "DeleteOutcome":
        return cls.UNSPECIFIED


@dataclass(frozen=True)
class DeleteResult:
    """The result of a successful :meth:`~safewrite_client.Client.delete`.

    Attributes:
        outcome: What happened (:class:`DeleteOutcome`).
        object: The object as the API server answered the DELETE (for
            :attr:`DeleteOutcome.DELETING`, with its ``deletionTimestamp``); empty when
            it answered with a Status instead, and for :attr:`DeleteOutcome.GONE`.
        deletion_timestamp: The object's ``metadata.deletionTimestamp``, timezone-aware
            (UTC); None when it has none.
        attempts: The number of attempts made, the last included.
        attempt_records: One :class:`AttemptRecord` per attempt, in order (its
            ``http_status`` is the DELETE's, or the read's when the read was refused or
            found nothing).
        trace_id: The W3C trace id of the sidecar's span, as :attr:`Result.trace_id`.
    """

    outcome: DeleteOutcome
    object: Dict[str, Any]
    deletion_timestamp: Optional[datetime.datetime]
    attempts: int
    attempt_records: Tuple[AttemptRecord, ...] = ()
    trace_id: str = ""

    @property
    def gone(self) -> bool:
        """True when the object was not there (:attr:`DeleteOutcome.GONE`)."""
        return self.outcome == DeleteOutcome.GONE

    @property
    def deleting(self) -> bool:
        """True when the object stays, being deleted, until its finalizers are removed
        (:attr:`DeleteOutcome.DELETING`)."""
        return self.outcome == DeleteOutcome.DELETING


class LeadState(enum.IntEnum):
    """Whether a ``Lead`` stream's caller leads (``safewrite.v1.LeadState``)."""

    #: Never sent; stands for a state this client does not know.
    UNSPECIFIED = 0
    #: The caller holds the Lease and leads, under :attr:`LeadEvent.epoch`.
    LEADING = 1
    #: The caller does not hold the Lease; :attr:`LeadEvent.reason` says why.
    NOT_LEADING = 2

    @classmethod
    def _missing_(cls, value: object) -> "LeadState":
        return cls.UNSPECIFIED


class NotLeadingReason(enum.IntEnum):
    """Why a ``Lead`` stream's caller does not lead (``safewrite.v1.NotLeadingReason``)."""

    #: The caller leads (or a reason this client does not know).
    UNSPECIFIED = 0
    #: Another holder holds the Lease and it has not expired; :attr:`LeadEvent.holder`
    #: names it.
    OTHER_HOLDER = 1
    #: No renewal succeeded within the renew deadline: stop acting as the leader. The
    #: campaign goes on, and a later acquisition has a new epoch.
    LOST_RENEWAL = 2
    #: The sidecar released the Lease on its own (it is shutting down); the stream ends.
    RELEASED = 3

    @classmethod
    def _missing_(cls, value: object) -> "NotLeadingReason":
        return cls.UNSPECIFIED


@dataclass(frozen=True)
class LeadEvent:
    """One event of a ``Lead`` stream: a change of the caller's leadership, or of the
    Lease's holder. Renewals make none.

    Attributes:
        state: :attr:`LeadState.LEADING` or :attr:`LeadState.NOT_LEADING`.
        epoch: The epoch of this leadership (LEADING): grows by one with every
            acquisition of the Lease by anyone; 0 when not leading.
        holder: The Lease's holder as last read (the caller's identity when it leads);
            empty when the Lease is free or was never read.
        reason: Why the caller does not lead (NOT_LEADING).
        identity: The identity the stream campaigns under (the caller's, or the one the
            sidecar made).
        fence: The :class:`Fence` of this leadership (the Lease and :attr:`epoch`) when
            LEADING, else None: pass it as ``fence=`` to writes only this leader may make.
    """

    state: LeadState
    epoch: int
    holder: str
    reason: NotLeadingReason
    identity: str
    fence: Optional[Fence] = None

    @property
    def leading(self) -> bool:
        """True for a LEADING event."""
        return self.state == LeadState.LEADING


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


def _required(owner: str, field: str, value: Any) -> None:
    if not isinstance(value, str):
        raise TypeError("%s.%s is a str, not %s" % (owner, field, type(value).__name__))
    if not value:
        raise ValueError("%s.%s is required" % (owner, field))


@dataclass(frozen=True)
class OwnerReference:
    """An owner of an object (``metav1.OwnerReference``), for the :func:`~safewrite_client.ensure_owner`
    and :func:`~safewrite_client.remove_owner` mutations; :meth:`of` makes one from the owner object itself. The
    object's reference to this owner is the one with the same group (of apiVersion, the
    version ignored), kind and name, as controllerutil matches it; the uid is written,
    not compared.

    Attributes:
        api_version: The owner's apiVersion, e.g. ``"apps/v1"``.
        kind: The owner's kind, e.g. ``"Deployment"``.
        name: The owner's ``metadata.name``.
        uid: The owner's ``metadata.uid``, written into the reference (a removal does
            not read it). Empty when ensuring: the sidecar reads the owner (in the
            object's namespace, or cluster-scoped) once and takes its uid; an owner
            that does not exist fails the call with
            :class:`~safewrite_client.PreconditionFailedError`.
        controller: The owner is the object's managing controller; at most one owner
            is, and ensuring another fails with
            :class:`~safewrite_client.AlreadyOwnedError`.
        block_owner_deletion: The garbage collector keeps the owner until this object
            is deleted (foreground deletion).

    Raises:
        ValueError: an empty api_version, kind or name.
        TypeError: a field of the wrong type.
    """

    api_version: str
    kind: str
    name: str
    uid: str = ""
    controller: bool = False
    block_owner_deletion: bool = False

    def __post_init__(self) -> None:
        for field in ("api_version", "kind", "name"):
            _required("OwnerReference", field, getattr(self, field))
        if not isinstance(self.uid, str):
            raise TypeError("OwnerReference.uid is a str, not %s" % type(self.uid).__name__)
        for flag in ("controller", "block_owner_deletion"):
            if not isinstance(getattr(self, flag), bool):
                raise TypeError("OwnerReference.%s is a bool" % flag)

    @classmethod
    def of(
        cls, owner: Mapping[str, Any], *, controller: bool = False, block_owner_deletion: bool = False
    ) -> "OwnerReference":
        """The reference to ``owner``, a Kubernetes object as a dict or a kopf body: its
        ``apiVersion``, ``kind``, ``metadata.name`` and ``metadata.uid`` (when it has
        none, the sidecar reads it). ``controller=True, block_owner_deletion=True`` is
        what controller-runtime's ``SetControllerReference`` writes.

        Raises:
            ValueError: ``owner`` lacks apiVersion, kind or metadata.name.
        """
        meta = owner.get("metadata")
        if not isinstance(meta, Mapping):
            raise ValueError("an owner object has metadata (with name and uid)")
        return cls(
            api_version=owner.get("apiVersion") or "",
            kind=owner.get("kind") or "",
            name=meta.get("name") or "",
            uid=meta.get("uid") or "",
            controller=controller,
            block_owner_deletion=block_owner_deletion,
        )


@dataclass(frozen=True)
class ListEntry:
    """One entry of a list of objects keyed by some of their fields (a list that is, or
    should have been, ``x-kubernetes-list-type: map``, such as a route's
    ``status.parents``), for the :func:`~safewrite_client.upsert_list_entry` and
    :func:`~safewrite_client.remove_list_entry` mutations.

    Attributes:
        path: Where the list is, as field names joined by dots, e.g.
            ``"status.parents"``. A missing list (and the objects on the way to it) is
            created on upsert.
        keys: The names of the key fields, e.g. ``("controllerName",)`` (a str is one
            key); an entry matches when every key field is equal.
        entry: The entry, a dict (or JSON text) carrying every key field. An upsert
            merges it into the matching entry as a JSON merge patch (None removes a
            field), or appends it when none matches; a removal uses only its key fields.

    Raises:
        ValueError: an empty path, no keys, or an entry that is not an object carrying
            every key field.
        TypeError: a field of the wrong type.
    """

    path: str
    keys: Union[Sequence[str], str]
    entry: Union[Mapping[str, Any], str]

    def __post_init__(self) -> None:
        _required("ListEntry", "path", self.path)
        if any(not part for part in self.path.split(".")):
            raise ValueError("ListEntry.path %r has an empty field name" % (self.path,))
        keys = (self.keys,) if isinstance(self.keys, str) else tuple(self.keys)
        if not keys:
            raise ValueError("ListEntry.keys names at least one key field")
        for key in keys:
            _required("ListEntry", "keys[]", key)
        object.__setattr__(self, "keys", keys)
        try:
            entry = json.loads(self.entry) if isinstance(self.entry, str) else self.entry
        except ValueError as err:
            raise ValueError("ListEntry.entry is not JSON: %s" % err) from None
        if not isinstance(entry, Mapping):
            raise ValueError("ListEntry.entry is a JSON object, not %s" % type(entry).__name__)
        missing = [key for key in keys if key not in entry]
        if missing:
            raise ValueError("ListEntry.entry lacks the key field(s) %s" % ", ".join(missing))


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

