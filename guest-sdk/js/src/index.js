// Write Kubernetes controllers for the Capstan host in JavaScript, as
// WebAssembly components. See ../README.md and docs/guests/javascript.md.

export { Admission, Operation, Verdict, Webhook } from "./admission.js";
export { Api, PatchType, Propagation } from "./api.js";
export { Component } from "./component.js";
export { findCondition, isConditionTrue, removeCondition, setCondition, timestamp } from "./conditions.js";
export { Context, EventKind } from "./context.js";
export { Controller } from "./controller.js";
export { Conversion, between } from "./conversion.js";
export {
  AlreadyExists,
  ApiError,
  BadRequest,
  Conflict,
  Decode,
  Denied,
  Forbidden,
  Invalid,
  NotFound,
  OtherApiError,
  ReconcileError,
  Terminal,
  Transient,
  Unavailable,
} from "./errors.js";
export { Log, Span, log } from "./log.js";
export { ALL_VERBS, READ_VERBS, Field, Manifest, Mapping, Permission, Scope, Verb, Watch } from "./manifest.js";
export { exportComponent } from "./export.js";
export { Event, Outcome } from "./outcome.js";
export { NodeInfo, Scheduler, Unschedulable, parseQuantity, podRequests, tolerates } from "./scheduler.js";
export * as http from "./http.js";
