//! The sandbox limits of one guest invocation: a memory cap (enforced by a
//! `ResourceLimiter`, with the pooling allocator's slot size as a hard
//! ceiling) and a wall-clock deadline (enforced through epoch interruption).

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
}

impl Default for Limits {
    fn default() -> Self {
        Self { memory: 64 << 20, deadline: Duration::from_secs(5) }
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
}

/// The `ResourceLimiter` of one store: refuses memory growth past the cap
/// and remembers that it did, so the trap that follows is reported as a
/// memory limit rather than a generic fault.
#[derive(Debug)]
pub struct Limiter {
    memory: usize,
    exceeded: Option<usize>,
}

impl Limiter {
    /// A limiter for `limits`.
    pub fn new(limits: &Limits) -> Self {
        Self { memory: limits.memory, exceeded: None }
    }

    /// The size the guest asked for when it hit the cap, if it did.
    pub fn exceeded(&self) -> Option<usize> {
        self.exceeded
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

    use super::*;

    #[test]
    fn growth_past_the_cap_is_refused_and_remembered() {
        let mut l = Limiter::new(&Limits::default().memory(1 << 20));
        assert!(l.memory_growing(0, 1 << 19, None).expect("under the cap"));
        assert!(l.exceeded().is_none());
        assert!(l.memory_growing(1 << 19, 2 << 20, None).is_err());
        assert_eq!(l.exceeded(), Some(2 << 20));
    }
}
