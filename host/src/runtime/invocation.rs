//! Running guest code: instances of a component's pre-instance, each in a
//! `Store` of its own, with the memory cap and wall-clock deadline of
//! [`Limits`], and traps told apart from guest errors.
//!
//! # Guarantees
//!
//! - An instance serves one controller only (one name, grants and
//!   cluster). After a call that returned, it is kept for a later call of
//!   that controller, up to [`Limits::reuse`] calls: instantiating a
//!   Python or JavaScript component costs more than most reconciles. A
//!   call that trapped, ran past its deadline or hit the memory cap drops
//!   its instance, and so does memory grown past half the cap. No call
//!   sees the counts, log lines or stdio of another.
//! - A guest that loops is interrupted at its deadline (checked every
//!   [`EPOCH_TICK`](crate::runtime::engine::EPOCH_TICK)); a `tokio` timeout guards
//!   host calls that hang. A guest that grows memory past the cap traps.
//!   Either way the caller gets an [`Error`] and the host carries on.

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::component::Linker;
use wasmtime::{Store, Trap, UpdateDeadline};

use crate::cluster;
use crate::metrics::{Export, Owner, metrics};
use crate::runtime::bindings::capstan::operator::types as wit;
use crate::runtime::bindings::{OperatorPre, v0_1, v0_2, v0_3};
use crate::runtime::engine::Engine;
use crate::runtime::imports::{self, Caller, HostState, Journal};
use crate::runtime::limits::Limits;
use crate::runtime::nodes::Decision;

/// How a guest invocation failed (the guest's own reconcile errors are not
/// failures of the invocation: they are in its result).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The guest trapped: a panic, an unreachable, an out-of-bounds access.
    #[error("guest trapped: {0}")]
    Trap(String),
    /// The guest ran past its deadline and was interrupted.
    #[error("guest exceeded its deadline of {0:?}")]
    Deadline(Duration),
    /// The guest tried to grow its memory past the cap.
    #[error("guest exceeded its memory limit of {limit} bytes (asked for {wanted})")]
    Memory {
        /// The cap.
        limit: usize,
        /// What the guest asked for.
        wanted: usize,
    },
    /// The component could not be instantiated (e.g. the instance pool is
    /// exhausted).
    #[error("cannot instantiate the component: {0}")]
    Instantiate(String),
}

/// Which limit or fault ended an invocation, for metrics and backoff.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TrapKind {
    /// A guest fault.
    Trap,
    /// The deadline.
    Deadline,
    /// The memory cap.
    Memory,
    /// Instantiation.
    Instantiate,
}

impl TrapKind {
    /// Lower-case name, the `kind` label of `capstan_guest_traps_total`.
    pub fn as_str(self) -> &'static str {
        match self {
            TrapKind::Trap => "trap",
            TrapKind::Deadline => "deadline",
            TrapKind::Memory => "memory",
            TrapKind::Instantiate => "instantiate",
        }
    }
}

impl Error {
    /// Which kind of failure this is.
    pub fn kind(&self) -> TrapKind {
        match self {
            Error::Trap(_) => TrapKind::Trap,
            Error::Deadline(_) => TrapKind::Deadline,
            Error::Memory { .. } => TrapKind::Memory,
            Error::Instantiate(_) => TrapKind::Instantiate,
        }
    }
}

/// Why the host called the guest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// First time this controller handles the object.
    Added,
    /// Changed since last handled.
    Modified,
    /// Being deleted.
    Deleted,
    /// Unchanged.
    Resync,
}

impl EventKind {
    /// Lower-case name, as in the WIT.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Added => "added",
            EventKind::Modified => "modified",
            EventKind::Deleted => "deleted",
            EventKind::Resync => "resync",
        }
    }
}

impl From<EventKind> for wit::EventKind {
    fn from(e: EventKind) -> Self {
        match e {
            EventKind::Added => wit::EventKind::Added,
            EventKind::Modified => wit::EventKind::Modified,
            EventKind::Deleted => wit::EventKind::Deleted,
            EventKind::Resync => wit::EventKind::Resync,
        }
    }
}

/// The result of one invocation, with what the guest did meanwhile.
#[derive(Debug)]
pub struct Invocation<T> {
    /// What the export returned, or how the invocation failed.
    pub result: Result<T, Error>,
    /// Host calls, log lines and stdio of the invocation.
    pub journal: Journal,
    /// Wall-clock time of the invocation, instantiation included.
    pub duration: Duration,
}

/// What `reconcile` returns across the boundary, at the current contract
/// version (a 0.1.0 guest's answer is converted).
pub type ReconcileResult = Result<wit::Outcome, wit::Failure>;

/// A component's pre-instance (imports resolved, instantiation per call
/// is cheap), at the contract version it was built against, and the
/// instances it keeps between calls. Clones share them, and share the
/// swap from baseline to optimized code ([`Pre::optimize`]).
#[derive(Clone)]
pub struct Pre {
    tiered: Arc<std::sync::RwLock<Tiered>>,
    idle: Arc<std::sync::Mutex<Vec<Idle>>>,
}

/// A [`Pre`]'s code: the pre-instance and which compiler made it.
#[derive(Clone)]
struct Tiered {
    kind: PreKind,
    tier: Tier,
}

/// Which compiler made the code a [`Pre`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    /// Winch, a single-pass compiler: fast to compile, slower to run.
    /// Serves until cranelift's code is ready.
    Baseline,
    /// Cranelift, the optimizing compiler (or its artefact from the
    /// compile cache).
    Optimized,
}

impl Tier {
    /// Lower-case name, as the host's status shows it: `baseline` or
    /// `optimized`.
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Baseline => "baseline",
            Tier::Optimized => "optimized",
        }
    }
}

/// A [`Pre`] that does not keep it alive: an optimizing compile checks
/// that someone still runs the code before it starts.
#[derive(Clone)]
pub struct WeakPre {
    tiered: std::sync::Weak<std::sync::RwLock<Tiered>>,
    idle: std::sync::Weak<std::sync::Mutex<Vec<Idle>>>,
}

impl WeakPre {
    /// The pre-instance, if a clone of it is still held.
    pub fn upgrade(&self) -> Option<Pre> {
        Some(Pre { tiered: self.tiered.upgrade()?, idle: self.idle.upgrade()? })
    }
}

impl std::fmt::Debug for Pre {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pre").field("contract", &self.contract()).field("tier", &self.tier()).finish_non_exhaustive()
    }
}

/// A pre-instance by contract version.
#[derive(Clone)]
pub enum PreKind {
    /// `capstan:operator@0.1.0`.
    V0_1(v0_1::OperatorPre<HostState>),
    /// `capstan:operator@0.2.0`.
    V0_2(v0_2::OperatorPre<HostState>),
    /// `capstan:operator@0.3.0`.
    V0_3(v0_3::OperatorPre<HostState>),
    /// The current contract version.
    Current(OperatorPre<HostState>),
}

/// An instance of a [`PreKind`].
enum Instance {
    V0_1(v0_1::Operator),
    V0_2(v0_2::Operator),
    V0_3(v0_3::Operator),
    Current(crate::runtime::bindings::Operator),
}

/// An instance between calls, in its store.
struct Idle {
    store: Store<HostState>,
    instance: Instance,
    /// Calls it has served.
    calls: u32,
    /// Which compiler made its code.
    tier: Tier,
    /// Its place under the bound on idle instances of the runtime that
    /// made it.
    slot: IdleSlot,
}

/// Most instances one pre-instance keeps between calls. The number kept
/// follows the calls in flight at once (each call takes one, or makes
/// one, and gives it back), so this only bounds a burst.
const IDLE_PER_COMPONENT: usize = 16;

impl Pre {
    /// A pre-instance of optimized code that keeps no instance yet.
    pub fn new(kind: PreKind) -> Self {
        Self::tiered(kind, Tier::Optimized)
    }

    /// A pre-instance of code `tier` made, that keeps no instance yet.
    pub fn tiered(kind: PreKind, tier: Tier) -> Self {
        Self { tiered: Arc::new(std::sync::RwLock::new(Tiered { kind, tier })), idle: Arc::default() }
    }

    /// A handle that does not keep the pre-instance alive.
    pub fn downgrade(&self) -> WeakPre {
        WeakPre { tiered: Arc::downgrade(&self.tiered), idle: Arc::downgrade(&self.idle) }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Tiered> {
        self.tiered.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn current(&self) -> Tiered {
        self.read().clone()
    }

    /// The pre-instance calls use now.
    pub fn kind(&self) -> PreKind {
        self.current().kind
    }

    /// Which compiler made the code calls run now.
    pub fn tier(&self) -> Tier {
        self.read().tier
    }

    /// Swaps in `kind`, cranelift's code of the same component, for the
    /// baseline code: calls that start from now on run it. Instances of the
    /// baseline code are dropped, those in use when they return.
    pub fn optimize(&self, kind: PreKind) {
        *self.tiered.write().unwrap_or_else(std::sync::PoisonError::into_inner) =
            Tiered { kind, tier: Tier::Optimized };
        self.drop_idle();
    }

    /// The contract version, e.g. `0.2.0`.
    pub fn contract(&self) -> &'static str {
        match self.read().kind {
            PreKind::V0_1(_) => "0.1.0",
            PreKind::V0_2(_) => "0.2.0",
            PreKind::V0_3(_) => "0.3.0",
            PreKind::Current(_) => crate::runtime::bindings::CONTRACT_VERSION,
        }
    }

    /// Drops the instances kept between calls: the next calls start fresh
    /// (as after a host restart).
    pub fn drop_idle(&self) {
        lock(&self.idle).clear();
    }

    /// An idle instance that `runtime` made (with its limits) and that
    /// served `caller`'s controller, or one that served no controller yet
    /// (made for `manifest()`), for `caller`.
    fn take(&self, runtime: &Arc<std::sync::atomic::AtomicUsize>, caller: Option<&Caller>) -> Option<Idle> {
        let mut idle = lock(&self.idle);
        let at = idle.iter().rposition(|i| {
            Arc::ptr_eq(&i.slot.0, runtime) && same_controller(i.store.data().caller.as_ref(), caller)
        })?;
        Some(idle.swap_remove(at))
    }

    /// Keeps `idle` for a later call, unless it runs code that was
    /// replaced while it was in use.
    fn give_back(&self, idle: Idle) {
        if idle.tier != self.tier() {
            return;
        }
        let mut kept = lock(&self.idle);
        if kept.len() < IDLE_PER_COMPONENT {
            kept.push(idle);
        }
    }
}

impl PreKind {
    /// The engine whose code this is: a store for it must be of the same.
    fn engine(&self) -> &wasmtime::Engine {
        match self {
            PreKind::V0_1(pre) => pre.instance_pre().engine(),
            PreKind::V0_2(pre) => pre.instance_pre().engine(),
            PreKind::V0_3(pre) => pre.instance_pre().engine(),
            PreKind::Current(pre) => pre.instance_pre().engine(),
        }
    }

    async fn instantiate(&self, store: &mut Store<HostState>) -> wasmtime::Result<Instance> {
        Ok(match self {
            PreKind::V0_1(pre) => Instance::V0_1(pre.instantiate_async(store).await?),
            PreKind::V0_2(pre) => Instance::V0_2(pre.instantiate_async(store).await?),
            PreKind::V0_3(pre) => Instance::V0_3(pre.instantiate_async(store).await?),
            PreKind::Current(pre) => Instance::Current(pre.instantiate_async(store).await?),
        })
    }
}

/// Whether an instance that served `served` (`None`: only `manifest()`)
/// may serve `caller`: the same controller name, grants and cluster, so
/// that nothing one controller read is in memory a call of another runs
/// with.
fn same_controller(served: Option<&Caller>, caller: Option<&Caller>) -> bool {
    match (served, caller) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(a), Some(b)) => {
            a.controller == b.controller
                && Arc::ptr_eq(&a.grants, &b.grants)
                && std::ptr::addr_eq(Arc::as_ptr(&a.cluster), Arc::as_ptr(&b.cluster))
        }
    }
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A place under [`Runtime`]'s bound on idle instances, given back when
/// the instance is dropped.
struct IdleSlot(Arc<std::sync::atomic::AtomicUsize>);

impl IdleSlot {
    fn claim(count: &Arc<std::sync::atomic::AtomicUsize>, bound: usize) -> Option<Self> {
        use std::sync::atomic::Ordering;
        count.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < bound).then_some(n + 1)).ok()?;
        Some(Self(Arc::clone(count)))
    }
}

impl Drop for IdleSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// How the guest part of an invocation failed before a result.
#[derive(Debug)]
enum Failed {
    /// Instantiation.
    Instantiate(wasmtime::Error),
    /// The call itself (a trap, the deadline, the memory cap).
    Call(wasmtime::Error),
}

/// Runs guest exports. One per engine; cheap to clone.
#[derive(Clone)]
pub struct Runtime {
    engine: Engine,
    linker: Arc<Linker<HostState>>,
    /// The same imports, for the baseline engine's code.
    baseline_linker: Option<Arc<Linker<HostState>>>,
    limits: Limits,
    /// Instances kept between calls, of every component, and their bound:
    /// half the pooling allocator's slots, so that idle instances never
    /// keep a new one from being made.
    idle: Arc<std::sync::atomic::AtomicUsize>,
    idle_bound: usize,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime").field("limits", &self.limits).finish_non_exhaustive()
    }
}

impl Runtime {
    /// A runtime with every import linked.
    ///
    /// # Errors
    ///
    /// When the imports cannot be linked (a bug).
    pub fn new(engine: &Engine, limits: Limits) -> wasmtime::Result<Self> {
        let linked = |engine: &wasmtime::Engine| {
            let mut linker = Linker::new(engine);
            imports::add_to_linker(&mut linker)?;
            Ok::<_, wasmtime::Error>(Arc::new(linker))
        };
        let linker = linked(engine.wasmtime())?;
        let baseline_linker = engine.baseline().map(linked).transpose()?;
        let idle_bound = if limits.reuse > 1 { engine.config().pool_instances as usize / 2 } else { 0 };
        Ok(Self { engine: engine.clone(), linker, baseline_linker, limits, idle: Arc::default(), idle_bound })
    }

    /// The engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The linker, for pre-instantiating components.
    pub fn linker(&self) -> &Linker<HostState> {
        &self.linker
    }

    /// The linker for code of the baseline engine, if there is one.
    pub fn baseline_linker(&self) -> Option<&Linker<HostState>> {
        self.baseline_linker.as_deref()
    }

    /// The limits applied to every invocation.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    fn store(&self, engine: &wasmtime::Engine, caller: Option<Caller>) -> Store<HostState> {
        let mut store = Store::new(engine, HostState::new(&self.limits, caller));
        store.limiter(|s| &mut s.limiter);
        store
    }

    /// Sets the wall-clock deadline of the invocation about to start.
    fn arm(store: &mut Store<HostState>, deadline: Duration) {
        let deadline = Instant::now() + deadline;
        store.data_mut().until(deadline);
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(move |_| {
            if Instant::now() >= deadline { Err(Trap::Interrupt.into()) } else { Ok(UpdateDeadline::Yield(1)) }
        });
    }

    /// Maps a wasmtime error to the failure it stands for. A memory
    /// growth the limiter refused, or an allocation the guest reported as
    /// failed (`memory allocation of N bytes failed`, Rust's message, when
    /// one allocation is larger than wasm memory can ever grow), is the
    /// memory limit. A trap's message is [`trap_message`]; the wasm
    /// backtrace is logged at debug level, cut to [`MAX_TRAP_LOG`] bytes.
    fn classify(
        &self,
        error: &wasmtime::Error,
        memory_exceeded: Option<usize>,
        stderr: &str,
        deadline: Duration,
    ) -> Error {
        if let Some(wanted) = memory_exceeded.or_else(|| failed_allocation(stderr)) {
            return Error::Memory { limit: self.limits.memory, wanted };
        }
        if matches!(error.downcast_ref::<Trap>(), Some(Trap::Interrupt)) {
            return Error::Deadline(deadline);
        }
        tracing::debug!(error = cluster::bounded(&format!("{error:#}"), MAX_TRAP_LOG), "guest trap");
        Error::Trap(trap_message(error, stderr))
    }

    async fn invoke<T>(
        &self,
        pre: &Pre,
        caller: Option<Caller>,
        call: impl AsyncFnOnce(&mut Store<HostState>, &Instance) -> Result<T, Failed>,
    ) -> Invocation<T> {
        self.invoke_within(self.limits.deadline, pre, caller, call).await
    }

    /// [`invoke`](Self::invoke) with a deadline of its own (a webhook's,
    /// below the API server's timeout), never above the runtime's.
    async fn invoke_within<T>(
        &self,
        deadline: Duration,
        pre: &Pre,
        caller: Option<Caller>,
        call: impl AsyncFnOnce(&mut Store<HostState>, &Instance) -> Result<T, Failed>,
    ) -> Invocation<T> {
        let deadline = deadline.min(self.limits.deadline);
        let start = Instant::now();
        let (mut store, kept, calls, slot, tier) = match pre.take(&self.idle, caller.as_ref()) {
            Some(Idle { mut store, instance, calls, slot, tier }) => {
                store.data_mut().begin(caller);
                (store, Ok(instance), calls, Some(slot), tier)
            }
            None => {
                // One snapshot: the store and the code are of one engine.
                let Tiered { kind, tier } = pre.current();
                (self.store(kind.engine(), caller), Err(kind), 0, None, tier)
            }
        };
        Self::arm(&mut store, deadline);
        // Second guard for host calls that hang: the epoch deadline only
        // fires while guest code runs.
        let guard = deadline + Duration::from_millis(500);
        let outcome = tokio::time::timeout(guard, async {
            let instance = match kept {
                Ok(instance) => instance,
                Err(kind) => {
                    if let Some(caller) = &store.data().caller {
                        metrics().guest_instantiated(&caller.owner());
                    }
                    kind.instantiate(&mut store).await.map_err(Failed::Instantiate)?
                }
            };
            let value = call(&mut store, &instance).await?;
            Ok::<_, Failed>((value, instance))
        })
        .await;
        let state = store.data_mut();
        let memory_exceeded = state.limiter.exceeded();
        let past_half = state.limiter.past_half();
        let owner = state.caller.as_ref().map(Caller::owner);
        let journal = state.take_journal();
        if let Some(owner) = owner {
            report_dropped(&owner, &journal);
        }
        let result = match outcome {
            Ok(Ok((value, instance))) => {
                let calls = calls + 1;
                if calls < self.limits.reuse
                    && !past_half
                    && let Some(slot) = slot.or_else(|| IdleSlot::claim(&self.idle, self.idle_bound))
                {
                    pre.give_back(Idle { store, instance, calls, slot, tier });
                }
                Ok(value)
            }
            Ok(Err(Failed::Instantiate(e))) => {
                Err(Error::Instantiate(cluster::bounded(&format!("{e:#}"), cluster::MAX_MESSAGE)))
            }
            Ok(Err(Failed::Call(wasm_error))) => {
                Err(self.classify(&wasm_error, memory_exceeded, &journal.stderr, deadline))
            }
            Err(_elapsed) => Err(Error::Deadline(deadline)),
        };
        Invocation { result, journal, duration: start.elapsed() }
    }

    /// Calls the guest's `manifest()`, converted to the current contract's
    /// record. Imports are not available to it. Not counted in the metrics
    /// here: the controller's name is only known from the result
    /// ([`Loader`](crate::runtime::component::Loader) counts it).
    pub async fn manifest(&self, pre: &Pre) -> Invocation<wit::ComponentManifest> {
        self.invoke(pre, None, async |store, instance| match instance {
            Instance::Current(op) => op.capstan_operator_controller().call_manifest(store).await.map_err(Failed::Call),
            Instance::V0_3(op) => {
                let m = op.capstan_operator_controller().call_manifest(store).await.map_err(Failed::Call)?;
                Ok(m.into())
            }
            Instance::V0_2(op) => {
                let m = op.capstan_operator_controller().call_manifest(store).await.map_err(Failed::Call)?;
                Ok(wit::ComponentManifest {
                    controller: m.into(),
                    roles: wit::Roles::reconcile_only(),
                    egress: Vec::new(),
                    clusters: Vec::new(),
                    fleet: None,
                })
            }
            Instance::V0_1(op) => {
                let m = op.capstan_operator_controller().call_manifest(store).await.map_err(Failed::Call)?;
                Ok(wit::ComponentManifest {
                    controller: m.into(),
                    roles: wit::Roles::reconcile_only(),
                    egress: Vec::new(),
                    clusters: Vec::new(),
                    fleet: None,
                })
            }
        })
        .await
    }

    /// Calls the guest's `reconcile(request)` on behalf of `caller`; counts
    /// its duration and any trap in the [`metrics`](crate::metrics). A
    /// guest of 0.2.0 or 0.3.0 gets the request without `cluster`; a 0.1.0
    /// guest gets the event and object and cannot see `failed-children`;
    /// their answers are converted.
    pub async fn reconcile(
        &self,
        pre: &Pre,
        caller: Caller,
        request: wit::ReconcileRequest,
    ) -> Invocation<ReconcileResult> {
        let controller = caller.owner();
        let invocation = self
            .invoke(pre, Some(caller), async |store, instance| match instance {
                Instance::Current(op) => {
                    op.capstan_operator_controller().call_reconcile(store, &request).await.map_err(Failed::Call)
                }
                Instance::V0_3(op) => {
                    let request = request.clone().into();
                    let result =
                        op.capstan_operator_controller().call_reconcile(store, &request).await.map_err(Failed::Call)?;
                    Ok(result.map(wit::Outcome::from).map_err(wit::Failure::from))
                }
                Instance::V0_2(op) => {
                    let request = request.clone().into();
                    let result =
                        op.capstan_operator_controller().call_reconcile(store, &request).await.map_err(Failed::Call)?;
                    Ok(result.map(wit::Outcome::from).map_err(wit::Failure::from))
                }
                Instance::V0_1(op) => {
                    let event = v0_1_event(request.event);
                    let result = op
                        .capstan_operator_controller()
                        .call_reconcile(store, event, &request.object)
                        .await
                        .map_err(Failed::Call)?;
                    Ok(result.map(wit::Outcome::from).map_err(wit::Failure::from))
                }
            })
            .await;
        metrics().guest_invoked(&controller, Export::Reconcile, invocation.duration);
        if let Err(e) = &invocation.result {
            metrics().guest_trapped(&controller, e.kind().as_str());
        }
        invocation
    }
}

impl Runtime {
    /// Calls the guest's `admission.review(request)` on behalf of
    /// `caller`, within `deadline` (a webhook's, below the API server's
    /// timeout). Only components of 0.3.0 and later serve admission; a
    /// 0.3.0 webhook gets the request without `request-kind`.
    pub async fn review(
        &self,
        pre: &Pre,
        caller: Caller,
        request: wit::AdmissionRequest,
        deadline: Duration,
    ) -> Invocation<wit::AdmissionResponse> {
        let controller = caller.owner();
        let invocation = self
            .invoke_within(deadline, pre, Some(caller), async |store, instance| match instance {
                Instance::Current(op) => {
                    op.capstan_operator_admission().call_review(store, &request).await.map_err(Failed::Call)
                }
                Instance::V0_3(op) => {
                    let request = request.clone().into();
                    let response =
                        op.capstan_operator_admission().call_review(store, &request).await.map_err(Failed::Call)?;
                    Ok(response.into())
                }
                other => Err(reconcile_only(other)),
            })
            .await;
        count(&controller, Export::Review, &invocation);
        invocation
    }

    /// Calls the guest's `conversion.convert(request)` on behalf of
    /// `caller`, within `deadline`.
    pub async fn convert(
        &self,
        pre: &Pre,
        caller: Caller,
        request: wit::ConversionRequest,
        deadline: Duration,
    ) -> Invocation<Result<Vec<wit::Json>, String>> {
        let controller = caller.owner();
        let invocation = self
            .invoke_within(deadline, pre, Some(caller), async |store, instance| match instance {
                Instance::Current(op) => {
                    op.capstan_operator_conversion().call_convert(store, &request).await.map_err(Failed::Call)
                }
                Instance::V0_3(op) => {
                    let request = request.clone().into();
                    op.capstan_operator_conversion().call_convert(store, &request).await.map_err(Failed::Call)
                }
                other => Err(reconcile_only(other)),
            })
            .await;
        count(&controller, Export::Convert, &invocation);
        invocation
    }

    /// Calls the guest's `scheduler.schedule` on behalf of `caller` for
    /// `decision`: an instance of the current contract gets only the Nodes
    /// that changed since its previous decision ([`nodes`](crate::runtime::nodes)),
    /// one of 0.3.0 every Node.
    pub async fn schedule(
        &self,
        pre: &Pre,
        caller: Caller,
        decision: &Decision,
    ) -> Invocation<Result<String, wit::Unschedulable>> {
        let controller = caller.owner();
        let invocation = self
            .invoke(pre, Some(caller), async |store, instance| match instance {
                Instance::Current(op) => {
                    let request = store.data_mut().given.request(decision);
                    op.capstan_operator_scheduler().call_schedule(store, &request).await.map_err(Failed::Call)
                }
                Instance::V0_3(op) => {
                    let request = decision.whole().into();
                    let result =
                        op.capstan_operator_scheduler().call_schedule(store, &request).await.map_err(Failed::Call)?;
                    Ok(result.map_err(wit::Unschedulable::from))
                }
                other => Err(reconcile_only(other)),
            })
            .await;
        count(&controller, Export::Schedule, &invocation);
        invocation
    }
}

/// Why `instance` was not called: only components of 0.3.0 and later
/// export the roles beyond reconcile (the manifest of an older component
/// declares none, so the host never routes one to it).
fn reconcile_only(instance: &Instance) -> Failed {
    let contract = match instance {
        Instance::V0_1(_) => "0.1.0",
        Instance::V0_2(_) => "0.2.0",
        Instance::V0_3(_) => "0.3.0",
        Instance::Current(_) => crate::runtime::bindings::CONTRACT_VERSION,
    };
    Failed::Instantiate(wasmtime::format_err!("a component of contract {contract} serves only reconcile"))
}

fn count<T>(controller: &Owner, export: Export, invocation: &Invocation<T>) {
    metrics().guest_invoked(controller, export, invocation.duration);
    if let Err(e) = &invocation.result {
        metrics().guest_trapped(controller, e.kind().as_str());
    }
}

fn v0_1_event(e: wit::EventKind) -> v0_1::capstan::operator::types::EventKind {
    use v0_1::capstan::operator::types::EventKind as Old;
    match e {
        wit::EventKind::Added => Old::Added,
        wit::EventKind::Modified => Old::Modified,
        wit::EventKind::Deleted => Old::Deleted,
        wit::EventKind::Resync => Old::Resync,
    }
}

/// Counts what an invocation's guest wrote that was dropped (log lines
/// over the per-invocation cap, stdout and stderr over
/// [`STDIO_CAPACITY`](crate::runtime::imports::STDIO_CAPACITY)) and says so in the
/// host's log (within the controller's log budget).
fn report_dropped(owner: &Owner, journal: &Journal) {
    if journal.stdout_dropped > 0 {
        metrics().stdio_dropped(owner, "stdout", journal.stdout_dropped);
    }
    if journal.stderr_dropped > 0 {
        metrics().stdio_dropped(owner, "stderr", journal.stderr_dropped);
    }
    if journal.dropped_logs > 0 || journal.stdout_dropped > 0 || journal.stderr_dropped > 0 {
        tracing::warn!(
            controller = owner.name(),
            cluster = owner.cluster(),
            log_lines = journal.dropped_logs,
            stdout_bytes = journal.stdout_dropped,
            stderr_bytes = journal.stderr_dropped,
            "guest output over the per-invocation caps was dropped"
        );
    }
}

/// Longest stderr reason quoted in a trap message, in characters.
const REASON_CHARS: usize = 300;

/// Most bytes of a trap's full text (its causes and wasm backtrace, whose
/// function names are the component's) in the debug log line.
pub const MAX_TRAP_LOG: usize = 16 << 10;

/// The message of [`Error::Trap`]: the trap's root cause plus what the
/// guest said on stderr (see [`stderr_reason`]), cut to
/// [`cluster::MAX_MESSAGE`] bytes. Every log line, Event, condition and
/// webhook answer that quotes a trap quotes this.
pub fn trap_message(error: &wasmtime::Error, stderr: &str) -> String {
    let mut message = error.root_cause().to_string();
    if let Some(reason) = stderr_reason(stderr) {
        message = format!("{message}; stderr: {reason}");
    }
    cluster::bounded(&message, cluster::MAX_MESSAGE)
}

/// What a guest said on stderr about why it trapped: a Rust panic's message
/// (the lines after `panicked at …:`, up to the `note:` about
/// `RUST_BACKTRACE`), else the last line that is not such a note.
pub fn stderr_reason(stderr: &str) -> Option<String> {
    let lines: Vec<&str> = stderr.lines().map(str::trim).collect();
    let is_note = |l: &str| l.starts_with("note: ") || l.is_empty();
    let reason = match lines.iter().rposition(|l| l.contains(" panicked at ")) {
        Some(at) => {
            let header = lines[at];
            let message: Vec<&str> = lines[at + 1..].iter().copied().take_while(|l| !is_note(l)).collect();
            // Before Rust 1.73 the message was on the header line:
            // `panicked at 'message', src/lib.rs:1:2`.
            if message.is_empty() {
                header.split_once(" panicked at ").map(|(_, m)| m)?.to_owned()
            } else {
                message.join(" ")
            }
        }
        None => (*lines.iter().rev().find(|l| !is_note(l))?).to_owned(),
    };
    let mut cut: String = reason.chars().take(REASON_CHARS).collect();
    if cut.len() < reason.len() {
        cut.push('…');
    }
    Some(cut)
}

/// The size of an allocation the guest reported as failed, from Rust's
/// `memory allocation of N bytes failed`.
fn failed_allocation(stderr: &str) -> Option<usize> {
    stderr
        .lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix("memory allocation of ")?.strip_suffix(" bytes failed")?.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instance_serves_only_the_controller_it_served_first() {
        use crate::cluster::mock::MockCluster;
        use crate::object::Gvk;
        use crate::runtime::grants::Grants;
        let manifest = crate::manifest::Manifest::bare("a", Gvk::new("", "v1", "ConfigMap"));
        let grants = Arc::new(Grants::from_manifest(&manifest));
        let cluster: Arc<dyn cluster::Cluster> = Arc::new(MockCluster::new());
        let caller = |name: &str, grants: &Arc<Grants>, cluster: &Arc<dyn cluster::Cluster>| Caller {
            controller: name.into(),
            cluster_name: "default".into(),
            field_manager: "capstan".into(),
            grants: Arc::clone(grants),
            cluster: Arc::clone(cluster),
            reconciling: None,
            reach: None,
        };
        let a = caller("a", &grants, &cluster);
        assert!(same_controller(Some(&a), Some(&caller("a", &grants, &cluster))));
        assert!(same_controller(None, Some(&a)), "an instance made for manifest() serves anyone");
        assert!(same_controller(None, None));
        assert!(!same_controller(Some(&a), None), "nor back to manifest()");
        assert!(!same_controller(Some(&a), Some(&caller("b", &grants, &cluster))), "another name");
        let other_grants = Arc::new(Grants::from_manifest(&manifest));
        assert!(!same_controller(Some(&a), Some(&caller("a", &other_grants, &cluster))), "other grants");
        let other_cluster: Arc<dyn cluster::Cluster> = Arc::new(MockCluster::new());
        assert!(!same_controller(Some(&a), Some(&caller("a", &grants, &other_cluster))), "another cluster");
    }

    #[test]
    fn a_trap_message_of_any_size_is_cut_to_the_message_bound() {
        let huge = wasmtime::Error::msg(format!("import failed: {}", "x".repeat(4 << 20)));
        let message = trap_message(&huge, &format!("thread 'main' panicked at a.rs:1:1:\n{}", "y".repeat(1 << 20)));
        assert!(message.len() <= cluster::MAX_MESSAGE, "{} bytes", message.len());
        assert!(message.starts_with("import failed: x") && message.ends_with(" bytes cut)"), "{message}");
        let small = wasmtime::Error::msg("wasm trap: wasm `unreachable` instruction executed");
        assert_eq!(
            trap_message(&small, "thread 'main' panicked at a.rs:1:1:\nboom\n"),
            "wasm trap: wasm `unreachable` instruction executed; stderr: boom"
        );
    }

    #[test]
    fn a_panic_message_is_taken_from_stderr_not_the_backtrace_note() {
        let stderr = "\nthread '<unnamed>' panicked at src/lib.rs:93:23:\nfixture asked to trap\nnote: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n";
        assert_eq!(stderr_reason(stderr).as_deref(), Some("fixture asked to trap"));
        let two_lines = "thread 'main' panicked at a.rs:1:1:\nfirst\nsecond\nnote: run with `RUST_BACKTRACE=1`";
        assert_eq!(stderr_reason(two_lines).as_deref(), Some("first second"));
        let old = "thread 'main' panicked at 'boom', a.rs:1:1\nnote: run with `RUST_BACKTRACE=1`";
        assert_eq!(stderr_reason(old).as_deref(), Some("'boom', a.rs:1:1"));
        assert_eq!(stderr_reason("some error\n\n").as_deref(), Some("some error"));
        assert_eq!(stderr_reason(""), None);
    }

    #[test]
    fn a_failed_allocation_on_stderr_is_the_memory_limit() {
        assert_eq!(failed_allocation("memory allocation of 3221225472 bytes failed\n"), Some(3_221_225_472));
        assert_eq!(failed_allocation("something else"), None);
    }

    #[test]
    fn error_messages_read_right() {
        assert_eq!(Error::Deadline(Duration::from_secs(5)).to_string(), "guest exceeded its deadline of 5s");
        assert_eq!(
            Error::Memory { limit: 10, wanted: 20 }.to_string(),
            "guest exceeded its memory limit of 10 bytes (asked for 20)"
        );
        assert_eq!(Error::Trap("unreachable".into()).kind(), TrapKind::Trap);
    }
}
