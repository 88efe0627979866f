// Unit tests of the roles besides reconcile: the component manifest,
// admission, conversion and scheduling, and the "not served" defaults.
import assert from "node:assert/strict";
import { beforeEach, test } from "node:test";

import {
  Admission,
  Controller,
  Conversion,
  Manifest,
  NodeInfo,
  Operation,
  Scheduler,
  Unschedulable,
  Verdict,
  Webhook,
  between,
  exportComponent,
  parseQuantity,
  podRequests,
  tolerates,
} from "../src/index.js";
import { fromBytes, toBytes } from "../src/json.js";
import { forgetNodes } from "../src/scheduler.js";
import { calls, reset } from "./host/fake.js";

beforeEach(() => {
  reset();
  forgetNodes();
});

const pod = {
  apiVersion: "v1",
  kind: "Pod",
  metadata: { name: "web", namespace: "demo" },
  spec: {
    containers: [
      { name: "a", resources: { requests: { cpu: "500m", memory: "1Gi" } } },
      { name: "b", resources: { requests: { cpu: "250m" } } },
    ],
    initContainers: [{ name: "init", resources: { requests: { cpu: "1" } } }],
    overhead: { memory: "1Mi" },
  },
};

const greeting = (replicas) => ({
  apiVersion: "example.com/v1",
  kind: "Greeting",
  metadata: { name: "hi" },
  spec: replicas === undefined ? { message: "hello" } : { message: "hello", replicas },
});

const admissionRequest = (webhookType, object, operation = "create", oldObject = undefined, requestVersion = "v1") => ({
  webhook: "check.greetings.example.com",
  webhookType,
  uid: "u-1",
  kind: { group: "example.com", version: "v1", kind: "Greeting" },
  requestKind: { group: "example.com", version: requestVersion, kind: "Greeting" },
  subResource: undefined,
  name: "hi",
  namespace: "demo",
  operation,
  object: object === undefined ? undefined : object instanceof Uint8Array ? object : toBytes(object),
  oldObject: oldObject === undefined ? undefined : oldObject instanceof Uint8Array ? oldObject : toBytes(oldObject),
  userInfo: { username: "ada", uid: "1", groups: ["devs"] },
  dryRun: false,
});

class Hooks extends Admission {
  manifest() {
    return new Manifest("hooks").webhook(
      Webhook.validating("check.greetings.example.com").kind("example.com/v1", "Greeting"),
    );
  }

  validate(request) {
    assert.equal(request.userInfo.username, "ada");
    assert.equal(request.operation, Operation.CREATE);
    if ((request.object.spec.replicas ?? 1) > 10) return Verdict.deny("spec.replicas must be at most 10").code(422);
    return Verdict.allow().warn("looks fine");
  }

  mutate(request, obj) {
    if (obj.spec.replicas === "boom") throw new Error("a bug");
    obj.spec.replicas ??= 1;
    return Verdict.allow();
  }
}

test("a controller alone serves reconcile only and the other roles answer not served", () => {
  class Greeter extends Controller {
    manifest() {
      return new Manifest("greeter").primary("example.com/v1", "Greeting");
    }
  }
  const exports = exportComponent({ controller: Greeter });
  const manifest = exports.controller.manifest();
  assert.equal(manifest.controller.name, "greeter");
  assert.deepEqual(manifest.roles, { reconcile: true, admission: [], conversion: [], scheduler: undefined });
  const response = exports.admission.review(admissionRequest("validating", greeting()));
  assert.deepEqual([response.allowed, response.code, response.message], [
    false,
    500,
    "this component does not serve admission",
  ]);
  assert.throws(
    () => exports.conversion.convert({ desiredApiVersion: "example.com/v1", objects: [] }),
    (e) => e === "this component does not serve conversion",
  );
  assert.throws(
    () => exports.scheduler.schedule({ pod: toBytes(pod), nodes: [], cluster: "default" }),
    (e) => assert.deepEqual(e, { reasons: ["this component does not serve scheduling"] }) ?? true,
  );
});

test("a component without a controller takes its manifest from the first role", () => {
  const exports = exportComponent({ admission: Hooks });
  const manifest = exports.controller.manifest();
  assert.equal(manifest.roles.reconcile, false);
  assert.deepEqual(manifest.controller.primary, { group: "example.com", version: "v1", kind: "Greeting" });
  const [webhook] = manifest.roles.admission;
  assert.deepEqual([webhook.webhookType, webhook.operations, webhook.failurePolicy], [
    "validating",
    ["create", "update"],
    "fail",
  ]);
  assert.throws(
    () => exports.controller.reconcile({ event: "added", object: toBytes({}), failedChildren: [] }),
    (e) => e.kind === "terminal" && e.message === "this component does not serve reconcile",
  );
  assert.throws(() => exportComponent({}), TypeError);
  assert.throws(() => exportComponent({ admission: Controller }), TypeError);
});

test("the manifest declares webhooks, conversions and a scheduler and fills the primary", () => {
  const webhook = Webhook.mutating("default.greetings.example.com")
    .kind("example.com/v1", "Greeting")
    .operations(Operation.CREATE)
    .ignoreFailures()
    .timeoutSeconds(5)
    .sideEffectsOnDryRun()
    .objectSelector({ matchLabels: { app: "web" } });
  const [w] = new Manifest("m").webhook(webhook).component(false).roles.admission;
  assert.deepEqual([w.webhookType, w.operations, w.failurePolicy, w.timeoutSeconds, w.sideEffects], [
    "mutating",
    ["create"],
    "ignore",
    5,
    "none-on-dry-run",
  ]);
  assert.deepEqual(fromBytes(w.objectSelector), { matchLabels: { app: "web" } });
  assert.equal(w.namespaceSelector, undefined);
  assert.throws(() => Webhook.validating("x.y.z").operations("create"), TypeError);

  const scheduling = new Manifest("s").scheduler("zone-spread").component(false);
  assert.deepEqual(scheduling.roles.scheduler, { name: "zone-spread" });
  assert.deepEqual(scheduling.controller.primary, { group: "", version: "v1", kind: "Pod" });

  const crd = { spec: { names: { kind: "Greeting" }, versions: [{ name: "v1alpha1" }, { name: "v1" }] } };
  const converting = new Manifest("c").crd(crd).converts("example.com/v1", "Greeting").component(true);
  assert.deepEqual(converting.roles.conversion, [{ group: "example.com", kind: "Greeting" }]);
  assert.deepEqual(converting.controller.primary, { group: "example.com", version: "v1alpha1", kind: "Greeting" });
  assert.equal(converting.roles.reconcile, true);

  const explicit = new Manifest("e").primary("apps/v1", "Deployment").scheduler("x").component(true);
  assert.equal(explicit.controller.primary.kind, "Deployment");
});

test("validate returns the verdict with its code and warnings", () => {
  const { review } = exportComponent({ admission: Hooks }).admission;
  const allowed = review(admissionRequest("validating", greeting(3)));
  assert.deepEqual([allowed.allowed, allowed.warnings, allowed.patched], [true, ["looks fine"], undefined]);
  const denied = review(admissionRequest("validating", greeting(11)));
  assert.deepEqual([denied.allowed, denied.code, denied.message], [false, 422, "spec.replicas must be at most 10"]);
});

test("mutate changes the object in place and the answer carries it", () => {
  const { review } = exportComponent({ admission: Hooks }).admission;
  const response = review(admissionRequest("mutating", greeting()));
  assert.equal(response.allowed, true);
  assert.deepEqual(fromBytes(response.patched).spec, { message: "hello", replicas: 1 });
  const deleted = review(admissionRequest("mutating", undefined, "delete", greeting()));
  assert.deepEqual([deleted.allowed, deleted.patched], [true, undefined]);
});

test("a request that does not decode is denied 400 and an exception fails the call", () => {
  const { review } = exportComponent({ admission: Hooks }).admission;
  const bad = review(admissionRequest("validating", Uint8Array.of(0x7b)));
  assert.deepEqual([bad.allowed, bad.code], [false, 400]);
  assert.match(bad.message, /^object is not valid JSON/);
  // Thrown on (the guest traps), so that the failure policy decides.
  assert.throws(() => review(admissionRequest("mutating", greeting("boom"))), /a bug/);
  assert.ok(calls.some(([name, , message]) => name === "log.log" && message === "unhandled exception in admission"));
});

test("an old object that does not decode goes to the handler raw", () => {
  const seen = [];
  class Seeing extends Admission {
    validate(request) {
      seen.push(request);
      return Verdict.allow();
    }
  }
  const { review } = exportComponent({ admission: Seeing }).admission;
  for (const webhookType of ["validating", "mutating"]) {
    const deleted = review(admissionRequest(webhookType, undefined, "delete", toBytes([1])));
    assert.ok(deleted.allowed, deleted.message);
  }
  const updated = review(admissionRequest("validating", greeting(2), "update", new TextEncoder().encode("not json")));
  assert.ok(updated.allowed, updated.message);
  const last = seen.at(-1);
  assert.deepEqual([last.operation, last.oldObject, last.undecodableOldObject.raw], ["UPDATE", undefined, "not json"]);
  assert.match(last.undecodableOldObject.error, /^old object is not valid JSON/);
  // The object to store must decode, unless the author says otherwise.
  const refused = review(admissionRequest("mutating", toBytes([1]), "update", greeting()));
  assert.deepEqual([refused.allowed, refused.code, refused.message], [false, 400, "object is not a JSON object"]);
});

test("an author may answer for an object to store that does not decode", () => {
  class Lenient extends Admission {
    undecodable(request, obj) {
      assert.equal(request.object, undefined);
      return Verdict.allow().warn(`let through: ${obj.raw}`);
    }
  }
  const { review } = exportComponent({ admission: Lenient }).admission;
  const response = review(admissionRequest("mutating", toBytes([1])));
  assert.deepEqual([response.allowed, response.warnings, response.patched], [true, ["let through: [1]"], undefined]);
});

const up = (obj) => ({ ...obj, spec: { greeting: obj.spec.message } });
const down = (obj) => ({ ...obj, spec: { message: obj.spec.greeting } });
const versions = { old: "example.com/v1alpha1", new: "example.com/v1" };

test("between converts up and down and keeps the metadata", () => {
  const old = { apiVersion: "example.com/v1alpha1", kind: "Greeting", metadata: { name: "hi" }, spec: { message: "x" } };
  const converted = between(old, "example.com/v1", up, down, versions);
  assert.deepEqual(converted, { ...old, apiVersion: "example.com/v1", spec: { greeting: "x" } });
  assert.deepEqual(old.spec, { message: "x" }, "the input is not changed");
  assert.deepEqual(between(converted, "example.com/v1alpha1", up, down, versions), old);
  assert.equal(between(old, "example.com/v1alpha1", up, down, versions), old);
  assert.throws(() => between(old, "example.com/v2", up, down, versions), /cannot convert example.com\/v1alpha1 to example.com\/v2/);
});

test("between keeps what a version cannot represent in an annotation, and the status", () => {
  const old = {
    apiVersion: "example.com/v1alpha1",
    kind: "Greeting",
    metadata: { name: "hi", uid: "u", annotations: { a: "1" } },
    spec: { message: "x", colour: "red" },
    status: { ready: true },
  };
  // v1 has no colour: `up` keeps it in an annotation, `down` takes it back.
  const keep = (obj) => ({
    apiVersion: obj.apiVersion,
    metadata: { name: "ignored", annotations: { ...obj.metadata.annotations, colour: obj.spec.colour } },
    spec: { greeting: obj.spec.message },
  });
  const restore = (obj) => {
    const { colour, ...annotations } = obj.metadata.annotations;
    return { ...obj, metadata: { ...obj.metadata, annotations }, spec: { message: obj.spec.greeting, colour } };
  };
  const converted = between(old, "example.com/v1", keep, restore, versions);
  assert.deepEqual(converted.metadata, { name: "hi", uid: "u", annotations: { a: "1", colour: "red" } });
  assert.deepEqual(converted.status, { ready: true });
  assert.deepEqual(between(converted, "example.com/v1alpha1", keep, restore, versions), old);
});

test("convert answers every object in order or one message", () => {
  class Versions extends Conversion {
    convert(obj, desired) {
      if (obj.spec?.message === "wrong") return { ...obj, apiVersion: "example.com/v9" };
      return between(obj, desired, up, down, versions);
    }
  }
  const { convert } = exportComponent({ conversion: Versions }).conversion;
  const request = (...objects) => ({
    desiredApiVersion: "example.com/v1",
    objects: objects.map((o) => (o instanceof Uint8Array ? o : toBytes(o))),
  });
  const a = { apiVersion: "example.com/v1alpha1", kind: "Greeting", metadata: { name: "a" }, spec: { message: "1" } };
  const b = { apiVersion: "example.com/v1", kind: "Greeting", metadata: { name: "b" }, spec: { greeting: "2" } };
  const out = convert(request(a, b)).map(fromBytes);
  assert.deepEqual(
    out.map((o) => [o.metadata.name, o.spec]),
    [
      ["a", { greeting: "1" }],
      ["b", { greeting: "2" }],
    ],
  );
  assert.throws(() => convert(request(a, Uint8Array.of(0x7b))), (e) => e.startsWith("objects[1] is not JSON"));
  assert.throws(
    () => convert(request({ ...a, apiVersion: "example.com/v0" })),
    (e) => e.startsWith("cannot convert example.com/v0"),
  );
  assert.throws(
    () => convert(request({ ...a, spec: { message: "wrong" } })),
    (e) => e === 'objects[0] came back as "example.com/v9", not "example.com/v1"',
  );
});

test("quantities parse to milli-units", () => {
  assert.equal(parseQuantity("500m"), 500);
  assert.equal(parseQuantity("2"), 2000);
  assert.equal(parseQuantity("1.5"), 1500);
  assert.equal(parseQuantity("0.1"), 100);
  assert.equal(parseQuantity("1Ki"), 1_024_000);
  assert.equal(parseQuantity("128Mi"), 128 * 1024 * 1024 * 1000);
  assert.equal(parseQuantity("1G"), 1_000_000_000_000);
  assert.equal(parseQuantity("1e3"), 1_000_000);
  assert.equal(parseQuantity("0.1m"), 1);
  assert.equal(parseQuantity("lots"), undefined);
  assert.equal(parseQuantity("1Qi"), undefined);
});

test("pod requests sum containers, take the largest init container and add overhead", () => {
  assert.deepEqual(podRequests(pod), { cpu: 1000, memory: 1024 ** 3 * 1000 + 1024 ** 2 * 1000, pods: 1000 });
  assert.deepEqual(podRequests({ kind: "Pod" }), {});
});

test("node info tells what is free, what fits and its labels", () => {
  const node = new NodeInfo("n1", { metadata: { labels: { zone: "a" } } }, { cpu: 2000, pods: 110_000 }, { cpu: 1500 });
  assert.deepEqual([node.free("cpu"), node.free("memory"), node.free("pods")], [500, 0, 110_000]);
  assert.ok(node.fits({ cpu: 500, pods: 1000 }) && !node.fits({ cpu: 501 }) && node.fits({ memory: 0 }));
  assert.deepEqual([node.label("zone"), node.label("rack"), new NodeInfo("n2", {}, {}, {}).label("zone")], [
    "a",
    undefined,
    undefined,
  ]);
});

const nodeObject = {
  apiVersion: "v1",
  kind: "Node",
  metadata: { name: "n1", labels: { zone: "a", disk: "ssd" } },
  spec: { unschedulable: true, taints: [{ key: "k", value: "v", effect: "NoSchedule" }] },
  status: {
    conditions: [
      { type: "MemoryPressure", status: "False" },
      { type: "Ready", status: "True", reason: "KubeletReady" },
    ],
  },
};

test("node info answers labels, cordon, taints and conditions like the Rust SDK", () => {
  const node = new NodeInfo("n1", nodeObject, {}, {});
  assert.deepEqual(node.labels(), { zone: "a", disk: "ssd" });
  assert.equal(node.unschedulable(), true);
  assert.deepEqual(node.taints(), [{ key: "k", value: "v", effect: "NoSchedule" }]);
  assert.deepEqual([node.condition("MemoryPressure"), node.condition("DiskPressure")], ["False", undefined]);
  assert.equal(node.ready(), true);
  const bare = new NodeInfo("n2", { metadata: { name: "n2" } }, {}, {});
  assert.deepEqual([bare.unschedulable(), bare.ready(), bare.labels(), bare.taints()], [false, false, {}, []]);
  assert.equal(bare.condition("Ready"), undefined);
  const notReady = new NodeInfo("n3", { status: { conditions: [{ type: "Ready", status: "Unknown" }] } }, {}, {});
  assert.deepEqual([notReady.ready(), notReady.condition("Ready")], [false, "Unknown"]);
});

const gpuTaint = { key: "dedicated", value: "gpu", effect: "NoSchedule" };
const bareTaint = { key: "maintenance", effect: "NoExecute" };

// A toleration, and whether it tolerates gpuTaint and bareTaint (the same
// cases as the Rust SDK's).
const tolerationCases = [
  [{ key: "dedicated", operator: "Equal", value: "gpu", effect: "NoSchedule" }, true, false],
  [{ key: "dedicated", value: "gpu" }, true, false],
  [{ key: "dedicated", operator: "Equal", value: "cpu" }, false, false],
  [{ key: "dedicated", operator: "Equal", value: "gpu", effect: "NoExecute" }, false, false],
  [{ key: "dedicated", operator: "Exists" }, true, false],
  [{ key: "maintenance", operator: "Exists", effect: "" }, false, true],
  [{ key: "maintenance", operator: "Equal" }, false, true],
  [{ key: "maintenance", operator: "Equal", value: "" }, false, true],
  [{ key: "maintenance", operator: "Exists", effect: "NoSchedule" }, false, false],
  [{ operator: "Exists" }, true, true],
  [{ operator: "Exists", effect: "NoExecute" }, false, true],
  [{ key: "dedicated", operator: "Gt", value: "1" }, false, false],
  [{ key: "dedicated", operator: "Exists", tolerationSeconds: 300 }, true, false],
];

test("tolerations match taints by key, operator, value and effect as Kubernetes does", () => {
  for (const [toleration, ofGpu, ofBare] of tolerationCases) {
    const pod = { spec: { tolerations: [toleration] } };
    assert.deepEqual([tolerates(pod, gpuTaint), tolerates(pod, bareTaint)], [ofGpu, ofBare], JSON.stringify(toleration));
  }
  assert.equal(tolerates({}, gpuTaint), false);
  assert.equal(tolerates({ spec: { tolerations: null } }, gpuTaint), false);
  assert.equal(tolerates({ spec: { tolerations: [] } }, bareTaint), false);
});

test("the untolerated taint is the first NoSchedule or NoExecute taint the pod does not tolerate", () => {
  const soft = { key: "spot", value: "true", effect: "PreferNoSchedule" };
  const tainted = new NodeInfo("n1", { spec: { taints: [soft, gpuTaint, bareTaint] } }, {}, {});
  const tolerating = (...tolerations) => ({ spec: { tolerations } });
  assert.deepEqual(tainted.untoleratedTaint(tolerating()), gpuTaint);
  assert.deepEqual(tainted.untoleratedTaint(tolerating({ key: "dedicated", value: "gpu" })), bareTaint);
  const both = tolerating({ key: "dedicated", value: "gpu" }, { key: "maintenance", operator: "Exists" });
  assert.equal(tainted.untoleratedTaint(both), undefined, "PreferNoSchedule is not a filter");
  assert.equal(new NodeInfo("n2", {}, {}, {}).untoleratedTaint(tolerating()), undefined);
  assert.equal(new NodeInfo("n3", nodeObject, {}, {}).untoleratedTaint({})?.key, "k");
});

test("a node from the host is decoded only when the policy reads it", () => {
  /** @type {NodeInfo[]} */
  const seen = [];
  class ByName extends Scheduler {
    manifest() {
      return new Manifest("by-name").scheduler("by-name");
    }

    schedule(p, nodes) {
      seen.push(...nodes);
      const fitting = nodes.filter((n) => n.fits(podRequests(p)));
      if (p.metadata.labels?.read === "all") for (const n of nodes) n.labels();
      const picked = fitting[fitting.length - 1];
      return picked.label("zone") === "b" ? picked.name : "none";
    }
  }
  const room = ["cpu", "memory", "pods"].map((name) => ({ name, milli: 1n << 50n }));
  const host = (name, bytes) => ({ name, node: bytes, allocatable: room, requested: [], pods: 0 });
  const good = { metadata: { name: "b1", labels: { zone: "b" } } };
  // The sentinel is not JSON: a policy that never reads it never decodes it
  // (the host hands the Nodes over in name order).
  const nodes = [host("a-sentinel", new TextEncoder().encode("not json")), host("b1", toBytes(good))];
  const { schedule } = exportComponent({ scheduler: ByName }).scheduler;
  assert.equal(schedule({ pod: toBytes(pod), nodes, cluster: "default" }), "b1");
  assert.deepEqual(
    seen.map((n) => n.name),
    ["a-sentinel", "b1"],
  );
  assert.deepEqual(seen[1].node, good);
  const readsAll = { ...pod, metadata: { name: "p", labels: { read: "all" } } };
  assert.throws(
    // Nothing changed: the Nodes are held from the request before.
    () => schedule({ pod: toBytes(readsAll), nodes: [], removed: [], cluster: "default" }),
    (e) => e.reasons.length === 1 && e.reasons[0].startsWith("Node a-sentinel does not decode: "),
  );
});

const wireNode = (name, cpu, zone) => ({
  name,
  node: toBytes({ apiVersion: "v1", kind: "Node", metadata: { name, labels: { zone } } }),
  allocatable: [
    { name: "cpu", milli: BigInt(cpu) },
    { name: "memory", milli: BigInt(8 * 1024 ** 3 * 1000) },
    { name: "pods", milli: 110_000n },
  ],
  requested: [{ name: "cpu", milli: 0n }],
  pods: 0,
});

test("schedule returns a node name or the reasons it is unschedulable", () => {
  class FirstFit extends Scheduler {
    manifest() {
      return new Manifest("first-fit").scheduler("first-fit");
    }

    schedule(p, nodes) {
      const mode = p.metadata.labels?.mode;
      if (mode === "return") return new Unschedulable("returned");
      if (mode === "bug") throw new TypeError("zone");
      const needed = podRequests(p);
      const node = nodes.find((n) => n.fits(needed) && n.label("zone") === "b");
      if (node) return node.name;
      throw new Unschedulable(`${nodes.length} nodes have too little cpu`, "or are in the wrong zone");
    }
  }
  const exports = exportComponent({ scheduler: FirstFit });
  assert.deepEqual(exports.controller.manifest().roles.scheduler, { name: "first-fit" });
  const { schedule } = exports.scheduler;
  // A request to a fresh instance, which gets every Node.
  const request = (p, ...nodes) => {
    forgetNodes();
    return { pod: toBytes(p), nodes, removed: [], cluster: "default" };
  };
  assert.equal(schedule(request(pod, wireNode("a1", 4000, "a"), wireNode("b1", 500, "b"), wireNode("b2", 4000, "b"))), "b2");
  const reasons = (p, ...nodes) => {
    try {
      schedule(request(p, ...nodes));
    } catch (e) {
      return e.reasons;
    }
    assert.fail("schedulable");
  };
  assert.deepEqual(reasons(pod, wireNode("b1", 500, "b")), ["1 nodes have too little cpu", "or are in the wrong zone"]);
  assert.deepEqual(reasons({ ...pod, metadata: { name: "p", labels: { mode: "return" } } }), ["returned"]);
  assert.deepEqual(reasons({ ...pod, metadata: { name: "p", labels: { mode: "bug" } } }), ["unhandled TypeError: zone"]);
});

test("a scheduler holds the nodes between decisions and applies each request's changes", () => {
  /** @type {NodeInfo[][]} */
  const seen = [];
  class Lister extends Scheduler {
    manifest() {
      return new Manifest("lister").scheduler("lister");
    }

    schedule(p, nodes) {
      seen.push(nodes);
      nodes.reverse(); // the policy's own copy
      return [...nodes]
        .reverse()
        .map((n) => `${n.name}:${n.pods}`)
        .join(",");
    }
  }
  const { schedule } = exportComponent({ scheduler: Lister }).scheduler;
  const node = (name, pods) => ({ name, node: toBytes({ metadata: {} }), allocatable: [], requested: [], pods });
  const request = (nodes, removed, cluster = "default") => ({ pod: toBytes(pod), nodes, removed, cluster });
  assert.equal(schedule(request([node("a", 0), node("b", 0), node("c", 0)], [])), "a:0,b:0,c:0");
  assert.equal(schedule(request([], [])), "a:0,b:0,c:0", "nothing changed");
  assert.equal(schedule(request([node("aa", 0), node("b", 2)], ["c"])), "a:0,aa:0,b:2");
  assert.equal(schedule(request([node("b", 3)], [])), "a:0,aa:0,b:3", "replaced in place");
  assert.equal(schedule(request([node("z", 1)], [], "east")), "z:1", "east holds its own");
  assert.equal(schedule(request([], ["a"])), "aa:0,b:3");
  assert.throws(() => schedule({ pod: new TextEncoder().encode("{"), nodes: [node("d", 0)], removed: [], cluster: "default" }));
  assert.equal(schedule(request([], [])), "aa:0,b:3,d:0", "a Pod that does not decode still takes the changes");
  assert.equal(seen.length, 7);
});

test("an admission request has the webhook's kind and the user's request kind", () => {
  const seen = [];
  class Versions extends Hooks {
    validate(request) {
      seen.push([request.kind, request.requestKind]);
      const verdict = Verdict.allow();
      if (request.requestKind.version === "v1beta1") verdict.warn(`${request.requestKind.version} is deprecated`);
      return verdict;
    }
  }
  const { admission } = exportComponent({ admission: Versions });
  const same = admission.review(admissionRequest("validating", greeting()));
  const converted = admission.review(admissionRequest("validating", greeting(), "create", undefined, "v1beta1"));
  const v1 = { group: "example.com", version: "v1", kind: "Greeting" };
  assert.deepEqual(seen, [
    [v1, v1],
    [v1, { group: "example.com", version: "v1beta1", kind: "Greeting" }],
  ]);
  assert.deepEqual(same.warnings, []);
  assert.deepEqual(converted.warnings, ["v1beta1 is deprecated"]);
  assert.ok(Object.isFrozen(seen[0][1]));
});

test("the scheduler learns the cluster of the pod", () => {
  class PerCluster extends Scheduler {
    manifest() {
      return new Manifest("per-cluster").scheduler("per-cluster");
    }

    schedule() {
      return `${this.cluster}-node`;
    }
  }
  const { scheduler } = exportComponent({ scheduler: PerCluster });
  assert.equal(scheduler.schedule({ pod: toBytes(pod), nodes: [], cluster: "edge-3" }), "edge-3-node");
  assert.equal(scheduler.schedule({ pod: toBytes(pod), nodes: [], cluster: "default" }), "default-node");
});
