"""The silences operator, in Python: a ``Silence`` custom resource kept in
sync with a silence in a Prometheus Alertmanager, through its v2 HTTP API.

The same controller as the Rust one (``examples/silences``), with the same
CRD, egress, finalizer, status and errors, and tested by the same
scenarios, Alertmanager stubbed::

    tests/build-polyglot-guests.sh
    capstan test $CARGO_TARGET_DIR/guests/silences-python.wasm examples/silences/scenarios
"""

from __future__ import annotations

import json
import pathlib
import time
from typing import Any, Dict, List, Optional

import capstan_guest as capstan
from capstan_guest import http

ALERTMANAGER = "http://alertmanager.monitoring.svc:9093"
"""The Alertmanager this component talks to: the origin it declares."""

FINALIZER = "silences.examples.capstan.dev/expire"
"""The finalizer that expires the silence before the resource goes."""

RECHECK = 60
"""Seconds until a synced silence is looked at again (drift)."""

# componentize-py runs this module at build time and snapshots the result,
# so the CRD file is read once, while building. It is the Rust example's
# CRD (see README.md).
CRD: Dict[str, Any] = json.loads((pathlib.Path(__file__).parent / "silence-crd.json").read_text())


def created_by(silence: Dict[str, Any]) -> str:
    """Who made the silence, as Alertmanager shows it: the spec's, or
    ``capstan/NAMESPACE/NAME`` (how the controller finds its own)."""
    spec = silence.get("spec") or {}
    meta = silence.get("metadata") or {}
    return spec.get("createdBy") or f"capstan/{meta.get('namespace', '')}/{meta.get('name', '')}"


def status(silence: Dict[str, Any], id: Optional[str], state: Optional[str], ready: List[str]) -> Dict[str, Any]:
    """The status to write: the Ready condition ``[status, reason,
    message]``, the silence's id and state when known, the generation."""
    current = dict(silence.get("status") or {})
    current["conditions"] = capstan.set_condition(current.get("conditions"), "Ready", *ready)
    if id is not None:
        current["silenceId"] = id
        current["state"] = state
    generation = (silence.get("metadata") or {}).get("generation")
    if generation is not None:
        current["observedGeneration"] = generation
    return current


def failed(silence: Dict[str, Any], error: Exception) -> capstan.ReconcileError:
    """A refused spec (4xx) is terminal, ``Rejected``; anything else is
    transient, ``Unreachable``, while Alertmanager does not answer."""
    if isinstance(error, Refused):
        message = f"Alertmanager refused the silence: {error.body}"
        return capstan.Terminal(message, status=status(silence, None, None, ["False", "Rejected", message]))
    return capstan.Transient(str(error), status=status(silence, None, None, ["False", "Unreachable", str(error)]))


class Refused(Exception):
    """Alertmanager answered with a 4xx status."""

    def __init__(self, code: int, body: str) -> None:
        super().__init__(f"Alertmanager answered {code}: {body}")
        self.body = body


def answer(response: http.Response) -> http.Response:
    """``response`` if it succeeded; :class:`Refused` for a 4xx, an
    exception (transient) for any other failure."""
    if response.ok:
        return response
    if 400 <= response.status < 500:
        raise Refused(response.status, response.text)
    raise RuntimeError(f"Alertmanager answered {response.status}: {response.text}")


def get(id: str) -> Optional[Dict[str, Any]]:
    """The silence Alertmanager holds under ``id``; ``None`` if it knows none."""
    response = http.request("GET", f"{ALERTMANAGER}/api/v2/silence/{id}")
    if response.status == 404:
        return None
    return answer(response).json()


def same_time(a: str, b: str) -> bool:
    """The same instant, whatever the precision Alertmanager writes it with."""

    def seconds(t: str) -> str:
        return t.replace("+", "Z").split(".")[0].split("Z")[0]

    return seconds(a) == seconds(b)


def matchers(items: List[Dict[str, Any]]) -> List[tuple]:
    """Matchers compared as Alertmanager keeps them (defaults filled in)."""
    return sorted(
        (m.get("name", ""), m.get("value", ""), bool(m.get("isRegex", False)), bool(m.get("isEqual", True)))
        for m in items
    )


def up_to_date(spec: Dict[str, Any], held: Dict[str, Any]) -> bool:
    """Whether Alertmanager's silence is what the spec asks for."""
    return (
        matchers(spec.get("matchers") or []) == matchers(held.get("matchers") or [])
        and spec.get("comment", "") == held.get("comment", "")
        and same_time(spec.get("endsAt", ""), held.get("endsAt", ""))
    )


def find_own(silence: Dict[str, Any]) -> Optional[str]:
    """A live silence made for ``silence`` that already is what its spec
    asks for, if Alertmanager holds one: made by an earlier pass that could
    not record its id."""
    held = answer(http.request("GET", f"{ALERTMANAGER}/api/v2/silences")).json()
    by = created_by(silence)
    for h in held:
        if h["status"]["state"] != "expired" and h.get("createdBy") == by and up_to_date(silence["spec"], h):
            return h.get("id")
    return None


def post(silence: Dict[str, Any], id: Optional[str]) -> str:
    """Creates the silence (no ``id``) or updates the one with ``id``;
    returns the id Alertmanager gives it."""
    spec = silence["spec"]
    body: Dict[str, Any] = {
        "matchers": spec["matchers"],
        "startsAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "endsAt": spec["endsAt"],
        "createdBy": created_by(silence),
        "comment": spec["comment"],
    }
    if id is not None:
        body["id"] = id
    created = answer(http.request("POST", f"{ALERTMANAGER}/api/v2/silences", json=body)).json()
    if not isinstance(created.get("silenceID"), str):
        raise RuntimeError("Alertmanager's answer has no silenceID")
    return created["silenceID"]


class Silences(capstan.Controller):
    """The silences controller."""

    def manifest(self) -> capstan.Manifest:
        """Silences, their CRD, the finalizer and the one origin it calls."""
        return (
            capstan.Manifest("silences")
            .primary("examples.capstan.dev/v1alpha1", "Silence")
            .crd(CRD)
            .finalizer(FINALIZER)
            .egress(ALERTMANAGER)
        )

    def reconcile(self, ctx: capstan.Context, silence: Dict[str, Any]) -> capstan.Outcome:
        """Makes, updates or re-makes the silence; the status says which
        it is and whether it is in sync."""
        spec = silence.get("spec") or {}
        if not spec.get("matchers") or any(not m.get("name") for m in spec["matchers"]):
            message = "spec.matchers needs at least one matcher, each with a name"
            raise capstan.Terminal(message, status=status(silence, None, None, ["False", "InvalidSpec", message]))
        known = (silence.get("status") or {}).get("silenceId")
        outcome = capstan.Outcome().requeue_after(RECHECK)
        try:
            held = get(known) if known else None
            if known and held and held["status"]["state"] != "expired":
                id = known if up_to_date(spec, held) else post(silence, known)
            else:
                if known:
                    outcome = outcome.event(
                        capstan.Event.warning("Recreated", "Sync").note(
                            f"silence {known} was expired or removed in Alertmanager; made it again"
                        )
                    )
                id = find_own(silence) or post(silence, None)
            now = get(id)
        except (http.HttpError, Refused, RuntimeError, ValueError) as e:
            raise failed(silence, e) from e
        state = now["status"]["state"] if now else "unknown"
        ready = ["True", "Synced", f"silence {id} is {state}"]
        return outcome.status(status(silence, id, state, ready))

    def delete(self, ctx: capstan.Context, silence: Dict[str, Any]) -> capstan.Outcome:
        """Expires the silence, behind the finalizer."""
        try:
            id = (silence.get("status") or {}).get("silenceId") or find_own(silence)
            if id is None:
                return capstan.Outcome()
            held = get(id)
            if held is None or held["status"]["state"] == "expired":
                return capstan.Outcome()
            answer(http.request("DELETE", f"{ALERTMANAGER}/api/v2/silence/{id}"))
        except (http.HttpError, Refused, RuntimeError, ValueError) as e:
            raise failed(silence, e) from e
        return capstan.Outcome().event(capstan.Event.normal("Expired", "Cleanup").note(f"silence {id} expired"))


Controller, Admission, Conversion, Scheduler = capstan.export(Silences)
