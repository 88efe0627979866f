//! One host serving three clusters against three hosts serving one each
//! (#30): the greeter, uniform, on three real control planes on this
//! machine.
//!
//! ```sh
//! cargo build --profile dist -p capstan-host -p capstan-tests --bin capstan --bin bench-fleet
//! tests/build-guests.sh      # greeter.wasm; export CAPSTAN_GUESTS=<the dir it prints> if not found
//! flock -o /tmp/capstan-bench.lock target/dist/bench-fleet --count 1000 --rounds 3
//! ```
//!
//! # What runs
//!
//! Three private control planes (etcd + kube-apiserver each, no
//! controller-manager, started by the `--capstan` binary's `cluster up` in a state
//! directory of their own, stopped at the end), the CRD installed in each
//! by the hosts (`--install-crds`). Each round runs both peers, the order
//! rotated each round, each in a fresh namespace of every cluster:
//!
//! - `one`: one `capstan run -n NS greeter.wasm --kubeconfig A --cluster
//!   b=B --cluster c=C` process;
//! - `three`: three `capstan run -n NS greeter.wasm --kubeconfig X`
//!   processes, one per cluster.
//!
//! Once every host is ready (`/readyz`), the driver creates `--count`
//! Greetings in each cluster (8 at a time per cluster, the three clusters
//! side by side) and polls until every Greeting of every cluster is
//! `Ready` at generation 1.
//!
//! # Measured
//!
//! Per run: seconds from the first create to all Ready, Greetings per
//! second over the three clusters, the host processes' CPU seconds over
//! that span, their peak resident memory (`VmHWM`, summed over the three
//! processes of `three`) and their memory once ready before the wave
//! (`VmRSS`). Then medians per peer, and `one`'s Greetings/s and memory
//! over `three`'s. Before the rounds, the memory of one idle host serving
//! one, two and three clusters (`VmRSS` once ready and settled, each a
//! fresh process, no Greetings): what each engaged cluster adds. The
//! benchmark prints figures and asserts nothing about them.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use capstan_tests::bench::median;
use capstan_tests::{
    PrivateControlPlane, cpu_seconds, free_port, greeting, greeting_ready, greetings, http_get, peak_rss_mib,
    random_suffix, rss_mib,
};
use clap::Parser;
use futures::{StreamExt as _, stream};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

/// Greetings the driver creates at a time, per cluster.
const WRITERS: usize = 8;

#[derive(Parser, Debug)]
struct Args {
    /// Greetings per cluster per run.
    #[arg(long, default_value_t = 1000)]
    count: usize,
    /// Rounds: each runs both peers, the order rotated.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Seconds a run may take to Ready.
    #[arg(long, default_value_t = 900.0)]
    timeout: f64,
    /// The capstan binary (default: next to this one).
    #[arg(long)]
    capstan: Option<PathBuf>,
    /// The greeter component (default: found like the tests find it).
    #[arg(long)]
    greeter: Option<PathBuf>,
}

/// How the three clusters are served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Peer {
    /// One host process, three clusters.
    One,
    /// Three host processes, a cluster each.
    Three,
}

impl Peer {
    fn name(self) -> &'static str {
        match self {
            Self::One => "one",
            Self::Three => "three",
        }
    }
}

/// A host process and its `--listen` port.
struct Process {
    child: tokio::process::Child,
    port: u16,
}

impl Process {
    fn pid(&self) -> u32 {
        self.child.id().unwrap_or(0)
    }
}

/// Starts `capstan run -n ns greeter` on the first kubeconfig, the others
/// as `--cluster cN=...`, and waits until it is ready.
async fn start(capstan: &Path, greeter: &Path, ns: &str, kubeconfigs: &[&Path], log: &Path) -> Result<Process> {
    let port = free_port()?;
    let mut command = tokio::process::Command::new(capstan);
    command
        .args(["run", "--install-crds", "--log", "warn", "-n", ns, "--listen", &format!("127.0.0.1:{port}")])
        .arg(greeter)
        .arg("--kubeconfig")
        .arg(kubeconfigs[0]);
    for (i, other) in kubeconfigs.iter().enumerate().skip(1) {
        command.arg("--cluster").arg(format!("c{i}={}", other.display()));
    }
    let child = command
        .env_remove("KUBECONFIG")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log)?)
        .kill_on_drop(true)
        .spawn()?;
    let process = Process { child, port };
    let ready = capstan_tests::wait_for(Duration::from_secs(120), || async {
        http_get(process.port, "/readyz").await.ok().filter(|(code, _)| *code == 200)
    })
    .await;
    ready.with_context(|| format!("the host is not ready: see {}", log.display()))?;
    Ok(process)
}

/// Creates `count` Greetings in `ns` of `client`, [`WRITERS`] at a time.
async fn create(client: &kube::Client, ns: &str, count: usize) -> Result<()> {
    let api = greetings(client, ns);
    let results: Vec<Result<()>> = stream::iter(0..count)
        .map(|i| {
            let api = api.clone();
            async move {
                api.create(&PostParams::default(), &greeting(&format!("g{i}"), "hi", 1)).await?;
                Ok(())
            }
        })
        .buffer_unordered(WRITERS)
        .collect()
        .await;
    results.into_iter().collect()
}

/// Waits until all `count` Greetings of `ns` of `client` are Ready.
async fn all_ready(client: &kube::Client, ns: &str, count: usize, timeout: Duration) -> Result<()> {
    let api = greetings(client, ns);
    let started = Instant::now();
    loop {
        let list = api.list(&ListParams::default()).await?;
        let ready = list.items.iter().filter(|g| greeting_ready(g, 1)).count();
        if ready >= count {
            return Ok(());
        }
        if started.elapsed() > timeout {
            bail!("{ready} of {count} Greetings Ready in {ns} after {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// One run's figures.
#[derive(Clone, Copy, Debug)]
struct Run {
    seconds: f64,
    per_second: f64,
    cpu: f64,
    peak_mib: f64,
    ready_mib: f64,
}

async fn namespace(client: &kube::Client, name: &str) -> Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    api.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": name}}))?).await?;
    Ok(())
}

async fn run(args: &Args, capstan: &Path, greeter: &Path, planes: &[PrivateControlPlane], peer: Peer) -> Result<Run> {
    let ns = format!("fleet-bench-{}", random_suffix(6));
    let clients: Vec<kube::Client> = planes.iter().map(|p| p.plane().client()).collect::<Result<_>>()?;
    for client in &clients {
        namespace(client, &ns).await?;
    }
    let kubeconfigs: Vec<&Path> = planes.iter().map(|p| p.plane().kubeconfig_path()).collect();
    let dir = std::env::temp_dir();
    let processes = match peer {
        Peer::One => vec![start(capstan, greeter, &ns, &kubeconfigs, &dir.join(format!("{ns}-one.log"))).await?],
        Peer::Three => {
            let mut all = Vec::new();
            for (i, kubeconfig) in kubeconfigs.iter().enumerate() {
                all.push(start(capstan, greeter, &ns, &[kubeconfig], &dir.join(format!("{ns}-three-{i}.log"))).await?);
            }
            all
        }
    };
    // Settled: the caches listed, the CRDs installed.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let ready_mib: f64 = processes.iter().map(|p| rss_mib(p.pid()).unwrap_or(0.0)).sum();
    let cpu_before: f64 = processes.iter().map(|p| cpu_seconds(p.pid()).unwrap_or(0.0)).sum();
    let timeout = Duration::from_secs_f64(args.timeout);
    let started = Instant::now();
    let waves = clients.iter().map(|client| {
        let ns = ns.clone();
        async move {
            create(client, &ns, args.count).await?;
            all_ready(client, &ns, args.count, timeout).await
        }
    });
    futures::future::try_join_all(waves).await?;
    let seconds = started.elapsed().as_secs_f64();
    let cpu = processes.iter().map(|p| cpu_seconds(p.pid()).unwrap_or(0.0)).sum::<f64>() - cpu_before;
    let peak_mib = processes.iter().map(|p| peak_rss_mib(p.pid()).unwrap_or(0.0)).sum();
    for mut p in processes {
        let _ = p.child.kill().await;
    }
    let total = (args.count * planes.len()) as f64;
    Ok(Run { seconds, per_second: total / seconds, cpu, peak_mib, ready_mib })
}

/// The memory of one idle host serving the first 1, 2, … of the planes.
async fn idle_memory(capstan: &Path, greeter: &Path, planes: &[PrivateControlPlane]) -> Result<Vec<f64>> {
    let ns = format!("fleet-idle-{}", random_suffix(6));
    for plane in planes {
        namespace(&plane.plane().client()?, &ns).await?;
    }
    let kubeconfigs: Vec<&Path> = planes.iter().map(|p| p.plane().kubeconfig_path()).collect();
    let mut out = Vec::new();
    for n in 1..=planes.len() {
        let log = std::env::temp_dir().join(format!("{ns}-{n}.log"));
        let mut p = start(capstan, greeter, &ns, &kubeconfigs[..n], &log).await?;
        tokio::time::sleep(Duration::from_secs(5)).await;
        out.push(rss_mib(p.pid())?);
        let _ = p.child.kill().await;
    }
    Ok(out)
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let me = std::env::current_exe()?;
    let capstan = match &args.capstan {
        Some(c) => c.clone(),
        None => me.with_file_name("capstan"),
    };
    let greeter = match &args.greeter {
        Some(g) => g.clone(),
        None => capstan_host::testing::find_component("greeter").map_err(anyhow::Error::msg)?,
    };
    eprintln!("starting three control planes");
    let (a, b, c) = tokio::try_join!(
        PrivateControlPlane::start_with(capstan.clone(), false),
        PrivateControlPlane::start_with(capstan.clone(), false),
        PrivateControlPlane::start_with(capstan.clone(), false)
    )?;
    let planes = [a, b, c];

    let idle = idle_memory(&capstan, &greeter, &planes).await?;
    println!(
        "idle host, VmRSS once ready (MiB): {}",
        idle.iter().map(|m| format!("{m:.1}")).collect::<Vec<_>>().join(" / ")
    );
    for (n, pair) in idle.windows(2).enumerate() {
        println!("  cluster {} adds {:.1} MiB", n + 2, pair[1] - pair[0]);
    }

    let mut runs: Vec<(Peer, Run)> = Vec::new();
    for round in 0..args.rounds {
        let order = if round % 2 == 0 { [Peer::One, Peer::Three] } else { [Peer::Three, Peer::One] };
        for peer in order {
            let r = run(&args, &capstan, &greeter, &planes, peer).await?;
            println!(
                "round {round} {:<5} {:>7.1} s {:>7.1} G/s  cpu {:>6.1} s  peak {:>6.1} MiB  ready {:>6.1} MiB",
                peer.name(),
                r.seconds,
                r.per_second,
                r.cpu,
                r.peak_mib,
                r.ready_mib
            );
            runs.push((peer, r));
        }
    }
    let of =
        |peer: Peer, f: fn(&Run) -> f64| median(runs.iter().filter(|(p, _)| *p == peer).map(|(_, r)| f(r)).collect());
    println!("medians over {} rounds, {} Greetings per cluster, 3 clusters:", args.rounds, args.count);
    for peer in [Peer::One, Peer::Three] {
        println!(
            "  {:<5} {:>7.1} G/s  cpu {:>6.1} s ({:.2} ms/Greeting)  peak {:>6.1} MiB  ready {:>6.1} MiB",
            peer.name(),
            of(peer, |r| r.per_second),
            of(peer, |r| r.cpu),
            of(peer, |r| r.cpu) * 1000.0 / (3 * args.count) as f64,
            of(peer, |r| r.peak_mib),
            of(peer, |r| r.ready_mib)
        );
    }
    println!(
        "  one / three: {:.3} of the Greetings/s, {:.3} of the peak memory",
        of(Peer::One, |r| r.per_second) / of(Peer::Three, |r| r.per_second),
        of(Peer::One, |r| r.peak_mib) / of(Peer::Three, |r| r.peak_mib)
    );
    Ok(())
}
