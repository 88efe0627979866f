//! Custom schedulers: a component that declares `roles.scheduler = name`
//! picks the Node of every pending Pod whose `spec.schedulerName` is
//! `name`; the host does the rest, as kube-scheduler does for its plugins.
//!
//! The host watches the Pods that name the scheduler and have no Node
//! (`spec.schedulerName=<name>,spec.nodeName=`, in the namespaces it
//! watches), every Node, and every Pod bound to a Node (cluster-wide: a
//! Node's capacity is shared by every namespace). It keeps an
//! [`Account`] of what is requested on each Node, counting the Pods it
//! bound that the watch has not shown yet, and schedules one Pod at a time
//! from a keyed [`Queue`], so each decision sees the ones before it:
//!
//! 1. the guest's `scheduler.schedule` gets the Pod (without its
//!    managedFields) and the Nodes, in name order (each trimmed to what a
//!    policy reads, see [`guest_node`]), with allocatable, requested and Pod
//!    count in milli-units: every Node to a fresh instance, then only those
//!    that changed since its previous decision ([`nodes`]);
//! 2. a Node name that exists: the Pod is assumed there, bound through the
//!    `pods/binding` subresource (with the Pod's uid as a precondition) and
//!    a Normal `Scheduled` Event is recorded ("Successfully assigned ns/pod
//!    to node");
//! 3. unschedulable (or a Node that does not exist): a Warning
//!    `FailedScheduling` Event with the reasons (joined with `; ` and cut
//!    to [`cluster::MAX_MESSAGE`] bytes, as every message of a failed
//!    attempt is before it is logged or written), the Pod's `PodScheduled`
//!    condition set to `False` with reason `Unschedulable`, and a retry with
//!    backoff, and again as soon as a Node is added or changes in a way that
//!    matters (labels, taints, allocatable, conditions, `unschedulable`), or
//!    a bound Pod goes away;
//! 4. a trap or the deadline of the guest: a `FailedScheduling` Event with
//!    the error and a retry with backoff.
//!
//! # Guarantees
//!
//! - A Pod is never bound twice: one attempt per Pod at a time, a Pod the
//!   account knows is bound or assumed is not attempted again, and the API
//!   server refuses a second binding (409), which drops the Pod.
//! - A Pod deleted (or bound by someone else) while it waits is dropped.
//! - With leader election, one replica schedules per scheduler name (Lease
//!   `capstan-scheduler-<name>`); the others keep their caches warm.
//!
//! # Caveats
//!
//! An assumed Pod the watch does not show within [`Settings::assume_ttl`]
//! stops counting. Only the namespaces the host watches are scheduled.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use kube::api::{Api, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;
use tracing::Instrument;

use crate::cluster::kube::{KubeCluster, map_error};
use crate::cluster::{self, Cluster, EventRecord, Patch, Subresource};
use crate::control::controller::{Backoff, DRAIN_TIMEOUT, State};
use crate::control::informer::WatchBackoff;
use crate::control::leader::Leadership;
use crate::control::queue::Queue;
use crate::control::reconciler::Reconciler;
use crate::metrics::{Owner, metrics};
use crate::object::{Gvk, ObjectRef};
use crate::runtime::bindings::capstan::operator::types as wit;
use crate::runtime::invocation::Runtime;
use crate::runtime::nodes;
use crate::sync::lock;

pub mod account;
pub mod quantity;

pub use account::Account;

/// How long a Pod this scheduler bound counts on its Node before the watch
/// shows it there (default of [`Settings::assume_ttl`]).
pub const ASSUME_TTL: Duration = Duration::from_secs(60);

/// Most bindings in flight at once (the next Pod is scheduled while the
/// previous ones are being bound).
pub const MAX_BINDINGS_IN_FLIGHT: usize = 16;

/// Most Events and `PodScheduled` conditions being written at once. They
/// are written after the binding (or the failed attempt) they report, and
/// hold up neither the next decision nor the next binding, as
/// kube-scheduler's Event broadcaster does not.
pub const MAX_REPORTS_IN_FLIGHT: usize = 16;

/// The reason of the Event recorded when a Pod is bound.
pub const SCHEDULED: &str = "Scheduled";

/// The reason of the Event recorded when a Pod cannot be scheduled.
pub const FAILED_SCHEDULING: &str = "FailedScheduling";

/// The reason of the `PodScheduled=False` condition of an unschedulable Pod.
pub const UNSCHEDULABLE: &str = "Unschedulable";

/// Why a scheduler could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The component does not declare `roles.scheduler`.
    #[error("component {0} declares no scheduler")]
    NotAScheduler(String),
}

/// Settings of a scheduler.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub struct Settings {
    /// Retry timing of an unschedulable Pod (and of failed bindings).
    /// Default: [`Backoff::default`].
    pub backoff: Backoff,
    /// How long a Pod this scheduler bound counts on its Node before the
    /// watch shows it there. Default: [`ASSUME_TTL`].
    pub assume_ttl: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self { backoff: Backoff::default(), assume_ttl: ASSUME_TTL }
    }
}

/// What a scheduler runs on, besides its component.
pub struct Setup {
    /// Runs the guest.
    pub runtime: Runtime,
    /// Watches and bindings.
    pub cluster: KubeCluster,
    /// Events, status patches, and the guest's imports.
    pub backend: Arc<dyn Cluster>,
    /// The namespaces whose Pods are scheduled (empty: all).
    pub namespaces: Vec<String>,
    /// Retry timing.
    pub settings: Settings,
    /// With leader election: the scheduler's Lease (see [`lease`]),
    /// released when the scheduler stops.
    pub leadership: Option<Leadership>,
}

impl std::fmt::Debug for Setup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Setup").field("namespaces", &self.namespaces).finish_non_exhaustive()
    }
}

/// The Lease of scheduler `name` (with leader election): `capstan-scheduler-<name>`.
pub fn lease(name: &str) -> String {
    crate::control::leader::lease_name(&format!("scheduler-{name}"))
}

/// A running scheduler.
pub struct Scheduler {
    parts: Arc<Parts>,
    leadership: tokio::sync::Mutex<Option<Leadership>>,
    main: Mutex<Option<JoinHandle<()>>>,
    watches: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("name", &self.parts.name)
            .field("state", &self.state())
            .finish_non_exhaustive()
    }
}

/// A Node as the scheduler hands it to the guest, prepared once per change.
struct CachedNode {
    json: Arc<[u8]>,
    allocatable: Arc<[wit::ResourceAmount]>,
    /// What of the Node matters to scheduling, to tell changes that do.
    fingerprint: String,
    /// Changes with `json` (see [`nodes::Node::revision`]); set by
    /// [`View::keep`].
    revision: u64,
}

/// What the watches show, and what the scheduler did.
#[derive(Default)]
struct View {
    nodes: BTreeMap<String, CachedNode>,
    /// The last [`CachedNode::revision`] given out.
    revisions: u64,
    pending: HashMap<ObjectRef, Arc<Pod>>,
    account: Account,
    /// Pods that were unschedulable, retried when Nodes change.
    unschedulable: HashSet<ObjectRef>,
    /// Consecutive failures per Pod, for the backoff.
    failures: HashMap<ObjectRef, u32>,
}

impl View {
    /// Keeps `node` (prepared by [`cached_node`]) under `name`, with a new
    /// revision if what the guest gets of it changed; true if what matters
    /// to scheduling did.
    fn keep(&mut self, name: String, mut node: CachedNode) -> bool {
        let old = self.nodes.get(&name);
        node.revision = match old {
            // `allocatable` is read from what `json` holds.
            Some(old) if old.json == node.json => old.revision,
            _ => {
                self.revisions += 1;
                self.revisions
            }
        };
        let changed = old.is_none_or(|old| old.fingerprint != node.fingerprint);
        self.nodes.insert(name, node);
        changed
    }

    fn forget(&mut self, r: &ObjectRef) {
        self.unschedulable.remove(r);
        self.failures.remove(r);
    }

    /// The Pods to try again after a change that may make room.
    fn retry(&mut self) -> Vec<ObjectRef> {
        self.unschedulable.iter().cloned().collect()
    }
}

/// What a scheduler's handle, its watches and its worker share.
struct Parts {
    name: String,
    /// The scheduler in its cluster, for metrics.
    owner: Owner,
    reconciler: Arc<Reconciler>,
    setup: Setup,
    queue: Arc<Queue>,

    state: Mutex<State>,
    view: Mutex<View>,
    /// How many watches have listed once.
    synced: watch::Sender<usize>,
    /// Turns to write Events and conditions ([`MAX_REPORTS_IN_FLIGHT`]).
    reports: Semaphore,
}

/// One change a watch shows; a relist comes whole, once complete.
enum Seen<K> {
    Applied(K),
    Deleted(K),
    Relisted(Vec<K>),
}

fn pod_kind() -> Gvk {
    Gvk::new("", "v1", "Pod")
}

fn pod_ref(pod: &Pod) -> Option<ObjectRef> {
    Some(ObjectRef::new(pod_kind(), pod.metadata.namespace.as_deref(), pod.metadata.name.clone()?))
}

/// A Pod that has finished no longer holds its Node's resources.
fn finished(pod: &Pod) -> bool {
    matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"))
}

fn amounts(resources: quantity::Resources) -> Vec<wit::ResourceAmount> {
    resources.into_iter().map(|(name, milli)| wit::ResourceAmount { name, milli }).collect()
}

fn cached_node(node: &Node) -> CachedNode {
    let status = node.status.as_ref();
    let allocatable = quantity::resources(status.and_then(|s| s.allocatable.as_ref()).into_iter().flatten());
    let spec = node.spec.as_ref();
    let conditions: Vec<(&str, &str)> = status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .map(|c| (c.type_.as_str(), c.status.as_str()))
        .collect();
    let fingerprint = json!({
        "labels": node.metadata.labels,
        "unschedulable": spec.and_then(|s| s.unschedulable),
        "taints": spec.and_then(|s| s.taints.as_ref()),
        "allocatable": allocatable,
        "conditions": conditions,
    })
    .to_string();
    CachedNode { json: guest_node(node).into(), allocatable: amounts(allocatable).into(), fingerprint, revision: 0 }
}

/// The Node as the guest gets it, serialized once per change of the Node
/// and handed to each instance once per change ([`nodes`]): what a
/// scheduling policy reads and nothing else. Kept: `metadata` (name, uid,
/// resourceVersion, generation, labels, annotations, creationTimestamp),
/// all of `spec` (taints, `unschedulable`, podCIDRs …), and `status`'s
/// `capacity`, `allocatable` and `conditions` (`type`, `status`, `reason`,
/// `message`, `lastTransitionTime`). Left out: managedFields and owners
/// (often half of a Node's bytes; kube-scheduler trims them too), the
/// conditions' heartbeat times, `images`, `nodeInfo`, `addresses`,
/// `daemonEndpoints`, `volumesInUse` / `volumesAttached`, `config`,
/// `runtimeHandlers`, `features`. Measured with `benches/runtime.rs`
/// (`schedule`): parsing is most of a decision's cost.
pub fn guest_node(node: &Node) -> Vec<u8> {
    let meta = &node.metadata;
    let status = node.status.as_ref();
    let conditions: Option<Vec<Value>> = status.and_then(|s| s.conditions.as_ref()).map(|conditions| {
        conditions
            .iter()
            .map(|c| {
                json!({
                    "type": c.type_,
                    "status": c.status,
                    "reason": c.reason,
                    "message": c.message,
                    "lastTransitionTime": c.last_transition_time,
                })
            })
            .collect()
    });
    let mut value = json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": meta.name,
            "uid": meta.uid,
            "resourceVersion": meta.resource_version,
            "generation": meta.generation,
            "creationTimestamp": meta.creation_timestamp,
            "labels": meta.labels,
            "annotations": meta.annotations,
        },
        "spec": node.spec,
        "status": {
            "capacity": status.and_then(|s| s.capacity.as_ref()),
            "allocatable": status.and_then(|s| s.allocatable.as_ref()),
            "conditions": conditions,
        },
    });
    strip_nulls(&mut value);
    serde_json::to_vec(&value).expect("a Node always serializes")
}

/// Removes `null` members (what the typed Node leaves out), so the guest
/// parses fewer bytes.
fn strip_nulls(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|_, v| !v.is_null());
            map.values_mut().for_each(strip_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}

/// A pending Pod as it is kept and handed to the guest: without its
/// managedFields (as kube-scheduler trims them from its informers), which
/// no policy reads and which the guest would parse at every attempt.
fn trim(pod: &mut Pod) {
    pod.metadata.managed_fields = None;
}

fn entry(pod: &Pod) -> Option<(String, account::Entry)> {
    let node = pod.spec.as_ref()?.node_name.clone().filter(|n| !n.is_empty())?;
    let entry =
        account::Entry { node, namespace: pod.metadata.namespace.clone(), requests: quantity::pod_requests(pod) };
    Some((pod.metadata.uid.clone()?, entry))
}

/// Runs a watch, handing each change (and each complete relist) to `on`.
async fn follow<K>(owner: Owner, api: Api<K>, config: watcher::Config, kind: Gvk, mut on: impl FnMut(Seen<K>) + Send)
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let stream = watcher::watcher(api, config).backoff(WatchBackoff::default());
    let mut stream = std::pin::pin!(stream);
    let mut listed = Vec::new();
    while let Some(event) = stream.next().await {
        match event {
            Ok(Event::Apply(o)) => on(Seen::Applied(o)),
            Ok(Event::Delete(o)) => on(Seen::Deleted(o)),
            Ok(Event::Init) => listed.clear(),
            Ok(Event::InitApply(o)) => listed.push(o),
            Ok(Event::InitDone) => on(Seen::Relisted(std::mem::take(&mut listed))),
            Err(e) => {
                metrics().watch_failed(owner.cluster(), &kind);
                tracing::warn!(kind = %kind, error = %e, "watch failed, retrying with backoff");
            }
        }
    }
}

impl Scheduler {
    /// Starts the scheduler of `reconciler`'s component (the version in
    /// use, followed across swaps).
    ///
    /// # Errors
    ///
    /// [`Error::NotAScheduler`] if the component declares no scheduler.
    pub fn start(reconciler: Arc<Reconciler>, mut setup: Setup) -> Result<Self, Error> {
        let manifest = Arc::clone(&reconciler.component().manifest);
        let name = manifest.roles.scheduler.clone().ok_or_else(|| Error::NotAScheduler(manifest.name.clone()))?;
        let queue = Arc::new(Queue::new());
        let probe: std::sync::Weak<Queue> = Arc::downgrade(&queue);
        let owner = Owner::new(reconciler.cluster_name(), name.as_str());
        metrics().track_scheduler_queue(&owner, probe);
        let leadership = setup.leadership.take();
        let leading = leadership.as_ref().map(Leadership::watch);
        let parts = Arc::new(Parts {
            name: name.clone(),
            owner: owner.clone(),
            reconciler,
            setup,
            queue,
            state: Mutex::new(State::Syncing),
            view: Mutex::default(),
            synced: watch::channel(0).0,
            reports: Semaphore::new(MAX_REPORTS_IN_FLIGHT),
        });
        let span = tracing::info_span!("scheduler", scheduler = %name, controller = %manifest.name);
        let client = parts.setup.cluster.client().clone();
        let mut watches = Vec::new();
        let nodes = Arc::clone(&parts);
        watches.push(tokio::spawn(
            follow(
                owner.clone(),
                Api::<Node>::all(client.clone()),
                watcher::Config::default(),
                Gvk::new("", "v1", "Node"),
                {
                    let mut first = true;
                    move |seen| nodes.nodes_seen(seen, std::mem::take(&mut first))
                },
            )
            .instrument(span.clone()),
        ));
        let bound = Arc::clone(&parts);
        let config = watcher::Config::default().fields("spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed");
        watches.push(tokio::spawn(
            follow(owner.clone(), Api::<Pod>::all(client.clone()), config, pod_kind(), {
                let mut first = true;
                move |seen| bound.bound_seen(seen, std::mem::take(&mut first))
            })
            .instrument(span.clone()),
        ));
        let scopes: Vec<Option<String>> = if parts.setup.namespaces.is_empty() {
            vec![None]
        } else {
            parts.setup.namespaces.iter().cloned().map(Some).collect()
        };
        let pending = format!("spec.schedulerName={name},spec.nodeName=,status.phase!=Succeeded,status.phase!=Failed");
        for scope in scopes {
            let api = match &scope {
                Some(ns) => Api::<Pod>::namespaced(client.clone(), ns),
                None => Api::<Pod>::all(client.clone()),
            };
            let parts = Arc::clone(&parts);
            let mut first = true;
            let on = move |seen| parts.pending_seen(scope.as_deref(), seen, std::mem::take(&mut first));
            let config = watcher::Config::default().fields(&pending);
            watches.push(tokio::spawn(follow(owner.clone(), api, config, pod_kind(), on).instrument(span.clone())));
        }
        let total = watches.len();
        let main = tokio::spawn(run(Arc::clone(&parts), total, leading).instrument(span));
        Ok(Self {
            parts,
            leadership: tokio::sync::Mutex::new(leadership),
            main: Mutex::new(Some(main)),
            watches: Mutex::new(watches),
        })
    }

    /// The scheduler name (`spec.schedulerName` of its Pods).
    pub fn name(&self) -> &str {
        &self.parts.name
    }

    /// Its reconciler, through which it follows the component version in use.
    pub fn reconciler(&self) -> &Arc<Reconciler> {
        &self.parts.reconciler
    }

    /// Where it is: `Syncing` until every watch listed once, then
    /// `Running` (or `Standby` while another replica leads), `Stopped`.
    pub fn state(&self) -> State {
        lock(&self.parts.state).clone()
    }

    /// Pods waiting in its queue.
    pub fn queue_len(&self) -> usize {
        self.parts.queue.len()
    }

    /// Stops scheduling (bindings in flight finish, for at most
    /// [`DRAIN_TIMEOUT`]) and watching, and releases its Lease. Idempotent.
    pub async fn stop(&self) {
        self.parts.queue.close();
        let main = lock(&self.main).take();
        if let Some(main) = &main
            && !matches!(self.state(), State::Running)
        {
            // Syncing or standing by: nothing in flight.
            main.abort();
        }
        if let Some(mut main) = main
            && tokio::time::timeout(DRAIN_TIMEOUT, &mut main).await.is_err()
        {
            tracing::warn!(scheduler = %self.parts.name, "bindings still running after {DRAIN_TIMEOUT:?}, cancelled");
            main.abort();
        }
        for w in lock(&self.watches).drain(..) {
            w.abort();
        }
        *lock(&self.parts.state) = State::Stopped;
        if let Some(leadership) = self.leadership.lock().await.take()
            && let Err(e) = leadership.resign().await
        {
            tracing::warn!(scheduler = %self.parts.name, error = %e, "cannot release lease");
        }
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        if let Some(main) = lock(&self.main).take() {
            main.abort();
        }
        for w in lock(&self.watches).drain(..) {
            w.abort();
        }
    }
}

async fn run(parts: Arc<Parts>, watches: usize, leading: Option<watch::Receiver<bool>>) {
    let mut synced = parts.synced.subscribe();
    if synced.wait_for(|n| *n >= watches).await.is_err() {
        return;
    }
    let queue_all = || {
        let pending: Vec<ObjectRef> = lock(&parts.view).pending.keys().cloned().collect();
        for r in pending {
            parts.queue.add(r);
        }
    };
    match leading {
        None => {
            queue_all();
            parts.set_state(State::Running);
            tracing::info!("scheduler running");
            Arc::clone(&parts).work().await;
        }
        Some(mut leading) => loop {
            parts.set_state(State::Standby);
            tracing::info!("scheduler standing by: caches warm, not leading");
            if leading.wait_for(|l| *l).await.is_err() {
                break;
            }
            queue_all();
            parts.set_state(State::Running);
            tracing::info!("leading: scheduler running");
            tokio::select! {
                () = Arc::clone(&parts).work() => break,
                _ = leading.wait_for(|l| !*l) => {
                    // The worker (and its bindings in flight) is dropped
                    // here; the next leader looks at every pending Pod.
                    parts.queue.reset();
                    tracing::warn!("lost leadership: stopped scheduling");
                }
            }
        },
    }
    parts.set_state(State::Stopped);
    tracing::info!("scheduler stopped");
}

/// A decision to bind, made by the guest.
struct Decision {
    r: ObjectRef,
    uid: String,
    node: String,
    started: Instant,
}

/// How an attempt ended.
enum Attempt {
    /// The Pod is to be bound (and is assumed on its Node).
    Bind(Decision),
    /// It failed: counted and queued again, to be reported.
    Failed(Report),
    /// The Pod is gone, bound, or being deleted.
    Dropped,
}

/// A failed attempt to report.
struct Report {
    r: ObjectRef,
    uid: String,
    failure: Failure,
}

/// Why an attempt did not bind.
enum Failure {
    /// The guest found no Node (or chose one that does not exist).
    Unschedulable(String),
    /// The guest trapped, or the binding failed.
    Error(String),
}

impl Failure {
    /// The same failure with its message cut to [`cluster::MAX_MESSAGE`]
    /// bytes: the guest's reasons, or the Node name it chose, are
    /// untrusted and go into a log line, an Event and the Pod's condition.
    fn bounded(self) -> Self {
        match self {
            Failure::Unschedulable(m) => Failure::Unschedulable(cluster::bounded(&m, cluster::MAX_MESSAGE)),
            Failure::Error(m) => Failure::Error(cluster::bounded(&m, cluster::MAX_MESSAGE)),
        }
    }
}

impl Parts {
    fn set_state(&self, state: State) {
        *lock(&self.state) = state;
    }

    fn listed(&self, first: bool) {
        if first {
            self.synced.send_modify(|n| *n += 1);
        }
    }

    fn requeue(&self, pods: Vec<ObjectRef>) {
        for r in pods {
            self.queue.add(r);
        }
    }

    fn nodes_seen(&self, seen: Seen<Node>, first: bool) {
        let mut view = lock(&self.view);
        let changed = match seen {
            Seen::Applied(node) => {
                let Some(name) = node.metadata.name.clone() else { return };
                view.keep(name, cached_node(&node))
            }
            Seen::Deleted(node) => {
                view.nodes.remove(node.metadata.name.as_deref().unwrap_or_default());
                false
            }
            Seen::Relisted(nodes) => {
                let names: HashSet<&str> = nodes.iter().filter_map(|n| n.metadata.name.as_deref()).collect();
                view.nodes.retain(|name, _| names.contains(name.as_str()));
                for node in &nodes {
                    if let Some(name) = node.metadata.name.clone() {
                        view.keep(name, cached_node(node));
                    }
                }
                true
            }
        };
        let retry = if changed { view.retry() } else { Vec::new() };
        drop(view);
        self.requeue(retry);
        self.listed(first);
    }

    fn bound_seen(&self, seen: Seen<Pod>, first: bool) {
        let mut view = lock(&self.view);
        let freed = match seen {
            Seen::Applied(pod) => {
                match entry(&pod) {
                    Some((uid, entry)) if !finished(&pod) => view.account.bound(&uid, entry),
                    _ => view.account.unbound(pod.metadata.uid.as_deref().unwrap_or_default()),
                }
                finished(&pod)
            }
            Seen::Deleted(pod) => {
                view.account.unbound(pod.metadata.uid.as_deref().unwrap_or_default());
                true
            }
            Seen::Relisted(pods) => {
                view.account.relisted(None, pods.iter().filter(|p| !finished(p)).filter_map(entry).collect());
                true
            }
        };
        let retry = if freed { view.retry() } else { Vec::new() };
        drop(view);
        self.requeue(retry);
        self.listed(first);
    }

    fn pending_seen(&self, scope: Option<&str>, seen: Seen<Pod>, first: bool) {
        let mut view = lock(&self.view);
        let mut queue = Vec::new();
        match seen {
            Seen::Applied(mut pod) => {
                let Some(r) = pod_ref(&pod) else { return };
                trim(&mut pod);
                // A status change (the condition this scheduler sets) is
                // not a reason to try again; a new Pod or a new spec is.
                let new = view.pending.get(&r).is_none_or(|old| {
                    old.metadata.uid != pod.metadata.uid
                        || old.spec != pod.spec
                        || old.metadata.labels != pod.metadata.labels
                });
                if new {
                    view.failures.remove(&r);
                    queue.push(r.clone());
                }
                view.pending.insert(r, Arc::new(pod));
            }
            Seen::Deleted(pod) => {
                if let Some(r) = pod_ref(&pod) {
                    view.pending.remove(&r);
                    view.forget(&r);
                }
            }
            Seen::Relisted(pods) => {
                view.pending.retain(|r, _| scope.is_some_and(|ns| r.namespace.as_deref() != Some(ns)));
                for mut pod in pods {
                    if let Some(r) = pod_ref(&pod) {
                        trim(&mut pod);
                        queue.push(r.clone());
                        view.pending.insert(r, Arc::new(pod));
                    }
                }
            }
        }
        drop(view);
        self.requeue(queue);
        self.listed(first);
    }

    /// Schedules Pods from the queue until it is closed. Decisions are made
    /// one at a time; bindings and reports run in tasks of their own, at
    /// most [`MAX_BINDINGS_IN_FLIGHT`] bindings at once (a decision waits
    /// for a free slot).
    async fn work(self: Arc<Self>) {
        let slots = Arc::new(Semaphore::new(MAX_BINDINGS_IN_FLIGHT));
        let mut tasks = JoinSet::new();
        while let Some(r) = self.queue.next().await {
            while tasks.try_join_next().is_some() {}
            let slot = Arc::clone(&slots).acquire_owned().await.expect("the semaphore is never closed");
            // A trace of its own per attempt: the guest's decision, then
            // the binding or the report of a failure, in tasks of their own.
            let span = tracing::info_span!(
                "schedule",
                pod = %r,
                outcome = tracing::field::Empty,
                trace_id = tracing::field::Empty,
                "otel.status_code" = tracing::field::Empty,
                "otel.status_message" = tracing::field::Empty,
            );
            crate::telemetry::start_trace(&span);
            let attempt = self.attempt(&r).instrument(span.clone()).await;
            span.record(
                "outcome",
                match &attempt {
                    Attempt::Bind(_) => "bind",
                    Attempt::Failed(_) => "failed",
                    Attempt::Dropped => "dropped",
                },
            );
            match attempt {
                Attempt::Bind(decision) => {
                    let parts = Arc::clone(&self);
                    tasks.spawn(async move { parts.bind(decision, slot).await }.instrument(span));
                }
                Attempt::Failed(report) => {
                    drop(slot);
                    self.queue.done(&r);
                    let parts = Arc::clone(&self);
                    tasks.spawn(async move { parts.report(report).await }.instrument(span));
                }
                Attempt::Dropped => self.queue.done(&r),
            }
        }
        while tasks.join_next().await.is_some() {}
    }

    /// Asks the guest where `r` goes. A decision to bind has the Pod
    /// assumed on its Node already; a failure is counted and its retry
    /// queued, its report is to be written.
    async fn attempt(&self, r: &ObjectRef) -> Attempt {
        let started = Instant::now();
        let (pod, request) = {
            let mut view = lock(&self.view);
            view.account.expire(started, self.setup.settings.assume_ttl);
            let Some(pod) = view.pending.get(r).cloned() else {
                // Deleted or bound meanwhile.
                view.forget(r);
                return Attempt::Dropped;
            };
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            if pod.metadata.deletion_timestamp.is_some() || view.account.knows(&uid) {
                view.forget(r);
                return Attempt::Dropped;
            }
            let nodes = view
                .nodes
                .iter()
                .map(|(name, node)| {
                    let usage = view.account.usage(name);
                    nodes::Node {
                        name: name.clone(),
                        revision: node.revision,
                        json: Arc::clone(&node.json),
                        allocatable: Arc::clone(&node.allocatable),
                        requested: amounts(usage.requested),
                        pods: usage.pods,
                    }
                })
                .collect();
            let json = serde_json::to_vec(&*pod).expect("a Pod always serializes");
            (pod, nodes::Decision { pod: json, nodes, cluster: self.reconciler.cluster_name().to_owned() })
        };
        // The version in use with the grants the reconciler keeps for it,
        // on behalf of the Pod being scheduled.
        let (component, mut caller) = self.reconciler.role_caller();
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        caller.reconciling = Some((r.clone(), Some(uid.clone())));
        let invocation =
            component.traced("schedule", self.setup.runtime.schedule(&component.pre, caller, &request)).await;
        let failure = match invocation.result {
            Ok(Ok(node)) => {
                let mut view = lock(&self.view);
                if view.nodes.contains_key(&node) {
                    let entry = account::Entry {
                        node: node.clone(),
                        namespace: r.namespace.clone(),
                        requests: quantity::pod_requests(&pod),
                    };
                    view.account.assume(&uid, entry, Instant::now());
                    return Attempt::Bind(Decision { r: r.clone(), uid, node, started });
                }
                Failure::Unschedulable(format!("the scheduler chose Node {node:?}, which does not exist"))
            }
            Ok(Err(unschedulable)) => {
                let reasons = unschedulable.reasons;
                Failure::Unschedulable(if reasons.is_empty() { "no reason given".into() } else { reasons.join("; ") })
            }
            Err(e) => {
                let message = format!("the scheduler failed: {e}");
                crate::telemetry::record_error(&tracing::Span::current(), &message);
                Failure::Error(message)
            }
        };
        Attempt::Failed(self.failed(r, &uid, failure, started))
    }

    /// Binds a decided Pod, frees its `slot`, and reports how it went.
    async fn bind(&self, d: Decision, slot: OwnedSemaphorePermit) {
        let namespace = d.r.namespace.as_deref().unwrap_or_default();
        let binding = json!({
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": d.r.name, "namespace": namespace, "uid": d.uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": d.node},
        });
        let api = Api::<Pod>::namespaced(self.setup.cluster.client().clone(), namespace);
        // The Pod, the Node and the answer's code: never the Pod itself.
        let span = tracing::info_span!(
            "bind",
            pod = %d.r,
            node = %d.node,
            status_code = tracing::field::Empty,
            "otel.status_code" = tracing::field::Empty,
            "otel.status_message" = tracing::field::Empty,
        );
        let result = api
            .create_subresource::<_, Value>("binding", &d.r.name, &PostParams::default(), &binding)
            .instrument(span.clone())
            .await
            .map_err(map_error);
        crate::telemetry::record_request(&span, &result);
        drop(slot);
        match result {
            Ok(_) => {
                lock(&self.view).forget(&d.r);
                metrics().scheduler_attempted(&self.owner, "scheduled", d.started.elapsed());
                tracing::info!(pod = %d.r, node = %d.node, "pod bound");
                self.queue.done(&d.r);
                let note = format!("Successfully assigned {namespace}/{} to {}", d.r.name, d.node);
                let _turn = self.reports.acquire().await.expect("the semaphore is never closed");
                self.event(&d.r, &d.uid, false, SCHEDULED, "Binding", note).await;
            }
            Err(e @ (cluster::Error::Conflict(_) | cluster::Error::AlreadyExists(_) | cluster::Error::NotFound(_))) => {
                // Bound already (by an earlier attempt, another replica or
                // another scheduler), or gone: never bound twice.
                let mut view = lock(&self.view);
                view.account.forget(&d.uid);
                view.forget(&d.r);
                drop(view);
                tracing::info!(pod = %d.r, error = %e, "pod already bound or gone, dropped");
                self.queue.done(&d.r);
            }
            Err(e) => {
                lock(&self.view).account.forget(&d.uid);
                let failure = Failure::Error(format!("binding to {} failed: {e}", d.node));
                let report = self.failed(&d.r, &d.uid, failure, d.started);
                self.queue.done(&d.r);
                self.report(report).await;
            }
        }
    }

    /// Counts a failed attempt (metrics, backoff) and queues its retry;
    /// returns what is to be reported, its message bounded.
    fn failed(&self, r: &ObjectRef, uid: &str, failure: Failure, started: Instant) -> Report {
        let failure = failure.bounded();
        let (result, message) = match &failure {
            Failure::Unschedulable(m) => ("unschedulable", m),
            Failure::Error(m) => ("error", m),
        };
        metrics().scheduler_attempted(&self.owner, result, started.elapsed());
        tracing::info!(pod = %r, result, message = %message, "pod not scheduled");
        let failures = {
            let mut view = lock(&self.view);
            if matches!(failure, Failure::Unschedulable(_)) {
                view.unschedulable.insert(r.clone());
            }
            let n = view.failures.entry(r.clone()).or_insert(0);
            *n += 1;
            *n
        };
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos().into())
            .unwrap_or(0);
        self.queue.add_after(r.clone(), self.setup.settings.backoff.delay(failures, seed));
        Report { r: r.clone(), uid: uid.to_owned(), failure }
    }

    /// Reports a failed attempt: the Event, and the condition of an
    /// unschedulable Pod.
    async fn report(&self, report: Report) {
        let Report { r, uid, failure } = report;
        let _turn = self.reports.acquire().await.expect("the semaphore is never closed");
        let message = match &failure {
            Failure::Unschedulable(m) | Failure::Error(m) => m.clone(),
        };
        self.event(&r, &uid, true, FAILED_SCHEDULING, "Scheduling", message).await;
        if let Failure::Unschedulable(message) = &failure {
            self.set_unschedulable(&r, message).await;
        }
    }

    /// Sets the Pod's `PodScheduled` condition to `False`, reason
    /// `Unschedulable`, unless it says so already.
    async fn set_unschedulable(&self, r: &ObjectRef, message: &str) {
        let current = lock(&self.view).pending.get(r).cloned();
        let same = current.as_ref().and_then(|p| p.status.as_ref()?.conditions.as_ref()).is_some_and(|c| {
            c.iter().any(|c| {
                c.type_ == "PodScheduled"
                    && c.status == "False"
                    && c.reason.as_deref() == Some(UNSCHEDULABLE)
                    && c.message.as_deref() == Some(message)
            })
        });
        if same || current.is_none() {
            return;
        }
        let patch = json!({"status": {"conditions": [{
            "type": "PodScheduled",
            "status": "False",
            "reason": UNSCHEDULABLE,
            "message": message,
            "lastTransitionTime": Timestamp::now().to_string(),
            "lastProbeTime": null,
        }]}});
        if let Err(e) = self.setup.backend.patch(r, Patch::Strategic(patch), Subresource::Status).await {
            tracing::warn!(pod = %r, error = %e, "cannot set the PodScheduled condition");
        }
    }

    async fn event(&self, r: &ObjectRef, uid: &str, warning: bool, reason: &str, action: &str, note: String) {
        let event = EventRecord {
            regarding: r.clone(),
            regarding_uid: Some(uid.to_owned()).filter(|u| !u.is_empty()),
            warning,
            reason: reason.to_owned(),
            action: action.to_owned(),
            note: Some(note),
            reporting_controller: self.reconciler.component().manifest.name.clone(),
        };
        let span = event.span();
        let result = self.setup.backend.record_event(event).instrument(span.clone()).await;
        crate::telemetry::record_request(&span, &result);
        if let Err(e) = result {
            tracing::warn!(pod = %r, reason, error = %e, "cannot record event");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_messages_read_right() {
        assert_eq!(Error::NotAScheduler("greeter".into()).to_string(), "component greeter declares no scheduler");
    }

    #[test]
    fn a_scheduler_leases_its_own_name() {
        assert_eq!(lease("zone-spread"), "capstan-scheduler-zone-spread");
    }

    #[test]
    fn a_node_change_that_matters_changes_its_fingerprint_and_a_heartbeat_does_not() {
        let node = |cpu: &str, heartbeat: &str| -> Node {
            serde_json::from_value(json!({
                "metadata": {"name": "n1", "labels": {"zone": "a"}},
                "status": {
                    "allocatable": {"cpu": cpu},
                    "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": heartbeat}],
                },
            }))
            .expect("a node")
        };
        let a = cached_node(&node("2", "2026-01-01T00:00:00Z"));
        let b = cached_node(&node("2", "2026-01-01T00:00:10Z"));
        let c = cached_node(&node("4", "2026-01-01T00:00:10Z"));
        assert_eq!(a.fingerprint, b.fingerprint);
        assert_ne!(b.fingerprint, c.fingerprint);
        let allocatable: Vec<(&str, i64)> = c.allocatable.iter().map(|r| (r.name.as_str(), r.milli)).collect();
        assert_eq!(allocatable, [("cpu", 4000)]);
    }

    #[test]
    fn the_guest_gets_what_a_policy_reads_of_a_node_and_nothing_else() {
        let node: Node = serde_json::from_value(json!({
            "metadata": {
                "name": "n1",
                "uid": "u1",
                "labels": {"zone": "a"},
                "managedFields": [{"manager": "kubelet", "operation": "Update"}],
                "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "x", "uid": "u0"}],
            },
            "spec": {"unschedulable": true, "taints": [{"key": "k", "effect": "NoSchedule"}]},
            "status": {
                "capacity": {"cpu": "8"},
                "allocatable": {"cpu": "7"},
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                    "lastHeartbeatTime": "2026-01-01T00:00:10Z", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                "images": [{"names": ["registry.k8s.io/pause:3.10"], "sizeBytes": 1}],
                "nodeInfo": {"machineID": "m", "systemUUID": "", "bootID": "", "kernelVersion": "", "osImage": "",
                    "containerRuntimeVersion": "", "kubeletVersion": "", "kubeProxyVersion": "",
                    "operatingSystem": "linux", "architecture": "amd64"},
                "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
            },
        }))
        .expect("a node");
        let cached: Value = serde_json::from_slice(&cached_node(&node).json).expect("json");
        assert_eq!(
            cached,
            json!({
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": "n1", "uid": "u1", "labels": {"zone": "a"}},
                "spec": {"unschedulable": true, "taints": [{"key": "k", "effect": "NoSchedule"}]},
                "status": {
                    "capacity": {"cpu": "8"},
                    "allocatable": {"cpu": "7"},
                    "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                },
            })
        );
        let parsed: Node = serde_json::from_value(cached).expect("the guest parses it as a v1 Node");
        assert_eq!(parsed.metadata.name.as_deref(), Some("n1"));
    }
}
