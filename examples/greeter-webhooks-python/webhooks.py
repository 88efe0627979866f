"""The greeter's webhooks, in Python: a component that serves no
reconcile loop, only admission and conversion for a ``Greeting`` of
``webhooks.examples.capstan.dev``.

The same component as the Rust ``examples/greeter-webhooks``, checked by
the same scenarios::

    tests/build-polyglot-guests.sh
    capstan test $CARGO_TARGET_DIR/guests/greeter-webhooks-python.wasm examples/greeter-webhooks/scenarios

- a **validating** webhook: ``spec.message`` must not be empty,
  ``spec.replicas`` must be between 0 and 10, and ``spec.message`` cannot
  change on update;
- a **defaulting** (mutating) webhook: ``spec.replicas`` defaults to 1;
- **conversion** between ``v1alpha1`` (``spec.message``, ``spec.replicas``)
  and ``v1`` (``spec.greeting.text``, ``spec.greeting.replicas``).

For the host's tests, the annotation ``examples.capstan.dev/trap: "true"``
makes the validating webhook raise (the call fails and its failure policy,
``Fail``, refuses the Greeting), ``examples.capstan.dev/loop: "true"``
makes it loop until its deadline, and
``examples.capstan.dev/trap-lenient: "true"`` makes a second validating
webhook, whose failure policy is ``Ignore``, raise.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any, Dict

import capstan_guest as capstan

GROUP = "webhooks.examples.capstan.dev"
OLD = f"{GROUP}/v1alpha1"
NEW = f"{GROUP}/v1"
VALIDATE = f"validate.greetings.{GROUP}"
LENIENT = f"lenient.greetings.{GROUP}"
DEFAULT = f"default.greetings.{GROUP}"
TRAP = "examples.capstan.dev/trap"
LOOP = "examples.capstan.dev/loop"
TRAP_LENIENT = "examples.capstan.dev/trap-lenient"
MAX_REPLICAS = 10

# Read at build time (componentize-py snapshots the module): the Rust
# example's CRD with both versions.
CRD: Dict[str, Any] = json.loads((pathlib.Path(__file__).parent / "greeting-crd.json").read_text())

_CREATE_UPDATE = (capstan.Operation.CREATE, capstan.Operation.UPDATE)


def _annotation(obj: Dict[str, Any], key: str) -> bool:
    return obj.get("metadata", {}).get("annotations", {}).get(key) == "true"


class GreetingWebhooks(capstan.Admission):
    """Validating and defaulting Greetings."""

    def manifest(self) -> capstan.Manifest:
        """Two validating webhooks (one lenient), a defaulting one, and
        conversion between the two versions of the CRD."""
        return (
            capstan.Manifest("greeter-webhooks")
            .primary(OLD, "Greeting")
            .crd(CRD)
            .webhook(capstan.Webhook.validating(VALIDATE).kind(OLD, "Greeting").operations(*_CREATE_UPDATE).timeout_seconds(5))
            .webhook(capstan.Webhook.validating(LENIENT).kind(OLD, "Greeting").ignore_failures().timeout_seconds(5))
            .webhook(capstan.Webhook.mutating(DEFAULT).kind(OLD, "Greeting").operations(*_CREATE_UPDATE).timeout_seconds(5))
            .converts(OLD, "Greeting")
        )

    def validate(self, request: capstan.AdmissionRequest) -> capstan.Verdict:
        greeting = request.object
        if greeting is None:
            return capstan.Verdict.allow()
        if request.webhook == LENIENT:
            if _annotation(greeting, TRAP_LENIENT):
                raise RuntimeError(f"asked to trap by the {TRAP_LENIENT} annotation")
            return capstan.Verdict.allow()
        if _annotation(greeting, TRAP):
            raise RuntimeError(f"asked to trap by the {TRAP} annotation")
        if _annotation(greeting, LOOP):
            while True:
                pass
        spec = greeting.get("spec", {})
        if not str(spec.get("message", "")).strip():
            return capstan.Verdict.deny("spec.message must not be empty").code(422)
        replicas = spec.get("replicas")
        if replicas is not None and not 0 <= replicas <= MAX_REPLICAS:
            return capstan.Verdict.deny(f"spec.replicas must be between 0 and {MAX_REPLICAS}, not {replicas}").code(422)
        old = request.old_object
        if old is not None and old.get("spec", {}).get("message") != spec.get("message"):
            return capstan.Verdict.deny("spec.message cannot change").code(422)
        return capstan.Verdict.allow()

    def mutate(self, request: capstan.AdmissionRequest, obj: Dict[str, Any]) -> capstan.Verdict:
        spec = obj.setdefault("spec", {})
        if spec.get("replicas") is None:
            spec["replicas"] = 1
            return capstan.Verdict.allow().warn("spec.replicas defaulted to 1")
        return capstan.Verdict.allow()


def up(obj: Dict[str, Any]) -> Dict[str, Any]:
    """``v1alpha1`` to ``v1``."""
    spec = obj.get("spec", {})
    text: Dict[str, Any] = {"text": spec.get("message", "")}
    if spec.get("replicas") is not None:
        text["replicas"] = spec["replicas"]
    obj["spec"] = {"greeting": text}
    return obj


def down(obj: Dict[str, Any]) -> Dict[str, Any]:
    """``v1`` to ``v1alpha1``."""
    text = obj.get("spec", {}).get("greeting", {})
    spec: Dict[str, Any] = {"message": text.get("text", "")}
    if text.get("replicas") is not None:
        spec["replicas"] = text["replicas"]
    obj["spec"] = spec
    return obj


class Versions(capstan.Conversion):
    """Conversion between ``v1alpha1`` and ``v1``."""

    def convert(self, obj: Dict[str, Any], desired_api_version: str) -> Dict[str, Any]:
        return capstan.between(obj, desired_api_version, up, down, old=OLD, new=NEW)


Controller, Admission, Conversion, Scheduler = capstan.export(admission=GreetingWebhooks, conversion=Versions)
