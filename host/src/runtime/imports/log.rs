//! The `log` import: guest log lines become tracing events under the
//! current reconcile span, capped in count and size per invocation, and in
//! rate per controller (its [`LogBudget`](crate::runtime::limits::LogBudget)). Every
//! line within the per-invocation cap is kept in the journal, even one the
//! budget kept out of the host's log; lines over the cap are counted in the
//! journal (`dropped_logs`) and in `capstan_guest_log_lines_dropped_total`.
//!
//! Spans the guest opens (`start-span`, `end-span`, new in 0.4.0) are
//! tracing spans named `guest_span` whose OpenTelemetry name (`otel.name`)
//! is the guest's, inside the innermost guest span still open or else the
//! call's `guest_call` span; log lines and host calls land in the innermost
//! one. Everything the guest hands in is bounded (see [`MAX_SPANS`] and the
//! WIT): names and keys are cut to [`MAX_SPAN_TOKEN`] bytes of
//! `[A-Za-z0-9_.:/-]`, values and errors to [`MAX_SPAN_VALUE`] bytes, at
//! most [`MAX_SPAN_ATTRIBUTES`] attributes, and keys beginning with `otel.`
//! are dropped (they would speak for the exporter). Spans the host refused
//! are counted in the journal (`dropped_spans`) and in
//! `capstan_guest_spans_dropped_total`; the journal keeps what was opened
//! ([`GuestSpan`]), so the mock host shows it.

use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use crate::metrics::metrics;
use crate::runtime::bindings::capstan::operator::log as wit;

use super::{HostState, MAX_LOG_LINE, MAX_LOG_LINES};

/// Most spans a guest may open in one invocation; past it `start-span`
/// returns `0`.
pub const MAX_SPANS: usize = 128;
/// Most guest spans open at once (nesting depth).
pub const MAX_OPEN_SPANS: usize = 16;
/// Most attributes kept per guest span; more are dropped.
pub const MAX_SPAN_ATTRIBUTES: usize = 16;
/// Longest span name or attribute key kept, in bytes.
pub const MAX_SPAN_TOKEN: usize = 64;
/// Longest attribute value or error message kept, in bytes.
pub const MAX_SPAN_VALUE: usize = 256;

/// A span a guest opened, as the journal keeps it (bounded as exported).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuestSpan {
    /// Name, cut and sanitized.
    pub name: String,
    /// The name of the guest span it was opened in, if any.
    pub parent: Option<String>,
    /// Attributes kept, in order.
    pub attributes: Vec<(String, String)>,
    /// The error it ended with, if any.
    pub error: Option<String>,
}

/// The guest spans of one store: those open, innermost last, and how many
/// were opened in the current invocation.
#[derive(Debug, Default)]
pub(crate) struct GuestSpans {
    /// Open spans: (id, tracing span, index in the journal's spans).
    open: Vec<(u64, tracing::Span, usize)>,
    /// The last id handed out: ids are never reused in a store, so a stale
    /// id from an earlier invocation matches nothing.
    last: u64,
}

impl GuestSpans {
    /// Ends every open span (the invocation is over).
    pub(crate) fn end_all(&mut self) {
        self.open.clear();
    }

    /// The span host calls and log lines land in: the innermost open guest
    /// span, else the current one (the call's).
    pub(crate) fn parent(&self) -> tracing::Span {
        self.innermost().unwrap_or_else(tracing::Span::current)
    }

    /// The innermost open guest span that records anything.
    fn innermost(&self) -> Option<tracing::Span> {
        self.open.iter().rev().find(|(_, span, _)| !span.is_disabled()).map(|(_, span, _)| span.clone())
    }
}

/// `s` with every character outside `[A-Za-z0-9_.:/-]` replaced by `_`,
/// cut to [`MAX_SPAN_TOKEN`] bytes.
fn token(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_ascii_alphanumeric() || "_.:/-".contains(c) { c } else { '_' })
        .take(MAX_SPAN_TOKEN)
        .collect()
}

/// `s` cut to at most `max` bytes at a character boundary.
fn cut(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

/// Severity of a guest log line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Very verbose.
    Trace,
    /// Diagnostics.
    Debug,
    /// Normal operation.
    Info,
    /// Handled surprise.
    Warn,
    /// Failure.
    Error,
}

/// One guest log line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogLine {
    /// Severity.
    pub level: Level,
    /// Message (capped at [`MAX_LOG_LINE`] bytes).
    pub message: String,
    /// Key-value fields.
    pub fields: Vec<(String, String)>,
}

fn cap(mut s: String) -> String {
    if s.len() > MAX_LOG_LINE {
        let mut end = MAX_LOG_LINE;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push('…');
    }
    s
}

impl wit::Host for HostState {
    async fn log(&mut self, level: wit::Level, message: String, fields: Vec<wit::Field>) {
        if self.journal.logs.len() >= MAX_LOG_LINES {
            self.journal.dropped_logs += 1;
            if let Some(caller) = &self.caller {
                metrics().log_lines_dropped(&caller.owner(), "cap", 1);
            }
            return;
        }
        let level = match level {
            wit::Level::Trace => Level::Trace,
            wit::Level::Debug => Level::Debug,
            wit::Level::Info => Level::Info,
            wit::Level::Warn => Level::Warn,
            wit::Level::Error => Level::Error,
        };
        let message = cap(message);
        let fields: Vec<(String, String)> = fields.into_iter().map(|f| (cap(f.key), cap(f.value))).collect();
        let rendered = fields.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ");
        // A line the host's log level filters out uses none of the budget.
        let enabled = match level {
            Level::Trace => tracing::enabled!(target: "guest", tracing::Level::TRACE),
            Level::Debug => tracing::enabled!(target: "guest", tracing::Level::DEBUG),
            Level::Info => tracing::enabled!(target: "guest", tracing::Level::INFO),
            Level::Warn => tracing::enabled!(target: "guest", tracing::Level::WARN),
            Level::Error => tracing::enabled!(target: "guest", tracing::Level::ERROR),
        };
        let logged = enabled && self.may_log();
        if enabled && !logged {
            self.journal.throttled_logs += 1;
        }
        let parent = self.spans.parent();
        match level {
            _ if !logged => {}
            Level::Trace => tracing::trace!(target: "guest", parent: &parent, fields = %rendered, "{message}"),
            Level::Debug => tracing::debug!(target: "guest", parent: &parent, fields = %rendered, "{message}"),
            Level::Info => tracing::info!(target: "guest", parent: &parent, fields = %rendered, "{message}"),
            Level::Warn => tracing::warn!(target: "guest", parent: &parent, fields = %rendered, "{message}"),
            Level::Error => tracing::error!(target: "guest", parent: &parent, fields = %rendered, "{message}"),
        }
        self.journal.logs.push(LogLine { level, message, fields });
    }

    async fn start_span(&mut self, name: String, attributes: Vec<wit::Field>) -> wit::SpanId {
        if self.journal.spans.len() >= MAX_SPANS || self.spans.open.len() >= MAX_OPEN_SPANS {
            self.journal.dropped_spans += 1;
            if let Some(caller) = &self.caller {
                metrics().guest_spans_dropped(&caller.owner(), 1);
            }
            return 0;
        }
        let name = match token(&name) {
            n if n.is_empty() => "span".to_owned(),
            n => n,
        };
        let attributes: Vec<(String, String)> = attributes
            .into_iter()
            .map(|f| (token(&f.key), f.value))
            .filter(|(k, _)| !k.is_empty() && !k.starts_with("otel."))
            .take(MAX_SPAN_ATTRIBUTES)
            .map(|(k, v)| (k, cut(v, MAX_SPAN_VALUE)))
            .collect();
        let rendered = attributes.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ");
        let span = tracing::info_span!(
            parent: &self.spans.parent(),
            "guest_span",
            "otel.name" = %name,
            name = %name,
            attributes = %rendered,
            "otel.status_code" = tracing::field::Empty,
            "otel.status_message" = tracing::field::Empty,
        );
        for (key, value) in &attributes {
            span.set_attribute(key.clone(), value.clone());
        }
        let parent = self.spans.open.last().map(|(_, _, i)| self.journal.spans[*i].name.clone());
        self.spans.last += 1;
        let id = self.spans.last;
        self.spans.open.push((id, span, self.journal.spans.len()));
        self.journal.spans.push(GuestSpan { name, parent, attributes, error: None });
        self.outbound.hooks.guest_span = self.spans.innermost();
        id
    }

    async fn end_span(&mut self, id: wit::SpanId, error: Option<String>) {
        let Some(at) = self.spans.open.iter().position(|(open, _, _)| *open == id) else {
            return;
        };
        if let Some(message) = error {
            let message = cut(message, MAX_SPAN_VALUE);
            let (_, span, index) = &self.spans.open[at];
            crate::telemetry::record_error(span, &message);
            self.journal.spans[*index].error = Some(message);
        }
        // Ends it and every span opened inside it.
        self.spans.open.truncate(at);
        self.outbound.hooks.guest_span = self.spans.innermost();
    }
}
