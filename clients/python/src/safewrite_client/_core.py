"""The one implementation behind :class:`~safewrite_client.Client` and
:class:`~safewrite_client.AsyncClient`, without any I/O: where the sidecar is, how a
call's keyword arguments become a request (and which are refused locally), how an
answer becomes a :class:`~safewrite_client.Result`, and the client's side of the
``Transact`` protocol as a state machine. The two clients only move messages."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import (
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
    TypedDict,
    TypeVar,
    Union,
)

import grpc
from google.protobuf import duration_pb2

from ._errors import SafewriteError, attempt_record, from_rpc_error
from ._mutation import (
    MUTATION_KEYS,
    JsonObject,
    MutationArgs,
    check_keys,
    dumps,
    keys_of,
    mutation,
)
from ._tracing import Injector, Metadata, load_injector, trace_metadata
from ._types import Abort, ObjectRef, Outcome, Preconditions, ReadResult, Result, RetryPolicy
from .v1 import writer_pb2

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


# --- a call's keyword arguments ----------------------------------------------------


class WriteArgs(MutationArgs, total=False):
    """The keyword arguments of :meth:`~safewrite_client.Client.patch_status` (and,
    with :class:`UpdateArgs`' two more, of ``update``), declared once for both clients.

    Exactly one mutation: ``cel``, ``merge_patch``, ``json_patch``, ``apply`` (with
    ``force``), ``set_conditions`` or ``remove_conditions`` (with
    ``conditions_path``), ``add_finalizer``, ``remove_finalizer``, ``ensure_owner``,
    ``remove_owner``, ``upsert_list_entry`` or ``remove_list_entry``; see
    :class:`MutationArgs`.

    Options: ``preconditions`` (:class:`~safewrite_client.Preconditions`, checked on
    the fresh object before every write), ``retry_policy``
    (:class:`~safewrite_client.RetryPolicy`), ``field_manager`` (default
    ``"safewrite"``), ``dry_run`` (admit without persisting), ``write_alone`` (never
    committed together with concurrent writes to the same object), ``timeout``
    (seconds for the whole call, every attempt and backoff; default the client's).
    """

    preconditions: Optional[Preconditions]
    retry_policy: Optional[RetryPolicy]
    field_manager: Optional[str]
    dry_run: bool
    write_alone: bool
    timeout: Optional[float]


class UpdateArgs(WriteArgs, total=False):
    """The keyword arguments of :meth:`~safewrite_client.Client.update`: those of
    :class:`WriteArgs`, and:

    - ``create_if_missing``: the object to create (a dict or JSON text) when the target
      does not exist; the mutation is applied to it first, and apiVersion, kind, name
      and namespace default to the target's.
    - ``idempotency_key``: makes the change exactly-once across lost answers: the
      sidecar records it on the object in the same write, and a later attempt or call
      that finds it writes nothing and returns ``Outcome.UPDATED`` with
      ``already_applied`` set. One per intended change (e.g. ``str(uuid.uuid4())``),
      1 to 128 characters of ``[A-Za-z0-9._:-]``; not with ``apply``.
    """

    create_if_missing: Optional[JsonObject]
    idempotency_key: Optional[str]


class TransactArgs(TypedDict, total=False):
    """The keyword arguments of :meth:`~safewrite_client.Client.transact`:
    ``status`` (write the status subresource instead of the main resource),
    ``preconditions``, ``retry_policy``, ``field_manager``, ``dry_run``, ``timeout``,
    ``create_if_missing`` and ``idempotency_key`` as for ``update`` (a key is refused
    with ``status=True``). A transaction always writes alone."""

    status: bool
    preconditions: Optional[Preconditions]
    retry_policy: Optional[RetryPolicy]
    field_manager: Optional[str]
    dry_run: bool
    create_if_missing: Optional[JsonObject]
    idempotency_key: Optional[str]
    timeout: Optional[float]


class GetArgs(TypedDict, total=False):
    """The keyword arguments of :meth:`~safewrite_client.Client.get`, declared once for
    both clients; at most one of the first two:

    - ``at_least``: what the answer must be at least as new as: the
      :class:`~safewrite_client.Result` of the caller's own write (its
      ``resource_version``), a :class:`~safewrite_client.ReadResult` of an earlier get,
      or an object (a dict or a kopf body: its ``metadata.resourceVersion``).
    - ``min_resource_version``: the same, as a resourceVersion string.
    - ``timeout``: seconds for the call (default the client's).

    Without a minimum (or with an empty one) the sidecar reads live.
    """

    at_least: Union[Result, ReadResult, Mapping[str, Any], None]
    min_resource_version: Optional[str]
    timeout: Optional[float]


_WRITE_KEYS = keys_of(WriteArgs)
_UPDATE_KEYS = keys_of(UpdateArgs)
_TRANSACT_KEYS = keys_of(TransactArgs)
_GET_KEYS = keys_of(GetArgs)


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


def _options(args: Mapping[str, Any]) -> writer_pb2.WriteOptions:
    """The ``WriteOptions``. The idempotency key is sent as it is: the sidecar checks
    its shape and refuses it where it does not apply. Only an empty key is refused
    here, because on the wire it would mean "no key" and silently drop the
    exactly-once guarantee."""
    key = args.get("idempotency_key")
    if key is not None:
        if not isinstance(key, str):
            raise TypeError("idempotency_key must be a str, not %s" % type(key).__name__)
        if not key:
            raise ValueError(
                "idempotency_key must not be empty (pass None for no key, or e.g. "
                "str(uuid.uuid4()))"
            )
    create = args.get("create_if_missing")
    return writer_pb2.WriteOptions(
        field_manager=args.get("field_manager") or "",
        dry_run=bool(args.get("dry_run", False)),
        create_if_missing_json=dumps(create) if create is not None else "",
        idempotency_key=key or "",
        write_alone=bool(args.get("write_alone", False)),
    )


T = TypeVar("T", bound=Union[Result, ReadResult])


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
        a write that carries an idempotency key, or a get, which writes nothing."""
        if isinstance(self.request, writer_pb2.GetRequest):
            return True
        return bool(self.request.options.idempotency_key)

    def error(self, err: grpc.RpcError) -> SafewriteError:
        """The exception for this call's failure ``err``."""
        return from_rpc_error(err, idempotent=self.idempotent)


def update_call(ref: ObjectRef, args: Mapping[str, Any]) -> Unary[Result]:
    """The ``UpdateWithRetry`` call for ``update(ref, **args)``.

    Raises:
        TypeError: an unknown keyword or a value of the wrong type.
        ValueError: not exactly one mutation, or an empty idempotency key.
    """
    check_keys("update", args, _UPDATE_KEYS)
    request = writer_pb2.UpdateWithRetryRequest(
        target=target(ref),
        mutation=mutation(**{k: args[k] for k in MUTATION_KEYS if k in args}),
        preconditions=_preconditions(args.get("preconditions")),
        retry_policy=_retry_policy(args.get("retry_policy")),
        options=_options(args),
    )
    return Unary("UpdateWithRetry", request, args.get("timeout"), unary_result)


def patch_status_call(ref: ObjectRef, args: Mapping[str, Any]) -> Unary[Result]:
    """The ``PatchStatus`` call for ``patch_status(ref, **args)``; raises as
    :func:`update_call`."""
    check_keys("patch_status", args, _WRITE_KEYS)
    request = writer_pb2.PatchStatusRequest(
        target=target(ref),
        mutation=mutation(**{k: args[k] for k in MUTATION_KEYS if k in args}),
        preconditions=_preconditions(args.get("preconditions")),
        retry_policy=_retry_policy(args.get("retry_policy")),
        options=_options(args),
    )
    return Unary("PatchStatus", request, args.get("timeout"), unary_result)


def _min_resource_version(args: Mapping[str, Any]) -> str:
    """The ``min_resource_version`` of ``get(ref, **args)``: empty (a live read) when
    neither ``at_least`` nor ``min_resource_version`` says one. It is sent as it is:
    the sidecar checks its shape (and reads a version that is not a number live)."""
    at_least = args.get("at_least")
    given = args.get("min_resource_version")
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


def get_call(ref: ObjectRef, args: Mapping[str, Any]) -> Unary[ReadResult]:
    """The ``Get`` call for ``get(ref, **args)``.

    Raises:
        TypeError: an unknown keyword or a value of the wrong type.
        ValueError: both ``at_least`` and ``min_resource_version``.
    """
    check_keys("get", args, _GET_KEYS)
    request = writer_pb2.GetRequest(
        target=target(ref), min_resource_version=_min_resource_version(args)
    )
    return Unary("Get", request, args.get("timeout"), read_result)


def raw_call(request: Any, timeout: Optional[float]) -> Unary[Union[Result, ReadResult]]:
    """The call for a request message built by the caller (``send``)."""
    if isinstance(request, writer_pb2.UpdateWithRetryRequest):
        return Unary("UpdateWithRetry", request, timeout, unary_result)
    if isinstance(request, writer_pb2.PatchStatusRequest):
        return Unary("PatchStatus", request, timeout, unary_result)
    if isinstance(request, writer_pb2.GetRequest):
        return Unary("Get", request, timeout, read_result)
    raise TypeError(
        "send() takes an UpdateWithRetryRequest, a PatchStatusRequest or a GetRequest (or a "
        "TransactBegin with fn), not %s" % type(request).__name__
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


# --- Transact ----------------------------------------------------------------------


def begin(ref: ObjectRef, args: Mapping[str, Any]) -> Tuple[writer_pb2.TransactBegin, Optional[float]]:
    """The ``TransactBegin`` and timeout for ``transact(ref, fn, **args)``; raises as
    :func:`update_call`."""
    check_keys("transact", args, _TRANSACT_KEYS)
    message = writer_pb2.TransactBegin(
        target=target(ref),
        status=bool(args.get("status", False)),
        preconditions=_preconditions(args.get("preconditions")),
        retry_policy=_retry_policy(args.get("retry_policy")),
        options=_options(args),
    )
    return message, args.get("timeout")


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
        (a dict, or None when it changed ``fresh.object`` in place), a ``Mutation``
        message (e.g. from :func:`safewrite_client.mutation`), or a whole
        ``TransactProposal`` message (its ``attempt`` filled in when 0).

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
