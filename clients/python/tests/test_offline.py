"""Client behaviour that needs no sidecar: argument checks, error decoding, and the
Transact protocol as seen by a fake in-process WriterService."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import queue
import sys
import threading
import time
from concurrent import futures
from typing import Any, Dict, Iterator, List, Optional

import grpc
import pytest
from google.protobuf import any_pb2, duration_pb2
from google.rpc import error_details_pb2, status_pb2

import safewrite_client as sw
from conftest import capabilities_of
from safewrite_client.v1 import writer_pb2, writer_pb2_grpc

REF = sw.ObjectRef("v1", "ConfigMap", "ns", "cm")


def status_details(code: grpc.StatusCode, message: str, current: Optional[Dict[str, Any]]) -> bytes:
    details: List[any_pb2.Any] = []
    for detail in (
        error_details_pb2.ErrorInfo(
            reason="PRECONDITION_FAILED", domain="safewrite.dev", metadata={"attempts": "1"}
        ),
        error_details_pb2.BadRequest(
            field_violations=[
                error_details_pb2.BadRequest.FieldViolation(field="metadata.uid", description="x")
            ]
        ),
        error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=1, nanos=500000000)),
        writer_pb2.WriteFailure(
            attempt_records=[
                writer_pb2.AttemptRecord(
                    number=1,
                    resource_version_read="41",
                    http_status=0,
                    backoff=duration_pb2.Duration(nanos=250000000),
                )
            ],
            current_object_json=json.dumps(current) if current is not None else "",
            trace_id="abc",
        ),
    ):
        packed = any_pb2.Any()
        packed.Pack(detail)
        details.append(packed)
    return status_pb2.Status(code=code.value[0], message=message, details=details).SerializeToString()


def test_error_decoding() -> None:
    raw = status_details(grpc.StatusCode.FAILED_PRECONDITION, "nope", {"metadata": {"name": "cm"}})
    err = sw.from_rpc_error(FakeRpcError(grpc.StatusCode.FAILED_PRECONDITION, "nope", raw))
    assert isinstance(err, sw.PreconditionFailedError)
    assert err.code == grpc.StatusCode.FAILED_PRECONDITION
    assert err.message == "nope"
    assert err.reason == "PRECONDITION_FAILED"
    assert err.domain == sw.DOMAIN
    assert err.error_metadata == {"attempts": "1"}
    assert err.field_violations == [sw.FieldViolation("metadata.uid", "x")]
    assert err.retry_delay == 1.5
    assert err.current_object == {"metadata": {"name": "cm"}}
    assert err.attempts == 1
    assert err.attempt_records[0] == sw.AttemptRecord(1, "41", 0, "", 0.25)
    assert err.trace_id == "abc"
    assert str(err) == "FAILED_PRECONDITION (PRECONDITION_FAILED): nope"


@pytest.mark.parametrize(
    "code,cls",
    [
        (grpc.StatusCode.ABORTED, sw.ConflictError),
        (grpc.StatusCode.INVALID_ARGUMENT, sw.InvalidError),
        (grpc.StatusCode.FAILED_PRECONDITION, sw.PreconditionFailedError),
        (grpc.StatusCode.UNAVAILABLE, sw.UnavailableError),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, sw.ResourceExhaustedError),
        (grpc.StatusCode.PERMISSION_DENIED, sw.PermissionDeniedError),
        (grpc.StatusCode.UNAUTHENTICATED, sw.UnauthenticatedError),
        (grpc.StatusCode.NOT_FOUND, sw.NotFoundError),
        (grpc.StatusCode.DEADLINE_EXCEEDED, sw.DeadlineExceededError),
        (grpc.StatusCode.CANCELLED, sw.CancelledError),
        (grpc.StatusCode.INTERNAL, sw.InternalError),
        (grpc.StatusCode.UNIMPLEMENTED, sw.UnimplementedError),
        (grpc.StatusCode.UNKNOWN, sw.SafewriteError),
    ],
)
def test_error_class_per_code(code: grpc.StatusCode, cls: type) -> None:
    err = sw.from_rpc_error(FakeRpcError(code, "m", None))
    assert type(err) is cls
    assert err.code == code and err.reason is None and err.attempts == 0
    assert err.field_violations == [] and err.current_object is None and err.retry_delay is None


def error_info_status(code: grpc.StatusCode, message: str, reason: str) -> bytes:
    """A serialized google.rpc.Status carrying only an ErrorInfo with this reason."""
    packed = any_pb2.Any()
    packed.Pack(error_details_pb2.ErrorInfo(reason=reason, domain="safewrite.dev"))
    return status_pb2.Status(
        code=code.value[0], message=message, details=[packed]
    ).SerializeToString()


def test_unknown_write_outcome_decodes_to_outcome_unknown_error() -> None:
    raw = error_info_status(grpc.StatusCode.UNKNOWN, "answer lost", "WRITE_OUTCOME_UNKNOWN")
    err = sw.from_rpc_error(FakeRpcError(grpc.StatusCode.UNKNOWN, "answer lost", raw))
    assert type(err) is sw.OutcomeUnknownError
    assert isinstance(err, sw.SafewriteError)
    assert err.code == grpc.StatusCode.UNKNOWN
    assert err.reason == sw.WRITE_OUTCOME_UNKNOWN == "WRITE_OUTCOME_UNKNOWN"
    assert err.domain == sw.DOMAIN
    assert str(err) == "UNKNOWN (WRITE_OUTCOME_UNKNOWN): answer lost"
    assert sw.error_class(grpc.StatusCode.UNKNOWN, "WRITE_OUTCOME_UNKNOWN") is (
        sw.OutcomeUnknownError
    )


@pytest.mark.parametrize(
    "code,reason,cls",
    [
        # Any other UNKNOWN stays the base class...
        (grpc.StatusCode.UNKNOWN, "SOMETHING_ELSE", sw.SafewriteError),
        (grpc.StatusCode.UNKNOWN, "", sw.SafewriteError),
        # ...and the reason alone does not make another code an OutcomeUnknownError.
        (grpc.StatusCode.INTERNAL, "WRITE_OUTCOME_UNKNOWN", sw.InternalError),
    ],
)
def test_other_unknown_statuses_keep_their_class(
    code: grpc.StatusCode, reason: str, cls: type
) -> None:
    raw = error_info_status(code, "m", reason)
    err = sw.from_rpc_error(FakeRpcError(code, "m", raw))
    assert type(err) is cls
    assert err.reason == reason


class FakeRpcError(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, details: str, raw: Optional[bytes]) -> None:
        self._code, self._details, self._raw = code, details, raw

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> Any:
        return (("grpc-status-details-bin", self._raw),) if self._raw else ()


def test_mutation_arguments_are_checked() -> None:
    """The mutation is one Mutation value: none, an old-style keyword, a value of
    another type or a second one are refused before anything is sent."""
    client = sw.Client("127.0.0.1:1")
    try:
        with pytest.raises(TypeError, match="missing 1 required positional argument: 'mutation'"):
            client.update(REF)  # type: ignore[call-arg]
        with pytest.raises(TypeError, match="unexpected keyword argument 'cel'"):
            client.update(REF, cel="{}")  # type: ignore[call-arg]
        with pytest.raises(TypeError, match="safewrite_client.Mutation, made with cel"):
            client.update(REF, "{}")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="not writer_pb2.Mutation|not Mutation"):
            client.patch_status(REF, sw.cel("{}").to_proto())  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="takes 2 positional arguments but 3"):
            client.update(REF, sw.cel("{}"), sw.merge_patch({}))  # type: ignore[call-arg]
        with pytest.raises(TypeError, match="unexpected keyword argument 'force'"):
            sw.merge_patch({}, force=True)  # type: ignore[call-arg]
        with pytest.raises(TypeError):
            client.update(("v1", "ConfigMap", "ns", "cm"), sw.cel("{}"))  # type: ignore[arg-type]
    finally:
        client.close()


def test_unix_targets_get_a_valid_authority() -> None:
    from safewrite_client import channel_options

    assert channel_options("127.0.0.1:50051", None) == []
    assert channel_options("unix:///run/s.sock", None) == [("grpc.default_authority", "localhost")]
    assert channel_options("unix:///run/s.sock", [("grpc.default_authority", "x")]) == [
        ("grpc.default_authority", "x")
    ]


async def async_target() -> str:
    client = sw.AsyncClient()
    try:
        return client.target
    finally:
        await client.close()


def test_the_default_target_comes_from_safewrite_address(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SAFEWRITE_ADDRESS", raising=False)
    with sw.Client() as client:
        assert client.target == "127.0.0.1:50051"
    for value, target in [
        ("127.0.0.1:7000", "127.0.0.1:7000"),
        ("http://127.0.0.1:7000/", "127.0.0.1:7000"),
        ("unix:///run/sw.sock", "unix:///run/sw.sock"),
        ("/run/sw.sock", "unix:///run/sw.sock"),
    ]:
        monkeypatch.setenv("SAFEWRITE_ADDRESS", value)
        with sw.Client() as client:
            assert client.target == target
        assert asyncio.run(async_target()) == target
    # An explicit target wins.
    with sw.Client("127.0.0.1:7001") as client:
        assert client.target == "127.0.0.1:7001"


def test_unknown_outcome_is_unspecified() -> None:
    assert sw.Outcome(99) is sw.Outcome.UNSPECIFIED
    assert sw.Outcome(2) is sw.Outcome.UNCHANGED


def lose_answer(context: Any) -> None:
    """Ends a fake call as the sidecar ends one whose write's answer was lost."""
    packed = any_pb2.Any()
    packed.Pack(writer_pb2.WriteFailure(reason=writer_pb2.REASON_WRITE_OUTCOME_UNKNOWN))
    info = any_pb2.Any()
    info.Pack(error_details_pb2.ErrorInfo(reason="WRITE_OUTCOME_UNKNOWN", domain="safewrite.dev"))
    raw = status_pb2.Status(code=2, message="answer lost", details=[info, packed])
    context.set_trailing_metadata((("grpc-status-details-bin", raw.SerializeToString()),))
    context.abort(grpc.StatusCode.UNKNOWN, "answer lost")


class FakeWriter(writer_pb2_grpc.WriterServiceServicer):
    """Transact with a scripted number of conflicts; records every request it gets."""

    def __init__(self, conflicts: int) -> None:
        self.conflicts = conflicts
        self.requests: List[writer_pb2.TransactRequest] = []
        self.lock = threading.Lock()
        self.unary: List[Any] = []
        #: The invocation metadata of every call, in order.
        self.metadata: List[Dict[str, str]] = []

    def Capabilities(self, request: Any, context: Any) -> Any:
        return capabilities_of()  # a sidecar of this client's version

    def UpdateWithRetry(self, request: Any, context: Any) -> Any:
        self.unary.append(request)
        self.metadata.append(dict(context.invocation_metadata()))
        if request.options.idempotency_key == "seen":
            return writer_pb2.UpdateWithRetryResponse(
                result=writer_pb2.WriteResult(
                    outcome=writer_pb2.OUTCOME_UPDATED,
                    object_json='{"a":1}',
                    attempts=1,
                    already_applied=True,
                )
            )
        if request.preconditions.uid == "lost":
            lose_answer(context)
        if request.preconditions.uid == "wrong":
            context.set_trailing_metadata(
                (
                    (
                        "grpc-status-details-bin",
                        status_details(grpc.StatusCode.FAILED_PRECONDITION, "uid", {"n": 1}),
                    ),
                )
            )
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "uid")
        return writer_pb2.UpdateWithRetryResponse(
            result=writer_pb2.WriteResult(
                outcome=writer_pb2.OUTCOME_UPDATED, object_json='{"a":1}', attempts=1
            )
        )

    def Get(self, request: Any, context: Any) -> Any:
        """Answers from "memory" when asked for a minimum, else "live"; a target named
        "cut-off" ends as a call whose timeout ran out, with no details."""
        self.unary.append(request)
        self.metadata.append(dict(context.invocation_metadata()))
        if request.target.name == "cut-off":
            context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "cut off")
        version = request.min_resource_version or "5"
        return writer_pb2.GetResponse(
            object_json=json.dumps({"metadata": {"name": request.target.name, "resourceVersion": version}}),
            resource_version=version,
            remembered=bool(request.min_resource_version),
            trace_id="feed",
        )

    def Transact(self, request_iterator: Iterator[Any], context: Any) -> Iterator[Any]:
        self.metadata.append(dict(context.invocation_metadata()))
        first = next(request_iterator)
        with self.lock:
            self.requests.append(first)
        assert first.WhichOneof("message") == "begin"
        if first.begin.preconditions.uid == "lost":
            lose_answer(context)
        n = 0
        for attempt in range(1, self.conflicts + 2):
            obj = {"metadata": {"name": "cm", "resourceVersion": str(attempt)}, "n": n}
            yield writer_pb2.TransactResponse(
                fresh=writer_pb2.FreshObject(
                    attempt=attempt, object_json=json.dumps(obj), resource_version=str(attempt)
                )
            )
            proposal = next(request_iterator)
            with self.lock:
                self.requests.append(proposal)
            p = proposal.proposal
            assert p.attempt == attempt
            if p.WhichOneof("change") == "abort":
                yield writer_pb2.TransactResponse(
                    result=writer_pb2.WriteResult(
                        outcome=writer_pb2.OUTCOME_ABORTED,
                        object_json=json.dumps(obj),
                        attempts=attempt,
                    )
                )
                return
            if attempt <= self.conflicts:
                n += 10  # someone else wrote in between
                continue
            yield writer_pb2.TransactResponse(
                result=writer_pb2.WriteResult(
                    outcome=writer_pb2.OUTCOME_UPDATED,
                    object_json=p.object_json,
                    resource_version="99",
                    attempts=attempt,
                )
            )


@pytest.fixture
def fake() -> Iterator[Any]:
    servicer = FakeWriter(conflicts=2)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    writer_pb2_grpc.add_WriterServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    servicer.target = "127.0.0.1:%d" % port  # type: ignore[attr-defined]
    yield servicer
    server.stop(None)


def test_fake_transact_retries_with_fresh_objects(fake: Any) -> None:
    seen: List[int] = []

    def bump(obj: Dict[str, Any]) -> None:
        seen.append(obj["n"])
        obj["n"] += 1

    with sw.Client(fake.target, timeout=10) as client:
        result = client.transact(REF, bump, status=True, field_manager="me")
    assert seen == [0, 10, 20]
    assert result.outcome == sw.Outcome.UPDATED
    assert result.object["n"] == 21
    assert result.attempts == 3
    begin = fake.requests[0].begin
    assert begin.status and begin.options.field_manager == "me"
    assert begin.target.name == "cm" and begin.target.kind == "ConfigMap"
    assert [r.proposal.attempt for r in fake.requests[1:]] == [1, 2, 3]


def test_fake_transact_exception_sends_abort_then_raises(fake: Any) -> None:
    def explode(obj: Dict[str, Any]) -> None:
        raise KeyError("n")

    with sw.Client(fake.target, timeout=10) as client:
        with pytest.raises(KeyError):
            client.transact(REF, explode)
        aborted = client.transact(REF, _abort)
    last = fake.requests[1].proposal
    assert last.WhichOneof("change") == "abort"
    assert last.abort.reason == "KeyError: 'n'"
    assert aborted.outcome == sw.Outcome.ABORTED
    assert fake.requests[-1].proposal.abort.reason == "stop"


def _abort(obj: Dict[str, Any]) -> None:
    raise sw.Abort("stop")


def test_fake_async_transact(fake: Any) -> None:
    async def bump(obj: Dict[str, Any]) -> Dict[str, Any]:
        await asyncio.sleep(0)
        return {**obj, "n": obj["n"] + 1}

    async def main() -> sw.Result:
        async with sw.AsyncClient(fake.target, timeout=10) as client:
            with pytest.raises(ZeroDivisionError):
                await client.transact(REF, lambda obj: 1 / 0)
            return await client.transact(REF, bump)

    result = asyncio.run(main())
    assert result.object["n"] == 21
    assert fake.requests[1].proposal.abort.reason == "ZeroDivisionError: division by zero"


def test_fake_unary_error_details(fake: Any) -> None:
    with sw.Client(fake.target, timeout=10) as client:
        ok = client.update(REF, sw.json_patch([{"op": "add", "path": "/a", "value": 1}]))
        assert ok.object == {"a": 1}
        with pytest.raises(sw.PreconditionFailedError) as info:
            client.update(REF, sw.cel("{}"), preconditions=sw.Preconditions(uid="wrong"))
    assert info.value.current_object == {"n": 1}
    assert info.value.retry_delay == 1.5
    sent = fake.unary[0]
    assert json.loads(sent.mutation.json_patch.patch_json) == [{"op": "add", "path": "/a", "value": 1}]

    async def main() -> None:
        async with sw.AsyncClient(fake.target, timeout=10) as client:
            with pytest.raises(sw.PreconditionFailedError) as ainfo:
                await client.update(REF, sw.cel("{}"), preconditions=sw.Preconditions(uid="wrong"))
            assert ainfo.value.current_object == {"n": 1}
            assert ainfo.value.attempt_records[0].resource_version_read == "41"

    asyncio.run(main())


def test_fake_idempotency_key_is_sent_and_already_applied_decoded(fake: Any) -> None:
    with sw.Client(fake.target, timeout=10) as client:
        first = client.update(REF, sw.cel("{}"), idempotency_key="fresh-1")
        assert first.already_applied is False
        again = client.update(REF, sw.cel("{}"), idempotency_key="seen")
        assert again.already_applied is True
        assert again.outcome == sw.Outcome.UPDATED
        none = client.update(REF, sw.cel("{}"))
        client.transact(REF, lambda obj: None, idempotency_key="tx:1")
    assert [r.options.idempotency_key for r in fake.unary] == ["fresh-1", "seen", ""]
    assert none.already_applied is False
    assert fake.requests[0].begin.options.idempotency_key == "tx:1"

    async def main() -> sw.Result:
        async with sw.AsyncClient(fake.target, timeout=10) as client:
            await client.transact(REF, lambda obj: None, idempotency_key="tx:2")
            return await client.update(REF, sw.merge_patch({}), idempotency_key="seen")

    result = asyncio.run(main())
    assert result.already_applied is True
    assert fake.unary[-1].options.idempotency_key == "seen"
    begins = [r.begin for r in fake.requests if r.WhichOneof("message") == "begin"]
    assert [b.options.idempotency_key for b in begins] == ["tx:1", "tx:2"]


def test_empty_or_non_string_idempotency_key_is_refused_locally() -> None:
    client = sw.Client("127.0.0.1:1")
    try:
        with pytest.raises(ValueError):
            client.update(REF, sw.cel("{}"), idempotency_key="")
        with pytest.raises(ValueError):
            client.transact(REF, lambda obj: None, idempotency_key="")
        with pytest.raises(TypeError):
            client.update(REF, sw.cel("{}"), idempotency_key=42)  # type: ignore[arg-type]
    finally:
        client.close()


def test_result_already_applied_defaults_to_false() -> None:
    result = sw.Result(sw.Outcome.UPDATED, {}, "1", 1)
    assert result.already_applied is False


# --- OpenTelemetry context propagation --------------------------------------------

TRACE_ID = 0x0AF7651916CD43DD8448EB211C80319C
SPAN_ID = 0xB7AD6B7169203331
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def remote_span() -> Any:
    """A caller's span (as if continued from upstream) with a tracestate entry."""
    trace = pytest.importorskip("opentelemetry.trace")
    context = trace.SpanContext(
        TRACE_ID,
        SPAN_ID,
        is_remote=True,
        trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
        trace_state=trace.TraceState([("vendor", "opaque-value")]),
    )
    return trace.use_span(trace.NonRecordingSpan(context))


def calls_made(target: str, propagate_trace: bool = True, token: Optional[str] = None) -> None:
    """update and transact, sync then async, on fresh clients."""
    with sw.Client(target, timeout=10, propagate_trace=propagate_trace, token=token) as client:
        client.update(REF, sw.cel("{}"))
        client.transact(REF, lambda obj: None)

    async def main() -> None:
        async with sw.AsyncClient(
            target, timeout=10, propagate_trace=propagate_trace, token=token
        ) as aclient:
            await aclient.update(REF, sw.cel("{}"))
            await aclient.transact(REF, lambda obj: None)

    asyncio.run(main())


def test_fake_receives_the_callers_trace_context(fake: Any) -> None:
    with remote_span():
        calls_made(fake.target)
    assert len(fake.metadata) == 4
    for md in fake.metadata:
        assert md["traceparent"] == TRACEPARENT
        assert md["tracestate"] == "vendor=opaque-value"

    # Outside any span there is nothing to propagate.
    del fake.metadata[:]
    calls_made(fake.target)
    assert len(fake.metadata) == 4
    assert not any("traceparent" in md for md in fake.metadata)


def test_fake_propagation_turned_off_sends_nothing(fake: Any) -> None:
    with remote_span():
        calls_made(fake.target, propagate_trace=False)
    assert len(fake.metadata) == 4
    assert not any("traceparent" in md or "tracestate" in md for md in fake.metadata)


def test_fake_baggage_travels_with_the_trace(fake: Any) -> None:
    baggage = pytest.importorskip("opentelemetry.baggage")
    context = pytest.importorskip("opentelemetry.context")
    with remote_span():
        token = context.attach(baggage.set_baggage("tenant", "acme"))
        try:
            with sw.Client(fake.target, timeout=10) as client:
                client.update(REF, sw.cel("{}"))
        finally:
            context.detach(token)
    assert fake.metadata[0]["traceparent"] == TRACEPARENT
    assert fake.metadata[0]["baggage"] == "tenant=acme"


def test_without_opentelemetry_the_client_works_and_sends_nothing_extra(
    fake: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from safewrite_client import _tracing

    try:  # a caller's span, if OpenTelemetry is here to make one before it "goes"
        span: Any = remote_span()
    except pytest.skip.Exception:
        span = contextlib.nullcontext()
    with span:
        # Make `import opentelemetry...` fail as if the package were not installed.
        loaded = [m for m in sys.modules if m.split(".")[0] == "opentelemetry"]
        for name in loaded:
            monkeypatch.setitem(sys.modules, name, None)
        monkeypatch.setitem(sys.modules, "opentelemetry", None)
        assert _tracing.load_injector() is None
        calls_made(fake.target)
    assert len(fake.metadata) == 4
    assert not any("traceparent" in md or "tracestate" in md for md in fake.metadata)


def test_a_failing_propagator_never_fails_the_call(fake: Any) -> None:
    propagate = pytest.importorskip("opentelemetry.propagate")

    class Broken:  # a TextMapPropagator whose inject raises
        fields = {"traceparent"}

        def inject(self, carrier: Any, context: Any = None, setter: Any = None) -> None:
            raise RuntimeError("broken propagator")

        def extract(self, carrier: Any, context: Any = None, getter: Any = None) -> Any:
            raise RuntimeError("broken propagator")

    saved = propagate.get_global_textmap()
    propagate.set_global_textmap(Broken())
    try:
        with remote_span():
            calls_made(fake.target)
    finally:
        propagate.set_global_textmap(saved)
    assert len(fake.metadata) == 4
    assert not any("traceparent" in md for md in fake.metadata)


# --- the sidecar's shared token -----------------------------------------------------


def test_fake_receives_the_token_on_every_call(fake: Any) -> None:
    calls_made(fake.target, token=" s3cret-token\n")  # as a token file holds it
    assert len(fake.metadata) == 4
    for md in fake.metadata:
        assert md["authorization"] == "Bearer s3cret-token"

    del fake.metadata[:]
    calls_made(fake.target)
    assert len(fake.metadata) == 4
    assert not any("authorization" in md for md in fake.metadata)


def test_fake_receives_the_token_beside_the_trace_context(fake: Any) -> None:
    with remote_span():
        calls_made(fake.target, token="s3cret-token")
    assert len(fake.metadata) == 4
    for md in fake.metadata:
        assert md["authorization"] == "Bearer s3cret-token"
        assert md["traceparent"] == TRACEPARENT


@pytest.mark.parametrize(
    "token, says",
    [
        ("", "empty"),
        (" \t\r\n", "empty"),
        ("s3cret\ntoken", "'\\n' at index 6"),
        ("s3cret\ttoken", "'\\t' at index 6"),
        ("s3crét", "'é' at index 4"),
        ("\ns3cret\x00", "'\\x00' at index 7"),  # an index into the token as given
        ("s3cret\x00", "'\\x00' at index 6"),
    ],
)
@pytest.mark.parametrize("cls", [sw.Client, sw.AsyncClient])
def test_an_unusable_token_is_refused_at_construction(cls: Any, token: str, says: str) -> None:
    with pytest.raises(ValueError) as info:
        cls("127.0.0.1:1", token=token)
    assert says in str(info.value)
    if token.strip():
        assert token not in str(info.value)  # the token is a secret
    with pytest.raises(TypeError):
        cls("127.0.0.1:1", token=b"s3cret")


def test_trace_metadata_keeps_only_headers_grpc_can_carry() -> None:
    from safewrite_client._tracing import trace_metadata

    def inject(carrier: Dict[str, str]) -> None:
        carrier.update(
            {
                "TraceParent": TRACEPARENT,  # lower-cased, as gRPC needs
                "tracestate": "a=1",
                "bad key": "v",
                "x-trace-bin": "v",
                "grpc-reserved": "v",
                "vendor": "caf\u00e9",
                "newline": "a\nb",
            }
        )

    assert trace_metadata(inject) == (("traceparent", TRACEPARENT), ("tracestate", "a=1"))
    assert trace_metadata(None) is None
    assert trace_metadata(lambda carrier: None) is None

    def boom(carrier: Dict[str, str]) -> None:
        raise ValueError("no")

    assert trace_metadata(boom) is None


# --- one core, two shells ------------------------------------------------------------

MODULE_CLIENT = sw.AsyncClient("127.0.0.1:1", timeout=10)  # made before any loop, as kopf does


def test_a_module_level_async_client_works_on_every_loop(fake: Any) -> None:
    """Made outside any event loop, used from two asyncio.run loops and a thread's loop:
    each loop gets its own channel, made lazily on that loop."""
    client = sw.AsyncClient(fake.target, timeout=10)

    async def call() -> sw.Result:
        return await client.transact(REF, lambda obj: {**obj, "n": obj["n"] + 1})

    assert asyncio.run(call()).object["n"] == 21
    assert asyncio.run(call()).object["n"] == 21  # a second loop: no "different loop" error
    results: List[Any] = []
    thread = threading.Thread(target=lambda: results.append(asyncio.run(call())))
    thread.start()
    thread.join()
    assert results[0].object["n"] == 21

    async def close() -> None:
        await client.close()

    asyncio.run(close())
    assert MODULE_CLIENT.target == "127.0.0.1:1"


@pytest.mark.parametrize("method", ["update", "patch_status"])
def test_unknown_keywords_are_refused_like_python_does(method: str) -> None:
    with sw.Client("127.0.0.1:1") as client:
        with pytest.raises(TypeError, match="unexpected keyword argument 'merge_ptch'"):
            getattr(client, method)(REF, merge_ptch={})
        with pytest.raises(TypeError, match="'create_if_missing'"):
            client.patch_status(REF, sw.merge_patch({}), create_if_missing={})
        with pytest.raises(TypeError, match="'write_alone'"):
            client.transact(REF, lambda obj: None, write_alone=True)  # type: ignore[call-arg]


def test_write_alone_is_sent(fake: Any) -> None:
    with sw.Client(fake.target, timeout=10) as client:
        client.update(REF, sw.cel("{}"), write_alone=True)
        client.update(REF, sw.cel("{}"))
    assert [r.options.write_alone for r in fake.unary] == [True, False]


def test_a_fence_is_sent(fake: Any) -> None:
    fence = sw.Fence(lease_namespace="ns", lease_name="leader", epoch=3)
    with sw.Client(fake.target, timeout=10) as client:
        client.update(REF, sw.cel("{}"), fence=fence)
        client.update(REF, sw.cel("{}"))
        with pytest.raises(TypeError, match="safewrite_client.Fence"):
            client.update(REF, sw.cel("{}"), fence=("ns", "leader", 3))  # type: ignore[arg-type]
    sent = [r.options.fence for r in fake.unary]
    assert [(f.lease_namespace, f.lease_name, f.epoch) for f in sent] == [
        ("ns", "leader", 3),
        ("", "", 0),
    ]


def test_a_transact_function_may_propose_a_mutation(fake: Any) -> None:
    with sw.Client(fake.target, timeout=10) as client:
        client.transact(REF, lambda obj: sw.merge_patch({"n": 1}))
    proposals = [r.proposal for r in fake.requests if r.WhichOneof("message") == "proposal"]
    assert [p.WhichOneof("change") for p in proposals] == ["mutation"] * 3
    assert [p.attempt for p in proposals] == [1, 2, 3]
    assert proposals[0].mutation.merge_patch.patch_json == '{"n":1}'


def test_the_transaction_state_machine_alone() -> None:
    from safewrite_client import _core as core

    tx = core.Transaction(writer_pb2.TransactBegin(status=True))
    assert tx.first.begin.status
    fresh = tx.receive(
        writer_pb2.TransactResponse(fresh=writer_pb2.FreshObject(attempt=4, object_json='{"a":1}'))
    )
    assert isinstance(fresh, core.Fresh) and fresh.attempt == 4 and fresh.object == {"a": 1}
    assert tx.answer(fresh, None).proposal.object_json == '{"a":1}'
    with pytest.raises(TypeError):
        tx.answer(fresh, 42)
    abort = tx.fail(fresh, ValueError("bad"))
    assert abort.proposal.abort.reason == "ValueError: bad" and abort.proposal.attempt == 4
    with pytest.raises(ValueError):  # the function's exception wins over the result
        tx.receive(writer_pb2.TransactResponse(result=writer_pb2.WriteResult(outcome=4)))
    with pytest.raises(sw.SafewriteError, match="empty message"):
        core.Transaction(writer_pb2.TransactBegin()).receive(writer_pb2.TransactResponse())
    with pytest.raises(sw.SafewriteError, match="without a result"):
        core.Transaction(writer_pb2.TransactBegin()).ended()


# --- reasons: the proto enum, classified by its retry options -------------------------


def test_every_reason_is_classified_exactly_once() -> None:
    """The sets are derived from the proto's options: every value has one."""
    every = set(writer_pb2.Reason.values())
    groups = [
        sw.RETRYABLE_REASONS,
        sw.RETRYABLE_WITH_KEY_REASONS,
        sw.FINAL_REASONS,
        sw.BY_CODE_REASONS,
    ]
    unknown = every - set().union(*groups)
    assert not unknown, "Reason values the client does not classify: %s" % sorted(
        writer_pb2.Reason.Name(v) for v in unknown
    )
    assert sum(len(g) for g in groups) == len(every), "a Reason is in two groups"
    assert set().union(*groups) <= every


def test_every_grpc_code_has_an_exception_class_or_is_the_base() -> None:
    for code in grpc.StatusCode:
        assert issubclass(sw.error_class(code), sw.SafewriteError)


@pytest.mark.parametrize(
    "code,reason,retryable",
    [
        (grpc.StatusCode.UNAVAILABLE, "CIRCUIT_OPEN", True),
        (grpc.StatusCode.UNAVAILABLE, "RESOURCE_VERSION_TOO_LARGE", True),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, "RATE_LIMITED", True),
        # Without an idempotency key a lost answer may have been applied: not retryable.
        (grpc.StatusCode.UNKNOWN, "WRITE_OUTCOME_UNKNOWN", False),
        (grpc.StatusCode.ABORTED, "Conflict", True),  # API server: by code
        (grpc.StatusCode.UNAVAILABLE, "TooManyRequests", True),
        (grpc.StatusCode.INVALID_ARGUMENT, "Invalid", False),
        (grpc.StatusCode.NOT_FOUND, "NotFound", False),
        (grpc.StatusCode.ABORTED, "RESOURCE_VERSION_MISMATCH", False),
        (grpc.StatusCode.ABORTED, "FIELD_MANAGER_CONFLICT", False),
        (grpc.StatusCode.FAILED_PRECONDITION, "PRECONDITION_FAILED", False),
        (grpc.StatusCode.FAILED_PRECONDITION, "FENCED", False),
        (grpc.StatusCode.FAILED_PRECONDITION, "NOT_LEADER", False),
        (grpc.StatusCode.PERMISSION_DENIED, "POLICY_DENIED", False),
    ],
)
def test_retryable_follows_the_reason_then_the_code(
    code: grpc.StatusCode, reason: str, retryable: bool
) -> None:
    err = sw.from_rpc_error(FakeRpcError(code, "m", error_info_status(code, "m", reason)))
    assert err.retryable is retryable
    assert err.reason == reason
    named = reason if reason.isupper() else "API_SERVER"
    assert err.reason_name == named


def test_an_unknown_write_outcome_is_retryable_only_with_an_idempotency_key() -> None:
    lost = writer_pb2.REASON_WRITE_OUTCOME_UNKNOWN
    assert not sw.is_retryable(grpc.StatusCode.UNKNOWN, lost)
    assert not sw.is_retryable(grpc.StatusCode.UNKNOWN, lost, idempotent=False)
    assert sw.is_retryable(grpc.StatusCode.UNKNOWN, lost, idempotent=True)
    # A bare UNKNOWN (no details) may be a lost answer too.
    unspecified = writer_pb2.REASON_UNSPECIFIED
    assert not sw.is_retryable(grpc.StatusCode.UNKNOWN, unspecified)
    assert sw.is_retryable(grpc.StatusCode.UNKNOWN, unspecified, idempotent=True)
    # An answer that could not be read may be a write applied too.
    bad = writer_pb2.REASON_BAD_ANSWER
    assert not sw.is_retryable(grpc.StatusCode.INTERNAL, bad)
    assert sw.is_retryable(grpc.StatusCode.INTERNAL, bad, idempotent=True)
    # The key changes nothing for the other reasons.
    assert sw.is_retryable(grpc.StatusCode.UNAVAILABLE, writer_pb2.REASON_CIRCUIT_OPEN)
    assert not sw.is_retryable(
        grpc.StatusCode.INVALID_ARGUMENT, writer_pb2.REASON_INVALID_CEL, idempotent=True
    )

    raw = error_info_status(grpc.StatusCode.UNKNOWN, "answer lost", "WRITE_OUTCOME_UNKNOWN")
    unkeyed = sw.from_rpc_error(FakeRpcError(grpc.StatusCode.UNKNOWN, "answer lost", raw))
    assert type(unkeyed) is sw.OutcomeUnknownError
    assert unkeyed.idempotent is False and unkeyed.retryable is False
    keyed = sw.from_rpc_error(
        FakeRpcError(grpc.StatusCode.UNKNOWN, "answer lost", raw), idempotent=True
    )
    assert keyed.idempotent is True and keyed.retryable is True


def test_the_clients_tell_their_errors_whether_the_call_had_a_key(fake: Any) -> None:
    lost = sw.Preconditions(uid="lost")

    def fn(obj: Dict[str, Any]) -> None:
        raise AssertionError("the fake loses the answer before any fresh object")

    with sw.Client(fake.target, timeout=10) as client:
        for key, retryable in ((None, False), ("k-1", True)):
            with pytest.raises(sw.OutcomeUnknownError) as unary:
                client.update(REF, sw.cel("{}"), preconditions=lost, idempotency_key=key)
            assert unary.value.retryable is retryable, key
            with pytest.raises(sw.OutcomeUnknownError) as transact:
                client.transact(REF, fn, preconditions=lost, idempotency_key=key)
            assert transact.value.retryable is retryable, key
            request = writer_pb2.UpdateWithRetryRequest(
                target=writer_pb2.ObjectRef(api_version="v1", kind="ConfigMap", name="cm"),
                preconditions=writer_pb2.Preconditions(uid="lost"),
                options=writer_pb2.WriteOptions(idempotency_key=key or ""),
            )
            with pytest.raises(sw.OutcomeUnknownError) as sent:
                client.send(request)
            assert sent.value.retryable is retryable, key

    async def run_async() -> None:
        client = sw.AsyncClient(fake.target, timeout=10)
        try:
            for key, retryable in ((None, False), ("k-1", True)):
                with pytest.raises(sw.OutcomeUnknownError) as unary:
                    await client.update(REF, sw.cel("{}"), preconditions=lost, idempotency_key=key)
                assert unary.value.retryable is retryable, key
                with pytest.raises(sw.OutcomeUnknownError) as transact:
                    await client.transact(REF, fn, preconditions=lost, idempotency_key=key)
                assert transact.value.retryable is retryable, key
        finally:
            await client.close()

    asyncio.run(run_async())


def test_a_call_cut_off_before_an_answer_is_retryable_only_with_a_key() -> None:
    # No safewrite details: the timeout ran out here, or the call was cancelled, while a
    # write may have been in flight.
    for code in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED):
        assert sw.from_rpc_error(FakeRpcError(code, "cut off", None)).retryable is False
        assert sw.from_rpc_error(FakeRpcError(code, "cut off", None), idempotent=True).retryable
    # The sidecar's own DEADLINE_EXCEEDED says no write is in doubt.
    late = error_info_status(grpc.StatusCode.DEADLINE_EXCEEDED, "late", "DEADLINE_EXCEEDED")
    err = sw.from_rpc_error(FakeRpcError(grpc.StatusCode.DEADLINE_EXCEEDED, "late", late))
    assert type(err) is sw.DeadlineExceededError and err.retryable is True
    # A transaction its caller ended is not sent again, key or not.
    assert not sw.is_retryable(
        grpc.StatusCode.CANCELLED, writer_pb2.REASON_TRANSACTION_CANCELLED, idempotent=True
    )


def test_write_failure_reason_is_decoded() -> None:
    packed = any_pb2.Any()
    packed.Pack(writer_pb2.WriteFailure(reason=writer_pb2.REASON_CEL_BUSY))
    raw = status_pb2.Status(code=8, message="busy", details=[packed]).SerializeToString()
    err = sw.from_rpc_error(FakeRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED, "busy", raw))
    assert err.write_failure_reason == writer_pb2.REASON_CEL_BUSY
    assert err.reason_name == "CEL_BUSY" and err.retryable
    assert sw.reason_name(999) == "999"  # a reason newer than this client
    assert sw.is_retryable(grpc.StatusCode.UNAVAILABLE, 999)
    assert not sw.is_retryable(grpc.StatusCode.INVALID_ARGUMENT, 999)


# --- Get: read your own writes --------------------------------------------------------


def get_request(**args: Any) -> writer_pb2.GetRequest:
    with sw.Client("127.0.0.1:1") as client:
        client._unary = lambda call: call  # type: ignore[assignment, method-assign, return-value]
        call: Any = client.get(REF, **args)
    assert call.method == "Get"
    return call.request  # type: ignore[no-any-return]


def test_get_asks_for_at_least_the_version_a_write_answered_with() -> None:
    target = writer_pb2.ObjectRef(api_version="v1", kind="ConfigMap", namespace="ns", name="cm")
    written = sw.Result(sw.Outcome.UPDATED, {"metadata": {"resourceVersion": "41"}}, "41", 1)
    read = sw.ReadResult({"metadata": {"resourceVersion": "43"}}, "43", remembered=True)
    assert get_request(at_least=written) == writer_pb2.GetRequest(target=target, min_resource_version="41")
    assert get_request(at_least=read).min_resource_version == "43"
    # An object (a dict, a kopf body): its metadata.resourceVersion; none reads live.
    assert get_request(at_least={"metadata": {"resourceVersion": "42"}}).min_resource_version == "42"
    assert get_request(at_least={}).min_resource_version == ""
    assert get_request(min_resource_version="44").min_resource_version == "44"
    # No minimum, or a result without a version (a removal that found the object gone):
    # a live read, which is never older than anything.
    assert get_request() == writer_pb2.GetRequest(target=target)
    gone = sw.Result(sw.Outcome.GONE, {}, "", 1)
    assert get_request(at_least=gone, timeout=3.0).min_resource_version == ""
    # The version is the sidecar's to check: sent as it is.
    assert get_request(min_resource_version="1&watch=true").min_resource_version == "1&watch=true"


def test_get_refuses_what_cannot_be_a_minimum_before_sending() -> None:
    written = sw.Result(sw.Outcome.UPDATED, {}, "41", 1)
    with pytest.raises(ValueError, match="not both"):
        get_request(at_least=written, min_resource_version="41")
    with pytest.raises(TypeError, match="min_resource_version="):
        get_request(at_least="41")
    with pytest.raises(TypeError, match="must be a str"):
        get_request(min_resource_version=41)
    with pytest.raises(TypeError, match="resourceVersion must be a str"):
        get_request(at_least={"metadata": {"resourceVersion": 41}})
    with pytest.raises(TypeError, match="ObjectRef"):
        from safewrite_client import _core as core

        core.get(("v1", "ConfigMap", "ns", "cm"))  # type: ignore[arg-type]
    with sw.Client("127.0.0.1:1") as client:
        with pytest.raises(TypeError, match="unexpected keyword argument 'atleast'"):
            client.get(REF, atleast=written)  # type: ignore[call-arg]


def test_fake_get_write_then_read_on_both_clients(fake: Any) -> None:
    with sw.Client(fake.target, timeout=10, token="t") as client:
        written = client.update(REF, sw.merge_patch({}))
        fresh = client.get(REF, at_least=sw.Result(written.outcome, {}, "41", 1))
        live = client.get(REF)
        sent = client.send(writer_pb2.GetRequest(target=fake.unary[1].target, min_resource_version="7"))
    assert isinstance(fresh, sw.ReadResult)
    assert (fresh.resource_version, fresh.remembered, fresh.trace_id) == ("41", True, "feed")
    assert fresh.object == {"metadata": {"name": "cm", "resourceVersion": "41"}}
    assert (live.resource_version, live.remembered) == ("5", False)
    assert isinstance(sent, sw.ReadResult) and sent.resource_version == "7"
    assert [r.min_resource_version for r in fake.unary[1:]] == ["41", "", "7"]
    assert all(m.get("authorization") == "Bearer t" for m in fake.metadata)

    async def main() -> sw.ReadResult:
        async with sw.AsyncClient(fake.target, timeout=10) as aclient:
            assert (await aclient.get(REF)).remembered is False
            return await aclient.get(REF, at_least=fresh)

    again = asyncio.run(main())
    assert (again.resource_version, again.remembered) == ("41", True)
    assert fake.unary[-1].min_resource_version == "41"


def test_a_get_cut_off_may_be_sent_again_it_writes_nothing(fake: Any) -> None:
    cut_off = sw.ObjectRef("v1", "ConfigMap", "ns", "cut-off")
    with sw.Client(fake.target, timeout=10) as client:
        with pytest.raises(sw.DeadlineExceededError) as info:
            client.get(cut_off)
    # A write cut off like this is retryable only with a key; a read has nothing in doubt.
    assert info.value.idempotent is True and info.value.retryable is True

    async def main() -> sw.SafewriteError:
        async with sw.AsyncClient(fake.target, timeout=10) as aclient:
            try:
                await aclient.get(cut_off, min_resource_version="3")
            except sw.SafewriteError as err:
                return err
        raise AssertionError("the fake answers this get with an error")

    err = asyncio.run(main())
    assert type(err) is sw.DeadlineExceededError and err.retryable is True


# --- Lead and Delete, against a scripted WriterService ---------------------------------


def leading(epoch: int) -> writer_pb2.LeadResponse:
    return writer_pb2.LeadResponse(
        state=writer_pb2.LEAD_STATE_LEADING, epoch=epoch, holder="me", identity="me"
    )


def not_leading(reason: int, holder: str = "") -> writer_pb2.LeadResponse:
    return writer_pb2.LeadResponse(
        state=writer_pb2.LEAD_STATE_NOT_LEADING, reason=reason, holder=holder, identity="me"
    )


class ScriptedLead(writer_pb2_grpc.WriterServiceServicer):
    """Lead answers with what the test puts in ``script`` (None ends the stream OK); a
    Lease named "Bad" is refused as the sidecar refuses it. Records the requests, the
    fences of UpdateWithRetry and Delete, and whether each Lead stream was cancelled."""

    def __init__(self) -> None:
        self.script: "queue.Queue[Optional[writer_pb2.LeadResponse]]" = queue.Queue()
        self.leads: List[writer_pb2.LeadRequest] = []
        self.fences: List[int] = []
        self.deletes: List[writer_pb2.DeleteRequest] = []
        self.cancelled = threading.Event()

    def Capabilities(self, request: Any, context: Any) -> Any:
        return capabilities_of()  # a sidecar of this client's version

    def Lead(self, request: Any, context: Any) -> Iterator[Any]:
        self.leads.append(request)
        if request.name == "Bad":
            bad = any_pb2.Any()
            bad.Pack(error_details_pb2.BadRequest(field_violations=[
                error_details_pb2.BadRequest.FieldViolation(field="name", description="not a DNS-1123 subdomain")
            ]))
            raw = status_pb2.Status(code=3, message="invalid request: name", details=[bad])
            context.set_trailing_metadata((("grpc-status-details-bin", raw.SerializeToString()),))
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "invalid request: name")
        context.add_callback(self.cancelled.set)
        context.send_initial_metadata(())  # as the sidecar: headers once it accepted the request
        while context.is_active():
            try:
                item = self.script.get(timeout=0.05)
            except queue.Empty:
                continue
            if item is None:
                return
            yield item

    def UpdateWithRetry(self, request: Any, context: Any) -> Any:
        self.fences.append(request.options.fence.epoch)
        return writer_pb2.UpdateWithRetryResponse(
            result=writer_pb2.WriteResult(outcome=writer_pb2.OUTCOME_UPDATED, attempts=1)
        )

    def Delete(self, request: Any, context: Any) -> Any:
        self.deletes.append(request)
        return writer_pb2.DeleteResponse(
            outcome=writer_pb2.DELETE_OUTCOME_DELETING,
            object_json='{"metadata": {"deletionTimestamp": "2026-11-28T11:28:13Z"}}',
            deletion_timestamp="2026-11-28T11:28:13Z",
            attempts=2,
            attempt_records=[writer_pb2.AttemptRecord(number=1, http_status=409), writer_pb2.AttemptRecord(number=2, http_status=200)],
        )


@pytest.fixture
def scripted() -> Iterator[Any]:
    servicer = ScriptedLead()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    writer_pb2_grpc.add_WriterServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    servicer.target = "127.0.0.1:%d" % port  # type: ignore[attr-defined]
    yield servicer
    server.stop(None)


def test_lead_sends_the_durations_as_seconds_or_timedeltas(scripted: Any) -> None:
    with sw.Client(scripted.target, timeout=1) as client:
        with client.lead("ns", "lease", identity="pod-0", lease_duration=15,
                         renew_deadline=datetime.timedelta(seconds=1.5), retry_period=0.2) as leadership:
            scripted.script.put(leading(4))
            assert leadership.wait_leading(timeout=10) == sw.Fence("ns", "lease", 4)
            time.sleep(1.2)  # past the client's default timeout: the stream has none
            assert leadership.leading and not scripted.cancelled.is_set()
        assert scripted.cancelled.wait(10), "leaving the block ends the stream"
        with pytest.raises(TypeError, match="lease_duration"):
            client.lead("ns", "lease", lease_duration="15s")  # type: ignore[arg-type]
    sent = scripted.leads[0]
    assert (sent.namespace, sent.name, sent.identity) == ("ns", "lease", "pod-0")
    assert (sent.lease_duration.seconds, sent.lease_duration.nanos) == (15, 0)
    assert (sent.renew_deadline.seconds, sent.renew_deadline.nanos) == (1, 500000000)
    assert (sent.retry_period.seconds, sent.retry_period.nanos) == (0, 200000000)


def test_a_refused_campaign_raises_on_entering_on_both_clients(scripted: Any) -> None:
    with sw.Client(scripted.target) as client:
        with pytest.raises(sw.InvalidError) as refused:
            with client.lead("ns", "Bad"):
                pytest.fail("entered a refused campaign")
    assert [v.field for v in refused.value.field_violations] == ["name"]

    async def main() -> sw.SafewriteError:
        async with sw.AsyncClient(scripted.target) as aclient:
            with pytest.raises(sw.InvalidError) as arefused:
                async with aclient.lead("ns", "Bad"):
                    pytest.fail("entered a refused campaign")
            return arefused.value

    assert [v.field for v in asyncio.run(main()).field_violations] == ["name"]


def test_events_are_decoded_and_the_iteration_ends_with_the_stream(scripted: Any) -> None:
    for item in (leading(1), not_leading(writer_pb2.NOT_LEADING_REASON_LOST_RENEWAL),
                 not_leading(writer_pb2.NOT_LEADING_REASON_OTHER_HOLDER, "other"),
                 not_leading(writer_pb2.NOT_LEADING_REASON_RELEASED), None):
        scripted.script.put(item)

    async def main() -> List[sw.LeadEvent]:
        async with sw.AsyncClient(scripted.target) as aclient:
            async with aclient.lead("ns", "lease") as leadership:
                events = [event async for event in leadership]
                with pytest.raises(sw.UnavailableError):  # the sidecar ended it: shutting down
                    await leadership.wait_leading()
                assert leadership.fence is None
                return events

    events = asyncio.run(main())
    assert [(e.state, e.reason, e.epoch, e.holder) for e in events] == [
        (sw.LeadState.LEADING, sw.NotLeadingReason.UNSPECIFIED, 1, "me"),
        (sw.LeadState.NOT_LEADING, sw.NotLeadingReason.LOST_RENEWAL, 0, ""),
        (sw.LeadState.NOT_LEADING, sw.NotLeadingReason.OTHER_HOLDER, 0, "other"),
        (sw.LeadState.NOT_LEADING, sw.NotLeadingReason.RELEASED, 0, ""),
    ]
    assert events[0].fence == sw.Fence("ns", "lease", 1) and events[0].leading
    assert all(e.fence is None and e.identity == "me" for e in events[1:])


def test_async_run_cancels_the_work_when_leadership_ends_and_starts_it_again(scripted: Any) -> None:
    """LEADING 1 starts the work, NOT_LEADING cancels it, LEADING 2 starts it again;
    every write inside carries the term's fence without fence=, an explicit one wins."""
    started: List[int] = []
    cancelled: List[int] = []

    async def main() -> str:
        async with sw.AsyncClient(scripted.target, timeout=10) as aclient:

            async def work(fence: sw.Fence) -> str:
                started.append(fence.epoch)
                await aclient.update(REF, sw.cel("{}"))
                if fence.epoch == 1:
                    await aclient.update(REF, sw.cel("{}"), fence=sw.Fence("ns", "lease", 9))
                    scripted.script.put(not_leading(writer_pb2.NOT_LEADING_REASON_LOST_RENEWAL))
                    try:
                        await asyncio.sleep(30)
                    except asyncio.CancelledError:
                        cancelled.append(fence.epoch)
                        scripted.script.put(leading(2))
                        raise
                with sw.fenced(None):
                    await aclient.update(REF, sw.cel("{}"))
                return "term %d" % fence.epoch

            scripted.script.put(leading(1))
            result = await aclient.run_while_leading("ns", "lease", work)
            assert sw.current_fence() is None
            return result

    assert asyncio.run(main()) == "term 2"
    assert started == [1, 2] and cancelled == [1]
    assert scripted.fences == [1, 9, 2, 0]
    assert scripted.cancelled.wait(10), "run_while_leading ends the stream when the work returns"


def test_async_run_takes_a_refusal_as_the_end_of_the_term(scripted: Any) -> None:
    terms: List[int] = []

    async def main() -> int:
        async with sw.AsyncClient(scripted.target, timeout=10) as aclient:
            async with aclient.lead("ns", "lease") as leadership:

                async def work(fence: sw.Fence) -> int:
                    terms.append(fence.epoch)
                    if fence.epoch == 1:
                        scripted.script.put(leading(3))  # a later leadership, no NOT_LEADING seen
                        raise sw.FencedError(grpc.StatusCode.FAILED_PRECONDITION, "later epoch")
                    return fence.epoch

                scripted.script.put(leading(1))
                return await leadership.run(work)

    assert asyncio.run(main()) == 3 and terms == [1, 3]


def test_sync_run_stops_the_work_and_starts_it_again(scripted: Any) -> None:
    terms: List[int] = []

    def work(fence: sw.Fence, stop: threading.Event) -> str:
        terms.append(fence.epoch)
        client.update(REF, sw.cel("{}"))
        if fence.epoch == 1:
            scripted.script.put(not_leading(writer_pb2.NOT_LEADING_REASON_OTHER_HOLDER, "other"))
            assert stop.wait(10), "the term was not stopped"
            scripted.script.put(leading(2))
            return "dropped: stopped"
        return "term %d" % fence.epoch

    with sw.Client(scripted.target, timeout=10) as client:
        scripted.script.put(leading(1))
        assert client.run_while_leading("ns", "lease", work) == "term 2"
        assert sw.current_fence() is None
    assert terms == [1, 2] and scripted.fences == [1, 2]


def test_sync_run_raises_what_the_work_raises(scripted: Any) -> None:
    def work(fence: sw.Fence, stop: threading.Event) -> None:
        raise KeyError("boom")

    with sw.Client(scripted.target, timeout=10) as client:
        scripted.script.put(leading(1))
        with pytest.raises(KeyError, match="boom"):
            client.run_while_leading("ns", "lease", work)
    assert scripted.cancelled.wait(10)


def test_delete_request_and_result(scripted: Any) -> None:
    fence = sw.Fence("ns", "lease", 5)
    with sw.Client(scripted.target, timeout=10) as client:
        result = client.delete(
            REF, preconditions=sw.Preconditions(uid="u", cel="true"),
            propagation_policy=sw.PropagationPolicy.ORPHAN, dry_run=True,
            retry_policy=sw.RetryPolicy(max_attempts=3), fence=fence,
        )
        with sw.fenced(sw.Fence("ns", "lease", 6)):
            client.delete(REF)
            client.send(writer_pb2.DeleteRequest(target=writer_pb2.ObjectRef(name="raw")))
        with pytest.raises(TypeError, match="PropagationPolicy"):
            client.delete(REF, propagation_policy="Orphan")  # type: ignore[arg-type]
    assert result.outcome == sw.DeleteOutcome.DELETING and result.deleting and not result.gone
    assert result.deletion_timestamp == datetime.datetime(2026, 11, 28, 11, 28, 13, tzinfo=datetime.timezone.utc)
    assert result.object["metadata"]["deletionTimestamp"] == "2026-11-28T11:28:13Z"
    assert result.attempts == 2 and [r.http_status for r in result.attempt_records] == [409, 200]
    first, current, raw = scripted.deletes
    assert (first.preconditions.uid, first.preconditions.cel) == ("u", "true")
    assert first.propagation_policy == writer_pb2.PROPAGATION_POLICY_ORPHAN and first.dry_run
    assert first.retry_policy.max_attempts == 3 and first.fence.epoch == 5
    assert current.fence.epoch == 6 and current.propagation_policy == 0 and not current.dry_run
    assert not raw.HasField("fence")  # a message built by the caller is sent as built


def test_a_delete_is_always_safe_to_send_again() -> None:
    call = sw._core.delete(REF)
    err = call.error(FakeRpcError(grpc.StatusCode.DEADLINE_EXCEEDED, "cut off", None))
    assert err.idempotent and err.retryable
