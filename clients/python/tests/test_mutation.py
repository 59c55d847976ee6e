"""The mutations without a sidecar: each function (sw.cel, sw.set_conditions, ...)
builds exactly the Mutation the proto describes, and input the sidecar would refuse is
refused when the mutation is made, before anything is sent."""

from __future__ import annotations

import datetime
from typing import Any, Dict

import grpc
import pytest
from google.protobuf import json_format

import safewrite_client as sw
from safewrite_client import _core as core
from safewrite_client.v1 import writer_pb2

REF = sw.ObjectRef("test.safewrite.dev/v1", "Widget", "ns", "w")
UTC = datetime.timezone.utc


def built(method: str, mutation: sw.Mutation, ref: Any = REF, **kwargs: Any) -> Any:
    """The call (a ``core.Unary``) ``Client.<method>(ref, mutation, **kwargs)`` would
    send: the public signature, through the one write code."""
    client = sw.Client("127.0.0.1:1")
    client._unary = lambda call: call  # type: ignore[assignment, method-assign, return-value]
    try:
        return getattr(client, method)(ref, mutation, **kwargs)
    finally:
        client.close()


def sent(method: str, mutation: sw.Mutation) -> Dict[str, Any]:
    """The mutation a call with it sends, in proto3 JSON."""
    request = built(method, mutation).request
    return json_format.MessageToDict(request.mutation)


def test_set_conditions_sends_each_field_and_leaves_the_defaults_to_the_sidecar() -> None:
    ready = sw.Condition("Ready", True, "Reconciled", "3 replicas")
    assert sent("patch_status", sw.set_conditions([ready])) == {
        "setCondition": {
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "Reconciled", "message": "3 replicas"}
            ]
        }
    }
    request = built("patch_status", sw.set_conditions(ready)).request
    condition = request.mutation.set_condition.conditions[0]
    assert not condition.HasField("observed_generation")  # the fresh object's generation
    assert condition.last_transition_time == ""  # the time of the write


def test_set_conditions_with_every_field_and_a_path() -> None:
    synced = sw.Condition(
        "example.com/Synced", "False", "Pending", "", observed_generation=0,
        last_transition_time=datetime.datetime(2026, 1, 1, 1, 0, 0, 900000,
                                               tzinfo=datetime.timezone(datetime.timedelta(hours=1))),
    )
    unknown = sw.Condition("Ready", "Unknown", "Starting", last_transition_time="2026-02-02T03:04:05.5+02:00")
    assert sent("update", sw.set_conditions((synced, unknown), path="spec.conditions")) == {
        "setCondition": {
            "conditions": [
                {"type": "example.com/Synced", "status": "False", "reason": "Pending",
                 "observedGeneration": "0", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                {"type": "Ready", "status": "Unknown", "reason": "Starting",
                 "lastTransitionTime": "2026-02-02T01:04:05Z"},
            ],
            "path": "spec.conditions",
        }
    }


def test_remove_conditions_sends_the_types() -> None:
    assert sent("patch_status", sw.remove_conditions("Ready")) == {"removeCondition": {"types": ["Ready"]}}
    assert sent("patch_status", sw.remove_conditions(["Ready", "Synced"], path="status.c")) == {
        "removeCondition": {"types": ["Ready", "Synced"], "path": "status.c"}
    }


def test_finalizers() -> None:
    assert sent("update", sw.add_finalizer("example.com/cleanup")) == {
        "finalizer": {"finalizer": "example.com/cleanup"}
    }
    assert sent("update", sw.remove_finalizer("example.com/cleanup")) == {
        "finalizer": {"finalizer": "example.com/cleanup", "remove": True}
    }


def test_owner_references_by_fields_and_from_the_owner_object() -> None:
    web = sw.OwnerReference("apps/v1", "Deployment", "web", "u-1", controller=True, block_owner_deletion=True)
    assert sent("update", sw.ensure_owner(web)) == {
        "ownerReference": {
            "owner": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "u-1",
                      "controller": True, "blockOwnerDeletion": True}
        }
    }
    body = {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "ns", "uid": "u-1"}, "spec": {}}
    plain = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "u-1"}
    assert sent("update", sw.ensure_owner(body)) == {"ownerReference": {"owner": plain}}
    assert sent("update", sw.remove_owner(body)) == {"ownerReference": {"owner": plain, "remove": True}}
    assert sw.OwnerReference.of(body, controller=True) == sw.OwnerReference(
        "apps/v1", "Deployment", "web", "u-1", controller=True
    )
    # No uid: the sidecar reads the owner by name.
    unread = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}}
    assert sent("update", sw.ensure_owner(unread)) == {
        "ownerReference": {"owner": {"apiVersion": "v1", "kind": "ConfigMap", "name": "cm"}}
    }


def test_list_entries() -> None:
    parent = sw.ListEntry("status.parents", "controllerName", {"controllerName": "a", "x": None})
    assert parent.keys == ("controllerName",)
    assert sent("update", sw.upsert_list_entry(parent)) == {
        "listEntry": {"path": "status.parents", "keys": ["controllerName"],
                      "entryJson": '{"controllerName":"a","x":null}'}
    }
    route = sw.ListEntry("spec.routes", ["name", "port"], '{"name": "r", "port": 80}')
    assert sent("update", sw.remove_list_entry(route)) == {
        "listEntry": {"path": "spec.routes", "keys": ["name", "port"],
                      "entryJson": '{"name": "r", "port": 80}', "remove": True}
    }


def test_a_transaction_may_propose_the_new_kinds() -> None:
    proposal = sw.add_finalizer("example.com/cleanup")
    assert proposal.to_proto() == writer_pb2.Mutation(
        finalizer=writer_pb2.FinalizerChange(finalizer="example.com/cleanup")
    )
    fresh = core.Fresh(attempt=2, object={}, resource_version="1", creating=False)
    tx = core.Transaction(writer_pb2.TransactBegin())
    assert tx.answer(fresh, proposal).proposal == writer_pb2.TransactProposal(
        attempt=2, mutation=proposal.to_proto()
    )


def test_the_patches() -> None:
    assert sent("update", sw.cel('{"data": {}}')) == {"cel": {"expression": '{"data": {}}'}}
    assert sent("update", sw.merge_patch({"data": {"a": None}})) == {
        "mergePatch": {"patchJson": '{"data":{"a":null}}'}
    }
    assert sent("update", sw.merge_patch('{"data": {}}')) == {"mergePatch": {"patchJson": '{"data": {}}'}}
    ops = [{"op": "test", "path": "/data/a", "value": "1"}]
    assert sent("update", sw.json_patch(ops)) == {
        "jsonPatch": {"patchJson": '[{"op":"test","path":"/data/a","value":"1"}]'}
    }
    assert sent("update", sw.apply({"kind": "ConfigMap"})) == {
        "apply": {"configurationJson": '{"kind":"ConfigMap"}'}
    }
    assert sent("update", sw.apply({"kind": "ConfigMap"}, force=True)) == {
        "apply": {"configurationJson": '{"kind":"ConfigMap"}', "force": True}
    }


def test_a_mutation_is_one_immutable_value_with_a_readable_repr() -> None:
    finalizer = sw.add_finalizer("example.com/cleanup")
    assert isinstance(finalizer, sw.Mutation) and finalizer.kind == "add_finalizer"
    assert repr(finalizer) == "add_finalizer('example.com/cleanup')"
    assert repr(sw.merge_patch({"data": {"n": "1"}})) == """merge_patch('{"data":{"n":"1"}}')"""
    assert repr(sw.apply("{}", force=True)) == "apply('{}', force=True)"
    assert repr(sw.remove_conditions(["Ready", "Synced"], path="status.gates")) == (
        "remove_conditions(['Ready', 'Synced'], path='status.gates')"
    )
    assert len(repr(sw.cel("{" + '"a": 1, ' * 40 + "}"))) <= 90
    # Equal when they send the same change; usable as keys.
    assert finalizer == sw.add_finalizer("example.com/cleanup")
    assert finalizer != sw.remove_finalizer("example.com/cleanup")
    assert len({finalizer, sw.add_finalizer("example.com/cleanup")}) == 1
    with pytest.raises(AttributeError, match="immutable"):
        finalizer._wire = b""  # type: ignore[misc]
    # Changing what it was made of, or the message it gives, leaves it as it is.
    patch: Dict[str, Any] = {"data": {"n": "1"}}
    made = sw.merge_patch(patch)
    patch["data"]["n"] = "2"
    made.to_proto().merge_patch.patch_json = "{}"
    assert made.to_proto().merge_patch.patch_json == '{"data":{"n":"1"}}'
    with pytest.raises(TypeError, match="make a Mutation with safewrite_client.cel"):
        sw.Mutation()
    import pickle

    assert pickle.loads(pickle.dumps(made)) == made and repr(pickle.loads(pickle.dumps(made))) == repr(made)


@pytest.mark.parametrize(
    "make,says",
    [
        (lambda: sw.cel(" "), "expression is empty"),
        (lambda: sw.merge_patch("[1]"), "not a JSON object"),
        (lambda: sw.merge_patch("{not json"), "not JSON"),
        (lambda: sw.json_patch('{"op": "add"}'), "not a JSON array"),
        (lambda: sw.apply("[]"), "not a JSON object"),
        (lambda: sw.set_conditions([]), "at least one Condition"),
        (lambda: sw.remove_conditions([]), "at least one type"),
        (lambda: sw.remove_conditions(["Ready", ""]), "non-empty"),
        (lambda: sw.add_finalizer("not/a/qualified name"), "not a qualified name"),
        (lambda: sw.remove_finalizer(""), "not a qualified name"),
        (lambda: sw.ensure_owner({"kind": "Deployment", "metadata": {"name": "web"}}), "api_version is required"),
        (lambda: sw.remove_owner({"apiVersion": "v1", "kind": "ConfigMap"}), "has metadata"),
    ],
)
def test_bad_mutations_are_refused_when_made(make: Any, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        make()


def test_duplicate_condition_types_are_refused() -> None:
    ready = sw.Condition("Ready", True, "Done")
    with pytest.raises(ValueError, match="'Ready' is given twice"):
        sw.set_conditions([ready, sw.Condition("Ready", False, "No")])


@pytest.mark.parametrize(
    "make,says",
    [
        (lambda: sw.cel(42), "cel takes a str"),
        (lambda: sw.merge_patch(42), "merge_patch takes a dict"),
        (lambda: sw.merge_patch({"when": object()}), "not JSON-serializable"),
        (lambda: sw.apply({}, force="yes"), "force is a bool"),
        (lambda: sw.set_conditions([{"type": "Ready"}]), "takes safewrite_client.Condition"),
        (lambda: sw.add_finalizer(["a.b/c"]), "add_finalizer takes a str"),
        (lambda: sw.ensure_owner(("apps/v1", "Deployment", "web")), "ensure_owner takes"),
        (lambda: sw.upsert_list_entry({"path": "status.parents"}), "takes a safewrite_client.ListEntry"),
        (lambda: sw.remove_conditions("Ready", path=1), "path is a str"),
    ],
)
def test_values_of_the_wrong_type_are_refused(make: Any, says: str) -> None:
    with pytest.raises(TypeError, match=says):
        make()


@pytest.mark.parametrize(
    "args,kwargs,says",
    [
        (("a/b/c", "True", "Done"), {}, "condition type"),
        (("Ready", "Maybe", "Done"), {}, "True, False or Unknown"),
        (("Ready", "True", "not a reason"), {}, "condition reason"),
        (("Ready", "True", "Done", "x" * 32769), {}, "at most 32768"),
        (("Ready", "True", "Done"), {"observed_generation": -1}, "negative"),
        (("Ready", "True", "Done"), {"last_transition_time": datetime.datetime(2026, 1, 1)}, "timezone-aware"),
        (("Ready", "True", "Done"), {"last_transition_time": "2026-01-01 00:00:00"}, "RFC 3339"),
        (("Ready", "True", "Done"), {"last_transition_time": "2026-01-01T00:00:00"}, "RFC 3339"),
        (("Ready", "True", "Done"), {"last_transition_time": "2026-13-01T00:00:00Z"}, "month"),
    ],
)
def test_conditions_the_api_server_would_refuse_are_refused(args: Any, kwargs: Any, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        sw.Condition(*args, **kwargs)


def test_condition_field_types_are_checked() -> None:
    with pytest.raises(TypeError, match="observed_generation is an int"):
        sw.Condition("Ready", True, "Done", observed_generation=True)
    with pytest.raises(TypeError, match="datetime or an RFC 3339 str"):
        sw.Condition("Ready", True, "Done", last_transition_time=1700000000)  # type: ignore[arg-type]


def test_a_transition_time_is_kept_in_utc_to_the_second() -> None:
    aware = datetime.datetime(2026, 11, 26, 15, 4, 5, 999999, tzinfo=UTC)
    assert sw.Condition("Ready", True, "Done", last_transition_time=aware).last_transition_time == (
        "2026-11-26T15:04:05Z"
    )
    assert sw.Condition("Ready", True, "Done", last_transition_time="2026-11-26t15:04:05z").last_transition_time == (
        "2026-11-26T15:04:05Z"
    )


@pytest.mark.parametrize(
    "args,says",
    [
        (("", ["k"], {"k": 1}), "path is required"),
        (("status..parents", ["k"], {"k": 1}), "empty field name"),
        (("status.parents", [], {"k": 1}), "at least one key"),
        (("status.parents", ["k", ""], {"k": 1}), r"keys\[\] is required"),
        (("status.parents", ["k"], [{"k": 1}]), "JSON object"),
        (("status.parents", ["k"], "{not json"), "not JSON"),
        (("status.parents", ["k", "port"], {"k": 1}), "lacks the key field.s. port"),
    ],
)
def test_bad_list_entries_are_refused(args: Any, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        sw.ListEntry(*args)


def test_result_gone() -> None:
    gone = core.result(writer_pb2.WriteResult(outcome=writer_pb2.OUTCOME_GONE, attempts=1))
    assert gone.outcome is sw.Outcome.GONE and gone.gone and not gone.written
    assert gone.object == {}
    updated = core.result(writer_pb2.WriteResult(outcome=writer_pb2.OUTCOME_UPDATED, object_json="{}"))
    assert not updated.gone
    # Every Outcome the proto knows has a member of the same name.
    for name, value in writer_pb2.Outcome.items():
        assert sw.Outcome(value).name == name[len("OUTCOME_"):]


@pytest.mark.parametrize(
    "reason,cls",
    [
        ("OBJECT_DELETING", sw.ObjectDeletingError),
        ("ALREADY_OWNED", sw.AlreadyOwnedError),
        ("FENCED", sw.FencedError),
        ("NOT_LEADER", sw.NotLeaderError),
    ],
)
def test_the_new_reasons_decode_to_their_precondition_errors(reason: str, cls: type) -> None:
    from safewrite_client._errors import from_status

    current = {"metadata": {"ownerReferences": [
        {"kind": "Deployment", "name": "a", "uid": "1"},
        {"kind": "Deployment", "name": "web", "uid": "2", "controller": True},
    ]}}
    details = status_with(reason, writer_pb2.Reason.Value("REASON_" + reason), current)
    err = from_status(grpc.StatusCode.FAILED_PRECONDITION, "m", details)
    assert type(err) is cls and isinstance(err, sw.PreconditionFailedError)
    assert err.reason_name == reason and err.current_object == current
    assert not err.retryable and not sw.is_retryable(err.code, err.write_failure_reason, idempotent=True)
    if isinstance(err, sw.AlreadyOwnedError):
        assert err.controller == current["metadata"]["ownerReferences"][1]  # type: ignore[index]
    # The same code with another reason stays a PreconditionFailedError.
    plain = from_status(grpc.StatusCode.FAILED_PRECONDITION, "m", status_with("PRECONDITION_FAILED", 0, None))
    assert type(plain) is sw.PreconditionFailedError


def status_with(reason: str, value: int, current: Any) -> bytes:
    import json

    from google.protobuf import any_pb2
    from google.rpc import error_details_pb2, status_pb2

    info, failure = any_pb2.Any(), any_pb2.Any()
    info.Pack(error_details_pb2.ErrorInfo(reason=reason, domain=sw.DOMAIN))
    failure.Pack(writer_pb2.WriteFailure(
        reason=value, current_object_json=json.dumps(current) if current is not None else ""
    ))
    return status_pb2.Status(code=9, message="m", details=[info, failure]).SerializeToString()


# --- the same rules for plain dicts (conditions.set_condition) ------------------------


def test_set_condition_on_a_dict_keeps_unknown_fields_and_takes_the_objects_generation() -> None:
    from safewrite_client.conditions import set_condition

    obj: Dict[str, Any] = {
        "metadata": {"generation": 4},
        "status": {"conditions": [
            {"type": "Ready", "status": "False", "reason": "Init", "message": "",
             "lastTransitionTime": "2026-01-01T00:00:00Z", "severity": "Info"},
            {"type": "Other", "status": "True"},
        ]},
    }
    assert set_condition(obj, sw.Condition("Ready", True, "Done", last_transition_time="2026-02-02T00:00:00Z"))
    assert obj["status"]["conditions"] == [
        {"type": "Ready", "status": "True", "reason": "Done", "message": "",
         "lastTransitionTime": "2026-02-02T00:00:00Z", "severity": "Info", "observedGeneration": 4},
        {"type": "Other", "status": "True"},
    ]
    # Same status: the given transition time is not used, and nothing changes.
    assert not set_condition(obj, sw.Condition("Ready", True, "Done", last_transition_time="2026-03-03T00:00:00Z"))
    # An object without a generation gets no observedGeneration.
    del obj["metadata"]["generation"]
    assert set_condition(obj, sw.Condition("Ready", True, "Done"))
    assert "observedGeneration" not in obj["status"]["conditions"][0]
