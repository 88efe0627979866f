//! Someone else's change that lands while the guest runs is a change the
//! guest has not seen. The host's status write carries no precondition, so
//! its answer holds that change too; the next reconcile must still be
//! `modified` (and a terminal failure tried again), not taken for the
//! guest's own work.
//!
//! The greeter on the mock cluster, behind a cluster that makes a user's
//! edit of the Greeting just before the host's status write reaches it.
//! Needs the guest components built by `tests/build-guests.sh`.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use capstan_host::cluster::mock::{ChangeKind, MockCluster};
use capstan_host::cluster::{Cluster, EventRecord, ListParams, Patch, Propagation, Result, Subresource};
use capstan_host::control::mapping;
use capstan_host::control::reconciler::{self, EventKind, Reconciler};
use capstan_host::object::{Gvk, ObjectRef};
use capstan_host::runtime::component::Loader;
use capstan_host::runtime::engine::{Engine, EngineConfig};
use capstan_host::runtime::invocation::Runtime;
use capstan_host::runtime::limits::Limits;
use serde_json::{Value, json};

/// The mock cluster, and an edit (a merge patch of the Greeting) to make
/// just before the next status write, as a user racing the host would.
struct Racing {
    inner: Arc<MockCluster>,
    edit: Mutex<Option<Value>>,
}

#[async_trait]
impl Cluster for Racing {
    async fn id(&self) -> Result<String> {
        self.inner.id().await
    }
    async fn get(&self, object: &ObjectRef) -> Result<Value> {
        self.inner.get(object).await
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
        let edit =
            if subresource == Subresource::Status { self.edit.lock().expect("not poisoned").take() } else { None };
        if let Some(edit) = edit {
            self.inner.patch(object, Patch::Merge(edit), Subresource::Main).await?;
        }
        self.inner.patch(object, patch, subresource).await
    }
    async fn delete(&self, object: &ObjectRef, propagation: Propagation) -> Result<()> {
        self.inner.delete(object, propagation).await
    }
    async fn record_event(&self, event: EventRecord) -> Result<()> {
        self.inner.record_event(event).await
    }
}

fn greeting(message: &str) -> Value {
    json!({
        "apiVersion": "examples.capstan.dev/v1alpha1",
        "kind": "Greeting",
        "metadata": {"name": "hello", "namespace": "default"},
        "spec": {"message": message, "replicas": 1},
    })
}

fn greeting_ref() -> ObjectRef {
    ObjectRef::new(Gvk::new("examples.capstan.dev", "v1alpha1", "Greeting"), Some("default"), "hello")
}

/// The greeter's reconciler over a [`Racing`] cluster holding the Greeting
/// `hello` with `message`.
async fn setup(message: &str) -> (Reconciler, Arc<Racing>) {
    let engine = Engine::new(EngineConfig::default()).expect("engine");
    let loader = Loader::new(Runtime::new(&engine, Limits::default()).expect("runtime"), None);
    let path = capstan_host::testing::find_component("greeter").unwrap_or_else(|e| panic!("{e}"));
    let loaded = loader.load(&path).await.expect("the greeter loads");
    let inner = Arc::new(MockCluster::new());
    for crd in &loaded.manifest.crds {
        inner.register_crd(crd).expect("the CRD registers");
    }
    inner.seed(greeting(message)).expect("seeded");
    let racing = Arc::new(Racing { inner, edit: Mutex::new(None) });
    let backend: Arc<dyn Cluster> = racing.clone();
    (Reconciler::new(loader.runtime().clone(), loaded, backend), racing)
}

/// Shows the reconciler the cluster's changes since `cursor`, as the host's
/// watches do; returns the Greeting's, each with whether the reconciler
/// took it for its own write (not a trigger).
fn watch(reconciler: &Reconciler, cluster: &MockCluster, cursor: &mut u64) -> Vec<(i64, bool)> {
    let mut greetings = Vec::new();
    for change in cluster.changes_since(*cursor) {
        *cursor = change.seq;
        let meta = mapping::meta_of(&change.object);
        let own = reconciler.written_for(&change.object_ref.gvk, &meta, change.kind == ChangeKind::Deleted);
        if change.object_ref == greeting_ref() {
            let generation = change.object["metadata"]["generation"].as_i64().unwrap_or_default();
            greetings.push((generation, own.is_some()));
        }
    }
    greetings
}

/// Reconciles the Greeting once with `edit` made just before the host's
/// status write; checks that the edit was made and that, of the
/// Greeting's changes, the finalizer and the status were taken for the
/// host's own writes and the edit between them for a trigger.
async fn reconcile_racing(reconciler: &Reconciler, racing: &Racing, edit: Value) -> reconciler::Report {
    *racing.edit.lock().expect("not poisoned") = Some(edit);
    let mut cursor = racing.inner.last_seq();
    let report = reconciler.reconcile(&greeting_ref()).await;
    assert!(racing.edit.lock().expect("not poisoned").is_none(), "the edit was made during the status write");
    assert_eq!(watch(reconciler, &racing.inner, &mut cursor), [(1, true), (2, false), (2, true)]);
    report
}

fn reasons(cluster: &MockCluster) -> Vec<String> {
    cluster.events().into_iter().map(|e| e.reason).collect()
}

#[tokio::test]
async fn a_spec_changed_during_the_status_write_is_reconciled_as_modified() {
    let (reconciler, racing) = setup("hi").await;
    let r = greeting_ref();
    let first = reconcile_racing(&reconciler, &racing, json!({"spec": {"message": "changed meanwhile"}})).await;
    assert_eq!(first.event, Some(EventKind::Added));
    assert!(first.result.is_ok(), "{:?}", first.result);
    let mut cursor = racing.inner.last_seq();
    let stored = racing.inner.get_sync(&r).expect("exists");
    assert_eq!(stored["metadata"]["generation"], json!(2));
    assert_eq!(stored["status"]["observedGeneration"], json!(1), "the status of what the guest saw");

    let second = reconciler.reconcile(&r).await;
    assert_eq!(second.event, Some(EventKind::Modified), "generation 2 was never shown to the guest");
    assert!(second.result.is_ok(), "{:?}", second.result);
    assert_eq!(watch(&reconciler, &racing.inner, &mut cursor), [(2, true)]);
    let stored = racing.inner.get_sync(&r).expect("exists");
    assert_eq!(stored["status"]["observedGeneration"], json!(2));
    let cm = ObjectRef::new(Gvk::new("", "v1", "ConfigMap"), Some("default"), "hello-greeting");
    assert_eq!(racing.inner.get_sync(&cm).expect("the child")["data"]["message"], json!("changed meanwhile"));
    assert_eq!(reasons(&racing.inner), ["Created", "Updated"]);

    // Nothing changed since: a resync, no new Event.
    let third = reconciler.reconcile(&r).await;
    assert_eq!(third.event, Some(EventKind::Resync));
    assert_eq!(reasons(&racing.inner), ["Created", "Updated"]);
}

#[tokio::test]
async fn a_fix_made_during_a_terminal_failures_status_write_is_tried() {
    // An empty message is a terminal failure, with status.
    let (reconciler, racing) = setup(" ").await;
    let r = greeting_ref();
    let failed = reconcile_racing(&reconciler, &racing, json!({"spec": {"message": "fixed"}})).await;
    assert!(failed.result.is_err(), "{:?}", failed.result);

    let retried = reconciler.reconcile(&r).await;
    assert_eq!(retried.event, Some(EventKind::Modified), "the fix is a change, not the failure's own write");
    assert!(retried.result.is_ok(), "{:?}", retried.result);
    let stored = racing.inner.get_sync(&r).expect("exists");
    assert_eq!(stored["status"]["observedGeneration"], json!(2));
}
