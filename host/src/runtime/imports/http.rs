//! The `wasi:http/outgoing-handler` import: outbound HTTP(S) to the origins
//! a component declared, and nowhere else.
//!
//! Every request a guest hands `outgoing-handler.handle` passes here
//! ([`Outbound`], the store's [`WasiHttpHooks`]) before anything leaves
//! the host:
//!
//! 1. outside a call on behalf of a component (`manifest()`), or to an
//!    origin its [`Egress`] does not declare, it is refused with
//!    `HTTP-request-denied`: no name is looked up, no connection made;
//! 2. past [`Limits::http_calls`] requests in one invocation it fails with
//!    `internal-error` naming the limit;
//! 3. a declared *name* that resolves to a link-local address
//!    (169.254.0.0/16, fe80::/10, `fd00:ec2::254`: where clouds serve
//!    instance metadata and credentials) is refused with `destination-IP-prohibited`, whatever
//!    the DNS says; only an origin declared as that very IP reaches it;
//! 4. the connection (TCP, then TLS with the platform's roots plus the
//!    host's `--egress-ca` bundle; a certificate they do not vouch for is
//!    `TLS-certificate-error`) gets at most [`HTTP_CONNECT_TIMEOUT`],
//!    and everything — connect, first byte, body — ends a little before
//!    the invocation's deadline (a tenth of it, at most 500 ms, is kept
//!    for the guest to handle the timeout): the host never waits past it;
//! 5. response bodies are counted against [`Limits::http_bytes`] per
//!    invocation; a body past it fails with `HTTP-response-body-size`.
//!
//! A connection whose response was read to the end is kept for the same
//! component's next request to the same origin ([`pool`]): open for
//! 30 s idle, and never past the invocation that sends on it.
//!
//! Redirects are the guest's to follow (`wasi:http` does not), so each hop
//! is a request of its own, checked again. Each request is counted in
//! `capstan_egress_requests_total{cluster, controller, origin, result}` (`origin`
//! the declared origin, or `undeclared`) and kept in the invocation's
//! [`Journal`](super::Journal) as `http.request` with its method, scheme,
//! host, port and path — never its query, headers or body, which may carry
//! credentials. A refused request is logged as a warning naming the origin,
//! within the controller's log budget. Each request is a span,
//! `http_request`, under the guest's call: method, scheme, host and port,
//! then the response's status code, or why it was refused (`refused`:
//! `denied` or `budget`) or failed (its error status); again never the
//! path's query, a header or a body. It ends when the response's head
//! arrives (the guest reads the body afterwards).

use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming};
use tokio::net::TcpStream;
use tracing::Instrument as _;
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody, WasiHttpHooks};

use super::{CallResult, Caller, ImportCall, throttle};
use crate::manifest::egress::Egress;
use crate::metrics::{Owner, metrics};
use crate::runtime::limits::{HTTP_CONNECT_TIMEOUT, Limits};

mod pool;

/// The longest request target kept in the journal, in bytes.
const MAX_TARGET: usize = 256;

/// Most of a call's time kept back from its network waits (a tenth of the
/// deadline, at most this), for the guest to handle a timeout.
const MAX_RESERVE: std::time::Duration = std::time::Duration::from_millis(500);

/// What one boxed response future resolves to, as `wasmtime-wasi-http`
/// wants it: the response and the connection's own future.
type Sent = Result<(hyper::Response<WasiBody>, Box<dyn Future<Output = Result<(), Error>> + Send>), Error>;

/// The TLS roots outbound requests trust besides the platform's, set once
/// at start (`capstan run --egress-ca FILE`).
static EXTRA_ROOTS: OnceLock<Vec<rustls::pki_types::CertificateDer<'static>>> = OnceLock::new();

/// Trusts the certificates of a PEM bundle for outbound HTTPS, beside the
/// platform's roots. Call before the first request; later calls change
/// nothing.
///
/// # Errors
///
/// When the bundle holds no certificate or cannot be parsed.
pub fn trust_bundle(pem: &[u8]) -> anyhow::Result<usize> {
    use rustls::pki_types::pem::PemObject;
    let certs = rustls::pki_types::CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow::anyhow!("the CA bundle is not PEM certificates: {e}"))?;
    anyhow::ensure!(!certs.is_empty(), "the CA bundle holds no certificate");
    let count = certs.len();
    let _ = EXTRA_ROOTS.set(certs);
    Ok(count)
}

/// The client TLS configuration: the platform's roots and the extra
/// bundle, ring's provider (the host's), HTTP/1.1 only.
fn tls() -> Result<Arc<rustls::ClientConfig>, Error> {
    static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let mut roots = rustls::RootCertStore::empty();
            let native = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(native.certs);
            roots.add_parsable_certificates(EXTRA_ROOTS.get().cloned().unwrap_or_default());
            if roots.is_empty() {
                return Err("no trusted root certificates (none on the platform and no --egress-ca)".to_owned());
            }
            let mut config =
                rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                    .with_safe_default_protocol_versions()
                    .map_err(|e| e.to_string())?
                    .with_root_certificates(roots)
                    .with_no_client_auth();
            config.alpn_protocols = vec![b"http/1.1".to_vec()];
            Ok(Arc::new(config))
        })
        .clone()
        .map_err(|e| Error::InternalError(Some(e)))
}

/// The outbound-HTTP state of one store: the `wasi:http` context and the
/// hooks that check, budget and send each request.
pub struct Outbound {
    /// `wasi:http`'s own context (field size limits).
    pub ctx: wasmtime_wasi_http::WasiHttpCtx,
    /// The checks.
    pub hooks: Hooks,
}

impl Outbound {
    /// Fresh state for a store serving `caller` (none: no request passes).
    pub fn new(limits: &Limits, caller: Option<&Caller>) -> Self {
        Self { ctx: wasmtime_wasi_http::WasiHttpCtx::new(), hooks: Hooks::new(limits, caller) }
    }
}

/// Checks each request against the caller's declared egress and the
/// invocation's budgets, then sends it.
pub struct Hooks {
    owner: Option<Owner>,
    egress: Option<Arc<crate::runtime::grants::Grants>>,
    limits: Limits,
    deadline: Option<Instant>,
    calls: u32,
    bytes: Arc<AtomicU64>,
    /// Requests made in this invocation, for the journal.
    pub journal: Vec<ImportCall>,
    /// The innermost span the guest has open, where its requests' spans go
    /// (else under the current span, the call's).
    pub(crate) guest_span: Option<tracing::Span>,
    /// Where admitted requests are answered instead of the network: the
    /// caller's cluster's stubs, on the mock host.
    stubs: Option<Arc<crate::cluster::mock::HttpStubs>>,
}

impl Hooks {
    fn new(limits: &Limits, caller: Option<&Caller>) -> Self {
        Self {
            owner: caller.map(Caller::owner),
            egress: caller.map(|c| Arc::clone(&c.grants)),
            limits: *limits,
            deadline: None,
            calls: 0,
            bytes: Arc::new(AtomicU64::new(0)),
            journal: Vec::new(),
            guest_span: None,
            stubs: caller.and_then(|c| c.cluster.http_stubs()),
        }
    }

    /// Starts another invocation of the store on behalf of `caller`.
    pub fn begin(&mut self, caller: Option<&Caller>) {
        self.owner = caller.map(Caller::owner);
        self.egress = caller.map(|c| Arc::clone(&c.grants));
        self.stubs = caller.and_then(|c| c.cluster.http_stubs());
    }

    /// Sets the end of the invocation about to run.
    pub fn until(&mut self, deadline: Instant) {
        self.deadline = Some(deadline);
    }

    /// Ends an invocation: the requests made, and the counters reset.
    pub fn take_journal(&mut self) -> Vec<ImportCall> {
        self.calls = 0;
        self.bytes = Arc::new(AtomicU64::new(0));
        self.guest_span = None;
        std::mem::take(&mut self.journal)
    }

    fn egress(&self) -> Option<&Egress> {
        self.egress.as_deref().map(crate::runtime::grants::Grants::egress)
    }

    /// Records a request's fate: journal, metric and (when refused) a
    /// warning within the controller's log budget, and the refusal on its
    /// `span`.
    fn record(
        &mut self,
        span: &tracing::Span,
        target: String,
        origin: &str,
        result: Result<(), (&'static str, String)>,
    ) {
        let controller = self.owner.as_ref().map_or("-", Owner::name);
        let (label, call_result) = match &result {
            Ok(()) => ("ok", CallResult::Ok),
            Err((label, why)) => {
                span.record("refused", *label);
                crate::telemetry::record_error(span, why);
                (*label, CallResult::Denied(why.clone()))
            }
        };
        if let Some(owner) = &self.owner {
            metrics().egress_request(owner, origin, label);
        }
        if let Err((_, why)) = &result
            && self.owner.as_ref().is_none_or(|o| throttle::admit(o, self.limits.log))
        {
            tracing::warn!(controller, request = %target, "outbound HTTP refused: {why}");
        }
        self.journal.push(ImportCall {
            function: "http.request",
            target,
            result: call_result,
            duration: std::time::Duration::ZERO,
        });
    }

    /// Decides whether a request may go: the declared origin it matches.
    /// A refusal is recorded on the request's `span` too.
    fn admit(&mut self, request: &hyper::Request<WasiBody>, span: &tracing::Span) -> Result<Admitted, Error> {
        let uri = request.uri();
        let Destination { scheme, host, port } = Destination::of(uri);
        let https = scheme == "https";
        let target = crate::cluster::bounded(
            &format!("{} {scheme}://{host}:{port}{}", request.method(), uri.path()),
            MAX_TARGET,
        );
        let (Some(egress), Some(owner)) = (self.egress(), self.owner.clone()) else {
            self.record(span, target, "undeclared", Err(("denied", "no outbound HTTP outside a call".to_owned())));
            return Err(Error::HttpRequestDenied);
        };
        let Some(origin) = egress.allows(&scheme, &host, port) else {
            let why = if egress.is_empty() {
                "the component declares no egress".to_owned()
            } else {
                format!("{scheme}://{host}:{port} is not a declared origin")
            };
            self.record(span, target, "undeclared", Err(("denied", why)));
            return Err(Error::HttpRequestDenied);
        };
        let origin_label = origin.as_str().to_owned();
        let by_ip = origin.ip().is_some();
        if self.calls >= self.limits.http_calls {
            let why = format!("more than {} outbound requests in one call (http_calls)", self.limits.http_calls);
            self.record(span, target, &origin_label, Err(("budget", why.clone())));
            return Err(Error::InternalError(Some(why)));
        }
        self.calls += 1;
        self.record(span, target, &origin_label, Ok(()));
        Ok(Admitted { owner, host, port, https, by_ip })
    }
}

/// Where a request goes, as its URI says: the scheme in lower case, the
/// host, and the port (the scheme's when the URI names none).
struct Destination {
    scheme: String,
    host: String,
    port: u16,
}

impl Destination {
    fn of(uri: &hyper::Uri) -> Self {
        let scheme = uri.scheme_str().unwrap_or("").to_ascii_lowercase();
        let host = uri.host().unwrap_or("").to_owned();
        let port = uri.port_u16().unwrap_or(if scheme == "https" { 443 } else { 80 });
        Self { scheme, host, port }
    }

    /// The span of one request (see the module's documentation): where it
    /// goes, never its path, query, headers or body.
    fn span(&self, method: &hyper::Method, parent: Option<&tracing::Span>) -> tracing::Span {
        let parent = parent.cloned().unwrap_or_else(tracing::Span::current);
        tracing::info_span!(
            parent: &parent,
            "http_request",
            method = %crate::cluster::bounded(method.as_str(), MAX_TARGET),
            scheme = %self.scheme,
            host = %crate::cluster::bounded(&self.host, MAX_TARGET),
            port = self.port,
            status_code = tracing::field::Empty,
            refused = tracing::field::Empty,
            "otel.status_code" = tracing::field::Empty,
            "otel.status_message" = tracing::field::Empty,
        )
    }
}

/// A request let through, and where it goes.
struct Admitted {
    /// The component sending it (whose connections it may reuse).
    owner: Owner,
    host: String,
    port: u16,
    https: bool,
    /// The declared origin names the IP itself (link-local allowed).
    by_ip: bool,
}

/// True for addresses where clouds serve instance metadata and
/// credentials: IPv4 and IPv6 link-local (169.254.0.0/16, fe80::/10) and
/// AWS's IPv6 endpoint `fd00:ec2::254`.
fn is_metadata_address(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => {
            v6.to_ipv4_mapped().is_some_and(|v4| v4.is_link_local())
                || (v6.segments()[0] & 0xffc0) == 0xfe80
                || v6 == std::net::Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254)
        }
    }
}

impl WasiHttpHooks for Hooks {
    fn send_request(
        &mut self,
        request: hyper::Request<WasiBody>,
        options: Option<RequestOptions>,
        _body_done: Box<dyn Future<Output = Result<(), Error>> + Send>,
    ) -> Box<dyn Future<Output = Sent> + Send> {
        // Made here, under the guest's call: the request is sent from a
        // task of its own.
        let span = Destination::of(request.uri()).span(request.method(), self.guest_span.as_ref());
        let admitted = self.admit(&request, &span);
        // Network waits end a little before the call does, so the guest
        // gets the error in time to answer with it (a transient failure,
        // a status) instead of being stopped at its deadline.
        let reserve = (self.limits.deadline / 10).min(MAX_RESERVE);
        let deadline = self.deadline.unwrap_or_else(|| Instant::now() + self.limits.deadline);
        let deadline = deadline.checked_sub(reserve).unwrap_or(deadline).max(Instant::now());
        let budget = ByteBudget { used: Arc::clone(&self.bytes), max: self.limits.http_bytes };
        let stubs = self.stubs.clone();
        Box::new(async move {
            let admitted = admitted?;
            let sent = match stubs {
                Some(stubs) => stubbed(request, &stubs, budget).instrument(span.clone()).await,
                None => send(request, admitted, options, deadline, budget).instrument(span.clone()).await,
            };
            match &sent {
                Ok((response, _)) => {
                    span.record("status_code", response.status().as_u16());
                }
                Err(e) => crate::telemetry::record_error(&span, &e.to_string()),
            }
            sent
        })
    }
}

/// The response bytes one invocation may still read.
#[derive(Clone)]
struct ByteBudget {
    used: Arc<AtomicU64>,
    max: u64,
}

async fn connect(to: &Admitted, deadline: tokio::time::Instant) -> Result<TcpStream, Error> {
    let lookup =
        tokio::time::timeout_at(deadline, tokio::net::lookup_host((to.host.trim_matches(['[', ']']), to.port)))
            .await
            .map_err(|_| Error::DnsTimeout)?
            .map_err(|_| Error::DnsError { rcode: Some("address not found".to_owned()), info_code: None })?;
    let addresses: Vec<SocketAddr> = lookup.collect();
    let allowed: Vec<SocketAddr> =
        addresses.iter().copied().filter(|a| to.by_ip || !is_metadata_address(a.ip())).collect();
    if allowed.is_empty() {
        return Err(if addresses.is_empty() { Error::DestinationNotFound } else { Error::DestinationIpProhibited });
    }
    let mut last = Error::ConnectionRefused;
    for address in allowed {
        match tokio::time::timeout_at(deadline, TcpStream::connect(address)).await {
            Ok(Ok(stream)) => return Ok(stream),
            Ok(Err(e)) => last = Error::Connect(e),
            Err(_) => return Err(Error::ConnectionTimeout),
        }
    }
    Err(last)
}

async fn send(
    mut request: hyper::Request<WasiBody>,
    to: Admitted,
    options: Option<RequestOptions>,
    deadline: Instant,
    budget: ByteBudget,
) -> Sent {
    let deadline = tokio::time::Instant::from_std(deadline);
    let now = tokio::time::Instant::now();
    let connect_by = options
        .and_then(|o| o.connect_timeout)
        .map_or(HTTP_CONNECT_TIMEOUT, |t| t.min(HTTP_CONNECT_TIMEOUT))
        .min(deadline.saturating_duration_since(now));
    let connect_by = now + connect_by;
    // Origin form on the wire: the path and query only.
    let path = request.uri().path_and_query().map_or("/", |p| p.as_str()).to_owned();
    *request.uri_mut() = path.parse().map_err(|_| Error::HttpRequestUriInvalid)?;
    let first_byte = options.and_then(|o| o.first_byte_timeout).map_or(deadline, |t| deadline.min(now + t));
    let key =
        pool::Key { owner: to.owner.clone(), https: to.https, host: to.host.clone(), port: to.port, by_ip: to.by_ip };
    let mut pooled = pool::POOL.checkout(&key, deadline);
    loop {
        // A pooled connection the server closed meanwhile gives the request
        // back unsent: it goes again, once, on a new connection.
        let (mut conn, reused) = match pooled.take() {
            Some(mut conn) => match tokio::time::timeout_at(connect_by, conn.sender.ready()).await {
                Ok(Ok(())) => (conn, true),
                _ => (open(&to, connect_by, deadline).await?, false),
            },
            None => (open(&to, connect_by, deadline).await?, false),
        };
        match tokio::time::timeout_at(first_byte, conn.sender.try_send_request(request)).await {
            Err(_) => return Err(Error::ConnectionReadTimeout),
            Ok(Ok(response)) => {
                let done = Some((key, conn));
                let response = response.map(|incoming| Capped { incoming, budget, done, ended: false }.boxed_unsync());
                return Ok((response, Box::new(async { Ok(()) })));
            }
            Ok(Err(mut failed)) => match failed.take_message() {
                Some(unsent) if reused => request = unsent,
                _ => return Err(Error::from(failed.into_error())),
            },
        }
    }
}

/// A new connection for `to` (TCP, TLS for `https`), made by `connect_by`
/// and leased until `deadline`.
async fn open(
    to: &Admitted,
    connect_by: tokio::time::Instant,
    deadline: tokio::time::Instant,
) -> Result<pool::Conn, Error> {
    let tcp = connect(to, connect_by).await?;
    let _ = tcp.set_nodelay(true);
    let io: Box<dyn Stream> = if to.https {
        let name = match to.host.trim_matches(['[', ']']).parse::<IpAddr>() {
            Ok(ip) => rustls::pki_types::ServerName::IpAddress(ip.into()),
            Err(_) => {
                rustls::pki_types::ServerName::try_from(to.host.clone()).map_err(|_| Error::HttpRequestUriInvalid)?
            }
        };
        let tls = tokio_rustls::TlsConnector::from(tls()?);
        let stream = tokio::time::timeout_at(connect_by, tls.connect(name, tcp))
            .await
            .map_err(|_| Error::ConnectionTimeout)?
            .map_err(tls_error)?;
        Box::new(stream)
    } else {
        Box::new(tcp)
    };
    let (sender, connection) = tokio::time::timeout_at(
        connect_by,
        hyper::client::conn::http1::handshake::<_, WasiBody>(hyper_util::rt::TokioIo::new(io)),
    )
    .await
    .map_err(|_| Error::ConnectionTimeout)??;
    Ok(pool::Conn::spawn(sender, connection, deadline))
}

/// Answers an admitted request from the mock host's stubs: nothing leaves
/// the process. The request's body is read (the stubs record it), the
/// response's is counted against the invocation's budget as a real one is.
async fn stubbed(
    request: hyper::Request<WasiBody>,
    stubs: &crate::cluster::mock::HttpStubs,
    budget: ByteBudget,
) -> Sent {
    use crate::cluster::mock::HttpAnswer;
    let (parts, body) = request.into_parts();
    let body = body.collect().await?.to_bytes().to_vec();
    match stubs.answer(parts.method.as_str(), &parts.uri.to_string(), body) {
        HttpAnswer::Failed(error) => Err(match error.as_str() {
            "connection-refused" => Error::ConnectionRefused,
            "connection-timeout" => Error::ConnectionTimeout,
            "dns-error" => Error::DnsError { rcode: Some("address not found".to_owned()), info_code: None },
            _ => Error::InternalError(Some(error)),
        }),
        HttpAnswer::Response { status, headers, body } => {
            let len = body.len() as u64;
            if budget.used.fetch_add(len, Ordering::Relaxed) + len > budget.max {
                return Err(Error::HttpResponseBodySize(Some(budget.max)));
            }
            let mut response = hyper::Response::builder().status(status);
            for (name, value) in headers {
                response = response.header(name, value);
            }
            let body = http_body_util::Full::new(Bytes::from(body)).map_err(|never| match never {}).boxed_unsync();
            let response = response.body(body).map_err(|e| Error::InternalError(Some(e.to_string())))?;
            Ok((response, Box::new(async { Ok(()) })))
        }
    }
}

/// The `wasi:http` error code of a failed TLS handshake: a certificate the
/// roots (and `--egress-ca`) do not vouch for, or that names another host,
/// is `TLS-certificate-error`; an alert the server sent,
/// `TLS-alert-received`; anything else, `TLS-protocol-error`.
fn tls_error(e: std::io::Error) -> Error {
    match e.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>()) {
        Some(rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented) => {
            Error::TlsCertificateError
        }
        Some(rustls::Error::AlertReceived(alert)) => {
            Error::TlsAlertReceived { alert_id: Some(u8::from(*alert)), alert_message: Some(format!("{alert:?}")) }
        }
        _ => Error::TlsProtocolError,
    }
}

/// A connection, plain or TLS.
trait Stream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static> Stream for T {}

/// A response body counted against the invocation's byte budget. Read to
/// the end, its connection goes back to the pool.
struct Capped {
    incoming: Incoming,
    budget: ByteBudget,
    /// The connection it arrives on, until it is pooled or dropped.
    done: Option<(pool::Key, pool::Conn)>,
    ended: bool,
}

impl Drop for Capped {
    fn drop(&mut self) {
        if let Some((key, conn)) = self.done.take()
            && (self.ended || self.incoming.is_end_stream())
        {
            pool::POOL.checkin(key, conn);
        }
    }
}

impl Body for Capped {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        match Pin::new(&mut self.incoming).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                let len = frame.data_ref().map_or(0, |d| d.len() as u64);
                let used = self.budget.used.fetch_add(len, Ordering::Relaxed) + len;
                if used > self.budget.max {
                    return Poll::Ready(Some(Err(Error::HttpResponseBodySize(Some(self.budget.max)))));
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(Error::from(e)))),
            Poll::Ready(None) => {
                self.ended = true;
                if let Some((key, conn)) = self.done.take() {
                    pool::POOL.checkin(key, conn);
                }
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.incoming.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.incoming.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_addresses_are_link_local_and_aws_ipv6() {
        for ip in ["169.254.169.254", "169.254.0.1", "fe80::1", "::ffff:169.254.169.254", "fd00:ec2::254"] {
            assert!(is_metadata_address(ip.parse().expect("ip")), "{ip}");
        }
        for ip in ["127.0.0.1", "10.0.0.1", "::1", "fd00:ec2::253", "8.8.8.8"] {
            assert!(!is_metadata_address(ip.parse().expect("ip")), "{ip}");
        }
    }
}
