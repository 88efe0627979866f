//! The cost of a guest language: the greeter in Rust, Python and JavaScript
//! (QuickJS and SpiderMonkey), measured on the same host.
//!
//! Build the components first (`tests/build-guests.sh`,
//! `tests/build-polyglot-guests.sh`), then:
//!
//! ```text
//! cargo bench -p capstan-host --bench languages
//! ```
//!
//! Prints a Markdown table of medians; a component that is not built is
//! skipped. `CAPSTAN_BENCH_COMPILES` (default 3) and
//! `CAPSTAN_BENCH_RECONCILES` (default 300) set the number of runs;
//! `CAPSTAN_BENCH_GUESTS` (component stems, comma-separated, e.g.
//! `greeter-js,greeter-python`) measures only those.
//!
//! What each column measures:
//!
//! - **size**: the component file.
//! - **compile**: wasmtime compiling it (cranelift, no cache): the
//!   loader's `compile_time`; then Winch's (the baseline compiler, what
//!   serves first on a cache miss).
//! - **cached load**: the whole `Loader::load` with a warm compile cache:
//!   read, hash (SHA-256 of the file), load the precompiled artefact,
//!   pre-instantiate, call `manifest()`; in parentheses the part spent
//!   loading the artefact (the loader's `compile_time` on a cache hit).
//! - **reconcile**: one greeter resync through the `Reconciler` on the mock
//!   cluster: the guest's `get` of its Deployment, the server-side apply of
//!   two children and the status; median and p99, with the instance kept
//!   from the call before (the host's default) and, alternating with it in
//!   the same loop, with a fresh instance per call (`Limits::reuse(1)`),
//!   and on Winch's code with the instance kept.
//! - **memory/instance**: the growth of the process's resident set (VmRSS;
//!   RssAnon, the private part, in parentheses) per live instance, with
//!   16 instances alive at once, each after one reconcile. Linear memories
//!   and core instances per component instance come from the pooling
//!   allocator's metrics.
//!
//! A second table: one scheduling decision of the zone scheduler
//! (`examples/zone-scheduler`, `-python`, `-js`) over 100 and over 1000
//! Nodes as the host hands them over (trimmed, every Node Ready and
//! matching the Pod's node selector), the instance kept between calls, in
//! two cases: after one binding (one Node changed since the instance's
//! previous decision, what a run of decisions hands over) and with every
//! Node changed (what a fresh instance gets; what every decision handed
//! over before the host sent changes only); median and p99 of
//! `CAPSTAN_BENCH_DECISIONS` (default 30) decisions per size and case, all
//! alternating in one loop. `CAPSTAN_BENCH_GUESTS`
//! selects these too (`zone-scheduler,zone-scheduler-python,zone-scheduler-js`
//! measures only them).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use capstan_host::cluster::Cluster;
use capstan_host::cluster::mock::MockCluster;
use capstan_host::control::reconciler::{EventKind, Reconciler};
use capstan_host::object::{Gvk, ObjectRef};
use capstan_host::runtime::component::{CompileSource, Loaded, Loader};
use capstan_host::runtime::engine::{Engine, EngineConfig};
use capstan_host::runtime::grants::Grants;
use capstan_host::runtime::imports::{Caller, HostState};
use capstan_host::runtime::invocation::Runtime;
use capstan_host::runtime::limits::Limits;
use capstan_host::testing::find_component;
use serde_json::json;
use wasmtime::Store;

/// The implementations measured: label and component file stem.
const LANGUAGES: [(&str, &str); 4] = [
    ("Rust", "greeter"),
    ("Python (componentize-py)", "greeter-python"),
    ("JavaScript (jco, QuickJS)", "greeter-js"),
    ("JavaScript (componentize-js, SpiderMonkey)", "greeter-js-spidermonkey"),
];

/// The schedulers measured: label and component file stem.
const SCHEDULERS: [(&str, &str); 3] = [
    ("Rust", "zone-scheduler"),
    ("Python (componentize-py)", "zone-scheduler-python"),
    ("JavaScript (jco, QuickJS)", "zone-scheduler-js"),
];

/// The Node counts a scheduling decision is measured at.
const NODE_COUNTS: [usize; 2] = [100, 1000];

#[path = "support/scheduling.rs"]
mod scheduling;

/// Instances kept alive at once to measure memory.
const LIVE_INSTANCES: usize = 16;

/// One row of the table.
struct Row {
    label: &'static str,
    size: u64,
    compile: Duration,
    winch_compile: Duration,
    cached_load: Duration,
    artefact_load: Duration,
    reconcile: Duration,
    reconcile_p99: Duration,
    fresh: Duration,
    fresh_p99: Duration,
    winch: Duration,
    winch_p99: Duration,
    rss_per_instance: i64,
    anon_per_instance: i64,
    memories: f64,
    core_instances: f64,
}

fn runs(var: &str, default: usize) -> usize {
    std::env::var(var).ok().and_then(|v| v.parse().ok()).filter(|n| *n > 0).unwrap_or(default)
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn percentile(mut samples: Vec<Duration>, p: f64) -> Duration {
    samples.sort();
    let index = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[index.min(samples.len() - 1)]
}

/// `VmRSS` and `RssAnon` of this process, in bytes.
fn rss() -> (i64, i64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<i64>().ok())
            .map_or(0, |kib| kib * 1024)
    };
    (field("VmRSS:"), field("RssAnon:"))
}

fn caller(loaded: &Loaded, cluster: Arc<dyn Cluster>, reconciling: Option<&ObjectRef>) -> Caller {
    Caller {
        controller: loaded.manifest.name.as_str().into(),
        cluster_name: "default".into(),
        field_manager: loaded.manifest.field_manager().into(),
        grants: Arc::new(Grants::from_manifest(&loaded.manifest)),
        cluster,
        reconciling: reconciling.map(|r| (r.clone(), None)),
        reach: None,
    }
}

fn greeting_ref() -> ObjectRef {
    ObjectRef::new(Gvk::new("examples.capstan.dev", "v1alpha1", "Greeting"), Some("bench"), "hello")
}

/// A mock cluster with the greeter's CRD and one Greeting.
fn cluster_for(loaded: &Loaded) -> Arc<MockCluster> {
    let mock = Arc::new(MockCluster::new());
    for crd in &loaded.manifest.crds {
        mock.register_crd(crd).expect("the greeter's CRD registers");
    }
    mock.seed(json!({
        "apiVersion": "examples.capstan.dev/v1alpha1",
        "kind": "Greeting",
        "metadata": {"name": "hello", "namespace": "bench"},
        "spec": {"message": "hi", "replicas": 2},
    }))
    .expect("seed");
    mock
}

/// The runtimes measured side by side: the host's default, a fresh
/// instance per call, and the baseline compiler's code.
struct Runtimes {
    kept: Runtime,
    fresh: Runtime,
    winch: Runtime,
}

async fn measure(label: &'static str, path: &Path, engine: &Engine, runtimes: &Runtimes) -> Row {
    let Runtimes { kept: runtime, fresh, winch } = runtimes;
    let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);

    let compiles: Vec<Duration> = {
        let mut samples = Vec::new();
        for _ in 0..runs("CAPSTAN_BENCH_COMPILES", 3) {
            let loaded = Loader::new(runtime.clone(), None).load(path).await.expect("loads");
            assert_eq!(loaded.source, CompileSource::Compiled);
            samples.push(loaded.compile_time);
        }
        samples
    };
    let winch_compiles: Vec<Duration> = {
        let mut samples = Vec::new();
        for _ in 0..runs("CAPSTAN_BENCH_COMPILES", 3) {
            let loaded = Loader::new(winch.clone(), None).optimize(false).load(path).await.expect("loads");
            assert_eq!(loaded.source, CompileSource::Baseline);
            samples.push(loaded.compile_time);
        }
        samples
    };
    let on_winch = Loader::new(winch.clone(), None).optimize(false).load(path).await.expect("loads");

    let cache = std::env::temp_dir().join(format!("capstan-bench-languages-{}", std::process::id()));
    let cached = Loader::new(runtime.clone(), Some(cache.clone()));
    let loaded = cached.load(path).await.expect("warms the cache");
    let mut loads = Vec::new();
    let mut artefacts = Vec::new();
    for _ in 0..20 {
        let start = Instant::now();
        let again = cached.load(path).await.expect("loads from cache");
        loads.push(start.elapsed());
        assert_eq!(again.source, CompileSource::Cache);
        artefacts.push(again.compile_time);
    }
    let _ = std::fs::remove_dir_all(&cache);

    let mock = cluster_for(&loaded);
    let backend: Arc<dyn Cluster> = mock.clone();
    let greeting = greeting_ref();
    let reconciler = Reconciler::new(runtime.clone(), loaded.clone(), backend.clone());
    let fresh_reconciler = Reconciler::new(fresh.clone(), loaded.clone(), backend.clone());
    let winch_reconciler = Reconciler::new(winch.clone(), on_winch, backend.clone());
    // What the watch would tell the reconcilers: the Greeting as it is now
    // (else the next reconcile waits for the host's own status write).
    let seen = |reconciler: &Reconciler| {
        let object = mock.get_sync(&greeting).expect("the greeting exists");
        let meta: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta =
            serde_json::from_value(object["metadata"].clone()).expect("metadata");
        reconciler.written_for(&greeting.gvk, &meta, false);
    };
    let first = reconciler.reconcile(&greeting).await;
    assert!(first.result.is_ok(), "{label}: {:?}", first.result);
    seen(&reconciler);
    seen(&fresh_reconciler);
    seen(&winch_reconciler);
    let mut reconciles = Vec::new();
    let mut fresh_reconciles = Vec::new();
    let mut winch_reconciles = Vec::new();
    for _ in 0..runs("CAPSTAN_BENCH_RECONCILES", 300) {
        for (reconciler, samples) in [
            (&reconciler, &mut reconciles),
            (&fresh_reconciler, &mut fresh_reconciles),
            (&winch_reconciler, &mut winch_reconciles),
        ] {
            let start = Instant::now();
            let report = reconciler.reconcile(&greeting).await;
            samples.push(start.elapsed());
            assert!(report.result.is_ok(), "{label}: {:?}", report.result);
            seen(reconciler);
        }
    }

    // Memory: instances alive at once, each after one reconcile.
    let object = serde_json::to_vec(&mock.get_sync(&greeting).expect("the greeting exists")).expect("json");
    let (rss_before, anon_before) = rss();
    let mut live = Vec::new();
    for _ in 0..LIVE_INSTANCES {
        let state = HostState::new(&Limits::default(), Some(caller(&loaded, backend.clone(), Some(&greeting))));
        let mut store = Store::new(engine.wasmtime(), state);
        store.limiter(|s| &mut s.limiter);
        // Epochs tick every 10 ms; this deadline is hours away.
        store.set_epoch_deadline(1 << 20);
        let capstan_host::runtime::invocation::PreKind::Current(pre) = loaded.pre.kind() else {
            panic!("{label}: built against an older contract");
        };
        let instance = pre.instantiate_async(&mut store).await.expect("instantiates");
        let request = capstan_host::runtime::bindings::capstan::operator::types::ReconcileRequest {
            event: EventKind::Resync.into(),
            object: object.clone(),
            failed_children: Vec::new(),
            cluster: "default".into(),
            members: Vec::new(),
        };
        let outcome =
            instance.capstan_operator_controller().call_reconcile(&mut store, &request).await.expect("no trap");
        assert!(outcome.is_ok(), "{label}: {outcome:?}");
        live.push((store, instance));
    }
    let (rss_after, anon_after) = rss();
    let pool = engine.wasmtime().pooling_allocator_metrics();
    let per = |n: f64| n / LIVE_INSTANCES as f64;
    let (memories, core_instances) =
        pool.map(|m| (per(m.memories() as f64), per(m.core_instances() as f64))).unwrap_or((f64::NAN, f64::NAN));
    drop(live);

    Row {
        label,
        size,
        compile: median(compiles),
        winch_compile: median(winch_compiles),
        cached_load: median(loads),
        artefact_load: median(artefacts),
        reconcile: median(reconciles.clone()),
        reconcile_p99: percentile(reconciles, 0.99),
        fresh: median(fresh_reconciles.clone()),
        fresh_p99: percentile(fresh_reconciles, 0.99),
        winch: median(winch_reconciles.clone()),
        winch_p99: percentile(winch_reconciles, 0.99),
        rss_per_instance: (rss_after - rss_before) / LIVE_INSTANCES as i64,
        anon_per_instance: (anon_after - anon_before) / LIVE_INSTANCES as i64,
        memories,
        core_instances,
    }
}

/// Medians and p99s of one scheduling decision, per entry of
/// [`NODE_COUNTS`]: after one binding, and with every Node changed.
struct ScheduleRow {
    label: &'static str,
    decisions: Vec<[(Duration, Duration); 2]>,
}

async fn measure_schedule(label: &'static str, path: &Path, runtime: &Runtime) -> ScheduleRow {
    let loaded = Loader::new(runtime.clone(), None).load(path).await.expect("loads");
    let backend: Arc<dyn Cluster> = Arc::new(MockCluster::new());
    // One caller (one grants) for every decision: an instance is kept only
    // for the same controller.
    let caller = caller(&loaded, backend, None);
    // A cluster per size: the instance holds the Nodes of each apart.
    let mut decisions: Vec<_> =
        NODE_COUNTS.iter().map(|n| scheduling::decision(*n, true, &format!("nodes-{n}"))).collect();
    let mut samples: Vec<[Vec<Duration>; 2]> = vec![[Vec::new(), Vec::new()]; NODE_COUNTS.len()];
    // One decision of each size first: instantiation is not a decision.
    for round in 0..=runs("CAPSTAN_BENCH_DECISIONS", 30) {
        for (decision, samples) in decisions.iter_mut().zip(&mut samples) {
            for (changes, samples) in samples.iter_mut().enumerate() {
                if changes == 0 {
                    scheduling::bound(decision, round);
                } else {
                    scheduling::all_changed(decision);
                }
                let start = Instant::now();
                let inv = runtime.schedule(&loaded.pre, caller.clone(), decision).await;
                let elapsed = start.elapsed();
                let picked = inv.result.unwrap_or_else(|e| panic!("{label}: {e:?}"));
                assert!(picked.is_ok(), "{label}: {picked:?}");
                if round > 0 {
                    samples.push(elapsed);
                }
            }
        }
    }
    let decisions = samples.into_iter().map(|s| s.map(|s| (median(s.clone()), percentile(s, 0.99)))).collect();
    ScheduleRow { label, decisions }
}

fn ms(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1e3;
    if ms >= 100.0 {
        format!("{ms:.0} ms")
    } else if ms >= 1.0 {
        format!("{ms:.2} ms")
    } else {
        format!("{ms:.3} ms")
    }
}

fn mib(bytes: i64) -> String {
    format!("{:.2} MiB", bytes as f64 / f64::from(1 << 20))
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio");
    let engine = Engine::new(EngineConfig::default()).expect("engine");
    let baseline = Engine::new(EngineConfig::default().baseline(true)).expect("engine");
    let runtimes = Runtimes {
        kept: Runtime::new(&engine, Limits::default()).expect("runtime"),
        fresh: Runtime::new(&engine, Limits::default().reuse(1)).expect("runtime"),
        winch: Runtime::new(&baseline, Limits::default()).expect("runtime"),
    };
    let only = std::env::var("CAPSTAN_BENCH_GUESTS").ok();
    let select = |list: &[(&'static str, &str)]| -> Vec<(&'static str, PathBuf)> {
        list.iter()
            .filter(|(_, stem)| only.as_deref().is_none_or(|only| only.split(',').any(|s| s.trim() == *stem)))
            .filter_map(|(label, stem)| match find_component(stem) {
                Ok(path) => Some((*label, path)),
                Err(e) => {
                    eprintln!("skipping {label}: {e}");
                    None
                }
            })
            .collect()
    };
    let components = select(&LANGUAGES);
    let schedulers = select(&SCHEDULERS);

    let mut rows = Vec::new();
    for (label, path) in &components {
        eprintln!("measuring {label} ({})", path.display());
        rows.push(rt.block_on(measure(label, path, &engine, &runtimes)));
    }

    println!(
        "| guest | size | compile: cranelift, Winch | cached load (artefact) | reconcile, kept instance (median, p99) | reconcile, fresh instance (median, p99) | reconcile on Winch's code, kept (median, p99) | memory/instance (RSS, anon) | memories, core instances |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {:.2} MB | {}, {} | {} ({}) | {}, {} | {}, {} | {}, {} | {} ({}) | {:.0}, {:.0} |",
            r.label,
            r.size as f64 / 1e6,
            ms(r.compile),
            ms(r.winch_compile),
            ms(r.cached_load),
            ms(r.artefact_load),
            ms(r.reconcile),
            ms(r.reconcile_p99),
            ms(r.fresh),
            ms(r.fresh_p99),
            ms(r.winch),
            ms(r.winch_p99),
            mib(r.rss_per_instance),
            mib(r.anon_per_instance),
            r.memories,
            r.core_instances,
        );
    }

    let mut schedule_rows = Vec::new();
    for (label, path) in &schedulers {
        eprintln!("measuring the {label} scheduler ({})", path.display());
        schedule_rows.push(rt.block_on(measure_schedule(label, path, &runtimes.kept)));
    }
    if schedule_rows.is_empty() {
        return;
    }
    let sizes: Vec<String> = NODE_COUNTS
        .iter()
        .flat_map(|n| [format!("{n} Nodes, one changed (median, p99)"), format!("{n} Nodes, every one changed")])
        .collect();
    println!();
    println!("| zone scheduler, one decision | {} |", sizes.join(" | "));
    println!("|---{}|", "|---".repeat(sizes.len()));
    for r in &schedule_rows {
        let cells: Vec<String> = r.decisions.iter().flatten().map(|(m, p)| format!("{}, {}", ms(*m), ms(*p))).collect();
        println!("| {} | {} |", r.label, cells.join(" | "));
    }
}
