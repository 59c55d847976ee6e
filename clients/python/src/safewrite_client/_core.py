"""The one implementation behind :class:`~safewrite_client.Client` and
:class:`~safewrite_client.AsyncClient`, without any I/O: where the sidecar is, how a
call's keyword arguments become a request (and which are refused locally), how an
answer becomes a :class:`~safewrite_client.Result`, and the client's side of the
``Transact`` protocol as a state machine. The two clients only move messages."""

from __future__ import annotations

import datetime
import inspect
import json
import os
from dataclasses import dataclass
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    Generic,
    List,
    Mapping,
    NoReturn,
    Optional,
    Sequence,
    Tuple,
    TypeVar,
    Union,
    cast,
    get_type_hints,
)

import grpc
from google.protobuf import duration_pb2

from ._errors import SafewriteError, attempt_record, from_rpc_error
from ._lead import effective_fence, fence_message
from ._mutation import JsonObject, Mutation, dumps, mutation_message
from ._tracing import Injector, Metadata, load_injector, trace_metadata
from ._types import (
    Abort,
    DeleteOutcome,
    DeleteResult,
    Fence,
    ObjectRef,
    Outcome,
    Preconditions,
    PropagationPolicy,
    ReadResult,
    Result,
    RetryPolicy,
)
from .v1 import writer_pb2

if TYPE_CHECKING:
    # Only for type checkers (typing has them from Python 3.10; mypy ships
    # typing_extensions' stubs): nothing imports them at run time.
    from typing_extensions import Concatenate, ParamSpec

    P = ParamSpec("P")

# --- where the sidecar is ----------------------------------------------------------

#: Where the sidecar listens unless told otherwise.
DEFAULT_TARGET = "127.0.0.1:50051"

#: The environment variable naming the sidecar's address when a client is given none:
#: ``host:port``, ``http://host:port``, ``unix:///path/to/socket`` or ``/path/to/socket``
#: (``safewrite health`` reads it too).
ADDRESS_ENV = "SAFEWRITE_ADDRESS"


def default_target() -> str:
    """The gRPC target of the sidecar named by ``SAFEWRITE_ADDRESS``, else
    :data:`DEFAULT_TARGET`."""
    value = os.environ.get(ADDRESS_ENV, "").strip()
    if not value:
        return DEFAULT_TARGET
    if value.startswith("http://"):
        return value[len("http://") :].rstrip("/")
    if value.startswith("/"):
        return "unix://" + value
    return value


def channel_options(
    target: str, options: Optional[Sequence[Tuple[str, Any]]] = None
) -> List[Tuple[str, Any]]:
    """The gRPC channel options to dial the sidecar at ``target``: ``options``, plus
    ``("grpc.default_authority", "localhost")`` for a unix socket target unless
    ``options`` set one. (gRPC's C core would send the socket path as the HTTP/2
    ``:authority``, which the sidecar's HTTP/2 server refuses with RST_STREAM.) Use it
    when you make the channel yourself::

        channel = grpc.insecure_channel(target, options=safewrite_client.channel_options(target))
    """
    merged = list(options or ())
    if target.startswith("unix:") and not any(k == "grpc.default_authority" for k, _ in merged):
        merged.append(("grpc.default_authority", "localhost"))
    return merged


# The whitespace the sidecar strips from its token file (ASCII whitespace, as Rust's
# trim_ascii knows it).
_TOKEN_WHITESPACE = " \t\n\f\r"


def authorization(token: str) -> Metadata:
    """The gRPC metadata that carries the sidecar's shared token:
    ``authorization: Bearer <token>``, the token without surrounding whitespace (the
    sidecar compares its token file's content without it).

    Raises:
        TypeError: ``token`` is not a str.
        ValueError: ``token`` is empty or only whitespace, or holds a character gRPC
            metadata cannot carry (anything but printable ASCII and spaces).
    """
    if not isinstance(token, str):
        raise TypeError("token must be a str, not %s" % type(token).__name__)
    value = token.strip(_TOKEN_WHITESPACE)
    if not value:
        raise ValueError("token must not be empty or only whitespace (pass None for no token)")
    start = len(token) - len(token.lstrip(_TOKEN_WHITESPACE))
    for index, char in enumerate(value, start):
        if not " " <= char <= "~":
            # The token is a secret: name the character, never the token.
            raise ValueError(
                "token holds %r at index %d: gRPC metadata carries only printable ASCII "
                "and spaces" % (char, index)
            )
    return (("authorization", "Bearer " + value),)


class Settings:
    """What both clients are configured with (see :class:`~safewrite_client.Client`).

    Raises:
        TypeError, ValueError: an unusable ``token`` (see :func:`authorization`).
    """

    def __init__(
        self,
        target: Optional[str],
        credentials: Optional[grpc.ChannelCredentials],
        options: Optional[Sequence[Tuple[str, Any]]],
        timeout: Optional[float],
        wait_for_ready: bool,
        propagate_trace: bool,
        token: Optional[str],
    ) -> None:
        self.target = default_target() if target is None else target
        self.credentials = credentials
        self.options = channel_options(self.target, options)
        self.timeout = timeout
        self.wait_for_ready = wait_for_ready
        self.injector: Optional[Injector] = load_injector() if propagate_trace else None
        self.authorization: Metadata = () if token is None else authorization(token)

    def call_kwargs(self, timeout: Optional[float]) -> Dict[str, Any]:
        """The keyword arguments of a stub call with this timeout (None: the client's
        default), its metadata the token's and the trace context's. Read when the call
        starts, in the caller's thread or task, so the propagated OpenTelemetry context
        is the caller's current one."""
        metadata = self.authorization + (trace_metadata(self.injector) or ())
        return {
            "timeout": self.timeout if timeout is None else timeout,
            "wait_for_ready": self.wait_for_ready,
            "metadata": metadata or None,
        }


# --- Python values -> messages -----------------------------------------------------


def loads_object(text: str) -> Dict[str, Any]:
    """Decodes an object's JSON; empty text is an empty object."""
    if not text:
        return {}
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError("safewrite answered with a JSON %s, not an object" % type(value).__name__)
    return value


def target(ref: ObjectRef) -> writer_pb2.ObjectRef:
    """The ``safewrite.v1.ObjectRef`` for an :class:`ObjectRef`."""
    if not isinstance(ref, ObjectRef):
        raise TypeError("ref must be a safewrite_client.ObjectRef, not %s" % type(ref).__name__)
    return writer_pb2.ObjectRef(
        api_version=ref.api_version, kind=ref.kind, namespace=ref.namespace or "", name=ref.name
    )


def _preconditions(value: Optional[Preconditions]) -> Optional[writer_pb2.Preconditions]:
    if value is None:
        return None
    if not isinstance(value, Preconditions):
        raise TypeError(
            "preconditions must be a safewrite_client.Preconditions, not %s" % type(value).__name__
        )
    return writer_pb2.Preconditions(
        uid=value.uid or "", resource_version=value.resource_version or "", cel=value.cel or ""
    )


def _duration(seconds: float) -> duration_pb2.Duration:
    if seconds < 0:
        raise ValueError("a backoff cannot be negative (got %r)" % seconds)
    whole = int(seconds)
    return duration_pb2.Duration(seconds=whole, nanos=int(round((seconds - whole) * 1e9)))


def _retry_policy(value: Optional[RetryPolicy]) -> Optional[writer_pb2.RetryPolicy]:
    if value is None:
        return None
    if not isinstance(value, RetryPolicy):
        raise TypeError(
            "retry_policy must be a safewrite_client.RetryPolicy, not %s" % type(value).__name__
        )
    policy = writer_pb2.RetryPolicy(max_attempts=value.max_attempts, requeue=value.requeue)
    if value.initial_backoff is not None:
        policy.initial_backoff.CopyFrom(_duration(value.initial_backoff))
    if value.max_backoff is not None:
        policy.max_backoff.CopyFrom(_duration(value.max_backoff))
    return policy


@dataclass(frozen=True)
class WriteSettings:
    """What a write says besides its change, the same for every kind of write (see
    :meth:`~safewrite_client.Client.update` for each field); ``create_if_missing`` and
    ``idempotency_key`` stay unset for a status write, whose signature lacks them."""

    preconditions: Optional[Preconditions] = None
    retry_policy: Optional[RetryPolicy] = None
    field_manager: Optional[str] = None
    dry_run: bool = False
    write_alone: bool = False
    create_if_missing: Optional[JsonObject] = None
    idempotency_key: Optional[str] = None
    fence: Optional[Fence] = None

    def options(self) -> writer_pb2.WriteOptions:
        """The ``WriteOptions``. The idempotency key is sent as it is: the sidecar
        checks its shape and refuses it where it does not apply. Only an empty key is
        refused here, because on the wire it would mean "no key" and silently drop the
        exactly-once guarantee.

        Raises:
            TypeError: an idempotency key that is not a str, a fence that is not a
                :class:`~safewrite_client.Fence`.
            ValueError: an empty idempotency key.
        """
        key = self.idempotency_key
        if key is not None:
            if not isinstance(key, str):
                raise TypeError("idempotency_key must be a str, not %s" % type(key).__name__)
            if not key:
                raise ValueError(
                    "idempotency_key must not be empty (pass None for no key, or e.g. "
                    "str(uuid.uuid4()))"
                )
        create = self.create_if_missing
        options = writer_pb2.WriteOptions(
            field_manager=self.field_manager or "",
            dry_run=bool(self.dry_run),
            create_if_missing_json=dumps(create) if create is not None else "",
            idempotency_key=key or "",
            write_alone=bool(self.write_alone),
        )
        fence = effective_fence(self.fence)
        if fence is not None:
            options.fence.CopyFrom(fence_message(fence))
        return options


T = TypeVar("T", bound=Union[Result, ReadResult, DeleteResult])


@dataclass(frozen=True)
class Unary(Generic[T]):
    """A unary call ready to send: the method's name on the stub, its request, the
    call's timeout (None: the client's default), and how its response becomes what
    the caller gets."""

    method: str
    request: Any
    timeout: Optional[float]
    answer: Callable[[Any], T]

    @property
    def idempotent(self) -> bool:
        """Whether the same call may be sent again without applying a change twice
        (decides whether a failure that may have left a write in flight is retryable):
        a write that carries an idempotency key, a get, which writes nothing, or a
        delete, which deletes the object it decided on and answers GONE when it is not
        there any more (so the same delete is always safe to send again)."""
        if isinstance(self.request, (writer_pb2.GetRequest, writer_pb2.DeleteRequest)):
            return True
        return bool(self.request.options.idempotency_key)

    def error(self, err: grpc.RpcError) -> SafewriteError:
        """The exception for this call's failure ``err``."""
        return from_rpc_error(err, idempotent=self.idempotent)


#: The two unary writes, by subresource: the request message and the method. Their
#: messages have the same fields, so one function builds both.
_WRITES = {
    False: (writer_pb2.UpdateWithRetryRequest, "UpdateWithRetry"),
    True: (writer_pb2.PatchStatusRequest, "PatchStatus"),
}


def write_call(
    ref: ObjectRef,
    change: writer_pb2.Mutation,
    settings: WriteSettings,
    *,
    status: bool,
    timeout: Optional[float],
) -> Unary[Result]:
    """The unary write of ``change`` to ``ref``: ``UpdateWithRetry`` of the main
    resource, or with ``status`` ``PatchStatus`` of the status subresource.

    Raises:
        TypeError: a value of the wrong type.
        ValueError: an empty idempotency key.
    """
    message, method = _WRITES[bool(status)]
    request = message(
        target=target(ref),
        mutation=change,
        preconditions=_preconditions(settings.preconditions),
        retry_policy=_retry_policy(settings.retry_policy),
        options=settings.options(),
    )
    return Unary(method, request, timeout, unary_result)


# --- the calls' parameters, declared once for both clients --------------------------
#
# update, patch_status, transact, get and delete below (and lead, in _lead) are the one
# definition of what the methods of the same name take, on Client and AsyncClient alike:
# each method is declared ``@parameters_of(core.update)`` (etc.) with ``*args,
# **kwargs`` and hands them here, so Python checks a call against this signature, and
# type checkers, help() and typing.get_type_hints see it as the method's own.

Method = TypeVar("Method")
Returned = TypeVar("Returned")


def parameters_of(
    call: "Callable[P, Any]",
) -> "Callable[[Callable[..., Returned]], Callable[Concatenate[Method, P], Returned]]":
    """Makes the decorated method take ``call``'s parameters (after ``self``) and return
    what it returns: for type checkers through a ParamSpec, for :mod:`inspect`,
    :func:`help` and IDEs through its ``__signature__``, and for
    :func:`typing.get_type_hints` through its ``__annotations__`` (``call``'s, resolved
    where ``call`` is defined, and the method's own return). The method takes ``*args,
    **kwargs`` and passes them on to ``call``, which Python checks as any call
    (``update() got an unexpected keyword argument 'x'``)."""

    def decorate(method: Callable[..., Returned]) -> Callable[..., Returned]:
        own = inspect.signature(method)
        self_parameter = next(iter(own.parameters.values()))
        parameters = [self_parameter, *inspect.signature(call).parameters.values()]
        setattr(method, "__signature__", own.replace(parameters=parameters))
        hints = get_type_hints(call)
        annotations = {name: hint for name, hint in hints.items() if name != "return"}
        if "return" in method.__annotations__:
            annotations["return"] = method.__annotations__["return"]
        method.__annotations__ = annotations
        return method

    return decorate


def update(
    ref: ObjectRef,
    mutation: Mutation,
    *,
    preconditions: Optional[Preconditions] = None,
    retry_policy: Optional[RetryPolicy] = None,
    field_manager: Optional[str] = None,
    dry_run: bool = False,
    write_alone: bool = False,
    create_if_missing: Optional[JsonObject] = None,
    idempotency_key: Optional[str] = None,
    fence: Optional[Fence] = None,
    timeout: Optional[float] = None,
) -> Unary[Result]:
    """The ``UpdateWithRetry`` call of :meth:`~safewrite_client.Client.update` (see
    there for each parameter).

    Raises:
        TypeError: a value of the wrong type (e.g. a mutation not made by
            :func:`~safewrite_client.cel`, ...).
        ValueError: an empty idempotency key.
    """
    settings = WriteSettings(
        preconditions=preconditions, retry_policy=retry_policy, field_manager=field_manager,
        dry_run=dry_run, write_alone=write_alone, create_if_missing=create_if_missing,
        idempotency_key=idempotency_key, fence=fence,
    )
    return write_call(ref, mutation_message(mutation), settings, status=False, timeout=timeout)


def patch_status(
    ref: ObjectRef,
    mutation: Mutation,
    *,
    preconditions: Optional[Preconditions] = None,
    retry_policy: Optional[RetryPolicy] = None,
    field_manager: Optional[str] = None,
    dry_run: bool = False,
    write_alone: bool = False,
    fence: Optional[Fence] = None,
    timeout: Optional[float] = None,
) -> Unary[Result]:
    """The ``PatchStatus`` call of :meth:`~safewrite_client.Client.patch_status`:
    :func:`update`'s parameters but ``create_if_missing`` (a status cannot be created)
    and ``idempotency_key`` (a status write cannot record it). Raises as :func:`update`."""
    settings = WriteSettings(
        preconditions=preconditions, retry_policy=retry_policy, field_manager=field_manager,
        dry_run=dry_run, write_alone=write_alone, fence=fence,
    )
    return write_call(ref, mutation_message(mutation), settings, status=True, timeout=timeout)


@dataclass(frozen=True)
class TransactCall:
    """A ``Transact`` stream ready to open: its first message, the caller's function,
    and the call's timeout (None: the client's default)."""

    begin: writer_pb2.TransactBegin
    fn: "TransactFn"
    timeout: Optional[float]


def transact(
    ref: ObjectRef,
    fn: "TransactFn",
    *,
    status: bool = False,
    preconditions: Optional[Preconditions] = None,
    retry_policy: Optional[RetryPolicy] = None,
    field_manager: Optional[str] = None,
    dry_run: bool = False,
    create_if_missing: Optional[JsonObject] = None,
    idempotency_key: Optional[str] = None,
    fence: Optional[Fence] = None,
    timeout: Optional[float] = None,
) -> TransactCall:
    """The ``Transact`` call of :meth:`~safewrite_client.Client.transact`: the write
    options of :func:`update` but ``write_alone`` (a transaction always writes alone),
    and ``status`` for the status subresource. Raises as :func:`update`."""
    settings = WriteSettings(
        preconditions=preconditions, retry_policy=retry_policy, field_manager=field_manager,
        dry_run=dry_run, create_if_missing=create_if_missing, idempotency_key=idempotency_key,
        fence=fence,
    )
    return TransactCall(begin(ref, settings, status=status), fn, timeout)


#: What a get's answer must be at least as new as (see :meth:`~safewrite_client.Client.get`).
AtLeast = Union[Result, ReadResult, Mapping[str, Any]]


def _min_resource_version(at_least: Optional[AtLeast], given: Optional[str]) -> str:
    """The ``min_resource_version`` of a get: empty (a live read) when neither
    ``at_least`` nor ``min_resource_version`` says one. It is sent as it is: the
    sidecar checks its shape (and reads a version that is not a number live)."""
    if at_least is not None and given is not None:
        raise ValueError("get() takes at_least= or min_resource_version=, not both")
    if given is not None:
        if not isinstance(given, str):
            raise TypeError("min_resource_version must be a str, not %s" % type(given).__name__)
        return given
    if at_least is None:
        return ""
    if isinstance(at_least, (Result, ReadResult)):
        return at_least.resource_version
    if isinstance(at_least, Mapping):
        meta = at_least.get("metadata")
        version = meta.get("resourceVersion") if isinstance(meta, Mapping) else None
        if version is None:
            return ""
        if not isinstance(version, str):
            raise TypeError(
                "at_least's metadata.resourceVersion must be a str, not %s" % type(version).__name__
            )
        return version
    hint = " (a resourceVersion goes in min_resource_version=)" if isinstance(at_least, str) else ""
    raise TypeError(
        "at_least must be a safewrite_client.Result, a ReadResult or an object, not %s%s"
        % (type(at_least).__name__, hint)
    )


def get(
    ref: ObjectRef,
    *,
    at_least: Optional[AtLeast] = None,
    min_resource_version: Optional[str] = None,
    timeout: Optional[float] = None,
) -> Unary[ReadResult]:
    """The ``Get`` call of :meth:`~safewrite_client.Client.get` (see there for each
    parameter).

    Raises:
        TypeError: a value of the wrong type.
        ValueError: both ``at_least`` and ``min_resource_version``.
    """
    request = writer_pb2.GetRequest(
        target=target(ref), min_resource_version=_min_resource_version(at_least, min_resource_version)
    )
    return Unary("Get", request, timeout, read_result)


def delete(
    ref: ObjectRef,
    *,
    preconditions: Optional[Preconditions] = None,
    propagation_policy: Optional[PropagationPolicy] = None,
    dry_run: bool = False,
    retry_policy: Optional[RetryPolicy] = None,
    fence: Optional[Fence] = None,
    timeout: Optional[float] = None,
) -> Unary[DeleteResult]:
    """The ``Delete`` call of :meth:`~safewrite_client.Client.delete` (see there for
    each parameter); without ``fence`` it carries the current one
    (:func:`~safewrite_client.fenced`).

    Raises:
        TypeError: a value of the wrong type.
    """
    if propagation_policy is not None and not isinstance(propagation_policy, PropagationPolicy):
        raise TypeError(
            "propagation_policy must be a safewrite_client.PropagationPolicy, not %s"
            % type(propagation_policy).__name__
        )
    request = writer_pb2.DeleteRequest(
        target=target(ref),
        preconditions=_preconditions(preconditions),
        propagation_policy=cast(Any, int(propagation_policy or PropagationPolicy.UNSPECIFIED)),
        dry_run=bool(dry_run),
        retry_policy=_retry_policy(retry_policy),
    )
    sent = effective_fence(fence)
    if sent is not None:
        request.fence.CopyFrom(fence_message(sent))
    return Unary("Delete", request, timeout, delete_result)


def raw_call(
    request: Any, timeout: Optional[float]
) -> Unary[Union[Result, ReadResult, DeleteResult]]:
    """The call for a request message built by the caller (``send``)."""
    for message, method in _WRITES.values():
        if isinstance(request, message):
            return Unary(method, request, timeout, unary_result)
    if isinstance(request, writer_pb2.GetRequest):
        return Unary("Get", request, timeout, read_result)
    if isinstance(request, writer_pb2.DeleteRequest):
        return Unary("Delete", request, timeout, delete_result)
    raise TypeError(
        "send() takes an UpdateWithRetryRequest, a PatchStatusRequest, a GetRequest or a "
        "DeleteRequest (or a TransactBegin with fn), not %s" % type(request).__name__
    )


def result(message: writer_pb2.WriteResult) -> Result:
    """The :class:`Result` for a ``safewrite.v1.WriteResult``."""
    return Result(
        outcome=Outcome(message.outcome),
        object=loads_object(message.object_json),
        resource_version=message.resource_version,
        attempts=message.attempts,
        attempt_records=tuple(attempt_record(r) for r in message.attempt_records),
        trace_id=message.trace_id,
        already_applied=message.already_applied,
    )


def unary_result(response: Any) -> Result:
    """The :class:`Result` of an ``UpdateWithRetry`` or ``PatchStatus`` response."""
    return result(response.result)


def read_result(response: writer_pb2.GetResponse) -> ReadResult:
    """The :class:`ReadResult` of a ``Get`` response."""
    return ReadResult(
        object=loads_object(response.object_json),
        resource_version=response.resource_version,
        remembered=response.remembered,
        trace_id=response.trace_id,
    )


def _timestamp(text: str) -> Optional[datetime.datetime]:
    """An RFC 3339 time as Kubernetes writes it (``2026-11-28T11:28:13Z``), timezone-aware;
    None for empty text."""
    if not text:
        return None
    value = datetime.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    return value if value.tzinfo else value.replace(tzinfo=datetime.timezone.utc)


def delete_result(response: writer_pb2.DeleteResponse) -> DeleteResult:
    """The :class:`DeleteResult` of a ``Delete`` response."""
    return DeleteResult(
        outcome=DeleteOutcome(response.outcome),
        object=loads_object(response.object_json),
        deletion_timestamp=_timestamp(response.deletion_timestamp),
        attempts=response.attempts,
        attempt_records=tuple(attempt_record(r) for r in response.attempt_records),
        trace_id=response.trace_id,
    )


# --- Transact ----------------------------------------------------------------------


def begin(ref: ObjectRef, settings: WriteSettings, *, status: bool) -> writer_pb2.TransactBegin:
    """The ``TransactBegin`` of a transaction on ``ref`` (its status subresource with
    ``status``); raises as :func:`write_call`."""
    return writer_pb2.TransactBegin(
        target=target(ref),
        status=bool(status),
        preconditions=_preconditions(settings.preconditions),
        retry_policy=_retry_policy(settings.retry_policy),
        options=settings.options(),
    )


@dataclass(frozen=True)
class Fresh:
    """One fresh object of a transaction, for the caller's function."""

    attempt: int
    object: Dict[str, Any]
    resource_version: str
    creating: bool


def _protocol_error(message: str) -> SafewriteError:
    return SafewriteError(grpc.StatusCode.INTERNAL, message, reason="PROTOCOL_ERROR")


def abort_reason(exc: BaseException) -> str:
    """The reason recorded for a transaction aborted by an exception."""
    if isinstance(exc, Abort):
        return exc.reason
    text = str(exc)
    name = type(exc).__name__
    return "%s: %s" % (name, text) if text else name


class Transaction:
    """The caller's side of one ``Transact`` stream, as a state machine without I/O.

    A client sends :attr:`first`, then feeds every response to :meth:`receive`: a
    :class:`Result` ends the transaction; a :class:`Fresh` is answered with the
    message :meth:`answer` makes of what the caller's function returned, or, when the
    function raised, with the one :meth:`fail` makes. When the stream ends without a
    result the client calls :meth:`ended`, and when it fails, :meth:`failed`; both
    raise. An exception the function raised (other than :class:`Abort`) aborts the
    transaction and is raised to the caller in place of whatever the stream says next.
    """

    def __init__(self, begin_message: writer_pb2.TransactBegin) -> None:
        self.first = writer_pb2.TransactRequest(begin=begin_message)
        #: Whether ``begin`` carries an idempotency key (decides whether a write of
        #: unknown outcome is retryable).
        self.idempotent = bool(begin_message.options.idempotency_key)
        self._raised: Optional[Exception] = None

    def _raise_pending(self) -> None:
        if self._raised is not None:
            raise self._raised

    def receive(self, response: writer_pb2.TransactResponse) -> Union[Result, Fresh]:
        """The result, or the next fresh object to answer.

        Raises:
            Exception: the function's exception, after the transaction was aborted.
            SafewriteError: an answer that breaks the protocol.
        """
        which = response.WhichOneof("message")
        if which == "result":
            self._raise_pending()
            return result(response.result)
        if which != "fresh":
            raise _protocol_error("Transact answered with an empty message")
        self._raise_pending()  # aborted, yet the sidecar sent another object: stop
        fresh = response.fresh
        return Fresh(
            attempt=fresh.attempt,
            object=loads_object(fresh.object_json),
            resource_version=fresh.resource_version,
            creating=fresh.creating,
        )

    def answer(self, fresh: Fresh, returned: Any) -> writer_pb2.TransactRequest:
        """The proposal for what the function returned for ``fresh``: the new object
        (a dict, or None when it changed ``fresh.object`` in place), a
        :class:`~safewrite_client.Mutation` (e.g. from
        :func:`safewrite_client.add_finalizer`), or, as built by the caller, a
        ``safewrite.v1.Mutation`` or a whole ``TransactProposal`` message (its
        ``attempt`` filled in when 0).

        Raises:
            TypeError: anything else; pass it to :meth:`fail`.
        """
        if returned is None:
            returned = fresh.object
        if isinstance(returned, writer_pb2.TransactProposal):
            proposal = writer_pb2.TransactProposal()
            proposal.CopyFrom(returned)
            if not proposal.attempt:
                proposal.attempt = fresh.attempt
        elif isinstance(returned, Mutation):
            proposal = writer_pb2.TransactProposal(attempt=fresh.attempt, mutation=returned.to_proto())
        elif isinstance(returned, writer_pb2.Mutation):
            proposal = writer_pb2.TransactProposal(attempt=fresh.attempt, mutation=returned)
        elif isinstance(returned, Mapping):
            proposal = writer_pb2.TransactProposal(attempt=fresh.attempt, object_json=dumps(returned))
        else:
            raise TypeError(
                "a transact function must return a dict (the new object), a Mutation or "
                "None, not %s" % type(returned).__name__
            )
        return writer_pb2.TransactRequest(proposal=proposal)

    def fail(self, fresh: Fresh, exc: Exception) -> writer_pb2.TransactRequest:
        """The abort to send when the function raised ``exc`` for ``fresh``. An
        :class:`Abort` ends the transaction with ``Outcome.ABORTED``; any other
        exception is kept and raised to the caller once the stream answers."""
        if not isinstance(exc, Abort):
            self._raised = exc
        return writer_pb2.TransactRequest(
            proposal=writer_pb2.TransactProposal(
                attempt=fresh.attempt, abort=writer_pb2.TransactAbort(reason=abort_reason(exc))
            )
        )

    def ended(self) -> NoReturn:
        """The stream ended without a result."""
        self._raise_pending()
        raise _protocol_error("Transact ended without a result")

    def failed(self, err: grpc.RpcError) -> NoReturn:
        """The stream failed with ``err``: the function's own exception when it had
        raised one, else the decoded :class:`SafewriteError`."""
        if self._raised is not None:
            raise self._raised from None
        raise from_rpc_error(err, idempotent=self.idempotent) from None


#: A transaction function: receives the fresh object, returns the new one (or changes
#: it in place and returns None, or returns a Mutation), or raises :class:`Abort`.
TransactFn = Callable[[Dict[str, Any]], Any]
