//! Trace export: the host's spans sent to an OpenTelemetry collector over
//! OTLP (HTTP/protobuf or gRPC), off unless an endpoint is configured.
//!
//! [`Config`] is what `capstan run` reads from its flags and the standard
//! `OTEL_*` variables; [`Export::start`] turns it into a tracer provider
//! whose [`layer`](Export::layer) joins the host's log subscriber, so every
//! `tracing` span the host opens (a reconcile, a guest call, a host call)
//! becomes an OpenTelemetry span, and every event inside one (a guest's
//! log line among them) a span event.
//!
//! # Guarantees
//!
//! - A worker never waits for the collector: finished spans go into a
//!   bounded queue ([`Config::queue_size`]) that a thread of the exporter
//!   empties in batches. A span that finds the queue full is dropped, and
//!   so is every span of a batch the collector did not take; both are
//!   counted in `capstan_trace_spans_dropped_total{reason}`
//!   ([`metrics`](crate::metrics)), `queue_full` and `export_failed`.
//! - Span names and attributes are the host's: verbs, kinds, names,
//!   status codes, never an object's contents.
//!
//! ```
//! use capstan_host::telemetry::{Config, Sampler};
//!
//! // What `OTEL_EXPORTER_OTLP_ENDPOINT=http://collector:4318` configures.
//! let config = Config::default().endpoint("http://collector:4318", false);
//! assert_eq!(config.endpoint.as_deref(), Some("http://collector:4318/v1/traces"));
//! assert_eq!(config.sampler, Sampler::ParentBased(Box::new(Sampler::AlwaysOn)));
//!
//! // ... and with `OTEL_EXPORTER_OTLP_PROTOCOL=grpc`, the gRPC service at
//! // the collector's other port, the URL as it is.
//! let config = Config::default().protocol("grpc")?.endpoint("http://collector:4317", false);
//! assert_eq!(config.endpoint.as_deref(), Some("http://collector:4317"));
//! # Ok::<(), capstan_host::telemetry::Error>(())
//! ```

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{Span as _, TraceContextExt as _, Tracer as _, TracerProvider as _};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracer, SdkTracerProvider, SpanData, SpanProcessor,
};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use crate::metrics::metrics;

/// The default of [`Config::queue_size`], the SDK's own.
pub const DEFAULT_QUEUE_SIZE: usize = 2048;

/// What went wrong configuring the export.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `OTEL_TRACES_SAMPLER` names no sampler the host has.
    #[error(
        "unknown traces sampler {0:?}: use always_on, always_off, traceidratio, parentbased_always_on, \
         parentbased_always_off or parentbased_traceidratio"
    )]
    Sampler(String),
    /// `OTEL_TRACES_SAMPLER_ARG` is not a ratio between 0 and 1.
    #[error("traces sampler argument {0:?} is not a ratio between 0 and 1")]
    SamplerArg(String),
    /// `OTEL_EXPORTER_OTLP_PROTOCOL` asks for a protocol the host does not
    /// speak (`http/json`).
    #[error("OTLP protocol {0:?} is not supported: use http/protobuf or grpc")]
    Protocol(String),
    /// The exporter could not be built (a malformed endpoint, a header).
    #[error("cannot build the OTLP exporter")]
    Build(#[source] opentelemetry_otlp::ExporterBuildError),
}

/// Which spans are sampled (exported), as `OTEL_TRACES_SAMPLER` names
/// them.
#[derive(Debug, Clone, PartialEq)]
pub enum Sampler {
    /// Every trace (`always_on`).
    AlwaysOn,
    /// No trace (`always_off`).
    AlwaysOff,
    /// This share of traces, chosen by trace id (`traceidratio`).
    TraceIdRatio(f64),
    /// The caller's decision where a span has a remote parent, else the
    /// inner sampler's (`parentbased_*`). A reconcile has no remote
    /// parent, so this is the inner sampler for the host.
    ParentBased(Box<Sampler>),
}

impl Default for Sampler {
    /// `parentbased_always_on`, the OpenTelemetry default.
    fn default() -> Self {
        Sampler::ParentBased(Box::new(Sampler::AlwaysOn))
    }
}

impl Sampler {
    /// Reads `OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG` values
    /// (the ratio of the `traceidratio` samplers, 1.0 if absent).
    ///
    /// # Errors
    ///
    /// An unknown name ([`Error::Sampler`]) or a ratio outside 0..=1
    /// ([`Error::SamplerArg`]).
    pub fn parse(name: &str, arg: Option<&str>) -> Result<Self, Error> {
        let ratio = || match arg.map(str::trim) {
            None | Some("") => Ok(1.0),
            Some(a) => a.parse::<f64>().ok().filter(|r| (0.0..=1.0).contains(r)).ok_or(Error::SamplerArg(a.into())),
        };
        Ok(match name.trim() {
            "always_on" => Sampler::AlwaysOn,
            "always_off" => Sampler::AlwaysOff,
            "traceidratio" => Sampler::TraceIdRatio(ratio()?),
            "parentbased_always_on" => Sampler::ParentBased(Box::new(Sampler::AlwaysOn)),
            "parentbased_always_off" => Sampler::ParentBased(Box::new(Sampler::AlwaysOff)),
            "parentbased_traceidratio" => Sampler::ParentBased(Box::new(Sampler::TraceIdRatio(ratio()?))),
            other => return Err(Error::Sampler(other.into())),
        })
    }

    fn to_sdk(&self) -> opentelemetry_sdk::trace::Sampler {
        use opentelemetry_sdk::trace::Sampler as S;
        match self {
            Sampler::AlwaysOn => S::AlwaysOn,
            Sampler::AlwaysOff => S::AlwaysOff,
            Sampler::TraceIdRatio(r) => S::TraceIdRatioBased(*r),
            Sampler::ParentBased(inner) => S::ParentBased(Box::new(inner.to_sdk())),
        }
    }
}

/// How spans travel to the collector, as `OTEL_EXPORTER_OTLP_PROTOCOL`
/// (or `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`) names it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Protocol {
    /// `http/protobuf`: protobuf posted over HTTP to `…/v1/traces`, by
    /// default on the collector's port [4318](Protocol::default_port). The
    /// default, as the OpenTelemetry specification has it.
    #[default]
    HttpProtobuf,
    /// `grpc`: the OTLP gRPC service, by default on the collector's port
    /// [4317](Protocol::default_port).
    Grpc,
}

impl Protocol {
    /// Reads an `OTEL_EXPORTER_OTLP_PROTOCOL` value.
    ///
    /// # Errors
    ///
    /// [`Error::Protocol`] for any protocol but `http/protobuf` and
    /// `grpc` (`http/json`, which the host does not speak).
    pub fn parse(name: &str) -> Result<Self, Error> {
        match name.trim() {
            "http/protobuf" => Ok(Protocol::HttpProtobuf),
            "grpc" => Ok(Protocol::Grpc),
            other => Err(Error::Protocol(other.to_owned())),
        }
    }

    /// The name `OTEL_EXPORTER_OTLP_PROTOCOL` gives it.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::HttpProtobuf => "http/protobuf",
            Protocol::Grpc => "grpc",
        }
    }

    /// The port a collector takes it on unless configured otherwise:
    /// 4318 for `http/protobuf`, 4317 for `grpc`.
    pub fn default_port(self) -> u16 {
        match self {
            Protocol::HttpProtobuf => 4318,
            Protocol::Grpc => 4317,
        }
    }
}

/// Where traces go and which. Built from `capstan run`'s flags.
#[derive(Debug, Clone, PartialEq)]
#[must_use]
pub struct Config {
    /// The URL spans are sent to: `…/v1/traces` over HTTP, the
    /// collector's address for gRPC. Default: none, no export.
    pub endpoint: Option<String>,
    /// How they travel. Default: [`Protocol::HttpProtobuf`].
    pub protocol: Protocol,
    /// `service.name` of the spans. Default: `capstan`.
    pub service_name: String,
    /// Which traces are exported. Default: every one
    /// (`parentbased_always_on`).
    pub sampler: Sampler,
    /// Finished spans that may wait for the exporter; more are dropped
    /// and counted. Default: [`DEFAULT_QUEUE_SIZE`].
    pub queue_size: usize,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            endpoint: None,
            protocol: Protocol::default(),
            service_name: "capstan".to_owned(),
            sampler: Sampler::default(),
            queue_size: DEFAULT_QUEUE_SIZE,
        }
    }
}

impl Config {
    /// Sets the collector, for the [`protocol`](Self::protocol) set
    /// before: `url` as it is when `signal` (it names the traces endpoint,
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) or over gRPC (whose service
    /// has no path of its own), else with `/v1/traces` appended
    /// (`OTEL_EXPORTER_OTLP_ENDPOINT` over HTTP, the collector's base URL).
    pub fn endpoint(mut self, url: &str, signal: bool) -> Self {
        self.endpoint = Some(match self.protocol {
            Protocol::HttpProtobuf if !signal => format!("{}/v1/traces", url.trim_end_matches('/')),
            _ => url.to_owned(),
        });
        self
    }

    /// Sets the protocol from an `OTEL_EXPORTER_OTLP_PROTOCOL` value
    /// ([`Protocol::parse`]). Set it before the
    /// [`endpoint`](Self::endpoint), which depends on it.
    ///
    /// # Errors
    ///
    /// [`Error::Protocol`] for a protocol the host does not speak
    /// (`http/json`).
    pub fn protocol(mut self, protocol: &str) -> Result<Self, Error> {
        self.protocol = Protocol::parse(protocol)?;
        Ok(self)
    }
}

/// A running export: the tracer provider and its batch thread. Call
/// [`shutdown`](Self::shutdown) before the process exits, or the last
/// batch is lost.
#[derive(Debug)]
pub struct Export {
    provider: SdkTracerProvider,
}

impl Export {
    /// Starts exporting per `config`; `None` when no endpoint is set.
    ///
    /// Over HTTP the exporter posts from a thread of its own; over gRPC
    /// it sends from that thread too, through a connection whose I/O runs
    /// on the Tokio runtime current here: call it from within the
    /// runtime the host runs on (`capstan run` does).
    ///
    /// # Errors
    ///
    /// [`Error::Build`] when the exporter cannot be built from the
    /// endpoint or the `OTEL_EXPORTER_OTLP_*` variables it also reads
    /// (headers, timeout, compression).
    ///
    /// # Panics
    ///
    /// With [`Protocol::Grpc`], outside a Tokio runtime.
    pub fn start(config: &Config) -> Result<Option<Self>, Error> {
        use opentelemetry_otlp::{WithExportConfig as _, WithTonicConfig as _};
        let Some(endpoint) = &config.endpoint else { return Ok(None) };
        // Both clients (reqwest and tonic, rustls without a bundled
        // provider) need one installed: ring's, as everywhere in the host.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let builder = opentelemetry_otlp::SpanExporter::builder();
        // The protocol given, so that neither builder reads it again from
        // an `OTEL_*` variable that a flag overrode.
        let exporter = match config.protocol {
            Protocol::HttpProtobuf => builder
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .with_endpoint(endpoint)
                .build(),
            Protocol::Grpc => {
                let builder =
                    builder.with_tonic().with_protocol(opentelemetry_otlp::Protocol::Grpc).with_endpoint(endpoint);
                // `https://` verified against the platform's roots, as over
                // HTTP (tonic trusts none unless told).
                let builder = if endpoint.starts_with("https://") {
                    use opentelemetry_otlp::tonic_types::transport::ClientTlsConfig;
                    builder.with_tls_config(ClientTlsConfig::new().with_native_roots())
                } else {
                    builder
                };
                builder.build()
            }
        }
        .map_err(Error::Build)?;
        let provider = provider(config, exporter);
        let _ = TRACER.set(provider.tracer("capstan"));
        Ok(Some(Self { provider }))
    }

    /// What the export layer takes, whatever `--log` says: the host's
    /// spans (all at `info`), the guest's log lines from `info` up (span
    /// events), and warnings and errors of everything else.
    pub const FILTER: &'static str = "warn,capstan_host=info,guest=info";

    /// The `tracing` layer that turns the host's spans into exported ones.
    /// Give it [`FILTER`](Self::FILTER), its own filter: the log's level
    /// must not decide what is exported.
    pub fn layer<S>(&self) -> impl tracing_subscriber::Layer<S> + use<S>
    where
        S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
    {
        // No source location, thread, target or busy/idle attributes: they
        // tell the reader of a trace nothing about the reconcile and cost
        // every span its encoding, and every poll of an instrumented future
        // two clock reads (measured in `bench-greetings`, `capstan-traced`).
        tracing_opentelemetry::layer()
            .with_tracer(self.provider.tracer("capstan"))
            .with_location(false)
            .with_threads(false)
            .with_target(false)
            .with_tracked_inactivity(false)
    }

    /// Exports what is queued (waiting at most a few seconds for the
    /// collector) and stops the batch thread.
    pub fn shutdown(self) {
        if let Err(e) = self.provider.shutdown_with_timeout(Duration::from_secs(5)) {
            tracing::warn!(error = %e, "trace export did not shut down cleanly");
        }
    }
}

/// The tracer of the first export started ([`Export::start`]), for the
/// spans [`record_span`] makes with times of their own.
static TRACER: OnceLock<SdkTracer> = OnceLock::new();

/// Records a finished span `name`, a child of `parent`, that ran from
/// `start` to `end`: for what the host knows the times of only
/// afterwards, such as the time an object waited in the queue before a
/// worker took it (`queue_wait`, which began before its `reconcile`).
/// Does nothing when no trace is exported or `parent`'s trace is not
/// sampled.
pub fn record_span(parent: &tracing::Span, name: &'static str, start: SystemTime, end: SystemTime) {
    if let Some(tracer) = TRACER.get() {
        child_span(tracer, &parent.context(), name, start, end);
    }
}

/// [`record_span`] with the tracer given.
fn child_span(
    tracer: &SdkTracer,
    parent: &opentelemetry::Context,
    name: &'static str,
    start: SystemTime,
    end: SystemTime,
) {
    if !parent.span().span_context().is_sampled() {
        return;
    }
    let mut span = tracer.span_builder(name).with_start_time(start).start_with_context(tracer, parent);
    span.end_with_timestamp(end.max(start));
}

/// A tracer provider exporting through `exporter` in batches, behind
/// the bounded, counted queue.
fn provider(config: &Config, exporter: impl opentelemetry_sdk::trace::SpanExporter + 'static) -> SdkTracerProvider {
    let in_queue = Arc::new(AtomicUsize::new(0));
    let counting =
        CountingExporter { inner: exporter, in_queue: Arc::clone(&in_queue), failing: AtomicBool::new(false) };
    let batch = BatchSpanProcessor::builder(counting)
        .with_batch_config(BatchConfigBuilder::default().with_max_queue_size(config.queue_size).build())
        .build();
    let processor = BoundedProcessor { inner: batch, in_queue, capacity: config.queue_size };
    let resource = opentelemetry_sdk::Resource::builder().with_service_name(config.service_name.clone()).build();
    SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_sampler(config.sampler.to_sdk())
        .with_resource(resource)
        .build()
}

/// Makes `span` the root of a trace of its own in the export, though it
/// stays under its `tracing` parent (a controller's span) in the log
/// lines, and records the trace's id in the span's `trace_id` field (which
/// the span must declare, `trace_id = tracing::field::Empty`) so that
/// every log line under it carries the id. Does nothing when no trace is
/// exported or the trace is not sampled.
pub fn start_trace(span: &tracing::Span) {
    if span.set_parent(opentelemetry::Context::new()).is_err() {
        return;
    }
    let context = span.context();
    let span_context = context.span().span_context().clone();
    if span_context.is_sampled() {
        span.record("trace_id", tracing::field::display(span_context.trace_id()));
    }
}

/// The id of the trace the current span belongs to, in hex, if that
/// trace is exported and sampled (see [`start_trace`]); `None` without
/// an exporter. The host writes it on the Events it records
/// ([`TRACE_ID_ANNOTATION`]).
pub fn current_trace_id() -> Option<String> {
    let context = tracing::Span::current().context();
    let span = context.span();
    let span_context = span.span_context();
    (span_context.is_valid() && span_context.is_sampled()).then(|| span_context.trace_id().to_string())
}

/// The annotation of an Event the host records during a sampled trace:
/// the trace's id, to look it up in the tracing backend. A repeated Event
/// (a series) carries the id of its last occurrence's trace.
pub const TRACE_ID_ANNOTATION: &str = "capstan.dev/trace-id";

/// Records on `span`, which declares `otel.status_code` and
/// `otel.status_message`, that what it covers failed with `message`
/// (bounded to [`MAX_MESSAGE`](crate::cluster::MAX_MESSAGE)).
pub fn record_error(span: &tracing::Span, message: &str) {
    span.record("otel.status_code", "error");
    span.record("otel.status_message", crate::cluster::bounded(message, crate::cluster::MAX_MESSAGE));
}

/// Records the outcome of an API request on `span`, which declares
/// `status_code`, `otel.status_code` and `otel.status_message`: the
/// answer's HTTP status code, and, for a failure, the error status (with
/// the error's kind, not its message: that may quote the object).
pub fn record_request<T>(span: &tracing::Span, result: &crate::cluster::Result<T>) {
    if let Err(e) = result {
        if let Some(code) = e.code() {
            span.record("status_code", code);
        }
        span.record("otel.status_code", "error");
        span.record("otel.status_message", e.label());
    }
}

/// A batch processor in front of which spans are counted: one that would
/// find the batch queue full is dropped here, counted, instead of there,
/// silently.
#[derive(Debug)]
struct BoundedProcessor {
    inner: BatchSpanProcessor,
    /// Spans handed to `inner` not yet taken by an export (an upper bound
    /// of what waits in its queue).
    in_queue: Arc<AtomicUsize>,
    capacity: usize,
}

impl SpanProcessor for BoundedProcessor {
    fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, cx: &opentelemetry::Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        if self.in_queue.fetch_add(1, Ordering::AcqRel) >= self.capacity {
            self.in_queue.fetch_sub(1, Ordering::AcqRel);
            metrics().trace_spans_dropped("queue_full", 1);
            return;
        }
        self.inner.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}

/// The OTLP exporter, counting what leaves the queue and what the
/// collector did not take.
#[derive(Debug)]
struct CountingExporter<E> {
    inner: E,
    in_queue: Arc<AtomicUsize>,
    /// Whether the last export failed (to log a failure once, not per batch).
    failing: AtomicBool,
}

impl<E: opentelemetry_sdk::trace::SpanExporter> opentelemetry_sdk::trace::SpanExporter for CountingExporter<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let n = batch.len();
        self.in_queue.fetch_sub(n, Ordering::AcqRel);
        let result = self.inner.export(batch).await;
        match &result {
            Ok(()) => {
                if self.failing.swap(false, Ordering::AcqRel) {
                    tracing::info!("trace export recovered");
                }
            }
            Err(e) => {
                metrics().trace_spans_dropped("export_failed", n as u64);
                if !self.failing.swap(true, Ordering::AcqRel) {
                    tracing::warn!(error = %e, "trace export failed; spans are dropped until the collector answers");
                }
            }
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use opentelemetry::trace::{Tracer as _, TracerProvider as _};

    use super::*;

    /// An exporter that waits while `hold` is locked by the test, then
    /// answers `fail` or success, counting what it took.
    #[derive(Debug)]
    struct Collector {
        hold: Arc<Mutex<()>>,
        fail: bool,
        took: Arc<AtomicUsize>,
    }

    impl opentelemetry_sdk::trace::SpanExporter for Collector {
        async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
            drop(self.hold.lock());
            self.took.fetch_add(batch.len(), Ordering::SeqCst);
            if self.fail { Err(opentelemetry_sdk::error::OTelSdkError::InternalFailure("down".into())) } else { Ok(()) }
        }
    }

    fn dropped(reason: &str) -> u64 {
        let series = format!("capstan_trace_spans_dropped_total{{reason=\"{reason}\"}}");
        metrics().encode().lines().find_map(|l| l.strip_prefix(series.as_str())?.trim().parse().ok()).unwrap_or(0)
    }

    fn spans(provider: &SdkTracerProvider, n: usize) {
        let tracer = provider.tracer("test");
        for _ in 0..n {
            tracer.in_span("reconcile", |_| {});
        }
    }

    #[test]
    fn a_full_queue_drops_spans_counts_them_and_never_blocks() {
        let hold = Arc::new(Mutex::new(()));
        let took = Arc::new(AtomicUsize::new(0));
        let collector = Collector { hold: Arc::clone(&hold), fail: false, took: Arc::clone(&took) };
        let config = Config { queue_size: 4, ..Config::default() };
        let provider = provider(&config, collector);
        let before = dropped("queue_full");
        // The collector hangs: at most the queue's 4 spans (and one batch
        // in its hands) wait; the rest are dropped, at once.
        let held = hold.lock().expect("not poisoned");
        spans(&provider, 100);
        let after = dropped("queue_full");
        drop(held);
        assert!(after - before >= 100 - 8, "dropped {} of 100 spans", after - before);
        provider.shutdown().expect("shuts down");
        let exported = took.load(Ordering::SeqCst) as u64;
        assert_eq!(exported + (after - before), 100, "every span was exported or counted as dropped");
    }

    #[test]
    fn spans_the_collector_does_not_take_are_counted_as_dropped() {
        let took = Arc::new(AtomicUsize::new(0));
        let collector = Collector { hold: Arc::default(), fail: true, took: Arc::clone(&took) };
        let provider = provider(&Config::default(), collector);
        let before = dropped("export_failed");
        spans(&provider, 10);
        provider.shutdown().expect("shuts down");
        assert_eq!(took.load(Ordering::SeqCst), 10);
        assert_eq!(dropped("export_failed") - before, 10);
    }

    #[test]
    fn samplers_and_endpoints_read_as_opentelemetry_names_them() {
        assert_eq!(Sampler::parse("always_off", None).expect("known"), Sampler::AlwaysOff);
        assert_eq!(Sampler::parse("traceidratio", Some("0.25")).expect("known"), Sampler::TraceIdRatio(0.25));
        assert_eq!(
            Sampler::parse("parentbased_traceidratio", None).expect("known"),
            Sampler::ParentBased(Box::new(Sampler::TraceIdRatio(1.0)))
        );
        let base = Config::default().endpoint("http://collector:4318/", false);
        assert_eq!(base.endpoint.as_deref(), Some("http://collector:4318/v1/traces"));
        let signal = Config::default().endpoint("http://collector:4318/custom", true);
        assert_eq!(signal.endpoint.as_deref(), Some("http://collector:4318/custom"));
        let http = Config::default().protocol("http/protobuf").expect("spoken");
        assert_eq!(http.protocol, Protocol::HttpProtobuf);
        assert_eq!(Config::default().protocol, Protocol::HttpProtobuf, "http/protobuf unless told");
        // gRPC: the collector's address as it is, base or signal URL alike.
        let grpc = Config::default().protocol(" grpc ").expect("spoken");
        assert_eq!(grpc.protocol, Protocol::Grpc);
        assert_eq!(
            grpc.clone().endpoint("http://collector:4317", false).endpoint.as_deref(),
            Some("http://collector:4317")
        );
        assert_eq!(grpc.endpoint("https://collector:4317", true).endpoint.as_deref(), Some("https://collector:4317"));
        assert_eq!((Protocol::Grpc.default_port(), Protocol::HttpProtobuf.default_port()), (4317, 4318));
        assert_eq!(Protocol::parse(Protocol::Grpc.as_str()).expect("round trip"), Protocol::Grpc);
    }

    #[test]
    fn a_span_recorded_afterwards_keeps_its_times_and_parent() {
        #[derive(Debug, Default)]
        struct Keep(Arc<Mutex<Vec<SpanData>>>);
        impl opentelemetry_sdk::trace::SpanExporter for Keep {
            async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
                self.0.lock().expect("not poisoned").extend(batch);
                Ok(())
            }
        }
        let kept = Arc::new(Mutex::new(Vec::new()));
        let provider = provider(&Config::default(), Keep(Arc::clone(&kept)));
        let tracer = provider.tracer("test");
        let (start, end) =
            (SystemTime::UNIX_EPOCH + Duration::from_secs(10), SystemTime::UNIX_EPOCH + Duration::from_secs(12));
        let root = tracer.start("reconcile");
        let root_context = root.span_context().clone();
        let parent = opentelemetry::Context::current_with_span(root);
        child_span(&tracer, &parent, "queue_wait", start, end);
        // An unsampled parent (none at all here): nothing is recorded.
        child_span(&tracer, &opentelemetry::Context::new(), "orphan", start, end);
        drop(parent);
        provider.shutdown().expect("shuts down");
        let kept = kept.lock().expect("not poisoned");
        let wait = kept.iter().find(|s| s.name == "queue_wait").expect("the span was exported");
        assert_eq!((wait.start_time, wait.end_time), (start, end));
        assert_eq!(wait.parent_span_id, root_context.span_id());
        assert_eq!(wait.span_context.trace_id(), root_context.trace_id());
        assert!(kept.iter().all(|s| s.name != "orphan"), "a span without a sampled parent is not recorded");
    }

    #[test]
    fn error_messages_read_right() {
        let e = Sampler::parse("jaeger_remote", None).expect_err("unknown");
        assert!(e.to_string().starts_with("unknown traces sampler \"jaeger_remote\": use always_on"), "{e}");
        let e = Sampler::parse("traceidratio", Some("2")).expect_err("out of range");
        assert_eq!(e.to_string(), "traces sampler argument \"2\" is not a ratio between 0 and 1");
        let e = Config::default().protocol("http/json").expect_err("not spoken");
        assert_eq!(e.to_string(), "OTLP protocol \"http/json\" is not supported: use http/protobuf or grpc");
    }
}
