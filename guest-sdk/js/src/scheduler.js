// Custom schedulers: pick the Node a pending Pod runs on.
//
// Declare the scheduler name with `Manifest.scheduler`, subclass
// `Scheduler`, and export it with `exportComponent({ scheduler: X })`. The
// host watches the Pods that name the scheduler in `spec.schedulerName` and
// have no Node, keeps an account of every Node, calls `schedule` once per
// attempt, binds the Pod, records the Events and retries with backoff.

import { Component } from "./component.js";
import { fromBytes } from "./json.js";
import { log } from "./log.js";

// Where a NodeInfo keeps its Node: decoded, or the host's JSON until first read.
const NODE = Symbol("node");
const JSON_BYTES = Symbol("node json");
// What the helpers read, taken from the Node once (a NodeInfo is kept
// between decisions and asked at every one).
const LABELS = Symbol("labels");
const CONDITIONS = Symbol("conditions");

/**
 * A candidate Node and what the host knows of it. Resource amounts are in
 * milli-units (CPU in millicores, memory in thousandths of a byte), by name.
 *
 * The Node itself (`node`) is decoded from the JSON the host hands over on
 * first use, and only then. An instance keeps the Nodes between attempts
 * and the host hands over only those that changed, so a Node is decoded
 * at most once per change; treat a `NodeInfo` as read-only. `name`,
 * `allocatable`, `requested`, `pods`, `free` and `fits` need no decoding;
 * `label`, `labels`, `unschedulable`, `taints`, `condition`, `ready` and
 * `untoleratedTaint` read the decoded Node.
 *
 * ```js
 * const node = new NodeInfo("n1", { metadata: { labels: { zone: "a" } },
 *   status: { conditions: [{ type: "Ready", status: "True" }] } }, { cpu: 2000 }, { cpu: 500 });
 * node.label("zone"); // "a"
 * node.ready() && !node.unschedulable(); // true
 * node.free("cpu"); // 1500
 * ```
 */
export class NodeInfo {
  /**
   * @param {string} name
   * @param {any} node
   * @param {Record<string, number>} allocatable
   * @param {Record<string, number>} requested
   * @param {number} [pods]
   */
  constructor(name, node, allocatable, requested, pods = 0) {
    /** The Node's name. */
    this.name = name;
    /** @type {any} */
    this[NODE] = node;
    /** @type {Uint8Array | undefined} */
    this[JSON_BYTES] = undefined;
    /** @type {Record<string, string> | undefined} */
    this[LABELS] = undefined;
    /** @type {Map<string, string> | undefined} */
    this[CONDITIONS] = undefined;
    /** Allocatable resources. */
    this.allocatable = allocatable;
    /** Requested by the Pods bound there (assumed ones included). */
    this.requested = requested;
    /** How many Pods are bound there. */
    this.pods = pods;
  }

  /**
   * The `v1` Node as the host hands it over: `metadata` (name, uid,
   * resourceVersion, generation, labels, annotations, creationTimestamp),
   * `spec`, and `status`'s `capacity`, `allocatable` and `conditions`.
   * Decoded on first use; throws `Unschedulable` (`Node <name> does not
   * decode: …`) if the host's JSON does not decode, which ends the attempt
   * with that reason unless the policy catches it.
   * @returns {any}
   */
  get node() {
    const json = this[JSON_BYTES];
    if (json !== undefined) {
      try {
        this[NODE] = fromBytes(json);
      } catch (e) {
        throw new Unschedulable(`Node ${this.name} does not decode: ${e instanceof Error ? e.message : e}`);
      }
      this[JSON_BYTES] = undefined;
    }
    return this[NODE];
  }

  set node(value) {
    this[NODE] = value;
    this[JSON_BYTES] = undefined;
    this[LABELS] = undefined;
    this[CONDITIONS] = undefined;
  }

  /**
   * What is left of `resource` (allocatable minus requested); a resource
   * the Node does not list has none.
   * @param {string} resource
   */
  free(resource) {
    return (this.allocatable[resource] ?? 0) - (this.requested[resource] ?? 0);
  }

  /** True if every resource `needed` lists fits in what is free. @param {Record<string, number>} needed */
  fits(needed) {
    return Object.entries(needed).every(([name, amount]) => amount <= 0 || this.free(name) >= amount);
  }

  /** The Node's labels (`metadata.labels`; empty if it has none). @returns {Record<string, string>} */
  labels() {
    let labels = this[LABELS];
    if (labels === undefined) {
      labels = this.node?.metadata?.labels ?? {};
      this[LABELS] = labels;
    }
    return labels;
  }

  /** The value of a label of the Node. @param {string} key @returns {string | undefined} */
  label(key) {
    return (this[LABELS] ?? this.labels())[key];
  }

  /** True if the Node is cordoned (`spec.unschedulable`). @returns {boolean} */
  unschedulable() {
    return Boolean(this.node?.spec?.unschedulable);
  }

  /**
   * The Node's taints (`spec.taints`: `{ key, value, effect }`; empty if it
   * has none).
   * @returns {{key: string, value?: string, effect: string, timeAdded?: string}[]}
   */
  taints() {
    return this.node?.spec?.taints ?? [];
  }

  /**
   * The status (`True`, `False`, `Unknown`) of the Node's condition of type
   * `type` (`Ready`, `MemoryPressure`, …), if it has one.
   * @param {string} type
   * @returns {string | undefined}
   */
  condition(type) {
    let conditions = this[CONDITIONS];
    if (conditions === undefined) {
      conditions = new Map();
      for (const c of this.node?.status?.conditions ?? []) {
        if (c && !conditions.has(c.type)) conditions.set(c.type, c.status);
      }
      this[CONDITIONS] = conditions;
    }
    return conditions.get(type);
  }

  /** True if the Node's `Ready` condition is `True`. @returns {boolean} */
  ready() {
    return this.condition("Ready") === "True";
  }

  /**
   * The first of the Node's `NoSchedule` and `NoExecute` taints that `pod`
   * does not tolerate (see `tolerates`), if any: the taint that keeps the
   * Pod off this Node, as kube-scheduler's `TaintToleration` filter finds
   * it. `PreferNoSchedule` taints are a preference, not a filter, and never
   * returned.
   *
   * ```js
   * const node = new NodeInfo("gpu1", { spec: { taints: [{ key: "dedicated", value: "gpu", effect: "NoSchedule" }] } }, {}, {});
   * node.untoleratedTaint({ spec: {} }).key; // "dedicated"
   * node.untoleratedTaint({ spec: { tolerations: [{ key: "dedicated", operator: "Equal", value: "gpu" }] } }); // undefined
   * ```
   * @param {any} pod
   * @returns {{key: string, value?: string, effect: string, timeAdded?: string} | undefined}
   */
  untoleratedTaint(pod) {
    return this.taints().find((t) => (t?.effect === "NoSchedule" || t?.effect === "NoExecute") && !tolerates(pod, t));
  }
}

/**
 * Why a Pod fits no Node now: throw it (or return it) from `schedule`. The
 * host joins the reasons into the `FailedScheduling` Event and the
 * `PodScheduled` condition, and tries again later:
 *
 * ```js
 * throw new Unschedulable("2 nodes have too little cpu", "1 node is cordoned");
 * ```
 */
export class Unschedulable extends Error {
  /** @param {...string} reasons */
  constructor(...reasons) {
    super(reasons.join("; "));
    this.name = "Unschedulable";
    /** One reason per kind of misfit. */
    this.reasons = reasons;
  }
}

/** A scheduling policy. A fresh instance is made for every call. */
export class Scheduler extends Component {
  constructor() {
    super();
    /**
     * The name of the cluster the Pod is in, set before `schedule` is
     * called: `default` for the host's own cluster, else the name the host
     * engaged it by. The Nodes are that cluster's.
     * @type {string}
     */
    this.cluster = "default";
  }

  /**
   * Picks the Node for `pod` among `nodes` (every Node the host knows, in
   * name order) and returns its name; throws or returns `Unschedulable` when
   * the Pod fits nowhere now.
   * @param {any} pod
   * @param {NodeInfo[]} nodes
   * @returns {string | Unschedulable}
   */
  schedule(pod, nodes) {
    throw new Error("a scheduler must define schedule()");
  }
}

const DECIMAL = { "": 0, m: -3, k: 3, M: 6, G: 9, T: 12, P: 15, E: 18 };
const BINARY = { Ki: 1, Mi: 2, Gi: 3, Ti: 4, Pi: 5, Ei: 6 };
const QUANTITY = /^([+-]?[0-9.]+)([a-zA-Z]*|[eE][+-]?[0-9]+)$/;

/**
 * Parses a Kubernetes quantity (`500m`, `2`, `1.5`, `128Mi`, `1G`, `1e3`)
 * into milli-units, rounding up like `MilliValue`. `undefined` when it is
 * not a quantity or does not fit in 64 bits.
 * @param {string} s
 * @returns {number | undefined}
 */
export function parseQuantity(s) {
  const m = QUANTITY.exec(String(s).trim());
  if (!m) return undefined;
  const [, number, suffix] = m;
  const value = Number(number);
  if (Number.isNaN(value)) return undefined;
  let milli;
  if (suffix in BINARY) milli = value * 1024 ** BINARY[suffix] * 1000;
  else if (suffix in DECIMAL) milli = value * 10 ** (DECIMAL[suffix] + 3);
  else if (/^[eE]/.test(suffix)) milli = value * 10 ** (Number(suffix.slice(1)) + 3);
  else return undefined;
  if (!Number.isFinite(milli) || Math.abs(milli) >= 9.2e18) return undefined;
  return Math.ceil(Number(milli.toFixed(6)));
}

/**
 * True if one of the Pod's tolerations (`spec.tolerations`) tolerates
 * `taint` (`{ key, value, effect }`), matched as Kubernetes matches them: a
 * toleration's `effect`, when set, must be the taint's; its `key`, when set,
 * must be the taint's; operator `Exists` then matches any value, and `Equal`
 * (or no operator) only the taint's value. So `{ operator: "Exists" }` with
 * no key and no effect tolerates every taint. Any other operator (the alpha
 * `Lt` and `Gt`, off by default in kube-scheduler) tolerates nothing.
 *
 * It also answers whether a Pod may go where a Node's state would put a
 * taint: kube-scheduler lets a Pod onto a cordoned Node if it tolerates
 * `node.kubernetes.io/unschedulable:NoSchedule`.
 *
 * ```js
 * const cordon = { key: "node.kubernetes.io/unschedulable", effect: "NoSchedule" };
 * tolerates({ spec: { tolerations: [{ key: cordon.key, operator: "Exists" }] } }, cordon); // true
 * ```
 * @param {any} pod
 * @param {{key?: string, value?: string, effect?: string}} taint
 * @returns {boolean}
 */
export function tolerates(pod, taint) {
  const tolerations = pod?.spec?.tolerations ?? [];
  if (!Array.isArray(tolerations)) return false;
  return tolerations.some((t) => t !== null && typeof t === "object" && tolerationMatches(t, taint));
}

/**
 * Whether one toleration tolerates one taint (Kubernetes'
 * `Toleration.ToleratesTaint`, comparison operators off).
 * @param {any} toleration
 * @param {any} taint
 */
function tolerationMatches(toleration, taint) {
  const effect = toleration.effect || "";
  if (effect && effect !== (taint?.effect || "")) return false;
  const key = toleration.key || "";
  if (key && key !== (taint?.key || "")) return false;
  const operator = toleration.operator || "";
  if (operator === "" || operator === "Equal") return (toleration.value || "") === (taint?.value || "");
  return operator === "Exists";
}

/** @param {any} container */
function requestsOf(container) {
  /** @type {Record<string, number>} */
  const out = {};
  for (const [name, q] of Object.entries(container?.resources?.requests ?? {})) out[name] = parseQuantity(q) ?? 0;
  return out;
}

/**
 * What a Pod requests: the sum over its containers, or the largest of its
 * init containers where that is more (as kube-scheduler counts), plus its
 * overhead; `pods` is always 1000 (one Pod).
 * @param {any} pod
 * @returns {Record<string, number>}
 */
export function podRequests(pod) {
  /** @type {Record<string, number>} */
  const total = {};
  const spec = pod?.spec;
  if (!spec) return total;
  for (const c of spec.containers ?? []) {
    for (const [name, amount] of Object.entries(requestsOf(c))) total[name] = (total[name] ?? 0) + amount;
  }
  for (const c of spec.initContainers ?? []) {
    for (const [name, amount] of Object.entries(requestsOf(c))) total[name] = Math.max(total[name] ?? 0, amount);
  }
  for (const [name, q] of Object.entries(spec.overhead ?? {})) total[name] = (total[name] ?? 0) + (parseQuantity(q) ?? 0);
  total.pods = 1000;
  return total;
}

/** @param {{name: string, milli: bigint | number}[]} list */
function resources(list) {
  /** @type {Record<string, number>} */
  const out = {};
  for (const r of list) out[r.name] = Number(r.milli);
  return out;
}

/** @param {string[]} reasons */
const unschedulable = (reasons) => ({ reasons });

/**
 * The Nodes one instance holds for one cluster: the host hands each
 * instance every Node once, then only what changed (`schedule-request`).
 */
class Held {
  constructor() {
    /** @type {Map<string, NodeInfo>} */
    this.byName = new Map();
    /** Every Node in name order; rebuilt when one is added or goes. @type {NodeInfo[] | undefined} */
    this.order = undefined;
    /** Each Node's place in `order`. @type {Map<string, number>} */
    this.index = new Map();
  }

  /**
   * Applies one request's changes: `removed` go, `nodes` are added or
   * replace the entry of the same name.
   * @param {string[]} removed
   * @param {any[]} nodes
   */
  apply(removed, nodes) {
    for (const name of removed) {
      if (this.byName.delete(name)) this.order = undefined;
    }
    for (const n of nodes) {
      const info = new NodeInfo(n.name, undefined, resources(n.allocatable), resources(n.requested), n.pods);
      info[JSON_BYTES] = n.node;
      const known = this.byName.has(n.name);
      this.byName.set(n.name, info);
      if (!known) this.order = undefined;
      else if (this.order !== undefined) this.order[/** @type {number} */ (this.index.get(n.name))] = info;
    }
  }

  /** Every Node held, in name order. @returns {NodeInfo[]} */
  nodes() {
    if (this.order === undefined) {
      const names = [...this.byName.keys()].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
      this.order = names.map((name) => /** @type {NodeInfo} */ (this.byName.get(name)));
      this.index = new Map(names.map((name, i) => [name, i]));
    }
    return this.order;
  }
}

/** What this instance holds, per cluster. @type {Map<string, Held>} */
const held = new Map();

/** Drops every Node held, as a fresh instance starts (for the SDK's tests). */
export function forgetNodes() {
  held.clear();
}

/**
 * Applies the request's changes to the Nodes this instance holds, decodes
 * the Pod and calls `schedule` with every Node held (each decoded when the
 * policy first reads it, once per change); throws the WIT `unschedulable`
 * record with the reasons (an exception is one).
 * @param {new () => Scheduler} SchedulerClass
 * @param {{pod: Uint8Array, nodes: any[], removed?: string[], cluster?: string}} request
 * @returns {string}
 */
export function runSchedule(SchedulerClass, request) {
  // The changes first: the host counts them handed over whatever this
  // attempt answers.
  const cluster = request.cluster ?? "default";
  let kept = held.get(cluster);
  if (kept === undefined) {
    kept = new Held();
    held.set(cluster, kept);
  }
  kept.apply(request.removed ?? [], request.nodes);
  let pod;
  try {
    pod = fromBytes(request.pod);
  } catch (e) {
    throw unschedulable([`the Pod does not decode: ${e instanceof Error ? e.message : e}`]);
  }
  // A copy: the policy may sort or filter the list it gets.
  const nodes = kept.nodes().slice();
  const scheduler = new SchedulerClass();
  scheduler.cluster = cluster;
  let picked;
  try {
    picked = scheduler.schedule(pod, nodes);
  } catch (e) {
    if (e instanceof Unschedulable) throw unschedulable([...e.reasons]);
    const name = e instanceof Error ? e.name : typeof e;
    log.error("unhandled exception in schedule", { error: String(e), stack: e?.stack ?? "" });
    throw unschedulable([`unhandled ${name}: ${e instanceof Error ? e.message : String(e)}`]);
  }
  if (picked instanceof Unschedulable) throw unschedulable([...picked.reasons]);
  if (typeof picked !== "string" || picked === "") {
    throw unschedulable([`schedule returned ${JSON.stringify(picked ?? null)}, not a Node name`]);
  }
  return picked;
}
