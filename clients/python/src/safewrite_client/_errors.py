"""Exceptions raised by the safewrite client, decoded from gRPC statuses and their
details, and the classification of the failure reasons (the proto enum ``Reason``) into
retryable, retryable-with-an-idempotency-key and final ones."""

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

#: Reasons after which the same call may succeed later.
RETRYABLE_REASONS: FrozenSet[int] = frozenset(
    {
        writer_pb2.REASON_CEL_BUSY,
        writer_pb2.REASON_DEADLINE_EXCEEDED,
        writer_pb2.REASON_API_SERVER_UNREACHABLE,
        writer_pb2.REASON_RETRY_BUDGET_EXHAUSTED,
        writer_pb2.REASON_CIRCUIT_OPEN,
        writer_pb2.REASON_RATE_LIMITED,
        writer_pb2.REASON_TRANSACTION_IDLE,
        writer_pb2.REASON_OVERLOADED,
        writer_pb2.REASON_REQUEST_NOT_READ,
    }
)

#: Reasons after which the same call may be sent again only when it carried an
#: idempotency key: a write was sent and its answer lost (``WRITE_OUTCOME_UNKNOWN``) or
#: unreadable (``BAD_ANSWER``, e.g. a successful write's body that did not decode), so it
#: may have been applied. With the key, the sidecar's read finds it on the object and
#: applies the change at most once; without one, a second call could apply a
#: read-dependent change (an increment) twice, so read the object before deciding.
RETRYABLE_WITH_KEY_REASONS: FrozenSet[int] = frozenset(
    {writer_pb2.REASON_WRITE_OUTCOME_UNKNOWN, writer_pb2.REASON_BAD_ANSWER}
)

#: Reasons after which only a different request can succeed.
FINAL_REASONS: FrozenSet[int] = frozenset(
    {
        writer_pb2.REASON_INVALID_REQUEST,
        writer_pb2.REASON_UNKNOWN_KIND,
        writer_pb2.REASON_PRECONDITION_FAILED,
        writer_pb2.REASON_INVALID_CEL,
        writer_pb2.REASON_MUTATION_DOES_NOT_APPLY,
        writer_pb2.REASON_RESOURCE_VERSION_MISMATCH,
        writer_pb2.REASON_TRANSACTION_CANCELLED,
        writer_pb2.REASON_REQUEST_TOO_LARGE,
        writer_pb2.REASON_MALFORMED_REQUEST,
        writer_pb2.REASON_UNIMPLEMENTED,
        writer_pb2.REASON_POLICY_DENIED,
        writer_pb2.REASON_TOKEN_REQUIRED,
        writer_pb2.REASON_TOKEN_INVALID,
        writer_pb2.REASON_FIELD_MANAGER_CONFLICT,
    }
)

#: Reasons that leave the decision to the gRPC code: the API server's own answer
#: (a 503 is retryable, a 422 is not), or no safewrite details at all (e.g. the
#: sidecar itself was unreachable).
BY_CODE_REASONS: FrozenSet[int] = frozenset(
    {writer_pb2.REASON_API_SERVER, writer_pb2.REASON_UNSPECIFIED}
)

#: gRPC codes after which the same call may succeed later (for the reasons above).
RETRYABLE_CODES: FrozenSet[grpc.StatusCode] = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.ABORTED,  # conflicts outlasted the retry policy
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.INTERNAL,  # e.g. a failing admission webhook
        grpc.StatusCode.CANCELLED,
    }
)

#: gRPC codes after which the same call may be sent again only with an idempotency key
#: (for the reasons above): UNKNOWN, whose outcome may be a write applied.
RETRYABLE_WITH_KEY_CODES: FrozenSet[grpc.StatusCode] = frozenset({grpc.StatusCode.UNKNOWN})


def is_retryable(code: grpc.StatusCode, reason: int, *, idempotent: bool = False) -> bool:
    """Whether a failure with this gRPC code and Reason value may succeed, and is safe,
    when the same call is made again later. ``idempotent`` says whether the call carried
    an idempotency key: a write whose outcome is unknown (:data:`RETRYABLE_WITH_KEY_REASONS`,
    e.g. ``WRITE_OUTCOME_UNKNOWN``) is retryable only then. A reason newer than this
    client is decided by the code."""
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
            whose outcome is unknown may be sent again with the same key); set by the
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
        """True when the same call may succeed later (after :attr:`retry_delay`, if
        set), and sending it again is safe: the sidecar or the API server was
        unavailable, throttled or out of time, or conflicts outlasted the retry policy;
        or the outcome of a write is unknown (:class:`OutcomeUnknownError`) and the call
        carried an idempotency key, so a retry with the same key applies it at most
        once. A write of unknown outcome without a key is not retryable: it may have
        been applied, and a second call could apply a read-dependent change twice; read
        the object before deciding, or make such calls with an idempotency key.
        False too when only a different request can succeed: it is invalid, a
        precondition is false, the object or its kind does not exist, or permission is
        denied. Decided by :func:`is_retryable` with :attr:`idempotent`."""
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


class UnavailableError(SafewriteError):
    """UNAVAILABLE: the API server (or the sidecar) is unavailable, throttling, or
    behind an open circuit breaker; retry after :attr:`retry_delay`."""


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
    """DEADLINE_EXCEEDED: the call's timeout ran out. A write sent just before may or
    may not have been applied (see :attr:`attempt_records`); with an
    ``idempotency_key``, send the same change with the same key again to find out
    safely."""


class OutcomeUnknownError(SafewriteError):
    """UNKNOWN with reason ``WRITE_OUTCOME_UNKNOWN``: a write was sent but its answer
    was lost, so the change may or may not have been applied, and safewrite did not
    retry it because the call had no ``idempotency_key`` (a second try could apply a
    read-dependent change twice). :attr:`retryable` is then False: read the object to
    find out before deciding, or make such calls with an ``idempotency_key``: then
    safewrite retries these writes itself, and should a call with a key still end
    here, :attr:`retryable` is True and the same call with the same key is safe."""


class CancelledError(SafewriteError):
    """CANCELLED: the call was cancelled, or a transaction ended before its end."""


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
}


def error_class(
    code: grpc.StatusCode, reason: Optional[str] = None
) -> Type[SafewriteError]:
    """The exception class this client raises for a gRPC status code and, where it
    matters, the ErrorInfo reason (UNKNOWN with ``WRITE_OUTCOME_UNKNOWN`` is
    :class:`OutcomeUnknownError`; any other UNKNOWN is :class:`SafewriteError`)."""
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
    return from_status(code, message, details, idempotent=idempotent)


# gRPC's C core sends a unix socket's path as the HTTP/2 :authority, which the
# sidecar's HTTP/2 server refuses as malformed with RST_STREAM: say what to do.
_AUTHORITY_HINT = (
    " -- if this channel dials a unix socket, create it with the channel option "
    "(\"grpc.default_authority\", \"localhost\") (safewrite_client.channel_options(target) "
    "gives the options), or give the client the target instead of a channel"
)
