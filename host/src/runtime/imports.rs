//! Host imports: the state of one guest invocation ([`HostState`]) and the
//! implementations of the `kube`, `events` and `log` interfaces.
//!
//! Every `kube` call is checked against the controller's [`Grants`]; a
//! denial is a WIT error the guest sees, never a trap, and nothing is sent.
//! Every call and log line is also kept in the invocation's [`Journal`], so
//! the mock host and `capstan test` can show what a guest did, and counted
//! in the [`metrics`](crate::metrics) (`capstan_host_calls_total`,
//! `capstan_grant_denials_total`).
//!
//! # Limits
//!
//! What a guest hands an import is checked before anything is sent: names,
//! namespaces, groups, versions and kinds must be what the API server would
//! accept in a path (see [`validate`]), else the call returns `bad-request`
//! naming the field. One invocation may make at most
//! [`Limits::host_calls`] `kube.*` calls and [`Limits::events`]
//! `events.record` calls; past that each call returns `denied` naming the
//! limit. Warnings the host logs for a controller's calls and the guest's
//! own log lines share the controller's [`LogBudget`](crate::runtime::limits::LogBudget).
//! Metric labels never carry guest strings (see
//! [`KindLabel`](crate::metrics::KindLabel)). Stdout and stderr keep their
//! first [`STDIO_CAPACITY`] bytes each; the rest is counted in the
//! [`Journal`], never a trap.

use std::sync::Arc;
use std::time::Duration;

use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use crate::cluster::{self, Cluster};
use crate::metrics::KindLabel;
use crate::object::{Gvk, ObjectRef};
use crate::runtime::bindings::capstan::operator::types as wit_types;
use crate::runtime::grants::Grants;
use crate::runtime::limits::{Limiter, Limits};

pub(crate) mod events;
pub mod http;
mod kube;
mod log;
mod stdio;
mod throttle;
mod v0_1;
mod v0_2;
mod v0_3;
pub mod validate;

use stdio::CappedPipe;

pub use log::{
    GuestSpan, Level, LogLine, MAX_OPEN_SPANS, MAX_SPAN_ATTRIBUTES, MAX_SPAN_TOKEN, MAX_SPAN_VALUE, MAX_SPANS,
};

/// Most bytes of stdout (and of stderr) kept per invocation; more are
/// counted ([`Journal::stdout_dropped`]) and dropped.
pub const STDIO_CAPACITY: usize = 64 << 10;
/// Most log lines kept per invocation; more are counted and dropped.
pub const MAX_LOG_LINES: usize = 256;
/// Longest log message or field value kept, in bytes.
pub const MAX_LOG_LINE: usize = 4 << 10;

/// Who is calling: the controller and the object being reconciled.
#[derive(Clone)]
pub struct Caller {
    /// Controller name.
    pub controller: Arc<str>,
    /// The name of the cluster the controller runs in (the `cluster` label
    /// of its metrics).
    pub cluster_name: Arc<str>,
    /// Field manager for server-side apply.
    pub field_manager: Arc<str>,
    /// What the controller may do.
    pub grants: Arc<Grants>,
    /// Where calls go.
    pub cluster: Arc<dyn Cluster>,
    /// The object being reconciled and its uid, if in a reconcile.
    pub reconciling: Option<(ObjectRef, Option<String>)>,
    /// Where a fleet controller reaches beyond `cluster`; `None` for a
    /// uniform one.
    pub reach: Option<Reach>,
}

/// The clusters a fleet controller's calls may name besides its own: its
/// home and its members ([`Fleet`](crate::manifest::Fleet)), as engaged
/// now.
#[derive(Clone)]
pub struct Reach {
    /// The engaged clusters.
    pub members: Arc<dyn cluster::Members>,
    /// The home and members the manifest declares.
    pub fleet: crate::manifest::Fleet,
}

impl Caller {
    /// The backend of the cluster named `name`: this caller's own, or a
    /// fleet controller's home or engaged member.
    ///
    /// # Errors
    ///
    /// Why the caller may not reach it: not declared, or not engaged now.
    pub fn cluster_named(&self, name: &str) -> Result<Arc<dyn Cluster>, String> {
        if name == &*self.cluster_name {
            return Ok(Arc::clone(&self.cluster));
        }
        let name = cluster::bounded(name, 64);
        let Some(reach) = &self.reach else {
            return Err(format!(
                "cluster {name}: a uniform controller reaches its own cluster ({}) only",
                self.cluster_name
            ));
        };
        if name != reach.fleet.home && !reach.fleet.has_member(&name) {
            return Err(format!("cluster {name} is not a member of the fleet the manifest declares"));
        }
        reach.members.get(&name).ok_or_else(|| format!("cluster {name} is not engaged now"))
    }
}

impl std::fmt::Debug for Caller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Caller")
            .field("controller", &self.controller)
            .field("reconciling", &self.reconciling)
            .finish_non_exhaustive()
    }
}

impl Caller {
    /// Whose metrics the calls count in.
    pub fn owner(&self) -> crate::metrics::Owner {
        crate::metrics::Owner::new(Arc::clone(&self.cluster_name), Arc::clone(&self.controller))
    }

    /// Namespace of the object being reconciled.
    pub fn own_namespace(&self) -> Option<&str> {
        self.reconciling.as_ref().and_then(|(r, _)| r.namespace.as_deref())
    }

    /// The metrics label of `kind`: its name if this controller's manifest
    /// declares it (every declared kind has a grant rule naming it), else
    /// `other`.
    pub fn kind_label(&self, kind: &Gvk) -> KindLabel {
        KindLabel::bounded(kind, |k| self.grants.rules().iter().any(|r| r.group == k.group && r.kind == k.kind))
    }
}

/// One host call a guest made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImportCall {
    /// The function, e.g. `kube.get`, `events.record`.
    pub function: &'static str,
    /// What it addressed, e.g. `v1/ConfigMap app/web`.
    pub target: String,
    /// How it ended: `ok`, `denied`, or the error.
    pub result: CallResult,
    /// How long it took.
    pub duration: Duration,
}

/// How an import call ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallResult {
    /// It succeeded.
    Ok,
    /// The grants refused it; nothing was sent.
    Denied(String),
    /// The cluster answered with an error.
    Failed(String),
}

/// What a guest did during one invocation.
#[derive(Clone, Debug, Default)]
pub struct Journal {
    /// Host calls, in order.
    pub calls: Vec<ImportCall>,
    /// Log lines (at most [`MAX_LOG_LINES`]).
    pub logs: Vec<LogLine>,
    /// Log lines dropped over the cap.
    pub dropped_logs: usize,
    /// Log lines kept in this journal but not written to the host's log:
    /// the controller's [`LogBudget`](crate::runtime::limits::LogBudget) was spent.
    pub throttled_logs: usize,
    /// Spans the guest opened (at most [`MAX_SPANS`]), in the order opened.
    pub spans: Vec<GuestSpan>,
    /// `start-span` calls the host refused: over [`MAX_SPANS`] or
    /// [`MAX_OPEN_SPANS`].
    pub dropped_spans: usize,
    /// Captured stdout (at most [`STDIO_CAPACITY`] bytes).
    pub stdout: String,
    /// Bytes of stdout dropped over [`STDIO_CAPACITY`].
    pub stdout_dropped: u64,
    /// Captured stderr (at most [`STDIO_CAPACITY`] bytes).
    pub stderr: String,
    /// Bytes of stderr dropped over [`STDIO_CAPACITY`].
    pub stderr_dropped: u64,
}

/// The state of one store: WASI with nothing granted, limits, the caller,
/// and the journal.
pub struct HostState {
    wasi: WasiCtx,
    table: ResourceTable,
    stdout: CappedPipe,
    stderr: CappedPipe,
    limits: Limits,
    /// `kube.*` calls made so far.
    kube_calls: u32,
    /// `events.record` calls made so far.
    events_recorded: u32,
    /// The memory limiter of this store.
    pub limiter: Limiter,
    /// Who is calling, if imports are allowed (not during `manifest()`).
    pub caller: Option<Caller>,
    /// What the guest did.
    pub journal: Journal,
    /// Outbound HTTP: the declared origins and the invocation's budgets.
    outbound: http::Outbound,
    /// Spans the guest has open.
    spans: log::GuestSpans,
    /// The Nodes this instance was handed, for a scheduler (kept between
    /// calls, with the instance).
    pub given: crate::runtime::nodes::Given,
}

impl std::fmt::Debug for HostState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostState").field("caller", &self.caller).finish_non_exhaustive()
    }
}

impl HostState {
    /// Fresh state for one invocation. WASI gets clocks, random and
    /// captured stdio only: no preopened directories, environment,
    /// arguments, network or name lookup.
    pub fn new(limits: &Limits, caller: Option<Caller>) -> Self {
        let stdout = CappedPipe::new(STDIO_CAPACITY);
        let stderr = CappedPipe::new(STDIO_CAPACITY);
        let wasi = wasmtime_wasi::WasiCtxBuilder::new()
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        Self {
            wasi,
            table: ResourceTable::new(),
            stdout,
            stderr,
            limits: *limits,
            kube_calls: 0,
            events_recorded: 0,
            limiter: Limiter::new(limits),
            outbound: http::Outbound::new(limits, caller.as_ref()),
            caller,
            journal: Journal::default(),
            spans: log::GuestSpans::default(),
            given: crate::runtime::nodes::Given::default(),
        }
    }

    /// Ends one invocation of a store that may serve another: takes the
    /// journal, with the captured stdio, and leaves the state as a fresh
    /// one for the same caller (no calls counted, nothing captured).
    pub fn take_journal(&mut self) -> Journal {
        let (stdout, stdout_dropped) = self.stdout.take();
        let (stderr, stderr_dropped) = self.stderr.take();
        self.spans.end_all();
        let mut journal = std::mem::take(&mut self.journal);
        journal.calls.extend(self.outbound.hooks.take_journal());
        journal.stdout = String::from_utf8_lossy(&stdout).into_owned();
        journal.stdout_dropped = stdout_dropped;
        journal.stderr = String::from_utf8_lossy(&stderr).into_owned();
        journal.stderr_dropped = stderr_dropped;
        self.kube_calls = 0;
        self.events_recorded = 0;
        self.limiter.reset();
        journal
    }

    /// Starts another invocation of this store on behalf of `caller`.
    pub fn begin(&mut self, caller: Option<Caller>) {
        self.outbound.hooks.begin(caller.as_ref());
        self.caller = caller;
    }

    /// Sets when the invocation about to run ends: outbound requests end
    /// with it.
    pub fn until(&mut self, deadline: std::time::Instant) {
        self.outbound.hooks.until(deadline);
    }

    fn journal_call(&mut self, function: &'static str, target: String, result: CallResult, duration: Duration) {
        self.journal.calls.push(ImportCall { function, target, result, duration });
    }

    /// Whether the calling controller may log one more host-side warning
    /// or guest line now (its [`LogBudget`](crate::runtime::limits::LogBudget)).
    /// Outside a reconcile (`manifest()`) there is no controller yet: the
    /// per-invocation caps apply alone.
    fn may_log(&self) -> bool {
        match &self.caller {
            Some(caller) => throttle::admit(&caller.owner(), self.limits.log),
            None => true,
        }
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl wasmtime_wasi_http::WasiHttpView for HostState {
    fn http(&mut self) -> wasmtime_wasi_http::WasiHttpCtxView<'_> {
        wasmtime_wasi_http::WasiHttpCtxView {
            ctx: &mut self.outbound.ctx,
            table: &mut self.table,
            hooks: &mut self.outbound.hooks,
        }
    }
}

impl wit_types::Host for HostState {}

/// The `result` label of a call the cluster answered: `ok`, or the error's
/// kind (`not_found`, `conflict`, …).
fn result_label<T>(result: &cluster::Result<T>) -> &'static str {
    result.as_ref().err().map_or("ok", cluster::Error::label)
}

/// Adds the `capstan:operator` imports of every contract version the host
/// runs, WASI p2 and `wasi:http/outgoing-handler`, to a linker.
///
/// # Errors
///
/// When an import is defined twice (a bug).
pub fn add_to_linker(linker: &mut wasmtime::component::Linker<HostState>) -> wasmtime::Result<()> {
    // Guests of some languages import all of WASI p2 even if they use little
    // of it; everything is linked, nothing is granted.
    wasmtime_wasi::p2::add_to_linker_async(linker)?;
    // Outbound HTTP: linked for every component, each request checked
    // against the caller's declared egress (none: every request refused).
    // Only wasi:http's own interfaces: wasi:io and wasi:clocks are linked
    // above.
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(linker)?;
    // The current world's own interfaces one by one: its `add_to_linker`
    // would link wasi:http, wasi:io and wasi:clocks a second time.
    {
        use crate::runtime::bindings::capstan::operator::{events, kube, log, types};
        type Data = wasmtime::component::HasSelf<HostState>;
        types::add_to_linker::<HostState, Data>(linker, |s| s)?;
        kube::add_to_linker::<HostState, Data>(linker, |s| s)?;
        events::add_to_linker::<HostState, Data>(linker, |s| s)?;
        log::add_to_linker::<HostState, Data>(linker, |s| s)?;
    }
    crate::runtime::bindings::v0_1::Operator::add_to_linker::<HostState, wasmtime::component::HasSelf<HostState>>(
        linker,
        |s| s,
    )?;
    crate::runtime::bindings::v0_2::Operator::add_to_linker::<HostState, wasmtime::component::HasSelf<HostState>>(
        linker,
        |s| s,
    )?;
    crate::runtime::bindings::v0_3::Operator::add_to_linker::<HostState, wasmtime::component::HasSelf<HostState>>(
        linker,
        |s| s,
    )?;
    Ok(())
}
