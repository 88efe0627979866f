// What a reconcile returns: the `Outcome` builder, and `Event`s.

import { objectRef } from "./kinds.js";
import { toBytes } from "./json.js";

/**
 * A Kubernetes Event to record, made with `Event.normal` or `Event.warning`:
 *
 * ```js
 * Event.normal("Created", "Reconcile").note("configmap web created")
 * ```
 */
export class Event {
  /**
   * Prefer `Event.normal` and `Event.warning`.
   * @param {"normal" | "warning"} eventType
   * @param {string} reason
   * @param {string} action
   */
  constructor(eventType, reason, action) {
    /** @internal */
    this.wit = { eventType, reason, action, note: undefined, regarding: undefined };
  }

  /**
   * A Normal event: something expected happened. `reason` is short
   * UpperCamelCase (`Created`), `action` what was done (`Reconcile`).
   * @param {string} reason
   * @param {string} action
   */
  static normal(reason, action) {
    return new Event("normal", reason, action);
  }

  /**
   * A Warning event: something went wrong or needs attention.
   * @param {string} reason
   * @param {string} action
   */
  static warning(reason, action) {
    return new Event("warning", reason, action);
  }

  /** Human-readable detail. @param {string} note */
  note(note) {
    this.wit.note = note;
    return this;
  }

  /**
   * The object the event is about, when it is not the one being reconciled.
   * @param {string} apiVersion
   * @param {string} kind
   * @param {string | undefined} namespace
   * @param {string} name
   */
  regarding(apiVersion, kind, namespace, name) {
    this.wit.regarding = objectRef(apiVersion, kind, namespace, name);
    return this;
  }
}

/**
 * What a successful reconcile asks the host to do. Every method returns the
 * outcome, so calls chain:
 *
 * ```js
 * new Outcome().child(configmap).status({ ready: true }).requeueAfter(60);
 * ```
 *
 * An outcome lists every child there should be: children of owned kinds it
 * does not list are deleted (pruned), unless it says `keepChildren()`.
 */
export class Outcome {
  /** Nothing to do. */
  constructor() {
    /** @internal */
    this.wit = {
      children: [],
      status: undefined,
      events: [],
      requeueAfterMs: undefined,
      childrenPolicy: "prune",
      memberChildren: [],
    };
  }

  /**
   * A desired child object (with `apiVersion` and `kind`). The host applies
   * it by server-side apply, sets a controller ownerReference, defaults its
   * namespace to the owner's, and prunes children of owned kinds that a
   * later outcome no longer lists (unless it says `keepChildren()`).
   * @param {object} child
   */
  child(child) {
    this.wit.children.push(toBytes(child));
    return this;
  }

  /**
   * A desired child object in the member cluster `cluster` of a fleet
   * controller (see `Manifest.fleet`), one of `ctx.members`. The host
   * applies it there by server-side apply, marks it with labels and
   * annotations naming its owner (an ownerReference cannot cross clusters),
   * defaults its namespace to the owner's, and prunes children of owned
   * kinds a later outcome no longer lists in that member, as for `child`:
   *
   * ```js
   * for (const member of ctx.members) outcome.childIn(member, configmap);
   * ```
   * @param {string} cluster
   * @param {object} child
   */
  childIn(cluster, child) {
    if (typeof cluster !== "string") throw new TypeError(`cluster must be a cluster name (a string), not ${typeof cluster}`);
    this.wit.memberChildren.push({ cluster, object: toBytes(child) });
    return this;
  }

  /**
   * The desired `status` of the reconciled object (the status field only),
   * written through the status subresource.
   * @param {object} status
   */
  status(status) {
    this.wit.status = toBytes(status);
    return this;
  }

  /** An event to record. @param {Event} event */
  event(event) {
    this.wit.events.push(event.wit);
    return this;
  }

  /**
   * Keeps existing children as they are: the children listed (if any) are
   * applied, none is deleted. Without it, children of owned kinds the
   * outcome does not list are pruned, which is right for an outcome that
   * lists every child there should be and wrong for one that, say, could
   * not read everything it needs yet:
   *
   * ```js
   * if (source === undefined) return new Outcome().keepChildren().requeueAfter(30);
   * ```
   *
   * Kept children stay owned: they are deleted with the object later. From
   * `delete()` it keeps them for good: the host removes its ownerReference
   * from every child before it removes its finalizer, so the garbage
   * collector leaves them (other owners' references stay).
   * `keepChildren(false)` restores the default (prune).
   * @param {boolean} [keep]
   */
  keepChildren(keep = true) {
    this.wit.childrenPolicy = keep ? "keep" : "prune";
    return this;
  }

  /** True if `keepChildren()` was called: no child is pruned. */
  get keepsChildren() {
    return this.wit.childrenPolicy === "keep";
  }

  /** Reconcile this object again after `seconds`, even if nothing changes. @param {number} seconds */
  requeueAfter(seconds) {
    this.wit.requeueAfterMs = BigInt(Math.max(0, Math.floor(seconds * 1000)));
    return this;
  }
}
