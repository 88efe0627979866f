//! One reconcile, from an object reference to an applied outcome: the
//! controller semantics shared by the real host and the mock host.
//!
//! # Guarantees
//!
//! - The event kind is derived from state, not from watch events: the
//!   object is compared with what this controller last handled
//!   successfully (new uid → `added`, changed generation or
//!   resourceVersion → `modified`, deletion timestamp → `deleted`,
//!   unchanged → `resync`). Merged triggers lose nothing, and after a host
//!   restart every object is reconciled again as `added`.
//! - With a finalizer declared, it is added before the first `added`, and
//!   removed only after `deleted` succeeds.
//! - Children are applied by server-side apply with this controller's field
//!   manager and a controller ownerReference; children of owned kinds that
//!   the outcome no longer lists are deleted.
//! - The status is written through the status subresource, with
//!   `observedGeneration` filled in when the guest left it out, and only
//!   when it differs from the current one.
//!
//! # Caveats
//!
//! Without a finalizer, `deleted` is best-effort: it is delivered only if
//! this host saw the object before it disappeared.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use crate::bindings::capstan::operator::types as wit;
use crate::cluster::{self, Cluster, EventRecord, Patch, Propagation, Subresource};
use crate::component::Loaded;
use crate::grants::Grants;
use crate::imports::events::event_record;
use crate::imports::{Caller, Journal};
use crate::object::{self, ObjectRef};
use crate::runtime::{self, Runtime};
use crate::sync::lock;

pub use crate::runtime::EventKind;

/// What to do after a successful reconcile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Reconcile again after this long (requested, or the resync period).
    Requeue(Duration),
    /// Wait for the next change.
    AwaitChange,
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
    /// Reading the object or applying the outcome failed. Retried.
    #[error("applying the outcome failed: {0}")]
    Cluster(#[from] cluster::Error),
}

impl Error {
    /// True if retrying with backoff makes sense.
    pub fn is_retryable(&self) -> bool {
        !matches!(self, Error::Terminal(_) | Error::InvalidOutcome(_))
    }

    /// True for an optimistic-concurrency conflict (409) while applying:
    /// the cache was behind a write. Not a failure: the object is simply
    /// reconciled again from fresher state.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Cluster(cluster::Error::Conflict(_)))
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
    /// Children pruned.
    pub pruned: Vec<ObjectRef>,
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
    /// Last state seen, for a best-effort `deleted` without finalizer.
    last: Value,
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

/// A controller's reconcile logic: one component version (and perhaps a
/// new one on trial), the cluster, and what it last handled.
pub struct Reconciler {
    /// The version in use and its grants, swapped together.
    version: Mutex<(Arc<Loaded>, Arc<Grants>)>,
    trial: Mutex<Option<Trial>>,
    runtime: Runtime,
    cluster: Arc<dyn Cluster>,
    handled: Mutex<HashMap<ObjectRef, Handled>>,
}

impl std::fmt::Debug for Reconciler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reconciler").field("component", &self.component()).finish_non_exhaustive()
    }
}

impl Reconciler {
    /// A reconciler running `component` against `cluster`.
    pub fn new(runtime: Runtime, component: Loaded, cluster: Arc<dyn Cluster>) -> Self {
        let grants = Arc::new(Grants::from_manifest(&component.manifest));
        Self {
            version: Mutex::new((Arc::new(component), grants)),
            trial: Mutex::new(None),
            runtime,
            cluster,
            handled: Mutex::new(HashMap::new()),
        }
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
        let grants = Arc::new(Grants::from_manifest(&component.manifest));
        std::mem::replace(&mut *lock(&self.version), (Arc::new(component), grants)).0
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
            _ => Arc::new(Grants::from_manifest(&component.manifest)),
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
        let grants = Arc::new(Grants::from_manifest(&component.manifest));
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

    /// Forgets what was handled, so every object is `added` again (as after
    /// a host restart).
    pub fn forget_all(&self) {
        lock(&self.handled).clear();
    }

    fn derive_event(&self, r: &ObjectRef, object: &Value) -> EventKind {
        let handled = lock(&self.handled);
        let Some(h) = handled.get(r) else { return EventKind::Added };
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

    fn remember(&self, r: &ObjectRef, seen: &Value, object: &Value) {
        let rv = |o: &Value| object::meta_str(o, "resourceVersion").map(str::to_owned);
        let handled = Handled {
            uid: object::meta_str(object, "uid").map(str::to_owned),
            generation: object::generation(object),
            resource_versions: [rv(seen), rv(object)],
            last: object.clone(),
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
            pruned: Vec::new(),
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
        let object = match self.cluster.get(r).await {
            Ok(o) => o,
            Err(e) if e.is_not_found() => {
                // Gone. Without a finalizer, deliver `deleted` once if we saw it.
                let last = lock(&self.handled).remove(r).map(|h| h.last);
                if let (Some(last), None) = (last, &manifest.finalizer) {
                    report.event = Some(EventKind::Deleted);
                    let outcome = self.call_guest(&component, r, EventKind::Deleted, last.clone(), report).await?;
                    self.record_events(&component, r, &last, outcome.events).await;
                }
                return Ok(Action::AwaitChange);
            }
            Err(e) => return Err(e.into()),
        };

        if object::is_deleting(&object) {
            let ours = manifest.finalizer.as_ref().is_some_and(|f| object::finalizers(&object).contains(f));
            let delivered_before = manifest.finalizer.is_none()
                && lock(&self.handled).get(r).is_some_and(|h| object::is_deleting(&h.last));
            if (manifest.finalizer.is_some() && !ours) || delivered_before {
                return Ok(Action::AwaitChange);
            }
            report.event = Some(EventKind::Deleted);
            let outcome = self.call_guest(&component, r, EventKind::Deleted, object.clone(), report).await?;
            self.record_events(&component, r, &object, outcome.events).await;
            if let Some(finalizer) = &manifest.finalizer {
                self.set_finalizer(r, &object, finalizer, false).await?;
                lock(&self.handled).remove(r);
            } else {
                self.remember(r, &object, &object);
            }
            return Ok(Action::AwaitChange);
        }

        let object = match &manifest.finalizer {
            Some(f) if !object::finalizers(&object).contains(f) => self.set_finalizer(r, &object, f, true).await?,
            _ => object,
        };
        let event = self.derive_event(r, &object);
        report.event = Some(event);
        let outcome = self.call_guest(&component, r, event, object.clone(), report).await?;
        let latest = self.apply(&component, r, &object, outcome.clone(), report).await?;
        self.remember(r, &object, &latest);
        let requeue = outcome.requeue_after_ms.map(Duration::from_millis);
        Ok(match (requeue, manifest.resync) {
            (Some(a), Some(b)) => Action::Requeue(a.min(b)),
            (Some(d), None) | (None, Some(d)) => Action::Requeue(d),
            (None, None) => Action::AwaitChange,
        })
    }

    fn caller(&self, component: &Loaded, r: &ObjectRef, object: &Value) -> Caller {
        Caller {
            controller: component.manifest.name.as_str().into(),
            field_manager: component.manifest.field_manager().into(),
            grants: self.grants_for(component),
            cluster: Arc::clone(&self.cluster),
            reconciling: Some((r.clone(), object::meta_str(object, "uid").map(str::to_owned))),
        }
    }

    async fn call_guest(
        &self,
        component: &Loaded,
        r: &ObjectRef,
        event: EventKind,
        object: Value,
        report: &mut Report,
    ) -> Result<wit::Outcome, Error> {
        let caller = self.caller(component, r, &object);
        let bytes = serde_json::to_vec(&object).expect("a JSON value always serializes");
        let invocation = self.runtime.reconcile(&component.pre, caller, event, bytes).await;
        report.journal = invocation.journal;
        let warn = |reason: &str, note: String| EventRecord {
            regarding: r.clone(),
            regarding_uid: object::meta_str(&object, "uid").map(str::to_owned),
            warning: true,
            reason: reason.to_owned(),
            action: "Reconcile".to_owned(),
            note: Some(note),
            reporting_controller: component.manifest.name.clone(),
        };
        match invocation.result {
            Ok(Ok(outcome)) => Ok(outcome),
            Ok(Err(wit::ReconcileError::Transient(m))) => Err(Error::Transient(m)),
            Ok(Err(wit::ReconcileError::Terminal(m))) => {
                self.record(warn("ReconcileFailed", m.clone())).await;
                self.mark_terminal(component, r, &object, &m).await;
                Err(Error::Terminal(m))
            }
            Err(e) => {
                tracing::warn!(object = %r, error = %e, "guest failed");
                self.record(warn("GuestFailed", e.to_string())).await;
                Err(Error::Guest(e))
            }
        }
    }

    /// Sets a `Reconciled=False` condition (reason `TerminalError`) in the
    /// object's status, with a field manager of the host's own. Best
    /// effort: a kind without a status subresource, or whose status schema
    /// has no conditions, simply keeps no condition. The guest's next
    /// successful status replaces it.
    async fn mark_terminal(&self, component: &Loaded, r: &ObjectRef, object: &Value, message: &str) {
        let now = k8s_openapi::jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
        let mut condition = json!({
            "type": "Reconciled",
            "status": "False",
            "reason": "TerminalError",
            "message": message.chars().take(1024).collect::<String>(),
            "lastTransitionTime": now,
        });
        if let Some(generation) = object::generation(object) {
            condition["observedGeneration"] = json!(generation);
        }
        let applied = status_apply_body(r, json!({"conditions": [condition]}));
        let field_manager = format!("{}-host", component.manifest.field_manager());
        let patch = Patch::Apply { object: applied, field_manager, force: true };
        if let Err(e) = self.cluster.patch(r, patch, Subresource::Status).await {
            tracing::debug!(object = %r, error = %e, "no terminal condition written");
        }
    }

    async fn record(&self, event: EventRecord) {
        if let Err(e) = self.cluster.record_event(event).await {
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
        match self.cluster.patch(r, Patch::Merge(patch), Subresource::Main).await {
            Ok(v) => Ok(v),
            // Removed meanwhile: the finalizer no longer matters.
            Err(e) if e.is_not_found() && !add => Ok(object.clone()),
            Err(e) => Err(e.into()),
        }
    }

    /// Applies children, prunes, writes status, records events. Returns the
    /// primary object as it is after the host's own writes.
    async fn apply(
        &self,
        component: &Loaded,
        r: &ObjectRef,
        object: &Value,
        outcome: wit::Outcome,
        report: &mut Report,
    ) -> Result<Value, Error> {
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

        let mut desired = BTreeSet::new();
        for bytes in &outcome.children {
            let mut child: Value = serde_json::from_slice(bytes)
                .map_err(|e| Error::InvalidOutcome(format!("a child is not JSON: {e}")))?;
            let Some(gvk) = object::Gvk::of(&child) else {
                return Err(Error::InvalidOutcome("a child has no apiVersion or kind".into()));
            };
            if !manifest.owns.iter().any(|o| o.same_group_kind(&gvk)) {
                return Err(Error::InvalidOutcome(format!("child kind {gvk} is not declared in `owns`")));
            }
            let meta = child
                .as_object_mut()
                .ok_or_else(|| Error::InvalidOutcome("a child is not a JSON object".into()))?
                .entry("metadata")
                .or_insert_with(|| json!({}));
            let meta =
                meta.as_object_mut().ok_or_else(|| Error::InvalidOutcome("child metadata is not an object".into()))?;
            if let Some(ns) = &r.namespace {
                meta.entry("namespace").or_insert_with(|| json!(ns));
            }
            let mut refs: Vec<Value> = meta
                .get("ownerReferences")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter(|o| o.get("controller") != Some(&json!(true))).cloned().collect())
                .unwrap_or_default();
            refs.push(owner_ref.clone());
            meta.insert("ownerReferences".into(), Value::Array(refs));
            let child_ref = ObjectRef::of(&child)
                .ok_or_else(|| Error::InvalidOutcome(format!("a child of kind {gvk} has no metadata.name")))?;
            let patch = Patch::Apply { object: child, field_manager: field_manager.clone(), force: true };
            self.cluster.patch(&child_ref, patch, Subresource::Main).await?;
            report.applied.push(child_ref.clone());
            desired.insert(child_ref);
        }

        for kind in &manifest.owns {
            let existing = self.cluster.list_owned(kind, r.namespace.as_deref(), &uid).await?;
            for child in existing {
                let controlled_by_us =
                    child.pointer("/metadata/ownerReferences").and_then(Value::as_array).is_some_and(|refs| {
                        refs.iter().any(|o| {
                            o.get("uid").and_then(Value::as_str) == Some(uid.as_str())
                                && o.get("controller") == Some(&json!(true))
                        })
                    });
                let Some(child_ref) = ObjectRef::of(&child) else { continue };
                let child_ref = ObjectRef { gvk: kind.clone(), ..child_ref };
                if controlled_by_us && !desired.contains(&child_ref) && !object::is_deleting(&child) {
                    match self.cluster.delete(&child_ref, Propagation::Background).await {
                        Ok(()) => report.pruned.push(child_ref),
                        Err(e) if e.is_not_found() => {}
                        Err(e) => return Err(e.into()),
                    }
                }
            }
        }

        let mut latest = object.clone();
        if let Some(bytes) = &outcome.status {
            let mut status: Value =
                serde_json::from_slice(bytes).map_err(|e| Error::InvalidOutcome(format!("status is not JSON: {e}")))?;
            if let (Some(map), Some(generation)) = (status.as_object_mut(), object::generation(object)) {
                map.entry("observedGeneration").or_insert_with(|| json!(generation));
            }
            if object.get("status") != Some(&status) {
                let applied = status_apply_body(r, status);
                let patch = Patch::Apply { object: applied, field_manager: field_manager.clone(), force: true };
                latest = self.cluster.patch(r, patch, Subresource::Status).await?;
            }
        }

        self.record_events(component, r, object, outcome.events).await;
        Ok(latest)
    }

    async fn record_events(&self, component: &Loaded, r: &ObjectRef, object: &Value, events: Vec<wit::Event>) {
        let caller = self.caller(component, r, object);
        for event in events {
            if let Some(record) = event_record(&caller, event) {
                self.record(record).await;
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_canary_share_is_about_its_percentage_and_stable() {
        let gvk = object::Gvk::new("", "v1", "ConfigMap");
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
            object: ObjectRef::new(object::Gvk::new("", "v1", "ConfigMap"), Some("ns"), "a"),
            event: None,
            result,
            journal: Journal::default(),
            applied: vec![],
            pruned: vec![],
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
    fn error_messages_read_right() {
        assert_eq!(Error::Terminal("bad spec".into()).to_string(), "terminal: bad spec");
        assert_eq!(
            Error::InvalidOutcome("child kind v1/Pod is not declared in `owns`".into()).to_string(),
            "invalid outcome: child kind v1/Pod is not declared in `owns`"
        );
    }
}
