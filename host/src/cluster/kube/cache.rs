//! A watch cache: the reflector stores of one kind, one per namespace
//! watched (or one for every namespace), read as one.
//!
//! kube-runtime's reflector writer cannot take the interleaved relists of
//! two watchers, so a host watching a list of namespaces runs one watcher
//! and one store per namespace; this type is what their consumers see.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, PoisonError, RwLock};

use kube::api::{ApiResource, DynamicObject};
use kube::runtime::reflector::{ObjectRef as StoreRef, Store};
use kube::runtime::watcher::Event;

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
    /// Each store with the namespace it holds (`None`: every namespace,
    /// also for cluster-scoped kinds) and, where the watch keeps one, the
    /// index of its objects by owner.
    stores: Arc<[Part]>,
}

/// One store of a cache: the namespace it holds, the store, and the
/// watch's owner index of it if there is one.
type Part = (Option<String>, Store<DynamicObject>, Option<OwnerIndex>);

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let namespaces: Vec<_> = self.stores.iter().map(|(ns, _, _)| ns.as_deref().unwrap_or("*")).collect();
        f.debug_struct("Cache").field("kind", &self.resource.kind).field("namespaces", &namespaces).finish()
    }
}

impl Cache {
    /// A cache of every object of a kind, in every namespace (or of a
    /// cluster-scoped kind). `resource` must be the one `store`'s writer
    /// was made with.
    pub fn all(resource: ApiResource, store: Store<DynamicObject>) -> Self {
        Self { resource, stores: Arc::new([(None, store, None)]) }
    }

    /// A cache of the objects of a namespaced kind in the given namespaces,
    /// one store each. `resource` must be the one the stores' writers were
    /// made with.
    pub fn namespaced(resource: ApiResource, stores: impl IntoIterator<Item = (String, Store<DynamicObject>)>) -> Self {
        Self { resource, stores: stores.into_iter().map(|(ns, store)| (Some(ns), store, None)).collect() }
    }

    /// A cache of stores (each of a namespace, or `None` for every
    /// namespace) with the [`OwnerIndex`] the watch feeding each keeps, so
    /// that [`owned_by`](Self::owned_by) looks children up instead of
    /// scanning.
    pub fn indexed(
        resource: ApiResource,
        stores: impl IntoIterator<Item = (Option<String>, Store<DynamicObject>, OwnerIndex)>,
    ) -> Self {
        Self { resource, stores: stores.into_iter().map(|(ns, store, index)| (ns, store, Some(index))).collect() }
    }

    /// True if the cache holds every object a read in `namespace` (`None`:
    /// every namespace, or a cluster-scoped kind) can see. A read it does
    /// not cover goes to the API server: answering "not found" for an
    /// object in a namespace that is not watched would be wrong.
    pub fn covers(&self, namespace: Option<&str>) -> bool {
        self.stores.iter().any(|(ns, _, _)| ns.is_none() || (namespace.is_some() && ns.as_deref() == namespace))
    }

    /// The object named `name` in `namespace`, as last seen.
    pub fn get(&self, namespace: Option<&str>, name: &str) -> Option<Arc<DynamicObject>> {
        let mut key = StoreRef::new_with(name, self.resource.clone());
        if let Some(ns) = namespace {
            key = key.within(ns);
        }
        self.stores
            .iter()
            .filter(|(ns, _, _)| ns.is_none() || ns.as_deref() == namespace)
            .find_map(|(_, store, _)| store.get(&key))
    }

    /// Every object, as last seen.
    pub fn state(&self) -> Vec<Arc<DynamicObject>> {
        self.stores.iter().flat_map(|(_, store, _)| store.state()).collect()
    }

    /// The objects in `namespace` (`None`: every object), as last seen.
    pub fn list(&self, namespace: Option<&str>) -> Vec<Arc<DynamicObject>> {
        self.stores
            .iter()
            .filter(|(ns, _, _)| ns.is_none() || namespace.is_none() || ns.as_deref() == namespace)
            .flat_map(|(_, store, _)| store.state())
            .filter(|o| namespace.is_none() || o.metadata.namespace.as_deref() == namespace)
            .collect()
    }

    /// The objects in `namespace` (`None`: every object) that name the
    /// object `owner_uid` in their ownerReferences, as last seen: looked up
    /// in the owner index where the store has one (the cost grows with the
    /// owner's children, not with the namespace), else found by a scan.
    pub fn owned_by(&self, namespace: Option<&str>, owner_uid: &str) -> Vec<Arc<DynamicObject>> {
        let owns = |o: &DynamicObject| owner_uids_of(o).any(|uid| uid == owner_uid);
        self.stores
            .iter()
            .filter(|(ns, _, _)| ns.is_none() || namespace.is_none() || ns.as_deref() == namespace)
            .flat_map(|(_, store, index)| match index {
                Some(index) => index
                    .owned_by(owner_uid)
                    .into_iter()
                    .filter_map(|(ns, name)| {
                        let mut key = StoreRef::new_with(&name, self.resource.clone());
                        if let Some(ns) = ns {
                            key = key.within(&ns);
                        }
                        store.get(&key)
                    })
                    // The store may be a step ahead of the index.
                    .filter(|o| owns(o))
                    .collect::<Vec<_>>(),
                None => store.state().into_iter().filter(|o| owns(o)).collect(),
            })
            .filter(|o| namespace.is_none() || o.metadata.namespace.as_deref() == namespace)
            .collect()
    }
}

/// Namespace and name of an object in a store.
type Key = (Option<String>, String);

/// The uids of the owners `object` names: in its ownerReferences, and in
/// the marks a fleet controller puts on a child in another cluster than
/// its owner's ([`OWNER_UID`](crate::object::mark::OWNER_UID)).
fn owner_uids_of(object: &DynamicObject) -> impl Iterator<Item = &str> {
    let referenced = object.metadata.owner_references.iter().flatten().map(|r| r.uid.as_str());
    let marked = object.metadata.labels.as_ref().and_then(|l| l.get(crate::object::mark::OWNER_UID));
    referenced.chain(marked.map(String::as_str))
}

/// One generation of an owner index.
#[derive(Default)]
struct Owners {
    /// The objects naming each owner uid.
    by_owner: HashMap<String, BTreeSet<Key>>,
    /// The owner uids each object names.
    of: HashMap<Key, Vec<String>>,
}

impl Owners {
    fn insert(&mut self, object: &DynamicObject) {
        let Some(name) = object.metadata.name.clone() else { return };
        let key = (object.metadata.namespace.clone(), name);
        self.remove(&key);
        let uids: Vec<String> = owner_uids_of(object).map(str::to_owned).collect();
        if uids.is_empty() {
            return;
        }
        for uid in &uids {
            self.by_owner.entry(uid.clone()).or_default().insert(key.clone());
        }
        self.of.insert(key, uids);
    }

    fn remove(&mut self, key: &Key) {
        for uid in self.of.remove(key).into_iter().flatten() {
            if let Some(children) = self.by_owner.get_mut(&uid) {
                children.remove(key);
                if children.is_empty() {
                    self.by_owner.remove(&uid);
                }
            }
        }
    }
}

#[derive(Default)]
struct IndexState {
    current: Owners,
    /// A relist in progress, swapped in when it is complete (as the
    /// reflector swaps its store).
    relist: Option<Owners>,
}

/// The objects of one reflector store by the uids their ownerReferences
/// name, kept up to date by the watch that feeds the store
/// ([`apply`](Self::apply) every watcher event it reflects), so a
/// controller finds an owner's children without scanning the namespace.
///
/// ```
/// use capstan_host::cluster::kube::OwnerIndex;
/// use kube::api::DynamicObject;
/// use kube::runtime::watcher::Event;
///
/// let child: DynamicObject = serde_json::from_value(serde_json::json!({
///     "apiVersion": "v1", "kind": "ConfigMap",
///     "metadata": {"name": "c", "namespace": "a", "ownerReferences": [
///         {"apiVersion": "v1", "kind": "Greeting", "name": "g", "uid": "u1"}]},
/// })).unwrap();
/// let index = OwnerIndex::default();
/// index.apply(&Event::Apply(child.clone()));
/// assert_eq!(index.owned_by("u1"), [(Some("a".to_owned()), "c".to_owned())]);
/// index.apply(&Event::Delete(child));
/// assert!(index.owned_by("u1").is_empty());
/// ```
#[derive(Clone, Default)]
pub struct OwnerIndex {
    state: Arc<RwLock<IndexState>>,
}

impl std::fmt::Debug for OwnerIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state.read().unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("OwnerIndex").field("owners", &state.current.by_owner.len()).finish()
    }
}

impl OwnerIndex {
    /// Follows one watcher event of the store's watch.
    pub fn apply(&self, event: &Event<DynamicObject>) {
        let mut state = self.state.write().unwrap_or_else(PoisonError::into_inner);
        match event {
            Event::Apply(o) => state.current.insert(o),
            Event::Delete(o) => {
                if let Some(name) = o.metadata.name.clone() {
                    state.current.remove(&(o.metadata.namespace.clone(), name));
                }
            }
            Event::Init => state.relist = Some(Owners::default()),
            Event::InitApply(o) => state.relist.get_or_insert_with(Owners::default).insert(o),
            Event::InitDone => {
                if let Some(relisted) = state.relist.take() {
                    state.current = relisted;
                }
            }
        }
    }

    /// Namespace and name of the objects naming `owner_uid` as an owner.
    pub fn owned_by(&self, owner_uid: &str) -> Vec<Key> {
        let state = self.state.read().unwrap_or_else(PoisonError::into_inner);
        state.current.by_owner.get(owner_uid).map(|c| c.iter().cloned().collect()).unwrap_or_default()
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

    fn child(namespace: &str, name: &str, owner_uid: &str) -> DynamicObject {
        let mut o = configmap(namespace, name);
        o.metadata.owner_references = Some(vec![
            serde_json::from_value(serde_json::json!({
                "apiVersion": "v1", "kind": "Greeting", "name": "g", "uid": owner_uid,
            }))
            .expect("a valid owner reference"),
        ]);
        o
    }

    fn keys(names: &[(&str, &str)]) -> Vec<(Option<String>, String)> {
        names.iter().map(|(ns, n)| (Some((*ns).to_owned()), (*n).to_owned())).collect()
    }

    #[test]
    fn the_owner_index_follows_changes_and_swaps_in_a_relist_once_complete() {
        let index = OwnerIndex::default();
        index.apply(&Event::Apply(child("a", "x", "u1")));
        index.apply(&Event::Apply(child("a", "y", "u1")));
        assert_eq!(index.owned_by("u1"), keys(&[("a", "x"), ("a", "y")]));
        index.apply(&Event::Apply(child("a", "x", "u2")));
        assert_eq!(index.owned_by("u1"), keys(&[("a", "y")]), "x changed owner");
        assert_eq!(index.owned_by("u2"), keys(&[("a", "x")]));
        index.apply(&Event::Delete(child("a", "x", "u2")));
        assert!(index.owned_by("u2").is_empty());

        index.apply(&Event::Init);
        index.apply(&Event::InitApply(child("a", "z", "u1")));
        assert_eq!(index.owned_by("u1"), keys(&[("a", "y")]), "a relist in progress answers nothing yet");
        index.apply(&Event::InitDone);
        assert_eq!(index.owned_by("u1"), keys(&[("a", "z")]), "y was not listed again: gone");
    }

    #[test]
    fn an_indexed_cache_finds_the_children_of_an_owner_in_the_namespace_read() {
        let objects = [child("a", "x", "u1"), child("a", "y", "u2"), child("b", "x", "u1"), configmap("a", "free")];
        let mut writer = Writer::new(resource());
        let index = OwnerIndex::default();
        for event in std::iter::once(Event::Init)
            .chain(objects.iter().cloned().map(Event::InitApply))
            .chain(std::iter::once(Event::InitDone))
        {
            writer.apply_watcher_event(&event);
            index.apply(&event);
        }
        let cache = Cache::indexed(resource(), [(None, writer.as_reader(), index)]);
        assert_eq!(names(cache.owned_by(Some("a"), "u1")), ["a/x"]);
        assert_eq!(names(cache.owned_by(None, "u1")), ["a/x", "b/x"]);
        assert!(cache.owned_by(Some("a"), "u3").is_empty());
        // Without an index, the same answer by a scan.
        let scanned = Cache::all(resource(), store("a", &[]));
        assert!(scanned.owned_by(Some("a"), "u1").is_empty());
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
