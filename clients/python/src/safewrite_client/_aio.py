"""The asyncio client: moves the messages :mod:`._core` makes over gRPC asyncio
channels, one per event loop, each made lazily on the loop that first uses it."""

from __future__ import annotations

import asyncio
import inspect
import threading
from typing import Any, Dict, Optional, Sequence, Tuple, Union, overload

import grpc
import grpc.aio

from . import _core as core
from ._core import AtLeast
from ._mutation import JsonObject, JsonPatchOps, Owner, mutation
from ._types import Fence, ListEntry, ObjectRef, Preconditions, ReadResult, Result, RetryPolicy
from .conditions import Condition
from .v1 import writer_pb2, writer_pb2_grpc


class AsyncClient:
    """An asyncio client of the safewrite sidecar; the same API as
    :class:`~safewrite_client.Client`, with coroutine methods, and ``transact`` takes
    plain or ``async`` functions.

    The client may be created anywhere, e.g. at module level before any event loop
    runs (as kopf operators do): a gRPC asyncio channel belongs to the loop it was
    made on, so the client makes its channel on first use, on the running loop, and
    one per loop when it is used from several (each ``asyncio.run``, each thread's
    loop). Close it with ``await client.close()`` or ``async with``.

    Args:
        target, credentials, options, timeout, wait_for_ready, propagate_trace, token:
            As for :class:`~safewrite_client.Client`; ``token`` is the sidecar's shared
            token, sent with every call as ``authorization: Bearer <token>``.
        channel: Use this ``grpc.aio.Channel`` (bound to its own loop) instead of
            making channels; the client does not close it.

    Raises:
        ValueError, TypeError: an unusable ``token``, as for
            :class:`~safewrite_client.Client`.
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
        token: Optional[str] = None,
    ) -> None:
        self._settings = core.Settings(
            target, credentials, options, timeout, wait_for_ready, propagate_trace, token
        )
        self.target = self._settings.target
        self._given = (channel, writer_pb2_grpc.WriterServiceStub(channel)) if channel else None
        self._lock = threading.Lock()
        self._channels: Dict[asyncio.AbstractEventLoop, Tuple[Any, Any]] = {}

    def _stub(self) -> Any:
        """The stub on the running loop's channel, made on first use."""
        if self._given is not None:
            return self._given[1]
        loop = asyncio.get_running_loop()
        with self._lock:
            entry = self._channels.get(loop)
            if entry is None:
                # Channels of loops that are gone cannot be closed any more: drop them.
                for old in [lp for lp in self._channels if lp.is_closed()]:
                    del self._channels[old]
                s = self._settings
                if s.credentials is None:
                    channel = grpc.aio.insecure_channel(s.target, options=s.options)
                else:
                    channel = grpc.aio.secure_channel(s.target, s.credentials, options=s.options)
                entry = (channel, writer_pb2_grpc.WriterServiceStub(channel))
                self._channels[loop] = entry
        return entry[1]

    async def close(self) -> None:
        """Closes the channel of the running loop, and asks the loops of any other
        channel this client made to close theirs (unless it was given a channel)."""
        running = asyncio.get_running_loop()
        with self._lock:
            channels, self._channels = self._channels, {}
        for loop, (channel, _) in channels.items():
            if loop is running:
                await channel.close()
            elif not loop.is_closed():
                asyncio.run_coroutine_threadsafe(channel.close(), loop)

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def update(
        self,
        ref: ObjectRef,
        *,
        cel: Optional[str] = None,
        merge_patch: Optional[JsonObject] = None,
        json_patch: Optional[JsonPatchOps] = None,
        apply: Optional[JsonObject] = None,
        force: bool = False,
        set_conditions: Union[Condition, Sequence[Condition], None] = None,
        remove_conditions: Union[str, Sequence[str], None] = None,
        conditions_path: str = "",
        add_finalizer: Optional[str] = None,
        remove_finalizer: Optional[str] = None,
        ensure_owner: Optional[Owner] = None,
        remove_owner: Optional[Owner] = None,
        upsert_list_entry: Optional[ListEntry] = None,
        remove_list_entry: Optional[ListEntry] = None,
        preconditions: Optional[Preconditions] = None,
        retry_policy: Optional[RetryPolicy] = None,
        field_manager: Optional[str] = None,
        dry_run: bool = False,
        write_alone: bool = False,
        create_if_missing: Optional[JsonObject] = None,
        idempotency_key: Optional[str] = None,
        fence: Optional[Fence] = None,
        timeout: Optional[float] = None,
    ) -> Result:
        """Changes an object's main resource, retried on conflict (``UpdateWithRetry``);
        see :meth:`safewrite_client.Client.update`."""
        change = mutation(
            cel=cel, merge_patch=merge_patch, json_patch=json_patch, apply=apply, force=force,
            set_conditions=set_conditions, remove_conditions=remove_conditions,
            conditions_path=conditions_path, add_finalizer=add_finalizer,
            remove_finalizer=remove_finalizer, ensure_owner=ensure_owner,
            remove_owner=remove_owner, upsert_list_entry=upsert_list_entry,
            remove_list_entry=remove_list_entry,
        )
        settings = core.WriteSettings(
            preconditions=preconditions, retry_policy=retry_policy, field_manager=field_manager,
            dry_run=dry_run, write_alone=write_alone, create_if_missing=create_if_missing,
            idempotency_key=idempotency_key, fence=fence,
        )
        return await self._unary(core.write_call(ref, change, settings, status=False, timeout=timeout))

    async def patch_status(
        self,
        ref: ObjectRef,
        *,
        cel: Optional[str] = None,
        merge_patch: Optional[JsonObject] = None,
        json_patch: Optional[JsonPatchOps] = None,
        apply: Optional[JsonObject] = None,
        force: bool = False,
        set_conditions: Union[Condition, Sequence[Condition], None] = None,
        remove_conditions: Union[str, Sequence[str], None] = None,
        conditions_path: str = "",
        add_finalizer: Optional[str] = None,
        remove_finalizer: Optional[str] = None,
        ensure_owner: Optional[Owner] = None,
        remove_owner: Optional[Owner] = None,
        upsert_list_entry: Optional[ListEntry] = None,
        remove_list_entry: Optional[ListEntry] = None,
        preconditions: Optional[Preconditions] = None,
        retry_policy: Optional[RetryPolicy] = None,
        field_manager: Optional[str] = None,
        dry_run: bool = False,
        write_alone: bool = False,
        fence: Optional[Fence] = None,
        timeout: Optional[float] = None,
    ) -> Result:
        """Changes an object's status subresource, retried on conflict (``PatchStatus``):
        :meth:`update`'s write with the status subresource set; see
        :meth:`safewrite_client.Client.patch_status`."""
        change = mutation(
            cel=cel, merge_patch=merge_patch, json_patch=json_patch, apply=apply, force=force,
            set_conditions=set_conditions, remove_conditions=remove_conditions,
            conditions_path=conditions_path, add_finalizer=add_finalizer,
            remove_finalizer=remove_finalizer, ensure_owner=ensure_owner,
            remove_owner=remove_owner, upsert_list_entry=upsert_list_entry,
            remove_list_entry=remove_list_entry,
        )
        settings = core.WriteSettings(
            preconditions=preconditions, retry_policy=retry_policy, field_manager=field_manager,
            dry_run=dry_run, write_alone=write_alone, fence=fence,
        )
        return await self._unary(core.write_call(ref, change, settings, status=True, timeout=timeout))

    async def transact(
        self,
        ref: ObjectRef,
        fn: core.TransactFn,
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
    ) -> Result:
        """Runs safewrite's retry loop with ``fn`` as the mutation; see
        :meth:`safewrite_client.Client.transact`. ``fn`` may be a plain function or a
        coroutine function. Cancelling the task cancels the stream, and safewrite
        writes nothing after that point."""
        settings = core.WriteSettings(
            preconditions=preconditions, retry_policy=retry_policy, field_manager=field_manager,
            dry_run=dry_run, create_if_missing=create_if_missing, idempotency_key=idempotency_key,
            fence=fence,
        )
        return await self._transact(core.begin(ref, settings, status=status), fn, timeout)

    async def get(
        self,
        ref: ObjectRef,
        *,
        at_least: Optional[AtLeast] = None,
        min_resource_version: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> ReadResult:
        """Reads an object at least as new as a write of yours (``at_least=`` its
        result, or ``min_resource_version=``); see
        :meth:`safewrite_client.Client.get`."""
        return await self._unary(core.get_call(ref, at_least, min_resource_version, timeout))

    @overload
    async def send(
        self, request: writer_pb2.GetRequest, fn: None = None, *, timeout: Optional[float] = None
    ) -> ReadResult: ...

    @overload
    async def send(
        self,
        request: Union[
            writer_pb2.UpdateWithRetryRequest, writer_pb2.PatchStatusRequest, writer_pb2.TransactBegin
        ],
        fn: Optional[core.TransactFn] = None,
        *,
        timeout: Optional[float] = None,
    ) -> Result: ...

    async def send(
        self, request: Any, fn: Optional[core.TransactFn] = None, *, timeout: Optional[float] = None
    ) -> Union[Result, ReadResult]:
        """Sends a request message built by the caller; see
        :meth:`safewrite_client.Client.send`."""
        if isinstance(request, writer_pb2.TransactBegin):
            if fn is None:
                raise TypeError("send() of a TransactBegin needs fn")
            return await self._transact(request, fn, timeout)
        return await self._unary(core.raw_call(request, timeout))

    async def _unary(self, call: "core.Unary[core.T]") -> "core.T":
        method = getattr(self._stub(), call.method)
        try:
            response = await method(call.request, **self._settings.call_kwargs(call.timeout))
        except grpc.RpcError as err:
            raise call.error(err) from None
        return call.answer(response)

    async def _transact(
        self, begin: writer_pb2.TransactBegin, fn: core.TransactFn, timeout: Optional[float]
    ) -> Result:
        tx = core.Transaction(begin)
        call = self._stub().Transact(**self._settings.call_kwargs(timeout))
        try:
            await call.write(tx.first)
            while True:
                response = await call.read()
                if response is grpc.aio.EOF:
                    tx.ended()
                step = tx.receive(response)
                if isinstance(step, Result):
                    return step
                try:
                    returned = fn(step.object)
                    if inspect.isawaitable(returned):
                        returned = await returned
                    message = tx.answer(step, returned)
                except Exception as exc:
                    message = tx.fail(step, exc)
                await call.write(message)
        except grpc.RpcError as err:
            tx.failed(err)
        finally:
            if not call.done():
                call.cancel()
