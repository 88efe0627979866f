"""The zone scheduler, in Python: a custom scheduler, ``zone-spread``.
For each pending Pod whose ``spec.schedulerName`` is ``zone-spread``:

1. it keeps the Nodes that can take the Pod: not cordoned
   (``spec.unschedulable``), ``Ready``, with no ``NoSchedule`` or
   ``NoExecute`` taint the Pod does not tolerate, matching the Pod's
   ``spec.nodeSelector``, with room for its CPU and memory requests (and
   any other resource it requests) and for one more Pod. As with
   kube-scheduler, a Pod that tolerates the taint a cordon puts on a Node
   (``node.kubernetes.io/unschedulable:NoSchedule``) may go to a cordoned
   Node, and one that tolerates the taint a not-Ready Node gets
   (``node.kubernetes.io/not-ready``, or ``unreachable`` when its ``Ready``
   status is ``Unknown`` or missing) to a Node that is not Ready;
2. among the zones (label ``topology.kubernetes.io/zone``) of those Nodes,
   it picks the zone with the fewest Pods bound there, then in it the Node
   with the most free CPU; ties go to the first name.

When no Node can take the Pod, it answers why the way kube-scheduler does:
``0/3 nodes are available: 2 Insufficient cpu, 1 node(s) didn't match
Pod's node selector.`` (a tainted Node: ``node(s) had untolerated
taint(s)``).

The same policy as the Rust example (``examples/zone-scheduler``), tested
by the same scenarios::

    tests/build-polyglot-guests.sh
    capstan test $CARGO_TARGET_DIR/guests/zone-scheduler-python.wasm examples/zone-scheduler/scenarios
"""

from __future__ import annotations

from typing import Any, Dict, List

import capstan_guest as capstan

SCHEDULER_NAME = "zone-spread"
"""The scheduler name Pods ask for in ``spec.schedulerName``."""

ZONE_LABEL = "topology.kubernetes.io/zone"
"""The label that names a Node's zone."""


def _state_taint(key: str) -> Dict[str, str]:
    """The taint the node lifecycle controller puts on a Node in this state."""
    return {"key": f"node.kubernetes.io/{key}", "effect": "NoSchedule"}


def misfits(node: capstan.NodeInfo, pod: Dict[str, Any], needed: Dict[str, int]) -> List[str]:
    """Why one Node cannot take the Pod (kube-scheduler's wording)."""
    if node.unschedulable() and not capstan.tolerates(pod, _state_taint("unschedulable")):
        return ["node(s) were unschedulable"]
    if not node.ready():
        key = "not-ready" if node.condition("Ready") == "False" else "unreachable"
        if not capstan.tolerates(pod, _state_taint(key)):
            return ["node(s) were not ready"]
    if node.untolerated_taint(pod) is not None:
        return ["node(s) had untolerated taint(s)"]
    selector = (pod.get("spec") or {}).get("nodeSelector") or {}
    if any(node.label(key) != value for key, value in selector.items()):
        return ["node(s) didn't match Pod's node selector"]
    return [
        "Too many pods" if name == "pods" else f"Insufficient {name}"
        for name, amount in sorted(needed.items())
        if amount > 0 and node.free(name) < amount
    ]


def explain(nodes: int, counts: Dict[str, int]) -> str:
    """``0/3 nodes are available: 2 Insufficient cpu, 1 ...``: reasons by
    count, most frequent first, then by name."""
    reasons = sorted(counts.items(), key=lambda rc: (-rc[1], rc[0]))
    if not reasons:
        return f"0/{nodes} nodes are available."
    return f"0/{nodes} nodes are available: " + ", ".join(f"{n} {r}" for r, n in reasons) + "."


class ZoneSpread(capstan.Scheduler):
    """The policy."""

    def manifest(self) -> capstan.Manifest:
        return capstan.Manifest("zone-scheduler").scheduler(SCHEDULER_NAME)

    def schedule(self, pod: Dict[str, Any], nodes: List[capstan.NodeInfo]) -> str:
        needed = capstan.pod_requests(pod)
        counts: Dict[str, int] = {}
        fitting = []
        for node in nodes:
            why = misfits(node, pod, needed)
            if not why:
                fitting.append(node)
            for reason in why:
                counts[reason] = counts.get(reason, 0) + 1
        if not fitting:
            raise capstan.Unschedulable(explain(len(nodes), counts))
        # Pods per zone, over every Node of the zone (a Node without the
        # label is in the zone "").
        pods_in: Dict[str, int] = {}
        for node in nodes:
            zone = node.label(ZONE_LABEL) or ""
            pods_in[zone] = pods_in.get(zone, 0) + node.pods

        def rank(node: capstan.NodeInfo):
            zone = node.label(ZONE_LABEL) or ""
            return (pods_in.get(zone, 0), zone, -node.free("cpu"), node.name)

        return min(fitting, key=rank).name


Controller, Admission, Conversion, Scheduler = capstan.export(scheduler=ZoneSpread)
