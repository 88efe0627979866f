//! Loading a controller component: checks that the file is a component of
//! the `operator` world at a supported contract version, compiles it (or
//! loads the precompiled artefact from the compile cache), resolves its
//! imports once into a pre-instance, and reads and validates its manifest.
//!
//! Each load runs in a `load_component` span (`path`, then `digest`,
//! `source` and `controller` as they become known) and is counted in the
//! [`metrics`](crate::metrics): `capstan_component_loads_total` by result and
//! [`Error::reason`], `capstan_component_compile_seconds`, and the
//! `manifest()` call in `capstan_guest_invocation_seconds`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use sha2::{Digest, Sha256};
use tracing::Instrument as _;
use wasmtime::component::Component;

use crate::manifest::{self, Manifest};
use crate::metrics::{Export, metrics};
use crate::runtime::bindings::{CONTRACT_VERSION, CONTRACT_VERSIONS, CONTROLLER_EXPORT, OperatorPre, v0_1, v0_2, v0_3};
use crate::runtime::invocation::{self as runtime, Pre, PreKind, Runtime, Tier, WeakPre};

/// Why a component was rejected. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be read.
    #[error("{path}: cannot read: {error}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        error: std::io::Error,
    },
    /// The file is not WebAssembly.
    #[error("{path}: not a WebAssembly file (no \\0asm header)")]
    NotWasm {
        /// The file.
        path: PathBuf,
    },
    /// The file is larger than [`MAX_COMPONENT_SIZE`]; nothing past its
    /// header was read.
    #[error("{path}: too large: {size} bytes, the most a component may have is {MAX_COMPONENT_SIZE}")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size.
        size: u64,
    },
    /// A gzipped file that does not decompress (or decompresses to more
    /// than [`MAX_COMPONENT_SIZE`]).
    #[error("{path}: cannot decompress (gzip): {reason}")]
    Gzip {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The file is a core module, not a component.
    #[error(
        "{path}: a core WebAssembly module, not a component (build for wasm32-wasip2, or wrap it with `wasm-tools component new`)"
    )]
    CoreModule {
        /// The file.
        path: PathBuf,
    },
    /// wasmtime could not compile it.
    #[error("{path}: cannot compile: {reason}")]
    Compile {
        /// The file.
        path: PathBuf,
        /// wasmtime's reason.
        reason: String,
    },
    /// It does not export the controller interface.
    #[error("{path}: not a capstan controller: it exports {exports:?}, not {CONTROLLER_EXPORT}")]
    WrongWorld {
        /// The file.
        path: PathBuf,
        /// What it exports instead.
        exports: Vec<String>,
    },
    /// It exports the controller interface of another contract version.
    #[error("{path}: built against contract {found}, this host supports {}", CONTRACT_VERSIONS.join(", "))]
    UnsupportedContract {
        /// The file.
        path: PathBuf,
        /// The version it was built against.
        found: String,
    },
    /// Its imports cannot be satisfied by this host.
    #[error("{path}: imports something this host does not provide: {reason}")]
    Imports {
        /// The file.
        path: PathBuf,
        /// wasmtime's reason.
        reason: String,
    },
    /// Calling `manifest()` failed.
    #[error("{path}: manifest() failed: {error}")]
    ManifestCall {
        /// The file.
        path: PathBuf,
        /// How the call failed.
        error: runtime::Error,
    },
    /// The manifest is invalid.
    #[error("{path}: invalid manifest: {error}")]
    Manifest {
        /// The file.
        path: PathBuf,
        /// What is invalid.
        error: manifest::Error,
    },
}

impl Error {
    /// A short snake-case name of the failure, the `reason` label of
    /// `capstan_component_loads_total`: `read`, `not_wasm`, `too_large`, `gzip`, `core_module`,
    /// `compile`, `world`, `contract`, `imports`, `manifest_call` or
    /// `manifest`.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Read { .. } => "read",
            Error::NotWasm { .. } => "not_wasm",
            Error::TooLarge { .. } => "too_large",
            Error::Gzip { .. } => "gzip",
            Error::CoreModule { .. } => "core_module",
            Error::Compile { .. } => "compile",
            Error::WrongWorld { .. } => "world",
            Error::UnsupportedContract { .. } => "contract",
            Error::Imports { .. } => "imports",
            Error::ManifestCall { .. } => "manifest_call",
            Error::Manifest { .. } => "manifest",
        }
    }
}

/// Where a compiled component came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompileSource {
    /// Compiled now, by cranelift.
    Compiled,
    /// Loaded from the compile cache: cranelift's code, or Winch's where
    /// the cache holds only that ([`Pre::tier`] says which).
    Cache,
    /// Compiled now by the baseline compiler (Winch); cranelift compiles
    /// it in the background and its code replaces Winch's when done.
    Baseline,
}

impl CompileSource {
    /// Lower-case name, the `source` label of
    /// `capstan_component_compile_seconds`: `compiled`, `cache` or
    /// `baseline`.
    pub fn as_str(self) -> &'static str {
        match self {
            CompileSource::Compiled => "compiled",
            CompileSource::Cache => "cache",
            CompileSource::Baseline => "baseline",
        }
    }
}

/// A loaded, validated controller component: compiled, pre-instantiated,
/// manifest read.
#[derive(Clone)]
pub struct Loaded {
    /// The file it came from.
    pub path: PathBuf,
    /// SHA-256 of the file, hex.
    pub digest: String,
    /// The contract version it was built against.
    pub contract: String,
    /// The validated manifest.
    pub manifest: Arc<Manifest>,
    /// The pre-instance: imports resolved, instantiation per call is cheap.
    pub pre: Pre,
    /// Whether compilation was a cache hit, and if not, which compiler made
    /// the code it started with ([`Pre::tier`] says which runs now).
    pub source: CompileSource,
    /// Time spent compiling or loading from cache.
    pub compile_time: Duration,
}

impl Loaded {
    /// The span of one call of the guest's `export` (`reconcile`,
    /// `review`, …): the component's name, digest and contract; the host
    /// calls the guest makes and its log lines land under it. Pass it to
    /// [`record_failure`] with the invocation's error, if any.
    pub fn call_span(&self, export: &'static str) -> tracing::Span {
        tracing::info_span!(
            "guest_call",
            export,
            component = %self.manifest.name,
            digest = %self.digest,
            contract = %self.contract,
            error_kind = tracing::field::Empty,
            "otel.status_code" = tracing::field::Empty,
            "otel.status_message" = tracing::field::Empty,
        )
    }
}

impl Loaded {
    /// Runs `call`, an invocation of the guest's `export`, in its
    /// [`call_span`](Self::call_span), and records its failure there.
    pub async fn traced<T>(
        &self,
        export: &'static str,
        call: impl Future<Output = crate::runtime::invocation::Invocation<T>>,
    ) -> crate::runtime::invocation::Invocation<T> {
        let span = self.call_span(export);
        let invocation = tracing::Instrument::instrument(call, span.clone()).await;
        if let Err(e) = &invocation.result {
            record_failure(&span, e);
        }
        invocation
    }
}

/// Records a failed guest call (a trap, the deadline, the memory cap) on
/// its [`Loaded::call_span`].
pub fn record_failure(span: &tracing::Span, error: &crate::runtime::invocation::Error) {
    span.record("error_kind", error.kind().as_str());
    span.record("otel.status_code", "error");
    span.record("otel.status_message", error.to_string());
}

impl std::fmt::Debug for Loaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loaded")
            .field("path", &self.path)
            .field("digest", &self.digest)
            .field("manifest", &self.manifest.name)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

/// Loads components, with an optional on-disk compile cache keyed by
/// component digest and engine fingerprint.
///
/// With a baseline engine ([`EngineConfig::baseline`](crate::runtime::engine::EngineConfig::baseline)),
/// a component the cache does not hold is compiled by Winch and serves at
/// once; cranelift compiles it in a background task, one component at a
/// time, writes the cache entry and swaps its code in ([`Pre::optimize`]).
/// A version replaced before its turn is not compiled again. With
/// [`optimize`](Self::optimize) off (the tools), Winch's code is what the
/// cache keeps; a loader with a baseline engine uses such an entry when it
/// holds no cranelift entry of the component.
#[derive(Clone, Debug)]
pub struct Loader {
    runtime: Runtime,
    cache_dir: Option<PathBuf>,
    cache_budget: u64,
    /// One optimizing compile at a time: on two cores, two would starve
    /// the controllers.
    optimizing: Arc<tokio::sync::Semaphore>,
    /// Whether cranelift replaces baseline code.
    optimize: bool,
    /// The cluster the loaded components run in (the `cluster` label of
    /// the manifest call's metrics).
    cluster_name: Arc<str>,
}

/// The largest component the host reads, plain or decompressed from a
/// `.wasm.gz` (a guard against junk files and gzip bombs): 256 MiB.
pub const MAX_COMPONENT_SIZE: u64 = 256 << 20;

/// The start of a gzip stream.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Reads the component file at `path`, checking before anything else is
/// read that it starts like one (the wasm component header, or gzip) and
/// is not larger than [`MAX_COMPONENT_SIZE`]; returns the component,
/// decompressed if it was gzipped (see [`decode`]). A junk or huge file
/// costs a few bytes of memory, not its size.
///
/// # Errors
///
/// [`Error::Read`], [`Error::NotWasm`], [`Error::CoreModule`],
/// [`Error::TooLarge`], [`Error::Gzip`].
pub async fn read(path: &Path) -> Result<Vec<u8>, Error> {
    // One blocking read into a buffer of the file's size: a Python
    // component (19 MB) read through tokio's file, 2 MiB a hop, took 20 ms.
    let owned = path.to_owned();
    tokio::task::spawn_blocking(move || read_blocking(&owned))
        .await
        .map_err(|e| Error::Read { path: path.to_owned(), error: std::io::Error::other(e) })?
}

/// [`read`], on the calling thread.
fn read_blocking(path: &Path) -> Result<Vec<u8>, Error> {
    use std::io::Read as _;
    let read_err = |error| Error::Read { path: path.to_owned(), error };
    let mut file = std::fs::File::open(path).map_err(read_err)?;
    let size = file.metadata().map_err(read_err)?.len();
    let mut header = Vec::with_capacity(COMPONENT_HEADER.len());
    (&mut file).take(COMPONENT_HEADER.len() as u64).read_to_end(&mut header).map_err(read_err)?;
    if !header.starts_with(&GZIP_MAGIC) {
        if !header.starts_with(b"\0asm") {
            return Err(Error::NotWasm { path: path.to_owned() });
        }
        if header[..] != COMPONENT_HEADER {
            return Err(Error::CoreModule { path: path.to_owned() });
        }
    }
    if size > MAX_COMPONENT_SIZE {
        return Err(Error::TooLarge { path: path.to_owned(), size });
    }
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0).saturating_add(1));
    bytes.extend_from_slice(&header);
    // The file may grow while it is read: never past the cap.
    (&mut file).take(MAX_COMPONENT_SIZE + 1 - bytes.len() as u64).read_to_end(&mut bytes).map_err(read_err)?;
    if bytes.len() as u64 > MAX_COMPONENT_SIZE {
        return Err(Error::TooLarge { path: path.to_owned(), size: bytes.len() as u64 });
    }
    decode(path, bytes)
}

/// The SHA-256 of a component's (gunzipped) bytes, as hex: the digest the
/// compile cache and the host's status name it by.
pub fn digest(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The component in `bytes`: as they are, or decompressed if they are
/// gzipped (`.wasm.gz`, e.g. to fit a ConfigMap). The digest, the compile
/// cache and the host's "unchanged" check all work on what this returns.
///
/// # Errors
///
/// [`Error::Gzip`] for gzip data that does not decompress, or is larger
/// than [`MAX_COMPONENT_SIZE`] decompressed.
pub fn decode(path: &Path, bytes: Vec<u8>) -> Result<Vec<u8>, Error> {
    use std::io::Read as _;
    if !bytes.starts_with(&[0x1f, 0x8b]) {
        return Ok(bytes);
    }
    let mut out = Vec::with_capacity(bytes.len() * 4);
    let gzip_err = |reason: String| Error::Gzip { path: path.to_owned(), reason };
    flate2::read::GzDecoder::new(bytes.as_slice())
        .take(MAX_COMPONENT_SIZE + 1)
        .read_to_end(&mut out)
        .map_err(|e| gzip_err(e.to_string()))?;
    if out.len() as u64 > MAX_COMPONENT_SIZE {
        return Err(gzip_err(format!("more than {MAX_COMPONENT_SIZE} bytes decompressed")));
    }
    Ok(out)
}

/// Default size limit of the compile cache: 1 GiB (a compiled Python
/// component is about 37 MB, a Rust one about 5 MB).
pub const CACHE_BUDGET: u64 = 1 << 30;

/// Component layer of the binary format (`\0asm`, version 0x0d, layer 1).
const COMPONENT_HEADER: [u8; 8] = [0x00, 0x61, 0x73, 0x6d, 0x0d, 0x00, 0x01, 0x00];

impl Loader {
    /// A loader; `cache_dir` enables the compile cache.
    pub fn new(runtime: Runtime, cache_dir: Option<PathBuf>) -> Self {
        Self {
            runtime,
            cache_dir,
            cache_budget: CACHE_BUDGET,
            optimizing: Arc::new(tokio::sync::Semaphore::new(1)),
            optimize: true,
            cluster_name: crate::cluster::DEFAULT_CLUSTER.into(),
        }
    }

    /// The cluster the loaded components run in (default:
    /// [`DEFAULT_CLUSTER`](crate::cluster::DEFAULT_CLUSTER)): the
    /// `cluster` label of the metrics of the manifest call.
    #[must_use]
    pub fn in_cluster(mut self, name: Arc<str>) -> Self {
        self.cluster_name = name;
        self
    }

    /// Whether cranelift's code replaces the baseline compiler's (default:
    /// true). Off, baseline code serves for good and is written to the
    /// compile cache, so the next load of the component is a cache hit
    /// (cranelift's code, if the cache holds it, is still used): for a short
    /// run that would spend more time compiling than running, such as
    /// `capstan inspect` or `capstan e2e`.
    #[must_use]
    pub fn optimize(mut self, on: bool) -> Self {
        self.optimize = on;
        self
    }

    /// Keeps the compile cache under `bytes` (default [`CACHE_BUDGET`]):
    /// after each new entry, the least recently used ones go.
    #[must_use]
    pub fn cache_budget(mut self, bytes: u64) -> Self {
        self.cache_budget = bytes;
        self
    }

    /// The runtime components are loaded for.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// Reads, checks, compiles (or loads from cache), pre-instantiates and
    /// reads the manifest of the component at `path`.
    ///
    /// # Errors
    ///
    /// Every [`Error`] variant: each names the file and the reason.
    pub async fn load(&self, path: &Path) -> Result<Loaded, Error> {
        let bytes = read(path).await;
        self.load_counted(path, bytes, None).await
    }

    /// Like [`load`](Self::load), for bytes already read; `path` names
    /// them in errors.
    ///
    /// # Errors
    ///
    /// As [`load`](Self::load).
    pub async fn load_bytes(&self, path: &Path, bytes: Vec<u8>) -> Result<Loaded, Error> {
        self.load_counted(path, Ok(bytes), None).await
    }

    /// Like [`load_bytes`](Self::load_bytes), for gunzipped bytes whose
    /// [`digest`] the caller has computed already (hashing a Python
    /// component, 19 MB, takes about 14 ms).
    ///
    /// # Errors
    ///
    /// As [`load`](Self::load).
    pub async fn load_digested(&self, path: &Path, bytes: Vec<u8>, digest: String) -> Result<Loaded, Error> {
        self.load_counted(path, Ok(bytes), Some(digest)).await
    }

    /// Loads in a span and counts the result.
    async fn load_counted(
        &self,
        path: &Path,
        bytes: Result<Vec<u8>, Error>,
        digest: Option<String>,
    ) -> Result<Loaded, Error> {
        let span = tracing::info_span!(
            "load_component",
            path = %path.display(),
            digest = tracing::field::Empty,
            source = tracing::field::Empty,
            controller = tracing::field::Empty,
        );
        let result = async { self.load_checked(path, bytes?, digest).await }.instrument(span).await;
        match &result {
            Ok(_) => metrics().component_loaded(),
            Err(e) => metrics().component_rejected(e.reason()),
        }
        result
    }

    async fn load_checked(&self, path: &Path, bytes: Vec<u8>, digest: Option<String>) -> Result<Loaded, Error> {
        let path = path.to_owned();
        let bytes = decode(&path, bytes)?;
        if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
            return Err(Error::NotWasm { path });
        }
        if bytes[..8] != COMPONENT_HEADER {
            return Err(Error::CoreModule { path });
        }
        let digest = digest.unwrap_or_else(|| self::digest(&bytes));
        let span = tracing::Span::current();
        span.record("digest", digest.as_str());
        let start = Instant::now();
        let bytes: Arc<[u8]> = bytes.into();
        let (component, source, tier) = self.compile(&path, &digest, &bytes).await?;
        let compile_time = start.elapsed();
        span.record("source", source.as_str());
        metrics().compiled(source.as_str(), compile_time);
        let (contract, kind) = self.prepare(&path, &component)?;
        let pre = Pre::tiered(kind, tier);
        let invocation = self.runtime.manifest(&pre).await;
        // Before the manifest names the controller, the file does.
        let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        let name = invocation.result.as_ref().map_or(stem.as_str(), |m| m.controller.name.as_str());
        let owner = crate::metrics::Owner::new(Arc::clone(&self.cluster_name), name);
        metrics().guest_invoked(&owner, Export::Manifest, invocation.duration);
        if let Err(error) = &invocation.result {
            metrics().guest_trapped(&owner, error.kind().as_str());
        }
        let raw = invocation.result.map_err(|error| Error::ManifestCall { path: path.clone(), error })?;
        span.record("controller", raw.controller.name.as_str());
        let manifest = Manifest::try_from(raw)
            .map_err(|error| Error::Manifest { path: path.clone(), error: error.for_contract(&contract) })?;
        tracing::debug!(source = source.as_str(), compile_ms = compile_time.as_secs_f64() * 1000.0, "component ready");
        if tier == Tier::Baseline && self.optimize {
            self.optimize_later(path.clone(), digest.clone(), bytes, contract.clone(), pre.downgrade());
        }
        Ok(Loaded { path, digest, contract, manifest: Arc::new(manifest), pre, source, compile_time })
    }

    /// True if the compile cache holds code this loader can use for the
    /// component whose (decompressed) bytes have the SHA-256 `digest`: a
    /// version compiled before, which loads in milliseconds.
    pub fn is_cached(&self, digest: &str) -> bool {
        [self.cache_path(digest), self.baseline_cache_path(digest)].iter().flatten().any(|p| p.is_file())
    }

    /// The cache entry of cranelift's code.
    fn cache_path(&self, digest: &str) -> Option<PathBuf> {
        let dir = self.cache_dir.as_ref()?;
        Some(dir.join(format!("{digest}-{}.cwasm", self.runtime.engine().fingerprint())))
    }

    /// The cache entry of Winch's code, if this loader has a baseline engine.
    fn baseline_cache_path(&self, digest: &str) -> Option<PathBuf> {
        let dir = self.cache_dir.as_ref()?;
        let fingerprint = self.runtime.engine().baseline_fingerprint()?;
        Some(dir.join(format!("{digest}-{fingerprint}-baseline.cwasm")))
    }

    /// Checks the world of `component` and resolves its imports with the
    /// linker of its engine: its contract version and pre-instance.
    fn prepare(&self, path: &Path, component: &Component) -> Result<(String, PreKind), Error> {
        let engine = component.engine();
        let contract = check_world(path, component, engine)?;
        let linker = if wasmtime::Engine::same(engine, self.runtime.engine().wasmtime()) {
            self.runtime.linker()
        } else {
            self.runtime.baseline_linker().ok_or_else(|| Error::Imports {
                path: path.to_owned(),
                reason: "no linker for the engine this component was compiled for (a bug)".into(),
            })?
        };
        let instance_pre = linker
            .instantiate_pre(component)
            .map_err(|e| Error::Imports { path: path.to_owned(), reason: format!("{e:#}") })?;
        let wrong_world =
            |e: wasmtime::Error| Error::WrongWorld { path: path.to_owned(), exports: vec![format!("{e:#}")] };
        let kind = match contract.as_str() {
            CONTRACT_VERSION => PreKind::Current(OperatorPre::new(instance_pre).map_err(wrong_world)?),
            "0.3.0" => PreKind::V0_3(v0_3::OperatorPre::new(instance_pre).map_err(wrong_world)?),
            "0.2.0" => PreKind::V0_2(v0_2::OperatorPre::new(instance_pre).map_err(wrong_world)?),
            _ => PreKind::V0_1(v0_1::OperatorPre::new(instance_pre).map_err(wrong_world)?),
        };
        Ok((contract, kind))
    }

    /// Compiles the component with cranelift in the background, when no
    /// other optimizing compile runs, and swaps its code in for the
    /// baseline code of `pre`; skipped if nothing holds `pre` by then (a
    /// newer version replaced it). A failure keeps the baseline code
    /// serving, logged.
    fn optimize_later(&self, path: PathBuf, digest: String, bytes: Arc<[u8]>, contract: String, pre: WeakPre) {
        let loader = self.clone();
        let span = tracing::info_span!("optimize_component", digest = %digest_prefix(&digest));
        let task = async move {
            let Ok(_permit) = loader.optimizing.acquire().await else { return };
            if pre.upgrade().is_none() {
                tracing::debug!(path = %path.display(), "not optimizing a replaced version");
                return;
            }
            let start = Instant::now();
            let optimized = async {
                let component = loader.compile_optimized(&path, &digest, &bytes).await?;
                let (again, kind) = loader.prepare(&path, &component)?;
                if again != contract {
                    return Err(Error::Compile {
                        path: path.clone(),
                        reason: format!("cranelift's code is of contract {again}, Winch's of {contract}"),
                    });
                }
                Ok(kind)
            }
            .await;
            let took = start.elapsed();
            match (optimized, pre.upgrade()) {
                (Ok(kind), Some(pre)) => {
                    metrics().compiled(CompileSource::Compiled.as_str(), took);
                    pre.optimize(kind);
                    tracing::info!(
                        path = %path.display(),
                        compile_ms = took.as_secs_f64() * 1000.0,
                        "optimized code serving"
                    );
                }
                (Ok(_), None) => tracing::debug!(path = %path.display(), "optimized a version replaced meanwhile"),
                (Err(error), _) => {
                    tracing::warn!(path = %path.display(), %error, "optimizing compile failed, baseline code keeps serving");
                }
            }
        };
        tokio::spawn(task.instrument(span));
    }

    /// The component's code, where it came from and which compiler made
    /// it: cranelift's from the cache, else Winch's from the cache, else
    /// Winch's compiled now (and cached, unless cranelift's will be), else
    /// cranelift's compiled now.
    async fn compile(
        &self,
        path: &Path,
        digest: &str,
        bytes: &Arc<[u8]>,
    ) -> Result<(Component, CompileSource, Tier), Error> {
        let optimized = self.runtime.engine().wasmtime();
        if let Some(component) = self.cache_path(digest).and_then(|file| cached(optimized, &file)) {
            return Ok((component, CompileSource::Cache, Tier::Optimized));
        }
        if let Some(engine) = self.runtime.engine().baseline().cloned() {
            let entry = self.baseline_cache_path(digest);
            if let Some(component) = entry.as_ref().and_then(|file| cached(&engine, file)) {
                return Ok((component, CompileSource::Cache, Tier::Baseline));
            }
            let wasm = Arc::clone(bytes);
            let keep = if self.optimize { None } else { entry };
            let loader = self.clone();
            let compiled = tokio::task::spawn_blocking(move || {
                let component = Component::new(&engine, &*wasm)?;
                // Cranelift's code will not follow: Winch's is what the
                // next load reads.
                if let Some(file) = keep {
                    match component.serialize() {
                        Ok(artefact) => loader.store(file, &artefact),
                        Err(e) => tracing::warn!(error = format!("{e:#}"), "cannot serialize baseline code"),
                    }
                }
                Ok::<_, wasmtime::Error>(component)
            });
            match compiled.await {
                Ok(Ok(component)) => return Ok((component, CompileSource::Baseline, Tier::Baseline)),
                // Winch lacks some proposals cranelift has (tail calls,
                // exceptions, GC): such a component waits for cranelift.
                Ok(Err(e)) => {
                    tracing::info!(error = format!("{e:#}"), "the baseline compiler refused, compiling with cranelift")
                }
                Err(e) => tracing::warn!(error = %e, "baseline compiler task failed, compiling with cranelift"),
            }
        }
        let component = self.compile_optimized(path, digest, bytes).await?;
        Ok((component, CompileSource::Compiled, Tier::Optimized))
    }

    /// Compiles with cranelift and writes the compile cache entry.
    async fn compile_optimized(&self, path: &Path, digest: &str, bytes: &Arc<[u8]>) -> Result<Component, Error> {
        let engine = self.runtime.engine().wasmtime().clone();
        let cached = self.cache_path(digest);
        let wasm = Arc::clone(bytes);
        let compile_err = |reason: String| Error::Compile { path: path.to_owned(), reason };
        let (component, artefact) = tokio::task::spawn_blocking(move || {
            let artefact = engine.precompile_component(&wasm)?;
            let component = deserialize_fresh(&engine, &artefact)?;
            Ok::<_, wasmtime::Error>((component, artefact))
        })
        .await
        .map_err(|e| compile_err(format!("compiler task failed: {e}")))?
        .map_err(|e| compile_err(format!("{e:#}")))?;
        if let Some(file) = cached {
            self.store(file, &artefact);
        }
        // Cranelift's entry replaces one of Winch's code.
        if let Some(superseded) = self.baseline_cache_path(digest)
            && let Err(e) = std::fs::remove_file(&superseded)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::debug!(file = %superseded.display(), error = %e, "cannot remove baseline compile cache entry");
        }
        Ok(component)
    }

    /// Writes the compile cache entry `file` (unless its directory is not
    /// trusted) and keeps the cache within its budget; failures are logged.
    fn store(&self, file: PathBuf, artefact: &[u8]) {
        if let Some(Err(reason)) = file.parent().filter(|d| d.exists()).map(trusted_dir) {
            tracing::warn!(file = %file.display(), %reason, "not writing to an untrusted compile cache");
            return;
        }
        match write_atomically(&file, artefact) {
            Ok(()) => match prune_cache(&file, self.cache_budget) {
                Ok(0) => {}
                Ok(n) => tracing::info!(removed = n, budget_mib = self.cache_budget >> 20, "compile cache pruned"),
                Err(e) => tracing::warn!(error = %e, "cannot prune the compile cache"),
            },
            Err(e) => tracing::warn!(file = %file.display(), error = %e, "cannot write compile cache entry"),
        }
    }
}

/// The component from the compile cache entry `file` for `engine`, if it
/// is there, trusted and usable.
fn cached(engine: &wasmtime::Engine, file: &Path) -> Option<Component> {
    if !file.is_file() {
        return None;
    }
    if let Err(reason) = trusted_entry(file) {
        tracing::warn!(file = %file.display(), %reason, "refusing compile cache entry, compiling instead");
        return None;
    }
    match deserialize_cached(engine, file) {
        Ok(component) => {
            // Used: last to go when the cache is pruned.
            if let Err(e) =
                std::fs::File::options().append(true).open(file).and_then(|f| f.set_modified(SystemTime::now()))
            {
                tracing::debug!(file = %file.display(), error = %e, "cannot touch compile cache entry");
            }
            Some(component)
        }
        Err(e) => {
            tracing::warn!(file = %file.display(), error = %e, "ignoring unusable compile cache entry");
            None
        }
    }
}

/// The first 12 hex digits of a digest, for log fields.
fn digest_prefix(digest: &str) -> &str {
    digest.get(..12).unwrap_or(digest)
}

/// Why the compile cache entry `file` (or its directory) cannot be trusted
/// to hold code this host compiled: it must be a regular file (not a
/// symlink), and it and its directory must belong to the host's effective
/// user and not be writable by group or others. Anyone else who could
/// write there could make the host run native code of their choosing
/// (wasmtime loads cache entries without checking them).
///
/// # Errors
///
/// The reason, naming the path.
pub fn trusted_entry(file: &Path) -> Result<(), String> {
    let meta = std::fs::symlink_metadata(file).map_err(|e| format!("{}: {e}", file.display()))?;
    if !meta.file_type().is_file() {
        return Err(format!("{} is not a regular file", file.display()));
    }
    owned_and_private(file, &meta)?;
    match file.parent() {
        Some(dir) => trusted_dir(dir),
        None => Ok(()),
    }
}

/// Why the compile cache directory `dir` cannot be trusted (see
/// [`trusted_entry`]).
fn trusted_dir(dir: &Path) -> Result<(), String> {
    let meta = std::fs::metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    owned_and_private(dir, &meta)
}

#[cfg(unix)]
fn owned_and_private(path: &Path, meta: &std::fs::Metadata) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt as _;
    let uid = rustix::process::geteuid().as_raw();
    if meta.uid() != uid {
        return Err(format!("{} belongs to uid {}, not to the host's uid {uid}", path.display(), meta.uid()));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!("{} is writable by group or others (mode {:o})", path.display(), meta.mode() & 0o7777));
    }
    Ok(())
}

#[cfg(not(unix))]
fn owned_and_private(path: &Path, _meta: &std::fs::Metadata) -> Result<(), String> {
    Err(format!("{}: ownership cannot be checked on this platform", path.display()))
}

/// Loads an artefact this host wrote into its cache.
#[allow(unsafe_code, reason = "wasmtime requires unsafe to load precompiled code")]
fn deserialize_cached(engine: &wasmtime::Engine, file: &Path) -> wasmtime::Result<Component> {
    // SAFETY: the file was produced by `Engine::precompile_component` of an
    // engine with the same compatibility fingerprint (it is in the file
    // name; wasmtime checks it again), written to a temporary file and
    // renamed into place, and never modified afterwards.
    unsafe { Component::deserialize_file(engine, file) }
}

/// Loads an artefact just produced by `precompile_component`.
#[allow(unsafe_code, reason = "wasmtime requires unsafe to load precompiled code")]
fn deserialize_fresh(engine: &wasmtime::Engine, artefact: &[u8]) -> wasmtime::Result<Component> {
    // SAFETY: these bytes come straight from `precompile_component` on the
    // same engine.
    unsafe { Component::deserialize(engine, artefact) }
}

/// Removes the least recently used `.cwasm` entries beside `written` (the
/// entry just written, always kept) until the cache holds at most `budget`
/// bytes. Returns how many were removed.
fn prune_cache(written: &Path, budget: u64) -> std::io::Result<usize> {
    let Some(dir) = written.parent() else { return Ok(0) };
    let mut entries: Vec<(PathBuf, u64, SystemTime)> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == "cwasm"))
        .filter_map(|e| {
            let meta = e.metadata().ok()?;
            Some((e.path(), meta.len(), meta.modified().unwrap_or(SystemTime::UNIX_EPOCH)))
        })
        .collect();
    // Newest first; the one just written is the newest of all.
    entries.sort_by_key(|(path, _, modified)| (std::cmp::Reverse(path == written), std::cmp::Reverse(*modified)));
    let mut total = 0;
    let mut removed = 0;
    for (path, len, _) in entries {
        total += len;
        if total > budget && path != written {
            std::fs::remove_file(&path)?;
            removed += 1;
        }
    }
    Ok(removed)
}

/// Writes `file` through a temporary file and a rename; a directory it
/// creates, and the file, are writable by the host's user only (modes
/// 0755 and 0644; a umask can only narrow them).
fn write_atomically(file: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    if let Some(dir) = file.parent() {
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o755);
        builder.create(dir)?;
    }
    // One temporary file per write: two loads of one component at once (in
    // one process, e.g. tests) must not write into the same file.
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = file.with_extension(format!("tmp{}-{n}", std::process::id()));
    let mut options = std::fs::File::options();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o644);
    let mut out = options.open(&tmp)?;
    out.write_all(bytes)?;
    drop(out);
    std::fs::rename(&tmp, file)
}

/// Finds the controller export and its contract version (one of
/// [`CONTRACT_VERSIONS`]).
fn check_world(path: &Path, component: &Component, engine: &wasmtime::Engine) -> Result<String, Error> {
    let exports: Vec<String> = component.component_type().exports(engine).map(|(name, _)| name.to_owned()).collect();
    let (base, _) = CONTROLLER_EXPORT.split_once('@').expect("the export name carries a version");
    match exports.iter().find_map(|e| e.strip_prefix(base).and_then(|rest| rest.strip_prefix('@'))) {
        Some(v) if CONTRACT_VERSIONS.contains(&v) => Ok(v.to_owned()),
        Some(v) => Err(Error::UnsupportedContract { path: path.to_owned(), found: v.to_owned() }),
        None => Err(Error::WrongWorld { path: path.to_owned(), exports }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_is_pruned_oldest_first_keeping_what_was_just_written() {
        let dir = std::env::temp_dir().join(format!("capstan-cache-prune-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        let now = SystemTime::now();
        let entry = |name: &str, age_s: u64| {
            let path = dir.join(format!("{name}.cwasm"));
            std::fs::write(&path, [0u8; 100]).expect("written");
            let f = std::fs::File::options().append(true).open(&path).expect("open");
            f.set_modified(now - Duration::from_secs(age_s)).expect("mtime");
            path
        };
        let old = entry("old", 300);
        let middle = entry("middle", 200);
        let recent = entry("recent", 100);
        let written = entry("written", 1000); // an older mtime, but just written
        std::fs::write(dir.join("other.txt"), [0u8; 1000]).expect("written");
        assert_eq!(prune_cache(&written, 250).expect("pruned"), 2);
        assert!(written.is_file() && recent.is_file(), "the newest two fit in 250 bytes");
        assert!(!middle.exists() && !old.exists());
        assert!(dir.join("other.txt").is_file(), "only .cwasm entries are touched");
        assert_eq!(prune_cache(&written, 10).expect("pruned"), 1, "over budget, the one just written stays");
        assert!(written.is_file());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn gzipped_components_are_decompressed_and_others_left_alone() {
        use std::io::Write as _;
        let wasm = COMPONENT_HEADER.to_vec();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(&wasm).expect("compressed");
        let gz = gz.finish().expect("compressed");
        assert_eq!(decode(Path::new("a.wasm.gz"), gz.clone()).expect("decompresses"), wasm);
        assert_eq!(decode(Path::new("a.wasm"), wasm.clone()).expect("as is"), wasm);
        let broken = decode(Path::new("b.wasm.gz"), gz[..gz.len() / 2].to_vec()).expect_err("truncated");
        assert!(broken.to_string().starts_with("b.wasm.gz: cannot decompress (gzip)"), "{broken}");
    }

    #[tokio::test]
    async fn a_huge_file_is_rejected_by_its_header_or_size_before_it_is_read() {
        let dir = std::env::temp_dir().join(format!("capstan-huge-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        // Sparse files: 2 GiB of junk, and a component header followed by
        // more than the cap. Neither is read past its first bytes.
        let junk = dir.join("junk.wasm");
        std::fs::File::create(&junk).and_then(|f| f.set_len(2 << 30)).expect("junk");
        assert!(matches!(read(&junk).await, Err(Error::NotWasm { .. })));
        let big = dir.join("big.wasm");
        std::fs::write(&big, COMPONENT_HEADER).expect("header");
        std::fs::File::options().append(true).open(&big).and_then(|f| f.set_len(MAX_COMPONENT_SIZE + 1)).expect("big");
        let e = read(&big).await.expect_err("too large");
        assert!(matches!(e, Error::TooLarge { size, .. } if size == MAX_COMPONENT_SIZE + 1), "{e}");
        assert_eq!(e.reason(), "too_large");
        let core = dir.join("core.wasm");
        std::fs::write(&core, b"\0asm\x01\0\0\0").expect("core module");
        assert!(matches!(read(&core).await, Err(Error::CoreModule { .. })));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn error_messages_name_the_file_and_reason() {
        let e = Error::CoreModule { path: "a.wasm".into() };
        assert!(e.to_string().starts_with("a.wasm: a core WebAssembly module, not a component"));
        let e = Error::UnsupportedContract { path: "b.wasm".into(), found: "9.9.9".into() };
        assert_eq!(
            e.to_string(),
            "b.wasm: built against contract 9.9.9, this host supports 0.1.0, 0.2.0, 0.3.0, 0.4.0"
        );
        let e = Error::TooLarge { path: "c.wasm".into(), size: 300 << 20 };
        assert_eq!(e.to_string(), "c.wasm: too large: 314572800 bytes, the most a component may have is 268435456");
    }
}
