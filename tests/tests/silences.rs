//! The silences operator (`examples/silences`) on the real API server
//! against a real Prometheus Alertmanager ([`capstan_tests::alertmanager`]):
//! `Silence` resources converge (create, update, drift corrected, expired
//! behind the finalizer on delete), and an Alertmanager stopped for 20 s
//! makes reconciles fail transiently and back off, then converge with no
//! silence lost or duplicated. And, on the same real host, a component
//! that calls origins it did not declare (another loopback port, the API
//! server's address, the cloud metadata address) is refused every time,
//! before a connection, while the host serves its other requests (the
//! `fetcher` fixture, which declares loopback ports 18000-18099). And
//! `capstan run --egress-ca` trusts an internal CA for HTTPS, which a host
//! without it refuses.
//!
//! The component declares the one origin it calls, fixed when it is built,
//! so the tests run its e2e build, `silences-e2e.wasm` from
//! `tests/build-guests.sh`, which calls `http://127.0.0.1:19093`
//! ([`E2E_PORT`]); every test here starts its Alertmanager on that port,
//! one test at a time.
//!
//! Needs `silences-e2e.wasm` and `fetcher.wasm` from `tests/build-guests.sh`.
//! Run: `CAPSTAN_GUESTS=$(tests/build-guests.sh) cargo test -p capstan-tests
//! --test silences` (needs Go: the first run builds Alertmanager into
//! `$CAPSTAN_CACHE/alertmanager`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use capstan_host::control::controller::State;
use capstan_host::serve::host::{Host, HostBuilder};
use capstan_host::testing::find_component;
use capstan_tests::alertmanager::{Alertmanager, E2E_PORT};
use capstan_tests::{ControlPlane, TestNamespace, wait_for};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::jiff::{Timestamp, ToSpan as _};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use serde_json::{Value, json};

/// How long a change may take to reach Alertmanager and the status.
const TIMEOUT: Duration = Duration::from_secs(40);

/// How often the example looks at a synced silence again
/// (`silences::RECHECK`), plus time for that pass: a silence expired in
/// Alertmanager directly is made again within this.
const NEXT_LOOK: Duration = Duration::from_secs(60 + 15);

/// How long Alertmanager stays down in the outage test.
const OUTAGE: Duration = Duration::from_secs(20);

/// The matcher label that ties a silence to its `Silence` resource
/// (`<namespace>/<name>`): every resource of these tests has it.
const OWNER_LABEL: &str = "capstan_e2e";

/// Held by each test that starts an Alertmanager on [`E2E_PORT`].
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn silences(ns: &TestNamespace) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("examples.capstan.dev", "v1alpha1", "Silence");
    Api::namespaced_with(ns.client(), ns.name(), &ApiResource::from_gvk_with_plural(&gvk, "silences"))
}

/// The host, running `silences-e2e` in `ns`, after checking that the
/// component calls the Alertmanager `am` (a stale build would call
/// another), once its controller runs (see [`wait_running`]).
async fn start_host(ns: &TestNamespace, am: &Alertmanager) -> Result<Host> {
    let component = find_component("silences-e2e").map_err(anyhow::Error::msg)?;
    let host = HostBuilder::new(ns.client())
        .namespace(Some(ns.name().to_owned()))
        .install_crds(true)
        .component(component)
        .start()
        .await?;
    let controller = host.controller("silences").context("no controller `silences`")?;
    let manifest = &controller.reconciler().component().manifest;
    let origins: Vec<&str> = manifest.egress.origins().iter().map(|o| o.as_str()).collect();
    ensure!(
        origins == [am.url()],
        "silences-e2e.wasm calls {origins:?}, not the Alertmanager of the tests ({}): build it again with \
         tests/build-guests.sh",
        am.url()
    );
    wait_running(&host, "silences").await?;
    Ok(host)
}

/// Waits until `host`'s controller `name` runs: it has listed what there
/// is and queued it, so an object made from now on reaches it through its
/// watch alone. (One made while it starts may be queued by both, and
/// reconciled twice; `silences_made_while_no_host_ran_get_one_silence_each_when_it_starts`
/// is about that.)
async fn wait_running(host: &Host, name: &str) -> Result<()> {
    let controller = host.controller(name).with_context(|| format!("no controller `{name}`"))?;
    wait_for(TIMEOUT, || async { (controller.state() == State::Running).then_some(()) })
        .await
        .with_context(|| format!("controller {name} is {:?}", controller.state()))
}

/// A `Silence` named `name` in `ns`, tied to its silences by
/// [`OWNER_LABEL`], silencing `alertname=<alert>` for an hour.
fn silence(ns: &TestNamespace, name: &str, alert: &str, comment: &str) -> Result<DynamicObject> {
    let ends = (Timestamp::now() + 1.hour()).strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    Ok(serde_json::from_value(json!({
        "apiVersion": "examples.capstan.dev/v1alpha1", "kind": "Silence",
        "metadata": {"name": name},
        "spec": {
            "matchers": [
                {"name": OWNER_LABEL, "value": format!("{}/{name}", ns.name())},
                {"name": "alertname", "value": alert},
            ],
            "comment": comment,
            "endsAt": ends,
        },
    }))?)
}

fn ready(s: &DynamicObject) -> Option<&Value> {
    s.data["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == "Ready")
}

/// The resource's `Ready` reason when its status describes its current
/// generation.
fn reason_now(s: &DynamicObject) -> Option<&str> {
    if s.data["status"]["observedGeneration"] != json!(s.metadata.generation?) {
        return None;
    }
    ready(s)?["reason"].as_str()
}

/// The resource's silence id, once its status says `Ready=True`
/// (`Synced`) for its current generation.
fn synced_id(s: &DynamicObject) -> Option<String> {
    (reason_now(s) == Some("Synced") && ready(s)?["status"] == "True")
        .then(|| s.data["status"]["silenceId"].as_str().map(str::to_owned))?
}

/// Waits until `name` is synced for its current generation; returns it.
async fn wait_synced(api: &Api<DynamicObject>, name: &str, timeout: Duration) -> Result<DynamicObject> {
    let found = wait_for(timeout, || async { api.get(name).await.ok().filter(|s| synced_id(s).is_some()) }).await;
    shown(found, api, name, "is not synced").await
}

/// `result`, or its error with what the resource `name` looks like now
/// and `what` went wrong.
async fn shown<T>(result: Result<T>, api: &Api<DynamicObject>, name: &str, what: &str) -> Result<T> {
    match result {
        Ok(value) => Ok(value),
        Err(e) => {
            let now = api.get_opt(name).await.map(|s| s.map(|s| s.data.to_string()));
            Err(e).with_context(|| format!("{name} {what}: {now:?}"))
        }
    }
}

/// The silences Alertmanager holds for the resource `name` of `ns` that
/// are not expired (active or pending).
async fn live_for(am: &Alertmanager, ns: &TestNamespace, name: &str) -> Result<Vec<Value>> {
    let owner = format!("{}/{name}", ns.name());
    Ok(am
        .silences()
        .await?
        .into_iter()
        .filter(|s| s["status"]["state"] != "expired")
        .filter(|s| {
            s["matchers"].as_array().is_some_and(|m| m.iter().any(|m| m["name"] == OWNER_LABEL && m["value"] == *owner))
        })
        .collect())
}

/// The one live silence of the resource `name`; fails when there are none
/// or more than one.
async fn the_silence_of(am: &Alertmanager, ns: &TestNamespace, name: &str) -> Result<Value> {
    let mut live = live_for(am, ns, name).await?;
    ensure!(live.len() == 1, "{name} has {} live silences in Alertmanager, not one: {live:?}", live.len());
    Ok(live.remove(0))
}

/// A silence's matchers as `name=value` pairs, sorted.
fn matchers(silence: &Value) -> Vec<String> {
    let mut pairs: Vec<String> = silence["matchers"]
        .as_array()
        .map(|m| {
            m.iter()
                .map(|m| format!("{}={}", m["name"].as_str().unwrap_or(""), m["value"].as_str().unwrap_or("")))
                .collect()
        })
        .unwrap_or_default();
    pairs.sort();
    pairs
}

/// Events about the Silence `name` of `ns` with `reason`.
async fn events(ns: &TestNamespace, name: &str, reason: &str) -> Vec<Event> {
    let list = ns.api::<Event>().list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default();
    list.into_iter()
        .filter(|e| {
            e.regarding
                .as_ref()
                .is_some_and(|r| r.kind.as_deref() == Some("Silence") && r.name.as_deref() == Some(name))
        })
        .filter(|e| e.reason.as_deref() == Some(reason))
        .collect()
}

async fn merge(api: &Api<DynamicObject>, name: &str, patch: Value) -> Result<()> {
    api.patch(name, &PatchParams::default(), &Patch::Merge(patch)).await?;
    Ok(())
}

/// Waits until `name` is gone (its finalizer removed).
async fn wait_gone(api: &Api<DynamicObject>, name: &str, timeout: Duration) -> Result<()> {
    let gone = wait_for(timeout, || async { matches!(api.get_opt(name).await, Ok(None)).then_some(()) }).await;
    shown(gone, api, name, "is still there").await
}

/// Deletes `name` and waits until it is gone.
async fn delete_and_wait(api: &Api<DynamicObject>, name: &str, timeout: Duration) -> Result<()> {
    api.delete(name, &DeleteParams::default()).await?;
    wait_gone(api, name, timeout).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_silence_is_created_updated_made_again_after_drift_and_expired_on_delete() -> Result<()> {
    let _serial = ONE_AT_A_TIME.lock().await;
    ControlPlane::shared().await?;
    let am = Alertmanager::start_on(E2E_PORT).await?;
    let ns = TestNamespace::new("silences").await?;
    let host = start_host(&ns, &am).await?;
    let api = silences(&ns);

    // Created: one silence with the resource's matchers and comment, its
    // id and state in the status.
    let created = silence(&ns, "maintenance", "NodeDown", "planned maintenance")?;
    wait_for(TIMEOUT, || async { api.create(&PostParams::default(), &created).await.ok() }).await?;
    let synced = wait_synced(&api, "maintenance", TIMEOUT).await?;
    let id = synced_id(&synced).context("an id")?;
    assert_eq!(synced.data["status"]["state"], "active", "{}", synced.data["status"]);
    let held = the_silence_of(&am, &ns, "maintenance").await?;
    assert_eq!(held["id"], id.as_str(), "the status names the silence Alertmanager holds");
    assert_eq!(held["status"]["state"], "active");
    assert_eq!(held["comment"], "planned maintenance");
    assert_eq!(matchers(&held), ["alertname=NodeDown".to_owned(), format!("{OWNER_LABEL}={}/maintenance", ns.name())]);
    assert!(synced.metadata.finalizers.iter().flatten().any(|f| f == "silences.examples.capstan.dev/expire"));

    // Updated: matchers and comment changed; still one live silence, now
    // the new one (Alertmanager may give it a new id: it replaces a
    // silence whose matchers change), and the status names it.
    merge(
        &api,
        "maintenance",
        json!({"spec": {
            "matchers": [
                {"name": OWNER_LABEL, "value": format!("{}/maintenance", ns.name())},
                {"name": "alertname", "value": "NodeUnreachable"},
            ],
            "comment": "maintenance moved",
        }}),
    )
    .await?;
    let updated = wait_synced(&api, "maintenance", TIMEOUT).await?;
    assert_eq!(updated.metadata.generation, Some(2));
    let id = synced_id(&updated).context("an id")?;
    let held = the_silence_of(&am, &ns, "maintenance").await?;
    assert_eq!(held["id"], id.as_str(), "the status names the silence Alertmanager holds");
    assert_eq!(held["comment"], "maintenance moved");
    assert_eq!(
        matchers(&held),
        ["alertname=NodeUnreachable".to_owned(), format!("{OWNER_LABEL}={}/maintenance", ns.name())]
    );

    // Drift: someone expires it in Alertmanager; the next look (every
    // minute) makes it again and says so with a Warning.
    am.expire(&id).await?;
    assert!(live_for(&am, &ns, "maintenance").await?.is_empty());
    let again = wait_for(NEXT_LOOK, || async {
        api.get("maintenance").await.ok().and_then(|s| synced_id(&s)).filter(|new| *new != id)
    })
    .await;
    let again = shown(again, &api, "maintenance", "was not made again after its silence expired").await?;
    let held = the_silence_of(&am, &ns, "maintenance").await?;
    assert_eq!(held["id"], again.as_str());
    assert_eq!(held["comment"], "maintenance moved");
    assert_eq!(am.silence(&id).await?.context("the expired one is still listed")?["status"]["state"], "expired");
    let recreated =
        wait_for(TIMEOUT, || async { Some(events(&ns, "maintenance", "Recreated").await).filter(|e| !e.is_empty()) })
            .await?;
    assert_eq!(recreated[0].type_.as_deref(), Some("Warning"));
    assert!(recreated[0].note.as_deref().is_some_and(|n| n.contains(&id)), "{:?}", recreated[0].note);

    // Deleted: behind the finalizer the silence is expired, then the
    // resource goes.
    delete_and_wait(&api, "maintenance", TIMEOUT).await?;
    assert!(live_for(&am, &ns, "maintenance").await?.is_empty(), "no live silence after the delete");
    assert_eq!(am.silence(&again).await?.context("still listed")?["status"]["state"], "expired");
    let expired =
        wait_for(TIMEOUT, || async { Some(events(&ns, "maintenance", "Expired").await).filter(|e| !e.is_empty()) })
            .await?;
    assert_eq!(expired[0].type_.as_deref(), Some("Normal"));

    host.shutdown().await;
    ns.cleanup().await
}

#[tokio::test(flavor = "multi_thread")]
async fn an_alertmanager_down_for_20_s_fails_reconciles_transiently_then_converges_with_nothing_lost_or_doubled()
-> Result<()> {
    let _serial = ONE_AT_A_TIME.lock().await;
    ControlPlane::shared().await?;
    let mut am = Alertmanager::start_on(E2E_PORT).await?;
    let ns = TestNamespace::new("silences-outage").await?;
    let host = start_host(&ns, &am).await?;
    let api = silences(&ns);

    // Three silences in sync before the outage.
    let mut before = std::collections::BTreeMap::new();
    for name in ["kept", "changed", "removed"] {
        let s = silence(&ns, name, "NodeDown", &format!("{name} before the outage"))?;
        wait_for(TIMEOUT, || async { api.create(&PostParams::default(), &s).await.ok() }).await?;
    }
    for name in ["kept", "changed", "removed"] {
        let synced = wait_synced(&api, name, TIMEOUT).await?;
        before.insert(name, synced_id(&synced).context("an id")?);
    }
    let controller = host.controller("silences").context("the controller")?;
    let failed_before = controller.counts().failed;

    // Alertmanager down; meanwhile one is added, one changed, one deleted.
    am.stop().await;
    let down_since = tokio::time::Instant::now();
    let added = silence(&ns, "added", "DiskFull", "added during the outage")?;
    api.create(&PostParams::default(), &added).await?;
    merge(&api, "changed", json!({"spec": {"comment": "changed during the outage"}})).await?;
    api.delete("removed", &DeleteParams::default()).await?;

    // Each fails transiently: the guest's status says `Unreachable`, the
    // host sets no `Reconciled` condition (that is for terminal failures),
    // and the deleted one keeps its finalizer.
    for name in ["added", "changed"] {
        let s =
            wait_for(TIMEOUT, || async { api.get(name).await.ok().filter(|s| reason_now(s) == Some("Unreachable")) })
                .await;
        let s = shown(s, &api, name, "does not say Unreachable").await?;
        assert_eq!(ready(&s).map(|c| &c["status"]), Some(&json!("False")), "{}", s.data["status"]);
        let conditions = s.data["status"]["conditions"].as_array().cloned().unwrap_or_default();
        assert!(conditions.iter().all(|c| c["type"] != "Reconciled"), "not terminal: {conditions:?}");
    }
    let counts = wait_for(TIMEOUT, || async { Some(controller.counts()).filter(|c| c.failed >= failed_before + 3) })
        .await
        .with_context(|| format!("three objects did not fail: {:?}", controller.counts()))?;
    let error = counts.last_error.clone().unwrap_or_default();
    assert!(error.contains("transient"), "a transient failure: {error}");
    let removed = api.get("removed").await?;
    assert!(removed.metadata.deletion_timestamp.is_some());
    assert!(removed.metadata.finalizers.iter().flatten().any(|f| f == "silences.examples.capstan.dev/expire"));

    // Retried with backoff while it is down, not in a hot loop: with the
    // default backoff (1 s doubling) a handful of attempts per object.
    tokio::time::sleep(OUTAGE.saturating_sub(down_since.elapsed())).await;
    let failures = controller.counts().failed - failed_before;
    assert!(failures <= 3 * 8, "{failures} failed reconciles of 3 objects in {} s: not backing off", OUTAGE.as_secs());
    assert!(api.get("removed").await.is_ok(), "the finalizer held while Alertmanager was down");

    // Back on the same port, with the silences it had: everything
    // converges, exactly one live silence per resource, none for the
    // deleted one.
    am.restart().await?;
    let kept = wait_synced(&api, "kept", Duration::from_secs(60)).await?;
    let added = wait_synced(&api, "added", Duration::from_secs(60)).await?;
    let changed = wait_synced(&api, "changed", Duration::from_secs(60)).await?;
    wait_gone(&api, "removed", Duration::from_secs(60)).await?;

    let held = the_silence_of(&am, &ns, "kept").await?;
    assert_eq!(held["id"], before["kept"].as_str(), "kept, untouched");
    assert_eq!(synced_id(&kept).as_deref(), Some(before["kept"].as_str()));
    let held = the_silence_of(&am, &ns, "added").await?;
    assert_eq!(Some(held["id"].as_str().unwrap_or_default().to_owned()), synced_id(&added));
    assert_eq!(held["comment"], "added during the outage");
    let held = the_silence_of(&am, &ns, "changed").await?;
    assert_eq!(Some(held["id"].as_str().unwrap_or_default().to_owned()), synced_id(&changed));
    assert_eq!(held["comment"], "changed during the outage");
    assert!(live_for(&am, &ns, "removed").await?.is_empty(), "the deleted one's silence is expired");
    assert_eq!(am.silence(&before["removed"]).await?.context("still listed")?["status"]["state"], "expired");
    let live: Vec<Value> = am.silences().await?.into_iter().filter(|s| s["status"]["state"] != "expired").collect();
    assert_eq!(live.len(), 3, "one live silence per resource, nothing else: {live:?}");

    for name in ["kept", "added", "changed"] {
        delete_and_wait(&api, name, TIMEOUT).await?;
    }
    host.shutdown().await;
    am.stop().await;
    ns.cleanup().await
}

// The host queues every object it lists at start, and its watch may queue
// one a second time (see `control::controller`): a Silence made while no
// host ran is reconciled, perhaps twice, right after the host starts. It
// must get one silence all the same.
#[tokio::test(flavor = "multi_thread")]
async fn silences_made_while_no_host_ran_get_one_silence_each_when_it_starts() -> Result<()> {
    let _serial = ONE_AT_A_TIME.lock().await;
    ControlPlane::shared().await?;
    let am = Alertmanager::start_on(E2E_PORT).await?;
    let ns = TestNamespace::new("silences-waiting").await?;
    // A first host installs the CRD; the resources are made once it is gone.
    let host = start_host(&ns, &am).await?;
    host.shutdown().await;
    drop(host);
    let api = silences(&ns);
    let names: Vec<String> = (0..5).map(|i| format!("waiting-{i}")).collect();
    for name in &names {
        api.create(&PostParams::default(), &silence(&ns, name, "NodeDown", "made while no host ran")?).await?;
    }

    let host = start_host(&ns, &am).await?;
    for name in &names {
        let synced = wait_synced(&api, name, TIMEOUT).await?;
        let held = the_silence_of(&am, &ns, name).await?;
        assert_eq!(Some(held["id"].as_str().unwrap_or_default().to_owned()), synced_id(&synced));
    }

    for name in &names {
        delete_and_wait(&api, name, TIMEOUT).await?;
    }
    host.shutdown().await;
    ns.cleanup().await
}

/// A tiny HTTP server on loopback that answers every request with `hello`
/// and counts the connections it accepted.
struct Server {
    port: u16,
    connections: Arc<AtomicUsize>,
}

impl Server {
    /// On `listener`, until the test ends.
    fn serve(listener: tokio::net::TcpListener) -> Self {
        let port = listener.local_addr().expect("a bound address").port();
        let connections = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&connections);
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move { capstan_tests::answer_hello(&mut stream).await });
            }
        });
        Self { port, connections }
    }

    /// On a free port among those the `fetcher` fixture declares
    /// (18000-18099).
    async fn declared() -> Result<Self> {
        for port in 18000..18100 {
            if let Ok(listener) = tokio::net::TcpListener::bind(("127.0.0.1", port)).await {
                return Ok(Self::serve(listener));
            }
        }
        anyhow::bail!("no free port in 18000-18099")
    }

    /// On a free (ephemeral) port, which the `fetcher` fixture does not
    /// declare.
    async fn undeclared() -> Result<Self> {
        let server = Self::serve(tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?);
        ensure!(!(18000..18100).contains(&server.port), "an ephemeral port among the declared ones");
        Ok(server)
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/ok", self.port)
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

/// The value of one series of the process's metrics; 0 when absent.
fn metric(series: &str) -> f64 {
    let scrape = capstan_host::metrics::metrics().encode();
    scrape.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok()).unwrap_or(0.0)
}

/// Sets the `fetch` behaviour of the ConfigMap `name` (created if need
/// be) to GET each of `urls` `times` times, and returns the result lines
/// of its `-fetch` child once there are as many as asked for.
async fn fetch(ns: &TestNamespace, name: &str, urls: &[String], times: usize) -> Result<Vec<String>> {
    let configmaps = ns.api::<ConfigMap>();
    let cm = json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
        "data": {"behaviour": "fetch", "urls": urls.join(","), "times": times.to_string()},
    });
    configmaps.patch(name, &PatchParams::apply("capstan-tests").force(), &Patch::Apply(cm)).await?;
    let want = urls.len() * times;
    let child = format!("{name}-fetch");
    wait_for(TIMEOUT, || async {
        let results = configmaps.get(&child).await.ok()?.data?.remove("results")?;
        let lines: Vec<String> = results.lines().map(str::to_owned).collect();
        (lines.len() == want).then_some(lines)
    })
    .await
    .with_context(|| format!("no {want} results in {child}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn undeclared_origins_are_refused_every_time_on_the_real_host_and_it_serves_on() -> Result<()> {
    let plane = ControlPlane::shared().await?;
    let ns = TestNamespace::new("egress-refused").await?;
    let host = HostBuilder::new(ns.client())
        .namespace(Some(ns.name().to_owned()))
        .component(find_component("fetcher").map_err(anyhow::Error::msg)?)
        .start()
        .await?;
    wait_running(&host, "fetcher").await?;
    let declared = Server::declared().await?;
    let other = Server::undeclared().await?;
    let denied =
        r#"capstan_egress_requests_total{cluster="default",controller="fetcher",origin="undeclared",result="denied"}"#;
    let denied_before = metric(denied);

    // Another port on loopback, the API server's own address (HTTPS, as
    // the host reaches it), and a cloud metadata address: three times
    // each, in two reconciles.
    let apiserver = plane.server_url();
    let apiserver_port = apiserver.trim_end_matches('/').rsplit(':').next().and_then(|p| p.parse::<u16>().ok());
    ensure!(apiserver_port.is_some_and(|p| !(18000..18100).contains(&p)), "the API server at {apiserver}");
    let urls = [
        other.url(),
        format!("{}/api/v1/namespaces/{}/secrets", apiserver.trim_end_matches('/'), ns.name()),
        "http://169.254.169.254/latest/meta-data/iam/security-credentials/".to_owned(),
    ];
    for times in [3, 2] {
        let results = fetch(&ns, "probe", &urls, times).await?;
        for (i, result) in results.iter().enumerate() {
            assert!(result.starts_with("denied:"), "{}: {result}", urls[i / times]);
        }
    }
    assert_eq!(other.connections(), 0, "the undeclared port saw no connection");
    // Every refusal is counted, in every pass. A change is usually
    // reconciled once, but a level-based controller may pass over it again
    // (a retried write, a loaded machine): the count is then 9 for each pass
    // of the first change and 6 for each pass of the second, never less and
    // never a count no set of passes makes.
    let counted = metric(denied) - denied_before;
    let passes = |n: f64| (1..=8).any(|a| (1..=8).any(|b| f64::from(9 * a + 6 * b) == n));
    assert!(passes(counted), "every refusal is counted, once: {counted} is no 9a + 6b");

    // The host serves on: the declared origin is reached, from another
    // object and from the one refused before.
    assert_eq!(fetch(&ns, "good", &[declared.url()], 2).await?, ["status:200 bytes:5"; 2]);
    let mixed = fetch(&ns, "probe", &[declared.url(), other.url()], 1).await?;
    assert_eq!(mixed[0], "status:200 bytes:5");
    assert!(mixed[1].starts_with("denied:"), "{mixed:?}");
    assert_eq!((declared.connections(), other.connections()), (3, 0));
    let counts = host.controller("fetcher").context("the controller")?.counts();
    assert_eq!(counts.failed, 0, "{:?}", counts.last_error);

    host.shutdown().await;
    ns.cleanup().await
}

/// An HTTPS server on `localhost`, on a free port among those the
/// `fetcher` fixture declares for HTTPS (18100-18199), with a certificate
/// of a CA of its own; answers every request with `hello`.
async fn tls_server(certs: &Arc<capstan_host::serve::webhook::tls::Certs>) -> Result<(u16, Arc<AtomicUsize>)> {
    let mut bound = None;
    for port in 18100..18200 {
        if let Ok(listener) = tokio::net::TcpListener::bind(("127.0.0.1", port)).await {
            bound = Some(listener);
            break;
        }
    }
    let listener = bound.context("no free port in 18100-18199")?;
    let port = listener.local_addr()?.port();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(certs.server_config()?));
    let handshakes = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&handshakes);
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            let counted = Arc::clone(&counted);
            tokio::spawn(async move {
                let Ok(mut stream) = acceptor.accept(tcp).await else { return };
                counted.fetch_add(1, Ordering::SeqCst);
                capstan_tests::answer_hello(&mut stream).await;
            });
        }
    });
    Ok((port, handshakes))
}

/// `capstan run` with the `fetcher` fixture in `ns`, trusting `ca` for
/// outbound HTTPS if given (`--egress-ca`).
async fn run_fetcher(
    plane: &ControlPlane,
    ns: &TestNamespace,
    ca: Option<&std::path::Path>,
) -> Result<tokio::process::Child> {
    let dir = std::env::temp_dir().join(format!("capstan-egress-tls-{}", capstan_tests::random_suffix(8)));
    std::fs::create_dir_all(&dir)?;
    std::fs::copy(find_component("fetcher").map_err(anyhow::Error::msg)?, dir.join("fetcher.wasm"))?;
    let mut command = tokio::process::Command::new(capstan_tests::capstan_binary().await?);
    command
        .args(["run", "--skip-permission-check", "--components"])
        .arg(&dir)
        .args(["-n", ns.name(), "--listen", &format!("127.0.0.1:{}", capstan_tests::free_port()?), "--kubeconfig"])
        .arg(plane.kubeconfig_path())
        .env("CAPSTAN_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true);
    if let Some(ca) = ca {
        command.arg("--egress-ca").arg(ca);
    }
    Ok(command.spawn()?)
}

#[tokio::test(flavor = "multi_thread")]
async fn https_to_an_internal_ca_is_trusted_with_egress_ca_and_refused_without() -> Result<()> {
    let plane = ControlPlane::shared().await?;
    let certs = Arc::new(capstan_host::serve::webhook::tls::Certs::self_managed(&["localhost".to_owned()])?);
    let (port, handshakes) = tls_server(&certs).await?;
    let ca = std::env::temp_dir().join(format!("capstan-egress-ca-{}.pem", capstan_tests::random_suffix(8)));
    std::fs::write(&ca, certs.ca_bundle())?;
    let url = format!("https://localhost:{port}/ok");

    // Trusted through --egress-ca: the certificate is checked against the
    // name and the CA, and the request goes through.
    let trusted = TestNamespace::new("egress-ca").await?;
    let host = run_fetcher(plane, &trusted, Some(&ca)).await?;
    assert_eq!(fetch(&trusted, "secure", std::slice::from_ref(&url), 2).await?, ["status:200 bytes:5"; 2]);
    // (A reconcile may run again after its own child's write: at least 2.)
    drop(host);
    let completed = handshakes.load(Ordering::SeqCst);
    assert!(completed >= 2, "each request made its TLS handshake: {completed}");

    // Without it the platform's roots alone do not know the CA: a TLS
    // failure for the guest, no request sent.
    let untrusted = TestNamespace::new("egress-no-ca").await?;
    let _other = run_fetcher(plane, &untrusted, None).await?;
    let refused = fetch(&untrusted, "insecure", std::slice::from_ref(&url), 1).await?;
    assert!(refused[0].starts_with("error:") && refused[0].contains("tls-certificate-error"), "{refused:?}");
    assert_eq!(handshakes.load(Ordering::SeqCst), completed, "no handshake completed without the CA");
    let _ = std::fs::remove_file(&ca);
    trusted.cleanup().await?;
    untrusted.cleanup().await
}
