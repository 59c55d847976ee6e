"""What to change, from Python values to a ``safewrite.v1.Mutation``: the mutation
keywords every write takes (declared by :func:`mutation`, and taken as they are by
``update`` and ``patch_status``), exactly one per call, each checked here before
anything is sent."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

from ._names import is_qualified_name
from ._types import ListEntry, OwnerReference
from .conditions import Condition
from .v1 import writer_pb2

#: A JSON object given either as a mapping or as JSON text.
JsonObject = Union[Mapping[str, Any], str]
#: A JSON Patch given either as a sequence of operations or as JSON text.
JsonPatchOps = Union[Sequence[Mapping[str, Any]], str]
#: An owner: an :class:`OwnerReference`, or the owner object itself (a dict or kopf body).
Owner = Union[OwnerReference, Mapping[str, Any]]


def dumps(value: Any) -> str:
    """Encodes a JSON value compactly; text is passed through as it is."""
    if isinstance(value, (str, bytes)):
        return value.decode("utf-8") if isinstance(value, bytes) else value
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


# --- one builder per mutation keyword ------------------------------------------------


@dataclass(frozen=True)
class Modifiers:
    """The keywords that qualify a mutation: ``force`` (of ``apply``) and
    ``conditions_path`` (of ``set_conditions`` and ``remove_conditions``)."""

    force: bool = False
    conditions_path: str = ""


def _cel(value: str, args: Modifiers) -> writer_pb2.Mutation:
    return writer_pb2.Mutation(cel=writer_pb2.CelMutation(expression=value))


def _merge_patch(value: JsonObject, args: Modifiers) -> writer_pb2.Mutation:
    return writer_pb2.Mutation(merge_patch=writer_pb2.MergePatch(patch_json=dumps(value)))


def _json_patch(value: JsonPatchOps, args: Modifiers) -> writer_pb2.Mutation:
    return writer_pb2.Mutation(json_patch=writer_pb2.JsonPatch(patch_json=dumps(value)))


def _apply(value: JsonObject, args: Modifiers) -> writer_pb2.Mutation:
    configuration = writer_pb2.ServerSideApply(
        configuration_json=dumps(value), force=bool(args.force)
    )
    return writer_pb2.Mutation(apply=configuration)


def _conditions_path(args: Modifiers) -> str:
    path = args.conditions_path or ""
    if not isinstance(path, str):
        raise TypeError("conditions_path is a str, not %s" % type(path).__name__)
    return path


def condition_message(condition: Condition) -> writer_pb2.Condition:
    """The ``safewrite.v1.Condition`` for a :class:`Condition`."""
    message = writer_pb2.Condition(
        type=condition.type,
        status=str(condition.status),
        reason=condition.reason,
        message=condition.message,
        last_transition_time=str(condition.last_transition_time or ""),
    )
    if condition.observed_generation is not None:
        message.observed_generation = condition.observed_generation
    return message


def _set_conditions(value: Union[Condition, Sequence[Condition]], args: Modifiers) -> writer_pb2.Mutation:
    conditions: List[Any] = [value] if isinstance(value, Condition) else list(value)
    if not conditions:
        raise ValueError("set_conditions needs at least one Condition")
    seen = set()
    for condition in conditions:
        if not isinstance(condition, Condition):
            raise TypeError(
                "set_conditions takes safewrite_client.Condition values, not %s"
                % type(condition).__name__
            )
        if condition.type in seen:
            raise ValueError("set_conditions sets each type once; %r is given twice" % condition.type)
        seen.add(condition.type)
    change = writer_pb2.SetCondition(
        conditions=[condition_message(c) for c in conditions], path=_conditions_path(args)
    )
    return writer_pb2.Mutation(set_condition=change)


def _remove_conditions(value: Union[str, Sequence[str]], args: Modifiers) -> writer_pb2.Mutation:
    types = [value] if isinstance(value, str) else list(value)
    if not types:
        raise ValueError("remove_conditions needs at least one type")
    for name in types:
        if not isinstance(name, str) or not name:
            raise ValueError("remove_conditions takes condition types (non-empty str), not %r" % (name,))
    change = writer_pb2.RemoveCondition(types=types, path=_conditions_path(args))
    return writer_pb2.Mutation(remove_condition=change)


def _finalizer(remove: bool) -> Callable[[str, Modifiers], writer_pb2.Mutation]:
    keyword = "remove_finalizer" if remove else "add_finalizer"

    def build(value: str, args: Modifiers) -> writer_pb2.Mutation:
        if not isinstance(value, str):
            raise TypeError("%s takes a str, not %s" % (keyword, type(value).__name__))
        if not is_qualified_name(value):
            raise ValueError(
                "%s: %r is not a qualified name (e.g. 'example.com/cleanup')" % (keyword, value)
            )
        change = writer_pb2.FinalizerChange(finalizer=value, remove=remove)
        return writer_pb2.Mutation(finalizer=change)

    return build


def owner_reference(value: Owner, keyword: str = "owner") -> OwnerReference:
    """An :class:`OwnerReference` as it is, or the reference to an owner object."""
    if isinstance(value, OwnerReference):
        return value
    if isinstance(value, Mapping):
        return OwnerReference.of(value)
    raise TypeError(
        "%s takes a safewrite_client.OwnerReference or the owner object (a dict with "
        "apiVersion, kind and metadata), not %s" % (keyword, type(value).__name__)
    )


def _owner(remove: bool) -> Callable[[Owner, Modifiers], writer_pb2.Mutation]:
    keyword = "remove_owner" if remove else "ensure_owner"

    def build(value: Owner, args: Modifiers) -> writer_pb2.Mutation:
        owner = owner_reference(value, keyword)
        reference = writer_pb2.OwnerReference(
            api_version=owner.api_version,
            kind=owner.kind,
            name=owner.name,
            uid=owner.uid,
            controller=owner.controller,
            block_owner_deletion=owner.block_owner_deletion,
        )
        change = writer_pb2.OwnerReferenceChange(owner=reference, remove=remove)
        return writer_pb2.Mutation(owner_reference=change)

    return build


def _list_entry(remove: bool) -> Callable[[ListEntry, Modifiers], writer_pb2.Mutation]:
    keyword = "remove_list_entry" if remove else "upsert_list_entry"

    def build(value: ListEntry, args: Modifiers) -> writer_pb2.Mutation:
        if not isinstance(value, ListEntry):
            raise TypeError(
                "%s takes a safewrite_client.ListEntry, not %s" % (keyword, type(value).__name__)
            )
        change = writer_pb2.ListEntryChange(
            path=value.path, keys=list(value.keys), entry_json=dumps(value.entry), remove=remove
        )
        return writer_pb2.Mutation(list_entry=change)

    return build


# The mutation keywords, in the order an error names them, and what each builds.
_KINDS: Dict[str, Callable[[Any, Modifiers], writer_pb2.Mutation]] = {
    "cel": _cel,
    "merge_patch": _merge_patch,
    "json_patch": _json_patch,
    "apply": _apply,
    "set_conditions": _set_conditions,
    "remove_conditions": _remove_conditions,
    "add_finalizer": _finalizer(remove=False),
    "remove_finalizer": _finalizer(remove=True),
    "ensure_owner": _owner(remove=False),
    "remove_owner": _owner(remove=True),
    "upsert_list_entry": _list_entry(remove=False),
    "remove_list_entry": _list_entry(remove=True),
}


def mutation(
    *,
    cel: Optional[str] = None,
    merge_patch: Optional[JsonObject] = None,
    json_patch: Optional[JsonPatchOps] = None,
    apply: Optional[JsonObject] = None,
    force: bool = False,
    set_conditions: Union[Condition, Sequence[Condition], None] = None,
    remove_conditions: Union[str, Sequence[str], None] = None,
    conditions_path: str = "",
    add_finalizer: Optional[str] = None,
    remove_finalizer: Optional[str] = None,
    ensure_owner: Optional[Owner] = None,
    remove_owner: Optional[Owner] = None,
    upsert_list_entry: Optional[ListEntry] = None,
    remove_list_entry: Optional[ListEntry] = None,
) -> writer_pb2.Mutation:
    """The ``safewrite.v1.Mutation`` for exactly one mutation keyword, the same keywords
    :meth:`~safewrite_client.Client.update` and ``patch_status`` take; a
    :meth:`~safewrite_client.Client.transact` function may return one to propose it.
    The mutation is re-applied to the fresh object on every attempt.

    Args:
        cel: A CEL expression over ``object`` returning a map, applied as a merge
            patch, e.g. ``'{"data": {"n": string(int(object.data.n) + 1)}}'``.
        merge_patch: An RFC 7386 JSON merge patch (a dict or JSON text).
        json_patch: An RFC 6902 JSON Patch (a list of operations or JSON text); its
            ``test`` operations are preconditions.
        apply: A server-side apply configuration (a dict or JSON text) with apiVersion,
            kind, metadata.name and the fields this manager owns; needs a field manager.
        force: With ``apply``: take over fields other managers own instead of failing
            with :class:`~safewrite_client.ConflictError`.
        set_conditions: A :class:`~safewrite_client.Condition` or a sequence of them
            (each type once), set with ``meta.SetStatusCondition``'s semantics: the
            entry of that type is updated in place or appended, its lastTransitionTime
            changes only with its status, every other entry and field is kept, and a
            condition set to what it is writes nothing. Unset ``observed_generation``:
            the fresh object's ``metadata.generation``; unset ``last_transition_time``:
            the time of the write.
        remove_conditions: The condition types to remove (a str is one type).
        conditions_path: With ``set_conditions`` or ``remove_conditions``, where the
            list is, as field names joined by dots; empty: ``"status.conditions"``.
        add_finalizer: One value to add to ``metadata.finalizers``, the others kept.
            Adding to an object being deleted fails with
            :class:`~safewrite_client.ObjectDeletingError`.
        remove_finalizer: One value to remove from ``metadata.finalizers``; a removal
            that finds the object gone, or after which the API server deletes it,
            answers ``Outcome.GONE``.
        ensure_owner: One entry of ``metadata.ownerReferences``, matched by group,
            kind and name as controllerutil matches it (not by uid or version: the
            reference of an owner deleted and recreated under its name takes the new
            uid, apiVersion and flags in place): an
            :class:`~safewrite_client.OwnerReference` or the owner object itself (a dict
            or kopf body). Ensuring a ``controller`` reference when another owner is the
            controller fails with :class:`~safewrite_client.AlreadyOwnedError`.
        remove_owner: The owner reference to remove, given as for ``ensure_owner``: the
            first one matched by group, kind and name (its uid is not compared).
        upsert_list_entry: One entry of a keyed list, a
            :class:`~safewrite_client.ListEntry`, merged into the entry with equal keys
            or appended; every other entry and the order are kept.
        remove_list_entry: The entry of a keyed list to remove (by its key fields).

    A change that changes nothing (a finalizer that is there, a reference that is not)
    writes nothing and answers ``Outcome.UNCHANGED``.

    Raises:
        ValueError: not exactly one mutation, a qualifier (``force``,
            ``conditions_path``) with another mutation, or a value the sidecar would
            refuse (e.g. a finalizer that is not a qualified name).
        TypeError: a value of the wrong type.
    """
    values: Dict[str, Any] = {
        "cel": cel,
        "merge_patch": merge_patch,
        "json_patch": json_patch,
        "apply": apply,
        "set_conditions": set_conditions,
        "remove_conditions": remove_conditions,
        "add_finalizer": add_finalizer,
        "remove_finalizer": remove_finalizer,
        "ensure_owner": ensure_owner,
        "remove_owner": remove_owner,
        "upsert_list_entry": upsert_list_entry,
        "remove_list_entry": remove_list_entry,
    }
    given = [name for name in _KINDS if values[name] is not None]
    if len(given) != 1:
        raise ValueError(
            "give exactly one mutation, one of %s (got %s)"
            % (", ".join(_KINDS), ", ".join(given) or "none")
        )
    kind = given[0]
    if force and kind != "apply":
        raise ValueError("force applies only to server-side apply (apply=...)")
    if conditions_path and kind not in ("set_conditions", "remove_conditions"):
        raise ValueError("conditions_path goes with set_conditions= or remove_conditions=")
    return _KINDS[kind](values[kind], Modifiers(force=force, conditions_path=conditions_path))
