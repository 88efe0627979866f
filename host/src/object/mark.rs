//! The marks on a fleet controller's children in member clusters. An
//! ownerReference cannot point into another cluster (the member's garbage
//! collector would delete the child at once, finding no such owner), so
//! the host labels and annotates each child with its owner instead:
//!
//! | key | kind | value |
//! |---|---|---|
//! | `capstan.dev/fleet-controller` | label | the controller's name |
//! | `capstan.dev/owner-cluster-id` | label | the home cluster's identity (the uid of its `kube-system` Namespace) |
//! | `capstan.dev/owner-uid` | label | the owner's uid |
//! | `capstan.dev/owner-cluster` | annotation | the home cluster's name, as the host engaged it |
//! | `capstan.dev/owner-api-version`, `capstan.dev/owner-kind` | annotations | the owner's kind |
//! | `capstan.dev/owner-namespace` | annotation | the owner's namespace (none for a cluster-scoped owner) |
//! | `capstan.dev/owner-name` | annotation | the owner's name |
//!
//! The labels select a controller's children in a member (its watch there
//! asks for exactly [`Owner::selector`]) and an owner's children (the
//! owner index of a cache indexes [`OWNER_UID`] beside ownerReferences);
//! the annotations name the owner to reconcile when a child changes. The
//! home cluster's identity keeps two hosts whose home clusters carry the
//! same name apart: each sees and sweeps only its own home's children.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::{Gvk, ObjectRef};

/// Label: the fleet controller that placed the child.
pub const CONTROLLER: &str = "capstan.dev/fleet-controller";
/// Label: the identity of the owner's (home) cluster.
pub const HOME_ID: &str = "capstan.dev/owner-cluster-id";
/// Label: the owner's uid.
pub const OWNER_UID: &str = "capstan.dev/owner-uid";
/// Annotation: the owner's cluster, by the name the host engaged it by.
pub const OWNER_CLUSTER: &str = "capstan.dev/owner-cluster";
/// Annotation: the owner's `apiVersion`.
pub const OWNER_API_VERSION: &str = "capstan.dev/owner-api-version";
/// Annotation: the owner's kind.
pub const OWNER_KIND: &str = "capstan.dev/owner-kind";
/// Annotation: the owner's namespace.
pub const OWNER_NAMESPACE: &str = "capstan.dev/owner-namespace";
/// Annotation: the owner's name.
pub const OWNER_NAME: &str = "capstan.dev/owner-name";

/// The labels of the marks.
pub const LABELS: [&str; 3] = [CONTROLLER, HOME_ID, OWNER_UID];
/// The annotations of the marks.
pub const ANNOTATIONS: [&str; 5] = [OWNER_CLUSTER, OWNER_API_VERSION, OWNER_KIND, OWNER_NAMESPACE, OWNER_NAME];

/// The owner of a child in a member cluster, as its marks name it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    /// The fleet controller.
    pub controller: String,
    /// The home cluster's identity.
    pub home_id: String,
    /// The home cluster's name.
    pub home: String,
    /// The owner object.
    pub object: ObjectRef,
    /// Its uid.
    pub uid: String,
}

impl Owner {
    /// The label selector of every child `controller` placed for owners in
    /// the home cluster `home_id`.
    ///
    /// ```
    /// use capstan_host::object::mark::Owner;
    ///
    /// assert_eq!(
    ///     Owner::selector("spreader", "6b1d"),
    ///     "capstan.dev/fleet-controller=spreader,capstan.dev/owner-cluster-id=6b1d"
    /// );
    /// ```
    pub fn selector(controller: &str, home_id: &str) -> String {
        format!("{CONTROLLER}={controller},{HOME_ID}={home_id}")
    }

    /// Marks `child` (a JSON object) as this owner's: sets the labels and
    /// annotations of the [module](self), over any value the guest gave
    /// them, and removes every ownerReference.
    pub fn mark(&self, child: &mut Value) {
        let Some(object) = child.as_object_mut() else { return };
        let meta = object.entry("metadata").or_insert_with(|| json!({}));
        let Some(meta) = meta.as_object_mut() else { return };
        meta.remove("ownerReferences");
        let labels = entries(meta, "labels");
        labels.insert(CONTROLLER.into(), json!(self.controller));
        labels.insert(HOME_ID.into(), json!(self.home_id));
        labels.insert(OWNER_UID.into(), json!(self.uid));
        let annotations = entries(meta, "annotations");
        annotations.insert(OWNER_CLUSTER.into(), json!(self.home));
        annotations.insert(OWNER_API_VERSION.into(), json!(self.object.gvk.api_version()));
        annotations.insert(OWNER_KIND.into(), json!(self.object.gvk.kind));
        match &self.object.namespace {
            Some(ns) => annotations.insert(OWNER_NAMESPACE.into(), json!(ns)),
            None => annotations.remove(OWNER_NAMESPACE),
        };
        annotations.insert(OWNER_NAME.into(), json!(self.object.name));
    }

    /// The owner `labels` and `annotations` name, when they carry the
    /// marks whole.
    pub fn of(labels: &BTreeMap<String, String>, annotations: &BTreeMap<String, String>) -> Option<Self> {
        let label = |k: &str| labels.get(k).filter(|v| !v.is_empty()).cloned();
        let annotation = |k: &str| annotations.get(k).filter(|v| !v.is_empty()).cloned();
        let gvk = Gvk::from_api_version(&annotation(OWNER_API_VERSION)?, annotation(OWNER_KIND)?);
        let object = ObjectRef::new(gvk, annotation(OWNER_NAMESPACE).as_deref(), annotation(OWNER_NAME)?);
        Some(Self {
            controller: label(CONTROLLER)?,
            home_id: label(HOME_ID)?,
            home: annotation(OWNER_CLUSTER)?,
            object,
            uid: label(OWNER_UID)?,
        })
    }

    /// The owner the marks of `object` (JSON) name.
    pub fn of_value(object: &Value) -> Option<Self> {
        let strings = |field: &str| -> BTreeMap<String, String> {
            object
                .pointer(&format!("/metadata/{field}"))
                .and_then(Value::as_object)
                .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned()))).collect())
                .unwrap_or_default()
        };
        Self::of(&strings("labels"), &strings("annotations"))
    }

    /// Whether `other` is this owner's controller in this home: the same
    /// controller and home identity, whatever the object.
    pub fn same_controller(&self, controller: &str, home_id: &str) -> bool {
        self.controller == controller && self.home_id == home_id
    }
}

/// The JSON merge patch that removes the marks from a child, so that no
/// owner, prune or sweep touches it again (a child kept for good).
pub fn unmark_patch() -> Value {
    let nulls = |keys: &[&str]| keys.iter().map(|k| ((*k).to_owned(), Value::Null)).collect::<Map<String, Value>>();
    json!({"metadata": {"labels": nulls(&LABELS), "annotations": nulls(&ANNOTATIONS)}})
}

/// The map `meta[field]`, made an empty one if missing or not a map.
fn entries<'a>(meta: &'a mut Map<String, Value>, field: &str) -> &'a mut Map<String, Value> {
    let entry = meta.entry(field).or_insert_with(|| json!({}));
    if !entry.is_object() {
        *entry = json!({});
    }
    entry.as_object_mut().expect("made an object above")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(namespace: Option<&str>) -> Owner {
        Owner {
            controller: "spreader".into(),
            home_id: "6b1d".into(),
            home: "default".into(),
            object: ObjectRef::new(Gvk::new("example.com", "v1", "Fleet"), namespace, "a"),
            uid: "u-1".into(),
        }
    }

    #[test]
    fn marks_replace_the_guests_and_any_owner_reference_and_read_back() {
        let mut child = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {
                "name": "c", "labels": {"app": "x", OWNER_UID: "forged"}, "annotations": "not a map",
                "ownerReferences": [{"uid": "forged"}],
            },
        });
        owner(Some("team")).mark(&mut child);
        assert_eq!(child["metadata"]["labels"]["app"], "x");
        assert_eq!(child["metadata"]["labels"][OWNER_UID], "u-1");
        assert!(child["metadata"].get("ownerReferences").is_none());
        assert_eq!(Owner::of_value(&child), Some(owner(Some("team"))));

        let mut cluster_scoped = json!({"metadata": {"annotations": {OWNER_NAMESPACE: "stale"}}});
        owner(None).mark(&mut cluster_scoped);
        assert_eq!(Owner::of_value(&cluster_scoped), Some(owner(None)));
    }

    #[test]
    fn partial_marks_name_no_owner_and_the_unmark_patch_removes_them_all() {
        let mut child = json!({});
        owner(Some("team")).mark(&mut child);
        child["metadata"]["labels"].as_object_mut().expect("labels").remove(HOME_ID);
        assert_eq!(Owner::of_value(&child), None);
        let patch = unmark_patch();
        for key in LABELS {
            assert_eq!(patch["metadata"]["labels"][key], Value::Null);
        }
        for key in ANNOTATIONS {
            assert!(patch["metadata"]["annotations"].get(key).is_some_and(Value::is_null));
        }
    }
}
