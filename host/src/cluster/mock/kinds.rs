//! The kinds a mock cluster serves: the built-in table and what a
//! CustomResourceDefinition declares.

use serde_json::Value;

use crate::object::Gvk;

/// A kind the mock cluster serves, as discovery would describe it.
///
/// ```
/// use capstan_host::cluster::mock::{KindInfo, MockCluster};
/// use capstan_host::object::Gvk;
///
/// let cluster = MockCluster::new();
/// cluster.register_kind(KindInfo::namespaced(Gvk::new("example.com", "v1", "Widget"), "widgets").with_status());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KindInfo {
    /// Group, version and kind.
    pub gvk: Gvk,
    /// Plural resource name, e.g. `configmaps`; used in error messages.
    pub plural: String,
    /// True if objects of the kind live in a namespace.
    pub namespaced: bool,
    /// True if the kind has a `status` subresource.
    pub status_subresource: bool,
}

impl KindInfo {
    /// A namespaced kind without a status subresource.
    pub fn namespaced(gvk: Gvk, plural: impl Into<String>) -> Self {
        Self { gvk, plural: plural.into(), namespaced: true, status_subresource: false }
    }

    /// A cluster-scoped kind without a status subresource.
    pub fn cluster_scoped(gvk: Gvk, plural: impl Into<String>) -> Self {
        Self { gvk, plural: plural.into(), namespaced: false, status_subresource: false }
    }

    /// The same kind, with a status subresource.
    #[must_use]
    pub fn with_status(self) -> Self {
        Self { status_subresource: true, ..self }
    }
}

/// `(group, version, kind, plural, namespaced, status subresource)`.
type Row = (&'static str, &'static str, &'static str, &'static str, bool, bool);

/// The kinds every mock cluster starts with.
const BUILT_IN: &[Row] = &[
    ("", "v1", "ConfigMap", "configmaps", true, false),
    ("", "v1", "Secret", "secrets", true, false),
    ("", "v1", "Service", "services", true, true),
    ("", "v1", "ServiceAccount", "serviceaccounts", true, false),
    ("", "v1", "Pod", "pods", true, true),
    ("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", true, true),
    ("", "v1", "PersistentVolume", "persistentvolumes", false, true),
    ("", "v1", "Namespace", "namespaces", false, true),
    ("", "v1", "Node", "nodes", false, true),
    ("", "v1", "Event", "events", true, false),
    ("apps", "v1", "Deployment", "deployments", true, true),
    ("apps", "v1", "StatefulSet", "statefulsets", true, true),
    ("apps", "v1", "DaemonSet", "daemonsets", true, true),
    ("apps", "v1", "ReplicaSet", "replicasets", true, true),
    ("batch", "v1", "Job", "jobs", true, true),
    ("batch", "v1", "CronJob", "cronjobs", true, true),
    ("events.k8s.io", "v1", "Event", "events", true, false),
    ("coordination.k8s.io", "v1", "Lease", "leases", true, false),
    ("networking.k8s.io", "v1", "Ingress", "ingresses", true, true),
    ("networking.k8s.io", "v1", "NetworkPolicy", "networkpolicies", true, false),
    ("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets", true, true),
    ("rbac.authorization.k8s.io", "v1", "Role", "roles", true, false),
    ("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings", true, false),
    ("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", false, false),
    ("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", false, false),
    ("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", false, true),
];

/// The built-in kinds.
pub(super) fn built_in() -> impl Iterator<Item = KindInfo> {
    BUILT_IN.iter().map(|&(group, version, kind, plural, namespaced, status)| KindInfo {
        gvk: Gvk::new(group, version, kind),
        plural: plural.to_owned(),
        namespaced,
        status_subresource: status,
    })
}

/// The group of CustomResourceDefinitions.
pub(super) const CRD_GROUP: &str = "apiextensions.k8s.io";

/// The kind of CustomResourceDefinitions.
pub(super) const CRD_KIND: &str = "CustomResourceDefinition";

/// The group whose kinds accept any path-segment name.
pub(super) const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// Reads an `apiextensions.k8s.io/v1` CustomResourceDefinition: one
/// [`KindInfo`] per served version. The error is a validation message.
pub(super) fn from_crd(crd: &Value) -> Result<Vec<KindInfo>, String> {
    let spec = crd.get("spec").ok_or("spec: required value")?;
    let text = |value: Option<&Value>, field: &str| {
        value
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .ok_or_else(|| format!("{field}: required value"))
    };
    let group = text(spec.get("group"), "spec.group")?;
    let names = spec.get("names");
    let kind = text(names.and_then(|n| n.get("kind")), "spec.names.kind")?;
    let plural = text(names.and_then(|n| n.get("plural")), "spec.names.plural")?;
    let namespaced = match spec.get("scope").and_then(Value::as_str) {
        Some("Namespaced") => true,
        Some("Cluster") => false,
        other => {
            return Err(format!("spec.scope: unsupported value {other:?}: expected \"Namespaced\" or \"Cluster\""));
        }
    };
    if let Some(name) = crd.get("metadata").and_then(|m| m.get("name")).and_then(Value::as_str) {
        let expected = format!("{plural}.{group}");
        if name != expected {
            return Err(format!("metadata.name: invalid value {name:?}: must be spec.names.plural+\".\"+spec.group"));
        }
    }
    let versions = spec.get("versions").and_then(Value::as_array).ok_or("spec.versions: required value")?;
    let mut kinds = Vec::new();
    for (i, version) in versions.iter().enumerate() {
        let name = text(version.get("name"), &format!("spec.versions[{i}].name"))?;
        if !version.get("served").and_then(Value::as_bool).unwrap_or(true) {
            continue;
        }
        let status = version.get("subresources").and_then(|s| s.get("status")).is_some_and(Value::is_object);
        kinds.push(KindInfo {
            gvk: Gvk::new(group.as_str(), name, kind.as_str()),
            plural: plural.clone(),
            namespaced,
            status_subresource: status,
        });
    }
    if kinds.is_empty() {
        return Err("spec.versions: must have at least one served version".to_owned());
    }
    Ok(kinds)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn crd_yields_one_kind_per_served_version() {
        let crd = json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com",
                "names": {"kind": "Widget", "plural": "widgets"},
                "scope": "Cluster",
                "versions": [
                    {"name": "v1", "served": true, "storage": true, "subresources": {"status": {}}},
                    {"name": "v1beta1", "served": true, "storage": false},
                    {"name": "v1alpha1", "served": false, "storage": false},
                ],
            },
        });
        let kinds = from_crd(&crd).expect("valid crd");
        assert_eq!(kinds.len(), 2);
        assert_eq!(
            kinds[0],
            KindInfo::cluster_scoped(Gvk::new("example.com", "v1", "Widget"), "widgets").with_status()
        );
        assert_eq!(kinds[1], KindInfo::cluster_scoped(Gvk::new("example.com", "v1beta1", "Widget"), "widgets"));
    }

    #[test]
    fn crd_with_missing_fields_or_a_wrong_name_is_rejected() {
        assert!(from_crd(&json!({"spec": {"names": {"kind": "W", "plural": "ws"}}})).is_err());
        let wrong_name = json!({
            "metadata": {"name": "widgets"},
            "spec": {"group": "example.com", "names": {"kind": "W", "plural": "ws"}, "scope": "Namespaced",
                     "versions": [{"name": "v1", "served": true}]},
        });
        assert!(from_crd(&wrong_name).is_err());
    }
}
