//! The cluster backend: where objects live. One trait, two implementations:
//! the real API server through kube-rs (`cluster::kube`), and the in-memory
//! mock cluster for authors' unit tests (`cluster::mock`).
//!
//! Objects are `serde_json::Value`s with `apiVersion` and `kind` set: the host
//! handles arbitrary kinds, including ones only a guest knows the schema of.

use async_trait::async_trait;
use serde_json::Value;

use crate::object::{Gvk, ObjectRef};

pub mod kube;
pub mod mock;

/// The name of the cluster `capstan run` reaches through `--kubeconfig`,
/// `--context`, `KUBECONFIG` or its Pod's service account; the others
/// are named by `--cluster` and `--clusters-from-secrets`.
pub const DEFAULT_CLUSTER: &str = "default";

/// What the API server said about a failed request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    /// HTTP status code.
    pub code: u16,
    /// Machine-readable reason, e.g. `NotFound`.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
}

impl Status {
    /// Builds a status.
    pub fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        Self { code, reason: reason.to_owned(), message: message.into() }
    }
}

/// A failed cluster request.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// 404: the object or kind does not exist.
    #[error("not found: {}", .0.message)]
    NotFound(Status),
    /// 409 AlreadyExists.
    #[error("already exists: {}", .0.message)]
    AlreadyExists(Status),
    /// 409 Conflict: stale resourceVersion or apply conflict.
    #[error("conflict: {}", .0.message)]
    Conflict(Status),
    /// 422: the object failed validation.
    #[error("invalid: {}", .0.message)]
    Invalid(Status),
    /// 403 from the API server.
    #[error("forbidden: {}", .0.message)]
    Forbidden(Status),
    /// The request was malformed before it was sent.
    #[error("bad request: {0}")]
    BadRequest(String),
    /// The API server could not be reached.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// Any other API error.
    #[error("api error {}: {}", .0.code, .0.message)]
    Other(Status),
}

impl Error {
    /// Classifies an API `Status` by code and reason.
    pub fn from_status(status: Status) -> Self {
        match (status.code, status.reason.as_str()) {
            (404, _) => Self::NotFound(status),
            (409, "AlreadyExists") => Self::AlreadyExists(status),
            (409, _) => Self::Conflict(status),
            (422, _) => Self::Invalid(status),
            (403, _) => Self::Forbidden(status),
            (400, _) => Self::BadRequest(status.message),
            _ => Self::Other(status),
        }
    }

    /// True for 404.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::NotFound(_))
    }

    /// A short name of the variant, as in metric labels: `not_found`,
    /// `already_exists`, `conflict`, `invalid`, `forbidden`,
    /// `bad_request`, `unavailable`, `other`.
    pub fn label(&self) -> &'static str {
        match self {
            Self::NotFound(_) => "not_found",
            Self::AlreadyExists(_) => "already_exists",
            Self::Conflict(_) => "conflict",
            Self::Invalid(_) => "invalid",
            Self::Forbidden(_) => "forbidden",
            Self::BadRequest(_) => "bad_request",
            Self::Unavailable(_) => "unavailable",
            Self::Other(_) => "other",
        }
    }

    /// The HTTP status code of the API server's answer; `None` for a
    /// request that was not sent or not answered.
    pub fn code(&self) -> Option<u16> {
        match self {
            Self::NotFound(s)
            | Self::AlreadyExists(s)
            | Self::Conflict(s)
            | Self::Invalid(s)
            | Self::Forbidden(s)
            | Self::Other(s) => Some(s.code),
            Self::BadRequest(_) | Self::Unavailable(_) => None,
        }
    }
}

/// Result of a cluster request.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Selectors for `list`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListParams {
    /// Label selector, e.g. `app=web,tier!=db`.
    pub label_selector: Option<String>,
    /// Field selector, e.g. `metadata.name=x`.
    pub field_selector: Option<String>,
}

/// A patch, with its format.
#[derive(Clone, Debug, PartialEq)]
pub enum Patch {
    /// RFC 7386 JSON merge patch.
    Merge(Value),
    /// RFC 6902 JSON patch: an array of operations.
    Json(Value),
    /// Kubernetes strategic merge patch.
    Strategic(Value),
    /// Server-side apply of a (partial) object.
    Apply {
        /// The applied configuration.
        object: Value,
        /// Field manager that owns what this apply sets.
        field_manager: String,
        /// Take ownership of fields other managers own instead of failing.
        force: bool,
    },
}

/// How dependents are treated on delete.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Propagation {
    /// The API server's default for the kind.
    #[default]
    Default,
    /// Delete dependents in the background.
    Background,
    /// Delete dependents first.
    Foreground,
    /// Leave dependents in place.
    Orphan,
}

/// Which part of an object a write goes to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Subresource {
    /// The object itself (status changes are ignored for kinds with a
    /// status subresource).
    #[default]
    Main,
    /// The `status` subresource (only status changes are kept).
    Status,
}

/// The most bytes of a message the host writes into an Event's note or a
/// condition: the API server refuses Event notes longer than this.
pub const MAX_MESSAGE: usize = 1024;

/// `text` cut to at most `max` bytes on a character boundary, the cut
/// marked with how much was left out (`… (N bytes cut)`); `text` itself
/// when it fits (`max` of at least 32 bytes leaves room for the mark).
/// Everything a guest says (a failure's message, a child's
/// name) goes through it before the host logs it, records it in an Event or
/// writes it into a condition.
///
/// ```
/// use capstan_host::cluster::bounded;
///
/// assert_eq!(bounded("short", 64), "short");
/// let cut = bounded(&"x".repeat(100), 32);
/// assert_eq!(cut, format!("{}… (87 bytes cut)", "x".repeat(13)));
/// assert!(cut.len() <= 32);
/// ```
pub fn bounded(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    // The mark with the largest count it can hold is the longest.
    let room = max.saturating_sub(format!("… ({} bytes cut)", text.len()).len());
    let mut end = room;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes cut)", &text[..end], text.len() - end)
}

/// A Kubernetes Event to record, regarding one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventRecord {
    /// The object the event is about.
    pub regarding: ObjectRef,
    /// The uid of that object, if known.
    pub regarding_uid: Option<String>,
    /// `true` for a Warning, `false` for Normal.
    pub warning: bool,
    /// Short UpperCamelCase reason.
    pub reason: String,
    /// What was done.
    pub action: String,
    /// Human-readable detail.
    pub note: Option<String>,
    /// The controller that reports it (`reportingController`).
    pub reporting_controller: String,
}

/// The longest reason or action of an Event the API server takes, in
/// bytes; also what of them an Event's span carries.
pub const MAX_EVENT_WORD: usize = 128;

impl EventRecord {
    /// The span of recording it, `record_event`: the Event's reason,
    /// action and type (`Normal` or `Warning`) and the object it is about
    /// (reason and action bounded to [`MAX_EVENT_WORD`]), and, recorded by
    /// [`telemetry::record_request`](crate::telemetry::record_request), the
    /// API server's status code when it failed. Never its note: the
    /// controller writes that, and it may quote an object.
    pub fn span(&self) -> tracing::Span {
        tracing::info_span!(
            "record_event",
            reason = %bounded(&self.reason, MAX_EVENT_WORD),
            action = %bounded(&self.action, MAX_EVENT_WORD),
            "type" = if self.warning { "Warning" } else { "Normal" },
            regarding = %self.regarding,
            status_code = tracing::field::Empty,
            "otel.status_code" = tracing::field::Empty,
            "otel.status_message" = tracing::field::Empty,
        )
    }
}

/// A place that stores Kubernetes objects and answers API calls.
///
/// Implementations behave like the API server where it matters to
/// controllers: uid and resourceVersion assigned on write, typed errors for
/// 404 / 409 / 422, the status subresource kept apart.
#[async_trait]
pub trait Cluster: Send + Sync + 'static {
    /// Reads one object.
    async fn get(&self, object: &ObjectRef) -> Result<Value>;
    /// Lists objects of a kind in one namespace, or in all with `None`.
    async fn list(&self, kind: &Gvk, namespace: Option<&str>, params: &ListParams) -> Result<Vec<Value>>;
    /// Lists the objects of a kind in a namespace that have an
    /// ownerReference with `owner_uid`. Backends with a cache override
    /// this to filter before copying objects out.
    async fn list_owned(&self, kind: &Gvk, namespace: Option<&str>, owner_uid: &str) -> Result<Vec<Value>> {
        let all = self.list(kind, namespace, &ListParams::default()).await?;
        Ok(all.into_iter().filter(|o| crate::object::owner_uids(o).any(|u| u == owner_uid)).collect())
    }
    /// Creates an object; returns it as stored.
    async fn create(&self, object: Value) -> Result<Value>;
    /// Replaces an object or its status; `metadata.resourceVersion`, when
    /// set, is a precondition.
    async fn replace(&self, object: Value, subresource: Subresource) -> Result<Value>;
    /// Patches an object or its status.
    async fn patch(&self, object: &ObjectRef, patch: Patch, subresource: Subresource) -> Result<Value>;
    /// Deletes an object. With finalizers present, the object only gets a
    /// deletion timestamp.
    async fn delete(&self, object: &ObjectRef, propagation: Propagation) -> Result<()>;
    /// Records an Event.
    async fn record_event(&self, event: EventRecord) -> Result<()>;
    /// The user this backend's requests are made as, when it can tell
    /// (learned once, then kept). Default: `None`.
    async fn user(&self) -> Option<String> {
        None
    }
    /// Where a component's outbound HTTP requests are answered instead of
    /// the network: the mock cluster's stubs. Default: `None`, the network.
    fn http_stubs(&self) -> Option<std::sync::Arc<mock::HttpStubs>> {
        None
    }
    /// The objects of a kind in a namespace (`None`: all) that a fleet
    /// controller's marks name as the children of the object `owner_uid`
    /// (label [`OWNER_UID`](crate::object::mark::OWNER_UID)). Backends
    /// with a cache of the marked children override this to look them up.
    async fn list_marked(&self, kind: &Gvk, namespace: Option<&str>, owner_uid: &str) -> Result<Vec<Value>> {
        if owner_uid.is_empty() || !mock::meta::is_label_value(owner_uid) {
            return Ok(Vec::new());
        }
        let selector = format!("{}={owner_uid}", crate::object::mark::OWNER_UID);
        self.list(kind, namespace, &ListParams { label_selector: Some(selector), field_selector: None }).await
    }
    /// A stable identity of the cluster, the same for every client of it:
    /// the uid of its `kube-system` Namespace (learned once, then kept).
    /// Fleet controllers mark their children in member clusters with their
    /// home cluster's.
    async fn id(&self) -> Result<String>;
}

/// The clusters one host process serves, by the names it engaged them by:
/// where a fleet controller reaches beyond its own cluster.
pub trait Members: Send + Sync + 'static {
    /// The cluster engaged as `name`, if one is now.
    fn get(&self, name: &str) -> Option<std::sync::Arc<dyn Cluster>>;
    /// The names of the clusters engaged now, in order.
    fn names(&self) -> Vec<String>;
}
