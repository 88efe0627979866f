// The Kubernetes client: `Api`, made by `ctx.api(...)`. Objects are plain
// JavaScript objects (parsed JSON); every call goes through the host, which
// checks it against the controller's grants, and throws an `ApiError`
// subclass on failure.

import * as kube from "capstan:operator/kube@0.4.0";

import { ApiError, BadRequest, Decode, Denied, apiError } from "./errors.js";
import { fromBytes, toBytes } from "./json.js";
import { gvk } from "./kinds.js";

/** Patch formats for `patch` and `patchStatus`. */
export const PatchType = Object.freeze({
  /** RFC 7386 JSON merge patch (an object). */
  MERGE: "merge",
  /** RFC 6902 JSON patch (an array of operations). */
  JSON: "json",
  /** Kubernetes strategic merge patch (built-in kinds only). */
  STRATEGIC: "strategic",
});

/** How dependents are treated by `delete`. */
export const Propagation = Object.freeze({
  /** The API server's default for the kind. */
  DEFAULT: "default",
  /** Delete dependents in the background. */
  BACKGROUND: "background",
  /** Delete dependents first. */
  FOREGROUND: "foreground",
  /** Leave dependents in place. */
  ORPHAN: "orphan",
});

/**
 * Calls a host import that returns `result<_, kube.error>`, throwing the
 * matching `ApiError`.
 * @template T
 * @param {(...args: any[]) => T} fn
 * @param {...any} args
 * @returns {T}
 */
export function call(fn, ...args) {
  try {
    return fn(...args);
  } catch (e) {
    // The bindings throw the `err` payload, wrapped (`payload`) or bare.
    const payload = e && typeof e === "object" && "payload" in e ? e.payload : e;
    if (payload && typeof payload === "object" && typeof payload.tag === "string") {
      throw apiError(payload);
    }
    throw e;
  }
}

/** @param {Uint8Array} bytes */
function decode(bytes) {
  let value;
  try {
    value = fromBytes(bytes);
  } catch (e) {
    throw new Decode(String(e));
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw new Decode("expected a JSON object");
  }
  return value;
}

/** @param {unknown} value */
function encode(value) {
  try {
    return toBytes(value);
  } catch (e) {
    throw new BadRequest(String(e));
  }
}

/**
 * A client for one kind in one namespace (`undefined`: all namespaces for
 * `list`, or a cluster-scoped kind):
 *
 * ```js
 * const deployments = ctx.api("apps/v1", "Deployment", ctx.namespace);
 * const web = deployments.getOpt("web");
 * ```
 *
 * One made with a `cluster` (`ctx.apiIn(...)`) reads in that cluster: `get`,
 * `getOpt` and `list` work, and every write throws `Denied` without calling
 * the host (a fleet controller writes in its members through
 * `outcome.childIn`).
 */
export class Api {
  /**
   * Prefer `ctx.api(...)` and `ctx.apiIn(...)`.
   * @param {string} apiVersion
   * @param {string} kind
   * @param {string} [namespace]
   * @param {{cluster?: string}} [options]
   */
  constructor(apiVersion, kind, namespace, options = {}) {
    /** The kind's `apiVersion`, e.g. `apps/v1`. */
    this.apiVersion = apiVersion;
    /** The kind, e.g. `Deployment`. */
    this.kind = kind;
    /** The namespace calls address, if any. */
    this.namespace = namespace ?? undefined;
    /**
     * The cluster reads address (`kube.get-in`, `kube.list-in`), writes
     * refused; `undefined`: the request's own cluster.
     * @type {string | undefined}
     */
    this.cluster = options.cluster ?? undefined;
    this.gvk = gvk(apiVersion, kind);
  }

  /**
   * Throws `Denied` for a write through an Api of another cluster: the
   * contract has no writes there.
   * @internal
   * @param {string} method
   */
  writable(method) {
    if (this.cluster !== undefined) {
      throw new Denied(
        `Api.${method} of ${this.kind} in cluster ${JSON.stringify(this.cluster)}: an Api from ctx.apiIn only reads; ` +
          "a fleet controller writes in member clusters through Outcome.childIn",
      );
    }
  }

  /** @param {string} name */
  ref(name) {
    return { kind: this.gvk, namespace: this.namespace, name };
  }

  /**
   * `obj` as JSON bytes, with this Api's apiVersion, kind and namespace
   * filled in where unset.
   * @param {object} obj
   */
  object(obj) {
    const value = JSON.parse(JSON.stringify(obj));
    value.apiVersion ??= this.apiVersion;
    value.kind ??= this.kind;
    if (this.namespace !== undefined) {
      value.metadata ??= {};
      value.metadata.namespace ??= this.namespace;
    }
    return encode(value);
  }

  /** Reads one object; throws `NotFound` if it does not exist. @param {string} name */
  get(name) {
    if (this.cluster !== undefined) return decode(call(kube.getIn, this.cluster, this.ref(name)));
    return decode(call(kube.get, this.ref(name)));
  }

  /** Reads one object, `undefined` if it does not exist. @param {string} name */
  getOpt(name) {
    try {
      return this.get(name);
    } catch (e) {
      if (e instanceof ApiError && e.isNotFound) return undefined;
      throw e;
    }
  }

  /**
   * Lists objects, optionally by label and field selector.
   * @param {{labelSelector?: string, fieldSelector?: string}} [params]
   */
  list(params = {}) {
    const p = { labelSelector: params.labelSelector, fieldSelector: params.fieldSelector };
    if (this.cluster !== undefined) return call(kube.listIn, this.cluster, this.gvk, this.namespace, p).map(decode);
    return call(kube.list, this.gvk, this.namespace, p).map(decode);
  }

  /** Creates an object; returns it as stored. @param {object} obj */
  create(obj) {
    this.writable("create");
    return decode(call(kube.create, this.object(obj)));
  }

  /** Replaces an object; `metadata.resourceVersion`, if set, is a precondition. @param {object} obj */
  replace(obj) {
    this.writable("replace");
    return decode(call(kube.replace, this.object(obj)));
  }

  /**
   * Patches an object (a merge patch unless `patchType` says otherwise).
   * @param {string} name
   * @param {unknown} patch
   * @param {"merge" | "json" | "strategic"} [patchType]
   */
  patch(name, patch, patchType = PatchType.MERGE) {
    this.writable("patch");
    return decode(call(kube.patch, this.ref(name), patchType, encode(patch)));
  }

  /** Server-side apply with this controller's field manager. @param {object} obj @param {boolean} [force] */
  apply(obj, force = false) {
    this.writable("apply");
    return decode(call(kube.apply, this.object(obj), force));
  }

  /**
   * Deletes an object.
   * @param {string} name
   * @param {"default" | "background" | "foreground" | "orphan"} [propagation]
   */
  delete(name, propagation = Propagation.DEFAULT) {
    this.writable("delete");
    call(kube.delete, this.ref(name), propagation);
  }

  /** Replaces the status subresource. @param {object} obj */
  replaceStatus(obj) {
    this.writable("replaceStatus");
    return decode(call(kube.replaceStatus, this.object(obj)));
  }

  /**
   * Patches the status subresource.
   * @param {string} name
   * @param {unknown} patch
   * @param {"merge" | "json" | "strategic"} [patchType]
   */
  patchStatus(name, patch, patchType = PatchType.MERGE) {
    this.writable("patchStatus");
    return decode(call(kube.patchStatus, this.ref(name), patchType, encode(patch)));
  }

  /** Server-side apply of the status subresource. @param {object} obj @param {boolean} [force] */
  applyStatus(obj, force = false) {
    this.writable("applyStatus");
    return decode(call(kube.applyStatus, this.object(obj), force));
  }
}
