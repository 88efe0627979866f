// capstan-guest/testing for fleet controllers: members, objects per
// cluster, reads in members and the outcome's member children.
import assert from "node:assert/strict";
import { test } from "node:test";

import { Context, Controller, Denied, Manifest, NotFound, Outcome } from "../src/index.js";
import { FakeHost, reconcile } from "../testing/index.js";

const spread = {
  apiVersion: "example.com/v1",
  kind: "Spread",
  metadata: { name: "hi", namespace: "demo", generation: 2 },
  spec: { message: "hello" },
};
const configmap = (name, message, labels = {}, namespace = "demo") => ({
  apiVersion: "v1",
  kind: "ConfigMap",
  metadata: { name, namespace, labels },
  data: { message },
});

class Spreader extends Controller {
  manifest() {
    return new Manifest("spreader").primary("example.com/v1", "Spread").owns("v1", "ConfigMap").fleet();
  }

  reconcile(ctx, obj) {
    const name = `${ctx.name}-greeting`;
    const outcome = new Outcome();
    const seen = {};
    for (const member of ctx.members) {
      outcome.childIn(member, configmap(name, obj.spec.message));
      const there = ctx.apiIn(member, "v1", "ConfigMap", ctx.namespace).getOpt(name);
      seen[member] = there === undefined ? null : there.data.message;
    }
    return outcome.status({ seen });
  }
}

test("the fake reads in each member and the outcome's member children are exposed", () => {
  const host = new FakeHost([spread, configmap("hi-greeting", "own")], { clusters: { eu: [configmap("hi-greeting", "old")] } });
  host.put(configmap("hi-greeting", "hello"), "us");
  const done = reconcile(Spreader, spread, { host, members: ["eu", "us", "ap"] });
  assert.deepEqual(done.status, { seen: { eu: "old", us: "hello", ap: null } });
  assert.deepEqual(
    done.memberChildren.map((c) => c.cluster),
    ["eu", "us", "ap"],
  );
  assert.deepEqual(done.memberChildren[0], { cluster: "eu", object: configmap("hi-greeting", "hello") });
  assert.deepEqual(done.childrenIn("ap"), [configmap("hi-greeting", "hello")]);
  assert.deepEqual(done.childrenIn("mars"), []);
  assert.deepEqual(done.children, []);
  assert.deepEqual(host.calls.map((c) => c.slice(0, 2)), [["kube.getIn", "eu"], ["kube.getIn", "us"], ["kube.getIn", "ap"]]);
  assert.deepEqual(host.get("v1", "ConfigMap", "demo", "hi-greeting", "us").data, { message: "hello" });
  assert.deepEqual(host.get("v1", "ConfigMap", "demo", "hi-greeting").data, { message: "own" });
  assert.deepEqual([host.cluster, host.members], ["default", ["eu", "us", "ap"]]);
  // Without members, nothing is spread.
  const plain = reconcile(Spreader, spread);
  assert.deepEqual([plain.memberChildren, plain.status], [[], { seen: {} }]);
});

test("the fake denies a read in a cluster neither the request's own nor a member", () => {
  class Prober extends Controller {
    reconcile(ctx) {
      const found = {};
      for (const cluster of ["hub", "eu", "mars"]) {
        try {
          found[cluster] = ctx.apiIn(cluster, "v1", "ConfigMap", "demo").list().map((o) => o.data.message);
        } catch (e) {
          if (!(e instanceof Denied)) throw e;
          found[cluster] = e.message;
        }
      }
      return new Outcome().status(found);
    }
  }
  const host = new FakeHost([configmap("own", "in hub")], {
    clusters: { eu: [configmap("a", "in eu")], mars: [configmap("b", "in mars")], hub: [configmap("c", "named")] },
  });
  const done = reconcile(Prober, spread, { host, cluster: "hub", members: ["eu"] });
  assert.deepEqual(done.status.hub, ["named", "in hub"], "the own cluster by name: its objects");
  assert.deepEqual(done.status.eu, ["in eu"]);
  assert.match(done.status.mars, /cluster "mars" is neither this request's own \("hub"\) nor one of its members \("eu"\)/);
});

test("the fake lists in a member by namespace and label, and nothing is written there", () => {
  const host = new FakeHost([], {
    clusters: { eu: [configmap("a", "1", { app: "web" }), configmap("b", "2", { app: "db" }), configmap("x", "3", { app: "web" }, "other")] },
  });
  host.members = ["eu"];
  host.install();
  try {
    const ctx = new Context("added", "demo", "hi", [], "default", ["eu"]);
    const names = (objs) => objs.map((o) => o.metadata.name);
    assert.deepEqual(names(ctx.apiIn("eu", "v1", "ConfigMap", "demo").list()), ["a", "b"]);
    assert.deepEqual(names(ctx.apiIn("eu", "v1", "ConfigMap").list({ labelSelector: "app=web" })), ["a", "x"]);
    assert.deepEqual(ctx.apiIn("eu", "v1", "Secret", "demo").list(), []);
    assert.deepEqual(ctx.api("v1", "ConfigMap", "demo").list(), [], "the own cluster holds none of them");
    assert.throws(() => ctx.apiIn("eu", "v1", "ConfigMap", "demo").get("x"), NotFound);
    assert.throws(() => ctx.apiIn("eu", "v1", "ConfigMap", "demo").create(configmap("new", "no")), Denied);
  } finally {
    host.uninstall();
  }
  assert.equal(host.get("v1", "ConfigMap", "demo", "new", "eu"), undefined);
  assert.deepEqual(host.calls.map((c) => c[0]), ["kube.listIn", "kube.listIn", "kube.listIn", "kube.list", "kube.getIn"]);
});

test("refused member children carry their cluster", () => {
  class Reporter extends Controller {
    reconcile(ctx) {
      return new Outcome().status({ refused: ctx.failedChildren.map((c) => `${c.cluster}/${c.name}`) });
    }
  }
  const refused = { apiVersion: "v1", kind: "ConfigMap", namespace: "demo", name: "hi-greeting", code: 403, reason: "Forbidden", message: "no", cluster: "eu" };
  const done = reconcile(Reporter, spread, { host: new FakeHost(), members: ["eu"], failedChildren: [refused] });
  assert.deepEqual(done.status, { refused: ["eu/hi-greeting"] });
});
