//! Unit tests of a controller under `cargo test`, natively: no component,
//! no host, no cluster.
//!
//! A [`FakeHost`] stands in for the host's imports: a small in-memory API
//! server holding the objects a test gives it, recording every call,
//! Event and log line. [`reconcile`] (and [`FakeHost::reconcile`]) calls a
//! controller's callback the way the host does and returns what it asked
//! for as plain JSON ([`Reconciled`]):
//!
//! ```
//! # use capstan_guest::prelude::*;
//! # use capstan_guest::EventKind;
//! # use capstan_guest::k8s_openapi::api::core::v1::ConfigMap;
//! # #[derive(Default)]
//! # struct Mirror;
//! # impl Controller for Mirror {
//! #     type Resource = ConfigMap;
//! #     fn manifest(&self) -> Manifest { Manifest::new("mirror").primary::<ConfigMap>() }
//! #     fn reconcile(&self, ctx: &Context, cm: ConfigMap) -> capstan_guest::Result<Outcome> {
//! #         let settings = ctx.api::<ConfigMap>(ctx.namespace()).get("settings")?;
//! #         Ok(Outcome::new().status(&settings.data))
//! #     }
//! # }
//! use capstan_guest::testing::FakeHost;
//!
//! let cm: ConfigMap = serde_json::from_value(serde_json::json!({
//!     "apiVersion": "v1", "kind": "ConfigMap",
//!     "metadata": {"name": "web", "namespace": "demo"}})).unwrap();
//! let settings: ConfigMap = serde_json::from_value(serde_json::json!({
//!     "apiVersion": "v1", "kind": "ConfigMap",
//!     "metadata": {"name": "settings", "namespace": "demo"}, "data": {"tone": "warm"}})).unwrap();
//! let mut host = FakeHost::new().with(&cm).with(&settings);
//! let done = host.reconcile::<Mirror>(EventKind::Added, &cm).expect("reconciled");
//! assert_eq!(done.status, Some(serde_json::json!({"tone": "warm"})));
//! assert_eq!(host.calls(), ["get v1/ConfigMap demo/settings"]);
//! ```
//!
//! The fake answers `get`, `list` (label selectors `k=v`, `k!=v`, `k`),
//! `create`, `replace`, `delete`, merge (and strategic, as merge) `patch`
//! and `apply` (the applied fields merged into what is stored) and their
//! status variants. JSON patches are refused (`BadRequest`). The host's
//! grant checks, server-side apply field ownership and admission are not
//! faked: scenarios (`capstan test`) and `capstan e2e` cover those. An API
//! call made outside a [`FakeHost::reconcile`] panics, naming this module.
//! Compiled for native targets only: in a component the host answers.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::Duration;

use kube::Resource;
use serde::Serialize;
use serde_json::{Value, json};

use crate::context::{Context, EventKind};
use crate::http::{HttpError, Request, Response, Url};
use crate::wit::capstan::operator::kube::{Error as WitError, PatchType, Status};
use crate::wit::capstan::operator::log::{Field, Level};
use crate::wit::capstan::operator::types::{self as wit, GroupVersionKind, Json, ObjectRef};
use crate::{Controller, Result};

/// `(apiVersion, kind, namespace, name)` of a stored object.
type Key = (String, String, Option<String>, String);

thread_local! {
    static HOST: RefCell<Option<FakeHost>> = const { RefCell::new(None) };
}

/// Runs `f` on the fake host installed on this thread.
///
/// # Panics
///
/// When no [`FakeHost::reconcile`] runs on this thread: a native build has
/// no host to call.
pub(crate) fn with_host<T>(f: impl FnOnce(&mut FakeHost) -> T) -> T {
    HOST.with(|h| match h.borrow_mut().as_mut() {
        Some(host) => f(host),
        None => panic!(
            "capstan_guest: an API call in a native build outside capstan_guest::testing::FakeHost::reconcile \
             (a component calls the host; a unit test calls the controller through capstan_guest::testing)"
        ),
    })
}

/// Records a log line on the fake host, if one is installed; otherwise
/// prints it to stderr.
pub(crate) fn log(level: Level, message: &str, fields: &[Field]) {
    let line = LogLine {
        level: format!("{level:?}").to_lowercase(),
        message: message.to_owned(),
        fields: fields.iter().map(|f| (f.key.clone(), f.value.clone())).collect(),
    };
    HOST.with(|h| match h.borrow_mut().as_mut() {
        Some(host) => host.logs.push(line),
        None => eprintln!("{} {} {:?}", line.level, line.message, line.fields),
    });
}

/// Opens a span on the fake host, if one is installed (else none: `0`).
pub(crate) fn start_span(name: &str, attributes: &[Field]) -> u64 {
    HOST.with(|h| match h.borrow_mut().as_mut() {
        Some(host) => {
            let parent = host.open_spans.last().map(|i| host.spans[*i].name.clone());
            host.open_spans.push(host.spans.len());
            host.spans.push(SpanRecord {
                name: name.to_owned(),
                parent,
                attributes: attributes.iter().map(|f| (f.key.clone(), f.value.clone())).collect(),
                error: None,
                ended: false,
            });
            host.spans.len() as u64
        }
        None => 0,
    })
}

/// Ends a span on the fake host, and those opened inside it, as the host does.
pub(crate) fn end_span(id: u64, error: Option<&str>) {
    HOST.with(|h| {
        if let Some(host) = h.borrow_mut().as_mut() {
            let index = (id as usize).wrapping_sub(1);
            let Some(at) = host.open_spans.iter().position(|i| *i == index) else { return };
            host.spans[index].error = error.map(str::to_owned);
            for i in host.open_spans.drain(at..) {
                host.spans[i].ended = true;
            }
        }
    });
}

/// One span a controller opened ([`Log::span`](crate::Log::span)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpanRecord {
    /// Its name, as given.
    pub name: String,
    /// The name of the span it was opened in, if any.
    pub parent: Option<String>,
    /// Its attributes, in order.
    pub attributes: Vec<(String, String)>,
    /// The error it was marked failed with, if any.
    pub error: Option<String>,
    /// Whether it ended before the callback returned.
    pub ended: bool,
}

/// One log line a controller emitted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogLine {
    /// `trace`, `debug`, `info`, `warn` or `error`.
    pub level: String,
    /// The message.
    pub message: String,
    /// Its fields, in order.
    pub fields: Vec<(String, String)>,
}

/// What a reconcile asked the host to do, as plain JSON.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Reconciled {
    /// The children, as the guest listed them (before the host adds its
    /// ownerReference and namespace).
    pub children: Vec<Value>,
    /// The status to write, if any.
    pub status: Option<Value>,
    /// The Events of the outcome: `type`, `reason`, `action`, `note` and,
    /// when not the object itself, `regarding`.
    pub events: Vec<Value>,
    /// When to reconcile again.
    pub requeue_after: Option<Duration>,
    /// Whether children not listed are kept (`keep_children`) rather than
    /// pruned.
    pub keeps_children: bool,
    /// The children in member clusters (a fleet controller's
    /// [`Outcome::child_in`](crate::Outcome::child_in)), each with its
    /// cluster's name, as the guest listed them.
    pub member_children: Vec<(String, Value)>,
}

impl Reconciled {
    fn of(outcome: wit::Outcome) -> Self {
        Self {
            children: outcome.children.iter().map(|c| decode(c).unwrap_or(Value::Null)).collect(),
            status: outcome.status.as_deref().map(|s| decode(s).unwrap_or(Value::Null)),
            events: outcome.events.iter().map(event_json).collect(),
            requeue_after: outcome.requeue_after_ms.map(Duration::from_millis),
            keeps_children: outcome.children_policy == wit::ChildrenPolicy::Keep,
            member_children: outcome
                .member_children
                .iter()
                .map(|c| (c.cluster.clone(), decode(&c.object).unwrap_or(Value::Null)))
                .collect(),
        }
    }

    /// The child of `kind` named `name`, if the outcome lists it.
    pub fn child(&self, kind: &str, name: &str) -> Option<&Value> {
        self.children.iter().find(|c| c["kind"] == kind && c["metadata"]["name"] == name)
    }

    /// The child of `kind` named `name` in the member cluster `cluster`,
    /// if the outcome lists it.
    pub fn child_in(&self, cluster: &str, kind: &str, name: &str) -> Option<&Value> {
        self.member_children
            .iter()
            .find(|(c, o)| c == cluster && o["kind"] == kind && o["metadata"]["name"] == name)
            .map(|(_, o)| o)
    }
}

fn event_json(e: &wit::Event) -> Value {
    let mut event = json!({
        "type": if e.event_type == wit::EventType::Warning { "Warning" } else { "Normal" },
        "reason": e.reason,
        "action": e.action,
        "note": e.note,
    });
    if let Some(r) = &e.regarding {
        event["regarding"] = json!({
            "apiVersion": api_version(&r.kind),
            "kind": r.kind.kind,
            "namespace": r.namespace,
            "name": r.name,
        });
    }
    event
}

/// An in-memory stand-in for the host's imports; see the [module](self).
#[derive(Debug, Default)]
pub struct FakeHost {
    objects: BTreeMap<Key, Value>,
    calls: Vec<String>,
    events: Vec<Value>,
    logs: Vec<LogLine>,
    spans: Vec<SpanRecord>,
    /// Indexes in `spans` of the spans open, innermost last.
    open_spans: Vec<usize>,
    resource_version: u64,
    egress: Vec<String>,
    stubs: Vec<(String, String, std::result::Result<Response, HttpError>)>,
    requests: Vec<Request>,
    /// The cluster's name, as [`Context::cluster`] gives it; `None`:
    /// [`DEFAULT_CLUSTER`](crate::DEFAULT_CLUSTER).
    cluster: Option<String>,
    /// The member clusters of a fleet controller, as
    /// [`Context::members`] gives them, and the objects in each.
    members: BTreeMap<String, BTreeMap<Key, Value>>,
}

impl FakeHost {
    /// An empty fake.
    pub fn new() -> Self {
        Self::default()
    }

    /// The fake with `object` stored (as given: give it a
    /// `resourceVersion` if the controller checks one).
    ///
    /// # Panics
    ///
    /// When the object does not serialize to JSON with an `apiVersion`,
    /// `kind` and `metadata.name`.
    #[must_use]
    pub fn with<K: Serialize>(mut self, object: &K) -> Self {
        self.put(object);
        self
    }

    /// The fake as the host of the cluster named `name`: what
    /// [`Context::cluster`] gives (default `default`).
    #[must_use]
    pub fn in_cluster(mut self, name: &str) -> Self {
        self.cluster = Some(name.to_owned());
        self
    }

    /// The fake as the host of a fleet controller with a member cluster
    /// named `cluster` ([`Context::members`], in the order added), holding
    /// `objects` there for [`Context::api_in`] to read.
    ///
    /// # Panics
    ///
    /// When an object does not serialize to JSON with an `apiVersion`,
    /// `kind` and `metadata.name`.
    #[must_use]
    pub fn member<K: Serialize>(mut self, cluster: &str, objects: &[K]) -> Self {
        let there = self.members.entry(cluster.to_owned()).or_default();
        for object in objects {
            let value = serde_json::to_value(object).expect("the object serializes to JSON");
            let key = key_of(&value).expect("the object has apiVersion, kind and metadata.name");
            there.insert(key, value);
        }
        self
    }

    /// Stores `object`, replacing one of the same identity.
    ///
    /// # Panics
    ///
    /// As [`with`](Self::with).
    pub fn put<K: Serialize>(&mut self, object: &K) {
        let value = serde_json::to_value(object).expect("the object serializes to JSON");
        let key = key_of(&value).expect("the object has apiVersion, kind and metadata.name");
        self.objects.insert(key, value);
    }

    /// The stored object, if any.
    pub fn get_json(&self, api_version: &str, kind: &str, namespace: Option<&str>, name: &str) -> Option<&Value> {
        self.objects.get(&(api_version.to_owned(), kind.to_owned(), namespace.map(str::to_owned), name.to_owned()))
    }

    /// Every API call so far, e.g. `get v1/ConfigMap demo/settings`,
    /// `list v1/Pod demo`, `patch-status apps/v1/Deployment demo/web`.
    pub fn calls(&self) -> &[String] {
        &self.calls
    }

    /// Every Event recorded right away through
    /// [`Context::record`](crate::Context::record), as
    /// [`Reconciled::events`] shows the outcome's.
    pub fn events(&self) -> &[Value] {
        &self.events
    }

    /// Every log line so far.
    pub fn logs(&self) -> &[LogLine] {
        &self.logs
    }

    /// Every span opened so far, in the order opened.
    pub fn spans(&self) -> &[SpanRecord] {
        &self.spans
    }

    /// Declares the origins requests may go to, as the manifest's
    /// [`egress`](crate::Manifest) does on the host: a request to any
    /// other fails with [`HttpError::Denied`], as there.
    #[must_use]
    pub fn egress<S: AsRef<str>>(mut self, origins: &[S]) -> Self {
        self.egress = origins.iter().map(|o| o.as_ref().to_owned()).collect();
        self
    }

    /// Answers requests of `method` to `url` (exactly, query included)
    /// with `answer`: a response, or a failure such as
    /// `HttpError::Transport("connection refused".into())`. A later stub
    /// of the same request replaces it. A declared request with no stub
    /// fails with a transport error naming it.
    pub fn stub_http(&mut self, method: &str, url: &str, answer: std::result::Result<Response, HttpError>) {
        let method = method.to_ascii_uppercase();
        self.stubs.retain(|(m, u, _)| !(*m == method && u == url));
        self.stubs.push((method, url.to_owned(), answer));
    }

    /// Every outbound request made so far, refused ones included.
    pub fn http_requests(&self) -> &[Request] {
        &self.requests
    }

    pub(crate) fn http(&mut self, request: &Request, url: &Url<'_>) -> std::result::Result<Response, HttpError> {
        self.requests.push(request.clone());
        let (host, port) = split_authority(url.authority, url.https);
        let scheme = if url.https { "https" } else { "http" };
        if !self.egress.iter().any(|o| origin_allows(o, scheme, host, port)) {
            return Err(HttpError::Denied(format!("{scheme}://{host}:{port} is not a declared origin")));
        }
        let method = request.method.to_ascii_uppercase();
        self.stubs
            .iter()
            .rev()
            .find(|(m, u, _)| *m == method && *u == request.url)
            .map(|(_, _, answer)| answer.clone())
            .unwrap_or_else(|| Err(HttpError::Transport(format!("FakeHost: no stub for {method} {}", request.url))))
    }

    /// Calls `C`'s callback for `event` (`add` for
    /// [`Added`](EventKind::Added), `modify`, `delete`, `reconcile` for
    /// [`Resync`](EventKind::Resync)) on a copy of `object`, as the host
    /// would, with this fake answering its API calls.
    ///
    /// # Errors
    ///
    /// What the callback returns: a [`transient`](crate::Error::transient)
    /// or [`terminal`](crate::Error::terminal) error, or an API error it
    /// passed on.
    pub fn reconcile<C: Controller>(&mut self, event: EventKind, object: &C::Resource) -> Result<Reconciled> {
        let meta = object.meta();
        let cluster = self.cluster.clone().unwrap_or_else(|| crate::DEFAULT_CLUSTER.to_owned());
        let ctx = Context::new(event, meta.namespace.clone(), meta.name.clone().unwrap_or_default())
            .in_cluster(cluster)
            .with_members(self.members.keys().cloned().collect());
        let copy: C::Resource = serde_json::to_vec(object)
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .expect("the object round-trips through JSON, as the host hands it over");
        let controller = C::default();
        let installed = Installed::new(self);
        let outcome = match ctx.event() {
            EventKind::Added => controller.add(&ctx, copy),
            EventKind::Modified => controller.modify(&ctx, copy),
            EventKind::Deleted => controller.delete(&ctx, copy),
            EventKind::Resync => controller.reconcile(&ctx, copy),
        };
        drop(installed);
        outcome.map(|o| Reconciled::of(o.into_wit()))
    }

    pub(crate) fn get(&mut self, r: &ObjectRef) -> Result<Json, WitError> {
        self.calls.push(format!("get {}", describe(r)));
        let key = (api_version(&r.kind), r.kind.kind.clone(), r.namespace.clone(), r.name.clone());
        self.objects.get(&key).map(encode).ok_or_else(|| not_found(r))
    }

    pub(crate) fn list(
        &mut self,
        kind: &GroupVersionKind,
        namespace: Option<&str>,
        selector: Option<&str>,
    ) -> Result<Vec<Json>, WitError> {
        let api_version = api_version(kind);
        self.calls.push(format!("list {api_version}/{} {}", kind.kind, namespace.unwrap_or("*")));
        Ok(self
            .objects
            .iter()
            .filter(|((v, k, ns, _), _)| {
                *v == api_version && *k == kind.kind && (namespace.is_none() || ns.as_deref() == namespace)
            })
            .filter(|(_, o)| selected(o.pointer("/metadata/labels"), selector))
            .map(|(_, o)| encode(o))
            .collect())
    }

    /// The objects of the cluster named `cluster`: this fake's own or a
    /// member's; any other is denied, as on the host.
    fn objects_in(&self, cluster: &str) -> Result<&BTreeMap<Key, Value>, WitError> {
        let own = self.cluster.as_deref().unwrap_or(crate::DEFAULT_CLUSTER);
        if cluster == own {
            return Ok(&self.objects);
        }
        self.members.get(cluster).ok_or_else(|| {
            WitError::Denied(format!("cluster {cluster} is neither this cluster ({own}) nor a member of the fleet"))
        })
    }

    pub(crate) fn get_in(&mut self, cluster: &str, r: &ObjectRef) -> Result<Json, WitError> {
        self.calls.push(format!("get-in {cluster} {}", describe(r)));
        let key = (api_version(&r.kind), r.kind.kind.clone(), r.namespace.clone(), r.name.clone());
        self.objects_in(cluster)?.get(&key).map(encode).ok_or_else(|| not_found(r))
    }

    pub(crate) fn list_in(
        &mut self,
        cluster: &str,
        kind: &GroupVersionKind,
        namespace: Option<&str>,
        selector: Option<&str>,
    ) -> Result<Vec<Json>, WitError> {
        let api_version = api_version(kind);
        self.calls.push(format!("list-in {cluster} {api_version}/{} {}", kind.kind, namespace.unwrap_or("*")));
        Ok(self
            .objects_in(cluster)?
            .iter()
            .filter(|((v, k, ns, _), _)| {
                *v == api_version && *k == kind.kind && (namespace.is_none() || ns.as_deref() == namespace)
            })
            .filter(|(_, o)| selected(o.pointer("/metadata/labels"), selector))
            .map(|(_, o)| encode(o))
            .collect())
    }

    pub(crate) fn create(&mut self, data: &[u8]) -> Result<Json, WitError> {
        let object = decode(data)?;
        let key = key_of(&object).ok_or_else(|| WitError::BadRequest("object lacks identity".into()))?;
        self.calls.push(format!("create {}", describe_key(&key)));
        if self.objects.contains_key(&key) {
            return Err(WitError::AlreadyExists(status(409, "AlreadyExists", &format!("{} already exists", key.3))));
        }
        Ok(self.store(key, object))
    }

    pub(crate) fn replace(&mut self, data: &[u8], status_only: bool) -> Result<Json, WitError> {
        let object = decode(data)?;
        let key = key_of(&object).ok_or_else(|| WitError::BadRequest("object lacks identity".into()))?;
        self.calls.push(format!("{} {}", if status_only { "replace-status" } else { "replace" }, describe_key(&key)));
        let Some(stored) = self.objects.get(&key).cloned() else { return Err(not_found_key(&key)) };
        let object = if status_only { with_status(stored, object.get("status").cloned()) } else { object };
        Ok(self.store(key, object))
    }

    pub(crate) fn patch(
        &mut self,
        r: &ObjectRef,
        patch_type: PatchType,
        data: &[u8],
        status_only: bool,
    ) -> Result<Json, WitError> {
        self.calls.push(format!("{} {}", if status_only { "patch-status" } else { "patch" }, describe(r)));
        if patch_type == PatchType::Json {
            return Err(WitError::BadRequest("capstan_guest::testing does not fake JSON patches".into()));
        }
        let key = (api_version(&r.kind), r.kind.kind.clone(), r.namespace.clone(), r.name.clone());
        let Some(stored) = self.objects.get(&key).cloned() else { return Err(not_found(r)) };
        let patch = decode(data)?;
        Ok(self.merge_into(key, stored, patch, status_only))
    }

    pub(crate) fn apply(&mut self, data: &[u8], status_only: bool) -> Result<Json, WitError> {
        let object = decode(data)?;
        let key = key_of(&object).ok_or_else(|| WitError::BadRequest("object lacks identity".into()))?;
        self.calls.push(format!("{} {}", if status_only { "apply-status" } else { "apply" }, describe_key(&key)));
        match self.objects.get(&key).cloned() {
            Some(stored) => Ok(self.merge_into(key, stored, object, status_only)),
            None if status_only => Err(not_found_key(&key)),
            None => Ok(self.store(key, object)),
        }
    }

    pub(crate) fn delete(&mut self, r: &ObjectRef) -> Result<(), WitError> {
        self.calls.push(format!("delete {}", describe(r)));
        let key = (api_version(&r.kind), r.kind.kind.clone(), r.namespace.clone(), r.name.clone());
        self.objects.remove(&key).map(drop).ok_or_else(|| not_found(r))
    }

    pub(crate) fn record(&mut self, event: &wit::Event) {
        self.events.push(event_json(event));
    }

    fn merge_into(&mut self, key: Key, stored: Value, patch: Value, status_only: bool) -> Json {
        let object = if status_only {
            let mut status = stored.get("status").cloned().unwrap_or(Value::Null);
            merge(&mut status, patch.get("status").unwrap_or(&Value::Null));
            with_status(stored, Some(status))
        } else {
            let mut object = stored;
            merge(&mut object, &patch);
            object
        };
        self.store(key, object)
    }

    fn store(&mut self, key: Key, mut object: Value) -> Json {
        self.resource_version += 1;
        object["metadata"]["resourceVersion"] = json!(self.resource_version.to_string());
        let bytes = encode(&object);
        self.objects.insert(key, object);
        bytes
    }
}

/// Puts the fake on this thread for one callback, and takes it back when
/// dropped (a panicking test included).
struct Installed<'a>(&'a mut FakeHost);

impl<'a> Installed<'a> {
    fn new(host: &'a mut FakeHost) -> Self {
        let fake = std::mem::take(host);
        HOST.with(|h| *h.borrow_mut() = Some(fake));
        Self(host)
    }
}

impl Drop for Installed<'_> {
    fn drop(&mut self) {
        *self.0 = HOST.with(|h| h.borrow_mut().take()).unwrap_or_default();
        // The call is over: spans still open end with it, as on the host.
        self.0.open_spans.clear();
    }
}

fn api_version(gvk: &GroupVersionKind) -> String {
    if gvk.group.is_empty() { gvk.version.clone() } else { format!("{}/{}", gvk.group, gvk.version) }
}

fn describe(r: &ObjectRef) -> String {
    let at = r.namespace.as_ref().map_or_else(|| r.name.clone(), |ns| format!("{ns}/{}", r.name));
    format!("{}/{} {at}", api_version(&r.kind), r.kind.kind)
}

fn describe_key((api_version, kind, namespace, name): &Key) -> String {
    let at = namespace.as_ref().map_or_else(|| name.clone(), |ns| format!("{ns}/{name}"));
    format!("{api_version}/{kind} {at}")
}

fn key_of(object: &Value) -> Option<Key> {
    let text = |p: &str| object.pointer(p).and_then(Value::as_str).map(str::to_owned);
    Some((text("/apiVersion")?, text("/kind")?, text("/metadata/namespace"), text("/metadata/name")?))
}

fn with_status(mut object: Value, status: Option<Value>) -> Value {
    if let (Some(map), Some(status)) = (object.as_object_mut(), status) {
        map.insert("status".to_owned(), status);
    }
    object
}

/// RFC 7386 merge of `patch` into `target`.
fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (target, patch) => *target = patch.clone(),
    }
}

/// Whether `labels` match a selector of `k=v`, `k==v`, `k!=v` and `k`
/// terms (no selector matches everything).
fn selected(labels: Option<&Value>, selector: Option<&str>) -> bool {
    let label = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
    selector.into_iter().flat_map(|s| s.split(',')).map(str::trim).filter(|t| !t.is_empty()).all(|term| {
        if let Some((k, v)) = term.split_once("!=") {
            label(k.trim()) != Some(v.trim())
        } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
            label(k.trim()) == Some(v.trim())
        } else {
            label(term).is_some()
        }
    })
}

fn decode(bytes: &[u8]) -> Result<Value, WitError> {
    serde_json::from_slice(bytes).map_err(|e| WitError::BadRequest(format!("not JSON: {e}")))
}

fn encode(value: &Value) -> Json {
    serde_json::to_vec(value).expect("JSON serializes")
}

fn status(code: u16, reason: &str, message: &str) -> Status {
    Status { code, reason: reason.to_owned(), message: message.to_owned() }
}

fn not_found(r: &ObjectRef) -> WitError {
    WitError::NotFound(status(404, "NotFound", &format!("{} {:?} not found", r.kind.kind, r.name)))
}

fn not_found_key(key: &Key) -> WitError {
    WitError::NotFound(status(404, "NotFound", &format!("{} {:?} not found", key.1, key.3)))
}

/// `host` and port of an authority (`[v6]:port`, `host:port`, `host`).
fn split_authority(authority: &str, https: bool) -> (&str, u16) {
    let default = if https { 443 } else { 80 };
    let (host, port) = match authority.rfind(':') {
        Some(i) if !authority[i..].contains(']') => (&authority[..i], authority[i + 1..].parse().unwrap_or(0)),
        _ => (authority, default),
    };
    (host, port)
}

/// Whether a declared origin (`SCHEME://HOST[:PORT|:LOW-HIGH]`, `*.DOMAIN`)
/// allows a request, as the host decides it.
fn origin_allows(origin: &str, scheme: &str, host: &str, port: u16) -> bool {
    let Some((s, rest)) = origin.split_once("://") else { return false };
    if s != scheme {
        return false;
    }
    let (pattern, ports) = match rest.rfind(':') {
        Some(i) if !rest[i..].contains(']') => (&rest[..i], &rest[i + 1..]),
        _ => (rest, ""),
    };
    let port_ok = match (ports, ports.split_once('-')) {
        ("", _) => port == if scheme == "https" { 443 } else { 80 },
        (_, Some((low, high))) => {
            low.parse::<u16>().is_ok_and(|l| l <= port) && high.parse::<u16>().is_ok_and(|h| port <= h)
        }
        (p, None) => p.parse::<u16>() == Ok(port),
    };
    let host_ok = match pattern.strip_prefix("*.") {
        _ if pattern == "*" => true,
        Some(domain) => {
            let host = host.to_ascii_lowercase();
            host.len() > domain.len() + 1 && host.ends_with(&format!(".{}", domain.to_ascii_lowercase()))
        }
        None => pattern.eq_ignore_ascii_case(host),
    };
    port_ok && host_ok
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;

    use super::*;
    use crate::{Api, Error, Manifest, Outcome};

    fn cm(name: &str, data: Value) -> ConfigMap {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "demo", "labels": {"team": "a"}},
            "data": data,
        }))
        .expect("a ConfigMap")
    }

    /// Copies the `settings` ConfigMap's tone into a child, counts its
    /// team's ConfigMaps, records an Event and logs.
    #[derive(Default)]
    struct Copier;

    impl Controller for Copier {
        type Resource = ConfigMap;

        fn manifest(&self) -> Manifest {
            Manifest::new("copier").primary::<ConfigMap>()
        }

        fn reconcile(&self, ctx: &Context, object: ConfigMap) -> Result<Outcome> {
            let _copy = ctx.span("copy", &[("name", ctx.name())]);
            let api: Api<ConfigMap> = ctx.api(ctx.namespace());
            let mut read = ctx.span("read-settings", &[]);
            let Some(settings) = api.get_opt("settings")? else {
                read.fail("no settings");
                return Err(Error::transient("no settings yet"));
            };
            read.end();
            let team = api.list(&crate::ListParams::new().labels("team=a"))?;
            ctx.log().info("copying", &[("name", ctx.name())]);
            ctx.record(crate::Event::normal("Copying", "Reconcile"))?;
            let tone = settings.data.unwrap_or_default().get("tone").cloned().unwrap_or_default();
            let child = cm(&format!("{}-copy", ctx.name()), json!({"tone": tone, "team": team.len().to_string()}));
            api.patch_status("settings", crate::PatchType::Merge, &json!({"status": {"seen": true}}))?;
            Ok(Outcome::new()
                .child(&child)
                .status(&json!({"copied": object.metadata.name}))
                .requeue_after(Duration::from_secs(30)))
        }
    }

    #[test]
    fn a_reconcile_returns_the_outcome_as_json_and_the_fake_answers_and_records() {
        let web = cm("web", json!({}));
        let mut host = FakeHost::new().with(&web).with(&cm("settings", json!({"tone": "warm"})));
        let done = host.reconcile::<Copier>(EventKind::Added, &web).expect("reconciled");
        let child = done.child("ConfigMap", "web-copy").expect("the child");
        assert_eq!(child["data"], json!({"tone": "warm", "team": "2"}));
        assert_eq!(done.status, Some(json!({"copied": "web"})));
        assert_eq!(done.requeue_after, Some(Duration::from_secs(30)));
        assert!(!done.keeps_children);
        assert_eq!(
            host.calls(),
            ["get v1/ConfigMap demo/settings", "list v1/ConfigMap demo", "patch-status v1/ConfigMap demo/settings"]
        );
        assert_eq!(host.events()[0]["reason"], "Copying");
        assert_eq!(host.logs()[0].fields, [("name".to_owned(), "web".to_owned())]);
        let spans: Vec<_> = host.spans().iter().map(|s| (s.name.as_str(), s.parent.as_deref(), s.ended)).collect();
        assert_eq!(spans, [("copy", None, true), ("read-settings", Some("copy"), true)]);
        assert_eq!(host.spans()[0].attributes, [("name".to_owned(), "web".to_owned())]);
        let settings = host.get_json("v1", "ConfigMap", Some("demo"), "settings").expect("stored");
        assert_eq!(settings["status"], json!({"seen": true}), "the status patch is stored");
    }

    /// A fleet controller: a copy in every member, what each holds read
    /// back, and a write in a member tried.
    #[derive(Default)]
    struct Spreader;

    impl Controller for Spreader {
        type Resource = ConfigMap;

        fn manifest(&self) -> Manifest {
            Manifest::new("spreader").primary::<ConfigMap>().owns::<ConfigMap>().fleet(crate::Fleet::home("default"))
        }

        fn reconcile(&self, ctx: &Context, object: ConfigMap) -> Result<Outcome> {
            let mut outcome = Outcome::new();
            let mut seen = Vec::new();
            for member in ctx.members() {
                outcome = outcome.child_in(member, &cm("copy", json!({})));
                let there = ctx.api_in::<ConfigMap>(member, ctx.namespace()).list(&crate::ListParams::new())?;
                seen.push(format!("{member}:{}", there.len()));
            }
            let denied = ctx.api_in::<ConfigMap>("west", ctx.namespace()).create(&object).expect_err("read only");
            let unknown = ctx.api_in::<ConfigMap>("nowhere", ctx.namespace()).get("x").expect_err("no such member");
            Ok(outcome.status(&json!({"seen": seen, "write": denied.to_string(), "unknown": unknown.to_string()})))
        }
    }

    #[test]
    fn a_fleet_controller_sees_its_members_reads_there_and_lists_children_in_them() {
        let web = cm("web", json!({}));
        let mut host =
            FakeHost::new().member("west", &[cm("a", json!({})), cm("b", json!({}))]).member("east", &[web.clone()]);
        let done = host.reconcile::<Spreader>(EventKind::Added, &web).expect("reconciled");
        let status = done.status.clone().expect("a status");
        assert_eq!(status["seen"], json!(["east:1", "west:2"]), "members in order, each read there");
        assert!(status["write"].as_str().is_some_and(|w| w.contains("Outcome::child_in")), "{status}");
        assert!(status["unknown"].as_str().is_some_and(|w| w.contains("nor a member")), "{status}");
        assert!(
            done.child_in("west", "ConfigMap", "copy").is_some()
                && done.child_in("east", "ConfigMap", "copy").is_some()
        );
        assert!(done.child("ConfigMap", "copy").is_none(), "no child in the home cluster");
        assert_eq!(host.calls()[0], "list-in east v1/ConfigMap demo");
        assert!(!host.calls().iter().any(|c| c.starts_with("create")), "the write never reached the host");
    }

    #[test]
    fn an_error_reaches_the_test_and_the_fake_comes_back() {
        let web = cm("web", json!({}));
        let mut host = FakeHost::new().with(&web);
        let err = host.reconcile::<Copier>(EventKind::Resync, &web).expect_err("no settings");
        assert!(err.to_string().contains("no settings yet"), "{err}");
        assert_eq!(host.calls(), ["get v1/ConfigMap demo/settings"], "the fake is back after the call");
        let read = &host.spans()[1];
        assert_eq!(
            (read.name.as_str(), read.error.as_deref(), read.ended),
            ("read-settings", Some("no settings"), true)
        );
    }

    #[test]
    fn label_selectors_match_like_the_api_server() {
        let labels = json!({"app": "web", "tier": "front"});
        assert!(selected(Some(&labels), None));
        assert!(selected(Some(&labels), Some("app=web,tier")));
        assert!(selected(Some(&labels), Some("app==web,tier!=back")));
        assert!(!selected(Some(&labels), Some("app=db")));
        assert!(!selected(None, Some("app")));
    }

    #[test]
    fn requests_go_to_stubs_of_declared_origins_only() {
        use crate::http::{HttpError, Request, Response};
        let mut host = FakeHost::new().egress(&["https://*.example.com", "http://127.0.0.1:9000-9100"]);
        let ok = Response { status: 200, headers: vec![], body: br#"{"id":"s1"}"#.to_vec() };
        host.stub_http("post", "https://am.example.com/api/v2/silences", Ok(ok.clone()));
        host.stub_http("GET", "http://127.0.0.1:9093/", Err(HttpError::Transport("connection refused".into())));
        let installed = Installed::new(&mut host);
        let sent = Request::post("https://am.example.com/api/v2/silences").json(&json!({"a": 1})).expect("json");
        assert_eq!(sent.clone().send(), Ok(ok));
        assert!(matches!(Request::get("http://127.0.0.1:9093/").send(), Err(HttpError::Transport(_))));
        for undeclared in
            ["https://example.com/", "http://am.example.com/", "http://127.0.0.1:8080/", "https://169.254.169.254/"]
        {
            assert!(matches!(Request::get(undeclared).send(), Err(HttpError::Denied(_))), "{undeclared}");
        }
        let missing = Request::get("https://other.example.com/").send();
        assert!(matches!(missing, Err(HttpError::Transport(m)) if m.contains("no stub")));
        drop(installed);
        assert_eq!(host.http_requests().len(), 7);
        assert_eq!(host.http_requests()[0], sent);
    }

    #[test]
    #[should_panic(expected = "outside capstan_guest::testing::FakeHost::reconcile")]
    fn an_api_call_outside_a_reconcile_names_the_way() {
        let _ = Api::<ConfigMap>::new(Some("demo")).get("x");
    }

    /// Reports the cluster it runs in.
    #[derive(Default)]
    struct Where;

    impl Controller for Where {
        type Resource = ConfigMap;

        fn manifest(&self) -> Manifest {
            Manifest::new("where").primary::<ConfigMap>()
        }

        fn reconcile(&self, ctx: &Context, _object: ConfigMap) -> Result<Outcome> {
            Ok(Outcome::new().status(&json!({"cluster": ctx.cluster()})))
        }
    }

    #[test]
    fn the_context_names_the_fake_hosts_cluster() {
        let web = cm("web", json!({}));
        let done = FakeHost::new().reconcile::<Where>(EventKind::Resync, &web).expect("reconciled");
        assert_eq!(done.status, Some(json!({"cluster": "default"})));
        let done = FakeHost::new().in_cluster("east").reconcile::<Where>(EventKind::Resync, &web).expect("reconciled");
        assert_eq!(done.status, Some(json!({"cluster": "east"})));
    }
}
