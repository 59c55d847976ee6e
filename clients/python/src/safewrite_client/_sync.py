"""The blocking client: moves the messages :mod:`._core` makes over a gRPC channel."""

from __future__ import annotations

import contextvars
import queue
import threading
from typing import Any, Callable, Iterator, List, Optional, Sequence, Tuple, TypeVar, Union, overload

import grpc

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


class Client:
    """A blocking client of the safewrite sidecar.

    Each call sends *what* to change; the sidecar reads the fresh object, applies the
    change, writes with the resourceVersion it read and retries on conflict, within the
    call's timeout. A successful call returns a :class:`~safewrite_client.Result`; a
    failed one raises a :class:`~safewrite_client.SafewriteError` subclass.

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
            once with :class:`~safewrite_client.UnavailableError` (within the call's
            timeout).
        channel: Use this channel instead of opening one; the client does not close it.
            A channel to a unix socket needs the options of
            :func:`~safewrite_client.channel_options`.
        propagate_trace: Send the caller's current OpenTelemetry context with every call
            (W3C ``traceparent``/``tracestate`` metadata, through the global
            propagator), so the sidecar's span joins the caller's trace. Needs
            ``opentelemetry-api`` (the ``otel`` extra); without it nothing extra is
            sent. ``False`` turns it off.
        token: The sidecar's shared token (the content of its ``--token-file``), sent
            with every call as gRPC metadata ``authorization: Bearer <token>``, without
            surrounding whitespace (as the sidecar reads its file). ``None`` sends no
            token. The token is fixed for the client's life: after the sidecar's token
            is rotated, make a new client.

    Raises:
        ValueError: ``token`` is empty or only whitespace, or holds a character gRPC
            metadata cannot carry (anything but printable ASCII and spaces, e.g. a
            newline inside it).
        TypeError: ``token`` is not a str.
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
        token: Optional[str] = None,
    ) -> None:
        self._settings = core.Settings(
            target, credentials, options, timeout, wait_for_ready, propagate_trace, token
        )
        self.target = self._settings.target
        self._owns_channel = channel is None
        if channel is None:
            s = self._settings
            if s.credentials is None:
                channel = grpc.insecure_channel(s.target, options=s.options)
            else:
                channel = grpc.secure_channel(s.target, s.credentials, options=s.options)
        self._channel = channel
        self._stub = writer_pb2_grpc.WriterServiceStub(channel)
        self._probe = skew.Probe()

    def close(self) -> None:
        """Closes the client's channel (unless it was given one)."""
        if self._owns_channel:
            self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @core.parameters_of(core.update)
    def update(self, *args: Any, **kwargs: Any) -> Result:
        """``update(ref, mutation, *, preconditions=None, retry_policy=None,
        field_manager=None, dry_run=False, write_alone=False, create_if_missing=None,
        idempotency_key=None, fence=None, timeout=None)``: changes an object's main
        resource, retried on conflict (``UpdateWithRetry``).

        ``mutation`` is the change, a :class:`~safewrite_client.Mutation` made by
        :func:`~safewrite_client.cel`, :func:`~safewrite_client.merge_patch`,
        :func:`~safewrite_client.json_patch`, :func:`~safewrite_client.apply`,
        :func:`~safewrite_client.set_conditions`, :func:`~safewrite_client.add_finalizer`,
        :func:`~safewrite_client.ensure_owner`,
        :func:`~safewrite_client.upsert_list_entry`, ... (each checks its input when it
        is made); it is re-applied to the fresh object on every attempt, so
        read-dependent changes are never lost. A mutation that changes nothing writes
        nothing and returns ``Outcome.UNCHANGED``; a finalizer removal that finds the
        object gone, or lets the API server delete it, returns ``Outcome.GONE``
        (``result.gone``). The status of a kind with a status subresource is never
        changed: use :meth:`patch_status`.

        Args:
            ref: The object to change.
            mutation: The change (positional, or ``mutation=``).
            preconditions: Checked on the fresh object before every write.
            retry_policy: Bounds the retry loop of this call.
            field_manager: The field manager of the write; default ``"safewrite"``.
            dry_run: Admit the write without persisting it.
            write_alone: Never commit this write together with concurrent writes to
                the same object (group commit).
            create_if_missing: The object to create (a dict or JSON text) when the
                target does not exist; the mutation is applied to it first, and
                apiVersion, kind, name and namespace default to the target's.
            idempotency_key: Makes the change exactly-once across lost answers: the
                sidecar records it on the object in the same write, and a later attempt
                or call that finds it writes nothing and returns ``Outcome.UPDATED``
                with ``already_applied`` set. One per intended change (e.g.
                ``str(uuid.uuid4())``), 1 to 128 characters of ``[A-Za-z0-9._:-]``;
                not with ``apply``.
            fence: Makes the write one a deposed leader cannot make (see
                :class:`~safewrite_client.Fence`, whose epoch comes from the ``Lead``
                RPC): refused with FencedError or NotLeaderError, never retried.
            timeout: Seconds for the whole call, every attempt and backoff; default the
                client's.

        The parameters are declared once, by ``safewrite_client._core.update``, for
        this method and :meth:`AsyncClient.update <safewrite_client.AsyncClient.update>`.

        Raises:
            SafewriteError: a subclass per failure, e.g. ConflictError, InvalidError,
                PreconditionFailedError (ObjectDeletingError, AlreadyOwnedError,
                FencedError, NotLeaderError),
                NotFoundError, PermissionDeniedError, OutcomeUnknownError.
            ValueError: an empty ``idempotency_key``.
            TypeError: a value of the wrong type, e.g. a mutation that is not a
                :class:`~safewrite_client.Mutation` (an unknown keyword is refused by
                Python itself).
        """
        return self._unary(core.update(*args, **kwargs))

    @core.parameters_of(core.patch_status)
    def patch_status(self, *args: Any, **kwargs: Any) -> Result:
        """``patch_status(ref, mutation, *, preconditions=None, retry_policy=None,
        field_manager=None, dry_run=False, write_alone=False, fence=None,
        timeout=None)``: changes an object's status subresource, retried on conflict
        (``PatchStatus``): :meth:`update`'s write with the status subresource set.

        Takes the parameters of :meth:`update` but ``create_if_missing`` (a status
        cannot be created) and ``idempotency_key`` (a status write cannot record it).
        The mutation sees the whole fresh object; only its effect on ``status`` is
        written. Raises as :meth:`update`.
        """
        return self._unary(core.patch_status(*args, **kwargs))

    @core.parameters_of(core.transact)
    def transact(self, *args: Any, **kwargs: Any) -> Result:
        """``transact(ref, fn, *, status=False, preconditions=None, retry_policy=None,
        field_manager=None, dry_run=False, create_if_missing=None,
        idempotency_key=None, fence=None, timeout=None)``: runs safewrite's retry loop
        with ``fn`` as the mutation (``Transact``).

        ``fn`` receives the fresh object as a dict and returns the whole new object,
        or changes the dict in place and returns None (or returns a
        :class:`~safewrite_client.Mutation`, e.g. ``sw.add_finalizer(...)``). safewrite
        writes it with the resourceVersion it read; on a conflict ``fn`` is called
        again with the next fresh object, so it must compute its change from the
        object it is given. Returning the object unchanged writes nothing
        (``Outcome.UNCHANGED``).

        Raise :class:`~safewrite_client.Abort` to end without writing
        (``Outcome.ABORTED``). Any other exception aborts the transaction and
        propagates. With ``idempotency_key`` already recorded on the object, ``fn`` is
        not called and the result has ``already_applied`` set. A transaction always
        writes alone.

        Args:
            status: Write the status subresource instead of the main resource (then
                with no ``idempotency_key``: the sidecar refuses it).
            preconditions, retry_policy, field_manager, dry_run, create_if_missing,
                idempotency_key, fence, timeout: As for :meth:`update`.

        Raises:
            SafewriteError: a subclass per failure, as for :meth:`update`.
        """
        call = core.transact(*args, **kwargs)
        return self._transact(call.begin, call.fn, call.timeout)

    @core.parameters_of(core.get)
    def get(self, *args: Any, **kwargs: Any) -> ReadResult:
        """Reads an object at least as new as a write of yours (``Get``): read your own
        writes, e.g. when an informer's cache may still hold the object from before it.

        The answer is that state or a newer one, never an older one: the sidecar's
        remembered copy when it is at or past it (``remembered``, no request to the API
        server), else one "not older than" read of the API server (a GET with
        ``resourceVersion`` set to the minimum, served from its watch cache). Versions
        compare as Kubernetes defines them (KEP-5504: digits without a leading zero,
        the shorter older); a minimum that is not well formed is never compared and
        read live. Without a minimum (or with an empty one) it reads live. A minimum
        the API server has not reached within its wait (about 3 s) is refused, never
        answered: :class:`~safewrite_client.UnavailableError` with reason
        ``RESOURCE_VERSION_TOO_LARGE`` and ``retry_delay`` the server's delay
        (:class:`~safewrite_client.DeadlineExceededError` when ``timeout`` comes
        first); the sidecar does not retry it. A get writes nothing, so whenever a
        failure may be retried it may be sent again as it is (its error's
        ``idempotent`` is true).

        Args:
            ref: The object to read.
            at_least: What the answer must be at least as new as: the
                :class:`~safewrite_client.Result` of your own write (its
                ``resource_version``), a :class:`~safewrite_client.ReadResult` of an
                earlier get, or an object (a dict or a kopf body: its
                ``metadata.resourceVersion``).
            min_resource_version: The same, as a resourceVersion string; not with
                ``at_least``.
            timeout: Seconds for the call; default the client's.

        Raises:
            SafewriteError: a subclass per failure, as for :meth:`update`, e.g.
                NotFoundError (the object does not exist), PermissionDeniedError (the
                sidecar's policy refuses the read: Secrets unless allowed),
                InvalidError (a malformed ``min_resource_version``, or one past what
                the API server can represent), UnavailableError (reason
                ``RESOURCE_VERSION_TOO_LARGE``: a minimum the API server has not
                reached).
            ValueError: both ``at_least`` and ``min_resource_version``.
            TypeError: a value of the wrong type.
        """
        return self._unary(core.get(*args, **kwargs))

    @core.parameters_of(core.delete)
    def delete(self, *args: Any, **kwargs: Any) -> DeleteResult:
        """Deletes an object, conditioned on the object it decided on (``Delete``).

        Every attempt reads the object live, checks ``preconditions`` on it, and sends
        one DELETE conditioned on that object's uid and resourceVersion, so the API
        server deletes exactly the object the decision was made on; a writer that
        changed it in between makes the sidecar read and decide again (retried as
        writes are). An object that is not there is an answer, not an error:
        ``DeleteOutcome.GONE``. So the same delete is always safe to send again, also
        after a timeout (its error's ``idempotent`` is true).

        Args:
            ref: The object to delete.
            preconditions: Checked on the fresh object before every DELETE: ``uid``
                (the object you mean, not one recreated under its name),
                ``resource_version`` (strict: a mismatch is not retried), ``cel``.
            propagation_policy: What happens to the object's dependents
                (:class:`~safewrite_client.PropagationPolicy`); None: the API server's
                default for the kind.
            dry_run: Admit the delete without persisting it.
            retry_policy: Bounds the retry loop of this call.
            fence: Makes the delete one a deposed leader cannot make (as for
                :meth:`update`); without it, the current fence
                (:func:`~safewrite_client.fenced`, or :meth:`Leadership.run`'s), if any.
            timeout: Seconds for the whole call; default the client's.

        Returns:
            A :class:`~safewrite_client.DeleteResult`: ``DELETED``, ``DELETING`` (it has
            finalizers: it stays, with a ``deletion_timestamp``, until they are removed)
            or ``GONE``.

        Raises:
            SafewriteError: a subclass per failure: PreconditionFailedError (a
                precondition false on the fresh object, which ``current_object``
                holds; nothing deleted), ConflictError (reason
                ``RESOURCE_VERSION_MISMATCH``), NotLeaderError and FencedError (with a
                fence), PermissionDeniedError (the sidecar's policy does not allow
                ``delete`` of the target), NotFoundError (reason ``UNKNOWN_KIND``), ...
            TypeError: a value of the wrong type.
        """
        return self._unary(core.delete(*args, **kwargs))

    @core.parameters_of(_lead.lead)
    def lead(self, *args: Any, **kwargs: Any) -> "Leadership":
        """Campaigns for leadership through the ``coordination.k8s.io/v1`` Lease
        ``namespace/name`` (``Lead``), the way client-go's leader election does: use the
        result as ``with client.lead(...) as leadership:``, iterate its
        :class:`~safewrite_client.LeadEvent` s, read its current
        :attr:`~Leadership.fence`, or :meth:`~Leadership.run` code only while leading.
        Leaving the block releases the Lease at once.

        Args:
            namespace: The Lease's namespace (a DNS-1123 label).
            name: The Lease's name (a DNS-1123 subdomain).
            identity: The Lease's holder identity while leading, e.g. the pod's name;
                None: the sidecar makes one unique to this stream. Two campaigns given
                the same identity never both lead.
            lease_duration: How long the Lease lasts after its last renewal, as others
                see it: whole seconds (or a ``timedelta``); default 15 s.
            renew_deadline: How long the leader leads without a successful renewal;
                default 10 s. Must be shorter than ``lease_duration`` and longer than
                1.2 ``retry_period``.
            retry_period: How often the sidecar tries to acquire or renew; default 2 s.

        Nothing is sent until the leadership is entered (or started); the sidecar then
        checks the values and refuses them with InvalidError naming the field.

        Raises:
            TypeError: a value of the wrong type.
        """
        return Leadership(self, _lead.lead(*args, **kwargs))

    def run_while_leading(
        self,
        namespace: str,
        name: str,
        work: Callable[[Fence, threading.Event], T],
        *,
        identity: Optional[str] = None,
        lease_duration: Optional[Seconds] = None,
        renew_deadline: Optional[Seconds] = None,
        retry_period: Optional[Seconds] = None,
    ) -> T:
        """Campaigns for the Lease ``namespace/name`` (as :meth:`lead`) and runs
        ``work(fence, stop)`` only while leading: see :meth:`Leadership.run`. Returns
        what ``work`` returns (then the Lease is released).

        Raises:
            SafewriteError: the stream failed (e.g. InvalidError naming the field,
                PermissionDeniedError, UnavailableError), or the sidecar ended it.
            Exception: what ``work`` raised (but NotLeaderError and FencedError).
        """
        with self.lead(
            namespace, name, identity=identity, lease_duration=lease_duration,
            renew_deadline=renew_deadline, retry_period=retry_period,
        ) as leadership:
            return leadership.run(work)

    @overload
    def send(
        self, request: writer_pb2.GetRequest, fn: None = None, *, timeout: Optional[float] = None
    ) -> ReadResult: ...

    @overload
    def send(
        self,
        request: Union[
            writer_pb2.UpdateWithRetryRequest, writer_pb2.PatchStatusRequest, writer_pb2.TransactBegin
        ],
        fn: Optional[core.TransactFn] = None,
        *,
        timeout: Optional[float] = None,
    ) -> Result: ...

    @overload
    def send(
        self, request: writer_pb2.DeleteRequest, fn: None = None, *, timeout: Optional[float] = None
    ) -> DeleteResult: ...

    def send(
        self, request: Any, fn: Optional[core.TransactFn] = None, *, timeout: Optional[float] = None
    ) -> Union[Result, ReadResult, DeleteResult]:
        """Sends a request message built by the caller: an ``UpdateWithRetryRequest``
        or ``PatchStatusRequest`` of :mod:`safewrite_client.v1.writer_pb2`, or a
        ``TransactBegin`` with the transaction function ``fn`` (each answered with a
        :class:`~safewrite_client.Result`), a ``GetRequest`` (answered with a
        :class:`~safewrite_client.ReadResult`), or a ``DeleteRequest`` (a
        :class:`~safewrite_client.DeleteResult`). The message is sent as built: no
        current fence is added. Raises as :meth:`update`."""
        if isinstance(request, writer_pb2.TransactBegin):
            if fn is None:
                raise TypeError("send() of a TransactBegin needs fn")
            return self._transact(request, fn, timeout)
        return self._unary(core.raw_call(request, timeout))

    def _check(
        self, method: str, request: Any, timeout: Optional[float], *, idempotent: bool = False
    ) -> None:
        """Refuses, before anything is sent, a call of ``method`` with ``request`` that
        needs an RPC, a field or an enum value the sidecar lacks (see
        :mod:`safewrite_client._skew`): raises
        :class:`~safewrite_client.UnknownFieldError`. The sidecar's ``Capabilities`` is
        asked the first time a call needs something added after 0.1.0, within the
        call's timeout; when its features cannot be learned (``Capabilities`` fails
        otherwise than UNIMPLEMENTED, or the timeout runs out while another thread
        asks), such a call is not sent either: it raises the client's error for that
        status (e.g. :class:`~safewrite_client.UnavailableError`), and the next call
        asks again."""
        uses = skew.SINCE.uses(method, request)
        if not uses:
            return
        kwargs = self._settings.call_kwargs(timeout)
        learned = self._probe.features(lambda: self._capabilities(kwargs), kwargs["timeout"])
        refusal = skew.refusal(uses, learned, idempotent=idempotent)
        if refusal is not None:
            raise refusal

    def _capabilities(self, kwargs: Any) -> skew.Learned:
        try:
            response = self._stub.Capabilities(writer_pb2.CapabilitiesRequest(), **kwargs)
        except Exception as err:  # a failed status, or none (e.g. a closed channel)
            return skew.answered(err)
        return skew.answered(None, response)

    def _unary(self, call: "core.Unary[core.T]") -> "core.T":
        self._check(call.method, call.request, call.timeout, idempotent=call.idempotent)
        method = getattr(self._stub, call.method)
        try:
            response = method(call.request, **self._settings.call_kwargs(call.timeout))
        except grpc.RpcError as err:
            raise call.error(err) from None
        return call.answer(response)

    def _transact(
        self, begin: writer_pb2.TransactBegin, fn: core.TransactFn, timeout: Optional[float]
    ) -> Result:
        tx = core.Transaction(begin)
        self._check("Transact", tx.first, timeout, idempotent=tx.idempotent)
        outbox: "queue.Queue[Optional[writer_pb2.TransactRequest]]" = queue.Queue()
        outbox.put(tx.first)

        def requests() -> Iterator[writer_pb2.TransactRequest]:
            while True:
                message = outbox.get()
                if message is None:
                    return
                yield message

        call = self._stub.Transact(requests(), **self._settings.call_kwargs(timeout))
        try:
            for response in call:
                step = tx.receive(response)
                if isinstance(step, Result):
                    return step
                try:
                    message = tx.answer(step, fn(step.object))
                except Exception as exc:
                    message = tx.fail(step, exc)
                else:
                    # A proposal the sidecar cannot read is not sent: raising cancels
                    # the stream, and the sidecar writes nothing after that point.
                    self._check("Transact", message, timeout, idempotent=tx.idempotent)
                outbox.put(message)
            tx.ended()
        except grpc.RpcError as err:
            tx.failed(err)
        finally:
            outbox.put(None)
            call.cancel()


T = TypeVar("T")


class Leadership:
    """A campaign for a Lease through the sidecar's ``Lead`` stream, made by
    :meth:`Client.lead`: a context manager, and an iterator of its
    :class:`~safewrite_client.LeadEvent` s.

    Entering it (or :meth:`start`) opens the stream and waits until the sidecar accepts
    it, so a refused request raises there; a thread then reads the events and keeps
    :attr:`fence` current. Leaving it (or :meth:`close`) ends the stream, and the
    sidecar releases the Lease at once (if this campaign holds it), so another candidate
    leads within its retry period rather than a lease duration. Safe to share between
    threads; one thread iterates its events (each event is delivered once).

    The stream has no deadline (not the client's default timeout): it lasts until it is
    closed, the sidecar ends it, or it fails.
    """

    def __init__(self, client: Client, request: writer_pb2.LeadRequest) -> None:
        self._client = client
        self._campaign = Campaign(request)
        self._call: Any = None
        self._reader: Optional[threading.Thread] = None
        self._events: "queue.Queue[Optional[LeadEvent]]" = queue.Queue()
        self._changed = threading.Condition()
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

    def start(self) -> "Leadership":
        """Opens the stream (once) and waits until the sidecar accepts it.

        Raises:
            InvalidError: the sidecar refused the request; ``field_violations`` names
                the field (e.g. ``name``, ``renew_deadline``).
            PermissionDeniedError: the sidecar's policy does not allow the ``lead``
                operation on ``coordination.k8s.io/Lease`` in the namespace.
            UnavailableError, UnauthenticatedError, ...: the call failed.
        """
        with self._changed:
            if self._call is not None:
                return self
            self._client._check("Lead", self._campaign.request, None)
            kwargs = self._client._settings.call_kwargs(None)
            kwargs["timeout"] = None
            self._call = self._client._stub.Lead(self._campaign.request, **kwargs)
        # The sidecar sends its headers once it accepted the request; a refusal ends the
        # call without any.
        self._call.initial_metadata()
        if self._call.done() and self._call.code() != grpc.StatusCode.OK:
            self._finish(self._call)
            raise from_rpc_error(self._call) from None
        self._reader = threading.Thread(target=self._read, name="safewrite-lead", daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        failure: Optional[grpc.RpcError] = None
        try:
            for response in self._call:
                event = self._campaign.receive(response)
                with self._changed:
                    self._events.put(event)
                    self._changed.notify_all()
        except grpc.RpcError as err:
            failure = err
        finally:
            self._finish(failure)

    def _finish(self, failure: Optional[grpc.RpcError]) -> None:
        with self._changed:
            self._campaign.end(failure, closed=self._closed)
            self._events.put(None)
            self._changed.notify_all()

    def close(self) -> None:
        """Ends the stream: the sidecar releases the Lease if this campaign holds it.
        Waiting on the leadership raises :class:`~safewrite_client.CancelledError` after."""
        with self._changed:
            self._closed = True
            call = self._call
        if call is not None:
            call.cancel()
        if self._reader is not None and self._reader is not threading.current_thread():
            self._reader.join()

    def __enter__(self) -> "Leadership":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __iter__(self) -> Iterator[LeadEvent]:
        return self

    def __next__(self) -> LeadEvent:
        """The next event. The iteration ends after the stream ended by itself (after a
        RELEASED event) or was closed.

        Raises:
            SafewriteError: the stream failed.
        """
        self.start()
        event = self._events.get()
        if event is None:
            self._events.put(None)  # ended for every later call too
            if self._campaign.failed and self._campaign.ended is not None:
                raise self._campaign.ended
            raise StopIteration
        return event

    @overload
    def wait_leading(self, *, newer_than: Optional[Fence] = None, timeout: None = None) -> Fence: ...

    @overload
    def wait_leading(
        self, *, newer_than: Optional[Fence] = None, timeout: float
    ) -> Optional[Fence]: ...

    def wait_leading(
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
        self.start()
        with self._changed:
            found: List[Fence] = []

            def ready() -> bool:
                if self._campaign.ended is not None:
                    return True
                fence = self._campaign.fence
                if fence is not None and newer(fence, newer_than):
                    found.append(fence)
                    return True
                return False

            if not self._changed.wait_for(ready, timeout):
                return None
            if found:
                return found[0]
            assert self._campaign.ended is not None
            raise self._campaign.ended

    def run(self, work: Callable[[Fence, threading.Event], T]) -> T:
        """Runs ``work(fence, stop)`` only while leading, in a thread of its own: starts
        it on a LEADING event; on the next event that ends that leadership
        (NOT_LEADING), or when the stream ends, sets ``stop`` (a
        :class:`threading.Event`) and waits for ``work`` to return (a thread cannot be
        cancelled: ``work`` checks ``stop`` between steps); starts it again on the next
        LEADING event, with that leadership's fence.

        Inside ``work``, every write of either client made without ``fence=`` carries
        the term's fence (:func:`~safewrite_client.fenced`); an explicit ``fence=``
        wins. A write the sidecar refuses because this caller no longer leads
        (NotLeaderError, FencedError, raised out of ``work``) ends the term as a lost
        leadership does. What a stopped term returns is dropped.

        Returns:
            What ``work`` returned, when it returned while leading.

        Raises:
            SafewriteError: the stream failed or ended (see :meth:`wait_leading`).
            Exception: what ``work`` raised, but NotLeaderError and FencedError.
        """
        done: Optional[Fence] = None
        while True:
            fence = self.wait_leading(newer_than=done)
            stop = threading.Event()
            outcome: List[Any] = []

            def term(fence: Fence = fence, stop: threading.Event = stop) -> None:
                try:
                    outcome.append((True, work(fence, stop)))
                except BaseException as exc:  # handed to run's thread
                    outcome.append((False, exc))
                finally:
                    with self._changed:
                        self._changed.notify_all()

            token = _FENCE.set(fence)
            try:
                context = contextvars.copy_context()
            finally:
                _FENCE.reset(token)
            thread = threading.Thread(target=context.run, args=(term,), name="safewrite-lead-work")
            thread.start()
            try:
                with self._changed:
                    self._changed.wait_for(lambda: bool(outcome) or self._campaign.fence != fence)
                    by_itself = bool(outcome)  # returned (or raised) while leading
            finally:
                stop.set()
                thread.join()
            ok, value = outcome[0]
            if not ok and not isinstance(value, (NotLeaderError, FencedError)):
                raise value
            if ok and by_itself:
                return value  # type: ignore[no-any-return]
            done = fence
