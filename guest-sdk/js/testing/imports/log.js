// `capstan:operator/log`: lines go to the installed FakeHost, if any.
import { installed } from "../host.js";

export function log(level, message, fields) {
  installed()?.logs.push([level, message, Object.fromEntries(fields.map(({ key, value }) => [key, value]))]);
}
