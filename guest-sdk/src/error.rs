//! Errors: from the Kubernetes API ([`ApiError`]) and from a reconcile
//! ([`Error`]).

use std::fmt;

use crate::wit::capstan::operator::kube as wit_kube;
use crate::wit::capstan::operator::types as wit_types;

/// What the API server said about a failed call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiStatus {
    /// HTTP status code, e.g. 404.
    pub code: u16,
    /// Machine-readable reason, e.g. `NotFound`.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
}

impl From<wit_kube::Status> for ApiStatus {
    fn from(s: wit_kube::Status) -> Self {
        Self { code: s.code, reason: s.reason, message: s.message }
    }
}

/// A failed call to the Kubernetes API through the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApiError {
    /// The controller's grants do not allow the call; nothing was sent.
    /// Declare the permission in the [`Manifest`](crate::Manifest).
    Denied(String),
    /// 404: the object or kind does not exist.
    NotFound(ApiStatus),
    /// 409: create of a name that exists.
    AlreadyExists(ApiStatus),
    /// 409: stale resourceVersion or apply conflict.
    Conflict(ApiStatus),
    /// 422: the object failed validation.
    Invalid(ApiStatus),
    /// 403 from the API server.
    Forbidden(ApiStatus),
    /// The request was malformed before it was sent.
    BadRequest(String),
    /// The API server could not be reached.
    Unavailable(String),
    /// Any other API error.
    Other(ApiStatus),
    /// The host answered with JSON that does not fit the requested type.
    Decode(String),
}

impl ApiError {
    /// True for 404.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::NotFound(_))
    }

    /// True for 409 (already exists or conflict).
    pub fn is_conflict(&self) -> bool {
        matches!(self, Self::Conflict(_) | Self::AlreadyExists(_))
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Denied(m) => write!(f, "denied by grants: {m}"),
            Self::NotFound(s) => write!(f, "not found: {}", s.message),
            Self::AlreadyExists(s) => write!(f, "already exists: {}", s.message),
            Self::Conflict(s) => write!(f, "conflict: {}", s.message),
            Self::Invalid(s) => write!(f, "invalid: {}", s.message),
            Self::Forbidden(s) => write!(f, "forbidden: {}", s.message),
            Self::BadRequest(m) => write!(f, "bad request: {m}"),
            Self::Unavailable(m) => write!(f, "api server unavailable: {m}"),
            Self::Other(s) => write!(f, "api error {}: {}", s.code, s.message),
            Self::Decode(m) => write!(f, "cannot decode the host's answer: {m}"),
        }
    }
}

impl std::error::Error for ApiError {}

impl From<wit_kube::Error> for ApiError {
    fn from(e: wit_kube::Error) -> Self {
        use wit_kube::Error as E;
        match e {
            E::Denied(m) => Self::Denied(m),
            E::NotFound(s) => Self::NotFound(s.into()),
            E::AlreadyExists(s) => Self::AlreadyExists(s.into()),
            E::Conflict(s) => Self::Conflict(s.into()),
            E::Invalid(s) => Self::Invalid(s.into()),
            E::Forbidden(s) => Self::Forbidden(s.into()),
            E::BadRequest(m) => Self::BadRequest(m),
            E::Unavailable(m) => Self::Unavailable(m),
            E::Other(s) => Self::Other(s.into()),
        }
    }
}

/// Why a reconcile gave up, and what to record about it.
///
/// A failure keeps the children as they are. It may carry the `status` to
/// write (e.g. `Ready=False` with the reason) and events; the host merges
/// its own `Reconciled=False` condition into the status of a terminal
/// failure and records a Warning Event with the message.
///
/// ```
/// use capstan_guest::{Error, Event};
/// use serde_json::json;
///
/// let e = Error::terminal("spec.schedule is not a cron expression")
///     .with_status(&json!({"conditions": [{"type": "Ready", "status": "False", "reason": "InvalidSpec"}]}))
///     .with_event(Event::warning("InvalidSpec", "Validate"));
/// assert!(e.is_terminal());
/// ```
#[derive(Clone, Debug)]
pub struct Error {
    terminal: bool,
    message: String,
    status: Option<Vec<u8>>,
    events: Vec<crate::outcome::Event>,
}

impl Error {
    /// A failure worth retrying (with backoff).
    pub fn transient(message: impl fmt::Display) -> Self {
        Self { terminal: false, message: message.to_string(), status: None, events: Vec::new() }
    }

    /// A failure retrying will not fix (e.g. an invalid spec): not retried
    /// until the object changes.
    pub fn terminal(message: impl fmt::Display) -> Self {
        Self { terminal: true, ..Self::transient(message) }
    }

    /// The `status` to write with the failure (the status field only, as
    /// in [`Outcome::status`](crate::Outcome::status)).
    #[must_use]
    pub fn with_status<S: serde::Serialize>(mut self, status: &S) -> Self {
        self.status = Some(serde_json::to_vec(status).expect("a status always serializes to JSON"));
        self
    }

    /// An event to record with the failure.
    #[must_use]
    pub fn with_event(mut self, event: crate::outcome::Event) -> Self {
        self.events.push(event);
        self
    }

    /// True if not retried until the object changes.
    pub fn is_terminal(&self) -> bool {
        self.terminal
    }

    /// What went wrong.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The status written with the failure, as JSON (for unit tests).
    pub fn status(&self) -> Option<serde_json::Value> {
        self.status.as_deref().and_then(|s| serde_json::from_slice(s).ok())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = if self.terminal { "terminal" } else { "transient" };
        write!(f, "{kind}: {}", self.message)
    }
}

impl std::error::Error for Error {}

/// API errors are transient by default, except a denial by grants, which
/// no retry can fix.
impl From<ApiError> for Error {
    fn from(e: ApiError) -> Self {
        match e {
            ApiError::Denied(_) => Self::terminal(e),
            _ => Self::transient(e),
        }
    }
}

/// Bad JSON from or for the host is a bug, not something a retry fixes.
impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Self::terminal(format!("json: {e}"))
    }
}

impl From<Error> for wit_types::Failure {
    fn from(e: Error) -> Self {
        Self {
            kind: if e.terminal { wit_types::FailureKind::Terminal } else { wit_types::FailureKind::Transient },
            message: e.message,
            status: e.status,
            events: e.events.into_iter().map(|ev| ev.0).collect(),
        }
    }
}

/// Result of a reconcile, or of an API call with `E = ApiError`.
pub type Result<T, E = Error> = std::result::Result<T, E>;
