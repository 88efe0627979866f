// The greeter's webhooks, in JavaScript: a component that serves no
// reconcile loop, only admission and conversion for a `Greeting` of
// `webhooks.examples.capstan.dev`.
//
// The same component as the Rust examples/greeter-webhooks, checked by the
// same scenarios:
//
//   tests/build-polyglot-guests.sh
//   capstan test $CARGO_TARGET_DIR/guests/greeter-webhooks-js.wasm examples/greeter-webhooks/scenarios
//
// - a validating webhook: `spec.message` must not be empty, `spec.replicas`
//   must be between 0 and 10, and `spec.message` cannot change on update;
// - a defaulting (mutating) webhook: `spec.replicas` defaults to 1;
// - conversion between `v1alpha1` (`spec.message`, `spec.replicas`) and
//   `v1` (`spec.greeting.text`, `spec.greeting.replicas`).
//
// For the host's tests, the annotation `examples.capstan.dev/trap: "true"`
// makes the validating webhook throw (the call fails and its failure
// policy, Fail, refuses the Greeting), `examples.capstan.dev/loop: "true"`
// makes it loop until its deadline, and
// `examples.capstan.dev/trap-lenient: "true"` makes a second validating
// webhook, whose failure policy is Ignore, throw.

import { Admission, Conversion, Manifest, Operation, Verdict, Webhook, between, exportComponent } from "capstan-guest";

// Bundled at build time: the Rust example's CRD with both versions.
import crd from "./greeting-crd.json" with { type: "json" };

const GROUP = "webhooks.examples.capstan.dev";
const OLD = `${GROUP}/v1alpha1`;
const NEW = `${GROUP}/v1`;
const VALIDATE = `validate.greetings.${GROUP}`;
const LENIENT = `lenient.greetings.${GROUP}`;
const DEFAULT = `default.greetings.${GROUP}`;
const TRAP = "examples.capstan.dev/trap";
const LOOP = "examples.capstan.dev/loop";
const TRAP_LENIENT = "examples.capstan.dev/trap-lenient";
const MAX_REPLICAS = 10;

/** @param {any} obj @param {string} key */
const annotated = (obj, key) => obj?.metadata?.annotations?.[key] === "true";

/** Validating and defaulting Greetings. */
export class GreetingWebhooks extends Admission {
  /** Two validating webhooks (one lenient), a defaulting one, and conversion. */
  manifest() {
    const createUpdate = [Operation.CREATE, Operation.UPDATE];
    return new Manifest("greeter-webhooks")
      .primary(OLD, "Greeting")
      .crd(crd)
      .webhook(Webhook.validating(VALIDATE).kind(OLD, "Greeting").operations(...createUpdate).timeoutSeconds(5))
      .webhook(Webhook.validating(LENIENT).kind(OLD, "Greeting").ignoreFailures().timeoutSeconds(5))
      .webhook(Webhook.mutating(DEFAULT).kind(OLD, "Greeting").operations(...createUpdate).timeoutSeconds(5))
      .converts(OLD, "Greeting");
  }

  /** @param {import("capstan-guest").AdmissionRequest} request */
  validate(request) {
    const greeting = request.object;
    if (greeting === undefined) return Verdict.allow();
    if (request.webhook === LENIENT) {
      if (annotated(greeting, TRAP_LENIENT)) throw new Error(`asked to trap by the ${TRAP_LENIENT} annotation`);
      return Verdict.allow();
    }
    if (annotated(greeting, TRAP)) throw new Error(`asked to trap by the ${TRAP} annotation`);
    if (annotated(greeting, LOOP)) {
      for (;;) {
        // until the host's deadline
      }
    }
    const spec = greeting.spec ?? {};
    if (String(spec.message ?? "").trim() === "") return Verdict.deny("spec.message must not be empty").code(422);
    const replicas = spec.replicas;
    if (replicas !== undefined && replicas !== null && !(replicas >= 0 && replicas <= MAX_REPLICAS)) {
      return Verdict.deny(`spec.replicas must be between 0 and ${MAX_REPLICAS}, not ${replicas}`).code(422);
    }
    const old = request.oldObject;
    if (old !== undefined && old.spec?.message !== spec.message) {
      return Verdict.deny("spec.message cannot change").code(422);
    }
    return Verdict.allow();
  }

  /** @param {import("capstan-guest").AdmissionRequest} request @param {any} obj */
  mutate(request, obj) {
    obj.spec ??= {};
    if (obj.spec.replicas === undefined || obj.spec.replicas === null) {
      obj.spec.replicas = 1;
      return Verdict.allow().warn("spec.replicas defaulted to 1");
    }
    return Verdict.allow();
  }
}

/** `v1alpha1` to `v1`. @param {any} obj */
function up(obj) {
  const spec = obj.spec ?? {};
  const text = { text: spec.message ?? "" };
  if (spec.replicas !== undefined && spec.replicas !== null) text.replicas = spec.replicas;
  obj.spec = { greeting: text };
  return obj;
}

/** `v1` to `v1alpha1`. @param {any} obj */
function down(obj) {
  const text = obj.spec?.greeting ?? {};
  const spec = { message: text.text ?? "" };
  if (text.replicas !== undefined && text.replicas !== null) spec.replicas = text.replicas;
  obj.spec = spec;
  return obj;
}

/** Conversion between `v1alpha1` and `v1`. */
export class Versions extends Conversion {
  /** @param {any} obj @param {string} desiredApiVersion */
  convert(obj, desiredApiVersion) {
    return between(obj, desiredApiVersion, up, down, { old: OLD, new: NEW });
  }
}

export const { controller, admission, conversion, scheduler } = exportComponent({
  admission: GreetingWebhooks,
  conversion: Versions,
});
