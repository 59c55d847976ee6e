"""Conversions between the client's Python values and the safewrite.v1 messages."""

from __future__ import annotations

import json
from typing import Any, Dict, Mapping, Optional, Sequence, Union

from google.protobuf import duration_pb2

from ._errors import attempt_record
from ._types import Abort, ObjectRef, Outcome, Preconditions, Result, RetryPolicy
from .v1 import writer_pb2

#: A JSON object given either as a mapping or as JSON text.
JsonObject = Union[Mapping[str, Any], str]
#: A JSON Patch given either as a sequence of operations or as JSON text.
JsonPatchOps = Union[Sequence[Mapping[str, Any]], str]


def dumps(value: Any) -> str:
    """Encodes a JSON value compactly; text is passed through as it is."""
    if isinstance(value, (str, bytes)):
        return value.decode("utf-8") if isinstance(value, bytes) else value
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def loads_object(text: str) -> Dict[str, Any]:
    """Decodes an object's JSON; empty text is an empty object."""
    if not text:
        return {}
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError("safewrite answered with a JSON %s, not an object" % type(value).__name__)
    return value


def target(ref: ObjectRef) -> writer_pb2.ObjectRef:
    """The ``safewrite.v1.ObjectRef`` for an :class:`ObjectRef`."""
    if not isinstance(ref, ObjectRef):
        raise TypeError("ref must be a safewrite.ObjectRef, not %s" % type(ref).__name__)
    return writer_pb2.ObjectRef(
        api_version=ref.api_version,
        kind=ref.kind,
        namespace=ref.namespace or "",
        name=ref.name,
    )


def mutation(
    *,
    cel: Optional[str] = None,
    merge_patch: Optional[JsonObject] = None,
    json_patch: Optional[JsonPatchOps] = None,
    apply: Optional[JsonObject] = None,
    force: bool = False,
) -> writer_pb2.Mutation:
    """The ``safewrite.v1.Mutation`` for exactly one of the mutation arguments."""
    given = [
        name
        for name, value in (
            ("cel", cel),
            ("merge_patch", merge_patch),
            ("json_patch", json_patch),
            ("apply", apply),
        )
        if value is not None
    ]
    if len(given) != 1:
        raise ValueError(
            "give exactly one of cel, merge_patch, json_patch or apply (got %s)"
            % (", ".join(given) or "none")
        )
    if force and apply is None:
        raise ValueError("force applies only to server-side apply (apply=...)")
    if cel is not None:
        return writer_pb2.Mutation(cel=writer_pb2.CelMutation(expression=cel))
    if merge_patch is not None:
        return writer_pb2.Mutation(
            merge_patch=writer_pb2.MergePatch(patch_json=dumps(merge_patch))
        )
    if json_patch is not None:
        return writer_pb2.Mutation(
            json_patch=writer_pb2.JsonPatch(patch_json=dumps(json_patch))
        )
    assert apply is not None
    return writer_pb2.Mutation(
        apply=writer_pb2.ServerSideApply(configuration_json=dumps(apply), force=force)
    )


def preconditions(value: Optional[Preconditions]) -> Optional[writer_pb2.Preconditions]:
    """The ``safewrite.v1.Preconditions`` for :class:`Preconditions`, or None."""
    if value is None:
        return None
    if not isinstance(value, Preconditions):
        raise TypeError(
            "preconditions must be a safewrite.Preconditions, not %s" % type(value).__name__
        )
    return writer_pb2.Preconditions(
        uid=value.uid or "",
        resource_version=value.resource_version or "",
        cel=value.cel or "",
    )


def _duration(seconds: float) -> duration_pb2.Duration:
    if seconds < 0:
        raise ValueError("a backoff cannot be negative (got %r)" % seconds)
    whole = int(seconds)
    return duration_pb2.Duration(seconds=whole, nanos=int(round((seconds - whole) * 1e9)))


def retry_policy(value: Optional[RetryPolicy]) -> Optional[writer_pb2.RetryPolicy]:
    """The ``safewrite.v1.RetryPolicy`` for :class:`RetryPolicy`, or None."""
    if value is None:
        return None
    if not isinstance(value, RetryPolicy):
        raise TypeError(
            "retry_policy must be a safewrite.RetryPolicy, not %s" % type(value).__name__
        )
    policy = writer_pb2.RetryPolicy(max_attempts=value.max_attempts, requeue=value.requeue)
    if value.initial_backoff is not None:
        policy.initial_backoff.CopyFrom(_duration(value.initial_backoff))
    if value.max_backoff is not None:
        policy.max_backoff.CopyFrom(_duration(value.max_backoff))
    return policy


def options(
    *,
    field_manager: Optional[str] = None,
    dry_run: bool = False,
    create_if_missing: Optional[JsonObject] = None,
    idempotency_key: Optional[str] = None,
) -> writer_pb2.WriteOptions:
    """The ``safewrite.v1.WriteOptions``.

    The idempotency key is sent as it is: the sidecar checks its shape and refuses it
    where it does not apply. Only an empty key is refused here, because on the wire it
    would mean "no key" and silently drop the exactly-once guarantee."""
    if idempotency_key is not None:
        if not isinstance(idempotency_key, str):
            raise TypeError(
                "idempotency_key must be a str, not %s" % type(idempotency_key).__name__
            )
        if not idempotency_key:
            raise ValueError(
                "idempotency_key must not be empty (pass None for no key, or e.g. "
                "str(uuid.uuid4()))"
            )
    return writer_pb2.WriteOptions(
        field_manager=field_manager or "",
        dry_run=dry_run,
        create_if_missing_json=dumps(create_if_missing) if create_if_missing is not None else "",
        idempotency_key=idempotency_key or "",
    )


def result(message: writer_pb2.WriteResult) -> Result:
    """The :class:`Result` for a ``safewrite.v1.WriteResult``."""
    return Result(
        outcome=Outcome(message.outcome),
        object=loads_object(message.object_json),
        resource_version=message.resource_version,
        attempts=message.attempts,
        attempt_records=tuple(attempt_record(r) for r in message.attempt_records),
        trace_id=message.trace_id,
        already_applied=message.already_applied,
    )


def begin(
    ref: ObjectRef,
    *,
    status: bool,
    preconditions_: Optional[Preconditions],
    retry_policy_: Optional[RetryPolicy],
    options_: writer_pb2.WriteOptions,
) -> writer_pb2.TransactRequest:
    """The opening ``TransactRequest``."""
    return writer_pb2.TransactRequest(
        begin=writer_pb2.TransactBegin(
            target=target(ref),
            status=status,
            preconditions=preconditions(preconditions_),
            retry_policy=retry_policy(retry_policy_),
            options=options_,
        )
    )


def proposal(attempt: int, proposed: Mapping[str, Any]) -> writer_pb2.TransactRequest:
    """A proposal of a whole new object."""
    return writer_pb2.TransactRequest(
        proposal=writer_pb2.TransactProposal(attempt=attempt, object_json=dumps(proposed))
    )


def abort(attempt: int, reason: str) -> writer_pb2.TransactRequest:
    """A proposal that aborts the transaction."""
    return writer_pb2.TransactRequest(
        proposal=writer_pb2.TransactProposal(
            attempt=attempt, abort=writer_pb2.TransactAbort(reason=reason)
        )
    )


def abort_reason(exc: BaseException) -> str:
    """The reason recorded for a transaction aborted by an exception."""
    if isinstance(exc, Abort):
        return exc.reason
    text = str(exc)
    name = type(exc).__name__
    return "%s: %s" % (name, text) if text else name


def proposed_object(fresh: Dict[str, Any], returned: Any) -> Mapping[str, Any]:
    """The object a transaction function proposes: what it returned, or the fresh
    object it changed in place when it returned None."""
    if returned is None:
        return fresh
    if not isinstance(returned, Mapping):
        raise TypeError(
            "a transact function must return a dict (the new object) or None, not %s"
            % type(returned).__name__
        )
    return returned


def update_request(
    ref: ObjectRef,
    *,
    mutation_: writer_pb2.Mutation,
    preconditions_: Optional[Preconditions],
    retry_policy_: Optional[RetryPolicy],
    options_: writer_pb2.WriteOptions,
) -> writer_pb2.UpdateWithRetryRequest:
    """The ``UpdateWithRetryRequest``."""
    return writer_pb2.UpdateWithRetryRequest(
        target=target(ref),
        mutation=mutation_,
        preconditions=preconditions(preconditions_),
        retry_policy=retry_policy(retry_policy_),
        options=options_,
    )


def patch_status_request(
    ref: ObjectRef,
    *,
    mutation_: writer_pb2.Mutation,
    preconditions_: Optional[Preconditions],
    retry_policy_: Optional[RetryPolicy],
    options_: writer_pb2.WriteOptions,
) -> writer_pb2.PatchStatusRequest:
    """The ``PatchStatusRequest``."""
    return writer_pb2.PatchStatusRequest(
        target=target(ref),
        mutation=mutation_,
        preconditions=preconditions(preconditions_),
        retry_policy=retry_policy(retry_policy_),
        options=options_,
    )
