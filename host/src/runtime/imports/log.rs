//! The `log` import: guest log lines become tracing events under the
//! current reconcile span, capped in count and size per invocation, and in
//! rate per controller (its [`LogBudget`](crate::runtime::limits::LogBudget)). Every
//! line within the per-invocation cap is kept in the journal, even one the
//! budget kept out of the host's log; lines over the cap are counted in the
//! journal (`dropped_logs`) and in `capstan_guest_log_lines_dropped_total`.

use crate::metrics::metrics;
use crate::runtime::bindings::capstan::operator::log as wit;

use super::{HostState, MAX_LOG_LINE, MAX_LOG_LINES};

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
        match level {
            _ if !logged => {}
            Level::Trace => tracing::trace!(target: "guest", fields = %rendered, "{message}"),
            Level::Debug => tracing::debug!(target: "guest", fields = %rendered, "{message}"),
            Level::Info => tracing::info!(target: "guest", fields = %rendered, "{message}"),
            Level::Warn => tracing::warn!(target: "guest", fields = %rendered, "{message}"),
            Level::Error => tracing::error!(target: "guest", fields = %rendered, "{message}"),
        }
        self.journal.logs.push(LogLine { level, message, fields });
    }
}
