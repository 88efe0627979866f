// Types of capstan-guest, for editors and type checkers. The runtime code is
// plain JavaScript in src/.

/** A Kubernetes object: parsed JSON with `apiVersion`, `kind` and `metadata`. */
export interface KubeObject {
  apiVersion?: string;
  kind?: string;
  metadata?: {
    name?: string;
    namespace?: string;
    generation?: number;
    resourceVersion?: string;
    uid?: string;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
    [key: string]: unknown;
  };
  [key: string]: any;
}

/** What the API server said about a failed call. */
export interface ApiStatus {
  /** HTTP status code, e.g. 404. */
  code: number;
  /** Machine-readable reason, e.g. `NotFound`. */
  reason: string;
  /** Human-readable message. */
  message: string;
}

/** A failed call to the Kubernetes API through the host. */
export class ApiError extends Error {
  /** The host's or API server's message. */
  readonly detail: string;
  /** What the API server said, if it answered. */
  readonly status: ApiStatus | undefined;
  /** True for 404. */
  readonly isNotFound: boolean;
  /** True for 409 (already exists or conflict). */
  readonly isConflict: boolean;
}
/** The controller's grants do not allow the call; nothing was sent. */
export class Denied extends ApiError {}
/** 404: the object or kind does not exist. */
export class NotFound extends ApiError {}
/** 409: create of a name that exists. */
export class AlreadyExists extends ApiError {}
/** 409: stale resourceVersion or apply conflict. */
export class Conflict extends ApiError {}
/** 422: the object failed validation. */
export class Invalid extends ApiError {}
/** 403 from the API server. */
export class Forbidden extends ApiError {}
/** The request was malformed before it was sent. */
export class BadRequest extends ApiError {}
/** The API server could not be reached. */
export class Unavailable extends ApiError {}
/** Any other API error. */
export class OtherApiError extends ApiError {}
/** The host answered with JSON that could not be decoded. */
export class Decode extends ApiError {}

/** Why a reconcile gave up: throw `Transient` or `Terminal`. */
export class ReconcileError extends Error {
  constructor(message: string);
}
/** A failure worth retrying: the host retries with exponential backoff. */
export class Transient extends ReconcileError {}
/**
 * A failure retrying will not fix (e.g. an invalid spec): the host records a
 * Warning event with this message and waits for the object to change.
 */
export class Terminal extends ReconcileError {}

/** Severity of a log line. */
export type Level = "trace" | "debug" | "info" | "warn" | "error";

/**
 * Structured logging under the reconcile's span. Keep messages constant and
 * put data in the fields (rendered with `String`).
 */
export class Log {
  log(level: Level, message: string, fields?: Record<string, unknown>): void;
  trace(message: string, fields?: Record<string, unknown>): void;
  debug(message: string, fields?: Record<string, unknown>): void;
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
}
/** The logger; the same object as `ctx.log`. */
export const log: Log;

/** Patch formats. */
export type PatchType = "merge" | "json" | "strategic";
export const PatchType: { readonly MERGE: "merge"; readonly JSON: "json"; readonly STRATEGIC: "strategic" };

/** How dependents are treated on delete. */
export type Propagation = "default" | "background" | "foreground" | "orphan";
export const Propagation: {
  readonly DEFAULT: "default";
  readonly BACKGROUND: "background";
  readonly FOREGROUND: "foreground";
  readonly ORPHAN: "orphan";
};

/**
 * A client for one kind in one namespace (`undefined`: all namespaces for
 * `list`, or a cluster-scoped kind). Every method throws an `ApiError`
 * subclass on failure.
 */
export class Api<T extends KubeObject = KubeObject> {
  constructor(apiVersion: string, kind: string, namespace?: string);
  readonly apiVersion: string;
  readonly kind: string;
  readonly namespace: string | undefined;
  /** Reads one object; throws `NotFound` if it does not exist. */
  get(name: string): T;
  /** Reads one object, `undefined` if it does not exist. */
  getOpt(name: string): T | undefined;
  /** Lists objects, optionally by label and field selector. */
  list(params?: { labelSelector?: string; fieldSelector?: string }): T[];
  /** Creates an object; returns it as stored. */
  create(obj: T): T;
  /** Replaces an object; `metadata.resourceVersion`, if set, is a precondition. */
  replace(obj: T): T;
  /** Patches an object (merge patch by default). */
  patch(name: string, patch: unknown, patchType?: PatchType): T;
  /** Server-side apply with this controller's field manager. */
  apply(obj: T, force?: boolean): T;
  /** Deletes an object. */
  delete(name: string, propagation?: Propagation): void;
  /** Replaces the status subresource. */
  replaceStatus(obj: T): T;
  /** Patches the status subresource. */
  patchStatus(name: string, patch: unknown, patchType?: PatchType): T;
  /** Server-side apply of the status subresource. */
  applyStatus(obj: T, force?: boolean): T;
}

/** Why the host called. */
export type EventKind = "added" | "modified" | "deleted" | "resync";
export const EventKind: {
  readonly ADDED: "added";
  readonly MODIFIED: "modified";
  readonly DELETED: "deleted";
  readonly RESYNC: "resync";
};

/** Handed to every callback. */
export class Context {
  /** Why this reconcile happens. */
  readonly event: EventKind;
  /** Namespace of the reconciled object (`undefined` if cluster-scoped). */
  readonly namespace: string | undefined;
  /** Name of the reconciled object. */
  readonly name: string;
  /** Structured logging under this reconcile's span. */
  readonly log: Log;
  /** A client for `kind` in `namespace`. */
  api<T extends KubeObject = KubeObject>(apiVersion: string, kind: string, namespace?: string): Api<T>;
  /** Records an Event right away; throws an `ApiError` when the host cannot. */
  record(event: Event): void;
}

/** A Kubernetes Event to record. */
export class Event {
  /** A Normal event: `reason` short UpperCamelCase, `action` what was done. */
  static normal(reason: string, action: string): Event;
  /** A Warning event. */
  static warning(reason: string, action: string): Event;
  /** Human-readable detail. */
  note(note: string): this;
  /** The object the event is about, when not the one being reconciled. */
  regarding(apiVersion: string, kind: string, namespace: string | undefined, name: string): this;
}

/** What a successful reconcile asks the host to do. */
export class Outcome {
  constructor();
  /** A desired child object (with `apiVersion` and `kind`); applied, owned and pruned by the host. */
  child(child: KubeObject): this;
  /** The desired `status` of the reconciled object. */
  status(status: Record<string, unknown>): this;
  /** An event to record. */
  event(event: Event): this;
  /** Reconcile again after `seconds`, even if nothing changes. */
  requeueAfter(seconds: number): this;
}

/** Every verb. */
export const ALL_VERBS: readonly Verb[];
/** The read-only verbs: get, list, watch. */
export const READ_VERBS: readonly Verb[];
/** A Kubernetes API verb, as in RBAC rules. */
export type Verb = "get" | "list" | "watch" | "create" | "update" | "patch" | "delete";

/** Where a permission applies. */
export type Scope = { tag: "cluster" } | { tag: "own-namespace" } | { tag: "namespaces"; val: string[] };
export const Scope: {
  readonly CLUSTER: Scope;
  readonly OWN_NAMESPACE: Scope;
  namespaces(names: string[]): Scope;
};

/** How a change to a watched object maps to primary objects. */
export type Mapping = { tag: "none" } | { tag: "same-name" } | { tag: "namespace" } | { tag: "label"; val: string };
export const Mapping: {
  readonly NONE: Mapping;
  readonly SAME_NAME: Mapping;
  readonly NAMESPACE: Mapping;
  label(key: string): Mapping;
};

/** One permission: verbs on a kind, within a scope. */
export class Permission {
  constructor(group: string, kind: string, verbs: readonly Verb[]);
  scope(scope: Scope): this;
  withStatus(): this;
}

/** A kind watched besides the primary and owned kinds. */
export class Watch {
  constructor(apiVersion: string, kind: string, mapping: Mapping);
  labelSelector(selector: string): this;
}

/** What a controller declares about itself. */
export class Manifest {
  constructor(name: string);
  primary(apiVersion: string, kind: string): this;
  crd(crd: object): this;
  owns(apiVersion: string, kind: string): this;
  watches(watch: Watch): this;
  finalizer(name: string): this;
  permission(permission: Permission): this;
  resync(seconds: number): this;
  maxConcurrency(n: number): this;
}

/**
 * A controller. Override `manifest` and `reconcile`; `add`, `modify` and
 * `delete` forward to `reconcile` unless overridden. A fresh instance is made
 * for every call.
 */
export class Controller<T extends KubeObject = KubeObject> {
  manifest(): Manifest;
  add(ctx: Context, obj: T): Outcome | undefined;
  modify(ctx: Context, obj: T): Outcome | undefined;
  delete(ctx: Context, obj: T): Outcome | undefined;
  reconcile(ctx: Context, obj: T): Outcome | undefined;
}

/** The shape of the `capstan:operator/controller` export. */
export interface ControllerExport {
  manifest(): unknown;
  reconcile(event: EventKind, object: Uint8Array): unknown;
}

/**
 * The component's `controller` export for a controller class:
 * `export const controller = exportController(MyController);`
 */
export function exportController(controller: new () => Controller<any>): ControllerExport;
