//! Scheduling throughput on the real control plane: the Capstan zone
//! scheduler (`examples/zone-scheduler` under `capstan run`) against
//! kube-scheduler (built from the control plane's Kubernetes module, a
//! second scheduler name, the default plugins), in the same run, each in its
//! own process so CPU time and peak memory are its own.
//!
//! ```sh
//! cargo build --profile dist -p capstan-host -p capstan-tests --bin capstan --bin bench-scheduler
//! tests/build-guests.sh
//! tests/control-plane/cp.sh build-scheduler    # kube-scheduler, cached by version
//! target/dist/bench-scheduler --rounds 3    # KUBECONFIG: a running control plane
//! ```
//!
//! Each run of one scheduler creates its own 100 Nodes (plain API objects:
//! 8 CPUs, 32 GiB, 110 Pods allocatable, `Ready`, spread over 4 zones by
//! `topology.kubernetes.io/zone`) and 1000 pending Pods (100m, 128 MiB,
//! selecting those Nodes by a label) naming the scheduler, then starts the
//! scheduler process and follows the Pods with a watch until every one is
//! bound. Fresh Nodes per run: no kubelet renews them, so the node lifecycle
//! controller would mark them unreachable after its grace period (50 s).
//! The order of the two schedulers is rotated each round.
//!
//! Reported per run and as medians over the rounds:
//!
//! - `total s`: from starting the process to the last Pod bound (start-up,
//!   first list, scheduling and binding);
//! - `pods/s`: Pods bound per second from the first binding to the last
//!   (the steady rate, start-up left out);
//! - `cpu s`: the process's CPU time (user + system, from /proc) over the run;
//! - `peak MiB`: its peak resident memory (VmHWM).
//!
//! kube-scheduler runs with `clientConnection.qps` / `burst` of
//! `--kube-qps` (default 1000): its default, 50, caps it at about 50
//! bindings per second; Capstan's client has no such limiter.

use std::collections::HashSet;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use capstan_tests::bench::median;
use clap::Parser;
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, ServiceAccount};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::json;

const ZONE: &str = "topology.kubernetes.io/zone";
const RUN: &str = "capstan.dev/bench-scheduler-run";
/// kube-scheduler's scheduler name in this benchmark.
const KUBE_NAME: &str = "bench-kube-scheduler";
/// The zone scheduler's name.
const CAPSTAN_NAME: &str = "zone-spread";

#[derive(Parser, Debug)]
struct Args {
    /// Pods per scheduler and round.
    #[arg(long, default_value_t = 1000)]
    pods: usize,
    /// Nodes per scheduler and round.
    #[arg(long, default_value_t = 100)]
    nodes: usize,
    /// Rounds (the order of the schedulers alternates).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// The capstan binary (default: next to this one).
    #[arg(long)]
    capstan: Option<PathBuf>,
    /// The zone scheduler component (default: found like the tests find it).
    #[arg(long)]
    component: Option<PathBuf>,
    /// The kube-scheduler binary (default: `tests/control-plane/cp.sh
    /// build-scheduler`, which builds it once).
    #[arg(long)]
    kube_scheduler: Option<PathBuf>,
    /// kube-scheduler's client QPS and burst.
    #[arg(long, default_value_t = 1000)]
    kube_qps: u32,
    /// Which schedulers to run, in the first round's order.
    #[arg(long, value_delimiter = ',', default_value = "kube-scheduler,capstan")]
    only: Vec<String>,
}

/// One run's figures.
#[derive(Clone, Copy, Debug)]
struct Figures {
    total: f64,
    rate: f64,
    cpu: f64,
    peak: f64,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let client = Client::try_default().await.context("no cluster: set KUBECONFIG")?;
    let me = std::env::current_exe()?;
    let capstan = args.capstan.clone().unwrap_or_else(|| me.with_file_name("capstan"));
    let component = match &args.component {
        Some(c) => c.clone(),
        None => capstan_host::testing::find_component("zone-scheduler").map_err(anyhow::Error::msg)?,
    };
    let kube_scheduler = match &args.kube_scheduler {
        Some(k) => k.clone(),
        None => build_kube_scheduler()?,
    };
    let work = std::env::temp_dir().join(format!("bench-scheduler-{}", capstan_tests::random_suffix(5)));
    std::fs::create_dir_all(&work)?;
    let kubeconfig = std::env::var("KUBECONFIG").context("KUBECONFIG names the control plane's kubeconfig")?;
    let config = work.join("kube-scheduler.yaml");
    std::fs::write(&config, kube_scheduler_config(&kubeconfig, args.kube_qps))?;
    println!(
        "pods: {}, nodes: {}, rounds: {}, machine: {} cores",
        args.pods,
        args.nodes,
        args.rounds,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!("{:<6} {:<15} {:>8} {:>8} {:>7} {:>9}", "round", "scheduler", "total s", "pods/s", "cpu s", "peak MiB");
    let mut results: Vec<(String, Figures)> = Vec::new();
    for round in 0..args.rounds {
        let mut order = args.only.clone();
        let n = order.len().max(1);
        order.rotate_left(round % n);
        for which in &order {
            let run = capstan_tests::random_suffix(6);
            let mut metrics = None;
            let (name, command) = match which.as_str() {
                "kube-scheduler" => {
                    let mut c = tokio::process::Command::new(&kube_scheduler);
                    c.arg(format!("--config={}", config.display()))
                        .args(["--secure-port=0", "--v=0"])
                        .stderr(std::fs::File::create(work.join(format!("kube-scheduler-{run}.log")))?);
                    (KUBE_NAME, c)
                }
                "capstan" => {
                    let port = capstan_tests::free_port()?;
                    metrics = Some(port);
                    let ns = format!("bench-sched-{run}");
                    let mut c = tokio::process::Command::new(&capstan);
                    c.args(["run", "--log", "warn", "--listen", &format!("127.0.0.1:{port}"), "-n", &ns])
                        .arg(&component)
                        .stderr(std::fs::File::create(work.join(format!("capstan-{run}.log")))?);
                    (CAPSTAN_NAME, c)
                }
                other => bail!("unknown scheduler {other}"),
            };
            let figures = one_run(&client, &run, name, command, metrics, &args).await?;
            println!(
                "{:<6} {which:<15} {:>8.2} {:>8.1} {:>7.2} {:>9.1}",
                round + 1,
                figures.total,
                figures.rate,
                figures.cpu,
                figures.peak
            );
            results.push((which.clone(), figures));
        }
    }
    println!("\nmedians over {} rounds", args.rounds);
    let mut medians = Vec::new();
    for which in &args.only {
        let of = |f: fn(&Figures) -> f64| {
            median(results.iter().filter(|(w, _)| w == which).map(|(_, fig)| f(fig)).collect())
        };
        let m = Figures { total: of(|f| f.total), rate: of(|f| f.rate), cpu: of(|f| f.cpu), peak: of(|f| f.peak) };
        println!("{:<6} {which:<15} {:>8.2} {:>8.1} {:>7.2} {:>9.1}", "median", m.total, m.rate, m.cpu, m.peak);
        medians.push((which.clone(), m));
    }
    if let (Some((_, c)), Some((_, k))) =
        (medians.iter().find(|m| m.0 == "capstan"), medians.iter().find(|m| m.0 == "kube-scheduler"))
    {
        println!(
            "capstan/kube-scheduler: pods/s {:.2}, total time {:.2}, cpu {:.2}, peak RSS {:.2}",
            c.rate / k.rate,
            c.total / k.total,
            c.cpu / k.cpu,
            c.peak / k.peak
        );
    }
    let _ = std::fs::remove_dir_all(&work);
    Ok(())
}

/// Runs `cp.sh build-scheduler` and returns the path it prints.
fn build_kube_scheduler() -> Result<PathBuf> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("control-plane/cp.sh");
    let out = std::process::Command::new(&script)
        .arg("build-scheduler")
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    if !out.status.success() {
        bail!("{} build-scheduler failed", script.display());
    }
    let path = String::from_utf8(out.stdout)?.lines().last().context("cp.sh printed no path")?.to_owned();
    Ok(PathBuf::from(path))
}

/// A profile named [`KUBE_NAME`] with the default plugins, no leader
/// election, and the client limiter at `qps`.
fn kube_scheduler_config(kubeconfig: &str, qps: u32) -> String {
    format!(
        "apiVersion: kubescheduler.config.k8s.io/v1\n\
         kind: KubeSchedulerConfiguration\n\
         clientConnection:\n  kubeconfig: {kubeconfig}\n  qps: {qps}\n  burst: {qps}\n\
         leaderElection:\n  leaderElect: false\n\
         profiles:\n- schedulerName: {KUBE_NAME}\n"
    )
}

/// One scheduler's run: its Nodes and Pods, the process, the figures; then
/// everything it made is removed.
async fn one_run(
    client: &Client,
    run: &str,
    scheduler: &str,
    mut command: tokio::process::Command,
    metrics: Option<u16>,
    args: &Args,
) -> Result<Figures> {
    let ns = format!("bench-sched-{run}");
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": ns}}))?).await?;
    let account: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": "default"}}))?;
    let _ = Api::<ServiceAccount>::namespaced(client.clone(), &ns).create(&PostParams::default(), &account).await;
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    stream::iter(0..args.nodes)
        .map(|i| create_node(&nodes, run, i))
        .buffer_unordered(16)
        .try_collect::<Vec<()>>()
        .await?;
    stream::iter(0..args.pods)
        .map(|i| {
            let pods = pods.clone();
            async move {
                let pod: Pod = serde_json::from_value(json!({
                    "metadata": {"name": format!("p-{i}")},
                    "spec": {
                        "schedulerName": scheduler,
                        "nodeSelector": {RUN: run},
                        "containers": [{"name": "app", "image": "registry.example/app:1",
                            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}],
                    },
                }))?;
                pods.create(&PostParams::default(), &pod).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<()>>()
        .await?;

    // Follow the Pods before the scheduler starts, so no binding is missed.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(String, Instant)>();
    let follow = tokio::spawn({
        let pods = pods.clone();
        async move {
            let mut stream = std::pin::pin!(watcher(pods, watcher::Config::default()));
            while let Some(event) = stream.next().await {
                let object = match event {
                    Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => p,
                    _ => continue,
                };
                if object.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some() {
                    let _ = tx.send((object.metadata.name.unwrap_or_default(), Instant::now()));
                }
            }
        }
    });
    let mut child = command.stdout(Stdio::null()).spawn().context("starting the scheduler")?;
    let started = Instant::now();
    let pid = child.id().context("child pid")?;
    let mut bound = HashSet::new();
    let mut first = None;
    let mut last = started;
    let deadline = tokio::time::sleep(Duration::from_secs(600));
    tokio::pin!(deadline);
    while bound.len() < args.pods {
        tokio::select! {
            seen = rx.recv() => {
                let Some((name, at)) = seen else { bail!("the watch ended") };
                if bound.insert(name) {
                    first.get_or_insert(at);
                    last = at;
                }
            }
            () = &mut deadline => bail!("{scheduler}: {} of {} Pods bound after 600 s", bound.len(), args.pods),
            status = child.wait() => bail!("{scheduler} exited: {status:?}"),
        }
    }
    let cpu = capstan_tests::cpu_seconds(pid)?;
    let peak = capstan_tests::peak_rss_mib(pid)?;
    if let Some(port) = metrics {
        // What the guest's decisions took of the run (wall time, summed).
        let (_, text) = capstan_tests::http_get(port, "/metrics").await?;
        let guest: f64 = text
            .lines()
            .filter(|l| l.starts_with("capstan_guest_invocation_seconds_sum{") && l.contains(r#"export="schedule""#))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        eprintln!("{scheduler}: {:.2} ms in the guest per decision", guest * 1e3 / args.pods as f64);
    }
    child.kill().await.ok();
    follow.abort();
    let first = first.unwrap_or(started);
    let steady = last.duration_since(first).as_secs_f64().max(1e-3);
    let figures = Figures {
        total: last.duration_since(started).as_secs_f64(),
        rate: (args.pods.saturating_sub(1)) as f64 / steady,
        cpu,
        peak,
    };

    // Bound Pods on Nodes without a kubelet never finish terminating: no
    // grace period.
    let now = DeleteParams { grace_period_seconds: Some(0), ..DeleteParams::default() };
    pods.delete_collection(&now, &ListParams::default()).await?;
    nodes.delete_collection(&DeleteParams::default(), &ListParams::default().labels(&format!("{RUN}={run}"))).await?;
    let _ = namespaces.delete(&ns, &DeleteParams::default()).await;
    Ok(figures)
}

/// A Ready Node of `run`: 8 CPUs, 32 GiB, 110 Pods, in one of 4 zones.
async fn create_node(nodes: &Api<Node>, run: &str, i: usize) -> Result<()> {
    let name = format!("bench-{run}-{i:03}");
    let labels = json!({ZONE: format!("zone-{}", i % 4), RUN: run, "kubernetes.io/hostname": name});
    let node: Node = serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}}))?;
    nodes.create(&PostParams::default(), &node).await.with_context(|| format!("creating node {name}"))?;
    let resources = json!({"cpu": "8", "memory": "32Gi", "pods": "110"});
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let status = json!({"status": {
        "capacity": resources,
        "allocatable": resources,
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "bench node",
            "lastHeartbeatTime": now, "lastTransitionTime": now}],
    }});
    nodes.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status)).await?;
    Ok(())
}
