//! One reconcile, from an object reference to an applied outcome: the
//! controller semantics shared by the real host and the mock host.
//!
//! # Guarantees
//!
//! - The event kind is derived from state, not from watch events: the
//!   object is compared with what this controller last handled
//!   successfully (new uid → `added`, changed generation or
//!   resourceVersion → `modified`, deletion timestamp → `deleted`,
//!   unchanged → `resync`). Merged triggers lose nothing.
//! - After a host restart, what survives the host says whether an object
//!   was handled before: the controller's finalizer on it, a
//!   `status.observedGeneration`, or fields its field manager wrote. Such
//!   an object is `modified` if its generation is newer than its
//!   `status.observedGeneration`, else `resync`; only an object with none
//!   of these marks is `added`.
//! - With a finalizer declared, it is added before the first `added`, and
//!   removed only after `deleted` succeeds.
//! - Children are checked before any is applied: a declared kind, a valid
//!   name, the namespace the grants allow (a namespaced owner's own
//!   namespace; for a cluster-scoped owner, the scope its manifest gives
//!   the kind; never a namespace the host does not watch), the owned
//!   kind's label selector, `bind` declared for a role a binding refers
//!   to. Guest-made ownerReferences are dropped; the host sets the one
//!   controller ownerReference. A child another owner controls is refused.
//! - Children are applied by server-side apply with this controller's field
//!   manager; with `children-policy: prune`, children of owned kinds that
//!   the outcome no longer lists are deleted, and only when every child
//!   was applied. `keep` deletes none of them, and orphans none.
//! - An outcome of `deleted` applies no children and writes no status.
//!   With `prune` the children follow the object: the garbage collector
//!   deletes them through the host's ownerReference once it is gone. With
//!   `keep` the host removes that ownerReference (and only that one) from
//!   every child the object controls, by a JSON patch that tests the
//!   entry, before it removes its finalizer; a child it cannot release is
//!   reported as a refused child and the finalizer stays.
//! - A child the API server refuses for a reason a retry cannot fix (400,
//!   403, 404, 422, or owned by another) is reported: a Warning Event
//!   naming it, the host's `Reconciled=False` condition, and the guest's
//!   next `reconcile-request.failed-children`. The object is retried with
//!   backoff [`Error::retry_limit`] times, then waits for a change.
//! - The host writes only what it owns into a status: the guest's status
//!   (the outcome's or the failure's), by server-side apply with the
//!   controller's field manager, with `observedGeneration` filled in when
//!   the guest left it out, and only when it differs from the current one;
//!   and its own condition ([`CONDITION`]), by a JSON patch of that one
//!   list entry whose `test` operations make it fail rather than overwrite
//!   a list that changed since it was read. Whatever else the status holds,
//!   whoever wrote it while the guest ran (the guest itself through the
//!   API included), stays: without a status of the guest's only the
//!   condition is written. This holds whether the schema makes `conditions`
//!   an atomic list or a list-map. When the guest's status carries a
//!   `conditions` list, the host's condition is merged into it by type, so
//!   one write carries both.
//! - The host's condition keeps its `lastTransitionTime` while its status
//!   stays the same, and is removed at the next success.
//! - A failure keeps the children as they are, writes the failure's status
//!   and events, and (terminal) records a Warning Event and sets
//!   `Reconciled=False`. A terminal failure is not retried until the object
//!   changes: triggers caused by the host's own writes, children, watched
//!   objects or resyncs do not call the guest again.
//! - Any child refused sets `Reconciled=False` (reason `ChildRefused`),
//!   whatever the guest's status says and even when the API server refuses
//!   that status.
//! - Every message a guest hands the host (a failure's message, a name in
//!   an invalid outcome) is bounded to [`cluster::MAX_MESSAGE`] bytes
//!   ([`cluster::bounded`]) before it is logged, recorded in an Event or
//!   written into a condition.
//! - A change the host itself made is no trigger: the watch event of its
//!   own finalizer patch, status write or child apply (recognised by the
//!   resourceVersion the write returned, see [`Reconciler::written_for`];
//!   an event that arrives before the write's answer is decided once the
//!   answer is in) does not queue the object whose reconcile wrote it, so a
//!   reconcile is not followed by a second one that would only find its own
//!   work done.
//!   A change anyone else makes to the object or a child is a trigger as
//!   before, and so is every object after a relist.
//! - A fleet controller's children in its member clusters are checked,
//!   applied, pruned and deleted with the same care, marked instead of
//!   owned (see the `members` module: `reconciler/members.rs`); a member
//!   that does not answer holds up only its own children.
//! - A reconcile whose guest logged more lines than the per-invocation
//!   cap records one `LogsDropped` Warning Event on the primary object,
//!   with the counts (lines over the controller's log budget alone are
//!   reported in the host's log and metrics, not per object).
//!
//! # Caveats
//!
//! Without a finalizer, `deleted` is best-effort: it is delivered only if
//! this host saw the object before it disappeared. An object of a
//! controller without finalizer, status and field-manager writes to it
//! carries no mark of being handled and is `added` again after a restart.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Map, Value, json};
use tracing::Instrument as _;

use crate::cluster::{self, Cluster, EventRecord, Patch, Propagation, Subresource};
use crate::manifest::{self, Manifest, Verb};
use crate::object::{self, Gvk, ObjectRef};
use crate::runtime::bindings::capstan::operator::types as wit;
use crate::runtime::component::Loaded;
use crate::runtime::grants::{Grants, Request};
use crate::runtime::imports::events::event_record;
use crate::runtime::imports::{Caller, Journal};
use crate::runtime::invocation::{self as runtime, Runtime};
use crate::sync::lock;

mod members;

pub use crate::runtime::invocation::EventKind;

/// The type of the condition the host writes into a primary object's
/// `status.conditions` (`Reconciled=False` after a terminal failure, an
/// invalid outcome or a refused child; removed at the next success).
pub const CONDITION: &str = "Reconciled";

/// Most children one outcome may list.
pub const MAX_CHILDREN: usize = 512;
/// Most events one outcome or failure may list.
pub const MAX_EVENTS: usize = 64;

/// What to do after a successful reconcile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Reconcile again after this long (requested, or the resync period).
    Requeue(Duration),
    /// Wait for the next change.
    AwaitChange,
}

/// A child the API server (or the host) refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChildFailure {
    /// The child.
    pub child: ObjectRef,
    /// HTTP status code (409 for a child another owner controls).
    pub code: u16,
    /// Machine-readable reason, e.g. `Invalid`.
    pub reason: String,
    /// What was said.
    pub message: String,
    /// The member cluster of a fleet controller's child there; `None` for
    /// a child in the object's own cluster.
    pub cluster: Option<String>,
}

impl fmt::Display for ChildFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.cluster {
            Some(cluster) => {
                write!(f, "{} in cluster {cluster} ({} {}): {}", self.child, self.code, self.reason, self.message)
            }
            None => write!(f, "{} ({} {}): {}", self.child, self.code, self.reason, self.message),
        }
    }
}

impl From<&ChildFailure> for wit::ChildFailure {
    fn from(c: &ChildFailure) -> Self {
        wit::ChildFailure {
            child: wit::ObjectRef {
                kind: wit::GroupVersionKind {
                    group: c.child.gvk.group.clone(),
                    version: c.child.gvk.version.clone(),
                    kind: c.child.gvk.kind.clone(),
                },
                namespace: c.child.namespace.clone(),
                name: c.child.name.clone(),
            },
            code: c.code,
            reason: c.reason.clone(),
            message: c.message.clone(),
            cluster: c.cluster.clone(),
        }
    }
}

/// Why a reconcile failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The guest trapped, ran out of time or memory. Retried with backoff.
    #[error(transparent)]
    Guest(#[from] runtime::Error),
    /// The guest gave up and asked for a retry.
    #[error("transient: {0}")]
    Transient(String),
    /// The guest gave up for good; not retried until the object changes.
    #[error("terminal: {0}")]
    Terminal(String),
    /// The outcome asks for something the controller may not do (e.g. a
    /// child of an undeclared kind). Not retried.
    #[error("invalid outcome: {0}")]
    InvalidOutcome(String),
    /// Children were refused in a way a retry cannot fix. Retried with
    /// backoff up to [`Error::retry_limit`] times, then not until the
    /// object changes.
    #[error("{}", refused_text(.0))]
    ChildrenRefused(Vec<ChildFailure>),
    /// Reading the object or applying the outcome failed. Retried.
    #[error("applying the outcome failed: {0}")]
    Cluster(#[from] cluster::Error),
    /// The cache has not shown the host's last write to the object yet:
    /// reconciling it now would work from the state before that write.
    /// The guest is not called; the object is looked at again shortly,
    /// like after a conflict.
    #[error("the cache is behind the host's last write to the object")]
    CacheBehind,
    /// Member clusters of a fleet controller could not be reached: the
    /// rest of the outcome is applied, their children wait. Retried with
    /// backoff.
    #[error("member clusters not reached: {}", .0.join("; "))]
    Unreachable(Vec<String>),
}

fn plural(n: usize) -> String {
    if n == 1 { "1 child".into() } else { format!("{n} children") }
}

/// What the refused children say, bounded to [`cluster::MAX_MESSAGE`].
fn refused_list(refused: &[ChildFailure]) -> String {
    cluster::bounded(&refused.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "), cluster::MAX_MESSAGE)
}

fn refused_text(refused: &[ChildFailure]) -> String {
    format!("{} refused: {}", plural(refused.len()), refused_list(refused))
}

impl Error {
    /// True if retrying with backoff makes sense.
    pub fn is_retryable(&self) -> bool {
        !matches!(self, Error::Terminal(_) | Error::InvalidOutcome(_))
    }

    /// How many consecutive failures of this kind are retried before the
    /// object waits for a change; `None`: no limit.
    pub fn retry_limit(&self) -> Option<u32> {
        match self {
            Error::ChildrenRefused(_) => Some(3),
            _ => None,
        }
    }

    /// True for an optimistic-concurrency conflict (409) while applying,
    /// or a cache known to be behind the host's own write: the cache was
    /// behind a write. Not a failure: the object is simply reconciled
    /// again from fresher state.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Cluster(cluster::Error::Conflict(_)) | Error::CacheBehind)
    }
}

/// Everything one reconcile did.
#[derive(Debug)]
pub struct Report {
    /// The object.
    pub object: ObjectRef,
    /// The event delivered, if the guest was called.
    pub event: Option<EventKind>,
    /// The result.
    pub result: Result<Action, Error>,
    /// The guest's host calls, logs and stdio.
    pub journal: Journal,
    /// Children applied.
    pub applied: Vec<ObjectRef>,
    /// Children not applied because the apply would have changed nothing:
    /// the host applied the same object last time, and the child has not
    /// changed since (see [`Reconciler`]).
    pub unchanged: Vec<ObjectRef>,
    /// Children pruned.
    pub pruned: Vec<ObjectRef>,
    /// Children kept by an outcome of `deleted` that says
    /// `children-policy: keep`: the host removed its ownerReference from
    /// them, so the garbage collector leaves them when the object is gone.
    pub orphaned: Vec<ObjectRef>,
}

impl Report {
    /// How this reconcile is counted in `capstan_reconcile_total`: a
    /// requeue (asked for or the resync period) is `requeue_after`, a 409
    /// while applying is `conflict`, a retried failure (traps included) is
    /// `error`, one that is not retried is a terminal error.
    pub fn metrics_result(&self) -> crate::metrics::ReconcileResult {
        use crate::metrics::ReconcileResult as R;
        match &self.result {
            Ok(Action::AwaitChange) => R::Success,
            Ok(Action::Requeue(_)) => R::RequeueAfter,
            Err(e) if e.is_conflict() => R::Conflict,
            Err(e) if e.is_retryable() => R::Error,
            Err(_) => R::TerminalError,
        }
    }
}

#[derive(Clone, Debug)]
struct Handled {
    uid: Option<String>,
    generation: Option<i64>,
    /// The resourceVersion the guest saw, and the one after the host's own
    /// writes: a cache that has not caught up yet shows the first.
    resource_versions: [Option<String>; 2],
    /// Last state seen, for a best-effort `deleted` without finalizer
    /// (`None` for a controller with a finalizer: it never needs it).
    last: Option<Value>,
    /// The last attempt ended in a terminal failure: not retried until the
    /// object changes.
    terminal: bool,
}

/// An object the host wrote, by group, kind, namespace and name: the watch
/// of a kind may use another version than the write.
type WriteKey = (String, String, Option<String>, String);

fn write_key(gvk: &Gvk, namespace: Option<&str>, name: &str) -> WriteKey {
    (gvk.group.clone(), gvk.kind.clone(), namespace.map(str::to_owned), name.to_owned())
}

fn key_of(r: &ObjectRef) -> WriteKey {
    write_key(&r.gvk, r.namespace.as_deref(), &r.name)
}

/// Most writes of the host's to one object whose watch events are awaited
/// (a reconcile writes its primary object twice: finalizer and status).
const MAX_OWN_WRITES: usize = 4;

/// The host's writes to one object whose watch events have not been seen
/// yet, oldest first.
type OwnWrites = Vec<OwnWrite>;

/// One write of the host's whose watch event has not been seen yet.
struct OwnWrite {
    /// The resourceVersion its answer carried.
    rv: String,
    /// The primary object it was written for.
    primary: ObjectRef,
    /// When it was answered.
    at: Instant,
    /// The answer also showed a change of someone else's since the object
    /// written to was read (see [`only_touched`]): perhaps the write
    /// changed nothing and the resourceVersion is that other writer's.
    foreign: bool,
    /// Another event of the object came after the write was noted and
    /// before its own: then the foreign change had an event of its own.
    preceded: bool,
}

/// A write of the host's in flight (see [`Reconciler::writing_to`]).
struct Sending<'a> {
    reconciler: &'a Reconciler,
    key: WriteKey,
}

impl Drop for Sending<'_> {
    fn drop(&mut self) {
        let mut in_flight = lock(&self.reconciler.in_flight);
        if let Some(n) = in_flight.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                in_flight.remove(&self.key);
            }
        }
        drop(in_flight);
        self.reconciler.answered.notify_waiters();
    }
}

/// How long a write of the host's to an object, whose watch event has not
/// been seen, keeps that object's reconciles waiting for the cache. Past
/// it the event counts as lost (a relist after a watch restart shows only
/// the latest version) and the object is reconciled from what the cache
/// holds.
const OWN_WRITE_WAIT: Duration = Duration::from_secs(5);

/// The host's last apply of a child: the resourceVersion it returned and
/// the SHA-256 of the object it sent.
type LastApply = (String, [u8; 32]);

fn digest(child: &Value) -> [u8; 32] {
    use sha2::Digest as _;
    sha2::Sha256::digest(serde_json::to_vec(child).expect("a JSON value serialises")).into()
}

/// A new version on trial (a canary) for a share of the objects.
struct Trial {
    component: Arc<Loaded>,
    grants: Arc<Grants>,
    percent: u8,
    /// Objects of the share not yet reconciled successfully by it.
    pending: HashSet<ObjectRef>,
    /// Its first failure.
    failure: Option<String>,
}

/// Where a trial stands (see [`Reconciler::start_trial`]).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TrialState {
    /// Digest of the version on trial.
    pub digest: String,
    /// Its share of the objects, in percent.
    pub percent: u8,
    /// Objects of its share it has not reconciled successfully yet.
    pub pending: usize,
    /// Its first failure (an error or a trap), if any.
    pub failure: Option<String>,
}

/// Whether `r` is in the first `percent` % of objects: a stable hash of its
/// namespace and name, so an object stays in or out of a canary's share.
pub fn in_share(r: &ObjectRef, percent: u8) -> bool {
    // FNV-1a: stable across processes and versions, unlike `DefaultHasher`.
    let mut hash: u32 = 0x811c_9dc5;
    for byte in r.namespace.as_deref().unwrap_or_default().bytes().chain([b'/']).chain(r.name.bytes()) {
        hash = (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193);
    }
    hash % 100 < u32::from(percent)
}

/// A child of an outcome as the cache holds it before the apply.
enum Existing {
    /// Not there yet.
    Absent,
    /// There, controlled by no other owner: the object as read.
    Ours(Value),
    /// Controlled by another owner, named.
    ControlledBy(String),
}

/// The host's condition for a primary object's status.
#[derive(Clone)]
struct HostCondition {
    reason: &'static str,
    message: String,
}

impl HostCondition {
    /// The condition with `reason`, its message bounded to
    /// [`cluster::MAX_MESSAGE`] bytes.
    fn new(reason: &'static str, message: &str) -> Self {
        Self { reason, message: cluster::bounded(message, cluster::MAX_MESSAGE) }
    }

    /// The condition as written into the status of `object`: its
    /// `lastTransitionTime` kept while the condition there is `False`
    /// already, its `observedGeneration` the object's generation.
    fn to_value(&self, object: &Value) -> Value {
        let since = conditions(object.get("status"))
            .iter()
            .find(|c| c.get("type") == Some(&json!(CONDITION)))
            .filter(|c| c.get("status") == Some(&json!("False")))
            .and_then(|c| c.get("lastTransitionTime").cloned())
            .unwrap_or_else(|| json!(now()));
        let mut c = json!({
            "type": CONDITION,
            "status": "False",
            "reason": self.reason,
            "message": self.message,
            "lastTransitionTime": since,
        });
        if let Some(generation) = object::generation(object) {
            c["observedGeneration"] = json!(generation);
        }
        c
    }
}

/// A controller's reconcile logic: one component version (and perhaps a
/// new one on trial), the cluster, and what it last handled.
pub struct Reconciler {
    /// The version in use and its grants, swapped together.
    version: Mutex<(Arc<Loaded>, Arc<Grants>)>,
    trial: Mutex<Option<Trial>>,
    runtime: Runtime,
    cluster: Arc<dyn Cluster>,
    /// The name of `cluster`, as guests see it in their requests.
    cluster_name: Arc<str>,
    /// The namespaces the host watches (empty: all); writes stay inside.
    namespaces: Vec<String>,
    handled: Mutex<HashMap<ObjectRef, Handled>>,
    /// Objects whose `added` has not succeeded yet.
    adding: Mutex<HashSet<ObjectRef>>,
    /// Children of the last outcome per object that were refused.
    refused: Mutex<HashMap<ObjectRef, Vec<ChildFailure>>>,
    /// The uid of each object whose finalizer this controller removed
    /// after its `deleted`, until the object is seen gone: a cache (or an
    /// API server's answer, which for the write that ends a deletion may
    /// carry the old resourceVersion) that still shows it deleting with
    /// the finalizer is stale, and `deleted` is not delivered again.
    finalized: Mutex<HashMap<ObjectRef, String>>,
    /// The resourceVersion each of the host's own writes (finalizer, status,
    /// children) returned, until its watch event is seen: that event is no
    /// trigger.
    own_writes: Mutex<HashMap<WriteKey, OwnWrites>>,
    /// The host's writes sent and not answered yet, by object: a watch
    /// event of such an object may be the write's own, arriving before
    /// the answer that says so (see [`Reconciler::writing_to`]).
    in_flight: Mutex<HashMap<WriteKey, usize>>,
    /// Notified whenever a write of `in_flight` is answered (or dropped).
    answered: tokio::sync::Notify,
    /// The host's last apply of each child. The same object applied again
    /// to a child still at the resourceVersion that apply returned would
    /// change nothing (no one else has written it since), so it is not
    /// sent: a pass that finds nothing to do, a resync and a new version
    /// that wants the same children cost no writes. Forgotten when the
    /// child is deleted or differs.
    applied: Mutex<HashMap<WriteKey, LastApply>>,
    /// Kinds whose status schema declares no `conditions`: the API server
    /// refuses a status carrying them, so the host writes its condition
    /// into the status of no object of these kinds (warned once each).
    without_conditions: Mutex<HashSet<Gvk>>,
    /// The clusters the host serves, which a fleet controller reaches (see
    /// [`Reconciler::with_members`]).
    members: Option<Arc<dyn cluster::Members>>,
    /// This cluster's identity, once learned: a fleet controller's marks
    /// on its children elsewhere carry it.
    home_id: tokio::sync::OnceCell<String>,
    /// The host's last apply of each child in a member cluster, as
    /// `applied` for children here.
    member_applied: Mutex<HashMap<(String, WriteKey), LastApply>>,
}

impl fmt::Debug for Reconciler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reconciler").field("component", &self.component()).finish_non_exhaustive()
    }
}

impl Reconciler {
    /// A reconciler running `component` against `cluster`.
    pub fn new(runtime: Runtime, component: Loaded, cluster: Arc<dyn Cluster>) -> Self {
        Self::within(runtime, component, cluster, &[])
    }

    /// A reconciler on a host that watches only `namespaces` (empty: all):
    /// no write of the controller reaches a namespaced object elsewhere.
    pub fn within(runtime: Runtime, component: Loaded, cluster: Arc<dyn Cluster>, namespaces: &[String]) -> Self {
        let grants = Arc::new(Grants::from_manifest(&component.manifest).within(namespaces));
        Self {
            version: Mutex::new((Arc::new(component), grants)),
            trial: Mutex::new(None),
            runtime,
            cluster,
            cluster_name: cluster::DEFAULT_CLUSTER.into(),
            namespaces: namespaces.to_vec(),
            handled: Mutex::new(HashMap::new()),
            adding: Mutex::new(HashSet::new()),
            refused: Mutex::new(HashMap::new()),
            finalized: Mutex::new(HashMap::new()),
            own_writes: Mutex::new(HashMap::new()),
            in_flight: Mutex::new(HashMap::new()),
            answered: tokio::sync::Notify::new(),
            applied: Mutex::new(HashMap::new()),
            without_conditions: Mutex::new(HashSet::new()),
            members: None,
            home_id: tokio::sync::OnceCell::new(),
            member_applied: Mutex::new(HashMap::new()),
        }
    }

    /// Lets a fleet controller reach the clusters of `members` (the host's
    /// engaged clusters): it places children in its members, reads there,
    /// and is told which are engaged. A uniform controller ignores them.
    #[must_use]
    pub fn with_members(mut self, members: Arc<dyn cluster::Members>) -> Self {
        self.members = Some(members);
        self
    }

    /// Names the cluster this reconciler's objects are in, as guests see it
    /// in their requests (`cluster` of a reconcile or schedule request).
    /// Default: [`DEFAULT_CLUSTER`](crate::cluster::DEFAULT_CLUSTER),
    /// `default`.
    #[must_use]
    pub fn in_cluster(mut self, name: impl Into<Arc<str>>) -> Self {
        self.cluster_name = name.into();
        self
    }

    /// The name of the cluster this reconciler's objects are in (see
    /// [`in_cluster`](Self::in_cluster)).
    pub fn cluster_name(&self) -> &str {
        &self.cluster_name
    }

    fn grants_of(&self, manifest: &Manifest) -> Arc<Grants> {
        Arc::new(Grants::from_manifest(manifest).within(&self.namespaces))
    }

    /// The component version in use.
    pub fn component(&self) -> Arc<Loaded> {
        Arc::clone(&lock(&self.version).0)
    }

    /// Replaces the component version and returns the one it replaces:
    /// calls in flight finish on the old version (with its grants), calls
    /// that start afterwards use the new one. What was handled is kept, so
    /// an unchanged object is a `resync` for the new version.
    pub fn swap(&self, component: Loaded) -> Arc<Loaded> {
        let grants = self.grants_of(&component.manifest);
        // A new version gets another chance at objects the old one gave up on.
        lock(&self.handled).values_mut().for_each(|h| h.terminal = false);
        std::mem::replace(&mut *lock(&self.version), (Arc::new(component), grants)).0
    }

    /// A caller for a role other than reconcile (a webhook, a scheduling
    /// decision) on the version in use: the component's grants, no object
    /// being reconciled. Returns the version too, so the call runs on the
    /// version the caller was made for even if a swap happens meanwhile.
    pub fn role_caller(&self) -> (Arc<Loaded>, Caller) {
        let (component, grants) = {
            let version = lock(&self.version);
            (Arc::clone(&version.0), Arc::clone(&version.1))
        };
        let caller = Caller {
            controller: component.manifest.name.as_str().into(),
            cluster_name: Arc::clone(&self.cluster_name),
            field_manager: component.manifest.field_manager().into(),
            cluster: Arc::clone(&self.cluster),
            reconciling: None,
            reach: self.reach(&component.manifest),
            grants,
        };
        (component, caller)
    }

    /// Answers an admission request with the version in use, within
    /// `deadline`.
    pub async fn review(
        &self,
        request: wit::AdmissionRequest,
        deadline: Duration,
    ) -> runtime::Invocation<wit::AdmissionResponse> {
        let (component, caller) = self.role_caller();
        component.traced("review", self.runtime.review(&component.pre, caller, request, deadline)).await
    }

    /// Converts objects with the version in use, within `deadline`.
    pub async fn convert(
        &self,
        request: wit::ConversionRequest,
        deadline: Duration,
    ) -> runtime::Invocation<Result<Vec<wit::Json>, String>> {
        let (component, caller) = self.role_caller();
        component.traced("convert", self.runtime.convert(&component.pre, caller, request, deadline)).await
    }

    /// Makes one scheduling decision with the version in use.
    pub async fn schedule(
        &self,
        decision: &crate::runtime::nodes::Decision,
    ) -> runtime::Invocation<Result<String, wit::Unschedulable>> {
        let (component, caller) = self.role_caller();
        component.traced("schedule", self.runtime.schedule(&component.pre, caller, decision)).await
    }

    /// The grants of `component`: those of the version in use, or, for a
    /// call still running on a version swapped out meanwhile, its own.
    fn grants_for(&self, component: &Loaded) -> Arc<Grants> {
        let version = lock(&self.version);
        if std::ptr::eq(Arc::as_ptr(&version.0), component) {
            return Arc::clone(&version.1);
        }
        drop(version);
        match lock(&self.trial).as_ref() {
            Some(t) if std::ptr::eq(Arc::as_ptr(&t.component), component) => Arc::clone(&t.grants),
            _ => self.grants_of(&component.manifest),
        }
    }

    /// Puts `component` on trial for `percent` % of the objects (chosen by
    /// [`in_share`]) while the others stay on the version in use; returns
    /// the objects of `objects` in its share, to be reconciled now. A
    /// trial already running is abandoned.
    pub fn start_trial(
        &self,
        component: Loaded,
        percent: u8,
        objects: impl IntoIterator<Item = ObjectRef>,
    ) -> Vec<ObjectRef> {
        let share: Vec<ObjectRef> = objects.into_iter().filter(|r| in_share(r, percent)).collect();
        let grants = self.grants_of(&component.manifest);
        *lock(&self.trial) = Some(Trial {
            component: Arc::new(component),
            grants,
            percent,
            pending: share.iter().cloned().collect(),
            failure: None,
        });
        share
    }

    /// Where the trial stands, if one runs.
    pub fn trial(&self) -> Option<TrialState> {
        lock(&self.trial).as_ref().map(|t| TrialState {
            digest: t.component.digest.clone(),
            percent: t.percent,
            pending: t.pending.len(),
            failure: t.failure.clone(),
        })
    }

    /// The version on trial, if any.
    pub fn trial_component(&self) -> Option<Arc<Loaded>> {
        lock(&self.trial).as_ref().map(|t| Arc::clone(&t.component))
    }

    /// Ends the trial: with `promote`, its version replaces the one in use
    /// (as [`swap`](Self::swap)); otherwise it is dropped. Returns the
    /// version that was on trial.
    pub fn end_trial(&self, promote: bool) -> Option<Arc<Loaded>> {
        let trial = lock(&self.trial).take()?;
        if promote {
            *lock(&self.version) = (Arc::clone(&trial.component), trial.grants);
        }
        Some(trial.component)
    }

    /// The version that reconciles `r`: the one on trial for its share,
    /// else the one in use.
    fn version_for(&self, r: &ObjectRef) -> (Arc<Loaded>, bool) {
        if let Some(t) = lock(&self.trial).as_ref().filter(|t| in_share(r, t.percent)) {
            return (Arc::clone(&t.component), true);
        }
        (self.component(), false)
    }

    /// Notes how the version on trial did on `r`.
    fn judge(&self, component: &Arc<Loaded>, r: &ObjectRef, result: &Result<Action, Error>) {
        let mut trial = lock(&self.trial);
        let Some(t) = trial.as_mut().filter(|t| Arc::ptr_eq(&t.component, component)) else { return };
        match result {
            Ok(_) => {
                t.pending.remove(r);
            }
            Err(e) if e.is_conflict() => {}
            Err(e) => {
                if t.failure.is_none() {
                    t.failure = Some(format!("{r}: {e}"));
                }
            }
        }
    }

    /// Forgets what was handled, so every object is judged by what it
    /// carries (as after a host restart).
    pub fn forget_all(&self) {
        lock(&self.handled).clear();
        lock(&self.adding).clear();
        lock(&self.refused).clear();
        lock(&self.own_writes).clear();
        lock(&self.applied).clear();
    }

    /// The primary object whose reconcile made the change of `meta` (an
    /// object of `kind`), if the change is the watch event of one of the
    /// host's own writes: a finalizer patch or status write of that object,
    /// or an apply of its child (seen by the resourceVersion the write
    /// returned). The change triggers everything it would trigger except
    /// that object, which has already seen its own work (a child that is a
    /// primary object too is still reconciled itself). Each write is
    /// recognised once; a deletion forgets the object's write and is always
    /// a trigger. An answer that showed someone else's change too is the
    /// host's own only if an event of that change came first (see
    /// [`note_write`](Self::note_write)).
    ///
    /// A watch event can overtake the answer to the write it shows (on a
    /// busy machine it often does): while [`writing_to`](Self::writing_to)
    /// the object, an event not recognised yet is decided once the write
    /// is answered ([`answered`](Self::answered)), not at once.
    pub fn written_for(&self, kind: &Gvk, meta: &ObjectMeta, deleted: bool) -> Option<ObjectRef> {
        let key = write_key(kind, meta.namespace.as_deref(), meta.name.as_deref()?);
        let mut writes = lock(&self.own_writes);
        if deleted {
            writes.remove(&key);
            lock(&self.applied).remove(&key);
            return None;
        }
        let seen = meta.resource_version.as_deref()?;
        let pending = writes.get_mut(&key)?;
        let Some(at) = pending.iter().position(|w| w.rv == seen) else {
            // Someone else's change, a trigger: a foreign change that an
            // answer of the host's shows came with it.
            for w in pending.iter_mut() {
                w.preceded = true;
            }
            return None;
        };
        // Watch events come in order: the writes before this one were seen
        // (or will never be, after a compaction).
        let write = pending.drain(..=at).next_back().expect("`at` is in range");
        if pending.is_empty() {
            writes.remove(&key);
        }
        // The answer showed someone else's change with no event of its own
        // before this one: perhaps the host's write changed nothing and
        // this is that change's event, which the guest has not seen.
        (!write.foreign || write.preceded).then_some(write.primary)
    }

    /// True while a write of the host's to the object `meta` (of `kind`)
    /// is sent and not answered: a watch event of it may be that write's
    /// own, overtaking the answer. Wait for [`answered`](Self::answered)
    /// before asking [`written_for`](Self::written_for).
    pub fn writing_to(&self, kind: &Gvk, meta: &ObjectMeta) -> bool {
        let Some(name) = meta.name.as_deref() else { return false };
        lock(&self.in_flight).contains_key(&write_key(kind, meta.namespace.as_deref(), name))
    }

    /// Waits until no write of the host's to the object `meta` (of
    /// `kind`) is in flight, at most [`OWN_WRITE_WAIT`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only waits.
    pub async fn answered(&self, kind: &Gvk, meta: &ObjectMeta) {
        let Some(name) = meta.name.as_deref() else { return };
        let key = write_key(kind, meta.namespace.as_deref(), name);
        let wait = async {
            loop {
                let notified = self.answered.notified();
                let mut notified = std::pin::pin!(notified);
                // Registered before the check: an answer between the two
                // still wakes it.
                notified.as_mut().enable();
                if !lock(&self.in_flight).contains_key(&key) {
                    return;
                }
                notified.await;
            }
        };
        let _ = tokio::time::timeout(OWN_WRITE_WAIT, wait).await;
    }

    /// Marks a write of the host's to `r` as in flight until the guard is
    /// dropped (after [`note_write`](Self::note_write) has noted its
    /// answer).
    fn sending(&self, r: &ObjectRef) -> Sending<'_> {
        let key = key_of(r);
        *lock(&self.in_flight).entry(key.clone()).or_insert(0) += 1;
        Sending { reconciler: self, key }
    }

    /// True if the host wrote `r` less than [`OWN_WRITE_WAIT`] ago and the
    /// watch has not shown that write yet: the cache is behind it.
    fn behind_own_write(&self, r: &ObjectRef) -> bool {
        let key = key_of(r);
        let mut writes = lock(&self.own_writes);
        let Some(pending) = writes.get_mut(&key) else { return false };
        pending.retain(|w| w.at.elapsed() < OWN_WRITE_WAIT);
        if pending.is_empty() {
            writes.remove(&key);
            return false;
        }
        true
    }

    /// Notes a write of the host's to `r`, made while reconciling
    /// `primary`, that returned `written`, unless it changed nothing that
    /// an event would show (`before`, the object written to, has the same
    /// resourceVersion). When the answer also shows someone else's change
    /// made since `before` was read (see [`only_touched`]), the write may
    /// have changed nothing at all: such a write answers with the object
    /// as its last writer left it, at that writer's resourceVersion, and
    /// taking that event for the host's own would hide the other change
    /// (a new spec while the guest ran) until a resync. Its event is then
    /// the host's own only if another event of the object came first
    /// (see [`written_for`](Self::written_for)).
    fn note_write(
        &self,
        primary: &ObjectRef,
        r: &ObjectRef,
        before: Option<&Value>,
        touched: Touched<'_>,
        written: &Value,
    ) {
        let Some(rv) = object::meta_str(written, "resourceVersion") else { return };
        if before.is_some_and(|b| object::meta_str(b, "resourceVersion") == Some(rv)) {
            return;
        }
        let foreign = before.is_some_and(|b| !only_touched(b, written, touched));
        let key = key_of(r);
        let mut writes = lock(&self.own_writes);
        let pending = writes.entry(key).or_default();
        if pending.len() == MAX_OWN_WRITES {
            pending.remove(0);
        }
        pending.push(OwnWrite {
            rv: rv.to_owned(),
            primary: primary.clone(),
            at: Instant::now(),
            foreign,
            preceded: false,
        });
    }

    fn derive_event(&self, manifest: &Manifest, r: &ObjectRef, object: &Value) -> EventKind {
        let handled = lock(&self.handled);
        let Some(h) = handled.get(r) else {
            drop(handled);
            if lock(&self.adding).contains(r) {
                return EventKind::Added;
            }
            return event_after_restart(manifest, object);
        };
        let uid = object::meta_str(object, "uid");
        if h.uid.as_deref() != uid {
            return EventKind::Added;
        }
        let generation = object::generation(object);
        let rv = object::meta_str(object, "resourceVersion");
        if generation != h.generation || !h.resource_versions.iter().any(|v| v.as_deref() == rv) {
            EventKind::Modified
        } else {
            EventKind::Resync
        }
    }

    /// True if the last attempt on `r` failed for good and the object has
    /// not changed since (only the host's own writes).
    fn waits_for_change(&self, r: &ObjectRef, object: &Value) -> bool {
        let handled = lock(&self.handled);
        let Some(h) = handled.get(r).filter(|h| h.terminal) else { return false };
        let rv = object::meta_str(object, "resourceVersion");
        h.uid.as_deref() == object::meta_str(object, "uid")
            && h.generation == object::generation(object)
            && h.resource_versions.iter().any(|v| v.as_deref() == rv)
    }

    /// Notes that the guest handled `seen`, which the host's own writes
    /// made `object`. A status write carries no precondition, so `object`
    /// may also hold someone else's change made while the guest ran (a new
    /// spec): then only `seen` counts as handled, and the cached object,
    /// once it shows that change, is `modified` (or, after a terminal
    /// failure, tried again) rather than taken for the guest's own.
    fn remember(&self, manifest: &Manifest, r: &ObjectRef, seen: &Value, object: &Value, terminal: bool) {
        let rv = |o: &Value| object::meta_str(o, "resourceVersion").map(str::to_owned);
        let ours = only_host_changes(seen, object);
        let handled = Handled {
            uid: object::meta_str(object, "uid").map(str::to_owned),
            generation: object::generation(if ours { object } else { seen }),
            resource_versions: [rv(seen), if ours { rv(object) } else { None }],
            last: manifest.finalizer.is_none().then(|| object.clone()),
            terminal,
        };
        lock(&self.handled).insert(r.clone(), handled);
    }

    /// Reconciles the object `r` once.
    pub async fn reconcile(&self, r: &ObjectRef) -> Report {
        let mut report = Report {
            object: r.clone(),
            event: None,
            result: Ok(Action::AwaitChange),
            journal: Journal::default(),
            applied: Vec::new(),
            unchanged: Vec::new(),
            pruned: Vec::new(),
            orphaned: Vec::new(),
        };
        let (component, on_trial) = self.version_for(r);
        report.result = self.reconcile_into(&component, r, &mut report).await;
        if on_trial {
            self.judge(&component, r, &report.result);
        }
        report
    }

    async fn reconcile_into(
        &self,
        component: &Arc<Loaded>,
        r: &ObjectRef,
        report: &mut Report,
    ) -> Result<Action, Error> {
        let component = Arc::clone(component);
        let manifest = &component.manifest;
        // Before the read: a write whose event arrives between a read and
        // this check would leave the read behind it unnoticed (and the
        // guest would redo what that write recorded, such as an external
        // object it made). Once no write is pending, the cache shows them.
        if self.behind_own_write(r) {
            tracing::debug!(object = %r, "the cache has not shown the host's last write yet: looked at again shortly");
            return Err(Error::CacheBehind);
        }
        let object = match self.cluster.get(r).await {
            Ok(o) => o,
            Err(e) if e.is_not_found() => {
                // Gone. Without a finalizer, deliver `deleted` once if we saw it.
                let handled = lock(&self.handled).remove(r);
                if let Some(uid) = handled.as_ref().and_then(|h| h.uid.as_deref()) {
                    // A fleet controller's children elsewhere follow it;
                    // a member out of reach catches up by its sweep.
                    self.delete_in_members(manifest, r, uid).await;
                }
                let last = handled.and_then(|h| h.last);
                lock(&self.finalized).remove(r);
                lock(&self.adding).remove(r);
                lock(&self.refused).remove(r);
                if let (Some(last), None) = (last, &manifest.finalizer) {
                    report.event = Some(EventKind::Deleted);
                    match self.call_guest(&component, r, EventKind::Deleted, last.clone(), report).await? {
                        // Best effort, as the call: the garbage collector
                        // may have deleted children to keep already.
                        Ok(outcome) => {
                            if let Err(e) = self.finish_deleted(&component, r, &last, outcome, report).await {
                                tracing::warn!(object = %r, error = %e, "the object is gone: not tried again");
                                lock(&self.refused).remove(r);
                            }
                        }
                        Err(failure) => self.record_events(&component, r, &last, failure.events).await,
                    }
                }
                return Ok(Action::AwaitChange);
            }
            Err(e) => return Err(e.into()),
        };
        let uid = object::meta_str(&object, "uid").unwrap_or_default();
        let finalized = lock(&self.finalized).get(r).cloned();
        match finalized {
            // Already finalized: what shows it still deleting is stale.
            Some(done) if done == uid && object::is_deleting(&object) => return Ok(Action::AwaitChange),
            // Another object of the same name now.
            Some(_) => {
                lock(&self.finalized).remove(r);
            }
            None => {}
        }
        if object::is_deleting(&object) {
            let ours = manifest.finalizer.as_ref().is_some_and(|f| object::finalizers(&object).contains(f));
            let delivered_before = manifest.finalizer.is_none()
                && lock(&self.handled).get(r).and_then(|h| h.last.as_ref()).is_some_and(object::is_deleting);
            if (manifest.finalizer.is_some() && !ours) || delivered_before {
                return Ok(Action::AwaitChange);
            }
            report.event = Some(EventKind::Deleted);
            match self.call_guest(&component, r, EventKind::Deleted, object.clone(), report).await? {
                Ok(outcome) => {
                    let policy = outcome.children_policy;
                    self.finish_deleted(&component, r, &object, outcome, report).await?;
                    self.finish_deleted_in_members(manifest, r, uid, policy).await?;
                }
                Err(failure) => return Err(self.fail(&component, r, &object, failure).await),
            }
            if let Some(finalizer) = &manifest.finalizer {
                self.set_finalizer(r, &object, finalizer, false).await?;
                if let Some(uid) = object::meta_str(&object, "uid") {
                    lock(&self.finalized).insert(r.clone(), uid.to_owned());
                }
                lock(&self.handled).remove(r);
                lock(&self.refused).remove(r);
            } else {
                self.remember(manifest, r, &object, &object, false);
            }
            return Ok(Action::AwaitChange);
        }

        if self.waits_for_change(r, &object) {
            tracing::debug!(object = %r, "terminal failure, unchanged since: not retried");
            return Ok(Action::AwaitChange);
        }
        // The event first: the finalizer the host adds is itself a mark of
        // having been handled.
        let event = self.derive_event(manifest, r, &object);
        let object = match &manifest.finalizer {
            Some(f) if !object::finalizers(&object).contains(f) => self.set_finalizer(r, &object, f, true).await?,
            _ => object,
        };
        if event == EventKind::Added {
            lock(&self.adding).insert(r.clone());
        }
        report.event = Some(event);
        let outcome = match self.call_guest(&component, r, event, object.clone(), report).await? {
            Ok(outcome) => outcome,
            Err(failure) => return Err(self.fail(&component, r, &object, failure).await),
        };
        let requeue = outcome.requeue_after_ms.map(Duration::from_millis);
        let (latest, refused, unreachable) = match self.apply(&component, r, &object, outcome, report).await {
            Ok(applied) => applied,
            Err(Error::InvalidOutcome(m)) => {
                let e = Error::InvalidOutcome(cluster::bounded(&m, cluster::MAX_MESSAGE));
                self.give_up(&component, r, &object, "InvalidOutcome", &e.to_string()).await;
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        if !refused.is_empty() {
            lock(&self.refused).insert(r.clone(), refused.clone());
            return Err(Error::ChildrenRefused(refused));
        }
        if !unreachable.is_empty() {
            // The rest is applied; the pass is tried again for these.
            lock(&self.refused).remove(r);
            return Err(Error::Unreachable(unreachable));
        }
        lock(&self.refused).remove(r);
        lock(&self.adding).remove(r);
        self.remember(manifest, r, &object, &latest, false);
        Ok(match (requeue, manifest.resync) {
            (Some(a), Some(b)) => Action::Requeue(a.min(b)),
            (Some(d), None) | (None, Some(d)) => Action::Requeue(d),
            (None, None) => Action::AwaitChange,
        })
    }

    fn caller(&self, component: &Loaded, r: &ObjectRef, object: &Value) -> Caller {
        Caller {
            controller: component.manifest.name.as_str().into(),
            cluster_name: Arc::clone(&self.cluster_name),
            field_manager: component.manifest.field_manager().into(),
            grants: self.grants_for(component),
            cluster: Arc::clone(&self.cluster),
            reconciling: Some((r.clone(), object::meta_str(object, "uid").map(str::to_owned))),
            reach: self.reach(&component.manifest),
        }
    }

    fn warning(&self, component: &Loaded, r: &ObjectRef, object: &Value, reason: &str, note: String) -> EventRecord {
        EventRecord {
            regarding: r.clone(),
            regarding_uid: object::meta_str(object, "uid").map(str::to_owned),
            warning: true,
            reason: reason.to_owned(),
            action: "Reconcile".to_owned(),
            note: Some(cluster::bounded(&note, cluster::MAX_MESSAGE)),
            reporting_controller: component.manifest.name.clone(),
        }
    }

    /// Calls the guest. A trap is an `Err`; the guest's own answer, success
    /// or failure, is `Ok`.
    async fn call_guest(
        &self,
        component: &Loaded,
        r: &ObjectRef,
        event: EventKind,
        object: Value,
        report: &mut Report,
    ) -> Result<Result<wit::Outcome, wit::Failure>, Error> {
        let caller = self.caller(component, r, &object);
        let failed_children =
            lock(&self.refused).get(r).map(|f| f.iter().map(wit::ChildFailure::from).collect()).unwrap_or_default();
        let request = wit::ReconcileRequest {
            event: event.into(),
            object: serde_json::to_vec(&object).expect("a JSON value always serializes"),
            failed_children,
            cluster: self.cluster_name.to_string(),
            members: self.engaged_members(&component.manifest),
        };
        let invocation = component.traced("reconcile", self.runtime.reconcile(&component.pre, caller, request)).await;
        report.journal = invocation.journal;
        if let Some(note) = logs_dropped_note(&report.journal) {
            self.record(self.warning(component, r, &object, "LogsDropped", note)).await;
        }
        match invocation.result {
            Ok(answer) => Ok(answer),
            Err(e) => {
                tracing::warn!(object = %r, error = %e, "guest failed");
                self.record(self.warning(component, r, &object, "GuestFailed", e.to_string())).await;
                Err(Error::Guest(e))
            }
        }
    }

    /// Handles the guest's failure: its status and the host's condition
    /// (for a terminal one), its events; children stay as they are. The
    /// message is bounded to [`cluster::MAX_MESSAGE`] before it goes
    /// anywhere.
    async fn fail(&self, component: &Loaded, r: &ObjectRef, object: &Value, failure: wit::Failure) -> Error {
        let terminal = failure.kind == wit::FailureKind::Terminal;
        let message = cluster::bounded(&failure.message, cluster::MAX_MESSAGE);
        let status = match guest_status(failure.status.as_deref()) {
            Ok(s) => s,
            Err(e) => {
                self.give_up(component, r, object, "InvalidOutcome", &e.to_string()).await;
                return e;
            }
        };
        if failure.events.len() > MAX_EVENTS {
            let e = Error::InvalidOutcome(format!("{} events, more than {MAX_EVENTS}", failure.events.len()));
            self.give_up(component, r, object, "InvalidOutcome", &e.to_string()).await;
            return e;
        }
        let condition = terminal.then(|| HostCondition::new("TerminalError", &message));
        let (latest, error) = self.write_status(component, r, object, status, condition).await;
        if let Some(e) = error {
            tracing::debug!(object = %r, error = %e, "the failure's status was not written in full");
        }
        self.record_events(component, r, object, failure.events).await;
        if terminal {
            self.record(self.warning(component, r, object, "ReconcileFailed", message.clone())).await;
            self.remember(&component.manifest, r, object, &latest, true);
            lock(&self.adding).remove(r);
            Error::Terminal(message)
        } else {
            Error::Transient(message)
        }
    }

    /// Records a Warning Event and `Reconciled=False` for a failure the
    /// host found (an invalid outcome), and waits for a change.
    async fn give_up(&self, component: &Loaded, r: &ObjectRef, object: &Value, reason: &'static str, message: &str) {
        self.record(self.warning(component, r, object, reason, message.to_owned())).await;
        let condition = HostCondition::new(reason, message);
        let (latest, error) = self.write_status(component, r, object, None, Some(condition)).await;
        if let Some(e) = error {
            tracing::debug!(object = %r, error = %e, "no condition written");
        }
        self.remember(&component.manifest, r, object, &latest, true);
    }

    /// Writes into the status of `r` (`object` as the guest got it) what
    /// the host owns there: the guest's `status` if it gave one, and the
    /// host's condition (set, or removed without one). Returns the object
    /// as written, and the first write that failed; a failed write does
    /// not stop the other.
    ///
    /// The guest's status is applied with the controller's field manager
    /// (`observedGeneration` filled in when absent), unless the current
    /// status holds it already. The condition is a JSON patch of its own
    /// list entry ([`condition_patch`]): never the rest of the status,
    /// which others may have written while the guest ran. When the guest's
    /// status carries a `conditions` list, the condition is merged into it
    /// by type, so one write carries both (the patch then finds it in
    /// place); otherwise the condition goes first, so the guest's status
    /// is never seen without it.
    ///
    /// A kind whose status schema does not declare `conditions` drops the
    /// condition (the API server prunes undeclared fields): from then on
    /// the host writes no condition into objects of that kind, and a
    /// warning says once per kind what to add to the CRD.
    async fn write_status(
        &self,
        component: &Loaded,
        r: &ObjectRef,
        object: &Value,
        status: Option<Value>,
        condition: Option<HostCondition>,
    ) -> (Value, Option<Error>) {
        let _sending = self.sending(r);
        let declared = !lock(&self.without_conditions).contains(&r.gvk);
        let wanted = condition.filter(|_| declared).map(|c| c.to_value(object));
        let status = status.map(|s| status_to_apply(object, s, wanted.as_ref(), declared));
        let carries = status.as_ref().is_some_and(|s| declared && s.get("conditions").is_some_and(Value::is_array));
        let mut latest = object.clone();
        let mut error = None;
        if !carries && declared {
            match self.put_condition(r, &latest, wanted.as_ref()).await {
                Ok(written) => latest = written,
                Err(e) => error = Some(e),
            }
        }
        if let Some(status) = status.filter(|s| !holds_status(latest.get("status"), s, carries)) {
            let field_manager = component.manifest.field_manager();
            let patch = Patch::Apply { object: status_apply_body(r, status), field_manager, force: true };
            let span = request_span("write_status", r);
            let result = self.cluster.patch(r, patch, Subresource::Status).instrument(span.clone()).await;
            crate::telemetry::record_request(&span, &result);
            match result {
                Ok(written) => {
                    self.note_write(r, r, Some(&latest), Touched::Status, &written);
                    latest = written;
                }
                Err(e) => error = error.or(Some(e.into())),
            }
        }
        if carries {
            match self.put_condition(r, &latest, wanted.as_ref()).await {
                Ok(written) => latest = written,
                Err(e) => error = error.or(Some(e)),
            }
        }
        (latest, error)
    }

    /// Makes the host's condition in the status of `r` `wanted` (removed
    /// with `None`), starting from `base`, the freshest copy at hand, and
    /// returns the object as written. A patch whose `test` fails (the list
    /// changed since `base`) is sent again on the object as the API server
    /// has it now, up to three times in all.
    async fn put_condition(&self, r: &ObjectRef, base: &Value, wanted: Option<&Value>) -> Result<Value, Error> {
        let mut base = base.clone();
        let mut attempts = 1;
        loop {
            let Some(ops) = condition_patch(&base, wanted) else { return Ok(base) };
            match self.cluster.patch(r, Patch::Json(ops), Subresource::Status).await {
                Ok(written) => {
                    self.note_write(r, r, Some(&base), Touched::Status, &written);
                    if wanted.is_some() && condition_at(&written).is_none() {
                        self.conditions_undeclared(&r.gvk);
                    }
                    return Ok(written);
                }
                Err(cluster::Error::Invalid(_)) if attempts < 3 => {
                    attempts += 1;
                    base = self.read_through(r, Subresource::Status).await?;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// `r` as the API server has it now, not as the cache does: read by a
    /// JSON patch that only tests its name, which changes nothing.
    async fn read_through(&self, r: &ObjectRef, subresource: Subresource) -> Result<Value, cluster::Error> {
        let read = json!([{"op": "test", "path": "/metadata/name", "value": r.name}]);
        self.cluster.patch(r, Patch::Json(read), subresource).await
    }

    /// Notes that the status schema of `kind` keeps no `conditions`.
    fn conditions_undeclared(&self, kind: &Gvk) {
        if lock(&self.without_conditions).insert(kind.clone()) {
            tracing::warn!(
                kind = %kind,
                "the status schema of this kind declares no `conditions`: the host writes no {CONDITION} \
                 condition into it (declare status.conditions in the CRD, see docs/controllers.md)"
            );
        }
    }

    async fn record(&self, event: EventRecord) {
        let span = event.span();
        let result = self.cluster.record_event(event).instrument(span.clone()).await;
        crate::telemetry::record_request(&span, &result);
        if let Err(e) = result {
            tracing::warn!(error = %e, "cannot record event");
        }
    }

    /// Adds (`add`) or removes the finalizer with a resourceVersion
    /// precondition; returns the updated object.
    async fn set_finalizer(&self, r: &ObjectRef, object: &Value, finalizer: &str, add: bool) -> Result<Value, Error> {
        let mut finalizers = object::finalizers(object);
        finalizers.retain(|f| f != finalizer);
        if add {
            finalizers.push(finalizer.to_owned());
        }
        let patch = json!({"metadata": {
            "finalizers": finalizers,
            "resourceVersion": object::meta_str(object, "resourceVersion"),
        }});
        let _sending = self.sending(r);
        match self.cluster.patch(r, Patch::Merge(patch), Subresource::Main).await {
            Ok(v) => {
                self.note_write(r, r, Some(object), Touched::Metadata("finalizers"), &v);
                Ok(v)
            }
            // Removed meanwhile: the finalizer no longer matters.
            Err(e) if e.is_not_found() && !add => Ok(object.clone()),
            Err(e) => Err(e.into()),
        }
    }

    /// Applies children (here and, for a fleet controller, in its
    /// members), prunes, writes status, records events. Returns the
    /// primary object as it is after the host's own writes, the children
    /// that were refused, and the member clusters that could not be
    /// reached (whose children wait for the next pass).
    async fn apply(
        &self,
        component: &Loaded,
        r: &ObjectRef,
        object: &Value,
        outcome: wit::Outcome,
        report: &mut Report,
    ) -> Result<(Value, Vec<ChildFailure>, Vec<String>), Error> {
        let manifest = &component.manifest;
        let field_manager = manifest.field_manager();
        let uid = object::meta_str(object, "uid").unwrap_or_default().to_owned();
        let owner_ref = json!({
            "apiVersion": r.gvk.api_version(),
            "kind": r.gvk.kind,
            "name": r.name,
            "uid": uid,
            "controller": true,
            "blockOwnerDeletion": true,
        });
        if outcome.events.len() > MAX_EVENTS {
            return Err(Error::InvalidOutcome(format!("{} events, more than {MAX_EVENTS}", outcome.events.len())));
        }
        let status = guest_status(outcome.status.as_deref())?;
        let children =
            prepare_children(&component.manifest, &self.grants_for(component), r, &owner_ref, &outcome.children)?;
        let placed = self.prepare_member_children(component, r, &uid, &outcome.member_children).await?;

        let mut refused = Vec::new();
        let mut desired = BTreeSet::new();
        for (child_ref, child) in children {
            desired.insert(child_ref.clone());
            let before = match self.existing_child(&child_ref, &uid).await? {
                Existing::Absent => None,
                Existing::Ours(object) => Some(object),
                Existing::ControlledBy(other) => {
                    refused.push(ChildFailure {
                        child: child_ref,
                        code: 409,
                        reason: "AlreadyOwned".into(),
                        message: format!("controlled by {other}; the host does not take it over"),
                        cluster: None,
                    });
                    continue;
                }
            };
            let key = key_of(&child_ref);
            let sent = digest(&child);
            let same = lock(&self.applied).get(&key).is_some_and(|(rv, last)| {
                before.as_ref().and_then(|b| object::meta_str(b, "resourceVersion")) == Some(rv.as_str())
                    && *last == sent
            });
            if same {
                report.unchanged.push(child_ref);
                continue;
            }
            let patch = Patch::Apply { object: child.clone(), field_manager: field_manager.clone(), force: true };
            let sending = self.sending(&child_ref);
            let span = request_span("apply_child", &child_ref);
            let result = self.cluster.patch(&child_ref, patch, Subresource::Main).instrument(span.clone()).await;
            crate::telemetry::record_request(&span, &result);
            if let Ok(written) = &result {
                self.note_write(r, &child_ref, before.as_ref(), Touched::Fields(&child), written);
            }
            drop(sending);
            match result {
                Ok(written) => {
                    match object::meta_str(&written, "resourceVersion") {
                        Some(rv) => lock(&self.applied).insert(key, (rv.to_owned(), sent)),
                        None => lock(&self.applied).remove(&key),
                    };
                    report.applied.push(child_ref);
                }
                Err(e) => match refusal(&e) {
                    Some((code, reason, message)) => {
                        let message = cluster::bounded(&message, cluster::MAX_MESSAGE);
                        refused.push(ChildFailure { child: child_ref, code, reason, message, cluster: None });
                    }
                    None => return Err(e.into()),
                },
            }
        }

        let mut members = self.apply_in_members(r, &uid, placed, report).await;
        refused.append(&mut members.refused);
        if refused.is_empty() && outcome.children_policy == wit::ChildrenPolicy::Prune {
            self.prune(manifest, r, &uid, &desired, report).await?;
            self.prune_in_members(manifest, r, &uid, &mut members, report).await;
        }

        let condition = self.report_refused(component, r, object, &refused).await;
        let (latest, error) = self.write_status(component, r, object, status, condition).await;
        match error {
            // With children refused, the status is best effort (a kind may
            // have no status subresource); the refusal is reported anyway.
            Some(e) if !refused.is_empty() => {
                tracing::debug!(object = %r, error = %e, "the status was not written in full");
            }
            Some(e) => return Err(e),
            None => {}
        }
        self.record_events(component, r, object, outcome.events).await;
        Ok((latest, refused, members.unreachable))
    }

    /// Reports children refused: one Warning Event `ChildRefused` each, and
    /// the host's condition to write (none when nothing was refused).
    async fn report_refused(
        &self,
        component: &Loaded,
        r: &ObjectRef,
        object: &Value,
        refused: &[ChildFailure],
    ) -> Option<HostCondition> {
        for failure in refused {
            tracing::warn!(object = %r, child = %failure.child, code = failure.code, reason = %failure.reason, "child refused");
            self.record(self.warning(component, r, object, "ChildRefused", failure.to_string())).await;
        }
        (!refused.is_empty()).then(|| HostCondition::new("ChildRefused", &refused_list(refused)))
    }

    /// Carries out the guest's outcome of `deleted` for `object`: with
    /// `children-policy: keep`, the host's ownerReference goes from every
    /// child ([`orphan`](Self::orphan)), so the garbage collector leaves
    /// them; with `prune` the children follow the object through that
    /// reference. Then the outcome's events are recorded. Children and
    /// status it lists are not applied: the object is going.
    ///
    /// # Errors
    ///
    /// [`Error::ChildrenRefused`] when a child could not be released for a
    /// reason a retry cannot fix, reported as a refused child of an applied
    /// outcome is (a Warning Event, the host's condition, the guest's next
    /// `failed-children`); a transient API error as it comes. Either way
    /// the finalizer stays, so the object and the children wait.
    async fn finish_deleted(
        &self,
        component: &Loaded,
        r: &ObjectRef,
        object: &Value,
        outcome: wit::Outcome,
        report: &mut Report,
    ) -> Result<(), Error> {
        let refused = match outcome.children_policy {
            wit::ChildrenPolicy::Keep => self.orphan(&component.manifest, r, object, report).await?,
            wit::ChildrenPolicy::Prune => Vec::new(),
        };
        if let Some(condition) = self.report_refused(component, r, object, &refused).await {
            let (_, error) = self.write_status(component, r, object, None, Some(condition)).await;
            if let Some(e) = error {
                tracing::debug!(object = %r, error = %e, "no condition written");
            }
        }
        self.record_events(component, r, object, outcome.events).await;
        if refused.is_empty() {
            return Ok(());
        }
        lock(&self.refused).insert(r.clone(), refused.clone());
        Err(Error::ChildrenRefused(refused))
    }

    /// Removes the host's ownerReference from every child of an owned kind
    /// that `object` controls (matching the kind's label selector, as
    /// pruning does), so the garbage collector leaves them once `object`
    /// is gone; their other owners' references stay. A child being deleted
    /// already is left to it. Returns the children the API server refused
    /// that write for a reason a retry cannot fix; a child gone meanwhile
    /// has nothing left to keep.
    async fn orphan(
        &self,
        manifest: &Manifest,
        r: &ObjectRef,
        object: &Value,
        report: &mut Report,
    ) -> Result<Vec<ChildFailure>, Error> {
        let Some(uid) = object::meta_str(object, "uid") else { return Ok(Vec::new()) };
        let mut refused = Vec::new();
        for owned in &manifest.owns {
            for child in self.cluster.list_owned(&owned.kind, r.namespace.as_deref(), uid).await? {
                let Some(child_ref) = ObjectRef::of(&child) else { continue };
                let child_ref = ObjectRef { gvk: owned.kind.clone(), ..child_ref };
                let selected = owned.selects(child.pointer("/metadata/labels"));
                if !controlled_by(&child, uid) || !selected || object::is_deleting(&child) {
                    continue;
                }
                match self.release(r, &child_ref, child, uid).await {
                    Ok(true) => {
                        lock(&self.applied).remove(&key_of(&child_ref));
                        report.orphaned.push(child_ref);
                    }
                    Ok(false) => {}
                    Err(e) => match refusal(&e) {
                        Some((code, reason, message)) => {
                            let message = cluster::bounded(&message, cluster::MAX_MESSAGE);
                            refused.push(ChildFailure { child: child_ref, code, reason, message, cluster: None });
                        }
                        None => return Err(e.into()),
                    },
                }
            }
        }
        Ok(refused)
    }

    /// Removes the ownerReference to `uid` from the child `child_ref`
    /// (`child` as last read), written for the primary object `primary`,
    /// by the JSON patch of [`release_patch`]. A patch whose `test` fails
    /// (the list changed since `child` was read) is sent again on the
    /// child as the API server has it now, up to three times in all.
    /// Returns false when there was nothing to remove: the child is gone,
    /// or names `uid` no more.
    async fn release(
        &self,
        primary: &ObjectRef,
        child_ref: &ObjectRef,
        mut child: Value,
        uid: &str,
    ) -> Result<bool, cluster::Error> {
        let mut attempts = 1;
        loop {
            let Some(ops) = release_patch(&child, uid) else { return Ok(false) };
            let sending = self.sending(child_ref);
            let result = self.cluster.patch(child_ref, Patch::Json(ops), Subresource::Main).await;
            if let Ok(written) = &result {
                self.note_write(primary, child_ref, Some(&child), Touched::Metadata("ownerReferences"), written);
            }
            drop(sending);
            match result {
                Ok(_) => return Ok(true),
                Err(e) if e.is_not_found() => return Ok(false),
                Err(cluster::Error::Invalid(_)) if attempts < 3 => {
                    attempts += 1;
                    child = match self.read_through(child_ref, Subresource::Main).await {
                        Ok(fresh) => fresh,
                        Err(e) if e.is_not_found() => return Ok(false),
                        Err(e) => return Err(e),
                    };
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Whether `child` exists, and whether an owner other than the object
    /// `uid` controls it.
    async fn existing_child(&self, child: &ObjectRef, uid: &str) -> Result<Existing, Error> {
        let existing = match self.cluster.get(child).await {
            Ok(o) => o,
            Err(e) if e.is_not_found() => return Ok(Existing::Absent),
            Err(e) => return Err(e.into()),
        };
        let controller = existing
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|o| o.get("controller") == Some(&json!(true)));
        Ok(match controller.filter(|o| o.get("uid").and_then(Value::as_str) != Some(uid)) {
            Some(o) => {
                let field = |f: &str| o.get(f).and_then(Value::as_str).unwrap_or_default().to_owned();
                Existing::ControlledBy(format!("{} {}", field("kind"), field("name")))
            }
            None => Existing::Ours(existing),
        })
    }

    /// Deletes the children of owned kinds this object controls that are
    /// not in `desired`.
    async fn prune(
        &self,
        manifest: &Manifest,
        r: &ObjectRef,
        uid: &str,
        desired: &BTreeSet<ObjectRef>,
        report: &mut Report,
    ) -> Result<(), Error> {
        for owned in &manifest.owns {
            let existing = self.cluster.list_owned(&owned.kind, r.namespace.as_deref(), uid).await?;
            for child in existing {
                let controlled_by_us = controlled_by(&child, uid);
                let Some(child_ref) = ObjectRef::of(&child) else { continue };
                let child_ref = ObjectRef { gvk: owned.kind.clone(), ..child_ref };
                let selected = owned.selects(child.pointer("/metadata/labels"));
                if controlled_by_us && selected && !desired.contains(&child_ref) && !object::is_deleting(&child) {
                    lock(&self.applied).remove(&key_of(&child_ref));
                    match self.cluster.delete(&child_ref, Propagation::Background).await {
                        Ok(()) => report.pruned.push(child_ref),
                        Err(e) if e.is_not_found() => {}
                        Err(e) => return Err(e.into()),
                    }
                }
            }
        }
        Ok(())
    }

    async fn record_events(&self, component: &Loaded, r: &ObjectRef, object: &Value, events: Vec<wit::Event>) {
        let caller = self.caller(component, r, object);
        for event in events.into_iter().take(MAX_EVENTS) {
            match event_record(&caller, event) {
                Some(Ok(record)) => self.record(record).await,
                Some(Err(refused)) => tracing::warn!(object = %r, reason = %refused, "outcome event refused"),
                None => {}
            }
        }
    }
}

/// Checks every child of an outcome of `manifest`'s controller for the
/// primary object `r` and prepares it for applying: its namespace (the
/// primary's, for a namespaced primary), the host's ownerReference
/// `owner_ref` and none of the guest's, and the `grants` (which carry the
/// host's watched namespaces) for a patch of it and, for a role binding,
/// `bind` on the role it names.
///
/// # Errors
///
/// [`Error::InvalidOutcome`] naming the first child that is not JSON, not
/// of an owned kind, outside its scope, badly named, or listed twice; or
/// when there are more than [`MAX_CHILDREN`].
pub fn prepare_children(
    manifest: &Manifest,
    grants: &Grants,
    r: &ObjectRef,
    owner_ref: &Value,
    children: &[Vec<u8>],
) -> Result<Vec<(ObjectRef, Value)>, Error> {
    let invalid = |m: String| Error::InvalidOutcome(cluster::bounded(&m, cluster::MAX_MESSAGE));
    if children.len() > MAX_CHILDREN {
        return Err(invalid(format!("{} children, more than {MAX_CHILDREN}", children.len())));
    }
    let mut prepared = Vec::with_capacity(children.len());
    let mut seen = BTreeSet::new();
    for bytes in children {
        let mut child: Value =
            serde_json::from_slice(bytes).map_err(|e| invalid(format!("a child is not JSON: {e}")))?;
        let Some(gvk) = Gvk::of(&child) else {
            return Err(invalid("a child has no apiVersion or kind".into()));
        };
        let Some(owned) = manifest.owned(&gvk) else {
            return Err(invalid(format!("child kind {gvk} is not declared in `owns`")));
        };
        let meta = child
            .as_object_mut()
            .ok_or_else(|| invalid("a child is not a JSON object".into()))?
            .entry("metadata")
            .or_insert_with(|| json!({}));
        let meta = meta.as_object_mut().ok_or_else(|| invalid("child metadata is not an object".into()))?;
        if let Some(own) = &r.namespace {
            let ns = meta.entry("namespace").or_insert_with(|| json!(own));
            if ns.as_str() != Some(own.as_str()) {
                return Err(invalid(format!(
                    "a child of kind {gvk} in namespace {ns}: the children of a namespaced object live in its namespace"
                )));
            }
        }
        let name = meta.get("name").and_then(Value::as_str).unwrap_or_default();
        if !manifest::is_object_name(name) {
            return Err(invalid(format!("a child of kind {gvk} has no valid metadata.name ({name:?})")));
        }
        if let Some(ns) = meta.get("namespace")
            && !ns.as_str().is_some_and(manifest::is_dns1123_label)
        {
            return Err(invalid(format!("child {gvk} {name}: namespace {ns} is not a namespace name")));
        }
        let labels = meta.get("labels").cloned();
        if !owned.selects(labels.as_ref()) {
            let selector = owned.label_selector.as_deref().unwrap_or_default();
            return Err(invalid(format!(
                "child {gvk} {name} does not match the label selector {selector:?} its kind is owned with"
            )));
        }
        // The host's controller reference is the only one: a guest may
        // not attach children to other objects.
        meta.insert("ownerReferences".into(), json!([owner_ref]));
        let child_ref = ObjectRef::of(&child).expect("kind, name and namespace were checked");
        let request = Request::new(Verb::Patch, &gvk, child_ref.namespace.as_deref()).named(&child_ref.name);
        grants.check(request, r.namespace.as_deref()).map_err(|d| invalid(format!("child {child_ref}: {d}")))?;
        if let Some(role) = role_ref(&gvk, &child, child_ref.namespace.as_deref()) {
            let (kind, namespace, name) = &role;
            let request = Request::new(Verb::Bind, kind, namespace.as_deref()).named(name);
            grants.check(request, r.namespace.as_deref()).map_err(|d| {
                invalid(format!("child {child_ref} binds {kind} {name}, which needs `bind` declared: {d}"))
            })?;
        }
        if !seen.insert(child_ref.clone()) {
            return Err(invalid(format!("child {child_ref} is listed twice")));
        }
        prepared.push((child_ref, child));
    }
    Ok(prepared)
}

/// True if `object` names the object `uid` as its controller.
fn controlled_by(object: &Value, uid: &str) -> bool {
    object.pointer("/metadata/ownerReferences").and_then(Value::as_array).is_some_and(|refs| {
        refs.iter()
            .any(|o| o.get("uid").and_then(Value::as_str) == Some(uid) && o.get("controller") == Some(&json!(true)))
    })
}

/// The JSON patch (RFC 6902) that removes the ownerReference to `uid`
/// from `child`; `None` when it names `uid` in none. Only that entry goes:
/// the `test` of its uid makes the patch fail (422) rather than remove
/// another entry when the list changed since `child` was read, and every
/// other owner's reference stays.
fn release_patch(child: &Value, uid: &str) -> Option<Value> {
    let refs = child.pointer("/metadata/ownerReferences")?.as_array()?;
    let i = refs.iter().position(|o| o.get("uid").and_then(Value::as_str) == Some(uid))?;
    let entry = format!("/metadata/ownerReferences/{i}");
    Some(json!([{"op": "test", "path": format!("{entry}/uid"), "value": uid}, {"op": "remove", "path": entry}]))
}

/// The note of the one `LogsDropped` Warning Event a reconcile records
/// when its guest logged more lines than the per-invocation cap (those are
/// gone); it also counts the lines over the controller's log budget (kept
/// in the journal only). `None` when no line was over the cap: lines over
/// the budget alone are the whole controller's doing, reported in the
/// host's log and `capstan_guest_log_lines_dropped_total`, and an Event per
/// reconcile for them would add a write to every reconcile exactly when
/// the controller is busiest.
fn logs_dropped_note(journal: &Journal) -> Option<String> {
    let (capped, throttled) = (journal.dropped_logs, journal.throttled_logs);
    if capped == 0 {
        return None;
    }
    Some(format!(
        "{} guest log lines were not logged: {capped} over the cap of {} lines per invocation, \
         {throttled} over the controller's log budget",
        capped + throttled,
        crate::runtime::imports::MAX_LOG_LINES
    ))
}

/// True if `written`, the answer to the host's write of `seen`'s status,
/// differs from `seen` only where that write changes an object: `status`,
/// and the server's `resourceVersion`, `managedFields` and, for a kind
/// without a status subresource, `generation`. Anything else (spec,
/// labels, annotations, owners, finalizers) changed is someone else's
/// write, made while the guest ran.
fn only_host_changes(seen: &Value, written: &Value) -> bool {
    fn same_except(a: &Map<String, Value>, b: &Map<String, Value>, skip: &[&str]) -> bool {
        let kept = |m: &Map<String, Value>| m.keys().filter(|k| !skip.contains(&k.as_str())).count();
        kept(a) == kept(b) && a.iter().filter(|(k, _)| !skip.contains(&k.as_str())).all(|(k, v)| b.get(k) == Some(v))
    }
    fn meta(o: &Map<String, Value>) -> Option<&Map<String, Value>> {
        o.get("metadata").and_then(Value::as_object)
    }
    if object::meta_str(seen, "resourceVersion") == object::meta_str(written, "resourceVersion") {
        return true;
    }
    let (Some(seen), Some(written)) = (seen.as_object(), written.as_object()) else { return false };
    same_except(seen, written, &["status", "metadata"])
        && match (meta(seen), meta(written)) {
            (Some(a), Some(b)) => same_except(a, b, &["resourceVersion", "managedFields", "generation"]),
            (a, b) => a == b,
        }
}

/// What a write of the host's may change in an object, besides its
/// resourceVersion, managed fields and generation.
#[derive(Clone, Copy, Debug)]
enum Touched<'a> {
    /// The status (a status write).
    Status,
    /// One field of the metadata (a finalizer patch, an owner reference
    /// removed).
    Metadata(&'static str),
    /// The fields of an applied object: each field it sets, objects
    /// compared field by field, anything else (lists too) as a whole.
    Fields(&'a Value),
}

/// True if `written`, the answer to a write the host made to `before`,
/// differs from it in nothing but what the write `touched`: then the
/// answer's resourceVersion is the write's own. Otherwise the answer may
/// be someone else's change (a write that changes nothing answers with
/// the object as the last writer left it), and its watch event must stay
/// a trigger. In doubt, false: a spare reconcile costs less than a missed
/// change.
fn only_touched(before: &Value, written: &Value, touched: Touched<'_>) -> bool {
    fn strip(mut o: Value, touched: Touched<'_>) -> Value {
        if let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut) {
            for k in ["resourceVersion", "managedFields", "generation"] {
                meta.remove(k);
            }
            if let Touched::Metadata(k) = touched {
                meta.remove(k);
            }
        }
        match touched {
            Touched::Status => {
                o.as_object_mut().map(|m| m.remove("status"));
            }
            Touched::Metadata(_) => {}
            Touched::Fields(applied) => remove_fields(&mut o, applied),
        }
        o
    }
    fn remove_fields(o: &mut Value, applied: &Value) {
        let (Some(o), Some(applied)) = (o.as_object_mut(), applied.as_object()) else { return };
        for (k, v) in applied {
            match o.get_mut(k) {
                Some(inner) if v.is_object() && inner.is_object() => remove_fields(inner, v),
                _ => {
                    o.remove(k);
                }
            }
        }
    }
    strip(before.clone(), touched) == strip(written.clone(), touched)
}

/// What the event of an object this host has not handled since it started
/// is, judged by the marks a handled object carries.
fn event_after_restart(manifest: &Manifest, object: &Value) -> EventKind {
    let finalized = manifest.finalizer.as_ref().is_some_and(|f| object::finalizers(object).contains(f));
    // The host's condition alone (a terminal failure without a status of
    // the guest's) says which generation was handled too.
    let observed = object.pointer("/status/observedGeneration").and_then(Value::as_i64).or_else(|| {
        conditions(object.get("status"))
            .iter()
            .find(|c| c.get("type") == Some(&json!(CONDITION)))
            .and_then(|c| c.get("observedGeneration")?.as_i64())
    });
    let manager = manifest.field_manager();
    let written = object.pointer("/metadata/managedFields").and_then(Value::as_array).is_some_and(|fields| {
        fields.iter().any(|f| f.get("manager").and_then(Value::as_str) == Some(manager.as_str()))
    });
    if !finalized && observed.is_none() && !written {
        return EventKind::Added;
    }
    match (object::generation(object), observed) {
        (Some(generation), Some(observed)) if generation > observed => EventKind::Modified,
        _ => EventKind::Resync,
    }
}

/// The role a RoleBinding or ClusterRoleBinding child refers to: kind,
/// namespace (a Role's is the binding's) and name.
fn role_ref(gvk: &Gvk, child: &Value, namespace: Option<&str>) -> Option<(Gvk, Option<String>, String)> {
    if gvk.group != "rbac.authorization.k8s.io" || !matches!(gvk.kind.as_str(), "RoleBinding" | "ClusterRoleBinding") {
        return None;
    }
    let kind = child.pointer("/roleRef/kind").and_then(Value::as_str).unwrap_or("ClusterRole");
    let name = child.pointer("/roleRef/name").and_then(Value::as_str).unwrap_or_default();
    let namespace = (kind == "Role").then(|| namespace.map(str::to_owned)).flatten();
    Some((Gvk::new("rbac.authorization.k8s.io", "v1", kind), namespace, name.to_owned()))
}

/// The code, reason and message of an API error that a retry cannot fix.
fn refusal(e: &cluster::Error) -> Option<(u16, String, String)> {
    use cluster::Error as E;
    match e {
        E::Invalid(s) | E::Forbidden(s) | E::NotFound(s) => Some((s.code, s.reason.clone(), s.message.clone())),
        E::BadRequest(m) => Some((400, "BadRequest".into(), m.clone())),
        E::Other(s) if (400..500).contains(&s.code) && s.code != 429 => {
            Some((s.code, s.reason.clone(), s.message.clone()))
        }
        // Server-side apply answers 500 when the applied object does not
        // decode into its kind (an undeclared field, a malformed quantity):
        // the same object fails the same way every time.
        E::Other(s) if s.code == 500 && is_decode_failure(&s.message) => {
            Some((s.code, s.reason.clone(), s.message.clone()))
        }
        _ => None,
    }
}

/// True for the API server's messages about an applied object that does
/// not decode into its kind.
fn is_decode_failure(message: &str) -> bool {
    ["failed to create typed patch object", "failed to convert new object", "unable to convert unstructured object"]
        .iter()
        .any(|m| message.contains(m))
}

fn conditions(status: Option<&Value>) -> &[Value] {
    status.and_then(|s| s.get("conditions")).and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default()
}

fn now() -> String {
    k8s_openapi::jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The status an outcome or failure carries, if any.
///
/// # Errors
///
/// [`Error::InvalidOutcome`] when it is not a JSON object.
fn guest_status(bytes: Option<&[u8]>) -> Result<Option<Value>, Error> {
    let Some(bytes) = bytes else { return Ok(None) };
    match serde_json::from_slice::<Value>(bytes) {
        Ok(status @ Value::Object(_)) => Ok(Some(status)),
        Ok(_) => Err(Error::InvalidOutcome("status is not a JSON object".into())),
        Err(e) => Err(Error::InvalidOutcome(format!("status is not JSON: {e}"))),
    }
}

/// The guest's `status` (a JSON object) as the host applies it to `object`:
/// `observedGeneration` filled in when absent; a `conditions` list it
/// carries without any condition of the host's type, plus `wanted`
/// (`declared`: whether the kind's status may carry conditions at all).
fn status_to_apply(object: &Value, mut status: Value, wanted: Option<&Value>, declared: bool) -> Value {
    if let Some(map) = status.as_object_mut() {
        if let Some(generation) = object::generation(object) {
            map.entry("observedGeneration").or_insert_with(|| json!(generation));
        }
        if let (true, Some(Value::Array(list))) = (declared, map.get_mut("conditions")) {
            list.retain(|c| c.get("type") != Some(&json!(CONDITION)));
            list.extend(wanted.cloned());
        }
    }
    status
}

/// True if applying `status` would change nothing in `current`: equal,
/// apart from `conditions` when `status` carries none (`carries`), since
/// those are not the guest's to write then.
fn holds_status(current: Option<&Value>, status: &Value, carries: bool) -> bool {
    let Some(current) = current else { return false };
    if carries {
        return current == status;
    }
    let without = |v: &Value| v.as_object().map(|m| m.iter().filter(|(k, _)| *k != "conditions").count());
    without(current) == without(status)
        && status.as_object().is_some_and(|m| m.iter().all(|(k, v)| current.get(k) == Some(v)))
}

/// Where the host's condition is in the status of `object`, and what it says.
fn condition_at(object: &Value) -> Option<(usize, &Value)> {
    conditions(object.get("status")).iter().enumerate().find(|(_, c)| c.get("type") == Some(&json!(CONDITION)))
}

/// The JSON patch (RFC 6902) that makes the host's condition in the status
/// of `object` `wanted` (removed with `None`); `None` when it is already.
///
/// Only the condition's own entry is touched, and every patch fails (422)
/// instead of overwriting a list that changed since `object` was read: a
/// replace or remove tests that the entry at its index is still the
/// host's; an append (`/status/conditions/-`) needs the list to exist; a
/// new list or status is sent only while the `resourceVersion` is still
/// `object`'s. This works the same for an atomic list and a list-map.
fn condition_patch(object: &Value, wanted: Option<&Value>) -> Option<Value> {
    let entry = |i: usize| format!("/status/conditions/{i}");
    let test_ours = |i: usize| json!({"op": "test", "path": format!("{}/type", entry(i)), "value": CONDITION});
    match (wanted, condition_at(object)) {
        (None, None) => None,
        (None, Some((i, _))) => Some(json!([test_ours(i), {"op": "remove", "path": entry(i)}])),
        (Some(c), Some((_, current))) if current == c => None,
        (Some(c), Some((i, _))) => Some(json!([test_ours(i), {"op": "replace", "path": entry(i), "value": c}])),
        (Some(c), None) => {
            let status = object.get("status");
            if status.and_then(|s| s.get("conditions")).is_some_and(Value::is_array) {
                return Some(json!([{"op": "add", "path": "/status/conditions/-", "value": c}]));
            }
            let add = match status {
                Some(Value::Object(_)) => json!({"op": "add", "path": "/status/conditions", "value": [c]}),
                _ => json!({"op": "add", "path": "/status", "value": {"conditions": [c]}}),
            };
            let mut ops = Vec::new();
            if let Some(rv) = object::meta_str(object, "resourceVersion") {
                ops.push(json!({"op": "test", "path": "/metadata/resourceVersion", "value": rv}));
            }
            ops.push(add);
            Some(Value::Array(ops))
        }
    }
}

/// The body of a server-side apply of `status` to the object `r`.
fn status_apply_body(r: &ObjectRef, status: Value) -> Value {
    let mut metadata = json!({"name": r.name});
    if let Some(ns) = &r.namespace {
        metadata["namespace"] = json!(ns);
    }
    json!({"apiVersion": r.gvk.api_version(), "kind": r.gvk.kind, "metadata": metadata, "status": status})
}

/// The span of one request the host sends about `r` (`name`:
/// `apply_child`, `write_status`): its kind, namespace and name, and,
/// recorded by [`telemetry::record_request`](crate::telemetry::record_request),
/// the answer's status code.
fn request_span(name: &'static str, r: &ObjectRef) -> tracing::Span {
    tracing::info_span!(
        "request",
        "otel.name" = name,
        kind = %r.gvk,
        namespace = r.namespace.as_deref(),
        name = %r.name,
        status_code = tracing::field::Empty,
        "otel.status_code" = tracing::field::Empty,
        "otel.status_message" = tracing::field::Empty,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_answer_holding_someone_elses_change_is_not_only_the_hosts() {
        let seen = json!({
            "apiVersion": "examples.capstan.dev/v1alpha1", "kind": "Greeting",
            "metadata": {"name": "g", "resourceVersion": "10", "generation": 1, "labels": {"a": "1"},
                "managedFields": [{"manager": "capstan"}]},
            "spec": {"message": "hi"},
        });
        let mut written = seen.clone();
        written["metadata"]["resourceVersion"] = json!("11");
        written["metadata"]["managedFields"] = json!([{"manager": "capstan", "fieldsV1": {}}, {"manager": "x"}]);
        written["status"] = json!({"observedGeneration": 1});
        assert!(only_host_changes(&seen, &written), "status, resourceVersion and managedFields are the write's");
        let mut no_status_subresource = written.clone();
        no_status_subresource["metadata"]["generation"] = json!(2);
        assert!(only_host_changes(&seen, &no_status_subresource), "a kind without a status subresource");
        assert!(only_host_changes(&seen, &seen), "an unchanged answer (nothing written)");

        let mut spec = written.clone();
        spec["spec"]["message"] = json!("changed");
        spec["metadata"]["generation"] = json!(2);
        assert!(!only_host_changes(&seen, &spec), "a new spec");
        let mut label = written.clone();
        label["metadata"]["labels"]["b"] = json!("2");
        assert!(!only_host_changes(&seen, &label), "a new label");
        let mut removed = written.clone();
        removed["metadata"].as_object_mut().expect("metadata is an object").remove("labels");
        assert!(!only_host_changes(&seen, &removed), "a removed field");
        let mut added = written;
        added["data"] = json!({});
        assert!(!only_host_changes(&seen, &added), "a field added at the top");
    }

    #[test]
    fn an_answer_is_the_hosts_own_write_only_if_it_shows_nothing_else_changed() {
        let before = json!({
            "apiVersion": "fixtures.capstan.dev/v1", "kind": "Probe",
            "metadata": {"name": "p", "resourceVersion": "10", "generation": 1, "labels": {"a": "1"},
                "finalizers": ["f"], "managedFields": [{"manager": "capstan"}]},
            "spec": {"status": {"count": 1}},
            "status": {"count": 1},
        });
        let mut status = before.clone();
        status["metadata"]["resourceVersion"] = json!("11");
        status["status"] = json!({"count": 1, "observedGeneration": 1});
        assert!(only_touched(&before, &status, Touched::Status), "the status write itself");
        assert!(
            !only_touched(&before, &status, Touched::Metadata("finalizers")),
            "a finalizer patch touches no status"
        );

        // A status write that changed nothing answers with a new spec
        // someone wrote meanwhile, at that writer's resourceVersion.
        let mut noop = before.clone();
        noop["metadata"]["resourceVersion"] = json!("12");
        noop["metadata"]["generation"] = json!(2);
        noop["spec"] = json!({"behaviour": "write-then-fail"});
        assert!(!only_touched(&before, &noop, Touched::Status), "someone else's spec");
        let mut label = status.clone();
        label["metadata"]["labels"]["b"] = json!("2");
        assert!(!only_touched(&before, &label, Touched::Status), "someone else's label");

        let mut finalized = before.clone();
        finalized["metadata"]["resourceVersion"] = json!("13");
        finalized["metadata"]["finalizers"] = json!([]);
        assert!(only_touched(&before, &finalized, Touched::Metadata("finalizers")));
        assert!(!only_touched(&before, &finalized, Touched::Status));

        // A child apply: what it sets may change, anything else may not.
        let child = json!({"metadata": {"name": "c", "labels": {"mine": "x"}}, "data": {"k": "v"}});
        let old = json!({"metadata": {"name": "c", "resourceVersion": "5", "labels": {"theirs": "y"}},
            "data": {"k": "old"}, "status": {"ready": false}});
        let mut applied = old.clone();
        applied["metadata"]["resourceVersion"] = json!("6");
        applied["metadata"]["labels"]["mine"] = json!("x");
        applied["data"] = json!({"k": "v"});
        assert!(only_touched(&old, &applied, Touched::Fields(&child)), "the apply itself");
        let mut their_label = applied.clone();
        their_label["metadata"]["labels"]["theirs"] = json!("z");
        assert!(!only_touched(&old, &their_label, Touched::Fields(&child)), "another owner's label");
        let mut their_status = applied;
        their_status["status"]["ready"] = json!(true);
        assert!(!only_touched(&old, &their_status, Touched::Fields(&child)), "a status the child's controller wrote");
    }

    #[test]
    fn a_journal_that_logged_every_line_records_no_logs_dropped_event() {
        let mut journal = Journal::default();
        assert_eq!(logs_dropped_note(&journal), None);
        // Over the shared budget only: the host's log and metrics say so.
        journal.throttled_logs = 7;
        assert_eq!(logs_dropped_note(&journal), None);
        journal.dropped_logs = 3;
        journal.throttled_logs = 2;
        assert_eq!(
            logs_dropped_note(&journal).as_deref(),
            Some(
                "5 guest log lines were not logged: 3 over the cap of 256 lines per invocation, \
                 2 over the controller's log budget"
            )
        );
    }

    #[test]
    fn a_canary_share_is_about_its_percentage_and_stable() {
        let gvk = Gvk::new("", "v1", "ConfigMap");
        let objects: Vec<ObjectRef> =
            (0..2000).map(|i| ObjectRef::new(gvk.clone(), Some("ns"), format!("o{i}"))).collect();
        for percent in [10u8, 50, 90] {
            let share = objects.iter().filter(|r| in_share(r, percent)).count();
            let expected = 2000 * usize::from(percent) / 100;
            assert!(share.abs_diff(expected) < 100, "{percent} %: {share} of 2000");
        }
        // Larger shares contain smaller ones; the same object, the same answer.
        assert!(objects.iter().filter(|r| in_share(r, 10)).all(|r| in_share(r, 50)));
        assert!(objects.iter().all(|r| in_share(r, 50) == in_share(&r.clone(), 50)));
        assert!(!objects.iter().any(|r| in_share(r, 0)));
        assert!(objects.iter().all(|r| in_share(r, 100)));
    }

    fn condition(message: &str) -> Value {
        json!({"type": CONDITION, "status": "False", "reason": "TerminalError", "message": message})
    }

    #[test]
    fn the_hosts_condition_is_patched_alone_and_only_onto_the_list_it_was_read_from() {
        let ours = condition("bad spec");
        let ready = json!({"type": "Ready", "status": "False"});
        let object = |status: Value| json!({"metadata": {"resourceVersion": "7"}, "status": status});

        // A list without it: appended, whatever the list holds by then.
        let listed = object(json!({"conditions": [ready]}));
        assert_eq!(
            condition_patch(&listed, Some(&ours)),
            Some(json!([{"op": "add", "path": "/status/conditions/-", "value": ours}]))
        );
        // There already: replaced or removed where the test finds it still.
        let there = object(json!({"conditions": [ready, condition("old")]}));
        let test = json!({"op": "test", "path": "/status/conditions/1/type", "value": CONDITION});
        assert_eq!(
            condition_patch(&there, Some(&ours)),
            Some(json!([test, {"op": "replace", "path": "/status/conditions/1", "value": ours}]))
        );
        assert_eq!(
            condition_patch(&there, None),
            Some(json!([test, {"op": "remove", "path": "/status/conditions/1"}]))
        );
        // No list, or no status: created only while nothing changed.
        let rv = json!({"op": "test", "path": "/metadata/resourceVersion", "value": "7"});
        assert_eq!(
            condition_patch(&object(json!({"phase": "x"})), Some(&ours)),
            Some(json!([rv, {"op": "add", "path": "/status/conditions", "value": [ours]}]))
        );
        assert_eq!(
            condition_patch(&json!({"metadata": {"resourceVersion": "7"}}), Some(&ours)),
            Some(json!([rv, {"op": "add", "path": "/status", "value": {"conditions": [ours]}}]))
        );
        // Nothing to do.
        assert_eq!(condition_patch(&object(json!({"conditions": [ready, ours]})), Some(&ours)), None);
        assert_eq!(condition_patch(&listed, None), None);
    }

    #[test]
    fn a_guests_status_carries_the_hosts_condition_only_in_a_list_of_its_own() {
        let object = json!({"metadata": {"generation": 4}, "status": {"conditions": [{"type": "Ready"}]}});
        let ours = condition("bad spec");
        let listed = json!({"conditions": [{"type": "Ready", "status": "True"}, condition("stale")]});
        let applied = status_to_apply(&object, listed, Some(&ours), true);
        assert_eq!(applied["observedGeneration"], 4);
        assert_eq!(applied["conditions"], json!([{"type": "Ready", "status": "True"}, ours]), "merged by type");
        // No list of the guest's: none is made up from what was read.
        let bare = status_to_apply(&object, json!({"phase": "Failed"}), Some(&ours), true);
        assert_eq!(bare, json!({"phase": "Failed", "observedGeneration": 4}));
        // The schema declares no conditions: the guest's status alone.
        let undeclared = status_to_apply(&object, json!({"conditions": []}), Some(&ours), false);
        assert_eq!(undeclared, json!({"conditions": [], "observedGeneration": 4}));
    }

    #[test]
    fn a_status_already_in_place_is_not_applied_again() {
        let current = json!({"phase": "Ready", "observedGeneration": 2, "conditions": [{"type": "X"}]});
        assert!(holds_status(Some(&current), &json!({"phase": "Ready", "observedGeneration": 2}), false));
        assert!(!holds_status(Some(&current), &json!({"phase": "Failed", "observedGeneration": 2}), false));
        assert!(!holds_status(Some(&current), &json!({"observedGeneration": 2}), false), "a field to remove");
        assert!(holds_status(Some(&current), &current, true));
        assert!(!holds_status(
            Some(&current),
            &json!({"phase": "Ready", "observedGeneration": 2, "conditions": []}),
            true
        ));
        assert!(!holds_status(None, &json!({}), false));
    }

    #[test]
    fn releasing_a_child_removes_the_owners_reference_alone_and_tests_it_first() {
        let owner =
            |uid: &str, controller: bool| json!({"kind": "Keeper", "name": uid, "uid": uid, "controller": controller});
        let child = json!({"metadata": {"ownerReferences": [owner("other", false), owner("mine", true)]}});
        assert_eq!(
            release_patch(&child, "mine"),
            Some(json!([
                {"op": "test", "path": "/metadata/ownerReferences/1/uid", "value": "mine"},
                {"op": "remove", "path": "/metadata/ownerReferences/1"},
            ]))
        );
        assert!(controlled_by(&child, "mine") && !controlled_by(&child, "other"), "a plain reference controls nothing");
        // Nothing to release.
        assert_eq!(release_patch(&child, "gone"), None);
        assert_eq!(release_patch(&json!({"metadata": {}}), "mine"), None);
    }

    #[test]
    fn messages_a_guest_hands_the_host_are_bounded() {
        let huge = "é".repeat(2 << 20);
        let c = HostCondition::new("TerminalError", &huge);
        assert!(c.message.len() <= cluster::MAX_MESSAGE && c.message.ends_with(" bytes cut)"), "{}", c.message.len());
        assert!(c.to_value(&json!({}))["message"].as_str().is_some_and(|m| m.len() <= cluster::MAX_MESSAGE));
        let child = ObjectRef::new(Gvk::new("", "v1", "ConfigMap"), Some("ns"), "c");
        let refused =
            vec![ChildFailure { child, code: 422, reason: "Invalid".into(), message: huge.clone(), cluster: None }; 3];
        let text = Error::ChildrenRefused(refused).to_string();
        assert!(text.starts_with("3 children refused: ") && text.len() < 2 * cluster::MAX_MESSAGE, "{}", text.len());
    }

    #[test]
    fn terminal_and_invalid_outcomes_are_not_retried() {
        assert!(!Error::Terminal("x".into()).is_retryable());
        assert!(!Error::InvalidOutcome("x".into()).is_retryable());
        assert!(Error::Transient("x".into()).is_retryable());
        assert!(Error::Guest(runtime::Error::Deadline(Duration::from_secs(1))).is_retryable());
    }

    #[test]
    fn reports_map_to_the_result_label_of_the_reconcile_metric() {
        use crate::metrics::ReconcileResult as R;
        let report = |result| Report {
            object: ObjectRef::new(Gvk::new("", "v1", "ConfigMap"), Some("ns"), "a"),
            event: None,
            result,
            journal: Journal::default(),
            applied: vec![],
            unchanged: vec![],
            pruned: vec![],
            orphaned: vec![],
        };
        let conflict =
            cluster::Error::Conflict(cluster::Status { code: 409, reason: "Conflict".into(), message: "stale".into() });
        let cases = [
            (Ok(Action::AwaitChange), R::Success),
            (Ok(Action::Requeue(Duration::from_secs(30))), R::RequeueAfter),
            (Err(Error::Cluster(conflict)), R::Conflict),
            (Err(Error::Guest(runtime::Error::Trap("unreachable".into()))), R::Error),
            (Err(Error::Transient("later".into())), R::Error),
            (Err(Error::Terminal("never".into())), R::TerminalError),
            (Err(Error::InvalidOutcome("child kind".into())), R::TerminalError),
        ];
        for (result, expected) in cases {
            assert_eq!(report(result).metrics_result(), expected);
        }
    }

    #[test]
    fn refusals_are_the_errors_a_retry_cannot_fix() {
        let status = |code, message: &str| cluster::Status::new(code, "x", message);
        assert!(refusal(&cluster::Error::Invalid(status(422, "spec.hard: must be >= 0"))).is_some());
        assert!(refusal(&cluster::Error::Forbidden(status(403, "cannot bind"))).is_some());
        let decode = "failed to convert new object (ns/q; /v1, Kind=ResourceQuota) to proper version";
        assert!(refusal(&cluster::Error::Other(status(500, decode))).is_some());
        assert!(refusal(&cluster::Error::Other(status(500, "etcdserver: request timed out"))).is_none());
        assert!(refusal(&cluster::Error::Other(status(429, "slow down"))).is_none());
        assert!(refusal(&cluster::Error::Conflict(status(409, "stale"))).is_none());
        assert!(refusal(&cluster::Error::Unavailable("down".into())).is_none());
    }

    #[test]
    fn error_messages_read_right() {
        assert_eq!(Error::Terminal("bad spec".into()).to_string(), "terminal: bad spec");
        assert_eq!(
            Error::InvalidOutcome("child kind v1/Pod is not declared in `owns`".into()).to_string(),
            "invalid outcome: child kind v1/Pod is not declared in `owns`"
        );
    }
}
