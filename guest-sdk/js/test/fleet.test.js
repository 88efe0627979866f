// Fleet controllers (contract 0.4.0) on the programmable fake host:
// Manifest.clusters and Manifest.fleet, outcome.childIn, ctx.members and
// ctx.apiIn.
import assert from "node:assert/strict";
import { beforeEach, test } from "node:test";

import { ApiError, Controller, Denied, Manifest, NotFound, Outcome, exportComponent } from "../src/index.js";
import { Context } from "../src/context.js";
import { fromBytes, toBytes } from "../src/json.js";
import { ComponentError, calls, impl, reset } from "./host/fake.js";

beforeEach(reset);

const spread = {
  apiVersion: "example.com/v1",
  kind: "Spread",
  metadata: { name: "hi", namespace: "demo" },
  spec: { message: "hello" },
};
const configmap = (name, message) => ({
  apiVersion: "v1",
  kind: "ConfigMap",
  metadata: { name, namespace: "demo" },
  data: { message },
});
const request = (obj, cluster = "default", members = []) => ({
  event: "added",
  object: toBytes(obj),
  failedChildren: [],
  cluster,
  members,
});

test("a manifest declares no clusters and no fleet by default", () => {
  const component = new Manifest("plain").primary("v1", "ConfigMap").component(true);
  assert.deepEqual(component.clusters, []);
  assert.equal(component.fleet, undefined);
  assert.ok("fleet" in component, "the record field is there, as none");
});

test("clusters are given as arguments or arrays and add up in order", () => {
  const m = new Manifest("uniform").primary("v1", "ConfigMap").clusters("default", "eu-west").clusters(["us-east"]);
  m.clusters(["ap-south", "edge"], "lab");
  assert.deepEqual(m.component(true).clusters, ["default", "eu-west", "us-east", "ap-south", "edge", "lab"]);
  assert.equal(m.component(true).fleet, undefined);
  for (const wrong of [3, [3], null, undefined]) {
    assert.throws(() => new Manifest("x").clusters(wrong), (e) => e instanceof TypeError && /cluster names/.test(e.message));
  }
});

test("fleet fills the fleet record with a home and members", () => {
  const fleet = (m) => m.component(true).fleet;
  const base = new Manifest("spreader").primary("example.com/v1", "Spread").owns("v1", "ConfigMap");
  assert.deepEqual(fleet(base.fleet({ home: "default", members: ["eu-west", "us-east"] })), {
    home: "default",
    members: ["eu-west", "us-east"],
  });
  assert.deepEqual(fleet(new Manifest("a").fleet("hub")), { home: "hub", members: [] });
  assert.deepEqual(fleet(new Manifest("b").fleet({ home: "hub" })), { home: "hub", members: [] });
  assert.deepEqual(fleet(new Manifest("c").fleet()), { home: "default", members: [] });
  assert.deepEqual(fleet(new Manifest("d").fleet({ members: ["x"] })), { home: "default", members: ["x"] });
  // The last call wins; clusters stay as declared (the host ignores them for a fleet).
  const both = new Manifest("e").clusters("a").fleet("one").fleet({ home: "two", members: ["m"] }).component(true);
  assert.deepEqual([both.fleet, both.clusters], [{ home: "two", members: ["m"] }, ["a"]]);
  // The record is a copy: changing the members given later changes nothing.
  const members = ["p"];
  const m = new Manifest("f").fleet({ home: "h", members });
  members.push("q");
  assert.deepEqual(fleet(m), { home: "h", members: ["p"] });
  assert.throws(() => new Manifest("x").fleet({ home: 3 }), /fleet home/);
  assert.throws(() => new Manifest("x").fleet({ home: "h", members: ["a", 1] }), /cluster names/);
  assert.throws(() => new Manifest("x").fleet({ home: "h", members: "a" }), TypeError);
});

test("the exported manifest carries the fleet", () => {
  class Spreader extends Controller {
    manifest() {
      return new Manifest("spreader").primary("example.com/v1", "Spread").owns("v1", "ConfigMap").fleet({ home: "default", members: ["eu"] });
    }
  }
  const manifest = exportComponent({ controller: Spreader }).controller.manifest();
  assert.deepEqual(manifest.fleet, { home: "default", members: ["eu"] });
  assert.deepEqual(manifest.clusters, []);
  assert.equal(manifest.roles.reconcile, true);
});

test("childIn adds a member child serialized as child does", () => {
  assert.deepEqual(new Outcome().wit.memberChildren, []);
  const cm = configmap("hi-greeting", "héllo ✓");
  const o = new Outcome().child(cm).childIn("eu-west", cm).childIn("us-east", { kind: "Secret" }).wit;
  assert.deepEqual(o.memberChildren.map((c) => c.cluster), ["eu-west", "us-east"]);
  assert.ok(o.memberChildren[0].object instanceof Uint8Array);
  assert.deepEqual(o.memberChildren[0].object, o.children[0], "the same bytes as child()");
  assert.deepEqual(fromBytes(o.memberChildren[1].object), { kind: "Secret" });
  assert.equal(o.children.length, 1, "member children are not children of the own cluster");
  assert.throws(() => new Outcome().childIn(undefined, cm), TypeError);
});

test("the members of the request are on the context", () => {
  const seen = [];
  class Spreader extends Controller {
    reconcile(ctx) {
      seen.push([ctx.cluster, [...ctx.members]]);
      return new Outcome();
    }
  }
  const { controller } = exportComponent({ controller: Spreader });
  controller.reconcile(request(spread, "default", ["eu-west", "us-east"]));
  controller.reconcile(request(spread, "eu-west"));
  controller.reconcile({ event: "added", object: toBytes(spread), failedChildren: [] });
  assert.deepEqual(seen, [
    ["default", ["eu-west", "us-east"]],
    ["eu-west", []],
    ["default", []],
  ]);
  assert.deepEqual(new Context("added", "demo", "hi", [], "default", ["a", "b"]).members, ["a", "b"]);
  assert.deepEqual(new Context("added", "demo", "hi").members, []);
  assert.ok(Object.isFrozen(new Context("added", "demo", "hi", [], "default", ["a"]).members));
});

test("apiIn reads with getIn and listIn", () => {
  const stored = configmap("hi-greeting", "hello");
  impl["kube.getIn"] = () => toBytes(stored);
  impl["kube.listIn"] = () => [toBytes(stored)];
  const ctx = new Context("added", "demo", "hi", [], "default", ["eu"]);
  const cms = ctx.apiIn("eu", "v1", "ConfigMap", "demo");
  assert.equal(cms.cluster, "eu");
  assert.deepEqual(cms.get("hi-greeting"), stored);
  assert.deepEqual(cms.list({ labelSelector: "app=web" }), [stored]);
  assert.deepEqual(calls, [
    ["kube.getIn", "eu", { kind: { group: "", version: "v1", kind: "ConfigMap" }, namespace: "demo", name: "hi-greeting" }],
    ["kube.listIn", "eu", { group: "", version: "v1", kind: "ConfigMap" }, "demo", { labelSelector: "app=web", fieldSelector: undefined }],
  ]);
  impl["kube.getIn"] = () => {
    throw new ComponentError({ tag: "not-found", val: { code: 404, reason: "NotFound", message: "gone" } });
  };
  assert.equal(cms.getOpt("hi-greeting"), undefined);
  assert.throws(() => cms.get("hi-greeting"), NotFound);
  impl["kube.getIn"] = (cluster) => {
    throw new ComponentError({ tag: "denied", val: `cluster ${cluster} is not a member` });
  };
  assert.throws(() => ctx.apiIn("mars", "v1", "ConfigMap", "demo").getOpt("x"), (e) => e instanceof Denied && /cluster mars is not a member/.test(e.message));
  // ctx.api stays the request's own cluster.
  impl["kube.get"] = () => toBytes(stored);
  assert.deepEqual(ctx.api("v1", "ConfigMap", "demo").get("hi-greeting"), stored);
  assert.equal(calls.at(-1)[0], "kube.get");
  assert.equal(ctx.api("v1", "ConfigMap", "demo").cluster, undefined);
  assert.throws(() => ctx.apiIn(undefined, "v1", "ConfigMap"), TypeError);
});

test("writes through apiIn are refused without calling the host", () => {
  const cms = new Context("added", "demo", "hi", [], "default", ["eu"]).apiIn("eu", "v1", "ConfigMap", "demo");
  const cm = configmap("x", "y");
  const writes = {
    create: () => cms.create(cm),
    replace: () => cms.replace(cm),
    patch: () => cms.patch("x", { data: {} }),
    apply: () => cms.apply(cm, true),
    delete: () => cms.delete("x"),
    replaceStatus: () => cms.replaceStatus(cm),
    patchStatus: () => cms.patchStatus("x", { status: {} }),
    applyStatus: () => cms.applyStatus(cm),
  };
  for (const [method, write] of Object.entries(writes)) {
    assert.throws(write, (e) => {
      assert.ok(e instanceof Denied && e instanceof ApiError, method);
      assert.match(e.message, /a fleet controller writes in member clusters through Outcome\.childIn/);
      assert.ok(e.message.includes(`Api.${method} `), e.message);
      return true;
    });
  }
  assert.deepEqual(calls, []);
});
