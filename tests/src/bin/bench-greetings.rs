//! Throughput of the greeter on the real control plane: Capstan (the
//! greeter component under `capstan run`) against a native kube-rs
//! controller doing the same work, in the same run, each in its own process
//! so CPU time and peak memory are its own.
//!
//! ```sh
//! cargo build --release -p capstan-host -p capstan-tests --bin bench-greetings
//! tests/build-guests.sh
//! target/release/bench-greetings --count 1000      # KUBECONFIG: a running control plane
//! ```
//!
//! Measured per implementation: wall time from the first create until every
//! Greeting is Ready with observedGeneration 1, Greetings per second, the
//! controller process's CPU time (user + system, from /proc) over that window,
//! and its peak resident memory (VmHWM).

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use clap::Parser;
use futures::{StreamExt, TryStreamExt, stream};
use greeter::{FINALIZER, Greeting, desired};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde_json::json;

#[derive(Parser, Debug)]
struct Args {
    /// Greetings to create.
    #[arg(long, default_value_t = 1000)]
    count: usize,
    /// Run the native controller in namespace NS until killed (used by the
    /// driver itself).
    #[arg(long, value_name = "NS")]
    native: Option<String>,
    /// The capstan binary (default: next to this one).
    #[arg(long)]
    capstan: Option<PathBuf>,
    /// The greeter component (default: found like the tests find it).
    #[arg(long)]
    greeter: Option<PathBuf>,
    /// Which implementations to run, in order.
    #[arg(long, value_delimiter = ',', default_value = "capstan,native")]
    only: Vec<String>,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let client = Client::try_default().await.context("no cluster: set KUBECONFIG")?;
    if let Some(ns) = args.native {
        return native_controller(client, ns).await;
    }
    let me = std::env::current_exe()?;
    let capstan = args.capstan.unwrap_or_else(|| me.with_file_name("capstan"));
    let greeter = match args.greeter {
        Some(g) => g,
        None => capstan_host::testing::find_component("greeter").map_err(anyhow::Error::msg)?,
    };
    install_crd(&client, &greeter).await?;
    println!(
        "greetings: {}, machine: {} cores",
        args.count,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!("{:<8} {:>9} {:>13} {:>10} {:>10}", "impl", "wall s", "greetings/s", "cpu s", "peak MiB");
    let mut results = Vec::new();
    for which in &args.only {
        let ns = format!("bench-{which}-{}", capstan_tests::random_suffix(5));
        create_namespace(&client, &ns).await?;
        let mut child = match which.as_str() {
            "capstan" => tokio::process::Command::new(&capstan)
                .args(["run", "--log", "warn", "-n", &ns])
                .arg(&greeter)
                .stdout(Stdio::null())
                .spawn()
                .with_context(|| format!("starting {}", capstan.display()))?,
            "native" => tokio::process::Command::new(&me)
                .args(["--native", &ns])
                .stdout(Stdio::null())
                .spawn()
                .context("starting the native controller")?,
            other => bail!("unknown implementation {other}"),
        };
        let pid = child.id().context("child pid")?;
        // Let it connect and sync its (empty) caches.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let cpu0 = capstan_tests::cpu_seconds(pid)?;
        let start = Instant::now();
        create_greetings(&client, &ns, args.count).await?;
        wait_all_ready(&client, &ns, args.count, Duration::from_secs(600)).await?;
        let wall = start.elapsed().as_secs_f64();
        let cpu = capstan_tests::cpu_seconds(pid)? - cpu0;
        let peak = capstan_tests::peak_rss_mib(pid)?;
        child.kill().await.ok();
        let rate = args.count as f64 / wall;
        println!("{which:<8} {wall:>9.2} {rate:>13.1} {cpu:>10.2} {peak:>10.1}");
        results.push((which.clone(), rate));
        let _ = Api::<Namespace>::all(client.clone()).delete(&ns, &Default::default()).await;
    }
    if let (Some((_, c)), Some((_, n))) =
        (results.iter().find(|r| r.0 == "capstan"), results.iter().find(|r| r.0 == "native"))
    {
        println!("throughput capstan/native: {:.2}", c / n);
    }
    Ok(())
}

async fn install_crd(client: &Client, greeter: &std::path::Path) -> Result<()> {
    let engine = capstan_host::engine::Engine::new(Default::default())?;
    let runtime =
        capstan_host::runtime::Runtime::new(&engine, Default::default()).map_err(|e| anyhow::anyhow!("{e}"))?;
    let loaded = capstan_host::component::Loader::new(runtime, None).load(greeter).await?;
    capstan_tests::install_crd(client, loaded.manifest.crds[0].clone()).await?;
    Ok(())
}

async fn create_namespace(client: &Client, name: &str) -> Result<()> {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await?;
    Ok(())
}

async fn create_greetings(client: &Client, ns: &str, count: usize) -> Result<()> {
    let api: Api<Greeting> = Api::namespaced(client.clone(), ns);
    stream::iter(0..count)
        .map(|i| {
            let api = api.clone();
            async move {
                let g: Greeting = serde_json::from_value(json!({
                    "apiVersion": "examples.capstan.dev/v1alpha1",
                    "kind": "Greeting",
                    "metadata": {"name": format!("g-{i}")},
                    "spec": {"message": format!("hello {i}"), "replicas": 1},
                }))?;
                api.create(&PostParams::default(), &g).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(8)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

async fn wait_all_ready(client: &Client, ns: &str, count: usize, timeout: Duration) -> Result<()> {
    let api: Api<Greeting> = Api::namespaced(client.clone(), ns);
    let start = Instant::now();
    loop {
        let ready = api
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|g| {
                g.status.as_ref().is_some_and(|s| {
                    s.observed_generation == Some(1)
                        && s.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                })
            })
            .count();
        if ready >= count {
            return Ok(());
        }
        if start.elapsed() > timeout {
            bail!("only {ready} of {count} greetings ready after {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

// ------------------------------------------------------------ the native baseline

struct Ctx {
    client: Client,
    recorder: Recorder,
}

const MANAGER: &str = "native-greeter";

/// The greeter as a plain kube-rs controller: the same objects (computed by
/// the greeter's own `desired`), server-side apply, finalizer, status, and a
/// `Created` event on first sight.
async fn native_controller(client: Client, ns: String) -> Result<()> {
    let greetings: Api<Greeting> = Api::namespaced(client.clone(), &ns);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let reporter = Reporter { controller: MANAGER.into(), instance: None };
    let ctx = Arc::new(Ctx { client: client.clone(), recorder: Recorder::new(client, reporter) });
    Controller::new(greetings, watcher::Config::default())
        .owns(cms, watcher::Config::default())
        .owns(deploys, watcher::Config::default())
        .with_config(ControllerConfig::default().concurrency(4))
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
            Finalizer::Apply(g) => apply(&g, &ctx).await,
            Finalizer::Cleanup(_) => Ok(Action::await_change()),
        }
    })
    .await
}

async fn apply(g: &Greeting, ctx: &Ctx) -> Result<Action, kube::Error> {
    let ns = g.namespace().unwrap_or_default();
    let name = g.name_any();
    let deploys: Api<Deployment> = Api::namespaced(ctx.client.clone(), &ns);
    let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ns);
    let replicas = deploys
        .get_opt(&greeter::deployment_name(&name))
        .await?
        .and_then(|d| d.status)
        .and_then(|s| s.replicas)
        .unwrap_or(0);
    let (mut cm, mut deploy, status) = desired(g, replicas);
    let owner = g.controller_owner_ref(&()).expect("a stored Greeting has a name and uid");
    cm.metadata.owner_references = Some(vec![owner.clone()]);
    deploy.metadata.owner_references = Some(vec![owner]);
    let params = PatchParams::apply(MANAGER).force();
    cms.patch(&greeter::configmap_name(&name), &params, &Patch::Apply(&cm)).await?;
    deploys.patch(&greeter::deployment_name(&name), &params, &Patch::Apply(&deploy)).await?;
    if g.status.as_ref() != Some(&status) {
        let first = g.status.is_none();
        let api: Api<Greeting> = Api::namespaced(ctx.client.clone(), &ns);
        let body = json!({"apiVersion": "examples.capstan.dev/v1alpha1", "kind": "Greeting", "status": status});
        api.patch_status(&name, &params, &Patch::Apply(&body)).await?;
        if first {
            let event = Event {
                type_: EventType::Normal,
                reason: "Created".into(),
                note: Some(format!("greeting {name} set up")),
                action: "Reconcile".into(),
                secondary: None,
            };
            ctx.recorder.publish(&event, &g.object_ref(&())).await?;
        }
    }
    Ok(Action::requeue(Duration::from_secs(300)))
}
