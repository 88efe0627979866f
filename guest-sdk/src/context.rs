//! What a callback gets besides the object: the [`Context`].

use kube::Resource;

use crate::api::Api;
use crate::error::{ApiError, Result};
use crate::log::Log;
use crate::outcome::Event;
use crate::wit::capstan::operator::{events as wit_events, types as wit};

/// Why the host called: derived from state by comparing the object with what
/// this controller last handled successfully.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// Not handled before (or not since the host started).
    Added,
    /// Changed since last handled.
    Modified,
    /// Being deleted.
    Deleted,
    /// Unchanged: periodic resync, requeue, a child or watched object
    /// changed, or a new component version took over.
    Resync,
}

impl From<wit::EventKind> for EventKind {
    fn from(e: wit::EventKind) -> Self {
        match e {
            wit::EventKind::Added => Self::Added,
            wit::EventKind::Modified => Self::Modified,
            wit::EventKind::Deleted => Self::Deleted,
            wit::EventKind::Resync => Self::Resync,
        }
    }
}

/// Handed to every callback: the event kind, the reconciled object's
/// namespace, the typed Kubernetes client, events and logging.
#[derive(Clone, Debug)]
pub struct Context {
    event: EventKind,
    namespace: Option<String>,
    name: String,
}

impl Context {
    #[doc(hidden)]
    pub fn new(event: EventKind, namespace: Option<String>, name: String) -> Self {
        Self { event, namespace, name }
    }

    /// Why this reconcile happens.
    pub fn event(&self) -> EventKind {
        self.event
    }

    /// Namespace of the reconciled object (`None` if cluster-scoped).
    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    /// Name of the reconciled object.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A typed client for kind `K` in `namespace` (`None`: all namespaces
    /// for lists, or a cluster-scoped kind). Calls are checked against the
    /// controller's grants; reads of watched kinds come from the host's
    /// cache.
    ///
    /// ```no_run
    /// # use capstan_guest::prelude::*;
    /// # use capstan_guest::k8s_openapi::api::core::v1::ConfigMap;
    /// # fn f(ctx: &Context) -> capstan_guest::Result<()> {
    /// let cms = ctx.api::<ConfigMap>(ctx.namespace());
    /// if let Some(cm) = cms.get_opt("settings")? {
    ///     ctx.log().info("found settings", &[("keys", &cm.data.unwrap_or_default().len().to_string())]);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn api<K>(&self, namespace: Option<&str>) -> Api<K>
    where
        K: Resource<DynamicType = ()> + serde::de::DeserializeOwned + serde::Serialize,
    {
        Api::new(namespace)
    }

    /// Records an Event right away (the [`Outcome`](crate::Outcome) can
    /// carry events too, recorded after the outcome is applied).
    ///
    /// # Errors
    ///
    /// When the host cannot record it.
    pub fn record(&self, event: Event) -> Result<(), ApiError> {
        wit_events::record(&event.0).map_err(ApiError::from)
    }

    /// Structured logging under this reconcile's span.
    pub fn log(&self) -> Log {
        Log
    }
}
