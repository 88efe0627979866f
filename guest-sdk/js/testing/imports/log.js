// `capstan:operator/log`: lines go to the installed FakeHost, if any.
import { installed } from "../host.js";

export function log(level, message, fields) {
  installed()?.logs.push([level, message, Object.fromEntries(fields.map(({ key, value }) => [key, value]))]);
}

/** Opens a span on the installed FakeHost (none: `0n`). */
export function startSpan(name, attributes) {
  const host = installed();
  if (!host) return 0n;
  const open = host.openSpans;
  const parent = open.length ? host.spans[open[open.length - 1]].name : undefined;
  open.push(host.spans.length);
  host.spans.push({
    name,
    parent,
    attributes: Object.fromEntries(attributes.map(({ key, value }) => [key, value])),
    error: undefined,
    ended: false,
  });
  return BigInt(host.spans.length);
}

/** Ends a span and those opened inside it, as the host does. */
export function endSpan(id, error) {
  const host = installed();
  if (!host) return;
  const index = Number(id) - 1;
  const at = host.openSpans.indexOf(index);
  if (at < 0) return;
  host.spans[index].error = error;
  for (const i of host.openSpans.splice(at)) host.spans[i].ended = true;
}
