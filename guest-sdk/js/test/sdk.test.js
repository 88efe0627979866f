// Unit tests of the library on a fake host:
//   node --import ./test/register.js --test test/
import assert from "node:assert/strict";
import { beforeEach, test } from "node:test";

import {
  Controller,
  Denied,
  Event,
  Manifest,
  NotFound,
  Outcome,
  PatchType,
  Terminal,
  Transient,
  exportController,
} from "../src/index.js";
import { Context } from "../src/context.js";
import { fromBytes, toBytes, utf8Decode, utf8Encode } from "../src/json.js";
import { ComponentError, calls, impl, reset } from "./host/fake.js";

beforeEach(reset);

const status = (code, reason) => ({ code, reason, message: `${reason} message` });
const greeting = { apiVersion: "example.com/v1", kind: "Greeting", metadata: { name: "hi", namespace: "demo" } };

test("the fallback utf-8 codec agrees with TextEncoder and TextDecoder", () => {
  for (const s of ["", "plain", "héllo ✓", "emoji 🎉 and 𝄞", "\u0000\u007f\u0080\u07ff\u0800\uffff"]) {
    assert.deepEqual(utf8Encode(s), new TextEncoder().encode(s), s);
    assert.equal(utf8Decode(new TextEncoder().encode(s)), s, s);
  }
  assert.equal(utf8Decode(Uint8Array.of(0xff, 0x41)), "\ufffdA");
  assert.deepEqual(fromBytes(toBytes({ a: ["✓", 1] })), { a: ["✓", 1] });
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
  assert.deepEqual(m.owns, [{ group: "", version: "v1", kind: "ConfigMap" }]);
  assert.equal(m.resyncSeconds, 2);
  assert.equal(m.maxConcurrency, 1);
  assert.equal(m.finalizer, undefined);
  const o = new Outcome().child({ kind: "ConfigMap" }).event(Event.warning("Odd", "Check").note("n")).requeueAfter(2.5).wit;
  assert.equal(o.requeueAfterMs, 2500n);
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

const run = (event, spec) => exportController(Probe).reconcile(event, toBytes({ ...greeting, spec }));

test("callbacks are chosen by event kind, and delete defaults apart", () => {
  assert.deepEqual(fromBytes(run("added", {}).status), { seen: "added", name: "hi", namespace: "demo" });
  assert.deepEqual(fromBytes(run("resync", {}).status).seen, "resync");
  assert.equal(run("deleted", {}).events[0].reason, "Deleted");
  assert.deepEqual(run("modified", { mode: "nothing" }), new Outcome().wit);
});

test("what reconcile throws becomes the reconcile-error the host expects", () => {
  assert.throws(() => run("added", { mode: "terminal" }), { tag: "terminal", val: "bad spec" });
  assert.throws(() => run("added", { mode: "transient" }), { tag: "transient", val: "later" });
  assert.throws(() => run("added", { mode: "denied" }), { tag: "terminal", val: "denied by grants: no list" });
  assert.throws(() => run("added", { mode: "missing" }), { tag: "transient", val: "not found: gone" });
  assert.throws(() => run("added", { mode: "bug" }), (e) => e.tag === "transient" && e.val.startsWith("unhandled TypeError"));
  assert.ok(calls.some(([f, level, message]) => f === "log.log" && level === "error" && message === "unhandled exception in reconcile"));
});

test("an object that is not JSON is a terminal error", () => {
  assert.throws(() => exportController(Probe).reconcile("added", Uint8Array.of(0x7b)), (e) => e.tag === "terminal");
});
