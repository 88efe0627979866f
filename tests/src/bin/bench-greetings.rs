//! The greeter's speed on one real control plane: Capstan (the greeter
//! component under `capstan run`) against peers doing the same writes, each
//! in its own process so that its CPU time and memory are its own.
//!
//! ```sh
//! cargo build --profile dist -p capstan-host -p capstan-tests --bin capstan --bin bench-greetings
//! tests/build-guests.sh      # the greeter component; export CAPSTAN_GUESTS=<the dir it prints> if not found
//! flock -o /tmp/capstan-bench.lock target/dist/bench-greetings --counts 1000 --rounds 3
//! # or only the tracing overhead (Capstan with and without trace export):
//! flock -o /tmp/capstan-bench.lock target/dist/bench-greetings --counts 1000 --rounds 3 --peers capstan,capstan-traced
//! capstan cluster down --name bench --purge    # when done
//! ```
//!
//! `flock -o` (one benchmark at a time on the machine) closes the lock before
//! the benchmark starts: without `-o` the control plane it starts would
//! inherit the lock and hold it until `capstan cluster down`.
//!
//! It needs `go` on `PATH` (or `--go`) once, to build the controller-runtime
//! peer, `go` on `PATH` once to build Jaeger for `capstan-traced`
//! ([`capstan_tests::jaeger`]), and the control-plane binaries that
//! `capstan cluster up` builds (see docs/cluster.md).
//!
//! # Peers
//!
//! - `capstan`: `examples/greeter` under `capstan run -n NS` (4 workers: the
//!   greeter's manifest declares `max_concurrency(4)`), no trace export
//!   (the `OTEL_*` variables of the benchmark's environment removed).
//! - `capstan-traced`: the same, exporting every trace (#33: the overhead
//!   of tracing on and sampled at 100 %): `OTEL_EXPORTER_OTLP_ENDPOINT` a
//!   real Jaeger's OTLP/HTTP receiver, `OTEL_SERVICE_NAME=bench-greetings`,
//!   `OTEL_TRACES_SAMPLER=always_on`, the same `--log warn` (which filters
//!   the log only: every span is exported, the guest's log lines among
//!   their events). The Jaeger ([`capstan_tests::jaeger`]:
//!   in-memory storage, at most 100 000 traces, the oldest evicted) is
//!   started once when this peer runs, on the same machine (its CPU is in
//!   `busy`, and printed), and killed at the end.
//! - `controller-runtime`: `tests/peers/controller-runtime`
//!   (controller-runtime v0.25.2, k8s.io v0.37.2), built once with `go
//!   build` into `$CAPSTAN_CACHE/peers/controller-runtime-<hash of its
//!   go.mod, go.sum and main.go>/`. Cached reads, `MaxConcurrentReconciles: 4`,
//!   no client-side rate limit.
//! - `kube-rs`: a kube-runtime `Controller` in this binary (`--kube-rs NS`),
//!   concurrency 4, the Deployment read from a reflector's store.
//! - `raw`: this binary (`--raw NS`) making the same calls with no watch,
//!   no cache and no controller: it creates the Greetings itself (8 at a
//!   time, as the driver does for the others) and 4 workers follow each
//!   with the greeter's writes. The ceiling on this machine.
//!
//! Each does, per Greeting: add the finalizer (one patch or update), apply
//! the ConfigMap and the Deployment (server-side apply, owner reference),
//! apply the status (Ready, observedGeneration) through the status
//! subresource when it changes, and record an Event (`Created`, or
//! `Updated` for a new generation). The controllers also reconcile again
//! after their own writes (the trailing pass) where their watches tell them
//! to.
//!
//! # What runs
//!
//! The cluster `--cluster` (default `bench`), started with `capstan cluster
//! up --no-controller-manager` unless it runs (then used as it is; the
//! header says whether kube-controller-manager runs, whose Deployment
//! controller would add its own writes and reconciles). For each count, each
//! round runs every peer once, the order rotated by one each round, each in
//! a fresh namespace that is emptied afterwards.
//!
//! # Measured
//!
//! Per peer and phase (`create`: the Greetings are created; `update`: once
//! all are Ready, every Greeting's `spec.message` is changed), from the
//! first write of the phase:
//!
//! - **to Ready**: until the driver's watch has seen every Greeting with a
//!   `Ready=True` condition and `observedGeneration` equal to its
//!   generation (1, then 2);
//! - **to quiet**: until the last change of the API server's count of
//!   mutating requests on greetings, configmaps, deployments and events
//!   (polled every 250 ms after Ready; quiet once unchanged for `--quiet`
//!   seconds; reported as the poll that saw the last change).
//!
//! At each: Greetings per second; requests per Greeting (delta of
//! `apiserver_request_total` for those four resources, including the
//! driver's own creates or spec patches, split into writes and reads; a
//! watch is counted only once it ends, so open watches are not in it); the
//! CPU time (user + system, `/proc/<pid>/stat`) of the peer's process, of
//! kube-apiserver's and of etcd's (their pids from the cluster's `pids/`);
//! how busy the machine's cores were (`busy`, from `/proc/stat`: near
//! 100 % the machine's CPU, not the peer's waiting, is the limit; the
//! driver's own watch and writes are in it); and the peer's peak resident
//! memory (`VmHWM`, reset between the phases).
//! Per Greeting also: the peer's CPU to quiet (ms), and its peak memory
//! over its memory once started and synced (`VmRSS` before the first
//! wave), in KiB: the figures that stay flat if cost per object does.
//! For Capstan (both peers) also, from its `/metrics`
//! (`capstan_reconcile_total`, `capstan_reconcile_time_seconds`):
//! reconciles per Greeting by result, their mean time, and how busy its 4
//! workers were (reconcile time over 4 × the time to quiet); for
//! `capstan-traced` also the spans it dropped
//! (`capstan_trace_spans_dropped_total`: not all exported if not 0) and
//! Jaeger's CPU seconds.
//! Printed: each run, then per phase the median over the rounds of each
//! figure, Greetings/s as a fraction of `raw`'s, Capstan's Greetings/s over
//! each other peer's, `capstan-traced`'s over `capstan`'s (the tracing
//! overhead, both from the same rounds), and the calls per Greeting each
//! peer made (last round). The benchmark prints figures and asserts nothing
//! about them.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail, ensure};
use capstan_tests::bench::{MachineCpu, Reconciles, RequestCounts, machine_cpu_seconds, median, reset_peak_rss};
use capstan_tests::{ControlPlane, cpu_seconds, http_get, peak_rss_mib, random_suffix, rss_mib};
use clap::Parser;
use futures::{StreamExt, TryStreamExt, stream};
use greeter::{FINALIZER, Greeting, desired};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Event as CoreEvent, Namespace};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use sha2::{Digest as _, Sha256};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
use tokio::sync::{Mutex, mpsc, watch};

/// The resources whose requests are counted.
const COUNTED: &[&str] = &["greetings", "configmaps", "deployments", "events"];

/// Greetings the driver creates or patches at a time.
const WRITERS: usize = 8;

/// Workers of every peer.
const CONCURRENCY: usize = 4;

/// How often the API server's counters are read while waiting for quiet.
const POLL: Duration = Duration::from_millis(250);

/// The controller-runtime peer's sources, built by `go` on first use.
const GO_PEER: &[(&str, &str)] = &[
    ("go.mod", include_str!("../../peers/controller-runtime/go.mod")),
    ("go.sum", include_str!("../../peers/controller-runtime/go.sum")),
    ("main.go", include_str!("../../peers/controller-runtime/main.go")),
];

#[derive(Parser, Debug)]
struct Args {
    /// Greetings per run; one set of rounds per count.
    #[arg(long, value_delimiter = ',', default_value = "1000")]
    counts: Vec<usize>,
    /// Rounds per count: each runs every peer once, the order rotated.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// The peers, in the first round's order.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "capstan,capstan-traced,controller-runtime,kube-rs,raw"
    )]
    peers: Vec<Peer>,
    /// The local cluster to run on (`capstan cluster up --name`).
    #[arg(long, default_value = "bench")]
    cluster: String,
    /// Seconds without a mutating request that make a run quiet.
    #[arg(long, default_value_t = 2.0)]
    quiet: f64,
    /// Seconds each phase may take to Ready, and then to quiet.
    #[arg(long, default_value_t = 900.0)]
    timeout: f64,
    /// The capstan binary (default: next to this one).
    #[arg(long)]
    capstan: Option<PathBuf>,
    /// The greeter component (default: found like the tests find it).
    #[arg(long)]
    greeter: Option<PathBuf>,
    /// The Go toolchain that builds the controller-runtime peer.
    #[arg(long, default_value = "go")]
    go: PathBuf,
    /// Run the kube-rs peer in namespace NS until killed (the driver starts
    /// it so).
    #[arg(long, value_name = "NS", hide = true)]
    kube_rs: Option<String>,
    /// Run the raw writer in namespace NS: it reads `create N` and
    /// `update N` lines on stdin (the driver starts it so).
    #[arg(long, value_name = "NS", hide = true)]
    raw: Option<String>,
}

/// An implementation of the greeter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Peer {
    Capstan,
    /// Capstan exporting every trace to a Jaeger.
    CapstanTraced,
    ControllerRuntime,
    KubeRs,
    Raw,
}

impl Peer {
    fn name(self) -> &'static str {
        match self {
            Peer::Capstan => "capstan",
            Peer::CapstanTraced => "capstan-traced",
            Peer::ControllerRuntime => "controller-runtime",
            Peer::KubeRs => "kube-rs",
            Peer::Raw => "raw",
        }
    }

    /// Whether it is `capstan run` (with or without trace export).
    fn is_capstan(self) -> bool {
        matches!(self, Peer::Capstan | Peer::CapstanTraced)
    }
}

/// `OTEL_SERVICE_NAME` of `capstan-traced`.
const TRACED_SERVICE: &str = "bench-greetings";

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    if let Some(ns) = args.kube_rs {
        let client = Client::try_default().await.context("no cluster: set KUBECONFIG")?;
        return kube_rs_greeter(client, ns).await;
    }
    if let Some(ns) = args.raw {
        let client = Client::try_default().await.context("no cluster: set KUBECONFIG")?;
        return raw_writer(client, ns).await;
    }
    drive(args).await
}

// ------------------------------------------------------------------ the driver

/// What every run needs.
struct Bench {
    client: Client,
    cluster: Cluster,
    me: PathBuf,
    capstan: PathBuf,
    greeter: PathBuf,
    go_peer: Option<PathBuf>,
    /// The OTLP/HTTP endpoint and the pid of the Jaeger that
    /// `capstan-traced` exports to.
    jaeger: Option<(String, u32)>,
    quiet: Duration,
    timeout: Duration,
}

async fn drive(args: Args) -> Result<()> {
    ensure!(args.rounds > 0 && !args.peers.is_empty(), "nothing to run");
    let me = std::env::current_exe()?;
    let capstan = args.capstan.unwrap_or_else(|| me.with_file_name("capstan"));
    let greeter = match args.greeter {
        Some(g) => g,
        None => capstan_host::testing::find_component("greeter").map_err(anyhow::Error::msg)?,
    };
    let go_peer = if args.peers.contains(&Peer::ControllerRuntime) { Some(go_peer(&args.go)?) } else { None };
    // Kept until the end (killed when dropped).
    let jaeger = if args.peers.contains(&Peer::CapstanTraced) {
        Some(capstan_tests::jaeger::Jaeger::start().await.context("starting Jaeger for capstan-traced")?)
    } else {
        None
    };
    let cluster = Cluster::up(&capstan, &args.cluster).await?;
    let client = ControlPlane::from_kubeconfig(&cluster.kubeconfig).await?.client()?;
    let version = client.apiserver_version().await.context("asking the API server for /version")?;
    install_crd(&client, &greeter).await?;
    println!(
        "Kubernetes {} (cluster {}, kube-controller-manager {}), {} cores; capstan {}; greeter {}",
        version.git_version,
        args.cluster,
        if cluster.controller_manager { "running" } else { "not running" },
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        capstan.display(),
        greeter.display(),
    );
    if let Some(j) = &jaeger {
        println!(
            "capstan-traced: every trace to Jaeger {} at {} (OTLP/HTTP, in-memory storage)",
            capstan_tests::jaeger::JAEGER_VERSION,
            j.otlp_endpoint()
        );
    }
    let bench = Bench {
        client,
        cluster,
        me,
        capstan,
        greeter,
        go_peer,
        jaeger: jaeger
            .as_ref()
            .map(|j| Ok::<_, anyhow::Error>((j.otlp_endpoint(), j.pid().context("Jaeger's pid")?)))
            .transpose()?,
        quiet: Duration::from_secs_f64(args.quiet),
        timeout: Duration::from_secs_f64(args.timeout),
    };
    for &count in &args.counts {
        println!("\n== {count} Greetings, {} rounds", args.rounds);
        let mut runs = Vec::new();
        for round in 0..args.rounds {
            let mut order = args.peers.clone();
            let n = order.len();
            order.rotate_left(round % n);
            for peer in order {
                let run = bench.run(peer, count).await.with_context(|| format!("{} at {count}", peer.name()))?;
                println!("round {} {:<18} {}", round + 1, peer.name(), run.line(count));
                runs.push((peer, run));
            }
        }
        summarize(count, &args.peers, &runs);
        if let Some(j) = &jaeger {
            // Proof that the spans arrived (the query API answers at most
            // 1000 traces).
            let traces = j.traces(TRACED_SERVICE).await.context("asking Jaeger for the traces")?;
            let rss = bench.jaeger.as_ref().map_or(Ok(0.0), |&(_, pid)| rss_mib(pid))?;
            println!(
                "Jaeger holds {}{} traces of {TRACED_SERVICE}, {rss:.0} MiB resident",
                if traces.len() >= 1000 { "at least " } else { "" },
                traces.len()
            );
        }
    }
    drop(jaeger);
    Ok(())
}

/// The figures of one phase of one run.
#[derive(Debug)]
struct Phase {
    ready: Sample,
    quiet: Sample,
    peak_mib: f64,
    /// Capstan's reconciles to quiet, from its `/metrics`.
    reconciles: Option<Reconciles>,
    /// Spans Capstan dropped to quiet (`capstan_trace_spans_dropped_total`),
    /// from its `/metrics`.
    spans_dropped: Option<f64>,
}

/// Where a phase stood at one moment, from its start.
#[derive(Clone, Debug)]
struct Sample {
    seconds: f64,
    calls: RequestCounts,
    peer_cpu: f64,
    apiserver_cpu: f64,
    /// etcd's CPU seconds (0 where its pid is not known).
    etcd_cpu: f64,
    /// Jaeger's CPU seconds (0 but for `capstan-traced`).
    jaeger_cpu: f64,
    /// The share of the machine's cores that were busy, 0 to 1.
    busy: f64,
}

/// One run of one peer: both phases.
#[derive(Debug)]
struct Run {
    /// Whether it exported its traces (`capstan-traced`).
    traced: bool,
    /// Resident memory once started and synced, before the first wave.
    idle_mib: f64,
    create: Phase,
    update: Phase,
}

impl Run {
    fn line(&self, count: usize) -> String {
        let phase = |p: &Phase| {
            let mut host = p.reconciles.as_ref().map_or(String::new(), |r| {
                format!(
                    ", {:.2} reconciles/G, workers {:.0} % busy",
                    r.count / count as f64,
                    100.0 * workers_busy(r, &p.quiet)
                )
            });
            if self.traced {
                host += &format!(
                    ", {:.0} spans dropped, jaeger cpu {:.2} s",
                    p.spans_dropped.unwrap_or(f64::NAN),
                    p.quiet.jaeger_cpu
                );
            }
            format!(
                "Ready {:.2} s, quiet {:.2} s, {:.2} writes/G, {:.0} MiB, machine {:.0} % busy{host}",
                p.ready.seconds,
                p.quiet.seconds,
                p.quiet.calls.writes() / count as f64,
                p.peak_mib,
                100.0 * p.quiet.busy,
            )
        };
        format!("create: {} | update: {}", phase(&self.create), phase(&self.update))
    }
}

/// The wave of writes that starts a phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Wave {
    Create,
    Update,
}

impl Wave {
    fn word(self) -> &'static str {
        match self {
            Wave::Create => "create",
            Wave::Update => "update",
        }
    }

    /// The generation of a Greeting after this wave.
    fn generation(self) -> i64 {
        match self {
            Wave::Create => 1,
            Wave::Update => 2,
        }
    }
}

impl Bench {
    async fn run(&self, peer: Peer, count: usize) -> Result<Run> {
        let ns = format!("bench-{}-{}", peer.name(), random_suffix(5));
        let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}}))?;
        Api::<Namespace>::all(self.client.clone()).create(&PostParams::default(), &namespace).await?;
        let (watch_task, mut ready) = watch_ready(self.client.clone(), &ns);
        let (mut child, metrics) = self.spawn(peer, &ns)?;
        let pid = child.id().context("the peer's pid")?;
        let result = async {
            settle(&mut child, pid).await?;
            let idle_mib = rss_mib(pid)?;
            let mut running = Running { peer, pid, metrics, child: &mut child, ready: &mut ready };
            let create = self.phase(&mut running, &ns, count, Wave::Create).await?;
            let _ = reset_peak_rss(pid);
            let update = self.phase(&mut running, &ns, count, Wave::Update).await?;
            anyhow::Ok(Run { traced: peer == Peer::CapstanTraced, idle_mib, create, update })
        }
        .await;
        child.kill().await.ok();
        watch_task.abort();
        empty_namespace(&self.client, &ns).await?;
        result
    }

    /// Starts `peer` in `ns`; returns it and, for Capstan, the port of its
    /// `/metrics`.
    fn spawn(&self, peer: Peer, ns: &str) -> Result<(tokio::process::Child, Option<u16>)> {
        let mut port = None;
        let mut command = match peer {
            Peer::Capstan | Peer::CapstanTraced => {
                let mut c = tokio::process::Command::new(&self.capstan);
                let free = capstan_tests::free_port()?;
                port = Some(free);
                let listen = format!("127.0.0.1:{free}");
                c.args(["run", "--log", "warn", "-n", ns, "--listen", &listen]).arg(&self.greeter);
                // Only what is set here configures the export (none for
                // `capstan`), not what the benchmark inherited.
                for (var, _) in std::env::vars_os() {
                    if var.to_string_lossy().starts_with("OTEL_") || var == "CAPSTAN_TRACE_QUEUE_SIZE" {
                        c.env_remove(var);
                    }
                }
                if peer == Peer::CapstanTraced {
                    let (endpoint, _) = self.jaeger.as_ref().context("no Jaeger started")?;
                    c.env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
                        .env("OTEL_SERVICE_NAME", TRACED_SERVICE)
                        .env("OTEL_TRACES_SAMPLER", "always_on");
                }
                c
            }
            Peer::ControllerRuntime => {
                let mut c = tokio::process::Command::new(self.go_peer.as_ref().context("the Go peer is not built")?);
                c.args(["--namespace", ns]);
                c
            }
            Peer::KubeRs => {
                let mut c = tokio::process::Command::new(&self.me);
                c.args(["--kube-rs", ns]);
                c
            }
            Peer::Raw => {
                let mut c = tokio::process::Command::new(&self.me);
                c.args(["--raw", ns]).stdin(Stdio::piped());
                c
            }
        };
        for proxy in ["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"] {
            command.env_remove(proxy);
        }
        let child = command
            .env("KUBECONFIG", &self.cluster.kubeconfig)
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting the {} peer", peer.name()))?;
        Ok((child, port))
    }

    /// Starts `wave` and measures it to Ready and to quiet.
    async fn phase(&self, running: &mut Running<'_>, ns: &str, count: usize, wave: Wave) -> Result<Phase> {
        let Running { peer, pid, metrics, ref mut child, ref mut ready } = *running;
        let reconciles = async || -> Result<Option<(Reconciles, f64)>> {
            let Some(port) = metrics else { return Ok(None) };
            let (code, text) = http_get(port, "/metrics").await.context("reading capstan's /metrics")?;
            ensure!(code == 200, "capstan's /metrics answered {code}");
            Ok(Some((Reconciles::parse(&text), spans_dropped(&text))))
        };
        let reconciles0 = reconciles().await?;
        let api_pid = self.cluster.apiserver;
        let etcd_cpu = || self.cluster.etcd.map_or(Ok(0.0), cpu_seconds);
        let jaeger_pid = self.jaeger.as_ref().map(|&(_, pid)| pid).filter(|_| peer == Peer::CapstanTraced);
        let jaeger_cpu = || jaeger_pid.map_or(Ok(0.0), cpu_seconds);
        let calls0 = RequestCounts::scrape(&self.client, COUNTED).await?;
        let (peer0, api0, etcd0, jaeger0, machine0) =
            (cpu_seconds(pid)?, cpu_seconds(api_pid)?, etcd_cpu()?, jaeger_cpu()?, machine_cpu_seconds()?);
        let start = Instant::now();
        // Read when the sample is taken: the machine's figures are not
        // known for the instant the watch saw Ready, only for the poll
        // after it (at most one poll later).
        let sample = |at: Instant, calls: RequestCounts| -> Result<Sample> {
            let machine: MachineCpu = machine_cpu_seconds()?;
            Ok(Sample {
                seconds: at.duration_since(start).as_secs_f64(),
                calls: calls.since(&calls0),
                peer_cpu: cpu_seconds(pid)? - peer0,
                apiserver_cpu: cpu_seconds(api_pid)? - api0,
                etcd_cpu: etcd_cpu()? - etcd0,
                jaeger_cpu: jaeger_cpu()? - jaeger0,
                busy: machine.busy_since(&machine0),
            })
        };
        match peer {
            Peer::Raw => {
                let stdin = child.stdin.as_mut().context("the raw writer's stdin")?;
                stdin.write_all(format!("{} {count}\n", wave.word()).as_bytes()).await?;
                stdin.flush().await?;
            }
            _ => driver_wave(&self.client, ns, count, wave).await?,
        }
        let generation = wave.generation();
        let seen = match tokio::time::timeout(self.timeout, ready.wait_for(|r| r.at_least(generation) >= count)).await {
            Ok(Ok(readiness)) => readiness.at,
            Ok(Err(_)) => bail!("the watch of the Greetings ended"),
            Err(_) => None,
        };
        let Some(seen) = seen else {
            let n = ready.borrow().at_least(generation);
            bail!("only {n} of {count} Greetings Ready after {:?}", self.timeout);
        };
        let calls = RequestCounts::scrape(&self.client, COUNTED).await?;
        let ready = sample(seen, calls.clone())?;

        let mut last = ready.clone();
        let mut last_writes = calls.writes();
        let mut last_change = Instant::now();
        loop {
            tokio::time::sleep(POLL).await;
            if let Some(status) = child.try_wait()? {
                bail!("the peer exited ({status})");
            }
            let at = Instant::now();
            let calls = RequestCounts::scrape(&self.client, COUNTED).await?;
            if calls.writes() != last_writes {
                last_writes = calls.writes();
                last_change = at;
                last = sample(at, calls)?;
            } else if at.duration_since(last_change) >= self.quiet {
                break;
            }
            if at.duration_since(start) > 2 * self.timeout {
                bail!("still writing {:?} after Ready", self.timeout);
            }
        }
        let (reconciles, spans_dropped) = match (reconciles().await?, reconciles0) {
            (Some((now, dropped)), Some((before, dropped0))) => (Some(now.since(&before)), Some(dropped - dropped0)),
            _ => (None, None),
        };
        Ok(Phase { ready, quiet: last, peak_mib: peak_rss_mib(pid)?, reconciles, spans_dropped })
    }
}

/// A peer's process while it runs.
struct Running<'a> {
    peer: Peer,
    pid: u32,
    /// The port of its `/metrics` (Capstan's).
    metrics: Option<u16>,
    child: &'a mut tokio::process::Child,
    ready: &'a mut watch::Receiver<Readiness>,
}

/// Waits until the just started process `pid` is idle (its CPU time still
/// over half a second), at least 2 s: connected, caches synced.
async fn settle(child: &mut tokio::process::Child, pid: u32) -> Result<()> {
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut before = cpu_seconds(pid)?;
    while start.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        if let Some(status) = child.try_wait()? {
            bail!("the peer exited at start ({status})");
        }
        let now = cpu_seconds(pid)?;
        if now - before < 0.015 {
            return Ok(());
        }
        before = now;
    }
    Ok(())
}

/// The driver's writes that start a phase for a controller: the creates,
/// or a new `spec.message` for every Greeting.
async fn driver_wave(client: &Client, ns: &str, count: usize, wave: Wave) -> Result<()> {
    let api: Api<Greeting> = Api::namespaced(client.clone(), ns);
    stream::iter(0..count)
        .map(|i| write_greeting(&api, i, wave))
        .buffer_unordered(WRITERS)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

/// Creates Greeting `g-<i>`, or changes its message; returns it as
/// stored.
async fn write_greeting(api: &Api<Greeting>, i: usize, wave: Wave) -> Result<Greeting> {
    Ok(match wave {
        Wave::Create => {
            let g: Greeting = serde_json::from_value(json!({
                "apiVersion": "examples.capstan.dev/v1alpha1",
                "kind": "Greeting",
                "metadata": {"name": format!("g-{i}")},
                "spec": {"message": format!("hello {i}"), "replicas": 1},
            }))?;
            api.create(&PostParams::default(), &g).await?
        }
        Wave::Update => {
            let patch = json!({"spec": {"message": format!("hello {i}, again")}});
            api.patch(&format!("g-{i}"), &PatchParams::default(), &Patch::Merge(&patch)).await?
        }
    })
}

/// How many Greetings the driver's watch has seen Ready, by generation.
#[derive(Clone, Debug, Default)]
struct Readiness {
    by_generation: BTreeMap<i64, usize>,
    /// When the last change was seen.
    at: Option<Instant>,
}

impl Readiness {
    /// Greetings Ready at `generation` or later.
    fn at_least(&self, generation: i64) -> usize {
        self.by_generation.range(generation..).map(|(_, n)| n).sum()
    }
}

/// Watches the Greetings of `ns` for the generation each is Ready at.
fn watch_ready(client: Client, ns: &str) -> (tokio::task::JoinHandle<()>, watch::Receiver<Readiness>) {
    let (tx, rx) = watch::channel(Readiness::default());
    let api: Api<Greeting> = Api::namespaced(client, ns);
    let task = tokio::spawn(async move {
        let mut ready: HashMap<String, i64> = HashMap::new();
        let stream = watcher(api, watcher::Config::default()).default_backoff().applied_objects();
        let mut stream = std::pin::pin!(stream);
        while let Some(item) = stream.next().await {
            let Ok(g) = item else { continue };
            let now = ready_generation(&g);
            let before = match now {
                Some(n) => ready.insert(g.name_any(), n),
                None => ready.remove(&g.name_any()),
            };
            if now != before {
                tx.send_modify(|r| {
                    if let Some(b) = before {
                        *r.by_generation.entry(b).or_default() -= 1;
                    }
                    if let Some(n) = now {
                        *r.by_generation.entry(n).or_default() += 1;
                    }
                    r.at = Some(Instant::now());
                });
            }
        }
    });
    (task, rx)
}

/// The generation `g` is Ready at, if its status says so for its current
/// generation.
fn ready_generation(g: &Greeting) -> Option<i64> {
    let status = g.status.as_ref()?;
    let generation = g.metadata.generation?;
    let ready = status.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True");
    (ready && status.observed_generation == Some(generation)).then_some(generation)
}

/// Deletes what a run left in `ns`, and `ns`. Without
/// kube-controller-manager nothing collects owned objects or finishes a
/// namespace's deletion, so the objects go one kind at a time, the
/// Greetings' finalizers removed by hand (their controller is stopped).
async fn empty_namespace(client: &Client, ns: &str) -> Result<()> {
    let everything = ListParams::default();
    let background = DeleteParams::background();
    let greetings: Api<Greeting> = Api::namespaced(client.clone(), ns);
    greetings.delete_collection(&background, &everything).await?;
    let left = greetings.list_metadata(&everything).await?;
    let unfinalize = json!({"metadata": {"finalizers": null}});
    stream::iter(left.items)
        .map(|g| {
            let (greetings, unfinalize) = (&greetings, &unfinalize);
            async move {
                match greetings.patch_metadata(&g.name_any(), &PatchParams::default(), &Patch::Merge(unfinalize)).await
                {
                    Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
                    other => other.map(drop),
                }
            }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<_>>()
        .await?;
    Api::<ConfigMap>::namespaced(client.clone(), ns).delete_collection(&background, &everything).await?;
    Api::<Deployment>::namespaced(client.clone(), ns).delete_collection(&background, &everything).await?;
    Api::<CoreEvent>::namespaced(client.clone(), ns).delete_collection(&background, &everything).await?;
    Api::<Namespace>::all(client.clone()).delete(ns, &background).await?;
    Ok(())
}

/// The spans a Capstan host dropped so far, for any reason
/// (`capstan_trace_spans_dropped_total` in its `/metrics` text; absent
/// until one is).
fn spans_dropped(metrics: &str) -> f64 {
    metrics
        .lines()
        .filter(|line| line.starts_with("capstan_trace_spans_dropped_total"))
        .filter_map(|line| line.rsplit_once(' ')?.1.trim().parse::<f64>().ok())
        .sum()
}

/// The share of Capstan's workers' time to quiet spent in reconciles:
/// near 100 % they are the limit; well below, the objects reach the queue
/// slower than the workers take them.
fn workers_busy(r: &Reconciles, quiet: &Sample) -> f64 {
    r.seconds / (CONCURRENCY as f64 * quiet.seconds)
}

/// The medians of one peer's figures in one phase.
struct Medians {
    rate_ready: f64,
    rate_quiet: f64,
    per_greeting: [f64; 4],
    cpu: [f64; 4],
    /// etcd's CPU seconds to quiet.
    etcd_quiet: f64,
    /// Jaeger's CPU seconds to quiet.
    jaeger_quiet: f64,
    /// Spans dropped to quiet.
    spans_dropped: f64,
    /// How busy the machine was to Ready and to quiet, 0 to 1.
    busy: [f64; 2],
    peak_mib: f64,
    /// Peak resident memory over the idle one, per Greeting, in KiB.
    kib_per_greeting: f64,
}

fn medians(count: usize, runs: &[(&Run, &Phase)]) -> Medians {
    let n = count as f64;
    let m = |f: &dyn Fn(&Phase) -> f64| median(runs.iter().map(|(_, p)| f(p)).collect());
    Medians {
        rate_ready: m(&|p| n / p.ready.seconds),
        rate_quiet: m(&|p| n / p.quiet.seconds),
        per_greeting: [
            m(&|p| p.ready.calls.writes() / n),
            m(&|p| p.ready.calls.reads() / n),
            m(&|p| p.quiet.calls.writes() / n),
            m(&|p| p.quiet.calls.reads() / n),
        ],
        cpu: [
            m(&|p| p.ready.peer_cpu),
            m(&|p| p.ready.apiserver_cpu),
            m(&|p| p.quiet.peer_cpu),
            m(&|p| p.quiet.apiserver_cpu),
        ],
        etcd_quiet: m(&|p| p.quiet.etcd_cpu),
        jaeger_quiet: m(&|p| p.quiet.jaeger_cpu),
        spans_dropped: m(&|p| p.spans_dropped.unwrap_or(f64::NAN)),
        busy: [m(&|p| p.ready.busy), m(&|p| p.quiet.busy)],
        peak_mib: m(&|p| p.peak_mib),
        kib_per_greeting: median(runs.iter().map(|(r, p)| 1024.0 * (p.peak_mib - r.idle_mib) / n).collect()),
    }
}

fn phase_of(run: &Run, wave: Wave) -> &Phase {
    match wave {
        Wave::Create => &run.create,
        Wave::Update => &run.update,
    }
}

fn summarize(count: usize, peers: &[Peer], runs: &[(Peer, Run)]) {
    for wave in [Wave::Create, Wave::Update] {
        let phase = |run| phase_of(run, wave);
        let table: Vec<(Peer, Medians)> = peers
            .iter()
            .map(|&peer| {
                let phases: Vec<(&Run, &Phase)> =
                    runs.iter().filter(|(p, _)| *p == peer).map(|(_, r)| (r, phase(r))).collect();
                (peer, medians(count, &phases))
            })
            .collect();
        let rounds = runs.len() / peers.len().max(1);
        println!("\n{} of {count} Greetings, medians of {rounds} rounds", wave.word());
        println!(
            "{:<18} | {:>7} {:>6} {:>6} {:>6} {:>7} {:>7} {:>5} | {:>7} {:>6} {:>6} {:>6} {:>7} {:>7} {:>7} {:>5} | {:>8} {:>6} {:>8}",
            "", "Ready", "", "", "", "", "", "", "quiet", "", "", "", "", "", "", "", "", "", ""
        );
        println!(
            "{:<18} | {:>7} {:>6} {:>6} {:>6} {:>7} {:>7} {:>5} | {:>7} {:>6} {:>6} {:>6} {:>7} {:>7} {:>7} {:>5} | {:>8} {:>6} {:>8}",
            "peer",
            "G/s",
            "/raw",
            "wr/G",
            "rd/G",
            "cpu s",
            "api s",
            "busy",
            "G/s",
            "/raw",
            "wr/G",
            "rd/G",
            "cpu s",
            "api s",
            "etcd s",
            "busy",
            "peak MiB",
            "KiB/G",
            "cpu ms/G"
        );
        let raw = table.iter().find(|(p, _)| *p == Peer::Raw).map(|(_, m)| (m.rate_ready, m.rate_quiet));
        for (peer, m) in &table {
            let of_raw =
                |rate: f64, ceiling: Option<f64>| ceiling.map_or("-".to_owned(), |c| format!("{:.2}", rate / c));
            println!(
                "{:<18} | {:>7.1} {:>6} {:>6.2} {:>6.2} {:>7.2} {:>7.2} {:>4.0}% | {:>7.1} {:>6} {:>6.2} {:>6.2} {:>7.2} {:>7.2} {:>7.2} {:>4.0}% | {:>8.1} {:>6.1} {:>8.2}",
                peer.name(),
                m.rate_ready,
                of_raw(m.rate_ready, raw.map(|r| r.0)),
                m.per_greeting[0],
                m.per_greeting[1],
                m.cpu[0],
                m.cpu[1],
                100.0 * m.busy[0],
                m.rate_quiet,
                of_raw(m.rate_quiet, raw.map(|r| r.1)),
                m.per_greeting[2],
                m.per_greeting[3],
                m.cpu[2],
                m.cpu[3],
                m.etcd_quiet,
                100.0 * m.busy[1],
                m.peak_mib,
                m.kib_per_greeting,
                1000.0 * m.cpu[2] / count as f64,
            );
        }
        let capstan = table.iter().find(|(p, _)| *p == Peer::Capstan).map(|(_, m)| m);
        if let Some(c) = capstan {
            let ratios: Vec<String> = table
                .iter()
                .filter(|(p, _)| !p.is_capstan())
                .map(|(p, m)| {
                    format!("{} {:.2} / {:.2}", p.name(), c.rate_ready / m.rate_ready, c.rate_quiet / m.rate_quiet)
                })
                .collect();
            if !ratios.is_empty() {
                println!("capstan's Greetings/s over (to Ready / to quiet): {}", ratios.join(", "));
            }
        }
        if let (Some(c), Some((_, t))) = (capstan, table.iter().find(|(p, _)| *p == Peer::CapstanTraced)) {
            let (ready, quiet) = (t.rate_ready / c.rate_ready, t.rate_quiet / c.rate_quiet);
            println!(
                "capstan-traced's Greetings/s over capstan's (to Ready / to quiet): {ready:.3} / {quiet:.3} \
                 (throughput lost to tracing {:.1} % / {:.1} %; {:.0} spans dropped, Jaeger's CPU to quiet {:.2} s)",
                100.0 * (1.0 - ready),
                100.0 * (1.0 - quiet),
                t.spans_dropped,
                t.jaeger_quiet,
            );
        }
        for &host in peers.iter().filter(|p| p.is_capstan()) {
            let phases: Vec<&Phase> = runs.iter().filter(|(p, _)| *p == host).map(|(_, r)| phase(r)).collect();
            let with_reconciles: Vec<(&Reconciles, &Sample)> =
                phases.iter().filter_map(|p| Some((p.reconciles.as_ref()?, &p.quiet))).collect();
            if with_reconciles.is_empty() {
                continue;
            }
            let m = |f: &dyn Fn(&Reconciles, &Sample) -> f64| {
                median(with_reconciles.iter().map(|(r, s)| f(r, s)).collect())
            };
            let (last, _) = with_reconciles[with_reconciles.len() - 1];
            let results: Vec<String> =
                last.by_result.iter().map(|(k, n)| format!("{k} {:.2}", n / count as f64)).collect();
            println!(
                "{} to quiet: {:.2} reconciles per Greeting ({} in the last round), {:.2} ms each, workers {:.0} % busy",
                host.name(),
                m(&|r, _| r.count / count as f64),
                results.join(", "),
                m(&|r, _| 1000.0 * r.seconds / r.count.max(1.0)),
                100.0 * m(&|r, s| workers_busy(r, s)),
            );
        }
        println!("calls per Greeting to quiet (last round):");
        for &peer in peers {
            if let Some((_, run)) = runs.iter().rev().find(|(p, _)| *p == peer) {
                let calls: Vec<String> = phase(run)
                    .quiet
                    .calls
                    .by_call
                    .iter()
                    .map(|(call, n)| format!("{call} {:.2}", n / count as f64))
                    .collect();
                println!("  {:<18} {}", peer.name(), calls.join(", "));
            }
        }
    }
}

// ------------------------------------------------------------- the cluster

/// The local cluster the benchmark runs on.
#[derive(Debug)]
struct Cluster {
    kubeconfig: PathBuf,
    apiserver: u32,
    etcd: Option<u32>,
    controller_manager: bool,
}

impl Cluster {
    /// `capstan cluster up --name NAME --no-controller-manager` (which
    /// reuses a running one as it is).
    async fn up(capstan: &Path, name: &str) -> Result<Self> {
        let output = tokio::process::Command::new(capstan)
            .args(["cluster", "up", "--name", name, "--no-controller-manager"])
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .await
            .with_context(|| format!("running {}", capstan.display()))?;
        ensure!(output.status.success(), "`capstan cluster up --name {name}` failed ({})", output.status);
        let stdout = String::from_utf8_lossy(&output.stdout);
        let kubeconfig = PathBuf::from(stdout.lines().last().context("no kubeconfig path printed")?.trim());
        let dir = kubeconfig.parent().context("the kubeconfig's directory")?;
        let pid = |binary: &str| -> Option<u32> {
            let pid = std::fs::read_to_string(dir.join("pids").join(binary)).ok()?.trim().parse().ok()?;
            Path::new(&format!("/proc/{pid}")).exists().then_some(pid)
        };
        let apiserver =
            pid("kube-apiserver").with_context(|| format!("no live kube-apiserver in {}", dir.display()))?;
        let controller_manager = pid("kube-controller-manager").is_some();
        let etcd = pid("etcd");
        Ok(Self { kubeconfig, apiserver, etcd, controller_manager })
    }
}

async fn install_crd(client: &Client, greeter: &Path) -> Result<()> {
    let engine = capstan_host::runtime::engine::Engine::new(Default::default())?;
    let runtime = capstan_host::runtime::invocation::Runtime::new(&engine, Default::default())
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let loaded = capstan_host::runtime::component::Loader::new(runtime, None).load(greeter).await?;
    capstan_tests::install_crd(client, loaded.manifest.crds[0].clone()).await?;
    Ok(())
}

/// The controller-runtime peer's binary, built with `go` into the cache
/// unless it is there.
fn go_peer(go: &Path) -> Result<PathBuf> {
    let mut hash = Sha256::new();
    for (name, text) in GO_PEER {
        hash.update(name.as_bytes());
        hash.update((text.len() as u64).to_le_bytes());
        hash.update(text.as_bytes());
    }
    let key = hex::encode(&hash.finalize()[..8]);
    let dir = capstan_host::tooling::cli::cluster::build::cache_root()?
        .join("peers")
        .join(format!("controller-runtime-{key}"));
    let binary = dir.join("controller-runtime-greeter");
    if binary.is_file() {
        return Ok(binary);
    }
    let src = dir.join("src");
    std::fs::create_dir_all(&src).with_context(|| format!("creating {}", src.display()))?;
    for (name, text) in GO_PEER {
        std::fs::write(src.join(name), text)?;
    }
    eprintln!("building the controller-runtime peer into {} (once)", dir.display());
    let partial = dir.join("controller-runtime-greeter.partial");
    let status = std::process::Command::new(go)
        .args(["build", "-mod=readonly", "-trimpath", "-o"])
        .arg(&partial)
        .arg(".")
        .current_dir(&src)
        .env("CGO_ENABLED", "0")
        .status()
        .with_context(|| format!("running {}", go.display()))?;
    ensure!(status.success(), "go build of the controller-runtime peer failed ({status})");
    std::fs::rename(&partial, &binary)?;
    Ok(binary)
}

// ------------------------------------------------------------------ the peers

/// Field manager and event reporter of the kube-rs peer.
const KUBE_RS: &str = "kube-rs-greeter";

/// Field manager and event reporter of the raw writer.
const RAW: &str = "raw-greeter";

/// What the kube-rs peer's reconciles share.
struct Ctx {
    client: Client,
    events: Events,
    deployments: Store<Deployment>,
}

/// The greeter as a kube-rs controller: a `Controller` owning ConfigMaps and
/// Deployments (its metadata watches), kube-runtime's `finalizer`, and
/// the Deployment's replicas read from a reflector of its own (the stable
/// API has no way to share the `Controller`'s watch).
async fn kube_rs_greeter(client: Client, ns: String) -> Result<()> {
    let greetings: Api<Greeting> = Api::namespaced(client.clone(), &ns);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let (deployments, writer) = reflector::store();
    let reflect = watcher(deploys.clone(), watcher::Config::default()).default_backoff().reflect(writer);
    tokio::spawn(reflect.for_each(|_| async {}));
    deployments.wait_until_ready().await?;
    let reporter = Reporter { controller: KUBE_RS.into(), instance: None };
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        events: Events::Recorder(Recorder::new(client, reporter)),
        deployments,
    });
    Controller::new(greetings, watcher::Config::default())
        .owns(cms, watcher::Config::default())
        .owns(deploys, watcher::Config::default())
        .with_config(ControllerConfig::default().concurrency(CONCURRENCY as u16))
        .run(reconcile, |_, _, _| Action::requeue(Duration::from_secs(1)), ctx)
        .for_each(|_| async {})
        .await;
    Ok(())
}

async fn reconcile(g: Arc<Greeting>, ctx: Arc<Ctx>) -> Result<Action, kube::runtime::finalizer::Error<kube::Error>> {
    let ns = g.namespace().unwrap_or_default();
    let api: Api<Greeting> = Api::namespaced(ctx.client.clone(), &ns);
    finalizer(&api, FINALIZER, g, |event| async {
        match event {
            Finalizer::Apply(g) => {
                let key = ObjectRef::new(&greeter::deployment_name(&g.name_any())).within(&ns);
                let replicas = ctx.deployments.get(&key).and_then(|d| d.status.as_ref()?.replicas).unwrap_or(0);
                greet(&ctx.client, &ctx.events, KUBE_RS, &g, replicas).await?;
                Ok(Action::requeue(Duration::from_secs(300)))
            }
            Finalizer::Cleanup(_) => Ok(Action::await_change()),
        }
    })
    .await
}

/// How a peer records its Events.
enum Events {
    /// kube-runtime's `Recorder`, as a kube-rs controller records them (it
    /// keeps every Event of the last 6 minutes and scans them on each one).
    Recorder(Recorder),
    /// One create per Event and nothing kept: the raw writer's, the same
    /// call at no cost in the writer.
    Create(Client),
}

impl Events {
    async fn publish(
        &self,
        event: &Event,
        regarding: &k8s_openapi::api::core::v1::ObjectReference,
    ) -> kube::Result<()> {
        let client = match self {
            Self::Recorder(recorder) => return recorder.publish(event, regarding).await,
            Self::Create(client) => client,
        };
        let now = k8s_openapi::jiff::Timestamp::now();
        let ns = regarding.namespace.clone().unwrap_or_default();
        let name = format!("{}.{:x}", regarding.name.as_deref().unwrap_or(RAW), now.as_nanosecond());
        let body: k8s_openapi::api::events::v1::Event = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": ns},
            "action": event.action,
            "reason": event.reason,
            "note": event.note,
            "type": match event.type_ { EventType::Normal => "Normal", EventType::Warning => "Warning" },
            "eventTime": k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(now),
            "regarding": regarding,
            "reportingController": RAW,
            "reportingInstance": RAW,
        }))
        .map_err(kube::Error::SerdeError)?;
        Api::namespaced(client.clone(), &ns).create(&PostParams::default(), &body).await.map(drop)
    }
}

/// The greeter's writes after the finalizer: the ConfigMap and the
/// Deployment applied, and, if it changes, the status, with an Event for a
/// Greeting seen first (`Created`) or at a new generation (`Updated`).
async fn greet(client: &Client, events: &Events, manager: &str, g: &Greeting, replicas: i32) -> kube::Result<()> {
    let ns = g.namespace().unwrap_or_default();
    let name = g.name_any();
    let (mut cm, mut deploy, status) = desired(g, replicas);
    let owner = g.controller_owner_ref(&()).expect("a stored Greeting has a name and uid");
    cm.metadata.owner_references = Some(vec![owner.clone()]);
    deploy.metadata.owner_references = Some(vec![owner]);
    let params = PatchParams::apply(manager).force();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    cms.patch(&greeter::configmap_name(&name), &params, &Patch::Apply(&cm)).await?;
    deploys.patch(&greeter::deployment_name(&name), &params, &Patch::Apply(&deploy)).await?;
    if g.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let api: Api<Greeting> = Api::namespaced(client.clone(), &ns);
    let body = json!({"apiVersion": "examples.capstan.dev/v1alpha1", "kind": "Greeting", "status": status});
    api.patch_status(&name, &params, &Patch::Apply(&body)).await?;
    let (reason, note) = match &g.status {
        None => ("Created", format!("greeting {name} set up")),
        Some(s) if s.observed_generation != g.metadata.generation => ("Updated", format!("greeting {name} updated")),
        Some(_) => return Ok(()),
    };
    let event = Event {
        type_: EventType::Normal,
        reason: reason.into(),
        note: Some(note),
        action: "Reconcile".into(),
        secondary: None,
    };
    events.publish(&event, &g.object_ref(&())).await
}

/// The raw writer: for each `create N` or `update N` line on stdin, the
/// driver's writes of that wave (8 at a time) each followed by the
/// greeter's writes (4 workers), with no watch and no cache.
async fn raw_writer(client: Client, ns: String) -> Result<()> {
    let events = Events::Create(client.clone());
    let api: Api<Greeting> = Api::namespaced(client.clone(), &ns);
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines.next_line().await? {
        let (wave, count) = match line.split_once(' ') {
            Some(("create", n)) => (Wave::Create, n.parse::<usize>()?),
            Some(("update", n)) => (Wave::Update, n.parse::<usize>()?),
            _ => bail!("unknown command {line:?}"),
        };
        let (tx, rx) = mpsc::unbounded_channel::<Greeting>();
        let rx = Arc::new(Mutex::new(rx));
        let api = &api;
        let writes = async move {
            stream::iter(0..count)
                .map(|i| write_greeting(api, i, wave))
                .buffer_unordered(WRITERS)
                .try_for_each(|g| std::future::ready(tx.send(g).map_err(anyhow::Error::from)))
                .await
        };
        let workers = (0..CONCURRENCY).map(|_| {
            let (rx, client, events) = (Arc::clone(&rx), &client, &events);
            async move {
                loop {
                    let Some(g) = rx.lock().await.recv().await else { return anyhow::Ok(()) };
                    if wave == Wave::Create {
                        let patch = json!({"metadata": {"finalizers": [FINALIZER]}});
                        api.patch_metadata(&g.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await?;
                    }
                    greet(client, events, RAW, &g, 0).await?;
                }
            }
        });
        futures::try_join!(writes, futures::future::try_join_all(workers))?;
    }
    Ok(())
}
