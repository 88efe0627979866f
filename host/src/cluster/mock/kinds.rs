//! The kinds a mock cluster serves: the captured built-in kinds and what a
//! CustomResourceDefinition declares.

use std::sync::Arc;

use serde_json::Value;

use super::catalog;
use super::schema::Schema;
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

/// A kind and version as the mock serves it: what discovery says, its
/// verbs, and its schema.
#[derive(Clone, Debug)]
pub(super) struct Served {
    /// Discovery's view.
    pub(super) info: KindInfo,
    /// The verbs allowed; `None` allows every verb.
    pub(super) verbs: Option<Vec<String>>,
    /// The schema objects are pruned, defaulted and validated against.
    pub(super) schema: Option<Schema>,
}

impl Served {
    /// A kind served without a schema (registered by a test).
    pub(super) fn unchecked(info: KindInfo) -> Self {
        Self { info, verbs: None, schema: None }
    }
}

/// The built-in kinds: every kind of every group version the project's
/// control plane serves, from the capture (see [`catalog`]). Kinds from
/// aggregated or CRD-defined groups are not in the capture.
pub(super) fn built_in() -> impl Iterator<Item = Served> {
    catalog::get().kinds.iter().map(|kind| Served {
        info: KindInfo {
            gvk: Gvk::new(kind.group.as_str(), kind.version.as_str(), kind.kind.as_str()),
            plural: kind.plural.clone(),
            namespaced: kind.namespaced,
            status_subresource: kind.subresources.iter().any(|s| s == "status"),
        },
        verbs: Some(kind.verbs.clone()),
        schema: kind.schema.clone().map(Schema::BuiltIn),
    })
}

/// The group of CustomResourceDefinitions.
pub(super) const CRD_GROUP: &str = "apiextensions.k8s.io";

/// The kind of CustomResourceDefinitions.
pub(super) const CRD_KIND: &str = "CustomResourceDefinition";

/// The group whose kinds accept any path-segment name.
pub(super) const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// Reads an `apiextensions.k8s.io/v1` CustomResourceDefinition: one
/// [`Served`] per served version, with its `openAPIV3Schema`. The error is
/// a validation message.
pub(super) fn from_crd(crd: &Value) -> Result<Vec<Served>, String> {
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
        let schema = version.pointer("/schema/openAPIV3Schema").filter(|s| s.is_object());
        kinds.push(Served {
            info: KindInfo {
                gvk: Gvk::new(group.as_str(), name, kind.as_str()),
                plural: plural.clone(),
                namespaced,
                status_subresource: status,
            },
            verbs: None,
            schema: schema.map(|s| Schema::Custom(Arc::new(s.clone()))),
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
            kinds[0].info,
            KindInfo::cluster_scoped(Gvk::new("example.com", "v1", "Widget"), "widgets").with_status()
        );
        assert_eq!(kinds[1].info, KindInfo::cluster_scoped(Gvk::new("example.com", "v1beta1", "Widget"), "widgets"));
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
