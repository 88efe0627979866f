import { calls } from "./fake.js";

/** Log lines are recorded only. */
export function log(level, message, fields) {
  calls.push(["log.log", level, message, fields]);
}

let lastSpan = 0n;

/** Spans are recorded only; each gets the next id. */
export function startSpan(name, attributes) {
  calls.push(["log.startSpan", name, attributes]);
  return ++lastSpan;
}

export function endSpan(id, error) {
  calls.push(["log.endSpan", id, error]);
}
