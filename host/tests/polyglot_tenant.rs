//! One tenant operator, two languages: the Rust tenant (`examples/tenant`)
//! and its JavaScript port (`examples/tenant-js`, on QuickJS) must declare
//! the same manifest and CRD, pass the tenant's scenarios, and leave the same
//! objects, events, errors, API calls and logs behind through a life that
//! also covers what the scenarios do not: a blank admin name, refused
//! children, a Secret tied to another tenant.
//!
//! Build the components first: `tests/build-guests.sh` (`tenant.wasm`) and
//! `tests/build-polyglot-guests.sh` (`tenant-js.wasm`).
//!
//! The port embeds the Rust tenant's CRD from
//! `examples/tenant-js/tenant-crd.json`; `CAPSTAN_BLESS=1 cargo test -p
//! capstan-host --test polyglot_tenant` rewrites it from the Rust tenant.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use capstan_host::cluster::{Cluster, Patch, Propagation, Subresource};
use capstan_host::object::{Gvk, ObjectRef};
use capstan_host::testing::{MockHost, Run, find_component, warm_compile_cache};
use capstan_host::tooling::cli::manifest_document;
use capstan_host::tooling::scenario;
use serde_json::{Value, json};

/// The Rust tenant and its port, by component file stem.
const RUST: &str = "tenant";
const PORT: &str = "tenant-js";

/// The CRD file the port embeds, relative to the repository.
const CRD_FILE: &str = "examples/tenant-js/tenant-crd.json";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn component(stem: &str) -> PathBuf {
    static WARM: OnceLock<()> = OnceLock::new();
    WARM.get_or_init(|| warm_compile_cache(&[RUST, PORT]).unwrap_or_else(|e| panic!("{e}")));
    find_component(stem).unwrap_or_else(|e| {
        panic!("{e} (tests/build-guests.sh builds tenant, tests/build-polyglot-guests.sh builds tenant-js)")
    })
}

#[tokio::test]
async fn both_tenants_pass_the_tenant_scenarios() {
    let scenarios = repo().join("examples/tenant/scenarios");
    for stem in [RUST, PORT] {
        let results = scenario::run_all(&component(stem), &scenarios).await.expect("scenarios run");
        assert!(!results.is_empty(), "{}: no scenario found", scenarios.display());
        for case in &results {
            assert!(case.passed(), "{stem}: scenario {}:\n{}", case.name, case.mismatches.join("\n"));
        }
    }
}

#[tokio::test]
async fn the_port_declares_the_rust_tenants_manifest() {
    let mut host = MockHost::new().expect("mock host");
    let rust = host.load(component(RUST)).await.expect("the Rust tenant loads");
    let mut host = MockHost::new().expect("mock host");
    let port = host.load(component(PORT)).await.expect("the JavaScript tenant loads");

    // What the Rust tenant declares, so that equal manifests are not
    // vacuously equal.
    let doc = manifest_document(&rust, "", "");
    assert_eq!(doc["name"], "tenants");
    assert_eq!(doc["primary"], json!({"group": "examples.capstan.dev", "version": "v1alpha1", "kind": "Tenant"}));
    assert_eq!(doc["finalizer"], "tenants.examples.capstan.dev/cleanup");
    assert_eq!(doc["crds"], json!(["tenants.examples.capstan.dev"]));
    assert_eq!(doc["owns"].as_array().map(Vec::len), Some(4), "{:#}", doc["owns"]);
    assert_eq!(
        doc["watches"][0]["mapping"],
        json!({"reference": {"name": {"annotation": "tenants.examples.capstan.dev/tenant"}, "namespace": null}})
    );
    let bind = json!({
        "group": "rbac.authorization.k8s.io", "kind": "ClusterRole", "verbs": ["bind"],
        "scope": "cluster", "status": false, "resourceNames": ["admin"],
    });
    assert!(doc["grants"].as_array().expect("grants").contains(&bind), "{:#}", doc["grants"]);

    // The whole manifest, the grants derived from it, and the values.
    assert_eq!(manifest_document(&port, "", ""), doc, "the document `capstan inspect` prints");
    assert_eq!(*port, *rust, "the manifest values");
}

#[tokio::test]
async fn the_port_embeds_the_rust_tenants_crd() {
    let mut host = MockHost::new().expect("mock host");
    let rust = host.load(component(RUST)).await.expect("loads");
    let crd = rust.crds.first().expect("the tenant defines a CRD").clone();
    let path = repo().join(CRD_FILE);
    if std::env::var_os("CAPSTAN_BLESS").is_some() {
        let text = serde_json::to_string_pretty(&crd).expect("json") + "\n";
        std::fs::write(&path, text).expect("writes the CRD file");
    }
    let text = std::fs::read_to_string(&path).expect("reads the CRD file");
    let committed: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(committed, crd, "{CRD_FILE} differs from the Rust tenant's CRD: run with CAPSTAN_BLESS=1");
}

fn tenant_kind() -> Gvk {
    Gvk::new("examples.capstan.dev", "v1alpha1", "Tenant")
}

fn tenant(name: &str, admins: &[&str]) -> Value {
    json!({
        "apiVersion": "examples.capstan.dev/v1alpha1",
        "kind": "Tenant",
        "metadata": {"name": name},
        "spec": {"admins": admins, "quota": {"requests.cpu": "2", "pods": "10"}},
    })
}

/// Removes what differs between runs by wall-clock time only: the guests
/// stamp condition transitions with their own clock.
fn without_times(mut v: Value) -> Value {
    if let Some(conditions) = v.pointer_mut("/status/conditions").and_then(Value::as_array_mut) {
        for c in conditions {
            if let Some(c) = c.as_object_mut() {
                c.remove("lastTransitionTime");
            }
        }
    }
    v
}

/// The kinds a tenant reads or writes.
fn kinds() -> [Gvk; 6] {
    [
        tenant_kind(),
        Gvk::new("", "v1", "Namespace"),
        Gvk::new("", "v1", "ResourceQuota"),
        Gvk::new("rbac.authorization.k8s.io", "v1", "RoleBinding"),
        Gvk::new("", "v1", "ConfigMap"),
        Gvk::new("", "v1", "Secret"),
    ]
}

/// What a run and the cluster after it look like: every object of the
/// tenant's kinds, and per reconcile the event, the result, the children
/// applied and pruned, the host calls and the log lines; then the events
/// recorded so far.
fn snapshot(host: &MockHost, run: &Run) -> Value {
    let objects: Vec<Value> = kinds().iter().flat_map(|k| host.cluster().objects(k)).map(without_times).collect();
    let steps: Vec<Value> = run
        .steps
        .iter()
        .map(|s| {
            json!({
                "object": s.report.object.to_string(),
                "event": s.report.event.map(|e| e.as_str()),
                "result": match &s.report.result {
                    Ok(action) => format!("ok: {action:?}"),
                    Err(e) => format!("error: {e}"),
                },
                "applied": s.report.applied.iter().map(ToString::to_string).collect::<Vec<_>>(),
                "pruned": s.report.pruned.iter().map(ToString::to_string).collect::<Vec<_>>(),
                "calls": s.report.journal.calls.iter()
                    .map(|c| format!("{} {} {:?}", c.function, c.target, c.result))
                    .collect::<Vec<_>>(),
                "logs": s.report.journal.logs.iter()
                    .map(|l| json!([format!("{:?}", l.level), l.message, l.fields]))
                    .collect::<Vec<_>>(),
            })
        })
        .collect();
    let events: Vec<Value> =
        host.events().iter().map(|e| json!([e.regarding.to_string(), e.warning, e.reason, e.action, e.note])).collect();
    json!({"objects": objects, "steps": steps, "events": events})
}

/// Drives one tenant operator through a life and returns a snapshot per
/// stage: created; no admins; a blank admin (U+0085, blank to Rust's
/// `trim`, not to JavaScript's); fixed; an annotated Secret for it and one
/// for another tenant; a tenant whose ConfigMap another owner controls, so
/// that the host refuses it; deletion.
async fn life(stem: &str) -> Vec<(&'static str, Value)> {
    let mut host = MockHost::new().expect("mock host");
    host.load(component(stem)).await.expect("loads");
    let acme = ObjectRef::new(tenant_kind(), None, "acme");
    let mut stages = Vec::new();

    host.seed(tenant("acme", &["alice"])).expect("seeded");
    let run = host.run_until_idle().await.expect("settles");
    stages.push(("created", snapshot(&host, &run)));

    for (stage, admins) in [("no admins", json!([])), ("blank admin", json!(["alice", "\u{85}"]))] {
        let patch = Patch::Merge(json!({"spec": {"admins": admins}}));
        host.cluster().patch(&acme, patch, Subresource::Main).await.expect("patched");
        let run = host.run_until_idle().await.expect("settles");
        stages.push((stage, snapshot(&host, &run)));
    }

    let patch = Patch::Merge(json!({"spec": {"admins": ["alice", "bob"]}}));
    host.cluster().patch(&acme, patch, Subresource::Main).await.expect("patched");
    let run = host.run_until_idle().await.expect("settles");
    stages.push(("fixed", snapshot(&host, &run)));

    host.seed(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "vault"}})).expect("seeded");
    for (name, owner) in [("acme-token", "acme"), ("globex-token", "globex")] {
        host.seed(json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": name,
                "namespace": "vault",
                "labels": {"tenants.examples.capstan.dev/tenant": owner},
                "annotations": {"tenants.examples.capstan.dev/tenant": owner},
            },
            "data": {"token": "czNjcmV0"},
        }))
        .expect("seeded");
    }
    let run = host.run_until_idle().await.expect("settles");
    stages.push(("secrets", snapshot(&host, &run)));

    // A ConfigMap `tenant-info` that another owner controls, where the
    // tenant globex will want its own: the host refuses to take it over.
    host.seed(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "tenant-globex"}})).expect("seeded");
    host.seed(json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "tenant-info",
            "namespace": "tenant-globex",
            "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "Deployment", "name": "squatter",
                "uid": "5f0c3a4e-0000-4000-8000-000000000001", "controller": true,
            }],
        },
        "data": {"owner": "squatter"},
    }))
    .expect("seeded");
    host.seed(tenant("globex", &["carol"])).expect("seeded");
    let mut run = host.run_until_idle().await.expect("settles");
    // The refused child is reported to the guest at the retry, after the
    // first backoff (the host's own writes trigger no earlier pass).
    let retry = host.advance(capstan_host::testing::backoff(1)).await.expect("settles");
    run.steps.extend(retry.steps);
    run.attempts.extend(retry.attempts);
    stages.push(("refused children", snapshot(&host, &run)));

    host.cluster().delete(&acme, Propagation::Default).await.expect("deleted");
    let run = host.run_until_idle().await.expect("settles");
    stages.push(("deleted", snapshot(&host, &run)));
    stages
}

/// The `Ready` condition of the Tenant `name` in a snapshot.
fn ready<'a>(snapshot: &'a Value, name: &str) -> &'a Value {
    snapshot["objects"]
        .as_array()
        .and_then(|objects| objects.iter().find(|o| o["kind"] == "Tenant" && o["metadata"]["name"] == name))
        .and_then(|t| t["status"]["conditions"].as_array())
        .and_then(|conditions| conditions.iter().find(|c| c["type"] == "Ready"))
        .unwrap_or(&Value::Null)
}

fn configmap_data<'a>(snapshot: &'a Value, namespace: &str) -> &'a Value {
    snapshot["objects"]
        .as_array()
        .and_then(|objects| {
            objects.iter().find(|o| {
                o["kind"] == "ConfigMap"
                    && o["metadata"]["namespace"] == namespace
                    && o["metadata"]["name"] == "tenant-info"
            })
        })
        .map_or(&Value::Null, |c| &c["data"])
}

#[tokio::test]
async fn the_port_leaves_the_same_objects_events_errors_calls_and_logs_as_the_rust_tenant() {
    let rust = life(RUST).await;

    // The life does what it claims, in Rust.
    let stage = |name: &str| &rust.iter().find(|(s, _)| *s == name).expect("a stage").1;
    assert_eq!(ready(stage("created"), "acme")["reason"], "Provisioned", "{:#}", stage("created"));
    assert_eq!(ready(stage("no admins"), "acme")["message"], "spec.admins lists no one");
    assert_eq!(ready(stage("blank admin"), "acme")["message"], "spec.admins has an empty name");
    assert_eq!(ready(stage("fixed"), "acme")["status"], "True");
    assert_eq!(configmap_data(stage("fixed"), "tenant-acme")["admins"], "alice,bob");
    assert_eq!(configmap_data(stage("secrets"), "tenant-acme")["secrets"], "1", "{:#}", stage("secrets"));
    let refused = ready(stage("refused children"), "globex");
    assert_eq!(refused["reason"], "ChildRefused", "{:#}", stage("refused children"));
    assert!(
        refused["message"].as_str().is_some_and(|m| m.starts_with("ConfigMap tenant-info: controlled by ")),
        "{refused}"
    );
    let deleted = stage("deleted");
    assert!(
        deleted["events"].as_array().is_some_and(|events| events.iter().any(|e| e[2] == "Deleted")),
        "{:#}",
        deleted["events"]
    );
    assert!(
        deleted["steps"].as_array().is_some_and(|steps| steps.iter().any(|s| s["logs"][0][1] == "tenant deleted")),
        "{:#}",
        deleted["steps"]
    );

    let port = life(PORT).await;
    assert_eq!(port.len(), rust.len());
    for ((stage, r), (_, p)) in rust.iter().zip(&port) {
        for part in ["objects", "steps", "events"] {
            assert_eq!(p[part], r[part], "{PORT}: stage {stage:?}: {part} differ from the Rust tenant's");
        }
    }
}
