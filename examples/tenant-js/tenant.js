// The tenant operator, in JavaScript: a cluster-scoped `Tenant` custom
// resource whose controller makes, for each tenant, a Namespace
// `tenant-<name>` and in it a ResourceQuota, a RoleBinding that makes the
// tenant's admins `admin` there, and a ConfigMap describing the tenant.
//
// The same controller as the Rust tenant operator (examples/tenant), with
// the same manifest, CRD, children, status, events and errors, and tested by
// the same scenarios:
//
//   tests/build-polyglot-guests.sh
//   capstan test $CARGO_TARGET_DIR/guests/tenant-js.wasm examples/tenant/scenarios
//
// It shows what the greeter does not: a cluster-scoped primary with a
// cluster-scoped child and namespaced children (owned with `Scope.CLUSTER`
// and a label selector), a RoleBinding to the ClusterRole `admin` (which
// needs `bind` on it), a terminal error that sets `Ready=False`, children
// the API server refused (`ctx.failedChildren`), a reference mapping from
// annotated Secrets, and conditions kept with `setCondition`.

import {
  Controller,
  Event,
  Field,
  Manifest,
  Mapping,
  Outcome,
  Permission,
  Scope,
  Terminal,
  Verb,
  Watch,
  exportComponent,
  setCondition,
} from "capstan-guest";

// Bundled into the component at build time; the Rust Tenant's CRD (see
// README.md).
import crd from "./tenant-crd.json" with { type: "json" };

/** The finalizer the tenant controller asks the host to manage. */
export const FINALIZER = "tenants.examples.capstan.dev/cleanup";
/** The label every child carries: the tenant's name. */
export const TENANT_LABEL = "tenants.examples.capstan.dev/tenant";
/** The annotation that ties a Secret anywhere to a tenant. */
export const SECRET_ANNOTATION = "tenants.examples.capstan.dev/tenant";
/** The ClusterRole the tenant's admins are bound to in its namespace. */
export const ADMIN_ROLE = "admin";

const RBAC_GROUP = "rbac.authorization.k8s.io";

/** The name of a tenant's namespace. @param {string} tenant */
export const namespaceName = (tenant) => `tenant-${tenant}`;

/**
 * The object's name, or its `generateName` (kube's `name_any`).
 * @param {any} obj
 */
const nameAny = (obj) => obj.metadata?.name ?? obj.metadata?.generateName ?? "";

/**
 * Metadata of a child: its name, namespace and the tenant label.
 * @param {string} name
 * @param {string | undefined} namespace
 * @param {string} tenant
 */
function meta(name, namespace, tenant) {
  return {
    name,
    ...(namespace !== undefined ? { namespace } : {}),
    labels: { [TENANT_LABEL]: tenant },
  };
}

// Rust's `str::trim` (Unicode White_Space), which differs from
// `String.prototype.trim` in U+0085 and U+FEFF.
const BLANK = /^[\t\n\v\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]*$/;

/** What is wrong with a spec, if anything. @param {{admins: string[]}} spec */
function invalid(spec) {
  if (spec.admins.length === 0) {
    return "spec.admins lists no one";
  }
  return spec.admins.some((a) => BLANK.test(a)) ? "spec.admins has an empty name" : undefined;
}

const isObject = (/** @type {unknown} */ v) => v !== null && typeof v === "object" && !Array.isArray(v);
const isString = (/** @type {unknown} */ v) => typeof v === "string";

/**
 * Why `obj` is not a Tenant the Rust type would decode, if it is not: a
 * `spec` with a list of `admins` and a map of string `quota`, and status
 * conditions with their required fields. The Rust SDK fails such an object
 * with a terminal error (its message names serde's complaint; this one says
 * the same in its own words).
 * @param {any} obj
 */
function shapeError(obj) {
  const spec = obj.spec;
  if (!isObject(spec)) return "spec: expected an object";
  if (!Array.isArray(spec.admins) || !spec.admins.every(isString)) return "spec.admins: expected a list of strings";
  if ("quota" in spec && !(isObject(spec.quota) && Object.values(spec.quota).every(isString))) {
    return "spec.quota: expected a map of strings";
  }
  const status = obj.status;
  if (status === undefined || status === null) return undefined;
  if (!isObject(status)) return "status: expected an object";
  if (status.namespace !== undefined && status.namespace !== null && !isString(status.namespace)) {
    return "status.namespace: expected a string";
  }
  if (status.observedGeneration !== undefined && status.observedGeneration !== null && !Number.isInteger(status.observedGeneration)) {
    return "status.observedGeneration: expected an integer";
  }
  if ("conditions" in status) {
    const conditions = status.conditions;
    const required = ["lastTransitionTime", "message", "reason", "status", "type"];
    if (!Array.isArray(conditions) || !conditions.every((c) => isObject(c) && required.every((k) => isString(c[k])))) {
      return "status.conditions: expected a list of conditions";
    }
  }
  return undefined;
}

/**
 * The tenant, or a terminal error if it is not one.
 * @param {any} obj
 */
function checked(obj) {
  const wrong = shapeError(obj);
  if (wrong !== undefined) throw new Terminal(`object does not match the controller's type: ${wrong}`);
  return obj;
}

/**
 * A condition as the Rust `Condition` keeps it: its six fields only.
 * @param {any} c
 */
function asCondition(c) {
  return {
    lastTransitionTime: c.lastTransitionTime,
    message: c.message,
    ...(c.observedGeneration !== undefined && c.observedGeneration !== null ? { observedGeneration: c.observedGeneration } : {}),
    reason: c.reason,
    status: c.status,
    type: c.type,
  };
}

/**
 * The status with `Ready` set, keeping the other conditions.
 * @param {any} tenant
 * @param {{type: string, status: "True" | "False", reason: string, message: string}} ready
 */
function status(tenant, ready) {
  const previous = tenant.status ?? {};
  const conditions = setCondition((previous.conditions ?? []).map(asCondition), ready);
  const generation = tenant.metadata?.generation;
  return {
    ...(generation !== undefined && generation !== null ? { observedGeneration: generation } : {}),
    namespace: namespaceName(nameAny(tenant)),
    conditions,
  };
}

/** A condition with no observed generation, for `setCondition`. */
const condition = (
  /** @type {string} */ type,
  /** @type {"True" | "False"} */ status,
  /** @type {string} */ reason,
  /** @type {string} */ message,
) => ({ type, status, reason, message });

/** The tenant controller. */
export class Tenants extends Controller {
  /**
   * Tenants and their CRD; Namespaces, and ResourceQuotas, RoleBindings and
   * ConfigMaps in any namespace with the tenant label; annotated Secrets;
   * `bind` on the ClusterRole `admin`; a finalizer.
   */
  manifest() {
    const selected = { labelSelector: TENANT_LABEL, scope: Scope.CLUSTER };
    return new Manifest("tenants")
      .primary("examples.capstan.dev/v1alpha1", "Tenant")
      .crd(crd)
      .owns("v1", "Namespace")
      .owns("v1", "ResourceQuota", selected)
      .owns("rbac.authorization.k8s.io/v1", "RoleBinding", selected)
      .owns("v1", "ConfigMap", selected)
      .watches(new Watch("v1", "Secret", Mapping.reference(Field.annotation(SECRET_ANNOTATION))).labelSelector(TENANT_LABEL))
      .permission(new Permission(RBAC_GROUP, "ClusterRole", [Verb.BIND]).scope(Scope.CLUSTER).names(ADMIN_ROLE))
      .finalizer(FINALIZER);
  }

  /**
   * Reconciles, then records that the namespace was provisioned.
   * @param {import("capstan-guest").Context} ctx
   * @param {any} tenant
   */
  add(ctx, tenant) {
    const outcome = this.reconcile(ctx, tenant);
    return outcome.event(Event.normal("Created", "Provision").note("tenant namespace provisioned"));
  }

  /**
   * @param {import("capstan-guest").Context} ctx
   * @param {any} tenant
   */
  delete(ctx, tenant) {
    checked(tenant);
    ctx.log.info("tenant deleted", { name: nameAny(tenant) });
    // The namespace and everything in it follow through their owner
    // references: the garbage collector deletes them once the tenant is
    // gone. (`keepChildren()` here would keep them, ownerless.)
    return new Outcome().event(Event.normal("Deleted", "Cleanup").note("tenant namespace follows"));
  }

  /**
   * Applies the Namespace, ResourceQuota, RoleBinding and ConfigMap and
   * reports `Ready`; an invalid spec is a terminal error with
   * `Ready=False`, and refused children make `Ready=False`.
   * @param {import("capstan-guest").Context} ctx
   * @param {any} tenant
   */
  reconcile(ctx, tenant) {
    checked(tenant);
    const name = nameAny(tenant);
    const spec = tenant.spec;
    const admins = spec.admins;
    const reason = invalid(spec);
    if (reason !== undefined) {
      // Keep what exists; say why nothing changes.
      const ready = condition("Ready", "False", "InvalidSpec", reason);
      throw new Terminal(reason).withStatus(status(tenant, ready));
    }
    const ns = namespaceName(name);
    const namespace = { apiVersion: "v1", kind: "Namespace", metadata: meta(ns, undefined, name) };
    const quota = {
      apiVersion: "v1",
      kind: "ResourceQuota",
      metadata: meta("quota", ns, name),
      spec: { hard: { ...(spec.quota ?? {}) } },
    };
    const binding = {
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "RoleBinding",
      metadata: meta("tenant-admins", ns, name),
      roleRef: { apiGroup: RBAC_GROUP, kind: "ClusterRole", name: ADMIN_ROLE },
      subjects: admins.map((user) => ({ apiGroup: RBAC_GROUP, kind: "User", name: user })),
    };
    const selector = `${TENANT_LABEL}=${name}`;
    const secrets = ctx
      .api("v1", "Secret", undefined)
      .list({ labelSelector: TENANT_LABEL })
      .filter((s) => s.metadata?.annotations?.[SECRET_ANNOTATION] === name).length;
    const info = {
      apiVersion: "v1",
      kind: "ConfigMap",
      metadata: meta("tenant-info", ns, name),
      data: { admins: admins.join(","), secrets: String(secrets), selector, tenant: name },
    };
    const failed = ctx.failedChildren;
    const ready =
      failed.length === 0
        ? condition("Ready", "True", "Provisioned", `namespace ${ns} is ready`)
        : condition("Ready", "False", "ChildRefused", failed.map((f) => `${f.kind} ${f.name}: ${f.message}`).join("; "));
    return new Outcome().child(namespace).child(quota).child(binding).child(info).status(status(tenant, ready));
  }
}

/**
 * The component's exports, one per interface of the `operator` world: the
 * controller, and the roles it does not serve (they answer "not served").
 */
export const { controller, admission, conversion, scheduler } = exportComponent({ controller: Tenants });
