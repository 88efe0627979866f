// Status conditions (`metav1.Condition`) as plain objects, maintained the
// way controller-runtime's `meta.SetStatusCondition` does: one condition per
// type, `lastTransitionTime` kept while the status stays the same and set to
// now when it changes.
//
//   const conditions = setCondition(obj.status?.conditions, "Ready", "True", "Reconciled", "all children applied",
//     obj.metadata.generation);
//   return new Outcome().status({ conditions });
//
// The functions never change the array or the objects they are given.

/**
 * A Kubernetes timestamp: RFC 3339, UTC, whole seconds, e.g.
 * `2025-01-31T12:00:00Z`.
 * @param {Date} [date] default: now
 * @returns {string}
 */
export function timestamp(date = new Date()) {
  return date.toISOString().replace(/\.\d+Z$/, "Z");
}

/** @param {unknown} status */
function conditionStatus(status) {
  if (status === true) return "True";
  if (status === false) return "False";
  if (status !== "True" && status !== "False" && status !== "Unknown") {
    throw new TypeError(`condition status must be "True", "False" or "Unknown", not ${JSON.stringify(status)}`);
  }
  return status;
}

/** @param {any} value */
const clone = (value) => JSON.parse(JSON.stringify(value));

/**
 * The condition of this `type` in `conditions` (a copy), or `undefined`.
 * `conditions` may be `undefined` (no status yet).
 * @param {readonly any[] | undefined | null} conditions
 * @param {string} type
 */
export function findCondition(conditions, type) {
  const found = (conditions ?? []).find((c) => c && typeof c === "object" && c.type === type);
  return found === undefined ? undefined : clone(found);
}

/**
 * True if the condition of this `type` has status `"True"`.
 * @param {readonly any[] | undefined | null} conditions
 * @param {string} type
 */
export function isConditionTrue(conditions, type) {
  return findCondition(conditions, type)?.status === "True";
}

/**
 * `conditions` with the condition of this type set, as a new array (the
 * argument is not changed); `conditions` may be `undefined`.
 *
 * - A new type is appended, with `lastTransitionTime` now.
 * - An existing one keeps its place. Its `lastTransitionTime` is kept when
 *   the status is the same as before and set to now when it changes (or
 *   was missing); `reason`, `message` and `observedGeneration` are replaced
 *   (an `observedGeneration` left out is removed, as controller-runtime
 *   does for 0).
 *
 * Takes either positional arguments or one object:
 *
 * ```js
 * setCondition(conditions, "Ready", "True", "Reconciled", "all applied", generation);
 * setCondition(conditions, { type: "Ready", status: false, reason: "Failed", message: "no", observedGeneration: generation });
 * ```
 *
 * `status` is `"True"`, `"False"`, `"Unknown"` or a boolean. `now` (a `Date`
 * or an RFC 3339 string) stands in for the current time, for tests. Keys are
 * written in the order Kubernetes serializes a `metav1.Condition`.
 * @param {readonly any[] | undefined | null} conditions
 * @param {string | {type: string, status: string | boolean, reason: string, message: string, observedGeneration?: number, now?: Date | string}} typeOrCondition
 * @param {string | boolean} [status]
 * @param {string} [reason]
 * @param {string} [message]
 * @param {number} [observedGeneration]
 * @param {Date | string} [now]
 * @returns {any[]}
 */
export function setCondition(conditions, typeOrCondition, status, reason, message, observedGeneration, now) {
  const c =
    typeOrCondition !== null && typeof typeOrCondition === "object"
      ? typeOrCondition
      : { type: typeOrCondition, status, reason, message, observedGeneration, now };
  if (typeof c.type !== "string" || c.type === "") throw new TypeError("a condition needs a type");
  const newStatus = conditionStatus(c.status);
  const result = (conditions ?? []).map(clone);
  const index = result.findIndex((x) => x && x.type === c.type);
  const old = index < 0 ? undefined : result[index];
  const transition =
    old && old.status === newStatus && old.lastTransitionTime
      ? old.lastTransitionTime
      : typeof c.now === "string"
        ? c.now
        : timestamp(c.now ?? new Date());
  const condition = {
    lastTransitionTime: transition,
    message: c.message ?? "",
    ...(c.observedGeneration !== undefined && c.observedGeneration !== null ? { observedGeneration: c.observedGeneration } : {}),
    reason: c.reason ?? "",
    status: newStatus,
    type: c.type,
  };
  if (index < 0) result.push(condition);
  else result[index] = condition;
  return result;
}

/**
 * `conditions` without the condition of this `type`, as a new array.
 * @param {readonly any[] | undefined | null} conditions
 * @param {string} type
 */
export function removeCondition(conditions, type) {
  return (conditions ?? []).filter((c) => !(c && c.type === type)).map(clone);
}
