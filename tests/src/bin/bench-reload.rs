//! Hot-loading latency on the real control plane: the time from a new
//! version of the greeter landing in the components directory to its first
//! reconcile, with the compile cache warm (hit) and cold (miss), for the
//! Rust greeter (v2) and the Python and JavaScript greeters.
//!
//! ```sh
//! cargo build --profile dist -p capstan-tests --bin bench-reload
//! tests/build-guests.sh && tests/build-polyglot-guests.sh
//! target/dist/bench-reload --rounds 5      # KUBECONFIG: a running control plane
//! ```
//!
//! `RUST_LOG=capstan_host=info` prints the host's log to stderr (each load
//! with its compile and admission times).
//!
//! One host (in this process) follows a directory holding `greeter.wasm`,
//! with one `Greeting` to reconcile. Each round writes the version under
//! test into the file (written to a temporary name, then renamed: the way to
//! deploy a component), waits for the host to swap it in and for the next
//! reconcile to finish, then puts v1 back the same way. Reported per version
//! and cache state, medians over the rounds of:
//!
//! - `landing → swapped`: the directory watch (debounce, settle) plus the
//!   load (compile or cache load, instantiate, manifest);
//! - `landing → reconciled`: plus the first reconcile by the new version
//!   (instantiate, guest, API writes);
//! - `landing → optimized`: on a miss with the baseline compiler, until
//!   cranelift's code replaced Winch's (the host's status says
//!   `tier: optimized`).
//!
//! Each compiler mode (`--modes`) runs its own host, one after the other in
//! one run: `baseline` (Winch first, as `capstan run` does) and
//! `cranelift` (`--baseline-compile=false`).
//!
//! A cache miss removes the compile cache before the file lands. Before each
//! landing the host is left to settle (cranelift's code serving, no
//! reconcile for 300 ms), so that no compile runs beside it and the first
//! reconcile counted after it is the new version's.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use capstan_host::serve::host::{Host, HostBuilder};
use capstan_host::testing::find_component;
use clap::Parser;
use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use serde_json::json;

#[derive(Parser, Debug)]
struct Args {
    /// Rounds per version and cache state.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Versions to land (component stems, found like the tests find them).
    #[arg(long, value_delimiter = ',', default_value = "greeter-v2,greeter-python,greeter-js")]
    versions: Vec<String>,
    /// Compiler modes, each with a host of its own: `baseline`, `cranelift`.
    #[arg(long, value_delimiter = ',', default_value = "baseline,cranelift")]
    modes: Vec<String>,
}

/// One landing's figures.
struct Landing {
    swapped: Duration,
    reconciled: Duration,
    /// Until cranelift's code serves (a miss with the baseline compiler).
    optimized: Option<Duration>,
    landed: Instant,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    // The host's own log (e.g. `component loaded` with its compile and
    // admission times), with `RUST_LOG=capstan_host=info`.
    if let Ok(filter) = tracing_subscriber::EnvFilter::try_from_default_env() {
        tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    }
    let client = Client::try_default().await.context("no cluster: set KUBECONFIG")?;
    let ns = format!("bench-reload-{}", capstan_tests::random_suffix(6));
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": ns}}))?).await?;
    let work = std::env::temp_dir().join(&ns);
    let gvk = GroupVersionKind::gvk("examples.capstan.dev", "v1alpha1", "Greeting");
    let greetings: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ApiResource::from_gvk(&gvk));
    println!(
        "{:<10} {:<16} {:<6} {:>22} {:>24} {:>23}",
        "compiler",
        "version",
        "cache",
        "landing → swapped (ms)",
        "landing → reconciled (ms)",
        "landing → optimized (ms)"
    );
    for mode in &args.modes {
        let baseline = match mode.as_str() {
            "baseline" => true,
            "cranelift" => false,
            other => bail!("unknown mode {other}: baseline or cranelift"),
        };
        run_mode(&client, &ns, &work, &greetings, &args, mode, baseline).await?;
    }
    namespaces.delete(&ns, &DeleteParams::default()).await?;
    let _ = std::fs::remove_dir_all(&work);
    Ok(())
}

/// One host with the baseline compiler on or off: every version, miss and
/// hit, printed as it is measured.
async fn run_mode(
    client: &Client,
    ns: &str,
    work: &Path,
    greetings: &Api<DynamicObject>,
    args: &Args,
    mode: &str,
    baseline: bool,
) -> Result<()> {
    let dir = work.join(mode).join("components");
    let cache = work.join(mode).join("cache");
    std::fs::create_dir_all(&dir)?;
    let file = dir.join("greeter.wasm");
    let v1 = find_component("greeter").map_err(anyhow::Error::msg)?;
    std::fs::copy(&v1, &file)?;

    let host = HostBuilder::new(client.clone())
        .namespace(Some(ns.to_owned()))
        .install_crds(true)
        .baseline(baseline)
        .cache_dir(Some(cache.clone()))
        .components_dir(Some(dir.clone()))
        .start()
        .await?;
    let greeting = json!({
        "apiVersion": "examples.capstan.dev/v1alpha1", "kind": "Greeting",
        "metadata": {"name": "bench"}, "spec": {"message": "hi", "replicas": 1},
    });
    greetings.create(&PostParams::default(), &serde_json::from_value(greeting)?).await?;
    wait(&host, Duration::from_secs(60), |h| reconciled(h) > 0).await.context("v1 reconciles")?;

    for version in &args.versions {
        let path = find_component(version).map_err(anyhow::Error::msg)?;
        for cold in [true, false] {
            let mut landings = Vec::new();
            for _ in 0..args.rounds {
                if cold {
                    let _ = std::fs::remove_dir_all(&cache);
                }
                let mut landing = land(&host, &path, &file).await?;
                // Cranelift's code, before v1 goes back: no compile runs
                // beside the next landing.
                optimized(&host).await?;
                if cold && baseline {
                    landing.optimized = Some(landing.landed.elapsed());
                }
                landings.push(landing);
                // Back to v1, not measured (a miss compiles it again).
                land(&host, &v1, &file).await?;
                optimized(&host).await?;
            }
            let swapped = median(landings.iter().map(|l| l.swapped));
            let reconciled = median(landings.iter().map(|l| l.reconciled));
            let optimized = (cold && baseline)
                .then(|| format!("{:.1}", median(landings.iter().filter_map(|l| l.optimized)).as_secs_f64() * 1000.0));
            println!(
                "{mode:<10} {version:<16} {:<6} {:>22.1} {:>24.1} {:>23}",
                if cold { "miss" } else { "hit" },
                swapped.as_secs_f64() * 1000.0,
                reconciled.as_secs_f64() * 1000.0,
                optimized.as_deref().unwrap_or("-")
            );
        }
    }

    greetings.delete("bench", &DeleteParams::default()).await?;
    wait(&host, Duration::from_secs(30), |h| h.controller("greeter").is_some_and(|c| c.queue_len() == 0)).await?;
    // Gone (its finalizer removed), so the next mode can create it again.
    let start = Instant::now();
    while greetings.get_opt("bench").await?.is_some() {
        if start.elapsed() > Duration::from_secs(30) {
            bail!("the Greeting is not deleted: {:?}", host.status());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    host.shutdown().await;
    let _ = std::fs::remove_dir_all(work.join(mode));
    Ok(())
}

/// Writes `version` into `file` (temporary name, then rename) and times the
/// swap and the next reconcile.
async fn land(host: &Host, version: &Path, file: &Path) -> Result<Landing> {
    quiesce(host).await?;
    let swapped_before = swaps(host);
    let staged: PathBuf = file.with_extension("wasm.tmp");
    std::fs::copy(version, &staged)?;
    let before = reconciled(host);
    let landed = Instant::now();
    std::fs::rename(&staged, file)?;
    tracing::info!(version = %version.display(), "landed");
    wait(host, Duration::from_secs(120), |h| swaps(h) > swapped_before)
        .await
        .context("the new version is swapped in")?;
    let swapped = landed.elapsed();
    wait(host, Duration::from_secs(60), |h| reconciled(h) > before).await.context("the new version reconciles")?;
    Ok(Landing { swapped, reconciled: landed.elapsed(), optimized: None, landed })
}

/// Waits until the version that runs is on cranelift's code (with the
/// baseline compiler, cranelift compiles in the background).
async fn optimized(host: &Host) -> Result<()> {
    wait(host, Duration::from_secs(300), |h| h.status().first().and_then(|s| s.tier) == Some("optimized"))
        .await
        .context("cranelift's code serves")
}

/// Waits until the previous landing's reconciles are over (the new
/// version's changes to the children trigger a few more): nothing queued
/// and no reconcile for 300 ms, so the next one counted is the new
/// version's.
async fn quiesce(host: &Host) -> Result<()> {
    let start = Instant::now();
    loop {
        let count = reconciled(host);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let idle = host.controller("greeter").is_some_and(|c| c.queue_len() == 0);
        if idle && reconciled(host) == count {
            return Ok(());
        }
        if start.elapsed() > Duration::from_secs(60) {
            bail!("the greeter does not settle: {:?}", host.status());
        }
    }
}

fn swaps(host: &Host) -> u64 {
    host.status().first().map_or(0, |s| s.swaps)
}

fn reconciled(host: &Host) -> u64 {
    host.controller("greeter").map_or(0, |c| c.counts().succeeded)
}

/// Polls `check` every millisecond.
async fn wait(host: &Host, timeout: Duration, check: impl Fn(&Host) -> bool) -> Result<()> {
    let start = Instant::now();
    while !check(host) {
        if start.elapsed() > timeout {
            bail!("not within {timeout:?}: {:?}", host.status());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Ok(())
}

fn median(values: impl Iterator<Item = Duration>) -> Duration {
    let mut v: Vec<Duration> = values.collect();
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}
