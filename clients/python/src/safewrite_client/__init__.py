"""Python client of safewrite, the sidecar that performs conflict-safe read-modify-write
of Kubernetes objects (distribution ``safewrite-client``, import ``safewrite_client``).

A controller sends *what* to change; safewrite reads the fresh object, applies the
change, writes it with the resourceVersion it read, and on a conflict retries from a
fresh read, within the call's timeout::

    import safewrite_client as sw

    with sw.Client() as client:  # the sidecar at $SAFEWRITE_ADDRESS
        ref = sw.ObjectRef("v1", "ConfigMap", "default", "counter")
        result = client.update(ref, sw.cel('{"data": {"n": string(int(object.data.n) + 1)}}'))

:class:`Client` blocks; :class:`AsyncClient` is its asyncio twin (one core,
:mod:`safewrite_client._core`, behind both). Failures raise a :class:`SafewriteError`
subclass per gRPC status code, carrying safewrite's rich error details and whether
sending the same call again may help and is safe (:attr:`SafewriteError.retryable`; a
write whose outcome is unknown counts only when the call carried an idempotency key).

The change is one :class:`Mutation` value: a patch (:func:`cel`, :func:`merge_patch`,
:func:`json_patch`, :func:`apply`), or a change to one entry of a list with exact
semantics: status conditions (:func:`set_conditions`, :func:`remove_conditions` of
:class:`Condition` s), a finalizer (:func:`add_finalizer`, :func:`remove_finalizer`),
an owner reference (:func:`ensure_owner`, :func:`remove_owner` of an
:class:`OwnerReference`) or an entry of a keyed list (:func:`upsert_list_entry`,
:func:`remove_list_entry` of a :class:`ListEntry`).
:meth:`Client.get` reads an object at least as new as one of your writes (read your own
writes). :meth:`Client.delete` deletes the object it decided on. :meth:`Client.lead`
campaigns for a Lease (leader election) and gives the :class:`Fence` that makes writes
ones a deposed leader cannot make; :meth:`Leadership.run` runs code only while leading,
its writes fenced (:func:`fenced`). :mod:`safewrite_client.kopf` adapts errors and writes to kopf. The generated
protobuf and gRPC modules are in :mod:`safewrite_client.v1`.
"""

from ._aio import AsyncClient, AsyncLeadership
from ._core import (
    ADDRESS_ENV,
    DEFAULT_TARGET,
    AtLeast,
    TransactFn,
    channel_options,
    default_target,
)
from ._errors import (
    AlreadyOwnedError,
    BY_CODE_REASONS,
    DOMAIN,
    FINAL_REASONS,
    RETRYABLE_CODES,
    RETRYABLE_REASONS,
    RETRYABLE_WITH_KEY_CODES,
    RETRYABLE_WITH_KEY_REASONS,
    WRITE_OUTCOME_UNKNOWN,
    CancelledError,
    ConflictError,
    DeadlineExceededError,
    FencedError,
    InternalError,
    InvalidError,
    NotFoundError,
    NotLeaderError,
    ObjectDeletingError,
    OutcomeUnknownError,
    PermissionDeniedError,
    PreconditionFailedError,
    Reason,
    ResourceExhaustedError,
    SafewriteError,
    UnauthenticatedError,
    UnavailableError,
    UnimplementedError,
    UnknownFieldError,
    error_class,
    from_rpc_error,
    is_retryable,
    reason_name,
)
from ._lead import Seconds, current_fence, fenced
from ._mutation import (
    JsonObject,
    JsonPatchOps,
    Mutation,
    MutationKind,
    Owner,
    add_finalizer,
    apply,
    cel,
    ensure_owner,
    json_patch,
    merge_patch,
    remove_conditions,
    remove_finalizer,
    remove_list_entry,
    remove_owner,
    set_conditions,
    upsert_list_entry,
)
from ._sync import Client, Leadership
from ._types import (
    Abort,
    AttemptRecord,
    DeleteOutcome,
    DeleteResult,
    Fence,
    FieldViolation,
    LeadEvent,
    LeadState,
    ListEntry,
    NotLeadingReason,
    ObjectRef,
    Outcome,
    OwnerReference,
    Preconditions,
    PropagationPolicy,
    ReadResult,
    Result,
    RetryPolicy,
)
from .conditions import Condition

__version__ = "0.2.0"

__all__ = [
    "ADDRESS_ENV",
    "BY_CODE_REASONS",
    "DEFAULT_TARGET",
    "DOMAIN",
    "FINAL_REASONS",
    "RETRYABLE_CODES",
    "RETRYABLE_REASONS",
    "RETRYABLE_WITH_KEY_CODES",
    "RETRYABLE_WITH_KEY_REASONS",
    "WRITE_OUTCOME_UNKNOWN",
    "Abort",
    "AtLeast",
    "AlreadyOwnedError",
    "AsyncClient",
    "AsyncLeadership",
    "AttemptRecord",
    "CancelledError",
    "Client",
    "Condition",
    "ConflictError",
    "DeadlineExceededError",
    "DeleteOutcome",
    "DeleteResult",
    "Fence",
    "FencedError",
    "FieldViolation",
    "InternalError",
    "InvalidError",
    "JsonObject",
    "JsonPatchOps",
    "LeadEvent",
    "LeadState",
    "Leadership",
    "ListEntry",
    "Mutation",
    "MutationKind",
    "NotFoundError",
    "NotLeaderError",
    "NotLeadingReason",
    "ObjectDeletingError",
    "ObjectRef",
    "Outcome",
    "OutcomeUnknownError",
    "Owner",
    "OwnerReference",
    "PermissionDeniedError",
    "PreconditionFailedError",
    "Preconditions",
    "PropagationPolicy",
    "Reason",
    "ReadResult",
    "ResourceExhaustedError",
    "Result",
    "RetryPolicy",
    "SafewriteError",
    "Seconds",
    "TransactFn",
    "UnauthenticatedError",
    "UnavailableError",
    "UnimplementedError",
    "UnknownFieldError",
    "__version__",
    "add_finalizer",
    "apply",
    "cel",
    "channel_options",
    "current_fence",
    "default_target",
    "ensure_owner",
    "error_class",
    "fenced",
    "from_rpc_error",
    "is_retryable",
    "json_patch",
    "merge_patch",
    "reason_name",
    "remove_conditions",
    "remove_finalizer",
    "remove_list_entry",
    "remove_owner",
    "set_conditions",
    "upsert_list_entry",
]
