//! Which primary objects a change triggers: the one rule shared by the
//! controller on a real cluster and by the mock host.
//!
//! # Rules
//!
//! - A primary object triggers itself.
//! - A child of an owned kind (matching the kind's label selector) triggers
//!   the primary object its controller ownerReference names.
//! - An object of a watched kind (matching the watch's label selector)
//!   triggers what the watch's [`Mapping`] names.
//!
//! Where a primary object is looked for depends on the primary kind's
//! scope, never on the triggering object's alone: a namespaced primary
//! lives in the namespace the mapping gives (by default the triggering
//! object's own); a cluster-scoped primary has no namespace, whatever the
//! namespace of the child or watched object that triggers it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

use crate::manifest::{FieldRef, Manifest, Mapping, is_object_name};
use crate::object::{Gvk, ObjectRef};

/// The primary objects a change to `meta` (an object of `kind`) triggers.
/// `namespaced` is the scope of the manifest's primary kind; `primaries`
/// lists the primary objects in a namespace (`None`: all of them), for
/// mappings that trigger many.
pub fn targets(
    manifest: &Manifest,
    namespaced: bool,
    kind: &Gvk,
    meta: &ObjectMeta,
    primaries: &dyn Fn(Option<&str>) -> Vec<ObjectRef>,
) -> Vec<ObjectRef> {
    let primary = |namespace: Option<&str>, name: &str| primary_in(manifest, namespaced, namespace, name);
    let own_ns = meta.namespace.as_deref();
    let labels = meta.labels.as_ref().and_then(|l| serde_json::to_value(l).ok());
    let mut out = Vec::new();
    if manifest.primary.same_group_kind(kind) {
        out.extend(meta.name.as_deref().and_then(|n| primary(own_ns, n)));
    }
    if manifest.owned(kind).is_some_and(|o| o.selects(labels.as_ref())) {
        for owner in meta.owner_references.iter().flatten() {
            let is_primary = owner.controller == Some(true)
                && owner.kind == manifest.primary.kind
                && Gvk::from_api_version(&owner.api_version, "").group == manifest.primary.group;
            if is_primary {
                out.extend(primary(own_ns, &owner.name));
            }
        }
    }
    out.extend(watch_targets(manifest, namespaced, kind, meta, primaries));
    out.sort();
    out.dedup();
    out
}

/// The primary objects a change to `meta` (an object of `kind`) triggers
/// through the manifest's watches alone: what a fleet controller's watch
/// in a member cluster triggers in its home (see [`targets`]; ownership
/// does not cross clusters).
pub fn watch_targets(
    manifest: &Manifest,
    namespaced: bool,
    kind: &Gvk,
    meta: &ObjectMeta,
    primaries: &dyn Fn(Option<&str>) -> Vec<ObjectRef>,
) -> Vec<ObjectRef> {
    let primary = |namespace: Option<&str>, name: &str| primary_in(manifest, namespaced, namespace, name);
    let own_ns = meta.namespace.as_deref();
    let labels = meta.labels.as_ref().and_then(|l| serde_json::to_value(l).ok());
    let mut out = Vec::new();
    for watch in manifest.watches.iter().filter(|w| w.kind.same_group_kind(kind) && w.selects(labels.as_ref())) {
        match &watch.mapping {
            Mapping::None => {}
            Mapping::SameName => out.extend(meta.name.as_deref().and_then(|n| primary(own_ns, n))),
            Mapping::Label(key) => {
                out.extend(meta.labels.as_ref().and_then(|l| l.get(key)).and_then(|n| primary(own_ns, n)));
            }
            Mapping::Namespace if namespaced => {
                if let Some(ns) = own_ns {
                    out.extend(primaries(Some(ns)));
                }
            }
            Mapping::Namespace | Mapping::All => out.extend(primaries(None)),
            Mapping::Reference(reference) => {
                let name = read(meta, &reference.name);
                let namespace = match &reference.namespace {
                    Some(field) => read(meta, field),
                    None => own_ns.map(str::to_owned),
                };
                if let Some(name) = name {
                    out.extend(primary(namespace.as_deref(), &name));
                }
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// The primary object `name` in `namespace` (the namespace ignored for a
/// cluster-scoped primary), if `name` is an object's name and a namespaced
/// primary has a namespace.
fn primary_in(manifest: &Manifest, namespaced: bool, namespace: Option<&str>, name: &str) -> Option<ObjectRef> {
    if !is_object_name(name) {
        return None;
    }
    match (namespaced, namespace) {
        (true, Some(ns)) if !ns.is_empty() => Some(ObjectRef::new(manifest.primary.clone(), Some(ns), name)),
        (true, _) => None,
        (false, _) => Some(ObjectRef::new(manifest.primary.clone(), None, name)),
    }
}

/// The value a [`FieldRef`] reads on an object, if it has one.
fn read(meta: &ObjectMeta, field: &FieldRef) -> Option<String> {
    let value = match field {
        FieldRef::Name => meta.name.clone(),
        FieldRef::Namespace => meta.namespace.clone(),
        FieldRef::Label(key) => meta.labels.as_ref().and_then(|l| l.get(key)).cloned(),
        FieldRef::Annotation(key) => meta.annotations.as_ref().and_then(|a| a.get(key)).cloned(),
    };
    value.filter(|v| !v.is_empty())
}

/// The metadata of a JSON object (empty if it has none or it does not
/// parse).
pub fn meta_of(object: &Value) -> ObjectMeta {
    object.get("metadata").and_then(|m| serde_json::from_value(m.clone()).ok()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::manifest::{Owned, Reference, Watch};

    fn tenant() -> Manifest {
        Manifest {
            name: "tenant".into(),
            primary: Gvk::new("examples.capstan.dev", "v1alpha1", "Tenant"),
            crds: vec![],
            owns: vec![Owned::kind(Gvk::new("", "v1", "ConfigMap")), Owned::kind(Gvk::new("", "v1", "Namespace"))],
            watches: vec![Watch {
                kind: Gvk::new("", "v1", "Secret"),
                mapping: Mapping::Reference(Reference {
                    name: FieldRef::Annotation("capstan.dev/tenant".into()),
                    namespace: None,
                }),
                label_selector: None,
            }],
            finalizer: None,
            permissions: vec![],
            resync: None,
            max_concurrency: 1,
            roles: crate::manifest::Roles::reconcile_only(),
            egress: Default::default(),
            clusters: vec![],
            fleet: None,
        }
    }

    fn none(_: Option<&str>) -> Vec<ObjectRef> {
        Vec::new()
    }

    #[test]
    fn a_namespaced_child_of_a_cluster_scoped_owner_triggers_the_owner_without_a_namespace() {
        let child = meta_of(&json!({"metadata": {
            "name": "quota", "namespace": "tenant-acme",
            "ownerReferences": [{"apiVersion": "examples.capstan.dev/v1alpha1", "kind": "Tenant", "name": "acme", "uid": "u", "controller": true}],
        }}));
        let cm = Gvk::new("", "v1", "ConfigMap");
        let found = targets(&tenant(), false, &cm, &child, &none);
        assert_eq!(found, vec![ObjectRef::new(tenant().primary, None, "acme")]);
        // The same child of a namespaced owner names it in the child's namespace.
        let found = targets(&tenant(), true, &cm, &child, &none);
        assert_eq!(found, vec![ObjectRef::new(tenant().primary, Some("tenant-acme"), "acme")]);
    }

    #[test]
    fn a_reference_mapping_reads_the_name_from_an_annotation() {
        let secret = meta_of(&json!({"metadata": {
            "name": "creds", "namespace": "tenant-acme", "annotations": {"capstan.dev/tenant": "acme"},
        }}));
        let found = targets(&tenant(), false, &Gvk::new("", "v1", "Secret"), &secret, &none);
        assert_eq!(found, vec![ObjectRef::new(tenant().primary, None, "acme")]);
        let unlabelled = meta_of(&json!({"metadata": {"name": "creds", "namespace": "tenant-acme"}}));
        assert!(targets(&tenant(), false, &Gvk::new("", "v1", "Secret"), &unlabelled, &none).is_empty());
    }

    #[test]
    fn a_mapped_name_that_is_no_object_name_triggers_nothing() {
        let secret = meta_of(&json!({"metadata": {
            "name": "creds", "namespace": "x", "annotations": {"capstan.dev/tenant": "a/../b?c"},
        }}));
        assert!(targets(&tenant(), false, &Gvk::new("", "v1", "Secret"), &secret, &none).is_empty());
    }

    #[test]
    fn the_namespace_mapping_of_a_cluster_scoped_primary_triggers_every_primary() {
        let mut m = tenant();
        m.watches[0].mapping = Mapping::Namespace;
        let all = |ns: Option<&str>| {
            assert!(ns.is_none(), "all primaries");
            vec![ObjectRef::new(Gvk::new("examples.capstan.dev", "v1alpha1", "Tenant"), None, "a")]
        };
        let secret = meta_of(&json!({"metadata": {"name": "s", "namespace": "x"}}));
        assert_eq!(targets(&m, false, &Gvk::new("", "v1", "Secret"), &secret, &all).len(), 1);
    }
}
