//! A host on a real cluster: loads components, optionally installs the
//! CRDs they define, and runs each as a [`Controller`] on shared watches.
//!
//! ```no_run
//! # async fn f(client: kube::Client) -> anyhow::Result<()> {
//! use capstan_host::host::HostBuilder;
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

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::cluster::kube::KubeCluster;
use crate::cluster::{self, Cluster, Patch, Subresource};
use crate::component::{self, Loader};
use crate::controller::{Controller, Settings};
use crate::engine::{self, Engine, EngineConfig};
use crate::informer::Informers;
use crate::limits::Limits;
use crate::object::{Gvk, ObjectRef};
use crate::reconciler::Reconciler;
use crate::runtime::Runtime;

/// Field manager the host uses for its own applies (CRDs).
pub const HOST_FIELD_MANAGER: &str = "capstan";

/// Why a host could not start.
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
    /// Two components declare the same controller name.
    #[error("two components declare controller {0}")]
    Duplicate(String),
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
    /// A CRD did not become established in time.
    #[error("CRD {0} was not established within 60 s")]
    CrdNotEstablished(String),
}

/// Builds a [`Host`].
#[must_use]
pub struct HostBuilder {
    client: kube::Client,
    components: Vec<PathBuf>,
    namespaces: Vec<String>,
    install_crds: bool,
    limits: Limits,
    settings: Settings,
    cache_dir: Option<PathBuf>,
    instance: Option<String>,
}

impl std::fmt::Debug for HostBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostBuilder")
            .field("components", &self.components)
            .field("namespaces", &self.namespaces)
            .field("install_crds", &self.install_crds)
            .finish_non_exhaustive()
    }
}

impl HostBuilder {
    /// A host on `client`, with no components yet, watching all namespaces,
    /// not installing CRDs, with default limits and no compile cache.
    pub fn new(client: kube::Client) -> Self {
        Self {
            client,
            components: Vec::new(),
            namespaces: Vec::new(),
            install_crds: false,
            limits: Limits::default(),
            settings: Settings::default(),
            cache_dir: None,
            instance: None,
        }
    }

    /// Adds a component to run.
    pub fn component(mut self, path: impl Into<PathBuf>) -> Self {
        self.components.push(path.into());
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
    /// let builder = capstan_host::host::HostBuilder::new(client).namespaces(["team-a", "team-b"]);
    /// # }
    /// ```
    pub fn namespaces(mut self, namespaces: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.namespaces = namespaces.into_iter().map(Into::into).collect();
        self
    }

    /// Applies the CRDs components define, and waits until established.
    pub fn install_crds(mut self, on: bool) -> Self {
        self.install_crds = on;
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

    /// Compile cache directory.
    pub fn cache_dir(mut self, dir: Option<PathBuf>) -> Self {
        self.cache_dir = dir;
        self
    }

    /// Name of this replica in Events (`reportingInstance`).
    pub fn instance(mut self, instance: Option<String>) -> Self {
        self.instance = instance;
        self
    }

    /// Loads every component, installs CRDs if asked, starts the
    /// controllers.
    ///
    /// # Errors
    ///
    /// Any [`Error`]: a rejected component stops the start, naming the file.
    pub async fn start(self) -> Result<Host, Error> {
        if let Some(bad) = self.namespaces.iter().find(|ns| !crate::manifest::is_dns1123_label(ns)) {
            return Err(Error::Namespace(bad.clone()));
        }
        let engine = Engine::new(EngineConfig::default().memory_limit(self.limits.memory))?;
        let runtime = Runtime::new(&engine, self.limits).map_err(|e| Error::Link(format!("{e:#}")))?;
        let loader = Loader::new(runtime.clone(), self.cache_dir.clone());
        let cluster = KubeCluster::new(self.client.clone(), self.instance.clone());
        let informers = Arc::new(Informers::new(cluster.clone(), self.namespaces.clone()));

        let mut loaded = Vec::new();
        for path in &self.components {
            let component = loader.load(path).await?;
            if loaded.iter().any(|l: &component::Loaded| l.manifest.name == component.manifest.name) {
                return Err(Error::Duplicate(component.manifest.name.clone()));
            }
            tracing::info!(
                controller = %component.manifest.name,
                path = %path.display(),
                digest = %component.digest,
                compile = ?component.compile_time,
                source = ?component.source,
                "component loaded"
            );
            loaded.push(component);
        }
        if self.install_crds {
            for component in &loaded {
                for crd in &component.manifest.crds {
                    install_crd(&cluster, crd).await?;
                }
            }
        }
        let backend: Arc<dyn Cluster> = Arc::new(cluster.clone());
        let controllers = loaded
            .into_iter()
            .map(|component| {
                let reconciler = Arc::new(Reconciler::new(runtime.clone(), component, Arc::clone(&backend)));
                Controller::start(reconciler, cluster.clone(), Arc::clone(&informers), self.settings.clone())
            })
            .collect();
        Ok(Host { controllers, informers })
    }
}

/// Applies a CRD and waits until it is established.
async fn install_crd(cluster: &KubeCluster, crd: &Value) -> Result<(), Error> {
    let name = crate::object::meta_str(crd, "name").unwrap_or_default().to_owned();
    let r = ObjectRef::new(Gvk::new("apiextensions.k8s.io", "v1", "CustomResourceDefinition"), None, name.clone());
    let patch = Patch::Apply { object: crd.clone(), field_manager: HOST_FIELD_MANAGER.into(), force: true };
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
#[derive(Debug)]
pub struct Host {
    controllers: Vec<Controller>,
    informers: Arc<Informers>,
}

impl Host {
    /// The running controllers.
    pub fn controllers(&self) -> &[Controller] {
        &self.controllers
    }

    /// How many kinds are watched (shared between controllers).
    pub fn watched_kinds(&self) -> usize {
        self.informers.len()
    }

    /// Stops every controller and watch.
    pub async fn shutdown(self) {
        for c in self.controllers {
            c.stop().await;
        }
    }
}
