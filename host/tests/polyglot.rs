//! One controller, three languages: the greeter in Rust (`examples/greeter`),
//! Python (`examples/greeter-python`) and JavaScript (`examples/greeter-js`,
//! on QuickJS and on SpiderMonkey) must declare the same things, pass the
//! same scenarios and leave the same objects behind. The templates of
//! `capstan new --lang python|js` must build and pass their own scenarios.
//!
//! Build the components first: `tests/build-guests.sh` and
//! `tests/build-polyglot-guests.sh`.
//!
//! The Python and JavaScript greeters embed the Rust greeter's CRD from a
//! JSON file beside them; `CAPSTAN_BLESS=1 cargo test -p capstan-host --test
//! polyglot` rewrites those files from the Rust greeter.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use capstan_host::cluster::{Cluster, Patch, Propagation, Subresource};
use capstan_host::manifest::Roles;
use capstan_host::object::{Gvk, ObjectRef};
use capstan_host::runtime::component::Loader;
use capstan_host::runtime::engine::{Engine, EngineConfig};
use capstan_host::runtime::invocation::Runtime;
use capstan_host::runtime::limits::Limits;
use capstan_host::testing::{MockHost, default_cache_dir, find_component, warm_compile_cache};
use capstan_host::tooling::scenario;
use serde_json::{Value, json};

/// The ports of the Rust greeter, by component file stem.
const PORTS: [&str; 3] = ["greeter-python", "greeter-js", "greeter-js-spidermonkey"];

/// The CRD files the ports embed, relative to the repository.
const CRD_FILES: [&str; 2] = ["examples/greeter-python/greeting-crd.json", "examples/greeter-js/greeting-crd.json"];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every component these tests load.
const ALL: [&str; 10] = [
    "greeter",
    "greeter-python",
    "greeter-js",
    "greeter-js-spidermonkey",
    "template-python",
    "template-js",
    "silences",
    "silences-python",
    "fleet",
    "fleet-python",
];

fn component(stem: &str) -> PathBuf {
    static WARM: OnceLock<()> = OnceLock::new();
    WARM.get_or_init(|| warm_compile_cache(&ALL).unwrap_or_else(|e| panic!("{e}")));
    find_component(stem).unwrap_or_else(|e| panic!("{e} (tests/build-polyglot-guests.sh builds the polyglot ones)"))
}

async fn assert_scenarios_pass(stem: &str, scenarios: &Path) {
    let results = scenario::run_all(&component(stem), scenarios).await.expect("scenarios run");
    assert!(!results.is_empty(), "{}: no scenario found", scenarios.display());
    for case in &results {
        assert!(case.passed(), "{stem}: scenario {}: {:#?}", case.name, case.mismatches);
    }
}

#[tokio::test]
async fn the_python_greeter_passes_the_greeter_scenarios() {
    assert_scenarios_pass("greeter-python", &repo().join("examples/greeter/scenarios")).await;
}

#[tokio::test]
async fn the_javascript_greeter_passes_the_greeter_scenarios() {
    assert_scenarios_pass("greeter-js", &repo().join("examples/greeter/scenarios")).await;
}

#[tokio::test]
async fn the_javascript_greeter_on_spidermonkey_passes_the_greeter_scenarios() {
    assert_scenarios_pass("greeter-js-spidermonkey", &repo().join("examples/greeter/scenarios")).await;
}

#[tokio::test]
async fn the_python_and_javascript_greeters_and_templates_load_as_contract_0_4_0_serving_reconcile_only() {
    let engine = Engine::new(EngineConfig::default()).expect("engine");
    for stem in PORTS.into_iter().chain(["template-python", "template-js"]) {
        let loader = Loader::new(Runtime::new(&engine, Limits::default()).expect("linker"), default_cache_dir());
        let loaded = loader.load(&component(stem)).await.unwrap_or_else(|e| panic!("{stem}: {e}"));
        assert_eq!(loaded.contract, "0.4.0", "{stem}");
        assert_eq!(loaded.pre.contract(), "0.4.0", "{stem}");
        assert_eq!(loaded.manifest.roles, Roles::reconcile_only(), "{stem}");
    }
}

/// The rendered templates sit beside the components, in `templates/<lang>`.
fn rendered_template(lang: &str) -> PathBuf {
    let wasm = component(&format!("template-{lang}"));
    wasm.parent().expect("a component lies in a folder").join("templates").join(lang)
}

#[tokio::test]
async fn the_python_template_passes_its_scenarios() {
    assert_scenarios_pass("template-python", &rendered_template("python").join("scenarios")).await;
}

#[tokio::test]
async fn the_javascript_template_passes_its_scenarios() {
    assert_scenarios_pass("template-js", &rendered_template("js").join("scenarios")).await;
}

#[tokio::test]
async fn the_python_and_javascript_webhooks_pass_the_rust_webhooks_scenarios() {
    let scenarios = repo().join("examples/greeter-webhooks/scenarios");
    for port in ["greeter-webhooks-python", "greeter-webhooks-js"] {
        assert_scenarios_pass(port, &scenarios).await;
    }
}

#[test]
fn the_python_and_javascript_webhooks_declare_what_the_rust_ones_do() {
    let rust = inspect("greeter-webhooks");
    assert_eq!(rust["roles"]["reconcile"], json!(false), "{rust:#}");
    for port in ["greeter-webhooks-python", "greeter-webhooks-js"] {
        let doc = numbers_as_floats(&inspect(port));
        assert_eq!(doc, numbers_as_floats(&rust), "{port}: the whole manifest, roles and grants");
    }
}

/// `capstan inspect --output json` of a component, without its digest.
fn inspect(stem: &str) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(["inspect", "--output", "json"])
        .arg(component(stem))
        .output()
        .expect("capstan runs");
    assert!(out.status.success(), "{stem}: {}", String::from_utf8_lossy(&out.stderr));
    let mut doc: Value = serde_json::from_slice(&out.stdout).expect("json");
    doc.as_object_mut().expect("an object").remove("digest");
    doc
}

#[test]
fn every_port_inspects_like_the_rust_greeter() {
    let rust = inspect("greeter");
    assert_eq!(rust["name"], "greeter");
    assert_eq!(rust["finalizer"], "examples.capstan.dev/greeter-cleanup");
    assert_eq!(rust["crds"], json!(["greetings.examples.capstan.dev"]));
    for port in PORTS {
        let doc = inspect(port);
        for field in ["name", "finalizer", "crds", "primary", "owns", "watches", "resyncSeconds", "maxConcurrency"] {
            assert_eq!(doc[field], rust[field], "{port}: {field}");
        }
        assert_eq!(doc, rust, "{port}: the whole manifest and grants");
    }
}

/// The silences operator in Python: the Rust one's manifest, grants and
/// egress, its CRD (from `examples/silences-python/silence-crd.json`,
/// rewritten with `CAPSTAN_BLESS=1`), and its scenarios, Alertmanager
/// stubbed.
#[tokio::test]
async fn the_python_silences_declare_what_the_rust_ones_do_and_pass_their_scenarios() {
    let file = repo().join("examples/silences-python/silence-crd.json");
    let mut host = MockHost::new().expect("mock host");
    let rust = host.load(component("silences")).await.expect("loads");
    let crd = rust.crds.first().expect("the silences define a CRD").clone();
    if std::env::var_os("CAPSTAN_BLESS").is_some() {
        std::fs::write(&file, serde_json::to_string_pretty(&crd).expect("json") + "\n").expect("writes the CRD file");
    }
    let committed: Value = serde_json::from_str(&std::fs::read_to_string(&file).expect("reads")).expect("json");
    assert_eq!(committed, crd, "{} differs from the Rust CRD: run with CAPSTAN_BLESS=1", file.display());
    assert_eq!(inspect("silences-python"), inspect("silences"), "the whole manifest, grants and egress");
    assert_scenarios_pass("silences-python", &repo().join("examples/silences/scenarios")).await;
}

/// The fleet greeter in Python: the Rust one's manifest and grants (its
/// fleet included), its CRD (from
/// `examples/fleet-python/fleetgreeting-crd.json`, rewritten with
/// `CAPSTAN_BLESS=1`), and its scenarios, members and all.
#[tokio::test]
async fn the_python_fleet_greeter_declares_what_the_rust_one_does_and_passes_its_scenarios() {
    let file = repo().join("examples/fleet-python/fleetgreeting-crd.json");
    let mut host = MockHost::new().expect("mock host");
    let rust = host.load(component("fleet")).await.expect("loads");
    let crd = rust.crds.first().expect("the fleet greeter defines a CRD").clone();
    if std::env::var_os("CAPSTAN_BLESS").is_some() {
        std::fs::write(&file, serde_json::to_string_pretty(&crd).expect("json") + "\n").expect("writes the CRD file");
    }
    let committed: Value = serde_json::from_str(&std::fs::read_to_string(&file).expect("reads")).expect("json");
    assert_eq!(committed, crd, "{} differs from the Rust CRD: run with CAPSTAN_BLESS=1", file.display());
    assert_eq!(inspect("fleet-python"), inspect("fleet"), "the whole manifest, grants and fleet");
    assert_scenarios_pass("fleet", &repo().join("examples/fleet/scenarios")).await;
    assert_scenarios_pass("fleet-python", &repo().join("examples/fleet/scenarios")).await;
}

/// `value` with every number as a float: JavaScript writes `100.0` as
/// `100`, the same JSON number.
fn numbers_as_floats(value: &Value) -> Value {
    match value {
        Value::Number(n) => n.as_f64().map(Value::from).unwrap_or_else(|| value.clone()),
        Value::Array(items) => Value::Array(items.iter().map(numbers_as_floats).collect()),
        Value::Object(map) => Value::Object(map.iter().map(|(k, v)| (k.clone(), numbers_as_floats(v))).collect()),
        other => other.clone(),
    }
}

#[tokio::test]
async fn every_port_declares_the_rust_greeters_crd() {
    let mut host = MockHost::new().expect("mock host");
    let rust = host.load(component("greeter")).await.expect("loads");
    let crd = rust.crds.first().expect("the greeter defines a CRD").clone();
    if std::env::var_os("CAPSTAN_BLESS").is_some() {
        let text = serde_json::to_string_pretty(&crd).expect("json") + "\n";
        for file in CRD_FILES {
            std::fs::write(repo().join(file), &text).expect("writes the CRD file");
        }
    }
    for file in CRD_FILES {
        let text = std::fs::read_to_string(repo().join(file)).expect("reads the CRD file");
        let committed: Value = serde_json::from_str(&text).expect("json");
        assert_eq!(committed, crd, "{file} differs from the Rust greeter's CRD: run with CAPSTAN_BLESS=1");
    }
    for port in PORTS {
        let mut host = MockHost::new().expect("mock host");
        let manifest = host.load(component(port)).await.expect("loads");
        let crds: Vec<Value> = manifest.crds.iter().map(numbers_as_floats).collect();
        assert_eq!(crds, vec![numbers_as_floats(&crd)], "{port}");
    }
}

fn greeting_kind() -> Gvk {
    Gvk::new("examples.capstan.dev", "v1alpha1", "Greeting")
}

fn in_demo(kind: Gvk, name: &str) -> ObjectRef {
    ObjectRef::new(kind, Some("demo"), name)
}

/// Removes what differs between runs by wall-clock time only.
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

/// Drives one greeter through a life: create, change, a child deleted, the
/// Deployment reporting replicas, an empty message, deletion. Returns what
/// each stage left behind: objects, events, event kinds and results.
async fn life(stem: &str) -> Vec<Value> {
    let mut host = MockHost::new().expect("mock host");
    host.load(component(stem)).await.expect("loads");
    let greeting = in_demo(greeting_kind(), "hello");
    let configmap = in_demo(Gvk::new("", "v1", "ConfigMap"), "hello-greeting");
    let deployment = in_demo(Gvk::new("apps", "v1", "Deployment"), "hello-greeter");
    let mut stages = Vec::new();
    let mut snapshot = async |host: &MockHost, run: capstan_host::testing::Run| {
        let mut objects = Vec::new();
        for r in [&greeting, &configmap, &deployment, &in_demo(greeting_kind(), "mute")] {
            objects.push(host.cluster().get(r).await.map(without_times).unwrap_or(Value::Null));
        }
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
                })
            })
            .collect();
        let events: Vec<Value> = host
            .events()
            .iter()
            .map(|e| json!([e.regarding.to_string(), e.warning, e.reason, e.action, e.note]))
            .collect();
        stages.push(json!({"objects": objects, "steps": steps, "events": events}));
    };

    host.seed(json!({
        "apiVersion": "examples.capstan.dev/v1alpha1",
        "kind": "Greeting",
        "metadata": {"name": "hello", "namespace": "demo"},
        "spec": {"message": "hi there ✓", "replicas": 2},
    }))
    .expect("seeded");
    let run = host.run_until_idle().await.expect("settles");
    snapshot(&host, run).await;

    let patch = Patch::Merge(json!({"spec": {"message": "hello again", "replicas": 3}}));
    host.cluster().patch(&greeting, patch, Subresource::Main).await.expect("patched");
    let run = host.run_until_idle().await.expect("settles");
    snapshot(&host, run).await;

    host.cluster().delete(&configmap, Propagation::Default).await.expect("deleted");
    let status = Patch::Merge(json!({"status": {"replicas": 3}}));
    host.cluster().patch(&deployment, status, Subresource::Status).await.expect("status patched");
    let run = host.run_until_idle().await.expect("settles");
    snapshot(&host, run).await;

    let run = host.advance(Duration::from_secs(301)).await.expect("settles");
    snapshot(&host, run).await;

    host.seed(json!({
        "apiVersion": "examples.capstan.dev/v1alpha1",
        "kind": "Greeting",
        "metadata": {"name": "mute", "namespace": "demo"},
        "spec": {"message": "  "},
    }))
    .expect("seeded");
    let run = host.run_until_idle().await.expect("settles");
    snapshot(&host, run).await;

    host.cluster().delete(&greeting, Propagation::Default).await.expect("deleted");
    let run = host.run_until_idle().await.expect("settles");
    snapshot(&host, run).await;
    stages
}

#[tokio::test]
async fn every_port_leaves_the_same_objects_events_and_errors_as_the_rust_greeter() {
    let rust = life("greeter").await;
    assert_eq!(rust[0]["objects"][1]["data"]["message"], "hi there ✓", "{:#}", rust[0]);
    for port in PORTS {
        let theirs = life(port).await;
        for (stage, (r, t)) in rust.iter().zip(&theirs).enumerate() {
            assert_eq!(t, r, "{port}: stage {stage} differs from the Rust greeter");
        }
    }
}
