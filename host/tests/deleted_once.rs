//! `deleted` is delivered once per deleted object, also when the cache
//! still shows the object deleting after the host removed its finalizer.
//!
//! A real API server answers the write that removes the last finalizer of
//! a deleting object with the object as it was, resourceVersion included,
//! and the host's cache shows the object until the watch reports it gone;
//! a trigger in between (the guest's own child delete, a child's change)
//! found it "deleting, with our finalizer" and ran `delete()` again
//! (duplicate Events). The mock answers the same way here, behind a
//! cluster whose reads lag behind that write, as a cache does.
//! Needs the guest components built by `tests/build-guests.sh`.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use capstan_host::cluster::mock::{ChangeKind, MockCluster};
use capstan_host::cluster::{Cluster, EventRecord, ListParams, Patch, Propagation, Result, Subresource};
use capstan_host::control::mapping;
use capstan_host::control::reconciler::{EventKind, Reconciler};
use capstan_host::object::{Gvk, ObjectRef};
use capstan_host::runtime::component::Loader;
use capstan_host::runtime::engine::{Engine, EngineConfig};
use capstan_host::runtime::invocation::Runtime;
use capstan_host::runtime::limits::Limits;
use serde_json::{Value, json};

/// The mock cluster, whose reads of an object keep showing it as it was
/// before the write that ended its deletion.
struct Lagging {
    inner: Arc<MockCluster>,
    stale: Mutex<Option<(ObjectRef, Value)>>,
}

#[async_trait]
impl Cluster for Lagging {
    async fn id(&self) -> Result<String> {
        self.inner.id().await
    }
    async fn get(&self, object: &ObjectRef) -> Result<Value> {
        let stale = self.stale.lock().expect("not poisoned").clone();
        match stale {
            Some((r, before)) if r == *object => Ok(before),
            _ => self.inner.get(object).await,
        }
    }
    async fn list(&self, kind: &Gvk, namespace: Option<&str>, params: &ListParams) -> Result<Vec<Value>> {
        self.inner.list(kind, namespace, params).await
    }
    async fn list_owned(&self, kind: &Gvk, namespace: Option<&str>, owner_uid: &str) -> Result<Vec<Value>> {
        self.inner.list_owned(kind, namespace, owner_uid).await
    }
    async fn create(&self, object: Value) -> Result<Value> {
        self.inner.create(object).await
    }
    async fn replace(&self, object: Value, subresource: Subresource) -> Result<Value> {
        self.inner.replace(object, subresource).await
    }
    async fn patch(&self, object: &ObjectRef, patch: Patch, subresource: Subresource) -> Result<Value> {
        let before = self.inner.get(object).await.ok();
        let mut answer = self.inner.patch(object, patch, subresource).await?;
        if let Some(before) = before
            && self.inner.get(object).await.is_err_and(|e| e.is_not_found())
        {
            // The deletion ended: answered with the old resourceVersion,
            // and still read as it was.
            answer["metadata"]["resourceVersion"] = before["metadata"]["resourceVersion"].clone();
            *self.stale.lock().expect("not poisoned") = Some((object.clone(), before));
        }
        Ok(answer)
    }
    async fn delete(&self, object: &ObjectRef, propagation: Propagation) -> Result<()> {
        self.inner.delete(object, propagation).await
    }
    async fn record_event(&self, event: EventRecord) -> Result<()> {
        self.inner.record_event(event).await
    }
}

/// Shows the reconciler the cluster's changes since `cursor`, as the
/// host's watches do.
fn watch(reconciler: &Reconciler, cluster: &MockCluster, cursor: &mut u64) {
    for change in cluster.changes_since(*cursor) {
        *cursor = change.seq;
        let meta = mapping::meta_of(&change.object);
        let _ = reconciler.written_for(&change.object_ref.gvk, &meta, change.kind == ChangeKind::Deleted);
    }
}

fn greeting_ref() -> ObjectRef {
    ObjectRef::new(Gvk::new("examples.capstan.dev", "v1alpha1", "Greeting"), Some("default"), "hello")
}

#[tokio::test]
async fn deleted_is_delivered_once_though_the_cache_still_shows_the_object_deleting() {
    let engine = Engine::new(EngineConfig::default()).expect("engine");
    let loader = Loader::new(Runtime::new(&engine, Limits::default()).expect("runtime"), None);
    let path = capstan_host::testing::find_component("greeter").unwrap_or_else(|e| panic!("{e}"));
    let loaded = loader.load(&path).await.expect("the greeter loads");
    let inner = Arc::new(MockCluster::new());
    for crd in &loaded.manifest.crds {
        inner.register_crd(crd).expect("the CRD registers");
    }
    inner
        .seed(json!({
            "apiVersion": "examples.capstan.dev/v1alpha1", "kind": "Greeting",
            "metadata": {"name": "hello", "namespace": "default"},
            "spec": {"message": "hi", "replicas": 1},
        }))
        .expect("seeded");
    let lagging = Arc::new(Lagging { inner: Arc::clone(&inner), stale: Mutex::new(None) });
    let backend: Arc<dyn Cluster> = lagging.clone();
    let reconciler = Reconciler::new(loader.runtime().clone(), loaded, backend);
    let r = greeting_ref();
    let mut cursor = inner.last_seq();

    let added = reconciler.reconcile(&r).await;
    assert!(added.result.is_ok(), "{:?}", added.result);
    watch(&reconciler, &inner, &mut cursor);
    inner.delete(&r, Propagation::Background).await.expect("deleting");
    watch(&reconciler, &inner, &mut cursor);
    let deleted = reconciler.reconcile(&r).await;
    assert_eq!(deleted.event, Some(EventKind::Deleted), "{deleted:?}");
    assert!(deleted.result.is_ok(), "{:?}", deleted.result);
    assert!(lagging.stale.lock().expect("not poisoned").is_some(), "the finalizer removal ended the deletion");

    // A trigger while the cache still shows it deleting, with the finalizer.
    let again = reconciler.reconcile(&r).await;
    assert_eq!(again.event, None, "deleted delivered again: {again:?}");
    let deletions = inner.events().into_iter().filter(|e| e.reason == "Deleted").count();
    assert_eq!(deletions, 1);

    // Once it is seen gone, the same name may hold a new object.
    *lagging.stale.lock().expect("not poisoned") = None;
    let gone = reconciler.reconcile(&r).await;
    assert!(gone.result.is_ok(), "{:?}", gone.result);
}
