// capstan-guest/testing: the fake host authors use under node --test.
import assert from "node:assert/strict";
import { test } from "node:test";

import { Context, Controller, Event, Outcome, Terminal, Transient, NotFound, AlreadyExists, http } from "../src/index.js";
import { FakeHost, HttpError, Response, node, nodeInfos, reconcile, schedule } from "../testing/index.js";
import { Scheduler, Unschedulable, log, podRequests } from "../src/index.js";

const greeting = {
  apiVersion: "example.com/v1",
  kind: "Greeting",
  metadata: { name: "hi", namespace: "demo", generation: 3, labels: { team: "a" } },
  spec: { message: "hello", source: "settings" },
};

class Greeter extends Controller {
  reconcile(ctx, obj) {
    if (!obj.spec.message) throw new Terminal("spec.message must not be empty", { status: { phase: "Failed" } });
    const read = ctx.span("read-settings", { source: obj.spec.source });
    const settings = ctx.api("v1", "ConfigMap", ctx.namespace).getOpt(obj.spec.source);
    if (settings === undefined) read.fail("no settings");
    read.end();
    if (settings === undefined) {
      ctx.record(Event.warning("Waiting", "Reconcile").note("no settings yet"));
      return new Outcome().keepChildren().requeueAfter(30);
    }
    ctx.log.info("greeting", { name: ctx.name });
    const mates = ctx.log.inSpan("count-mates", {}, () => {
      ctx.span("never-ended");
      return ctx.api("example.com/v1", "Greeting").list({ labelSelector: "team=a" });
    });
    return new Outcome()
      .child({
        apiVersion: "v1",
        kind: "ConfigMap",
        metadata: { name: `${ctx.name}-out` },
        data: { message: obj.spec.message, tone: settings.data.tone, mates: String(mates.length) },
      })
      .status({ observedGeneration: obj.metadata.generation })
      .event(Event.normal("Greeted", "Reconcile"));
  }
}

test("reconcile returns the outcome as data and the fake answers reads", () => {
  const settings = { apiVersion: "v1", kind: "ConfigMap", metadata: { name: "settings", namespace: "demo" }, data: { tone: "warm" } };
  const other = { ...greeting, metadata: { name: "other", namespace: "elsewhere", labels: { team: "b" } } };
  const host = new FakeHost([greeting, settings, other]);
  const done = reconcile(Greeter, greeting, { host });
  assert.deepEqual(done.children, [
    { apiVersion: "v1", kind: "ConfigMap", metadata: { name: "hi-out" }, data: { message: "hello", tone: "warm", mates: "1" } },
  ]);
  assert.deepEqual(done.status, { observedGeneration: 3 });
  assert.deepEqual(done.events, [{ type: "Normal", reason: "Greeted", action: "Reconcile", note: undefined }]);
  assert.equal(done.requeueAfter, undefined);
  assert.equal(done.keepChildren, false);
  assert.deepEqual(host.calls.map((c) => c[0]), ["kube.get", "kube.list"]);
  assert.deepEqual(host.logs, [["info", "greeting", { name: "hi" }]]);
  assert.deepEqual(
    host.spans.map((s) => [s.name, s.parent, s.error, s.ended]),
    [
      ["read-settings", undefined, undefined, true],
      ["count-mates", undefined, undefined, true],
      ["never-ended", "count-mates", undefined, true],
    ],
  );
  assert.deepEqual(host.spans[0].attributes, { source: "settings" });
});

test("a span run with inSpan records the exception it ends with, and one left open ends with the call", () => {
  const host = new FakeHost().install();
  try {
    assert.throws(() => log.inSpan("parse", {}, () => { throw new TypeError("not a number"); }), TypeError);
    assert.equal(log.span("left-open").recording, true);
  } finally {
    host.uninstall();
  }
  assert.deepEqual(host.spans, [
    { name: "parse", parent: undefined, attributes: {}, error: "TypeError: not a number", ended: true },
    { name: "left-open", parent: undefined, attributes: {}, error: undefined, ended: false },
  ]);
  assert.equal(log.span("no-host").recording, false, "no host installed: nothing opened");
});

test("a missing read and a terminal error reach the test", () => {
  const host = new FakeHost();
  const waiting = reconcile(Greeter, greeting, { host, event: "resync" });
  assert.equal(waiting.keepChildren, true);
  assert.equal(waiting.requeueAfter, 30);
  assert.deepEqual(host.events, [{ type: "Warning", reason: "Waiting", action: "Reconcile", note: "no settings yet" }]);
  assert.deepEqual(host.spans.map((s) => [s.name, s.error]), [["read-settings", "no settings"]]);
  assert.throws(() => reconcile(Greeter, { ...greeting, spec: { message: "" } }), (e) => {
    assert.ok(e instanceof Terminal);
    assert.deepEqual(e.status, { phase: "Failed" });
    return true;
  });
});

test("the fake stores writes and answers like an API server", () => {
  const host = new FakeHost().install();
  try {
    const cms = new Context("added", "demo", "x").api("v1", "ConfigMap", "demo");
    cms.create({ metadata: { name: "a", labels: { app: "web" } }, data: { k: "1" } });
    assert.throws(() => cms.create({ metadata: { name: "a" } }), AlreadyExists);
    cms.patch("a", { data: { k: null, j: "2" } });
    assert.deepEqual(host.get("v1", "ConfigMap", "demo", "a").data, { j: "2" });
    assert.deepEqual(cms.list({ labelSelector: "app=web" }).map((o) => o.metadata.name), ["a"]);
    assert.deepEqual(cms.list({ labelSelector: "app!=web" }), []);
    cms.delete("a");
    assert.equal(cms.getOpt("a"), undefined);
    assert.throws(() => cms.delete("a"), NotFound);
  } finally {
    host.uninstall();
  }
  assert.throws(() => new Context("added", "demo", "x").api("v1", "ConfigMap", "demo").get("a"), /no FakeHost installed/);
});

test("the default delete lets the children follow and an override may keep them", () => {
  // The reconcile keeps the children while it waits; deleted, they follow.
  const deleted = reconcile(Greeter, greeting, { host: new FakeHost(), event: "deleted" });
  assert.equal(deleted.keepChildren, false);
  assert.equal(deleted.requeueAfter, 30);
  class Archive extends Greeter {
    delete() {
      return new Outcome().keepChildren();
    }
  }
  assert.equal(reconcile(Archive, greeting, { host: new FakeHost(), event: "deleted" }).keepChildren, true);
});

class LeastLoaded extends Scheduler {
  schedule(pod, nodes) {
    const needed = podRequests(pod);
    const fitting = nodes.filter((n) => n.ready() && !n.unschedulable() && n.fits(needed));
    if (fitting.length === 0) return new Unschedulable(`0/${nodes.length} nodes are available`);
    return fitting.reduce((best, n) => (n.pods < best.pods ? n : best)).name;
  }
}

test("schedule hands the policy the Nodes and bound Pods as the host does", () => {
  const nodes = [node("b1", { cpu: "2" }), node("a1", { cpu: "2" }), node("c1", { ready: false })];
  const busy = { spec: { nodeName: "a1", containers: [{ resources: { requests: { cpu: "500m" } } }] } };
  const infos = nodeInfos(nodes, [busy]);
  assert.deepEqual(infos.map((i) => i.name), ["a1", "b1", "c1"], "in name order, as the host hands them");
  assert.equal(infos[0].allocatable.cpu, 2000);
  assert.equal(infos[0].requested.cpu, 500);
  assert.equal(infos[0].pods, 1);
  assert.deepEqual(infos[1].requested, {});
  assert.ok(!infos[2].ready());
  const pending = { metadata: { name: "web" }, spec: { containers: [{ resources: { requests: { cpu: "1" } } }] } };
  assert.equal(schedule(LeastLoaded, pending, nodes, { pods: [busy] }), "b1");
  const huge = { spec: { containers: [{ resources: { requests: { cpu: "3" } } }] } };
  assert.throws(() => schedule(LeastLoaded, huge, nodes), /0\/3 nodes are available/);
  const cordoned = nodeInfos([node("x", { unschedulable: true, taints: [{ key: "k", effect: "NoSchedule" }] })])[0];
  assert.ok(cordoned.unschedulable());
  assert.deepEqual(cordoned.taints(), [{ key: "k", effect: "NoSchedule" }]);
});

test("schedule runs the policy under a fake host that keeps its log lines", () => {
  class Logged extends Scheduler {
    schedule(pod, nodes) {
      log.debug("picked", { node: nodes[0].name, candidates: nodes.length });
      return nodes[0].name;
    }
  }
  const host = new FakeHost();
  assert.equal(schedule(Logged, { spec: {} }, [node("a1")], { host }), "a1");
  assert.deepEqual(host.logs, [["debug", "picked", { node: "a1", candidates: "1" }]]);
  assert.equal(schedule(Logged, { spec: {} }, [node("b1")]), "b1");
});

test("reconcile and schedule hand the cluster given to the code under test", () => {
  const clusters = [];
  class Where extends Controller {
    reconcile(ctx) {
      clusters.push(ctx.cluster);
      return new Outcome();
    }
  }
  reconcile(Where, greeting, { cluster: "edge-3" });
  reconcile(Where, greeting);
  assert.deepEqual(clusters, ["edge-3", "default"]);
  class Named extends Scheduler {
    schedule() {
      return `${this.cluster}-node`;
    }
  }
  assert.equal(schedule(Named, { spec: {} }, [node("a1")], { cluster: "eu" }), "eu-node");
  assert.equal(schedule(Named, { spec: {} }, [node("a1")]), "default-node");
});

const alert = { apiVersion: "example.com/v1", kind: "Alert", metadata: { name: "disk-full", namespace: "ops" } };

class Notifier extends Controller {
  reconcile(ctx) {
    const r = http.request("POST", "https://hooks.example.com/notify?via=capstan", { json: { name: ctx.name } });
    if (!r.ok) throw new Transient(`hooks.example.com answered ${r.status}`);
    return new Outcome().status({ ticket: r.json().id });
  }
}

test("a stubbed origin answers and every request is recorded", () => {
  const host = new FakeHost([alert]).http("https://hooks.example.com:443", Response.ofJson({ id: 7 }, 201));
  const done = reconcile(Notifier, alert, { host });
  assert.deepEqual(done.status, { ticket: 7 });
  assert.equal(host.requests.length, 1);
  const [sent] = host.requests;
  assert.equal(sent.method, "POST");
  assert.equal(sent.url, "https://hooks.example.com/notify?via=capstan");
  assert.equal(sent.origin, "https://hooks.example.com");
  assert.deepEqual(sent.json(), { name: "disk-full" });
  assert.deepEqual(sent.headers, { "content-type": "application/json" });
  assert.deepEqual(host.calls.at(-1), ["http.request", sent]);
});

test("a stub may be a function of the request or an error, and other origins are refused", () => {
  const failing = new FakeHost([alert]).http("https://hooks.example.com", (req) =>
    req.json().name === "disk-full" ? new Response(503) : Response.ofJson({ id: 1 }),
  );
  assert.throws(() => reconcile(Notifier, alert, { host: failing }), /answered 503/);
  const refused = new FakeHost([alert]).http("https://hooks.example.com", new HttpError("connection-refused"));
  assert.throws(() => reconcile(Notifier, alert, { host: refused }), (e) => e instanceof HttpError && e.code === "connection-refused");
  const other = new FakeHost([alert]).http("http://hooks.example.com", new Response(200));
  assert.throws(
    () => reconcile(Notifier, alert, { host: other }),
    (e) => e.code === "http-request-denied" && /https:\/\/hooks.example.com is not stubbed/.test(e.message),
  );
  assert.deepEqual(other.requests.map((r) => r.origin), ["https://hooks.example.com"]);
  assert.throws(() => http.request("GET", "https://hooks.example.com"), /wasi:http runs only in a component/);
});
