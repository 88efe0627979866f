//! Many clusters from one host: a [`Fleet`] holds named clusters, each
//! served by a [`Host`] of its own (its own informers, queues, leader
//! Leases and grants, in that cluster) on one shared
//! [`Runtime`](crate::runtime::invocation::Runtime), so a component that
//! serves several clusters is compiled once and its instances come from one
//! bounded pool.
//!
//! A cluster is *engaged* ([`Fleet::engage`]): the fleet connects to it and
//! starts its host in a task of its own, trying again while the API server
//! does not answer, so a cluster that is down or slow never holds up the
//! others. It is *disengaged* ([`Fleet::disengage`]) when it goes: its host
//! stops (reconciles in flight finish, Leases are released) and its
//! watches and tasks end with it. Engaging a name again replaces the
//! cluster (rotated credentials).
//!
//! ```no_run
//! # async fn f(home: kube::Client, member: kube::Client) -> anyhow::Result<()> {
//! use capstan_host::serve::fleet::Fleet;
//! use capstan_host::serve::host::HostBuilder;
//!
//! let runtime = HostBuilder::new_runtime(Default::default(), 0, false)?;
//! let fleet = Fleet::new(move |client| {
//!     HostBuilder::new(client).runtime(Some(runtime.clone())).component("greeter.wasm").install_crds(true)
//! });
//! fleet.engage("default", async move { Ok(home) }).await?;
//! fleet.engage("member-1", async move { Ok(member) });
//! // ... until shutdown:
//! fleet.shutdown().await;
//! # Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::{oneshot, watch};

use crate::control::clusters::{Clusters, Engaged};
use crate::serve::host::{Host, HostBuilder};
use crate::sync::lock;

pub mod secrets;

pub use crate::cluster::DEFAULT_CLUSTER;

/// First wait before a start that failed for a passing reason is tried again.
const RETRY_START: Duration = Duration::from_millis(500);
/// Longest wait between such starts.
const RETRY_MAX: Duration = Duration::from_secs(30);

/// Makes the host of one cluster from a client for it.
type Builder = dyn Fn(kube::Client) -> HostBuilder + Send + Sync;

/// Named clusters and their hosts; see the [module docs](self).
pub struct Fleet {
    builder: Arc<Builder>,
    members: Mutex<BTreeMap<String, Member>>,
    /// The hosts that run, by cluster: where fleet controllers reach their
    /// members.
    clusters: Arc<Clusters>,
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet").field("clusters", &self.names()).finish_non_exhaustive()
    }
}

/// One engaged cluster: where its start is, and how to end it.
struct Member {
    state: Arc<Mutex<Engagement>>,
    cancel: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

/// Where an engaged cluster is.
#[derive(Clone)]
enum Engagement {
    /// Waiting for its API server to answer.
    Connecting,
    /// Connected; its host is starting, or waiting to try again after a
    /// reason that may pass.
    Starting(Option<String>),
    /// Its host runs.
    Running(Arc<Host>),
    /// Its host could not start, for a reason that does not pass by
    /// itself (a rejected component, an unreadable kubeconfig).
    Failed(String),
}

impl Engagement {
    fn word(&self) -> &'static str {
        match self {
            Self::Connecting => "connecting",
            Self::Starting(_) => "starting",
            Self::Running(_) => "running",
            Self::Failed(_) => "failed",
        }
    }
}

/// How the first start of an engaged cluster ended: `Ok` once its host
/// runs, or why it will not (a passing reason is tried again and does not
/// end it). Dropped without an answer when the cluster is disengaged first.
pub type Started = oneshot::Receiver<anyhow::Result<()>>;

impl Fleet {
    /// A fleet with no cluster yet, whose hosts `builder` makes.
    pub fn new(builder: impl Fn(kube::Client) -> HostBuilder + Send + Sync + 'static) -> Self {
        Self { builder: Arc::new(builder), members: Mutex::new(BTreeMap::new()), clusters: Clusters::new() }
    }

    /// The clusters whose hosts run now, by name.
    pub fn clusters(&self) -> &Arc<Clusters> {
        &self.clusters
    }

    /// Engages cluster `name`: `connect` gives a client once its API server
    /// answers (it may wait and retry; an error ends the engagement as
    /// failed), then its host starts, and is started again while it fails
    /// for a reason that may pass ([`Error::is_transient`](crate::serve::host::Error::is_transient)).
    /// A cluster engaged under `name` before is disengaged first (its host
    /// stops) — call [`disengage`](Self::disengage) and await it when the
    /// old one must be gone before the new one connects.
    ///
    /// Returns how the first start ended ([`Started`]).
    pub fn engage(
        &self,
        name: &str,
        connect: impl Future<Output = anyhow::Result<kube::Client>> + Send + 'static,
    ) -> Started {
        let (first_tx, first_rx) = oneshot::channel();
        let (cancel, cancelled) = watch::channel(false);
        let state = Arc::new(Mutex::new(Engagement::Connecting));
        let task = tokio::spawn(run_member(
            name.to_owned(),
            connect,
            Arc::clone(&self.builder),
            Arc::clone(&self.clusters),
            Arc::clone(&state),
            cancelled,
            first_tx,
        ));
        let old = lock(&self.members).insert(name.to_owned(), Member { state, cancel, task });
        if let Some(old) = old {
            tokio::spawn(stop(name.to_owned(), old));
        }
        first_rx
    }

    /// Disengages cluster `name`: a start in progress finishes, then its
    /// host stops like [`Host::shutdown`] and its watches and tasks end.
    /// Returns whether it was engaged.
    pub async fn disengage(&self, name: &str) -> bool {
        let member = lock(&self.members).remove(name);
        match member {
            Some(member) => {
                stop(name.to_owned(), member).await;
                true
            }
            None => false,
        }
    }

    /// The names of the engaged clusters, in order.
    pub fn names(&self) -> Vec<String> {
        lock(&self.members).keys().cloned().collect()
    }

    /// The host serving cluster `name`, once it runs.
    pub fn host(&self, name: &str) -> Option<Arc<Host>> {
        match &*lock(&lock(&self.members).get(name)?.state) {
            Engagement::Running(host) => Some(Arc::clone(host)),
            _ => None,
        }
    }

    /// Each engaged cluster's name and where it is.
    fn engagements(&self) -> Vec<(String, Engagement)> {
        lock(&self.members).iter().map(|(name, m)| (name.clone(), lock(&m.state).clone())).collect()
    }

    /// Whether the fleet is the default cluster alone, as a host started
    /// without `--cluster` is: its reasons then need no cluster name.
    fn only_default(engagements: &[(String, Engagement)]) -> bool {
        matches!(engagements, [(name, _)] if name == DEFAULT_CLUSTER)
    }

    /// Ready when every engaged cluster's host runs and is
    /// [ready](Host::readiness); otherwise why not, each reason naming its
    /// cluster (`cluster NAME: …`) unless the fleet is the default cluster
    /// alone.
    ///
    /// # Errors
    ///
    /// The reasons it is not ready.
    pub fn readiness(&self) -> Result<(), Vec<String>> {
        let engagements = self.engagements();
        let prefix = |name: &str, reason: String| {
            if Self::only_default(&engagements) { reason } else { format!("cluster {name}: {reason}") }
        };
        let mut reasons = Vec::new();
        if engagements.is_empty() {
            reasons.push("no cluster engaged".to_owned());
        }
        for (name, engagement) in &engagements {
            match engagement {
                Engagement::Connecting => {
                    reasons.push(prefix(name, "host: starting (connecting to the API server)".to_owned()));
                }
                Engagement::Starting(None) => {
                    reasons.push(prefix(name, "host: starting (loading components)".to_owned()));
                }
                Engagement::Starting(Some(error)) => {
                    reasons.push(prefix(name, format!("host: starting, tried again after: {error}")));
                }
                Engagement::Running(host) => {
                    reasons.extend(host.readiness().err().unwrap_or_default().into_iter().map(|r| prefix(name, r)));
                }
                Engagement::Failed(error) => reasons.push(prefix(name, format!("host: cannot start: {error}"))),
            }
        }
        if reasons.is_empty() { Ok(()) } else { Err(reasons) }
    }

    /// The document `GET /status` serves: `components` (every cluster's
    /// [`Host::status`], each entry naming its `cluster`), `clusters` (each
    /// engaged cluster's `name`, `state` — `connecting`, `starting`,
    /// `running` or `failed` —, `ready`, `notReady` and `error`), `ready`
    /// and `notReady` ([`readiness`](Self::readiness)).
    pub fn status_document(&self) -> Value {
        let mut components = Vec::new();
        let mut clusters = Vec::new();
        for (name, engagement) in self.engagements() {
            let (not_ready, error) = match &engagement {
                Engagement::Running(host) => {
                    for status in host.status() {
                        let mut entry = serde_json::to_value(status).unwrap_or(Value::Null);
                        if let Value::Object(fields) = &mut entry {
                            fields.insert("cluster".to_owned(), json!(name));
                        }
                        components.push(entry);
                    }
                    (host.readiness().err().unwrap_or_default(), None)
                }
                Engagement::Starting(error) => (vec!["host: starting".to_owned()], error.clone()),
                Engagement::Connecting => (vec!["host: connecting to the API server".to_owned()], None),
                Engagement::Failed(error) => (vec!["host: cannot start".to_owned()], Some(error.clone())),
            };
            clusters.push(json!({
                "name": name,
                "state": engagement.word(),
                "ready": not_ready.is_empty(),
                "notReady": not_ready,
                "error": error,
            }));
        }
        let not_ready = self.readiness().err().unwrap_or_default();
        json!({
            "components": components,
            "clusters": clusters,
            "ready": not_ready.is_empty(),
            "notReady": not_ready,
        })
    }

    /// Disengages every cluster (their hosts stop side by side).
    pub async fn shutdown(&self) {
        let members = std::mem::take(&mut *lock(&self.members));
        futures::future::join_all(members.into_iter().map(|(name, m)| stop(name, m))).await;
    }
}

/// Ends a member's task: it stops its host, if one runs, and returns.
async fn stop(name: String, member: Member) {
    let _ = member.cancel.send(true);
    if let Err(e) = member.task.await
        && e.is_panic()
    {
        tracing::error!(cluster = %name, "the task serving the cluster panicked");
    }
    tracing::info!(cluster = %name, "cluster disengaged");
}

/// Serves one cluster until cancelled: connects, starts its host (again,
/// while that fails for a passing reason), and at the end stops it.
async fn run_member(
    name: String,
    connect: impl Future<Output = anyhow::Result<kube::Client>> + Send,
    builder: Arc<Builder>,
    clusters: Arc<Clusters>,
    state: Arc<Mutex<Engagement>>,
    mut cancelled: watch::Receiver<bool>,
    first: oneshot::Sender<anyhow::Result<()>>,
) {
    let set = |e: Engagement| *lock(&state) = e;
    let client = tokio::select! {
        client = connect => client,
        _ = cancelled.wait_for(|c| *c) => return,
    };
    let client = match client {
        Ok(client) => client,
        Err(e) => {
            tracing::error!(cluster = %name, error = %format!("{e:#}"), "cannot connect to the cluster");
            set(Engagement::Failed(format!("{e:#}")));
            let _ = first.send(Err(e));
            return;
        }
    };
    set(Engagement::Starting(None));
    let mut delay = RETRY_START;
    let host = loop {
        // A start runs to its end: cancelling it half-way would leave what
        // it started running.
        match builder(client.clone()).cluster_name(name.as_str()).clusters(Some(Arc::clone(&clusters))).start().await {
            Ok(host) => break Arc::new(host),
            Err(e) if e.is_transient() => {
                tracing::warn!(cluster = %name, error = %e, retry_in_ms = delay.as_millis() as u64, "cannot start yet, retrying");
                set(Engagement::Starting(Some(e.to_string())));
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    _ = cancelled.wait_for(|c| *c) => return,
                }
                delay = (delay * 2).min(RETRY_MAX);
            }
            Err(e) => {
                tracing::error!(cluster = %name, error = %e, "cannot serve the cluster");
                set(Engagement::Failed(e.to_string()));
                let _ = first.send(Err(e.into()));
                return;
            }
        }
    };
    tracing::info!(cluster = %name, "cluster engaged");
    set(Engagement::Running(Arc::clone(&host)));
    let backend = host.backend();
    clusters.engage(&name, Engaged { backend: Arc::clone(&backend), informers: Some(host.informers()) });
    let _ = first.send(Ok(()));
    let _ = cancelled.wait_for(|c| *c).await;
    // Fleet controllers elsewhere stop watching it before its watches end.
    clusters.disengage_exact(&name, &backend);
    host.shutdown().await;
}
