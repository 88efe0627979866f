//! The sandbox limits of one guest invocation: a memory cap (enforced by a
//! `ResourceLimiter`, with the pooling allocator's slot size as a hard
//! ceiling), a wall-clock deadline (enforced through epoch interruption),
//! caps on the host calls and events of one invocation (enforced by the
//! imports: past a cap, each call returns a WIT error, never a trap), and
//! the rate at which one controller's warnings and guest log lines reach
//! the host's log (see [`LogBudget`]).
//!
//! ```
//! use std::time::Duration;
//! use capstan_host::runtime::limits::Limits;
//!
//! let limits = Limits::default().deadline(Duration::from_secs(2)).host_calls(100).events(10);
//! assert_eq!((limits.host_calls, limits.events), (100, 10));
//! ```

use std::time::Duration;

/// Limits applied to every guest invocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub struct Limits {
    /// Most linear memory one instance may grow to, in bytes.
    /// Default: 64 MiB.
    pub memory: usize,
    /// Longest one call may run. Default: 5 s.
    pub deadline: Duration,
    /// Most `kube.*` calls one invocation may make; later calls return
    /// `denied` (naming the limit) without reaching the cluster. Denied
    /// calls count too. Default: [`DEFAULT_HOST_CALLS`].
    pub host_calls: u32,
    /// Most `events.record` calls one invocation may make; later calls
    /// return `denied` (naming the limit). Default: [`DEFAULT_EVENTS`].
    pub events: u32,
    /// How fast one controller's host-side warnings (denied calls, calls
    /// over a limit) and guest log lines reach the host's log.
    /// Default: [`LogBudget::default`].
    pub log: LogBudget,
    /// Most calls one instance serves before it is dropped; 1 makes every
    /// call start from a fresh instance. An instance is only ever reused
    /// by the controller it first served, and never after a trap, a
    /// deadline, a memory fault, or once its memory has grown past half
    /// of [`Limits::memory`]. Default: [`DEFAULT_REUSE`].
    pub reuse: u32,
    /// Most outbound HTTP requests one invocation may make; later ones
    /// fail for the guest (`internal-error` naming the limit) without a
    /// connection. Default: [`DEFAULT_HTTP_CALLS`].
    pub http_calls: u32,
    /// Most response body bytes one invocation may read, summed over its
    /// requests; a body past it fails with `HTTP-response-body-size`.
    /// Default: [`DEFAULT_HTTP_BYTES`].
    pub http_bytes: u64,
}

/// Default of [`Limits::host_calls`]: 1000 `kube.*` calls per invocation.
pub const DEFAULT_HOST_CALLS: u32 = 1000;

/// Default of [`Limits::reuse`]: an instance serves up to 1000 calls.
pub const DEFAULT_REUSE: u32 = 1000;

/// Default of [`Limits::events`]: 100 events recorded per invocation.
pub const DEFAULT_EVENTS: u32 = 100;

/// Default most outbound HTTP requests per invocation.
pub const DEFAULT_HTTP_CALLS: u32 = 16;

/// Default most response bytes (bodies, summed) per invocation: 16 MiB.
pub const DEFAULT_HTTP_BYTES: u64 = 16 << 20;

/// Longest a connection (TCP and TLS) may take to open, however long the
/// invocation has left.
pub const HTTP_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory: 64 << 20,
            deadline: Duration::from_secs(5),
            host_calls: DEFAULT_HOST_CALLS,
            events: DEFAULT_EVENTS,
            log: LogBudget::default(),
            reuse: DEFAULT_REUSE,
            http_calls: DEFAULT_HTTP_CALLS,
            http_bytes: DEFAULT_HTTP_BYTES,
        }
    }
}

impl Limits {
    /// Sets the memory cap.
    pub fn memory(mut self, bytes: usize) -> Self {
        self.memory = bytes;
        self
    }

    /// Sets the deadline.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// Sets the most `kube.*` calls per invocation.
    pub fn host_calls(mut self, n: u32) -> Self {
        self.host_calls = n;
        self
    }

    /// Sets the most `events.record` calls per invocation.
    pub fn events(mut self, n: u32) -> Self {
        self.events = n;
        self
    }

    /// Sets the log budget of each controller.
    pub fn log(mut self, budget: LogBudget) -> Self {
        self.log = budget;
        self
    }

    /// Sets the most outbound HTTP requests per invocation.
    pub fn http_calls(mut self, n: u32) -> Self {
        self.http_calls = n;
        self
    }

    /// Sets the most response bytes (bodies, summed) per invocation.
    pub fn http_bytes(mut self, bytes: u64) -> Self {
        self.http_bytes = bytes;
        self
    }

    /// Sets the most calls one instance serves (at least 1: a fresh
    /// instance per call).
    pub fn reuse(mut self, calls: u32) -> Self {
        self.reuse = calls.max(1);
        self
    }
}

/// A token bucket per controller for what its guests make the host log:
/// `burst` lines at once, then `per_second` lines a second. Lines over the
/// budget are dropped and counted (`capstan_log_lines_dropped_total`), and
/// a summary line says how many were dropped once the budget allows again
/// (at most every [`LogBudget::REPORT_EVERY`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub struct LogBudget {
    /// Lines a second, sustained. Default: 10.
    pub per_second: u32,
    /// Lines at once. Default: 50.
    pub burst: u32,
}

impl Default for LogBudget {
    fn default() -> Self {
        Self { per_second: 10, burst: 50 }
    }
}

impl LogBudget {
    /// How often at most a controller's "log lines dropped" summary is written.
    pub const REPORT_EVERY: Duration = Duration::from_secs(10);

    /// A budget of `per_second` lines a second and `burst` at once.
    pub fn new(per_second: u32, burst: u32) -> Self {
        Self { per_second, burst }
    }
}

/// The `ResourceLimiter` of one store: refuses memory growth past the cap
/// and remembers that it did, so the trap that follows is reported as a
/// memory limit rather than a generic fault.
#[derive(Debug)]
pub struct Limiter {
    memory: usize,
    exceeded: Option<usize>,
    largest: usize,
}

impl Limiter {
    /// A limiter for `limits`.
    pub fn new(limits: &Limits) -> Self {
        Self { memory: limits.memory, exceeded: None, largest: 0 }
    }

    /// The size the guest asked for when it hit the cap, if it did.
    pub fn exceeded(&self) -> Option<usize> {
        self.exceeded
    }

    /// Forgets a refused growth (a later invocation of the same store
    /// starts clean); the sizes reached stay.
    pub fn reset(&mut self) {
        self.exceeded = None;
    }

    /// The largest size a memory of this store was allowed to grow to.
    pub fn largest(&self) -> usize {
        self.largest
    }

    /// Whether the store's memory has grown past half the cap: an instance
    /// that large is not reused, so that what one call leaves behind
    /// cannot make a later call hit the cap.
    pub fn past_half(&self) -> bool {
        self.largest > self.memory / 2
    }
}

impl wasmtime::ResourceLimiter for Limiter {
    fn memory_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.memory {
            self.exceeded = Some(desired);
            return Err(wasmtime::Error::msg(format!(
                "memory limit exceeded: wanted {desired} bytes, limit {} bytes",
                self.memory
            )));
        }
        self.largest = self.largest.max(desired);
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        // Tables hold function references; a million is far beyond any
        // real guest.
        Ok(desired <= 1_000_000)
    }

    fn instances(&self) -> usize {
        // A componentize-py guest has more than ten core instances.
        1_000
    }

    fn memories(&self) -> usize {
        100
    }

    fn tables(&self) -> usize {
        1_000
    }
}

#[cfg(test)]
mod tests {
    use wasmtime::ResourceLimiter;

    #[test]
    fn limits_default_to_the_documented_values() {
        let l = Limits::default();
        assert_eq!((l.memory, l.deadline), (64 << 20, Duration::from_secs(5)));
        assert_eq!((l.host_calls, l.events), (DEFAULT_HOST_CALLS, DEFAULT_EVENTS));
        assert_eq!(l.log, LogBudget::new(10, 50));
        assert_eq!(l.reuse, DEFAULT_REUSE);
        assert_eq!(Limits::default().reuse(0).reuse, 1, "0 is a fresh instance per call");
    }

    use super::*;

    #[test]
    fn growth_past_the_cap_is_refused_and_remembered() {
        let mut l = Limiter::new(&Limits::default().memory(1 << 20));
        assert!(l.memory_growing(0, 1 << 19, None).expect("under the cap"));
        assert!(l.exceeded().is_none());
        assert!(l.memory_growing(1 << 19, 2 << 20, None).is_err());
        assert_eq!(l.exceeded(), Some(2 << 20));
        assert_eq!(l.largest(), 1 << 19, "a refused growth is not a size");
        assert!(!l.past_half(), "half a MiB of one is not past half");
        assert!(l.memory_growing(1 << 19, (1 << 19) + 1, None).expect("under the cap"));
        assert!(l.past_half());
    }
}
