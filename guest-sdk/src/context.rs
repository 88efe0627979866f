//! What a callback gets besides the object: the [`Context`].

use kube::Resource;

use crate::api::Api;
use crate::error::{ApiError, Result};
use crate::imports::events as wit_events;
use crate::log::Log;
use crate::outcome::Event;
use crate::wit::capstan::operator::types as wit;

/// The name of a host's own cluster, as [`Context::cluster`] gives it.
pub const DEFAULT_CLUSTER: &str = "default";

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
    failed_children: Vec<FailedChild>,
    cluster: String,
    members: Vec<String>,
}

/// A child of the previous outcome for this object that the API server
/// (or the host) refused, e.g. a 422 for an invalid spec or a 403 the host
/// may not grant. The host also records a Warning Event and sets its
/// `Reconciled=False` condition; a controller can react, e.g. by setting
/// its own `Ready=False` with the reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailedChild {
    /// API group of the child's kind (empty for core).
    pub group: String,
    /// Version of the child's kind.
    pub version: String,
    /// Kind, e.g. `CronJob`.
    pub kind: String,
    /// Namespace; `None` for cluster-scoped children.
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
    /// HTTP status code, e.g. 422.
    pub code: u16,
    /// Machine-readable reason, e.g. `Invalid`.
    pub reason: String,
    /// What the API server said.
    pub message: String,
    /// The member cluster of a fleet controller's child placed there with
    /// [`Outcome::child_in`](crate::Outcome::child_in); `None` for a child
    /// in the object's own cluster.
    pub cluster: Option<String>,
}

impl From<wit::ChildFailure> for FailedChild {
    fn from(c: wit::ChildFailure) -> Self {
        Self {
            group: c.child.kind.group,
            version: c.child.kind.version,
            kind: c.child.kind.kind,
            namespace: c.child.namespace,
            name: c.child.name,
            code: c.code,
            reason: c.reason,
            message: c.message,
            cluster: c.cluster,
        }
    }
}

impl Context {
    #[doc(hidden)]
    pub fn new(event: EventKind, namespace: Option<String>, name: String) -> Self {
        Self {
            event,
            namespace,
            name,
            failed_children: Vec::new(),
            cluster: DEFAULT_CLUSTER.to_owned(),
            members: Vec::new(),
        }
    }

    #[doc(hidden)]
    #[must_use]
    pub fn with_members(mut self, members: Vec<String>) -> Self {
        self.members = members;
        self
    }

    #[doc(hidden)]
    #[must_use]
    pub fn in_cluster(mut self, cluster: String) -> Self {
        self.cluster = cluster;
        self
    }

    #[doc(hidden)]
    #[must_use]
    pub fn with_failed_children(mut self, failed: Vec<FailedChild>) -> Self {
        self.failed_children = failed;
        self
    }

    /// Children of the previous outcome for this object that were refused
    /// and have not been applied since; empty when all were applied.
    pub fn failed_children(&self) -> &[FailedChild] {
        &self.failed_children
    }

    /// The name of the cluster the object is in: `default` for the host's
    /// own cluster, else the name the host engaged it by (`capstan run
    /// --cluster NAME=…`, or a kubeconfig Secret's). The API calls of this
    /// context go to that cluster. Hosts before contract 0.4.0 run one
    /// cluster, `default`.
    ///
    /// ```no_run
    /// # use capstan_guest::prelude::*;
    /// # fn f(ctx: &Context) {
    /// ctx.log().info("reconciling", &[("cluster", ctx.cluster())]);
    /// # }
    /// ```
    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    /// The member clusters of a fleet controller engaged now, in order:
    /// where [`Outcome::child_in`](crate::Outcome::child_in) may place
    /// children and [`api_in`](Self::api_in) may read (contract 0.4.0;
    /// see [`Manifest::fleet`](crate::Manifest::fleet)). Empty for a
    /// uniform controller. A member that comes or goes later brings a new
    /// reconcile of every object.
    pub fn members(&self) -> &[String] {
        &self.members
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

    /// A typed client for kind `K` in `namespace` of the cluster named
    /// `cluster`: this context's own, or a fleet controller's home or one
    /// of its [`members`](Self::members) (contract 0.4.0). It reads
    /// (`get`, `get_opt`, `list`); a write returns
    /// [`ApiError::Denied`] without calling the host, as a fleet
    /// controller writes in its members through
    /// [`Outcome::child_in`](crate::Outcome::child_in).
    ///
    /// ```no_run
    /// # use capstan_guest::prelude::*;
    /// # use capstan_guest::k8s_openapi::api::core::v1::ConfigMap;
    /// # fn f(ctx: &Context) -> capstan_guest::Result<()> {
    /// for member in ctx.members() {
    ///     let there = ctx.api_in::<ConfigMap>(member, ctx.namespace()).get_opt("greeting")?;
    ///     ctx.log().info("seen", &[("cluster", member), ("present", &there.is_some().to_string())]);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn api_in<K>(&self, cluster: &str, namespace: Option<&str>) -> Api<K>
    where
        K: Resource<DynamicType = ()> + serde::de::DeserializeOwned + serde::Serialize,
    {
        Api::in_cluster(cluster, namespace)
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

    /// Opens a span of this reconcile (see [`Log::span`]), e.g. around a
    /// step worth seeing in a trace:
    ///
    /// ```no_run
    /// # let ctx: capstan_guest::Context = unimplemented!();
    /// let _span = ctx.span("compute-desired", &[("replicas", "3")]);
    /// ```
    pub fn span(&self, name: &str, attributes: &[(&str, &str)]) -> crate::Span {
        Log.span(name, attributes)
    }
}
