//! The fault suite (issue #15): the greeter, run by `capstan run` as a
//! process of its own, converges through the faults a cluster sees: the API
//! server going away mid-wave, the host killed with SIGKILL during updates
//! and deletes, children deleted behind its back, and a truncated component
//! swapped into its folder. After each, every `Greeting` is `Ready` for its
//! generation with the message of its spec in its ConfigMap, each has
//! exactly one ConfigMap and one Deployment, and deleted ones are gone (no
//! finalizer left behind).
//!
//! The host started while the API server is down is in `hostile.rs`.
//! Object counts are modest so that the whole file stays within a few
//! minutes on two cores.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use capstan_host::testing::find_component;
use capstan_tests::{
    ControlPlane, PrivateControlPlane, TestNamespace, capstan_binary, free_port, greeting, greeting_ready, greetings,
    http_get, random_suffix, wait_for,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::process::Child;

/// How long a wave of objects may take to converge after a fault.
const CONVERGE: Duration = Duration::from_secs(90);

/// How long one write is retried while the API server is away.
const WRITE_RETRY: Duration = Duration::from_secs(60);

/// A `capstan run` process following a components folder with the greeter
/// in it, watching one namespace, its stderr appended to `<folder>.log`.
struct HostProcess {
    dir: PathBuf,
    kubeconfig: PathBuf,
    namespace: String,
    port: u16,
    child: Child,
}

impl HostProcess {
    /// Starts the host on a fresh folder holding the greeter.
    async fn start(kubeconfig: &Path, namespace: &str) -> Result<Self> {
        let dir = std::env::temp_dir().join(format!("capstan-faults-{}", random_suffix(8)));
        std::fs::create_dir_all(&dir)?;
        std::fs::copy(component("greeter"), dir.join("greeter.wasm"))?;
        let port = free_port()?;
        let child = spawn(&dir, kubeconfig, namespace, port).await?;
        Ok(Self { dir, kubeconfig: kubeconfig.to_owned(), namespace: namespace.to_owned(), port, child })
    }

    /// Kills the host with SIGKILL (no shutdown of any kind) and waits for
    /// it to be gone.
    async fn kill(&mut self) -> Result<()> {
        self.child.start_kill()?;
        self.child.wait().await?;
        Ok(())
    }

    /// Starts the host again on the same folder and port.
    async fn restart(&mut self) -> Result<()> {
        self.child = spawn(&self.dir, &self.kubeconfig, &self.namespace, self.port).await?;
        Ok(())
    }

    /// Fails if the process exited (it must ride out every fault).
    fn ensure_alive(&mut self) -> Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!("the host exited ({status}); its log:\n{}", self.log());
        }
        Ok(())
    }

    /// The end of the host's log.
    fn log(&self) -> String {
        let log = std::fs::read_to_string(self.dir.with_extension("log")).unwrap_or_default();
        let start = log.len().saturating_sub(4000);
        log.get(start..).unwrap_or(&log).to_owned()
    }

    /// `/status` of the host, as JSON.
    async fn status(&self) -> Option<Value> {
        let (code, body) = http_get(self.port, "/status").await.ok()?;
        (code == 200).then(|| serde_json::from_str(&body).ok()).flatten()
    }
}

impl Drop for HostProcess {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        let _ = std::fs::remove_dir_all(&self.dir);
        let _ = std::fs::remove_file(self.dir.with_extension("log"));
    }
}

async fn spawn(dir: &Path, kubeconfig: &Path, namespace: &str, port: u16) -> Result<Child> {
    let log = std::fs::OpenOptions::new().create(true).append(true).open(dir.with_extension("log"))?;
    Ok(tokio::process::Command::new(capstan_binary().await?)
        .args(["run", "--install-crds", "--skip-permission-check", "--components"])
        .arg(dir)
        .args(["-n", namespace, "--listen", &format!("127.0.0.1:{port}"), "--kubeconfig"])
        .arg(kubeconfig)
        .env("CAPSTAN_LOG", "info")
        .stdout(Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()?)
}

fn component(name: &str) -> PathBuf {
    find_component(name).unwrap_or_else(|e| panic!("{e}"))
}

/// Retries `write` until the API server takes it (it may be away, or the
/// CRD not yet installed); an answer with the code `done` (a create that
/// already happened, a delete of what is gone) counts as taken.
async fn retry<F, Fut, T>(what: &str, done: Option<u16>, mut write: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = kube::Result<T>>,
{
    let deadline = tokio::time::Instant::now() + WRITE_RETRY;
    loop {
        match write().await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(status)) if Some(status.code) == done => return Ok(()),
            Err(e) if tokio::time::Instant::now() >= deadline => {
                return Err(e).with_context(|| format!("{what}: not accepted within {WRITE_RETRY:?}"));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

async fn create(client: &Client, ns: &str, name: &str, message: &str) -> Result<()> {
    let api = greetings(client, ns);
    let (object, params) = (greeting(name, message, 1), PostParams::default());
    retry(&format!("creating {name}"), Some(409), || api.create(&params, &object)).await
}

async fn set_message(client: &Client, ns: &str, name: &str, message: &str) -> Result<()> {
    let api = greetings(client, ns);
    let (patch, params) = (Patch::Merge(json!({"spec": {"message": message}})), PatchParams::default());
    retry(&format!("updating {name}"), None, || api.patch(name, &params, &patch)).await
}

async fn delete(client: &Client, ns: &str, name: &str) -> Result<()> {
    let api = greetings(client, ns);
    let params = DeleteParams::default();
    retry(&format!("deleting {name}"), Some(404), || api.delete(name, &params)).await
}

/// The uid of each child's controller owner, counted.
fn owners<'a>(
    metas: impl Iterator<Item = &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>,
) -> Vec<String> {
    metas
        .filter_map(|m| m.owner_references.as_ref()?.iter().find(|o| o.controller == Some(true)).map(|o| o.uid.clone()))
        .collect()
}

/// What is wrong with the namespace compared with `expected` (name →
/// message), or `None` once it converged: exactly these Greetings, each
/// `Ready` for its generation with its finalizer once, its ConfigMap
/// holding the message, one ConfigMap and one Deployment each.
async fn divergence(client: &Client, ns: &str, expected: &BTreeMap<String, String>) -> Result<Option<String>> {
    let list = greetings(client, ns).list(&ListParams::default()).await?.items;
    let names: BTreeSet<String> = list.iter().filter_map(|g| g.metadata.name.clone()).collect();
    let wanted: BTreeSet<String> = expected.keys().cloned().collect();
    if names != wanted {
        let extra: Vec<_> = names.difference(&wanted).collect();
        let missing: Vec<_> = wanted.difference(&names).collect();
        return Ok(Some(format!("greetings left over {extra:?}, missing {missing:?}")));
    }
    let cms: Vec<ConfigMap> = Api::namespaced(client.clone(), ns).list(&ListParams::default()).await?.items;
    let deploys: Vec<Deployment> = Api::namespaced(client.clone(), ns).list(&ListParams::default()).await?.items;
    let cm_owners = owners(cms.iter().map(|c| &c.metadata));
    let deploy_owners = owners(deploys.iter().map(|d| &d.metadata));
    for g in &list {
        let name = g.metadata.name.as_deref().unwrap_or_default();
        let generation = g.metadata.generation.unwrap_or_default();
        if !greeting_ready(g, generation) {
            return Ok(Some(format!("{name} not ready at generation {generation}: {}", g.data["status"])));
        }
        if g.metadata.finalizers.as_deref() != Some(&[greeter::FINALIZER.to_owned()][..]) {
            return Ok(Some(format!("{name} has finalizers {:?}", g.metadata.finalizers)));
        }
        let uid = g.metadata.uid.clone().unwrap_or_default();
        let children =
            (cm_owners.iter().filter(|o| **o == uid).count(), deploy_owners.iter().filter(|o| **o == uid).count());
        if children != (1, 1) {
            return Ok(Some(format!("{name} controls {} ConfigMaps and {} Deployments", children.0, children.1)));
        }
        let cm_name = greeter::configmap_name(name);
        let message = cms
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(cm_name.as_str()))
            .and_then(|c| c.data.as_ref()?.get("message").cloned());
        if message.as_ref() != expected.get(name) {
            return Ok(Some(format!("{cm_name} says {message:?}, expected {:?}", expected[name])));
        }
    }
    Ok(None)
}

/// Waits until the namespace [converged](divergence) to `expected`; the
/// error names what was still wrong, with the host's log.
async fn converged(host: &mut HostProcess, client: &Client, expected: &BTreeMap<String, String>) -> Result<()> {
    let deadline = tokio::time::Instant::now() + CONVERGE;
    let ns = host.namespace.clone();
    loop {
        host.ensure_alive()?;
        let wrong = match divergence(client, &ns, expected).await {
            Ok(None) => return Ok(()),
            Ok(Some(wrong)) => wrong,
            Err(e) => format!("{e:#}"),
        };
        if tokio::time::Instant::now() >= deadline {
            bail!("not converged within {CONVERGE:?}: {wrong}\nhost log:\n{}", host.log());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn names(prefix: &str, count: usize) -> Vec<String> {
    (0..count).map(|i| format!("{prefix}-{i}")).collect()
}

/// Creates `names` with message `message`; returns what is expected of them.
async fn create_all(client: &Client, ns: &str, names: &[String], message: &str) -> Result<BTreeMap<String, String>> {
    for name in names {
        create(client, ns, name, message).await?;
    }
    Ok(names.iter().map(|n| (n.clone(), message.to_owned())).collect())
}

/// A namespace on the shared control plane with a host running the greeter
/// in it and `count` Greetings `g-<i>` saying `message`, converged; and
/// what is expected of them.
async fn converged_namespace(
    prefix: &str,
    count: usize,
    message: &str,
) -> Result<(TestNamespace, HostProcess, BTreeMap<String, String>)> {
    let plane = ControlPlane::shared().await?;
    let ns = TestNamespace::new(prefix).await?;
    let mut host = HostProcess::start(plane.kubeconfig_path(), ns.name()).await?;
    let expected = create_all(&ns.client(), ns.name(), &names("g", count), message).await?;
    converged(&mut host, &ns.client(), &expected).await.context("before the fault")?;
    Ok((ns, host, expected))
}

#[tokio::test(flavor = "multi_thread")]
async fn an_api_server_restart_during_creates_and_updates_loses_no_greeting() -> Result<()> {
    let private = PrivateControlPlane::start(false).await?;
    let client = private.plane().client()?;
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "faults"}}))?;
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await?;
    let mut host = HostProcess::start(private.plane().kubeconfig_path(), "faults").await?;
    let mut expected = create_all(&client, "faults", &names("before", 15), "first").await?;
    converged(&mut host, &client, &expected).await.context("before the restart")?;

    // The API server goes away for 5 s while a wave of updates and creates
    // is written, a write every 300 ms (each retried until it lands).
    let writes = async {
        for (i, name) in names("before", 15).iter().enumerate() {
            set_message(&client, "faults", name, "second").await?;
            create(&client, "faults", &format!("during-{i}"), "third").await?;
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        anyhow::Ok(())
    };
    let restart = async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        private.restart_apiserver(Duration::from_secs(5)).await
    };
    let (written, restarted) = tokio::join!(writes, restart);
    written?;
    restarted?;
    for name in names("before", 15) {
        expected.insert(name, "second".to_owned());
    }
    expected.extend(names("during", 15).into_iter().map(|n| (n, "third".to_owned())));
    converged(&mut host, &client, &expected).await.context("after the restart")?;
    host.kill().await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_host_killed_during_updates_and_deletes_converges_after_a_restart_without_leaks_or_duplicates() -> Result<()>
{
    let (ns, mut host, mut expected) = converged_namespace("faults-kill", 24, "first").await?;
    let client = ns.client();
    let all = names("g", 24);

    // A wave of updates; SIGKILL a third of the way through it, while the
    // first ones are being reconciled; the rest land while no host runs.
    for (i, name) in all.iter().enumerate() {
        if i == all.len() / 3 {
            host.kill().await?;
        }
        set_message(&client, ns.name(), name, "second").await?;
        expected.insert(name.clone(), "second".to_owned());
    }
    host.restart().await?;
    converged(&mut host, &client, &expected).await.context("after a kill during updates")?;

    // Half are deleted, the other half updated; SIGKILL a third of the
    // way through.
    let (gone, kept) = all.split_at(all.len() / 2);
    for (i, (deleted, updated)) in gone.iter().zip(kept).enumerate() {
        if i == gone.len() / 3 {
            host.kill().await?;
        }
        delete(&client, ns.name(), deleted).await?;
        set_message(&client, ns.name(), updated, "third").await?;
        expected.remove(deleted);
        expected.insert(updated.clone(), "third".to_owned());
    }
    // The deletions made while no host runs wait for its finalizer.
    let waiting = greetings(&client, ns.name()).list(&ListParams::default()).await?.items.len();
    ensure!(waiting > expected.len(), "no deletion waits for the host ({waiting} greetings)");
    host.restart().await?;
    converged(&mut host, &client, &expected).await.context("after a kill during deletes")?;
    host.kill().await?;
    ns.cleanup().await
}

#[tokio::test(flavor = "multi_thread")]
async fn children_deleted_behind_the_hosts_back_are_recreated() -> Result<()> {
    let (ns, mut host, expected) = converged_namespace("faults-children", 20, "hello").await?;
    let client = ns.client();

    let cms: Api<ConfigMap> = ns.api();
    let deploys: Api<Deployment> = ns.api();
    let mut old_uids = BTreeSet::new();
    for name in expected.keys() {
        let cm = greeter::configmap_name(name);
        old_uids.extend(cms.get(&cm).await?.metadata.uid);
        cms.delete(&cm, &DeleteParams::default()).await?;
        let deploy = greeter::deployment_name(name);
        old_uids.extend(deploys.get(&deploy).await?.metadata.uid);
        deploys.delete(&deploy, &DeleteParams::default()).await?;
    }
    converged(&mut host, &client, &expected).await.context("after the children were deleted")?;
    let uids: BTreeSet<String> = cms
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(|c| c.metadata)
        .chain(deploys.list(&ListParams::default()).await?.items.into_iter().map(|d| d.metadata))
        .filter_map(|m| m.uid)
        .collect();
    assert!(uids.is_disjoint(&old_uids), "every child is a new object");
    host.kill().await?;
    ns.cleanup().await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_truncated_component_swapped_in_is_rejected_and_the_running_version_keeps_serving() -> Result<()> {
    let (ns, mut host, mut expected) = converged_namespace("faults-truncated", 20, "first").await?;
    let client = ns.client();

    // Half a component, written in place over the running one.
    let file = host.dir.join("greeter.wasm");
    let whole = std::fs::read(&file)?;
    std::fs::write(&file, &whole[..whole.len() / 2])?;
    let rejected = wait_for(Duration::from_secs(30), || async {
        let status = host.status().await?;
        let components = status.get("components")?.as_array()?.clone();
        components.into_iter().find_map(|c| c.get("rejected").filter(|r| !r.is_null()).cloned())
    })
    .await
    .with_context(|| format!("the truncated file was not rejected; host log:\n{}", host.log()))?;
    assert_eq!(rejected["kind"], json!("compile"), "{rejected}");

    // The version that ran keeps serving: updates converge, the host stays
    // ready.
    for name in names("g", 20) {
        set_message(&client, ns.name(), &name, "second").await?;
        expected.insert(name, "second".to_owned());
    }
    converged(&mut host, &client, &expected).await.context("after the truncated file")?;
    let (code, body) = http_get(host.port, "/readyz").await?;
    assert_eq!(code, 200, "{body}");
    let status = host.status().await.context("/status")?;
    let greeter = &status["components"][0];
    assert_eq!((greeter["state"].clone(), greeter["swaps"].clone()), (json!("running"), json!(0)), "{status}");
    host.kill().await?;
    ns.cleanup().await
}
