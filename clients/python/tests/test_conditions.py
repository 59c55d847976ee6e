"""safewrite_client.conditions: the rules offline, then against the real sidecar."""

from __future__ import annotations

import asyncio
from typing import Any, Dict

import pytest

import safewrite_client as sw
from safewrite_client.conditions import Condition, find_condition, set_condition

T0, T1 = "2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z"


def test_a_new_condition_is_added_with_a_transition_time() -> None:
    obj: Dict[str, Any] = {"status": {"conditions": [{"type": "Other", "status": "True"}]}}
    assert set_condition(obj, Condition("Ready", True, "Done", "ok", observed_generation=2), now=T0)
    assert obj["status"]["conditions"][0] == {"type": "Other", "status": "True"}
    assert find_condition(obj, "Ready") == {
        "type": "Ready", "status": "True", "reason": "Done", "message": "ok",
        "lastTransitionTime": T0, "observedGeneration": 2,
    }


def test_transition_time_moves_only_when_status_changes() -> None:
    obj: Dict[str, Any] = {}
    set_condition(obj, Condition("Ready", "False", "Pending"), now=T0)
    assert not set_condition(obj, Condition("Ready", "False", "Pending"), now=T1)
    assert set_condition(obj, Condition("Ready", "False", "Waiting", "for x"), now=T1)
    assert find_condition(obj, "Ready")["lastTransitionTime"] == T0  # type: ignore[index]
    assert set_condition(obj, Condition("Ready", "True", "Done"), now=T1)
    assert find_condition(obj, "Ready")["lastTransitionTime"] == T1  # type: ignore[index]
    assert len(obj["status"]["conditions"]) == 1


@pytest.mark.parametrize(
    "args", [("Ready", "yes", "Done"), ("", "True", "Done"), ("Ready", "True", "not camel"), ("Ready", "True", "")]
)
def test_invalid_conditions_are_refused(args: Any) -> None:
    with pytest.raises(ValueError):
        Condition(*args)


def test_set_condition_through_the_sidecar(client: sw.Client, widget: sw.ObjectRef) -> None:
    ready = Condition("Ready", "False", "Starting", "waiting", observed_generation=1)
    first = client.transact(widget, ready, status=True)
    assert first.outcome == sw.Outcome.UPDATED
    since = find_condition(first.object, "Ready")["lastTransitionTime"]  # type: ignore[index]
    assert first.object["status"]["count"] == 0  # the rest of the status is kept

    again = client.transact(widget, ready, status=True)
    assert again.outcome == sw.Outcome.UNCHANGED
    assert again.resource_version == first.resource_version

    # Same status, new reason: written, transition time kept.
    waiting = client.transact(widget, Condition("Ready", "False", "Waiting", "x", 1), status=True)
    assert waiting.outcome == sw.Outcome.UPDATED
    assert find_condition(waiting.object, "Ready")["lastTransitionTime"] == since  # type: ignore[index]

    async def flip() -> sw.Result:
        async with sw.AsyncClient(timeout=30) as aclient:  # SAFEWRITE_ADDRESS
            await asyncio.sleep(1.1)  # transition times have whole seconds
            return await aclient.transact(widget, Condition("Ready", True, "Done", "", 1), status=True)

    done = asyncio.run(flip())
    cond = find_condition(done.object, "Ready")
    assert cond is not None and cond["status"] == "True" and cond["lastTransitionTime"] > since
