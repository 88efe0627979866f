// What a controller declares: the `Manifest` builder.

import { gvk } from "./kinds.js";
import { toBytes } from "./json.js";

/** Every verb. */
export const ALL_VERBS = Object.freeze(["get", "list", "watch", "create", "update", "patch", "delete"]);
/** The read-only verbs: get, list, watch. */
export const READ_VERBS = Object.freeze(["get", "list", "watch"]);

/** Where a permission applies. */
export const Scope = Object.freeze({
  /** Every namespace, and cluster-scoped kinds. */
  CLUSTER: Object.freeze({ tag: "cluster" }),
  /** Only the namespace of the object being reconciled (the default). */
  OWN_NAMESPACE: Object.freeze({ tag: "own-namespace" }),
  /**
   * Only these namespaces.
   * @param {string[]} names
   */
  namespaces: (names) => ({ tag: "namespaces", val: [...names] }),
});

/** How a change to a watched object maps to primary objects to reconcile. */
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
});

/**
 * One permission: verbs on a kind, within a scope.
 *
 * ```js
 * new Permission("", "Secret", READ_VERBS).scope(Scope.OWN_NAMESPACE)
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
    this.wit = { group, kind, verbs: [...verbs], scope: Scope.OWN_NAMESPACE, status: false };
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
 *   .watches(new Watch("v1", "Secret", Mapping.label("app")))
 *   .finalizer("example.com/cleanup")
 *   .resync(600)
 *   .maxConcurrency(4);
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

  /** A kind of child objects this controller creates. @param {string} apiVersion @param {string} kind */
  owns(apiVersion, kind) {
    this.wit.owns.push(gvk(apiVersion, kind));
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

  /** At most `n` reconciles in flight at once (minimum 1, the default). @param {number} n */
  maxConcurrency(n) {
    this.wit.maxConcurrency = Math.max(1, Math.min(Math.floor(n), 0xffffffff));
    return this;
  }
}
