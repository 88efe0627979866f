// Naming kinds the way Kubernetes objects do: an `apiVersion` (`apps/v1`,
// or `v1` for the core group) and a `kind`.

/**
 * The group, version and kind named by `apiVersion` and `kind`:
 * `gvk("apps/v1", "Deployment")` is group `apps`, version `v1`;
 * `gvk("v1", "ConfigMap")` is the core group `""`.
 * @param {string} apiVersion
 * @param {string} kind
 * @returns {{group: string, version: string, kind: string}}
 */
export function gvk(apiVersion, kind) {
  const slash = apiVersion.lastIndexOf("/");
  return slash < 0
    ? { group: "", version: apiVersion, kind }
    : { group: apiVersion.slice(0, slash), version: apiVersion.slice(slash + 1), kind };
}

/**
 * A reference to one object.
 * @param {string} apiVersion
 * @param {string} kind
 * @param {string | undefined | null} namespace
 * @param {string} name
 */
export function objectRef(apiVersion, kind, namespace, name) {
  return { kind: gvk(apiVersion, kind), namespace: namespace ?? undefined, name };
}
