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

    /// Opens a span named `name` with `attributes`, inside the innermost
    /// span still open (else the host's span of this call); log lines and
    /// API calls until it ends land inside it. It ends when dropped (or
    /// with [`Span::end`]); mark it failed with [`Span::fail`]. Keep `name`
    /// constant and put data in `attributes`:
    ///
    /// ```no_run
    /// # let log = capstan_guest::Log;
    /// let mut span = log.span("render", &[("template", "index")]);
    /// // ... work that may fail:
    /// span.fail("the template does not parse");
    /// ```
    ///
    /// The host bounds what it keeps (names of up to 64 characters of
    /// `[A-Za-z0-9_.:/-]`, 16 attributes, 128 spans per call, 16 open at
    /// once; see docs/guest-sdk.md). Past those it opens nothing, and the
    /// span returned records nothing ([`Span::is_recording`]).
    pub fn span(&self, name: &str, attributes: &[(&str, &str)]) -> Span {
        let attributes: Vec<wit_log::Field> =
            attributes.iter().map(|(k, v)| wit_log::Field { key: (*k).to_owned(), value: (*v).to_owned() }).collect();
        Span { id: wit_log::start_span(name, &attributes), error: None }
    }
}

/// A span a guest opened with [`Log::span`] or
/// [`Context::span`](crate::Context::span): it ends when dropped, and ends
/// every span opened inside it that is still open.
#[derive(Debug)]
#[must_use = "a span ends when dropped: bind it (`let _span = ...`) to keep it open"]
pub struct Span {
    id: u64,
    error: Option<String>,
}

impl Span {
    /// Marks the span failed with `message`; it still ends when dropped.
    pub fn fail(&mut self, message: impl Into<String>) {
        self.error = Some(message.into());
    }

    /// Ends the span now.
    pub fn end(self) {}

    /// Whether the host opened the span (false past its limits).
    pub fn is_recording(&self) -> bool {
        self.id != 0
    }
}

impl Drop for Span {
    fn drop(&mut self) {
        if self.id != 0 {
            wit_log::end_span(self.id, self.error.as_deref());
        }
    }
}
