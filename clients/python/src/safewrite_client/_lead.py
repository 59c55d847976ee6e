"""Leadership without I/O, shared by both clients: the ``Lead`` request (whose
:func:`lead` declares the parameters of both clients' ``lead``), its events as
:class:`~safewrite_client.LeadEvent` s, the state a campaign keeps (the current fence),
and the fence of the running code (:func:`fenced`, a :class:`contextvars.ContextVar`
every write reads when it is given no ``fence=``)."""

from __future__ import annotations

import contextlib
import contextvars
import datetime
from typing import Iterator, Optional, Union

import grpc
from google.protobuf import duration_pb2

from ._errors import CancelledError, SafewriteError, UnavailableError, from_rpc_error
from ._types import Fence, LeadEvent, LeadState, NotLeadingReason
from .v1 import writer_pb2

#: A duration: seconds (an int or a float), or a :class:`datetime.timedelta`.
Seconds = Union[float, datetime.timedelta]

# The fence of the code running now: set by `fenced` (and by `run` for the work it
# starts), read by every write made without `fence=`.
_FENCE: "contextvars.ContextVar[Optional[Fence]]" = contextvars.ContextVar(
    "safewrite_fence", default=None
)


def current_fence() -> Optional[Fence]:
    """The fence writes made here carry when they are given no ``fence=``: the one of
    the innermost :func:`fenced` block, or of the work that
    :meth:`~safewrite_client.AsyncLeadership.run` started; None outside them."""
    return _FENCE.get()


@contextlib.contextmanager
def fenced(fence: Optional[Fence]) -> Iterator[Optional[Fence]]:
    """Within the block, every write of either client (``update``, ``patch_status``,
    ``transact``, ``delete``) that is given no ``fence=`` carries ``fence``; ``None``
    makes them unfenced again. An explicit ``fence=`` always wins. The fence is a
    :class:`contextvars.ContextVar`: asyncio tasks started inside the block inherit it,
    threads do not (run them with :func:`contextvars.copy_context`).

    Raises:
        TypeError: ``fence`` is not a :class:`~safewrite_client.Fence` or None.
    """
    if fence is not None and not isinstance(fence, Fence):
        raise TypeError("fence must be a safewrite_client.Fence or None, not %s" % type(fence).__name__)
    token = _FENCE.set(fence)
    try:
        yield fence
    finally:
        _FENCE.reset(token)


def effective_fence(given: Optional[Fence]) -> Optional[Fence]:
    """The fence a write carries: ``given``, else the current one."""
    return given if given is not None else _FENCE.get()


def fence_message(fence: Fence) -> writer_pb2.Fence:
    """The ``safewrite.v1.Fence`` of a :class:`~safewrite_client.Fence`.

    Raises:
        TypeError: ``fence`` is something else.
    """
    if not isinstance(fence, Fence):
        raise TypeError("fence must be a safewrite_client.Fence, not %s" % type(fence).__name__)
    return writer_pb2.Fence(
        lease_namespace=fence.lease_namespace, lease_name=fence.lease_name, epoch=fence.epoch
    )


def _duration(field: str, value: Optional[Seconds]) -> Optional[duration_pb2.Duration]:
    """A duration as sent: the sidecar checks its bounds and names the field."""
    if value is None:
        return None
    if isinstance(value, datetime.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise TypeError("%s must be seconds or a datetime.timedelta, not %s" % (field, type(value).__name__))
    nanos_total = int(round(seconds * 1e9))
    whole, nanos = divmod(abs(nanos_total), 10**9)
    sign = -1 if nanos_total < 0 else 1
    return duration_pb2.Duration(seconds=sign * whole, nanos=sign * nanos)


def lead(
    namespace: str,
    name: str,
    *,
    identity: Optional[str] = None,
    lease_duration: Optional[Seconds] = None,
    renew_deadline: Optional[Seconds] = None,
    retry_period: Optional[Seconds] = None,
) -> writer_pb2.LeadRequest:
    """The ``LeadRequest`` of :meth:`~safewrite_client.Client.lead` (see there for each
    parameter), whose parameters this declares for both clients, as
    :func:`safewrite_client._core.update` does for the writes. Only types are checked
    here; the sidecar checks the values (names, bounds, lease > renew > 1.2 x retry)
    and names the field it refuses.

    Raises:
        TypeError: a value of the wrong type.
    """
    for field, value in (("namespace", namespace), ("name", name)):
        if not isinstance(value, str):
            raise TypeError("%s must be a str, not %s" % (field, type(value).__name__))
    if identity is not None and not isinstance(identity, str):
        raise TypeError("identity must be a str, not %s" % type(identity).__name__)
    return writer_pb2.LeadRequest(
        namespace=namespace,
        name=name,
        identity=identity or "",
        lease_duration=_duration("lease_duration", lease_duration),
        renew_deadline=_duration("renew_deadline", renew_deadline),
        retry_period=_duration("retry_period", retry_period),
    )


class Campaign:
    """What one ``Lead`` stream's caller knows: the last event, hence the current fence,
    and how the stream ended. Both leadership classes keep one and only move messages."""

    def __init__(self, request: writer_pb2.LeadRequest) -> None:
        self.request = request
        self.last: Optional[LeadEvent] = None
        #: What waiting on the leadership raises once the stream ended (None while it
        #: runs): see :meth:`end`.
        self.ended: Optional[SafewriteError] = None
        #: True when the stream failed (an error status), not closed by the caller nor
        #: ended by the sidecar's release: iterating its events raises :attr:`ended`.
        self.failed = False

    def receive(self, response: writer_pb2.LeadResponse) -> LeadEvent:
        """The event of one response, which becomes the current state."""
        state = LeadState(response.state)
        fence = None
        if state == LeadState.LEADING:
            fence = Fence(self.request.namespace, self.request.name, response.epoch)
        self.last = LeadEvent(
            state=state,
            epoch=response.epoch,
            holder=response.holder,
            reason=NotLeadingReason(response.reason),
            identity=response.identity,
            fence=fence,
        )
        return self.last

    @property
    def fence(self) -> Optional[Fence]:
        """The fence of the current leadership; None when not leading (also once the
        stream ended)."""
        if self.ended is not None or self.last is None:
            return None
        return self.last.fence

    def end(self, err: Optional[grpc.RpcError], *, closed: bool) -> SafewriteError:
        """Records how the stream ended: ``err`` (decoded), or the caller closed it, or
        it ended by itself (the sidecar released the Lease: it is shutting down). The
        error is what waiting on the leadership raises from then on."""
        if self.ended is None:
            if closed:
                self.ended = CancelledError(
                    grpc.StatusCode.CANCELLED, "the leadership was closed: the Lease was released"
                )
            elif err is not None:
                self.ended = from_rpc_error(err)
                self.failed = True
            else:
                self.ended = UnavailableError(
                    grpc.StatusCode.UNAVAILABLE,
                    "the sidecar ended the Lead stream (it released the Lease: it is shutting "
                    "down); campaign again through a sidecar that serves",
                )
        return self.ended


def newer(fence: Optional[Fence], than: Optional[Fence]) -> bool:
    """Whether ``fence`` is a leadership to act under, after ``than`` (None: any)."""
    return fence is not None and (than is None or fence.epoch > than.epoch)
