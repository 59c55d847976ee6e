"""Status conditions (``status.conditions``, the shape of ``metav1.Condition``), set with
the semantics of apimachinery's ``meta.SetStatusCondition`` on the fresh object, so
that concurrent writers never lose each other's conditions and a repeated set writes
nothing.

A :class:`Condition` is what the sidecar's ``set_conditions`` mutation sets::

    ready = Condition("Ready", True, "Reconciled", "3 replicas")
    client.patch_status(ref, safewrite_client.set_conditions(ready))

The sidecar applies it to the fresh object on every attempt: the entry of that type is
updated in place (a new type is appended), its ``lastTransitionTime`` changes only when
its ``status`` changes, and setting a condition exactly as it is answers
``Outcome.UNCHANGED`` and writes nothing. The same rules are here for plain dicts
(:func:`set_condition`), and a :class:`Condition` is also a transaction function
(``client.transact(ref, ready, status=True)``), for a transaction that changes more
than its conditions.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Union

from ._names import is_qualified_name

__all__ = ["Condition", "find_condition", "set_condition"]

_STATUSES = ("True", "False", "Unknown")
# metav1.Condition's validation of reason (CamelCase), and the limits of its fields.
_REASON = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
_MAX_TYPE, _MAX_REASON, _MAX_MESSAGE = 316, 1024, 32768
_RFC3339 = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.\d+)?([Zz]|[+-]\d{2}:\d{2})$"
)


def _utc_seconds(value: datetime.datetime) -> str:
    utc = value.astimezone(datetime.timezone.utc)
    return utc.strftime("%Y-%m-%dT%H:%M:%SZ")


def _now() -> str:
    return _utc_seconds(datetime.datetime.now(datetime.timezone.utc))


def _rfc3339(value: Union[str, datetime.datetime]) -> str:
    """A transition time as the API server stores it: RFC 3339 in UTC, to the second
    (a fraction is dropped, as ``metav1.Time`` drops it).

    Raises:
        ValueError: a naive datetime (its zone is unknown), or text that is not an RFC
            3339 date and time with a zone (``Z`` or ``+hh:mm``).
        TypeError: neither a str nor a datetime.
    """
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(
                "last_transition_time must be timezone-aware, e.g. "
                "datetime.now(timezone.utc): a naive datetime's zone is unknown"
            )
        return _utc_seconds(value)
    if not isinstance(value, str):
        raise TypeError(
            "last_transition_time must be a datetime or an RFC 3339 str, not %s"
            % type(value).__name__
        )
    match = _RFC3339.match(value)
    if not match:
        raise ValueError(
            "last_transition_time %r is not an RFC 3339 time with a zone, e.g. "
            "'2026-11-26T15:04:05Z'" % (value,)
        )
    zone = match.group(7).upper().replace("Z", "+00:00")
    try:
        parsed = datetime.datetime.fromisoformat(
            "%s-%s-%sT%s:%s:%s%s" % (match.group(1, 2, 3, 4, 5, 6) + (zone,))
        )
    except ValueError as err:
        raise ValueError("last_transition_time %r: %s" % (value, err)) from None
    return _utc_seconds(parsed)


@dataclass(frozen=True)
class Condition:
    """One condition to set (``metav1.Condition``).

    Attributes:
        type: The condition's type, e.g. ``"Ready"`` (one condition per type): a
            qualified name, ``[prefix/]name``.
        status: ``"True"``, ``"False"`` or ``"Unknown"`` (a bool is taken as
            ``"True"``/``"False"``).
        reason: A CamelCase reason for the status, e.g. ``"Reconciled"``.
        message: A human-readable message; may be empty.
        observed_generation: The ``metadata.generation`` the condition was computed
            from. None: the generation of the fresh object the change is applied to
            (read again on every attempt), and no ``observedGeneration`` when the
            object has none.
        last_transition_time: When the status last changed, used only when the entry
            is new or its status changes: a timezone-aware ``datetime`` or an RFC 3339
            str, kept as RFC 3339 in UTC to the second. None: the time of the write.

    Raises:
        ValueError: a type, status, reason or message the API server would refuse, a
            negative ``observed_generation``, or a naive or malformed
            ``last_transition_time``.
        TypeError: a field of the wrong type.
    """

    type: str
    status: Union[str, bool]
    reason: str
    message: str = ""
    observed_generation: Optional[int] = None
    last_transition_time: Union[str, datetime.datetime, None] = None

    def __post_init__(self) -> None:
        if isinstance(self.status, bool):
            object.__setattr__(self, "status", "True" if self.status else "False")
        if self.status not in _STATUSES:
            raise ValueError("a condition's status is True, False or Unknown, not %r" % (self.status,))
        if not isinstance(self.type, str) or len(self.type) > _MAX_TYPE or not is_qualified_name(self.type):
            raise ValueError("%r is not a valid condition type (e.g. 'Ready')" % (self.type,))
        if not isinstance(self.reason, str) or len(self.reason) > _MAX_REASON or not _REASON.match(self.reason):
            raise ValueError("%r is not a valid condition reason (CamelCase, e.g. 'Reconciled')" % (self.reason,))
        if not isinstance(self.message, str):
            raise TypeError("a condition's message is a str, not %s" % type(self.message).__name__)
        if len(self.message) > _MAX_MESSAGE:
            raise ValueError("a condition's message is at most %d characters" % _MAX_MESSAGE)
        generation = self.observed_generation
        if generation is not None:
            if isinstance(generation, bool) or not isinstance(generation, int):
                raise TypeError("observed_generation is an int, not %s" % type(generation).__name__)
            if generation < 0:
                raise ValueError("observed_generation cannot be negative")
        if self.last_transition_time is not None:
            object.__setattr__(self, "last_transition_time", _rfc3339(self.last_transition_time))

    def apply(self, obj: Dict[str, Any], now: Optional[str] = None) -> bool:
        """Sets this condition on ``obj`` (in place); see :func:`set_condition`."""
        return set_condition(obj, self, now=now)

    def __call__(self, obj: Dict[str, Any]) -> None:
        """As a transaction function: sets the condition on the fresh object."""
        self.apply(obj)


def find_condition(obj: Dict[str, Any], type: str) -> Optional[Dict[str, Any]]:
    """The condition of this type in ``obj["status"]["conditions"]``, or None."""
    status = obj.get("status")
    conditions = status.get("conditions") if isinstance(status, dict) else None
    for item in conditions if isinstance(conditions, list) else ():
        if isinstance(item, dict) and item.get("type") == type:
            return item
    return None


def _generation(obj: Dict[str, Any], condition: Condition) -> Optional[int]:
    if condition.observed_generation is not None:
        return condition.observed_generation
    meta = obj.get("metadata")
    generation = meta.get("generation") if isinstance(meta, dict) else None
    return generation if isinstance(generation, int) else None


def set_condition(obj: Dict[str, Any], condition: Condition, now: Optional[str] = None) -> bool:
    """Sets ``condition`` on ``obj["status"]["conditions"]`` in place, as the sidecar's
    ``set_conditions`` does, and returns whether anything changed.

    The entry of the condition's type is updated in place, keeping its other fields and
    its place (a new type is appended); the other entries are kept as they are.
    ``lastTransitionTime`` becomes the condition's own, else ``now``, else the current
    UTC time to the second, only when the entry is new or its status changed (or it
    had none). ``observedGeneration`` is the condition's, else ``obj``'s
    ``metadata.generation`` (none when it has none). A condition already set exactly so
    changes nothing.
    """
    status = obj.get("status")
    if not isinstance(status, dict):
        status = obj["status"] = {}
    conditions = status.get("conditions")
    if not isinstance(conditions, list):
        conditions = status["conditions"] = []
    entries: List[Any] = conditions
    entry = find_condition(obj, condition.type)
    before = dict(entry) if entry is not None else None
    if entry is None:
        entry = {"type": condition.type}
        entries.append(entry)
    transition = entry.get("status") != condition.status or not entry.get("lastTransitionTime")
    entry["status"] = condition.status
    entry["reason"] = condition.reason
    entry["message"] = condition.message
    if transition:
        given = condition.last_transition_time  # a str once the Condition is made
        entry["lastTransitionTime"] = given if isinstance(given, str) else now or _now()
    generation = _generation(obj, condition)
    if generation is None:
        entry.pop("observedGeneration", None)
    else:
        entry["observedGeneration"] = generation
    return entry != before
