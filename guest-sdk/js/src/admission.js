// Admission webhooks: validate and mutate requests for objects.
//
// Declare each webhook in the manifest with `Manifest.webhook`, subclass
// `Admission` and export it with `exportComponent({ admission: MyHooks })`.
// The host serves the webhooks over HTTPS, calls `validate` or `mutate` for
// each request, and turns a mutated object into the JSON Patch the API
// server expects.

import { Component } from "./component.js";
import { fromBytes, toBytes } from "./json.js";
import { gvk } from "./kinds.js";
import { log } from "./log.js";

/** The operations a webhook is called for, as the API server names them. */
export const Operation = Object.freeze({
  CREATE: "CREATE",
  UPDATE: "UPDATE",
  DELETE: "DELETE",
  CONNECT: "CONNECT",
});

const OPERATIONS = new Set(Object.values(Operation));

/**
 * An admission webhook declaration, added to a manifest with
 * `Manifest.webhook`:
 *
 * ```js
 * Webhook.validating("validate.greetings.example.com")
 *   .kind("example.com/v1", "Greeting")
 *   .operations(Operation.CREATE, Operation.UPDATE)
 *   .ignoreFailures()
 *   .timeoutSeconds(5);
 * ```
 *
 * Called for creates and updates unless `operations` says otherwise;
 * requests that fail (an exception, the deadline) are rejected unless
 * `ignoreFailures` is set.
 */
export class Webhook {
  /** @param {string} name @param {"validating" | "mutating"} webhookType */
  constructor(name, webhookType) {
    /** @internal */
    this.wit = {
      name,
      webhookType,
      kinds: [],
      operations: ["create", "update"],
      failurePolicy: "fail",
      timeoutSeconds: 0,
      sideEffects: "none",
      namespaceSelector: undefined,
      objectSelector: undefined,
    };
  }

  /**
   * A validating webhook named `name`: a fully qualified DNS name of at
   * least three labels, e.g. `validate.greetings.example.com`.
   * @param {string} name
   */
  static validating(name) {
    return new Webhook(name, "validating");
  }

  /** A mutating (defaulting) webhook named `name`. @param {string} name */
  static mutating(name) {
    return new Webhook(name, "mutating");
  }

  /** A kind (in its version) the webhook is called for. @param {string} apiVersion @param {string} kind */
  kind(apiVersion, kind) {
    this.wit.kinds.push(gvk(apiVersion, kind));
    return this;
  }

  /** The operations it is called for (default: create and update). @param {...string} operations */
  operations(...operations) {
    for (const o of operations) {
      if (!OPERATIONS.has(o)) throw new TypeError(`not an Operation: ${String(o)}`);
    }
    this.wit.operations = operations.map((o) => o.toLowerCase());
    return this;
  }

  /** Let requests through when the webhook fails (`failurePolicy: Ignore`); the default rejects them. */
  ignoreFailures() {
    this.wit.failurePolicy = "ignore";
    return this;
  }

  /** How long the API server waits, 1 to 30 seconds (default 10). @param {number} seconds */
  timeoutSeconds(seconds) {
    this.wit.timeoutSeconds = seconds;
    return this;
  }

  /** The webhook has side effects, except on dry runs (`NoneOnDryRun`). */
  sideEffectsOnDryRun() {
    this.wit.sideEffects = "none-on-dry-run";
    return this;
  }

  /** Only objects in namespaces matching this `LabelSelector`. @param {object} selector */
  namespaceSelector(selector) {
    this.wit.namespaceSelector = toBytes(selector);
    return this;
  }

  /** Only objects matching this `LabelSelector`. @param {object} selector */
  objectSelector(selector) {
    this.wit.objectSelector = toBytes(selector);
    return this;
  }
}

/**
 * The answer to an admission request: allowed or denied, with warnings:
 *
 * ```js
 * Verdict.deny("spec.replicas must be between 0 and 10").code(422);
 * Verdict.allow().warn("spec.message is long");
 * ```
 */
export class Verdict {
  /** @param {boolean} allowed @param {string} [message] */
  constructor(allowed, message) {
    /** Whether the request may go on. */
    this.allowed = allowed;
    /** Why it was denied, shown to the user. */
    this.message = message;
    /** @internal @type {number | undefined} */
    this.statusCode = undefined;
    /** Warnings shown to the user either way. @type {string[]} */
    this.warnings = [];
  }

  /** Let the request go on. */
  static allow() {
    return new Verdict(true);
  }

  /** Reject the request; `message` is shown to the user. @param {string} message */
  static deny(message) {
    return new Verdict(false, message);
  }

  /** The HTTP status code of a denial (400 to 599; default 403). @param {number} code */
  code(code) {
    this.statusCode = code;
    return this;
  }

  /** A warning shown to the user either way. @param {string} warning */
  warn(warning) {
    this.warnings.push(warning);
    return this;
  }

  /** @internal @param {Uint8Array} [patched] */
  wit(patched) {
    return {
      allowed: this.allowed,
      message: this.message,
      code: this.statusCode,
      warnings: [...this.warnings],
      patched: this.allowed ? patched : undefined,
    };
  }
}

/**
 * Admission logic: override the methods the manifest declares webhooks for
 * (both allow by default). A fresh instance is made for every call. An
 * exception is logged and fails the call (the guest traps): the webhook's
 * failure policy then decides.
 */
export class Admission extends Component {
  /** Called for a validating webhook. @param {AdmissionRequest} request @returns {Verdict} */
  validate(request) {
    return Verdict.allow();
  }

  /**
   * Called for a mutating webhook with the object to store (on create and
   * update); change `obj` in place. The host sends the API server the JSON
   * Patch from the object it got to the one left here.
   * @param {AdmissionRequest} request
   * @param {any} obj
   * @returns {Verdict}
   */
  mutate(request, obj) {
    return Verdict.allow();
  }

  /**
   * Called for a mutating webhook on a request without an object (a
   * delete): nothing to change, only allow or deny.
   * @param {AdmissionRequest} request
   * @returns {Verdict}
   */
  mutateWithoutObject(request) {
    return Verdict.allow();
  }

  /**
   * Called, by validating and mutating webhooks alike, instead of the
   * methods above when the object to store does not decode
   * (`request.object` is undefined). The default denies with 400 and the
   * reason. An old object that does not decode never lands here: see
   * `request.undecodableOldObject`.
   * @param {AdmissionRequest} request
   * @param {Undecodable} obj
   * @returns {Verdict}
   */
  undecodable(request, obj) {
    return Verdict.deny(obj.error).code(400);
  }
}

/**
 * An object of a request that does not decode to a plain object: what
 * came, and why. The host passes on the API server's JSON, so this is
 * rare; it has the same place as in the Rust SDK, where it holds objects
 * that do not match the webhook's type.
 * @typedef {object} Undecodable
 * @property {string} raw the object as it came (its bytes, as text)
 * @property {string} error why it does not decode
 */

/**
 * @typedef {object} AdmissionRequest
 * @property {string} webhook the declared webhook this request is for
 * @property {string} operation `CREATE`, `UPDATE`, `DELETE` or `CONNECT`
 * @property {string} name the object's name
 * @property {string | undefined} namespace the object's namespace
 * @property {any} object the object as it would be stored; undefined on delete
 * @property {any} oldObject the object as it is stored; undefined on create,
 *   and when it does not decode (then `undecodableOldObject` holds it)
 * @property {Undecodable | undefined} undecodableOldObject the stored object
 *   when it does not decode: the request still goes to the handler (a
 *   delete, an update to an object that decodes)
 * @property {string | undefined} subResource the subresource, if any
 * @property {{username: string, uid: string, groups: string[]}} userInfo who makes the request
 * @property {boolean} dryRun nothing will be stored
 * @property {string} uid the request's UID
 * @property {{group: string, version: string, kind: string}} kind the
 *   object's kind, in the version the webhook asked for (the version
 *   `object` and `oldObject` are in)
 * @property {{group: string, version: string, kind: string}} requestKind the
 *   kind in the version the user's request was made in: differs from `kind`
 *   when the API server converted the object for this webhook
 *   (`matchPolicy: Equivalent`), e.g. a webhook declared for `apps/v1`
 *   called for a request made in `apps/v1beta2`
 */

/**
 * The object in `bytes`, or why it does not decode.
 * @param {Uint8Array | undefined} bytes @param {string} what
 * @returns {[any, Undecodable | undefined]}
 */
function decode(bytes, what) {
  if (bytes === undefined || bytes === null) return [undefined, undefined];
  const raw = () => new TextDecoder().decode(bytes);
  let obj;
  try {
    obj = fromBytes(bytes);
  } catch (e) {
    return [undefined, { raw: raw(), error: `${what} is not valid JSON: ${e instanceof Error ? e.message : e}` }];
  }
  if (obj === null || typeof obj !== "object" || Array.isArray(obj)) {
    return [undefined, { raw: raw(), error: `${what} is not a JSON object` }];
  }
  return [obj, undefined];
}

/**
 * A WIT `group-version-kind` as a frozen plain object.
 * @param {{group: string, version: string, kind: string} | undefined} g
 */
function kindOf(g) {
  return Object.freeze({ group: g?.group ?? "", version: g?.version ?? "", kind: g?.kind ?? "" });
}

/**
 * Decodes the request, calls `validate` or `mutate` (or `undecodable` when
 * the object to store does not decode) and converts the verdict; an
 * exception is logged and thrown on (the call traps).
 * @param {new () => Admission} AdmissionClass
 * @param {any} request the WIT `admission-request`
 */
export function runReview(AdmissionClass, request) {
  const [object, undecodable] = decode(request.object, "object");
  const [oldObject, undecodableOldObject] = decode(request.oldObject, "old object");
  /** @type {AdmissionRequest} */
  const typed = {
    webhook: request.webhook,
    operation: String(request.operation).toUpperCase(),
    name: request.name,
    namespace: request.namespace ?? undefined,
    object,
    oldObject,
    undecodableOldObject,
    subResource: request.subResource ?? undefined,
    userInfo: { ...request.userInfo, groups: [...(request.userInfo?.groups ?? [])] },
    dryRun: request.dryRun,
    uid: request.uid,
    kind: kindOf(request.kind),
    requestKind: kindOf(request.requestKind ?? request.kind),
  };
  const admission = new AdmissionClass();
  let verdict;
  let patched;
  try {
    if (undecodable !== undefined) {
      verdict = admission.undecodable(typed, undecodable);
    } else if (request.webhookType === "validating") {
      verdict = admission.validate(typed);
    } else if (typed.object === undefined) {
      verdict = admission.mutateWithoutObject(typed);
    } else {
      const obj = JSON.parse(JSON.stringify(typed.object));
      verdict = admission.mutate(typed, obj);
      patched = toBytes(obj);
    }
  } catch (e) {
    // A failed call, not an answer: logged, then thrown on, so that the
    // guest traps, the host answers the API server with an error and the
    // webhook's failure policy decides (as a panic does in Rust).
    log.error("unhandled exception in admission", { error: String(e), stack: e?.stack ?? "" });
    throw e;
  }
  if (!(verdict instanceof Verdict)) {
    return Verdict.deny("admission returned something other than a Verdict").code(500).wit();
  }
  return verdict.wit(patched);
}
