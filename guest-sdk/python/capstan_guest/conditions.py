"""Status conditions (``metav1.Condition``) as plain dicts, maintained the
way controller-runtime's ``meta.SetStatusCondition`` does: one condition
per type, ``lastTransitionTime`` kept while the status stays the same and
set to now when it changes::

    previous = (obj.get("status") or {}).get("conditions")
    conditions = capstan.set_condition(previous, "Ready", "True", "Reconciled", "all children applied",
                                       observed_generation=obj["metadata"].get("generation"))
    return capstan.Outcome().status({"conditions": conditions})

The functions never change the list or the dicts they are given.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Dict, Iterable, List, Mapping, Optional, Union

from ._json import clone_mapping

Condition = Dict[str, Any]
"""A condition: ``type``, ``status`` (``"True"``, ``"False"`` or
``"Unknown"``), ``reason``, ``message``, ``lastTransitionTime`` and
optionally ``observedGeneration``."""


def now() -> str:
    """The current time as a Kubernetes timestamp: RFC 3339, UTC, whole
    seconds, e.g. ``2025-01-31T12:00:00Z``."""
    return _timestamp(datetime.now(timezone.utc))


_now = now


def _timestamp(value: Union[datetime, str]) -> str:
    if isinstance(value, str):
        return value
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _status(status: Union[str, bool]) -> str:
    if status is True:
        return "True"
    if status is False:
        return "False"
    if status not in ("True", "False", "Unknown"):
        raise ValueError(f'condition status must be "True", "False" or "Unknown", not {status!r}')
    return status


def find_condition(conditions: Optional[Iterable[Mapping[str, Any]]], type: str) -> Optional[Condition]:
    """The condition of this ``type`` in ``conditions`` (a copy), or
    ``None``. ``conditions`` may be ``None`` (no status yet)."""
    for condition in conditions or ():
        if isinstance(condition, Mapping) and condition.get("type") == type:
            return clone_mapping(condition)
    return None


def is_condition_true(conditions: Optional[Iterable[Mapping[str, Any]]], type: str) -> bool:
    """True if the condition of this ``type`` has status ``"True"``."""
    found = find_condition(conditions, type)
    return found is not None and found.get("status") == "True"


def set_condition(
    conditions: Optional[Iterable[Mapping[str, Any]]],
    type: str,
    status: Union[str, bool],
    reason: str,
    message: str,
    observed_generation: Optional[int] = None,
    *,
    now: Optional[Union[datetime, str]] = None,
) -> List[Condition]:
    """``conditions`` with the condition of this ``type`` set, as a new
    list (the argument is not changed); ``conditions`` may be ``None``.

    - A new type is appended, with ``lastTransitionTime`` now.
    - An existing one keeps its place. Its ``lastTransitionTime`` is kept
      when ``status`` is the same as before and set to now when it
      changes (or was missing); ``reason``, ``message`` and
      ``observedGeneration`` are replaced (``observed_generation=None``
      removes it, as controller-runtime does for 0).

    ``status`` is ``"True"``, ``"False"``, ``"Unknown"``, or a bool.
    ``now`` (a ``datetime`` or an RFC 3339 string) stands in for the
    current time, for tests. Keys are written in the order Kubernetes
    serializes a ``metav1.Condition``."""
    status = _status(status)
    result: List[Condition] = [clone_mapping(c) for c in conditions or ()]
    index = next((i for i, c in enumerate(result) if c.get("type") == type), None)
    old = result[index] if index is not None else None
    if old is not None and old.get("status") == status and old.get("lastTransitionTime"):
        transition = old["lastTransitionTime"]
    else:
        transition = _timestamp(now) if now is not None else _now()
    condition: Condition = {"lastTransitionTime": transition, "message": message}
    if observed_generation is not None:
        condition["observedGeneration"] = observed_generation
    condition.update(reason=reason, status=status, type=type)
    if index is None:
        result.append(condition)
    else:
        result[index] = condition
    return result


def remove_condition(conditions: Optional[Iterable[Mapping[str, Any]]], type: str) -> List[Condition]:
    """``conditions`` without the condition of this ``type``, as a new
    list."""
    return [clone_mapping(c) for c in conditions or () if c.get("type") != type]
