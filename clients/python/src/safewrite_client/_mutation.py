"""What to change, from Python values to a ``safewrite.v1.Mutation``: the mutation
keywords every write takes (one :class:`MutationArgs` for ``update``, ``patch_status``
and :func:`mutation`), exactly one per call, each checked here before anything is sent."""

from __future__ import annotations

import json
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    FrozenSet,
    List,
    Mapping,
    Sequence,
    Tuple,
    TypedDict,
    Union,
)

from ._names import is_qualified_name
from ._types import ListEntry, OwnerReference
from .conditions import Condition
from .v1 import writer_pb2

if TYPE_CHECKING:
    from typing_extensions import Unpack

#: A JSON object given either as a mapping or as JSON text.
JsonObject = Union[Mapping[str, Any], str]
#: A JSON Patch given either as a sequence of operations or as JSON text.
JsonPatchOps = Union[Sequence[Mapping[str, Any]], str]
#: An owner: an :class:`OwnerReference`, or the owner object itself (a dict or kopf body).
Owner = Union[OwnerReference, Mapping[str, Any]]


class MutationArgs(TypedDict, total=False):
    """The mutation keywords of ``update``, ``patch_status`` and :func:`mutation`;
    exactly one is given, and it is re-applied to the fresh object on every attempt.

    - ``cel``: a CEL expression over ``object`` returning a map, applied as a merge
      patch, e.g. ``'{"data": {"n": string(int(object.data.n) + 1)}}'``.
    - ``merge_patch``: an RFC 7386 JSON merge patch (a dict or JSON text).
    - ``json_patch``: an RFC 6902 JSON Patch (a list of operations or JSON text); its
      ``test`` operations are preconditions.
    - ``apply``: a server-side apply configuration (a dict or JSON text) with
      apiVersion, kind, metadata.name and the fields this manager owns; needs
      ``field_manager``. ``force=True`` takes over fields other managers own instead
      of failing with :class:`~safewrite_client.ConflictError`.
    - ``set_conditions``: a :class:`~safewrite_client.Condition` or a sequence of them
      (each type once), set with ``meta.SetStatusCondition``'s semantics: the entry of
      that type is updated in place or appended, its lastTransitionTime changes only
      with its status, every other entry and field is kept, and a condition set to
      what it is writes nothing. Unset ``observed_generation``: the fresh object's
      ``metadata.generation``; unset ``last_transition_time``: the time of the write.
    - ``remove_conditions``: the types to remove (a str is one type).
    - ``conditions_path``: with ``set_conditions`` or ``remove_conditions``, where the
      list is, as field names joined by dots; default ``"status.conditions"``.
    - ``add_finalizer`` / ``remove_finalizer``: one value of ``metadata.finalizers``,
      the others kept. Adding to an object being deleted fails with
      :class:`~safewrite_client.ObjectDeletingError`; a removal that finds the object
      gone, or after which the API server deletes it, answers ``Outcome.GONE``.
    - ``ensure_owner`` / ``remove_owner``: one entry of ``metadata.ownerReferences``,
      matched by uid: an :class:`~safewrite_client.OwnerReference` or the owner object
      itself (a dict or kopf body). Ensuring a ``controller`` reference when another
      owner is the controller fails with :class:`~safewrite_client.AlreadyOwnedError`.
    - ``upsert_list_entry`` / ``remove_list_entry``: one entry of a keyed list, a
      :class:`~safewrite_client.ListEntry`; every other entry and the order are kept.

    Changes that change nothing (a finalizer that is there, a reference that is not)
    write nothing and answer ``Outcome.UNCHANGED``.
    """

    cel: str
    merge_patch: JsonObject
    json_patch: JsonPatchOps
    apply: JsonObject
    force: bool
    set_conditions: Union[Condition, Sequence[Condition]]
    remove_conditions: Union[str, Sequence[str]]
    conditions_path: str
    add_finalizer: str
    remove_finalizer: str
    ensure_owner: Owner
    remove_owner: Owner
    upsert_list_entry: ListEntry
    remove_list_entry: ListEntry


def keys_of(cls: Any) -> FrozenSet[str]:
    """The keywords a TypedDict declares, its bases' included."""
    return frozenset(cls.__annotations__)


def check_keys(method: str, given: Mapping[str, Any], allowed: FrozenSet[str]) -> None:
    """Raises TypeError, as Python does, for a keyword ``method`` does not take."""
    unknown = sorted(set(given) - allowed)
    if unknown:
        raise TypeError("%s() got an unexpected keyword argument %r" % (method, unknown[0]))


def dumps(value: Any) -> str:
    """Encodes a JSON value compactly; text is passed through as it is."""
    if isinstance(value, (str, bytes)):
        return value.decode("utf-8") if isinstance(value, bytes) else value
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


# --- one builder per mutation keyword ------------------------------------------------

Args = Mapping[str, Any]


def _cel(value: str, args: Args) -> writer_pb2.Mutation:
    return writer_pb2.Mutation(cel=writer_pb2.CelMutation(expression=value))


def _merge_patch(value: JsonObject, args: Args) -> writer_pb2.Mutation:
    return writer_pb2.Mutation(merge_patch=writer_pb2.MergePatch(patch_json=dumps(value)))


def _json_patch(value: JsonPatchOps, args: Args) -> writer_pb2.Mutation:
    return writer_pb2.Mutation(json_patch=writer_pb2.JsonPatch(patch_json=dumps(value)))


def _apply(value: JsonObject, args: Args) -> writer_pb2.Mutation:
    configuration = writer_pb2.ServerSideApply(
        configuration_json=dumps(value), force=bool(args.get("force", False))
    )
    return writer_pb2.Mutation(apply=configuration)


def _conditions_path(args: Args) -> str:
    path = args.get("conditions_path") or ""
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


def _set_conditions(value: Union[Condition, Sequence[Condition]], args: Args) -> writer_pb2.Mutation:
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


def _remove_conditions(value: Union[str, Sequence[str]], args: Args) -> writer_pb2.Mutation:
    types = [value] if isinstance(value, str) else list(value)
    if not types:
        raise ValueError("remove_conditions needs at least one type")
    for name in types:
        if not isinstance(name, str) or not name:
            raise ValueError("remove_conditions takes condition types (non-empty str), not %r" % (name,))
    change = writer_pb2.RemoveCondition(types=types, path=_conditions_path(args))
    return writer_pb2.Mutation(remove_condition=change)


def _finalizer(remove: bool) -> Callable[[str, Args], writer_pb2.Mutation]:
    keyword = "remove_finalizer" if remove else "add_finalizer"

    def build(value: str, args: Args) -> writer_pb2.Mutation:
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


def _owner(remove: bool) -> Callable[[Owner, Args], writer_pb2.Mutation]:
    keyword = "remove_owner" if remove else "ensure_owner"

    def build(value: Owner, args: Args) -> writer_pb2.Mutation:
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


def _list_entry(remove: bool) -> Callable[[ListEntry, Args], writer_pb2.Mutation]:
    keyword = "remove_list_entry" if remove else "upsert_list_entry"

    def build(value: ListEntry, args: Args) -> writer_pb2.Mutation:
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
_KINDS: Dict[str, Callable[[Any, Args], writer_pb2.Mutation]] = {
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

# The keywords that qualify a mutation, the mutations they qualify, and what to say
# when they come with another.
_MODIFIERS: Dict[str, Tuple[Tuple[str, ...], str]] = {
    "force": (("apply",), "force applies only to server-side apply (apply=...)"),
    "conditions_path": (
        ("set_conditions", "remove_conditions"),
        "conditions_path goes with set_conditions= or remove_conditions=",
    ),
}

#: Every keyword of :class:`MutationArgs`.
MUTATION_KEYS = keys_of(MutationArgs)


def mutation(**kwargs: "Unpack[MutationArgs]") -> writer_pb2.Mutation:
    """The ``safewrite.v1.Mutation`` for exactly one mutation keyword (see
    :class:`MutationArgs`); a :meth:`~safewrite_client.Client.transact` function may
    return one to propose it.

    Raises:
        ValueError: not exactly one mutation, a qualifier (``force``,
            ``conditions_path``) with another mutation, or a value the sidecar would
            refuse (e.g. a finalizer that is not a qualified name).
        TypeError: an unknown keyword or a value of the wrong type.
    """
    check_keys("mutation", kwargs, MUTATION_KEYS)
    args: Args = kwargs
    given = [name for name in _KINDS if args.get(name) is not None]
    if len(given) != 1:
        raise ValueError(
            "give exactly one mutation, one of %s (got %s)"
            % (", ".join(_KINDS), ", ".join(given) or "none")
        )
    kind = given[0]
    for modifier, (kinds, why) in _MODIFIERS.items():
        if args.get(modifier) and kind not in kinds:
            raise ValueError(why)
    return _KINDS[kind](args[kind], args)
