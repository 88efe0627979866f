//! The baseline compiler: a component the compile cache does not hold
//! serves on Winch's code at once, cranelift's code replaces it when
//! ready (and lands in the cache), the tools cache Winch's code and run no
//! cranelift compile, and Winch's code is held to the same limits: the
//! deadline, the memory cap, traps.
//!
//! Needs the guest components built by `tests/build-guests.sh` (the test
//! command does it).

mod fixture;

use std::time::Duration;

use capstan_host::control::reconciler;
use capstan_host::runtime::component::{CompileSource, Loader};
use capstan_host::runtime::engine::{Engine, EngineConfig};
use capstan_host::runtime::invocation::{self as runtime, Runtime, Tier};
use capstan_host::runtime::limits::Limits;
use capstan_host::testing::MockHost;
use fixture::{calls, reconcile};

fn loader(limits: Limits, cache: Option<std::path::PathBuf>) -> Loader {
    let engine = Engine::new(EngineConfig::default().memory_limit(limits.memory).baseline(true)).expect("engine");
    assert!(engine.baseline().is_some(), "Winch runs on this machine");
    Loader::new(Runtime::new(&engine, limits).expect("runtime"), cache)
}

async fn fixture(loader: Loader) -> MockHost {
    let mut host = MockHost::with_loader(loader);
    let fixture = capstan_host::testing::find_component("fixture").unwrap_or_else(|e| panic!("{e}"));
    host.load(fixture).await.expect("loads");
    host
}

/// A fresh compile cache directory, removed when dropped.
struct Cache(std::path::PathBuf);

impl Cache {
    fn new() -> Self {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("capstan-tiers-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        Self(dir)
    }

    fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for Cache {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn cache_entries(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .map(|d| d.filter_map(Result::ok).filter(|e| e.path().extension().is_some_and(|x| x == "cwasm")).count())
        .unwrap_or(0)
}

#[tokio::test]
async fn a_new_component_serves_on_baseline_code_until_cranelifts_replaces_it() {
    let cache = Cache::new();
    let mut host = fixture(loader(Limits::default(), Some(cache.path().to_owned()))).await;
    assert_eq!(host.tier("fixture"), Some(Tier::Baseline), "not in the cache: Winch's code serves first");
    let report = reconcile(&mut host, "a", "count").await;
    assert!(report.result.is_ok(), "{:?}", report.result);
    assert_eq!(calls(&host, "a"), 1);

    let waited = std::time::Instant::now();
    while host.tier("fixture") != Some(Tier::Optimized) {
        assert!(waited.elapsed() < Duration::from_secs(300), "cranelift's code never came");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(cache_entries(cache.path()), 1, "the optimizing compile wrote the cache entry");
    let report = reconcile(&mut host, "b", "count").await;
    assert!(report.result.is_ok(), "{:?}", report.result);
    assert_eq!(calls(&host, "b"), 1, "the baseline instance was dropped: a fresh one runs cranelift's code");

    // The next load of the same component is a cache hit, optimized from
    // the start.
    let fixture = capstan_host::testing::find_component("fixture").unwrap_or_else(|e| panic!("{e}"));
    let again = loader(Limits::default(), Some(cache.path().to_owned())).load(&fixture).await.expect("loads");
    assert_eq!(again.source, CompileSource::Cache);
    assert_eq!(again.pre.tier(), Tier::Optimized);
}

#[tokio::test]
async fn a_version_replaced_before_its_optimizing_compile_is_not_compiled() {
    let cache = Cache::new();
    let loader = loader(Limits::default(), Some(cache.path().to_owned()));
    let fixture = capstan_host::testing::find_component("fixture").unwrap_or_else(|e| panic!("{e}"));
    let noop = capstan_host::testing::find_component("noop").unwrap_or_else(|e| panic!("{e}"));
    // The fixture's optimizing compile runs; the noop's waits its turn,
    // and nothing holds the noop's code by then.
    let kept = loader.load(&fixture).await.expect("loads");
    let dropped = loader.load(&noop).await.expect("loads");
    assert_eq!((kept.source, dropped.source), (CompileSource::Baseline, CompileSource::Baseline));
    drop(dropped);
    let waited = std::time::Instant::now();
    while kept.pre.tier() != Tier::Optimized {
        assert!(waited.elapsed() < Duration::from_secs(300), "cranelift's code never came");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The noop's turn comes right after the fixture's swap; cranelift
    // compiles the noop in about 0.1 s.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(cache_entries(cache.path()), 1, "only the fixture, still held, was compiled by cranelift");
}

#[tokio::test]
async fn the_tools_compile_with_winch_once_and_load_its_code_from_the_cache_after() {
    let cache = Cache::new();
    let fixture = capstan_host::testing::find_component("fixture").unwrap_or_else(|e| panic!("{e}"));
    let tools = || capstan_host::testing::tool_loader(Some(cache.path().to_owned())).expect("loader");
    let first = tools().load(&fixture).await.expect("loads");
    assert_eq!((first.source, first.pre.tier()), (CompileSource::Baseline, Tier::Baseline), "a cold cache");
    assert_eq!(cache_entries(cache.path()), 1, "Winch's code is cached before the load returns");
    let second = tools().load(&fixture).await.expect("loads");
    assert_eq!((second.source, second.pre.tier()), (CompileSource::Cache, Tier::Baseline), "a warm cache");

    // A host starts from that entry, then cranelift's code replaces it,
    // in memory and in the cache.
    let host = loader(Limits::default(), Some(cache.path().to_owned()));
    assert!(host.is_cached(&first.digest), "Winch's entry counts as a version seen before");
    let served = host.load(&fixture).await.expect("loads");
    assert_eq!((served.source, served.pre.tier()), (CompileSource::Cache, Tier::Baseline));
    let waited = std::time::Instant::now();
    while served.pre.tier() != Tier::Optimized {
        assert!(waited.elapsed() < Duration::from_secs(300), "cranelift's code never came");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(cache_entries(cache.path()), 1, "cranelift's entry replaced Winch's");
    let optimized = tools().load(&fixture).await.expect("loads");
    assert_eq!(
        (optimized.source, optimized.pre.tier()),
        (CompileSource::Cache, Tier::Optimized),
        "the tools use cranelift's entry too"
    );
}

/// Baseline code only (`optimize(false)`), so that nothing swaps under the
/// calls below.
async fn baseline_only(limits: Limits) -> MockHost {
    let host = fixture(loader(limits, None).optimize(false)).await;
    assert_eq!(host.tier("fixture"), Some(Tier::Baseline));
    host
}

#[tokio::test]
async fn baseline_code_keeps_its_instances_between_calls() {
    let mut host = baseline_only(Limits::default()).await;
    for (i, name) in ["a", "b"].into_iter().enumerate() {
        reconcile(&mut host, name, "count").await;
        assert_eq!(calls(&host, name), i as u32 + 1, "{name}: the same instance counted on");
    }
}

#[tokio::test]
async fn baseline_code_is_stopped_at_the_deadline() {
    let mut host = baseline_only(Limits::default().deadline(Duration::from_millis(200))).await;
    let stopped = reconcile(&mut host, "l", "loop").await;
    assert!(
        matches!(stopped.result, Err(reconciler::Error::Guest(runtime::Error::Deadline(_)))),
        "{:?}",
        stopped.result
    );
    let next = reconcile(&mut host, "a", "count").await;
    assert!(next.result.is_ok(), "the host serves on: {:?}", next.result);
    assert_eq!(calls(&host, "a"), 1, "a fresh instance after the deadline");
}

#[tokio::test]
async fn baseline_code_is_held_to_the_memory_cap() {
    let mut host = baseline_only(Limits::default().memory(32 << 20)).await;
    let grown = reconcile(&mut host, "g", "grow").await;
    assert!(
        matches!(grown.result, Err(reconciler::Error::Guest(runtime::Error::Memory { limit, .. })) if limit == 32 << 20),
        "{:?}",
        grown.result
    );
    let trapped = reconcile(&mut host, "t", "trap").await;
    assert!(matches!(trapped.result, Err(reconciler::Error::Guest(runtime::Error::Trap(_)))), "{:?}", trapped.result);
    let next = reconcile(&mut host, "a", "count").await;
    assert!(next.result.is_ok(), "{:?}", next.result);
}
