//! Bad input to the host: malformed components and misbehaving guests get a
//! clear, typed error and the host carries on.
//!
//! Needs the guest components built by `tests/build-guests.sh` (the test
//! command does it); their folder is `$CAPSTAN_GUESTS`, else
//! `$CARGO_TARGET_DIR/guests`, else `target/guests`.

use std::path::PathBuf;
use std::time::Duration;

use capstan_host::control::reconciler::{self, EventKind};
use capstan_host::object::{Gvk, ObjectRef};
use capstan_host::runtime::component::{self, CompileSource, Loader};
use capstan_host::runtime::engine::{Engine, EngineConfig};
use capstan_host::runtime::imports::CallResult;
use capstan_host::runtime::invocation::{self as runtime, Runtime};
use capstan_host::runtime::limits::Limits;
use capstan_host::testing::{BACKOFF_BASE, MockHost};
use serde_json::json;

fn guest(name: &str) -> PathBuf {
    capstan_host::testing::find_component(name).unwrap_or_else(|e| panic!("{e}"))
}

/// The value of one series of the process-wide metrics; 0 when absent.
/// Tests in this file run side by side, so they compare deltas of series
/// only they touch.
fn metric(series: &str) -> f64 {
    let scrape = capstan_host::metrics::metrics().encode();
    scrape.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok()).unwrap_or(0.0)
}

fn loader(limits: Limits) -> Loader {
    let engine = Engine::new(EngineConfig::default()).expect("engine");
    Loader::new(Runtime::new(&engine, limits).expect("runtime"), None)
}

fn configmap(name: &str, behaviour: &str) -> serde_json::Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default"},
        "data": {"behaviour": behaviour},
    })
}

fn cm_ref(name: &str) -> ObjectRef {
    ObjectRef::new(Gvk::new("", "v1", "ConfigMap"), Some("default"), name)
}

#[tokio::test]
async fn missing_file_is_a_read_error_naming_the_file() {
    let err = loader(Limits::default()).load("/nonexistent/x.wasm".as_ref()).await.expect_err("rejected");
    assert!(matches!(err, component::Error::Read { .. }), "{err}");
    assert!(err.to_string().starts_with("/nonexistent/x.wasm: cannot read"), "{err}");
}

#[tokio::test]
async fn text_file_is_not_wasm() {
    let dir = tempdir();
    let path = dir.join("readme.wasm");
    std::fs::write(&path, "hello").expect("write");
    let err = loader(Limits::default()).load(&path).await.expect_err("rejected");
    assert!(matches!(err, component::Error::NotWasm { .. }), "{err}");
}

#[tokio::test]
async fn core_module_is_rejected_as_not_a_component() {
    let dir = tempdir();
    let path = dir.join("core.wasm");
    // The smallest valid core module: magic and version 1.
    std::fs::write(&path, b"\0asm\x01\0\0\0").expect("write");
    let err = loader(Limits::default()).load(&path).await.expect_err("rejected");
    assert!(matches!(err, component::Error::CoreModule { .. }), "{err}");
}

#[tokio::test]
async fn truncated_component_fails_to_compile() {
    let bytes = std::fs::read(guest("greeter")).expect("read");
    let dir = tempdir();
    let path = dir.join("truncated.wasm");
    std::fs::write(&path, &bytes[..bytes.len() / 2]).expect("write");
    let err = loader(Limits::default()).load(&path).await.expect_err("rejected");
    assert!(matches!(err, component::Error::Compile { .. }), "{err}");
}

#[tokio::test]
async fn a_gzipped_component_loads_as_the_same_component_and_a_broken_gzip_is_rejected() {
    use std::io::Write as _;
    let bytes = std::fs::read(guest("noop")).expect("read");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&bytes).expect("compressed");
    let gz = gz.finish().expect("compressed");
    let dir = tempdir();
    let path = dir.join("noop.wasm.gz");
    std::fs::write(&path, &gz).expect("write");
    let loader = loader(Limits::default());
    let zipped = loader.load(&path).await.expect("loads");
    let plain = loader.load(&guest("noop")).await.expect("loads");
    assert_eq!(zipped.digest, plain.digest, "the digest is the component's, gzipped or not");
    assert_eq!(zipped.manifest.name, "noop");
    let broken = dir.join("broken.wasm.gz");
    std::fs::write(&broken, &gz[..gz.len() / 2]).expect("write");
    let err = loader.load(&broken).await.expect_err("rejected");
    assert!(matches!(err, component::Error::Gzip { .. }), "{err}");
}

#[tokio::test]
async fn component_of_another_world_is_rejected() {
    let rejected = r#"capstan_component_loads_total{result="rejected",reason="world"}"#;
    let before = metric(rejected);
    let err = loader(Limits::default()).load(&guest("other-world")).await.expect_err("rejected");
    assert!(matches!(&err, component::Error::WrongWorld { exports, .. } if exports == &["answer"]), "{err}");
    assert_eq!(metric(rejected) - before, 1.0);
}

#[tokio::test]
async fn unsupported_contract_version_is_rejected() {
    let rejected = r#"capstan_component_loads_total{result="rejected",reason="contract"}"#;
    let before = metric(rejected);
    let err = loader(Limits::default()).load(&guest("future-contract")).await.expect_err("rejected");
    assert!(matches!(&err, component::Error::UnsupportedContract { found, .. } if found == "9.0.0"), "{err}");
    assert_eq!(metric(rejected) - before, 1.0);
}

#[tokio::test]
async fn invalid_manifest_is_rejected() {
    let err = loader(Limits::default()).load(&guest("invalid-manifest")).await.expect_err("rejected");
    assert!(
        matches!(&err, component::Error::Manifest { error: capstan_host::manifest::Error::Name(n), .. } if n == "Not_A_Valid_Name"),
        "{err}"
    );
}

// Issue 28 item 6: a controller whose every child the host would refuse is
// refused at load, naming the owned kind and the declaration to add, not
// shown running and failing every object.
#[tokio::test]
async fn a_component_that_could_write_no_child_is_refused_naming_the_scope_to_declare() {
    let err = loader(Limits::default()).load(&guest("unwritable")).await.expect_err("rejected");
    assert!(
        matches!(
            &err,
            component::Error::Manifest { error: capstan_host::manifest::Error::Unwritable(u), .. } if u.index == 0
        ),
        "{err}"
    );
    assert_eq!(err.reason(), "manifest");
    let text = err.to_string();
    assert!(
        text.contains(
            "invalid manifest: owns[0]: controller unwritable could write no v1/ConfigMap child: it is namespaced, \
             and the own scope of its cluster-scoped owner v1/Namespace holds cluster-scoped objects only; give the \
             owned kind a scope"
        ),
        "{text}"
    );
    let mut host = MockHost::new().expect("mock host");
    let err = host.load(guest("unwritable")).await.expect_err("the mock host refuses it too");
    assert!(err.to_string().contains("could write no v1/ConfigMap child"), "{err}");
    host.load(guest("fixture")).await.expect("and loads the next");
}

#[tokio::test]
async fn a_second_component_claiming_a_scheduler_name_is_refused_by_the_mock_host() {
    let mut host = MockHost::new().expect("mock host");
    host.load(guest("zone-scheduler")).await.expect("the zone scheduler loads");
    let err = host.load(guest("scheduler-twin")).await.expect_err("the twin is refused");
    assert!(
        matches!(&err, capstan_host::testing::Error::DuplicateScheduler { name, scheduler, other }
            if name == "scheduler-twin" && scheduler == "zone-spread" && other == "zone-scheduler"),
        "{err}"
    );
}

#[tokio::test]
async fn second_load_comes_from_the_compile_cache() {
    let dir = tempdir();
    let engine = Engine::new(EngineConfig::default()).expect("engine");
    let loader = Loader::new(Runtime::new(&engine, Limits::default()).expect("runtime"), Some(dir.clone()));
    let cache_hits = r#"capstan_component_compile_seconds_count{source="cache"}"#;
    let before = metric(cache_hits);
    let first = loader.load(&guest("fixture")).await.expect("loads");
    let second = loader.load(&guest("fixture")).await.expect("loads");
    assert_eq!(first.source, CompileSource::Compiled);
    assert_eq!(second.source, CompileSource::Cache);
    assert!(metric(cache_hits) - before >= 1.0, "the cache hit is counted");
    assert!(metric(r#"capstan_component_loads_total{result="loaded",reason=""}"#) >= 2.0);
    assert_eq!(first.digest, second.digest);
    let entries = std::fs::read_dir(&dir).expect("cache dir").count();
    assert_eq!(entries, 1, "one artefact per digest and engine");
}

/// Runs one reconcile of a fixture ConfigMap with `behaviour` in a mock
/// host with the given limits, then one with `ok`, and returns both.
async fn misbehave_then_recover(behaviour: &str, limits: Limits) -> (reconciler::Report, reconciler::Report, Duration) {
    let mut host = MockHost::with_limits(limits, None).expect("host");
    host.load(guest("fixture")).await.expect("loads");
    host.seed(configmap("bad", behaviour)).expect("seed");
    let started = std::time::Instant::now();
    let mut run = host.run_until_idle().await.expect("runs");
    let took = started.elapsed();
    host.seed(configmap("good", "ok")).expect("seed");
    let mut next = host.run_until_idle().await.expect("runs");
    let bad = run.steps.remove(0).report;
    let good = next.steps.remove(0).report;
    (bad, good, took)
}

#[tokio::test]
async fn trapping_guest_gets_a_typed_error_and_the_next_call_succeeds() {
    let traps = r#"capstan_guest_traps_total{cluster="default",controller="fixture",kind="trap"}"#;
    let before = metric(traps);
    let (bad, good, _) = misbehave_then_recover("trap", Limits::default()).await;
    assert!(matches!(bad.result, Err(reconciler::Error::Guest(runtime::Error::Trap(_)))), "{:?}", bad.result);
    assert!(good.result.is_ok(), "{:?}", good.result);
    assert_eq!(metric(traps) - before, 1.0);
    assert!(
        metric(r#"capstan_guest_invocation_seconds_count{cluster="default",controller="fixture",export="reconcile"}"#)
            >= 2.0
    );
}

#[tokio::test]
async fn looping_guest_is_stopped_at_its_deadline() {
    let limits = Limits::default().deadline(Duration::from_millis(200));
    let deadlines = r#"capstan_guest_traps_total{cluster="default",controller="fixture",kind="deadline"}"#;
    let before = metric(deadlines);
    let (bad, good, took) = misbehave_then_recover("loop", limits).await;
    assert_eq!(bad.result, Err(reconciler::Error::Guest(runtime::Error::Deadline(Duration::from_millis(200)))));
    assert!(took < Duration::from_secs(5), "stopped long after the deadline: {took:?}");
    assert_eq!(metric(deadlines) - before, 1.0);
    assert!(good.result.is_ok(), "{:?}", good.result);
}

#[tokio::test]
async fn guest_growing_past_the_memory_cap_traps_and_the_host_carries_on() {
    let limits = Limits::default().memory(32 << 20);
    let caps = r#"capstan_guest_traps_total{cluster="default",controller="fixture",kind="memory"}"#;
    let before = metric(caps);
    let (bad, good, _) = misbehave_then_recover("grow", limits).await;
    assert!(
        matches!(bad.result, Err(reconciler::Error::Guest(runtime::Error::Memory { limit, .. })) if limit == 32 << 20),
        "{:?}",
        bad.result
    );
    assert!(good.result.is_ok(), "{:?}", good.result);
    assert_eq!(metric(caps) - before, 1.0);
}

#[tokio::test]
async fn undeclared_kind_is_denied_to_the_guest_and_never_executed() {
    let denials = r#"capstan_grant_denials_total{cluster="default",controller="fixture",verb="create",kind="Secret"}"#;
    let calls = r#"capstan_host_calls_total{cluster="default",controller="fixture",verb="create",kind="Secret",result="denied"}"#;
    let before = (metric(denials), metric(calls));
    let mut host = MockHost::new().expect("host");
    host.load(guest("fixture")).await.expect("loads");
    host.seed(configmap("thief", "deny")).expect("seed");
    let run = host.run_until_idle().await.expect("runs");
    let call = run.calls().find(|c| c.function == "kube.create").expect("the guest tried");
    assert!(matches!(&call.result, CallResult::Denied(r) if r.contains("create v1/Secret")), "{call:?}");
    let secrets = host.cluster().objects(&Gvk::new("", "v1", "Secret"));
    assert!(secrets.is_empty(), "nothing may be created: {secrets:?}");
    assert_eq!((metric(denials) - before.0, metric(calls) - before.1), (1.0, 1.0));
    // The guest saw a typed `denied` error: it reports it as a Warning.
    let events = host.events();
    assert!(events.iter().any(|e| e.reason == "Denied" && e.warning), "{events:?}");
}

#[tokio::test]
async fn transient_errors_are_retried_with_growing_delays() {
    let mut host = MockHost::new().expect("host");
    host.load(guest("fixture")).await.expect("loads");
    host.seed(configmap("flaky", "transient")).expect("seed");
    let first = host.run_until_idle().await.expect("runs");
    assert_eq!(first.steps.len(), 1);
    assert_eq!(host.next_due(), Some(BACKOFF_BASE));
    let second = host.advance(BACKOFF_BASE).await.expect("runs");
    assert_eq!(second.steps.len(), 1, "retried once the backoff elapsed");
    assert_eq!(host.next_due(), Some(BACKOFF_BASE + BACKOFF_BASE * 2), "the delay doubles");
}

#[tokio::test]
async fn terminal_errors_are_recorded_and_not_retried() {
    let mut host = MockHost::new().expect("host");
    host.load(guest("fixture")).await.expect("loads");
    host.seed(configmap("doomed", "terminal")).expect("seed");
    let run = host.run_until_idle().await.expect("runs");
    assert_eq!(run.steps[0].report.result, Err(reconciler::Error::Terminal("fixture gave up".into())));
    assert_eq!(host.next_due(), None, "no retry scheduled");
    let events = host.events();
    assert!(events.iter().any(|e| e.reason == "ReconcileFailed" && e.warning), "{events:?}");
}

#[tokio::test]
async fn child_of_an_undeclared_kind_is_an_invalid_outcome() {
    let mut host = MockHost::new().expect("host");
    host.load(guest("fixture")).await.expect("loads");
    host.seed(configmap("podder", "undeclared-child")).expect("seed");
    let run = host.run_until_idle().await.expect("runs");
    assert!(matches!(&run.steps[0].report.result, Err(reconciler::Error::InvalidOutcome(m)) if m.contains("v1/Pod")));
    assert!(host.cluster().objects(&Gvk::new("", "v1", "Pod")).is_empty());
}

#[tokio::test]
async fn events_are_derived_from_state() {
    let mut host = MockHost::new().expect("host");
    host.load(guest("fixture")).await.expect("loads");
    host.seed(configmap("a", "ok")).expect("seed");
    let run = host.run_until_idle().await.expect("runs");
    assert_eq!(run.events(), vec![("a".to_owned(), EventKind::Added)]);
    let mut cm = host.cluster().get_sync(&cm_ref("a")).expect("exists");
    cm["data"]["extra"] = json!("1");
    let patch = capstan_host::cluster::Patch::Merge(json!({"data": {"extra": "1"}}));
    capstan_host::cluster::Cluster::patch(host.cluster(), &cm_ref("a"), patch, Default::default())
        .await
        .expect("patched");
    let run = host.run_until_idle().await.expect("runs");
    assert_eq!(run.events(), vec![("a".to_owned(), EventKind::Modified)]);
    host.restart().await.expect("restart");
    let run = host.run_until_idle().await.expect("runs");
    assert_eq!(run.events(), vec![("a".to_owned(), EventKind::Added)], "a restart re-adds every object");
    let _ = cm;
}

fn tempdir() -> PathBuf {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("capstan-test-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}
