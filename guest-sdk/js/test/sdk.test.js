// Unit tests of the library on a fake host:
//   node --import ./test/register.js --test test/
import assert from "node:assert/strict";
import { beforeEach, test } from "node:test";

import {
  ALL_VERBS,
  Controller,
  Denied,
  Event,
  Field,
  Manifest,
  Mapping,
  NotFound,
  Outcome,
  PatchType,
  Permission,
  READ_VERBS,
  Scope,
  Terminal,
  Transient,
  Verb,
  Watch,
  exportComponent,
} from "../src/index.js";
import { Context } from "../src/context.js";
import { fromBytes, toBytes, utf8Decode, utf8Encode } from "../src/json.js";
import { ComponentError, calls, impl, reset } from "./host/fake.js";

beforeEach(reset);

const status = (code, reason) => ({ code, reason, message: `${reason} message` });
const greeting = { apiVersion: "example.com/v1", kind: "Greeting", metadata: { name: "hi", namespace: "demo" } };

test("the fallback utf-8 codec agrees with TextEncoder and TextDecoder", () => {
  const long = "x".repeat(10000) + "é" + "y".repeat(10000);
  for (const s of ["", "plain", "100% %41", "héllo ✓", "emoji 🎉 and 𝄞", "\u0000\u007f\u0080\u07ff\u0800\uffff", long]) {
    assert.deepEqual(utf8Encode(s), new TextEncoder().encode(s), s);
    assert.equal(utf8Decode(new TextEncoder().encode(s)), s, s);
  }
  assert.equal(utf8Decode(Uint8Array.of(0xff, 0x41)), "\ufffdA");
  assert.equal(utf8Decode(Uint8Array.of(0x41, 0xc3, 0xa9, 0xff)), "Aé\ufffd", "invalid after valid");
  assert.deepEqual(utf8Encode("a\ud800b"), new TextEncoder().encode("a\ud800b"), "a lone surrogate is U+FFFD");
  assert.deepEqual(fromBytes(toBytes({ a: ["✓", 1] })), { a: ["✓", 1] });
});

test("the base64 path of the codec (QuickJS's) agrees with TextEncoder and TextDecoder", async () => {
  // Node 20 has btoa and atob but not Uint8Array's base64 methods: stand
  // them in, and load a second copy of the module, which checks for them
  // when it loads.
  const had = { from: Uint8Array.fromBase64, to: Uint8Array.prototype.toBase64 };
  let used = 0;
  Uint8Array.fromBase64 = (s) => (used++, new Uint8Array(Buffer.from(s, "base64")));
  Uint8Array.prototype.toBase64 = function () {
    used++;
    return Buffer.from(this).toString("base64");
  };
  try {
    const codec = await import("../src/json.js?base64");
    for (const s of ["", "plain", "héllo ✓", "emoji 🎉 and 𝄞", "\u0000\u007f\u0080\u07ff\u0800\uffff", "x".repeat(20000) + "é"]) {
      assert.deepEqual(codec.utf8Encode(s), new TextEncoder().encode(s), s);
      assert.equal(codec.utf8Decode(new TextEncoder().encode(s)), s, s);
    }
    assert.equal(codec.utf8Decode(Uint8Array.of(0x41, 0xc3, 0xa9, 0xff)), "Aé\ufffd", "invalid after valid");
    assert.deepEqual(codec.utf8Encode("a\ud800b"), new TextEncoder().encode("a\ud800b"), "a lone surrogate is U+FFFD");
    assert.ok(used >= 12, `the base64 methods were used (${used} calls)`);
  } finally {
    Uint8Array.fromBase64 = had.from;
    Uint8Array.prototype.toBase64 = had.to;
  }
});

test("a not-found error from the host is NotFound, and getOpt turns it into undefined", () => {
  impl["kube.get"] = () => {
    throw new ComponentError({ tag: "not-found", val: status(404, "NotFound") });
  };
  const api = new Context("added", "demo", "hi").api("apps/v1", "Deployment", "demo");
  assert.throws(() => api.get("web"), (e) => e instanceof NotFound && e.status.code === 404 && e.isNotFound);
  assert.equal(api.getOpt("web"), undefined);
  const [, ref] = calls[0];
  assert.deepEqual(ref, { kind: { group: "apps", version: "v1", kind: "Deployment" }, namespace: "demo", name: "web" });
});

test("a bare err payload is mapped too, and other errors pass through", () => {
  impl["kube.get"] = () => {
    throw { tag: "denied", val: "no get on secrets" };
  };
  const api = new Context("added", "demo", "hi").api("v1", "Secret", "demo");
  assert.throws(() => api.get("s"), (e) => e instanceof Denied && e.message === "denied by grants: no get on secrets");
  impl["kube.get"] = () => {
    throw new TypeError("boom");
  };
  assert.throws(() => api.get("s"), TypeError);
});

test("objects sent to the host get apiVersion, kind and namespace filled in", () => {
  impl["kube.apply"] = (bytes, force) => {
    assert.equal(force, true);
    return bytes;
  };
  const api = new Context("added", "demo", "hi").api("v1", "ConfigMap", "demo");
  const applied = api.apply({ metadata: { name: "cm" }, data: { k: "v" } }, true);
  assert.deepEqual(applied, { apiVersion: "v1", kind: "ConfigMap", metadata: { name: "cm", namespace: "demo" }, data: { k: "v" } });
  impl["kube.patch"] = (ref, type, patch) => toBytes({ ref, type, patch: fromBytes(patch) });
  assert.deepEqual(api.patch("cm", [{ op: "remove", path: "/data/k" }], PatchType.JSON).type, "json");
});

test("the manifest and the outcome have the shapes of the WIT records", () => {
  const m = new Manifest("web").primary("apps/v1", "Deployment").owns("v1", "ConfigMap").resync(1.5).maxConcurrency(0).wit;
  assert.deepEqual(m.primary, { group: "apps", version: "v1", kind: "Deployment" });
  assert.deepEqual(m.owns, [{ kind: { group: "", version: "v1", kind: "ConfigMap" }, labelSelector: undefined, scope: undefined }]);
  assert.equal(m.resyncSeconds, 2);
  assert.equal(m.maxConcurrency, 1);
  assert.equal(m.finalizer, undefined);
  const o = new Outcome().child({ kind: "ConfigMap" }).event(Event.warning("Odd", "Check").note("n")).requeueAfter(2.5).wit;
  assert.equal(o.requeueAfterMs, 2500n);
  assert.equal(o.childrenPolicy, "prune");
  assert.deepEqual(fromBytes(o.children[0]), { kind: "ConfigMap" });
  assert.deepEqual(o.events[0], { eventType: "warning", reason: "Odd", action: "Check", note: "n", regarding: undefined });
});

class Probe extends Controller {
  manifest() {
    return new Manifest("probe").primary("example.com/v1", "Greeting");
  }

  delete(ctx) {
    return new Outcome().event(Event.normal("Deleted", ctx.event));
  }

  reconcile(ctx, obj) {
    switch (obj.spec?.mode) {
      case "terminal":
        throw new Terminal("bad spec");
      case "transient":
        throw new Transient("later");
      case "denied":
        throw new Denied("no list");
      case "missing":
        throw new NotFound("gone", status(404, "NotFound"));
      case "bug":
        return obj.spec.nothing.here;
      case "nothing":
        return undefined;
      default:
        return new Outcome().status({ seen: ctx.event, name: ctx.name, namespace: ctx.namespace });
    }
  }
}

const request = (event, obj, failedChildren = [], cluster = "default", members = []) => ({
  event,
  object: obj instanceof Uint8Array ? obj : toBytes(obj),
  failedChildren,
  cluster,
  members,
});
const run = (event, spec) =>
  exportComponent({ controller: Probe }).controller.reconcile(request(event, { ...greeting, spec }));

test("callbacks are chosen by event kind, and delete defaults apart", () => {
  assert.deepEqual(fromBytes(run("added", {}).status), { seen: "added", name: "hi", namespace: "demo" });
  assert.deepEqual(fromBytes(run("resync", {}).status).seen, "resync");
  assert.equal(run("deleted", {}).events[0].reason, "Deleted");
  assert.deepEqual(run("modified", { mode: "nothing" }), new Outcome().wit);
});

const failure = (kind, message) => ({ kind, message, status: undefined, events: [] });

test("what reconcile throws becomes the failure the host expects", () => {
  const thrown = (mode) => {
    try {
      run("added", { mode });
    } catch (e) {
      return e;
    }
    assert.fail(`mode ${mode} did not throw`);
  };
  assert.deepEqual(thrown("terminal"), failure("terminal", "bad spec"));
  assert.deepEqual(thrown("transient"), failure("transient", "later"));
  assert.deepEqual(thrown("denied"), failure("terminal", "denied by grants: no list"));
  assert.deepEqual(thrown("missing"), failure("transient", "not found: gone"));
  const bug = thrown("bug");
  assert.equal(bug.kind, "transient");
  assert.ok(bug.message.startsWith("unhandled TypeError"), bug.message);
  assert.ok(calls.some(([f, level, message]) => f === "log.log" && level === "error" && message === "unhandled exception in reconcile"));
});

test("an object that is not JSON is a terminal error", () => {
  assert.throws(
    () => exportComponent({ controller: Probe }).controller.reconcile(request("added", Uint8Array.of(0x7b))),
    (e) => e.kind === "terminal" && e.message.startsWith("object is not valid JSON"),
  );
});

class Failing extends Controller {
  manifest() {
    return new Manifest("failing").primary("example.com/v1", "Greeting");
  }

  reconcile(ctx, obj) {
    switch (obj.spec.mode) {
      case "terminal":
        throw new Terminal("bad schedule", {
          status: { conditions: [{ type: "Ready", status: "False", reason: "InvalidSpec" }] },
          events: [Event.warning("InvalidSpec", "Validate").note("schedule: x")],
        });
      case "chained":
        throw new Transient("source missing").withStatus(["any", "json", 1]).withEvent(Event.normal("Waiting", "Reconcile"));
      default:
        throw new Transient("plain");
    }
  }
}

test("errors carry status and events into the failure", () => {
  const thrown = (event, mode) => {
    try {
      exportComponent({ controller: Failing }).controller.reconcile(request(event, { ...greeting, spec: { mode } }));
    } catch (e) {
      return e;
    }
    assert.fail("did not throw");
  };
  const terminal = thrown("added", "terminal");
  assert.equal(terminal.kind, "terminal");
  assert.equal(terminal.message, "bad schedule");
  assert.ok(terminal.status instanceof Uint8Array);
  assert.deepEqual(fromBytes(terminal.status), { conditions: [{ type: "Ready", status: "False", reason: "InvalidSpec" }] });
  assert.deepEqual(terminal.events, [{ eventType: "warning", reason: "InvalidSpec", action: "Validate", note: "schedule: x", regarding: undefined }]);
  const chained = thrown("resync", "chained");
  assert.equal(chained.kind, "transient");
  assert.deepEqual(fromBytes(chained.status), ["any", "json", 1]);
  assert.deepEqual(chained.events.map((e) => e.reason), ["Waiting"]);
  assert.deepEqual(thrown("resync", "plain"), failure("transient", "plain"));
});

test("error status and events are checked where they are given", () => {
  const e = new Terminal("x", { status: { ready: false } });
  assert.deepEqual(e.status, { ready: false });
  assert.equal(e.isTerminal, true);
  assert.equal(new Transient("y").isTerminal, false);
  assert.equal(new Transient("y").status, undefined);
  assert.throws(() => new Terminal("x", { status: { big: 1n } }), TypeError);
  assert.throws(() => new Terminal("x").withStatus(() => 1), TypeError);
  assert.throws(() => new Transient("x", { events: ["not an event"] }), TypeError);
  // Status `null` is a JSON value and is sent; only `undefined` leaves the status alone.
  assert.deepEqual(fromBytes(new Terminal("x", { status: null }).statusJson), null);
});

test("keepChildren sets the children policy", () => {
  const o = new Outcome().keepChildren();
  assert.equal(o.keepsChildren, true);
  assert.equal(o.wit.childrenPolicy, "keep");
  assert.equal(o.keepChildren(false).wit.childrenPolicy, "prune");
  assert.equal(new Outcome().keepsChildren, false);
});

test("failed children are on the context", () => {
  const seen = [];
  class Watcher extends Controller {
    manifest() {
      return new Manifest("watcher").primary("example.com/v1", "Greeting");
    }

    reconcile(ctx) {
      seen.push(ctx.failedChildren);
      return new Outcome();
    }
  }
  const refused = [
    {
      child: { kind: { group: "batch", version: "v1", kind: "CronJob" }, namespace: "demo", name: "nightly" },
      code: 422,
      reason: "Invalid",
      message: "spec.schedule: Invalid value",
    },
    {
      child: { kind: { group: "", version: "v1", kind: "Namespace" }, namespace: undefined, name: "team-a" },
      code: 403,
      reason: "Forbidden",
      message: "no",
      cluster: "eu-west",
    },
  ];
  exportComponent({ controller: Watcher }).controller.reconcile(request("resync", greeting, refused));
  exportComponent({ controller: Watcher }).controller.reconcile(request("resync", greeting));
  assert.deepEqual(seen[0], [
    { apiVersion: "batch/v1", kind: "CronJob", namespace: "demo", name: "nightly", code: 422, reason: "Invalid", message: "spec.schedule: Invalid value", cluster: undefined },
    { apiVersion: "v1", kind: "Namespace", namespace: undefined, name: "team-a", code: 403, reason: "Forbidden", message: "no", cluster: "eu-west" },
  ]);
  assert.deepEqual(seen[1], []);
  assert.deepEqual(new Context("added", "demo", "hi").failedChildren, []);
});

test("owned kinds take a label selector and a scope", () => {
  const m = new Manifest("tenant")
    .primary("example.com/v1", "Tenant")
    .owns("v1", "Namespace")
    .owns("v1", "ConfigMap", { labelSelector: "example.com/tenant", scope: Scope.CLUSTER })
    .owns("apps/v1", "Deployment", { scope: Scope.namespaces(["a", "b"]) }).wit;
  assert.deepEqual(m.owns, [
    { kind: { group: "", version: "v1", kind: "Namespace" }, labelSelector: undefined, scope: undefined },
    { kind: { group: "", version: "v1", kind: "ConfigMap" }, labelSelector: "example.com/tenant", scope: { tag: "cluster" } },
    { kind: { group: "apps", version: "v1", kind: "Deployment" }, labelSelector: undefined, scope: { tag: "namespaces", val: ["a", "b"] } },
  ]);
  assert.throws(() => new Manifest("x").owns("v1", "ConfigMap", { scope: "cluster" }), TypeError);
});

test("permissions take resource names and the RBAC verbs", () => {
  const p = new Permission("rbac.authorization.k8s.io", "ClusterRole", [Verb.BIND, Verb.ESCALATE]).scope(Scope.CLUSTER).names("view", "edit").wit;
  assert.deepEqual(p, {
    group: "rbac.authorization.k8s.io",
    kind: "ClusterRole",
    verbs: ["bind", "escalate"],
    scope: { tag: "cluster" },
    status: false,
    resourceNames: ["view", "edit"],
  });
  assert.deepEqual(new Permission("", "Secret", READ_VERBS).names(["a", "b"]).wit.resourceNames, ["a", "b"]);
  assert.deepEqual(new Permission("", "Secret", READ_VERBS).wit.resourceNames, []);
  assert.throws(() => new Permission("", "Secret", ["read"]), TypeError);
  // ALL_VERBS stays the API verbs: bind and escalate are asked for by name.
  assert.equal(ALL_VERBS.length, 7);
  assert.ok(!ALL_VERBS.includes("bind"));
  const m = new Manifest("m").permission(new Permission("", "Secret", [Verb.GET]).names("s")).wit;
  assert.deepEqual(m.permissions[0].resourceNames, ["s"]);
});

test("watch mappings include reference and all", () => {
  const byLabel = Mapping.reference(Field.label("example.com/team"), Field.annotation("example.com/ns"));
  assert.deepEqual(byLabel, {
    tag: "reference",
    val: { name: { tag: "label", val: "example.com/team" }, namespace: { tag: "annotation", val: "example.com/ns" } },
  });
  assert.deepEqual(Mapping.reference(Field.NAME), { tag: "reference", val: { name: { tag: "name" }, namespace: undefined } });
  assert.deepEqual(Mapping.reference(Field.NAMESPACE, Field.NAME).val, { name: { tag: "namespace" }, namespace: { tag: "name" } });
  assert.deepEqual(Mapping.ALL, { tag: "all" });
  const m = new Manifest("m")
    .watches(new Watch("v1", "Namespace", Mapping.ALL))
    .watches(new Watch("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", byLabel).labelSelector("team")).wit;
  assert.deepEqual(m.watches[0].mapping, { tag: "all" });
  assert.deepEqual(m.watches[1], {
    kind: { group: "rbac.authorization.k8s.io", version: "v1", kind: "ClusterRoleBinding" },
    mapping: byLabel,
    labelSelector: "team",
  });
  assert.throws(() => Mapping.reference("name"), TypeError);
  assert.throws(() => Mapping.reference(Field.NAME, { tag: "uid" }), TypeError);
});

test("the cluster of the request is on the context", () => {
  const seen = [];
  class Fleet extends Controller {
    manifest() {
      return new Manifest("fleet").primary("example.com/v1", "Greeting");
    }

    reconcile(ctx) {
      seen.push(ctx.cluster);
      return new Outcome();
    }
  }
  const { controller } = exportComponent({ controller: Fleet });
  controller.reconcile(request("added", greeting, [], "eu-west"));
  controller.reconcile(request("resync", greeting));
  controller.reconcile({ event: "resync", object: toBytes(greeting), failedChildren: [] });
  assert.deepEqual(seen, ["eu-west", "default", "default"]);
  assert.equal(new Context("added", "demo", "hi").cluster, "default");
});

test("egress origins go into the component manifest in order", () => {
  const quiet = new Manifest("quiet").primary("v1", "ConfigMap").component(true);
  assert.deepEqual(quiet.egress, []);
  const calling = new Manifest("caller")
    .primary("v1", "ConfigMap")
    .egress("https://api.example.com")
    .egress(["https://*.example.org", "http://alertmanager.monitoring.svc:9093"], "http://[::1]:8000-8010")
    .component(true);
  assert.deepEqual(calling.egress, [
    "https://api.example.com",
    "https://*.example.org",
    "http://alertmanager.monitoring.svc:9093",
    "http://[::1]:8000-8010",
  ]);
  assert.throws(() => new Manifest("bad").egress(443), /an egress origin is a string/);
});
