//! Structured logging through the host: lines are re-emitted as tracing
//! events under the span of the current reconcile.

use crate::imports::log as wit_log;

/// Severity of a log line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    /// Very verbose diagnostics.
    Trace,
    /// Diagnostics.
    Debug,
    /// Normal operation.
    Info,
    /// Something unexpected that was handled.
    Warn,
    /// Something failed.
    Error,
}

impl From<Level> for wit_log::Level {
    fn from(l: Level) -> Self {
        match l {
            Level::Trace => Self::Trace,
            Level::Debug => Self::Debug,
            Level::Info => Self::Info,
            Level::Warn => Self::Warn,
            Level::Error => Self::Error,
        }
    }
}

/// Logger handed out by [`Context::log`](crate::Context::log). Keep
/// messages constant and put data in the fields:
///
/// ```no_run
/// # let ctx: capstan_guest::Context = unimplemented!();
/// ctx.log().info("configmap applied", &[("name", "web"), ("keys", "3")]);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct Log;

impl Log {
    /// Emits a line at `level`.
    pub fn log(&self, level: Level, message: &str, fields: &[(&str, &str)]) {
        let fields: Vec<wit_log::Field> =
            fields.iter().map(|(k, v)| wit_log::Field { key: (*k).to_owned(), value: (*v).to_owned() }).collect();
        wit_log::log(level.into(), message, &fields);
    }

    /// Emits a trace line.
    pub fn trace(&self, message: &str, fields: &[(&str, &str)]) {
        self.log(Level::Trace, message, fields);
    }

    /// Emits a debug line.
    pub fn debug(&self, message: &str, fields: &[(&str, &str)]) {
        self.log(Level::Debug, message, fields);
    }

    /// Emits an info line.
    pub fn info(&self, message: &str, fields: &[(&str, &str)]) {
        self.log(Level::Info, message, fields);
    }

    /// Emits a warning.
    pub fn warn(&self, message: &str, fields: &[(&str, &str)]) {
        self.log(Level::Warn, message, fields);
    }

    /// Emits an error line.
    pub fn error(&self, message: &str, fields: &[(&str, &str)]) {
        self.log(Level::Error, message, fields);
    }
}
