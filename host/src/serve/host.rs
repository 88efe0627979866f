//! A host on a real cluster: loads components, optionally installs the
//! CRDs they define, and runs each as a [`Controller`] on shared watches.
//! Components can be loaded, replaced and removed while it runs (hot
//! loading, see [`Host::load`] and [`HostBuilder::components_dir`]); a
//! component that is rejected never replaces the version that serves.
//!
//! ```no_run
//! # async fn f(client: kube::Client) -> anyhow::Result<()> {
//! use capstan_host::serve::host::HostBuilder;
//!
//! let host = HostBuilder::new(client)
//!     .component("target/guests/greeter.wasm")
//!     .install_crds(true)
//!     .start()
//!     .await?;
//! // ... until shutdown:
//! host.shutdown().await;
//! # Ok(()) }
//! ```

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use serde::Serialize;
use serde_json::{Value, json};

use crate::cluster::kube::KubeCluster;
use crate::cluster::{self, Cluster, Patch, Subresource};
use crate::control::access;
use crate::control::controller::{Controller, Settings, State};
use crate::control::informer::Informers;
use crate::control::leader::{self, Elections, Leadership, LeaseSettings, lease_name};
use crate::control::reconciler::Reconciler;
use crate::control::scheduler::{self, Scheduler};
use crate::manifest::Manifest;
use crate::metrics::metrics;
use crate::object::{Gvk, ObjectRef};
use crate::runtime::component::{self, CompileSource, Loaded, Loader};
use crate::runtime::engine::{self, Engine, EngineConfig};
use crate::runtime::invocation::{Pre, Runtime};
use crate::runtime::limits::Limits;
use crate::serve::follow::Follow;
use crate::serve::reload::DirWatch;
use crate::sync::lock;

/// How long a canary may take before it is promoted anyway (its share's
/// objects were deleted, or this replica does not lead).
pub const CANARY_TIMEOUT: Duration = Duration::from_secs(300);

/// Field manager the host uses for its own applies (CRDs).
pub const HOST_FIELD_MANAGER: &str = "capstan";

/// Why a host could not start, or a component was rejected.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The wasm engine could not be set up.
    #[error(transparent)]
    Engine(#[from] engine::Error),
    /// The host imports could not be linked.
    #[error("cannot link host imports: {0}")]
    Link(String),
    /// A component was rejected.
    #[error(transparent)]
    Component(#[from] component::Error),
    /// Another file already runs a controller of this name.
    #[error("{path}: controller {name} already runs from {other}")]
    Duplicate {
        /// The rejected file.
        path: PathBuf,
        /// The controller name.
        name: String,
        /// The file that runs it.
        other: PathBuf,
    },
    /// Another file already runs a component serving this scheduler name.
    #[error(
        "{path}: controller {name} declares scheduler {scheduler}, which controller {other_name} from {other} serves already"
    )]
    DuplicateScheduler {
        /// The rejected file.
        path: PathBuf,
        /// Its controller name.
        name: String,
        /// The scheduler name both declare.
        scheduler: String,
        /// The file whose component serves it.
        other: PathBuf,
        /// That component's controller name.
        other_name: String,
    },
    /// A new version failed on its canary share.
    #[error("{path}: canary failed: {failure}")]
    Canary {
        /// The rejected file.
        path: PathBuf,
        /// Its first failure.
        failure: String,
    },
    /// The component needs permissions the host does not have.
    #[error("{path}: {error}")]
    Access {
        /// The rejected file.
        path: PathBuf,
        /// What is missing.
        error: access::Error,
    },
    /// The component asks for a wildcard permission and the host does not
    /// allow them.
    #[error(
        "{path}: asks for a wildcard permission ({what}), which this host refuses; review it and run with --allow-wildcard-permissions to accept it"
    )]
    Wildcard {
        /// The rejected file.
        path: PathBuf,
        /// The first wildcard permission.
        what: String,
    },
    /// The component's egress names any host (`*`) and the host does not
    /// allow that.
    #[error(
        "{path}: declares egress to any host ({origin}), which this host refuses; declare the origins it calls, or run with --allow-wildcard-egress to accept it"
    )]
    WildcardEgress {
        /// The rejected file.
        path: PathBuf,
        /// The wildcard origin.
        origin: String,
    },
    /// A CRD could not be installed.
    #[error("cannot install CRD {name}: {error}")]
    InstallCrd {
        /// The CRD.
        name: String,
        /// Why.
        error: cluster::Error,
    },
    /// A namespace to watch is not a valid namespace name.
    #[error("cannot watch namespace {0:?}: not a valid namespace name (a DNS-1123 label)")]
    Namespace(String),
    /// A CRD another component installed: it belongs to that one.
    #[error("CRD {name} was installed by controller {owner}; controller {controller} may not replace it")]
    CrdOwned {
        /// The CRD.
        name: String,
        /// The controller that installed it.
        owner: String,
        /// The controller that asked again.
        controller: String,
    },
    /// A CRD did not become established in time.
    #[error("CRD {0} was not established within 60 s")]
    CrdNotEstablished(String),
    /// Leader election could not be set up, or not joined.
    #[error(transparent)]
    Leader(#[from] leader::Error),
    /// Webhook configurations could not be installed.
    #[error("{path}: {error}")]
    Webhook {
        /// The rejected file.
        path: PathBuf,
        /// Why.
        error: crate::serve::webhook::Error,
    },
    /// `--webhook-failure-policy` names a component the host does not run,
    /// and none can come later (no components directory, no references):
    /// [`crate::serve::webhook::Error::PolicyComponent`].
    #[error(transparent)]
    FailurePolicy(crate::serve::webhook::Error),
    /// A component could not be pulled from its registry.
    #[error("{path}: {error}")]
    Pull {
        /// The reference, or the `*.oci` file naming it.
        path: PathBuf,
        /// Why.
        error: crate::serve::oci::Error,
    },
    /// The components directory cannot be watched.
    #[error("cannot watch components directory {path}: {error}")]
    Watch {
        /// The directory.
        path: PathBuf,
        /// Why.
        error: String,
    },
}

impl Error {
    /// Whether a start failed for a reason that may pass: the API server
    /// went away between connecting and loading, a CRD is not established
    /// yet, a registry does not answer yet. Such a start is tried again.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Access { error: access::Error::Review(_), .. } => true,
            Self::InstallCrd { error, .. } => matches!(error, cluster::Error::Unavailable(_)),
            Self::CrdNotEstablished(_) => true,
            Self::Pull { error, .. } => error.is_unavailable(),
            _ => false,
        }
    }

    /// A short, stable word for why a component was rejected: the
    /// loader's [`reason`](component::Error::reason) (`read`, `not_wasm`,
    /// `core_module`, `compile`, `world`, `contract`, `imports`,
    /// `manifest_call`, `manifest`), the registry's (`reference`,
    /// `unavailable`, `registry`, `not_component`, `digest`, `credentials`,
    /// `cache`: see [`crate::serve::oci::Error::reason`]), or the host's own:
    /// `duplicate`, `permissions`, `crd`, `host`. The `reason` label of
    /// `capstan_component_loads_total` and the status API's `kind`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Component(e) => e.reason(),
            Self::Duplicate { .. } | Self::DuplicateScheduler { .. } => "duplicate",
            Self::Canary { .. } => "canary",
            Self::Access { .. } | Self::Wildcard { .. } | Self::WildcardEgress { .. } => "permissions",
            Self::InstallCrd { .. } | Self::CrdNotEstablished(_) | Self::CrdOwned { .. } => "crd",
            Self::Webhook { .. } => "webhook",
            Self::Pull { error, .. } => error.reason(),
            Self::Engine(_)
            | Self::Link(_)
            | Self::Watch { .. }
            | Self::Namespace(_)
            | Self::Leader(_)
            | Self::FailurePolicy(_) => "host",
        }
    }
}

/// Builds a [`Host`].
#[must_use]
pub struct HostBuilder {
    client: kube::Client,
    components: Vec<PathBuf>,
    components_dir: Option<PathBuf>,
    namespaces: Vec<String>,
    install_crds: bool,
    adopt_crds: BTreeSet<String>,
    check_permissions: bool,
    allow_wildcards: bool,
    allow_wildcard_egress: bool,
    limits: Limits,
    function_cache: usize,
    baseline: bool,
    optimize: bool,
    settings: Settings,
    cache_dir: Option<PathBuf>,
    instance: Option<String>,
    leader_election: Option<LeaseSettings>,
    canary: Option<u8>,
    webhooks: Option<Arc<crate::serve::webhook::Registry>>,
    references: Vec<crate::serve::oci::Reference>,
    registry: Option<Arc<crate::serve::oci::Registry>>,
    poll_interval: Duration,
    runtime: Option<Runtime>,
    cluster_name: String,
}

impl std::fmt::Debug for HostBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostBuilder")
            .field("components", &self.components)
            .field("components_dir", &self.components_dir)
            .field("namespaces", &self.namespaces)
            .field("install_crds", &self.install_crds)
            .finish_non_exhaustive()
    }
}

impl HostBuilder {
    /// A host on `client`, with no components yet, watching all namespaces,
    /// not installing CRDs, not reviewing permissions, with default limits
    /// and no compile cache.
    pub fn new(client: kube::Client) -> Self {
        Self {
            client,
            components: Vec::new(),
            components_dir: None,
            namespaces: Vec::new(),
            install_crds: false,
            adopt_crds: BTreeSet::new(),
            check_permissions: false,
            allow_wildcards: false,
            allow_wildcard_egress: false,
            limits: Limits::default(),
            function_cache: 0,
            baseline: false,
            optimize: true,
            settings: Settings::default(),
            cache_dir: None,
            instance: None,
            leader_election: None,
            canary: None,
            webhooks: None,
            references: Vec::new(),
            registry: None,
            poll_interval: crate::serve::follow::POLL_INTERVAL,
            runtime: None,
            cluster_name: crate::serve::fleet::DEFAULT_CLUSTER.to_owned(),
        }
    }

    /// Runs components on `runtime` (its engine, limits and instance
    /// pool) instead of a runtime of its own; [`limits`](Self::limits),
    /// [`function_cache`](Self::function_cache) and
    /// [`baseline`](Self::baseline) are then the runtime's. The hosts of
    /// one [`Fleet`](crate::serve::fleet::Fleet) share one, so a component
    /// serving several clusters is compiled once and its instances come
    /// from one bounded pool.
    pub fn runtime(mut self, runtime: Option<Runtime>) -> Self {
        self.runtime = runtime;
        self
    }

    /// Adds a component to run from an OCI registry, and follows its tag
    /// (see [`crate::serve::follow`]): when the tag moves, the new version is
    /// pulled, verified and swapped in like a changed file. References are
    /// pulled beside the loading of files and the components folder, each
    /// within the registry's deadline
    /// ([`crate::serve::oci::Options::timeout`]); [`start`](Self::start)
    /// waits for none of them. Until its first pull arrives, a reference
    /// shows as `pending` in [`Host::status`] and keeps the host from being
    /// ready ([`Host::readiness`]); one that is refused, or whose component
    /// is rejected, shows as `rejected` (and keeps it from being ready); one
    /// whose registry is down or too slow
    /// ([`unavailable`](crate::serve::oci::Error::is_unavailable)) is tried
    /// again by its follower at each poll.
    pub fn reference(mut self, reference: crate::serve::oci::Reference) -> Self {
        self.references.push(reference);
        self
    }

    /// The registry client references are pulled with. Default: one with
    /// [`crate::serve::oci::Options::default`] and the compile cache's parent as
    /// its blob cache.
    pub fn registry(mut self, registry: Option<Arc<crate::serve::oci::Registry>>) -> Self {
        self.registry = registry;
        self
    }

    /// How often a followed tag is looked up. Default:
    /// [`crate::serve::follow::POLL_INTERVAL`] (30 s).
    pub fn poll_interval(mut self, every: Duration) -> Self {
        self.poll_interval = every;
        self
    }

    /// Adds a component to run. A component named here that is rejected
    /// stops the start.
    pub fn component(mut self, path: impl Into<PathBuf>) -> Self {
        self.components.push(path.into());
        self
    }

    /// Runs every `*.wasm` in `dir` and follows the directory: a new file
    /// starts a controller, a changed one replaces the running version, a
    /// removed one stops it (see [`crate::serve::reload`]). A file that is
    /// rejected is reported in [`Host::status`], not an error.
    pub fn components_dir(mut self, dir: Option<PathBuf>) -> Self {
        self.components_dir = dir;
        self
    }

    /// Watches only `namespace` (`None`: all namespaces, the default).
    /// Replaces what [`namespaces`](Self::namespaces) set.
    pub fn namespace(mut self, namespace: Option<String>) -> Self {
        self.namespaces = namespace.into_iter().collect();
        self
    }

    /// Watches only these namespaces (none: all namespaces, the default).
    /// Namespaced kinds get one watch per namespace, shared by every
    /// controller; cluster-scoped kinds are watched whole. Reads of objects
    /// in other namespaces go to the API server, if the grants allow them.
    ///
    /// ```no_run
    /// # fn f(client: kube::Client) {
    /// let builder = capstan_host::serve::host::HostBuilder::new(client).namespaces(["team-a", "team-b"]);
    /// # }
    /// ```
    pub fn namespaces(mut self, namespaces: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.namespaces = namespaces.into_iter().map(Into::into).collect();
        self
    }

    /// Applies the CRDs components define, and waits until established.
    /// A CRD is applied only where it is the component's own: new, or
    /// marked [`INSTALLED_BY`] that component. One that someone else
    /// installed without the marker (kubectl, Helm, a host older than the
    /// marker) is left as it is, and the component runs with it, unless
    /// the operator names it in [`adopt_crds`](Self::adopt_crds).
    pub fn install_crds(mut self, on: bool) -> Self {
        self.install_crds = on;
        self
    }

    /// CRDs (by name, e.g. `greetings.examples.capstan.dev`) that exist
    /// without the [`INSTALLED_BY`] marker and that the host may take
    /// over (`--adopt-crd`): with [`install_crds`](Self::install_crds) it
    /// applies the component's definition over one and marks it; with
    /// webhooks installed it may set its conversion. A CRD another
    /// component installed is never adopted.
    pub fn adopt_crds(mut self, names: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.adopt_crds = names.into_iter().map(Into::into).collect();
        self
    }

    /// Reviews each component's permissions with the API server before
    /// running it (see [`crate::control::access`]): one that needs more than the host
    /// was granted is rejected.
    pub fn check_permissions(mut self, on: bool) -> Self {
        self.check_permissions = on;
        self
    }

    /// Accepts components whose permissions name a wildcard group or kind
    /// (`*`), which come close to cluster-admin. Default: refused.
    pub fn allow_wildcard_permissions(mut self, on: bool) -> Self {
        self.allow_wildcards = on;
        self
    }

    /// Accepts components whose egress declares a bare `*` host (any
    /// server on the network). Default: refused.
    pub fn allow_wildcard_egress(mut self, on: bool) -> Self {
        self.allow_wildcard_egress = on;
        self
    }

    /// Keeps up to `bytes` of compiled functions in memory, so a new
    /// version of a component recompiles only what changed (see
    /// [`EngineConfig::function_cache`]). Default: 0 (off).
    pub fn function_cache(mut self, bytes: usize) -> Self {
        self.function_cache = bytes;
        self
    }

    /// Serves a component the compile cache does not hold from Winch's
    /// code first, and swaps in cranelift's when it is ready (see
    /// [`EngineConfig::baseline`]). Default: false; `capstan run` and
    /// `capstan dev` turn it on.
    pub fn baseline(mut self, on: bool) -> Self {
        self.baseline = on;
        self
    }

    /// With [`baseline`](Self::baseline) on: whether cranelift's code
    /// replaces Winch's (see [`Loader::optimize`]). Off, Winch's code serves
    /// for good and goes into the compile cache, for a short run such as
    /// `capstan e2e`'s: its next case loads the component from the cache.
    /// Default: true.
    pub fn optimize(mut self, on: bool) -> Self {
        self.optimize = on;
        self
    }

    /// Guest limits.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Controller settings (backoff, rediscovery).
    pub fn settings(mut self, settings: Settings) -> Self {
        self.settings = settings;
        self
    }

    /// The clusters of the host process (its [`Fleet`](crate::serve::fleet::Fleet)),
    /// which a fleet controller that runs here reaches its members
    /// through. Default: none, a host of one cluster.
    pub fn clusters(mut self, clusters: Option<Arc<crate::control::clusters::Clusters>>) -> Self {
        self.settings.clusters = clusters;
        self
    }

    /// Compile cache directory.
    pub fn cache_dir(mut self, dir: Option<PathBuf>) -> Self {
        self.cache_dir = dir;
        self
    }

    /// The name of the cluster this host serves, as components see it in
    /// their requests (`cluster` of a reconcile or schedule request):
    /// the name a [`Fleet`](crate::serve::fleet::Fleet) engaged it by.
    /// Default: [`DEFAULT_CLUSTER`](crate::serve::fleet::DEFAULT_CLUSTER),
    /// `default`.
    pub fn cluster_name(mut self, name: impl Into<String>) -> Self {
        self.cluster_name = name.into();
        self
    }

    /// Name of this replica in Events (`reportingInstance`).
    pub fn instance(mut self, instance: Option<String>) -> Self {
        self.instance = instance;
        self
    }

    /// Runs each new version of a running controller on `percent` % of its
    /// objects first (a canary; chosen by a stable hash of namespace and
    /// name), the others staying on the version in use. At the canary's
    /// first error or trap its version is rejected and its share is
    /// reconciled again by the version in use; once every object of its
    /// share was reconciled successfully, it replaces the version in use
    /// and every object is reconciled by it. Only for versions that watch
    /// the same kinds; others are swapped in at once. Default: none.
    pub fn canary(mut self, percent: Option<u8>) -> Self {
        self.canary = percent;
        self
    }

    /// Publishes every component version that declares webhooks in
    /// `registry` (which [`crate::serve::webhook::serve`] serves), and, if the
    /// registry installs, applies their webhook configurations when they
    /// load (see [`crate::serve::webhook::install`]). Default: no webhooks served.
    pub fn webhooks(mut self, registry: Option<Arc<crate::serve::webhook::Registry>>) -> Self {
        self.webhooks = registry;
        self
    }

    /// Elects a leader per controller among the host's replicas (see
    /// [`crate::control::leader`]): each controller keeps its caches warm, and
    /// reconciles only while this replica holds its Lease
    /// (`capstan-<controller>` in `settings.namespace`). Default: no
    /// election, every controller reconciles.
    pub fn leader_election(mut self, settings: Option<LeaseSettings>) -> Self {
        self.leader_election = settings;
        self
    }

    /// A runtime with `limits` on an engine of its own (see
    /// [`runtime`](Self::runtime)).
    ///
    /// # Errors
    ///
    /// When the engine cannot be set up or the imports cannot be linked.
    pub fn new_runtime(limits: Limits, function_cache: usize, baseline: bool) -> Result<Runtime, Error> {
        let engine = Engine::new(
            EngineConfig::default().memory_limit(limits.memory).function_cache(function_cache).baseline(baseline),
        )?;
        Runtime::new(&engine, limits).map_err(|e| Error::Link(format!("{e:#}")))
    }

    /// Loads every component file, installs CRDs if asked, starts the
    /// controllers, starts following the components directory (its first
    /// look loads its `*.wasm` files), and starts pulling the references
    /// beside all that without waiting for them (see
    /// [`reference`](Self::reference)): a slow registry delays neither the
    /// start nor the folder.
    ///
    /// # Errors
    ///
    /// Any [`Error`]: a rejected component named with
    /// [`component`](Self::component) stops the start, naming the file
    /// (unless a components directory or a reference may still bring
    /// something to run).
    pub async fn start(self) -> Result<Host, Error> {
        if let Some(bad) = self.namespaces.iter().find(|ns| !crate::manifest::is_dns1123_label(ns)) {
            return Err(Error::Namespace(bad.clone()));
        }
        let runtime = match self.runtime {
            Some(runtime) => runtime,
            None => Self::new_runtime(self.limits, self.function_cache, self.baseline)?,
        };
        let loader = Loader::new(runtime.clone(), self.cache_dir.clone())
            .optimize(self.optimize)
            .in_cluster(self.cluster_name.as_str().into());
        let cluster = KubeCluster::new(self.client.clone(), self.instance.clone());
        let informers = Arc::new(
            Informers::new(cluster.clone(), self.namespaces.clone()).in_cluster(self.cluster_name.as_str().into()),
        );
        let elections = self.leader_election.map(|s| Elections::new(self.client.clone(), s)).transpose()?;
        let registry = self.registry.unwrap_or_else(|| {
            let blobs = self.cache_dir.as_deref().and_then(Path::parent).map(Path::to_owned);
            Arc::new(crate::serve::oci::Registry::new(crate::serve::oci::Options::default().cache_dir(blobs)))
        });
        let shared = Arc::new(Shared {
            registry,
            poll_interval: self.poll_interval,
            runtime,
            loader,
            backend: Arc::new(cluster.clone()),
            cluster,
            informers,
            settings: self.settings,
            namespaces: self.namespaces,
            cluster_name: self.cluster_name.into(),
            install_crds: self.install_crds,
            adopt_crds: self.adopt_crds,
            check_permissions: self.check_permissions,
            allow_wildcards: self.allow_wildcards,
            allow_wildcard_egress: self.allow_wildcard_egress,
            canary: self.canary,
            elections,
            webhooks: self.webhooks,
            slots: Mutex::new(Vec::new()),
            changes: tokio::sync::Mutex::new(()),
        });
        let host = Host { shared: Arc::clone(&shared), dir: Mutex::new(None), follows: Mutex::new(Vec::new()) };
        let more_may_come = self.components_dir.is_some() || !self.references.is_empty();
        // References are pulled beside the loading of files and the look at
        // the components folder, each in its follower's task, within the
        // registry's deadline; the start waits for none of them (one that
        // has not arrived shows as pending).
        for reference in self.references {
            let key = PathBuf::from(reference.to_string());
            let follow = Follow::start(Arc::clone(&shared), key, reference).await;
            lock(&host.follows).push(follow);
        }
        // A file that is rejected is reported (log, `/status`, `/readyz`)
        // and the others run; the start fails only when none of them does
        // and nothing else may come.
        let mut first_rejection = None;
        for path in &self.components {
            if let Err(e) = shared.load(path).await {
                first_rejection.get_or_insert(e);
            }
        }
        if let Some(e) = first_rejection
            && !more_may_come
            && shared.paths().iter().all(|p| !shared.runs(p))
        {
            host.shutdown().await;
            return Err(e);
        }
        if let Some(dir) = self.components_dir {
            match DirWatch::start(Arc::clone(&shared), dir).await {
                Ok(watch) => *lock(&host.dir) = Some(watch),
                Err(e) => {
                    host.shutdown().await;
                    return Err(e);
                }
            }
        }
        if let Err(e) = shared.check_policy_components(more_may_come) {
            host.shutdown().await;
            return Err(e);
        }
        Ok(host)
    }
}

/// What [`Host::load`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// A new controller started.
    Started(String),
    /// The running controller now uses the new version. `restarted` if
    /// what it watches changed, so its subscriptions were made anew.
    Swapped {
        /// The controller.
        name: String,
        /// Whether its watches were restarted.
        restarted: bool,
    },
    /// The file is the version already running.
    Unchanged(String),
    /// The new version runs on a canary share of the objects first (see
    /// [`HostBuilder::canary`]).
    OnTrial {
        /// The controller.
        name: String,
        /// The share, in percent.
        percent: u8,
    },
}

/// One component version that runs.
#[derive(Clone, Debug)]
struct Version {
    /// The component's name.
    name: String,
    digest: String,
    contract: String,
    loaded_at: Timestamp,
    source: CompileSource,
    compile_time: Duration,
    /// Its code: which compiler made what runs now.
    pre: Pre,
    /// The registry it was pulled from, if it was.
    artifact: Option<Artifact>,
}

/// Where a version pulled from a registry came from.
#[derive(Clone, Debug)]
pub(crate) struct Artifact {
    /// The reference followed (`oci://…:TAG`).
    pub(crate) reference: String,
    /// `sha256:` digest of the manifest it pointed at.
    pub(crate) manifest_digest: String,
}

/// A component file that was rejected.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Rejection {
    /// `sha256:` digest of the rejected file, if it could be read.
    pub digest: Option<String>,
    /// Why, as a short word (see [`Error::kind`]).
    pub kind: String,
    /// The whole reason.
    pub reason: String,
    /// When.
    pub at: String,
}

/// One component file the host knows.
struct Slot {
    path: PathBuf,
    controller: Option<Arc<Controller>>,
    /// Its controller's Lease, with leader election.
    leadership: Option<Leadership>,
    /// Its scheduler, if the component declares one.
    scheduler: Option<Arc<Scheduler>>,
    version: Option<Version>,
    swaps: u64,
    rejected: Option<Rejection>,
}

/// What the host's status API reports per component file.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ComponentStatus {
    /// The file, or the `oci://` reference given on the command line.
    pub path: PathBuf,
    /// The OCI reference the running version was pulled from (followed:
    /// a new digest behind its tag is swapped in), if it was.
    pub reference: Option<String>,
    /// `sha256:` digest of the OCI manifest of the running version.
    pub manifest_digest: Option<String>,
    /// Controller name (none if no version of the file was ever accepted).
    pub name: Option<String>,
    /// `sha256:` digest of the version that runs.
    pub digest: Option<String>,
    /// Contract version it was built against.
    pub contract: Option<String>,
    /// When the running version was loaded (RFC 3339).
    pub loaded_at: Option<String>,
    /// How it was loaded: `compiled` (by cranelift), `cache`, or
    /// `baseline` (by Winch, with cranelift's code to follow).
    pub compile: Option<&'static str>,
    /// Compile (or cache load) time in milliseconds.
    pub compile_ms: Option<f64>,
    /// The code that runs now: `baseline` (Winch's, until cranelift's is
    /// ready) or `optimized`.
    pub tier: Option<&'static str>,
    /// `running`, `standby` (another replica leads), `syncing`,
    /// `waiting-for-kinds`, `stopped`, `serving` (no reconcile loop:
    /// webhooks or a scheduler only), `elsewhere` (the component runs in
    /// other clusters of the host: a fleet controller's home, or those its
    /// manifest names), `pending` (a reference whose first
    /// pull has not arrived yet), or `rejected` (nothing runs from this
    /// file).
    pub state: &'static str,
    /// Whether this replica leads the controller (with leader election).
    pub leading: Option<bool>,
    /// A new version on trial for a share of the objects (with
    /// [`HostBuilder::canary`]).
    pub canary: Option<crate::control::reconciler::TrialState>,
    /// Kinds it waits for, in `waiting-for-kinds`.
    pub waiting_for: Vec<String>,
    /// Versions swapped in since the first.
    pub swaps: u64,
    /// Successful reconciles.
    pub reconciled: u64,
    /// Failed reconciles.
    pub failed: u64,
    /// Objects waiting in its queue.
    pub queue: usize,
    /// Its last error.
    pub last_error: Option<String>,
    /// The last rejected version of this file, if the file changed to
    /// something that could not run (the previous version keeps serving).
    pub rejected: Option<Rejection>,
    /// The admission webhooks the running version serves, with the
    /// `failurePolicy` each is installed with and who chose it (empty
    /// when the host serves no webhooks).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub webhooks: Vec<crate::serve::webhook::policy::WebhookStatus>,
}

/// The parts every controller of a host shares, and its component files.
pub(crate) struct Shared {
    /// Where references are pulled from.
    pub(crate) registry: Arc<crate::serve::oci::Registry>,
    /// How often followed tags are looked up.
    pub(crate) poll_interval: Duration,
    runtime: Runtime,
    loader: Loader,
    cluster: KubeCluster,
    backend: Arc<dyn Cluster>,
    informers: Arc<Informers>,
    settings: Settings,
    namespaces: Vec<String>,
    /// The name of the cluster, as components see it.
    cluster_name: Arc<str>,
    install_crds: bool,
    adopt_crds: BTreeSet<String>,
    check_permissions: bool,
    allow_wildcards: bool,
    allow_wildcard_egress: bool,
    canary: Option<u8>,
    elections: Option<Elections>,
    webhooks: Option<Arc<crate::serve::webhook::Registry>>,
    slots: Mutex<Vec<Slot>>,
    /// Serialises loads and unloads: one change at a time, in order.
    changes: tokio::sync::Mutex<()>,
}

/// What of a manifest decides the watches and workers of a controller: a
/// new version that changes none of it is swapped in place.
fn shape(m: &Manifest) -> impl PartialEq + '_ {
    (&m.name, &m.primary, &m.owns, &m.watches, m.max_concurrency, m.roles.reconcile)
}

impl Shared {
    /// Loads (or reloads) the component at `path`; see [`Host::load`].
    pub(crate) async fn load(self: &Arc<Self>, path: &Path) -> Result<Change, Error> {
        let _one_at_a_time = self.changes.lock().await;
        // The component itself, gunzipped, its header and size checked
        // before the rest is read; its digest as the loader computes it.
        let bytes = match component::read(path).await {
            Ok(bytes) => bytes,
            Err(e) => {
                metrics().component_rejected(e.reason());
                return Err(self.reject(path, None, e.into()));
            }
        };
        let digest = component::digest(&bytes);
        self.load_bytes(path, bytes, digest, None).await
    }

    /// Loads the component at `path` now if it is complete and a version
    /// seen before: its bytes read whole and their digest is one the compile
    /// cache holds, or the one that runs from `path`. Returns `None`
    /// without loading otherwise (a new version, or a file still being
    /// written, waits until it holds still; see [`crate::serve::reload`]).
    pub(crate) async fn load_if_known(self: &Arc<Self>, path: &Path) -> Option<Result<Change, Error>> {
        let started = Instant::now();
        let bytes = component::read(path).await.ok()?;
        let read = started.elapsed();
        let digest = component::digest(&bytes);
        tracing::debug!(
            path = %path.display(),
            read_ms = read.as_secs_f64() * 1000.0,
            hash_ms = (started.elapsed() - read).as_secs_f64() * 1000.0,
            "read and hashed"
        );
        let running =
            lock(&self.slots).iter().any(|s| s.path == path && s.version.as_ref().is_some_and(|v| v.digest == digest));
        if !running && !self.loader.is_cached(&digest) {
            return None;
        }
        let _one_at_a_time = self.changes.lock().await;
        Some(self.load_bytes(path, bytes, digest, None).await)
    }

    /// Loads (or reloads) a component pulled from a registry under `key`
    /// (the reference, or the `*.oci` file naming it).
    pub(crate) async fn load_pulled(
        self: &Arc<Self>,
        key: &Path,
        followed: &crate::serve::oci::Reference,
        pulled: crate::serve::oci::Pulled,
    ) -> Result<Change, Error> {
        let _one_at_a_time = self.changes.lock().await;
        let artifact = Artifact { reference: followed.to_string(), manifest_digest: pulled.manifest_digest.clone() };
        let bytes = match component::decode(key, pulled.bytes) {
            Ok(bytes) => bytes,
            Err(e) => {
                metrics().component_rejected(e.reason());
                return Err(self.reject(key, Some(pulled.layer_digest.trim_start_matches("sha256:")), e.into()));
            }
        };
        let digest = component::digest(&bytes);
        self.load_bytes(key, bytes, digest, Some(artifact)).await
    }

    /// Records that what `key` names could not be pulled (it shows in the
    /// status as a rejection; a running version keeps serving).
    pub(crate) fn reject_pull(&self, key: &Path, digest: Option<&str>, error: crate::serve::oci::Error) -> Error {
        self.reject(key, digest.map(|d| d.trim_start_matches("sha256:")), Error::Pull { path: key.to_owned(), error })
    }

    /// Notes that `key` (a followed reference) is expected: it shows as
    /// `pending` until its first pull arrives, unless the host knows it
    /// already (a version runs from it, or it was rejected).
    pub(crate) fn expect(&self, key: &Path) {
        let mut slots = lock(&self.slots);
        if slots.iter().all(|s| s.path != key) {
            slots.push(Slot {
                path: key.to_owned(),
                controller: None,
                leadership: None,
                scheduler: None,
                version: None,
                swaps: 0,
                rejected: None,
            });
        }
    }

    /// Whether some version runs from `key`.
    pub(crate) fn runs(&self, key: &Path) -> bool {
        lock(&self.slots).iter().any(|s| s.path == key && s.version.is_some())
    }

    /// Loads `bytes` (a component, decompressed) as the new version of
    /// `path`; the caller holds `changes`.
    async fn load_bytes(
        self: &Arc<Self>,
        path: &Path,
        bytes: Vec<u8>,
        digest: String,
        artifact: Option<Artifact>,
    ) -> Result<Change, Error> {
        let (running, name) = {
            let slots = lock(&self.slots);
            let slot = slots.iter().find(|s| s.path == path);
            let running = slot.and_then(|s| s.version.as_ref().map(|v| v.digest.clone()));
            (running, slot.and_then(|s| s.version.as_ref().map(|v| v.name.clone())))
        };
        if let (Some(running), Some(name)) = (running, name)
            && running == digest
        {
            // Back to the version that runs (e.g. a broken build replaced
            // by the good one): nothing to do but forget the rejection.
            if let Some(slot) = lock(&self.slots).iter_mut().find(|s| s.path == path) {
                slot.rejected = None;
                if let (Some(version), Some(artifact)) = (slot.version.as_mut(), artifact) {
                    version.artifact = Some(artifact);
                }
            }
            return Ok(Change::Unchanged(name));
        }
        let (loaded, trial) = match self.admit(path, bytes, digest.clone()).await {
            Ok(admitted) => admitted,
            Err(e) => return Err(self.reject(path, Some(&digest), e)),
        };
        self.install(path, loaded, artifact, trial).await.map_err(|e| self.reject(path, Some(&digest), e))
    }

    /// Whether a new version declaring `manifest` of the component that
    /// runs from `path` goes on trial for a share of the objects first (a
    /// canary, see [`HostBuilder::canary`]): a canary is set, and the
    /// running controller has the same name and shape and reconciles.
    fn goes_on_trial(&self, path: &Path, manifest: &Manifest) -> bool {
        let current = lock(&self.slots).iter().find(|s| s.path == path).and_then(|s| s.controller.clone());
        current.is_some_and(|old| {
            old.name() == manifest.name
                && self.canary.is_some_and(|p| p < 100)
                && shape(&old.reconciler().component().manifest) == shape(manifest)
                && matches!(old.state(), State::Running | State::Standby)
        })
    }

    /// Compiles and checks a component: everything that can reject it.
    /// Returns it, and whether it goes on trial first (then its webhook
    /// configurations wait for its promotion: until then the version in
    /// use answers every review).
    async fn admit(&self, path: &Path, bytes: Vec<u8>, digest: String) -> Result<(Loaded, bool), Error> {
        let started = Instant::now();
        let loaded = self.loader.load_digested(path, bytes, digest).await?;
        let name = loaded.manifest.name.clone();
        let other = lock(&self.slots)
            .iter()
            .find(|s| s.path != path && s.version.as_ref().is_some_and(|v| v.name == name))
            .map(|s| s.path.clone());
        if let Some(other) = other {
            return Err(Error::Duplicate { path: path.to_owned(), name, other });
        }
        if let Some(scheduler) = &loaded.manifest.roles.scheduler {
            let other = lock(&self.slots).iter().find_map(|s| {
                let serving = s.controller.as_ref()?.reconciler().component();
                (s.path != path && serving.manifest.roles.scheduler.as_ref() == Some(scheduler))
                    .then(|| (s.path.clone(), serving.manifest.name.clone()))
            });
            if let Some((other, other_name)) = other {
                let scheduler = scheduler.clone();
                return Err(Error::DuplicateScheduler { path: path.to_owned(), name, scheduler, other, other_name });
            }
        }
        if let Some(p) = loaded.manifest.wildcard_permissions().next().filter(|_| !self.allow_wildcards) {
            let verbs: Vec<&str> = p.verbs.iter().map(|v| v.as_str()).collect();
            let what = format!("{} on {}/{}", verbs.join(","), p.group, p.kind);
            return Err(Error::Wildcard { path: path.to_owned(), what });
        }
        if let Some(origin) = loaded.manifest.egress.wildcard().filter(|_| !self.allow_wildcard_egress) {
            return Err(Error::WildcardEgress { path: path.to_owned(), origin: origin.to_string() });
        }
        // A new version that declares what the running one declares asks
        // nothing new of the cluster: its access was checked, its CRDs and
        // webhooks installed, when the running one was admitted.
        let running = lock(&self.slots)
            .iter()
            .find(|s| s.path == path)
            .and_then(|s| s.controller.as_ref())
            .map(|c| Arc::clone(&c.reconciler().component().manifest));
        let declared_before = running.as_ref().is_some_and(|m| **m == *loaded.manifest);
        // A component that runs in other clusters only asks nothing of
        // this one.
        let here = loaded.manifest.runs_in(&self.cluster_name);
        let trial = self.goes_on_trial(path, &loaded.manifest);
        if !declared_before && here {
            self.prepare_cluster(path, &loaded.manifest, running.as_deref(), !trial).await?;
        } else if !declared_before {
            self.prepare_member(path, &loaded.manifest).await?;
        }
        tracing::info!(
            controller = %name,
            path = %path.display(),
            digest = %loaded.digest,
            source = ?loaded.source,
            compile_ms = loaded.compile_time.as_secs_f64() * 1000.0,
            admit_ms = started.elapsed().as_secs_f64() * 1000.0,
            declared_before,
            "component loaded"
        );
        Ok((loaded, trial))
    }

    /// Checks the host's access for what `manifest` declares and installs
    /// its CRDs and, with `webhooks`, its webhook configurations, as
    /// configured (see [`install_webhooks`](Self::install_webhooks));
    /// `running` is the manifest of the version it replaces.
    async fn prepare_cluster(
        &self,
        path: &Path,
        manifest: &Manifest,
        running: Option<&Manifest>,
        webhooks: bool,
    ) -> Result<(), Error> {
        // The operator's failure policies name what this version declares:
        // checked before anything is applied.
        if let Some(install) = self.webhooks.as_ref().and_then(|w| w.install_settings()) {
            install
                .failure_policies
                .check(manifest)
                .map_err(|error| Error::Webhook { path: path.to_owned(), error })?;
        }
        if self.check_permissions {
            access::check(&self.cluster, manifest, &self.namespaces, self.install_crds)
                .await
                .map_err(|error| Error::Access { path: path.to_owned(), error })?;
        }
        if self.install_crds {
            for crd in &manifest.crds {
                install_crd(&self.cluster, crd, &manifest.name, &self.adopt_crds).await?;
            }
        }
        if webhooks {
            self.install_webhooks(path, manifest, running).await?;
        }
        Ok(())
    }

    /// Checks, in a member cluster of `manifest`'s fleet, the host's access
    /// for what the component needs there (see [`access::check_member`]),
    /// then, with `install_crds`, installs the CRDs it declares of the kinds it owns: its
    /// children there need them, and the host that reconciles in the home
    /// has no other way to put them there. The same rules as in the home:
    /// a CRD someone else installed is left alone unless adopted. Nothing
    /// for a component this cluster is not a member of.
    async fn prepare_member(&self, path: &Path, manifest: &Manifest) -> Result<(), Error> {
        if !manifest.fleet.as_ref().is_some_and(|f| f.has_member(&self.cluster_name)) {
            return Ok(());
        }
        if self.check_permissions {
            access::check_member(&self.cluster, manifest, &self.namespaces, self.install_crds)
                .await
                .map_err(|error| Error::Access { path: path.to_owned(), error })?;
        }
        if !self.install_crds {
            return Ok(());
        }
        for owned in &manifest.owns {
            if let Some(crd) = manifest.crd_for(&owned.kind) {
                install_crd(&self.cluster, crd, &manifest.name, &self.adopt_crds).await?;
            }
        }
        Ok(())
    }

    /// Installs the webhook configurations (and conversion) `manifest`
    /// declares, if the host installs webhooks; `running` is the manifest
    /// of the version it replaces, whose configurations of a type
    /// `manifest` no longer declares are withdrawn.
    async fn install_webhooks(
        &self,
        path: &Path,
        manifest: &Manifest,
        running: Option<&Manifest>,
    ) -> Result<(), Error> {
        let Some(webhooks) = &self.webhooks else { return Ok(()) };
        let Some(install) = webhooks.install_for(&self.cluster_name) else { return Ok(()) };
        crate::serve::webhook::install::install(
            &self.cluster,
            manifest,
            &install,
            &self.namespaces,
            webhooks.takes_over(),
            &self.adopt_crds,
        )
        .await
        .map_err(|error| Error::Webhook { path: path.to_owned(), error })?;
        if let Some(running) = running
            && let Err(e) =
                crate::serve::webhook::install::withdraw_dropped(&self.cluster, running, manifest, &install).await
        {
            tracing::warn!(component = %manifest.name, error = %e, "cannot remove a webhook configuration the new version no longer needs");
        }
        Ok(())
    }

    fn reject(&self, path: &Path, digest: Option<&str>, error: Error) -> Error {
        tracing::warn!(path = %path.display(), reason = error.kind(), error = %error, "component rejected");
        if !matches!(error, Error::Component(_)) {
            // The loader counted what it rejected itself; these are the
            // host's own reasons, after the component loaded.
            metrics().component_rejected(error.kind());
        }
        let rejection = Rejection {
            digest: digest.map(|d| format!("sha256:{d}")),
            kind: error.kind().to_owned(),
            reason: error.to_string(),
            at: Timestamp::now().to_string(),
        };
        let mut slots = lock(&self.slots);
        match slots.iter_mut().find(|s| s.path == path) {
            Some(slot) => slot.rejected = Some(rejection),
            None => slots.push(Slot {
                path: path.to_owned(),
                controller: None,
                leadership: None,
                scheduler: None,
                version: None,
                swaps: 0,
                rejected: Some(rejection),
            }),
        }
        error
    }

    /// Runs an admitted component: swaps it into the controller its file
    /// ran, or starts a new controller.
    async fn install(
        self: &Arc<Self>,
        path: &Path,
        loaded: Loaded,
        artifact: Option<Artifact>,
        trial: bool,
    ) -> Result<Change, Error> {
        let version = Version {
            artifact,
            name: loaded.manifest.name.clone(),
            digest: loaded.digest.clone(),
            contract: loaded.contract.clone(),
            loaded_at: Timestamp::now(),
            source: loaded.source,
            compile_time: loaded.compile_time,
            pre: loaded.pre.clone(),
        };
        let name = loaded.manifest.name.clone();
        let (current, leading) = {
            let slots = lock(&self.slots);
            let slot = slots.iter().find(|s| s.path == path);
            (slot.and_then(|s| s.controller.clone()), slot.and_then(|s| s.leadership.as_ref().map(Leadership::watch)))
        };
        if let Some(webhooks) = &self.webhooks {
            // The file held another component before: its webhooks go, as
            // for a component removed (see `unload`).
            let previous = lock(&self.slots).iter().find(|s| s.path == path).and_then(|s| s.version.clone());
            if let Some(previous) = previous.filter(|v| v.name != name) {
                let served = webhooks.get_in(&self.cluster_name, &previous.name).ok().map(|s| Arc::clone(&s.component));
                webhooks.withdraw(&self.cluster_name, &previous.name);
                if let (Some(install), Some(component)) = (webhooks.install_for(&self.cluster_name), served)
                    && let Err(e) =
                        crate::serve::webhook::install::uninstall(&self.cluster, &component.manifest, &install).await
                {
                    tracing::warn!(component = %previous.name, error = %e, "cannot remove the webhook configurations");
                }
            }
        }
        let mut joined = None;
        if let Some(old) = &current
            && old.reconciler().end_trial(false).is_some()
        {
            tracing::info!(controller = %old.name(), "canary abandoned: a newer version landed");
        }
        let (controller, change) = match current {
            Some(old) if trial && old.name() == name => {
                // A canary: the new version reconciles its share first; the
                // judge promotes it, or rejects it at its first failure.
                let percent = self.canary.unwrap_or(100);
                let share = old.reconciler().start_trial(loaded, percent, old.primary_objects());
                tracing::info!(controller = %name, digest = %version.digest, percent, objects = share.len(), "canary started");
                old.resync(share.iter().cloned());
                tokio::spawn(Arc::clone(self).judge(path.to_owned(), Arc::clone(&old), version, share));
                return Ok(Change::OnTrial { name, percent });
            }
            Some(old) if old.name() == name => {
                let same_shape = shape(&old.reconciler().component().manifest) == shape(&loaded.manifest);
                self.publish(&loaded);
                let replaced = old.reconciler().swap(loaded);
                tracing::info!(controller = %name, from = %replaced.digest, to = %version.digest, "component swapped");
                if same_shape {
                    let queued = old.resync_all();
                    tracing::info!(controller = %name, objects = queued, "resync after swap");
                    (old, Change::Swapped { name, restarted: false })
                } else {
                    // What it watches changed: new subscriptions; the shared
                    // watches (and other controllers) are not touched.
                    old.stop().await;
                    let new = Arc::new(Controller::resume(&old, leading));
                    tracing::info!(controller = %name, "watches restarted after swap");
                    (new, Change::Swapped { name, restarted: true })
                }
            }
            other => {
                // Joined before the old controller stops: if it fails, the
                // old one keeps serving.
                let here = loaded.manifest.runs_in(&self.cluster_name);
                let leadership = match &self.elections {
                    Some(e) if loaded.manifest.roles.reconcile && here => Some(e.join(&lease_name(&name))?),
                    _ => None,
                };
                if let Some(old) = other {
                    tracing::info!(controller = %old.name(), "stopping: its file now holds another controller");
                    old.stop().await;
                    self.resign(path).await;
                }
                if here {
                    self.publish(&loaded);
                }
                let mut reconciler =
                    Reconciler::within(self.runtime.clone(), loaded, Arc::clone(&self.backend), &self.namespaces)
                        .in_cluster(Arc::clone(&self.cluster_name));
                if let Some(clusters) = &self.settings.clusters {
                    reconciler = reconciler.with_members(Arc::clone(clusters) as Arc<dyn cluster::Members>);
                }
                let reconciler = Arc::new(reconciler);
                let controller = Controller::start(
                    reconciler,
                    self.cluster.clone(),
                    Arc::clone(&self.informers),
                    self.settings.clone(),
                    leadership.as_ref().map(Leadership::watch),
                );
                joined = leadership;
                (Arc::new(controller), Change::Started(name))
            }
        };
        if !matches!(change, Change::Swapped { restarted: false, .. }) {
            // The controller that stopped or restarted may leave watches no
            // one uses: stop them once the new one has subscribed to what
            // it needs (so that those are not relisted).
            let (informers, controller) = (Arc::clone(&self.informers), Arc::clone(&controller));
            tokio::spawn(async move {
                for _ in 0..600 {
                    if !matches!(controller.state(), State::WaitingForKinds(_) | State::Syncing) {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                drop(controller);
                informers.prune();
            });
        }
        let old = lock(&self.slots).iter_mut().find(|s| s.path == path).and_then(|s| s.scheduler.take());
        let scheduler = self.scheduler(&controller, old).await.unwrap_or_else(|e| {
            tracing::error!(controller = %controller.name(), error = %e, "cannot start its scheduler");
            None
        });
        let mut slots = lock(&self.slots);
        let swapped = matches!(change, Change::Swapped { .. });
        match slots.iter_mut().find(|s| s.path == path) {
            Some(slot) => {
                slot.controller = Some(controller);
                slot.scheduler = scheduler;
                if joined.is_some() {
                    slot.leadership = joined;
                }
                slot.version = Some(version);
                slot.rejected = None;
                slot.swaps += u64::from(swapped);
            }
            None => slots.push(Slot {
                path: path.to_owned(),
                controller: Some(controller),
                leadership: joined,
                scheduler,
                version: Some(version),
                swaps: 0,
                rejected: None,
            }),
        }
        Ok(change)
    }

    /// The scheduler of `controller`'s component: `old` if it follows the
    /// same reconciler under the same name, else a new one (`old` stopped
    /// first, releasing its Lease), or none if the component declares none.
    async fn scheduler(
        &self,
        controller: &Arc<Controller>,
        old: Option<Arc<Scheduler>>,
    ) -> Result<Option<Arc<Scheduler>>, Error> {
        let manifest = Arc::clone(&controller.reconciler().component().manifest);
        let wanted = manifest.roles.scheduler.clone().filter(|_| manifest.runs_in(&self.cluster_name));
        if let Some(old) = old {
            if wanted.as_deref() == Some(old.name()) && Arc::ptr_eq(old.reconciler(), controller.reconciler()) {
                return Ok(Some(old));
            }
            old.stop().await;
        }
        let Some(name) = wanted else { return Ok(None) };
        let setup = scheduler::Setup {
            runtime: self.runtime.clone(),
            cluster: self.cluster.clone(),
            backend: Arc::clone(&self.backend),
            namespaces: self.namespaces.clone(),
            settings: scheduler::Settings { backoff: self.settings.backoff, ..scheduler::Settings::default() },
            leadership: self.elections.as_ref().map(|e| e.join(&scheduler::lease(&name))).transpose()?,
        };
        let started =
            Scheduler::start(Arc::clone(controller.reconciler()), setup).expect("the component declares a scheduler");
        tracing::info!(controller = %controller.name(), scheduler = %name, "scheduler started");
        Ok(Some(Arc::new(started)))
    }

    /// Makes `loaded` the version that serves its webhooks, if any.
    fn publish(&self, loaded: &Loaded) {
        let roles = &loaded.manifest.roles;
        match &self.webhooks {
            Some(webhooks) => {
                let grants =
                    Arc::new(crate::runtime::grants::Grants::from_manifest(&loaded.manifest).within(&self.namespaces));
                webhooks.publish(
                    self.runtime.clone(),
                    Arc::new(loaded.clone()),
                    grants,
                    Arc::clone(&self.backend),
                    Arc::clone(&self.cluster_name),
                );
            }
            None if !roles.admission.is_empty() || !roles.conversion.is_empty() => {
                tracing::warn!(component = %loaded.manifest.name, "component declares webhooks, but this host serves none (--webhook-listen)");
            }
            None => {}
        }
    }

    /// Watches a canary (see [`HostBuilder::canary`]): rejects its version
    /// at its first failure (its share is reconciled again by the version
    /// in use), promotes it once every object of its share was reconciled
    /// successfully (or after [`CANARY_TIMEOUT`]), then resyncs every object.
    async fn judge(
        self: Arc<Self>,
        path: PathBuf,
        controller: Arc<Controller>,
        version: Version,
        share: Vec<ObjectRef>,
    ) {
        let reconciler = Arc::clone(controller.reconciler());
        let started = Instant::now();
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let Some(trial) = reconciler.trial().filter(|t| t.digest == version.digest) else { return };
            if let Some(failure) = trial.failure {
                reconciler.end_trial(false);
                controller.resync(share);
                let error = Error::Canary { path: path.clone(), failure };
                self.reject(&path, Some(&version.digest), error);
                return;
            }
            let timed_out = started.elapsed() > CANARY_TIMEOUT;
            if trial.pending == 0 || timed_out {
                if timed_out {
                    tracing::warn!(controller = %controller.name(), pending = trial.pending, "canary not finished in time, promoted");
                }
                // Its webhook configurations, held back while it was on
                // trial, go in before it answers a review.
                if let Some(candidate) = reconciler.trial_component() {
                    let running = reconciler.component();
                    if let Err(error) = self.install_webhooks(&path, &candidate.manifest, Some(&running.manifest)).await
                    {
                        reconciler.end_trial(false);
                        controller.resync(share);
                        self.reject(&path, Some(&version.digest), error);
                        return;
                    }
                }
                reconciler.end_trial(true);
                self.publish(&reconciler.component());
                let queued = controller.resync_all();
                tracing::info!(controller = %controller.name(), digest = %version.digest, objects = queued, "canary promoted");
                if let Some(slot) = lock(&self.slots).iter_mut().find(|s| s.path == path) {
                    slot.version = Some(version);
                    slot.rejected = None;
                    slot.swaps += 1;
                }
                return;
            }
        }
    }

    /// Releases the Lease of the controller of `path`, if it has one, so
    /// that a standby replica takes over at once.
    async fn resign(&self, path: &Path) {
        let leadership = lock(&self.slots).iter_mut().find(|s| s.path == path).and_then(|s| s.leadership.take());
        if let Some(leadership) = leadership
            && let Err(e) = leadership.resign().await
        {
            tracing::warn!(path = %path.display(), error = %e, "cannot release lease");
        }
    }

    /// Stops the controller of `path` and forgets the file; see
    /// [`Host::unload`].
    pub(crate) async fn unload(&self, path: &Path) -> Option<String> {
        let _one_at_a_time = self.changes.lock().await;
        let slot = {
            let mut slots = lock(&self.slots);
            let index = slots.iter().position(|s| s.path == path)?;
            slots.remove(index)
        };
        if let Some(scheduler) = &slot.scheduler {
            scheduler.stop().await;
        }
        if let (Some(webhooks), Some(version)) = (&self.webhooks, &slot.version) {
            let manifest = webhooks.get_in(&self.cluster_name, &version.name).ok().map(|s| Arc::clone(&s.component));
            webhooks.withdraw(&self.cluster_name, &version.name);
            // Removed for good: the API server must not keep calling for
            // it (a hot swap does not come here, and a stopping host
            // keeps its configurations for its restart).
            if let (Some(install), Some(component)) = (webhooks.install_for(&self.cluster_name), manifest)
                && let Err(e) =
                    crate::serve::webhook::install::uninstall(&self.cluster, &component.manifest, &install).await
            {
                tracing::warn!(component = %version.name, error = %e, "cannot remove the webhook configurations");
            }
        }
        let controller = slot.controller?;
        controller.stop().await;
        if let Some(leadership) = slot.leadership
            && let Err(e) = leadership.resign().await
        {
            tracing::warn!(controller = %controller.name(), error = %e, "cannot release lease");
        }
        tracing::info!(controller = %controller.name(), path = %path.display(), "component removed, controller stopped");
        let name = controller.name().to_owned();
        drop(controller);
        self.informers.prune();
        Some(name)
    }

    /// The files the host knows.
    pub(crate) fn paths(&self) -> Vec<PathBuf> {
        lock(&self.slots).iter().map(|s| s.path.clone()).collect()
    }

    fn controllers(&self) -> Vec<Arc<Controller>> {
        lock(&self.slots).iter().filter_map(|s| s.controller.clone()).collect()
    }

    /// Checks that every component `--webhook-failure-policy` names runs
    /// here: an error if every file given runs and none can come later
    /// (`more_may_come`: a components directory, references), else a
    /// warning (a rejected file may be the one named).
    fn check_policy_components(&self, more_may_come: bool) -> Result<(), Error> {
        let Some(install) = self.webhooks.as_ref().and_then(|w| w.install_settings()) else { return Ok(()) };
        let (running, all_run) = {
            let slots = lock(&self.slots);
            let running: Vec<String> = slots.iter().filter_map(|s| Some(s.version.as_ref()?.name.clone())).collect();
            (running, slots.iter().all(|s| s.version.is_some()))
        };
        let names: Vec<&str> = running.iter().map(String::as_str).collect();
        if all_run && !more_may_come {
            return install.failure_policies.check_components(&names).map_err(Error::FailurePolicy);
        }
        for component in install.failure_policies.unmatched_components(&names) {
            tracing::warn!(component, "--webhook-failure-policy names a component that does not run yet");
        }
        Ok(())
    }

    fn schedulers(&self) -> Vec<Arc<Scheduler>> {
        lock(&self.slots).iter().filter_map(|s| s.scheduler.clone()).collect()
    }

    /// The admission webhooks component `name` serves here, with the
    /// failure policy each is installed with.
    fn webhook_status(&self, name: Option<&str>) -> Vec<crate::serve::webhook::policy::WebhookStatus> {
        let Some(webhooks) = &self.webhooks else { return Vec::new() };
        let Some(served) = name.and_then(|n| webhooks.get_in(&self.cluster_name, n).ok()) else { return Vec::new() };
        let declared = crate::serve::webhook::policy::FailurePolicies::default();
        let policies = webhooks.install_settings().map_or(&declared, |i| &i.failure_policies);
        crate::serve::webhook::policy::WebhookStatus::of(&served.component.manifest, policies)
    }

    fn status(&self) -> Vec<ComponentStatus> {
        lock(&self.slots)
            .iter()
            .map(|slot| {
                let controller = slot.controller.as_ref();
                let counts = controller.map(|c| c.counts()).unwrap_or_default();
                let reconciles = controller.is_none_or(|c| c.reconciler().component().manifest.roles.reconcile);
                let (state, waiting_for) = match controller.map(|c| c.state()) {
                    Some(State::Elsewhere) => ("elsewhere", Vec::new()),
                    None if slot.version.is_some() => ("serving", Vec::new()),
                    // No reconcile loop: nothing to wait for or sync.
                    Some(state) if !reconciles && state != State::Stopped => ("serving", Vec::new()),
                    None if slot.rejected.is_none() => ("pending", Vec::new()),
                    None => ("rejected", Vec::new()),
                    Some(State::Running) => ("running", Vec::new()),
                    Some(State::Standby) => ("standby", Vec::new()),
                    Some(State::Syncing) => ("syncing", Vec::new()),
                    Some(State::Stopped) => ("stopped", Vec::new()),
                    Some(State::WaitingForKinds(kinds)) => {
                        ("waiting-for-kinds", kinds.iter().map(ToString::to_string).collect())
                    }
                };
                let version = slot.version.as_ref();
                ComponentStatus {
                    path: slot.path.clone(),
                    reference: version.and_then(|v| v.artifact.as_ref().map(|a| a.reference.clone())),
                    manifest_digest: version.and_then(|v| v.artifact.as_ref().map(|a| a.manifest_digest.clone())),
                    name: slot.version.as_ref().map(|v| v.name.clone()),
                    digest: version.map(|v| format!("sha256:{}", v.digest)),
                    contract: version.map(|v| v.contract.clone()),
                    loaded_at: version.map(|v| v.loaded_at.to_string()),
                    compile: version.map(|v| v.source.as_str()),
                    tier: version.map(|v| v.pre.tier().as_str()),
                    compile_ms: version.map(|v| v.compile_time.as_secs_f64() * 1000.0),
                    state,
                    leading: slot.leadership.as_ref().map(Leadership::is_leading),
                    canary: controller.and_then(|c| c.reconciler().trial()),
                    waiting_for,
                    swaps: slot.swaps,
                    reconciled: counts.succeeded,
                    failed: counts.failed,
                    queue: controller.map_or(0, |c| c.queue_len()),
                    last_error: counts.last_error,
                    rejected: slot.rejected.clone(),
                    webhooks: self.webhook_status(version.map(|v| v.name.as_str())),
                }
            })
            .collect()
    }
}

/// The annotation naming the controller whose component a CRD belongs to:
/// set by the host that installed it (`--install-crds`), or written by
/// `capstan gen` for CRDs applied another way. No other component may
/// install it again or set its conversion.
pub const INSTALLED_BY: &str = "capstan.dev/installed-by";

/// Who else may have installed a CRD that carries no [`INSTALLED_BY`]: its
/// `app.kubernetes.io/managed-by` label (Helm sets it) or its field
/// managers (kubectl's is `kubectl-client-side-apply` or `kubectl`), for
/// the message that says it was left alone.
fn installed_by_someone_else(crd: &Value) -> String {
    if let Some(by) = crd.pointer("/metadata/labels/app.kubernetes.io~1managed-by").and_then(Value::as_str) {
        return format!("managed by {by}");
    }
    let managers: BTreeSet<&str> = crd
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|m| m.get("manager").and_then(Value::as_str))
        .collect();
    if managers.is_empty() {
        "not installed by a Capstan component".to_owned()
    } else {
        format!("written by {}", managers.into_iter().collect::<Vec<_>>().join(", "))
    }
}

/// Applies a CRD of `controller`'s component and waits until it is
/// established, when the CRD is its own: new, or marked [`INSTALLED_BY`]
/// `controller`, or unmarked and named in `adopt`. An unmarked CRD not in
/// `adopt` is left as it is (someone else installed it) and said so in
/// the log; the component runs with it.
async fn install_crd(
    cluster: &KubeCluster,
    crd: &Value,
    controller: &str,
    adopt: &BTreeSet<String>,
) -> Result<(), Error> {
    let name = crate::object::meta_str(crd, "name").unwrap_or_default().to_owned();
    let r = ObjectRef::new(Gvk::new("apiextensions.k8s.io", "v1", "CustomResourceDefinition"), None, name.clone());
    match cluster.get(&r).await {
        Ok(existing) => {
            let owner =
                existing.pointer("/metadata/annotations").and_then(|a| a.get(INSTALLED_BY)).and_then(Value::as_str);
            match owner {
                Some(owner) if owner != controller => {
                    return Err(Error::CrdOwned { name, owner: owner.to_owned(), controller: controller.to_owned() });
                }
                Some(_) => {}
                None if adopt.contains(&name) => {
                    let by = installed_by_someone_else(&existing);
                    tracing::warn!(crd = %name, controller, previously = %by, "adopting a CRD someone else installed (--adopt-crd)");
                }
                None => {
                    let by = installed_by_someone_else(&existing);
                    tracing::warn!(
                        crd = %name,
                        controller,
                        "CRD {name} exists and has no {INSTALLED_BY} annotation ({by}): left as it is, and the component runs with it; \
                         pass --adopt-crd {name} to let the host apply the component's definition over it"
                    );
                    return Ok(());
                }
            }
        }
        Err(e) if e.is_not_found() => {}
        Err(error) => return Err(Error::InstallCrd { name, error }),
    }
    let mut crd = crd.clone();
    crd["metadata"]["annotations"][INSTALLED_BY] = json!(controller);
    let patch = Patch::Apply { object: crd, field_manager: HOST_FIELD_MANAGER.into(), force: true };
    cluster
        .patch(&r, patch, Subresource::Main)
        .await
        .map_err(|error| Error::InstallCrd { name: name.clone(), error })?;
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(60) {
        if let Ok(current) = cluster.get(&r).await {
            let established = current
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .is_some_and(|c| c.iter().any(|c| c["type"] == json!("Established") && c["status"] == json!("True")));
            if established {
                tracing::info!(crd = %name, "crd established");
                return Ok(());
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(Error::CrdNotEstablished(name))
}

/// A running host.
pub struct Host {
    shared: Arc<Shared>,
    dir: Mutex<Option<DirWatch>>,
    follows: Mutex<Vec<Follow>>,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host").field("components", &self.shared.paths()).finish_non_exhaustive()
    }
}

impl Host {
    /// Where this host's API calls go.
    pub fn backend(&self) -> Arc<dyn Cluster> {
        Arc::clone(&self.shared.backend)
    }

    /// This host's shared watches.
    pub fn informers(&self) -> Arc<Informers> {
        Arc::clone(&self.shared.informers)
    }

    /// The running controllers, in the order their files were loaded.
    pub fn controllers(&self) -> Vec<Arc<Controller>> {
        self.shared.controllers()
    }

    /// The controller named `name`.
    pub fn controller(&self, name: &str) -> Option<Arc<Controller>> {
        self.controllers().into_iter().find(|c| c.name() == name)
    }

    /// The running schedulers, in the order their files were loaded.
    pub fn schedulers(&self) -> Vec<Arc<Scheduler>> {
        self.shared.schedulers()
    }

    /// The scheduler serving scheduler name `name` (`spec.schedulerName`).
    pub fn scheduler(&self, name: &str) -> Option<Arc<Scheduler>> {
        self.schedulers().into_iter().find(|s| s.name() == name)
    }

    /// What the status API reports: one entry per component file.
    pub fn status(&self) -> Vec<ComponentStatus> {
        self.shared.status()
    }

    /// The document `GET /status` serves: `components` ([`status`](Self::status)),
    /// `ready`, and `notReady` (the reasons of [`readiness`](Self::readiness)).
    pub fn status_document(&self) -> Value {
        let not_ready = self.readiness().err().unwrap_or_default();
        json!({
            "components": self.status(),
            "ready": not_ready.is_empty(),
            "notReady": not_ready,
        })
    }

    /// How many kinds are watched (shared between controllers).
    pub fn watched_kinds(&self) -> usize {
        self.shared.informers.len()
    }

    /// Loads the component at `path`, or the new version of a file loaded
    /// before. A new controller starts; a new version of a running one is
    /// swapped in (reconciles in flight finish on the old version, later
    /// ones use the new one, and every object is reconciled once more as
    /// `resync`); if it watches other kinds than before, only its own
    /// subscriptions are restarted. A file that is unchanged does nothing.
    ///
    /// # Errors
    ///
    /// A rejected component ([`Error::Component`], [`Error::Duplicate`],
    /// [`Error::DuplicateScheduler`], [`Error::Access`], a CRD that cannot
    /// be installed): the version running from `path`, if any, keeps
    /// serving, and the rejection shows in [`status`](Self::status).
    pub async fn load(&self, path: impl AsRef<Path>) -> Result<Change, Error> {
        self.shared.load(path.as_ref()).await
    }

    /// Stops the controller loaded from `path` and forgets the file.
    /// Returns the controller's name, if one ran. Its objects keep their
    /// finalizer (deleting one waits until a controller of that name runs
    /// again, or someone removes it) and their children (which the garbage
    /// collector deletes with their owner).
    pub async fn unload(&self, path: impl AsRef<Path>) -> Option<String> {
        self.shared.unload(path.as_ref()).await
    }

    /// Stops following the components directory, then every controller
    /// (letting reconciles in flight finish), and releases their Leases;
    /// the watches stop when the host is dropped. Idempotent.
    pub async fn shutdown(&self) {
        if let Some(dir) = lock(&self.dir).take() {
            dir.stop();
        }
        lock(&self.follows).clear();
        let controllers = self.shared.controllers();
        for c in &controllers {
            c.reconciler().end_trial(false);
        }
        futures::future::join_all(controllers.iter().map(|c| c.stop())).await;
        futures::future::join_all(self.shared.schedulers().iter().map(|s| s.stop())).await;
        for path in self.shared.paths() {
            self.shared.resign(&path).await;
        }
        // Its webhooks are served no more: a fleet keeps the registry (and
        // its server) for the other clusters, and a cluster disengaged must
        // not be answered by, nor keep alive, a host that stopped. The
        // configurations stay for a restart, as the host's Leases' objects do.
        if let Some(webhooks) = &self.shared.webhooks {
            let names: Vec<String> =
                lock(&self.shared.slots).iter().filter_map(|s| Some(s.version.as_ref()?.name.clone())).collect();
            for name in names {
                webhooks.withdraw(&self.shared.cluster_name, &name);
            }
        }
    }

    /// Ready when some component runs, every controller that runs has
    /// synced its caches and leads or stands by behind a live leader (not
    /// kept from its Lease for longer than a lease duration, see
    /// [`Leadership::blocked`]), every scheduler has listed its Pods and
    /// Nodes once, and every component file and reference the host was
    /// given runs some version (a reference whose first pull has not
    /// arrived is `pending, not pulled yet`); otherwise, why not (one
    /// reason per controller, scheduler or file). A file whose new version was rejected while an older one
    /// serves does not make the host unready: what runs, serves. A file
    /// with no version running (rejected since the host started, e.g. a
    /// broken component on disk at a restart) does: a controller that
    /// should run does not.
    ///
    /// # Errors
    ///
    /// The reasons it is not ready.
    pub fn readiness(&self) -> Result<(), Vec<String>> {
        let (not_running, blocked) = {
            let slots = lock(&self.shared.slots);
            let not_running: Vec<String> = slots
                .iter()
                .filter(|s| s.controller.is_none() && s.version.is_none())
                .map(|s| match &s.rejected {
                    Some(r) => format!("{}: rejected, no version runs: {}", s.path.display(), r.reason),
                    None => format!("{}: pending, not pulled yet", s.path.display()),
                })
                .chain(slots.is_empty().then(|| "no component runs: none was given or found yet".to_owned()))
                .collect();
            let blocked: Vec<String> = slots
                .iter()
                .filter_map(|s| {
                    let reason = s.leadership.as_ref()?.blocked()?;
                    let name = s.version.as_ref().map_or_else(|| s.path.display().to_string(), |v| v.name.clone());
                    Some(format!("{name}: standing by, kept from leading: {reason}"))
                })
                .collect();
            (not_running, blocked)
        };
        let reasons: Vec<String> = not_running
            .into_iter()
            .chain(blocked)
            .chain(self.shared.controllers().iter().filter_map(|c| match c.state() {
                State::Running | State::Standby | State::Elsewhere => None,
                State::Syncing => Some(format!("{}: caches not synced yet", c.name())),
                State::Stopped => Some(format!("{}: stopped", c.name())),
                State::WaitingForKinds(kinds) => {
                    let kinds: Vec<String> = kinds.iter().map(ToString::to_string).collect();
                    Some(format!("{}: waiting for kinds {}", c.name(), kinds.join(", ")))
                }
            }))
            .chain(self.shared.schedulers().iter().filter_map(|s| match s.state() {
                State::Syncing => Some(format!("scheduler {}: Pod and Node caches not synced yet", s.name())),
                State::Stopped => Some(format!("scheduler {}: stopped", s.name())),
                _ => None,
            }))
            .collect();
        if reasons.is_empty() { Ok(()) } else { Err(reasons) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicate_messages_name_both_components() {
        let controller = Error::Duplicate { path: "b.wasm".into(), name: "greeter".into(), other: "a.wasm".into() };
        assert_eq!(controller.to_string(), "b.wasm: controller greeter already runs from a.wasm");
        let scheduler = Error::DuplicateScheduler {
            path: "b.wasm".into(),
            name: "twin".into(),
            scheduler: "zone-spread".into(),
            other: "a.wasm".into(),
            other_name: "zone-scheduler".into(),
        };
        assert_eq!(
            scheduler.to_string(),
            "b.wasm: controller twin declares scheduler zone-spread, which controller zone-scheduler from a.wasm serves already"
        );
        assert_eq!(scheduler.kind(), "duplicate");
    }
}
