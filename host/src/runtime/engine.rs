//! The one place wasmtime is configured: component model, async, epoch
//! interruption, pooling allocator, the optional baseline (Winch) engine;
//! and the epoch ticker that makes deadlines work.

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
    /// Bytes of compiled functions kept in memory for later compiles (0:
    /// none). A new version of a component recompiles only the functions
    /// that changed: a Python or JavaScript component's interpreter, most
    /// of its code, is the same in every version. Default: 0; `capstan
    /// dev` keeps 512 MiB.
    pub function_cache: usize,
    /// Also make a baseline engine (Winch, a single-pass compiler): a
    /// component the compile cache does not hold first runs on code Winch
    /// compiled, in about a fifth of cranelift's time (a Python component:
    /// 1.7 s against 8.6 s), and cranelift's code replaces it when ready
    /// (see [`Loader`](crate::runtime::component::Loader)). Default: false;
    /// `capstan run` and `capstan dev` turn it on.
    pub baseline: bool,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self { memory_limit: 64 << 20, pool_instances: 64, pooling: true, function_cache: 0, baseline: false }
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

    /// Keeps up to `bytes` of compiled functions for later compiles (see
    /// [`EngineConfig::function_cache`]).
    pub fn function_cache(mut self, bytes: usize) -> Self {
        self.function_cache = bytes;
        self
    }

    /// Turns the baseline engine on or off (see [`EngineConfig::baseline`]).
    pub fn baseline(mut self, on: bool) -> Self {
        self.baseline = on;
        self
    }
}

/// Cranelift's incremental compilation cache, in memory and bounded: what
/// a compile of one function produced, by a digest of the function, so a
/// later compile of a module with the same function skips it. Full once
/// `limit` bytes are held (nothing is evicted: the functions kept are
/// those of the first components, the ones later versions share).
#[derive(Debug)]
struct FunctionCache {
    entries: std::sync::Mutex<Held>,
    limit: usize,
}

/// The entries of a [`FunctionCache`], and their bytes in all.
#[derive(Debug, Default)]
struct Held {
    entries: std::collections::HashMap<Vec<u8>, Vec<u8>>,
    bytes: usize,
}

impl wasmtime::CacheStore for FunctionCache {
    fn get(&self, key: &[u8]) -> Option<std::borrow::Cow<'_, [u8]>> {
        let held = self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        held.entries.get(key).map(|v| std::borrow::Cow::Owned(v.clone()))
    }

    fn insert(&self, key: &[u8], value: Vec<u8>) -> bool {
        let mut held = self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let size = key.len() + value.len();
        if held.bytes + size > self.limit {
            return false;
        }
        held.bytes += size;
        held.entries.insert(key.to_vec(), value);
        true
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
    /// The Winch engine, if [`EngineConfig::baseline`] is on and Winch
    /// supports this machine.
    baseline: Option<wasmtime::Engine>,
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

/// `background`: cranelift compiles only in the background, behind a
/// baseline engine.
fn base_config(settings: &EngineConfig, background: bool) -> Result<Config, Error> {
    let mut config = Config::new();
    config.wasm_component_model(true);
    config.epoch_interruption(true);
    // With a baseline compiler, cranelift compiles in the background
    // while Winch's code serves: on one thread, so that the controllers
    // and the next version's Winch compile keep the other cores. Measured
    // on two cores: a Python component's Winch compile took 1.9 to 3.2 s
    // beside a parallel cranelift compile, against 1.65 s alone.
    config.parallel_compilation(!background);
    if settings.function_cache > 0 {
        let cache = FunctionCache { entries: std::sync::Mutex::default(), limit: settings.function_cache };
        config.enable_incremental_compilation(Arc::new(cache)).map_err(Error::Config)?;
    }
    Ok(config)
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
        // Measured (benches/runtime.rs, settings alternated in one
        // session): keeping 2 MiB of linear memory resident between
        // instances, as Spin does, costs a no-op invocation about 2 µs of
        // memset (40 against 38 µs) and saves a call that touches more
        // memory its page faults: a zone-scheduler decision over 100 Nodes
        // took 0.96 ms against 1.16 to 1.53 ms with nothing kept.
        .linear_memory_keep_resident(2 << 20)
        .table_keep_resident(512 << 10);
    pool
}

/// The Winch engine of [`EngineConfig::baseline`], or `None` (logged) if
/// Winch cannot run here. It allocates instances on demand: its code
/// serves for the seconds until cranelift's replaces it, and a second pool
/// would reserve as much address space as the first.
fn baseline_engine() -> Option<wasmtime::Engine> {
    let mut config = Config::new();
    config.wasm_component_model(true);
    config.epoch_interruption(true);
    config.strategy(wasmtime::Strategy::Winch);
    match wasmtime::Engine::new(&config) {
        Ok(engine) => Some(engine),
        Err(e) => {
            tracing::warn!(error = %e, "no baseline compiler: new components wait for cranelift");
            None
        }
    }
}

impl Engine {
    /// Creates the engine and starts its epoch ticker (a dedicated OS
    /// thread, so a runaway guest cannot starve it).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] if wasmtime rejects the configuration.
    pub fn new(config: EngineConfig) -> Result<Self, Error> {
        let baseline = config.baseline.then(baseline_engine).flatten();
        let background = baseline.is_some();
        let inner = if config.pooling {
            let mut pooled = base_config(&config, background)?;
            pooled.allocation_strategy(InstanceAllocationStrategy::Pooling(pooling(&config)));
            match wasmtime::Engine::new(&pooled) {
                Ok(engine) => engine,
                Err(e) => {
                    tracing::warn!(error = %e, "pooling allocator unavailable, allocating on demand");
                    wasmtime::Engine::new(&base_config(&config, background)?).map_err(Error::Config)?
                }
            }
        } else {
            wasmtime::Engine::new(&base_config(&config, background)?).map_err(Error::Config)?
        };
        let stop = Arc::new(AtomicBool::new(false));
        let ticking = inner.weak();
        let ticking_baseline = baseline.as_ref().map(wasmtime::Engine::weak);
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
                    if let Some(engine) = ticking_baseline.as_ref().and_then(wasmtime::EngineWeak::upgrade) {
                        engine.increment_epoch();
                    }
                }
            })
            .map_err(|e| Error::Config(wasmtime::Error::msg(format!("cannot start the epoch thread: {e}"))))?;
        Ok(Self { inner, baseline, config, _ticker: Arc::new(Ticker(stop)) })
    }

    /// The wasmtime engine.
    pub fn wasmtime(&self) -> &wasmtime::Engine {
        &self.inner
    }

    /// The baseline (Winch) engine, if there is one (see
    /// [`EngineConfig::baseline`]).
    pub fn baseline(&self) -> Option<&wasmtime::Engine> {
        self.baseline.as_ref()
    }

    /// The settings this engine was made with.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// A fingerprint of everything that makes precompiled code compatible
    /// with this engine (wasmtime version, target, settings), as hex.
    pub fn fingerprint(&self) -> String {
        fingerprint(&self.inner)
    }

    /// [`fingerprint`](Self::fingerprint) of the baseline engine, if there
    /// is one: its code goes into the compile cache under a name of its own.
    pub fn baseline_fingerprint(&self) -> Option<String> {
        self.baseline.as_ref().map(fingerprint)
    }
}

/// A fingerprint of what makes code precompiled by `engine` loadable by it.
fn fingerprint(engine: &wasmtime::Engine) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut h);
    format!("{:016x}", h.finish())
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
    fn a_baseline_engine_reads_the_cache_entries_of_one_without() {
        // The tools run with a baseline engine, `capstan test`'s mock host
        // without one: each is a cache hit for what the other compiled.
        let with = Engine::new(EngineConfig::default().baseline(true)).expect("engine");
        let without = Engine::new(EngineConfig::default()).expect("engine");
        assert_eq!(with.fingerprint(), without.fingerprint());
        assert_eq!(without.baseline_fingerprint(), None);
    }

    #[test]
    fn the_function_cache_answers_what_it_holds_and_stops_at_its_limit() {
        use wasmtime::CacheStore as _;
        let cache = FunctionCache { entries: std::sync::Mutex::default(), limit: 10 };
        assert!(cache.insert(b"ab", vec![1, 2, 3]));
        assert_eq!(cache.get(b"ab").as_deref(), Some(&[1u8, 2, 3][..]));
        assert!(cache.get(b"cd").is_none());
        assert!(!cache.insert(b"cd", vec![0; 6]), "5 + 8 bytes is over the limit of 10");
        assert!(cache.get(b"cd").is_none());
        assert!(cache.insert(b"e", vec![9; 4]), "5 + 5 bytes fit");
    }

    #[test]
    fn an_engine_with_a_function_cache_compiles_and_so_does_one_without() {
        // (module (func (export "f") (result i32) i32.const 7))
        let wasm = [
            0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, 0x01, 0x05, 0x01, 0x60, 0x00, 0x01, 0x7f, 0x03, 0x02, 0x01,
            0x00, 0x07, 0x05, 0x01, 0x01, 0x66, 0x00, 0x00, 0x0a, 0x06, 0x01, 0x04, 0x00, 0x41, 0x07, 0x0b,
        ];
        for engine in [
            Engine::new(EngineConfig::default().function_cache(1 << 20)).expect("engine"),
            Engine::new(EngineConfig::default()).expect("engine"),
        ] {
            wasmtime::Module::new(engine.wasmtime(), wasm).expect("compiles");
        }
    }

    #[test]
    fn error_messages_read_right() {
        let e = Error::Config(wasmtime::Error::msg("bad"));
        assert_eq!(e.to_string(), "cannot configure the wasm engine: bad");
    }
}
