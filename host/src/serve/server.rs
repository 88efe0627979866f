//! The host's HTTP endpoints, for Prometheus, the kubelet and `capstan
//! status`, and the client `capstan status` reads them with.
//!
//! | route | answer |
//! |---|---|
//! | `GET /metrics` | the [`metrics`](mod@crate::metrics) registry, Prometheus text format |
//! | `GET /healthz` | `200 ok` while the process serves (liveness) |
//! | `GET /readyz` | `200 ok` when [`Probes::ready`] says so, else `503` and the reasons, one per line |
//! | `GET /status` | [`Probes::status`] as JSON, to loopback peers only unless [`Options::status_from_anywhere`]; others get `403` |
//!
//! ```no_run
//! # async fn example() -> std::io::Result<()> {
//! use std::sync::Arc;
//! use capstan_host::serve::server::{Options, Probes, serve};
//!
//! let probes = Probes {
//!     ready: Box::new(|| Ok(())),
//!     status: Box::new(|| serde_json::json!({"controllers": []})),
//! };
//! let addrs = ["127.0.0.1:8080".parse().expect("an address")];
//! let server = serve(&addrs, Arc::new(probes), Options::default()).await?;
//! // ... run the host ...
//! server.shutdown().await;
//! # Ok(())
//! # }
//! ```
//!
//! # Connections
//!
//! Every client is untrusted: a server holds at most
//! [`Limits::connections`] connections at once (past that, new ones wait
//! in the listen backlog until one closes), closes a connection that has
//! not sent a whole request head within [`Limits::header_read`] (a new one,
//! or one kept alive and idle since its last answer), answers `503` to a
//! request not answered within [`Limits::request`], and for TLS gives up
//! on a handshake after [`Limits::handshake`].

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{ConnectInfo, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http_body_util::{BodyExt as _, Empty};
use hyper::body::Bytes;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio::task::{JoinHandle, JoinSet};

use crate::metrics::{self, metrics};

/// How long [`Server::shutdown`] waits for requests in flight.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// How long [`get_status`] waits for an answer.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// How a server bounds what its clients may hold: connections, and how
/// long they may take. See [the module docs](self#connections).
///
/// ```
/// use std::time::Duration;
/// use capstan_host::serve::server::Limits;
///
/// let limits = Limits::listen().connections(16).header_read(Duration::from_secs(2));
/// assert_eq!(limits.max_connections(), 16);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub struct Limits {
    connections: usize,
    header_read: Duration,
    request: Duration,
    handshake: Duration,
}

impl Limits {
    /// For `--listen`: 256 connections, 10 s to send a request head, 30 s
    /// to answer a request (a scrape of `/metrics` takes milliseconds).
    pub const fn listen() -> Self {
        Self {
            connections: 256,
            header_read: Duration::from_secs(10),
            request: Duration::from_secs(30),
            handshake: Duration::from_secs(10),
        }
    }

    /// For the webhook server: 1024 connections, 10 s for a TLS handshake,
    /// 10 s to send a request head, 60 s to answer a request (the API
    /// server gives up after at most 30 s).
    pub const fn webhooks() -> Self {
        Self::listen().connections(1024).request(Duration::from_secs(60))
    }

    /// Most connections open at once (at least 1); past that, new ones
    /// wait in the listen backlog until one closes.
    pub const fn connections(mut self, connections: usize) -> Self {
        self.connections = if connections == 0 { 1 } else { connections };
        self
    }

    /// How long a connection may take to send a whole request head:
    /// counted from when it opens and, on a connection kept alive, from
    /// the end of the last answer. Past it the connection is closed.
    pub const fn header_read(mut self, timeout: Duration) -> Self {
        self.header_read = timeout;
        self
    }

    /// How long a request may take, its body included; past it the answer
    /// is `503`.
    pub const fn request(mut self, timeout: Duration) -> Self {
        self.request = timeout;
        self
    }

    /// How long a TLS handshake may take (TLS servers only).
    pub const fn handshake(mut self, timeout: Duration) -> Self {
        self.handshake = timeout;
        self
    }

    /// What [`connections`](Self::connections) set.
    pub const fn max_connections(&self) -> usize {
        self.connections
    }

    /// What [`handshake`](Self::handshake) set.
    pub const fn handshake_timeout(&self) -> Duration {
        self.handshake
    }
}

impl Default for Limits {
    /// [`Limits::listen`].
    fn default() -> Self {
        Self::listen()
    }
}

/// How [`serve`] serves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[must_use]
pub struct Options {
    limits: Limits,
    status_from_anywhere: bool,
}

impl Options {
    /// The connection limits (default: [`Limits::listen`]).
    pub const fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Answer `/status` to every peer, not only to loopback ones (default:
    /// `false`). The document names component files, digests and objects;
    /// `kubectl port-forward` and `capstan status` on the host itself
    /// arrive on loopback.
    pub const fn status_from_anywhere(mut self, anywhere: bool) -> Self {
        self.status_from_anywhere = anywhere;
        self
    }
}

/// What the probes and `/status` report; the host provides both.
pub struct Probes {
    /// `Ok(())` when ready; `Err(reasons)` otherwise (→ 503 with the
    /// reasons, one per line).
    pub ready: Box<dyn Fn() -> Result<(), Vec<String>> + Send + Sync>,
    /// The host's status document for `GET /status` (JSON).
    pub status: Box<dyn Fn() -> Value + Send + Sync>,
}

impl std::fmt::Debug for Probes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Probes").finish_non_exhaustive()
    }
}

/// A running HTTP server. Dropping it stops it at once; [`shutdown`](Self::shutdown)
/// lets requests in flight finish.
#[derive(Debug)]
#[must_use = "dropping the server stops it"]
pub struct Server {
    local_addrs: Vec<SocketAddr>,
    stop: Option<watch::Sender<bool>>,
    task: Option<JoinHandle<()>>,
}

impl Server {
    /// The address it listens on (the first, if several; with the port
    /// chosen when bound to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addrs[0]
    }

    /// Every address it listens on.
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.local_addrs
    }

    /// Stops accepting connections and waits up to [`SHUTDOWN_GRACE`] for
    /// requests in flight.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(true);
        }
        let Some(mut task) = self.task.take() else { return };
        match tokio::time::timeout(SHUTDOWN_GRACE, &mut task).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "http server task failed"),
            Err(_) => {
                tracing::warn!(grace = ?SHUTDOWN_GRACE, "http server did not stop in time, closing connections");
                task.abort();
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// What the routes of [`serve`] answer from.
#[derive(Clone)]
struct Routes {
    probes: Arc<Probes>,
    status_from_anywhere: bool,
}

/// Binds every address of `addrs` (at least one) and serves `/metrics`,
/// `/healthz`, `/readyz` and `/status` on them in a background task.
/// Bound when this returns, so port 0 works (see [`Server::local_addrs`]).
///
/// # Errors
///
/// When `addrs` is empty or an address cannot be bound.
pub async fn serve(addrs: &[SocketAddr], probes: Arc<Probes>, options: Options) -> std::io::Result<Server> {
    if addrs.is_empty() {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "no address to listen on"));
    }
    let mut listeners = Vec::with_capacity(addrs.len());
    for addr in addrs {
        listeners.push(TcpListener::bind(addr).await?);
    }
    let app = router(Routes { probes, status_from_anywhere: options.status_from_anywhere });
    let server =
        spawn(listeners, options.limits, app, |tcp| std::future::ready(Some((tcp, axum::http::Extensions::new()))))?;
    tracing::info!(
        addresses = ?server.local_addrs(),
        status_from_anywhere = options.status_from_anywhere,
        "serving /metrics, /healthz, /readyz and /status"
    );
    Ok(server)
}

/// The routes of [`serve`]; each request carries its peer's
/// [`ConnectInfo`].
fn router(routes: Routes) -> Router {
    Router::new()
        .route("/metrics", get(scrape))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/status", get(status))
        .with_state(routes)
}

/// Serves `app` on `listeners` in a background task, within `limits`:
/// each connection accepted (while fewer than the limit are open) goes
/// through `handshake` (TLS for the webhook server), then HTTP/1.1; every
/// request on it carries the extensions the handshake gave.
///
/// # Errors
///
/// When a listener's address cannot be read.
pub(crate) fn spawn<H, F, I>(
    listeners: Vec<TcpListener>,
    limits: Limits,
    app: Router,
    handshake: H,
) -> std::io::Result<Server>
where
    H: Fn(TcpStream) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Option<(I, axum::http::Extensions)>> + Send + 'static,
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let local_addrs = listeners.iter().map(TcpListener::local_addr).collect::<std::io::Result<Vec<_>>>()?;
    let (stop, stopped) = watch::channel(false);
    let slots = Arc::new(Semaphore::new(limits.connections));
    let task = tokio::spawn(async move {
        let mut accepting = JoinSet::new();
        for listener in listeners {
            let accept = accept(listener, Arc::clone(&slots), limits, app.clone(), handshake.clone(), stopped.clone());
            accepting.spawn(accept);
        }
        while accepting.join_next().await.is_some() {}
        // Every connection has finished once every slot is free again.
        let all = u32::try_from(limits.connections).unwrap_or(u32::MAX);
        let _ = slots.acquire_many(all).await;
    });
    Ok(Server { local_addrs, stop: Some(stop), task: Some(task) })
}

/// Whether the server is to stop: told so, or its [`Server`] is gone.
async fn stopping(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}

/// Accepts connections on `listener` while a slot is free, until stopped.
async fn accept<H, F, I>(
    listener: TcpListener,
    slots: Arc<Semaphore>,
    limits: Limits,
    app: Router,
    handshake: H,
    mut stop: watch::Receiver<bool>,
) where
    H: Fn(TcpStream) -> F + Send + 'static,
    F: Future<Output = Option<(I, axum::http::Extensions)>> + Send + 'static,
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    loop {
        let slot = tokio::select! {
            slot = Arc::clone(&slots).acquire_owned() => slot.expect("the semaphore is never closed"),
            () = stopping(&mut stop) => return,
        };
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors, most likely: wait a little.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = stopping(&mut stop) => return,
        };
        let (handshake, app, stop) = (handshake(tcp), app.clone(), stop.clone());
        tokio::spawn(async move {
            let _slot = slot;
            if let Some((io, extensions)) = handshake.await {
                connection(io, peer, extensions, app, limits, stop).await;
            }
        });
    }
}

/// Serves HTTP/1.1 on one connection until the peer closes it, it breaks
/// a limit, or the server stops (a request in flight is answered first).
async fn connection<I>(
    io: I,
    peer: SocketAddr,
    extensions: axum::http::Extensions,
    app: Router,
    limits: Limits,
    mut stop: watch::Receiver<bool>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let app = hyper_util::service::TowerToHyperService::new(app);
    let service = hyper::service::service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
        request.extensions_mut().extend(extensions.clone());
        request.extensions_mut().insert(ConnectInfo(peer));
        let answer = hyper::service::Service::call(&app, request);
        async move {
            match tokio::time::timeout(limits.request, answer).await {
                Ok(answer) => answer,
                Err(_) => Ok((StatusCode::SERVICE_UNAVAILABLE, "no answer in time\n").into_response()),
            }
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(limits.header_read);
    let served = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(served);
    let result = tokio::select! {
        result = served.as_mut() => result,
        () = stopping(&mut stop) => {
            served.as_mut().graceful_shutdown();
            served.await
        }
    };
    if let Err(e) = result {
        tracing::debug!(peer = %peer, error = %e, "connection closed");
    }
}

/// Whether `/status` answers `peer`: a loopback address (IPv4, IPv6, or
/// IPv4 mapped into IPv6), or any with `from_anywhere`.
fn may_read_status(peer: IpAddr, from_anywhere: bool) -> bool {
    from_anywhere || peer.to_canonical().is_loopback()
}

async fn scrape() -> Response {
    ([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], metrics().encode()).into_response()
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(routes): State<Routes>) -> Response {
    match (routes.probes.ready)() {
        Ok(()) => "ok".into_response(),
        Err(reasons) if reasons.is_empty() => (StatusCode::SERVICE_UNAVAILABLE, "not ready\n").into_response(),
        Err(reasons) => {
            let mut body = reasons.join("\n");
            body.push('\n');
            (StatusCode::SERVICE_UNAVAILABLE, body).into_response()
        }
    }
}

async fn status(State(routes): State<Routes>, ConnectInfo(peer): ConnectInfo<SocketAddr>) -> Response {
    if !may_read_status(peer.ip(), routes.status_from_anywhere) {
        let reason = "/status answers loopback peers only (kubectl port-forward, or capstan status on the host); \
                      see --status-from-anywhere\n";
        return (StatusCode::FORBIDDEN, reason).into_response();
    }
    let mut body = serde_json::to_vec_pretty(&(routes.probes.status)()).expect("a JSON value always serializes");
    body.push(b'\n');
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// Why [`get_status`] failed. Every variant names the URL.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The URL cannot be used.
    #[error("invalid URL {url}: {reason}")]
    Url {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The request could not be sent or its answer read.
    #[error("cannot get {url}: {reason}")]
    Request {
        /// The URL requested.
        url: String,
        /// The cause, with its sources.
        reason: String,
    },
    /// No answer within [`REQUEST_TIMEOUT`].
    #[error("cannot get {url}: no answer within {REQUEST_TIMEOUT:?}")]
    Timeout {
        /// The URL requested.
        url: String,
    },
    /// The server answered with an error status.
    #[error("{url} answered {status}: {body}")]
    Status {
        /// The URL requested.
        url: String,
        /// The HTTP status code.
        status: u16,
        /// The start of the answer's body.
        body: String,
    },
    /// The answer is not JSON.
    #[error("{url} did not answer with JSON")]
    Json {
        /// The URL requested.
        url: String,
        /// The parser's error.
        #[source]
        source: serde_json::Error,
    },
}

/// The URL of the status document: `url` itself if it has a path, else
/// `url` + `/status`. Only `http://` is served by the host.
fn status_uri(url: &str) -> Result<hyper::Uri, Error> {
    let invalid = |reason: String| Error::Url { url: url.to_owned(), reason };
    let uri: hyper::Uri = url.parse().map_err(|e: hyper::http::uri::InvalidUri| invalid(e.to_string()))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some(other) => return Err(invalid(format!("scheme {other} is not supported, the host serves http://"))),
        None => return Err(invalid("expected http://host:port".to_owned())),
    }
    if uri.path() == "/" && uri.query().is_none() {
        let full = format!("{}/status", url.trim_end_matches('/'));
        return full.parse().map_err(|e: hyper::http::uri::InvalidUri| invalid(e.to_string()));
    }
    Ok(uri)
}

/// An error and its sources, joined with `: `.
fn chain(error: &dyn std::error::Error) -> String {
    let mut out = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        out.push_str(": ");
        out.push_str(&e.to_string());
        source = e.source();
    }
    out
}

/// Reads a host's status document over HTTP, for `capstan status`. `url`
/// is the host's address (`http://127.0.0.1:8080`, `/status` is added) or
/// the document's full URL.
///
/// # Errors
///
/// [`Error`]: an unusable URL, no answer, an error status, or an answer
/// that is not JSON.
pub async fn get_status(url: &str) -> Result<Value, Error> {
    let uri = status_uri(url)?;
    let shown = uri.to_string();
    let request_failed = |reason: String| Error::Request { url: shown.clone(), reason };
    let client =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let fetch = async {
        let response = client.get(uri).await.map_err(|e| request_failed(chain(&e)))?;
        let status = response.status();
        let body = response.into_body().collect().await.map_err(|e| request_failed(chain(&e)))?.to_bytes();
        Ok::<_, Error>((status, body))
    };
    let (status, body) =
        tokio::time::timeout(REQUEST_TIMEOUT, fetch).await.map_err(|_| Error::Timeout { url: shown.clone() })??;
    if !status.is_success() {
        let body: String = String::from_utf8_lossy(&body).trim().chars().take(500).collect();
        return Err(Error::Status { url: shown, status: status.as_u16(), body });
    }
    serde_json::from_slice(&body).map_err(|source| Error::Json { url: shown, source })
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use tokio::net::TcpStream;

    use super::*;

    /// A plain GET: status, content type and body.
    async fn get(addr: SocketAddr, path: &str) -> (u16, String, String) {
        let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build_http::<Empty<Bytes>>();
        let uri: hyper::Uri = format!("http://{addr}{path}").parse().expect("a URI");
        let response = client.get(uri).await.expect("answers");
        let status = response.status().as_u16();
        let content_type =
            response.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
        let body = response.into_body().collect().await.expect("a body").to_bytes();
        (status, content_type, String::from_utf8_lossy(&body).into_owned())
    }

    fn loopback() -> SocketAddr {
        "127.0.0.1:0".parse().expect("an address")
    }

    fn probes(ready: Arc<AtomicBool>) -> Arc<Probes> {
        Arc::new(Probes {
            ready: Box::new(move || {
                if ready.load(Ordering::SeqCst) {
                    Ok(())
                } else {
                    Err(vec!["greeter: syncing".to_owned(), "noop: waiting for kinds".to_owned()])
                }
            }),
            status: Box::new(|| serde_json::json!({"controllers": [{"name": "greeter", "state": "running"}]})),
        })
    }

    #[tokio::test]
    async fn every_route_answers() {
        let ready = Arc::new(AtomicBool::new(false));
        let server = serve(&[loopback()], probes(Arc::clone(&ready)), Options::default()).await.expect("binds");
        let addr = server.local_addr();
        assert_ne!(addr.port(), 0);

        assert_eq!(get(addr, "/healthz").await, (200, "text/plain; charset=utf-8".into(), "ok".into()));

        let (code, _, body) = get(addr, "/readyz").await;
        assert_eq!(code, 503);
        assert_eq!(body, "greeter: syncing\nnoop: waiting for kinds\n");
        ready.store(true, Ordering::SeqCst);
        assert_eq!(get(addr, "/readyz").await.0, 200);

        let (code, content_type, body) = get(addr, "/status").await;
        assert_eq!((code, content_type.as_str()), (200, "application/json"));
        let doc: Value = serde_json::from_str(&body).expect("JSON");
        assert_eq!(doc["controllers"][0]["state"], "running");

        metrics().watch_restarted("default", &crate::object::Gvk::new("server.test", "v1", "Probe"));
        let (code, content_type, body) = get(addr, "/metrics").await;
        assert_eq!((code, content_type.as_str()), (200, metrics::CONTENT_TYPE));
        assert!(body.contains("# TYPE capstan_watch_restarts_total counter"), "{body}");
        assert!(body.contains(r#"capstan_watch_restarts_total{cluster="default",kind="Probe.server.test"}"#), "{body}");

        assert_eq!(get(addr, "/nothing").await.0, 404);
        server.shutdown().await;
        assert!(tokio::net::TcpStream::connect(addr).await.is_err(), "stopped listening");
    }

    #[tokio::test]
    async fn get_status_reads_the_document_from_the_host_address() {
        let server = serve(&[loopback()], probes(Arc::default()), Options::default()).await.expect("binds");
        let base = format!("http://{}", server.local_addr());
        let doc = get_status(&base).await.expect("status");
        assert_eq!(doc["controllers"][0]["name"], "greeter");
        assert_eq!(get_status(&format!("{base}/status")).await.expect("status"), doc);
        let err = get_status(&format!("{base}/readyz")).await.expect_err("503");
        assert!(matches!(err, Error::Status { status: 503, .. }), "{err}");
        let err = get_status(&format!("{base}/healthz")).await.expect_err("not JSON");
        assert!(matches!(err, Error::Json { .. }), "{err}");
        server.shutdown().await;
    }

    /// One request on `stream` (kept alive): the answer's status line.
    async fn ask(stream: &mut TcpStream, path: &str) -> String {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let request = format!("GET {path} HTTP/1.1\r\nHost: capstan\r\n\r\n");
        stream.write_all(request.as_bytes()).await.expect("sent");
        let mut answer = Vec::new();
        let mut buf = [0; 1024];
        // The probes answer `ok` (or the reasons): enough to see the end.
        while !answer.ends_with(b"ok") && !answer.ends_with(b"\n") {
            let n = stream.read(&mut buf).await.expect("read");
            assert_ne!(n, 0, "closed before answering: {}", String::from_utf8_lossy(&answer));
            answer.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&answer).lines().next().unwrap_or_default().to_owned()
    }

    /// Whether the server closed `stream` (it reads the end).
    async fn closed(stream: &mut TcpStream) -> bool {
        use tokio::io::AsyncReadExt as _;
        matches!(stream.read(&mut [0; 64]).await, Ok(0) | Err(_))
    }

    #[tokio::test(start_paused = true)]
    async fn idle_connections_hold_no_slot_past_the_header_timeout_and_the_cap_holds_until_then() {
        let limits = Limits::listen().connections(2).header_read(Duration::from_secs(5));
        let options = Options::default().limits(limits);
        let server = serve(&[loopback()], probes(Arc::new(AtomicBool::new(true))), options).await.expect("binds");
        let addr = server.local_addr();
        // One connection that never sends a request, one kept alive and
        // idle after its answer (which shows both were accepted).
        let mut silent = TcpStream::connect(addr).await.expect("connects");
        let mut kept = TcpStream::connect(addr).await.expect("connects");
        assert_eq!(ask(&mut kept, "/healthz").await, "HTTP/1.1 200 OK");

        // Both slots are held: a third client waits.
        let mut third = tokio::spawn(async move {
            let mut stream = TcpStream::connect(addr).await.expect("connects");
            ask(&mut stream, "/readyz").await
        });
        let waited = tokio::time::timeout(Duration::from_secs(4), &mut third).await;
        assert!(waited.is_err(), "answered past the cap: {waited:?}");

        // At 5 s both idle connections are closed, and the third is served.
        assert_eq!(third.await.expect("the client ran"), "HTTP/1.1 200 OK");
        assert!(closed(&mut silent).await, "the silent connection was closed");
        assert!(closed(&mut kept).await, "the idle kept-alive connection was closed");
        server.shutdown().await;
    }

    #[tokio::test]
    async fn a_peer_that_is_not_loopback_gets_403_on_status_and_answers_on_the_probes() {
        use tower::ServiceExt as _;
        let routes = Routes { probes: probes(Arc::new(AtomicBool::new(true))), status_from_anywhere: false };
        let call = |path: &str, peer: [u8; 4]| {
            let mut request = axum::http::Request::get(path).body(axum::body::Body::empty()).expect("a request");
            request.extensions_mut().insert(ConnectInfo(SocketAddr::from((peer, 40000))));
            router(routes.clone()).oneshot(request)
        };
        let answer = call("/status", [10, 244, 0, 7]).await.expect("answers");
        assert_eq!(answer.status(), StatusCode::FORBIDDEN);
        let body = answer.into_body().collect().await.expect("a body").to_bytes();
        assert!(body.ends_with(b"see --status-from-anywhere\n"), "{body:?}");
        assert_eq!(call("/healthz", [10, 244, 0, 7]).await.expect("answers").status(), StatusCode::OK);
        assert_eq!(call("/metrics", [10, 244, 0, 7]).await.expect("answers").status(), StatusCode::OK);
        assert_eq!(call("/status", [127, 0, 0, 1]).await.expect("answers").status(), StatusCode::OK);
    }

    #[test]
    fn status_answers_loopback_peers_only_unless_from_anywhere() {
        let ip = |s: &str| s.parse::<IpAddr>().expect("an address");
        for peer in ["127.0.0.1", "127.3.2.1", "::1", "::ffff:127.0.0.1"] {
            assert!(may_read_status(ip(peer), false), "{peer}");
        }
        for peer in ["10.244.0.7", "192.168.1.1", "0.0.0.0", "::ffff:10.0.0.1", "2001:db8::1", "fe80::1"] {
            assert!(!may_read_status(ip(peer), false), "{peer}");
            assert!(may_read_status(ip(peer), true), "{peer}");
        }
    }

    #[test]
    fn error_messages_read_right() {
        let url = "http://127.0.0.1:8080/status".to_owned();
        let e = Error::Status { url: url.clone(), status: 404, body: "not found".into() };
        assert_eq!(e.to_string(), "http://127.0.0.1:8080/status answered 404: not found");
        let e = Error::Timeout { url: url.clone() };
        assert_eq!(e.to_string(), "cannot get http://127.0.0.1:8080/status: no answer within 10s");
        let source = serde_json::from_str::<Value>("ok").expect_err("not JSON");
        assert_eq!(Error::Json { url, source }.to_string(), "http://127.0.0.1:8080/status did not answer with JSON");
    }

    #[tokio::test]
    async fn get_status_says_what_is_wrong() {
        let err = get_status("https://example.com").await.expect_err("https");
        assert_eq!(
            err.to_string(),
            "invalid URL https://example.com: scheme https is not supported, the host serves http://"
        );
        let err = get_status("localhost:8080").await.expect_err("no scheme");
        assert!(matches!(err, Error::Url { .. }), "{err}");
        // Port 1 on loopback: nothing listens there.
        let err = get_status("http://127.0.0.1:1").await.expect_err("refused");
        assert!(err.to_string().starts_with("cannot get http://127.0.0.1:1/status: "), "{err}");
    }
}
