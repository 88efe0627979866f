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

/** What a reconcile error may carry besides its message. */
export interface ReconcileErrorOptions {
  /**
   * The `status` to write with the failure (the status field only, any JSON
   * value); `undefined` leaves the status as it is.
   */
  status?: unknown;
  /** Events to record with the failure. */
  events?: Iterable<Event>;
}

/**
 * Why a reconcile gave up: throw `Transient` or `Terminal`. The host keeps
 * the children as they are, writes `status` (merged with its own
 * `Reconciled=False` condition for a terminal failure) and records `events`.
 */
export class ReconcileError extends Error {
  constructor(message: string, options?: ReconcileErrorOptions);
  /** The status to write with the failure, if any. */
  readonly status: unknown;
  /** Events to record with the failure. */
  readonly events: readonly Event[];
  /** True for `Terminal`: the host waits for the object to change. */
  readonly isTerminal: boolean;
  /** Sets the status to write (throws `TypeError` if JSON cannot represent it). */
  withStatus(status: unknown): this;
  /** Adds an event to record. */
  withEvent(event: Event): this;
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
  /**
   * Opens a span named `name` inside the innermost span still open (else
   * the host's span of this call); end it with `end()`. The host bounds
   * what it keeps (names of up to 64 characters of `[A-Za-z0-9_.:/-]`, 16
   * attributes, 128 spans per call, 16 open at once).
   */
  span(name: string, attributes?: Record<string, unknown>): Span;
  /** Runs `fn` in a span and ends it; an exception marks it failed and is thrown on. */
  inSpan<T>(name: string, attributes: Record<string, unknown>, fn: () => T): T;
}
/**
 * A span opened with `log.span` or `ctx.span`. Ending it ends every span
 * opened inside it that is still open; one still open when the callback
 * returns ends with it.
 */
export class Span {
  /** Whether the host opened the span (false past its limits). */
  readonly recording: boolean;
  /** Marks the span failed with `message`; it ends later. */
  fail(message: string): void;
  /** Ends the span (again: nothing). */
  end(): void;
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
  constructor(apiVersion: string, kind: string, namespace?: string, options?: { cluster?: string });
  readonly apiVersion: string;
  readonly kind: string;
  readonly namespace: string | undefined;
  /**
   * The cluster reads address (`ctx.apiIn`): `get`, `getOpt` and `list` read
   * there (`kube.get-in`, `kube.list-in`) and every write throws `Denied`
   * without calling the host. `undefined`: the request's own cluster.
   */
  readonly cluster: string | undefined;
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

/**
 * A child of the previous outcome for this object that the API server (or
 * the host) refused.
 */
export interface FailedChild {
  /** The child's `apiVersion`, e.g. `batch/v1`. */
  readonly apiVersion: string;
  /** The child's kind, e.g. `CronJob`. */
  readonly kind: string;
  /** The child's namespace; `undefined` for a cluster-scoped child. */
  readonly namespace: string | undefined;
  /** The child's name. */
  readonly name: string;
  /** HTTP status code, e.g. 422 or 403. */
  readonly code: number;
  /** Machine-readable reason, e.g. `Invalid` or `Forbidden`. */
  readonly reason: string;
  /** What the API server said. */
  readonly message: string;
  /**
   * The member cluster of a fleet controller's child placed there with
   * `outcome.childIn`; `undefined` for a child in the object's own cluster.
   */
  readonly cluster: string | undefined;
}

/** Handed to every callback. */
export class Context {
  constructor(
    event: EventKind,
    namespace: string | undefined,
    name: string,
    failedChildren?: readonly FailedChild[],
    cluster?: string,
    members?: readonly string[],
  );
  /** Why this reconcile happens. */
  readonly event: EventKind;
  /**
   * The name of the cluster the object is in: `default` for the host's own
   * cluster, else the name the host engaged it by. `api` and `record`
   * address this cluster.
   */
  readonly cluster: string;
  /** Namespace of the reconciled object (`undefined` if cluster-scoped). */
  readonly namespace: string | undefined;
  /** Name of the reconciled object. */
  readonly name: string;
  /**
   * Children of the previous outcome for this object that were refused and
   * have not been applied since; empty when all were applied.
   */
  readonly failedChildren: readonly FailedChild[];
  /**
   * The member clusters of a fleet controller engaged now, in order (see
   * `Manifest.fleet`): where `outcome.childIn` may place children and
   * `apiIn` may read. Empty for a uniform controller.
   */
  readonly members: readonly string[];
  /** Structured logging under this reconcile's span. */
  readonly log: Log;
  /** A client for `kind` in `namespace`. */
  api<T extends KubeObject = KubeObject>(apiVersion: string, kind: string, namespace?: string): Api<T>;
  /**
   * A client that reads `kind` in `namespace` of the cluster named
   * `cluster`: the request's own, or for a fleet controller its home or one
   * of `members` (the host denies any other). `get`, `getOpt` and `list`
   * work; writes throw `Denied` without calling the host: a fleet controller
   * writes in its members through `outcome.childIn`.
   */
  apiIn<T extends KubeObject = KubeObject>(cluster: string, apiVersion: string, kind: string, namespace?: string): Api<T>;
  /** Records an Event right away; throws an `ApiError` when the host cannot. */
  record(event: Event): void;
  /** Opens a span of this reconcile (see `Log.span`). */
  span(name: string, attributes?: Record<string, unknown>): Span;
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
  /**
   * A desired child object (with `apiVersion` and `kind`); applied and owned
   * by the host, and pruned once an outcome no longer lists it (unless that
   * outcome says `keepChildren()`).
   */
  child(child: KubeObject): this;
  /**
   * A desired child object in the member cluster `cluster` of a fleet
   * controller (one of `ctx.members`): applied there, marked with labels
   * and annotations naming its owner, and pruned in that member once an
   * outcome no longer lists it, as for `child`.
   */
  childIn(cluster: string, child: KubeObject): this;
  /** The desired `status` of the reconciled object. */
  status(status: Record<string, unknown>): this;
  /** An event to record. */
  event(event: Event): this;
  /** Reconcile again after `seconds`, even if nothing changes. */
  requeueAfter(seconds: number): this;
  /**
   * Keep existing children as they are: apply the children listed, delete
   * none (`children-policy: keep`); they stay owned. From `delete()` it
   * keeps them for good: the host removes its ownerReference from each
   * before it removes its finalizer. `keepChildren(false)` restores the
   * default, prune.
   */
  keepChildren(keep?: boolean): this;
  /** True if `keepChildren()` was called. */
  readonly keepsChildren: boolean;
}

/** A status condition, as Kubernetes serializes a `metav1.Condition`. */
export interface Condition {
  lastTransitionTime: string;
  message: string;
  observedGeneration?: number;
  reason: string;
  status: "True" | "False" | "Unknown";
  type: string;
  [key: string]: unknown;
}

/** A condition to set with `setCondition`. */
export interface ConditionInput {
  type: string;
  /** `"True"`, `"False"`, `"Unknown"`, or a boolean. */
  status: "True" | "False" | "Unknown" | boolean;
  reason: string;
  message: string;
  /** Left out: removed from an existing condition. */
  observedGeneration?: number;
  /** Stands in for the current time (tests). */
  now?: Date | string;
}

/**
 * `conditions` with the condition of this type set, as a new array (like
 * controller-runtime's `meta.SetStatusCondition`): a new type is appended;
 * an existing one keeps its `lastTransitionTime` while its status stays the
 * same, and gets now (RFC 3339, seconds, `Z`) when it changes.
 */
export function setCondition(conditions: readonly any[] | undefined | null, condition: ConditionInput): Condition[];
export function setCondition(
  conditions: readonly any[] | undefined | null,
  type: string,
  status: "True" | "False" | "Unknown" | boolean,
  reason: string,
  message: string,
  observedGeneration?: number,
  now?: Date | string,
): Condition[];
/** The condition of this type (a copy), or `undefined`. */
export function findCondition(conditions: readonly any[] | undefined | null, type: string): Condition | undefined;
/** True if the condition of this type has status `"True"`. */
export function isConditionTrue(conditions: readonly any[] | undefined | null, type: string): boolean;
/** `conditions` without the condition of this type, as a new array. */
export function removeCondition(conditions: readonly any[] | undefined | null, type: string): Condition[];
/** A Kubernetes timestamp (RFC 3339, UTC, whole seconds) of `date` (default: now). */
export function timestamp(date?: Date): string;

/** Every API verb: get, list, watch, create, update, patch, delete (not bind or escalate). */
export const ALL_VERBS: readonly Verb[];
/** The read-only verbs: get, list, watch. */
export const READ_VERBS: readonly Verb[];
/**
 * A Kubernetes API verb, as in RBAC rules. `bind` and `escalate` are
 * RBAC-only: declare them on `ClusterRole` or `Role` of group
 * `rbac.authorization.k8s.io`, best with `Permission.names`.
 */
export type Verb = "get" | "list" | "watch" | "create" | "update" | "patch" | "delete" | "bind" | "escalate";
export const Verb: {
  readonly GET: "get";
  readonly LIST: "list";
  readonly WATCH: "watch";
  readonly CREATE: "create";
  readonly UPDATE: "update";
  readonly PATCH: "patch";
  readonly DELETE: "delete";
  readonly BIND: "bind";
  readonly ESCALATE: "escalate";
};

/** Where a permission applies. */
export type Scope = { tag: "cluster" } | { tag: "own-namespace" } | { tag: "namespaces"; val: string[] };
export const Scope: {
  readonly CLUSTER: Scope;
  readonly OWN_NAMESPACE: Scope;
  namespaces(names: string[]): Scope;
};

/** Where `Mapping.reference` reads a value on a watched object. */
export type Field = { tag: "name" } | { tag: "namespace" } | { tag: "label"; val: string } | { tag: "annotation"; val: string };
export const Field: {
  /** The watched object's own name. */
  readonly NAME: Field;
  /** The watched object's own namespace. */
  readonly NAMESPACE: Field;
  /** The value of this label. */
  label(key: string): Field;
  /** The value of this annotation. */
  annotation(key: string): Field;
};

/** How a change to a watched object maps to primary objects. */
export type Mapping =
  | { tag: "none" }
  | { tag: "same-name" }
  | { tag: "namespace" }
  | { tag: "label"; val: string }
  | { tag: "reference"; val: { name: Field; namespace: Field | undefined } }
  | { tag: "all" };
export const Mapping: {
  readonly NONE: Mapping;
  readonly SAME_NAME: Mapping;
  readonly NAMESPACE: Mapping;
  /** Every primary object. */
  readonly ALL: Mapping;
  label(key: string): Mapping;
  /**
   * The primary object whose name is read at `name` and, for a namespaced
   * primary, whose namespace is read at `namespace` (default: the watched
   * object's own namespace).
   */
  reference(name: Field, namespace?: Field): Mapping;
};

/** One permission: verbs on a kind, within a scope. */
export class Permission {
  constructor(group: string, kind: string, verbs: readonly Verb[]);
  scope(scope: Scope): this;
  withStatus(): this;
  /** Only objects with these names (RBAC `resourceNames`); not for list, watch or create. */
  names(...names: (string | readonly string[])[]): this;
}

/** A kind watched besides the primary and owned kinds. */
export class Watch {
  constructor(apiVersion: string, kind: string, mapping: Mapping);
  labelSelector(selector: string): this;
}

/** What a component declares about itself: a controller's kinds and grants, and the roles it serves. */
export class Manifest {
  constructor(name: string);
  primary(apiVersion: string, kind: string): this;
  crd(crd: object): this;
  /**
   * A kind of children. `labelSelector`: only matching children are
   * watched, cached and pruned. `scope`: where they may be written (default:
   * the reconciled object's namespace).
   */
  owns(apiVersion: string, kind: string, options?: { labelSelector?: string; scope?: Scope }): this;
  watches(watch: Watch): this;
  finalizer(name: string): this;
  permission(permission: Permission): this;
  resync(seconds: number): this;
  maxConcurrency(n: number): this;
  /** An admission webhook this component serves. */
  webhook(webhook: Webhook): this;
  /** This component converts the CRD of `kind` between its versions. */
  converts(apiVersion: string, kind: string): this;
  /** This component schedules the Pods whose `spec.schedulerName` is `name`. */
  scheduler(name: string): this;
  /**
   * Origins (`SCHEME://HOST[:PORT]`, e.g. `https://api.example.com`,
   * `https://*.example.com`, `http://10.0.0.7:8000-8010`) the component may
   * call over HTTP(S); the host refuses every other. None by default.
   */
  egress(...origins: (string | string[])[]): this;
  /**
   * The clusters a uniform controller runs in, by the names the host engaged
   * them by, given as arguments or arrays; adds to those declared before.
   * None (the default): every cluster the host serves.
   */
  clusters(...names: (string | readonly string[])[]): this;
  /**
   * Makes the component a fleet controller: it reconciles the primary
   * objects of the cluster `home` (default `default`, the host's own) and
   * places children in the `members` (`outcome.childIn`); `members` empty
   * or left out: every cluster the host serves but `home`. A string is a
   * home with every other cluster as a member.
   */
  fleet(fleet?: string | Fleet): this;
}

/** The clusters of a fleet controller, for `Manifest.fleet`. */
export interface Fleet {
  /** The cluster whose primary objects the component reconciles (default `default`). */
  home?: string;
  /** The member clusters; empty or left out: every cluster but `home`. */
  members?: readonly string[];
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
  /**
   * The children follow the object unless the outcome says `keepChildren()`;
   * the default forwards to `reconcile` with the children following.
   */
  delete(ctx: Context, obj: T): Outcome | undefined;
  reconcile(ctx: Context, obj: T): Outcome | undefined;
}

/** One call of `reconcile`, as the component export receives it. */
export interface ReconcileRequest {
  event: EventKind;
  object: Uint8Array;
  failedChildren: {
    child: { kind: { group: string; version: string; kind: string }; namespace?: string; name: string };
    code: number;
    reason: string;
    message: string;
    /** The member cluster of a member child; `undefined` for one in the object's own cluster. */
    cluster?: string;
  }[];
  /** The cluster the object is in (`default`: the host's own). */
  cluster: string;
  /** The member clusters of a fleet controller engaged now. */
  members: string[];
}

/** The shape of the `capstan:operator/controller@0.4.0` export. */
export interface ControllerExport {
  /** Returns the WIT `component-manifest`. */
  manifest(): unknown;
  /** Returns the outcome; throws the WIT `failure` record. */
  reconcile(request: ReconcileRequest): unknown;
}

/** The four exports of the `operator` world. */
export interface Exports {
  controller: ControllerExport;
  admission: { review(request: unknown): unknown };
  conversion: { convert(request: unknown): Uint8Array[] };
  scheduler: { schedule(request: unknown): string };
}

/**
 * The component's exports, from the classes that serve its roles (any
 * mix); roles not given answer "not served". The manifest comes from the
 * controller, else from the first role class given:
 *
 * ```js
 * export const { controller, admission, conversion, scheduler } =
 *   exportComponent({ controller: Greeter, admission: GreetingHooks });
 * ```
 */
export function exportComponent(roles: {
  controller?: new () => Controller<any>;
  admission?: new () => Admission<any>;
  conversion?: new () => Conversion;
  scheduler?: new () => Scheduler;
}): Exports;

/**
 * The base of the role classes besides the controller. Without a
 * controller, the first role class given to `exportComponent` declares the
 * manifest.
 */
export class Component {
  manifest(): Manifest;
}

/** The operations an admission webhook is called for. */
export const Operation: {
  readonly CREATE: "CREATE";
  readonly UPDATE: "UPDATE";
  readonly DELETE: "DELETE";
  readonly CONNECT: "CONNECT";
};
export type Operation = "CREATE" | "UPDATE" | "DELETE" | "CONNECT";

/** An admission webhook declaration, for `Manifest.webhook`. */
export class Webhook {
  /** A validating webhook; `name` is a DNS name of at least three labels. */
  static validating(name: string): Webhook;
  /** A mutating (defaulting) webhook. */
  static mutating(name: string): Webhook;
  /** A kind (in its version) the webhook is called for. */
  kind(apiVersion: string, kind: string): this;
  /** The operations it is called for (default: create and update). */
  operations(...operations: Operation[]): this;
  /** `failurePolicy: Ignore` (default `Fail`). */
  ignoreFailures(): this;
  /** 1 to 30 seconds (default 10). */
  timeoutSeconds(seconds: number): this;
  /** `sideEffects: NoneOnDryRun` (default `None`). */
  sideEffectsOnDryRun(): this;
  /** Only objects in namespaces matching this `LabelSelector`. */
  namespaceSelector(selector: object): this;
  /** Only objects matching this `LabelSelector`. */
  objectSelector(selector: object): this;
}

/** One admission request, with its objects decoded. */
export interface AdmissionRequest<T extends KubeObject = KubeObject> {
  webhook: string;
  operation: Operation;
  name: string;
  namespace?: string;
  /** The object as it would be stored; undefined on delete. */
  object?: T;
  /**
   * The object as it is stored; undefined on create, and when it does not
   * decode (then `undecodableOldObject` holds it).
   */
  oldObject?: T;
  /**
   * The stored object when it does not decode: the request still goes to
   * the handler (a delete, an update to an object that decodes).
   */
  undecodableOldObject?: Undecodable;
  subResource?: string;
  userInfo: { username: string; uid: string; groups: string[] };
  dryRun: boolean;
  uid: string;
  /** The object's kind, in the version the webhook asked for. */
  kind: GroupVersionKind;
  /**
   * The kind in the version the user's request was made in: differs from
   * `kind` when the API server converted the object for this webhook
   * (`matchPolicy: Equivalent`).
   */
  requestKind: GroupVersionKind;
}

/** A kind in one version of its API group (`group` is `""` for the core group). */
export interface GroupVersionKind {
  readonly group: string;
  readonly version: string;
  readonly kind: string;
}

/** An object of a request that does not decode: what came, and why. */
export interface Undecodable {
  /** The object as it came (its bytes, as text). */
  raw: string;
  /** Why it does not decode. */
  error: string;
}

/** The answer to an admission request. */
export class Verdict {
  static allow(): Verdict;
  static deny(message: string): Verdict;
  readonly allowed: boolean;
  readonly message?: string;
  readonly warnings: string[];
  /** The HTTP status code of a denial (400 to 599; default 403). */
  code(code: number): this;
  /** A warning shown to the user either way. */
  warn(warning: string): this;
}

/**
 * Admission logic; both methods allow by default. An exception denies the
 * request with code 500.
 */
export class Admission<T extends KubeObject = KubeObject> extends Component {
  validate(request: AdmissionRequest<T>): Verdict;
  /** Change `obj` in place; the host sends the JSON Patch to it. */
  mutate(request: AdmissionRequest<T>, obj: T): Verdict;
  /** A mutating webhook's request without an object (a delete). */
  mutateWithoutObject(request: AdmissionRequest<T>): Verdict;
  /**
   * Called instead of the methods above when the object to store does not
   * decode; the default denies with 400 and the reason.
   */
  undecodable(request: AdmissionRequest<T>, obj: Undecodable): Verdict;
}

/** Converts objects of one CRD between its versions; throw to fail the request. */
export class Conversion extends Component {
  convert(obj: KubeObject, desiredApiVersion: string): KubeObject;
}

/**
 * Conversion between versions `old` and `new`: `up` converts old to new,
 * `down` new to old. `apiVersion` is set, `kind` and `metadata` are carried
 * over (but the `labels` and `annotations` the converted object sets), and
 * so is a `status` the converted object lacks.
 */
export function between(
  obj: KubeObject,
  to: string,
  up: (obj: any) => any,
  down: (obj: any) => any,
  versions: { old: string; new: string },
): KubeObject;

/** Resource amounts by name, in milli-units. */
export type Resources = Record<string, number>;

/** A Node's taint (`spec.taints`). */
export interface Taint {
  key: string;
  value?: string;
  /** `NoSchedule`, `PreferNoSchedule` or `NoExecute`. */
  effect: string;
  timeAdded?: string;
}

/**
 * A candidate Node and what the host knows of it. The Node's JSON is
 * decoded the first time `node` (or a helper from `labels` down) is read,
 * and never if it is not.
 */
export class NodeInfo {
  constructor(name: string, node: any, allocatable: Resources, requested: Resources, pods?: number);
  readonly name: string;
  /**
   * The `v1` Node, decoded on first read; throws `Unschedulable` if the
   * host's JSON does not decode.
   */
  node: any;
  readonly allocatable: Resources;
  readonly requested: Resources;
  readonly pods: number;
  /** Allocatable minus requested; 0 for a resource the Node does not list. */
  free(resource: string): number;
  /** True if every resource `needed` lists fits in what is free. */
  fits(needed: Resources): boolean;
  /** The Node's labels (empty if it has none). */
  labels(): Record<string, string>;
  /** The value of a label of the Node. */
  label(key: string): string | undefined;
  /** True if the Node is cordoned (`spec.unschedulable`). */
  unschedulable(): boolean;
  /** The Node's taints (empty if it has none). */
  taints(): Taint[];
  /** The status (`True`, `False`, `Unknown`) of the condition of type `type`, if the Node has one. */
  condition(type: string): string | undefined;
  /** True if the Node's `Ready` condition is `True`. */
  ready(): boolean;
  /**
   * The first of the Node's `NoSchedule` and `NoExecute` taints that `pod`
   * does not tolerate (see `tolerates`), if any; `PreferNoSchedule` taints
   * are never returned.
   */
  untoleratedTaint(pod: any): Taint | undefined;
}

/** Why a Pod fits no Node now: throw or return it from `schedule`. */
export class Unschedulable extends Error {
  constructor(...reasons: string[]);
  readonly reasons: string[];
}

/** A scheduling policy. */
export class Scheduler extends Component {
  /** The cluster the Pod is in (`default`: the host's own), set before `schedule` is called. */
  cluster: string;
  /** The name of the Node for `pod`, or `Unschedulable`. */
  schedule(pod: any, nodes: NodeInfo[]): string | Unschedulable;
}

/** What a Pod requests (containers, init containers, overhead; `pods` 1000). */
export function podRequests(pod: any): Resources;

/**
 * True if one of the Pod's tolerations tolerates `taint`, matched as
 * Kubernetes matches them (effect and key when set, then `Exists` any value,
 * `Equal` or no operator the same value; `{ operator: "Exists" }` tolerates
 * every taint).
 */
export function tolerates(pod: any, taint: { key?: string; value?: string; effect?: string }): boolean;

/** A Kubernetes quantity in milli-units, or undefined. */
export function parseQuantity(quantity: string): number | undefined;

/**
 * HTTP(S) calls to the origins the manifest declares in `egress`, through
 * `wasi:http/outgoing-handler`. Components built with SpiderMonkey
 * (componentize-js) only: the QuickJS engine cannot build a world that
 * imports wasi:http, and a QuickJS build of an app that uses `http` fails.
 *
 * ```js
 * const r = http.request("POST", "https://hooks.example.com/notify", { json: { name: ctx.name } });
 * if (!r.ok) throw new Transient(`hooks.example.com answered ${r.status}`);
 * ```
 */
export namespace http {
  /** A request that got no response: refused by the host, or failed on the way. */
  class HttpError extends Error {
    constructor(code: string, message?: string);
    /** What failed, as wasi:http names it: `http-request-denied`, `dns-error`, `connection-refused`, ... */
    readonly code: string;
    /** Details, when there are any. */
    readonly detail: string;
  }
  /** A request as `request` sends it (and as a FakeHost stub gets it). */
  class Request {
    readonly method: string;
    readonly url: string;
    /** Header names in lower case. */
    readonly headers: Record<string, string>;
    readonly body: Uint8Array;
    /** `scheme://host[:port]` of the URL, without the scheme's default port. */
    readonly origin: string;
    json(): any;
  }
  /** A response, read whole. */
  class Response {
    constructor(status: number, headers?: Record<string, string>, body?: Uint8Array);
    readonly status: number;
    /** Header names in lower case; repeated headers joined with `, `. */
    readonly headers: Record<string, string>;
    readonly body: Uint8Array;
    /** True for a status from 200 to 299. */
    readonly ok: boolean;
    text(): string;
    json(): any;
    /** A response with `value` as its JSON body. */
    static ofJson(value: unknown, status?: number): Response;
  }
  /**
   * Sends a request and reads the whole response; throws `HttpError` when
   * none came (the origin is not declared in `egress`, DNS, connection,
   * TLS, timeout). `timeout`: seconds to connect, and between bytes.
   */
  function request(
    method: string,
    url: string,
    options?: { json?: unknown; body?: Uint8Array | string; headers?: Record<string, string>; timeout?: number },
  ): Response;
  /** `scheme://host[:port]` of `url`, lower case, without the scheme's default port. */
  function originOf(url: string): string;
}
