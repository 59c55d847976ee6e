"""The blocking client."""

from __future__ import annotations

import os
import queue
from typing import (
    Any,
    Callable,
    Dict,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
)

import grpc

from . import _convert as convert
from ._convert import JsonObject, JsonPatchOps
from ._errors import SafewriteError, from_rpc_error
from ._tracing import Metadata, load_injector, trace_metadata
from ._types import Abort, ObjectRef, Preconditions, Result, RetryPolicy
from .v1 import writer_pb2, writer_pb2_grpc

#: Where the sidecar listens unless told otherwise.
DEFAULT_TARGET = "127.0.0.1:50051"

#: The environment variable naming the sidecar's address when a client is given none:
#: ``host:port``, ``http://host:port`` or ``unix:///path/to/socket`` (``safewrite
#: health`` reads it too).
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


#: A transaction function: receives the fresh object, returns the new one (or changes
#: it in place and returns None), or raises :class:`Abort`.
TransactFn = Callable[[Dict[str, Any]], Optional[Mapping[str, Any]]]


def channel_options(
    target: str, options: Optional[Sequence[Tuple[str, Any]]]
) -> List[Tuple[str, Any]]:
    """The channel options for a target: the caller's, plus ``grpc.default_authority``
    ``"localhost"`` for unix socket targets unless the caller set one. (gRPC's C core
    would send the socket path as the HTTP/2 ``:authority``, which the sidecar's HTTP/2
    server refuses as malformed with RST_STREAM PROTOCOL_ERROR.)"""
    merged = list(options or ())
    if target.startswith("unix:") and not any(k == "grpc.default_authority" for k, _ in merged):
        merged.append(("grpc.default_authority", "localhost"))
    return merged


def _protocol_error(message: str) -> SafewriteError:
    return SafewriteError(grpc.StatusCode.INTERNAL, message, reason="PROTOCOL_ERROR")


class Client:
    """A blocking client of the safewrite sidecar.

    Each call sends *what* to change; the sidecar reads the fresh object, applies the
    change, writes with the resourceVersion it read and retries on conflict, within the
    call's timeout. A successful call returns a :class:`~safewrite.Result`; a failed one
    raises a :class:`~safewrite.SafewriteError` subclass.

    A client is safe to share between threads; close it (or use it as a context
    manager) to release its channel.

    Args:
        target: The sidecar's gRPC target: ``"host:port"`` or
            ``"unix:///path/to/socket"``; by default the address in the environment
            variable ``SAFEWRITE_ADDRESS``, else ``"127.0.0.1:50051"``.
        credentials: Channel credentials for TLS; the default is a plaintext channel,
            as the sidecar serves on localhost or a unix socket.
        options: Extra gRPC channel options, as ``(name, value)`` pairs.
        timeout: The default timeout, in seconds, of calls that give none; ``None``
            leaves calls without a deadline (the sidecar's retry policy still bounds them).
        wait_for_ready: Wait for the sidecar to become reachable instead of failing at
            once with :class:`~safewrite.UnavailableError` (within the call's timeout).
        channel: Use this channel instead of opening one; the client does not close it.
        propagate_trace: Send the caller's current OpenTelemetry context with every call
            (W3C ``traceparent``/``tracestate`` metadata, through the global
            propagator), so the sidecar's span joins the caller's trace and
            :attr:`~safewrite.Result.trace_id` is the caller's trace id. Needs
            ``opentelemetry-api`` (``pip install safewrite[otel]``); without it
            nothing extra is sent. ``False`` turns it off.
    """

    def __init__(
        self,
        target: Optional[str] = None,
        *,
        credentials: Optional[grpc.ChannelCredentials] = None,
        options: Optional[Sequence[Tuple[str, Any]]] = None,
        timeout: Optional[float] = None,
        wait_for_ready: bool = False,
        channel: Optional[grpc.Channel] = None,
        propagate_trace: bool = True,
    ) -> None:
        if target is None:
            target = default_target()
        self.target = target
        self._owns_channel = channel is None
        if channel is None:
            opts = channel_options(target, options)
            if credentials is None:
                channel = grpc.insecure_channel(target, options=opts)
            else:
                channel = grpc.secure_channel(target, credentials, options=opts)
        self._channel = channel
        self._stub = writer_pb2_grpc.WriterServiceStub(channel)
        self._timeout = timeout
        self._wait_for_ready = wait_for_ready
        self._injector = load_injector() if propagate_trace else None

    def close(self) -> None:
        """Closes the client's channel (unless it was given one)."""
        if self._owns_channel:
            self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _deadline(self, timeout: Optional[float]) -> Optional[float]:
        return self._timeout if timeout is None else timeout

    def _metadata(self) -> Optional[Metadata]:
        # Read in the caller's thread when the call starts: the current span is theirs.
        return trace_metadata(self._injector)

    def update(
        self,
        ref: ObjectRef,
        *,
        cel: Optional[str] = None,
        merge_patch: Optional[JsonObject] = None,
        json_patch: Optional[JsonPatchOps] = None,
        apply: Optional[JsonObject] = None,
        force: bool = False,
        preconditions: Optional[Preconditions] = None,
        retry_policy: Optional[RetryPolicy] = None,
        field_manager: Optional[str] = None,
        dry_run: bool = False,
        create_if_missing: Optional[JsonObject] = None,
        idempotency_key: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> Result:
        """Changes an object's main resource, retried on conflict (``UpdateWithRetry``).

        Give exactly one mutation; it is re-applied to the fresh object on every attempt,
        so read-dependent changes are never lost. A mutation that changes nothing
        writes nothing and returns :attr:`Outcome.UNCHANGED`. The status of a kind with
        a status subresource is never changed: use :meth:`patch_status`.

        Args:
            ref: The object to change.
            cel: A CEL expression over ``object`` returning a map, applied as a merge
                patch, e.g. ``'{"data": {"n": string(int(object.data.n) + 1)}}'``.
            merge_patch: An RFC 7386 JSON merge patch (a dict or JSON text).
            json_patch: An RFC 6902 JSON Patch (a list of operations or JSON text);
                its ``test`` operations are preconditions.
            apply: A server-side apply configuration (a dict or JSON text) with
                apiVersion, kind, metadata.name and the fields this manager owns;
                needs ``field_manager``.
            force: With ``apply``: take over fields owned by other managers instead of
                failing with :class:`~safewrite.ConflictError`.
            preconditions: Conditions checked on the fresh object before every write.
            retry_policy: Overrides the sidecar's retry policy for this call.
            field_manager: The field manager recorded in managedFields (default
                ``"safewrite"``).
            dry_run: Validate and admit the write without persisting it.
            create_if_missing: The object to create (a dict or JSON text) when the
                target does not exist; the mutation is applied to it first, and
                apiVersion, kind, name and namespace default to the target's.
            idempotency_key: Makes the change exactly-once across lost answers. The
                sidecar records the key on the object (annotation
                ``safewrite.dev/applied-keys``) in the same write as the change, and a
                later attempt or call that finds it there writes nothing and returns
                :attr:`Outcome.UPDATED` with :attr:`~safewrite.Result.already_applied`
                set. So safewrite retries a write whose answer was lost, and you may
                call again after :class:`~safewrite.UnavailableError`,
                :class:`~safewrite.OutcomeUnknownError` or
                :class:`~safewrite.DeadlineExceededError`. Make one key per intended
                change (e.g. ``str(uuid.uuid4())``) and reuse it only to retry that
                same change; 1 to 128 characters of ``[A-Za-z0-9._:-]``. The object
                remembers its 32 most recent keys. Refused with ``apply`` (already
                idempotent). Without a key, a write whose answer was lost raises
                :class:`~safewrite.OutcomeUnknownError`.
            timeout: Seconds the whole call (every attempt and backoff) may take.

        Returns:
            The :class:`~safewrite.Result`.

        Raises:
            SafewriteError: a subclass per failure, e.g. ConflictError, InvalidError,
                PreconditionFailedError, NotFoundError, PermissionDeniedError,
                OutcomeUnknownError.
            ValueError: not exactly one mutation was given, or an empty
                ``idempotency_key``.
        """
        request = convert.update_request(
            ref,
            mutation_=convert.mutation(
                cel=cel, merge_patch=merge_patch, json_patch=json_patch, apply=apply, force=force
            ),
            preconditions_=preconditions,
            retry_policy_=retry_policy,
            options_=convert.options(
                field_manager=field_manager,
                dry_run=dry_run,
                create_if_missing=create_if_missing,
                idempotency_key=idempotency_key,
            ),
        )
        try:
            response = self._stub.UpdateWithRetry(
                request,
                timeout=self._deadline(timeout),
                wait_for_ready=self._wait_for_ready,
                metadata=self._metadata(),
            )
        except grpc.RpcError as err:
            raise from_rpc_error(err) from None
        return convert.result(response.result)

    def patch_status(
        self,
        ref: ObjectRef,
        *,
        cel: Optional[str] = None,
        merge_patch: Optional[JsonObject] = None,
        json_patch: Optional[JsonPatchOps] = None,
        apply: Optional[JsonObject] = None,
        force: bool = False,
        preconditions: Optional[Preconditions] = None,
        retry_policy: Optional[RetryPolicy] = None,
        field_manager: Optional[str] = None,
        dry_run: bool = False,
        timeout: Optional[float] = None,
    ) -> Result:
        """Changes an object's status subresource, retried on conflict (``PatchStatus``).

        Takes the same arguments as :meth:`update` except ``create_if_missing`` (a
        status cannot be created) and ``idempotency_key`` (a status write cannot record
        it). The mutation sees the whole fresh object; only its effect on ``status`` is
        written, and the spec is never changed.

        Raises:
            SafewriteError: a subclass per failure, as for :meth:`update`.
            ValueError: not exactly one mutation was given.
        """
        request = convert.patch_status_request(
            ref,
            mutation_=convert.mutation(
                cel=cel, merge_patch=merge_patch, json_patch=json_patch, apply=apply, force=force
            ),
            preconditions_=preconditions,
            retry_policy_=retry_policy,
            options_=convert.options(field_manager=field_manager, dry_run=dry_run),
        )
        try:
            response = self._stub.PatchStatus(
                request,
                timeout=self._deadline(timeout),
                wait_for_ready=self._wait_for_ready,
                metadata=self._metadata(),
            )
        except grpc.RpcError as err:
            raise from_rpc_error(err) from None
        return convert.result(response.result)

    def transact(
        self,
        ref: ObjectRef,
        fn: TransactFn,
        *,
        status: bool = False,
        preconditions: Optional[Preconditions] = None,
        retry_policy: Optional[RetryPolicy] = None,
        field_manager: Optional[str] = None,
        dry_run: bool = False,
        create_if_missing: Optional[JsonObject] = None,
        idempotency_key: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> Result:
        """Runs safewrite's retry loop with ``fn`` as the mutation (``Transact``).

        ``fn`` receives the fresh object as a dict and returns the whole new object, or
        changes the dict in place and returns None. safewrite writes it with the
        resourceVersion it read; on a conflict ``fn`` is called again with the next
        fresh object, so it must compute its change from the object it is given (and
        should have no other side effects). Returning the object unchanged writes
        nothing (:attr:`Outcome.UNCHANGED`).

        To end without writing, raise :class:`~safewrite.Abort`: the result's outcome is
        then :attr:`Outcome.ABORTED`. Any other exception aborts the transaction and
        propagates to the caller.

        Args:
            ref: The object to change.
            fn: The mutation, called once per attempt.
            status: Write the proposals to the status subresource instead of the main
                resource.
            idempotency_key: Makes the change exactly-once across lost answers, as
                for :meth:`update`: when the key is already recorded on the fresh
                object, ``fn`` is not called, nothing is written, and the result has
                :attr:`~safewrite.Result.already_applied` set. One key per intended
                change (e.g. ``str(uuid.uuid4())``), reused only to retry that change
                after :class:`~safewrite.UnavailableError`,
                :class:`~safewrite.OutcomeUnknownError` or
                :class:`~safewrite.DeadlineExceededError`. Not with ``status=True``
                (the sidecar refuses it with :class:`~safewrite.InvalidError`).
            preconditions, retry_policy, field_manager, dry_run, create_if_missing,
            timeout: As for :meth:`update`.

        Returns:
            The :class:`~safewrite.Result`.

        Raises:
            SafewriteError: a subclass per failure, as for :meth:`update`.
        """
        begin = convert.begin(
            ref,
            status=status,
            preconditions_=preconditions,
            retry_policy_=retry_policy,
            options_=convert.options(
                field_manager=field_manager,
                dry_run=dry_run,
                create_if_missing=create_if_missing,
                idempotency_key=idempotency_key,
            ),
        )
        outbox: "queue.Queue[Optional[writer_pb2.TransactRequest]]" = queue.Queue()
        outbox.put(begin)

        def requests() -> Iterator[writer_pb2.TransactRequest]:
            while True:
                message = outbox.get()
                if message is None:
                    return
                yield message

        call = self._stub.Transact(
            requests(),
            timeout=self._deadline(timeout),
            wait_for_ready=self._wait_for_ready,
            metadata=self._metadata(),
        )
        raised: Optional[BaseException] = None
        try:
            for response in call:
                which = response.WhichOneof("message")
                if which == "result":
                    if raised is not None:
                        raise raised
                    return convert.result(response.result)
                if which != "fresh":
                    raise _protocol_error("Transact answered with an empty message")
                if raised is not None:
                    break  # aborted, yet the server sent another object: stop here
                fresh = response.fresh
                obj = convert.loads_object(fresh.object_json)
                try:
                    proposed = convert.proposed_object(obj, fn(obj))
                    outbox.put(convert.proposal(fresh.attempt, proposed))
                except Abort as abort:
                    outbox.put(convert.abort(fresh.attempt, abort.reason))
                except Exception as exc:  # abort the transaction, then re-raise
                    raised = exc
                    outbox.put(convert.abort(fresh.attempt, convert.abort_reason(exc)))
            if raised is not None:
                raise raised
            raise _protocol_error("Transact ended without a result")
        except grpc.RpcError as err:
            if raised is not None:
                raise raised from None
            raise from_rpc_error(err) from None
        finally:
            outbox.put(None)
            call.cancel()
