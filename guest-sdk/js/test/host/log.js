import { calls } from "./fake.js";

/** Log lines are recorded only. */
export function log(level, message, fields) {
  calls.push(["log.log", level, message, fields]);
}
