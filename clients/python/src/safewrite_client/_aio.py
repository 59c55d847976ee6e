"""The asyncio client: moves the messages :mod:`._core` makes over gRPC asyncio
channels, one per event loop, each made lazily on the loop that first uses it."""

from __future__ import annotations

import asyncio
import inspect
import threading
from typing import (
    Any,
    Awaitable,
    Callable,
    Dict,
    List,
    Optional,
    Sequence,
    Tuple,
    TypeVar,
    Union,
    overload,
)

import grpc
import grpc.aio

from . import _core as core
from . import _lead
from . import _skew as skew
from ._errors import FencedError, NotLeaderError, from_rpc_error
from ._lead import _FENCE, Campaign, Seconds, newer
from ._types import (
    DeleteResult,
    Fence,
    LeadEvent,
    ListEntry,
    ReadResult,
    Result,
)
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
        self._given = (
            (channel, writer_pb2_grpc.WriterServiceStub(channel), skew.AsyncProbe()) if channel else None
        )
        self._lock = threading.Lock()
        # By loop: its channel, the stub on it, and what is known of the sidecar's
        # features through it.
        self._channels: Dict[asyncio.AbstractEventLoop, Tuple[Any, Any, skew.AsyncProbe]] = {}

    def _stub(self) -> Any:
        """The stub on the running loop's channel, made on first use."""
        return self._entry()[1]

    def _entry(self) -> Tuple[Any, Any, skew.AsyncProbe]:
        """The running loop's channel, stub and probe, made on first use."""
        if self._given is not None:
            return self._given
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
                entry = (channel, writer_pb2_grpc.WriterServiceStub(channel), skew.AsyncProbe())
                self._channels[loop] = entry
        return entry

    async def close(self) -> None:
        """Closes the channel of the running loop, and asks the loops of any other
        channel this client made to close theirs (unless it was given a channel)."""
        running = asyncio.get_running_loop()
        with self._lock:
            channels, self._channels = self._channels, {}
        for loop, (channel, _, _) in channels.items():
            if loop is running:
                await channel.close()
            elif not loop.is_closed():
                asyncio.run_coroutine_threadsafe(channel.close(), loop)

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    @core.parameters_of(core.update)
    async def update(self, *args: Any, **kwargs: Any) -> Result:
        """``update(ref, mutation, *, ...)``: changes an object's main resource,
        retried on conflict (``UpdateWithRetry``); see
        :meth:`safewrite_client.Client.update`, whose parameters it takes (declared
        once, by ``safewrite_client._core.update``)."""
        return await self._unary(core.update(*args, **kwargs))

    @core.parameters_of(core.patch_status)
    async def patch_status(self, *args: Any, **kwargs: Any) -> Result:
        """``patch_status(ref, mutation, *, ...)``: changes an object's status
        subresource, retried on conflict (``PatchStatus``); see
        :meth:`safewrite_client.Client.patch_status`."""
        return await self._unary(core.patch_status(*args, **kwargs))

    @core.parameters_of(core.transact)
    async def transact(self, *args: Any, **kwargs: Any) -> Result:
        """``transact(ref, fn, *, status=False, ...)``: runs safewrite's retry loop
        with ``fn`` as the mutation; see :meth:`safewrite_client.Client.transact`.
        ``fn`` may be a plain function or a coroutine function. Cancelling the task
        cancels the stream, and safewrite writes nothing after that point."""
        call = core.transact(*args, **kwargs)
        return await self._transact(call.begin, call.fn, call.timeout)

    @core.parameters_of(core.get)
    async def get(self, *args: Any, **kwargs: Any) -> ReadResult:
        """Reads an object at least as new as a write of yours (``at_least=`` its
        result, or ``min_resource_version=``); see
        :meth:`safewrite_client.Client.get`."""
        return await self._unary(core.get(*args, **kwargs))

    @core.parameters_of(core.delete)
    async def delete(self, *args: Any, **kwargs: Any) -> DeleteResult:
        """Deletes an object, conditioned on the object it decided on (``Delete``); see
        :meth:`safewrite_client.Client.delete`."""
        return await self._unary(core.delete(*args, **kwargs))

    @core.parameters_of(_lead.lead)
    def lead(self, *args: Any, **kwargs: Any) -> "AsyncLeadership":
        """Campaigns for leadership through the Lease ``namespace/name`` (``Lead``); see
        :meth:`safewrite_client.Client.lead`. Use the result as ``async with
        client.lead(...) as leadership:``; leaving the block releases the Lease."""
        return AsyncLeadership(self, _lead.lead(*args, **kwargs))

    async def run_while_leading(
        self,
        namespace: str,
        name: str,
        work: Callable[[Fence], Awaitable[T]],
        *,
        identity: Optional[str] = None,
        lease_duration: Optional[Seconds] = None,
        renew_deadline: Optional[Seconds] = None,
        retry_period: Optional[Seconds] = None,
    ) -> T:
        """Campaigns for the Lease ``namespace/name`` and runs ``await work(fence)`` only
        while leading: see :meth:`AsyncLeadership.run`. Returns what ``work`` returns
        (then the Lease is released).

        Raises:
            SafewriteError: the stream failed (e.g. InvalidError naming the field,
                PermissionDeniedError, UnavailableError), or the sidecar ended it.
            Exception: what ``work`` raised (but NotLeaderError and FencedError).
        """
        async with self.lead(
            namespace, name, identity=identity, lease_duration=lease_duration,
            renew_deadline=renew_deadline, retry_period=retry_period,
        ) as leadership:
            return await leadership.run(work)

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

    @overload
    async def send(
        self, request: writer_pb2.DeleteRequest, fn: None = None, *, timeout: Optional[float] = None
    ) -> DeleteResult: ...

    async def send(
        self, request: Any, fn: Optional[core.TransactFn] = None, *, timeout: Optional[float] = None
    ) -> Union[Result, ReadResult, DeleteResult]:
        """Sends a request message built by the caller; see
        :meth:`safewrite_client.Client.send`."""
        if isinstance(request, writer_pb2.TransactBegin):
            if fn is None:
                raise TypeError("send() of a TransactBegin needs fn")
            return await self._transact(request, fn, timeout)
        return await self._unary(core.raw_call(request, timeout))

    async def _check(
        self, method: str, request: Any, timeout: Optional[float], *, idempotent: bool = False
    ) -> None:
        """Refuses, before anything is sent, a call that needs what the sidecar lacks, or
        whose sidecar's features cannot be learned; see
        :meth:`safewrite_client.Client._check`."""
        uses = skew.SINCE.uses(method, request)
        if not uses:
            return
        _, stub, probe = self._entry()
        kwargs = self._settings.call_kwargs(timeout)

        async def ask() -> skew.Learned:
            try:
                response = await stub.Capabilities(writer_pb2.CapabilitiesRequest(), **kwargs)
            except Exception as err:  # a failed status, or none (e.g. a closed channel)
                return skew.answered(err)
            return skew.answered(None, response)

        learned = await probe.features(ask, kwargs["timeout"])
        refusal = skew.refusal(uses, learned, idempotent=idempotent)
        if refusal is not None:
            raise refusal

    async def _unary(self, call: "core.Unary[core.T]") -> "core.T":
        await self._check(call.method, call.request, call.timeout, idempotent=call.idempotent)
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
        await self._check("Transact", tx.first, timeout, idempotent=tx.idempotent)
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
                else:
                    # A proposal the sidecar cannot read is not sent: raising cancels
                    # the stream, and the sidecar writes nothing after that point.
                    await self._check("Transact", message, timeout, idempotent=tx.idempotent)
                await call.write(message)
        except grpc.RpcError as err:
            tx.failed(err)
        finally:
            if not call.done():
                call.cancel()


T = TypeVar("T")


class AsyncLeadership:
    """A campaign for a Lease through the sidecar's ``Lead`` stream, made by
    :meth:`AsyncClient.lead`: an async context manager, and an async iterator of its
    :class:`~safewrite_client.LeadEvent` s.

    Entering it (or :meth:`start`) opens the stream and waits until the sidecar accepts
    it, so a refused request raises there; a background task then reads the events and
    keeps :attr:`fence` current. Leaving it (or :meth:`aclose`) ends the stream, and the
    sidecar releases the Lease at once (if this campaign holds it), so another candidate
    leads within its retry period rather than a lease duration. Use one per campaign,
    on one event loop; one task iterates its events (each event is delivered once).

    The stream has no deadline (not the client's default timeout): it lasts until it is
    closed, the sidecar ends it, or it fails.
    """

    def __init__(self, client: AsyncClient, request: writer_pb2.LeadRequest) -> None:
        self._client = client
        self._campaign = Campaign(request)
        self._call: Any = None
        self._reader: "Optional[asyncio.Task[None]]" = None
        self._events: "Optional[asyncio.Queue[Optional[LeadEvent]]]" = None
        self._changed: Optional[asyncio.Event] = None
        self._closed = False

    @property
    def fence(self) -> Optional[Fence]:
        """The :class:`~safewrite_client.Fence` of the current leadership (the Lease and
        the epoch of the last LEADING event), or None when not leading, before the
        first event, and once the stream ended."""
        return self._campaign.fence

    @property
    def leading(self) -> bool:
        """Whether the caller leads, as the last event said (see :attr:`fence`)."""
        return self.fence is not None

    @property
    def last(self) -> Optional[LeadEvent]:
        """The last event received, or None before the first."""
        return self._campaign.last

    async def start(self) -> "AsyncLeadership":
        """Opens the stream (once) and waits until the sidecar accepts it.

        Raises:
            InvalidError: the sidecar refused the request; ``field_violations`` names
                the field (e.g. ``name``, ``renew_deadline``).
            PermissionDeniedError: the sidecar's policy does not allow the ``lead``
                operation on ``coordination.k8s.io/Lease`` in the namespace.
            UnavailableError, UnauthenticatedError, ...: the call failed.
        """
        if self._call is not None:
            return self
        await self._client._check("Lead", self._campaign.request, None)
        if self._call is not None:  # started by another task meanwhile
            return self
        kwargs = self._client._settings.call_kwargs(None)
        kwargs["timeout"] = None
        self._call = self._client._stub().Lead(self._campaign.request, **kwargs)
        self._events = asyncio.Queue()
        self._changed = asyncio.Event()
        try:
            # The sidecar sends its headers once it accepted the request; a refusal
            # ends the call without any.
            await self._call.initial_metadata()
            if self._call.done():
                code = await self._call.code()
                if code != grpc.StatusCode.OK:
                    raise grpc.aio.AioRpcError(
                        code, await self._call.initial_metadata(), await self._call.trailing_metadata(),
                        await self._call.details(),
                    )
        except grpc.RpcError as err:
            self._campaign.end(err, closed=False)
            self._publish(None)
            raise from_rpc_error(err) from None
        self._reader = asyncio.ensure_future(self._read())
        return self

    async def _read(self) -> None:
        failure: Optional[grpc.RpcError] = None
        try:
            async for response in self._call:
                self._publish(self._campaign.receive(response))
        except grpc.RpcError as err:
            failure = err
        except asyncio.CancelledError:
            pass
        finally:
            self._campaign.end(failure, closed=self._closed)
            self._publish(None)

    def _publish(self, event: Optional[LeadEvent]) -> None:
        assert self._events is not None and self._changed is not None
        self._events.put_nowait(event)
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def aclose(self) -> None:
        """Ends the stream: the sidecar releases the Lease if this campaign holds it.
        Waiting on the leadership raises :class:`~safewrite_client.CancelledError` after."""
        self._closed = True
        if self._call is not None and not self._call.done():
            self._call.cancel()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)

    async def __aenter__(self) -> "AsyncLeadership":
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    def __aiter__(self) -> "AsyncLeadership":
        return self

    async def __anext__(self) -> LeadEvent:
        """The next event. The iteration ends after the stream ended by itself (after a
        RELEASED event) or was closed.

        Raises:
            SafewriteError: the stream failed.
        """
        await self.start()
        assert self._events is not None
        event = await self._events.get()
        if event is None:
            self._events.put_nowait(None)  # ended for every later call too
            if self._campaign.failed and self._campaign.ended is not None:
                raise self._campaign.ended
            raise StopAsyncIteration
        return event

    @overload
    async def wait_leading(self, *, newer_than: Optional[Fence] = None, timeout: None = None) -> Fence: ...

    @overload
    async def wait_leading(
        self, *, newer_than: Optional[Fence] = None, timeout: float
    ) -> Optional[Fence]: ...

    async def wait_leading(
        self, *, newer_than: Optional[Fence] = None, timeout: Optional[float] = None
    ) -> Optional[Fence]:
        """The fence of the current leadership, once the caller leads: at once when it
        leads now, else after the next LEADING event; None when ``timeout`` (seconds)
        passed first. With ``newer_than`` (a fence the caller was refused under, or
        whose term ended), only a later leadership counts.

        Raises:
            SafewriteError: the stream ended: failed (its error), ended by the sidecar
                (UnavailableError), or closed (CancelledError).
        """
        await self.start()
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            assert self._changed is not None
            changed = self._changed
            if self._campaign.ended is not None:
                raise self._campaign.ended
            fence = self._campaign.fence
            if fence is not None and newer(fence, newer_than):
                return fence
            if deadline is None:
                await changed.wait()
                continue
            left = deadline - loop.time()
            if left <= 0:
                return None
            try:
                await asyncio.wait_for(changed.wait(), left)
            except asyncio.TimeoutError:
                return None

    async def run(self, work: Callable[[Fence], Awaitable[T]]) -> T:
        """Runs ``await work(fence)`` only while leading: starts it in a task of its own
        on a LEADING event, cancels it on the next event that ends that leadership
        (NOT_LEADING) or when the stream ends, and starts it again on the next LEADING
        event, with that leadership's fence.

        Inside ``work`` (and the tasks it starts), every write of either client made
        without ``fence=`` carries the term's fence (:func:`~safewrite_client.fenced`);
        an explicit ``fence=`` wins. A write the sidecar refuses because this caller no
        longer leads (NotLeaderError, FencedError, raised out of ``work``) ends the term
        as a lost leadership does: the next LEADING event starts ``work`` again.

        A write cancelled in flight with its term may still land (under the old epoch,
        before the successor's first write to the object, never after it: that is what
        the fence guarantees) without its caller learning so: code that must count its
        answers shields its write (``asyncio.shield``) or checks :attr:`fence` between
        writes instead.

        Returns:
            What ``work`` returned, when it returned while leading.

        Raises:
            SafewriteError: the stream failed or ended (see :meth:`wait_leading`).
            Exception: what ``work`` raised, but NotLeaderError and FencedError.
        """
        done: Optional[Fence] = None
        while True:
            fence = await self.wait_leading(newer_than=done)
            token = _FENCE.set(fence)
            try:
                task = asyncio.ensure_future(work(fence))
            finally:
                _FENCE.reset(token)
            try:
                await self._until_lost(task, fence)
            except BaseException:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                raise
            if task.done():
                try:
                    return task.result()
                except (NotLeaderError, FencedError):
                    pass  # deposed before the event said so: wait for a later leadership
            else:
                task.cancel()
                try:
                    await task
                except (asyncio.CancelledError, NotLeaderError, FencedError):
                    pass
            done = fence

    async def _until_lost(self, task: "asyncio.Future[Any]", fence: Fence) -> None:
        """Returns when ``task`` is done or the leadership under ``fence`` ended."""
        while not task.done():
            assert self._changed is not None
            changed = self._changed
            if self._campaign.fence != fence:
                return
            waiter = asyncio.ensure_future(changed.wait())
            try:
                await asyncio.wait([task, waiter], return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiter.cancel()
