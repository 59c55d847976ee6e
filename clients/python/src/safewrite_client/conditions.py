"""Status conditions (``status.conditions``, the shape of ``metav1.Condition``) set as a
mutation of the fresh object, so that concurrent writers never lose each other's
conditions and a repeated set writes nothing.

:class:`Condition` is a transaction function: ``client.transact(ref, condition,
status=True)`` reads the object, sets the condition on the fresh copy and writes the
status subresource, retried on conflict. ``lastTransitionTime`` changes only when the
condition's ``status`` changes; setting a condition exactly as it is leaves the object
unchanged, so the call answers ``Outcome.UNCHANGED`` and nothing is written::

    ready = Condition("Ready", "True", "Reconciled", "3 replicas", observed_generation=2)
    client.transact(ref, ready, status=True)
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Union

__all__ = ["Condition", "find_condition", "set_condition"]

_STATUSES = ("True", "False", "Unknown")
# metav1.Condition's validation of reason (CamelCase) and type (a qualified name).
_REASON = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
_TYPE = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                   r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def _now() -> str:
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Condition:
    """One condition to set on ``status.conditions``.

    Attributes:
        type: The condition's type, e.g. ``"Ready"`` (one condition per type).
        status: ``"True"``, ``"False"`` or ``"Unknown"`` (a bool is taken as
            ``"True"``/``"False"``).
        reason: A CamelCase reason for the status, e.g. ``"Reconciled"``.
        message: A human-readable message; may be empty.
        observed_generation: The ``metadata.generation`` the condition was computed
            from; None leaves the field out.

    Raises:
        ValueError: a type, status or reason the API server would refuse.
    """

    type: str
    status: Union[str, bool]
    reason: str
    message: str = ""
    observed_generation: Optional[int] = None

    def __post_init__(self) -> None:
        if isinstance(self.status, bool):
            object.__setattr__(self, "status", "True" if self.status else "False")
        if self.status not in _STATUSES:
            raise ValueError("a condition's status is True, False or Unknown, not %r" % (self.status,))
        if not _TYPE.match(self.type) or len(self.type) > 316:
            raise ValueError("%r is not a valid condition type (e.g. 'Ready')" % (self.type,))
        if not _REASON.match(self.reason) or len(self.reason) > 1024:
            raise ValueError("%r is not a valid condition reason (CamelCase, e.g. 'Reconciled')" % (self.reason,))
        if self.observed_generation is not None and self.observed_generation < 0:
            raise ValueError("observed_generation cannot be negative")

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


def set_condition(obj: Dict[str, Any], condition: Condition, now: Optional[str] = None) -> bool:
    """Sets ``condition`` on ``obj["status"]["conditions"]`` in place, keeping the other
    conditions and their order, and returns whether anything changed.

    ``lastTransitionTime`` becomes ``now`` (default: the current UTC time, to the
    second, as the API server writes it) only when the condition is new or its status
    changed; otherwise it keeps the existing one. A condition already set exactly so
    changes nothing.
    """
    status = obj.get("status")
    if not isinstance(status, dict):
        status = obj["status"] = {}
    conditions = status.get("conditions")
    if not isinstance(conditions, list):
        conditions = status["conditions"] = []
    old = find_condition(obj, condition.type)
    if old is not None and old.get("status") == condition.status and old.get("lastTransitionTime"):
        since = old["lastTransitionTime"]
    else:
        since = now or _now()
    new: Dict[str, Any] = {
        "type": condition.type,
        "status": condition.status,
        "reason": condition.reason,
        "message": condition.message,
        "lastTransitionTime": since,
    }
    if condition.observed_generation is not None:
        new["observedGeneration"] = condition.observed_generation
    if old is None:
        conditions.append(new)
        return True
    if old == new:
        return False
    items: List[Any] = conditions
    items[items.index(old)] = new
    return True
