//! Runtime benchmarks on real components (build them first with
//! `tests/build-guests.sh`): compile, load from the compile cache, the
//! host's per-invocation overhead with and without one host call, a
//! full greeter reconcile on the mock cluster, and one decision of the zone
//! scheduler over 100 Nodes as the host hands them to it (after one
//! binding, and with every Node changed).
//!
//! `cargo bench -p capstan-host --bench runtime`

use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;

use capstan_host::cluster::Cluster;
use capstan_host::cluster::mock::MockCluster;
use capstan_host::control::reconciler::Reconciler;
use capstan_host::object::{Gvk, ObjectRef};
use capstan_host::runtime::component::{Loaded, Loader};
use capstan_host::runtime::engine::{Engine, EngineConfig};
use capstan_host::runtime::grants::Grants;
use capstan_host::runtime::imports::Caller;
use capstan_host::runtime::invocation::Runtime;
use capstan_host::runtime::limits::Limits;
use capstan_host::testing::find_component;
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;

#[path = "support/scheduling.rs"]
mod scheduling;
use scheduling::decision;

fn component(name: &str) -> PathBuf {
    find_component(name).unwrap_or_else(|e| panic!("{e}"))
}

/// A ConfigMap of about 4 KiB, as JSON.
fn object_4k() -> Vec<u8> {
    let value = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "bench", "namespace": "bench", "uid": "u-1", "resourceVersion": "1"},
        "data": {"payload": "x".repeat(4000)},
    });
    serde_json::to_vec(&value).expect("json")
}

fn caller(loaded: &Loaded, cluster: Arc<dyn Cluster>) -> Caller {
    Caller {
        controller: loaded.manifest.name.as_str().into(),
        cluster_name: "default".into(),
        field_manager: loaded.manifest.field_manager().into(),
        grants: Arc::new(Grants::from_manifest(&loaded.manifest)),
        cluster,
        reconciling: Some((ObjectRef::new(Gvk::new("", "v1", "ConfigMap"), Some("bench"), "bench"), None)),
        reach: None,
    }
}

fn benches(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio");
    let engine = Engine::new(EngineConfig::default()).expect("engine");
    let runtime = Runtime::new(&engine, Limits::default()).expect("runtime");
    let greeter = component("greeter");
    let noop = component("noop");

    let mut group = c.benchmark_group("load");
    group.sample_size(10);
    let uncached = Loader::new(runtime.clone(), None);
    group.bench_function("greeter_compile", |b| {
        b.to_async(&rt).iter(|| async { black_box(uncached.load(&greeter).await.expect("loads")) })
    });
    let cache = std::env::temp_dir().join(format!("capstan-bench-cache-{}", std::process::id()));
    let cached = Loader::new(runtime.clone(), Some(cache.clone()));
    rt.block_on(cached.load(&greeter)).expect("warms the cache");
    group.bench_function("greeter_from_cache", |b| {
        b.to_async(&rt).iter(|| async { black_box(cached.load(&greeter).await.expect("loads")) })
    });
    group.finish();
    let _ = std::fs::remove_dir_all(&cache);

    let mock = Arc::new(MockCluster::new());
    mock.seed(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bench", "namespace": "bench"}}))
        .expect("seed");
    let backend: Arc<dyn Cluster> = mock.clone();
    let noop_loaded = rt.block_on(Loader::new(runtime.clone(), None).load(&noop)).expect("noop loads");
    let object = object_4k();

    let mut group = c.benchmark_group("invoke");
    // The part of every invocation spent before any guest code: WASI
    // context (clocks, random, captured stdio), limiter, Store.
    group.bench_function("store_setup_only", |b| {
        b.iter(|| {
            let state = capstan_host::runtime::imports::HostState::new(&Limits::default(), None);
            black_box(wasmtime::Store::new(engine.wasmtime(), state))
        })
    });
    group.bench_function("noop_4k_object", |b| {
        b.to_async(&rt).iter(|| async {
            let inv = runtime
                .reconcile(&noop_loaded.pre, caller(&noop_loaded, backend.clone()), request(EventKindAdded, &object))
                .await;
            black_box(inv.result.expect("no trap").expect("ok"))
        })
    });
    group.bench_function("noop_4k_object_one_host_call", |b| {
        b.to_async(&rt).iter(|| async {
            let inv = runtime
                .reconcile(&noop_loaded.pre, caller(&noop_loaded, backend.clone()), request(EventKindResync, &object))
                .await;
            black_box(inv.result.expect("no trap").expect("ok"))
        })
    });
    group.finish();

    let greeter_loaded = rt.block_on(Loader::new(runtime.clone(), None).load(&greeter)).expect("greeter loads");
    for crd in &greeter_loaded.manifest.crds {
        mock.register_crd(crd).expect("crd");
    }
    mock.seed(json!({
        "apiVersion": "examples.capstan.dev/v1alpha1",
        "kind": "Greeting",
        "metadata": {"name": "hello", "namespace": "bench"},
        "spec": {"message": "hi", "replicas": 2},
    }))
    .expect("seed");
    let reconciler = Reconciler::new(runtime.clone(), greeter_loaded, backend.clone());
    let greeting = ObjectRef::new(Gvk::new("examples.capstan.dev", "v1alpha1", "Greeting"), Some("bench"), "hello");
    let first = rt.block_on(reconciler.reconcile(&greeting));
    assert!(first.result.is_ok(), "{:?}", first.result);
    let mut group = c.benchmark_group("reconcile");
    group.bench_function("greeter_resync_mock_cluster", |b| {
        b.to_async(&rt).iter(|| async {
            let report = reconciler.reconcile(&greeting).await;
            black_box(report.result.expect("reconciles"))
        })
    });
    group.finish();

    let zone = rt.block_on(Loader::new(runtime.clone(), None).load(&component("zone-scheduler"))).expect("loads");
    let mut group = c.benchmark_group("schedule");
    // The Nodes as the host hands them over: after one binding (one Node
    // changed), and with every Node changed, trimmed and (for comparison)
    // whole, as the host handed them over before it trimmed them.
    let cases = [
        ("zone_scheduler_100_nodes_one_changed", true, false),
        ("zone_scheduler_100_nodes_every_one_changed", true, true),
        ("zone_scheduler_100_whole_nodes_every_one_changed", false, true),
    ];
    for (name, trimmed, every) in cases {
        let mut state = decision(100, trimmed, name);
        let mut k = 0;
        // Each decision one change further than the one before, made (and
        // cloned) outside the timing.
        let mut next = move || {
            k += 1;
            if every {
                scheduling::all_changed(&mut state);
            } else {
                scheduling::bound(&mut state, k);
            }
            state.clone()
        };
        // One caller (one grants) for every decision: an instance is kept
        // only for the same controller.
        let scheduler = caller(&zone, backend.clone());
        let (runtime, zone, scheduler) = (&runtime, &zone, &scheduler);
        group.bench_function(name, |b| {
            b.to_async(&rt).iter_batched(
                &mut next,
                |d| async move {
                    let inv = runtime.schedule(&zone.pre, scheduler.clone(), black_box(&d)).await;
                    black_box(inv.result.expect("no trap").expect("scheduled"))
                },
                criterion::BatchSize::SmallInput,
            )
        });
    }
    group.finish();
}

#[allow(non_upper_case_globals, reason = "reads like the enum variant it stands for")]
const EventKindAdded: capstan_host::control::reconciler::EventKind =
    capstan_host::control::reconciler::EventKind::Added;

/// A reconcile request for `event` with `object`.
fn request(
    event: capstan_host::control::reconciler::EventKind,
    object: &[u8],
) -> capstan_host::runtime::bindings::capstan::operator::types::ReconcileRequest {
    capstan_host::runtime::bindings::capstan::operator::types::ReconcileRequest {
        event: black_box(event).into(),
        object: object.to_vec(),
        failed_children: Vec::new(),
        cluster: "default".into(),
        members: Vec::new(),
    }
}

#[allow(non_upper_case_globals, reason = "reads like the enum variant it stands for")]
const EventKindResync: capstan_host::control::reconciler::EventKind =
    capstan_host::control::reconciler::EventKind::Resync;

criterion_group!(runtime_benches, benches);
criterion_main!(runtime_benches);
