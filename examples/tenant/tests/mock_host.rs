//! The tenant operator on the mock host: a cluster-scoped primary with
//! namespaced children, failing with status, and restarts. Build the
//! component first (`tests/build-guests.sh`).

use capstan_host::cluster::{Cluster, Patch, Subresource};
use capstan_host::control::reconciler::{CONDITION, EventKind};
use capstan_host::object::{Gvk, ObjectRef};
use capstan_host::testing::{MockHost, find_component};
use capstan_host::tooling::scenario;
use serde_json::{Value, json};

fn tenant_kind() -> Gvk {
    Gvk::new("examples.capstan.dev", "v1alpha1", "Tenant")
}

fn tenant(name: &str, admins: &[&str]) -> Value {
    json!({
        "apiVersion": "examples.capstan.dev/v1alpha1",
        "kind": "Tenant",
        "metadata": {"name": name},
        "spec": {"admins": admins, "quota": {"pods": "10"}},
    })
}

fn acme() -> ObjectRef {
    ObjectRef::new(tenant_kind(), None, "acme")
}

fn condition<'a>(object: &'a Value, type_: &str) -> Option<&'a Value> {
    object["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == type_)
}

async fn host() -> MockHost {
    let mut host = MockHost::new().expect("mock host");
    host.load(find_component("tenant").unwrap_or_else(|e| panic!("{e}"))).await.expect("tenant loads");
    host
}

#[tokio::test]
async fn a_cluster_scoped_tenant_is_reconciled_under_its_own_key_only() {
    let mut host = host().await;
    host.seed(tenant("acme", &["alice"])).expect("seeded");
    let run = host.run_until_idle().await.expect("settles");
    assert_eq!(run.failures().count(), 0, "{:?}", run.failures().map(|s| &s.report.result).collect::<Vec<_>>());
    // Every reconcile was of the cluster-scoped Tenant, never of a
    // namespaced twin named after a child's namespace.
    assert!(
        run.steps.iter().all(|s| s.report.object == acme()),
        "{:?}",
        run.steps.iter().map(|s| &s.report.object).collect::<Vec<_>>()
    );
    let added = run.events().iter().filter(|(_, e)| *e == EventKind::Added).count();
    assert_eq!(added, 1, "one added: {:?}", run.events());
    assert!(run.steps.len() <= 3, "children's changes trigger few passes: {}", run.steps.len());
    let ns = host.cluster().get_sync(&ObjectRef::new(Gvk::new("", "v1", "Namespace"), None, "tenant-acme"));
    assert!(ns.is_some(), "the namespace exists");
    for event in host.events() {
        assert_eq!(
            event.regarding.namespace, None,
            "events about a cluster-scoped object have no namespace: {event:?}"
        );
    }
}

#[tokio::test]
async fn an_invalid_spec_fails_with_status_keeps_the_children_and_recovers() {
    let mut host = host().await;
    host.seed(tenant("acme", &["alice"])).expect("seeded");
    host.run_until_idle().await.expect("settles");
    let patch = Patch::Merge(json!({"spec": {"admins": []}}));
    host.cluster().patch(&acme(), patch, Subresource::Main).await.expect("patched");
    let run = host.run_until_idle().await.expect("settles without looping");
    assert_eq!(run.failures().count(), 1, "a terminal failure is not retried: {:?}", run.events());
    let t = host.cluster().get_sync(&acme()).expect("tenant");
    assert_eq!(condition(&t, "Ready").expect("ready")["reason"], "InvalidSpec");
    assert_eq!(condition(&t, CONDITION).expect("host condition")["status"], "False");
    let binding = ObjectRef::new(
        Gvk::new("rbac.authorization.k8s.io", "v1", "RoleBinding"),
        Some("tenant-acme"),
        "tenant-admins",
    );
    assert!(host.cluster().get_sync(&binding).is_some(), "children kept");

    let patch = Patch::Merge(json!({"spec": {"admins": ["bob"]}}));
    host.cluster().patch(&acme(), patch, Subresource::Main).await.expect("patched");
    host.run_until_idle().await.expect("settles");
    let t = host.cluster().get_sync(&acme()).expect("tenant");
    assert_eq!(condition(&t, "Ready").expect("ready")["status"], "True");
    assert!(condition(&t, CONDITION).is_none(), "the host's condition is cleared on success: {}", t["status"]);
}

#[tokio::test]
async fn a_restart_does_not_deliver_added_again() {
    let mut host = host().await;
    host.seed(tenant("acme", &["alice"])).expect("seeded");
    host.run_until_idle().await.expect("settles");
    let created = |h: &MockHost| h.events().iter().filter(|e| e.reason == "Created").count();
    assert_eq!(created(&host), 1);
    for _ in 0..3 {
        host.restart().await.expect("restart");
        let run = host.run_until_idle().await.expect("settles");
        assert_eq!(run.events(), vec![("acme".to_owned(), EventKind::Resync)]);
    }
    assert_eq!(created(&host), 1, "no Created event per restart");
}

#[tokio::test]
async fn the_scenarios_pass() {
    let component = find_component("tenant").unwrap_or_else(|e| panic!("{e}"));
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
    let results = scenario::run_all(&component, &dir).await.expect("scenarios run");
    for r in &results {
        assert!(r.passed(), "{}: {}", r.name, r.mismatches.join("\n"));
    }
    assert!(!results.is_empty());
}
