//! Prometheus metrics of the host: one process-wide registry ([`metrics`]),
//! typed methods for the places that count, and the text exposition served
//! on `/metrics` (see [`server`](crate::serve::server)).
//!
//! Names and labels follow Prometheus conventions and read next to
//! controller-runtime's (`controller_runtime_reconcile_total{controller,result}`,
//! `workqueue_depth{name}`): every family is prefixed `capstan_`, counters
//! end in `_total`, durations are histograms in seconds, and the label
//! naming a controller is always `controller`. Every series of a
//! controller, a scheduler or a watch carries `cluster`: the name the
//! host engaged the cluster by (`default` on a single-cluster host), so
//! the same component in several clusters gives series of its own in
//! each ([`Owner`]). Gauges of a controller that stops (its queue, leader
//! status and state) go with it; its counters stay, also after its
//! cluster is disengaged, as Prometheus expects of counters.
//!
//! | family | labels | what |
//! |---|---|---|
//! | `capstan_reconcile_total` | `cluster`, `controller`, `result` | reconciles by [`ReconcileResult`] |
//! | `capstan_reconcile_errors_total` | `cluster`, `controller` | reconciles that failed (transient or terminal) |
//! | `capstan_terminal_reconcile_errors_total` | `cluster`, `controller` | reconciles that failed for good |
//! | `capstan_reconcile_time_seconds` | `cluster`, `controller` | reconcile duration |
//! | `capstan_queue_depth` | `cluster`, `controller` | objects waiting (read at scrape time) |
//! | `capstan_queue_oldest_item_age_seconds` | `cluster`, `controller` | wait of the oldest waiting object (read at scrape time) |
//! | `capstan_queue_adds_total` | `cluster`, `controller` | objects queued (merged duplicates not counted) |
//! | `capstan_queue_retries_total` | `cluster`, `controller` | objects queued again with backoff after a failure |
//! | `capstan_guest_traps_total` | `cluster`, `controller`, `kind` | invocations ended by `trap`, `deadline`, `memory`, `instantiate` |
//! | `capstan_guest_invocation_seconds` | `cluster`, `controller`, `export` | guest calls (`manifest`, `reconcile`), instantiation included |
//! | `capstan_guest_instances_total` | `cluster`, `controller` | guest instances made for the controller's calls (the others ran on an instance kept from an earlier call) |
//! | `capstan_host_calls_total` | `cluster`, `controller`, `verb`, `kind`, `result` | `kube` and `events` imports by outcome |
//! | `capstan_grant_denials_total` | `cluster`, `controller`, `verb`, `kind` | import calls refused by the grants |
//! | `capstan_host_call_limits_total` | `cluster`, `controller`, `limit` | import calls refused over a per-invocation limit (`host_calls`, `events`) |
//! | `capstan_egress_requests_total` | `cluster`, `controller`, `origin`, `result` | outbound HTTP requests: `ok` (sent), `denied` (not a declared origin; `origin` is `undeclared`), `budget` (over `http_calls`) |
//! | `capstan_guest_log_lines_dropped_total` | `cluster`, `controller`, `reason` | log lines dropped: over the controller's log budget (`budget`) or the per-invocation cap (`cap`) |
//! | `capstan_guest_spans_dropped_total` | `cluster`, `controller` | spans a guest asked for past the per-invocation cap or nesting depth (none was opened) |
//! | `capstan_guest_stdio_dropped_bytes_total` | `cluster`, `controller`, `stream` | guest `stdout` / `stderr` bytes dropped over the capture cap |
//! | `capstan_watch_restarts_total` | `cluster`, `kind` | watches that relisted after their first list |
//! | `capstan_watch_errors_total` | `cluster`, `kind` | watch errors (a lost connection, a 403, an expired resource version), each retried with backoff |
//! | `capstan_component_loads_total` | `result`, `reason` | components `loaded` or `rejected` (with the reason) |
//! | `capstan_components_dir_read_failures_total` | | looks at `--components DIR` that could not read it (they change nothing) |
//! | `capstan_component_compile_seconds` | `source` | compiling with cranelift (`compiled`) or Winch (`baseline`), or loading from the compile cache (`cache`) |
//! | `capstan_leader_status` | `cluster`, `controller` | 1 while this replica leads the controller, else 0 |
//! | `capstan_controllers` | `cluster`, `state` | controllers per state |
//! | `capstan_scheduler_schedule_attempts_total` | `cluster`, `scheduler`, `result` | scheduling attempts: `scheduled`, `unschedulable`, `error` |
//! | `capstan_scheduler_attempt_duration_seconds` | `cluster`, `scheduler` | from taking a Pod off the queue to its binding or failure |
//! | `capstan_scheduler_pending_pods` | `cluster`, `scheduler` | Pods waiting in a scheduler's queue (read at scrape time) |
//! | `capstan_webhook_requests_total` | `cluster`, `controller`, `webhook`, `code` | admission (`webhook` its name) and conversion (`convert`) requests by HTTP code; `unknown` for names not served |
//! | `capstan_webhook_request_duration_seconds` | `cluster`, `controller`, `webhook` | the host's time to answer, guest call included |
//! | `capstan_trace_spans_dropped_total` | `reason` | spans not exported ([`telemetry`](crate::telemetry)): the export queue was full (`queue_full`) or the collector did not take their batch (`export_failed`) |
//!
//! A `kind` label is `Kind` for the core group and `Kind.group` otherwise
//! (`ConfigMap`, `Deployment.apps`), the way `kubectl` names resources.
//! Label values never come from a guest as they are: the kind of an import
//! call is a [`KindLabel`], the kind's name only if the controller's
//! manifest declares it (primary, owned, watched or a permission), else
//! `other`; so a guest cannot grow the registry with made-up kinds.
//!
//! Queue depth and oldest-item age are read from the queues when scraped
//! (a [`Collector`]) rather than set as gauges: the age grows while nothing
//! happens, so a gauge set on queue events would be stale, and a queue that
//! is dropped simply disappears from the scrape.
//!
//! # Caveats
//!
//! The registry is process-global, like controller-runtime's: several hosts
//! in one process (tests) share it, so tests compare deltas or use labels of
//! their own.
//!
//! ```
//! use std::time::Duration;
//! use capstan_host::metrics::{Owner, ReconcileResult, metrics};
//!
//! let greeter = Owner::new("west", "greeter");
//! metrics().reconciled(&greeter, ReconcileResult::Success, Duration::from_millis(12));
//! let scrape = metrics().encode();
//! assert!(scrape.contains(r#"capstan_reconcile_total{cluster="west",controller="greeter",result="success"}"#));
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, LazyLock, Mutex, Weak};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

use crate::manifest::Verb;
use crate::object::Gvk;
use crate::sync::lock;

/// The `Content-Type` of [`Metrics::encode`]'s output (Prometheus text
/// format 0.0.4).
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// The process-wide metrics.
pub fn metrics() -> &'static Metrics {
    static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);
    &METRICS
}

/// How a reconcile ended, as the `result` label of
/// `capstan_reconcile_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReconcileResult {
    /// Done; wait for the next change (`success`).
    Success,
    /// Done; reconcile again after a delay the guest asked for or the
    /// resync period (`requeue_after`).
    RequeueAfter,
    /// A 409 conflict while applying: looked at again shortly, not a
    /// failure (`conflict`).
    Conflict,
    /// Failed; retried with backoff (`error`). Traps count here too.
    Error,
    /// Failed for good; not retried until the object changes. Counted as
    /// `error` in `capstan_reconcile_total`, like controller-runtime, and
    /// in `capstan_terminal_reconcile_errors_total`.
    TerminalError,
}

impl ReconcileResult {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            ReconcileResult::Success => "success",
            ReconcileResult::RequeueAfter => "requeue_after",
            ReconcileResult::Conflict => "conflict",
            ReconcileResult::Error | ReconcileResult::TerminalError => "error",
        }
    }
}

/// The guest export an invocation called, as the `export` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Export {
    /// `manifest()`, once per load.
    Manifest,
    /// `reconcile(...)`.
    Reconcile,
    /// `admission.review(...)`.
    Review,
    /// `conversion.convert(...)`.
    Convert,
    /// `scheduler.schedule(...)`.
    Schedule,
}

impl Export {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Export::Manifest => "manifest",
            Export::Reconcile => "reconcile",
            Export::Review => "review",
            Export::Convert => "convert",
            Export::Schedule => "schedule",
        }
    }
}

/// What the queue metrics read from a controller's queue at scrape time.
pub trait QueueProbe: Send + Sync {
    /// Objects waiting (not in flight, not delayed).
    fn depth(&self) -> usize;
    /// How long the oldest waiting object has waited; zero when none waits.
    fn oldest_age(&self) -> Duration;
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    cluster: String,
    controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReconcileLabels {
    cluster: String,
    controller: String,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TrapLabels {
    cluster: String,
    controller: String,
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct InvocationLabels {
    cluster: String,
    controller: String,
    export: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HostCallLabels {
    cluster: String,
    controller: String,
    verb: &'static str,
    kind: String,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DenialLabels {
    cluster: String,
    controller: String,
    verb: &'static str,
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EgressLabels {
    cluster: String,
    controller: String,
    /// A declared origin (bounded by the manifest), or `undeclared`.
    origin: String,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LimitLabels {
    cluster: String,
    controller: String,
    limit: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DroppedLogLabels {
    cluster: String,
    controller: String,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StdioLabels {
    cluster: String,
    controller: String,
    stream: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    cluster: String,
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LoadLabels {
    result: &'static str,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SourceLabels {
    source: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SchedulerLabels {
    cluster: String,
    scheduler: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WebhookLabels {
    cluster: String,
    controller: String,
    webhook: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WebhookRequestLabels {
    cluster: String,
    controller: String,
    webhook: String,
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AttemptLabels {
    cluster: String,
    scheduler: String,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    cluster: String,
    state: String,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// Buckets of durations that are usually short: 1 ms to ~65 s, doubling.
fn seconds() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

/// The `kind` label of a kind: `Kind` for the core group, else `Kind.group`.
fn kind_label(kind: &Gvk) -> String {
    if kind.group.is_empty() { kind.kind.clone() } else { format!("{}.{}", kind.kind, kind.group) }
}

/// The `kind` label of an import call: drawn from a bounded set, the kinds
/// a controller's manifest declares, plus `other` for everything else.
///
/// ```
/// use capstan_host::metrics::KindLabel;
/// use capstan_host::object::Gvk;
///
/// let declared = [Gvk::new("apps", "v1", "Deployment")];
/// let known = |g: &Gvk| declared.iter().any(|d| d.same_group_kind(g));
/// assert_eq!(KindLabel::bounded(&declared[0], known).as_str(), "Deployment.apps");
/// assert_eq!(KindLabel::bounded(&Gvk::new("x", "v1", "Made0Up"), known).as_str(), "other");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KindLabel(String);

impl KindLabel {
    /// The label of `kind` if `declared(kind)`, else `other`.
    pub fn bounded(kind: &Gvk, declared: impl FnOnce(&Gvk) -> bool) -> Self {
        if declared(kind) { Self(kind_label(kind)) } else { Self::other() }
    }

    /// The label of a kind the host itself names (not a guest).
    pub fn of(kind: &Gvk) -> Self {
        Self(kind_label(kind))
    }

    /// `other`: a kind the manifest does not declare.
    pub fn other() -> Self {
        Self("other".to_owned())
    }

    /// The label value.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

fn controller(owner: &Owner) -> ControllerLabels {
    ControllerLabels { cluster: owner.cluster.to_string(), controller: owner.name.to_string() }
}

/// Whose series these are: a controller (or a scheduler) in one cluster,
/// the `cluster` and `controller` (or `scheduler`) labels. The cluster is
/// named by the host (`default`, or the name it engaged the cluster by,
/// see docs/multicluster.md), never by a guest, so the label's values
/// are bounded by the clusters engaged since the process started.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Owner {
    cluster: Arc<str>,
    name: Arc<str>,
}

impl Owner {
    /// The controller (or scheduler) `name` in `cluster`.
    pub fn new(cluster: impl Into<Arc<str>>, name: impl Into<Arc<str>>) -> Self {
        Self { cluster: cluster.into(), name: name.into() }
    }

    /// `name` in the cluster named `default` (a single-cluster host, the
    /// mock host).
    pub fn in_default(name: impl Into<Arc<str>>) -> Self {
        Self::new(crate::cluster::DEFAULT_CLUSTER, name)
    }

    /// The cluster's name.
    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    /// The controller's (or scheduler's) name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// Reads the tracked queues when scraped.
#[derive(Default)]
struct Queues {
    /// Controllers' queues.
    tracked: Mutex<BTreeMap<Owner, Weak<dyn QueueProbe>>>,
    /// Schedulers' queues.
    schedulers: Mutex<BTreeMap<Owner, Weak<dyn QueueProbe>>>,
}

/// The queues of `tracked` still alive, forgetting the others.
fn live(tracked: &Mutex<BTreeMap<Owner, Weak<dyn QueueProbe>>>) -> Vec<(Owner, Arc<dyn QueueProbe>)> {
    let mut tracked = lock(tracked);
    tracked.retain(|_, q| q.strong_count() > 0);
    tracked.iter().filter_map(|(owner, q)| Some((owner.clone(), q.upgrade()?))).collect()
}

impl std::fmt::Debug for Queues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queues").field("tracked", &lock(&self.tracked).keys().collect::<Vec<_>>()).finish()
    }
}

impl Collector for Queues {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let schedulers = live(&self.schedulers);
        if !schedulers.is_empty() {
            let help = "Pods waiting in a scheduler's queue.";
            let mut pending = encoder.encode_descriptor("scheduler_pending_pods", help, None, MetricType::Gauge)?;
            for (owner, queue) in &schedulers {
                let value = i64::try_from(queue.depth()).unwrap_or(i64::MAX);
                let labels = SchedulerLabels { cluster: owner.cluster.to_string(), scheduler: owner.name.to_string() };
                ConstGauge::new(value).encode(pending.encode_family(&labels)?)?;
            }
        }
        let live: Vec<(ControllerLabels, Arc<dyn QueueProbe>)> =
            live(&self.tracked).into_iter().map(|(owner, q)| (controller(&owner), q)).collect();
        if live.is_empty() {
            return Ok(());
        }
        let help = "Objects waiting in a controller's queue.";
        let mut depth = encoder.encode_descriptor("queue_depth", help, None, MetricType::Gauge)?;
        for (labels, queue) in &live {
            let value = i64::try_from(queue.depth()).unwrap_or(i64::MAX);
            ConstGauge::new(value).encode(depth.encode_family(labels)?)?;
        }
        let help = "How long the oldest object waiting in a controller's queue has waited.";
        let seconds = Unit::Seconds;
        let mut age = encoder.encode_descriptor("queue_oldest_item_age", help, Some(&seconds), MetricType::Gauge)?;
        for (labels, queue) in &live {
            ConstGauge::new(queue.oldest_age().as_secs_f64()).encode(age.encode_family(labels)?)?;
        }
        Ok(())
    }
}

/// The host's metrics. Get the process-wide instance with [`metrics`].
pub struct Metrics {
    registry: Registry,
    reconciles: Family<ReconcileLabels, Counter>,
    reconcile_errors: Family<ControllerLabels, Counter>,
    terminal_errors: Family<ControllerLabels, Counter>,
    reconcile_time: Histograms<ControllerLabels>,
    queues: Arc<Queues>,
    queue_adds: Family<ControllerLabels, Counter>,
    queue_retries: Family<ControllerLabels, Counter>,
    guest_traps: Family<TrapLabels, Counter>,
    guest_time: Histograms<InvocationLabels>,
    guest_instances: Family<ControllerLabels, Counter>,
    host_calls: Family<HostCallLabels, Counter>,
    grant_denials: Family<DenialLabels, Counter>,
    call_limits: Family<LimitLabels, Counter>,
    egress_requests: Family<EgressLabels, Counter>,
    log_dropped: Family<DroppedLogLabels, Counter>,
    stdio_dropped: Family<StdioLabels, Counter>,
    guest_spans_dropped: Family<ControllerLabels, Counter>,
    watch_restarts: Family<KindLabels, Counter>,
    watch_errors: Family<KindLabels, Counter>,
    component_loads: Family<LoadLabels, Counter>,
    components_dir_unreadable: Counter,
    compile_time: Histograms<SourceLabels>,
    leader: Family<ControllerLabels, Gauge>,
    controllers: Family<StateLabels, Gauge>,
    scheduler_attempts: Family<AttemptLabels, Counter>,
    scheduler_attempt_time: Histograms<SchedulerLabels>,
    webhook_requests: Family<WebhookRequestLabels, Counter>,
    spans_dropped: Family<ReasonLabels, Counter>,
    webhook_time: Histograms<WebhookLabels>,
    /// The (cluster, state) pairs `capstan_controllers` has reported.
    states_seen: Mutex<BTreeSet<(String, String)>>,
    /// The state of each controller.
    controller_states: Mutex<BTreeMap<Owner, String>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    fn new() -> Self {
        let mut m = Self {
            registry: Registry::with_prefix("capstan"),
            reconciles: Family::default(),
            reconcile_errors: Family::default(),
            terminal_errors: Family::default(),
            reconcile_time: Family::new_with_constructor(seconds),
            queues: Arc::default(),
            queue_adds: Family::default(),
            queue_retries: Family::default(),
            guest_traps: Family::default(),
            guest_time: Family::new_with_constructor(seconds),
            guest_instances: Family::default(),
            host_calls: Family::default(),
            grant_denials: Family::default(),
            call_limits: Family::default(),
            egress_requests: Family::default(),
            log_dropped: Family::default(),
            stdio_dropped: Family::default(),
            guest_spans_dropped: Family::default(),
            watch_restarts: Family::default(),
            watch_errors: Family::default(),
            component_loads: Family::default(),
            components_dir_unreadable: Counter::default(),
            compile_time: Family::new_with_constructor(seconds),
            leader: Family::default(),
            controllers: Family::default(),
            scheduler_attempts: Family::default(),
            scheduler_attempt_time: Family::new_with_constructor(seconds),
            webhook_requests: Family::default(),
            webhook_time: Family::new_with_constructor(seconds),
            spans_dropped: Family::default(),
            states_seen: Mutex::default(),
            controller_states: Mutex::default(),
        };
        let r = &mut m.registry;
        r.register("reconcile", "Reconciles by controller and result", m.reconciles.clone());
        r.register("reconcile_errors", "Reconciles that failed, transient or terminal", m.reconcile_errors.clone());
        r.register("terminal_reconcile_errors", "Reconciles that failed for good", m.terminal_errors.clone());
        r.register_with_unit("reconcile_time", "Duration of reconciles", Unit::Seconds, m.reconcile_time.clone());
        r.register_collector(Box::new(Arc::clone(&m.queues)));
        r.register("queue_adds", "Objects added to a controller's queue", m.queue_adds.clone());
        r.register("queue_retries", "Objects queued again with backoff after a failure", m.queue_retries.clone());
        r.register(
            "guest_traps",
            "Guest invocations ended by a trap, deadline, memory cap or failed instantiation",
            m.guest_traps.clone(),
        );
        r.register_with_unit(
            "guest_invocation",
            "Duration of guest calls, instantiation included",
            Unit::Seconds,
            m.guest_time.clone(),
        );
        r.register(
            "guest_instances",
            "Guest instances made for a controller's calls (the others reused one)",
            m.guest_instances.clone(),
        );
        r.register("host_calls", "Host import calls by controller, verb, kind and result", m.host_calls.clone());
        r.register("grant_denials", "Host import calls refused by the controller's grants", m.grant_denials.clone());
        r.register("host_call_limits", "Host import calls refused over a per-invocation limit", m.call_limits.clone());
        r.register(
            "egress_requests",
            "Outbound HTTP requests of guests, by declared origin and result",
            m.egress_requests.clone(),
        );
        r.register(
            "guest_log_lines_dropped",
            "Log lines dropped over a controller's log budget or the per-invocation cap",
            m.log_dropped.clone(),
        );
        r.register(
            "guest_spans_dropped",
            "Spans a guest asked for past the per-invocation cap or nesting depth",
            m.guest_spans_dropped.clone(),
        );
        r.register(
            "guest_stdio_dropped_bytes",
            "Guest stdout and stderr bytes dropped over the capture cap",
            m.stdio_dropped.clone(),
        );
        r.register("watch_restarts", "Watches that relisted after their first list", m.watch_restarts.clone());
        r.register("watch_errors", "Watch errors, each retried with backoff", m.watch_errors.clone());
        r.register("component_loads", "Component loads by result and rejection reason", m.component_loads.clone());
        r.register(
            "components_dir_read_failures",
            "Looks at the components directory that could not read it (and changed nothing)",
            m.components_dir_unreadable.clone(),
        );
        r.register_with_unit(
            "component_compile",
            "Time to compile a component or load it from the compile cache",
            Unit::Seconds,
            m.compile_time.clone(),
        );
        r.register("leader_status", "1 while this replica leads the controller, else 0", m.leader.clone());
        r.register("controllers", "Controllers per state", m.controllers.clone());
        r.register(
            "scheduler_schedule_attempts",
            "Scheduling attempts by scheduler and result",
            m.scheduler_attempts.clone(),
        );
        r.register_with_unit(
            "scheduler_attempt_duration",
            "From taking a Pod off a scheduler's queue to its binding or failure",
            Unit::Seconds,
            m.scheduler_attempt_time.clone(),
        );
        r.register(
            "webhook_requests",
            "Webhook requests by controller, webhook and HTTP code",
            m.webhook_requests.clone(),
        );
        r.register_with_unit(
            "webhook_request_duration",
            "Time the host takes to answer a webhook request, guest call included",
            Unit::Seconds,
            m.webhook_time.clone(),
        );
        r.register(
            "trace_spans_dropped",
            "Spans not exported: the export queue was full or the collector did not take them",
            m.spans_dropped.clone(),
        );
        m
    }

    /// The registry in the Prometheus text format ([`CONTENT_TYPE`]).
    /// Families appear once they have a series.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry)
            .expect("writing to a String does not fail");
        out
    }

    /// Counts one reconcile of `controller` and its duration.
    pub fn reconciled(&self, owner: &Owner, result: ReconcileResult, duration: Duration) {
        let labels = controller(owner);
        self.reconciles
            .get_or_create(&ReconcileLabels {
                cluster: labels.cluster.clone(),
                controller: labels.controller.clone(),
                result: result.as_str(),
            })
            .inc();
        if matches!(result, ReconcileResult::Error | ReconcileResult::TerminalError) {
            self.reconcile_errors.get_or_create(&labels).inc();
        }
        if result == ReconcileResult::TerminalError {
            self.terminal_errors.get_or_create(&labels).inc();
        }
        self.reconcile_time.get_or_create(&labels).observe(duration.as_secs_f64());
    }

    /// Reports `queue`'s depth and oldest-item age as `owner`'s from now
    /// on, until the queue is dropped or another queue is tracked for the
    /// same controller in the same cluster.
    pub fn track_queue(&self, owner: &Owner, queue: Weak<dyn QueueProbe>) {
        lock(&self.queues.tracked).insert(owner.clone(), queue);
    }

    /// Counts an object added to `controller`'s queue.
    pub fn queue_added(&self, owner: &Owner) {
        self.queue_adds.get_or_create(&controller(owner)).inc();
    }

    /// Counts an object queued again with backoff after a failure.
    pub fn queue_retried(&self, owner: &Owner) {
        self.queue_retries.get_or_create(&controller(owner)).inc();
    }

    /// Counts a guest invocation ended by a trap, the deadline, the memory
    /// cap or a failed instantiation (`kind`: [`TrapKind::as_str`](crate::runtime::invocation::TrapKind::as_str)).
    pub fn guest_trapped(&self, owner: &Owner, kind: &'static str) {
        self.guest_traps
            .get_or_create(&TrapLabels { cluster: owner.cluster.to_string(), controller: owner.name.to_string(), kind })
            .inc();
    }

    /// Counts an instance made for a call of `owner`.
    pub fn guest_instantiated(&self, owner: &Owner) {
        self.guest_instances.get_or_create(&controller(owner)).inc();
    }

    /// Records the duration of a guest call.
    pub fn guest_invoked(&self, owner: &Owner, export: Export, duration: Duration) {
        self.guest_time
            .get_or_create(&InvocationLabels {
                cluster: owner.cluster.to_string(),
                controller: owner.name.to_string(),
                export: export.as_str(),
            })
            .observe(duration.as_secs_f64());
    }

    /// Counts a host import call. `result` is `ok`, `denied`, or the
    /// error's kind in snake case (`not_found`, `conflict`, `forbidden`, …).
    pub fn host_call(&self, owner: &Owner, verb: Verb, kind: &KindLabel, result: &'static str) {
        let labels = HostCallLabels {
            cluster: owner.cluster.to_string(),
            controller: owner.name.to_string(),
            verb: verb.as_str(),
            kind: kind.as_str().to_owned(),
            result,
        };
        self.host_calls.get_or_create(&labels).inc();
    }

    /// Counts a call the grants refused.
    pub fn grant_denied(&self, owner: &Owner, verb: Verb, kind: &KindLabel) {
        let labels = DenialLabels {
            cluster: owner.cluster.to_string(),
            controller: owner.name.to_string(),
            verb: verb.as_str(),
            kind: kind.as_str().to_owned(),
        };
        self.grant_denials.get_or_create(&labels).inc();
    }

    /// Counts an outbound HTTP request: `origin` is the declared origin it
    /// matched or `undeclared`; `result` is `ok`, `denied` or `budget`.
    pub fn egress_request(&self, owner: &Owner, origin: &str, result: &'static str) {
        let labels = EgressLabels {
            cluster: owner.cluster.to_string(),
            controller: owner.name.to_string(),
            origin: origin.to_owned(),
            result,
        };
        self.egress_requests.get_or_create(&labels).inc();
    }

    /// Counts a call refused over a per-invocation limit (`limit`:
    /// `host_calls` or `events`).
    pub fn call_limited(&self, owner: &Owner, limit: &'static str) {
        self.call_limits
            .get_or_create(&LimitLabels {
                cluster: owner.cluster.to_string(),
                controller: owner.name.to_string(),
                limit,
            })
            .inc();
    }

    /// Counts `n` log lines of `controller` dropped (`reason`: `budget` or
    /// `cap`).
    pub fn log_lines_dropped(&self, owner: &Owner, reason: &'static str, n: u64) {
        self.log_dropped
            .get_or_create(&DroppedLogLabels {
                cluster: owner.cluster.to_string(),
                controller: owner.name.to_string(),
                reason,
            })
            .inc_by(n);
    }

    /// Counts `n` spans a guest asked for that the host did not open.
    pub fn guest_spans_dropped(&self, owner: &Owner, n: u64) {
        self.guest_spans_dropped.get_or_create(&controller(owner)).inc_by(n);
    }

    /// Counts `n` bytes of a guest's `stream` (`stdout` or `stderr`)
    /// dropped over the capture cap.
    pub fn stdio_dropped(&self, owner: &Owner, stream: &'static str, n: u64) {
        self.stdio_dropped
            .get_or_create(&StdioLabels {
                cluster: owner.cluster.to_string(),
                controller: owner.name.to_string(),
                stream,
            })
            .inc_by(n);
    }

    /// Counts a watch of `kind` that relisted after its first list.
    pub fn watch_restarted(&self, cluster: &str, kind: &Gvk) {
        self.watch_restarts.get_or_create(&KindLabels { cluster: cluster.to_owned(), kind: kind_label(kind) }).inc();
    }

    /// Counts an error of the watch of `kind` (it is retried with backoff).
    pub fn watch_failed(&self, cluster: &str, kind: &Gvk) {
        self.watch_errors.get_or_create(&KindLabels { cluster: cluster.to_owned(), kind: kind_label(kind) }).inc();
    }

    /// Counts a component loaded.
    pub fn component_loaded(&self) {
        self.component_loads.get_or_create(&LoadLabels { result: "loaded", reason: "" }).inc();
    }

    /// Counts a component rejected, with a short snake-case reason
    /// (`compile`, `world`, `contract`, `manifest`, …; see
    /// [`component::Error::reason`](crate::runtime::component::Error::reason)).
    pub fn component_rejected(&self, reason: &'static str) {
        self.component_loads.get_or_create(&LoadLabels { result: "rejected", reason }).inc();
    }

    /// Counts `n` spans the trace export dropped, for `reason`
    /// (`queue_full`, `export_failed`).
    pub fn trace_spans_dropped(&self, reason: &'static str, n: u64) {
        self.spans_dropped.get_or_create(&ReasonLabels { reason }).inc_by(n);
    }

    /// Counts a look at the components directory that could not read it.
    pub fn components_dir_unreadable(&self) {
        self.components_dir_unreadable.inc();
    }

    /// Records the time to compile a component (`source`: `compiled` by
    /// cranelift, `baseline` by Winch) or load it from the compile cache
    /// (`cache`).
    pub fn compiled(&self, source: &'static str, duration: Duration) {
        self.compile_time.get_or_create(&SourceLabels { source }).observe(duration.as_secs_f64());
    }

    /// Sets whether this replica leads `controller`.
    pub fn set_leader(&self, owner: &Owner, leader: bool) {
        self.leader.get_or_create(&controller(owner)).set(i64::from(leader));
    }

    /// Sets the number of controllers per cluster and state from the
    /// state of each controller (e.g. `running`, `syncing`); series
    /// reported before and missing now drop to 0.
    fn set_controller_states(&self, states: &BTreeMap<Owner, String>) {
        let mut counts: BTreeMap<(String, &str), i64> = BTreeMap::new();
        for (owner, state) in states {
            *counts.entry((owner.cluster.to_string(), state.as_str())).or_default() += 1;
        }
        let mut seen = lock(&self.states_seen);
        seen.extend(counts.keys().map(|(cluster, state)| (cluster.clone(), (*state).to_owned())));
        for (cluster, state) in seen.iter() {
            let count = counts.get(&(cluster.clone(), state.as_str())).copied().unwrap_or(0);
            self.controllers.get_or_create(&StateLabels { cluster: cluster.clone(), state: state.clone() }).set(count);
        }
    }

    /// Sets the state of one controller (`None`: it is gone) and the
    /// number of controllers per cluster and state from the states of all.
    pub fn set_controller_state(&self, owner: &Owner, state: Option<&str>) {
        let mut states = lock(&self.controller_states);
        match state {
            Some(state) => states.insert(owner.clone(), state.to_owned()),
            None => states.remove(owner),
        };
        self.set_controller_states(&states);
    }

    /// Reports `queue`'s depth as the scheduler `owner`'s pending Pods
    /// from now on, until the queue is dropped.
    pub fn track_scheduler_queue(&self, owner: &Owner, queue: Weak<dyn QueueProbe>) {
        lock(&self.queues.schedulers).insert(owner.clone(), queue);
    }

    /// Counts one scheduling attempt of the scheduler `owner` (`result`:
    /// `scheduled`, `unschedulable` or `error`) and its duration.
    pub fn scheduler_attempted(&self, owner: &Owner, result: &'static str, duration: Duration) {
        let labels = AttemptLabels { cluster: owner.cluster.to_string(), scheduler: owner.name.to_string(), result };
        self.scheduler_attempts.get_or_create(&labels).inc();
        self.scheduler_attempt_time
            .get_or_create(&SchedulerLabels { cluster: owner.cluster.to_string(), scheduler: owner.name.to_string() })
            .observe(duration.as_secs_f64());
    }

    /// Counts one webhook request answered with HTTP `code` for
    /// `controller`'s `webhook` (`convert` for conversion), and the time
    /// it took. Callers pass `unknown` for names the host does not serve,
    /// so that requests cannot grow the registry.
    pub fn webhook_served(&self, owner: &Owner, webhook: &str, code: u16, duration: Duration) {
        let (cluster, controller, webhook) = (owner.cluster.to_string(), owner.name.to_string(), webhook.to_owned());
        let labels = WebhookRequestLabels {
            cluster: cluster.clone(),
            controller: controller.clone(),
            webhook: webhook.clone(),
            code: code.to_string(),
        };
        self.webhook_requests.get_or_create(&labels).inc();
        self.webhook_time
            .get_or_create(&WebhookLabels { cluster, controller, webhook })
            .observe(duration.as_secs_f64());
    }

    /// Drops the gauges of a controller that is gone (its leader status,
    /// queue and state); its counters stay, as Prometheus expects of
    /// counters.
    pub fn remove_controller(&self, owner: &Owner) {
        self.leader.remove(&controller(owner));
        lock(&self.queues.tracked).remove(owner);
        self.set_controller_state(owner, None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of the series `name{labels}` in a scrape, if present.
    fn value(scrape: &str, series: &str) -> Option<f64> {
        scrape.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    /// Checks the Prometheus text format line by line: comments are HELP or
    /// TYPE, each sample is `name{label="value",...} number`, every sample
    /// belongs to the family of the last TYPE line.
    fn assert_valid_exposition(scrape: &str) {
        let mut family: Option<(String, String)> = None;
        for line in scrape.lines() {
            if let Some(rest) = line.strip_prefix("# ") {
                let mut parts = rest.splitn(3, ' ');
                let (keyword, name) = (parts.next(), parts.next());
                assert!(matches!(keyword, Some("HELP" | "TYPE")), "comment: {line}");
                let name = name.unwrap_or_else(|| panic!("comment without a name: {line}"));
                if keyword == Some("TYPE") {
                    let kind = parts.next().unwrap_or_default();
                    assert!(["counter", "gauge", "histogram"].contains(&kind), "type: {line}");
                    family = Some((name.to_owned(), kind.to_owned()));
                }
                continue;
            }
            let (series, number) = line.rsplit_once(' ').unwrap_or_else(|| panic!("sample: {line}"));
            assert!(number.parse::<f64>().is_ok() || ["+Inf", "-Inf", "NaN"].contains(&number), "value: {line}");
            let (name, labels) = match series.split_once('{') {
                Some((name, labels)) => (name, labels.strip_suffix('}').unwrap_or_else(|| panic!("labels: {line}"))),
                None => (series, ""),
            };
            assert!(
                name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') && name.starts_with("capstan_"),
                "name: {line}"
            );
            for pair in labels.split("\",").filter(|p| !p.is_empty()) {
                let (key, value) = pair.split_once("=\"").unwrap_or_else(|| panic!("label: {line}"));
                assert!(key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'), "label name: {line}");
                assert!(!value.trim_end_matches('"').contains('"'), "unescaped quote: {line}");
            }
            let (family_name, kind) = family.as_ref().unwrap_or_else(|| panic!("sample before TYPE: {line}"));
            let suffixes: &[&str] = match kind.as_str() {
                "histogram" => &["_bucket", "_sum", "_count"],
                _ => &[""],
            };
            assert!(
                suffixes.iter().any(|s| name.strip_suffix(s) == Some(family_name.as_str())),
                "{name} outside its family {family_name}"
            );
        }
    }

    #[test]
    fn reconciles_are_counted_by_controller_and_result() {
        let m = metrics();
        let series = r#"capstan_reconcile_total{cluster="default",controller="metrics-reconcile",result="error"}"#;
        let errors = r#"capstan_reconcile_errors_total{cluster="default",controller="metrics-reconcile"}"#;
        let terminal = r#"capstan_terminal_reconcile_errors_total{cluster="default",controller="metrics-reconcile"}"#;
        let before = m.encode();
        m.reconciled(&Owner::in_default("metrics-reconcile"), ReconcileResult::Error, Duration::from_millis(3));
        m.reconciled(&Owner::in_default("metrics-reconcile"), ReconcileResult::TerminalError, Duration::from_millis(3));
        m.reconciled(&Owner::in_default("metrics-reconcile"), ReconcileResult::Success, Duration::from_millis(3));
        let after = m.encode();
        let delta = |s: &str| value(&after, s).unwrap_or(0.0) - value(&before, s).unwrap_or(0.0);
        assert_eq!(delta(series), 2.0);
        assert_eq!(delta(errors), 2.0);
        assert_eq!(delta(terminal), 1.0);
        assert_eq!(
            delta(r#"capstan_reconcile_total{cluster="default",controller="metrics-reconcile",result="success"}"#),
            1.0
        );
        assert_eq!(
            delta(r#"capstan_reconcile_time_seconds_count{cluster="default",controller="metrics-reconcile"}"#),
            3.0
        );
        assert!(after.contains("# TYPE capstan_reconcile_time_seconds histogram"), "{after}");
        assert_eq!(
            delta(
                r#"capstan_reconcile_time_seconds_bucket{cluster="default",controller="metrics-reconcile",le="0.004"}"#
            ),
            3.0
        );
    }

    #[test]
    fn every_family_has_its_labels() {
        let m = metrics();
        let cm = Gvk::new("", "v1", "ConfigMap");
        let deploy = Gvk::new("apps", "v1", "Deployment");
        m.guest_trapped(&Owner::in_default("metrics-labels"), "deadline");
        m.guest_invoked(&Owner::in_default("metrics-labels"), Export::Reconcile, Duration::from_millis(1));
        m.host_call(&Owner::in_default("metrics-labels"), Verb::Get, &KindLabel::of(&cm), "not_found");
        m.grant_denied(&Owner::in_default("metrics-labels"), Verb::Delete, &KindLabel::of(&deploy));
        m.call_limited(&Owner::in_default("metrics-labels"), "events");
        m.log_lines_dropped(&Owner::in_default("metrics-labels"), "budget", 2);
        m.stdio_dropped(&Owner::in_default("metrics-labels"), "stdout", 100);
        m.guest_spans_dropped(&Owner::in_default("metrics-labels"), 3);
        m.watch_restarted("default", &deploy);
        m.watch_failed("default", &deploy);
        m.component_rejected("contract");
        m.component_loaded();
        m.compiled("cache", Duration::from_millis(2));
        m.set_leader(&Owner::in_default("metrics-labels"), true);
        m.queue_added(&Owner::in_default("metrics-labels"));
        m.queue_retried(&Owner::in_default("metrics-labels"));
        let scrape = m.encode();
        for series in [
            r#"capstan_guest_traps_total{cluster="default",controller="metrics-labels",kind="deadline"}"#,
            r#"capstan_guest_invocation_seconds_count{cluster="default",controller="metrics-labels",export="reconcile"}"#,
            r#"capstan_host_calls_total{cluster="default",controller="metrics-labels",verb="get",kind="ConfigMap",result="not_found"}"#,
            r#"capstan_grant_denials_total{cluster="default",controller="metrics-labels",verb="delete",kind="Deployment.apps"}"#,
            r#"capstan_host_call_limits_total{cluster="default",controller="metrics-labels",limit="events"}"#,
            r#"capstan_guest_log_lines_dropped_total{cluster="default",controller="metrics-labels",reason="budget"}"#,
            r#"capstan_guest_stdio_dropped_bytes_total{cluster="default",controller="metrics-labels",stream="stdout"}"#,
            r#"capstan_guest_spans_dropped_total{cluster="default",controller="metrics-labels"}"#,
            r#"capstan_watch_restarts_total{cluster="default",kind="Deployment.apps"}"#,
            r#"capstan_watch_errors_total{cluster="default",kind="Deployment.apps"}"#,
            r#"capstan_component_loads_total{result="rejected",reason="contract"}"#,
            r#"capstan_component_loads_total{result="loaded",reason=""}"#,
            r#"capstan_component_compile_seconds_count{source="cache"}"#,
            r#"capstan_leader_status{cluster="default",controller="metrics-labels"}"#,
            r#"capstan_queue_adds_total{cluster="default",controller="metrics-labels"}"#,
            r#"capstan_queue_retries_total{cluster="default",controller="metrics-labels"}"#,
        ] {
            assert!(value(&scrape, series).is_some_and(|v| v >= 1.0), "{series} missing in\n{scrape}");
        }
        m.set_leader(&Owner::in_default("metrics-labels"), false);
        assert_eq!(
            value(&m.encode(), r#"capstan_leader_status{cluster="default",controller="metrics-labels"}"#),
            Some(0.0)
        );
        m.remove_controller(&Owner::in_default("metrics-labels"));
        assert_eq!(value(&m.encode(), r#"capstan_leader_status{cluster="default",controller="metrics-labels"}"#), None);
    }

    struct FixedQueue(usize, Duration);

    impl QueueProbe for FixedQueue {
        fn depth(&self) -> usize {
            self.0
        }
        fn oldest_age(&self) -> Duration {
            self.1
        }
    }

    #[test]
    fn queues_are_read_when_scraped_and_vanish_when_dropped() {
        let m = metrics();
        let queue: Arc<dyn QueueProbe> = Arc::new(FixedQueue(3, Duration::from_millis(1500)));
        m.track_queue(&Owner::in_default("metrics-queue"), Arc::downgrade(&queue));
        let scrape = m.encode();
        assert_eq!(
            value(&scrape, r#"capstan_queue_depth{cluster="default",controller="metrics-queue"}"#),
            Some(3.0),
            "{scrape}"
        );
        assert_eq!(
            value(&scrape, r#"capstan_queue_oldest_item_age_seconds{cluster="default",controller="metrics-queue"}"#),
            Some(1.5)
        );
        drop(queue);
        assert_eq!(value(&m.encode(), r#"capstan_queue_depth{cluster="default",controller="metrics-queue"}"#), None);
    }

    #[test]
    fn scheduler_attempts_and_pending_pods_are_reported_per_scheduler() {
        let m = metrics();
        m.scheduler_attempted(&Owner::in_default("metrics-sched"), "scheduled", Duration::from_millis(3));
        m.scheduler_attempted(&Owner::in_default("metrics-sched"), "unschedulable", Duration::from_millis(2));
        m.scheduler_attempted(&Owner::in_default("metrics-sched"), "scheduled", Duration::from_millis(4));
        let queue: Arc<dyn QueueProbe> = Arc::new(FixedQueue(2, Duration::ZERO));
        m.track_scheduler_queue(&Owner::in_default("metrics-sched"), Arc::downgrade(&queue));
        let scrape = m.encode();
        assert_valid_exposition(&scrape);
        let attempts = |result: &str| {
            let series = format!(
                r#"capstan_scheduler_schedule_attempts_total{{cluster="default",scheduler="metrics-sched",result="{result}"}}"#
            );
            value(&scrape, &series)
        };
        assert_eq!((attempts("scheduled"), attempts("unschedulable")), (Some(2.0), Some(1.0)));
        let count = r#"capstan_scheduler_attempt_duration_seconds_count{cluster="default",scheduler="metrics-sched"}"#;
        assert_eq!(value(&scrape, count), Some(3.0));
        assert_eq!(
            value(&scrape, r#"capstan_scheduler_pending_pods{cluster="default",scheduler="metrics-sched"}"#),
            Some(2.0)
        );
        drop(queue);
        assert_eq!(
            value(&m.encode(), r#"capstan_scheduler_pending_pods{cluster="default",scheduler="metrics-sched"}"#),
            None
        );
    }

    #[test]
    fn controller_states_are_counted_per_cluster_and_reset() {
        // A registry of its own: other tests in this process set controller
        // states on the shared one, which recounts every state.
        let m = Metrics::new();
        let (a, b) = (Owner::new("west", "a"), Owner::new("west", "b"));
        m.set_controller_state(&a, Some("running"));
        m.set_controller_state(&b, Some("running"));
        m.set_controller_state(&Owner::new("east", "a"), Some("syncing"));
        let scrape = m.encode();
        assert_eq!(value(&scrape, r#"capstan_controllers{cluster="west",state="running"}"#), Some(2.0));
        assert_eq!(value(&scrape, r#"capstan_controllers{cluster="east",state="syncing"}"#), Some(1.0));
        m.set_controller_state(&b, None);
        m.set_controller_state(&Owner::new("east", "a"), Some("running"));
        let scrape = m.encode();
        assert_eq!(value(&scrape, r#"capstan_controllers{cluster="west",state="running"}"#), Some(1.0));
        assert_eq!(value(&scrape, r#"capstan_controllers{cluster="east",state="syncing"}"#), Some(0.0));
        assert_eq!(value(&scrape, r#"capstan_controllers{cluster="east",state="running"}"#), Some(1.0));
    }

    #[test]
    fn the_same_controller_in_two_clusters_has_series_of_its_own_in_each() {
        let m = metrics();
        let (west, east) = (Owner::new("metrics-west", "fleet-same"), Owner::new("metrics-east", "fleet-same"));
        let west_queue: Arc<dyn QueueProbe> = Arc::new(FixedQueue(3, Duration::from_secs(2)));
        let east_queue: Arc<dyn QueueProbe> = Arc::new(FixedQueue(5, Duration::from_secs(7)));
        m.track_queue(&west, Arc::downgrade(&west_queue));
        m.track_queue(&east, Arc::downgrade(&east_queue));
        m.track_scheduler_queue(&west, Arc::downgrade(&west_queue));
        m.track_scheduler_queue(&east, Arc::downgrade(&east_queue));
        m.set_leader(&west, true);
        m.set_leader(&east, false);
        m.reconciled(&west, ReconcileResult::Success, Duration::from_millis(1));
        let scrape = m.encode();
        assert_valid_exposition(&scrape);
        let series = |family: &str, cluster: &str, label: &str| {
            value(&scrape, &format!(r#"{family}{{cluster="{cluster}",{label}="fleet-same"}}"#))
        };
        assert_eq!(series("capstan_queue_depth", "metrics-west", "controller"), Some(3.0), "{scrape}");
        assert_eq!(series("capstan_queue_depth", "metrics-east", "controller"), Some(5.0));
        assert_eq!(series("capstan_queue_oldest_item_age_seconds", "metrics-east", "controller"), Some(7.0));
        assert_eq!(series("capstan_scheduler_pending_pods", "metrics-west", "scheduler"), Some(3.0));
        assert_eq!(series("capstan_scheduler_pending_pods", "metrics-east", "scheduler"), Some(5.0));
        assert_eq!(series("capstan_leader_status", "metrics-west", "controller"), Some(1.0));
        assert_eq!(series("capstan_leader_status", "metrics-east", "controller"), Some(0.0));
        let reconciled = r#"capstan_reconcile_total{cluster="metrics-east",controller="fleet-same",result="success"}"#;
        assert_eq!(value(&scrape, reconciled), None, "only the west copy reconciled");

        // One cluster's controller stops: the other's gauges stay.
        m.remove_controller(&west);
        let scrape = m.encode();
        assert_eq!(value(&scrape, r#"capstan_queue_depth{cluster="metrics-west",controller="fleet-same"}"#), None);
        assert_eq!(value(&scrape, r#"capstan_leader_status{cluster="metrics-west",controller="fleet-same"}"#), None);
        assert_eq!(value(&scrape, r#"capstan_queue_depth{cluster="metrics-east",controller="fleet-same"}"#), Some(5.0));
        assert_eq!(
            value(&scrape, r#"capstan_leader_status{cluster="metrics-east",controller="fleet-same"}"#),
            Some(0.0)
        );
    }

    #[test]
    fn a_scrape_is_valid_exposition_text() {
        let m = metrics();
        m.reconciled(&Owner::in_default("metrics-valid"), ReconcileResult::RequeueAfter, Duration::from_secs(1));
        m.host_call(
            &Owner::in_default("metrics-valid"),
            Verb::Patch,
            &KindLabel::of(&Gvk::new("examples.capstan.dev", "v1", "Greeting")),
            "ok",
        );
        let queue: Arc<dyn QueueProbe> = Arc::new(FixedQueue(0, Duration::ZERO));
        m.track_queue(&Owner::in_default("metrics-valid"), Arc::downgrade(&queue));
        let scrape = m.encode();
        assert_valid_exposition(&scrape);
        assert!(scrape.contains("# TYPE capstan_reconcile_total counter"), "{scrape}");
        assert!(scrape.contains("# TYPE capstan_queue_depth gauge"), "{scrape}");
    }
}
