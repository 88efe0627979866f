// capstan-guest/testing: unit tests of a controller under Node.js's test
// runner, without a component, a host or a cluster. Run the tests with
// `node --import capstan-guest/testing/register --test` (the hook resolves
// the WIT imports to the fake host here).
//
//   import { reconcile } from "capstan-guest/testing";
//   const done = reconcile(Greeter, greeting);
//   assert.deepEqual(done.status, { observedGeneration: 1 });
//
// `schedule` calls a scheduler's policy as the host does at one attempt:
//
//   import { node, schedule } from "capstan-guest/testing";
//   const nodes = [node("a1", { labels: { zone: "a" }, cpu: "2" }), node("b1", { labels: { zone: "b" } })];
//   assert.equal(schedule(ZoneSpread, pendingPod, nodes, { pods: boundPods }), "b1");
//
// HTTP calls (`http.request`) never leave the process: stub an origin on the
// FakeHost, and read what was sent in `host.requests`:
//
//   const host = new FakeHost([alert]).http("https://hooks.example.com", Response.ofJson({ id: 7 }));
//   const done = reconcile(Notifier, alert, { host });
//   assert.deepEqual(host.requests[0].json(), { name: "disk-full" });
//
// A fleet controller is given its members with `members`; the FakeHost holds
// the objects of each other cluster by name and answers `ctx.apiIn` reads
// from it (a cluster neither the request's own nor a member is denied), and
// the children the outcome places in members are in `memberChildren`:
//
//   const host = new FakeHost([spread], { clusters: { eu: [copyInEu] } });
//   const done = reconcile(Spreader, spread, { host, members: ["eu", "us"] });
//   assert.deepEqual(done.memberChildren.map((c) => c.cluster), ["eu", "us"]);
//   assert.deepEqual(done.childrenIn("us")[0].data, { message: "hello" });

import { Context, NodeInfo, Outcome, Unschedulable, parseQuantity, podRequests } from "../src/index.js";
import { fromBytes } from "../src/json.js";
import { FakeHost, plainEvent } from "./host.js";

export { FakeHost };
export { HttpError, Request, Response } from "../src/http.js";

/**
 * What a reconcile asked the host to do, as plain data.
 * @param {Outcome} outcome
 */
export function reconciled(outcome) {
  const wit = outcome.wit;
  const memberChildren = wit.memberChildren.map((c) => ({ cluster: c.cluster, object: fromBytes(c.object) }));
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
    /** The desired children in member clusters, `{cluster, object}`, in the order given. */
    memberChildren,
    /**
     * The desired children in the member cluster `cluster`.
     * @param {string} cluster
     */
    childrenIn: (cluster) => memberChildren.filter((c) => c.cluster === cluster).map((c) => c.object),
  };
}

/**
 * Calls the controller's callback for `event` (`added` → `add`, `modified`,
 * `deleted`, `resync` → `reconcile`) on a copy of `obj`, as the host would,
 * with `host` (default: a fresh FakeHost holding `obj`) answering its API
 * calls, `cluster` (default `"default"`) as `ctx.cluster` and `members` (a
 * fleet controller's member clusters engaged now; default none) as
 * `ctx.members`; the host's `cluster` and `members` are set to them, so
 * `apiIn` reads there and nowhere else. Returns the outcome as plain data
 * (see `reconciled`); what the callback throws (`Terminal`, `Transient`, a
 * bug) propagates, so `assert.throws` checks it.
 * @param {new () => any} ControllerClass
 * @param {object} obj
 * @param {{event?: string, host?: FakeHost, failedChildren?: any[], cluster?: string, members?: string[]}} [options]
 */
export function reconcile(
  ControllerClass,
  obj,
  { event = "added", host, failedChildren = [], cluster = "default", members = [] } = {},
) {
  const copy = structuredClone(obj);
  const meta = copy.metadata ?? {};
  const fake = host ?? new FakeHost([copy]);
  const engaged = typeof members === "string" ? [members] : [...members];
  const ctx = new Context(event, meta.namespace ?? undefined, meta.name ?? "", failedChildren, cluster, engaged);
  fake.cluster = cluster;
  fake.members = [...engaged];
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

/**
 * A `v1` Node as the host hands it to a scheduler: `allocatable` (and
 * `capacity`) `cpu`, `memory` and `pods`, a `Ready` condition, and
 * `spec.unschedulable` and `spec.taints` when given.
 * @param {string} name
 * @param {{labels?: Record<string, string>, cpu?: string, memory?: string, pods?: string,
 *   ready?: boolean, unschedulable?: boolean, taints?: any[]}} [options]
 */
export function node(
  name,
  { labels = {}, cpu = "4", memory = "16Gi", pods = "110", ready = true, unschedulable = false, taints = [] } = {},
) {
  /** @type {Record<string, any>} */
  const spec = {};
  if (unschedulable) spec.unschedulable = true;
  if (taints.length > 0) spec.taints = structuredClone(taints);
  const resources = { cpu, memory, pods };
  return {
    apiVersion: "v1",
    kind: "Node",
    metadata: { name, labels: { ...labels } },
    spec,
    status: {
      capacity: { ...resources },
      allocatable: { ...resources },
      conditions: [{ type: "Ready", status: ready ? "True" : "False" }],
    },
  };
}

/**
 * What the host hands a scheduler for these Nodes: one `NodeInfo` per
 * Node, in name order, with its allocatable resources (milli-units) and
 * what the `pods` bound to it (`spec.nodeName`) request, as the host's
 * account counts them.
 * @param {any[]} nodes
 * @param {any[]} [pods]
 * @returns {NodeInfo[]}
 */
export function nodeInfos(nodes, pods = []) {
  /** @type {Map<string, Record<string, number>>} */
  const requested = new Map();
  /** @type {Map<string, number>} */
  const counts = new Map();
  for (const pod of pods) {
    const at = pod?.spec?.nodeName;
    if (!at) continue;
    counts.set(at, (counts.get(at) ?? 0) + 1);
    const total = requested.get(at) ?? {};
    for (const [resource, amount] of Object.entries(podRequests(pod))) total[resource] = (total[resource] ?? 0) + amount;
    requested.set(at, total);
  }
  const name = (/** @type {any} */ n) => n?.metadata?.name ?? "";
  return [...nodes]
    .sort((a, b) => (name(a) < name(b) ? -1 : name(a) > name(b) ? 1 : 0))
    .map((n) => {
      /** @type {Record<string, number>} */
      const allocatable = {};
      for (const [resource, q] of Object.entries(n?.status?.allocatable ?? {})) {
        allocatable[resource] = parseQuantity(String(q)) ?? 0;
      }
      return new NodeInfo(name(n), structuredClone(n), allocatable, requested.get(name(n)) ?? {}, counts.get(name(n)) ?? 0);
    });
}

/**
 * Calls `SchedulerClass`'s `schedule` on a copy of `pod` with `nodeInfos`
 * of `nodes` and the bound `pods`, as the host does at one attempt, and
 * returns the Node it picked. A Pod that fits nowhere throws
 * `Unschedulable` (returned or thrown by the policy), so
 * `assert.throws(..., /reason/)` checks the reasons. The name is not
 * checked against the Nodes: the host reports a Node that does not exist
 * as a failed attempt; assert on it. `host` (default: an empty FakeHost)
 * answers the policy's imports while it runs: what it logs is in
 * `host.logs`. `cluster` (default `"default"`) is the scheduler's `cluster`.
 * @param {new () => any} SchedulerClass
 * @param {any} pod
 * @param {any[]} nodes
 * @param {{pods?: any[], host?: FakeHost, cluster?: string}} [options]
 * @returns {string}
 */
export function schedule(SchedulerClass, pod, nodes, { pods = [], host, cluster = "default" } = {}) {
  const infos = nodeInfos(nodes, pods);
  const fake = host ?? new FakeHost();
  fake.install();
  const scheduler = new SchedulerClass();
  scheduler.cluster = cluster;
  let picked;
  try {
    picked = scheduler.schedule(structuredClone(pod), infos);
  } finally {
    fake.uninstall();
  }
  if (picked instanceof Unschedulable) throw picked;
  if (typeof picked !== "string") throw new TypeError("schedule returned something other than a Node name");
  return picked;
}
