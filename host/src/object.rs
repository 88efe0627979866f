//! Identities of Kubernetes objects as the host handles them: kinds and
//! object references, independent of any one WIT version or backend.

use std::fmt;

use serde_json::Value;

pub mod builtin;
pub mod mark;

/// An API group, version and kind. The core group is `""`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct Gvk {
    /// API group; empty for the core group.
    pub group: String,
    /// Version within the group.
    pub version: String,
    /// Kind, e.g. `ConfigMap`.
    pub kind: String,
}

impl Gvk {
    /// Builds a kind from its parts.
    ///
    /// ```
    /// let cm = capstan_host::object::Gvk::new("", "v1", "ConfigMap");
    /// assert_eq!(cm.api_version(), "v1");
    /// ```
    pub fn new(group: impl Into<String>, version: impl Into<String>, kind: impl Into<String>) -> Self {
        Self { group: group.into(), version: version.into(), kind: kind.into() }
    }

    /// Parses `apiVersion` (`v1`, `apps/v1`) and a kind.
    pub fn from_api_version(api_version: &str, kind: impl Into<String>) -> Self {
        match api_version.split_once('/') {
            Some((group, version)) => Self::new(group, version, kind),
            None => Self::new("", api_version, kind),
        }
    }

    /// The kind of a JSON object, from its `apiVersion` and `kind` fields.
    pub fn of(object: &Value) -> Option<Self> {
        let api_version = object.get("apiVersion")?.as_str()?;
        let kind = object.get("kind")?.as_str()?;
        if kind.is_empty() || api_version.is_empty() {
            return None;
        }
        Some(Self::from_api_version(api_version, kind))
    }

    /// The `apiVersion` string: `version` for the core group, else `group/version`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.clone() } else { format!("{}/{}", self.group, self.version) }
    }

    /// True if `other` names the same group and kind, whatever the version.
    pub fn same_group_kind(&self, other: &Gvk) -> bool {
        self.group == other.group && self.kind == other.kind
    }
}

impl fmt::Display for Gvk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.api_version(), self.kind)
    }
}

/// Identifies one object: kind, namespace (none for cluster-scoped) and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct ObjectRef {
    /// The object's kind.
    pub gvk: Gvk,
    /// Namespace; `None` for cluster-scoped objects.
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
}

impl ObjectRef {
    /// Builds a reference.
    pub fn new(gvk: Gvk, namespace: Option<&str>, name: impl Into<String>) -> Self {
        Self { gvk, namespace: namespace.map(str::to_owned), name: name.into() }
    }

    /// The reference of a JSON object, from `apiVersion`, `kind`,
    /// `metadata.namespace` and `metadata.name`.
    pub fn of(object: &Value) -> Option<Self> {
        let gvk = Gvk::of(object)?;
        let name = meta_str(object, "name")?;
        Some(Self::new(gvk, meta_str(object, "namespace"), name))
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {}/{}", self.gvk, ns, self.name),
            None => write!(f, "{} {}", self.gvk, self.name),
        }
    }
}

/// Reads a string field of `metadata`, e.g. `meta_str(obj, "uid")`.
pub fn meta_str<'a>(object: &'a Value, field: &str) -> Option<&'a str> {
    object.get("metadata")?.get(field)?.as_str().filter(|s| !s.is_empty())
}

/// Reads `metadata.generation`.
pub fn generation(object: &Value) -> Option<i64> {
    object.get("metadata")?.get("generation")?.as_i64()
}

/// True if `metadata.deletionTimestamp` is set.
pub fn is_deleting(object: &Value) -> bool {
    meta_str(object, "deletionTimestamp").is_some()
}

/// The finalizers of an object.
pub fn finalizers(object: &Value) -> Vec<String> {
    object
        .get("metadata")
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|f| f.as_str().map(str::to_owned)).collect())
        .unwrap_or_default()
}

/// The uids of the objects listed in `metadata.ownerReferences`.
pub fn owner_uids(object: &Value) -> impl Iterator<Item = &str> {
    object
        .get("metadata")
        .and_then(|m| m.get("ownerReferences"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|o| o.get("uid").and_then(Value::as_str))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn api_version_round_trips_for_core_and_named_groups() {
        assert_eq!(Gvk::from_api_version("v1", "Pod"), Gvk::new("", "v1", "Pod"));
        assert_eq!(Gvk::from_api_version("apps/v1", "Deployment").api_version(), "apps/v1");
    }

    #[test]
    fn object_ref_reads_identity_from_json() {
        let obj =
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "prod"}});
        let r = ObjectRef::of(&obj).expect("complete identity");
        assert_eq!(r.to_string(), "apps/v1/Deployment prod/web");
        assert!(ObjectRef::of(&json!({"kind": "Pod"})).is_none());
    }
}
