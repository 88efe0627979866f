//! Components built against an earlier contract keep loading and running,
//! unchanged: the greeter as the 0.1.0 SDK built it
//! (`tests/fixtures/contract-0.1.0`) against today's host, the `noop`
//! fixture, built against the frozen 0.2.0 WIT, and the `contract-0.3.0`
//! fixture, built against the frozen 0.3.0 WIT.

use capstan_host::runtime::component::Loader;
use capstan_host::runtime::engine::{Engine, EngineConfig};
use capstan_host::runtime::invocation::Runtime;
use capstan_host::runtime::limits::Limits;
use capstan_host::testing::{MockHost, find_component};
use capstan_host::tooling::scenario;
use serde_json::json;

fn old_greeter() -> std::path::PathBuf {
    find_component("greeter-0.1.0").unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test]
async fn a_component_of_contract_0_1_0_loads_as_such() {
    let engine = Engine::new(EngineConfig::default()).expect("engine");
    let runtime = Runtime::new(&engine, Limits::default()).expect("linker");
    let loaded = Loader::new(runtime, None).load(&old_greeter()).await.expect("loads");
    assert_eq!(loaded.contract, "0.1.0");
    assert_eq!(loaded.pre.contract(), "0.1.0");
    assert_eq!(loaded.manifest.name, "greeter");
    assert_eq!(loaded.manifest.owns.len(), 2);
    let current = Loader::new(Runtime::new(&engine, Limits::default()).expect("linker"), None);
    let new = current.load(&find_component("greeter").unwrap_or_else(|e| panic!("{e}"))).await.expect("loads");
    assert_eq!(new.contract, capstan_host::CONTRACT_VERSION);
    assert_eq!(loaded.manifest.owns, new.manifest.owns, "the same declaration through either contract");
}

#[tokio::test]
async fn a_component_of_contract_0_2_0_loads_as_a_controller_and_reconciles() {
    let engine = Engine::new(EngineConfig::default()).expect("engine");
    let runtime = Runtime::new(&engine, Limits::default()).expect("linker");
    let noop = find_component("noop").unwrap_or_else(|e| panic!("{e}"));
    let loaded = Loader::new(runtime, None).load(&noop).await.expect("loads");
    assert_eq!(loaded.contract, "0.2.0");
    assert_eq!(loaded.pre.contract(), "0.2.0");
    assert_eq!(loaded.manifest.roles, capstan_host::manifest::Roles::reconcile_only());

    let mut host = MockHost::new().expect("host");
    host.load(noop).await.expect("loads");
    host.seed(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "still", "namespace": "default"},
    }))
    .expect("seeded");
    let run = host.run_until_idle().await.expect("settles");
    assert_eq!(run.failures().count(), 0, "a 0.2.0 reconcile succeeds");
    assert!(!run.steps.is_empty(), "and is called");
}

#[tokio::test]
async fn a_component_of_contract_0_1_0_passes_the_greeters_scenarios() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/greeter/scenarios");
    let results = scenario::run_all(&old_greeter(), &dir).await.expect("runs");
    assert!(results.len() >= 2);
    for r in &results {
        assert!(r.passed(), "{}: {}", r.name, r.mismatches.join("\n"));
    }
}

#[tokio::test]
async fn a_terminal_error_of_a_0_1_0_component_gets_the_hosts_condition() {
    let mut host = MockHost::new().expect("host");
    host.load(old_greeter()).await.expect("loads");
    host.seed(json!({
        "apiVersion": "examples.capstan.dev/v1alpha1", "kind": "Greeting",
        "metadata": {"name": "mute", "namespace": "demo"},
        "spec": {"message": "", "replicas": 1},
    }))
    .expect("seeded");
    let run = host.run_until_idle().await.expect("settles");
    assert_eq!(run.failures().count(), 1, "terminal: tried once");
    let gvk = capstan_host::object::Gvk::new("examples.capstan.dev", "v1alpha1", "Greeting");
    let g = host.cluster().get_sync(&capstan_host::object::ObjectRef::new(gvk, Some("demo"), "mute")).expect("exists");
    let conditions = g["status"]["conditions"].as_array().cloned().unwrap_or_default();
    assert!(
        conditions
            .iter()
            .any(|c| c["type"] == "Reconciled" && c["status"] == "False" && c["reason"] == "TerminalError"),
        "{}",
        g["status"]
    );
}

fn contract_0_3_0() -> std::path::PathBuf {
    find_component("contract-0.3.0").unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test]
async fn a_component_of_contract_0_3_0_loads_with_its_roles_and_no_egress() {
    let engine = Engine::new(EngineConfig::default()).expect("engine");
    let runtime = Runtime::new(&engine, Limits::default()).expect("linker");
    let loaded = Loader::new(runtime, None).load(&contract_0_3_0()).await.expect("loads");
    assert_eq!(loaded.contract, "0.3.0");
    assert_eq!(loaded.pre.contract(), "0.3.0");
    assert_eq!(loaded.manifest.name, "legacy");
    assert!(loaded.manifest.roles.reconcile);
    let webhooks: Vec<&str> = loaded.manifest.roles.admission.iter().map(|w| w.name.as_str()).collect();
    assert_eq!(webhooks, ["legacy.configmaps.example.com"]);
    assert!(loaded.manifest.egress.is_empty(), "a 0.3.0 component calls no origin");
}

#[tokio::test]
async fn a_component_of_contract_0_3_0_reconciles_through_its_own_imports() {
    let mut host = MockHost::new().expect("host");
    host.load(contract_0_3_0()).await.expect("loads");
    host.seed(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "old", "namespace": "default"},
    }))
    .expect("seeded");
    let run = host.run_until_idle().await.expect("settles");
    assert_eq!(run.failures().count(), 0, "a 0.3.0 reconcile succeeds");
    let step = run.steps.iter().find(|s| s.report.object.name == "old").expect("the ConfigMap is reconciled");
    let calls: Vec<(&str, &str)> = step.report.journal.calls.iter().map(|c| (c.function, c.target.as_str())).collect();
    assert!(calls.iter().any(|(f, t)| *f == "kube.get" && t.contains("default/old")), "{calls:?}");
    assert!(calls.iter().any(|(f, _)| *f == "events.record"), "{calls:?}");
    assert!(step.report.journal.logs.iter().any(|l| l.message == "reconciled"));
    let reasons: Vec<String> = host.events().into_iter().map(|e| e.reason).collect();
    assert!(reasons.iter().any(|r| r == "Seen") && reasons.iter().any(|r| r == "Reconciled"), "{reasons:?}");
}

#[tokio::test]
async fn a_component_of_contract_0_3_0_reviews_admission_requests() {
    use capstan_host::manifest::Operation;
    use capstan_host::testing::Admission;
    let mut host = MockHost::new().expect("host");
    host.load(contract_0_3_0()).await.expect("loads");
    let cm = |data: serde_json::Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "default"}, "data": data});
    match host.admit(Operation::Create, Some(cm(json!({"ok": "1"}))), None).await.expect("reviewed") {
        Admission::Allowed { warnings, .. } => assert_eq!(warnings, ["reviewed at v1"]),
        denied => panic!("allowed expected: {denied:?}"),
    }
    match host.admit(Operation::Create, Some(cm(json!({"forbidden": "1"}))), None).await.expect("reviewed") {
        Admission::Denied { webhook, code, .. } => {
            assert_eq!((webhook.as_str(), code), ("legacy.configmaps.example.com", 422));
        }
        allowed => panic!("denied expected: {allowed:?}"),
    }
}

/// A ConfigMap for the fixture guest asking it to report its cluster.
fn reports_its_cluster() -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "where", "namespace": "default"},
        "data": {"behaviour": "cluster"},
    })
}

fn cluster_child(cluster: &capstan_host::cluster::mock::MockCluster) -> serde_json::Value {
    let gvk = capstan_host::object::Gvk::new("", "v1", "ConfigMap");
    let r = capstan_host::object::ObjectRef::new(gvk, Some("default"), "where-cluster");
    cluster.get_sync(&r).expect("the child is applied")["data"]["cluster"].clone()
}

#[tokio::test]
async fn a_reconcile_request_names_the_cluster_the_reconciler_serves() {
    use capstan_host::cluster::Cluster;
    use capstan_host::control::reconciler::Reconciler;
    use std::sync::Arc;
    let engine = Engine::new(EngineConfig::default()).expect("engine");
    let loader = Loader::new(Runtime::new(&engine, Limits::default()).expect("linker"), None);
    let loaded = loader.load(&find_component("fixture").unwrap_or_else(|e| panic!("{e}"))).await.expect("loads");
    assert_eq!(loaded.contract, capstan_host::CONTRACT_VERSION);
    let cluster = Arc::new(capstan_host::cluster::mock::MockCluster::new());
    let seeded = cluster.seed(reports_its_cluster()).expect("seeded");
    let r = capstan_host::object::ObjectRef::of(&seeded).expect("a reference");
    let backend: Arc<dyn Cluster> = cluster.clone();
    let reconciler = Reconciler::new(loader.runtime().clone(), loaded, backend).in_cluster("east");
    assert_eq!(reconciler.cluster_name(), "east");
    let report = reconciler.reconcile(&r).await;
    assert!(report.result.is_ok(), "{:?}", report.result);
    assert_eq!(cluster_child(&cluster), "east");
}

#[tokio::test]
async fn the_mock_host_names_its_cluster_default() {
    let mut host = MockHost::new().expect("host");
    host.load(find_component("fixture").unwrap_or_else(|e| panic!("{e}"))).await.expect("loads");
    host.seed(reports_its_cluster()).expect("seeded");
    let run = host.run_until_idle().await.expect("settles");
    assert_eq!(run.failures().count(), 0);
    assert_eq!(cluster_child(host.cluster()), "default");
}
