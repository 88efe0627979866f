// The greeter, in JavaScript: a `Greeting` custom resource whose controller
// owns a ConfigMap holding the message and a Deployment with
// `spec.replicas` replicas that prints it.
//
// The same controller as the Rust greeter (examples/greeter), with the same
// CRD, children, status, events, finalizer and errors, and tested by the
// same scenarios:
//
//   tests/build-polyglot-guests.sh
//   capstan test $CARGO_TARGET_DIR/guests/greeter-js.wasm examples/greeter/scenarios

import {
  Controller,
  Event,
  EventKind,
  Manifest,
  Outcome,
  Terminal,
  exportComponent,
  findCondition,
  setCondition,
} from "capstan-guest";

// Bundled into the component at build time; generated from the Rust greeter
// (see README.md).
import crd from "./greeting-crd.json" with { type: "json" };

/** The finalizer the greeter asks the host to manage. */
export const FINALIZER = "examples.capstan.dev/greeter-cleanup";

/** Name of the ConfigMap a Greeting owns. @param {string} greeting */
export const configmapName = (greeting) => `${greeting}-greeting`;

/** Name of the Deployment a Greeting owns. @param {string} greeting */
export const deploymentName = (greeting) => `${greeting}-greeter`;

/** The greeter controller. */
export class Greeter extends Controller {
  /** Greetings, their CRD, owned ConfigMaps and Deployments, a finalizer. */
  manifest() {
    return new Manifest("greeter")
      .primary("examples.capstan.dev/v1alpha1", "Greeting")
      .crd(crd)
      .owns("v1", "ConfigMap")
      .owns("apps/v1", "Deployment")
      .finalizer(FINALIZER)
      .resync(300)
      .maxConcurrency(4);
  }

  /**
   * The children carry ownerReferences and are garbage collected; only say
   * goodbye.
   * @param {import("capstan-guest").Context} ctx
   */
  delete(ctx) {
    ctx.log.info("greeting deleted", { name: ctx.name });
    return new Outcome().event(Event.normal("Deleted", "Cleanup").note("greeting removed, children follow"));
  }

  /**
   * Applies the ConfigMap and the Deployment and reports a Ready status; an
   * empty message is a terminal error.
   * @param {import("capstan-guest").Context} ctx
   * @param {any} greeting
   */
  reconcile(ctx, greeting) {
    const name = ctx.name;
    const spec = greeting.spec ?? {};
    const message = spec.message ?? "";
    const replicas = spec.replicas ?? 1;
    if (message.trim() === "") {
      throw new Terminal("spec.message must not be empty");
    }

    const labels = { "app.kubernetes.io/name": "greeter", "examples.capstan.dev/greeting": name };
    const configmap = {
      apiVersion: "v1",
      kind: "ConfigMap",
      metadata: { name: configmapName(name), labels },
      data: { message },
    };
    const deployment = greeterDeployment(name, replicas, labels);

    // The Deployment as the cluster has it, for the replicas it reports:
    // a span of its own in the reconcile's trace, the read inside it.
    const current = ctx.log.inSpan("observe-deployment", { deployment: deploymentName(name) }, () =>
      ctx.api("apps/v1", "Deployment", ctx.namespace).getOpt(deploymentName(name)),
    );
    const readyReplicas = current?.status?.replicas ?? 0;

    const generation = greeting.metadata?.generation;
    const status = {
      ...(generation !== undefined ? { observedGeneration: generation } : {}),
      message,
      replicas: readyReplicas,
      conditions: readyConditions(greeting.status ?? {}, generation),
    };

    const outcome = new Outcome().child(configmap).child(deployment).status(status);
    if (ctx.event === EventKind.ADDED) {
      outcome.event(Event.normal("Created", "Reconcile").note(`greeting ${name} set up`));
    } else if (ctx.event === EventKind.MODIFIED) {
      outcome.event(Event.normal("Updated", "Reconcile").note(`greeting ${name} updated`));
    }
    ctx.log.info("reconciled", { name, replicas });
    return outcome;
  }
}

/**
 * The conditions: `Ready=True`, keeping the transition time when it was
 * already true.
 * @param {any} previous
 * @param {number | undefined} generation
 */
function readyConditions(previous, generation) {
  const old = findCondition(previous.conditions, "Ready");
  return setCondition(old ? [old] : [], "Ready", "True", "Reconciled", "configmap and deployment are applied", generation);
}

/**
 * The Deployment that prints the message from the ConfigMap.
 * @param {string} name
 * @param {number} replicas
 * @param {Record<string, string>} labels
 */
function greeterDeployment(name, replicas, labels) {
  return {
    apiVersion: "apps/v1",
    kind: "Deployment",
    metadata: { name: deploymentName(name), labels },
    spec: {
      replicas,
      selector: { matchLabels: { "examples.capstan.dev/greeting": name } },
      template: {
        metadata: { labels },
        spec: {
          containers: [
            {
              name: "greeter",
              image: "busybox:1.37",
              command: ["sh", "-c", 'while true; do echo "$MESSAGE"; sleep 60; done'],
              env: [
                {
                  name: "MESSAGE",
                  valueFrom: { configMapKeyRef: { name: configmapName(name), key: "message" } },
                },
              ],
            },
          ],
        },
      },
    },
  };
}

/**
 * The component's exports, one per interface of the `operator` world: the
 * controller, and the roles it does not serve (they answer "not served").
 */
export const { controller, admission, conversion, scheduler } = exportComponent({ controller: Greeter });
