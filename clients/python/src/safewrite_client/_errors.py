"""Exceptions raised by the safewrite client, decoded from gRPC statuses and their
details, and whether a failed call may be sent again: the proto's retry advice for each
failure reason (the enum ``Reason``'s ``retry`` and ``retry_by_code`` options), read from
the generated descriptor."""

from __future__ import annotations

import json
from typing import Any, Dict, FrozenSet, Iterable, List, Mapping, Optional, Tuple, Type

import grpc
from google.rpc import error_details_pb2, status_pb2

from ._types import AttemptRecord, FieldViolation
from .v1 import writer_pb2

#: The ErrorInfo domain of every error safewrite returns.
DOMAIN = "safewrite.dev"

#: The proto enum ``safewrite.v1.Reason`` (generated): ``Reason.Name(value)``,
#: ``Reason.Value("REASON_CIRCUIT_OPEN")``, ``Reason.items()``. Its values are also
#: module constants of :mod:`safewrite_client.v1.writer_pb2` (``REASON_CIRCUIT_OPEN``).
Reason = writer_pb2.Reason

_PREFIX = "REASON_"
_DETAILS_KEY = "grpc-status-details-bin"


def reason_name(value: int) -> str:
    """A Reason value's name without its ``REASON_`` prefix, as ErrorInfo spells it
    (``"CIRCUIT_OPEN"``); a value unknown to this client is named by its number."""
    try:
        return str(Reason.Name(value))[len(_PREFIX):]
    except ValueError:
        return str(value)


def _reason_value(error_info_reason: Optional[str]) -> int:
    """The Reason value an ErrorInfo reason names, or REASON_API_SERVER for a Kubernetes
    reason (``"NotFound"``), or REASON_UNSPECIFIED."""
    if not error_info_reason:
        return writer_pb2.REASON_UNSPECIFIED
    try:
        return int(Reason.Value(_PREFIX + error_info_reason))
    except ValueError:
        return writer_pb2.REASON_API_SERVER


#: The ErrorInfo reason of a write whose outcome is unknown (with code UNKNOWN).
WRITE_OUTCOME_UNKNOWN = reason_name(writer_pb2.REASON_WRITE_OUTCOME_UNKNOWN)

def _option(options: Any, extension: Any) -> Any:
    # Any: the generated stubs declare extensions as plain FieldDescriptors, which the
    # protobuf stubs do not accept as an Extensions index.
    return options.Extensions[extension]


# The proto's retry advice (proto/safewrite/v1/writer.proto): each Reason value's
# `retry` option, and for the values that leave it to the gRPC code, the enum's
# `retry_by_code` option. Read once, here, from the generated descriptor: this client
# keeps no table of its own, and gives the advice the sidecar and the other clients give.
_ADVICE: Dict[int, int] = {
    value.number: int(_option(value.GetOptions(), writer_pb2.retry))
    for value in Reason.DESCRIPTOR.values
}
_BY_CODE_ADVICE: writer_pb2.RetryByCode = _option(
    Reason.DESCRIPTOR.GetOptions(), writer_pb2.retry_by_code
)
_CODES: Dict[int, grpc.StatusCode] = {code.value[0]: code for code in grpc.StatusCode}


def _reasons(retry: int) -> FrozenSet[int]:
    return frozenset(number for number, advice in _ADVICE.items() if advice == retry)


#: Reasons after which the same call may succeed later (the proto's ``RETRY_LATER``):
#: after :attr:`SafewriteError.retry_delay` when set, else with backoff. Derived from
#: the proto, like the other sets here.
RETRYABLE_REASONS: FrozenSet[int] = _reasons(writer_pb2.RETRY_LATER)

#: Reasons after which the same call may be sent again only when it carried an
#: idempotency key (``RETRY_WITH_IDEMPOTENCY_KEY``): a write was sent and its answer
#: lost (``WRITE_OUTCOME_UNKNOWN``) or unreadable (``BAD_ANSWER``), so it may have been
#: applied. With the key, the sidecar's read finds it on the object and applies the
#: change at most once; without one, a second call could apply a read-dependent change
#: (an increment) twice, so read the object before deciding.
RETRYABLE_WITH_KEY_REASONS: FrozenSet[int] = _reasons(writer_pb2.RETRY_WITH_IDEMPOTENCY_KEY)

#: Reasons after which only a different request can succeed (``RETRY_NEVER``).
FINAL_REASONS: FrozenSet[int] = _reasons(writer_pb2.RETRY_NEVER)

#: Reasons that leave the decision to the gRPC code (``RETRY_BY_CODE``): the API
#: server's own answer (``REASON_API_SERVER``), or no safewrite details at all
#: (``REASON_UNSPECIFIED``, e.g. the sidecar itself was unreachable). A value newer than
#: this client is decided by the code too.
BY_CODE_REASONS: FrozenSet[int] = frozenset(_ADVICE) - (
    RETRYABLE_REASONS | RETRYABLE_WITH_KEY_REASONS | FINAL_REASONS
)

#: gRPC codes after which the same call may succeed later, for the reasons above (the
#: ``later`` list of the proto's ``retry_by_code``): UNAVAILABLE, RESOURCE_EXHAUSTED,
#: ABORTED (conflicts outlasted the retry policy), INTERNAL (e.g. a failing admission
#: webhook).
RETRYABLE_CODES: FrozenSet[grpc.StatusCode] = frozenset(
    _CODES[code] for code in _BY_CODE_ADVICE.later
)

#: gRPC codes after which the same call may be sent again only with an idempotency key,
#: for the reasons above (``retry_by_code.with_idempotency_key``): CANCELLED, UNKNOWN
#: and DEADLINE_EXCEEDED, the call ended while a write may have been in flight. Any
#: code in neither set: only a different request can succeed.
RETRYABLE_WITH_KEY_CODES: FrozenSet[grpc.StatusCode] = frozenset(
    _CODES[code] for code in _BY_CODE_ADVICE.with_idempotency_key
)


def is_retryable(code: grpc.StatusCode, reason: int, *, idempotent: bool = False) -> bool:
    """Whether a failure with this gRPC code and Reason value may succeed, and is safe,
    when the same call is made again, as the proto's retry options say (the sets
    above): yes for :data:`RETRYABLE_REASONS`; for :data:`RETRYABLE_WITH_KEY_REASONS`
    only when ``idempotent`` (the call carried an idempotency key); no for
    :data:`FINAL_REASONS`; and for :data:`BY_CODE_REASONS` and a reason newer than this
    client, by the code: yes for :data:`RETRYABLE_CODES`, for
    :data:`RETRYABLE_WITH_KEY_CODES` only when ``idempotent``, else no."""
    if reason in RETRYABLE_REASONS:
        return True
    if reason in RETRYABLE_WITH_KEY_REASONS:
        return idempotent
    if reason in FINAL_REASONS:
        return False
    if code in RETRYABLE_WITH_KEY_CODES:
        return idempotent
    return code in RETRYABLE_CODES


class SafewriteError(Exception):
    """A safewrite call failed; the base class of every error this client raises.

    Attributes:
        code: The gRPC status code.
        message: safewrite's message: what happened and what to do.
        reason: The ``google.rpc.ErrorInfo`` reason: the Kubernetes Status reason
            (e.g. ``"Conflict"``, ``"Invalid"``, ``"Forbidden"``) or a safewrite one
            (e.g. ``"PRECONDITION_FAILED"``, ``"RESOURCE_VERSION_MISMATCH"``);
            ``None`` when the status carried no ErrorInfo (e.g. the sidecar was
            unreachable).
        domain: The ErrorInfo domain (``"safewrite.dev"``), or ``None``.
        error_metadata: The ErrorInfo metadata (e.g. ``attempts``, ``http_status``).
        field_violations: The fields at fault (``google.rpc.BadRequest``).
        retry_delay: Seconds to wait before retrying (``google.rpc.RetryInfo``), or
            ``None`` when a retry is not advised.
        current_object: For precondition failures, the object the check failed on
            (from ``safewrite.v1.WriteFailure``), so the caller can decide without
            another read: as read, or, when the call was committed together with
            others, as it stood at this call's turn (after the changes of the calls
            before it); ``None`` otherwise.
        attempt_records: The attempts made before the failure.
        write_failure_reason: Why the write failed, as a value of the proto enum
            :data:`~safewrite_client.Reason` (``WriteFailure.reason``), e.g.
            ``Reason.Value("REASON_CIRCUIT_OPEN")``; ``REASON_API_SERVER`` when the API
            server's answer decided it (then :attr:`reason` is its Status reason);
            ``REASON_UNSPECIFIED`` when the status carried no safewrite details.
        trace_id: The W3C trace id of the sidecar's span for the call, as
            :attr:`Result.trace_id <safewrite_client.Result.trace_id>`; empty when the
            sidecar runs without OpenTelemetry or sent no ``WriteFailure`` detail
            (e.g. it was unreachable).
        idempotent: Whether the failed call carried an idempotency key (then a write
            whose outcome is unknown may be sent again with the same key), or was a
            :meth:`~safewrite_client.Client.get`, which writes nothing; set by the
            client, False for an error decoded without knowing the call.
    """

    def __init__(
        self,
        code: grpc.StatusCode,
        message: str,
        *,
        reason: Optional[str] = None,
        domain: Optional[str] = None,
        error_metadata: Optional[Mapping[str, str]] = None,
        field_violations: Iterable[FieldViolation] = (),
        retry_delay: Optional[float] = None,
        current_object: Optional[Dict[str, Any]] = None,
        attempt_records: Iterable[AttemptRecord] = (),
        trace_id: str = "",
        write_failure_reason: int = 0,
        idempotent: bool = False,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason
        self.domain = domain
        self.error_metadata: Dict[str, str] = dict(error_metadata or {})
        self.field_violations: List[FieldViolation] = list(field_violations)
        self.retry_delay = retry_delay
        self.current_object = current_object
        self.attempt_records: Tuple[AttemptRecord, ...] = tuple(attempt_records)
        self.trace_id = trace_id
        self.write_failure_reason = write_failure_reason
        self.idempotent = idempotent

    @property
    def reason_name(self) -> str:
        """The name of :attr:`write_failure_reason` without its ``REASON_`` prefix (e.g.
        ``"CIRCUIT_OPEN"``, ``"API_SERVER"``), or ``"UNSPECIFIED"``; a value newer than
        this client is named by its number."""
        return reason_name(self.write_failure_reason)

    @property
    def retryable(self) -> bool:
        """True when the same call may succeed if sent again (after :attr:`retry_delay`,
        if set), and sending it again is safe, as the proto's retry advice for
        :attr:`write_failure_reason` says: the sidecar or the API server was unavailable
        or throttled, the sidecar's deadline passed with no write in doubt, or conflicts
        outlasted the retry policy. A write that may have been applied (its answer was
        lost, :class:`OutcomeUnknownError`, or unreadable; or the call was cut off by
        its timeout or cancelled before any answer came) is retryable only when the
        call carried an idempotency key, since a retry with the same key applies it at
        most once; without one a second call could apply a read-dependent change twice:
        read the object before deciding, or make such calls with an idempotency key.
        False when only a different request can succeed: it is invalid, a precondition
        is false, the object or its kind does not exist, or permission is denied.
        Decided by :func:`is_retryable` with :attr:`idempotent`."""
        return is_retryable(self.code, self.write_failure_reason, idempotent=self.idempotent)

    @property
    def attempts(self) -> int:
        """The number of attempts made before the failure (0 when none reached the API server)."""
        return len(self.attempt_records)

    def __str__(self) -> str:
        name = getattr(self.code, "name", str(self.code))
        head = "%s (%s)" % (name, self.reason) if self.reason else name
        return "%s: %s" % (head, self.message)

    def __repr__(self) -> str:
        return "%s(code=%s, reason=%r, message=%r)" % (
            type(self).__name__,
            getattr(self.code, "name", self.code),
            self.reason,
            self.message,
        )


class ConflictError(SafewriteError):
    """ABORTED: conflicts outlasted the retry policy, a strict resourceVersion
    precondition did not match (reason ``RESOURCE_VERSION_MISMATCH``), or server-side
    apply met another field manager's fields (reason ``FieldManagerConflict``)."""


class InvalidError(SafewriteError):
    """INVALID_ARGUMENT: a malformed request, or an object the API server refused as
    invalid (422); :attr:`field_violations` names the fields. Not worth retrying."""


class PreconditionFailedError(SafewriteError):
    """FAILED_PRECONDITION: a precondition was false (or a JSON Patch ``test`` failed,
    or the mutation does not apply); nothing was written, and :attr:`current_object`
    holds the object as it is now."""


class ObjectDeletingError(PreconditionFailedError):
    """FAILED_PRECONDITION with reason ``OBJECT_DELETING``: a finalizer cannot be added,
    the object is being deleted (it has a ``deletionTimestamp``). Nothing was written;
    not worth retrying. A controller then runs its cleanup instead."""


class AlreadyOwnedError(PreconditionFailedError):
    """FAILED_PRECONDITION with reason ``ALREADY_OWNED``: another owner is already the
    object's controller, so a ``controller`` reference cannot be ensured. The message
    names that controller, and so does :attr:`controller`. Nothing was written; not
    worth retrying."""

    @property
    def controller(self) -> Optional[Dict[str, Any]]:
        """The owner reference that is the object's controller, from
        :attr:`current_object`; None when the error carried no object."""
        meta = (self.current_object or {}).get("metadata")
        references = meta.get("ownerReferences") if isinstance(meta, dict) else None
        for reference in references if isinstance(references, list) else ():
            if isinstance(reference, dict) and reference.get("controller") is True:
                return reference
        return None


class FencedError(PreconditionFailedError):
    """FAILED_PRECONDITION with reason ``FENCED``: a write with a fence met an object
    that records a later epoch of the fence's Lease, so a later leader has written it;
    the message names both epochs. Nothing was written; never retried: this caller no
    longer leads."""


class NotLeaderError(PreconditionFailedError):
    """FAILED_PRECONDITION with reason ``NOT_LEADER``: a write with a fence, and the
    sidecar does not lead under the fence's Lease and epoch (it never did, lost the
    renewal, or the caller's ``Lead`` stream ended). Nothing was written; never
    retried."""


class UnknownFieldError(PreconditionFailedError):
    """FAILED_PRECONDITION with reason ``UNKNOWN_FIELD``: the call needs an RPC, a field
    or an enum value the sidecar does not have (this client is newer than its sidecar).
    Refused by this client before sending when the sidecar's ``Capabilities`` says it
    lacks it, else by a sidecar of 0.2.0 or newer; either way nothing was sent and the
    message names what is missing and the sidecar's version. Never retried: upgrade the
    sidecar, or leave the feature unused (docs/compatibility.md)."""

    @property
    def feature(self) -> Optional[str]:
        """The full name of what the sidecar lacks (``safewrite.v1.WriteOptions.fence``,
        ``safewrite.v1.WriterService/Delete``) when this client refused the call; None
        for the sidecar's own refusal, whose :attr:`error_metadata` names the field's
        message and number instead."""
        return self.error_metadata.get("feature")

    @property
    def since(self) -> Optional[str]:
        """The first version that has :attr:`feature`; None for the sidecar's refusal."""
        return self.error_metadata.get("since")

    @property
    def sidecar_version(self) -> Optional[str]:
        """The sidecar's version: empty for one older than 0.2.0 (it has no rpc
        Capabilities), None when the error does not say."""
        return self.error_metadata.get("sidecar_version")


class UnavailableError(SafewriteError):
    """UNAVAILABLE: the API server (or the sidecar) is unavailable, throttling, or
    behind an open circuit breaker, or a get's minimum resourceVersion is one the API
    server has not reached yet (reason ``RESOURCE_VERSION_TOO_LARGE``); retry after
    :attr:`retry_delay`."""


class ResourceExhaustedError(SafewriteError):
    """RESOURCE_EXHAUSTED: the sidecar is shedding load or its rate limit would outlast
    the deadline; retry after :attr:`retry_delay`."""


class PermissionDeniedError(SafewriteError):
    """PERMISSION_DENIED: the sidecar's identity may not do this (403); grant it the
    verb with RBAC."""


class UnauthenticatedError(SafewriteError):
    """UNAUTHENTICATED: the sidecar requires a token and the call carried none (reason
    ``TOKEN_REQUIRED``) or another one (reason ``TOKEN_INVALID``); pass the client its
    ``token``. Or the API server did not accept the sidecar's credentials (401)."""


class NotFoundError(SafewriteError):
    """NOT_FOUND: the object does not exist (pass ``create_if_missing`` to create it), or
    its kind is unknown to the API server (reason ``UNKNOWN_KIND``)."""


class DeadlineExceededError(SafewriteError):
    """DEADLINE_EXCEEDED: the call's timeout ran out. When the sidecar says so itself
    (reason ``DEADLINE_EXCEEDED``) no write is in doubt, and :attr:`retryable` is True.
    When the timeout cut the call off here, before any answer (no reason), a write sent
    just before may or may not have been applied: it is retryable only with an
    ``idempotency_key``; send the same change with the same key again to find out
    safely. (A deadline that cut off a write's answer in the sidecar, for a call without
    a key, is :class:`OutcomeUnknownError`.)"""


class OutcomeUnknownError(SafewriteError):
    """UNKNOWN with reason ``WRITE_OUTCOME_UNKNOWN``: a write was sent but its answer
    was lost (or the call's deadline cut it off), so the change may or may not have
    been applied, and safewrite did not
    retry it because the call had no ``idempotency_key`` (a second try could apply a
    read-dependent change twice). :attr:`retryable` is then False: read the object to
    find out before deciding, or make such calls with an ``idempotency_key``: then
    safewrite retries these writes itself, and should a call with a key still end
    here, :attr:`retryable` is True and the same call with the same key is safe."""


class CancelledError(SafewriteError):
    """CANCELLED: the call was cancelled (retryable only with an ``idempotency_key``, a
    write may have been in flight), or a transaction ended before its end (reason
    ``TRANSACTION_CANCELLED``, not retryable)."""


class InternalError(SafewriteError):
    """INTERNAL: the API server failed internally (e.g. an admission webhook) or
    answered in a way safewrite did not expect."""


class UnimplementedError(SafewriteError):
    """UNIMPLEMENTED: the sidecar does not implement this RPC (an older sidecar)."""


_BY_CODE: Dict[grpc.StatusCode, Type[SafewriteError]] = {
    grpc.StatusCode.ABORTED: ConflictError,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidError,
    grpc.StatusCode.FAILED_PRECONDITION: PreconditionFailedError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
    grpc.StatusCode.CANCELLED: CancelledError,
    grpc.StatusCode.INTERNAL: InternalError,
    grpc.StatusCode.UNIMPLEMENTED: UnimplementedError,
}


_BY_CODE_AND_REASON: Dict[Tuple[grpc.StatusCode, str], Type[SafewriteError]] = {
    (grpc.StatusCode.UNKNOWN, WRITE_OUTCOME_UNKNOWN): OutcomeUnknownError,
    (
        grpc.StatusCode.FAILED_PRECONDITION,
        reason_name(writer_pb2.REASON_OBJECT_DELETING),
    ): ObjectDeletingError,
    (
        grpc.StatusCode.FAILED_PRECONDITION,
        reason_name(writer_pb2.REASON_ALREADY_OWNED),
    ): AlreadyOwnedError,
    (grpc.StatusCode.FAILED_PRECONDITION, reason_name(writer_pb2.REASON_FENCED)): FencedError,
    (grpc.StatusCode.FAILED_PRECONDITION, reason_name(writer_pb2.REASON_NOT_LEADER)): NotLeaderError,
    (
        grpc.StatusCode.FAILED_PRECONDITION,
        reason_name(writer_pb2.REASON_UNKNOWN_FIELD),
    ): UnknownFieldError,
}


def error_class(
    code: grpc.StatusCode, reason: Optional[str] = None
) -> Type[SafewriteError]:
    """The exception class this client raises for a gRPC status code and, where it
    matters, the ErrorInfo reason (UNKNOWN with ``WRITE_OUTCOME_UNKNOWN`` is
    :class:`OutcomeUnknownError`, any other UNKNOWN :class:`SafewriteError`;
    FAILED_PRECONDITION with ``OBJECT_DELETING``, ``ALREADY_OWNED``, ``FENCED``,
    ``NOT_LEADER`` or ``UNKNOWN_FIELD`` is :class:`ObjectDeletingError`,
    :class:`AlreadyOwnedError`, :class:`FencedError`, :class:`NotLeaderError` or
    :class:`UnknownFieldError`, each a :class:`PreconditionFailedError`)."""
    if reason is not None:
        cls = _BY_CODE_AND_REASON.get((code, reason))
        if cls is not None:
            return cls
    return _BY_CODE.get(code, SafewriteError)


def _seconds(duration: Any) -> float:
    return float(duration.seconds) + float(duration.nanos) / 1e9


def attempt_record(record: writer_pb2.AttemptRecord) -> AttemptRecord:
    """Converts a ``safewrite.v1.AttemptRecord`` message."""
    return AttemptRecord(
        number=record.number,
        resource_version_read=record.resource_version_read,
        http_status=record.http_status,
        reason=record.reason,
        backoff=_seconds(record.backoff),
        batch_size=record.batch_size,
    )


def _status_details(metadata: Any) -> Optional[bytes]:
    if not metadata:
        return None
    for item in metadata:
        key, value = item[0], item[1]
        if key == _DETAILS_KEY:
            return value if isinstance(value, bytes) else str(value).encode("latin-1")
    return None


def from_status(
    code: grpc.StatusCode,
    message: str,
    details: Optional[bytes],
    *,
    idempotent: bool = False,
) -> SafewriteError:
    """Builds the exception for a status code, message and the serialized
    ``google.rpc.Status`` of its ``grpc-status-details-bin`` trailer (if any);
    ``idempotent`` says whether the call carried an idempotency key."""
    kwargs: Dict[str, Any] = {"idempotent": idempotent}
    if details:
        status = status_pb2.Status()
        try:
            status.ParseFromString(details)
        except Exception:  # a malformed trailer: keep the code and message
            status = status_pb2.Status()
        if status.message and not message:
            message = status.message
        violations: List[FieldViolation] = []
        for detail in status.details:
            if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                kwargs["reason"] = info.reason
                kwargs["domain"] = info.domain
                kwargs["error_metadata"] = dict(info.metadata)
            elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
                bad = error_details_pb2.BadRequest()
                detail.Unpack(bad)
                violations.extend(
                    FieldViolation(field=v.field, description=v.description)
                    for v in bad.field_violations
                )
            elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
                retry = error_details_pb2.RetryInfo()
                detail.Unpack(retry)
                kwargs["retry_delay"] = _seconds(retry.retry_delay)
            elif detail.Is(writer_pb2.WriteFailure.DESCRIPTOR):
                failure = writer_pb2.WriteFailure()
                detail.Unpack(failure)
                kwargs["attempt_records"] = [
                    attempt_record(r) for r in failure.attempt_records
                ]
                kwargs["trace_id"] = failure.trace_id
                kwargs["write_failure_reason"] = int(failure.reason)
                if failure.current_object_json:
                    try:
                        kwargs["current_object"] = json.loads(
                            failure.current_object_json
                        )
                    except ValueError:
                        pass
        kwargs["field_violations"] = violations
        if not kwargs.get("write_failure_reason") and kwargs.get("domain") == DOMAIN:
            # A sidecar older than WriteFailure.reason: the ErrorInfo reason names it.
            kwargs["write_failure_reason"] = _reason_value(kwargs.get("reason"))
    message = message.replace(_PROTO_CREATE_OPTION, "create_if_missing=")
    return error_class(code, kwargs.get("reason"))(code, message, **kwargs)


# The sidecar's advice names the proto's field; the caller sets this client's option.
_PROTO_CREATE_OPTION = "options.create_if_missing_json"


def from_rpc_error(err: Any, *, idempotent: bool = False) -> SafewriteError:
    """Converts a ``grpc.RpcError`` (sync) or ``grpc.aio.AioRpcError`` into the matching
    :class:`SafewriteError` subclass, decoding the rich error details. ``idempotent``
    says whether the call carried an idempotency key (see
    :attr:`SafewriteError.retryable`); the clients pass it, and an error converted
    without it counts as a call without a key."""
    code, message, details = status_of(err)
    return from_status(code, message, details, idempotent=idempotent)


def status_of(err: Any) -> Tuple[grpc.StatusCode, str, Optional[bytes]]:
    """The status of a failed call, as :func:`from_rpc_error` reads it: its code
    (UNKNOWN when it has none), message and the serialized ``google.rpc.Status`` of its
    ``grpc-status-details-bin`` trailer (None when it has none)."""
    try:
        code = err.code() or grpc.StatusCode.UNKNOWN
    except Exception:
        code = grpc.StatusCode.UNKNOWN
    try:
        message = err.details() or ""
    except Exception:
        message = str(err)
    try:
        trailing = err.trailing_metadata()
    except Exception:
        trailing = None
    details = _status_details(trailing)
    if details is None and "RST_STREAM" in message:
        message += _AUTHORITY_HINT
    return code, message, details


# gRPC's C core sends a unix socket's path as the HTTP/2 :authority, which the
# sidecar's HTTP/2 server refuses as malformed with RST_STREAM: say what to do.
_AUTHORITY_HINT = (
    " -- if this channel dials a unix socket, create it with the channel option "
    "(\"grpc.default_authority\", \"localhost\") (safewrite_client.channel_options(target) "
    "gives the options), or give the client the target instead of a channel"
)
