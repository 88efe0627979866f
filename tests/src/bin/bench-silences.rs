//! 1000 Silences on the real control plane against a real Alertmanager:
//! Capstan (`examples/silences` under `capstan run`) against a native
//! controller making the same calls (kube-rs and hyper, in this binary with
//! `--native NS`), each in its own process so its CPU time is its own.
//!
//! ```sh
//! cargo build --profile dist -p capstan-host -p capstan-tests --bin capstan --bin bench-silences
//! tests/build-guests.sh      # silences-e2e.wasm; export CAPSTAN_GUESTS=<the dir it prints> if not found
//! flock -o /tmp/capstan-bench.lock target/dist/bench-silences --count 1000 --rounds 3
//! ```
//!
//! The control plane is the tests' shared one (`capstan_tests::ControlPlane`:
//! `CAPSTAN_E2E_KUBECONFIG=1` with `KUBECONFIG`, or the `capstan` cluster,
//! started if need be). It needs Go once, to build Alertmanager
//! ([`capstan_tests::alertmanager`]).
//!
//! # Peers
//!
//! - `capstan`: `silences-e2e.wasm` (the example built to call
//!   `http://127.0.0.1:19093`) under `capstan run -n NS` (4 workers, the
//!   host's default).
//! - `native`: a kube-rs `Controller` with 4 workers and a pooling hyper
//!   client, making the example's calls: the finalizer; for a Silence with
//!   no silence yet, `GET /api/v2/silences` (a live one of its own?) then
//!   `POST /api/v2/silences`; then `GET /api/v2/silence/{id}` for its
//!   state; the status (`silenceId`, `state`, `Ready`) through the status
//!   subresource; a look again after 60 s.
//!
//! # What runs
//!
//! For each round, each peer in turn (the order rotated each round): a
//! fresh Alertmanager on port 19093 and a fresh namespace; the peer starts
//! and syncs one Silence (warm-up); then the driver creates `--count`
//! Silences, 8 at a time, and polls the namespace every 200 ms until each
//! has `status.silenceId` and `Ready=True`. Then Alertmanager is asked how
//! many live silences it holds (one per Silence: none lost, none doubled),
//! the peer is stopped, the finalizers are taken off and the namespace
//! deleted.
//!
//! # Measured
//!
//! Per run: seconds from the first create to all in sync, Silences per
//! second, the peer's CPU time over that span, the live silences in
//! Alertmanager. Then medians per peer and Capstan's rate over the native
//! one's. The benchmark prints figures and asserts nothing about them.

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use bytes::Bytes;
use capstan_tests::alertmanager::{Alertmanager, E2E_PORT};
use capstan_tests::{ControlPlane, cpu_seconds, free_port, install_crd, random_suffix};
use clap::Parser;
use futures::{StreamExt as _, stream};
use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::watcher;
use kube::{Client, CustomResourceExt as _, ResourceExt as _};
use serde_json::{Value, json};
use silences::{FINALIZER, RECHECK, Silence};

/// Silences the driver creates at a time.
const WRITERS: usize = 8;

/// Workers of every peer.
const CONCURRENCY: u16 = 4;

/// How often the driver looks at the namespace.
const POLL: Duration = Duration::from_millis(200);

#[derive(Parser, Debug)]
struct Args {
    /// Silences per run.
    #[arg(long, default_value_t = 1000)]
    count: usize,
    /// Rounds: each runs both peers once, the order rotated.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Give up on a run after this many seconds.
    #[arg(long, default_value_t = 600)]
    timeout: u64,
    /// The `capstan` binary (default: beside this one).
    #[arg(long)]
    capstan: Option<std::path::PathBuf>,
    /// Run as the native peer in namespace NS (the driver starts it).
    #[arg(long, value_name = "NS")]
    native: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Peer {
    Capstan,
    Native,
}

impl Peer {
    fn name(self) -> &'static str {
        match self {
            Peer::Capstan => "capstan",
            Peer::Native => "native",
        }
    }
}

/// One run's figures.
struct Run {
    seconds: f64,
    cpu: f64,
    live: usize,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    if let Some(ns) = args.native {
        let client = Client::try_default().await.context("no cluster: set KUBECONFIG")?;
        return native(client, ns).await;
    }
    ensure!(args.rounds > 0 && args.count > 0, "nothing to run");
    let plane = ControlPlane::shared().await?;
    let client = plane.client()?;
    install_crd(&client, serde_json::to_value(Silence::crd())?).await?;
    let capstan = match args.capstan {
        Some(path) => path,
        None => std::env::current_exe()?.with_file_name("capstan"),
    };
    ensure!(capstan.is_file(), "no capstan binary at {} (build it, or give --capstan)", capstan.display());
    let component = capstan_host::testing::find_component("silences-e2e").map_err(anyhow::Error::msg)?;
    println!(
        "{} Silences, {} rounds; Alertmanager on 127.0.0.1:{E2E_PORT}; capstan {}; component {}",
        args.count,
        args.rounds,
        capstan.display(),
        component.display()
    );
    let mut runs: Vec<(Peer, Run)> = Vec::new();
    for round in 0..args.rounds {
        let mut order = [Peer::Capstan, Peer::Native];
        order.rotate_left(round % 2);
        for peer in order {
            let run = run(plane, &client, peer, &capstan, &component, args.count, Duration::from_secs(args.timeout))
                .await
                .with_context(|| format!("round {}, {}", round + 1, peer.name()))?;
            println!(
                "round {} {:<8} {:7.2} s to all in sync, {:7.1} Silences/s, cpu {:5.2} s, {} live silences in Alertmanager",
                round + 1,
                peer.name(),
                run.seconds,
                args.count as f64 / run.seconds,
                run.cpu,
                run.live
            );
            runs.push((peer, run));
        }
    }
    let median = |peer: Peer, f: &dyn Fn(&Run) -> f64| {
        let mut v: Vec<f64> = runs.iter().filter(|(p, _)| *p == peer).map(|(_, r)| f(r)).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!("\nmedians of {} rounds", args.rounds);
    for peer in [Peer::Capstan, Peer::Native] {
        println!(
            "{:<8} {:7.1} Silences/s, {:5.2} ms CPU per Silence",
            peer.name(),
            median(peer, &|r| args.count as f64 / r.seconds),
            median(peer, &|r| r.cpu * 1000.0 / args.count as f64)
        );
    }
    let rate = |p| median(p, &|r| args.count as f64 / r.seconds);
    println!("capstan's Silences/s over native's: {:.3}", rate(Peer::Capstan) / rate(Peer::Native));
    Ok(())
}

/// One run of `peer`: see the module's documentation.
async fn run(
    plane: &ControlPlane,
    client: &Client,
    peer: Peer,
    capstan: &Path,
    component: &Path,
    count: usize,
    timeout: Duration,
) -> Result<Run> {
    let alertmanager = Alertmanager::start_on(E2E_PORT).await?;
    let ns = format!("bench-silences-{}-{}", peer.name(), random_suffix(5));
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": ns}}))?).await?;
    let dir = std::env::temp_dir().join(format!("capstan-bench-silences-{}", random_suffix(8)));
    std::fs::create_dir_all(&dir)?;
    let mut command = match peer {
        Peer::Capstan => {
            std::fs::copy(component, dir.join("silences.wasm"))?;
            let mut c = tokio::process::Command::new(capstan);
            c.args(["run", "--log", "warn", "--skip-permission-check", "-n", &ns, "--components"])
                .arg(&dir)
                .args(["--listen", &format!("127.0.0.1:{}", free_port()?)]);
            c
        }
        Peer::Native => {
            let mut c = tokio::process::Command::new(std::env::current_exe()?);
            c.args(["--native", &ns]);
            c
        }
    };
    let mut child = command
        .env("KUBECONFIG", plane.kubeconfig_path())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()?;
    let pid = child.id().context("the peer's pid")?;
    let api: Api<Silence> = Api::namespaced(client.clone(), &ns);
    let result = async {
        // Warm-up: the peer is up, synced and has made one silence.
        api.create(&PostParams::default(), &silence(&ns, "warm-up")?).await?;
        wait_synced(&api, 1, Duration::from_secs(120)).await.context("warming up")?;
        let cpu_before = cpu_seconds(pid)?;
        let start = Instant::now();
        let names: Vec<String> = (0..count).map(|i| format!("s-{i:05}")).collect();
        let created: Vec<Result<()>> = stream::iter(&names)
            .map(|name| {
                let api = api.clone();
                let ns = ns.clone();
                async move {
                    api.create(&PostParams::default(), &silence(&ns, name)?).await?;
                    Ok(())
                }
            })
            .buffer_unordered(WRITERS)
            .collect()
            .await;
        created.into_iter().collect::<Result<Vec<()>>>()?;
        wait_synced(&api, count + 1, timeout).await?;
        let seconds = start.elapsed().as_secs_f64();
        let cpu = cpu_seconds(pid)? - cpu_before;
        let live = alertmanager
            .silences()
            .await?
            .iter()
            .filter(|s| s["status"]["state"] == "active" && s["createdBy"].as_str().is_some_and(|c| c.contains(&ns)))
            .count();
        Ok(Run { seconds, cpu, live })
    }
    .await;
    let _ = child.kill().await;
    let _ = std::fs::remove_dir_all(&dir);
    // No controller any more to take the finalizers off: the driver does.
    let all = api.list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default();
    let patch = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    stream::iter(all)
        .for_each_concurrent(WRITERS, |s| {
            let (api, patch) = (api.clone(), patch.clone());
            async move {
                let _ = api.patch(&s.name_any(), &PatchParams::default(), &patch).await;
            }
        })
        .await;
    let _ = namespaces.delete(&ns, &DeleteParams::default()).await;
    drop(alertmanager);
    result
}

/// A Silence `name` in `ns`, matching alerts labelled `capstan_e2e=NS/NAME`,
/// ending in a day.
fn silence(ns: &str, name: &str) -> Result<Silence> {
    let ends = k8s_openapi::jiff::Timestamp::now() + k8s_openapi::jiff::SignedDuration::from_hours(24);
    Ok(serde_json::from_value(json!({
        "apiVersion": "examples.capstan.dev/v1alpha1",
        "kind": "Silence",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "matchers": [{"name": "capstan_e2e", "value": format!("{ns}/{name}")}],
            "comment": "bench-silences",
            "endsAt": format!("{:.0}", ends),
        },
    }))?)
}

/// Waits until `want` Silences of the namespace have a silence id and
/// `Ready=True`.
async fn wait_synced(api: &Api<Silence>, want: usize, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let list = api.list(&ListParams::default()).await?;
        let synced = list.items.iter().filter(|s| is_synced(s)).count();
        if synced >= want {
            return Ok(());
        }
        ensure!(Instant::now() < deadline, "{synced} of {want} Silences in sync after {timeout:?}");
        tokio::time::sleep(POLL).await;
    }
}

fn is_synced(s: &Silence) -> bool {
    s.status.as_ref().is_some_and(|st| {
        st.silence_id.is_some() && st.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True")
    })
}

// ------------------------------------------------------------ the native peer

/// What the native peer's reconciles share.
struct Ctx {
    client: Client,
    http: HttpClient<HttpConnector, Full<Bytes>>,
    base: String,
}

async fn native(client: Client, ns: String) -> Result<()> {
    let http = HttpClient::builder(hyper_util::rt::TokioExecutor::new()).build_http();
    let ctx = Arc::new(Ctx { client: client.clone(), http, base: format!("http://127.0.0.1:{E2E_PORT}") });
    Controller::new(Api::<Silence>::namespaced(client, &ns), watcher::Config::default())
        .with_config(ControllerConfig::default().concurrency(CONCURRENCY))
        .run(reconcile, |_, _, _| Action::requeue(Duration::from_secs(1)), ctx)
        .for_each(|_| async {})
        .await;
    Ok(())
}

/// A reconcile's failure, as kube-runtime wants it (a `std` error).
#[derive(Debug)]
struct Failed(String);

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Failed {}

type Failure = kube::runtime::finalizer::Error<Failed>;

async fn reconcile(s: Arc<Silence>, ctx: Arc<Ctx>) -> Result<Action, Failure> {
    let api: Api<Silence> = Api::namespaced(ctx.client.clone(), &s.namespace().unwrap_or_default());
    finalizer(&api, FINALIZER, s, |event| async {
        match event {
            Finalizer::Apply(s) => sync(&ctx, &api, &s).await.map(|()| Action::requeue(RECHECK)),
            Finalizer::Cleanup(s) => expire(&ctx, &s).await.map(|()| Action::await_change()),
        }
        .map_err(|e| Failed(format!("{e:#}")))
    })
    .await
}

/// One request to Alertmanager; the status and the body.
async fn call(ctx: &Ctx, method: &str, path: &str, body: Option<&Value>) -> Result<(u16, Value)> {
    let mut request = hyper::Request::builder().method(method).uri(format!("{}{path}", ctx.base));
    if body.is_some() {
        request = request.header("content-type", "application/json");
    }
    let body = body.map(|b| Bytes::from(b.to_string())).unwrap_or_default();
    let response = ctx.http.request(request.body(Full::new(body))?).await?;
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await?.to_bytes();
    Ok((status, serde_json::from_slice(&bytes).unwrap_or(Value::Null)))
}

fn created_by(s: &Silence) -> String {
    s.spec
        .created_by
        .clone()
        .unwrap_or_else(|| format!("capstan/{}/{}", s.namespace().unwrap_or_default(), s.name_any()))
}

/// Whether Alertmanager's silence `held` is what the spec asks for.
fn up_to_date(s: &Silence, held: &Value) -> bool {
    let key = |m: &Value| {
        (
            m["name"].as_str().unwrap_or_default().to_owned(),
            m["value"].as_str().unwrap_or_default().to_owned(),
            m["isRegex"].as_bool().unwrap_or(false),
            m["isEqual"].as_bool().unwrap_or(true),
        )
    };
    let mut want: Vec<_> =
        s.spec.matchers.iter().map(|m| (m.name.clone(), m.value.clone(), m.is_regex, m.is_equal)).collect();
    let mut have: Vec<_> = held["matchers"].as_array().map(|a| a.iter().map(key).collect()).unwrap_or_default();
    want.sort();
    have.sort();
    let seconds = |t: &str| t.split(['.', 'Z', '+']).next().unwrap_or_default().to_owned();
    want == have
        && held["comment"] == s.spec.comment.as_str()
        && seconds(&s.spec.ends_at) == seconds(held["endsAt"].as_str().unwrap_or_default())
}

async fn get(ctx: &Ctx, id: &str) -> Result<Option<Value>> {
    let (status, body) = call(ctx, "GET", &format!("/api/v2/silence/{id}"), None).await?;
    match status {
        404 => Ok(None),
        200 => Ok(Some(body)),
        other => anyhow::bail!("Alertmanager answered {other}"),
    }
}

async fn post(ctx: &Ctx, s: &Silence, id: Option<&str>) -> Result<String> {
    let mut body = json!({
        "matchers": s.spec.matchers,
        "startsAt": format!("{:.0}", k8s_openapi::jiff::Timestamp::now()),
        "endsAt": s.spec.ends_at,
        "createdBy": created_by(s),
        "comment": s.spec.comment,
    });
    if let Some(id) = id {
        body["id"] = json!(id);
    }
    let (status, answer) = call(ctx, "POST", "/api/v2/silences", Some(&body)).await?;
    ensure!(status == 200, "Alertmanager answered {status}: {answer}");
    answer["silenceID"].as_str().map(str::to_owned).context("no silenceID")
}

async fn sync(ctx: &Ctx, api: &Api<Silence>, s: &Silence) -> Result<()> {
    let known = s.status.as_ref().and_then(|st| st.silence_id.clone());
    let held = match &known {
        Some(id) => get(ctx, id).await?,
        None => None,
    };
    let live = held.as_ref().filter(|h| h["status"]["state"] != "expired");
    let id = match (&known, live) {
        (Some(id), Some(h)) if up_to_date(s, h) => id.clone(),
        (Some(id), Some(_)) => post(ctx, s, Some(id)).await?,
        _ => {
            // A live silence of its own an earlier pass made, else a new one.
            let (_, all) = call(ctx, "GET", "/api/v2/silences", None).await?;
            let by = created_by(s);
            let own = all
                .as_array()
                .into_iter()
                .flatten()
                .find(|h| h["status"]["state"] != "expired" && h["createdBy"] == by.as_str() && up_to_date(s, h));
            match own.and_then(|h| h["id"].as_str()) {
                Some(id) => id.to_owned(),
                None => post(ctx, s, None).await?,
            }
        }
    };
    let state = get(ctx, &id).await?.and_then(|h| h["status"]["state"].as_str().map(str::to_owned));
    let state = state.unwrap_or_else(|| "unknown".to_owned());
    let status = json!({"status": {
        "silenceId": id,
        "state": state,
        "observedGeneration": s.metadata.generation,
        "conditions": [{
            "type": "Ready", "status": "True", "reason": "Synced",
            "message": format!("silence {id} is {state}"),
            "lastTransitionTime": format!("{:.0}", k8s_openapi::jiff::Timestamp::now()),
        }],
    }});
    api.patch_status(&s.name_any(), &PatchParams::default(), &Patch::Merge(status)).await?;
    Ok(())
}

async fn expire(ctx: &Ctx, s: &Silence) -> Result<()> {
    if let Some(id) = s.status.as_ref().and_then(|st| st.silence_id.as_deref()) {
        let (status, _) = call(ctx, "DELETE", &format!("/api/v2/silence/{id}"), None).await?;
        ensure!(status == 200 || status == 404, "Alertmanager answered {status}");
    }
    Ok(())
}
