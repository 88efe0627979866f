// The fake host: a small in-memory API server behind the WIT imports.

import { HttpError, Response, originOf, transport } from "../src/http.js";
import { fromBytes, toBytes } from "../src/json.js";

/** @type {FakeHost | undefined} */
let active;

/** The installed fake host; throws when none is. */
export function current() {
  if (!active) throw new Error("capstan-guest/testing: no FakeHost installed (use reconcile(), or host.install())");
  return active;
}

/** The installed fake host, if any. */
export function installed() {
  return active;
}

const apiVersion = (gvk) => (gvk.group ? `${gvk.group}/${gvk.version}` : gvk.version);
const keyOf = (obj) =>
  JSON.stringify([obj.apiVersion ?? "", obj.kind ?? "", obj.metadata?.namespace ?? null, obj.metadata?.name ?? ""]);
const refKey = (ref) => JSON.stringify([apiVersion(ref.kind), ref.kind.kind, ref.namespace ?? null, ref.name]);
const status = (tag, code, reason, message) => ({ tag, val: { code, reason, message } });
const notFound = (kind, name) => status("not-found", 404, "NotFound", `${kind} "${name}" not found`);

/** JSON merge patch (RFC 7386): `null` removes a field. */
function merge(into, patch) {
  if (patch === null || typeof patch !== "object" || Array.isArray(patch)) return structuredClone(patch);
  const out = into && typeof into === "object" && !Array.isArray(into) ? { ...into } : {};
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete out[k];
    else out[k] = merge(out[k], v);
  }
  return out;
}

/** Equality label selectors: `k=v`, `k==v`, `k!=v`, `k`, `!k`. */
function selected(labels, selector) {
  for (const term of (selector ?? "").split(",").map((t) => t.trim()).filter(Boolean)) {
    if (term.includes("!=")) {
      const [k, v] = term.split("!=").map((s) => s.trim());
      if (labels[k] === v) return false;
    } else if (term.includes("=")) {
      const at = term.indexOf("=");
      const k = term.slice(0, at).trim();
      const v = term.slice(at + 1).replace(/^=/, "").trim();
      if (labels[k] !== v) return false;
    } else if (term.startsWith("!")) {
      if (term.slice(1) in labels) return false;
    } else if (!(term in labels)) return false;
  }
  return true;
}

/**
 * The host's imports, in memory: objects by apiVersion, kind, namespace and
 * name, and what the code under test did. `get`, `list` (equality label
 * selectors), `create`, `replace`, `delete`, merge `patch` and `apply` (the
 * applied fields merged into what is stored) and their status variants are
 * answered; grants, server-side apply field ownership and admission are not
 * faked: the scenarios (`capstan test`) and `capstan e2e` cover those.
 *
 * HTTP calls (`http.request`) never leave the process: the fake answers the
 * origins a test stubs with `http(origin, answer)`, refuses the others as
 * the host refuses origins the manifest does not declare, and records every
 * request in `requests`.
 *
 * For a fleet controller it holds the objects of other clusters by name
 * (`clusters`), answers `ctx.apiIn` reads from the cluster named, and
 * refuses a read in a cluster that is neither the request's own (`cluster`)
 * nor one of its `members` with `Denied`, as the host does.
 */
export class FakeHost {
  /**
   * @param {object[]} [objects] objects to hold in the request's own cluster (apiVersion, kind, metadata.name)
   * @param {{clusters?: Record<string, object[]>}} [options] `clusters`: the objects of other clusters (a fleet's members), by name
   */
  constructor(objects = [], { clusters = {} } = {}) {
    /** @type {Map<string, any>} What the fake API server of the request's own cluster stores. */
    this.objects = new Map();
    /**
     * What the other clusters store, by cluster name: read with `ctx.apiIn`
     * (which never writes). A name equal to the request's own cluster adds
     * to `objects` for those reads.
     * @type {Map<string, Map<string, any>>}
     */
    this.clusters = new Map();
    /** The request's own cluster, whose objects are `objects`; `reconcile` sets it. */
    this.cluster = "default";
    /**
     * The member clusters engaged now, which `apiIn` may read besides
     * `cluster`; `reconcile` sets it.
     * @type {string[]}
     */
    this.members = [];
    /** Every import called, as `[name, ...args]`, in order. */
    this.calls = [];
    /** Events recorded with `ctx.record`: `{type, reason, action, note}`. */
    this.events = [];
    /** Log lines: `[level, message, fields]`. */
    this.logs = [];
    /**
     * Spans opened with `ctx.span` / `log.span`, in order: `{name, parent,
     * attributes, error, ended}` (`parent`: the name of the span it was
     * opened in; `ended`: whether it ended before the call returned).
     */
    this.spans = [];
    /** @internal indexes in `spans` of those open, innermost last */
    this.openSpans = [];
    /** HTTP requests made with `http.request`, in order, refused ones included. */
    this.requests = [];
    /** @type {Map<string, any>} */
    this.origins = new Map();
    this.version = 0;
    for (const obj of objects) this.put(obj);
    for (const [name, held] of Object.entries(clusters)) {
      if (!this.clusters.has(name)) this.clusters.set(name, new Map());
      for (const obj of held) this.put(obj, name);
    }
  }

  /**
   * Stores a copy of `obj` with a fresh resourceVersion and returns it; in
   * the request's own cluster, or with `cluster` in that other cluster.
   * @param {object} obj
   * @param {string} [cluster]
   */
  put(obj, cluster) {
    const stored = structuredClone(obj);
    stored.metadata = { ...stored.metadata, resourceVersion: String(++this.version) };
    this.storeOf(cluster).set(keyOf(stored), stored);
    return stored;
  }

  /**
   * The stored object, or `undefined`; with `cluster`, in that other cluster.
   * @param {string} apiVersion
   * @param {string} kind
   * @param {string | undefined} namespace
   * @param {string} name
   * @param {string} [cluster]
   */
  get(apiVersion, kind, namespace, name, cluster) {
    const store = cluster === undefined ? this.objects : this.clusters.get(cluster);
    return store?.get(JSON.stringify([apiVersion, kind, namespace ?? null, name]));
  }

  /** @internal @param {string} [cluster] */
  storeOf(cluster) {
    if (cluster === undefined) return this.objects;
    if (!this.clusters.has(cluster)) this.clusters.set(cluster, new Map());
    return /** @type {Map<string, any>} */ (this.clusters.get(cluster));
  }

  /**
   * The objects `kube.get-in` and `kube.list-in` see in `cluster`; denied for
   * a cluster that is neither the request's own nor one of its members, as
   * on the host.
   * @internal
   * @param {string} cluster
   * @returns {Map<string, any>}
   */
  readable(cluster) {
    if (cluster === this.cluster) return new Map([...(this.clusters.get(cluster) ?? []), ...this.objects]);
    if (this.members.includes(cluster)) return this.clusters.get(cluster) ?? new Map();
    const members = this.members.map((m) => JSON.stringify(m)).join(", ") || "none";
    throw {
      tag: "denied",
      val: `cluster ${JSON.stringify(cluster)} is neither this request's own (${JSON.stringify(this.cluster)}) nor one of its members (${members})`,
    };
  }

  /**
   * Answers HTTP requests to `origin` (`scheme://host[:port]`; any path)
   * with `answer`: a `Response`, an Error to throw (e.g. `HttpError`), or a
   * function of the `Request` returning either. Requests to origins not
   * stubbed throw `HttpError` `http-request-denied`, as the host refuses
   * origins the manifest does not declare. Returns the fake, to chain:
   *
   * ```js
   * const host = new FakeHost([alert]).http("https://hooks.example.com", Response.ofJson({ id: 7 }));
   * ```
   * @param {string} origin
   * @param {any} answer
   */
  http(origin, answer) {
    this.origins.set(originOf(origin), answer);
    return this;
  }

  /** Makes this the host the WIT imports call (until `uninstall`). */
  install() {
    active = this;
    transport.send = (request) => this.answer(request);
    return this;
  }

  /** Stops answering the WIT imports. */
  uninstall() {
    if (active === this) {
      active = undefined;
      transport.send = transport.wasi;
    }
    // The call is over: spans still open end with it, as on the host.
    this.openSpans = [];
  }

  /** @internal @param {import("../src/http.js").Request} request */
  answer(request) {
    this.requests.push(request);
    this.calls.push(["http.request", request]);
    if (!this.origins.has(request.origin)) {
      throw new HttpError(
        "http-request-denied",
        `${request.origin} is not stubbed: new FakeHost().http(${JSON.stringify(request.origin)}, ...)`,
      );
    }
    let answer = this.origins.get(request.origin);
    if (typeof answer === "function") answer = answer(request);
    if (answer instanceof Error) throw answer;
    if (!(answer instanceof Response)) throw new TypeError("a FakeHost.http stub answered something other than a Response");
    return new Response(answer.status, { ...answer.headers }, Uint8Array.from(answer.body));
  }

  /** @param {string} name @param {any[]} args */
  call(name, args) {
    this.calls.push([name, ...args]);
    const handler = this.handlers[name];
    return handler(...args);
  }

  get handlers() {
    const patched = (ref, type, patch, statusOnly) => {
      const current = this.objects.get(refKey(ref));
      if (!current) throw notFound(ref.kind.kind, ref.name);
      if (type !== "merge") throw { tag: "bad-request", val: `the fake host applies merge patches only, not ${type}` };
      let change = fromBytes(patch);
      if (statusOnly) change = change && "status" in change ? { status: change.status } : {};
      return toBytes(this.put(merge(current, change)));
    };
    const applied = (data, statusOnly) => {
      let obj = fromBytes(data);
      const current = this.objects.get(keyOf(obj));
      if (statusOnly) {
        if (!current) throw notFound(obj.kind, obj.metadata?.name);
        obj = { status: obj.status };
      }
      return toBytes(this.put(merge(current ?? {}, obj)));
    };
    /** @param {Map<string, any>} objects @param {any} gvk @param {string | undefined} namespace @param {any} params */
    const listed = (objects, gvk, namespace, params) => {
      if (params?.fieldSelector) throw { tag: "bad-request", val: "the fake host does not evaluate field selectors" };
      return [...objects.entries()]
        .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
        .map(([, obj]) => obj)
        .filter(
          (obj) =>
            obj.apiVersion === apiVersion(gvk) &&
            obj.kind === gvk.kind &&
            (namespace === undefined || namespace === null || obj.metadata?.namespace === namespace) &&
            selected(obj.metadata?.labels ?? {}, params?.labelSelector),
        )
        .map(toBytes);
    };
    return {
      "kube.get": (ref) => {
        const found = this.objects.get(refKey(ref));
        if (!found) throw notFound(ref.kind.kind, ref.name);
        return toBytes(found);
      },
      "kube.list": (gvk, namespace, params) => listed(this.objects, gvk, namespace, params),
      "kube.getIn": (cluster, ref) => {
        const found = this.readable(cluster).get(refKey(ref));
        if (!found) throw notFound(ref.kind.kind, ref.name);
        return toBytes(found);
      },
      "kube.listIn": (cluster, gvk, namespace, params) => listed(this.readable(cluster), gvk, namespace, params),
      "kube.create": (data) => {
        const obj = fromBytes(data);
        if (this.objects.has(keyOf(obj))) throw status("already-exists", 409, "AlreadyExists", `${obj.kind} already exists`);
        return toBytes(this.put(obj));
      },
      "kube.replace": (data) => {
        const obj = fromBytes(data);
        if (!this.objects.has(keyOf(obj))) throw notFound(obj.kind, obj.metadata?.name);
        return toBytes(this.put(obj));
      },
      "kube.patch": (ref, type, patch) => patched(ref, type, patch, false),
      "kube.apply": (data) => applied(data, false),
      "kube.delete": (ref) => {
        if (!this.objects.delete(refKey(ref))) throw notFound(ref.kind.kind, ref.name);
      },
      "kube.replaceStatus": (data) => applied(data, true),
      "kube.patchStatus": (ref, type, patch) => patched(ref, type, patch, true),
      "kube.applyStatus": (data) => applied(data, true),
      "events.record": (event) => {
        this.events.push(plainEvent(event));
      },
    };
  }
}

/** An event of the WIT as plain data. */
export function plainEvent(event) {
  const out = {
    type: event.eventType === "warning" ? "Warning" : "Normal",
    reason: event.reason,
    action: event.action,
    note: event.note,
  };
  if (event.regarding) {
    const ref = event.regarding;
    out.regarding = { apiVersion: apiVersion(ref.kind), kind: ref.kind.kind, namespace: ref.namespace, name: ref.name };
  }
  return out;
}
