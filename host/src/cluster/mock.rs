//! An in-memory [`Cluster`] for controller authors' unit tests.
//!
//! [`MockCluster`] keeps objects as JSON in memory and answers the calls a
//! controller makes the way the API server does where controllers depend on
//! it, so a reconcile function can be tested without a cluster:
//!
//! ```
//! use capstan_host::cluster::mock::MockCluster;
//! use capstan_host::object::{Gvk, ObjectRef};
//! use serde_json::json;
//!
//! let cluster = MockCluster::new();
//! let stored = cluster
//!     .seed(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "default"}}))
//!     .expect("configmaps are built in");
//! assert_eq!(stored["metadata"]["resourceVersion"], "1");
//!
//! let cfg = ObjectRef::new(Gvk::new("", "v1", "ConfigMap"), Some("default"), "cfg");
//! assert_eq!(cluster.get_sync(&cfg), Some(stored));
//! ```
//!
//! `docs/mock.md` says, for operator authors, exactly what the mock does
//! and does not do like the API server.
//!
//! # Behaviour
//!
//! - **Kinds.** Every kind the project's control plane serves is served
//!   from the start, with its scope, status subresource, verbs and OpenAPI
//!   schema, as captured by `tests/control-plane/capture-api.sh` (see
//!   [`MockCluster::kubernetes_version`]). Custom kinds are added with
//!   [`MockCluster::register_crd`] or by creating a CustomResourceDefinition
//!   object, which brings its schema, and [`MockCluster::register_kind`]
//!   serves a kind without a schema. A request for any other kind or
//!   version fails with [`Error::NotFound`] "the server could not find the
//!   requested resource", so a test notices a missing CRD; a verb the
//!   resource does not support is a 405 [`Error::Other`].
//! - **Schemas.** Undeclared fields are dropped from built-in objects and
//!   pruned from custom resources (unless the schema preserves unknown
//!   fields); CRD `default`s are applied; the result is validated against
//!   the schema (types, `required`, `enum`, bounds, lengths, `pattern`),
//!   failing with an [`Error::Invalid`] worded like the API server's, or,
//!   for a built-in field of the wrong type, an [`Error::BadRequest`] like
//!   its decoding error. Server-side apply refuses undeclared fields with a
//!   500 [`Error::Other`], as the API server does.
//! - **Storage.** Objects are stored per group and kind, keyed by namespace
//!   and name: every served version of a kind reads the same object,
//!   returned with the requested `apiVersion`. Namespaced kinds need a
//!   namespace and cluster-scoped kinds must not have one
//!   ([`Error::BadRequest`] otherwise).
//! - **Create.** [`Error::AlreadyExists`] if the name is taken. The server
//!   sets `uid`, `resourceVersion` (one counter for the whole cluster),
//!   `creationTimestamp` (from the mock clock, see [`MockCluster::set_now`])
//!   and `generation: 1`, and fills `name` from `generateName`. `status` is
//!   dropped for kinds with a status subresource. Names, labels,
//!   annotations, finalizers and owner references are validated
//!   ([`Error::Invalid`]); a `resourceVersion` in the request is rejected.
//! - **Update** (replace, patch, apply). A `metadata.resourceVersion` or
//!   `metadata.uid` in the request is a precondition ([`Error::Conflict`]
//!   when stale). `uid`, `creationTimestamp`, `generation` and the deletion
//!   fields cannot be changed by clients. `generation` goes up when anything
//!   outside `metadata` changes, except `status` for kinds with a status
//!   subresource (as for custom resources on the real server). A write that
//!   changes nothing is a no-op: no new `resourceVersion`, no journal entry.
//! - **Status subresource.** For kinds that have one, writes to the main
//!   resource keep the stored `status`, and writes to
//!   [`Subresource::Status`] only take `status` from the request. Status
//!   writes to other kinds fail with [`Error::NotFound`].
//! - **Patch.** [`Patch::Merge`] is RFC 7386 and [`Patch::Json`] RFC 6902
//!   (a failed operation or `test` is [`Error::Invalid`]).
//!   [`Patch::Strategic`] is approximated (see Limits) and, like the real
//!   server, refused with a 415 [`Error::Other`] for kinds defined by a CRD.
//! - **Server-side apply** ([`Patch::Apply`]) tracks, per field manager, the
//!   fields it applied (see [`MockCluster::managers_of`]). Lists merge as
//!   their schema's `x-kubernetes-list-type` says: `map` lists item by item
//!   by their `x-kubernetes-list-map-keys` (so two managers can each own
//!   their own `status.conditions` entry), `set` lists by value, other
//!   lists whole. An apply merges
//!   the configuration into the object, removes the fields the manager
//!   applied last time but no longer applies (unless another manager owns
//!   them too), and creates the object if it is missing. Changing a field
//!   another manager applied is an [`Error::Conflict`] unless `force` is
//!   set, which moves the ownership.
//! - **Delete.** [`Error::NotFound`] if missing. An object with finalizers
//!   gets `deletionTimestamp` and `deletionGracePeriodSeconds: 0` and a new
//!   `generation`, and stays until a write removes its last finalizer; no
//!   new finalizer may be added meanwhile ([`Error::Invalid`]). When an
//!   object is removed, its dependents (objects of any kind whose
//!   `ownerReferences` name its uid) are deleted in turn, respecting their
//!   own finalizers, unless another owner of theirs still exists (then only
//!   the reference goes); with [`Propagation::Orphan`] the references are
//!   removed instead.
//! - **List.** Label selectors (`a=b`, `a==b`, `a!=b`, `a`, `!a`,
//!   `a in (x,y)`, `a notin (x)`, `a>1`, `a<1`, comma for "and") and field
//!   selectors (`path=value`, `path==value`, `path!=value` on any dotted
//!   path; a missing field reads as empty). A malformed selector is an
//!   [`Error::BadRequest`]. Results are sorted by namespace, then name.
//! - **Journal.** Every effective write appends a [`Change`]; the mock
//!   host's queue reads them with [`MockCluster::changes_since`].
//!
//! # Limits
//!
//! - Only the schema is checked: none of the built-in kinds' Go validation
//!   (immutable fields, cross-field rules) or defaulting, no CEL rules, no
//!   conversion between versions (every version returns the same JSON).
//!   `metadata.managedFields` is neither returned nor accepted.
//! - Namespaces need not exist, deleting a Namespace does not delete its
//!   contents, and deleting a CRD neither deletes its objects nor stops
//!   serving its kind. The core `v1` and `events.k8s.io/v1` Events are
//!   stored apart, and [`Cluster::record_event`] only keeps the record
//!   (see [`MockCluster::events`]), it creates no Event object.
//! - `generation` is kept for every kind, including those (such as
//!   ConfigMap) for which the real server leaves it unset.
//! - Replacing or patching a missing object fails with [`Error::NotFound`],
//!   even for the few kinds the real server would create.
//! - Field selectors accept any path, where the real server only accepts a
//!   few per kind (and `metadata.name` / `metadata.namespace` for custom
//!   resources) and answers 400 for others.
//! - Strategic merge patch works without schemas: a JSON merge patch in
//!   which well-known lists are merged by key, whatever their path
//!   (`containers`, `initContainers`, `ephemeralContainers`, `volumes`,
//!   `env`, `imagePullSecrets` by `name`; `volumeMounts` by `mountPath`;
//!   `ports` by `containerPort` or else `port`; `conditions` by `type`;
//!   `ownerReferences` by `uid`; `hostAliases` by `ip`) and `finalizers`
//!   is merged as a set. `$patch: delete` / `replace` and
//!   `$deleteFromPrimitiveList` are honoured; `$retainKeys` and
//!   `$setElementOrder` are ignored. Other lists are replaced.
//! - Server-side apply owns scalars, empty maps, atomic lists, set items,
//!   and map-list items with the fields inside them. Only apply operations
//!   own fields: replace and the
//!   other patch types change values without taking or removing ownership,
//!   so their fields never cause apply conflicts and are never pruned.
//!   A change of ownership alone (a second manager applying the same
//!   values) is recorded but, as the object is unchanged, is not a write.
//!   A field is not removed if it now holds a non-empty map, which only
//!   other writers can have put there. Maps emptied by a removal are
//!   removed too. Nulls in an applied configuration are ignored.
//! - Garbage collection runs at once, inside the delete call, and only when
//!   an owner is removed: dependents whose owners never existed stay.
//!   [`Propagation::Background`], [`Propagation::Foreground`] and
//!   [`Propagation::Default`] all behave as background deletion (no
//!   `foregroundDeletion` finalizer); [`Propagation::Orphan`] adds no
//!   `orphan` finalizer either, it is remembered and applied when the
//!   object is finally removed.
//! - No watch, no admission webhooks, no RBAC, no rate limits, no
//!   `resourceVersion` semantics on reads.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use serde_json::{Map, Value, json};

use super::{Cluster, Error, EventRecord, ListParams, Patch, Propagation, Result, Status, Subresource};
use crate::object::{self, Gvk, ObjectRef};
use schema::Schema;

mod apply;
mod catalog;
pub mod http;
mod kinds;
pub(crate) mod meta;
mod schema;
pub(crate) mod selector;
mod strategic;
#[cfg(test)]
mod tests;

pub use http::{HttpAnswer, HttpRequest, HttpStub, HttpStubs};
pub use kinds::KindInfo;

/// Where the mock clock starts: 2024-01-01T00:00:00Z, so timestamps in
/// tests are reproducible.
const DEFAULT_NOW_SECS: u64 = 1_704_067_200;

/// An in-memory cluster for unit tests; see the [module docs](self) for
/// what it does and does not do like the API server.
///
/// Share it as `Arc<MockCluster>` (it is also usable as `Arc<dyn
/// Cluster>`): each call holds an internal lock for its own duration only.
///
/// ```
/// use std::sync::Arc;
///
/// use capstan_host::cluster::{Cluster, mock::MockCluster};
///
/// let cluster = Arc::new(MockCluster::new());
/// let backend: Arc<dyn Cluster> = cluster.clone();
/// # let _ = backend;
/// assert_eq!(cluster.last_seq(), 0);
/// ```
pub struct MockCluster {
    /// Its identity ([`Cluster::id`]): unique in the process.
    id: String,
    state: Mutex<State>,
    /// The outside world: answers to outbound HTTP requests.
    http: Arc<HttpStubs>,
    /// Whether outbound requests go to the network instead of the stubs.
    network: AtomicBool,
}

impl fmt::Debug for MockCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state();
        f.debug_struct("MockCluster")
            .field("objects", &state.objects.values().map(BTreeMap::len).sum::<usize>())
            .field("resource_version", &state.resource_version)
            .field("changes", &state.changes.len())
            .finish_non_exhaustive()
    }
}

/// One effective write, as the mock host's work queue sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    /// Position in the journal: 1 for the first change, then one more each.
    pub seq: u64,
    /// The object written; its `gvk` has the version of the write.
    pub object_ref: ObjectRef,
    /// The new state, or the last state for a removal.
    pub object: Value,
    /// Whether the object was written or removed.
    pub kind: ChangeKind,
}

/// What a [`Change`] did to its object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeKind {
    /// Created or updated, including being marked for deletion.
    Applied,
    /// Removed from the cluster.
    Deleted,
}

/// A uid-shaped identity no other mock cluster of this process has.
fn next_id() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1 << 40);
    meta::uid(NEXT.fetch_add(1, Ordering::Relaxed))
}

impl MockCluster {
    /// An empty cluster serving the built-in kinds, its clock at
    /// 2024-01-01T00:00:00Z.
    pub fn new() -> Self {
        Self { id: next_id(), state: Mutex::new(State::new()), http: Arc::default(), network: AtomicBool::new(false) }
    }

    /// An empty cluster like [`new`](Self::new) that shares `other`'s
    /// outside world: its HTTP stubs, the requests they answered, and
    /// whether requests go to the network.
    pub fn beside(other: &MockCluster) -> Self {
        Self {
            id: next_id(),
            state: Mutex::new(State::new()),
            http: Arc::clone(&other.http),
            network: AtomicBool::new(other.network.load(Ordering::Relaxed)),
        }
    }

    /// Its identity, as [`Cluster::id`] gives it.
    pub fn identity(&self) -> &str {
        &self.id
    }

    /// The state, even if a test panicked while holding the lock: every
    /// operation leaves it consistent before it can panic.
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Serves a kind (one version of it). Registering another version of a
    /// known group and kind adds that version; the last registration's
    /// plural and scope win.
    /// The kind is served without a schema: objects are neither pruned nor
    /// validated beyond their metadata, and every list is atomic in apply.
    pub fn register_kind(&self, info: KindInfo) {
        self.state().register(kinds::Served::unchecked(info), false);
    }

    /// Serves every served version of an `apiextensions.k8s.io/v1`
    /// CustomResourceDefinition (`spec.group`, `spec.names.kind` and
    /// `plural`, `spec.scope`, and each version's `subresources.status`).
    /// The CRD object itself is not stored.
    ///
    /// ```
    /// use capstan_host::cluster::mock::MockCluster;
    /// use capstan_host::object::Gvk;
    /// use serde_json::json;
    ///
    /// let cluster = MockCluster::new();
    /// cluster.register_crd(&json!({
    ///     "apiVersion": "apiextensions.k8s.io/v1",
    ///     "kind": "CustomResourceDefinition",
    ///     "metadata": {"name": "widgets.example.com"},
    ///     "spec": {
    ///         "group": "example.com",
    ///         "names": {"kind": "Widget", "plural": "widgets"},
    ///         "scope": "Namespaced",
    ///         "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}}}],
    ///     },
    /// }))?;
    /// assert!(cluster.kind_info(&Gvk::new("example.com", "v1", "Widget")).is_some());
    /// # Ok::<(), capstan_host::cluster::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] if a field is missing, the scope is unknown, the
    /// name is not `<plural>.<group>`, or no version is served.
    pub fn register_crd(&self, crd: &Value) -> Result<()> {
        let served = kinds::from_crd(crd).map_err(invalid)?;
        let mut state = self.state();
        for kind in served {
            state.register(kind, true);
        }
        Ok(())
    }

    /// How the cluster serves a kind, if it does.
    pub fn kind_info(&self, gvk: &Gvk) -> Option<KindInfo> {
        self.state().resolve(gvk).ok().map(|kind| KindInfo {
            gvk: kind.gvk,
            plural: kind.plural,
            namespaced: kind.namespaced,
            status_subresource: kind.status,
        })
    }

    /// The Kubernetes version whose API the built-in kinds were captured
    /// from, e.g. `v1.37.2`.
    pub fn kubernetes_version() -> &'static str {
        &catalog::get().kubernetes
    }

    /// The mock clock: what `creationTimestamp` and `deletionTimestamp` are
    /// set to.
    pub fn now(&self) -> SystemTime {
        self.state().now
    }

    /// Sets the mock clock.
    pub fn set_now(&self, now: SystemTime) {
        self.state().now = now;
    }

    /// Moves the mock clock forward.
    pub fn advance(&self, by: Duration) {
        let mut state = self.state();
        state.now += by;
    }

    /// Creates an object for a test's starting state, like
    /// [`Cluster::create`] but keeping `status` (fixtures often need one).
    /// Returns the object as stored.
    ///
    /// # Errors
    ///
    /// As [`Cluster::create`].
    pub fn seed(&self, object: Value) -> Result<Value> {
        self.state().create(object, true)
    }

    /// The stored object, if any, with `object.gvk`'s `apiVersion`. Does
    /// not check the kind is served.
    pub fn get_sync(&self, object: &ObjectRef) -> Option<Value> {
        let state = self.state();
        let key = (object.namespace.clone().unwrap_or_default(), object.name.clone());
        state.stored(&GroupKind::of(&object.gvk), &key).map(|stored| with_version(&stored.object, &object.gvk))
    }

    /// Every stored object of a kind, in all namespaces, sorted by
    /// namespace and name, with `kind`'s `apiVersion`.
    pub fn objects(&self, kind: &Gvk) -> Vec<Value> {
        let state = self.state();
        state
            .objects
            .get(&GroupKind::of(kind))
            .map(|objects| objects.values().map(|stored| with_version(&stored.object, kind)).collect())
            .unwrap_or_default()
    }

    /// The field managers that own fields of an object through server-side
    /// apply, sorted; empty if the object is missing.
    pub fn managers_of(&self, object: &ObjectRef) -> Vec<String> {
        let state = self.state();
        let key = (object.namespace.clone().unwrap_or_default(), object.name.clone());
        let Some(stored) = state.stored(&GroupKind::of(&object.gvk), &key) else { return Vec::new() };
        let names: BTreeSet<&str> = stored.managers.keys().map(|m| m.name.as_str()).collect();
        names.into_iter().map(str::to_owned).collect()
    }

    /// The fields a manager owns in an object, written as the API server
    /// prints them in apply conflicts (`.spec.replicas`,
    /// `.metadata.finalizers[="x"]`), sorted.
    pub fn managed_fields(&self, object: &ObjectRef, manager: &str) -> Vec<String> {
        let state = self.state();
        let key = (object.namespace.clone().unwrap_or_default(), object.name.clone());
        let Some(stored) = state.stored(&GroupKind::of(&object.gvk), &key) else { return Vec::new() };
        let paths: BTreeSet<String> = stored
            .managers
            .iter()
            .filter(|(m, _)| m.name == manager)
            .flat_map(|(_, fields)| fields.iter().map(apply::display))
            .collect();
        paths.into_iter().collect()
    }

    /// The events recorded so far, oldest first.
    pub fn events(&self) -> Vec<EventRecord> {
        self.state().events.clone()
    }

    /// The changes after `seq`, oldest first; `changes_since(0)` is the
    /// whole journal.
    pub fn changes_since(&self, seq: u64) -> Vec<Change> {
        let state = self.state();
        let start = usize::try_from(seq).unwrap_or(usize::MAX).min(state.changes.len());
        state.changes[start..].to_vec()
    }

    /// The stubs answering components' outbound HTTP requests, and the
    /// requests they made (see [`http`]).
    pub fn http(&self) -> &HttpStubs {
        &self.http
    }

    /// Sends components' outbound HTTP requests (past the same checks) to
    /// the network instead of the stubs, or back to the stubs: for tests
    /// of the host's own HTTP client against a local server.
    pub fn use_network(&self, network: bool) {
        self.network.store(network, Ordering::Relaxed);
    }

    /// The `seq` of the last change; 0 if nothing was written yet.
    pub fn last_seq(&self) -> u64 {
        self.state().changes.last().map_or(0, |change| change.seq)
    }
}

impl Default for MockCluster {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl Cluster for MockCluster {
    fn http_stubs(&self) -> Option<Arc<HttpStubs>> {
        (!self.network.load(Ordering::Relaxed)).then(|| Arc::clone(&self.http))
    }

    async fn id(&self) -> Result<String> {
        Ok(self.id.clone())
    }

    async fn get(&self, object: &ObjectRef) -> Result<Value> {
        self.state().get(object)
    }

    async fn list(&self, kind: &Gvk, namespace: Option<&str>, params: &ListParams) -> Result<Vec<Value>> {
        self.state().list(kind, namespace, params)
    }

    async fn create(&self, object: Value) -> Result<Value> {
        self.state().create(object, false)
    }

    async fn replace(&self, object: Value, subresource: Subresource) -> Result<Value> {
        let mut state = self.state();
        let gvk = Gvk::of(&object).ok_or_else(|| bad_request("object has no apiVersion and kind"))?;
        let kind = state.resolve(&gvk)?;
        kind.allow("update")?;
        state.update(&kind, object, subresource)
    }

    async fn patch(&self, object: &ObjectRef, patch: Patch, subresource: Subresource) -> Result<Value> {
        self.state().patch(object, patch, subresource)
    }

    async fn delete(&self, object: &ObjectRef, propagation: Propagation) -> Result<()> {
        let mut state = self.state();
        let kind = state.resolve(&object.gvk)?;
        kind.allow("delete")?;
        let key = kind.key(object.namespace.as_deref(), &object.name)?;
        if state.delete_key(&kind.gk, &key, propagation) { Ok(()) } else { Err(kind.not_found(&object.name)) }
    }

    async fn record_event(&self, event: EventRecord) -> Result<()> {
        self.state().events.push(event);
        Ok(())
    }
}

/// A group and kind: the unit of storage.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct GroupKind {
    group: String,
    kind: String,
}

impl GroupKind {
    fn of(gvk: &Gvk) -> Self {
        Self { group: gvk.group.clone(), kind: gvk.kind.clone() }
    }

    fn is_crd(&self) -> bool {
        self.group == kinds::CRD_GROUP && self.kind == kinds::CRD_KIND
    }
}

/// How a group and kind is served.
#[derive(Clone, Debug)]
struct KindEntry {
    plural: String,
    namespaced: bool,
    /// Defined by a CRD: strategic merge patch is refused.
    custom: bool,
    /// Served versions.
    versions: BTreeMap<String, VersionEntry>,
}

/// How one version of a kind is served.
#[derive(Clone, Debug)]
struct VersionEntry {
    /// Has a status subresource.
    status: bool,
    /// The verbs allowed; `None` for all.
    verbs: Option<Vec<String>>,
    /// What objects are checked against.
    schema: Schema,
}

/// A served kind and version a request is about.
#[derive(Clone, Debug)]
struct Resolved {
    gvk: Gvk,
    gk: GroupKind,
    plural: String,
    namespaced: bool,
    status: bool,
    custom: bool,
    verbs: Option<Vec<String>>,
    schema: Schema,
}

impl Resolved {
    /// The resource as the API server names it in messages:
    /// `configmaps`, `deployments.apps`.
    fn resource(&self) -> String {
        if self.gvk.group.is_empty() { self.plural.clone() } else { format!("{}.{}", self.plural, self.gvk.group) }
    }

    fn not_found(&self, name: &str) -> Error {
        Error::NotFound(Status::new(404, "NotFound", format!("{} {name:?} not found", self.resource())))
    }

    fn already_exists(&self, name: &str) -> Error {
        Error::AlreadyExists(Status::new(409, "AlreadyExists", format!("{} {name:?} already exists", self.resource())))
    }

    /// Refuses a verb the resource does not support, as the API server
    /// does with 405.
    fn allow(&self, verb: &str) -> Result<()> {
        match &self.verbs {
            Some(verbs) if !verbs.iter().any(|v| v == verb) => Err(Error::Other(Status::new(
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource",
            ))),
            _ => Ok(()),
        }
    }

    /// The 422 for field errors, worded like the API server's:
    /// `Deployment.apps "web" is invalid: spec.selector: Required value`.
    fn invalid(&self, name: &str, errors: &[schema::FieldError]) -> Error {
        let qualified = if self.gvk.group.is_empty() {
            self.gvk.kind.clone()
        } else {
            format!("{}.{}", self.gvk.kind, self.gvk.group)
        };
        let list: Vec<String> = errors.iter().map(ToString::to_string).collect();
        let detail = if list.len() == 1 { list.join("") } else { format!("[{}]", list.join(", ")) };
        invalid(format!("{qualified} {name:?} is invalid: {detail}"))
    }

    /// What the API server does with an object's body before it stores
    /// it: drops undeclared fields (built-in kinds, when decoding) or
    /// prunes them (custom resources), applies CRD defaults, and checks the
    /// result against the schema.
    ///
    /// For built-in kinds a value of the wrong type is a 400, as a decoding
    /// error is on the API server; other problems are a 422.
    fn admit(&self, object: &mut Value, name: &str) -> Result<()> {
        let root = self.schema.root();
        schema::prune(object, root);
        if self.schema.is_custom() {
            schema::apply_defaults(object, root);
        }
        let errors = schema::validate(object, root);
        let type_error = errors.iter().find_map(|e| match &e.problem {
            schema::Problem::Type { expected, value } => Some((&e.path, expected, value)),
            _ => None,
        });
        if !self.schema.is_custom()
            && let Some((path, expected, value)) = type_error
        {
            return Err(bad_request(format!(
                "{kind} in version {version:?} cannot be handled as a {kind}: {path}: expected {expected}, got {got}",
                kind = self.gvk.kind,
                version = self.gvk.version,
                got = schema::json_type(value),
            )));
        }
        if errors.is_empty() { Ok(()) } else { Err(self.invalid(name, &errors)) }
    }

    /// Refuses an apply configuration with fields its schema does not
    /// declare, as server-side apply does whatever the field validation.
    /// The API server answers 500, as it does.
    fn check_declared(&self, key: &Key, config: &Map<String, Value>) -> Result<()> {
        let config = Value::Object(config.clone());
        match schema::undeclared(&config, self.schema.root()).first() {
            Some(path) => Err(Error::Other(Status::new(
                500,
                "InternalError",
                format!(
                    "failed to create typed patch object ({}/{}; {}/{}, Kind={}): .{path}: field not declared in schema",
                    key.0, key.1, self.gvk.group, self.gvk.version, self.gvk.kind
                ),
            ))),
            None => Ok(()),
        }
    }

    fn modified(&self, name: &str) -> Error {
        conflict(format!(
            "operation cannot be fulfilled on {} {name:?}: the object has been modified; please apply your changes to \
             the latest version and try again",
            self.resource()
        ))
    }

    /// Checks the namespace against the kind's scope.
    fn check_scope(&self, namespace: Option<&str>) -> Result<()> {
        match (self.namespaced, namespace.filter(|ns| !ns.is_empty())) {
            (true, None) => Err(bad_request(format!("a namespace is required for namespaced kind {}", self.gvk))),
            (false, Some(ns)) => {
                Err(bad_request(format!("cluster-scoped kind {} takes no namespace, got {ns:?}", self.gvk)))
            }
            _ => Ok(()),
        }
    }

    /// The storage key of an object of this kind.
    fn key(&self, namespace: Option<&str>, name: &str) -> Result<Key> {
        self.check_scope(namespace)?;
        if name.is_empty() {
            return Err(bad_request("a name is required"));
        }
        Ok((namespace.unwrap_or_default().to_owned(), name.to_owned()))
    }
}

/// Namespace (empty for cluster-scoped objects) and name.
type Key = (String, String);

/// A field manager, per subresource, as the API server keeps them apart.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct ManagerKey {
    name: String,
    status: bool,
}

/// One stored object.
#[derive(Clone, Debug)]
struct Stored {
    /// The object as last written, with the `apiVersion` of that write.
    object: Value,
    /// Fields owned through server-side apply.
    managers: BTreeMap<ManagerKey, apply::FieldSet>,
    /// How a pending deletion treats dependents once the object goes.
    propagation: Propagation,
}

/// Metadata that only the server sets, kept from the stored object on update.
const SERVER_SET: &[&str] =
    &["uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation", "resourceVersion"];

/// Everything the mock cluster holds.
#[derive(Debug)]
struct State {
    kinds: BTreeMap<GroupKind, KindEntry>,
    objects: BTreeMap<GroupKind, BTreeMap<Key, Stored>>,
    resource_version: u64,
    uids: u64,
    generated_names: u64,
    now: SystemTime,
    events: Vec<EventRecord>,
    changes: Vec<Change>,
}

impl State {
    fn new() -> Self {
        let mut state = Self {
            kinds: BTreeMap::new(),
            objects: BTreeMap::new(),
            resource_version: 0,
            uids: 0,
            generated_names: 0,
            now: UNIX_EPOCH + Duration::from_secs(DEFAULT_NOW_SECS),
            events: Vec::new(),
            changes: Vec::new(),
        };
        for served in kinds::built_in() {
            state.register(served, false);
        }
        state
    }

    fn register(&mut self, served: kinds::Served, custom: bool) {
        let info = served.info;
        let entry = self.kinds.entry(GroupKind::of(&info.gvk)).or_insert_with(|| KindEntry {
            plural: String::new(),
            namespaced: info.namespaced,
            custom,
            versions: BTreeMap::new(),
        });
        entry.plural = info.plural;
        entry.namespaced = info.namespaced;
        entry.custom = custom;
        let schema = served.schema.unwrap_or_else(Schema::permissive);
        let version = VersionEntry { status: info.status_subresource, verbs: served.verbs, schema };
        entry.versions.insert(info.gvk.version, version);
    }

    fn resolve(&self, gvk: &Gvk) -> Result<Resolved> {
        let gk = GroupKind::of(gvk);
        let entry = self.kinds.get(&gk).ok_or_else(unknown_resource)?;
        let version = entry.versions.get(&gvk.version).ok_or_else(unknown_resource)?;
        Ok(Resolved {
            gvk: gvk.clone(),
            gk,
            plural: entry.plural.clone(),
            namespaced: entry.namespaced,
            status: version.status,
            custom: entry.custom,
            verbs: version.verbs.clone(),
            schema: version.schema.clone(),
        })
    }

    fn stored(&self, gk: &GroupKind, key: &Key) -> Option<&Stored> {
        self.objects.get(gk)?.get(key)
    }

    fn stored_mut(&mut self, gk: &GroupKind, key: &Key) -> Option<&mut Stored> {
        self.objects.get_mut(gk)?.get_mut(key)
    }

    fn uid_exists(&self, uid: &str) -> bool {
        self.objects.values().flat_map(BTreeMap::values).any(|s| object::meta_str(&s.object, "uid") == Some(uid))
    }

    fn get(&self, target: &ObjectRef) -> Result<Value> {
        let kind = self.resolve(&target.gvk)?;
        kind.allow("get")?;
        let key = kind.key(target.namespace.as_deref(), &target.name)?;
        self.stored(&kind.gk, &key)
            .map(|stored| with_version(&stored.object, &kind.gvk))
            .ok_or_else(|| kind.not_found(&target.name))
    }

    fn list(&self, gvk: &Gvk, namespace: Option<&str>, params: &ListParams) -> Result<Vec<Value>> {
        let kind = self.resolve(gvk)?;
        kind.allow("list")?;
        let namespace = namespace.filter(|ns| !ns.is_empty());
        if namespace.is_some() {
            kind.check_scope(namespace)?;
        }
        let labels = selector::LabelSelector::parse(params.label_selector.as_deref().unwrap_or_default())
            .map_err(|e| bad_request(format!("invalid label selector: {e}")))?;
        let fields = selector::FieldSelector::parse(params.field_selector.as_deref().unwrap_or_default())
            .map_err(|e| bad_request(format!("invalid field selector: {e}")))?;
        let Some(objects) = self.objects.get(&kind.gk) else { return Ok(Vec::new()) };
        Ok(objects
            .iter()
            .filter(|((ns, _), _)| namespace.is_none_or(|wanted| wanted == ns))
            .map(|(_, stored)| with_version(&stored.object, &kind.gvk))
            .filter(|o| labels.matches(o.get("metadata").and_then(|m| m.get("labels"))) && fields.matches(o))
            .collect())
    }

    /// Creates an object; `keep_status` keeps `status` even for kinds with
    /// a status subresource (for seeding).
    fn create(&mut self, mut object: Value, keep_status: bool) -> Result<Value> {
        let gvk = Gvk::of(&object).ok_or_else(|| bad_request("object has no apiVersion and kind"))?;
        let kind = self.resolve(&gvk)?;
        kind.allow("create")?;
        let meta = metadata_mut(&mut object)?;
        if meta.get("resourceVersion").and_then(Value::as_str).is_some_and(|rv| !rv.is_empty()) {
            return Err(bad_request("resourceVersion should not be set on objects to be created"));
        }
        let namespace = meta.get("namespace").and_then(Value::as_str).filter(|ns| !ns.is_empty()).map(str::to_owned);
        kind.check_scope(namespace.as_deref())?;
        if let Some(ns) = &namespace {
            meta::validate_namespace(ns).map_err(invalid)?;
        }
        meta::validate_metadata(meta).map_err(invalid)?;
        let namespace = namespace.unwrap_or_default();
        let name = match meta.get("name").and_then(Value::as_str).filter(|n| !n.is_empty()) {
            Some(name) => name.to_owned(),
            None => {
                let prefix = meta
                    .get("generateName")
                    .and_then(Value::as_str)
                    .filter(|p| !p.is_empty())
                    .ok_or_else(|| invalid("metadata.name: required value: name or generateName is required"))?;
                self.generate_name(&kind.gk, &namespace, prefix)
            }
        };
        meta::validate_name(&name, kind.gk.group == kinds::RBAC_GROUP).map_err(invalid)?;
        let key = (namespace, name.clone());
        if self.stored(&kind.gk, &key).is_some() {
            return Err(kind.already_exists(&name));
        }
        if kind.gk.is_crd() {
            kinds::from_crd(&object).map_err(invalid)?;
        }
        self.uids += 1;
        let meta = metadata_mut(&mut object)?;
        for field in SERVER_SET.iter().chain(&["managedFields", "selfLink"]) {
            meta.remove(*field);
        }
        meta.insert("name".to_owned(), name.clone().into());
        meta.insert("uid".to_owned(), meta::uid(self.uids).into());
        meta.insert("creationTimestamp".to_owned(), meta::rfc3339(self.now).into());
        meta.insert("generation".to_owned(), 1.into());
        if kind.status && !keep_status {
            set_field(&mut object, "status", None);
        }
        kind.admit(&mut object, &name)?;
        Ok(self.write(&kind.gk, &key, object))
    }

    /// A free name for `generateName: prefix`.
    fn generate_name(&mut self, gk: &GroupKind, namespace: &str, prefix: &str) -> String {
        loop {
            self.generated_names += 1;
            let name = meta::generated_name(prefix, self.generated_names);
            if self.stored(gk, &(namespace.to_owned(), name.clone())).is_none() {
                return name;
            }
        }
    }

    /// Replaces an object or its status, after the preconditions and rules
    /// of an update; a no-op if nothing changes.
    fn update(&mut self, kind: &Resolved, input: Value, subresource: Subresource) -> Result<Value> {
        if subresource == Subresource::Status && !kind.status {
            return Err(unknown_resource());
        }
        let name = object::meta_str(&input, "name").ok_or_else(|| bad_request("object has no metadata.name"))?;
        let name = name.to_owned();
        let key = kind.key(object::meta_str(&input, "namespace"), &name)?;
        let old = self.stored(&kind.gk, &key).map(|s| s.object.clone()).ok_or_else(|| kind.not_found(&name))?;
        check_preconditions(kind, &name, &old, &input)?;
        let mut new = match subresource {
            Subresource::Status => {
                let mut new = old.clone();
                set_field(&mut new, "status", input.get("status").cloned());
                new
            }
            Subresource::Main => {
                let mut new = input;
                let old_meta = old.get("metadata").and_then(Value::as_object);
                let meta = metadata_mut(&mut new)?;
                meta.remove("managedFields");
                meta.remove("selfLink");
                for &field in SERVER_SET {
                    match old_meta.and_then(|m| m.get(field)) {
                        Some(value) => meta.insert(field.to_owned(), value.clone()),
                        None => meta.remove(field),
                    };
                }
                if kind.status {
                    set_field(&mut new, "status", old.get("status").cloned());
                }
                new
            }
        };
        set_identity(&mut new, &kind.gvk);
        kind.admit(&mut new, &name)?;
        meta::validate_metadata(metadata_mut(&mut new)?).map_err(invalid)?;
        if object::is_deleting(&old) {
            let before = object::finalizers(&old);
            let added: Vec<String> = object::finalizers(&new).into_iter().filter(|f| !before.contains(f)).collect();
            if !added.is_empty() {
                return Err(invalid(format!(
                    "metadata.finalizers: forbidden: no new finalizers can be added if the object is being deleted, \
                     found new finalizers {added:?}"
                )));
            }
        }
        if content(&old) == content(&new) {
            return Ok(with_version(&old, &kind.gvk));
        }
        if spec(&old, kind.status) != spec(&new, kind.status) {
            let generation = object::generation(&old).unwrap_or(0) + 1;
            metadata_mut(&mut new)?.insert("generation".to_owned(), generation.into());
        }
        if kind.gk.is_crd() {
            kinds::from_crd(&new).map_err(invalid)?;
        }
        Ok(self.write(&kind.gk, &key, new))
    }

    /// Stores an object with a new resourceVersion and journals it, or
    /// removes it if it is being deleted and has no finalizers left.
    fn write(&mut self, gk: &GroupKind, key: &Key, mut object: Value) -> Value {
        self.resource_version += 1;
        if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("resourceVersion".to_owned(), self.resource_version.to_string().into());
        }
        if object::is_deleting(&object) && object::finalizers(&object).is_empty() {
            let removed = self.objects.get_mut(gk).and_then(|objects| objects.remove(key));
            self.record(&object, ChangeKind::Deleted);
            self.collect_garbage(&object, removed.map(|s| s.propagation).unwrap_or_default());
            return object;
        }
        let objects = self.objects.entry(gk.clone()).or_default();
        match objects.get_mut(key) {
            Some(stored) => stored.object = object.clone(),
            None => {
                let stored =
                    Stored { object: object.clone(), managers: BTreeMap::new(), propagation: Propagation::Default };
                objects.insert(key.clone(), stored);
            }
        }
        self.record(&object, ChangeKind::Applied);
        if gk.is_crd() {
            for served in kinds::from_crd(&object).into_iter().flatten() {
                self.register(served, true);
            }
        }
        object
    }

    fn record(&mut self, object: &Value, kind: ChangeKind) {
        let Some(object_ref) = ObjectRef::of(object) else { return };
        let seq = self.changes.last().map_or(1, |last| last.seq + 1);
        self.changes.push(Change { seq, object_ref, object: object.clone(), kind });
    }

    /// Deletes an object by key: removed at once without finalizers, else
    /// marked. False if it does not exist.
    fn delete_key(&mut self, gk: &GroupKind, key: &Key, propagation: Propagation) -> bool {
        let now = meta::rfc3339(self.now);
        let Some(stored) = self.stored_mut(gk, key) else { return false };
        if object::finalizers(&stored.object).is_empty() {
            if let Some(stored) = self.objects.get_mut(gk).and_then(|objects| objects.remove(key)) {
                self.record(&stored.object, ChangeKind::Deleted);
                self.collect_garbage(&stored.object, propagation);
            }
            return true;
        }
        if object::is_deleting(&stored.object) {
            return true;
        }
        stored.propagation = propagation;
        let mut object = stored.object.clone();
        let generation = object::generation(&object).unwrap_or(0) + 1;
        if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("deletionTimestamp".to_owned(), now.into());
            meta.insert("deletionGracePeriodSeconds".to_owned(), 0.into());
            meta.insert("generation".to_owned(), generation.into());
        }
        self.write(gk, key, object);
        true
    }

    /// Deletes or orphans the dependents of a removed object.
    fn collect_garbage(&mut self, owner: &Value, propagation: Propagation) {
        let Some(uid) = object::meta_str(owner, "uid") else { return };
        let dependents: Vec<(GroupKind, Key)> = self
            .objects
            .iter()
            .flat_map(|(gk, objects)| {
                objects
                    .iter()
                    .filter(|(_, stored)| object::owner_uids(&stored.object).any(|owner| owner == uid))
                    .map(move |(key, _)| (gk.clone(), key.clone()))
            })
            .collect();
        for (gk, key) in dependents {
            let Some(stored) = self.stored(&gk, &key) else { continue };
            let mut dependent = stored.object.clone();
            let other_owner_alive = object::owner_uids(&dependent).filter(|&u| u != uid).any(|u| self.uid_exists(u));
            if propagation == Propagation::Orphan || other_owner_alive {
                drop_owner_reference(&mut dependent, uid);
                self.write(&gk, &key, dependent);
            } else {
                self.delete_key(&gk, &key, Propagation::Background);
            }
        }
    }

    fn patch(&mut self, target: &ObjectRef, patch: Patch, subresource: Subresource) -> Result<Value> {
        let kind = self.resolve(&target.gvk)?;
        kind.allow("patch")?;
        let namespace = target.namespace.as_deref().filter(|ns| !ns.is_empty());
        let key = kind.key(namespace, &target.name)?;
        if subresource == Subresource::Status && !kind.status {
            return Err(unknown_resource());
        }
        if let Patch::Apply { object, field_manager, force } = patch {
            return self.apply(&kind, key, object, &field_manager, force, subresource);
        }
        let mut doc = self
            .stored(&kind.gk, &key)
            .map(|stored| with_version(&stored.object, &kind.gvk))
            .ok_or_else(|| kind.not_found(&target.name))?;
        match patch {
            Patch::Merge(patch) => {
                if !patch.is_object() {
                    return Err(bad_request("a merge patch must be a json object"));
                }
                json_patch::merge(&mut doc, &patch);
            }
            Patch::Json(patch) => {
                let operations: json_patch::Patch =
                    serde_json::from_value(patch).map_err(|e| bad_request(format!("invalid json patch: {e}")))?;
                json_patch::patch(&mut doc, &operations)
                    .map_err(|e| invalid(format!("the json patch could not be applied: {e}")))?;
            }
            Patch::Strategic(patch) => {
                if kind.custom {
                    return Err(Error::Other(Status::new(
                        415,
                        "UnsupportedMediaType",
                        "the body of the request was in an unknown format - accepted media types include: \
                         application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
                    )));
                }
                if !patch.is_object() {
                    return Err(bad_request("a strategic merge patch must be a json object"));
                }
                strategic::merge(&mut doc, &patch);
            }
            Patch::Apply { .. } => {}
        }
        if Gvk::of(&doc).as_ref() != Some(&kind.gvk) {
            return Err(bad_request("a patch cannot change apiVersion or kind"));
        }
        if object::meta_str(&doc, "name") != Some(target.name.as_str())
            || object::meta_str(&doc, "namespace") != namespace
        {
            return Err(bad_request("a patch cannot change metadata.name or metadata.namespace"));
        }
        self.update(&kind, doc, subresource)
    }

    /// Server-side apply of `config` by `manager`.
    fn apply(
        &mut self,
        kind: &Resolved,
        key: Key,
        config: Value,
        manager: &str,
        force: bool,
        subresource: Subresource,
    ) -> Result<Value> {
        if manager.is_empty() {
            return Err(invalid("fieldManager: required value: is required for apply patch"));
        }
        let Value::Object(config) = config else {
            return Err(bad_request("an apply configuration must be a json object"));
        };
        check_apply_identity(kind, &key, &config)?;
        kind.check_declared(&key, &config)?;
        let applied = apply::applied_part(&config, kind.status, subresource);
        let root = kind.schema.root();
        if let Some(path) = apply::duplicate(&applied, root) {
            return Err(invalid(format!("{path}: duplicate entries in an applied configuration")));
        }
        let fields = apply::field_set(&applied, root);
        let me = ManagerKey { name: manager.to_owned(), status: subresource == Subresource::Status };
        let Some(stored) = self.stored(&kind.gk, &key) else {
            if subresource == Subresource::Status {
                return Err(kind.not_found(&key.1));
            }
            let mut object =
                json!({"apiVersion": kind.gvk.api_version(), "kind": kind.gvk.kind, "metadata": {"name": key.1}});
            if !key.0.is_empty() {
                object["metadata"]["namespace"] = key.0.clone().into();
            }
            apply::merge(&mut object, &applied, root);
            let created = self.create(object, false)?;
            if let Some(stored) = self.stored_mut(&kind.gk, &key).filter(|_| !fields.is_empty()) {
                stored.managers.insert(me, fields);
            }
            return Ok(created);
        };
        let current = stored.object.clone();
        let mut managers = stored.managers.clone();
        check_preconditions(kind, &key.1, &current, &Value::Object(config))?;

        let mut merged = current.clone();
        apply::merge(&mut merged, &applied, root);
        let mut conflicts = Vec::new();
        let changed =
            |p: &&apply::Path| !apply::is_membership(p) && apply::value_at(&current, p) != apply::value_at(&merged, p);
        for path in fields.iter().filter(changed) {
            for (other, owned) in managers.iter().filter(|(m, _)| m.name != manager) {
                for theirs in owned.iter().filter(|q| apply::shares(q, path)) {
                    conflicts.push((other.clone(), theirs.clone()));
                }
            }
        }
        if !conflicts.is_empty() {
            if !force {
                return Err(conflict(conflict_message(&conflicts)));
            }
            for (other, path) in &conflicts {
                if let Some(owned) = managers.get_mut(other) {
                    owned.remove(path);
                }
            }
        }

        let mut new = current.clone();
        let previous = managers.get(&me).cloned().unwrap_or_default();
        for path in previous.difference(&fields) {
            let still_applied = fields.iter().any(|f| apply::shares(f, path));
            let others = || managers.iter().filter(|(m, _)| **m != me).flat_map(|(_, owned)| owned.iter());
            let owned_by_other = if apply::is_membership(path) {
                others().any(|q| apply::within(q, path))
            } else {
                others().any(|q| apply::shares(q, path))
            };
            let holds_more = !apply::is_membership(path)
                && apply::value_at(&current, path).and_then(Value::as_object).is_some_and(|m| !m.is_empty());
            if !still_applied && !owned_by_other && !holds_more {
                apply::remove_at(&mut new, path);
            }
        }
        apply::merge(&mut new, &applied, root);
        managers.insert(me, fields);
        managers.retain(|_, owned| !owned.is_empty());

        let result = self.update(kind, new, subresource)?;
        if let Some(stored) = self.stored_mut(&kind.gk, &key) {
            stored.managers = managers;
        }
        Ok(result)
    }
}

/// Checks that an apply configuration names the object the request is for.
fn check_apply_identity(kind: &Resolved, key: &Key, config: &Map<String, Value>) -> Result<()> {
    let text = |value: Option<&Value>| value.map(|v| v.as_str().unwrap_or_default().to_owned());
    if text(config.get("apiVersion")).is_some_and(|v| v != kind.gvk.api_version())
        || text(config.get("kind")).is_some_and(|k| k != kind.gvk.kind)
    {
        return Err(bad_request("the apiVersion and kind of the apply configuration do not match the request"));
    }
    let meta = match config.get("metadata") {
        None => return Ok(()),
        Some(Value::Object(meta)) => meta,
        Some(_) => return Err(bad_request("metadata of the apply configuration must be a json object")),
    };
    if text(meta.get("name")).is_some_and(|n| n != key.1)
        || text(meta.get("namespace")).is_some_and(|ns| !ns.is_empty() && ns != key.0)
    {
        return Err(bad_request("the name and namespace of the apply configuration do not match the request"));
    }
    Ok(())
}

/// The resourceVersion and uid preconditions of an update.
fn check_preconditions(kind: &Resolved, name: &str, stored: &Value, request: &Value) -> Result<()> {
    if let Some(rv) = object::meta_str(request, "resourceVersion")
        && object::meta_str(stored, "resourceVersion") != Some(rv)
    {
        return Err(kind.modified(name));
    }
    if let Some(uid) = object::meta_str(request, "uid") {
        let actual = object::meta_str(stored, "uid").unwrap_or_default();
        if actual != uid {
            return Err(conflict(format!(
                "precondition failed: uid in precondition: {uid}, uid in object meta: {actual}"
            )));
        }
    }
    Ok(())
}

/// The message of an apply conflict, like the API server's.
fn conflict_message(conflicts: &[(ManagerKey, apply::Path)]) -> String {
    let n = conflicts.len();
    let list: Vec<String> =
        conflicts.iter().map(|(m, path)| format!("conflict with {:?}: {}", m.name, apply::display(path))).collect();
    format!("apply failed with {n} conflict{}: {}", if n == 1 { "" } else { "s" }, list.join("; "))
}

/// Removes the owner reference to `uid`, and the list if it empties.
fn drop_owner_reference(object: &mut Value, uid: &str) {
    let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) else { return };
    if let Some(Value::Array(owners)) = meta.get_mut("ownerReferences") {
        owners.retain(|o| o.get("uid").and_then(Value::as_str) != Some(uid));
        if owners.is_empty() {
            meta.remove("ownerReferences");
        }
    }
}

/// A copy of an object with the `apiVersion` and `kind` of `gvk`.
fn with_version(object: &Value, gvk: &Gvk) -> Value {
    let mut object = object.clone();
    set_identity(&mut object, gvk);
    object
}

fn set_identity(object: &mut Value, gvk: &Gvk) {
    if let Some(map) = object.as_object_mut() {
        map.insert("apiVersion".to_owned(), gvk.api_version().into());
        map.insert("kind".to_owned(), gvk.kind.clone().into());
    }
}

/// Sets a top-level field, or removes it for `None`.
fn set_field(object: &mut Value, field: &str, value: Option<Value>) {
    if let Some(map) = object.as_object_mut() {
        match value {
            Some(value) => map.insert(field.to_owned(), value),
            None => map.remove(field),
        };
    }
}

/// The `metadata` map of an object, created if missing.
fn metadata_mut(object: &mut Value) -> Result<&mut Map<String, Value>> {
    let map = object.as_object_mut().ok_or_else(|| bad_request("an object must be a json object"))?;
    map.entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
        .ok_or_else(|| bad_request("metadata must be a json object"))
}

/// An object without `apiVersion`, to compare writes across versions.
fn content(object: &Value) -> Value {
    let mut object = object.clone();
    set_field(&mut object, "apiVersion", None);
    object
}

/// What `generation` tracks: everything but identity, metadata and (with a
/// status subresource) status.
fn spec(object: &Value, status_subresource: bool) -> Value {
    let mut object = content(object);
    set_field(&mut object, "kind", None);
    set_field(&mut object, "metadata", None);
    if status_subresource {
        set_field(&mut object, "status", None);
    }
    object
}

fn unknown_resource() -> Error {
    Error::NotFound(Status::new(404, "NotFound", "the server could not find the requested resource"))
}

fn bad_request(message: impl Into<String>) -> Error {
    Error::BadRequest(message.into())
}

fn invalid(message: impl Into<String>) -> Error {
    Error::Invalid(Status::new(422, "Invalid", message))
}

fn conflict(message: impl Into<String>) -> Error {
    Error::Conflict(Status::new(409, "Conflict", message))
}
