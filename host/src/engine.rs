//! The one place wasmtime is configured: component model, async, epoch
//! interruption, pooling allocator; and the epoch ticker that makes
//! deadlines work.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use wasmtime::{Config, InstanceAllocationStrategy, PoolingAllocationConfig};

/// How often the epoch advances. Deadlines are checked at this granularity.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Settings of the process-wide engine.
#[derive(Clone, Debug)]
#[must_use]
pub struct EngineConfig {
    /// Largest linear memory one guest instance may have (bytes).
    /// Default: 64 MiB.
    pub memory_limit: usize,
    /// Instances the pooling allocator keeps slots for; size it at about
    /// twice the peak number of concurrent reconciles (old and new versions
    /// coexist during a hot swap). Default: 64.
    pub pool_instances: u32,
    /// Use the pooling allocator (falls back to on-demand allocation when
    /// the pool cannot be reserved). Default: true.
    pub pooling: bool,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self { memory_limit: 64 << 20, pool_instances: 64, pooling: true }
    }
}

impl EngineConfig {
    /// Sets the per-instance memory limit.
    pub fn memory_limit(mut self, bytes: usize) -> Self {
        self.memory_limit = bytes;
        self
    }

    /// Sets the number of pooled instance slots.
    pub fn pool_instances(mut self, n: u32) -> Self {
        self.pool_instances = n.max(1);
        self
    }

    /// Turns the pooling allocator on or off.
    pub fn pooling(mut self, on: bool) -> Self {
        self.pooling = on;
        self
    }
}

/// Errors of engine creation.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// wasmtime rejected the configuration.
    #[error("cannot configure the wasm engine: {0:#}")]
    Config(wasmtime::Error),
}

/// The process-wide wasmtime engine, with its epoch ticker running.
///
/// Cloning is cheap; the ticker thread stops when the last clone is dropped.
#[derive(Clone)]
pub struct Engine {
    inner: wasmtime::Engine,
    config: EngineConfig,
    _ticker: Arc<Ticker>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").field("config", &self.config).finish_non_exhaustive()
    }
}

struct Ticker(Arc<AtomicBool>);

impl Drop for Ticker {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

fn base_config() -> Config {
    let mut config = Config::new();
    config.wasm_component_model(true);
    config.epoch_interruption(true);
    config
}

fn pooling(config: &EngineConfig) -> PoolingAllocationConfig {
    let n = config.pool_instances;
    let mut pool = PoolingAllocationConfig::default();
    pool.total_component_instances(n)
        // Interpreted-language guests hold many core instances (a Python
        // component has more than ten).
        .total_core_instances(n.saturating_mul(16))
        .total_memories(n.saturating_mul(4))
        .total_tables(n.saturating_mul(8))
        .total_stacks(n)
        .max_memory_size(config.memory_limit)
        // Measured (benches/runtime.rs): keeping 2 MiB resident, as Spin
        // does, made every call memset up to 2 MiB on reuse: 41 µs per
        // no-op invocation against 24 µs with 0 (madvise only).
        .linear_memory_keep_resident(0)
        .table_keep_resident(512 << 10);
    pool
}

impl Engine {
    /// Creates the engine and starts its epoch ticker (a dedicated OS
    /// thread, so a runaway guest cannot starve it).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] if wasmtime rejects the configuration.
    pub fn new(config: EngineConfig) -> Result<Self, Error> {
        let inner = if config.pooling {
            let mut pooled = base_config();
            pooled.allocation_strategy(InstanceAllocationStrategy::Pooling(pooling(&config)));
            match wasmtime::Engine::new(&pooled) {
                Ok(engine) => engine,
                Err(e) => {
                    tracing::warn!(error = %e, "pooling allocator unavailable, allocating on demand");
                    wasmtime::Engine::new(&base_config()).map_err(Error::Config)?
                }
            }
        } else {
            wasmtime::Engine::new(&base_config()).map_err(Error::Config)?
        };
        let stop = Arc::new(AtomicBool::new(false));
        let ticking = inner.weak();
        let stopped = Arc::clone(&stop);
        thread::Builder::new()
            .name("capstan-epoch".into())
            .spawn(move || {
                while !stopped.load(Ordering::Relaxed) {
                    thread::sleep(EPOCH_TICK);
                    match ticking.upgrade() {
                        Some(engine) => engine.increment_epoch(),
                        None => break,
                    }
                }
            })
            .map_err(|e| Error::Config(wasmtime::Error::msg(format!("cannot start the epoch thread: {e}"))))?;
        Ok(Self { inner, config, _ticker: Arc::new(Ticker(stop)) })
    }

    /// The wasmtime engine.
    pub fn wasmtime(&self) -> &wasmtime::Engine {
        &self.inner
    }

    /// The settings this engine was made with.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// A fingerprint of everything that makes precompiled code compatible
    /// with this engine (wasmtime version, target, settings), as hex.
    pub fn fingerprint(&self) -> String {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.inner.precompile_compatibility_hash().hash(&mut h);
        format!("{:016x}", h.finish())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_fingerprint_is_stable_for_equal_settings() {
        let a = Engine::new(EngineConfig::default()).expect("engine");
        let b = Engine::new(EngineConfig::default()).expect("engine");
        assert_eq!(a.fingerprint(), b.fingerprint());
    }

    #[test]
    fn error_messages_read_right() {
        let e = Error::Config(wasmtime::Error::msg("bad"));
        assert_eq!(e.to_string(), "cannot configure the wasm engine: bad");
    }
}
