//! `keep_children()` on the mock host, which collects garbage as the API
//! server's collector does: in `delete()` the host removes its
//! ownerReference from the children before it removes its finalizer, so
//! they outlive the object; in an ordinary reconcile it only deletes none
//! of the children the outcome does not list. A child the host cannot
//! release is reported as a refused child, and the object waits. The
//! fixture is `keeper` (`tests/fixtures/guests/src/keeper.rs`).
//!
//! Needs the guest components built by `tests/build-guests.sh`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use capstan_host::cluster::mock::{ChangeKind, MockCluster};
use capstan_host::cluster::{self, Cluster, EventRecord, ListParams, Patch, Propagation, Subresource};
use capstan_host::control::mapping;
use capstan_host::control::reconciler::{Error, EventKind, Reconciler};
use capstan_host::object::{Gvk, ObjectRef};
use capstan_host::runtime::component::Loader;
use capstan_host::runtime::engine::{Engine, EngineConfig};
use capstan_host::runtime::invocation::Runtime;
use capstan_host::runtime::limits::Limits;
use capstan_host::testing::{MockHost, find_component};
use serde_json::{Value, json};

const FINALIZER: &str = "fixtures.capstan.dev/keeper";

fn keeper_ref(name: &str) -> ObjectRef {
    ObjectRef::new(Gvk::new("fixtures.capstan.dev", "v1", "Keeper"), Some("demo"), name)
}

fn child_ref(name: &str) -> ObjectRef {
    ObjectRef::new(Gvk::new("", "v1", "ConfigMap"), Some("demo"), name)
}

fn keeper(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "fixtures.capstan.dev/v1",
        "kind": "Keeper",
        "metadata": {"name": name, "namespace": "demo"},
        "spec": spec,
    })
}

fn owner_uids(object: &Value) -> Vec<&str> {
    object["metadata"]["ownerReferences"].as_array().into_iter().flatten().filter_map(|o| o["uid"].as_str()).collect()
}

async fn host() -> MockHost {
    let mut host = MockHost::new().expect("mock host");
    host.load(find_component("keeper").unwrap_or_else(|e| panic!("{e}"))).await.expect("keeper loads");
    host
}

#[tokio::test]
async fn children_kept_by_delete_lose_the_owners_reference_and_outlive_it() {
    let mut host = host().await;
    let kept =
        host.seed(keeper("kept", json!({"children": ["kept-a", "kept-b"], "onDelete": "keep"}))).expect("seeded");
    host.seed(keeper("followed", json!({"children": ["followed-a"]}))).expect("seeded");
    host.run_until_idle().await.expect("settles");
    let uid = kept["metadata"]["uid"].as_str().expect("a uid").to_owned();
    // A second owner of one kept child, whose reference must stay.
    let anchor = host
        .seed(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "anchor", "namespace": "demo"}}))
        .expect("seeded");
    let second = json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "anchor", "uid": anchor["metadata"]["uid"]});
    let add = Patch::Json(json!([{"op": "add", "path": "/metadata/ownerReferences/-", "value": second}]));
    host.cluster().patch(&child_ref("kept-b"), add, Subresource::Main).await.expect("patched");
    host.run_until_idle().await.expect("settles");
    assert_eq!(owner_uids(&host.cluster().get_sync(&child_ref("kept-a")).expect("applied")), [uid.as_str()]);

    for name in ["kept", "followed"] {
        host.cluster().delete(&keeper_ref(name), Propagation::Background).await.expect("deleting");
    }
    let run = host.run_until_idle().await.expect("settles");
    assert_eq!(run.failures().count(), 0, "{:?}", run.failures().map(|s| &s.report.result).collect::<Vec<_>>());
    for name in ["kept", "followed"] {
        assert!(host.cluster().get_sync(&keeper_ref(name)).is_none(), "{name} is finalized and gone");
    }
    let orphaned: Vec<&ObjectRef> = run.steps.iter().flat_map(|s| &s.report.orphaned).collect();
    assert_eq!(orphaned, [&child_ref("kept-a"), &child_ref("kept-b")], "the report names the kept children");

    // The mock collected the garbage when each Keeper went: `followed`'s
    // child with it, `kept`'s children not.
    assert!(host.cluster().get_sync(&child_ref("followed-a")).is_none(), "a child not kept follows its owner");
    let a = host.cluster().get_sync(&child_ref("kept-a")).expect("the kept child outlives its owner");
    assert!(owner_uids(&a).is_empty(), "no reference to the deleted owner: {a:#}");
    let b = host.cluster().get_sync(&child_ref("kept-b")).expect("the kept child outlives its owner");
    assert_eq!(owner_uids(&b), [anchor["metadata"]["uid"].as_str().expect("a uid")], "the other owner stays: {b:#}");
}

#[tokio::test]
async fn keep_in_a_reconcile_deletes_no_child_and_orphans_none() {
    let mut host = host().await;
    host.seed(keeper("k", json!({"children": ["k-a", "k-b"]}))).expect("seeded");
    host.run_until_idle().await.expect("settles");
    let uid =
        host.cluster().get_sync(&keeper_ref("k")).expect("k")["metadata"]["uid"].as_str().expect("uid").to_owned();

    // Lists one child and keeps the others: `k-b` stays, still owned.
    let keep = Patch::Merge(json!({"spec": {"children": ["k-a"], "keep": true}}));
    host.cluster().patch(&keeper_ref("k"), keep, Subresource::Main).await.expect("patched");
    let run = host.run_until_idle().await.expect("settles");
    assert!(run.steps.iter().all(|s| s.report.pruned.is_empty() && s.report.orphaned.is_empty()), "{:?}", run.events());
    let b = host.cluster().get_sync(&child_ref("k-b")).expect("an unlisted child is kept");
    assert_eq!(owner_uids(&b), [uid.as_str()], "and still owned: {b:#}");

    // Deleted without keeping: the children follow, the kept one too.
    host.cluster().delete(&keeper_ref("k"), Propagation::Background).await.expect("deleting");
    let run = host.run_until_idle().await.expect("settles");
    assert_eq!(run.events(), [("k".to_owned(), EventKind::Deleted)]);
    for child in ["k-a", "k-b"] {
        assert!(host.cluster().get_sync(&child_ref(child)).is_none(), "{child} follows its owner");
    }
}

/// The mock cluster, refusing (403) every JSON patch of a ConfigMap while
/// `refuse` is set, as an API server would a write the host may not make.
struct Refusing {
    inner: Arc<MockCluster>,
    refuse: AtomicBool,
}

#[async_trait]
impl Cluster for Refusing {
    async fn id(&self) -> cluster::Result<String> {
        self.inner.id().await
    }
    async fn get(&self, object: &ObjectRef) -> cluster::Result<Value> {
        self.inner.get(object).await
    }
    async fn list(&self, kind: &Gvk, namespace: Option<&str>, params: &ListParams) -> cluster::Result<Vec<Value>> {
        self.inner.list(kind, namespace, params).await
    }
    async fn create(&self, object: Value) -> cluster::Result<Value> {
        self.inner.create(object).await
    }
    async fn replace(&self, object: Value, subresource: Subresource) -> cluster::Result<Value> {
        self.inner.replace(object, subresource).await
    }
    async fn patch(&self, object: &ObjectRef, patch: Patch, subresource: Subresource) -> cluster::Result<Value> {
        if self.refuse.load(Ordering::SeqCst) && object.gvk.kind == "ConfigMap" && matches!(patch, Patch::Json(_)) {
            let status = cluster::Status::new(403, "Forbidden", "configmaps is forbidden: the test says no");
            return Err(cluster::Error::Forbidden(status));
        }
        self.inner.patch(object, patch, subresource).await
    }
    async fn delete(&self, object: &ObjectRef, propagation: Propagation) -> cluster::Result<()> {
        self.inner.delete(object, propagation).await
    }
    async fn record_event(&self, event: EventRecord) -> cluster::Result<()> {
        self.inner.record_event(event).await
    }
}

/// Shows the reconciler the cluster's changes since `cursor`, as the
/// host's watches do.
fn watch(reconciler: &Reconciler, cluster: &MockCluster, cursor: &Mutex<u64>) {
    let mut cursor = cursor.lock().expect("not poisoned");
    for change in cluster.changes_since(*cursor) {
        *cursor = change.seq;
        let meta = mapping::meta_of(&change.object);
        let _ = reconciler.written_for(&change.object_ref.gvk, &meta, change.kind == ChangeKind::Deleted);
    }
}

#[tokio::test]
async fn a_child_the_host_cannot_release_is_reported_and_the_finalizer_stays() {
    let engine = Engine::new(EngineConfig::default()).expect("engine");
    let loader = Loader::new(Runtime::new(&engine, Limits::default()).expect("runtime"), None);
    let path = find_component("keeper").unwrap_or_else(|e| panic!("{e}"));
    let loaded = loader.load(&path).await.expect("the keeper loads");
    let inner = Arc::new(MockCluster::new());
    for crd in &loaded.manifest.crds {
        inner.register_crd(crd).expect("the CRD registers");
    }
    inner.seed(keeper("k", json!({"children": ["k-a"], "onDelete": "keep"}))).expect("seeded");
    let refusing = Arc::new(Refusing { inner: Arc::clone(&inner), refuse: AtomicBool::new(false) });
    let backend: Arc<dyn Cluster> = refusing.clone();
    let reconciler = Reconciler::new(loader.runtime().clone(), loaded, backend);
    let cursor = Mutex::new(inner.last_seq());
    let r = keeper_ref("k");

    let added = reconciler.reconcile(&r).await;
    assert!(added.result.is_ok(), "{:?}", added.result);
    watch(&reconciler, &inner, &cursor);
    refusing.refuse.store(true, Ordering::SeqCst);
    inner.delete(&r, Propagation::Background).await.expect("deleting");
    watch(&reconciler, &inner, &cursor);

    let refused = reconciler.reconcile(&r).await;
    assert_eq!(refused.event, Some(EventKind::Deleted));
    match &refused.result {
        Err(Error::ChildrenRefused(children)) => {
            assert_eq!(children.iter().map(|c| (&c.child, c.code)).collect::<Vec<_>>(), [(&child_ref("k-a"), 403)]);
        }
        other => panic!("the child is refused: {other:?}"),
    }
    let k = inner.get_sync(&r).expect("the finalizer stays");
    assert!(k["metadata"]["finalizers"].as_array().is_some_and(|f| f.contains(&json!(FINALIZER))), "{k:#}");
    let condition = k["status"]["conditions"].as_array().and_then(|c| c.iter().find(|c| c["type"] == "Reconciled"));
    assert_eq!(condition.map(|c| &c["reason"]), Some(&json!("ChildRefused")), "{k:#}");
    assert!(inner.events().iter().any(|e| e.warning && e.reason == "ChildRefused"), "{:?}", inner.events());
    assert!(!owner_uids(&inner.get_sync(&child_ref("k-a")).expect("kept")).is_empty(), "not released yet");

    // Allowed again: released, finalized, and the child outlives it.
    refusing.refuse.store(false, Ordering::SeqCst);
    watch(&reconciler, &inner, &cursor);
    let retried = reconciler.reconcile(&r).await;
    assert!(retried.result.is_ok(), "{:?}", retried.result);
    assert_eq!(retried.orphaned, [child_ref("k-a")]);
    assert!(inner.get_sync(&r).is_none(), "finalized");
    let a = inner.get_sync(&child_ref("k-a")).expect("the kept child outlives its owner");
    assert!(owner_uids(&a).is_empty(), "{a:#}");
}
