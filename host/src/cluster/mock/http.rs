//! The world outside the mock cluster: answers to a component's outbound
//! HTTP requests from stubs, and a record of what it asked.
//!
//! On the mock host nothing leaves the process. A request first passes the
//! same checks as on a real host (declared origins, budgets: see
//! [`runtime::imports::http`](crate::runtime::imports::http)); then the most
//! recently added stub that matches its method and URL answers it, with a
//! response or a failure. A request to a declared origin that no stub
//! matches fails with `connection-refused`, as a service that is not there
//! would. Every request that passed the checks is recorded
//! ([`HttpStubs::requests`]), stubbed or not.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use serde::Deserialize;
use serde_json::Value;

/// Longest request body kept in the record, in bytes; the rest is cut.
pub const MAX_RECORDED_BODY: usize = 1 << 20;

/// One stub: which requests it answers, and how.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HttpStub {
    /// The method it answers (`GET`, `POST`, …, any case); any when `None`.
    #[serde(default)]
    pub method: Option<String>,
    /// The URL it answers: exactly (query included), or every URL that
    /// begins with it when it ends in `*`.
    pub url: String,
    /// The response's status code (default 200).
    #[serde(default)]
    pub status: Option<u16>,
    /// The response's headers.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The response's body: a string as it is, anything else as JSON
    /// (with `content-type: application/json` unless `headers` say
    /// otherwise).
    #[serde(default)]
    pub body: Option<Value>,
    /// A failure instead of a response: `connection-refused`,
    /// `connection-timeout`, `dns-error`, or any other text (an internal
    /// error with that message).
    #[serde(default)]
    pub error: Option<String>,
}

impl HttpStub {
    fn matches(&self, method: &str, url: &str) -> bool {
        let method_ok = self.method.as_deref().is_none_or(|m| m.eq_ignore_ascii_case(method));
        let url_ok = match self.url.strip_suffix('*') {
            Some(prefix) => url.starts_with(prefix),
            None => self.url == url,
        };
        method_ok && url_ok
    }

    /// The answer this stub gives.
    pub fn answer(&self) -> HttpAnswer {
        if let Some(error) = &self.error {
            return HttpAnswer::Failed(error.clone());
        }
        let mut headers: Vec<(String, String)> = self.headers.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        let body = match &self.body {
            None => Vec::new(),
            Some(Value::String(text)) => text.clone().into_bytes(),
            Some(json) => {
                if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("content-type")) {
                    headers.push(("content-type".to_owned(), "application/json".to_owned()));
                }
                json.to_string().into_bytes()
            }
        };
        HttpAnswer::Response { status: self.status.unwrap_or(200), headers, body }
    }
}

/// How a request is answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HttpAnswer {
    /// A response.
    Response {
        /// Status code.
        status: u16,
        /// Headers, in order.
        headers: Vec<(String, String)>,
        /// Body.
        body: Vec<u8>,
    },
    /// A failure: `connection-refused`, `connection-timeout`, `dns-error`,
    /// or the message of an internal error.
    Failed(String),
}

/// One request a component made on the mock host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpRequest {
    /// Method, upper case.
    pub method: String,
    /// The URL, query included.
    pub url: String,
    /// The body (at most [`MAX_RECORDED_BODY`] bytes).
    pub body: Vec<u8>,
    /// Whether a stub answered it (else it failed with
    /// `connection-refused`).
    pub stubbed: bool,
}

impl HttpRequest {
    /// The body as JSON, if it is.
    pub fn json(&self) -> Option<Value> {
        serde_json::from_slice(&self.body).ok()
    }
}

/// The stubs of a mock cluster's outside world, and the requests made.
#[derive(Debug, Default)]
pub struct HttpStubs {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    stubs: Vec<HttpStub>,
    requests: Vec<HttpRequest>,
}

impl HttpStubs {
    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds `stub`; it wins over the stubs added before it.
    pub fn stub(&self, stub: HttpStub) {
        self.inner().stubs.push(stub);
    }

    /// Answers a request and records it: the newest matching stub's
    /// answer, or `connection-refused` when none matches.
    pub fn answer(&self, method: &str, url: &str, mut body: Vec<u8>) -> HttpAnswer {
        body.truncate(MAX_RECORDED_BODY);
        let mut inner = self.inner();
        let answer = inner.stubs.iter().rev().find(|s| s.matches(method, url)).map(HttpStub::answer);
        inner.requests.push(HttpRequest {
            method: method.to_ascii_uppercase(),
            url: url.to_owned(),
            body,
            stubbed: answer.is_some(),
        });
        answer.unwrap_or_else(|| HttpAnswer::Failed("connection-refused".to_owned()))
    }

    /// Every request made so far, in order.
    pub fn requests(&self) -> Vec<HttpRequest> {
        self.inner().requests.clone()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_newest_matching_stub_answers_and_every_request_is_recorded() {
        let stubs = HttpStubs::default();
        stubs.stub(HttpStub { url: "http://am:9093/api/v2/*".into(), body: Some(json!([])), ..HttpStub::default() });
        stubs.stub(HttpStub {
            method: Some("post".into()),
            url: "http://am:9093/api/v2/silences".into(),
            body: Some(json!({"silenceID": "s1"})),
            ..HttpStub::default()
        });
        let posted = stubs.answer("POST", "http://am:9093/api/v2/silences", b"{\"a\":1}".to_vec());
        let HttpAnswer::Response { status, headers, body } = posted else { panic!("{posted:?}") };
        assert_eq!((status, body.as_slice()), (200, br#"{"silenceID":"s1"}"#.as_slice()));
        assert_eq!(headers, [("content-type".to_owned(), "application/json".to_owned())]);
        // The prefix stub answers what the exact one does not.
        let listed = stubs.answer("GET", "http://am:9093/api/v2/silences?filter=x", Vec::new());
        assert!(matches!(listed, HttpAnswer::Response { ref body, .. } if body == b"[]"), "{listed:?}");
        // A newer stub replaces an older one: the service goes away.
        stubs.stub(HttpStub {
            url: "http://am:9093/*".into(),
            error: Some("connection-refused".into()),
            ..HttpStub::default()
        });
        let gone = stubs.answer("GET", "http://am:9093/api/v2/silences", Vec::new());
        assert_eq!(gone, HttpAnswer::Failed("connection-refused".into()));
        let unstubbed = stubs.answer("GET", "http://other:80/", Vec::new());
        assert_eq!(unstubbed, HttpAnswer::Failed("connection-refused".into()));
        let requests = stubs.requests();
        assert_eq!(requests.len(), 4);
        assert_eq!(requests[0].json(), Some(json!({"a": 1})));
        assert_eq!(requests.iter().map(|r| r.stubbed).collect::<Vec<_>>(), [true, true, true, false]);
    }

    #[test]
    fn a_text_body_is_sent_as_it_is_with_the_status_given() {
        let stub: HttpStub =
            serde_json::from_value(json!({"url": "https://x.example/", "status": 503, "body": "down"}))
                .expect("a stub");
        assert_eq!(stub.answer(), HttpAnswer::Response { status: 503, headers: vec![], body: b"down".to_vec() });
        let bad = serde_json::from_value::<HttpStub>(json!({"url": "https://x.example/", "stauts": 503}));
        assert!(bad.is_err(), "a misspelt field is an error, not ignored");
    }
}
