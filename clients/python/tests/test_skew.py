"""The skew check against fake sidecars of either age, with no real sidecar: one older
than 0.2.0 (``Capabilities`` UNIMPLEMENTED), one that says it lacks a field, one whose
``Capabilities`` fails, many calls at once, both clients. What the fake receives shows
what was sent. test_conformance.py runs the shared skew cases against the real
sidecar."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent import futures
from typing import Any, Callable, Iterator, List, Optional

import grpc
import pytest
from google.protobuf import any_pb2, duration_pb2
from google.rpc import error_details_pb2, status_pb2

import safewrite_client as sw
from conftest import capabilities_of
from safewrite_client import _skew as skew
from safewrite_client.v1 import writer_pb2, writer_pb2_grpc

REF = sw.ObjectRef("v1", "ConfigMap", "ns", "cm")
FENCE = sw.Fence("ns", "leader", 1)
OLDER = "older than 0.2.0 (it has no rpc Capabilities)"

#: Answers Capabilities for the n-th call (1, 2, ...): a response, or aborts.
Answer = Callable[[int, Any], Any]


class SkewWriter(writer_pb2_grpc.WriterServiceServicer):
    """A fake sidecar that counts its Capabilities calls and records the other calls it
    receives; ``answer`` None answers Capabilities UNIMPLEMENTED, as before 0.2.0."""

    def __init__(self, answer: Optional[Answer] = None, update: Optional[Callable[[Any], None]] = None) -> None:
        self.answer = answer
        self.update = update
        self.lock = threading.Lock()
        self.asked = 0
        self.sent: List[str] = []

    def Capabilities(self, request: Any, context: Any) -> Any:
        with self.lock:
            self.asked += 1
            n = self.asked
        if self.answer is None:
            return super().Capabilities(request, context)
        return self.answer(n, context)

    def _received(self, method: str) -> None:
        with self.lock:
            self.sent.append(method)

    def UpdateWithRetry(self, request: Any, context: Any) -> Any:
        self._received("UpdateWithRetry")
        if self.update is not None:
            self.update(context)
        return writer_pb2.UpdateWithRetryResponse(
            result=writer_pb2.WriteResult(outcome=writer_pb2.OUTCOME_UPDATED, object_json="{}", attempts=1)
        )

    def PatchStatus(self, request: Any, context: Any) -> Any:
        self._received("PatchStatus")
        return writer_pb2.PatchStatusResponse(
            result=writer_pb2.WriteResult(outcome=writer_pb2.OUTCOME_UPDATED, object_json="{}", attempts=1)
        )

    def Delete(self, request: Any, context: Any) -> Any:
        self._received("Delete")
        return writer_pb2.DeleteResponse(outcome=writer_pb2.DELETE_OUTCOME_GONE, attempts=1)

    def Lead(self, request: Any, context: Any) -> Iterator[Any]:
        self._received("Lead")
        context.abort(grpc.StatusCode.PERMISSION_DENIED, "fake")
        yield  # pragma: no cover

    def Transact(self, requests: Any, context: Any) -> Iterator[Any]:
        self._received("Transact")
        next(requests)
        context.abort(grpc.StatusCode.UNAVAILABLE, "fake")
        yield  # pragma: no cover


def this_version(n: int, context: Any) -> Any:
    return capabilities_of()


def lacking_fence(n: int, context: Any) -> Any:
    return capabilities_of("0.2.0", ["safewrite.v1.WriteOptions.fence"])


@pytest.fixture
def serve() -> Iterator[Callable[[SkewWriter], str]]:
    """Returns a function serving a fake in process; the address of its server."""
    servers: List[grpc.Server] = []

    def start(writer: SkewWriter) -> str:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=20))
        writer_pb2_grpc.add_WriterServiceServicer_to_server(writer, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        servers.append(server)
        return "127.0.0.1:%d" % port

    yield start
    for server in servers:
        server.stop(None)


def check_refusal(err: sw.SafewriteError, feature: str, sidecar: str) -> None:
    """``err`` is the client's refusal of ``feature`` (since 0.2.0) before sending."""
    assert isinstance(err, sw.UnknownFieldError) and isinstance(err, sw.PreconditionFailedError), repr(err)
    assert err.code == grpc.StatusCode.FAILED_PRECONDITION
    assert (err.reason, err.domain) == ("UNKNOWN_FIELD", sw.DOMAIN)
    assert err.write_failure_reason == writer_pb2.REASON_UNKNOWN_FIELD
    assert not err.retryable
    for said in (feature, sidecar, "0.2.0 or newer", "nothing was sent", "docs/compatibility.md"):
        assert said in err.message, (said, err.message)
    assert (err.feature, err.since) == (feature, "0.2.0")


def test_the_index_is_the_protos() -> None:
    assert skew.SINCE.methods == {"Lead": "0.2.0", "Delete": "0.2.0", "Capabilities": "0.2.0"}
    assert skew.SINCE.fields == {"safewrite.v1.WriteOptions.fence": "0.2.0"}
    assert skew.SINCE.values == {}
    assert skew.SINCE.capabilities == "0.2.0"
    # Only the messages that can hold the fence are walked.
    assert set(skew.SINCE.walked) == {
        "safewrite.v1.UpdateWithRetryRequest", "safewrite.v1.PatchStatusRequest",
        "safewrite.v1.TransactRequest", "safewrite.v1.TransactBegin", "safewrite.v1.WriteOptions",
    }


def test_uses_names_what_a_request_sets() -> None:
    fenced = writer_pb2.UpdateWithRetryRequest(options=writer_pb2.WriteOptions(fence=writer_pb2.Fence(epoch=1)))
    assert skew.SINCE.uses("UpdateWithRetry", fenced) == [skew.Use(
        "safewrite.v1.WriteOptions.fence", "0.2.0",
        (("field", "options"), ("message", "safewrite.v1.WriteOptions"), ("number", "6")),
    )]
    plain = writer_pb2.UpdateWithRetryRequest(options=writer_pb2.WriteOptions(field_manager="me"))
    assert skew.SINCE.uses("UpdateWithRetry", plain) == []
    assert [u.name for u in skew.SINCE.uses("Delete", writer_pb2.DeleteRequest())] == [
        "safewrite.v1.WriterService/Delete"
    ]

    # An enum value with value_since (the proto has none yet): an index that says
    # PROPAGATION_POLICY_ORPHAN came in 0.3.0.
    index = skew.SinceIndex(writer_pb2.DESCRIPTOR)
    enum = writer_pb2.PropagationPolicy.DESCRIPTOR
    index.values = {enum.full_name: {writer_pb2.PROPAGATION_POLICY_ORPHAN: "0.3.0"}}
    index.walked["safewrite.v1.DeleteRequest"] = {
        "propagation_policy": skew._Walked("", False, None, enum, None)
    }
    orphan = writer_pb2.DeleteRequest(propagation_policy=writer_pb2.PROPAGATION_POLICY_ORPHAN)
    uses = index.uses("Get", orphan)
    assert uses == [skew.Use(
        "safewrite.v1.PropagationPolicy.PROPAGATION_POLICY_ORPHAN", "0.3.0",
        (("field", "propagation_policy"), ("enum", "safewrite.v1.PropagationPolicy"), ("value", "3")),
    )]
    err = skew.SidecarFeatures("0.2.0", frozenset()).missing(uses)
    assert err is not None and err.message == (
        "safewrite.v1.PropagationPolicy.PROPAGATION_POLICY_ORPHAN needs a sidecar of 0.3.0 or newer; "
        "this sidecar is 0.2.0; nothing was sent (docs/compatibility.md)"
    )
    foreground = writer_pb2.DeleteRequest(propagation_policy=writer_pb2.PROPAGATION_POLICY_FOREGROUND)
    assert index.uses("Get", foreground) == []


def test_the_check_of_an_old_call_is_cheap() -> None:
    """A call of 0.1.0's features: a walk of the set fields of two messages, no
    Capabilities call (about 2 us here; the bound is loose, for slow machines)."""
    request = writer_pb2.UpdateWithRetryRequest(
        target=writer_pb2.ObjectRef(api_version="v1", kind="ConfigMap", namespace="ns", name="cm"),
        mutation=writer_pb2.Mutation(cel=writer_pb2.CelMutation(expression="{}")),
        options=writer_pb2.WriteOptions(field_manager="me", idempotency_key="k"),
    )
    n = 2000
    started = time.perf_counter()
    for _ in range(n):
        assert not skew.SINCE.uses("UpdateWithRetry", request)
    per_call = (time.perf_counter() - started) / n
    assert per_call < 200e-6, "%.1f us per check" % (per_call * 1e6)


def test_an_older_sidecar_gets_no_new_feature(serve: Callable[[SkewWriter], str]) -> None:
    writer = SkewWriter()
    with sw.Client(serve(writer), timeout=10) as client:
        client.update(REF, sw.merge_patch({}))  # needs nothing new: sent without asking
        assert writer.asked == 0

        with pytest.raises(sw.SafewriteError) as info:
            client.update(REF, sw.merge_patch({}), fence=FENCE)
        check_refusal(info.value, "safewrite.v1.WriteOptions.fence", OLDER)
        assert info.value.error_metadata["field"] == "options"
        assert info.value.sidecar_version == ""
        with sw.fenced(FENCE), pytest.raises(sw.UnknownFieldError) as info:
            client.patch_status(REF, sw.merge_patch({}))
        check_refusal(info.value, "safewrite.v1.WriteOptions.fence", OLDER)
        with pytest.raises(sw.UnknownFieldError) as info:
            client.transact(REF, lambda obj: None, fence=FENCE)
        check_refusal(info.value, "safewrite.v1.WriteOptions.fence", OLDER)
        with pytest.raises(sw.UnknownFieldError) as info:
            client.delete(REF)
        check_refusal(info.value, "safewrite.v1.WriterService/Delete", OLDER)
        assert info.value.idempotent  # a delete is
        with pytest.raises(sw.UnknownFieldError) as info:
            client.send(writer_pb2.DeleteRequest(target=writer_pb2.ObjectRef(api_version="v1", kind="ConfigMap", name="x")))
        check_refusal(info.value, "safewrite.v1.WriterService/Delete", OLDER)
        with pytest.raises(sw.UnknownFieldError) as info:
            with client.lead("ns", "leader"):
                pass
        check_refusal(info.value, "safewrite.v1.WriterService/Lead", OLDER)

        # A transaction without a fence is sent; the fake fails it.
        with pytest.raises(sw.UnavailableError):
            client.transact(REF, lambda obj: None)
    assert writer.asked == 1
    assert writer.sent == ["UpdateWithRetry", "Transact"]


def test_a_sidecar_of_this_version_gets_everything(serve: Callable[[SkewWriter], str]) -> None:
    writer = SkewWriter(this_version)
    with sw.Client(serve(writer), timeout=10) as client:
        client.update(REF, sw.merge_patch({}), fence=FENCE)
        assert client.delete(REF).outcome == sw.DeleteOutcome.GONE
        with pytest.raises(sw.PermissionDeniedError):
            with client.lead("ns", "leader"):
                pass
    assert writer.asked == 1
    assert writer.sent == ["UpdateWithRetry", "Delete", "Lead"]


def test_a_sidecar_that_lacks_a_field(serve: Callable[[SkewWriter], str]) -> None:
    writer = SkewWriter(lacking_fence)
    with sw.Client(serve(writer), timeout=10) as client:
        with pytest.raises(sw.UnknownFieldError) as info:
            client.update(REF, sw.merge_patch({}), fence=FENCE)
    check_refusal(info.value, "safewrite.v1.WriteOptions.fence", "this sidecar is 0.2.0;")
    assert info.value.sidecar_version == "0.2.0"
    assert writer.sent == []


def unlearned(said: str) -> str:
    """The message of a call not sent because Capabilities failed with ``said``."""
    return "the sidecar's features could not be learned (rpc Capabilities: %s); nothing was sent" % said


#: What a call that waited past its timeout for another call's answer says.
WAITED = "another call was asking it, and this call's timeout ran out before the answer came"


def wait_until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def failing_first(code: grpc.StatusCode, then: Answer, details: Optional[bytes] = None) -> Answer:
    """Fails the first Capabilities call with ``code`` (message "not yet", the rich
    ``details`` if given); answers the later ones with ``then``."""

    def answer(n: int, context: Any) -> Any:
        if n == 1:
            if details is not None:
                context.set_trailing_metadata((("grpc-status-details-bin", details),))
            context.abort(code, "not yet")
        return then(n, context)

    return answer


def test_a_failed_capabilities_call_fails_closed_and_is_asked_again(serve: Callable[[SkewWriter], str]) -> None:
    """Capabilities failing (but UNIMPLEMENTED) leaves the sidecar unknown: a call that
    needs something added after 0.1.0 is not sent (an older sidecar that failed
    Capabilities for a moment would drop the fence and write unfenced) and raises the
    client's error for that status; nothing is kept, and the next call asks again."""
    writer = SkewWriter(failing_first(grpc.StatusCode.UNAVAILABLE, lacking_fence))
    with sw.Client(serve(writer), timeout=10) as client:
        client.update(REF, sw.merge_patch({}))  # needs nothing new: sent without asking
        assert writer.asked == 0

        with pytest.raises(sw.SafewriteError) as info:
            client.update(REF, sw.merge_patch({}), fence=FENCE)
        err = info.value
        assert type(err) is sw.UnavailableError, repr(err)
        assert err.code == grpc.StatusCode.UNAVAILABLE
        assert err.message == unlearned("not yet")
        assert err.retryable  # as any UNAVAILABLE: nothing was sent, the same call may pass
        assert (err.reason, err.write_failure_reason) == (None, writer_pb2.REASON_UNSPECIFIED)
        assert (writer.asked, writer.sent) == (1, ["UpdateWithRetry"])

        client.update(REF, sw.merge_patch({}))  # still sent without asking
        assert writer.asked == 1

        # Asked again; this answer says the sidecar lacks the fence: refused, and kept.
        for _ in range(2):
            with pytest.raises(sw.UnknownFieldError) as refused:
                client.update(REF, sw.merge_patch({}), fence=FENCE)
            check_refusal(refused.value, "safewrite.v1.WriteOptions.fence", "this sidecar is 0.2.0;")
    assert (writer.asked, writer.sent) == (2, ["UpdateWithRetry", "UpdateWithRetry"])


def overloaded() -> bytes:
    """The rich details of a sidecar's RESOURCE_EXHAUSTED (its in-flight limit)."""
    info, retry, failure = any_pb2.Any(), any_pb2.Any(), any_pb2.Any()
    info.Pack(error_details_pb2.ErrorInfo(reason="OVERLOADED", domain=sw.DOMAIN, metadata={"limit": "1"}))
    retry.Pack(error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=2)))
    failure.Pack(writer_pb2.WriteFailure(reason=writer_pb2.REASON_OVERLOADED))
    raw = status_pb2.Status(
        code=grpc.StatusCode.RESOURCE_EXHAUSTED.value[0], message="not yet", details=[info, retry, failure]
    )
    return bytes(raw.SerializeToString())


def check_overloaded(err: sw.SafewriteError) -> None:
    """``err`` is the RESOURCE_EXHAUSTED of :func:`overloaded`, passed through."""
    assert type(err) is sw.ResourceExhaustedError, repr(err)
    assert err.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert err.message == unlearned("not yet")
    assert (err.reason, err.domain, err.error_metadata) == ("OVERLOADED", sw.DOMAIN, {"limit": "1"})
    assert (err.write_failure_reason, err.retry_delay) == (writer_pb2.REASON_OVERLOADED, 2.0)
    assert err.retryable and err.idempotent  # nothing was sent: nothing is in doubt


def test_another_status_of_capabilities_passes_through(serve: Callable[[SkewWriter], str]) -> None:
    """RESOURCE_EXHAUSTED (the in-flight limit), with its rich details, is the client's
    ResourceExhaustedError; a delete (idempotent) too; then a sidecar of this version
    gets both."""
    writer = SkewWriter(failing_first(grpc.StatusCode.RESOURCE_EXHAUSTED, this_version, overloaded()))
    with sw.Client(serve(writer), timeout=10) as client:
        with pytest.raises(sw.SafewriteError) as info:
            client.update(REF, sw.merge_patch({}), fence=FENCE)
        check_overloaded(info.value)
        assert (writer.asked, writer.sent) == (1, [])
        client.update(REF, sw.merge_patch({}), fence=FENCE)
        assert client.delete(REF).gone
    assert (writer.asked, writer.sent) == (2, ["UpdateWithRetry", "Delete"])

    writer = SkewWriter(failing_first(grpc.StatusCode.RESOURCE_EXHAUSTED, this_version, overloaded()))
    with sw.Client(serve(writer), timeout=10) as client:
        with pytest.raises(sw.SafewriteError) as info:
            client.delete(REF)
        check_overloaded(info.value)
    assert (writer.asked, writer.sent) == (1, [])


def test_a_capabilities_call_past_the_timeout(serve: Callable[[SkewWriter], str]) -> None:
    """A Capabilities call that outlasts the call's timeout: DEADLINE_EXCEEDED, nothing
    sent, so retryable even without an idempotency key."""

    def slow(n: int, context: Any) -> Any:
        time.sleep(1)
        return capabilities_of()

    writer = SkewWriter(slow)
    with sw.Client(serve(writer), timeout=10) as client:
        with pytest.raises(sw.SafewriteError) as info:
            client.update(REF, sw.merge_patch({}), fence=FENCE, timeout=0.2)
    err = info.value
    assert type(err) is sw.DeadlineExceededError, repr(err)
    assert err.message.startswith("the sidecar's features could not be learned (rpc Capabilities: ")
    assert err.message.endswith("); nothing was sent")
    assert err.idempotent and err.retryable
    assert (writer.asked, writer.sent) == (1, [])


def test_a_waiter_whose_timeout_runs_out(serve: Callable[[SkewWriter], str]) -> None:
    """A call waiting for another call's Capabilities answer past its own timeout fails
    with DEADLINE_EXCEEDED, not sent; the asking call goes on."""
    release = threading.Event()

    def slow(n: int, context: Any) -> Any:
        release.wait(10)
        return capabilities_of()

    writer = SkewWriter(slow)
    with sw.Client(serve(writer), timeout=10) as client, futures.ThreadPoolExecutor(max_workers=1) as pool:
        asking = pool.submit(client.update, REF, sw.merge_patch({}), fence=FENCE)
        wait_until(lambda: writer.asked == 1)
        started = time.monotonic()
        with pytest.raises(sw.SafewriteError) as info:
            client.update(REF, sw.merge_patch({}), fence=FENCE, timeout=0.2)
        assert time.monotonic() - started < 5
        release.set()
        assert asking.result(10).outcome == sw.Outcome.UPDATED
    err = info.value
    assert type(err) is sw.DeadlineExceededError, repr(err)
    assert err.message == unlearned(WAITED)
    assert err.idempotent and err.retryable  # nothing was sent, though it has no key
    assert (writer.asked, writer.sent) == (1, ["UpdateWithRetry"])


def test_the_decision_is_one_for_both_clients() -> None:
    """skew.refusal: what a call learned decides, before sending; an exception that is no
    gRPC status (e.g. a closed channel's) is UNKNOWN."""
    uses = skew.SINCE.uses("Delete", writer_pb2.DeleteRequest())
    assert skew.refusal(uses, skew.features_of(capabilities_of())) is None
    refused = skew.refusal(uses, skew.OLDER)
    assert refused is not None
    check_refusal(refused, "safewrite.v1.WriterService/Delete", OLDER)
    learned = skew.answered(ValueError("Cannot invoke RPC on closed channel!"))
    assert learned == skew.Unlearned(grpc.StatusCode.UNKNOWN, "ValueError: Cannot invoke RPC on closed channel!")
    err = skew.refusal(uses, learned, idempotent=True)
    assert type(err) is sw.SafewriteError and err.code == grpc.StatusCode.UNKNOWN
    assert err.message == unlearned("ValueError: Cannot invoke RPC on closed channel!")
    assert err.idempotent and err.retryable


def test_asked_once_under_concurrent_calls(serve: Callable[[SkewWriter], str]) -> None:
    def slow(n: int, context: Any) -> Any:
        time.sleep(0.05)  # the other calls arrive meanwhile
        return capabilities_of()

    writer = SkewWriter(slow)
    with sw.Client(serve(writer), timeout=10) as client:
        with futures.ThreadPoolExecutor(max_workers=16) as pool:
            results = list(pool.map(lambda _: client.update(REF, sw.merge_patch({}), fence=FENCE), range(16)))
    assert len(results) == 16
    assert (writer.asked, len(writer.sent)) == (1, 16)


def sidecars_refusal(context: Any) -> None:
    """Fails the call as a sidecar of 0.2.0 refuses a field it does not know."""
    info, failure = any_pb2.Any(), any_pb2.Any()
    info.Pack(error_details_pb2.ErrorInfo(reason="UNKNOWN_FIELD", domain=sw.DOMAIN, metadata={
        "field": "options", "message": "safewrite.v1.WriteOptions", "number": "6", "sidecar_version": "0.2.0"}))
    failure.Pack(writer_pb2.WriteFailure(reason=writer_pb2.REASON_UNKNOWN_FIELD))
    message = ("the request's `options` sets field 6 of safewrite.v1.WriteOptions, which this sidecar does not "
               "know (safewrite 0.2.0): the client is newer than this sidecar; nothing was sent")
    raw = status_pb2.Status(code=grpc.StatusCode.FAILED_PRECONDITION.value[0], message=message, details=[info, failure])
    context.set_trailing_metadata((("grpc-status-details-bin", raw.SerializeToString()),))
    context.abort(grpc.StatusCode.FAILED_PRECONDITION, message)


def test_the_sidecars_refusal_is_the_same_error(serve: Callable[[SkewWriter], str]) -> None:
    sending = SkewWriter(this_version, update=sidecars_refusal)  # says it has the fence: sent
    with sw.Client(serve(sending), timeout=10) as client, pytest.raises(sw.SafewriteError) as sidecars:
        client.update(REF, sw.merge_patch({}), fence=FENCE)
    with sw.Client(serve(SkewWriter()), timeout=10) as client, pytest.raises(sw.SafewriteError) as clients:
        client.update(REF, sw.merge_patch({}), fence=FENCE)
    for err in (sidecars.value, clients.value):
        assert type(err) is sw.UnknownFieldError
        assert (err.code, err.reason, err.write_failure_reason, err.retryable) == (
            grpc.StatusCode.FAILED_PRECONDITION, "UNKNOWN_FIELD", writer_pb2.REASON_UNKNOWN_FIELD, False
        )
    assert sidecars.value.feature is None and sidecars.value.sidecar_version == "0.2.0"
    assert sending.sent == ["UpdateWithRetry"]


def test_async_an_older_sidecar_gets_no_new_feature(serve: Callable[[SkewWriter], str]) -> None:
    writer = SkewWriter()
    address = serve(writer)

    async def main() -> None:
        async with sw.AsyncClient(address, timeout=10) as client:
            await client.update(REF, sw.merge_patch({}))
            assert writer.asked == 0
            with pytest.raises(sw.UnknownFieldError) as info:
                await client.update(REF, sw.merge_patch({}), fence=FENCE)
            check_refusal(info.value, "safewrite.v1.WriteOptions.fence", OLDER)
            with pytest.raises(sw.UnknownFieldError) as info:
                await client.transact(REF, lambda obj: None, fence=FENCE)
            check_refusal(info.value, "safewrite.v1.WriteOptions.fence", OLDER)
            with pytest.raises(sw.UnknownFieldError) as info:
                await client.delete(REF)
            check_refusal(info.value, "safewrite.v1.WriterService/Delete", OLDER)
            with pytest.raises(sw.UnknownFieldError) as info:
                async with client.lead("ns", "leader"):
                    pass
            check_refusal(info.value, "safewrite.v1.WriterService/Lead", OLDER)

    asyncio.run(main())
    assert (writer.asked, writer.sent) == (1, ["UpdateWithRetry"])


def test_async_asked_once_under_concurrent_calls(serve: Callable[[SkewWriter], str]) -> None:
    def slow(n: int, context: Any) -> Any:
        time.sleep(0.05)
        return lacking_fence(n, context)

    writer = SkewWriter(slow)
    address = serve(writer)

    async def main() -> List[Any]:
        async with sw.AsyncClient(address, timeout=10) as client:
            calls = [client.update(REF, sw.merge_patch({}), fence=FENCE) for _ in range(16)]
            calls += [client.update(REF, sw.merge_patch({})) for _ in range(4)]
            return await asyncio.gather(*calls, return_exceptions=True)

    outcomes = asyncio.run(main())
    refused = [o for o in outcomes if isinstance(o, sw.UnknownFieldError)]
    assert len(refused) == 16 and all(isinstance(o, sw.Result) for o in outcomes[16:]), outcomes
    assert (writer.asked, writer.sent) == (1, ["UpdateWithRetry"] * 4)


def test_async_a_failed_capabilities_call_fails_closed_and_is_asked_again(
    serve: Callable[[SkewWriter], str],
) -> None:
    writer = SkewWriter(failing_first(grpc.StatusCode.UNAVAILABLE, this_version))
    address = serve(writer)

    async def main() -> None:
        async with sw.AsyncClient(address, timeout=10) as client:
            await client.update(REF, sw.merge_patch({}))  # needs nothing new: not asked
            assert writer.asked == 0
            with pytest.raises(sw.SafewriteError) as info:
                await client.update(REF, sw.merge_patch({}), fence=FENCE)
            err = info.value
            assert type(err) is sw.UnavailableError, repr(err)
            assert (err.code, err.message, err.retryable) == (
                grpc.StatusCode.UNAVAILABLE, unlearned("not yet"), True
            )
            assert (writer.asked, writer.sent) == (1, ["UpdateWithRetry"])
            # Asked again; a sidecar of this version: sent, and kept.
            await client.update(REF, sw.merge_patch({}), fence=FENCE)
            assert (await client.delete(REF)).gone

    asyncio.run(main())
    assert (writer.asked, writer.sent) == (2, ["UpdateWithRetry", "UpdateWithRetry", "Delete"])


def test_async_another_status_of_capabilities_passes_through(serve: Callable[[SkewWriter], str]) -> None:
    writer = SkewWriter(failing_first(grpc.StatusCode.RESOURCE_EXHAUSTED, lacking_fence, overloaded()))
    address = serve(writer)

    async def main() -> None:
        async with sw.AsyncClient(address, timeout=10) as client:
            with pytest.raises(sw.SafewriteError) as info:
                await client.update(REF, sw.merge_patch({}), fence=FENCE)
            check_overloaded(info.value)
            assert (writer.asked, writer.sent) == (1, [])
            with pytest.raises(sw.UnknownFieldError) as refused:
                await client.update(REF, sw.merge_patch({}), fence=FENCE)
            check_refusal(refused.value, "safewrite.v1.WriteOptions.fence", "this sidecar is 0.2.0;")

    asyncio.run(main())
    assert (writer.asked, writer.sent) == (2, [])


def test_async_the_waiters_share_the_failure(serve: Callable[[SkewWriter], str]) -> None:
    """Calls awaiting one failing Capabilities call all fail with its status; a waiter
    whose own timeout runs out first fails with DEADLINE_EXCEEDED; none is sent."""
    release = threading.Event()

    def slow(n: int, context: Any) -> Any:
        release.wait(10)
        context.abort(grpc.StatusCode.UNAVAILABLE, "not yet")

    writer = SkewWriter(slow)
    address = serve(writer)

    async def main() -> List[Any]:
        async with sw.AsyncClient(address, timeout=10) as client:
            calls = [asyncio.ensure_future(client.update(REF, sw.merge_patch({}), fence=FENCE)) for _ in range(4)]
            while writer.asked == 0:
                await asyncio.sleep(0.01)
            with pytest.raises(sw.SafewriteError) as info:
                await client.update(REF, sw.merge_patch({}), fence=FENCE, timeout=0.2)
            release.set()
            return [info.value] + list(await asyncio.gather(*calls, return_exceptions=True))

    waited, *failed = asyncio.run(main())
    assert type(waited) is sw.DeadlineExceededError and waited.message == unlearned(WAITED), repr(waited)
    for err in failed:
        assert type(err) is sw.UnavailableError and err.message == unlearned("not yet"), repr(err)
    assert (writer.asked, writer.sent) == (1, [])


def test_async_a_cancelled_asker_leaves_the_asking_to_a_waiter(serve: Callable[[SkewWriter], str]) -> None:
    """The task asking Capabilities is cancelled: a task that awaited its answer asks
    itself, and is sent."""
    release = threading.Event()

    def first_slow(n: int, context: Any) -> Any:
        if n == 1:
            release.wait(10)
        return capabilities_of()

    writer = SkewWriter(first_slow)
    address = serve(writer)

    async def main() -> None:
        async with sw.AsyncClient(address, timeout=10) as client:
            asking = asyncio.ensure_future(client.update(REF, sw.merge_patch({}), fence=FENCE))
            while writer.asked == 0:
                await asyncio.sleep(0.01)
            waiting = asyncio.ensure_future(client.update(REF, sw.merge_patch({}), fence=FENCE))
            await asyncio.sleep(0.05)
            asking.cancel()
            assert (await waiting).outcome == sw.Outcome.UPDATED
            with pytest.raises(asyncio.CancelledError):
                await asking
            release.set()

    asyncio.run(main())
    assert (writer.asked, writer.sent) == (2, ["UpdateWithRetry"])
