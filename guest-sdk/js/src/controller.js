// The `Controller` base class, and how a reconcile request reaches it.

import { Context, failedChild } from "./context.js";
import { ApiError, ReconcileError, Terminal, Transient, fromApiError } from "./errors.js";
import { fromBytes } from "./json.js";
import { log } from "./log.js";
import { Outcome } from "./outcome.js";

/**
 * A controller: declares what it needs, and reconciles objects of its
 * primary kind. Override at least `manifest` and `reconcile`, and export the
 * class with `exportComponent`. A fresh instance is made for every call, so
 * keep no state in it.
 *
 * Throw `Transient` to retry with backoff and `Terminal` to wait for the next
 * change; either may carry a status and events, and keeps the children as
 * they are. An `ApiError` that escapes is transient (terminal for `Denied`);
 * any other exception is logged with its stack and is transient.
 */
export class Controller {
  /**
   * What this controller declares. Called once when the component is
   * loaded; must not call the API.
   * @returns {import("./manifest.js").Manifest}
   */
  manifest() {
    throw new Error("a controller must define manifest()");
  }

  /** Called for an object not handled before; defaults to `reconcile`. @param {Context} ctx @param {any} obj */
  add(ctx, obj) {
    return this.reconcile(ctx, obj);
  }

  /** Called for an object that changed; defaults to `reconcile`. @param {Context} ctx @param {any} obj */
  modify(ctx, obj) {
    return this.reconcile(ctx, obj);
  }

  /**
   * Called for an object being deleted (with a finalizer declared, the host
   * keeps it until this succeeds). The children follow the object (garbage
   * collected once it is gone) unless the outcome says `keepChildren()`:
   * then the host removes its ownerReference from each before it removes
   * the finalizer. No children are applied and no status is written for
   * this call; its events are recorded. Defaults to `reconcile`, with the
   * children following the object whatever that outcome says about keeping
   * them; override it to keep them.
   * @param {Context} ctx
   * @param {any} obj
   */
  delete(ctx, obj) {
    const outcome = this.reconcile(ctx, obj);
    return outcome instanceof Outcome ? outcome.keepChildren(false) : outcome;
  }

  /**
   * Brings the world in line with `obj`. Called directly on resync, and by
   * the default `add`, `modify` and `delete`.
   * @param {Context} ctx
   * @param {any} obj
   * @returns {Outcome}
   */
  reconcile(ctx, obj) {
    throw new Error("a controller must define reconcile()");
  }
}

/**
 * The WIT `failure` for a reconcile error, thrown as the export's `err`.
 * @param {ReconcileError} error
 */
function failure(error) {
  return {
    kind: error instanceof Terminal ? "terminal" : "transient",
    message: error.message,
    status: error.statusJson,
    events: error.events.map((event) => event.wit),
  };
}

/**
 * Decodes the object, calls the controller's callback for the request's
 * event and converts what it returns or throws.
 * @param {new () => Controller} ControllerClass
 * @param {{event: string, object: Uint8Array, failedChildren?: any[], cluster?: string, members?: string[]}} request
 */
export function runReconcile(ControllerClass, request) {
  const { event } = request;
  let obj;
  try {
    obj = fromBytes(request.object);
  } catch (e) {
    throw failure(new Terminal(`object is not valid JSON: ${e}`));
  }
  if (obj === null || typeof obj !== "object" || Array.isArray(obj)) {
    throw failure(new Terminal("object is not a JSON object"));
  }
  const meta = obj.metadata ?? {};
  const failed = (request.failedChildren ?? []).map(failedChild);
  const ctx = new Context(event, meta.namespace ?? undefined, meta.name ?? "", failed, request.cluster ?? "default", request.members ?? []);
  const controller = new ControllerClass();
  let outcome;
  try {
    switch (event) {
      case "added":
        outcome = controller.add(ctx, obj);
        break;
      case "modified":
        outcome = controller.modify(ctx, obj);
        break;
      case "deleted":
        outcome = controller.delete(ctx, obj);
        break;
      default:
        outcome = controller.reconcile(ctx, obj);
    }
  } catch (e) {
    if (e instanceof ReconcileError) throw failure(e);
    if (e instanceof ApiError) throw failure(fromApiError(e));
    const name = e instanceof Error ? e.name : typeof e;
    log.error("unhandled exception in reconcile", { error: String(e), stack: e?.stack ?? "" });
    throw failure(new Transient(`unhandled ${name}: ${e instanceof Error ? e.message : String(e)}`));
  }
  if (outcome === undefined || outcome === null) return new Outcome().wit;
  if (!(outcome instanceof Outcome)) {
    throw failure(new Terminal("reconcile returned something other than an Outcome"));
  }
  return outcome.wit;
}
