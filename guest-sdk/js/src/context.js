// What a callback gets besides the object: the `Context`.

import { record } from "capstan:operator/events@0.4.0";

import { Api, call } from "./api.js";
import { log } from "./log.js";

/**
 * Why the host called: derived from state by comparing the object with what
 * this controller last handled successfully.
 */
export const EventKind = Object.freeze({
  /** Not handled before (or not since the host started). */
  ADDED: "added",
  /** Changed since last handled. */
  MODIFIED: "modified",
  /** Being deleted. */
  DELETED: "deleted",
  /** Unchanged: periodic resync, requeue, a child or watched object changed. */
  RESYNC: "resync",
});

/**
 * A child of the previous outcome for this object that the API server (or
 * the host) refused, as `ctx.failedChildren` lists it: `{apiVersion, kind,
 * namespace, name, code, reason, message, cluster}` (`namespace` is
 * `undefined` for a cluster-scoped child; `cluster` is the member cluster of
 * a fleet controller's child placed with `outcome.childIn`, `undefined` for
 * one in the reconciled object's own cluster).
 * @typedef {{apiVersion: string, kind: string, namespace: string | undefined, name: string, code: number, reason: string, message: string, cluster: string | undefined}} FailedChild
 */

/**
 * The `FailedChild` for a WIT `child-failure`.
 * @param {{child: {kind: {group: string, version: string, kind: string}, namespace?: string, name: string}, code: number, reason: string, message: string, cluster?: string}} failure
 * @returns {FailedChild}
 */
export function failedChild(failure) {
  const { group, version, kind } = failure.child.kind;
  return Object.freeze({
    apiVersion: group ? `${group}/${version}` : version,
    kind,
    namespace: failure.child.namespace ?? undefined,
    name: failure.child.name,
    code: failure.code,
    reason: failure.reason,
    message: failure.message,
    cluster: failure.cluster ?? undefined,
  });
}

/**
 * Handed to every callback: the event kind, the reconciled object's
 * cluster, namespace and name, the children refused last time, the member
 * clusters of a fleet controller, the Kubernetes client, events and logging.
 */
export class Context {
  /**
   * Made by the SDK for each call.
   * @param {"added" | "modified" | "deleted" | "resync"} event
   * @param {string | undefined} namespace
   * @param {string} name
   * @param {readonly FailedChild[]} [failedChildren]
   * @param {string} [cluster]
   * @param {readonly string[]} [members]
   */
  constructor(event, namespace, name, failedChildren = [], cluster = "default", members = []) {
    /** Why this reconcile happens. */
    this.event = event;
    /** Namespace of the reconciled object (`undefined` if cluster-scoped). */
    this.namespace = namespace;
    /** Name of the reconciled object. */
    this.name = name;
    /**
     * Children of the previous outcome for this object that were refused
     * and have not been applied since; empty when all were applied.
     * @type {readonly FailedChild[]}
     */
    this.failedChildren = Object.freeze([...failedChildren]);
    /**
     * The name of the cluster the object is in: `default` for the host's own
     * cluster, else the name the host engaged it by (`capstan run --cluster
     * NAME=...`, or a kubeconfig Secret's). `api` and `record` address this
     * cluster; a controller run over a fleet tells the clusters apart by it.
     */
    this.cluster = cluster;
    /**
     * The member clusters of a fleet controller engaged now, in order (see
     * `Manifest.fleet`): where `outcome.childIn` may place children and
     * `apiIn` may read. Empty for a uniform controller.
     * @type {readonly string[]}
     */
    this.members = Object.freeze([...members]);
    /** Structured logging under this reconcile's span. */
    this.log = log;
  }

  /**
   * A client for `kind` in `namespace` (`undefined`: all namespaces for
   * lists, or a cluster-scoped kind).
   * @param {string} apiVersion
   * @param {string} kind
   * @param {string} [namespace]
   */
  api(apiVersion, kind, namespace) {
    return new Api(apiVersion, kind, namespace);
  }

  /**
   * A client that reads `kind` in `namespace` of the cluster named
   * `cluster`: the request's own (`ctx.cluster`), or for a fleet controller
   * its home or one of `ctx.members`; the host refuses any other with
   * `Denied`. `get`, `getOpt` and `list` work as on `api` (the grants are
   * the same); writes throw `Denied` without calling the host: a fleet
   * controller writes in its members through `outcome.childIn`.
   *
   * ```js
   * for (const member of ctx.members) {
   *   const there = ctx.apiIn(member, "v1", "ConfigMap", ctx.namespace).getOpt(`${ctx.name}-greeting`);
   * }
   * ```
   * @param {string} cluster
   * @param {string} apiVersion
   * @param {string} kind
   * @param {string} [namespace]
   */
  apiIn(cluster, apiVersion, kind, namespace) {
    if (typeof cluster !== "string") throw new TypeError(`cluster must be a cluster name (a string), not ${typeof cluster}`);
    return new Api(apiVersion, kind, namespace, { cluster });
  }

  /**
   * Records an Event right away; throws an `ApiError` when the host cannot.
   * @param {import("./outcome.js").Event} event
   */
  record(event) {
    call(record, event.wit);
  }

  /**
   * Opens a span of this reconcile (see `Log.span`); end it with `end()`,
   * or use `ctx.log.inSpan(name, attributes, fn)`.
   * @param {string} name
   * @param {Record<string, unknown>} [attributes]
   */
  span(name, attributes) {
    return log.span(name, attributes);
  }
}
