//! A real OCI registry on loopback for the tests: the CNCF distribution
//! registry (`registry serve`), built once from the Go module proxy into
//! `$CAPSTAN_CACHE/registry/distribution-<version>/registry` (about 5
//! minutes on 2 cores, most of it downloading modules), and started by each
//! test that needs one, with filesystem storage in a temporary folder and a
//! free port. Nothing is left running: the process is killed when the
//! [`TestRegistry`] is dropped.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use tokio::process::{Child, Command};

/// The distribution version the tests run (a module version the Go
/// proxy serves: `github.com/distribution/distribution/v3`).
pub const DISTRIBUTION_VERSION: &str = "v3.1.2";

const PACKAGE: &str = "github.com/distribution/distribution/v3/cmd/registry";

/// The registry binary, built into the cache first if it is not there.
///
/// # Errors
///
/// When there is no Go toolchain, or the build fails (its output is in the
/// error).
pub async fn binary() -> Result<PathBuf> {
    let install = format!("{PACKAGE}@{DISTRIBUTION_VERSION}");
    crate::go_binary(
        &PathBuf::from("registry").join(format!("distribution-{DISTRIBUTION_VERSION}")),
        "registry",
        &format!("the distribution registry {DISTRIBUTION_VERSION}"),
        &[],
        &["install", "-trimpath", "-ldflags=-s -w", &install],
    )
    .await
}

/// A running distribution registry on `127.0.0.1`, speaking plain HTTP.
#[derive(Debug)]
pub struct TestRegistry {
    binary: PathBuf,
    dir: PathBuf,
    port: u16,
    child: Option<Child>,
}

impl TestRegistry {
    /// Starts a registry with empty storage on a free port, and waits until
    /// it answers.
    ///
    /// # Errors
    ///
    /// When it cannot be built or does not answer within 30 s.
    pub async fn start() -> Result<Self> {
        Self::start_with(None).await
    }

    /// Like [`start`](Self::start), with basic authentication: only
    /// `user` with the password whose bcrypt hash is `bcrypt` may pull or
    /// push (an `htpasswd` entry).
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start).
    pub async fn start_with_user(user: &str, bcrypt: &str) -> Result<Self> {
        Self::start_with(Some((user, bcrypt))).await
    }

    async fn start_with(user: Option<(&str, &str)>) -> Result<Self> {
        let binary = binary().await?;
        let dir = std::env::temp_dir().join(format!("capstan-registry-{}", crate::random_suffix(8)));
        std::fs::create_dir_all(dir.join("storage"))?;
        let port = crate::free_port()?;
        let config = format!(
            "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    \
             rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n  secret: capstan-tests\n",
            dir.join("storage").display()
        );
        let config = match user {
            Some((user, bcrypt)) => {
                let htpasswd = dir.join("htpasswd");
                std::fs::write(&htpasswd, format!("{user}:{bcrypt}\n"))?;
                format!("{config}auth:\n  htpasswd:\n    realm: capstan-tests\n    path: {}\n", htpasswd.display())
            }
            None => config,
        };
        std::fs::write(dir.join("config.yml"), config)?;
        let mut registry = Self { binary, dir, port, child: None };
        registry.resume().await?;
        Ok(registry)
    }

    /// `127.0.0.1:<port>`.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `oci://127.0.0.1:<port>/<repository_and_tag>`.
    pub fn reference(&self, repository_and_tag: &str) -> String {
        format!("oci://{}/{repository_and_tag}", self.address())
    }

    /// The file the registry keeps the blob `digest` (`sha256:…`) in, to
    /// tamper with it.
    pub fn blob_file(&self, digest: &str) -> PathBuf {
        let hex = digest.trim_start_matches("sha256:");
        self.dir.join("storage/docker/registry/v2/blobs/sha256").join(&hex[..2]).join(hex).join("data")
    }

    /// Stops the registry (its storage stays); [`resume`](Self::resume)
    /// starts it again on the same port.
    pub async fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }

    /// Starts the registry again, with the same storage and port.
    ///
    /// # Errors
    ///
    /// When it does not answer within 30 s.
    pub async fn resume(&mut self) -> Result<()> {
        ensure!(self.child.is_none(), "the registry runs already");
        let log = std::fs::File::create(self.dir.join("registry.log"))?;
        let child = Command::new(&self.binary)
            .arg("serve")
            .arg(self.dir.join("config.yml"))
            .env("OTEL_TRACES_EXPORTER", "none")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", self.binary.display()))?;
        self.child = Some(child);
        for _ in 0..300 {
            // 401 with authentication: it answers.
            if crate::http_get(self.port, "/v2/").await.is_ok_and(|(code, _)| code == 200 || code == 401) {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let log = std::fs::read_to_string(self.dir.join("registry.log")).unwrap_or_default();
        bail!("the registry on {} did not answer within 30 s:\n{log}", self.address())
    }

    /// Points `repository:tag` at the manifest `from_tag` points at (a
    /// `GET` and a `PUT` of the manifest, as `crane tag` does), without
    /// pushing any blob.
    ///
    /// # Errors
    ///
    /// When either request fails.
    pub async fn retag(&self, repository: &str, from_tag: &str, tag: &str) -> Result<()> {
        let media = "application/vnd.oci.image.manifest.v1+json";
        let path = |t: &str| format!("/v2/{repository}/manifests/{t}");
        let (code, manifest) = http(self.port, "GET", &path(from_tag), &[("Accept", media)], b"").await?;
        ensure!(code == 200, "GET {}: {code}", path(from_tag));
        let (code, body) = http(self.port, "PUT", &path(tag), &[("Content-Type", media)], &manifest).await?;
        ensure!(code == 201, "PUT {}: {code} {}", path(tag), String::from_utf8_lossy(&body));
        Ok(())
    }

    /// Uploads `bytes` as a blob of `repository` in one request; returns
    /// its digest.
    ///
    /// # Errors
    ///
    /// When the registry refuses it.
    pub async fn put_blob(&self, repository: &str, bytes: &[u8]) -> Result<String> {
        let digest = capstan_host::serve::oci::sha256(bytes);
        let path = format!("/v2/{repository}/blobs/uploads/");
        let (code, head, _) = request(self.port, "POST", &path, &[], b"").await?;
        ensure!(code == 202, "POST {path}: {code}");
        let location = head
            .lines()
            .find_map(|l| l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case("location")).map(|(_, v)| v.trim()))
            .context("an upload location")?;
        let location = location.split_once("://").map_or(location, |(_, rest)| &rest[rest.find('/').unwrap_or(0)..]);
        let separator = if location.contains('?') { '&' } else { '?' };
        let put = format!("{location}{separator}digest={digest}");
        let headers = [("Content-Type", "application/octet-stream")];
        let (code, _, body) = request(self.port, "PUT", &put, &headers, bytes).await?;
        ensure!(code == 201, "PUT {put}: {code} {}", String::from_utf8_lossy(&body));
        Ok(digest)
    }

    /// Stores `manifest` (an OCI image manifest) as `repository:tag`.
    ///
    /// # Errors
    ///
    /// When the registry refuses it.
    pub async fn put_manifest(&self, repository: &str, tag: &str, manifest: &serde_json::Value) -> Result<()> {
        let path = format!("/v2/{repository}/manifests/{tag}");
        let headers = [("Content-Type", "application/vnd.oci.image.manifest.v1+json")];
        let (code, body) = http(self.port, "PUT", &path, &headers, &serde_json::to_vec(manifest)?).await?;
        ensure!(code == 201, "PUT {path}: {code} {}", String::from_utf8_lossy(&body));
        Ok(())
    }
}

impl Drop for TestRegistry {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.start_kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One HTTP/1.1 request to `127.0.0.1:<port>`: the status code and body.
async fn http(port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Result<(u16, Vec<u8>)> {
    let (code, _, body) = request(port, method, path, headers, body).await?;
    Ok((code, body))
}

/// One HTTP/1.1 request to `127.0.0.1:<port>`: the status code, the head
/// and the body.
async fn request(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<(u16, String, Vec<u8>)> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    stream.write_all(request.as_bytes()).await?;
    stream.write_all(body).await?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await?;
    let split = answer.windows(4).position(|w| w == b"\r\n\r\n").context("an HTTP answer")?;
    let head = String::from_utf8_lossy(&answer[..split]).into_owned();
    let code = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).context("an HTTP status line")?;
    let mut body = answer[split + 4..].to_vec();
    if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        body = unchunk(&body);
    }
    Ok((code, head, body))
}

/// The body of a chunked answer.
fn unchunk(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(end) = body.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(String::from_utf8_lossy(&body[..end]).trim(), 16).unwrap_or(0);
        if size == 0 || body.len() < end + 2 + size {
            break;
        }
        out.extend_from_slice(&body[end + 2..end + 2 + size]);
        body = &body[(end + 4 + size).min(body.len())..];
    }
    out
}

/// The manifest `repository:tag` names on the registry at `port`, as JSON.
///
/// # Errors
///
/// When the request fails or the answer is not JSON.
pub async fn manifest(port: u16, repository: &str, tag: &str) -> Result<serde_json::Value> {
    let accept = [("Accept", "application/vnd.oci.image.manifest.v1+json")];
    let (code, body) = http(port, "GET", &format!("/v2/{repository}/manifests/{tag}"), &accept, b"").await?;
    ensure!(code == 200, "GET manifest {repository}:{tag}: {code}");
    Ok(serde_json::from_slice(&body)?)
}

impl TestRegistry {
    /// The manifest `repository:tag` names, as JSON.
    ///
    /// # Errors
    ///
    /// As [`manifest`].
    pub async fn manifest(&self, repository: &str, tag: &str) -> Result<serde_json::Value> {
        manifest(self.port, repository, tag).await
    }
}

/// How a [`HostileRegistry`] misbehaves.
#[derive(Clone, Debug)]
pub enum Hostile {
    /// Serves a Wasm artifact whose one layer is declared `declared` bytes
    /// long (and named by the digest of `declared` bytes `a`), and sends
    /// `sent` bytes for it, without a `Content-Length`.
    LyingLayer {
        /// The size the manifest declares.
        declared: u64,
        /// The bytes sent.
        sent: u64,
    },
    /// Serves a manifest of `size` bytes, without a `Content-Length`.
    HugeManifest {
        /// Its size.
        size: u64,
    },
    /// Sends every answer (head included) one byte at a time, one every
    /// `every`.
    Trickle {
        /// The pause between two bytes.
        every: Duration,
    },
    /// Serves a Wasm artifact whose one layer is declared `declared` bytes
    /// long (as [`LyingLayer`](Self::LyingLayer)), sends the first `sent`
    /// of them, and then nothing more, holding the connection open.
    StallingLayer {
        /// The size the manifest declares.
        declared: u64,
        /// The bytes sent before it stalls.
        sent: u64,
    },
    /// Serves a Wasm artifact whose one layer is `layer`, as an honest
    /// registry would (a `HEAD` of the manifest names its digest), but
    /// sends every answer except `/v2/`'s only after `delay` (none: a
    /// registry that answers at once).
    Slow {
        /// How long each answer waits.
        delay: Duration,
        /// The layer.
        layer: Vec<u8>,
    },
    /// Answers every `GET` but `/v2/` with `status` and a body of `size`
    /// bytes (`é` then `x`s); a `HEAD` of a manifest with a success that
    /// names no digest.
    ErrorBody {
        /// The HTTP status.
        status: u16,
        /// The size of the body.
        size: usize,
    },
}

/// A registry on `127.0.0.1` that misbehaves as its [`Hostile`] says, for
/// the tests of what the host bounds; stops when dropped.
#[derive(Debug)]
pub struct HostileRegistry {
    port: u16,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for HostileRegistry {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl HostileRegistry {
    /// Starts one on a free port.
    ///
    /// # Errors
    ///
    /// When no port can be bound.
    pub async fn start(hostile: Hostile) -> Result<Self> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let port = listener.local_addr()?.port();
        let task = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                connections.spawn(answer(stream, hostile.clone()));
            }
        });
        Ok(Self { port, task })
    }

    /// `127.0.0.1:<port>`.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `oci://127.0.0.1:<port>/<repository_and_tag>`.
    pub fn reference(&self, repository_and_tag: &str) -> String {
        format!("oci://{}/{repository_and_tag}", self.address())
    }
}

/// The manifest of [`Hostile::LyingLayer`]: a Wasm artifact whose layer
/// has `declared` bytes.
fn lying_manifest(declared: u64) -> Vec<u8> {
    let layer = vec![b'a'; usize::try_from(declared).unwrap_or(0)];
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": capstan_host::serve::oci::CONFIG_MEDIA_TYPE,
            "digest": capstan_host::serve::oci::sha256(b"{}"),
            "size": 2,
        },
        "layers": [{
            "mediaType": capstan_host::serve::oci::LAYER_MEDIA_TYPE,
            "digest": capstan_host::serve::oci::sha256(&layer),
            "size": declared,
        }],
    });
    serde_json::to_vec(&manifest).unwrap_or_default()
}

/// The manifest of [`Hostile::Slow`]: a Wasm artifact whose layer is
/// `layer`.
fn honest_manifest(layer: &[u8]) -> Vec<u8> {
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": capstan_host::serve::oci::CONFIG_MEDIA_TYPE,
            "digest": capstan_host::serve::oci::sha256(b"{}"),
            "size": 2,
        },
        "layers": [{
            "mediaType": capstan_host::serve::oci::LAYER_MEDIA_TYPE,
            "digest": capstan_host::serve::oci::sha256(layer),
            "size": layer.len(),
        }],
    });
    serde_json::to_vec(&manifest).unwrap_or_default()
}

/// The answer to a request for a manifest (`HEAD` or `GET`), naming its
/// digest.
fn manifest_answer(method: &str, manifest: Vec<u8>) -> Vec<u8> {
    let digest = capstan_host::serve::oci::sha256(&manifest);
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/vnd.oci.image.manifest.v1+json\r\n\
         Docker-Content-Digest: {digest}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        manifest.len()
    );
    let body = if method == "HEAD" { Vec::new() } else { manifest };
    head.into_bytes().into_iter().chain(body).collect()
}

/// Answers one connection (one request) as `hostile` says.
async fn answer(mut stream: tokio::net::TcpStream, hostile: Hostile) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 64 << 10 {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let mut words = head.split_whitespace();
    let (method, path) = (words.next().unwrap_or_default().to_owned(), words.next().unwrap_or_default().to_owned());
    let ok = |headers: &str| format!("HTTP/1.1 200 OK\r\n{headers}Connection: close\r\n\r\n");
    // (head, body, body size sent after the head, without a length)
    let (reply, endless): (Vec<u8>, u64) = match &hostile {
        _ if path == "/v2/" && !matches!(hostile, Hostile::Trickle { .. }) => (
            ok("Content-Type: application/json\r\nContent-Length: 2\r\n")
                .into_bytes()
                .into_iter()
                .chain(*b"{}")
                .collect(),
            0,
        ),
        Hostile::LyingLayer { declared, .. } | Hostile::StallingLayer { declared, .. }
            if path.contains("/manifests/") =>
        {
            (manifest_answer(&method, lying_manifest(*declared)), 0)
        }
        Hostile::LyingLayer { sent, .. } | Hostile::StallingLayer { sent, .. } => {
            (ok("Content-Type: application/octet-stream\r\n").into_bytes(), *sent)
        }
        Hostile::Slow { layer, .. } if path.contains("/manifests/") => {
            (manifest_answer(&method, honest_manifest(layer)), 0)
        }
        Hostile::Slow { layer, .. } => {
            let head = ok(&format!("Content-Type: application/octet-stream\r\nContent-Length: {}\r\n", layer.len()));
            (head.into_bytes().into_iter().chain(layer.iter().copied()).collect(), 0)
        }
        Hostile::HugeManifest { size } => {
            let media = "Content-Type: application/vnd.oci.image.manifest.v1+json\r\n";
            (ok(media).into_bytes().into_iter().chain(*b"{").collect(), size.saturating_sub(1))
        }
        Hostile::Trickle { .. } => {
            let body = b"{}";
            (ok(&format!("Content-Length: {}\r\n", body.len())).into_bytes().into_iter().chain(*body).collect(), 0)
        }
        // A HEAD names no digest: the client has to GET the manifest.
        Hostile::ErrorBody { .. } if method == "HEAD" => (ok("Content-Length: 0\r\n").into_bytes(), 0),
        Hostile::ErrorBody { status, size } => {
            let mut body = "é".as_bytes().to_vec();
            body.resize(*size, b'x');
            let head = format!(
                "HTTP/1.1 {status} Hostile\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            (head.into_bytes().into_iter().chain(body).collect(), 0)
        }
    };
    if let Hostile::Trickle { every } = hostile {
        for byte in reply {
            tokio::time::sleep(every).await;
            if stream.write_all(&[byte]).await.is_err() {
                return;
            }
        }
        return;
    }
    if let Hostile::Slow { delay, .. } = hostile
        && path != "/v2/"
    {
        tokio::time::sleep(delay).await;
    }
    if stream.write_all(&reply).await.is_err() {
        return;
    }
    let chunk = [b'a'; 64 << 10];
    let mut left = endless;
    while left > 0 {
        let n = usize::try_from(left.min(chunk.len() as u64)).unwrap_or(chunk.len());
        if stream.write_all(&chunk[..n]).await.is_err() {
            return;
        }
        left -= n as u64;
    }
    if matches!(hostile, Hostile::StallingLayer { .. }) && !path.contains("/manifests/") {
        // Nothing more, until the client gives up.
        let _ = stream.flush().await;
        std::future::pending::<()>().await;
    }
    let _ = stream.shutdown().await;
}
