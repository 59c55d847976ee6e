"""What to change: the :class:`Mutation` value ``update``, ``patch_status`` and a
``transact`` proposal take, and the functions that make one (:func:`cel`,
:func:`merge_patch`, :func:`json_patch`, :func:`apply`, :func:`set_conditions`, ...),
each checking its input before anything is sent, as the Go client's ``safewrite.CEL``,
``safewrite.MergePatch``, ... and TypeScript's ``cel()``, ``mergePatch()``, ... do."""

from __future__ import annotations

import json
from typing import Any, List, Literal, Mapping, NoReturn, Sequence, Union

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

#: What a :class:`Mutation` does: the name of the function that made it.
MutationKind = Literal[
    "cel",
    "merge_patch",
    "json_patch",
    "apply",
    "set_conditions",
    "remove_conditions",
    "add_finalizer",
    "remove_finalizer",
    "ensure_owner",
    "remove_owner",
    "upsert_list_entry",
    "remove_list_entry",
]


def dumps(value: Any) -> str:
    """Encodes a JSON value compactly; text is passed through as it is."""
    if isinstance(value, (str, bytes)):
        return value.decode("utf-8") if isinstance(value, bytes) else value
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class Mutation:
    """The change ``update`` and ``patch_status`` make, re-applied by the sidecar to the
    fresh object on every attempt (a :meth:`~safewrite_client.Client.transact`
    function may return one too). Make one with :func:`cel`, :func:`merge_patch`,
    :func:`json_patch` or :func:`apply`, or, for one entry of a list, with
    :func:`set_conditions`, :func:`remove_conditions`, :func:`add_finalizer`,
    :func:`remove_finalizer`, :func:`ensure_owner`, :func:`remove_owner`,
    :func:`upsert_list_entry` or :func:`remove_list_entry`::

        client.update(ref, sw.cel('{"data": {"n": string(int(object.data.n) + 1)}}'))
        client.patch_status(ref, sw.set_conditions(sw.Condition("Ready", True, "Done")))

    A mutation is immutable and compares equal to one that sends the same change; its
    ``repr`` is the call that made it, e.g. ``add_finalizer('example.com/cleanup')``.
    """

    __slots__ = ("_kind", "_wire", "_text")
    _kind: MutationKind
    _wire: bytes
    _text: str

    def __init__(self) -> None:
        raise TypeError(
            "make a Mutation with safewrite_client.cel(), merge_patch(), json_patch(), "
            "apply(), set_conditions(), add_finalizer(), ..."
        )

    @classmethod
    def _of(cls, kind: MutationKind, message: writer_pb2.Mutation, text: str) -> "Mutation":
        made = object.__new__(cls)
        object.__setattr__(made, "_kind", kind)
        object.__setattr__(made, "_wire", message.SerializeToString(deterministic=True))
        object.__setattr__(made, "_text", "%s(%s)" % (kind, text))
        return made

    @property
    def kind(self) -> MutationKind:
        """What it does: the name of the function that made it (``"cel"``,
        ``"merge_patch"``, ..., ``"remove_list_entry"``)."""
        return self._kind

    def to_proto(self) -> writer_pb2.Mutation:
        """The ``safewrite.v1.Mutation`` message it sends (a new message each time, so
        changing it leaves the mutation as it is)."""
        return writer_pb2.Mutation.FromString(self._wire)

    def __setattr__(self, name: str, value: Any) -> NoReturn:
        raise AttributeError("a Mutation is immutable")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError("a Mutation is immutable")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Mutation):
            return NotImplemented
        return self._kind == other._kind and self._wire == other._wire

    def __hash__(self) -> int:
        return hash((self._kind, self._wire))

    def __repr__(self) -> str:
        return self._text

    def __reduce__(self) -> Any:
        return (_restore, (self._kind, self._wire, self._text))


def _restore(kind: MutationKind, wire: bytes, text: str) -> Mutation:
    made = Mutation._of(kind, writer_pb2.Mutation.FromString(wire), "")
    object.__setattr__(made, "_text", text)
    return made


def mutation_message(value: Mutation) -> writer_pb2.Mutation:
    """The message of the mutation a write was given.

    Raises:
        TypeError: ``value`` is not a :class:`Mutation` (e.g. an old-style keyword's value).
    """
    if not isinstance(value, Mutation):
        raise TypeError(
            "the mutation is a safewrite_client.Mutation, made with cel(), merge_patch(), "
            "json_patch(), apply(), set_conditions(), add_finalizer(), ..., not %s"
            % type(value).__name__
        )
    return value.to_proto()


def _short(value: Any) -> str:
    """The repr of a value for a mutation's repr, cut at 80 characters."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _json(what: str, value: Any, kind: type, name: str) -> str:
    """JSON text of ``value`` (text as it is, else encoded) that decodes to ``kind``."""
    if isinstance(value, str):
        try:
            decoded = json.loads(value)
        except ValueError as err:
            raise ValueError("%s: not JSON: %s" % (what, err)) from None
    elif isinstance(value, (Mapping, list, tuple)):
        decoded = value
    else:
        raise TypeError("%s takes %s or its JSON text, not %s" % (what, name, type(value).__name__))
    if not isinstance(decoded, Mapping if kind is dict else (list, tuple)):
        raise ValueError("%s: not a JSON %s" % (what, "object" if kind is dict else "array"))
    try:
        return dumps(value)
    except (TypeError, ValueError) as err:
        raise TypeError("%s: not JSON-serializable: %s" % (what, err)) from None


# --- patches -------------------------------------------------------------------------


def cel(expression: str) -> Mutation:
    """A CEL expression over ``object`` (the fresh object) returning a map that is
    applied to it as a JSON merge patch, e.g.
    ``cel('{"data": {"n": string(int(object.data.n) + 1)}}')``.

    Raises:
        TypeError: ``expression`` is not a str.
        ValueError: it is empty.
    """
    if not isinstance(expression, str):
        raise TypeError("cel takes a str, not %s" % type(expression).__name__)
    if not expression.strip():
        raise ValueError("cel: the expression is empty")
    message = writer_pb2.Mutation(cel=writer_pb2.CelMutation(expression=expression))
    return Mutation._of("cel", message, _short(expression))


def merge_patch(patch: JsonObject) -> Mutation:
    """An RFC 7386 JSON merge patch: a dict (None deletes a field) or JSON text of an
    object, e.g. ``merge_patch({"metadata": {"labels": {"tier": "web"}}})``.

    Raises:
        TypeError: ``patch`` is neither a mapping nor a str, or does not serialize.
        ValueError: text that is not a JSON object.
    """
    text = _json("merge_patch", patch, dict, "a dict")
    message = writer_pb2.Mutation(merge_patch=writer_pb2.MergePatch(patch_json=text))
    return Mutation._of("merge_patch", message, _short(text))


def json_patch(ops: JsonPatchOps) -> Mutation:
    """An RFC 6902 JSON Patch: a list of operations or its JSON text. Its ``test``
    operations are preconditions: when one fails on the fresh object nothing is written
    and the call fails with :class:`~safewrite_client.PreconditionFailedError`::

        json_patch([{"op": "test", "path": "/data/phase", "value": "pending"},
                    {"op": "replace", "path": "/data/phase", "value": "running"}])

    Raises:
        TypeError: ``ops`` is neither a list nor a str, or does not serialize.
        ValueError: text that is not a JSON array.
    """
    text = _json("json_patch", ops, list, "a list of operations")
    message = writer_pb2.Mutation(json_patch=writer_pb2.JsonPatch(patch_json=text))
    return Mutation._of("json_patch", message, _short(text))


def apply(configuration: JsonObject, *, force: bool = False) -> Mutation:
    """A server-side apply configuration (a dict or JSON text) with apiVersion, kind,
    metadata.name and the fields this field manager owns; needs a ``field_manager``. A
    conflict with another field manager fails with
    :class:`~safewrite_client.ConflictError` (reason ``FieldManagerConflict``) unless
    ``force``, which takes those fields over instead.

    Raises:
        TypeError: ``configuration`` is neither a mapping nor a str, or ``force`` is
            not a bool.
        ValueError: text that is not a JSON object.
    """
    if not isinstance(force, bool):
        raise TypeError("apply's force is a bool, not %s" % type(force).__name__)
    text = _json("apply", configuration, dict, "a dict")
    message = writer_pb2.Mutation(
        apply=writer_pb2.ServerSideApply(configuration_json=text, force=force)
    )
    return Mutation._of("apply", message, _short(text) + (", force=True" if force else ""))


# --- one entry of a list -------------------------------------------------------------


def _path(kind: str, path: str) -> str:
    if not isinstance(path, str):
        raise TypeError("%s's path is a str, not %s" % (kind, type(path).__name__))
    return path


def _with_path(text: str, path: str) -> str:
    return text + (", path=%r" % path if path else "")


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


def set_conditions(conditions: Union[Condition, Sequence[Condition]], *, path: str = "") -> Mutation:
    """Sets status conditions with ``meta.SetStatusCondition``'s semantics on the fresh
    object: the entry of that type is updated in place or appended, its
    lastTransitionTime changes only with its status, every other entry and field is
    kept, and a condition set to what it is writes nothing (``Outcome.UNCHANGED``).
    Unset ``observed_generation``: the fresh object's ``metadata.generation``; unset
    ``last_transition_time``: the time of the write. Send it with ``patch_status`` for a
    kind with a status subresource.

    Args:
        conditions: A :class:`~safewrite_client.Condition` or a sequence of them, each
            type once.
        path: Where the list is, as field names joined by dots; empty:
            ``"status.conditions"``.

    Raises:
        ValueError: no condition, or a type given twice.
        TypeError: a value that is not a Condition, a path that is not a str.
    """
    given: List[Any] = [conditions] if isinstance(conditions, Condition) else list(conditions)
    if not given:
        raise ValueError("set_conditions needs at least one Condition")
    seen = set()
    for condition in given:
        if not isinstance(condition, Condition):
            raise TypeError(
                "set_conditions takes safewrite_client.Condition values, not %s"
                % type(condition).__name__
            )
        if condition.type in seen:
            raise ValueError("set_conditions sets each type once; %r is given twice" % condition.type)
        seen.add(condition.type)
    change = writer_pb2.SetCondition(
        conditions=[condition_message(c) for c in given], path=_path("set_conditions", path)
    )
    text = _short(given[0] if len(given) == 1 else given)
    return Mutation._of("set_conditions", writer_pb2.Mutation(set_condition=change), _with_path(text, path))


def remove_conditions(types: Union[str, Sequence[str]], *, path: str = "") -> Mutation:
    """Removes the conditions of these types (a str is one type); the other entries
    keep their order, and removing a type that is not there writes nothing.

    Args:
        types: The condition types, e.g. ``"Ready"``.
        path: As for :func:`set_conditions`.

    Raises:
        ValueError: no type, or an empty one.
        TypeError: a path that is not a str.
    """
    given = [types] if isinstance(types, str) else list(types)
    if not given:
        raise ValueError("remove_conditions needs at least one type")
    for name in given:
        if not isinstance(name, str) or not name:
            raise ValueError("remove_conditions takes condition types (non-empty str), not %r" % (name,))
    change = writer_pb2.RemoveCondition(types=given, path=_path("remove_conditions", path))
    text = _short(given[0] if len(given) == 1 else given)
    return Mutation._of(
        "remove_conditions", writer_pb2.Mutation(remove_condition=change), _with_path(text, path)
    )


def _finalizer(kind: MutationKind, finalizer: str, remove: bool) -> Mutation:
    if not isinstance(finalizer, str):
        raise TypeError("%s takes a str, not %s" % (kind, type(finalizer).__name__))
    if not is_qualified_name(finalizer):
        raise ValueError(
            "%s: %r is not a qualified name (e.g. 'example.com/cleanup')" % (kind, finalizer)
        )
    change = writer_pb2.FinalizerChange(finalizer=finalizer, remove=remove)
    return Mutation._of(kind, writer_pb2.Mutation(finalizer=change), repr(finalizer))


def add_finalizer(finalizer: str) -> Mutation:
    """Adds one value to ``metadata.finalizers``, the others kept; one that is there
    writes nothing. Adding to an object being deleted fails with
    :class:`~safewrite_client.ObjectDeletingError`.

    Raises:
        ValueError: ``finalizer`` is not a qualified name (e.g. ``"example.com/cleanup"``).
        TypeError: it is not a str.
    """
    return _finalizer("add_finalizer", finalizer, remove=False)


def remove_finalizer(finalizer: str) -> Mutation:
    """Removes one value from ``metadata.finalizers``, the others kept; a removal that
    finds the object gone, or after which the API server deletes it, answers
    ``Outcome.GONE``. Raises as :func:`add_finalizer`."""
    return _finalizer("remove_finalizer", finalizer, remove=True)


def owner_reference(value: Owner, kind: str = "owner") -> OwnerReference:
    """An :class:`OwnerReference` as it is, or the reference to an owner object."""
    if isinstance(value, OwnerReference):
        return value
    if isinstance(value, Mapping):
        return OwnerReference.of(value)
    raise TypeError(
        "%s takes a safewrite_client.OwnerReference or the owner object (a dict with "
        "apiVersion, kind and metadata), not %s" % (kind, type(value).__name__)
    )


def _owner(kind: MutationKind, value: Owner, remove: bool) -> Mutation:
    owner = owner_reference(value, kind)
    reference = writer_pb2.OwnerReference(
        api_version=owner.api_version,
        kind=owner.kind,
        name=owner.name,
        uid=owner.uid,
        controller=owner.controller,
        block_owner_deletion=owner.block_owner_deletion,
    )
    change = writer_pb2.OwnerReferenceChange(owner=reference, remove=remove)
    return Mutation._of(kind, writer_pb2.Mutation(owner_reference=change), _short(owner))


def ensure_owner(owner: Owner) -> Mutation:
    """Ensures one entry of ``metadata.ownerReferences``, matched by group, kind and
    name as controllerutil matches it (not by uid or version: the reference of an owner
    deleted and recreated under its name takes the new uid, apiVersion and flags in
    place); one that is there as given writes nothing.

    Args:
        owner: An :class:`~safewrite_client.OwnerReference`, or the owner object itself
            (a dict or kopf body: a plain reference, neither controller nor blocking).

    Ensuring a ``controller`` reference when another owner is the controller fails with
    :class:`~safewrite_client.AlreadyOwnedError`.

    Raises:
        ValueError: an owner object without apiVersion, kind or metadata.name.
        TypeError: a value of another type.
    """
    return _owner("ensure_owner", owner, remove=False)


def remove_owner(owner: Owner) -> Mutation:
    """Removes the owner reference matched as for :func:`ensure_owner` (the first one
    matched by group, kind and name; its uid is not compared); one that is not there
    writes nothing. Raises as :func:`ensure_owner`."""
    return _owner("remove_owner", owner, remove=True)


def _list_entry(kind: MutationKind, entry: ListEntry, remove: bool) -> Mutation:
    if not isinstance(entry, ListEntry):
        raise TypeError("%s takes a safewrite_client.ListEntry, not %s" % (kind, type(entry).__name__))
    change = writer_pb2.ListEntryChange(
        path=entry.path, keys=list(entry.keys), entry_json=dumps(entry.entry), remove=remove
    )
    return Mutation._of(kind, writer_pb2.Mutation(list_entry=change), _short(entry))


def upsert_list_entry(entry: ListEntry) -> Mutation:
    """Merges one entry of a keyed list (a :class:`~safewrite_client.ListEntry`) into
    the entry with equal keys, or appends it; every other entry and the order are kept.

    Raises:
        TypeError: ``entry`` is not a ListEntry.
    """
    return _list_entry("upsert_list_entry", entry, remove=False)


def remove_list_entry(entry: ListEntry) -> Mutation:
    """Removes the entry of a keyed list with the keys of ``entry`` (a
    :class:`~safewrite_client.ListEntry`: only its key fields count). Raises as
    :func:`upsert_list_entry`."""
    return _list_entry("remove_list_entry", entry, remove=True)
