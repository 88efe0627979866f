//! Components as OCI artifacts: pushed to and pulled from any OCI registry
//! (`capstan push`, `capstan pull`, `capstan run oci://…`).
//!
//! A component travels in the CNCF Wasm OCI artifact layout: an image
//! manifest whose config has media type [`CONFIG_MEDIA_TYPE`] and whose one
//! layer, of media type [`LAYER_MEDIA_TYPE`], is the component itself
//! (never gzipped, so the layer digest is the component's digest, the one
//! `capstan inspect` and `/status` show). The manifest carries a summary of
//! what the component declares as annotations ([`Summary`]).
//!
//! ```no_run
//! # async fn f() -> Result<(), capstan_host::serve::oci::Error> {
//! use capstan_host::serve::oci::{Reference, Registry, Options};
//!
//! let registry = Registry::new(Options::default());
//! let reference: Reference = "oci://127.0.0.1:5000/greeter:v1".parse()?;
//! let pulled = registry.pull(&reference).await?;
//! println!("{} bytes, layer {}", pulled.bytes.len(), pulled.layer_digest);
//! # Ok(()) }
//! ```
//!
//! # Guarantees
//!
//! - A pulled layer is checked against the digest its manifest names
//!   before it is used, and cached by that digest under
//!   `<cache>/oci/blobs/sha256/<hex>`; a cached blob is checked again each
//!   time it is read, and pulled anew if it no longer matches.
//! - Registries are spoken to over HTTPS, except loopback registries
//!   (`localhost`, `127.0.0.0/8`, `[::1]`) and those named in
//!   [`Options::insecure`], which are spoken to over plain HTTP.
//! - Credentials come from the docker config file (see [`credentials`]),
//!   read again for every operation (so a rotated secret is picked up);
//!   without an entry for the registry, requests are anonymous.
//! - Nothing a registry sends is held beyond a bound: a manifest is read
//!   up to [`MAX_MANIFEST_SIZE`], a layer up to the size its manifest
//!   declares (itself at most [`MAX_COMPONENT_SIZE`]), an error answer up
//!   to a few KiB, whatever `Content-Length` says; the reading stops at the
//!   bound and the pull fails ([`Error::TooLarge`]). The layer is never
//!   held whole in memory while it arrives: it is written to a temporary
//!   file beside the blob cache as it comes, its digest computed as it
//!   goes, and renamed into the cache only once the digest matches; a
//!   layer refused, cut off or out of time leaves no file behind.
//! - Every fetch ends within [`Options::timeout`] (default [`TIMEOUT`],
//!   60 s) from its start, however slowly the registry answers
//!   ([`Error::Timeout`]): a lookup, a pull (manifest and layer), or a
//!   lookup and the pull that follows it sharing one deadline
//!   ([`Registry::resolve_by`], [`Registry::pull_by`]).
//! - Text taken from a registry (its error answers) is cut to
//!   [`MAX_ERROR_TEXT`] bytes before it is kept in an error, so it is
//!   bounded in logs and in the host's status.

mod cache;
pub mod credentials;
pub mod fetch;

pub use fetch::{MAX_ERROR_TEXT, bounded_text};

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Mutex;
use std::time::Duration;

use oci_client::client::{ClientConfig, ClientProtocol, Config, ImageLayer};
use oci_client::manifest::{OciImageManifest, OciManifest};
use serde_json::json;
use sha2::{Digest as _, Sha256};

use crate::runtime::component::MAX_COMPONENT_SIZE;
use crate::sync::lock;

/// The prefix of a component reference on the command line and in
/// components folders: `oci://REGISTRY/REPOSITORY[:TAG|@sha256:DIGEST]`.
pub const SCHEME: &str = "oci://";
/// How long connecting to a registry may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Media type of the config of a Wasm OCI artifact.
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// Media type of the component layer of a Wasm OCI artifact.
pub const LAYER_MEDIA_TYPE: &str = "application/wasm";
/// Manifest annotation: the controller name the component declares.
pub const ANNOTATION_CONTROLLER: &str = "dev.capstan.controller";
/// Manifest annotation: the contract version it was built against.
pub const ANNOTATION_CONTRACT: &str = "dev.capstan.contract";
/// Manifest annotation: `sha256:` digest of the grants it declares, as
/// `capstan inspect` prints them (`grantsDigest`).
pub const ANNOTATION_GRANTS: &str = "dev.capstan.grants-digest";
/// Standard layer annotation: the file name the component was pushed from.
pub const ANNOTATION_TITLE: &str = "org.opencontainers.image.title";
/// The largest manifest read (4 MiB, as the distribution registry and
/// containerd allow); a larger one is refused.
pub const MAX_MANIFEST_SIZE: u64 = 4 << 20;
/// How long one fetch (a lookup, a pull, or both) may take by default,
/// from its first request to its last byte (see [`Options::timeout`]).
pub const TIMEOUT: Duration = Duration::from_secs(60);
/// The manifest media types a pull accepts.
const MANIFEST_MEDIA_TYPES: &str = "application/vnd.oci.image.manifest.v1+json, \
     application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.index.v1+json, \
     application/vnd.docker.distribution.manifest.list.v2+json";

/// Why a reference cannot be pushed or pulled.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The reference does not parse.
    #[error("invalid reference {reference:?}: {reason} (expected oci://REGISTRY/REPOSITORY[:TAG|@sha256:DIGEST])")]
    Reference {
        /// As given.
        reference: String,
        /// Why.
        reason: String,
    },
    /// The registry could not be reached, or answered with a server error:
    /// it may answer later.
    #[error("{reference}: registry unavailable: {reason}")]
    Unavailable {
        /// The reference.
        reference: String,
        /// Why.
        reason: String,
    },
    /// The registry answered, and refused (not found, denied, invalid).
    #[error("{reference}: {reason}")]
    Registry {
        /// The reference.
        reference: String,
        /// The registry's answer.
        reason: String,
    },
    /// The artifact is not a component in the Wasm OCI layout.
    #[error("{reference}: not a Wasm component artifact: {reason}")]
    NotComponent {
        /// The reference.
        reference: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A pulled layer does not match the digest its manifest names.
    #[error("{reference}: layer content does not match its digest {expected} (got {actual}): refused")]
    Digest {
        /// The reference.
        reference: String,
        /// The digest the manifest names.
        expected: String,
        /// The digest of what was received.
        actual: String,
    },
    /// The docker config file, or a credential helper, failed.
    #[error("credentials for {registry}: {reason}")]
    Credentials {
        /// The registry.
        registry: String,
        /// Why.
        reason: String,
    },
    /// The blob cache could not be written or read.
    #[error("blob cache {path}: {error}")]
    Cache {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        error: std::io::Error,
    },
    /// The registry sent more than the host reads: a manifest larger than
    /// [`MAX_MANIFEST_SIZE`], or a layer larger than its declared size
    /// (itself at most [`MAX_COMPONENT_SIZE`]). The reading stopped there.
    #[error("{reference}: {what} larger than {limit} bytes: refused")]
    TooLarge {
        /// The reference.
        reference: String,
        /// `manifest` or `layer`.
        what: &'static str,
        /// The bound it passed.
        limit: u64,
    },
    /// The registry did not finish answering within the deadline
    /// ([`Options::timeout`]): it may answer in time later.
    #[error("{reference}: registry too slow: no complete answer within {} s", after.as_secs_f64())]
    Timeout {
        /// The reference.
        reference: String,
        /// The deadline.
        after: Duration,
    },
}

impl Error {
    /// Whether the failure may pass by itself (the registry is down,
    /// unreachable or too slow): worth trying again later.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Self::Unavailable { .. } | Self::Timeout { .. })
    }

    /// A short, stable word for the failure: `reference`, `unavailable`,
    /// `registry`, `not_component`, `digest`, `credentials`, `cache`,
    /// `too_large`, `timeout`.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Reference { .. } => "reference",
            Self::Unavailable { .. } => "unavailable",
            Self::Registry { .. } => "registry",
            Self::NotComponent { .. } => "not_component",
            Self::Digest { .. } => "digest",
            Self::Credentials { .. } => "credentials",
            Self::Cache { .. } => "cache",
            Self::TooLarge { .. } => "too_large",
            Self::Timeout { .. } => "timeout",
        }
    }
}

/// `Result` with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A component reference: `oci://REGISTRY/REPOSITORY:TAG` or
/// `oci://REGISTRY/REPOSITORY@sha256:DIGEST` (a tag defaults to
/// `latest`; a reference without a registry names Docker Hub).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Reference(oci_client::Reference);

impl Reference {
    /// The registry, e.g. `127.0.0.1:5000`.
    pub fn registry(&self) -> &str {
        self.0.registry()
    }

    /// The repository, e.g. `capstan/greeter`.
    pub fn repository(&self) -> &str {
        self.0.repository()
    }

    /// The tag, if the reference names one.
    pub fn tag(&self) -> Option<&str> {
        self.0.tag()
    }

    /// The digest, if the reference names one (`sha256:…`).
    pub fn digest(&self) -> Option<&str> {
        self.0.digest()
    }

    /// The same repository at `digest` (no tag).
    pub fn at_digest(&self, digest: &str) -> Self {
        Self(oci_client::Reference::with_digest(
            self.0.registry().to_owned(),
            self.0.repository().to_owned(),
            digest.to_owned(),
        ))
    }

    fn inner(&self) -> &oci_client::Reference {
        &self.0
    }
}

impl std::fmt::Display for Reference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{SCHEME}{}", self.0.whole())
    }
}

impl FromStr for Reference {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let invalid = |reason: String| Error::Reference { reference: s.to_owned(), reason };
        let rest = s.trim().strip_prefix(SCHEME).ok_or_else(|| invalid(format!("does not start with {SCHEME}")))?;
        if rest.is_empty() || rest.chars().any(char::is_whitespace) {
            return Err(invalid("empty, or has whitespace".to_owned()));
        }
        let parsed = oci_client::Reference::try_from(rest).map_err(|e| invalid(e.to_string()))?;
        // What it stands for must parse as itself: `Bad/0` is read as
        // `docker.io/Bad/0`, which is not a valid reference.
        if oci_client::Reference::try_from(parsed.whole().as_str()).is_err() {
            return Err(invalid(format!("{} is not a valid reference", bounded_text(&parsed.whole()))));
        }
        if let Some(digest) = parsed.digest()
            && !digest.strip_prefix("sha256:").is_some_and(is_sha256_hex)
        {
            return Err(invalid(format!("digest {digest} is not sha256:<64 hex digits>")));
        }
        Ok(Self(parsed))
    }
}

/// Whether `s` starts like a component reference (`oci://`).
pub fn is_reference(s: &str) -> bool {
    s.trim_start().starts_with(SCHEME)
}

fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// `sha256:<hex>` of `bytes`.
pub fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// What a component declares, carried as manifest annotations.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Controller name ([`ANNOTATION_CONTROLLER`]).
    pub controller: String,
    /// Contract version ([`ANNOTATION_CONTRACT`]).
    pub contract: String,
    /// `sha256:` digest of its grants ([`ANNOTATION_GRANTS`]).
    pub grants_digest: String,
}

impl Summary {
    fn annotations(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            (ANNOTATION_CONTROLLER.to_owned(), self.controller.clone()),
            (ANNOTATION_CONTRACT.to_owned(), self.contract.clone()),
            (ANNOTATION_GRANTS.to_owned(), self.grants_digest.clone()),
        ])
    }

    fn from_annotations(annotations: Option<&BTreeMap<String, String>>) -> Option<Self> {
        let a = annotations?;
        Some(Self {
            controller: a.get(ANNOTATION_CONTROLLER)?.clone(),
            contract: a.get(ANNOTATION_CONTRACT).cloned().unwrap_or_default(),
            grants_digest: a.get(ANNOTATION_GRANTS).cloned().unwrap_or_default(),
        })
    }
}

/// How a [`Registry`] connects. Every default is documented on its
/// builder method.
#[derive(Clone, Debug, Default)]
#[must_use]
pub struct Options {
    insecure: Vec<String>,
    cache_dir: Option<PathBuf>,
    docker_config: Option<PathBuf>,
    timeout: Option<Duration>,
}

impl Options {
    /// Speaks plain HTTP to `registry` (`HOST[:PORT]`), as to loopback
    /// registries. Default: HTTPS to every registry not on loopback.
    pub fn insecure(mut self, registry: impl Into<String>) -> Self {
        self.insecure.push(registry.into());
        self
    }

    /// Caches pulled layers under `dir/oci/blobs/sha256/`. Default: no
    /// cache (every pull downloads the layer).
    pub fn cache_dir(mut self, dir: Option<PathBuf>) -> Self {
        self.cache_dir = dir;
        self
    }

    /// Reads credentials from this docker config file. Default: see
    /// [`credentials::config_path`] (`$DOCKER_CONFIG/config.json`, else
    /// `~/.docker/config.json`).
    pub fn docker_config(mut self, path: Option<PathBuf>) -> Self {
        self.docker_config = path;
        self
    }

    /// How long one fetch may take, from its first request to its last
    /// byte: a lookup of a tag ([`Registry::resolve`]), a pull
    /// ([`Registry::pull`]: the manifest and the layer together), or a
    /// lookup and the pull that follows it when they share a deadline
    /// ([`Registry::resolve_by`], [`Registry::pull_by`], as a followed
    /// reference does); a slower one fails with [`Error::Timeout`].
    /// Default: [`TIMEOUT`] (60 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
}

/// A component pulled from a registry, its layer verified.
#[derive(Clone, Debug)]
pub struct Pulled {
    /// The reference pulled.
    pub reference: Reference,
    /// `sha256:` digest of the manifest (what the tag pointed at).
    pub manifest_digest: String,
    /// `sha256:` digest of the component layer, verified.
    pub layer_digest: String,
    /// What the manifest's annotations say, if it has them.
    pub summary: Option<Summary>,
    /// Whether the layer came from the blob cache.
    pub cached: bool,
    /// The component: the layer, read back from the file it was verified
    /// in.
    pub bytes: Vec<u8>,
}

/// A component pushed to a registry.
#[derive(Clone, Debug)]
pub struct Pushed {
    /// `sha256:` digest of the manifest: `REPOSITORY@DIGEST` pulls exactly this.
    pub manifest_digest: String,
    /// `sha256:` digest of the component layer.
    pub layer_digest: String,
    /// Size of the component layer in bytes.
    pub size: usize,
}

/// Talks to OCI registries: one HTTP client per registry, credentials
/// read for each operation.
pub struct Registry {
    options: Options,
    clients: Mutex<HashMap<String, oci_client::Client>>,
    http: Mutex<HashMap<String, reqwest::Client>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").field("options", &self.options).finish_non_exhaustive()
    }
}

/// Whether `registry` (`HOST[:PORT]`) is on loopback.
pub fn is_loopback(registry: &str) -> bool {
    let host = match registry.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or_default(),
        None => registry.rsplit_once(':').map_or(registry, |(h, _)| h),
    };
    host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

impl Registry {
    /// A registry client with `options`.
    pub fn new(options: Options) -> Self {
        // reqwest is built without a crypto provider: use ring, as kube does.
        let _ = rustls::crypto::ring::default_provider().install_default();
        Self { options, clients: Mutex::new(HashMap::new()), http: Mutex::new(HashMap::new()) }
    }

    /// How long one fetch may take ([`Options::timeout`]).
    pub fn timeout(&self) -> Duration {
        self.options.timeout.unwrap_or(TIMEOUT)
    }

    /// Whether `registry` is spoken to over plain HTTP.
    pub fn plain_http(&self, registry: &str) -> bool {
        is_loopback(registry) || self.options.insecure.iter().any(|r| r == registry)
    }

    fn client(&self, registry: &str) -> oci_client::Client {
        lock(&self.clients)
            .entry(registry.to_owned())
            .or_insert_with(|| {
                let protocol = if self.plain_http(registry) { ClientProtocol::Http } else { ClientProtocol::Https };
                oci_client::Client::new(ClientConfig {
                    protocol,
                    connect_timeout: Some(CONNECT_TIMEOUT),
                    // Past the deadline of a pull, which ends it first
                    // (with a clear error); a push has no other.
                    read_timeout: Some(self.timeout() * 2),
                    ..ClientConfig::default()
                })
            })
            .clone()
    }

    /// The HTTP client pulls of `registry` are made with (the same TLS
    /// set-up as oci-client's).
    fn http(&self, reference: &Reference) -> Result<reqwest::Client> {
        if let Some(http) = lock(&self.http).get(reference.registry()) {
            return Ok(http.clone());
        }
        // No read timeout: the deadline of the whole pull ends it.
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            .map_err(|e| fetch::transport(reference, &e))?;
        lock(&self.http).insert(reference.registry().to_owned(), http.clone());
        Ok(http)
    }

    /// `scheme://registry/v2/repository/` of `reference`.
    fn base_url(&self, reference: &Reference) -> String {
        let scheme = if self.plain_http(reference.registry()) { "http" } else { "https" };
        format!("{scheme}://{}/v2/{}/", reference.0.resolve_registry(), reference.repository())
    }

    /// The `Authorization` header for pulling `reference`: a bearer token
    /// from the registry's token service (oci-client's handshake), the
    /// docker config's basic credentials, or none.
    async fn authorization(&self, reference: &Reference) -> Result<Option<String>> {
        use oci_client::secrets::RegistryAuth;
        let auth = self.auth(reference).await?;
        let token = self
            .client(reference.registry())
            .auth(reference.inner(), &auth, oci_client::RegistryOperation::Pull)
            .await
            .map_err(|e| classify(reference, e))?;
        Ok(match (token, auth) {
            (Some(token), _) | (None, RegistryAuth::Bearer(token)) => Some(format!("Bearer {token}")),
            (None, RegistryAuth::Basic(user, password)) => {
                use base64::Engine as _;
                Some(format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
                ))
            }
            (None, RegistryAuth::Anonymous) => None,
        })
    }

    /// Sends one request for `path` (under the repository), with
    /// `authorization`; an answer other than a success is the error it
    /// stands for (see [`fetch::refusal`]).
    async fn send(
        &self,
        reference: &Reference,
        method: reqwest::Method,
        path: &str,
        authorization: Option<&str>,
    ) -> Result<reqwest::Response> {
        let url = format!("{}{path}", self.base_url(reference));
        let mut request = self.http(reference)?.request(method, url).header("Accept", MANIFEST_MEDIA_TYPES);
        if let Some(authorization) = authorization {
            request = request.header("Authorization", authorization);
        }
        let response = request.send().await.map_err(|e| fetch::transport(reference, &e))?;
        if !response.status().is_success() {
            return Err(fetch::refusal(reference, response).await);
        }
        Ok(response)
    }

    /// The deadline of one fetch that starts now: [`timeout`](Self::timeout)
    /// from now. Give it to [`resolve_by`](Self::resolve_by) and
    /// [`pull_by`](Self::pull_by) to bound a lookup and the pull that
    /// follows it together.
    pub fn deadline(&self) -> tokio::time::Instant {
        tokio::time::Instant::now() + self.timeout()
    }

    /// Runs `operation` until `deadline` at most.
    async fn within_deadline<T>(
        &self,
        reference: &Reference,
        deadline: tokio::time::Instant,
        operation: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        tokio::time::timeout_at(deadline, operation)
            .await
            .unwrap_or_else(|_| Err(Error::Timeout { reference: reference.to_string(), after: self.timeout() }))
    }

    async fn auth(&self, reference: &Reference) -> Result<oci_client::secrets::RegistryAuth> {
        let path = self.options.docker_config.clone().or_else(credentials::config_path);
        let registry = reference.0.resolve_registry().to_owned();
        tokio::task::spawn_blocking(move || credentials::for_registry(path.as_deref(), &registry)).await.unwrap_or_else(
            |e| Err(Error::Credentials { registry: reference.registry().to_owned(), reason: e.to_string() }),
        )
    }

    /// The digest of the manifest `reference` names now: its digest if it
    /// names one, else what its tag points at (a `HEAD` request; a `GET`
    /// of the manifest, within [`MAX_MANIFEST_SIZE`], if the registry does
    /// not name the digest), within [`Options::timeout`] from now.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] when the registry does not answer,
    /// [`Error::Timeout`] when it does not finish within the deadline,
    /// [`Error::Registry`] when it refuses (e.g. the tag is unknown).
    pub async fn resolve(&self, reference: &Reference) -> Result<String> {
        self.resolve_by(reference, self.deadline()).await
    }

    /// [`resolve`](Self::resolve), ending at `deadline` (see
    /// [`deadline`](Self::deadline)): a lookup and the pull that follows
    /// it share one deadline, so that together they take no longer than
    /// [`Options::timeout`].
    ///
    /// ```no_run
    /// # async fn f(registry: &capstan_host::serve::oci::Registry, reference: &capstan_host::serve::oci::Reference)
    /// # -> Result<(), capstan_host::serve::oci::Error> {
    /// let deadline = registry.deadline();
    /// let digest = registry.resolve_by(reference, deadline).await?;
    /// let pulled = registry.pull_by(&reference.at_digest(&digest), deadline).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`resolve`](Self::resolve); [`Error::Timeout`] at `deadline`.
    pub async fn resolve_by(&self, reference: &Reference, deadline: tokio::time::Instant) -> Result<String> {
        if let Some(digest) = reference.digest() {
            return Ok(digest.to_owned());
        }
        self.within_deadline(reference, deadline, async {
            let authorization = self.authorization(reference).await?;
            let path = format!("manifests/{}", reference.tag().unwrap_or("latest"));
            let head = self.send(reference, reqwest::Method::HEAD, &path, authorization.as_deref()).await?;
            let named = head.headers().get("Docker-Content-Digest").and_then(|v| v.to_str().ok());
            if let Some(digest) = named.filter(|d| d.strip_prefix("sha256:").is_some_and(is_sha256_hex)) {
                return Ok(digest.to_owned());
            }
            let (_, digest) = self.manifest(reference, &path, authorization.as_deref()).await?;
            Ok(digest)
        })
        .await
    }

    /// The manifest at `path`, read within [`MAX_MANIFEST_SIZE`], and its
    /// digest.
    async fn manifest(
        &self,
        reference: &Reference,
        path: &str,
        authorization: Option<&str>,
    ) -> Result<(Vec<u8>, String)> {
        let mut response = self.send(reference, reqwest::Method::GET, path, authorization).await?;
        let too_large =
            || Error::TooLarge { reference: reference.to_string(), what: "manifest", limit: MAX_MANIFEST_SIZE };
        if response.content_length().is_some_and(|n| n > MAX_MANIFEST_SIZE) {
            return Err(too_large());
        }
        let bytes = fetch::read_bounded(reference, &mut response, MAX_MANIFEST_SIZE).await?.ok_or_else(too_large)?;
        let digest = sha256(&bytes);
        Ok((bytes, digest))
    }

    /// Pulls the component `reference` names: its manifest, then its layer
    /// (from the blob cache if there, verified either way), within the
    /// deadline ([`Options::timeout`] from now, for the manifest and the
    /// layer together).
    ///
    /// # Errors
    ///
    /// [`Error::NotComponent`] for an artifact that is not one component
    /// layer of [`LAYER_MEDIA_TYPE`], [`Error::TooLarge`] for a manifest
    /// or a layer larger than the host reads, [`Error::Digest`] for a layer
    /// that does not match its digest, and those of
    /// [`resolve`](Self::resolve).
    pub async fn pull(&self, reference: &Reference) -> Result<Pulled> {
        self.pull_by(reference, self.deadline()).await
    }

    /// [`pull`](Self::pull), ending at `deadline` (see
    /// [`resolve_by`](Self::resolve_by)).
    ///
    /// # Errors
    ///
    /// As [`pull`](Self::pull); [`Error::Timeout`] at `deadline`.
    pub async fn pull_by(&self, reference: &Reference, deadline: tokio::time::Instant) -> Result<Pulled> {
        self.within_deadline(reference, deadline, self.pull_now(reference)).await
    }

    async fn pull_now(&self, reference: &Reference) -> Result<Pulled> {
        let authorization = self.authorization(reference).await?;
        let at = reference.digest().or(reference.tag()).unwrap_or("latest");
        let (manifest, manifest_digest) =
            self.manifest(reference, &format!("manifests/{at}"), authorization.as_deref()).await?;
        let Layer { digest: layer_digest, size: declared, summary } = component_layer(reference, &manifest)?;
        let cache = self.blob_path(&layer_digest);
        if let Some(bytes) = cache.as_deref().and_then(|path| cache::read_cached(path, &layer_digest, declared)) {
            return Ok(Pulled {
                reference: reference.clone(),
                manifest_digest,
                layer_digest,
                summary,
                cached: true,
                bytes,
            });
        }
        let response = self
            .send(reference, reqwest::Method::GET, &format!("blobs/{layer_digest}"), authorization.as_deref())
            .await?;
        let too_large = || Error::TooLarge { reference: reference.to_string(), what: "layer", limit: declared };
        if response.content_length().is_some_and(|n| n > declared) {
            return Err(too_large());
        }
        // Streamed to a temporary file beside the cache (or in the temporary
        // directory, without a cache) up to the declared size and no
        // further, hashed as it comes; the file goes with `partial` unless
        // the digest matches and it is renamed into the cache.
        let hex = layer_digest.trim_start_matches("sha256:");
        let dir = cache.as_deref().and_then(Path::parent).map_or_else(std::env::temp_dir, Path::to_owned);
        let mut partial =
            cache::Partial::create(&dir, hex).await.map_err(|error| Error::Cache { path: dir.clone(), error })?;
        let mut body = fetch::Answer { reference, response };
        if !fetch::stream_bounded(&mut body, declared, &mut partial).await? {
            return Err(too_large());
        }
        let actual = partial.digest();
        if actual != layer_digest {
            return Err(Error::Digest { reference: reference.to_string(), expected: layer_digest, actual });
        }
        let cache_error = |path: &Path| {
            let path = path.to_owned();
            move |error| Error::Cache { path, error }
        };
        let bytes = partial.read_back().await.map_err(cache_error(partial.path()))?;
        if let Some(path) = &cache {
            partial.persist(path).await.map_err(cache_error(path))?;
        }
        Ok(Pulled { reference: reference.clone(), manifest_digest, layer_digest, summary, cached: false, bytes })
    }

    /// Pushes `wasm` (a component, not gzipped) to `reference` (a tag) as a
    /// Wasm OCI artifact, with `summary` as manifest annotations and
    /// `title` (the file name) on the layer.
    ///
    /// # Errors
    ///
    /// [`Error::Reference`] for a reference by digest, and those of
    /// [`resolve`](Self::resolve).
    pub async fn push(&self, reference: &Reference, wasm: Vec<u8>, summary: &Summary, title: &str) -> Result<Pushed> {
        if reference.digest().is_some() {
            return Err(Error::Reference {
                reference: reference.to_string(),
                reason: "push to a tag, not a digest".to_owned(),
            });
        }
        let auth = self.auth(reference).await?;
        let layer_digest = sha256(&wasm);
        let size = wasm.len();
        let config = json!({
            "created": k8s_openapi::jiff::Timestamp::now().to_string(),
            "architecture": "wasm",
            "os": "wasip2",
            "layerDigests": [layer_digest],
            "component": {"target": format!("capstan:operator/operator@{}", summary.contract)},
        });
        let config = Config::new(
            serde_json::to_vec(&config).expect("a JSON value serialises"),
            CONFIG_MEDIA_TYPE.to_owned(),
            None,
        );
        let layers = [ImageLayer::new(
            wasm,
            LAYER_MEDIA_TYPE.to_owned(),
            Some(BTreeMap::from([(ANNOTATION_TITLE.to_owned(), title.to_owned())])),
        )];
        let manifest = OciImageManifest::build(&layers, &config, Some(summary.annotations()));
        let manifest_digest = sha256(&serde_json::to_vec(&manifest).map_err(|e| Error::Registry {
            reference: reference.to_string(),
            reason: format!("cannot serialise the manifest: {e}"),
        })?);
        let client = self.client(reference.registry());
        client
            .push(reference.inner(), &layers, config, &auth, Some(manifest))
            .await
            .map_err(|e| classify(reference, e))?;
        // The registry's own digest of what it stored (the same bytes).
        let manifest_digest = client.fetch_manifest_digest(reference.inner(), &auth).await.unwrap_or(manifest_digest);
        Ok(Pushed { manifest_digest, layer_digest, size })
    }

    fn blob_path(&self, digest: &str) -> Option<PathBuf> {
        let hex = digest.strip_prefix("sha256:")?;
        Some(self.options.cache_dir.as_ref()?.join("oci").join("blobs").join("sha256").join(hex))
    }
}

/// The component layer an image manifest names, as [`component_layer`]
/// found and checked it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layer {
    /// Its `sha256:` digest (64 lower-case hex digits).
    pub digest: String,
    /// Its size as the manifest declares it, at most [`MAX_COMPONENT_SIZE`].
    pub size: u64,
    /// What the manifest's annotations say, if it has them.
    pub summary: Option<Summary>,
}

/// The component layer of `manifest`, the bytes a registry sent for
/// `reference`: the manifest matches the digest `reference` names (if it
/// names one), is an image manifest (not an index) whose config has media
/// type [`CONFIG_MEDIA_TYPE`] and whose one layer has media type
/// [`LAYER_MEDIA_TYPE`], a `sha256:` digest, and a size of at most
/// [`MAX_COMPONENT_SIZE`].
///
/// ```
/// use capstan_host::serve::oci::{Reference, component_layer};
///
/// let reference: Reference = "oci://127.0.0.1:5000/greeter:v1".parse()?;
/// let err = component_layer(&reference, b"{}").unwrap_err();
/// assert_eq!(err.reason(), "not_component");
/// # Ok::<(), capstan_host::serve::oci::Error>(())
/// ```
///
/// # Errors
///
/// [`Error::Digest`] for a manifest that does not match the reference's
/// digest, [`Error::NotComponent`] for anything else above. Text taken
/// from the manifest is cut with [`bounded_text`].
pub fn component_layer(reference: &Reference, manifest: &[u8]) -> Result<Layer> {
    if let Some(expected) = reference.digest() {
        let actual = sha256(manifest);
        if expected != actual {
            return Err(Error::Digest { reference: reference.to_string(), expected: expected.to_owned(), actual });
        }
    }
    let not_component = |reason: String| Error::NotComponent { reference: reference.to_string(), reason };
    let manifest: OciManifest =
        serde_json::from_slice(manifest).map_err(|e| not_component(format!("manifest does not parse: {e}")))?;
    let manifest = match manifest {
        OciManifest::Image(m) => m,
        OciManifest::ImageIndex(_) => return Err(not_component("an image index, not an image manifest".into())),
    };
    if manifest.config.media_type != CONFIG_MEDIA_TYPE {
        return Err(not_component(format!(
            "config media type {}, expected {CONFIG_MEDIA_TYPE}",
            bounded_text(&manifest.config.media_type)
        )));
    }
    let [layer] = manifest.layers.as_slice() else {
        return Err(not_component(format!("{} layers, expected one", manifest.layers.len())));
    };
    if layer.media_type != LAYER_MEDIA_TYPE {
        return Err(not_component(format!(
            "layer media type {}, expected {LAYER_MEDIA_TYPE}",
            bounded_text(&layer.media_type)
        )));
    }
    let declared = u64::try_from(layer.size).map_err(|_| not_component(format!("layer size {}", layer.size)))?;
    if declared > MAX_COMPONENT_SIZE {
        return Err(not_component(format!(
            "layer of {declared} bytes, the most a component may have is {MAX_COMPONENT_SIZE}"
        )));
    }
    let layer_digest = layer.digest.clone();
    if !layer_digest.strip_prefix("sha256:").is_some_and(is_sha256_hex) {
        return Err(not_component(format!("layer digest {} is not sha256", bounded_text(&layer_digest))));
    }
    let summary = Summary::from_annotations(manifest.annotations.as_ref());
    Ok(Layer { digest: layer_digest, size: declared, summary })
}

/// Sorts oci-client's errors into this module's.
fn classify(reference: &Reference, error: oci_client::errors::OciDistributionError) -> Error {
    use oci_client::errors::OciDistributionError as E;
    let reference = reference.to_string();
    match error {
        E::RequestError(e) if e.status().is_none_or(|s| s.is_server_error()) => {
            Error::Unavailable { reference, reason: bounded_text(&format!("{e:#}")) }
        }
        E::ServerError { code, url, message } if code >= 500 => {
            Error::Unavailable { reference, reason: bounded_text(&format!("{url}: {code} {message}")) }
        }
        E::DigestError(oci_client::errors::DigestError::VerificationError { expected, actual }) => {
            Error::Digest { reference, expected, actual }
        }
        E::ImageManifestNotFoundError(m) => {
            Error::Registry { reference, reason: bounded_text(&format!("not found: {m}")) }
        }
        other => Error::Registry { reference, reason: bounded_text(&other.to_string()) },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_parse_with_tags_or_digests_and_print_back() {
        let r: Reference = "oci://127.0.0.1:5000/capstan/greeter:v1".parse().expect("parses");
        assert_eq!(
            (r.registry(), r.repository(), r.tag(), r.digest()),
            ("127.0.0.1:5000", "capstan/greeter", Some("v1"), None)
        );
        assert_eq!(r.to_string(), "oci://127.0.0.1:5000/capstan/greeter:v1");
        let digest = format!("sha256:{}", "a".repeat(64));
        let d: Reference = format!("oci://localhost:5000/greeter@{digest}").parse().expect("parses");
        assert_eq!(d.digest(), Some(digest.as_str()));
        assert_eq!(r.at_digest(&digest).to_string(), format!("oci://127.0.0.1:5000/capstan/greeter@{digest}"));
        for bad in ["127.0.0.1:5000/greeter:v1", "oci://", "oci://Bad/Repo:v1", "oci://r.io/g@sha256:abc"] {
            let err = bad.parse::<Reference>().expect_err(bad);
            assert_eq!(err.reason(), "reference", "{bad}: {err}");
        }
    }

    #[test]
    fn a_reference_that_does_not_read_back_as_itself_is_refused() {
        // Read as `docker.io/Bad/0:latest`, whose upper-case repository
        // does not parse.
        let err = "oci://Bad/0".parse::<Reference>().expect_err("refused");
        assert_eq!(err.reason(), "reference", "{err}");
        assert!(err.to_string().contains("docker.io/Bad/0:latest is not a valid reference"), "{err}");
        let r: Reference = "oci://ghcr.io/capstan/greeter".parse().expect("parses");
        assert_eq!(r.to_string().parse::<Reference>().expect("parses again"), r);
    }

    #[test]
    fn loopback_registries_speak_plain_http_and_others_https_unless_named() {
        for loopback in ["localhost:5000", "127.0.0.1:5000", "127.3.2.1", "[::1]:5000", "localhost"] {
            assert!(is_loopback(loopback), "{loopback}");
        }
        for remote in ["ghcr.io", "registry.example:5000", "10.0.0.1:5000", "localhost.example"] {
            assert!(!is_loopback(remote), "{remote}");
        }
        let registry = Registry::new(Options::default().insecure("registry.lan:5000"));
        assert!(registry.plain_http("registry.lan:5000") && registry.plain_http("127.0.0.1:1"));
        assert!(!registry.plain_http("ghcr.io"));
    }

    #[test]
    fn the_summary_round_trips_through_annotations() {
        let s = Summary { controller: "greeter".into(), contract: "0.3.0".into(), grants_digest: "sha256:ab".into() };
        assert_eq!(Summary::from_annotations(Some(&s.annotations())), Some(s));
        assert_eq!(Summary::from_annotations(None), None);
    }

    #[test]
    fn error_messages_read_right() {
        let e = Error::Digest {
            reference: "oci://r/g:v1".into(),
            expected: "sha256:aa".into(),
            actual: "sha256:bb".into(),
        };
        assert_eq!(
            e.to_string(),
            "oci://r/g:v1: layer content does not match its digest sha256:aa (got sha256:bb): refused"
        );
        let e = Error::NotComponent { reference: "oci://r/g:v1".into(), reason: "2 layers, expected one".into() };
        assert_eq!(e.to_string(), "oci://r/g:v1: not a Wasm component artifact: 2 layers, expected one");
        let e = Error::Unavailable { reference: "oci://r/g:v1".into(), reason: "connection refused".into() };
        assert!(e.is_unavailable() && e.to_string() == "oci://r/g:v1: registry unavailable: connection refused");
    }
}
