"""The greeter, in Python: a ``Greeting`` custom resource whose controller
owns a ConfigMap holding the message and a Deployment with
``spec.replicas`` replicas that prints it.

The same controller as the Rust greeter (``examples/greeter``), with the
same CRD, children, status, events, finalizer and errors, and tested by
the same scenarios::

    tests/build-polyglot-guests.sh
    capstan test $CARGO_TARGET_DIR/guests/greeter-python.wasm examples/greeter/scenarios
"""

from __future__ import annotations

import json
import pathlib
from typing import Any, Dict, List, Optional

import capstan_guest as capstan

FINALIZER = "examples.capstan.dev/greeter-cleanup"
"""The finalizer the greeter asks the host to manage."""

# componentize-py runs this module at build time and snapshots the result,
# so the CRD file is read once, while building, and is not needed at run
# time. It is generated from the Rust greeter (see README.md).
CRD: Dict[str, Any] = json.loads((pathlib.Path(__file__).parent / "greeting-crd.json").read_text())


def configmap_name(greeting: str) -> str:
    """Name of the ConfigMap a Greeting owns."""
    return f"{greeting}-greeting"


def deployment_name(greeting: str) -> str:
    """Name of the Deployment a Greeting owns."""
    return f"{greeting}-greeter"


class Greeter(capstan.Controller):
    """The greeter controller."""

    def manifest(self) -> capstan.Manifest:
        """Greetings, their CRD, owned ConfigMaps and Deployments, a
        finalizer, a 5-minute resync and up to 4 reconciles at once."""
        return (
            capstan.Manifest("greeter")
            .primary("examples.capstan.dev/v1alpha1", "Greeting")
            .crd(CRD)
            .owns("v1", "ConfigMap")
            .owns("apps/v1", "Deployment")
            .finalizer(FINALIZER)
            .resync(300)
            .max_concurrency(4)
        )

    def delete(self, ctx: capstan.Context, greeting: Dict[str, Any]) -> capstan.Outcome:
        """The children carry ownerReferences and are garbage collected;
        only say goodbye."""
        ctx.log.info("greeting deleted", name=ctx.name)
        return capstan.Outcome().event(
            capstan.Event.normal("Deleted", "Cleanup").note("greeting removed, children follow")
        )

    def reconcile(self, ctx: capstan.Context, greeting: Dict[str, Any]) -> capstan.Outcome:
        """Applies the ConfigMap and the Deployment and reports a Ready
        status; an empty message is a terminal error."""
        name = ctx.name
        spec = greeting.get("spec") or {}
        message: str = spec.get("message", "")
        replicas: int = spec.get("replicas", 1)
        if not message.strip():
            raise capstan.Terminal("spec.message must not be empty")

        labels = {"app.kubernetes.io/name": "greeter", "examples.capstan.dev/greeting": name}
        configmap = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": configmap_name(name), "labels": labels},
            "data": {"message": message},
        }
        deployment = greeter_deployment(name, replicas, labels)

        # The Deployment as the cluster has it, for the replicas it reports:
        # a span of its own in the reconcile's trace, the read inside it.
        with ctx.span("observe-deployment", deployment=deployment_name(name)):
            current = ctx.api("apps/v1", "Deployment", ctx.namespace).get_opt(deployment_name(name))
        ready_replicas = ((current or {}).get("status") or {}).get("replicas", 0)

        generation: Optional[int] = (greeting.get("metadata") or {}).get("generation")
        previous = greeting.get("status") or {}
        status: Dict[str, Any] = {}
        if generation is not None:
            status["observedGeneration"] = generation
        status.update(
            message=message,
            replicas=ready_replicas,
            conditions=ready_conditions(previous, generation),
        )

        outcome = capstan.Outcome().child(configmap).child(deployment).status(status)
        if ctx.event == capstan.EventKind.ADDED:
            outcome.event(capstan.Event.normal("Created", "Reconcile").note(f"greeting {name} set up"))
        elif ctx.event == capstan.EventKind.MODIFIED:
            outcome.event(capstan.Event.normal("Updated", "Reconcile").note(f"greeting {name} updated"))
        ctx.log.info("reconciled", name=name, replicas=replicas)
        return outcome


def ready_conditions(previous: Dict[str, Any], generation: Optional[int]) -> List[Dict[str, Any]]:
    """The conditions: ``Ready=True``, keeping the transition time when it
    was already true."""
    old = capstan.find_condition(previous.get("conditions"), "Ready")
    return capstan.set_condition(
        [old] if old else [],
        "Ready",
        "True",
        "Reconciled",
        "configmap and deployment are applied",
        observed_generation=generation,
    )


def greeter_deployment(name: str, replicas: int, labels: Dict[str, str]) -> Dict[str, Any]:
    """The Deployment that prints the message from the ConfigMap."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": deployment_name(name), "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"examples.capstan.dev/greeting": name}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {
                            "name": "greeter",
                            "image": "busybox:1.37",
                            "command": ["sh", "-c", 'while true; do echo "$MESSAGE"; sleep 60; done'],
                            "env": [
                                {
                                    "name": "MESSAGE",
                                    "valueFrom": {
                                        "configMapKeyRef": {"name": configmap_name(name), "key": "message"}
                                    },
                                }
                            ],
                        }
                    ]
                },
            },
        },
    }


Controller, Admission, Conversion, Scheduler = capstan.export(Greeter)
