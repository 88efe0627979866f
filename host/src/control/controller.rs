//! A controller on a real cluster: waits until the kinds its manifest
//! names are served, subscribes to their shared watches, maps changes to
//! primary objects, and runs up to `max_concurrency` reconciles at a time
//! from a keyed queue, with requeue-after, periodic resync, and exponential
//! backoff with jitter after errors and traps.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use kube::api::DynamicObject;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::Instrument;

use crate::cluster::{self, kube::KubeCluster};
use crate::control::clusters::Clusters;
use crate::control::informer::{Change, Informer, Informers};
use crate::control::mapping;
use crate::control::queue::Queue;
use crate::control::reconciler::{Action, Reconciler};
use crate::manifest::Manifest;
use crate::metrics::{Owner, metrics};
use crate::object::{Gvk, ObjectRef};
use crate::sync::lock;

mod members;

/// Retry timing after failures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub struct Backoff {
    /// Delay after the first failure; doubles per consecutive failure.
    /// Default: 1 s.
    pub base: Duration,
    /// Longest delay. Default: 5 min.
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self { base: Duration::from_secs(1), max: Duration::from_secs(300) }
    }
}

impl Backoff {
    /// The delay after `failures` consecutive failures, with ±20 % jitter so
    /// that many objects failing together do not retry in lockstep.
    pub fn delay(&self, failures: u32, jitter_seed: u64) -> Duration {
        let factor = 1u32.checked_shl(failures.saturating_sub(1).min(20)).unwrap_or(u32::MAX);
        let plain = self.base.saturating_mul(factor).min(self.max);
        // A cheap, well-spread number in [0.8, 1.2).
        let spread = (jitter_seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) as f64 / (1u64 << 24) as f64;
        plain.mul_f64(0.8 + 0.4 * spread)
    }
}

/// How soon an object whose reconcile hit a 409 conflict is looked at again.
pub const CONFLICT_REQUEUE: Duration = Duration::from_millis(100);

/// Where a controller is in its life.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    /// Waiting for kinds the cluster does not serve yet.
    WaitingForKinds(Vec<Gvk>),
    /// Kinds are served; waiting for the first list of each.
    Syncing,
    /// Caches synced, not reconciling: another replica leads.
    Standby,
    /// Watching and reconciling.
    Running,
    /// Not reconciling in this cluster: the component runs in others (a
    /// fleet controller's home, or the clusters its manifest names).
    Elsewhere,
    /// Stopped.
    Stopped,
}

impl State {
    /// The state as a word: `waiting_for_kinds`, `syncing`, `standby`,
    /// `running`, `elsewhere` or `stopped` (the `state` label of
    /// `capstan_controllers`).
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::WaitingForKinds(_) => "waiting_for_kinds",
            Self::Syncing => "syncing",
            Self::Standby => "standby",
            Self::Running => "running",
            Self::Elsewhere => "elsewhere",
            Self::Stopped => "stopped",
        }
    }
}

/// Settings of the controller runner.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Retry timing.
    pub backoff: Backoff,
    /// How often to look again for kinds that are not served yet.
    pub rediscovery: Duration,
    /// The clusters of the host process, where a fleet controller watches
    /// its children in its members. Default: none (a host of one cluster).
    pub clusters: Option<Arc<Clusters>>,
}

impl Default for Settings {
    fn default() -> Self {
        Self { backoff: Backoff::default(), rediscovery: Duration::from_secs(5), clusters: None }
    }
}

/// Counters of one controller.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Successful reconciles.
    pub succeeded: u64,
    /// Failed reconciles (errors and traps).
    pub failed: u64,
    /// The last error, if any.
    pub last_error: Option<String>,
}

/// How long [`Controller::stop`] lets reconciles in flight finish before
/// cancelling them.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// A running controller. Its methods take `&self`, so the host can share it
/// with the status API while it runs.
pub struct Controller {
    parts: Arc<Parts>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// What a controller's handle, its task and its workers share.
struct Parts {
    name: String,
    /// The controller in its cluster, for metrics.
    owner: Owner,
    reconciler: Arc<Reconciler>,
    cluster: KubeCluster,
    informers: Arc<Informers>,
    settings: Settings,
    state: Mutex<State>,
    counts: Mutex<Counts>,
    queue: Arc<Queue>,
    /// The primary kind's informer, once the controller runs.
    primary: OnceLock<Arc<Informer>>,
}

impl Parts {
    /// Where the controller is.
    fn state(&self) -> State {
        lock(&self.state).clone()
    }

    /// Sets the state and the `capstan_controllers` gauge.
    fn set_state(&self, new: State) {
        metrics().set_controller_state(&self.owner, Some(new.as_str()));
        *lock(&self.state) = new;
    }

    /// The primary objects the cache holds (none before the controller
    /// runs).
    fn primary_objects(&self) -> Vec<ObjectRef> {
        let Some(primary) = self.primary.get() else { return Vec::new() };
        let manifest = Arc::clone(&self.reconciler.component().manifest);
        primary.store().state().iter().filter_map(|o| primary_ref(&manifest.primary, o)).collect()
    }
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller")
            .field("name", &self.parts.name)
            .field("state", &self.state())
            .finish_non_exhaustive()
    }
}

impl Controller {
    /// Starts a controller for `reconciler` on the shared `informers`. With
    /// `leading` (see [`crate::control::leader`]), it keeps its caches warm always
    /// but reconciles only while that reads `true`, and stops at once when
    /// it turns `false`.
    pub fn start(
        reconciler: Arc<Reconciler>,
        cluster: KubeCluster,
        informers: Arc<Informers>,
        settings: Settings,
        leading: Option<watch::Receiver<bool>>,
    ) -> Self {
        Self::start_with(reconciler, cluster, informers, settings, Counts::default(), leading)
    }

    /// Starts `previous`'s reconciler again (after a swap that changed what
    /// it watches), keeping its counters and what it handled. `previous`
    /// should be [stopped](Self::stop) first; the shared watches stay, only
    /// the subscriptions are made anew.
    pub fn resume(previous: &Controller, leading: Option<watch::Receiver<bool>>) -> Self {
        let p = &previous.parts;
        Self::start_with(
            Arc::clone(&p.reconciler),
            p.cluster.clone(),
            Arc::clone(&p.informers),
            p.settings.clone(),
            previous.counts(),
            leading,
        )
    }

    fn start_with(
        reconciler: Arc<Reconciler>,
        cluster: KubeCluster,
        informers: Arc<Informers>,
        settings: Settings,
        counts: Counts,
        leading: Option<watch::Receiver<bool>>,
    ) -> Self {
        let name = reconciler.component().manifest.name.clone();
        let span = tracing::info_span!("controller", controller = %name);
        let owner = Owner::new(reconciler.cluster_name(), name.as_str());
        let parts = Arc::new(Parts {
            queue: Queue::named(owner.clone()),
            owner,
            name,
            reconciler,
            cluster,
            informers,
            settings,
            state: Mutex::new(State::WaitingForKinds(vec![])),
            counts: Mutex::new(counts),
            primary: OnceLock::new(),
        });
        let task = tokio::spawn(run(Arc::clone(&parts), leading).instrument(span));
        Self { parts, task: Mutex::new(Some(task)) }
    }

    /// The controller's name.
    pub fn name(&self) -> &str {
        &self.parts.name
    }

    /// Its reconciler (and through it, the component version in use).
    pub fn reconciler(&self) -> &Arc<Reconciler> {
        &self.parts.reconciler
    }

    /// Where it is.
    pub fn state(&self) -> State {
        self.parts.state()
    }

    /// Its counters.
    pub fn counts(&self) -> Counts {
        lock(&self.parts.counts).clone()
    }

    /// Objects waiting in its queue.
    pub fn queue_len(&self) -> usize {
        self.parts.queue.len()
    }

    /// Queues every primary object the cache holds (after a new component
    /// version was swapped in, so that it sees each object once). A
    /// controller that does not run yet queues them when it starts anyway.
    /// Returns how many were queued.
    pub fn resync_all(&self) -> usize {
        let objects = self.primary_objects();
        let n = objects.len();
        self.resync(objects);
        n
    }

    /// The primary objects the cache holds (none before the controller
    /// runs).
    pub fn primary_objects(&self) -> Vec<ObjectRef> {
        self.parts.primary_objects()
    }

    /// Queues `objects` to be reconciled again.
    pub fn resync(&self, objects: impl IntoIterator<Item = ObjectRef>) {
        for r in objects {
            self.parts.queue.add(r);
        }
    }

    /// Stops watching and reconciling. Reconciles in flight finish (for at
    /// most [`DRAIN_TIMEOUT`]); nothing new starts. Idempotent.
    pub async fn stop(&self) {
        let Some(mut task) = lock(&self.task).take() else { return };
        self.parts.queue.close();
        if !matches!(self.state(), State::Running) {
            // Still discovering or syncing: nothing in flight.
            task.abort();
        }
        if tokio::time::timeout(DRAIN_TIMEOUT, &mut task).await.is_err() {
            tracing::warn!(controller = %self.parts.name, "reconciles still running after {DRAIN_TIMEOUT:?}, cancelled");
            task.abort();
            let _ = task.await;
        }
        self.parts.set_state(State::Stopped);
        metrics().remove_controller(&self.parts.owner);
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        if let Some(task) = lock(&self.task).take() {
            task.abort();
        }
    }
}

async fn run(parts: Arc<Parts>, leading: Option<watch::Receiver<bool>>) {
    let manifest = Arc::clone(&parts.reconciler.component().manifest);
    if !manifest.runs_in(parts.reconciler.cluster_name()) {
        parts.set_state(State::Elsewhere);
        tracing::info!(
            home = manifest.fleet.as_ref().map(|f| f.home.as_str()),
            "runs in other clusters: no reconcile loop here"
        );
        return;
    }
    if !manifest.roles.reconcile {
        // Loaded only for its other roles (a scheduler, webhooks): no
        // watches, no reconcile loop; they follow the version in use
        // through the reconciler.
        parts.set_state(State::Running);
        tracing::info!(roles = ?manifest.roles.names(), "no reconcile role: no reconcile loop");
        return;
    }
    let Parts { cluster, informers, settings, queue, .. } = &*parts;
    // Each kind once: a kind that is both primary and owned (or watched) is
    // routed once per change, and `targets` finds every role it plays.
    let mut kinds = vec![manifest.primary.clone()];
    for kind in manifest.owns.iter().map(|o| &o.kind).chain(manifest.watches.iter().map(|w| &w.kind)) {
        if !kinds.iter().any(|k| k.same_group_kind(kind)) {
            kinds.push(kind.clone());
        }
    }
    // A kind that only one role needs may be scoped by that role's label
    // selector (an owned kind's, or a watch's); a kind that is primary, or
    // both owned and watched, is watched whole and filtered when routed.
    let selector_of = |kind: &Gvk| -> Option<String> {
        let owned = manifest.owned(kind);
        let watched = manifest.watches.iter().find(|w| w.kind.same_group_kind(kind));
        match (manifest.primary.same_group_kind(kind), owned, watched) {
            (false, Some(o), None) => o.label_selector.clone(),
            (false, None, Some(w)) => w.label_selector.clone(),
            _ => None,
        }
    };

    // Discovery: wait until every kind is served.
    let mut reported: Option<Vec<Gvk>> = None;
    loop {
        let mut missing = Vec::new();
        for kind in &kinds {
            if let Err(e) = cluster.resolve(kind).await {
                tracing::debug!(kind = %kind, error = %e, "kind not resolved");
                missing.push(kind.clone());
            }
        }
        if missing.is_empty() {
            break;
        }
        if reported.as_ref() != Some(&missing) {
            let names: Vec<String> = missing.iter().map(ToString::to_string).collect();
            tracing::warn!(kinds = %names.join(", "), "waiting for kinds the cluster does not serve");
            reported = Some(missing.clone());
        }
        parts.set_state(State::WaitingForKinds(missing));
        tokio::time::sleep(settings.rediscovery).await;
    }

    let mut subscriptions = Vec::new();
    for kind in &kinds {
        match informers.get_selected(kind, selector_of(kind).as_deref()).await {
            Ok(informer) => subscriptions.push((kind.clone(), informer.subscribe(), informer)),
            Err(e) => {
                tracing::error!(kind = %kind, error = %e, "cannot watch kind");
                parts.set_state(State::WaitingForKinds(vec![kind.clone()]));
                return;
            }
        }
    }
    parts.set_state(State::Syncing);
    for (kind, _, informer) in &subscriptions {
        // Wait for the first list, reporting why it does not come (a 403
        // from RBAC, an API server that is down).
        loop {
            match tokio::time::timeout(Duration::from_secs(1), informer.synced()).await {
                Ok(()) => break,
                Err(_) => {
                    if let Some(e) = informer.last_error() {
                        lock(&parts.counts).last_error = Some(format!("watching {kind}: {e}"));
                    }
                }
            }
        }
    }
    let primary_informer = subscriptions.first().map(|(_, _, i)| Arc::clone(i)).expect("the primary kind is first");
    let namespaced = match cluster.resolve(&manifest.primary).await {
        Ok(resolved) => resolved.namespaced(),
        Err(e) => {
            tracing::error!(kind = %manifest.primary, error = %e, "cannot resolve the primary kind");
            parts.set_state(State::WaitingForKinds(vec![manifest.primary.clone()]));
            return;
        }
    };

    let _ = parts.primary.set(Arc::clone(&primary_informer));
    // Routers end when this task does (the JoinSet aborts them on drop).
    let mut routers = JoinSet::new();
    for (kind, receiver, informer) in subscriptions {
        let manifest = Arc::clone(&manifest);
        let queue = Arc::clone(queue);
        let primary = Arc::clone(&primary_informer);
        let reconciler = Arc::clone(&parts.reconciler);
        routers.spawn(async move {
            route(manifest, namespaced, kind, receiver, informer, primary, reconciler, queue).await;
        });
    }
    if let (Some(_), Some(clusters)) = (&manifest.fleet, &settings.clusters) {
        let (parts, manifest, clusters) = (Arc::clone(&parts), Arc::clone(&manifest), Arc::clone(clusters));
        let primary = Arc::clone(&primary_informer);
        routers.spawn(async move { members::follow(parts, manifest, clusters, primary, namespaced).await });
    }
    let worker =
        Arc::new(Worker { parts: Arc::clone(&parts), failures: Mutex::default(), span: tracing::Span::current() });
    let queue_all = || {
        // Everything cached: an informer shared with another controller may
        // have announced its first list before this controller subscribed,
        // and a new leader must look at every object. (An object can be
        // queued twice at start; a reconcile is idempotent.)
        for r in parts.primary_objects() {
            queue.add(r);
        }
    };
    let workers = |n: u32| {
        let mut set = JoinSet::new();
        for _ in 0..n {
            set.spawn(Arc::clone(&worker).work());
        }
        set
    };
    match leading {
        None => {
            queue_all();
            parts.set_state(State::Running);
            tracing::info!(concurrency = manifest.max_concurrency, "controller running");
            // Workers end when the queue is closed, each after its
            // reconcile in flight.
            let mut running = workers(manifest.max_concurrency);
            while running.join_next().await.is_some() {}
        }
        Some(mut leading) => loop {
            parts.set_state(State::Standby);
            metrics().set_leader(&parts.owner, false);
            tracing::info!("standing by: caches warm, not leading");
            if leading.wait_for(|l| *l).await.map(|_| ()).is_err() {
                break;
            }
            queue_all();
            parts.set_state(State::Running);
            metrics().set_leader(&parts.owner, true);
            tracing::info!(concurrency = manifest.max_concurrency, "leading: controller running");
            let mut running = workers(manifest.max_concurrency);
            tokio::select! {
                () = async { while running.join_next().await.is_some() {} } => break,
                _ = async { leading.wait_for(|l| !*l).await.map(|_| ()) } => {
                    // Lost the lease: stop at once, even mid-reconcile; the
                    // next leader reconciles every object again.
                    running.abort_all();
                    while running.join_next().await.is_some() {}
                    queue.reset();
                    tracing::warn!("lost leadership: stopped reconciling");
                }
            }
        },
    }
    // Wait for the routers to go, so that the watches they held can be
    // stopped if no one else uses them.
    routers.shutdown().await;
    parts.set_state(State::Stopped);
    tracing::info!("controller stopped");
}

/// What each worker of a controller shares.
struct Worker {
    parts: Arc<Parts>,
    /// Consecutive failures per object, for the backoff.
    failures: Mutex<HashMap<ObjectRef, u32>>,
    /// The controller's span, parent of each reconcile's.
    span: tracing::Span,
}

impl Worker {
    /// Reconciles objects from the queue until it is closed.
    async fn work(self: Arc<Self>) {
        let Self { parts, failures, span: controller_span } = &*self;
        let Parts { queue, reconciler, counts, settings, owner, .. } = &**parts;
        let backoff = settings.backoff;
        while let Some((r, waited)) = queue.next_waited().await {
            tracing::trace!(object = %r, "dequeued");
            // A trace of its own in the export (see `telemetry::start_trace`);
            // under the controller's span in the log lines.
            let span = tracing::info_span!(
                parent: controller_span,
                "reconcile",
                controller = %reconciler.component().manifest.name,
                object = %r,
                queue_wait_ms = waited.as_secs_f64() * 1000.0,
                event = tracing::field::Empty,
                outcome = tracing::field::Empty,
                duration_ms = tracing::field::Empty,
                trace_id = tracing::field::Empty,
                "otel.status_code" = tracing::field::Empty,
                "otel.status_message" = tracing::field::Empty,
            );
            crate::telemetry::start_trace(&span);
            // The wait, a span of the trace though it ended before the
            // trace began: from when the object was queued ready to run
            // until now, when this worker took it.
            let taken = std::time::SystemTime::now();
            let queued = taken.checked_sub(waited).unwrap_or(taken);
            crate::telemetry::record_span(&span, "queue_wait", queued, taken);
            let started = std::time::Instant::now();
            let report = reconciler.reconcile(&r).instrument(span.clone()).await;
            metrics().reconciled(owner, report.metrics_result(), started.elapsed());
            if let Some(event) = report.event {
                span.record("event", event.as_str());
            }
            span.record("duration_ms", started.elapsed().as_secs_f64() * 1000.0);
            span.record(
                "outcome",
                match &report.result {
                    Ok(Action::Requeue(_)) => "requeue",
                    Ok(Action::AwaitChange) => "ok",
                    Err(e) if e.is_retryable() => "retry",
                    Err(_) => "terminal",
                },
            );
            if let Err(e) = &report.result
                && !e.is_conflict()
            {
                crate::telemetry::record_error(&span, &e.to_string());
            }
            tracing::debug!(parent: &span, "reconciled");
            let mut n = lock(failures);
            match &report.result {
                Ok(action) => {
                    n.remove(&r);
                    lock(counts).succeeded += 1;
                    if let Action::Requeue(after) = action {
                        queue.add_after(r.clone(), *after);
                    }
                }
                Err(e) if e.is_conflict() => {
                    // A stale cache, not a failure: look again shortly.
                    tracing::debug!(parent: &span, error = %e, "conflict, requeued");
                    queue.add_after(r.clone(), CONFLICT_REQUEUE);
                }
                Err(e) => {
                    // The guest's messages are bounded in the error already;
                    // the API server's (which may quote the guest's objects)
                    // are bounded here.
                    let error = cluster::bounded(&e.to_string(), cluster::MAX_MESSAGE);
                    let mut c = lock(counts);
                    c.failed += 1;
                    c.last_error = Some(format!("{r}: {error}"));
                    drop(c);
                    tracing::warn!(parent: &span, error = %error, "reconcile failed");
                    let failures = n.entry(r.clone()).or_insert(0);
                    *failures += 1;
                    let exhausted = e.retry_limit().is_some_and(|limit| *failures > limit);
                    if e.is_retryable() && !exhausted {
                        metrics().queue_retried(owner);
                        let seed = std::time::SystemTime::now()
                            .duration_since(std::time::UNIX_EPOCH)
                            .map(|d| d.subsec_nanos().into())
                            .unwrap_or(0);
                        queue.add_after(r.clone(), backoff.delay(*failures, seed));
                    } else if !exhausted {
                        n.remove(&r);
                    }
                }
            }
            drop(n);
            queue.done(&r);
        }
    }
}

/// The primary object reference of a cached object.
fn primary_ref(primary: &Gvk, object: &DynamicObject) -> Option<ObjectRef> {
    Some(ObjectRef::new(primary.clone(), object.metadata.namespace.as_deref(), object.metadata.name.clone()?))
}

/// Turns the changes of one watched kind into queue entries (except the
/// object whose reconcile made a change, see [`Reconciler::written_for`]).
#[allow(clippy::too_many_arguments, reason = "one private task wiring a watch to its queue")]
async fn route(
    manifest: Arc<Manifest>,
    namespaced: bool,
    kind: Gvk,
    mut receiver: tokio::sync::broadcast::Receiver<Change>,
    informer: Arc<Informer>,
    primary: Arc<Informer>,
    reconciler: Arc<Reconciler>,
    queue: Arc<Queue>,
) {
    // Changes waiting for the answer to a write of the host's; they end
    // with this task.
    let mut pending = JoinSet::new();
    loop {
        let changes: Vec<Change> = match receiver.recv().await {
            Ok(change) => vec![change],
            Err(RecvError::Lagged(missed)) => {
                tracing::warn!(kind = %kind, missed, "change stream lagged, rereading the cache");
                informer.store().state().iter().map(|o| Change::of(o, false)).collect()
            }
            Err(RecvError::Closed) => return,
        };
        let primaries = |namespace: Option<&str>| -> Vec<ObjectRef> {
            let objects = primary.store().state();
            objects
                .iter()
                .filter(|p| namespace.is_none() || p.metadata.namespace.as_deref() == namespace)
                .filter_map(|p| primary_ref(&manifest.primary, p))
                .collect()
        };
        for Change { meta, deleted } in changes {
            let own = reconciler.written_for(&kind, &meta, deleted);
            let targets = mapping::targets(&manifest, namespaced, &kind, &meta, &primaries);
            if own.is_none() && !deleted && reconciler.writing_to(&kind, &meta) {
                // Perhaps the event of a write whose answer has not come
                // back yet: decided once it has (milliseconds), so that
                // the host's own write is no trigger on a busy machine
                // either. Other changes go on meanwhile.
                let (kind, reconciler, queue) = (kind.clone(), Arc::clone(&reconciler), Arc::clone(&queue));
                pending.spawn(async move {
                    reconciler.answered(&kind, &meta).await;
                    let own = reconciler.written_for(&kind, &meta, false);
                    enqueue(&queue, &kind, targets, own.as_ref());
                });
                continue;
            }
            enqueue(&queue, &kind, targets, own.as_ref());
        }
        while pending.try_join_next().is_some() {}
    }
}

/// Queues `targets` of a change of `kind`, except `own`, the object whose
/// reconcile made it.
fn enqueue(queue: &Queue, kind: &Gvk, targets: Vec<ObjectRef>, own: Option<&ObjectRef>) {
    for r in targets {
        if own == Some(&r) {
            tracing::trace!(from = %kind, object = %r, "the host's own write: not queued");
            continue;
        }
        tracing::trace!(from = %kind, object = %r, "queued");
        queue.add(r);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_with_jitter_and_caps() {
        let b = Backoff { base: Duration::from_secs(1), max: Duration::from_secs(60) };
        for seed in [0, 1, 12345, u64::MAX] {
            let first = b.delay(1, seed);
            assert!(first >= Duration::from_millis(800) && first < Duration::from_millis(1200), "{first:?}");
            let third = b.delay(3, seed);
            assert!(third >= Duration::from_millis(3200) && third < Duration::from_millis(4800), "{third:?}");
            assert!(b.delay(30, seed) < Duration::from_secs(72));
        }
    }
}
