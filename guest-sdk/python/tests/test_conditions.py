"""Tests of the condition helpers: ``python3 -m pytest guest-sdk/python/tests``."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Any, Dict, List

import pytest

T0 = "2024-05-01T10:00:00Z"
T1 = "2024-05-02T11:30:00Z"


def _ready(status: str, when: str = T0, **extra: Any) -> Dict[str, Any]:
    return {"lastTransitionTime": when, "message": "m", "reason": "R", "status": status, "type": "Ready", **extra}


def test_a_new_condition_is_appended_with_the_transition_time_now() -> None:
    import capstan_guest as capstan

    before = datetime.now(timezone.utc).replace(microsecond=0)
    out = capstan.set_condition(None, "Ready", "True", "Reconciled", "all applied", 3)
    after = datetime.now(timezone.utc)
    assert len(out) == 1
    c = out[0]
    assert list(c) == ["lastTransitionTime", "message", "observedGeneration", "reason", "status", "type"]
    assert (c["type"], c["status"], c["reason"], c["message"], c["observedGeneration"]) == (
        "Ready",
        "True",
        "Reconciled",
        "all applied",
        3,
    )
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", c["lastTransitionTime"])
    when = datetime.strptime(c["lastTransitionTime"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    assert before <= when <= after
    others = capstan.set_condition([{"type": "Synced", "status": "True"}], "Ready", False, "Failed", "no", now=T1)
    assert [c["type"] for c in others] == ["Synced", "Ready"] and others[1]["status"] == "False"
    assert "observedGeneration" not in others[1]


def test_the_transition_time_is_kept_while_the_status_stays_the_same() -> None:
    import capstan_guest as capstan

    previous = [{"type": "Synced", "status": "True"}, _ready("True", observedGeneration=1)]
    out = capstan.set_condition(previous, "Ready", "True", "StillFine", "still", 2, now=T1)
    assert out[0] == {"type": "Synced", "status": "True"}
    assert out[1] == {
        "lastTransitionTime": T0,
        "message": "still",
        "observedGeneration": 2,
        "reason": "StillFine",
        "status": "True",
        "type": "Ready",
    }
    # The arguments are left alone.
    assert previous[1]["reason"] == "R" and previous[1]["observedGeneration"] == 1


def test_the_transition_time_is_now_when_the_status_changes_or_was_missing() -> None:
    import capstan_guest as capstan

    out = capstan.set_condition([_ready("True", observedGeneration=4)], "Ready", "False", "Broken", "x", now=T1)
    assert out == [{"lastTransitionTime": T1, "message": "x", "reason": "Broken", "status": "False", "type": "Ready"}]
    missing = [{"type": "Ready", "status": "True"}]
    stamp = datetime(2024, 5, 3, 8, 15, 59, 999999, tzinfo=timezone(timedelta(hours=2)))
    out = capstan.set_condition(missing, "Ready", "True", "Ok", "", now=stamp)
    assert out[0]["lastTransitionTime"] == "2024-05-03T06:15:59Z"
    naive = capstan.set_condition([], "Ready", "Unknown", "Pending", "", now=datetime(2024, 1, 2, 3, 4, 5))
    assert naive[0]["lastTransitionTime"] == "2024-01-02T03:04:05Z" and naive[0]["status"] == "Unknown"


def test_a_status_must_be_true_false_or_unknown() -> None:
    import capstan_guest as capstan

    with pytest.raises(ValueError):
        capstan.set_condition([], "Ready", "yes", "R", "m")


def test_find_condition_returns_a_copy_of_the_condition_of_a_type() -> None:
    import capstan_guest as capstan

    conditions: List[Dict[str, Any]] = [{"type": "Synced", "status": "False"}, _ready("True")]
    found = capstan.find_condition(conditions, "Ready")
    assert found == _ready("True")
    assert found is not conditions[1]
    nested = [_ready("True", extra={"keys": ["a"]})]
    copied = capstan.set_condition(nested, "Ready", "True", "R", "m")
    capstan.find_condition(nested, "Ready")["extra"]["keys"].append("b")  # type: ignore[index]
    assert nested[0]["extra"] == {"keys": ["a"]} and copied[0]["lastTransitionTime"] == T0
    assert capstan.find_condition(conditions, "Missing") is None
    assert capstan.find_condition(None, "Ready") is None
    assert capstan.is_condition_true(conditions, "Ready") and not capstan.is_condition_true(conditions, "Synced")
    assert capstan.remove_condition(conditions, "Synced") == [_ready("True")] and len(conditions) == 2
