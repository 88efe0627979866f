//! One scheduler, three languages: the zone scheduler in Rust
//! (`examples/zone-scheduler`), Python (`examples/zone-scheduler-python`)
//! and JavaScript (`examples/zone-scheduler-js`, on QuickJS) must declare
//! the same manifest and pass the same scenarios
//! (`examples/zone-scheduler/scenarios`).
//!
//! Build the components first: `tests/build-guests.sh` (`zone-scheduler.wasm`)
//! and `tests/build-polyglot-guests.sh` (the ports).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use capstan_host::testing::{MockHost, find_component, warm_compile_cache};
use capstan_host::tooling::cli::manifest_document;
use capstan_host::tooling::scenario;

/// The Rust zone scheduler, by component file stem.
const RUST: &str = "zone-scheduler";

/// Its ports, by component file stem.
const PORTS: [&str; 2] = ["zone-scheduler-python", "zone-scheduler-js"];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn component(stem: &str) -> PathBuf {
    static WARM: OnceLock<()> = OnceLock::new();
    WARM.get_or_init(|| warm_compile_cache(&[RUST, PORTS[0], PORTS[1]]).unwrap_or_else(|e| panic!("{e}")));
    find_component(stem).unwrap_or_else(|e| {
        panic!("{e} (tests/build-guests.sh builds zone-scheduler, tests/build-polyglot-guests.sh the ports)")
    })
}

async fn assert_scenarios_pass(stem: &str) {
    let scenarios = repo().join("examples/zone-scheduler/scenarios");
    let results = scenario::run_all(&component(stem), &scenarios).await.expect("scenarios run");
    assert!(!results.is_empty(), "{}: no scenario found", scenarios.display());
    for case in &results {
        assert!(case.passed(), "{stem}: scenario {}: {:#?}", case.name, case.mismatches);
    }
}

#[tokio::test]
async fn the_python_zone_scheduler_passes_the_zone_scheduler_scenarios() {
    assert_scenarios_pass("zone-scheduler-python").await;
}

#[tokio::test]
async fn the_javascript_zone_scheduler_passes_the_zone_scheduler_scenarios() {
    assert_scenarios_pass("zone-scheduler-js").await;
}

#[tokio::test]
async fn every_port_declares_the_rust_zone_schedulers_manifest() {
    let mut host = MockHost::new().expect("mock host");
    let rust = host.load(component(RUST)).await.expect("the Rust zone scheduler loads");
    // What the Rust one declares, so that equal manifests are not
    // vacuously equal.
    assert_eq!(rust.name, "zone-scheduler");
    assert_eq!(rust.roles.scheduler.as_deref(), Some("zone-spread"));
    assert!(!rust.roles.reconcile);
    let doc = manifest_document(&rust, "", "");
    for stem in PORTS {
        let mut host = MockHost::new().expect("mock host");
        let port = host.load(component(stem)).await.unwrap_or_else(|e| panic!("{stem} loads: {e}"));
        assert_eq!(manifest_document(&port, "", ""), doc, "{stem}: the document `capstan inspect` prints");
        assert_eq!(*port, *rust, "{stem}: the manifest values");
    }
}
