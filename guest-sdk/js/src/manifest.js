// What a controller declares: the `Manifest` builder.

import { gvk } from "./kinds.js";
import { fromBytes, toBytes } from "./json.js";

/**
 * Every API verb: get, list, watch, create, update, patch, delete (not the
 * RBAC-only `bind` and `escalate`, which are asked for by name).
 */
export const ALL_VERBS = Object.freeze(["get", "list", "watch", "create", "update", "patch", "delete"]);
/** The read-only verbs: get, list, watch. */
export const READ_VERBS = Object.freeze(["get", "list", "watch"]);

/**
 * A Kubernetes API verb, as in RBAC rules: `Verb.GET` is `"get"`. `BIND`
 * (bind a Role or ClusterRole in a binding without holding its
 * permissions) and `ESCALATE` (write a role with permissions the host does
 * not hold) are RBAC-only: declare them on kind `ClusterRole` or `Role` of
 * group `rbac.authorization.k8s.io`, best with `Permission.names`.
 */
export const Verb = Object.freeze({
  GET: "get",
  LIST: "list",
  WATCH: "watch",
  CREATE: "create",
  UPDATE: "update",
  PATCH: "patch",
  DELETE: "delete",
  BIND: "bind",
  ESCALATE: "escalate",
});

const VERBS = new Set(Object.values(Verb));

/**
 * Cluster names given as arguments or arrays, flattened; throws a TypeError
 * for anything but strings.
 * @param {string} what
 * @param {readonly unknown[]} names
 * @returns {string[]}
 */
function clusterNames(what, names) {
  const flat = names.flat();
  for (const name of flat) {
    if (typeof name !== "string") throw new TypeError(`${what} are cluster names (strings), not ${typeof name}`);
  }
  return /** @type {string[]} */ (flat);
}

/** Where a permission (or an owned kind) applies. */
export const Scope = Object.freeze({
  /** Every namespace, and cluster-scoped objects. */
  CLUSTER: Object.freeze({ tag: "cluster" }),
  /**
   * The namespace of the object being reconciled (the default); for a
   * cluster-scoped primary, cluster-scoped objects only.
   */
  OWN_NAMESPACE: Object.freeze({ tag: "own-namespace" }),
  /**
   * Only these namespaces.
   * @param {string[]} names
   */
  namespaces: (names) => ({ tag: "namespaces", val: [...names] }),
});

/** Where a `Mapping.reference` reads a value on a watched object. */
export const Field = Object.freeze({
  /** The watched object's own name. */
  NAME: Object.freeze({ tag: "name" }),
  /** The watched object's own namespace (nothing is triggered for a cluster-scoped object). */
  NAMESPACE: Object.freeze({ tag: "namespace" }),
  /**
   * The value of this label.
   * @param {string} key
   */
  label: (key) => ({ tag: "label", val: key }),
  /**
   * The value of this annotation.
   * @param {string} key
   */
  annotation: (key) => ({ tag: "annotation", val: key }),
});

const FIELD_TAGS = new Set(["name", "namespace", "label", "annotation"]);

/** @param {unknown} f */
function checkField(f) {
  if (!f || typeof f !== "object" || !FIELD_TAGS.has(/** @type {any} */ (f).tag)) {
    throw new TypeError("Mapping.reference takes Field values (Field.NAME, Field.label(key), ...)");
  }
  return f;
}

/**
 * How a change to a watched object maps to primary objects to reconcile.
 * For a cluster-scoped primary "in the same namespace" is dropped: `label`
 * and `SAME_NAME` name a cluster-scoped primary, and `NAMESPACE` triggers
 * every primary object.
 */
export const Mapping = Object.freeze({
  /** Trigger nothing: cache the kind for reads. */
  NONE: Object.freeze({ tag: "none" }),
  /** The primary object in the same namespace with the same name. */
  SAME_NAME: Object.freeze({ tag: "same-name" }),
  /** Every primary object in the same namespace. */
  NAMESPACE: Object.freeze({ tag: "namespace" }),
  /**
   * The primary object in the same namespace named by this label's value.
   * @param {string} key
   */
  label: (key) => ({ tag: "label", val: key }),
  /**
   * The primary object whose name is read at `name` on the watched object
   * and, for a namespaced primary, whose namespace is read at `namespace`
   * (omitted: the watched object's own namespace). Maps any object,
   * namespaced or not, to any primary, namespaced or not:
   *
   * ```js
   * Mapping.reference(Field.label("example.com/team"), Field.label("example.com/team-namespace"))
   * ```
   * @param {{tag: string, val?: string}} name
   * @param {{tag: string, val?: string}} [namespace]
   */
  reference: (name, namespace) => ({
    tag: "reference",
    val: { name: checkField(name), namespace: namespace === undefined || namespace === null ? undefined : checkField(namespace) },
  }),
  /** Every primary object. */
  ALL: Object.freeze({ tag: "all" }),
});

/**
 * One permission: verbs on a kind, within a scope.
 *
 * ```js
 * new Permission("", "Secret", READ_VERBS).scope(Scope.OWN_NAMESPACE)
 * new Permission("rbac.authorization.k8s.io", "ClusterRole", [Verb.BIND]).scope(Scope.CLUSTER).names("view")
 * ```
 */
export class Permission {
  /**
   * @param {string} group API group (`""` for the core group, `*` for all)
   * @param {string} kind kind, or `*`
   * @param {readonly string[]} verbs
   */
  constructor(group, kind, verbs) {
    /** @internal */
    for (const verb of verbs) {
      if (!VERBS.has(verb)) throw new TypeError(`unknown verb ${JSON.stringify(verb)}`);
    }
    this.wit = { group, kind, verbs: [...verbs], scope: Scope.OWN_NAMESPACE, status: false, resourceNames: [] };
  }

  /**
   * Only the objects with these names (RBAC `resourceNames`), given as
   * arguments or as arrays; replaces names set before. Not for `list`,
   * `watch` or `create`, which RBAC cannot limit by name.
   * @param {...(string | readonly string[])} names
   */
  names(...names) {
    this.wit.resourceNames = names.flat();
    return this;
  }

  /** Sets where the permission applies. @param {{tag: string, val?: string[]}} scope */
  scope(scope) {
    this.wit.scope = scope;
    return this;
  }

  /** Also allows the `status` subresource with the same verbs. */
  withStatus() {
    this.wit.status = true;
    return this;
  }
}

/**
 * A kind watched besides the primary and owned kinds; a change triggers the
 * primary objects `mapping` names. Read access is granted with it.
 */
export class Watch {
  /**
   * @param {string} apiVersion
   * @param {string} kind
   * @param {{tag: string, val?: string}} mapping
   */
  constructor(apiVersion, kind, mapping) {
    /** @internal */
    this.wit = { kind: gvk(apiVersion, kind), mapping, labelSelector: undefined };
  }

  /** Only watches objects matching a label selector. @param {string} selector */
  labelSelector(selector) {
    this.wit.labelSelector = selector;
    return this;
  }
}

/**
 * What a controller declares about itself; built in `manifest()`.
 *
 * ```js
 * new Manifest("web")
 *   .primary("apps/v1", "Deployment")
 *   .owns("v1", "ConfigMap")
 *   .owns("batch/v1", "Job", { labelSelector: "app.kubernetes.io/managed-by=web" })
 *   .watches(new Watch("v1", "Secret", Mapping.label("app")))
 *   .watches(new Watch("v1", "ConfigMap", Mapping.reference(Field.annotation("example.com/owner"))))
 *   .finalizer("example.com/cleanup")
 *   .resync(600)
 *   .maxConcurrency(4)
 *   .egress("https://api.example.com");
 * ```
 *
 * A fleet controller (primary objects in one cluster, children in others):
 *
 * ```js
 * new Manifest("spreader").primary("example.com/v1", "Spread").owns("v1", "ConfigMap").fleet({ home: "default" });
 * ```
 */
export class Manifest {
  /**
   * A manifest for a controller named `name` (a DNS-1123 label, unique in
   * one host). Set the primary kind with `primary`.
   * @param {string} name
   */
  constructor(name) {
    /** @internal */
    this.roles = { reconcile: false, admission: [], conversion: [], scheduler: undefined };
    /** @internal @type {string[]} */
    this.origins = [];
    /** @internal @type {string[]} */
    this.clusterNames = [];
    /** @internal @type {{home: string, members: string[]} | undefined} */
    this.fleetClusters = undefined;
    /** @internal */
    this.wit = {
      name,
      primary: { group: "", version: "", kind: "" },
      crds: [],
      owns: [],
      watches: [],
      finalizer: undefined,
      permissions: [],
      resyncSeconds: undefined,
      maxConcurrency: 1,
    };
  }

  /** The kind this controller reconciles. @param {string} apiVersion @param {string} kind */
  primary(apiVersion, kind) {
    this.wit.primary = gvk(apiVersion, kind);
    return this;
  }

  /**
   * A CustomResourceDefinition this controller defines: a full
   * `apiextensions.k8s.io/v1` object.
   * @param {object} crd
   */
  crd(crd) {
    this.wit.crds.push(toBytes(crd));
    return this;
  }

  /**
   * A kind of child objects this controller creates.
   *
   * `labelSelector`: only children matching it are watched, cached and
   * pruned, and every child an outcome lists must match it. `scope`: where
   * children of this kind may be written; by default the reconciled
   * object's namespace (cluster-scoped children only, for a cluster-scoped
   * primary). A cluster-scoped primary with namespaced children gives
   * `Scope.CLUSTER` or `Scope.namespaces([...])`:
   *
   * ```js
   * .owns("v1", "ConfigMap", { labelSelector: "example.com/tenant", scope: Scope.CLUSTER })
   * ```
   * @param {string} apiVersion
   * @param {string} kind
   * @param {{labelSelector?: string, scope?: {tag: string, val?: string[]}}} [options]
   */
  owns(apiVersion, kind, options = {}) {
    const { labelSelector, scope } = options;
    if (scope !== undefined && !(scope && typeof scope === "object" && typeof scope.tag === "string")) {
      throw new TypeError("scope must be a Scope (Scope.CLUSTER, Scope.OWN_NAMESPACE, Scope.namespaces([...]))");
    }
    this.wit.owns.push({ kind: gvk(apiVersion, kind), labelSelector: labelSelector ?? undefined, scope: scope ?? undefined });
    return this;
  }

  /** Another kind this controller reads or reacts to. @param {Watch} watch */
  watches(watch) {
    this.wit.watches.push(watch.wit);
    return this;
  }

  /**
   * A finalizer the host adds to primary objects, so that `delete` is
   * delivered before they go away, e.g. `example.com/cleanup`.
   * @param {string} name
   */
  finalizer(name) {
    this.wit.finalizer = name;
    return this;
  }

  /** A permission beyond those the primary, owned and watched kinds imply. @param {Permission} permission */
  permission(permission) {
    this.wit.permissions.push(permission.wit);
    return this;
  }

  /** Reconcile every object at least this often (seconds, rounded up). @param {number} seconds */
  resync(seconds) {
    this.wit.resyncSeconds = Math.min(Math.ceil(seconds), 0xffffffff);
    return this;
  }

  /** At most `n` reconciles in flight at once (1, the default, to 64). @param {number} n */
  maxConcurrency(n) {
    this.wit.maxConcurrency = Math.max(1, Math.min(Math.floor(n), 0xffffffff));
    return this;
  }

  /**
   * An admission webhook this component serves (see `Admission`):
   *
   * ```js
   * .webhook(Webhook.validating("validate.greetings.example.com").kind("example.com/v1", "Greeting"))
   * ```
   * @param {import("./admission.js").Webhook} webhook
   */
  webhook(webhook) {
    this.roles.admission.push(webhook.wit);
    return this;
  }

  /**
   * This component converts the CRD of `kind` (in the group of
   * `apiVersion`) between its versions (see `Conversion`); the CRD must be
   * one of `crd`, with two or more versions.
   * @param {string} apiVersion
   * @param {string} kind
   */
  converts(apiVersion, kind) {
    this.roles.conversion.push({ group: gvk(apiVersion, kind).group, kind });
    return this;
  }

  /**
   * This component schedules the Pods whose `spec.schedulerName` is `name`
   * (see `Scheduler`).
   * @param {string} name
   */
  scheduler(name) {
    this.roles.scheduler = { name };
    return this;
  }

  /**
   * Origins the component may call over HTTP(S), given as arguments or as
   * one array; adds to those declared before. The host refuses every other
   * request before it connects; none is declared by default.
   *
   * Each origin is `SCHEME://HOST[:PORT]`: scheme `http` or `https`; host a
   * DNS name, `*.` and a domain for any name below it, or an IP address
   * (IPv6 in brackets); port a number or a range `LOW-HIGH`, the scheme's
   * default when left out. No path, query, user or bare `*`; the host checks
   * them when it loads the component. Components built with the QuickJS
   * engine cannot make HTTP calls (see docs/guests/javascript.md); those
   * built with SpiderMonkey can, with `fetch` or `http.request`.
   *
   * ```js
   * .egress("https://api.example.com", "http://alertmanager.monitoring.svc:9093")
   * ```
   * @param {...(string | string[])} origins
   */
  egress(...origins) {
    for (const o of origins.flat()) {
      if (typeof o !== "string") throw new TypeError(`an egress origin is a string, not ${typeof o}`);
      this.origins.push(o);
    }
    return this;
  }

  /**
   * The clusters a uniform controller runs in, by the names the host engaged
   * them by (`default` for the host's own), given as arguments or as one
   * array; adds to those declared before. None declared (the default): every
   * cluster the host serves. A fleet controller (`fleet`) runs in its home
   * only, and the host ignores these.
   *
   * ```js
   * .clusters("default", "eu-west")
   * ```
   * @param {...(string | readonly string[])} names
   */
  clusters(...names) {
    this.clusterNames.push(...clusterNames("clusters", names));
    return this;
  }

  /**
   * Makes the component a fleet controller: it reconciles the primary
   * objects of the cluster `home` (`default`: the host's own) and no
   * other's, places children in the `members` with `outcome.childIn` and
   * reads there with `ctx.apiIn`. `members` empty or left out: every cluster
   * the host serves but `home`. The members engaged at a call are
   * `ctx.members`. The host checks the names when it loads the component.
   *
   * ```js
   * .fleet({ home: "default", members: ["eu-west", "us-east"] })
   * .fleet("default") // every cluster but the home one
   * ```
   * @param {string | {home?: string, members?: readonly string[]}} [fleet]
   */
  fleet(fleet = {}) {
    const { home = "default", members = [] } = typeof fleet === "string" ? { home: fleet } : (fleet ?? {});
    if (typeof home !== "string") throw new TypeError(`fleet home must be a cluster name (a string), not ${typeof home}`);
    if (typeof members === "string") throw new TypeError("fleet members is an array of cluster names, not a string");
    this.fleetClusters = { home, members: clusterNames("fleet members", [...members]) };
    return this;
  }

  /**
   * The contract's `component-manifest`. Without a primary kind, the
   * component is about `v1` `Pod` when it schedules, else about the first
   * kind its webhooks check or the first CRD it converts.
   * @internal
   * @param {boolean} reconcile
   */
  component(reconcile) {
    this.roles.reconcile = reconcile;
    if (!this.wit.primary.kind) {
      const hooked = this.roles.admission.find((w) => w.kinds.length > 0);
      if (this.roles.scheduler !== undefined) {
        this.wit.primary = gvk("v1", "Pod");
      } else if (hooked) {
        this.wit.primary = { ...hooked.kinds[0] };
      } else if (this.roles.conversion.length > 0) {
        const { group, kind } = this.roles.conversion[0];
        this.wit.primary = { group, version: this.crdVersion(kind), kind };
      }
    }
    return {
      controller: this.wit,
      roles: this.roles,
      egress: [...this.origins],
      clusters: [...this.clusterNames],
      fleet: this.fleetClusters === undefined ? undefined : { home: this.fleetClusters.home, members: [...this.fleetClusters.members] },
    };
  }

  /** @internal The first version of the declared CRD of `kind`, or "". @param {string} kind */
  crdVersion(kind) {
    for (const bytes of this.wit.crds) {
      try {
        const crd = fromBytes(bytes);
        if (crd?.spec?.names?.kind === kind) return String(crd.spec.versions?.[0]?.name ?? "");
      } catch {
        // not JSON: the host reports it
      }
    }
    return "";
  }
}
