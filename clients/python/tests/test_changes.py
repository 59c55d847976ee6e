"""Conditions, finalizers, owner references and keyed list entries written through the
client's keywords against the real sidecar: the defaults the sidecar fills in, and
the answers a controller acts on (GONE, ObjectDeletingError, AlreadyOwnedError)."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any, Callable, Dict

import pytest

import safewrite_client as sw
from safewrite_client.conditions import find_condition


def parse_time(value: str) -> datetime.datetime:
    return datetime.datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)


def test_a_condition_takes_the_objects_generation_and_the_time_of_the_write(
    client: sw.Client, widget: sw.ObjectRef
) -> None:
    before = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    first = client.patch_status(widget, sw.set_conditions(sw.Condition("Ready", False, "Starting")))
    ready = find_condition(first.object, "Ready")
    assert first.outcome == sw.Outcome.UPDATED and ready is not None
    assert ready["observedGeneration"] == first.object["metadata"]["generation"] == 1
    since = parse_time(ready["lastTransitionTime"])
    assert before - datetime.timedelta(seconds=5) <= since <= before + datetime.timedelta(minutes=1)
    assert first.object["status"]["count"] == 0  # the rest of the status is kept
    assert client.patch_status(widget, sw.set_conditions([sw.Condition("Ready", False, "Starting")])).outcome == (
        sw.Outcome.UNCHANGED
    )

    # A new generation: set again, observedGeneration follows it, the time stays.
    client.update(widget, sw.merge_patch({"spec": {"size": 2}}))
    second = client.patch_status(widget, sw.set_conditions(sw.Condition("Ready", False, "Starting")))
    ready = find_condition(second.object, "Ready")
    assert second.outcome == sw.Outcome.UPDATED and ready is not None
    assert ready["observedGeneration"] == 2
    assert parse_time(ready["lastTransitionTime"]) == since

    removed = client.patch_status(widget, sw.remove_conditions("Ready"))
    assert removed.outcome == sw.Outcome.UPDATED
    assert find_condition(removed.object, "Ready") is None
    assert client.patch_status(widget, sw.remove_conditions(["Ready"])).outcome == sw.Outcome.UNCHANGED


def test_the_async_client_sets_conditions_too(widget: sw.ObjectRef) -> None:
    async def main() -> sw.Result:
        async with sw.AsyncClient(timeout=30) as client:  # SAFEWRITE_ADDRESS
            when = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
            ready = sw.Condition("Ready", True, "Done", "ok", observed_generation=7, last_transition_time=when)
            return await client.patch_status(widget, sw.set_conditions([ready]))

    result = asyncio.run(main())
    assert find_condition(result.object, "Ready") == {
        "type": "Ready", "status": "True", "reason": "Done", "message": "ok",
        "observedGeneration": 7, "lastTransitionTime": "2026-01-01T00:00:00Z",
    }


def test_a_finalizer_holds_a_deleted_object_until_it_is_removed_then_it_is_gone(
    client: sw.Client,
    configmap_ref: sw.ObjectRef,
    delete_configmap: Callable[[sw.ObjectRef], None],
) -> None:
    client.update(configmap_ref, sw.merge_patch({}), create_if_missing={"data": {"a": "1"}})
    added = client.update(configmap_ref, sw.add_finalizer("test.safewrite.dev/cleanup"))
    assert added.outcome == sw.Outcome.UPDATED
    assert added.object["metadata"]["finalizers"] == ["test.safewrite.dev/cleanup"]

    delete_configmap(configmap_ref)  # held by the finalizer: it has a deletionTimestamp now
    with pytest.raises(sw.ObjectDeletingError) as info:
        client.update(configmap_ref, sw.add_finalizer("test.safewrite.dev/other"))
    assert info.value.reason == "OBJECT_DELETING" and not info.value.retryable

    last = client.update(configmap_ref, sw.remove_finalizer("test.safewrite.dev/cleanup"))
    assert last.gone and last.outcome == sw.Outcome.GONE
    assert last.object["metadata"]["name"] == configmap_ref.name  # as last written
    assert not last.object["metadata"].get("finalizers")


def test_a_finalizer_removal_from_a_missing_object_is_gone(
    client: sw.Client, configmap_ref: sw.ObjectRef
) -> None:
    result = client.update(configmap_ref, sw.remove_finalizer("test.safewrite.dev/cleanup"))
    assert result.gone and result.object == {}


def test_owner_references_from_the_owner_objects(
    client: sw.Client, namespace: str, new_name: Callable[[], str]
) -> None:
    owners = []
    for _ in range(2):
        ref = sw.ObjectRef("v1", "ConfigMap", namespace, new_name())
        owners.append(client.update(ref, sw.merge_patch({}), create_if_missing={}).object)
    child = sw.ObjectRef("v1", "ConfigMap", namespace, new_name())
    client.update(child, sw.merge_patch({}), create_if_missing={})

    controller = sw.OwnerReference.of(owners[0], controller=True, block_owner_deletion=True)
    owned = client.update(child, sw.ensure_owner(controller))
    assert owned.outcome == sw.Outcome.UPDATED
    assert owned.object["metadata"]["ownerReferences"] == [{
        "apiVersion": "v1", "kind": "ConfigMap", "name": owners[0]["metadata"]["name"],
        "uid": owners[0]["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True,
    }]
    assert client.update(child, sw.ensure_owner(controller)).outcome == sw.Outcome.UNCHANGED

    with pytest.raises(sw.AlreadyOwnedError) as info:
        client.update(child, sw.ensure_owner(sw.OwnerReference.of(owners[1], controller=True)))
    assert info.value.controller is not None
    assert info.value.controller["uid"] == owners[0]["metadata"]["uid"]
    assert not info.value.retryable

    both = client.update(child, sw.ensure_owner(owners[1]))  # the object itself: not a controller
    assert [r["uid"] for r in both.object["metadata"]["ownerReferences"]] == [
        o["metadata"]["uid"] for o in owners
    ]
    client.update(child, sw.remove_owner(owners[1]))
    gone = client.update(child, sw.remove_owner(owners[0]))
    assert "ownerReferences" not in gone.object["metadata"]  # the last one takes the list


def test_a_keyed_list_entry_is_upserted_and_removed_among_others(
    client: sw.Client, widget: sw.ObjectRef
) -> None:
    keys = ("controllerName", "parentRef")
    theirs: Dict[str, Any] = {"controllerName": "other.example/gw", "parentRef": {"name": "gw"}, "ok": True}
    client.patch_status(widget, sw.merge_patch({"status": {"parents": [theirs]}}))

    mine = {"controllerName": "test.safewrite.dev/gw", "parentRef": {"name": "gw"}, "accepted": False}
    first = client.patch_status(widget, sw.upsert_list_entry(sw.ListEntry("status.parents", keys, mine)))
    assert first.object["status"]["parents"] == [theirs, mine]
    accepted = {**mine, "accepted": True, "reason": None}
    second = client.patch_status(widget, sw.upsert_list_entry(sw.ListEntry("status.parents", keys, accepted)))
    assert second.object["status"]["parents"] == [theirs, {**mine, "accepted": True}]
    same = client.patch_status(widget, sw.upsert_list_entry(sw.ListEntry("status.parents", keys, accepted)))
    assert same.outcome == sw.Outcome.UNCHANGED

    key_only = {"controllerName": "test.safewrite.dev/gw", "parentRef": {"name": "gw"}}
    removed = client.patch_status(widget, sw.remove_list_entry(sw.ListEntry("status.parents", keys, key_only)))
    assert removed.object["status"]["parents"] == [theirs]
