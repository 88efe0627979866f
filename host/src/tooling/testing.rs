//! The mock host: runs real controller components, with the real runtime
//! and reconciler, against the in-memory [`MockCluster`], so authors can
//! unit-test a controller in milliseconds without a cluster.
//!
//! This crate is not published and the `capstan` binary does not carry
//! it: depend on it from a checkout (a path or git dependency on `host/`).
//! Outside one, `capstan test COMPONENT SCENARIOS` runs a component on
//! this mock host, and a Rust controller's logic is unit-tested natively
//! with `capstan_guest::testing::FakeHost` (docs/mock.md, "Which to use").
//!
//! ```no_run
//! # async fn f() -> anyhow::Result<()> {
//! use capstan_host::tooling::testing::MockHost;
//! use serde_json::json;
//!
//! let mut host = MockHost::new()?;
//! host.load("target/wasm32-wasip2/release/greeter.wasm").await?;
//! host.seed(json!({
//!     "apiVersion": "examples.capstan.dev/v1alpha1",
//!     "kind": "Greeting",
//!     "metadata": {"name": "hello", "namespace": "default"},
//!     "spec": {"message": "hi", "replicas": 2},
//! }))?;
//! let run = host.run_until_idle().await?;
//! assert!(run.failures().next().is_none());
//! # Ok(()) }
//! ```
//!
//! # How it drives controllers
//!
//! Every write to the mock cluster is a change, routed to primary objects
//! by the same rules as on a real cluster ([`mapping`]): a change to an
//! object of a controller's primary kind queues that object; a change to an
//! owned kind queues the owner named by its controller ownerReference; a
//! change to a watched kind queues the primaries its mapping names, if the
//! object matches the watch's label selector (its state after the change,
//! or its last state for a removal). The queue holds each object once. Time is
//! virtual: requeues, resyncs and backoff after errors are due at a later
//! virtual instant, which [`MockHost::advance`] reaches;
//! [`MockHost::run_until_idle`] only processes what is due now.
//!
//! Components that serve other roles are driven too: declared admission
//! webhooks run on the writes a test makes ([`MockHost::admit`]),
//! conversions are asked with [`MockHost::convert`], and once the
//! reconciles of a run settle, every pending Pod that names a loaded
//! scheduler gets one attempt ([`MockHost::schedule_pending`]).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde_json::Value;

use crate::cluster::mock::{ChangeKind, MockCluster};
use crate::cluster::{self, Cluster, EventRecord, ListParams};
use crate::control::clusters::{Clusters, Engaged as Registered};
use crate::control::mapping;
use crate::control::reconciler::{Action, EventKind, Reconciler, Report};
use crate::manifest::Manifest;
use crate::object::mark::Owner;
use crate::object::{self, ObjectRef};
use crate::runtime::component::{self, Loaded, Loader};
use crate::runtime::engine::{self, Engine, EngineConfig};
use crate::runtime::imports::{ImportCall, LogLine};
use crate::runtime::invocation::{Runtime, Tier};
use crate::runtime::limits::Limits;

mod roles;
mod scheduling;
pub use roles::{Admission, label_selector_matches};
pub use scheduling::Attempt;

/// How many times one `run_until_idle` may reconcile the same object
/// before it reports a reconcile loop, however fast the reconciles are. In
/// one run an object is only reconciled again because the cluster changed
/// (requeues wait for [`MockHost::advance`]), so this many rounds means the
/// controllers keep changing what they read.
pub const LOOP_RECONCILES: u32 = 100;

/// Wall-clock time after which one `run_until_idle` reports a reconcile
/// loop if some object was reconciled at least [`LOOP_MIN_REPEATS`] times.
pub const LOOP_TIME: Duration = Duration::from_secs(1);

/// Reconciles of one object that, once [`LOOP_TIME`] has passed, make a
/// reconcile loop.
pub const LOOP_MIN_REPEATS: u32 = 5;

/// First retry delay after a failure; doubles per consecutive failure.
pub const BACKOFF_BASE: Duration = Duration::from_secs(1);
/// Longest retry delay.
pub const BACKOFF_MAX: Duration = Duration::from_secs(300);

/// Errors of the mock host.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The engine could not be created.
    #[error(transparent)]
    Engine(#[from] engine::Error),
    /// Linking the imports failed.
    #[error("cannot link host imports: {0}")]
    Link(String),
    /// A component was rejected.
    #[error(transparent)]
    Component(#[from] component::Error),
    /// A cluster name that is not a DNS-1123 label, or is taken.
    #[error("cluster name {0:?}: not a DNS-1123 label, or already engaged")]
    ClusterName(String),
    /// Two components declare the same controller name.
    #[error("a controller named {0} is already loaded")]
    Duplicate(String),
    /// Two components declare the same scheduler name.
    #[error("controller {name} declares scheduler {scheduler}, which controller {other} serves already")]
    DuplicateScheduler {
        /// The controller that was refused.
        name: String,
        /// The scheduler name.
        scheduler: String,
        /// The controller that serves it.
        other: String,
    },
    /// A seeded object was refused by the mock cluster.
    #[error("cannot seed object: {0}")]
    Seed(#[from] cluster::Error),
    /// The controllers kept reconciling the same objects, each reconcile
    /// changing the cluster again: a reconcile loop.
    #[error(
        "reconcile loop: controller {controller} reconciled {} again and again ({reconciles} reconciles in {elapsed:?}) \
         while the cluster kept changing",
        objects.join(", ")
    )]
    NoSettle {
        /// The controller that loops.
        controller: String,
        /// The objects it reconciled most, most first (at most five).
        objects: Vec<String>,
        /// How many reconciles the run had done.
        reconciles: usize,
        /// Wall-clock time the run had taken.
        elapsed: Duration,
    },
}

/// Process-wide engine shared by every mock host (compiling once per
/// process is what makes tests fast); `baseline`: the one of the tools,
/// with the baseline compiler.
fn shared_engine(baseline: bool) -> Result<Engine, engine::Error> {
    static ENGINES: [OnceLock<Engine>; 2] = [OnceLock::new(), OnceLock::new()];
    let shared = &ENGINES[usize::from(baseline)];
    if let Some(e) = shared.get() {
        return Ok(e.clone());
    }
    let engine = Engine::new(EngineConfig::default().baseline(baseline))?;
    Ok(shared.get_or_init(|| engine).clone())
}

/// The loader of the tools that load a component to read its manifest or
/// run it briefly (`capstan inspect`, `push`, `gen`, `test`), with the
/// compile cache `cache_dir` (theirs is [`default_cache_dir`], the one
/// `capstan run` uses): code by the baseline compiler (Winch), seconds
/// faster to compile, with no optimizing compile after it
/// ([`Loader::optimize`] off). A component the cache holds loads in
/// milliseconds, whichever compiler made it; one it does not is compiled
/// by Winch and cached.
///
/// ```no_run
/// # async fn f() -> anyhow::Result<()> {
/// use capstan_host::testing::{default_cache_dir, tool_loader};
///
/// let loaded = tool_loader(default_cache_dir())?.load("greeter.wasm".as_ref()).await?;
/// println!("{}", loaded.manifest.name);
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// [`Error::Engine`] or [`Error::Link`] when the engine cannot be made.
pub fn tool_loader(cache_dir: Option<PathBuf>) -> Result<Loader, Error> {
    let runtime = Runtime::new(&shared_engine(true)?, Limits::default()).map_err(|e| Error::Link(format!("{e:#}")))?;
    Ok(Loader::new(runtime, cache_dir).optimize(false))
}

/// The default compile cache: `$CAPSTAN_CACHE/components`, else
/// `~/.cache/capstan/components`.
pub fn default_cache_dir() -> Option<PathBuf> {
    let root = std::env::var_os("CAPSTAN_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/capstan")))?;
    Some(root.join("components"))
}

/// Compiles the components of these file stems (those [`find_component`]
/// finds; the others are skipped) into the default compile cache, one after
/// the other, on a thread of its own, so it may be called from inside a
/// runtime. Tests that load the same large components at once on a cold
/// cache otherwise all compile them at the same time (the loader does not
/// share a compile in progress): 170 s against 75 s for the polyglot suite.
///
/// ```no_run
/// use std::sync::OnceLock;
///
/// static WARM: OnceLock<()> = OnceLock::new();
/// WARM.get_or_init(|| capstan_host::tooling::testing::warm_compile_cache(&["greeter"]).expect("compiles"));
/// ```
///
/// # Errors
///
/// The first component that does not load, or a runtime that cannot start.
pub fn warm_compile_cache(stems: &[&str]) -> Result<(), String> {
    let stems: Vec<String> = stems.iter().map(|s| (*s).to_owned()).collect();
    let warm = move || -> Result<(), String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start a runtime: {e}"))?;
        runtime.block_on(async {
            for stem in &stems {
                let Ok(path) = find_component(stem) else { continue };
                let mut host = MockHost::new().map_err(|e| e.to_string())?;
                host.load(&path).await.map_err(|e| format!("{stem}: {e}"))?;
            }
            Ok(())
        })
    };
    std::thread::spawn(warm).join().map_err(|_| "the warm-up thread panicked".to_owned())?
}

/// Finds a built component by file stem, for tests: in `$CAPSTAN_GUESTS`,
/// then in `wasm32-wasip2/release/` of `$CARGO_TARGET_DIR` or of the
/// nearest `target/` folder above the current directory.
///
/// ```no_run
/// let greeter = capstan_host::tooling::testing::find_component("greeter").expect("built");
/// ```
///
/// # Errors
///
/// A message naming every place searched, when none has it.
pub fn find_component(stem: &str) -> Result<PathBuf, String> {
    let file = format!("{stem}.wasm");
    let mut candidates = Vec::new();
    if let Some(dir) = std::env::var_os("CAPSTAN_GUESTS") {
        candidates.push(PathBuf::from(dir).join(&file));
    }
    let release = Path::new("wasm32-wasip2").join("release").join(&file);
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        candidates.push(PathBuf::from(&dir).join("guests").join(&file));
        candidates.push(PathBuf::from(dir).join(&release));
    }
    if let Ok(cwd) = std::env::current_dir() {
        for dir in cwd.ancestors() {
            candidates.push(dir.join("target").join("guests").join(&file));
            candidates.push(dir.join("target").join(&release));
        }
    }
    candidates.iter().find(|p| p.is_file()).cloned().ok_or_else(|| {
        let searched: Vec<String> = candidates.iter().map(|p| p.display().to_string()).collect();
        format!("{file} not found; build it (tests/build-guests.sh) first. Searched: {}", searched.join(", "))
    })
}

/// One reconcile the mock host performed.
#[derive(Debug)]
pub struct Step {
    /// Which controller.
    pub controller: String,
    /// In which cluster (`default`, or a name given to
    /// [`MockHost::add_cluster`]).
    pub cluster: String,
    /// At which virtual instant.
    pub at: Duration,
    /// What happened.
    pub report: Report,
}

/// Counts the reconciles of one run per controller and object, to tell a
/// reconcile loop from a long run.
struct LoopDetector {
    started: std::time::Instant,
    counts: BTreeMap<(usize, ObjectRef), u32>,
}

impl LoopDetector {
    fn new(started: std::time::Instant) -> Self {
        Self { started, counts: BTreeMap::new() }
    }

    /// Records that `controller` is about to reconcile `object`; returns the
    /// objects of that controller that loop (most reconciled first, at most
    /// five) and the time taken, if this is a loop.
    fn record(
        &mut self,
        controller: usize,
        object: &ObjectRef,
        now: std::time::Instant,
    ) -> Option<(Vec<String>, Duration)> {
        let count = self.counts.entry((controller, object.clone())).or_insert(0);
        *count += 1;
        let elapsed = now.saturating_duration_since(self.started);
        let looping = *count >= LOOP_RECONCILES || (elapsed >= LOOP_TIME && *count >= LOOP_MIN_REPEATS);
        if !looping {
            return None;
        }
        let mut repeated: Vec<(u32, &ObjectRef)> = self
            .counts
            .iter()
            .filter(|((c, _), n)| *c == controller && **n >= LOOP_MIN_REPEATS)
            .map(|((_, r), n)| (*n, r))
            .collect();
        repeated.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
        Some((repeated.into_iter().take(5).map(|(_, r)| r.to_string()).collect(), elapsed))
    }
}

/// The reconciles of one `run_until_idle` or `advance`.
#[derive(Debug, Default)]
pub struct Run {
    /// In order.
    pub steps: Vec<Step>,
    /// The scheduling attempts of the loaded schedulers, in order.
    pub attempts: Vec<Attempt>,
}

impl Run {
    /// The steps that failed.
    pub fn failures(&self) -> impl Iterator<Item = &Step> {
        self.steps.iter().filter(|s| s.report.result.is_err())
    }

    /// The event kinds delivered to the guest, in order.
    pub fn events(&self) -> Vec<(String, EventKind)> {
        self.steps.iter().filter_map(|s| Some((s.report.object.name.clone(), s.report.event?))).collect()
    }

    /// Every log line the guests wrote.
    pub fn logs(&self) -> impl Iterator<Item = &LogLine> {
        self.steps.iter().flat_map(|s| s.report.journal.logs.iter())
    }

    /// Every host call the guests made.
    pub fn calls(&self) -> impl Iterator<Item = &ImportCall> {
        self.steps.iter().flat_map(|s| s.report.journal.calls.iter())
    }
}

/// One component serving one cluster.
struct Controller {
    reconciler: Reconciler,
    manifest: Arc<Manifest>,
    failures: BTreeMap<ObjectRef, u32>,
    /// Index into [`MockHost::clusters`].
    cluster: usize,
}

/// One named in-memory cluster, and how far the host has read its
/// changes.
struct Engaged {
    name: Arc<str>,
    cluster: Arc<MockCluster>,
    cursor: u64,
}

/// Runs controller components against in-memory clusters: the one named
/// `default`, and any added with [`add_cluster`](MockHost::add_cluster),
/// where every component runs once per cluster, as on a host serving
/// several (docs/multicluster.md).
pub struct MockHost {
    loader: Loader,
    /// `default` first.
    clusters: Vec<Engaged>,
    /// The same clusters by name, which fleet controllers reach their
    /// members through.
    registry: Arc<Clusters>,
    /// Children in member clusters whose owner may be gone, to sweep:
    /// the controller, the member, the child, its owner.
    sweeps: Vec<(usize, String, ObjectRef, Owner)>,
    /// The components loaded, in order, to serve clusters added later.
    loaded: Vec<Loaded>,
    controllers: Vec<Controller>,
    queue: VecDeque<(usize, ObjectRef)>,
    queued: BTreeSet<(usize, ObjectRef)>,
    timers: BTreeMap<(Duration, usize, ObjectRef), ()>,
    now: Duration,
}

impl std::fmt::Debug for MockHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockHost")
            .field("now", &self.now)
            .field("cluster", &self.clusters[0].cluster)
            .finish_non_exhaustive()
    }
}

impl MockHost {
    /// A mock host with the default limits and the default compile cache.
    ///
    /// # Errors
    ///
    /// When the engine cannot be created.
    pub fn new() -> Result<Self, Error> {
        Self::with_limits(Limits::default(), default_cache_dir())
    }

    /// A mock host with the given limits and compile cache (`None`: no
    /// cache).
    ///
    /// # Errors
    ///
    /// When the engine cannot be created.
    pub fn with_limits(limits: Limits, cache_dir: Option<PathBuf>) -> Result<Self, Error> {
        let engine = shared_engine(false)?;
        let runtime = Runtime::new(&engine, limits).map_err(|e| Error::Link(format!("{e:#}")))?;
        Ok(Self::with_loader(Loader::new(runtime, cache_dir)))
    }

    /// A mock host that loads components with `loader`: its engine
    /// (e.g. one with the baseline compiler), limits and compile cache.
    pub fn with_loader(loader: Loader) -> Self {
        let default = Arc::new(MockCluster::new());
        let registry = Clusters::new();
        registry.engage(cluster::DEFAULT_CLUSTER, Registered { backend: default.clone(), informers: None });
        Self {
            loader,
            clusters: vec![Engaged { name: cluster::DEFAULT_CLUSTER.into(), cluster: default, cursor: 0 }],
            registry,
            sweeps: Vec::new(),
            loaded: Vec::new(),
            controllers: Vec::new(),
            queue: VecDeque::new(),
            queued: BTreeSet::new(),
            timers: BTreeMap::new(),
            now: Duration::ZERO,
        }
    }

    /// Loads a component as a controller and serves the CRDs it defines.
    /// Objects already in the cluster are queued.
    ///
    /// # Errors
    ///
    /// [`Error::Component`] if the component is rejected;
    /// [`Error::Duplicate`] if its controller name is taken;
    /// [`Error::DuplicateScheduler`] if its scheduler name is.
    pub async fn load(&mut self, path: impl AsRef<Path>) -> Result<Arc<Manifest>, Error> {
        let loaded = self.loader.load(path.as_ref()).await?;
        let manifest = Arc::clone(&loaded.manifest);
        if self.controllers.iter().any(|c| c.manifest.name == manifest.name) {
            return Err(Error::Duplicate(manifest.name.clone()));
        }
        if let Some(scheduler) = &manifest.roles.scheduler
            && let Some(other) =
                self.controllers.iter().find(|c| c.manifest.roles.scheduler.as_ref() == Some(scheduler))
        {
            return Err(Error::DuplicateScheduler {
                name: manifest.name.clone(),
                scheduler: scheduler.clone(),
                other: other.manifest.name.clone(),
            });
        }
        self.loaded.push(loaded.clone());
        for cluster in 0..self.clusters.len() {
            self.serve(loaded.clone(), cluster).await?;
        }
        Ok(manifest)
    }

    /// Runs `loaded` in cluster number `cluster`: its CRDs served there,
    /// its primary objects there queued.
    async fn serve(&mut self, loaded: Loaded, cluster: usize) -> Result<(), Error> {
        let manifest = Arc::clone(&loaded.manifest);
        let engaged = &self.clusters[cluster];
        for crd in &manifest.crds {
            engaged.cluster.register_crd(crd)?;
        }
        let backend: Arc<dyn Cluster> = engaged.cluster.clone();
        let reconciler = Reconciler::new(self.loader.runtime().clone(), loaded, backend)
            .in_cluster(Arc::clone(&engaged.name))
            .with_members(Arc::clone(&self.registry) as Arc<dyn cluster::Members>);
        let objects = engaged.cluster.list(&manifest.primary, None, &ListParams::default()).await?;
        let here = manifest.runs_in(&engaged.name);
        self.controllers.push(Controller {
            reconciler,
            manifest: Arc::clone(&manifest),
            failures: BTreeMap::new(),
            cluster,
        });
        let index = self.controllers.len() - 1;
        if !manifest.roles.reconcile || !here {
            return Ok(());
        }
        for object in objects {
            if let Some(r) = ObjectRef::of(&object) {
                self.enqueue(index, ObjectRef { gvk: manifest.primary.clone(), ..r });
            }
        }
        Ok(())
    }

    /// Engages another in-memory cluster, named `name`: every component
    /// loaded, and every one loaded later, runs there too, told the name
    /// in its requests. It shares the outside world (the HTTP stubs) with
    /// the `default` cluster.
    ///
    /// # Errors
    ///
    /// [`Error::ClusterName`] when `name` is not a DNS-1123 label or is
    /// engaged already; as [`load`](Self::load) when a component's CRDs
    /// cannot be served there.
    pub async fn add_cluster(&mut self, name: &str) -> Result<&MockCluster, Error> {
        if !crate::manifest::is_dns1123_label(name) || self.clusters.iter().any(|c| &*c.name == name) {
            return Err(Error::ClusterName(name.to_owned()));
        }
        let cluster = Arc::new(MockCluster::beside(&self.clusters[0].cluster));
        cluster.advance(self.now);
        self.registry.engage(name, Registered { backend: cluster.clone(), informers: None });
        self.clusters.push(Engaged { name: name.into(), cluster, cursor: 0 });
        let index = self.clusters.len() - 1;
        for loaded in self.loaded.clone() {
            self.serve(loaded, index).await?;
        }
        // A fleet controller with a new member looks at every object again.
        for controller in 0..self.controllers.len() {
            let c = &self.controllers[controller];
            let home = &self.clusters[c.cluster].name;
            if c.manifest.runs_in(home) && c.manifest.fleet.as_ref().is_some_and(|f| f.has_member(name)) {
                self.enqueue_all(controller).await?;
            }
        }
        Ok(&self.clusters[index].cluster)
    }

    /// The in-memory cluster named `name` (`default`, or one added with
    /// [`add_cluster`](Self::add_cluster)).
    pub fn cluster_named(&self, name: &str) -> Option<&MockCluster> {
        self.clusters.iter().find(|c| &*c.name == name).map(|c| &*c.cluster)
    }

    /// The names of the engaged clusters, `default` first.
    pub fn cluster_names(&self) -> Vec<String> {
        self.clusters.iter().map(|c| c.name.to_string()).collect()
    }

    /// Which compiler made the code controller `name` runs now, if it is
    /// loaded.
    pub fn tier(&self, name: &str) -> Option<Tier> {
        self.controllers.iter().find(|c| c.manifest.name == name).map(|c| c.reconciler.component().pre.tier())
    }

    /// The in-memory cluster named `default`, to seed, inspect and change
    /// objects.
    pub fn cluster(&self) -> &MockCluster {
        &self.clusters[0].cluster
    }

    /// Creates an object in the mock cluster (filling uid,
    /// resourceVersion, …); returns it as stored.
    ///
    /// # Errors
    ///
    /// When the mock cluster refuses it (unknown kind, already exists, …).
    pub fn seed(&self, object: Value) -> Result<Value, Error> {
        Ok(self.cluster().seed(object)?)
    }

    /// The Events recorded so far in the `default` cluster.
    pub fn events(&self) -> Vec<EventRecord> {
        self.cluster().events()
    }

    /// The virtual time elapsed.
    pub fn now(&self) -> Duration {
        self.now
    }

    /// Makes every controller forget what it handled, as a host restart
    /// does, drops the guest instances kept between calls, and queues
    /// every primary object.
    pub async fn restart(&mut self) -> Result<(), Error> {
        for index in 0..self.controllers.len() {
            self.controllers[index].reconciler.component().pre.drop_idle();
            if !self.controllers[index].manifest.roles.reconcile {
                continue;
            }
            self.controllers[index].reconciler.forget_all();
            let primary = self.controllers[index].manifest.primary.clone();
            let cluster = Arc::clone(&self.clusters[self.controllers[index].cluster].cluster);
            for object in cluster.list(&primary, None, &ListParams::default()).await? {
                if let Some(r) = ObjectRef::of(&object) {
                    self.enqueue(index, ObjectRef { gvk: primary.clone(), ..r });
                }
            }
        }
        Ok(())
    }

    /// Queues every primary object of `controller`'s cluster.
    async fn enqueue_all(&mut self, controller: usize) -> Result<(), Error> {
        let primary = self.controllers[controller].manifest.primary.clone();
        let cluster = Arc::clone(&self.clusters[self.controllers[controller].cluster].cluster);
        for object in cluster.list(&primary, None, &ListParams::default()).await? {
            if let Some(r) = ObjectRef::of(&object) {
                self.enqueue(controller, ObjectRef { gvk: primary.clone(), ..r });
            }
        }
        Ok(())
    }

    fn enqueue(&mut self, controller: usize, r: ObjectRef) {
        if self.queued.insert((controller, r.clone())) {
            self.queue.push_back((controller, r));
        }
    }

    /// Turns the clusters' changes since the last look into queue entries.
    fn collect_changes(&mut self) {
        for cluster in 0..self.clusters.len() {
            self.collect_changes_of(cluster);
        }
    }

    /// Turns one cluster's changes since the last look into queue entries
    /// of the controllers serving it.
    fn collect_changes_of(&mut self, cluster_index: usize) {
        let engaged = &mut self.clusters[cluster_index];
        let changes = engaged.cluster.changes_since(engaged.cursor);
        let Some(last) = changes.last() else { return };
        engaged.cursor = last.seq;
        let cluster = Arc::clone(&engaged.cluster);
        for change in changes {
            let gvk = &change.object_ref.gvk;
            let meta = mapping::meta_of(&change.object);
            let deleted = change.kind == ChangeKind::Deleted;
            for index in 0..self.controllers.len() {
                let manifest = Arc::clone(&self.controllers[index].manifest);
                let home = self.controllers[index].cluster;
                if !manifest.roles.reconcile || !manifest.runs_in(&self.clusters[home].name) {
                    continue;
                }
                if home != cluster_index {
                    // A fleet controller's child in a member: its owner is
                    // queued, or the child swept if the owner is gone.
                    self.route_member_change(index, cluster_index, &change);
                    continue;
                }
                let own = self.controllers[index].reconciler.written_for(gvk, &meta, deleted);
                let namespaced = cluster.kind_info(&manifest.primary).is_none_or(|k| k.namespaced);
                let primaries = |namespace: Option<&str>| -> Vec<ObjectRef> {
                    cluster
                        .objects(&manifest.primary)
                        .iter()
                        .filter(|o| namespace.is_none() || object::meta_str(o, "namespace") == namespace)
                        .filter_map(|o| ObjectRef::of(o).map(|r| ObjectRef { gvk: manifest.primary.clone(), ..r }))
                        .collect()
                };
                for r in mapping::targets(&manifest, namespaced, gvk, &meta, &primaries) {
                    if own.as_ref() != Some(&r) {
                        self.enqueue(index, r);
                    }
                }
            }
        }
    }

    /// Routes the change of a child that fleet controller `controller`
    /// placed in the member cluster `member` (number): its owner in the
    /// home cluster is queued, or, when that is gone, the child swept.
    fn route_member_change(&mut self, controller: usize, member: usize, change: &cluster::mock::Change) {
        let manifest = Arc::clone(&self.controllers[controller].manifest);
        let home = &self.clusters[self.controllers[controller].cluster];
        let member_name = self.clusters[member].name.to_string();
        if !manifest.fleet.as_ref().is_some_and(|f| f.has_member(&member_name)) {
            return;
        }
        // A watched kind: what its mapping names in the home.
        let gvk = &change.object_ref.gvk;
        let namespaced = home.cluster.kind_info(&manifest.primary).is_none_or(|k| k.namespaced);
        let primaries = |namespace: Option<&str>| -> Vec<ObjectRef> {
            home.cluster
                .objects(&manifest.primary)
                .iter()
                .filter(|o| namespace.is_none() || object::meta_str(o, "namespace") == namespace)
                .filter_map(|o| ObjectRef::of(o).map(|r| ObjectRef { gvk: manifest.primary.clone(), ..r }))
                .collect()
        };
        let watched = mapping::watch_targets(&manifest, namespaced, gvk, &mapping::meta_of(&change.object), &primaries);
        for r in watched {
            self.enqueue(controller, r);
        }
        let home = &self.clusters[self.controllers[controller].cluster];
        if manifest.owned(gvk).is_none() {
            return;
        }
        let Some(owner) = Owner::of_value(&change.object) else { return };
        if !owner.same_controller(&manifest.name, home.cluster.identity()) || *owner.home != *home.name {
            return;
        }
        let owner_ref = ObjectRef { gvk: manifest.primary.clone(), ..owner.object.clone() };
        let current = home.cluster.objects(&manifest.primary).into_iter().find(|o| {
            object::meta_str(o, "namespace") == owner_ref.namespace.as_deref()
                && object::meta_str(o, "name") == Some(owner_ref.name.as_str())
        });
        if current.as_ref().and_then(|o| object::meta_str(o, "uid")) == Some(owner.uid.as_str()) {
            self.enqueue(controller, owner_ref);
        } else if change.kind != ChangeKind::Deleted {
            let child = ObjectRef { gvk: change.object_ref.gvk.clone(), ..change.object_ref.clone() };
            self.sweeps.push((controller, member_name, child, owner));
        }
    }

    /// Reconciles until nothing is due now; returns what happened.
    ///
    /// # Errors
    ///
    /// [`Error::NoSettle`] for a reconcile loop: when one object has been
    /// reconciled [`LOOP_RECONCILES`] times, or [`LOOP_TIME`] has passed and
    /// one has been reconciled [`LOOP_MIN_REPEATS`] times.
    pub async fn run_until_idle(&mut self) -> Result<Run, Error> {
        let mut run = Run::default();
        let mut loops = LoopDetector::new(std::time::Instant::now());
        let mut scheduled = false;
        loop {
            self.collect_changes();
            for (controller, member, child, owner) in std::mem::take(&mut self.sweeps) {
                if let Err(e) = self.controllers[controller].reconciler.sweep(&member, &child, &owner).await {
                    tracing::warn!(cluster = %member, child = %child, error = %e, "sweep failed");
                }
            }
            let Some((index, r)) = self.queue.pop_front() else {
                // Settled: one scheduling round, then what it changed.
                if scheduled {
                    break;
                }
                scheduled = true;
                let attempts = self.schedule_pending().await?;
                let any = !attempts.is_empty();
                run.attempts.extend(attempts);
                if any {
                    continue;
                }
                break;
            };
            self.queued.remove(&(index, r.clone()));
            if let Some((objects, elapsed)) = loops.record(index, &r, std::time::Instant::now()) {
                return Err(Error::NoSettle {
                    controller: self.controllers[index].manifest.name.clone(),
                    objects,
                    reconciles: run.steps.len(),
                    elapsed,
                });
            }
            let report = self.controllers[index].reconciler.reconcile(&r).await;
            let controller = &mut self.controllers[index];
            let retry = match &report.result {
                Ok(Action::Requeue(after)) => {
                    controller.failures.remove(&r);
                    Some(*after)
                }
                Ok(Action::AwaitChange) => {
                    controller.failures.remove(&r);
                    None
                }
                Err(e) if e.is_retryable() => {
                    let n = controller.failures.entry(r.clone()).or_insert(0);
                    *n += 1;
                    // Past its retry limit, it waits for a change.
                    e.retry_limit().is_none_or(|limit| *n <= limit).then(|| backoff(*n))
                }
                Err(_) => None,
            };
            // A later timer for the same object is superseded.
            self.timers.retain(|(_, i, t), ()| !(*i == index && *t == r));
            if let Some(after) = retry {
                self.timers.insert((self.now + after, index, r.clone()), ());
            }
            let cluster = self.clusters[controller.cluster].name.to_string();
            run.steps.push(Step { controller: controller.manifest.name.clone(), cluster, at: self.now, report });
        }
        Ok(run)
    }

    /// Moves virtual time forward by `by`, queues what falls due, and runs
    /// until idle.
    ///
    /// # Errors
    ///
    /// As [`run_until_idle`](Self::run_until_idle).
    pub async fn advance(&mut self, by: Duration) -> Result<Run, Error> {
        self.now += by;
        for engaged in &self.clusters {
            engaged.cluster.advance(by);
        }
        let due: Vec<_> = self.timers.keys().filter(|(at, _, _)| *at <= self.now).cloned().collect();
        for key in due {
            self.timers.remove(&key);
            self.enqueue(key.1, key.2);
        }
        self.run_until_idle().await
    }

    /// When the next timer (requeue, resync or retry) is due, if any.
    pub fn next_due(&self) -> Option<Duration> {
        self.timers.keys().next().map(|(at, _, _)| *at)
    }
}

/// Exponential backoff: `BACKOFF_BASE * 2^(failures-1)`, capped.
pub fn backoff(failures: u32) -> Duration {
    let factor = 1u32.checked_shl(failures.saturating_sub(1).min(16)).unwrap_or(u32::MAX);
    BACKOFF_BASE.saturating_mul(factor).min(BACKOFF_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fast_loop_is_reported_after_loop_reconciles_of_one_object() {
        let start = std::time::Instant::now();
        let mut loops = LoopDetector::new(start);
        let a = ObjectRef::new(object::Gvk::new("", "v1", "ConfigMap"), Some("ns"), "a");
        let b = ObjectRef::new(object::Gvk::new("", "v1", "ConfigMap"), Some("ns"), "b");
        for _ in 1..LOOP_RECONCILES {
            assert!(loops.record(0, &a, start).is_none());
            assert!(loops.record(0, &b, start).is_none());
        }
        let (objects, _) = loops.record(0, &a, start).expect("the hundredth reconcile of a is a loop");
        assert_eq!(objects, [a.to_string(), b.to_string()]);
    }

    #[test]
    fn after_a_second_a_few_repeats_are_a_loop_but_many_objects_once_are_not() {
        let start = std::time::Instant::now();
        let later = start + LOOP_TIME;
        let mut loops = LoopDetector::new(start);
        let gvk = object::Gvk::new("", "v1", "ConfigMap");
        for i in 0..1000 {
            let r = ObjectRef::new(gvk.clone(), Some("ns"), format!("cm-{i}"));
            assert!(loops.record(0, &r, later).is_none(), "one reconcile each is no loop, however long");
        }
        let a = ObjectRef::new(gvk, Some("ns"), "a");
        for _ in 1..LOOP_MIN_REPEATS {
            assert!(loops.record(1, &a, later).is_none());
        }
        let (objects, elapsed) = loops.record(1, &a, later).expect("a keeps coming back after a second");
        assert_eq!(objects, [a.to_string()]);
        assert_eq!(elapsed, LOOP_TIME);
    }

    #[test]
    fn the_loop_error_names_the_controller_and_objects() {
        let err = Error::NoSettle {
            controller: "greeter".into(),
            objects: vec!["v1/ConfigMap ns/a".into()],
            reconciles: 100,
            elapsed: Duration::from_millis(20),
        };
        assert_eq!(
            err.to_string(),
            "reconcile loop: controller greeter reconciled v1/ConfigMap ns/a again and again (100 reconciles in \
             20ms) while the cluster kept changing"
        );
    }

    #[test]
    fn the_duplicate_scheduler_error_names_both_controllers() {
        let err = Error::DuplicateScheduler {
            name: "scheduler-twin".into(),
            scheduler: "zone-spread".into(),
            other: "zone-scheduler".into(),
        };
        assert_eq!(
            err.to_string(),
            "controller scheduler-twin declares scheduler zone-spread, which controller zone-scheduler serves already"
        );
    }

    #[test]
    fn backoff_doubles_and_caps() {
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(2), Duration::from_secs(2));
        assert_eq!(backoff(4), Duration::from_secs(8));
        assert_eq!(backoff(40), BACKOFF_MAX);
    }
}
