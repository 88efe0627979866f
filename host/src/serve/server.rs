//! The host's HTTP endpoints, for Prometheus, the kubelet and `capstan
//! status`, and the client `capstan status` reads them with.
//!
//! | route | answer |
//! |---|---|
//! | `GET /metrics` | the [`metrics`](mod@crate::metrics) registry, Prometheus text format |
//! | `GET /healthz` | `200 ok` while the process serves (liveness) |
//! | `GET /readyz` | `200 ok` when [`Probes::ready`] says so, else `503` and the reasons, one per line |
//! | `GET /status` | [`Probes::status`] as JSON |
//!
//! ```no_run
//! # async fn example() -> std::io::Result<()> {
//! use std::sync::Arc;
//! use capstan_host::serve::server::{Probes, serve};
//!
//! let probes = Probes {
//!     ready: Box::new(|| Ok(())),
//!     status: Box::new(|| serde_json::json!({"controllers": []})),
//! };
//! let server = serve("0.0.0.0:8080".parse().expect("an address"), Arc::new(probes)).await?;
//! // ... run the host ...
//! server.shutdown().await;
//! # Ok(())
//! # }
//! ```

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http_body_util::{BodyExt as _, Empty};
use hyper::body::Bytes;
use serde_json::Value;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::metrics::{self, metrics};

/// How long [`Server::shutdown`] waits for requests in flight.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// How long [`get_status`] waits for an answer.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

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
    local_addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl Server {
    /// The address it listens on (with the port chosen when bound to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops accepting connections and waits up to [`SHUTDOWN_GRACE`] for
    /// requests in flight.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let Some(mut task) = self.task.take() else { return };
        match tokio::time::timeout(SHUTDOWN_GRACE, &mut task).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => tracing::warn!(error = %e, "http server failed"),
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

/// Binds `addr` and serves `/metrics`, `/healthz`, `/readyz` and
/// `/status` in a background task. Bound when this returns, so port 0
/// works (see [`Server::local_addr`]).
///
/// # Errors
///
/// When `addr` cannot be bound.
pub async fn serve(addr: SocketAddr, probes: Arc<Probes>) -> std::io::Result<Server> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local_addr = listener.local_addr()?;
    let app = Router::new()
        .route("/metrics", get(scrape))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/status", get(status))
        .with_state(probes);
    tracing::info!(address = %local_addr, "serving /metrics, /healthz, /readyz and /status");
    Ok(spawn(listener, local_addr, app))
}

/// Serves `app` on `listener` in a background task (the webhook server
/// uses it with a TLS listener).
pub(crate) fn spawn<L>(listener: L, local_addr: SocketAddr, app: Router) -> Server
where
    L: axum::serve::Listener,
    L::Addr: std::fmt::Debug,
{
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = stopped.await;
            })
            .await
    });
    Server { local_addr, stop: Some(stop), task: Some(task) }
}

async fn scrape() -> Response {
    ([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], metrics().encode()).into_response()
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(probes): State<Arc<Probes>>) -> Response {
    match (probes.ready)() {
        Ok(()) => "ok".into_response(),
        Err(reasons) if reasons.is_empty() => (StatusCode::SERVICE_UNAVAILABLE, "not ready\n").into_response(),
        Err(reasons) => {
            let mut body = reasons.join("\n");
            body.push('\n');
            (StatusCode::SERVICE_UNAVAILABLE, body).into_response()
        }
    }
}

async fn status(State(probes): State<Arc<Probes>>) -> Response {
    let mut body = serde_json::to_vec_pretty(&(probes.status)()).expect("a JSON value always serializes");
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
        let server =
            serve("127.0.0.1:0".parse().expect("an address"), probes(Arc::clone(&ready))).await.expect("binds");
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

        metrics().watch_restarted(&crate::object::Gvk::new("server.test", "v1", "Probe"));
        let (code, content_type, body) = get(addr, "/metrics").await;
        assert_eq!((code, content_type.as_str()), (200, metrics::CONTENT_TYPE));
        assert!(body.contains("# TYPE capstan_watch_restarts_total counter"), "{body}");
        assert!(body.contains(r#"capstan_watch_restarts_total{kind="Probe.server.test"}"#), "{body}");

        assert_eq!(get(addr, "/nothing").await.0, 404);
        server.shutdown().await;
        assert!(tokio::net::TcpStream::connect(addr).await.is_err(), "stopped listening");
    }

    #[tokio::test]
    async fn get_status_reads_the_document_from_the_host_address() {
        let server = serve("127.0.0.1:0".parse().expect("an address"), probes(Arc::default())).await.expect("binds");
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
