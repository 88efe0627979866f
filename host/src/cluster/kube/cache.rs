//! A watch cache: the reflector stores of one kind, one per namespace
//! watched (or one for every namespace), read as one.
//!
//! kube-runtime's reflector writer cannot take the interleaved relists of
//! two watchers, so a host watching a list of namespaces runs one watcher
//! and one store per namespace; this type is what their consumers see.

use std::sync::Arc;

use kube::api::{ApiResource, DynamicObject};
use kube::runtime::reflector::{ObjectRef as StoreRef, Store};

/// The stores of one kind, read as one cache.
///
/// ```
/// use capstan_host::cluster::kube::Cache;
/// use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
/// use kube::runtime::reflector::store::Writer;
///
/// let resource = ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "ConfigMap"));
/// let a = Writer::<DynamicObject>::new(resource.clone());
/// let b = Writer::<DynamicObject>::new(resource.clone());
/// let cache = Cache::namespaced(resource, [("a".to_owned(), a.as_reader()), ("b".to_owned(), b.as_reader())]);
/// assert!(cache.covers(Some("a")));
/// assert!(!cache.covers(Some("c")), "namespace c is not watched: read it from the API server");
/// assert!(!cache.covers(None), "a list across all namespaces would miss c");
/// ```
#[derive(Clone)]
pub struct Cache {
    resource: ApiResource,
    /// Each store with the namespace it holds; `None`: every namespace
    /// (also for cluster-scoped kinds).
    stores: Arc<[(Option<String>, Store<DynamicObject>)]>,
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let namespaces: Vec<_> = self.stores.iter().map(|(ns, _)| ns.as_deref().unwrap_or("*")).collect();
        f.debug_struct("Cache").field("kind", &self.resource.kind).field("namespaces", &namespaces).finish()
    }
}

impl Cache {
    /// A cache of every object of a kind, in every namespace (or of a
    /// cluster-scoped kind). `resource` must be the one `store`'s writer
    /// was made with.
    pub fn all(resource: ApiResource, store: Store<DynamicObject>) -> Self {
        Self { resource, stores: Arc::new([(None, store)]) }
    }

    /// A cache of the objects of a namespaced kind in the given namespaces,
    /// one store each. `resource` must be the one the stores' writers were
    /// made with.
    pub fn namespaced(resource: ApiResource, stores: impl IntoIterator<Item = (String, Store<DynamicObject>)>) -> Self {
        Self { resource, stores: stores.into_iter().map(|(ns, store)| (Some(ns), store)).collect() }
    }

    /// True if the cache holds every object a read in `namespace` (`None`:
    /// every namespace, or a cluster-scoped kind) can see. A read it does
    /// not cover goes to the API server: answering "not found" for an
    /// object in a namespace that is not watched would be wrong.
    pub fn covers(&self, namespace: Option<&str>) -> bool {
        self.stores.iter().any(|(ns, _)| ns.is_none() || (namespace.is_some() && ns.as_deref() == namespace))
    }

    /// The object named `name` in `namespace`, as last seen.
    pub fn get(&self, namespace: Option<&str>, name: &str) -> Option<Arc<DynamicObject>> {
        let mut key = StoreRef::new_with(name, self.resource.clone());
        if let Some(ns) = namespace {
            key = key.within(ns);
        }
        self.stores
            .iter()
            .filter(|(ns, _)| ns.is_none() || ns.as_deref() == namespace)
            .find_map(|(_, store)| store.get(&key))
    }

    /// Every object, as last seen.
    pub fn state(&self) -> Vec<Arc<DynamicObject>> {
        self.stores.iter().flat_map(|(_, store)| store.state()).collect()
    }

    /// The objects in `namespace` (`None`: every object), as last seen.
    pub fn list(&self, namespace: Option<&str>) -> Vec<Arc<DynamicObject>> {
        self.stores
            .iter()
            .filter(|(ns, _)| ns.is_none() || namespace.is_none() || ns.as_deref() == namespace)
            .flat_map(|(_, store)| store.state())
            .filter(|o| namespace.is_none() || o.metadata.namespace.as_deref() == namespace)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use kube::api::GroupVersionKind;
    use kube::runtime::reflector::store::Writer;
    use kube::runtime::watcher::Event;

    use super::*;

    fn configmap(namespace: &str, name: &str) -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace},
        }))
        .expect("a valid object")
    }

    fn resource() -> ApiResource {
        ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "ConfigMap"))
    }

    /// A store of `namespace` holding `names`, listed as a watcher would.
    fn store(namespace: &str, names: &[&str]) -> Store<DynamicObject> {
        let mut writer = Writer::new(resource());
        writer.apply_watcher_event(&Event::Init);
        for name in names {
            writer.apply_watcher_event(&Event::InitApply(configmap(namespace, name)));
        }
        writer.apply_watcher_event(&Event::InitDone);
        writer.as_reader()
    }

    fn names(objects: Vec<Arc<DynamicObject>>) -> Vec<String> {
        let mut names: Vec<String> = objects
            .iter()
            .map(|o| {
                format!(
                    "{}/{}",
                    o.metadata.namespace.as_deref().unwrap_or_default(),
                    o.metadata.name.as_deref().unwrap_or_default()
                )
            })
            .collect();
        names.sort();
        names
    }

    #[test]
    fn stores_of_several_namespaces_read_as_one_cache() {
        let cache = Cache::namespaced(
            resource(),
            [("a".to_owned(), store("a", &["x", "y"])), ("b".to_owned(), store("b", &["x"]))],
        );
        assert_eq!(names(cache.state()), ["a/x", "a/y", "b/x"]);
        assert_eq!(names(cache.list(Some("b"))), ["b/x"]);
        assert!(cache.get(Some("a"), "y").is_some());
        assert!(cache.get(Some("b"), "y").is_none());
        assert!(cache.covers(Some("b")) && !cache.covers(Some("c")) && !cache.covers(None));
    }

    #[test]
    fn a_cache_of_all_namespaces_covers_every_read() {
        let cache = Cache::all(resource(), store("a", &["x"]));
        assert!(cache.covers(None) && cache.covers(Some("c")));
        assert_eq!(names(cache.list(Some("a"))), ["a/x"]);
        assert!(cache.list(Some("c")).is_empty());
        assert!(cache.get(Some("a"), "x").is_some());
    }
}
