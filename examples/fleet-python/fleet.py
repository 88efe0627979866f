"""The fleet greeter, in Python: a fleet controller. A ``FleetGreeting`` in
the home cluster (``default``, the host's own) spreads a ConfigMap holding
its message to the member clusters of the fleet, reads each copy back and
reports which members hold it.

The same controller as the Rust one (``examples/fleet``), with the same
CRD, children, status and events::

    tests/build-polyglot-guests.sh      # builds fleet-python.wasm
    capstan inspect $CARGO_TARGET_DIR/guests/fleet-python.wasm
"""

from __future__ import annotations

import json
import pathlib
from typing import Any, Dict, List, Optional

import capstan_guest as capstan

FINALIZER = "examples.capstan.dev/fleet-greeting"
"""The finalizer behind which the host deletes the children in the members
before a FleetGreeting goes."""

HOME = "default"
"""The cluster whose FleetGreetings are reconciled: the host's own."""

RECHECK = 5
"""Seconds until a FleetGreeting not ready in every member is looked at
again."""

# componentize-py runs this module at build time and snapshots the result,
# so the CRD file is read once, while building, and is not needed at run
# time. It is the Rust example's CRD (see README.md).
CRD: Dict[str, Any] = json.loads((pathlib.Path(__file__).parent / "fleetgreeting-crd.json").read_text())


def configmap_name(greeting: str) -> str:
    """Name of the ConfigMap a FleetGreeting places in each member."""
    return f"{greeting}-greeting"


def targets(ctx: capstan.Context, spec: Dict[str, Any]) -> List[str]:
    """The members to spread to: those engaged now (``ctx.members``, in
    their order), only the ones ``spec.members`` names when it is given."""
    wanted: Optional[List[str]] = spec.get("members")
    if wanted is None:
        return list(ctx.members)
    return [member for member in ctx.members if member in wanted]


def member_status(
    ctx: capstan.Context, member: str, name: str, message: str, copy: Optional[Dict[str, Any]]
) -> Dict[str, Any]:
    """One member's entry of the status: ready when it holds the ConfigMap
    with the message; refused when the host could not apply it there;
    pending otherwise."""
    for failed in ctx.failed_children:
        if failed.cluster == member and failed.kind == "ConfigMap" and failed.name == name:
            return {"cluster": member, "ready": False, "message": f"refused: {failed.reason}: {failed.message}"}
    if copy is not None and (copy.get("data") or {}).get("message") == message:
        return {"cluster": member, "ready": True}
    return {"cluster": member, "ready": False, "message": "pending"}


class FleetGreeter(capstan.Controller):
    """The fleet greeter controller."""

    def manifest(self) -> capstan.Manifest:
        """FleetGreetings and their CRD, ConfigMaps in the members, a
        finalizer, and the fleet: home ``default``, every other cluster the
        host serves a member."""
        return (
            capstan.Manifest("fleet-greeter")
            .primary("examples.capstan.dev/v1", "FleetGreeting")
            .crd(CRD)
            .owns("v1", "ConfigMap")
            .finalizer(FINALIZER)
            .fleet(home=HOME)
        )

    def delete(self, ctx: capstan.Context, greeting: Dict[str, Any]) -> capstan.Outcome:
        """Nothing to do: the host deletes the children in the members
        behind the finalizer."""
        return capstan.Outcome()

    def reconcile(self, ctx: capstan.Context, greeting: Dict[str, Any]) -> capstan.Outcome:
        """Places the ConfigMap in every target member, reads each back and
        reports a status per member and a ``Ready`` condition."""
        spec = greeting.get("spec") or {}
        message: str = spec.get("message", "")
        namespace = ctx.namespace
        name = configmap_name(ctx.name)
        members = targets(ctx, spec)

        outcome = capstan.Outcome()
        for member in members:
            outcome.child_in(
                member,
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": name, "namespace": namespace},
                    "data": {"message": message, "from": f"{ctx.cluster}/{namespace}/{ctx.name}"},
                },
            )

        entries = []
        for member in members:
            # A member that does not answer is reported, not a failure of
            # the whole pass: the others' copies and the status go on.
            try:
                copy = ctx.api_in(member, "v1", "ConfigMap", namespace).get_opt(name)
            except capstan.ApiError as e:
                entries.append({"cluster": member, "ready": False, "message": f"unreachable: {e}"})
                continue
            entries.append(member_status(ctx, member, name, message, copy))
        ready = sum(1 for entry in entries if entry["ready"])
        all_ready = bool(members) and ready == len(members)

        generation: Optional[int] = (greeting.get("metadata") or {}).get("generation")
        previous = greeting.get("status") or {}
        conditions = capstan.set_condition(
            previous.get("conditions"),
            "Ready",
            "True" if all_ready else "False",
            "AllMembersReady" if all_ready else "MembersNotReady",
            f"{ready}/{len(members)} members ready",
            observed_generation=generation,
        )
        status: Dict[str, Any] = {"members": entries, "readyMembers": ready, "conditions": conditions}
        if generation is not None:
            status["observedGeneration"] = generation
        outcome.status(status)

        if not all_ready:
            outcome.requeue_after(RECHECK)
        if ctx.event in (capstan.EventKind.ADDED, capstan.EventKind.MODIFIED):
            outcome.event(capstan.Event.normal("Spread", "Reconcile").note(f"spread to {len(members)} member clusters"))
        ctx.log.info("reconciled", name=ctx.name, members=len(members), ready=ready)
        return outcome


Controller, Admission, Conversion, Scheduler = capstan.export(FleetGreeter)
