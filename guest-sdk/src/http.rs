//! Outbound HTTP(S) to the origins the component declares (contract
//! 0.4.0): a plain request with JSON in and out, on
//! `wasi:http/outgoing-handler`.
//!
//! Declare each origin in the [`Manifest`](crate::Manifest) with
//! [`egress`](crate::Manifest::egress); the host refuses every other
//! request before a connection is made ([`HttpError::Denied`]).
//!
//! ```no_run
//! use capstan_guest::http::Request;
//! use capstan_guest::serde_json::{Value, json};
//!
//! # fn f() -> capstan_guest::Result<()> {
//! let created: Value = Request::post("http://alertmanager.monitoring.svc:9093/api/v2/silences")
//!     .json(&json!({"matchers": [], "comment": "maintenance"}))?
//!     .send()?
//!     .error_for_status()?
//!     .json()?;
//! # Ok(()) }
//! ```
//!
//! A request is blocking: it returns once the whole response body is read,
//! within the invocation's deadline and the host's budgets (requests and
//! response bytes per call; see docs/egress.md). Errors convert into
//! transient [`Error`](crate::Error)s with `?`, so a reconcile that cannot
//! reach its service is retried with backoff.
//!
//! Under `cargo test` (not wasm32) requests go to the
//! [`FakeHost`](crate::testing::FakeHost): stub an origin's answers with
//! [`FakeHost::stub_http`](crate::testing::FakeHost::stub_http), declare
//! origins with [`FakeHost::egress`](crate::testing::FakeHost::egress)
//! (undeclared ones fail as on the host), and read the requests made with
//! [`FakeHost::http_requests`](crate::testing::FakeHost::http_requests).

use std::fmt;

use serde::Serialize;
use serde::de::DeserializeOwned;

/// Most bytes of a response body this SDK reads (the host's per-call
/// budget is usually lower).
pub const MAX_BODY: usize = 64 << 20;

/// An HTTP request to send.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub struct Request {
    /// The method, e.g. `GET`.
    pub method: String,
    /// The absolute URL: `http` or `https`, host, optional port, path and
    /// query.
    pub url: String,
    /// Headers, in order.
    pub headers: Vec<(String, String)>,
    /// The body (empty: none).
    pub body: Vec<u8>,
}

/// An HTTP response, body read whole.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// Headers, in order, names in lower case.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

/// Why a request failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HttpError {
    /// The host refused it: the origin is not declared in the manifest's
    /// egress, or the invocation's request budget is spent.
    Denied(String),
    /// The URL, a header or the method is malformed; nothing was sent.
    Invalid(String),
    /// The request failed on the way: name lookup, connection, TLS, a
    /// timeout, a response over the byte budget.
    Transport(String),
    /// The server answered with a status of 400 or more
    /// ([`Response::error_for_status`]).
    Status {
        /// The status code.
        status: u16,
        /// The start of the body, as text.
        body: String,
    },
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Denied(m) => write!(f, "outbound request refused by the host: {m}"),
            Self::Invalid(m) => write!(f, "invalid request: {m}"),
            Self::Transport(m) => write!(f, "request failed: {m}"),
            Self::Status { status, body } => write!(f, "HTTP {status}: {body}"),
        }
    }
}

impl std::error::Error for HttpError {}

/// An HTTP failure is transient: the service may be back on the next try.
impl From<HttpError> for crate::Error {
    fn from(e: HttpError) -> Self {
        crate::Error::transient(e)
    }
}

impl Request {
    /// A request with `method` to `url`.
    pub fn new(method: &str, url: &str) -> Self {
        Self { method: method.to_owned(), url: url.to_owned(), headers: Vec::new(), body: Vec::new() }
    }

    /// A `GET`.
    pub fn get(url: &str) -> Self {
        Self::new("GET", url)
    }

    /// A `POST`.
    pub fn post(url: &str) -> Self {
        Self::new("POST", url)
    }

    /// A `PUT`.
    pub fn put(url: &str) -> Self {
        Self::new("PUT", url)
    }

    /// A `PATCH`.
    pub fn patch(url: &str) -> Self {
        Self::new("PATCH", url)
    }

    /// A `DELETE`.
    pub fn delete(url: &str) -> Self {
        Self::new("DELETE", url)
    }

    /// Adds a header.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Sets a bearer token (`authorization: Bearer …`), e.g. one read from
    /// a Secret the component declared.
    pub fn bearer(self, token: &str) -> Self {
        self.header("authorization", &format!("Bearer {token}"))
    }

    /// Sets the body.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// Sets a JSON body and `content-type: application/json`.
    ///
    /// # Errors
    ///
    /// When `value` does not serialise.
    pub fn json<T: Serialize + ?Sized>(self, value: &T) -> crate::Result<Self> {
        let body = serde_json::to_vec(value)?;
        Ok(self.header("content-type", "application/json").body(body))
    }

    /// Sends the request and reads the whole response.
    ///
    /// # Errors
    ///
    /// [`HttpError`]: refused by the host, malformed, or failed on the way.
    /// A response of any status is `Ok`; see [`Response::error_for_status`].
    pub fn send(self) -> Result<Response, HttpError> {
        let url = Url::parse(&self.url)?;
        send(&self, &url)
    }
}

impl Response {
    /// True for a 2xx status.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The first header named `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// The body as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body decoded from JSON.
    ///
    /// # Errors
    ///
    /// When the body is not JSON of that shape.
    pub fn json<T: DeserializeOwned>(&self) -> crate::Result<T> {
        Ok(serde_json::from_slice(&self.body)?)
    }

    /// `Err(HttpError::Status)` for a status of 400 or more, with the start
    /// of the body; else the response.
    ///
    /// # Errors
    ///
    /// When the status is 400 or more.
    pub fn error_for_status(self) -> Result<Self, HttpError> {
        if self.status < 400 {
            return Ok(self);
        }
        let mut body = self.text();
        if body.len() > 512 {
            let mut cut = 512;
            while !body.is_char_boundary(cut) {
                cut -= 1;
            }
            body.truncate(cut);
        }
        Err(HttpError::Status { status: self.status, body })
    }
}

/// A URL split as `wasi:http` wants it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Url<'a> {
    pub(crate) https: bool,
    pub(crate) authority: &'a str,
    pub(crate) path_and_query: &'a str,
}

impl<'a> Url<'a> {
    pub(crate) fn parse(url: &'a str) -> Result<Self, HttpError> {
        let bad = |why: &str| HttpError::Invalid(format!("URL {url:?}: {why}"));
        let (scheme, rest) = url.split_once("://").ok_or_else(|| bad("no scheme"))?;
        let https = match scheme.to_ascii_lowercase().as_str() {
            "https" => true,
            "http" => false,
            _ => return Err(bad("the scheme must be http or https")),
        };
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, path) = rest.split_at(end);
        if authority.is_empty() || authority.contains('@') || authority.contains(char::is_whitespace) {
            return Err(bad("the host must be a name or an address, without user information"));
        }
        let path_and_query = if path.is_empty() { "/" } else { path };
        if path_and_query.contains(char::is_whitespace) || path_and_query.contains('#') {
            return Err(bad("spaces and fragments do not go in a request"));
        }
        Ok(Self { https, authority, path_and_query })
    }
}

#[cfg(target_arch = "wasm32")]
fn send(request: &Request, url: &Url<'_>) -> Result<Response, HttpError> {
    use crate::wit::wasi::http::outgoing_handler;
    use crate::wit::wasi::http::types::{
        ErrorCode, Fields, IncomingBody, Method, OutgoingBody, OutgoingRequest, Scheme,
    };
    use crate::wit::wasi::io::streams::StreamError;

    let entries: Vec<(String, Vec<u8>)> =
        request.headers.iter().map(|(k, v)| (k.to_ascii_lowercase(), v.as_bytes().to_vec())).collect();
    let headers = Fields::from_list(&entries).map_err(|e| HttpError::Invalid(format!("headers: {e:?}")))?;
    let outgoing = OutgoingRequest::new(headers);
    let method = match request.method.to_ascii_uppercase().as_str() {
        "GET" => Method::Get,
        "HEAD" => Method::Head,
        "POST" => Method::Post,
        "PUT" => Method::Put,
        "DELETE" => Method::Delete,
        "PATCH" => Method::Patch,
        "OPTIONS" => Method::Options,
        other => Method::Other(other.to_owned()),
    };
    let invalid = |what: &str| HttpError::Invalid(format!("{what} refused by wasi:http"));
    outgoing.set_method(&method).map_err(|()| invalid("method"))?;
    outgoing
        .set_scheme(Some(if url.https { &Scheme::Https } else { &Scheme::Http }))
        .map_err(|()| invalid("scheme"))?;
    outgoing.set_authority(Some(url.authority)).map_err(|()| invalid("authority"))?;
    outgoing.set_path_with_query(Some(url.path_and_query)).map_err(|()| invalid("path"))?;
    let body = outgoing.body().map_err(|()| invalid("body"))?;
    let failed = |code: ErrorCode| match code {
        ErrorCode::HttpRequestDenied => HttpError::Denied(format!("{} is not a declared origin", url.authority)),
        ErrorCode::InternalError(Some(m)) if m.contains("http_calls") => HttpError::Denied(m),
        ErrorCode::InternalError(Some(m)) => HttpError::Transport(format!("internal-error: {m}")),
        other => HttpError::Transport(code_name(&format!("{other:?}"))),
    };
    let pending = outgoing_handler::handle(outgoing, None).map_err(failed)?;
    {
        let stream = body.write().map_err(|()| invalid("body stream"))?;
        for chunk in request.body.chunks(4096) {
            stream.blocking_write_and_flush(chunk).map_err(|e| HttpError::Transport(format!("writing: {e:?}")))?;
        }
    }
    OutgoingBody::finish(body, None).map_err(failed)?;
    let response = loop {
        if let Some(result) = pending.get() {
            break result.map_err(|()| HttpError::Transport("response taken twice".to_owned()))?.map_err(failed)?;
        }
        pending.subscribe().block();
    };
    let status = response.status();
    let headers = response
        .headers()
        .entries()
        .into_iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), String::from_utf8_lossy(&v).into_owned()))
        .collect();
    let incoming = response.consume().map_err(|()| HttpError::Transport("no body".to_owned()))?;
    let mut bytes = Vec::new();
    {
        let stream = incoming.stream().map_err(|()| HttpError::Transport("no body stream".to_owned()))?;
        loop {
            match stream.blocking_read(64 << 10) {
                Ok(chunk) => {
                    if bytes.len() + chunk.len() > MAX_BODY {
                        return Err(HttpError::Transport(format!("response body over {MAX_BODY} bytes")));
                    }
                    bytes.extend_from_slice(&chunk);
                }
                Err(StreamError::Closed) => break,
                Err(StreamError::LastOperationFailed(e)) => {
                    let code = crate::wit::wasi::http::types::http_error_code(&e);
                    return Err(match code {
                        Some(code) => failed(code),
                        // The first line: the host's message, not its backtrace.
                        None => HttpError::Transport(e.to_debug_string().lines().next().unwrap_or_default().to_owned()),
                    });
                }
            }
        }
    }
    let _trailers = IncomingBody::finish(incoming);
    Ok(Response { status, headers, body: bytes })
}

#[cfg(not(target_arch = "wasm32"))]
fn send(request: &Request, url: &Url<'_>) -> Result<Response, HttpError> {
    crate::testing::with_host(|h| h.http(request, url))
}

/// The `wasi:http` name of an error code from its `Debug` rendering
/// (`ErrorCode::ConnectionRefused` → `connection-refused`), with its
/// details, if any, after it: what the Python and JavaScript SDKs say.
#[cfg(any(target_arch = "wasm32", test))]
fn code_name(debug: &str) -> String {
    let variant = debug.strip_prefix("ErrorCode::").unwrap_or(debug);
    let (name, details) = variant.split_once('(').unwrap_or((variant, ""));
    let mut kebab = String::new();
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            kebab.push('-');
        }
        kebab.push(c.to_ascii_lowercase());
    }
    match details.strip_suffix(')') {
        Some(details) if !details.is_empty() && details != "None" => format!("{kebab} ({details})"),
        _ => kebab,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn error_codes_are_named_as_wasi_http_names_them() {
        assert_eq!(super::code_name("ErrorCode::ConnectionRefused"), "connection-refused");
        assert_eq!(super::code_name("ErrorCode::HttpResponseBodySize(Some(16))"), "http-response-body-size (Some(16))");
        assert_eq!(super::code_name("ErrorCode::ConnectionReadTimeout"), "connection-read-timeout");
    }

    use super::*;

    #[test]
    fn urls_split_into_scheme_authority_and_path() {
        let u = Url::parse("https://api.example.com:8443/v2/x?y=1").expect("valid");
        assert_eq!(u, Url { https: true, authority: "api.example.com:8443", path_and_query: "/v2/x?y=1" });
        let u = Url::parse("http://127.0.0.1:9093").expect("valid");
        assert_eq!((u.https, u.authority, u.path_and_query), (false, "127.0.0.1:9093", "/"));
        let u = Url::parse("http://h?x").expect("valid");
        assert_eq!((u.authority, u.path_and_query), ("h", "?x"));
        for bad in ["api.example.com", "ftp://x", "https://", "https://u:p@x/", "https://x/a b", "https://x/#f"] {
            assert!(matches!(Url::parse(bad), Err(HttpError::Invalid(_))), "{bad}");
        }
    }

    #[test]
    fn status_errors_carry_the_start_of_the_body() {
        let r = Response { status: 404, headers: vec![], body: "é".repeat(400).into_bytes() };
        match r.error_for_status() {
            Err(HttpError::Status { status: 404, body }) => assert!(body.len() <= 512 && body.starts_with('é')),
            other => panic!("{other:?}"),
        }
        let ok = Response { status: 204, headers: vec![("x".into(), "1".into())], body: vec![] };
        assert_eq!(ok.clone().error_for_status(), Ok(ok.clone()));
        assert_eq!(ok.header("X"), Some("1"));
    }
}
