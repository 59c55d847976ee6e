"""The shared conformance cases (../../conformance/cases.json), one test per case, run
through this client against the real sidecar: write requests are the cases' proto3 JSON
messages, sent with Client.send, and gets go through Client.get with the case's
minimum (``$RV``: the resourceVersion the step before answered with); answers and
errors are read the way callers read them (Result, ReadResult, SafewriteError). Without
a sidecar: the cases' conditions, finalizer, owner reference and list entry mutations,
and their get requests, are what this client's keywords make (or refuse before
sending), and the file's retry advice table is checked through a client's calls to an
in-process WriterService that fails each call as the sidecar would. The skew cases run
against the real sidecar whatever its version: refused by the client before sending
when the sidecar lacks their feature, else sent."""

from __future__ import annotations

import json
import uuid
from concurrent import futures
from pathlib import Path
from typing import Any, Dict, FrozenSet, Iterator, List, NamedTuple, Optional, Tuple

import grpc
import pytest
from google.protobuf import any_pb2, json_format
from google.rpc import error_details_pb2, status_pb2

import safewrite_client as sw
from safewrite_client.v1 import writer_pb2, writer_pb2_grpc

CASES_FILE = Path(__file__).resolve().parents[2] / "conformance" / "cases.json"
_FILE: Dict[str, Any] = json.loads(CASES_FILE.read_text(encoding="utf-8"))
CASES: List[Dict[str, Any]] = _FILE["cases"]
#: The retry advice every client gives: {reason, code, retryable, retryable_with_key}.
ADVICE: List[Dict[str, Any]] = _FILE["advice"]["cases"]
#: Features a sidecar may lack: {name, feature, since, call, request, expect_when_present}.
SKEW: List[Dict[str, Any]] = _FILE["skew"]["cases"]

#: Cases the sidecar fails today where its behaviour contradicts the contract
#: (proto/safewrite/v1/writer.proto), not the case: expected failures, strictly, so the
#: entry must go once the sidecar is fixed (or, where the proto does not decide, the case).
KNOWN_SIDECAR_BUGS: Dict[str, str] = {}

REQUESTS = {
    "update": writer_pb2.UpdateWithRetryRequest,
    "patch_status": writer_pb2.PatchStatusRequest,
    "get": writer_pb2.GetRequest,
    "delete": writer_pb2.DeleteRequest,
}


def substitute(value: Any, names: Dict[str, str]) -> Any:
    if isinstance(value, str):
        for key, repl in names.items():
            value = value.replace(key, repl)
        return value
    if isinstance(value, list):
        return [substitute(v, names) for v in value]
    if isinstance(value, dict):
        return {k: substitute(v, names) for k, v in value.items()}
    return value


def assert_subset(want: Any, have: Any, path: str = "") -> None:
    """Maps are compared as subsets, everything else by equality."""
    if isinstance(want, dict):
        assert isinstance(have, dict), "%s: want a map, have %r" % (path or "/", have)
        for key, value in want.items():
            assert key in have, "%s/%s is missing" % (path, key)
            assert_subset(value, have[key], "%s/%s" % (path, key))
    else:
        assert want == have, "%s: want %r, have %r" % (path or "/", want, have)


def proposer(entries: List[Dict[str, Any]]) -> Any:
    """A transaction function answering each fresh object with the next proposal."""
    queue = list(entries)

    def fn(obj: Dict[str, Any]) -> writer_pb2.TransactProposal:
        assert queue, "the sidecar sent more fresh objects than the case has proposals"
        # attempt 0 (unset) is filled in with the fresh object's attempt by the client.
        return json_format.ParseDict(queue.pop(0), writer_pb2.TransactProposal())

    return fn


def get_keywords(request: writer_pb2.GetRequest) -> Tuple[sw.ObjectRef, Dict[str, Any]]:
    """The arguments of Client.get that say what a case's GetRequest says."""
    t = request.target
    ref = sw.ObjectRef(t.api_version, t.kind, t.namespace, t.name)
    minimum = {"min_resource_version": request.min_resource_version} if request.min_resource_version else {}
    return ref, minimum


def run_step(client: sw.Client, step: Dict[str, Any]) -> Any:
    call = step["call"]
    if call == "get":
        ref, minimum = get_keywords(json_format.ParseDict(step["request"], writer_pb2.GetRequest()))
        return client.get(ref, **minimum)
    if call == "transact":
        # The README names it `begin`; some cases name it `request`, as for the unary calls.
        begin = json_format.ParseDict(step.get("begin", step.get("request")), writer_pb2.TransactBegin())
        return client.send(begin, proposer(step["proposals"]))
    return client.send(json_format.ParseDict(step["request"], REQUESTS[call]()))


def check(expect: Dict[str, Any], step: int, outcome: Any) -> None:
    where = "step %d" % step
    if "code" in expect:
        assert isinstance(outcome, sw.SafewriteError), "%s: want %s, got %r" % (where, expect["code"], outcome)
        err = outcome
        assert err.code.name == expect["code"], "%s: %r" % (where, err)
        assert err.domain == sw.DOMAIN, "%s: %r" % (where, err)
        assert err.reason == expect["reason"], "%s: %r" % (where, err)
        if "write_failure_reason" in expect:  # a skew case's expect_when_present has none
            assert sw.Reason.Name(err.write_failure_reason) == expect["write_failure_reason"], where
        if "field_violations" in expect:
            assert [v.field for v in err.field_violations] == expect["field_violations"], where
        if "current_object" in expect:
            assert err.current_object is not None, where
            assert_subset(expect["current_object"], err.current_object)
        return
    if isinstance(outcome, sw.ReadResult):
        assert "outcome" not in expect, "%s: a get has no outcome" % where
        if "remembered" in expect:
            assert outcome.remembered is expect["remembered"], where
    elif isinstance(outcome, sw.DeleteResult):
        assert "DELETE_OUTCOME_" + outcome.outcome.name == expect["outcome"], where
    else:
        assert isinstance(outcome, sw.Result), "%s: want %s, got %r" % (where, expect.get("outcome"), outcome)
        assert "OUTCOME_" + outcome.outcome.name == expect["outcome"], where
        if "already_applied" in expect:
            assert outcome.already_applied is expect["already_applied"], where
    if "object" in expect:
        assert_subset(expect["object"], outcome.object)


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(
            c,
            id=c["name"],
            marks=[pytest.mark.xfail(reason=KNOWN_SIDECAR_BUGS[c["name"]], strict=True)]
            if c["name"] in KNOWN_SIDECAR_BUGS
            else [],
        )
        for c in CASES
    ],
)
def test_conformance(case: Dict[str, Any], client: sw.Client, namespace: str) -> None:
    name = "conf-py-%s" % uuid.uuid4().hex[:10]
    case = substitute(case, {"$NS": namespace, "$NAME": name})
    version = ""  # the resource_version the step before answered with: $RV
    for i, step in enumerate(case["steps"]):
        step = substitute(step, {"$RV": version})
        try:
            outcome: Any = run_step(client, step)
        except sw.SafewriteError as err:
            outcome = err
        check(step["expect"], i, outcome)
        version = getattr(outcome, "resource_version", "")


def test_every_case_is_well_formed() -> None:
    names = [c["name"] for c in CASES]
    assert len(names) == len(set(names)), "case names must be unique"
    for case in CASES:
        for step in case["steps"]:
            assert step["call"] in ("update", "patch_status", "transact", "get"), case["name"]
            expect = step["expect"]
            if step["call"] == "get":  # a get has no outcome
                assert "outcome" not in expect, case["name"]
                if "code" not in expect:
                    continue
            else:
                assert ("code" in expect) != ("outcome" in expect), case["name"]
            if "code" in expect:
                assert {"reason", "write_failure_reason"} <= set(expect), case["name"]
                sw.Reason.Value(expect["write_failure_reason"])  # a real enum name
            else:
                writer_pb2.Outcome.Value(expect["outcome"])


# --- the cases' named mutations, from this client's mutation functions ---------------


def made(message: writer_pb2.Mutation) -> sw.Mutation:
    """The Mutation this client's functions (sw.set_conditions, sw.add_finalizer, ...)
    make of what ``message`` says. Raises
    ValueError where the client refuses the input itself."""
    kind = message.WhichOneof("kind")
    if kind == "cel":
        return sw.cel(message.cel.expression)
    if kind == "merge_patch":
        return sw.merge_patch(message.merge_patch.patch_json)
    if kind == "json_patch":
        return sw.json_patch(message.json_patch.patch_json)
    if kind == "apply":
        return sw.apply(message.apply.configuration_json, force=message.apply.force)
    if kind == "set_condition":
        conditions = [
            sw.Condition(
                c.type, c.status, c.reason, c.message,
                observed_generation=c.observed_generation if c.HasField("observed_generation") else None,
                last_transition_time=c.last_transition_time or None,
            )
            for c in message.set_condition.conditions
        ]
        return sw.set_conditions(conditions, path=message.set_condition.path)
    if kind == "remove_condition":
        return sw.remove_conditions(list(message.remove_condition.types), path=message.remove_condition.path)
    if kind == "finalizer":
        change = message.finalizer
        return (sw.remove_finalizer if change.remove else sw.add_finalizer)(change.finalizer)
    if kind == "owner_reference":
        o = message.owner_reference.owner
        owner = sw.OwnerReference(o.api_version, o.kind, o.name, o.uid, o.controller, o.block_owner_deletion)
        return (sw.remove_owner if message.owner_reference.remove else sw.ensure_owner)(owner)
    assert kind == "list_entry", kind
    e = message.list_entry
    entry = sw.ListEntry(e.path, list(e.keys), e.entry_json)
    return (sw.remove_list_entry if e.remove else sw.upsert_list_entry)(entry)


NAMED_KINDS = ("cel", "merge_patch", "json_patch", "apply", "set_condition", "remove_condition", "finalizer", "owner_reference", "list_entry")


def named_mutations() -> List[Tuple[str, writer_pb2.Mutation, Dict[str, Any]]]:
    """(id, mutation, expect) of every request and proposal of the cases whose mutation
    is one of NAMED_KINDS."""
    found = []
    for case in CASES:
        for i, step in enumerate(case["steps"]):
            if step["call"] == "transact":
                mutations = [
                    json_format.ParseDict(p, writer_pb2.TransactProposal()).mutation
                    for p in step["proposals"]
                ]
            elif step["call"] == "get":
                continue
            else:
                mutations = [json_format.ParseDict(step["request"], REQUESTS[step["call"]]()).mutation]
            for mutation in mutations:
                if mutation.WhichOneof("kind") in NAMED_KINDS:
                    found.append(("%s-%d" % (case["name"], i), mutation, step["expect"]))
    return found


NAMED = named_mutations()


@pytest.mark.parametrize("mutation,expect", [n[1:] for n in NAMED], ids=[n[0] for n in NAMED])
def test_the_clients_mutations_make_the_cases_requests(
    mutation: writer_pb2.Mutation, expect: Dict[str, Any]
) -> None:
    """Every such mutation is the one the client's functions make; one the sidecar must
    refuse as invalid is either refused by the client before sending or made exactly
    (when only the fresh object can tell, e.g. a path through a number)."""
    try:
        value = made(mutation)
    except ValueError:
        assert expect.get("code") == "INVALID_ARGUMENT", "refused locally: %s" % expect
        return
    assert value.to_proto() == mutation


def test_the_named_mutations_are_found() -> None:
    # cases.json has no server-side apply case (yet); every other kind is there.
    assert {m.WhichOneof("kind") for _, m, _ in NAMED} == set(NAMED_KINDS) - {"apply"}


GETS = [
    pytest.param(step, id="%s-%d" % (case["name"], i))
    for case in CASES
    for i, step in enumerate(case["steps"])
    if step["call"] == "get"
]


@pytest.mark.parametrize("step", GETS)
def test_the_clients_get_makes_the_cases_requests(step: Dict[str, Any]) -> None:
    """Every get of the cases is the request Client.get makes of the case's target and
    minimum, given as min_resource_version= and as at_least= a write's result."""
    from safewrite_client import _core as core

    step = substitute(step, {"$NS": "ns", "$NAME": "name", "$RV": "1234"})
    want = json_format.ParseDict(step["request"], writer_pb2.GetRequest())
    ref, minimum = get_keywords(want)
    assert core.get(ref, min_resource_version=minimum.get("min_resource_version")).request == want
    written = sw.Result(sw.Outcome.UPDATED, {}, want.min_resource_version, 1)
    assert core.get(ref, at_least=written).request == want


def test_the_get_cases_are_found() -> None:
    assert GETS, "cases.json has no get steps"
    assert any("$RV" in json.dumps(p.values[0]) for p in GETS), "no get reads the write before it"


# --- the retry advice table, through this client's path for a failed call -----------


def sidecar_status(reason: str, code: grpc.StatusCode) -> Optional[bytes]:
    """The serialized google.rpc.Status the sidecar sends with a failure for ``reason``
    (a Reason name): an ErrorInfo of domain safewrite.dev whose reason is the name
    without ``REASON_``, and a WriteFailure with the value. None (no details at all) for
    REASON_UNSPECIFIED, as when the sidecar was not reached."""
    value = sw.Reason.Value(reason)
    if value == writer_pb2.REASON_UNSPECIFIED:
        return None
    info, failure = any_pb2.Any(), any_pb2.Any()
    info.Pack(error_details_pb2.ErrorInfo(reason=reason[len("REASON_"):], domain=sw.DOMAIN))
    failure.Pack(writer_pb2.WriteFailure(reason=value))
    return status_pb2.Status(
        code=code.value[0], message="advice", details=[info, failure]
    ).SerializeToString()


#: The gRPC code and serialized status details a failing call gets, by target name.
Failures = Dict[str, Tuple[grpc.StatusCode, Optional[bytes]]]


class FailingWriter(writer_pb2_grpc.WriterServiceServicer):
    """Fails every UpdateWithRetry as its failures say for the target's name."""

    def __init__(self, failures: Failures) -> None:
        self.failures = failures

    def UpdateWithRetry(self, request: Any, context: Any) -> Any:
        code, details = self.failures[request.target.name]
        if details is not None:
            context.set_trailing_metadata((("grpc-status-details-bin", details),))
        context.abort(code, "advice")


class Failing(NamedTuple):
    failures: Failures
    client: sw.Client


@pytest.fixture(scope="module")
def failing() -> Iterator[Failing]:
    """A client of an in-process FailingWriter, and the writer's failures."""
    failures: Failures = {}
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    writer_pb2_grpc.add_WriterServiceServicer_to_server(FailingWriter(failures), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with sw.Client("127.0.0.1:%d" % port, timeout=10) as client:
            yield Failing(failures, client)
    finally:
        server.stop(None)


@pytest.mark.parametrize(
    "row", ADVICE, ids=["%s-%s" % (row["reason"], row["code"]) for row in ADVICE]
)
def test_advice(row: Dict[str, Any], failing: Failing) -> None:
    """Each row, as the sidecar sends it, decoded as this client decodes a failed call,
    without and with an idempotency key: ``retryable`` as the row says."""
    code = grpc.StatusCode[row["code"]]
    name = "advice-%s" % uuid.uuid4().hex[:10]
    failing.failures[name] = (code, sidecar_status(row["reason"], code))
    ref = sw.ObjectRef("v1", "ConfigMap", "advice", name)
    for key, want in ((None, row["retryable"]), ("advice-key", row["retryable_with_key"])):
        with pytest.raises(sw.SafewriteError) as info:
            failing.client.update(ref, sw.merge_patch({}), idempotency_key=key)
        err = info.value
        assert (err.code, sw.Reason.Name(err.write_failure_reason)) == (code, row["reason"])
        assert err.idempotent is (key is not None)
        assert err.retryable is want, "%s %s, idempotency key %r: retryable %s, want %s" % (
            row["reason"], row["code"], key, err.retryable, want
        )


def test_every_reason_has_advice() -> None:
    covered = {row["reason"] for row in ADVICE}
    missing = sorted(set(sw.Reason.keys()) - covered)
    assert not missing, "cases.json's advice has no row for %s" % missing
    unknown = sorted(covered - set(sw.Reason.keys()))
    assert not unknown, "advice rows for values this client's Reason enum does not know " \
        "(regenerate src/safewrite_client/v1): %s" % unknown


# --- the skew cases, against the real sidecar of whatever version -------------------


def sidecar_has(addr: str) -> Tuple[str, FrozenSet[str]]:
    """The sidecar's version and the full names of what it has, as its Capabilities
    says, asked by this runner itself; for UNIMPLEMENTED (older than 0.2.0, which has
    only what has no since option) ``older than 0.2.0`` and nothing."""
    with grpc.insecure_channel(addr) as channel:
        try:
            caps = writer_pb2_grpc.WriterServiceStub(channel).Capabilities(
                writer_pb2.CapabilitiesRequest(), timeout=30
            )
        except grpc.RpcError as err:
            assert err.code() == grpc.StatusCode.UNIMPLEMENTED, err
            return "older than 0.2.0", frozenset()
    return caps.version, frozenset(caps.methods) | frozenset(caps.fields) | frozenset(caps.enum_values)


@pytest.mark.parametrize("case", SKEW, ids=[c["name"] for c in SKEW])
def test_conformance_skew(case: Dict[str, Any], addr: str, namespace: str) -> None:
    """The case's request sent through the client (Client.send): when the sidecar lacks
    the feature, the client refuses it before sending (FAILED_PRECONDITION,
    UNKNOWN_FIELD, a message naming the feature, the sidecar's version and the case's
    since, and the feature in the ErrorInfo metadata, which only the client's refusal
    carries); else it meets expect_when_present."""
    version, has = sidecar_has(addr)
    name = "skew-py-%s" % uuid.uuid4().hex[:10]
    case = substitute(case, {"$NS": namespace, "$NAME": name})
    request = json_format.ParseDict(case["request"], REQUESTS[case["call"]]())
    with sw.Client(addr, timeout=60) as client:
        try:
            outcome: Any = client.send(request)
        except sw.SafewriteError as err:
            outcome = err
    if case["feature"] in has:
        check(case["expect_when_present"], 0, outcome)
        return
    assert isinstance(outcome, sw.UnknownFieldError), "sent to a sidecar %s without %s: %r" % (
        version, case["feature"], outcome
    )
    assert outcome.code == grpc.StatusCode.FAILED_PRECONDITION
    assert (outcome.reason, outcome.domain) == ("UNKNOWN_FIELD", sw.DOMAIN)
    assert outcome.write_failure_reason == writer_pb2.REASON_UNKNOWN_FIELD and not outcome.retryable
    for said in (case["feature"], version, case["since"]):
        assert said in outcome.message, (said, outcome.message)
    assert outcome.feature == case["feature"], "not the client's own refusal: %r" % outcome


def test_every_skew_case_is_well_formed() -> None:
    assert SKEW, "cases.json has no skew case"
    from safewrite_client import _skew as skew

    for case in SKEW:
        assert case["call"] in REQUESTS, case["name"]
        request = json_format.ParseDict(
            substitute(case["request"], {"$NS": "ns", "$NAME": "name"}), REQUESTS[case["call"]]()
        )
        method = {"update": "UpdateWithRetry", "delete": "Delete"}.get(case["call"], case["call"])
        # The feature is one this client's descriptor marks since that version, and
        # the request uses it.
        assert (case["feature"], case["since"]) in [(u.name, u.since) for u in skew.SINCE.uses(method, request)]
