"""Version skew (docs/compatibility.md), without I/O: what the contract added after
0.1.0, read once from the generated descriptor (the proto's ``method_since``, ``since``
and ``value_since`` options; this client keeps no table of its own), what a sidecar
said it has (its ``Capabilities``), and the refusal of a call that needs what the
sidecar lacks, before anything is sent: :class:`~safewrite_client.UnknownFieldError`,
FAILED_PRECONDITION with reason ``UNKNOWN_FIELD``, as the sidecar itself refuses a
field it does not know.

Both clients ask ``Capabilities`` once per channel, the first time a call needs
something added after 0.1.0 (a call of 0.1.0's features costs a walk over the set
fields of the few messages that may hold a ``since`` option, and no extra call). A
sidecar that answers UNIMPLEMENTED is older than 0.2.0 and has exactly what has no
such option. When the features cannot be learned (``Capabilities`` fails otherwise,
e.g. UNAVAILABLE or RESOURCE_EXHAUSTED, or the call's timeout runs out while another
call asks), the call fails closed: nothing is sent, and it raises the client's error
for that status (:func:`refusal`); nothing is kept, and the next call asks again. It
is not sent unchecked: a sidecar older than 0.2.0 that failed ``Capabilities`` only
for a moment would accept it, drop a field it does not know (a ``fence``) and write
unfenced."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Dict, FrozenSet, List, NamedTuple, Optional, Set, Tuple, Union

import grpc
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2

from ._errors import DOMAIN, SafewriteError, from_status, reason_name, status_of
from .v1 import writer_pb2

_SERVICE = writer_pb2.DESCRIPTOR.services_by_name["WriterService"]
_REPEATED = 3  # FieldDescriptor.LABEL_REPEATED


def _option(options: Any, extension: Any) -> str:
    return str(options.Extensions[extension])


def _is_repeated(field: Any) -> bool:
    repeated = getattr(field, "is_repeated", None)  # protobuf 6; `label` before it
    return bool(repeated) if repeated is not None else field.label == _REPEATED


class _Walked(NamedTuple):
    """A field the walk of a message looks at: one with a ``since`` option, or one that
    may hold a field or an enum value that has one."""

    since: str  # the field's own since option, or ""
    repeated: bool
    map_value: Any  # the value field of a map field's entry, else None
    enum: Any  # the enum of the field (or of the map's values) with value_since values
    message: Any  # the message type to walk into (or of the map's values), else None


class Use(NamedTuple):
    """One thing a request uses that was added after 0.1.0."""

    #: Its full name: ``safewrite.v1.WriterService/Delete``,
    #: ``safewrite.v1.WriteOptions.fence``,
    #: ``safewrite.v1.PropagationPolicy.PROPAGATION_POLICY_ORPHAN``.
    name: str
    #: The first version that has it.
    since: str
    #: It named as the sidecar's own refusal names it (field, message, number; or field,
    #: enum, value; or method).
    metadata: Tuple[Tuple[str, str], ...]


class SinceIndex:
    """What the contract added after 0.1.0, by the first version that has it."""

    def __init__(self, file: Any) -> None:
        #: By method name (``"Lead"``).
        self.methods: Dict[str, str] = {}
        #: By field full name.
        self.fields: Dict[str, str] = {}
        #: By enum full name, then value number.
        self.values: Dict[str, Dict[int, str]] = {}
        for service in file.services_by_name.values():
            for method in service.methods:
                since = _option(method.GetOptions(), writer_pb2.method_since)
                if since:
                    self.methods[method.name] = since
        #: The first version with rpc Capabilities: a sidecar that answers it
        #: UNIMPLEMENTED is older.
        self.capabilities = self.methods.get("Capabilities", "")

        messages: List[Any] = []

        def add_enums(enums: Any) -> None:
            for enum in enums:
                for value in enum.values:
                    since = _option(value.GetOptions(), writer_pb2.value_since)
                    if since:
                        self.values.setdefault(enum.full_name, {})[value.number] = since

        def add_messages(types: Any) -> None:
            for message in types:
                messages.append(message)
                for field in message.fields:
                    since = _option(field.GetOptions(), writer_pb2.since)
                    if since:
                        self.fields[field.full_name] = since
                add_enums(message.enum_types)
                add_messages(message.nested_types)

        add_enums(file.enum_types_by_name.values())
        add_messages(file.message_types_by_name.values())

        # A message reaches what one of its fields is or holds, until nothing changes:
        # at most one round per message.
        reaches: Set[str] = set()
        for _ in range(len(messages) + 1):
            grown = {
                m.full_name
                for m in messages
                if m.full_name not in reaches and any(self._reaches(f, reaches) for f in m.fields)
            }
            if not grown:
                break
            reaches |= grown
        #: By message full name: the fields its walk looks at, by name. Messages that
        #: cannot hold anything added after 0.1.0 are not walked at all.
        self.walked: Dict[str, Dict[str, _Walked]] = {}
        for message in messages:
            if message.full_name in reaches:
                self.walked[message.full_name] = {
                    f.name: self._walked(f, reaches) for f in message.fields if self._reaches(f, reaches)
                }

    def _reaches(self, field: Any, reaches: Set[str]) -> bool:
        if field.full_name in self.fields:
            return True
        value = _map_value(field) or field
        if value.enum_type is not None and value.enum_type.full_name in self.values:
            return True
        return value.message_type is not None and value.message_type.full_name in reaches

    def _walked(self, field: Any, reaches: Set[str]) -> _Walked:
        map_value = _map_value(field)
        value = map_value or field
        enum = value.enum_type if value.enum_type is not None and value.enum_type.full_name in self.values else None
        message = value.message_type if value.message_type is not None and value.message_type.full_name in reaches else None
        return _Walked(self.fields.get(field.full_name, ""), _is_repeated(field), map_value, enum, message)

    def uses(self, method: str, request: Any) -> List[Use]:
        """What a call of ``method`` (the stub's name, ``"Delete"``) with ``request``
        uses that was added after 0.1.0, in the order a walk over its set fields meets
        it; empty when nothing."""
        found: List[Use] = []
        since = self.methods.get(method)
        if since:
            name = "%s/%s" % (_SERVICE.full_name, method)
            found.append(Use(name, since, (("method", name),)))
        if request is not None:
            self._walk(request, "", found)
        return found

    def _walk(self, message: Any, path: str, found: List[Use]) -> None:
        walked = self.walked.get(message.DESCRIPTOR.full_name)
        if not walked:
            return
        for field, value in message.ListFields():
            how = walked.get(field.name)
            if how is None:
                continue
            if how.since:
                found.append(Use(field.full_name, how.since, (
                    ("field", path),
                    ("message", message.DESCRIPTOR.full_name),
                    ("number", str(field.number)),
                )))
            at = "%s.%s" % (path, field.name) if path else field.name
            if how.map_value is not None:
                items: Any = value.values()
            elif how.repeated:
                items = value
            else:
                items = (value,)
            for item in items:
                if how.enum is not None:
                    since = self.values[how.enum.full_name].get(int(item))
                    if since:
                        name = how.enum.values_by_number[int(item)].name
                        found.append(Use("%s.%s" % (how.enum.full_name, name), since, (
                            ("field", at), ("enum", how.enum.full_name), ("value", str(int(item))),
                        )))
                elif how.message is not None:
                    self._walk(item, at, found)


def _map_value(field: Any) -> Any:
    message = field.message_type
    if message is not None and message.GetOptions().map_entry:
        return message.fields_by_name["value"]
    return None


#: Read from the generated descriptor when the module loads.
SINCE = SinceIndex(writer_pb2.DESCRIPTOR)


@dataclass(frozen=True)
class SidecarFeatures:
    """What a sidecar said it has."""

    #: Its version; empty for a sidecar older than rpc Capabilities, which has exactly
    #: what has no since option.
    version: str
    #: The full names of its methods, fields and enum values.
    has: FrozenSet[str]

    def missing(self, uses: List[Use], *, idempotent: bool = False) -> Optional[SafewriteError]:
        """The refusal of the first of ``uses`` this sidecar lacks; None when it has all."""
        for use in uses:
            if use.name not in self.has:
                return self.refusal(use, idempotent=idempotent)
        return None

    def refusal(self, use: Use, *, idempotent: bool = False) -> SafewriteError:
        """The error of a call that needs ``use``, which this sidecar lacks: the
        sidecar's own refusal of a field it does not know (FAILED_PRECONDITION, reason
        UNKNOWN_FIELD, never retryable), made here before anything was sent."""
        which = self.version or "older than %s (it has no rpc Capabilities)" % SINCE.capabilities
        message = "%s needs a sidecar of %s or newer; this sidecar is %s; nothing was sent (docs/compatibility.md)" % (
            use.name, use.since, which,
        )
        metadata = {"feature": use.name, "since": use.since, "sidecar_version": self.version}
        metadata.update(use.metadata)
        reason = writer_pb2.REASON_UNKNOWN_FIELD
        info, failure = any_pb2.Any(), any_pb2.Any()
        info.Pack(error_details_pb2.ErrorInfo(reason=reason_name(reason), domain=DOMAIN, metadata=metadata))
        failure.Pack(writer_pb2.WriteFailure(reason=reason))
        code = grpc.StatusCode.FAILED_PRECONDITION
        details = status_pb2.Status(code=code.value[0], message=message, details=[info, failure])
        return from_status(code, message, details.SerializeToString(), idempotent=idempotent)


#: A sidecar that answered rpc Capabilities UNIMPLEMENTED.
OLDER = SidecarFeatures("", frozenset())


def features_of(response: writer_pb2.CapabilitiesResponse) -> SidecarFeatures:
    """The features a ``CapabilitiesResponse`` names."""
    return SidecarFeatures(
        response.version,
        frozenset(response.methods) | frozenset(response.fields) | frozenset(response.enum_values),
    )


class Unlearned(NamedTuple):
    """Why a sidecar's features could not be learned: the status its ``Capabilities``
    call failed with (other than UNIMPLEMENTED), or this call's timeout running out
    while another call asked. Never kept: the next call asks again."""

    code: grpc.StatusCode
    #: The status's message (or what happened).
    message: str
    #: The serialized ``google.rpc.Status`` of its ``grpc-status-details-bin`` trailer.
    details: Optional[bytes] = None

    def error(self) -> SafewriteError:
        """The error of a call that needs something added after 0.1.0 and was not sent
        for this: the client's error for the status (as for any failed call, so a
        failure that may pass, e.g. UNAVAILABLE, stays :attr:`retryable
        <safewrite_client.SafewriteError.retryable>`), its details kept. Nothing was
        sent, so nothing is in doubt: it is idempotent, as a read is (a
        DEADLINE_EXCEEDED here is retryable without a key)."""
        message = "the sidecar's features could not be learned (rpc Capabilities: %s); nothing was sent" % (
            self.message,
        )
        return from_status(self.code, message, self.details, idempotent=True)


#: What a call learned of the sidecar: its features, or why they are not known.
Learned = Union[SidecarFeatures, Unlearned]

#: A call whose timeout ran out while another call was asking ``Capabilities``.
WAITED = Unlearned(
    grpc.StatusCode.DEADLINE_EXCEEDED,
    "another call was asking it, and this call's timeout ran out before the answer came",
)


def answered(err: Optional[Exception], response: Any = None) -> Learned:
    """What a ``Capabilities`` call that answered ``response`` or failed with ``err``
    says: the features named, :data:`OLDER` for UNIMPLEMENTED, else :class:`Unlearned`
    with its status (UNKNOWN for an exception that is not a gRPC status, e.g. a closed
    channel's)."""
    if err is None:
        return features_of(response)
    if not isinstance(err, grpc.RpcError):
        return Unlearned(grpc.StatusCode.UNKNOWN, "%s: %s" % (type(err).__name__, err))
    code, message, details = status_of(err)
    if code == grpc.StatusCode.UNIMPLEMENTED:
        return OLDER
    return Unlearned(code, message, details)


def refusal(uses: List[Use], learned: Learned, *, idempotent: bool = False) -> Optional[SafewriteError]:
    """The decision of both clients on a call that ``uses`` what was added after 0.1.0
    (not empty), given what it ``learned`` of the sidecar: the error to raise, before
    anything is sent, when the sidecar lacks one of them (:meth:`SidecarFeatures.missing`)
    or its features could not be learned (:meth:`Unlearned.error`: fail closed); None
    when the call may be sent. ``idempotent`` is the call's."""
    if isinstance(learned, Unlearned):
        return learned.error()
    return learned.missing(uses, idempotent=idempotent)


class _Asking:
    """One thread's ``Capabilities`` call, which the others wait for."""

    def __init__(self) -> None:
        self.done = threading.Event()
        #: What it learned; None until done, and when the asking thread raised.
        self.learned: Optional[Learned] = None


class Probe:
    """What a blocking client knows of its sidecar's features: asked once, by one thread
    at a time (the others wait for its answer, within their call's timeout)."""

    def __init__(self) -> None:
        #: Set once ``Capabilities`` answered (or answered UNIMPLEMENTED).
        self.known: Optional[SidecarFeatures] = None
        self._lock = threading.Lock()
        self._asking: Optional[_Asking] = None

    def features(self, ask: Callable[[], Learned], timeout: Optional[float]) -> Learned:
        """The sidecar's features, calling ``ask`` (which never raises) the first time;
        :class:`Unlearned` when they could not be learned: ``ask``'s failure, shared
        with the calls that waited for it, or :data:`WAITED` when ``timeout`` ran out
        while another thread asked."""
        known = self.known
        if known is not None:
            return known
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                if self.known is not None:
                    return self.known
                asking, mine = self._asking, False
                if asking is None:
                    asking, mine = _Asking(), True
                    self._asking = asking
            if mine:
                break
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not asking.done.wait(left):
                return WAITED
            if asking.learned is not None:
                return asking.learned
            # The asking thread raised without an answer: ask again.
        learned: Optional[Learned] = None
        try:
            learned = ask()
        finally:
            with self._lock:
                if isinstance(learned, SidecarFeatures):
                    self.known = learned
                self._asking = None
            asking.learned = learned
            asking.done.set()
        return learned


class AsyncProbe:
    """What an asyncio client knows of its sidecar's features, for one channel (of one
    event loop): asked once, by one task at a time (the others await its answer, within
    their call's timeout)."""

    def __init__(self) -> None:
        #: Set once ``Capabilities`` answered (or answered UNIMPLEMENTED).
        self.known: Optional[SidecarFeatures] = None
        #: The asking task's answer; None when it was cancelled before one.
        self._asking: "Optional[asyncio.Future[Optional[Learned]]]" = None

    async def features(self, ask: Callable[[], Awaitable[Learned]], timeout: Optional[float]) -> Learned:
        """The sidecar's features, awaiting ``ask`` (which never raises but
        :class:`asyncio.CancelledError`) the first time; :class:`Unlearned` as
        :meth:`Probe.features` says."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while self.known is None and self._asking is not None:
            left = None if deadline is None else max(0.0, deadline - loop.time())
            try:
                # shield: a waiter cancelled or out of time does not cancel the answer
                # the others await.
                learned = await asyncio.wait_for(asyncio.shield(self._asking), left)
            except asyncio.TimeoutError:
                return WAITED
            if learned is not None:
                return learned
            # The asking task was cancelled without an answer: ask again.
        if self.known is not None:
            return self.known
        asking: "asyncio.Future[Optional[Learned]]" = loop.create_future()
        self._asking = asking
        found: Optional[Learned] = None
        try:
            found = await ask()
        finally:
            if isinstance(found, SidecarFeatures):
                self.known = found
            self._asking = None
            asking.set_result(found)
        return found
