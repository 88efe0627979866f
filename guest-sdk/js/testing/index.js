// capstan-guest/testing: unit tests of a controller under Node.js's test
// runner, without a component, a host or a cluster. Run the tests with
// `node --import capstan-guest/testing/register --test` (the hook resolves
// the WIT imports to the fake host here).
//
//   import { reconcile } from "capstan-guest/testing";
//   const done = reconcile(Greeter, greeting);
//   assert.deepEqual(done.status, { observedGeneration: 1 });

import { Context, Outcome } from "../src/index.js";
import { fromBytes } from "../src/json.js";
import { FakeHost, plainEvent } from "./host.js";

export { FakeHost };

/**
 * What a reconcile asked the host to do, as plain data.
 * @param {Outcome} outcome
 */
export function reconciled(outcome) {
  const wit = outcome.wit;
  return {
    /** The desired children, as the controller wrote them. */
    children: wit.children.map(fromBytes),
    /** The desired status, or `undefined`. */
    status: wit.status === undefined ? undefined : fromBytes(wit.status),
    /** The outcome's Events (`type`, `reason`, `action`, `note`). */
    events: wit.events.map(plainEvent),
    /** Seconds until the host reconciles again unasked, or `undefined`. */
    requeueAfter: wit.requeueAfterMs === undefined ? undefined : Number(wit.requeueAfterMs) / 1000,
    /** Whether children the outcome does not list are kept. */
    keepChildren: outcome.keepsChildren,
  };
}

/**
 * Calls the controller's callback for `event` (`added` → `add`, `modified`,
 * `deleted`, `resync` → `reconcile`) on a copy of `obj`, as the host would,
 * with `host` (default: a fresh FakeHost holding `obj`) answering its API
 * calls. Returns the outcome as plain data (see `reconciled`); what the
 * callback throws (`Terminal`, `Transient`, a bug) propagates, so
 * `assert.throws` checks it.
 * @param {new () => any} ControllerClass
 * @param {object} obj
 * @param {{event?: string, host?: FakeHost, failedChildren?: any[]}} [options]
 */
export function reconcile(ControllerClass, obj, { event = "added", host, failedChildren = [] } = {}) {
  const copy = structuredClone(obj);
  const meta = copy.metadata ?? {};
  const fake = host ?? new FakeHost([copy]);
  const ctx = new Context(event, meta.namespace ?? undefined, meta.name ?? "", failedChildren);
  const controller = new ControllerClass();
  const callback = { added: "add", modified: "modify", deleted: "delete" }[event] ?? "reconcile";
  fake.install();
  let outcome;
  try {
    outcome = controller[callback](ctx, copy);
  } finally {
    fake.uninstall();
  }
  if (outcome === undefined || outcome === null) return reconciled(new Outcome());
  if (!(outcome instanceof Outcome)) throw new TypeError("reconcile returned something other than an Outcome");
  return reconciled(outcome);
}
