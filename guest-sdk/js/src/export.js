// `exportComponent`: the component's four exports, from the classes that
// serve its roles.

import { Admission, Verdict, runReview } from "./admission.js";
import { Controller, runReconcile } from "./controller.js";
import { Conversion, runConvert } from "./conversion.js";
import { Scheduler, runSchedule } from "./scheduler.js";

/** @param {string} role */
const notServed = (role) => `this component does not serve ${role}`;

/**
 * Exports the component's roles, naming the class that serves each (any
 * mix). The `operator` world exports four interfaces, so export the four
 * results from the entry module under their names:
 *
 * ```js
 * // A controller:
 * export const { controller, admission, conversion, scheduler } = exportComponent({ controller: Greeter });
 * // A controller that also serves webhooks:
 * export const { controller, admission, conversion, scheduler } =
 *   exportComponent({ controller: Greeter, admission: GreetingHooks });
 * // No controller: the first role class declares the manifest.
 * export const { controller, admission, conversion, scheduler } = exportComponent({ scheduler: ZoneSpread });
 * ```
 *
 * The manifest comes from the controller, else from the first of
 * `admission`, `conversion` and `scheduler` given; its `roles.reconcile` is
 * set when a controller is given. Roles not given answer "not served"; the
 * host never calls them, since the manifest does not declare them.
 * @param {{controller?: new () => Controller, admission?: new () => Admission,
 *   conversion?: new () => Conversion, scheduler?: new () => Scheduler}} roles
 */
export function exportComponent(roles) {
  const { controller, admission, conversion, scheduler } = roles ?? {};
  for (const [given, base, role] of [
    [controller, Controller, "controller"],
    [admission, Admission, "admission"],
    [conversion, Conversion, "conversion"],
    [scheduler, Scheduler, "scheduler"],
  ]) {
    if (given !== undefined && !(typeof given === "function" && given.prototype instanceof base)) {
      throw new TypeError(`${role} must be a class extending ${base.name}`);
    }
  }
  const first = controller ?? admission ?? conversion ?? scheduler;
  if (first === undefined) {
    throw new TypeError("exportComponent needs at least one role: a controller, admission, conversion or scheduler");
  }
  return {
    /** The `capstan:operator/controller` export. */
    controller: {
      /** The manifest of the controller, or of the first role class. */
      manifest() {
        return new first().manifest().component(controller !== undefined);
      },
      /** Calls the controller's callback for the request's event. @param {any} request */
      reconcile(request) {
        if (controller === undefined) {
          throw { kind: "terminal", message: notServed("reconcile"), status: undefined, events: [] };
        }
        return runReconcile(controller, request);
      },
    },
    /** The `capstan:operator/admission` export. */
    admission: {
      /** Calls `validate` or `mutate`. @param {any} request */
      review(request) {
        if (admission === undefined) return Verdict.deny(notServed("admission")).code(500).wit();
        return runReview(admission, request);
      },
    },
    /** The `capstan:operator/conversion` export. */
    conversion: {
      /** Calls `convert` for every object. @param {any} request */
      convert(request) {
        if (conversion === undefined) throw notServed("conversion");
        return runConvert(conversion, request);
      },
    },
    /** The `capstan:operator/scheduler` export. */
    scheduler: {
      /** Calls `schedule`. @param {any} request */
      schedule(request) {
        if (scheduler === undefined) throw { reasons: [notServed("scheduling")] };
        return runSchedule(scheduler, request);
      },
    },
  };
}
