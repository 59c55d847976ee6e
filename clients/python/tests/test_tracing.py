"""The caller's OpenTelemetry trace continues in the sidecar: a call made inside a span
returns that span's trace id (against a real sidecar)."""

from __future__ import annotations

import asyncio
import re
import threading
from typing import Any, Dict, List

import pytest

import safewrite_client as sw

from conftest import INCREMENT

HEX32 = re.compile(r"^[0-9a-f]{32}$")


def trace_id_of(span: Any) -> str:
    """A span's trace id as the sidecar reports it: 32 lower-case hex digits."""
    return "%032x" % span.get_span_context().trace_id


def bump(obj: Dict[str, Any]) -> None:
    obj["data"]["n"] = str(int(obj["data"]["n"]) + 1)


def test_update_and_transact_join_the_callers_trace(
    client: sw.Client, counter: sw.ObjectRef, tracer: Any
) -> None:
    with tracer.start_as_current_span("reconcile") as span:
        updated = client.update(counter, sw.cel(INCREMENT))
        transacted = client.transact(counter, bump)
        unchanged = client.update(counter, sw.merge_patch({}))
    want = trace_id_of(span)
    assert HEX32.match(want)
    assert updated.trace_id == want
    assert transacted.trace_id == want
    assert unchanged.trace_id == want
    assert transacted.object["data"] == {"n": "2"}

    # Outside any span, each call is the root of a fresh trace.
    outside = client.update(counter, sw.cel(INCREMENT))
    again = client.transact(counter, bump)
    for result in (outside, again):
        assert HEX32.match(result.trace_id), result.trace_id
        assert result.trace_id != want
    assert outside.trace_id != again.trace_id


def test_get_joins_the_callers_trace_and_its_errors_carry_it(
    client: sw.Client, counter: sw.ObjectRef, tracer: Any
) -> None:
    written = client.update(counter, sw.cel(INCREMENT))
    with tracer.start_as_current_span("read") as span:
        remembered = client.get(counter, at_least=written)
        live = client.get(counter)
        with pytest.raises(sw.InvalidError) as refused:
            client.get(counter, min_resource_version="1&watch=true")
    assert remembered.remembered and not live.remembered
    assert remembered.trace_id == live.trace_id == refused.value.trace_id == trace_id_of(span)


def test_patch_status_joins_the_callers_trace(
    client: sw.Client, widget: sw.ObjectRef, tracer: Any
) -> None:
    with tracer.start_as_current_span("status") as span:
        result = client.patch_status(widget, sw.cel('{"status": {"count": object.status.count + 1}}'))
        transacted = client.transact(
            widget, lambda obj: {**obj, "status": {"count": 5}}, status=True
        )
    assert result.object["status"] == {"count": 1}
    assert result.trace_id == transacted.trace_id == trace_id_of(span)


def test_errors_carry_the_callers_trace_id(
    client: sw.Client, counter: sw.ObjectRef, tracer: Any
) -> None:
    with tracer.start_as_current_span("reconcile") as span:
        with pytest.raises(sw.PreconditionFailedError) as failed:
            client.update(
                counter, sw.cel(INCREMENT), preconditions=sw.Preconditions(uid="wrong")
            )
        with pytest.raises(sw.PreconditionFailedError) as refused:
            client.transact(counter, bump, preconditions=sw.Preconditions(uid="wrong"))
    assert failed.value.trace_id == trace_id_of(span)
    assert refused.value.trace_id == trace_id_of(span)


def test_each_thread_propagates_its_own_span(
    client: sw.Client, counter: sw.ObjectRef, tracer: Any
) -> None:
    """One shared client: the context is read in the calling thread, per call."""
    got: List[Any] = [None] * 4

    def work(i: int) -> None:
        with tracer.start_as_current_span("worker-%d" % i) as span:
            if i % 2:
                result = client.transact(counter, bump)
            else:
                result = client.update(counter, sw.cel(INCREMENT))
            got[i] = (trace_id_of(span), result.trace_id)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(got))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(want == have for want, have in got), got
    assert len({want for want, _ in got}) == len(got)


def test_propagation_can_be_turned_off(
    addr: str, counter: sw.ObjectRef, tracer: Any
) -> None:
    with sw.Client(addr, timeout=60, propagate_trace=False) as quiet:
        with tracer.start_as_current_span("reconcile") as span:
            updated = quiet.update(counter, sw.cel(INCREMENT))
            transacted = quiet.transact(counter, bump)
    for result in (updated, transacted):
        assert HEX32.match(result.trace_id)
        assert result.trace_id != trace_id_of(span)


def test_an_unsampled_callers_trace_is_continued_too(
    client: sw.Client, counter: sw.ObjectRef
) -> None:
    """The trace id travels even when the caller does not record its span (its
    sampler dropped it): logs and results still name the caller's trace."""
    sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")
    sampling = pytest.importorskip("opentelemetry.sdk.trace.sampling")
    tracer = sdk_trace.TracerProvider(sampler=sampling.ALWAYS_OFF).get_tracer("t")
    with tracer.start_as_current_span("dropped") as span:
        assert not span.get_span_context().trace_flags.sampled
        result = client.update(counter, sw.cel(INCREMENT))
    assert result.trace_id == trace_id_of(span)


def test_async_update_and_transact_join_the_callers_trace(
    addr: str, counter: sw.ObjectRef, widget: sw.ObjectRef, tracer: Any
) -> None:
    async def abump(obj: Dict[str, Any]) -> None:
        await asyncio.sleep(0)
        bump(obj)

    async def main() -> None:
        async with sw.AsyncClient(addr, timeout=60) as client:
            with tracer.start_as_current_span("reconcile") as span:
                updated = await client.update(counter, sw.cel(INCREMENT))
                transacted = await client.transact(counter, abump)
                plain = await client.transact(counter, bump)
                status = await client.patch_status(widget, sw.merge_patch({"status": {"count": 3}}))
            want = trace_id_of(span)
            for result in (updated, transacted, plain, status):
                assert result.trace_id == want
            assert plain.object["data"] == {"n": "3"}

            outside = await client.update(counter, sw.cel(INCREMENT))
            assert HEX32.match(outside.trace_id) and outside.trace_id != want

            with tracer.start_as_current_span("failing") as failing:
                with pytest.raises(sw.PreconditionFailedError) as failed:
                    await client.update(
                        counter, sw.cel(INCREMENT), preconditions=sw.Preconditions(uid="x")
                    )
            assert failed.value.trace_id == trace_id_of(failing)

    asyncio.run(main())


def test_async_tasks_propagate_their_own_spans(
    addr: str, counter: sw.ObjectRef, tracer: Any
) -> None:
    """Concurrent tasks on one AsyncClient: each call carries its own task's span."""

    async def one(client: sw.AsyncClient, i: int) -> Any:
        with tracer.start_as_current_span("task-%d" % i) as span:
            await asyncio.sleep(0)
            if i % 2:
                result = await client.transact(counter, bump)
            else:
                result = await client.update(counter, sw.cel(INCREMENT))
            return trace_id_of(span), result.trace_id

    async def main() -> List[Any]:
        async with sw.AsyncClient(addr, timeout=60) as client:
            return list(await asyncio.gather(*(one(client, i) for i in range(6))))

    got = asyncio.run(main())
    assert all(want == have for want, have in got), got
    assert len({want for want, _ in got}) == len(got)
