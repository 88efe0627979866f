// Tests of the condition helpers: node --test test/conditions.test.js
import assert from "node:assert/strict";
import { test } from "node:test";

import { findCondition, isConditionTrue, removeCondition, setCondition, timestamp } from "../src/index.js";

const T0 = "2024-05-01T10:00:00Z";
const T1 = "2024-05-02T11:30:00Z";
const ready = (status, extra = {}) => ({ lastTransitionTime: T0, message: "m", reason: "R", status, type: "Ready", ...extra });

test("a new condition is appended with the transition time now", () => {
  const before = Math.floor(Date.now() / 1000) * 1000;
  const [c] = setCondition(undefined, "Ready", "True", "Reconciled", "all applied", 3);
  const after = Date.now();
  assert.deepEqual(Object.keys(c), ["lastTransitionTime", "message", "observedGeneration", "reason", "status", "type"]);
  assert.deepEqual([c.type, c.status, c.reason, c.message, c.observedGeneration], ["Ready", "True", "Reconciled", "all applied", 3]);
  assert.match(c.lastTransitionTime, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
  const when = Date.parse(c.lastTransitionTime);
  assert.ok(before <= when && when <= after, `${c.lastTransitionTime} not between ${before} and ${after}`);
  const others = setCondition([{ type: "Synced", status: "True" }], { type: "Ready", status: false, reason: "Failed", message: "no", now: T1 });
  assert.deepEqual(others.map((x) => x.type), ["Synced", "Ready"]);
  assert.deepEqual(others[1], { lastTransitionTime: T1, message: "no", reason: "Failed", status: "False", type: "Ready" });
});

test("the transition time is kept while the status stays the same", () => {
  const previous = [{ type: "Synced", status: "True" }, ready("True", { observedGeneration: 1 })];
  const out = setCondition(previous, "Ready", "True", "StillFine", "still", 2, T1);
  assert.deepEqual(out, [
    { type: "Synced", status: "True" },
    { lastTransitionTime: T0, message: "still", observedGeneration: 2, reason: "StillFine", status: "True", type: "Ready" },
  ]);
  // The arguments are left alone.
  assert.equal(previous[1].reason, "R");
  assert.equal(previous[1].observedGeneration, 1);
});

test("the transition time is now when the status changes or was missing", () => {
  const out = setCondition([ready("True", { observedGeneration: 4 })], { type: "Ready", status: "False", reason: "Broken", message: "x", now: T1 });
  assert.deepEqual(out, [{ lastTransitionTime: T1, message: "x", reason: "Broken", status: "False", type: "Ready" }]);
  const stamp = new Date(Date.UTC(2024, 4, 3, 6, 15, 59, 999));
  const missing = setCondition([{ type: "Ready", status: "True" }], { type: "Ready", status: true, reason: "Ok", message: "", now: stamp });
  assert.equal(missing[0].lastTransitionTime, "2024-05-03T06:15:59Z");
  assert.equal(timestamp(stamp), "2024-05-03T06:15:59Z");
  const unknown = setCondition([], "Ready", "Unknown", "Pending", "", undefined, stamp);
  assert.equal(unknown[0].status, "Unknown");
  assert.ok(!("observedGeneration" in unknown[0]));
});

test("a status must be True, False or Unknown, and a type is required", () => {
  assert.throws(() => setCondition([], "Ready", "yes", "R", "m"), TypeError);
  assert.throws(() => setCondition([], { status: "True", reason: "R", message: "m" }), TypeError);
});

test("findCondition returns a copy of the condition of a type", () => {
  const conditions = [{ type: "Synced", status: "False" }, ready("True")];
  const found = findCondition(conditions, "Ready");
  assert.deepEqual(found, ready("True"));
  assert.notEqual(found, conditions[1]);
  assert.equal(findCondition(conditions, "Missing"), undefined);
  assert.equal(findCondition(undefined, "Ready"), undefined);
  assert.equal(isConditionTrue(conditions, "Ready"), true);
  assert.equal(isConditionTrue(conditions, "Synced"), false);
  assert.deepEqual(removeCondition(conditions, "Synced"), [ready("True")]);
  assert.equal(conditions.length, 2);
});
