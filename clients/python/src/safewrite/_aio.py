"""The asyncio client."""

from __future__ import annotations

import inspect
from typing import Any, Awaitable, Callable, Dict, Mapping, Optional, Sequence, Tuple, Union

import grpc
import grpc.aio

from . import _convert as convert
from ._client import _protocol_error, channel_options, default_target
from ._convert import JsonObject, JsonPatchOps
from ._errors import from_rpc_error
from ._tracing import Metadata, load_injector, trace_metadata
from ._types import Abort, ObjectRef, Preconditions, Result, RetryPolicy
from .v1 import writer_pb2_grpc

#: An asyncio transaction function: like :data:`safewrite.TransactFn`, and may be a
#: coroutine function.
AsyncTransactFn = Callable[
    [Dict[str, Any]],
    Union[Optional[Mapping[str, Any]], Awaitable[Optional[Mapping[str, Any]]]],
]


class AsyncClient:
    """An asyncio client of the safewrite sidecar; the same API as
    :class:`~safewrite.Client`, with coroutine methods.

    Create it inside the event loop that uses it (a gRPC asyncio channel belongs to
    one loop), and close it with ``await client.close()`` or ``async with``.

    Args:
        target: The sidecar's gRPC target: ``"host:port"`` or
            ``"unix:///path/to/socket"``; by default the address in the environment
            variable ``SAFEWRITE_ADDRESS``, else ``"127.0.0.1:50051"``.
        credentials: Channel credentials for TLS; the default is a plaintext channel.
        options: Extra gRPC channel options, as ``(name, value)`` pairs.
        timeout: The default timeout, in seconds, of calls that give none.
        wait_for_ready: Wait for the sidecar to become reachable instead of failing at
            once (within the call's timeout).
        channel: Use this ``grpc.aio.Channel`` instead of opening one; the client does
            not close it.
        propagate_trace: Send the current OpenTelemetry context (of the task making
            the call) with every call, as for :class:`~safewrite.Client`; ``False``
            turns it off.
    """

    def __init__(
        self,
        target: Optional[str] = None,
        *,
        credentials: Optional[grpc.ChannelCredentials] = None,
        options: Optional[Sequence[Tuple[str, Any]]] = None,
        timeout: Optional[float] = None,
        wait_for_ready: bool = False,
        channel: Optional[grpc.aio.Channel] = None,
        propagate_trace: bool = True,
    ) -> None:
        if target is None:
            target = default_target()
        self.target = target
        self._owns_channel = channel is None
        if channel is None:
            opts = channel_options(target, options)
            if credentials is None:
                channel = grpc.aio.insecure_channel(target, options=opts)
            else:
                channel = grpc.aio.secure_channel(target, credentials, options=opts)
        self._channel = channel
        self._stub = writer_pb2_grpc.WriterServiceStub(channel)
        self._timeout = timeout
        self._wait_for_ready = wait_for_ready
        self._injector = load_injector() if propagate_trace else None

    async def close(self) -> None:
        """Closes the client's channel (unless it was given one)."""
        if self._owns_channel:
            await self._channel.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def _deadline(self, timeout: Optional[float]) -> Optional[float]:
        return self._timeout if timeout is None else timeout

    def _metadata(self) -> Optional[Metadata]:
        # Read in the calling task when the call starts: the current span is its own.
        return trace_metadata(self._injector)

    async def update(
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
        """Changes an object's main resource, retried on conflict; see
        :meth:`safewrite.Client.update`.

        ``idempotency_key`` makes the change exactly-once across lost answers: make one
        per intended change (e.g. ``str(uuid.uuid4())``) and send it again, unchanged,
        to retry that change after :class:`~safewrite.UnavailableError`,
        :class:`~safewrite.OutcomeUnknownError` or
        :class:`~safewrite.DeadlineExceededError`; a call that finds it already
        recorded writes nothing and returns a result with
        :attr:`~safewrite.Result.already_applied` set."""
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
            response = await self._stub.UpdateWithRetry(
                request,
                timeout=self._deadline(timeout),
                wait_for_ready=self._wait_for_ready,
                metadata=self._metadata(),
            )
        except grpc.RpcError as err:
            raise from_rpc_error(err) from None
        return convert.result(response.result)

    async def patch_status(
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
        """Changes an object's status subresource, retried on conflict; see
        :meth:`safewrite.Client.patch_status`."""
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
            response = await self._stub.PatchStatus(
                request,
                timeout=self._deadline(timeout),
                wait_for_ready=self._wait_for_ready,
                metadata=self._metadata(),
            )
        except grpc.RpcError as err:
            raise from_rpc_error(err) from None
        return convert.result(response.result)

    async def transact(
        self,
        ref: ObjectRef,
        fn: AsyncTransactFn,
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
        """Runs safewrite's retry loop with ``fn`` as the mutation; see
        :meth:`safewrite.Client.transact`.

        ``fn`` may be a plain function or a coroutine function; it receives the fresh
        object as a dict and returns (or, if a coroutine, resolves to) the new object,
        or None after changing the dict in place. Raise :class:`~safewrite.Abort` to
        end without writing; any other exception aborts and propagates. Cancelling the
        task cancels the stream, and safewrite writes nothing after that point.

        ``idempotency_key`` works as for :meth:`update` (not with ``status=True``):
        when the key is already recorded on the fresh object, ``fn`` is not called and
        the result has :attr:`~safewrite.Result.already_applied` set.
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
        call = self._stub.Transact(
            timeout=self._deadline(timeout),
            wait_for_ready=self._wait_for_ready,
            metadata=self._metadata(),
        )
        raised: Optional[BaseException] = None
        try:
            await call.write(begin)
            while True:
                response = await call.read()
                if response is grpc.aio.EOF:
                    if raised is not None:
                        raise raised
                    raise _protocol_error("Transact ended without a result")
                which = response.WhichOneof("message")
                if which == "result":
                    if raised is not None:
                        raise raised
                    return convert.result(response.result)
                if which != "fresh":
                    raise _protocol_error("Transact answered with an empty message")
                if raised is not None:
                    raise raised  # aborted, yet the server sent another object
                fresh = response.fresh
                obj = convert.loads_object(fresh.object_json)
                try:
                    returned = fn(obj)
                    if inspect.isawaitable(returned):
                        returned = await returned
                    message = convert.proposal(
                        fresh.attempt, convert.proposed_object(obj, returned)
                    )
                except Abort as abort:
                    message = convert.abort(fresh.attempt, abort.reason)
                except Exception as exc:  # abort the transaction, then re-raise
                    raised = exc
                    message = convert.abort(fresh.attempt, convert.abort_reason(exc))
                await call.write(message)
        except grpc.RpcError as err:
            if raised is not None:
                raise raised from None
            raise from_rpc_error(err) from None
        finally:
            if not call.done():
                call.cancel()
