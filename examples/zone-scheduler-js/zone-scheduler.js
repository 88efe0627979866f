// The zone scheduler, in JavaScript: a custom scheduler, `zone-spread`. For
// each pending Pod whose `spec.schedulerName` is `zone-spread`:
//
// 1. it keeps the Nodes that can take the Pod: not cordoned
//    (`spec.unschedulable`), `Ready`, with no `NoSchedule` or `NoExecute`
//    taint the Pod does not tolerate, matching the Pod's `spec.nodeSelector`,
//    with room for its CPU and memory requests (and any other resource it
//    requests) and for one more Pod. As with kube-scheduler, a Pod that
//    tolerates the taint a cordon puts on a Node
//    (`node.kubernetes.io/unschedulable:NoSchedule`) may go to a cordoned
//    Node, and one that tolerates the taint a not-Ready Node gets
//    (`node.kubernetes.io/not-ready`, or `unreachable` when its `Ready`
//    status is `Unknown` or missing) to a Node that is not Ready;
// 2. among the zones (label `topology.kubernetes.io/zone`) of those Nodes,
//    it picks the zone with the fewest Pods bound there, then in it the Node
//    with the most free CPU; ties go to the first name.
//
// When no Node can take the Pod, it answers why the way kube-scheduler does:
// `0/3 nodes are available: 2 Insufficient cpu, 1 node(s) didn't match Pod's
// node selector.` (a tainted Node: `node(s) had untolerated taint(s)`).
//
// The same policy as the Rust example (examples/zone-scheduler), tested by
// the same scenarios:
//
//   tests/build-polyglot-guests.sh
//   capstan test $CARGO_TARGET_DIR/guests/zone-scheduler-js.wasm examples/zone-scheduler/scenarios

import { Manifest, Scheduler, Unschedulable, exportComponent, podRequests, tolerates } from "capstan-guest";

/** The scheduler name Pods ask for in `spec.schedulerName`. */
export const SCHEDULER_NAME = "zone-spread";

/** The label that names a Node's zone. */
export const ZONE_LABEL = "topology.kubernetes.io/zone";

/**
 * The taint the node lifecycle controller puts on a Node in this state.
 * @param {string} key
 */
const stateTaint = (key) => ({ key: `node.kubernetes.io/${key}`, effect: "NoSchedule" });

/**
 * Why one Node cannot take the Pod (kube-scheduler's wording).
 * @param {import("capstan-guest").NodeInfo} node
 * @param {any} pod
 * @param {Record<string, number>} needed
 * @returns {string[]}
 */
function misfits(node, pod, needed) {
  if (node.unschedulable() && !tolerates(pod, stateTaint("unschedulable"))) return ["node(s) were unschedulable"];
  if (!node.ready()) {
    const key = node.condition("Ready") === "False" ? "not-ready" : "unreachable";
    if (!tolerates(pod, stateTaint(key))) return ["node(s) were not ready"];
  }
  if (node.untoleratedTaint(pod) !== undefined) return ["node(s) had untolerated taint(s)"];
  const selector = pod.spec?.nodeSelector ?? {};
  if (Object.entries(selector).some(([key, value]) => node.label(key) !== value)) {
    return ["node(s) didn't match Pod's node selector"];
  }
  return Object.keys(needed)
    .sort()
    .filter((name) => needed[name] > 0 && node.free(name) < needed[name])
    .map((name) => (name === "pods" ? "Too many pods" : `Insufficient ${name}`));
}

/**
 * `0/3 nodes are available: 2 Insufficient cpu, 1 …`: reasons by count, most
 * frequent first, then by name.
 * @param {number} nodes
 * @param {Map<string, number>} counts
 */
function explain(nodes, counts) {
  const reasons = [...counts].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  if (reasons.length === 0) return `0/${nodes} nodes are available.`;
  return `0/${nodes} nodes are available: ${reasons.map(([r, n]) => `${n} ${r}`).join(", ")}.`;
}

/** Compares two keys of numbers and strings, element by element. */
function compare(a, b) {
  for (let i = 0; i < a.length; i++) {
    if (a[i] < b[i]) return -1;
    if (a[i] > b[i]) return 1;
  }
  return 0;
}

/** The policy. */
class ZoneSpread extends Scheduler {
  manifest() {
    return new Manifest("zone-scheduler").scheduler(SCHEDULER_NAME);
  }

  schedule(pod, nodes) {
    const needed = podRequests(pod);
    const counts = new Map();
    const fitting = [];
    for (const node of nodes) {
      const why = misfits(node, pod, needed);
      if (why.length === 0) fitting.push(node);
      for (const reason of why) counts.set(reason, (counts.get(reason) ?? 0) + 1);
    }
    if (fitting.length === 0) throw new Unschedulable(explain(nodes.length, counts));
    // Pods per zone, over every Node of the zone (a Node without the label
    // is in the zone "").
    const podsIn = new Map();
    for (const node of nodes) {
      const zone = node.label(ZONE_LABEL) ?? "";
      podsIn.set(zone, (podsIn.get(zone) ?? 0) + node.pods);
    }
    const rank = (node) => {
      const zone = node.label(ZONE_LABEL) ?? "";
      return [podsIn.get(zone) ?? 0, zone, -node.free("cpu"), node.name];
    };
    return fitting.reduce((best, node) => (compare(rank(node), rank(best)) < 0 ? node : best)).name;
  }
}

export const { controller, admission, conversion, scheduler } = exportComponent({ scheduler: ZoneSpread });
