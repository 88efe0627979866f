//! Outbound HTTP from guests (declared egress), on the mock host, whose
//! runtime is the host's own, against real HTTP servers on loopback: a
//! declared origin is reached; every other one — another port on loopback,
//! a name instead of the declared address, another scheme, a metadata
//! address, anything for a component that declares nothing — is refused
//! before a connection is made; budgets hold against a server that sends
//! forever or never answers, and the host serves the next call. Each
//! request is an `http_request` span under the guest's call. These tests
//! send to the network (`MockCluster::use_network`); by default the mock
//! host answers from stubs, and the last test shows that nothing leaves it.
//!
//! Needs `fixture.wasm` and `fetcher.wasm` from `tests/build-guests.sh`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use capstan_host::object::{Gvk, ObjectRef};
use capstan_host::runtime::limits::Limits;
use capstan_host::testing::MockHost;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

fn guest(name: &str) -> PathBuf {
    capstan_host::testing::find_component(name).unwrap_or_else(|e| panic!("{e}"))
}

/// Held by every test here: they count in the same process-wide series
/// (controller `fetcher`), and one asserts exact counts.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The value of one series of the process-wide metrics; 0 when absent.
fn metric(series: &str) -> f64 {
    let scrape = capstan_host::metrics::metrics().encode();
    scrape.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok()).unwrap_or(0.0)
}

/// The credential the `/auth` path of [`Server`] takes.
const CREDENTIAL: &str = "s3cr3t-credential";

/// A tiny HTTP/1.1 server: `/ok` answers `hello` and closes, `/auth`
/// answers `hello` to a request bearing [`CREDENTIAL`] and 401 to any
/// other, `/keep`
/// answers `hello` and keeps the connection for the next request,
/// `/keep-then-close` answers as `/keep` does but closes, `/huge` sends
/// zeros forever, `/hang` never answers. Counts the connections it
/// accepted.
struct Server {
    port: u16,
    connections: Arc<AtomicUsize>,
}

impl Server {
    /// On a free port of the fixture's declared range (18000-18099), or
    /// any free port when `declared` is false.
    async fn start(declared: bool) -> Self {
        let listener = if declared {
            let mut bound = None;
            for port in 18000..18100 {
                if let Ok(l) = TcpListener::bind(("127.0.0.1", port)).await {
                    bound = Some(l);
                    break;
                }
            }
            bound.expect("a free port in 18000-18099")
        } else {
            TcpListener::bind(("127.0.0.1", 0)).await.expect("bind")
        };
        let port = listener.local_addr().expect("addr").port();
        assert!(declared || !(18000..18100).contains(&port), "an ephemeral port in the declared range");
        let connections = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&connections);
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut buf = [0u8; 1024];
                    loop {
                        while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                            match stream.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => request.extend_from_slice(&buf[..n]),
                            }
                        }
                        let head = String::from_utf8_lossy(&request).to_ascii_lowercase();
                        let target = String::from_utf8_lossy(&request).split(' ').nth(1).unwrap_or("/").to_owned();
                        request.clear();
                        match target.split('?').next().unwrap_or_default() {
                            "/ok" => {
                                let _ = stream
                                    .write_all(
                                        b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nconnection: close\r\n\r\nhello",
                                    )
                                    .await;
                                return;
                            }
                            "/auth" => {
                                let bearer = format!("authorization: bearer {CREDENTIAL}");
                                let answer: &[u8] = if head.contains(&bearer) {
                                    b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nconnection: close\r\n\r\nhello"
                                } else {
                                    b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                                };
                                let _ = stream.write_all(answer).await;
                                return;
                            }
                            "/keep" => {
                                let head = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello";
                                if stream.write_all(head).await.is_err() {
                                    return;
                                }
                            }
                            "/keep-then-close" => {
                                let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello").await;
                                return;
                            }
                            "/huge" => {
                                let head =
                                    b"HTTP/1.1 200 OK\r\ncontent-length: 1073741824\r\nconnection: close\r\n\r\n";
                                if stream.write_all(head).await.is_err() {
                                    return;
                                }
                                let chunk = vec![0u8; 64 << 10];
                                while stream.write_all(&chunk).await.is_ok() {}
                                return;
                            }
                            _ => {
                                tokio::time::sleep(Duration::from_secs(3600)).await;
                                return;
                            }
                        }
                    }
                });
            }
        });
        Self { port, connections }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

/// Reconciles one ConfigMap with `behaviour: fetch` of `urls` (each
/// `times` times) and returns the result lines of its `-fetch` child.
async fn fetch(host: &mut MockHost, name: &str, urls: &[String], times: usize) -> Vec<String> {
    host.seed(json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default"},
        "data": {"behaviour": "fetch", "urls": urls.join(","), "times": times.to_string()},
    }))
    .expect("seed");
    let run = host.run_until_idle().await.expect("runs");
    assert!(run.failures().next().is_none(), "{:?}", run.failures().collect::<Vec<_>>());
    let child = ObjectRef::new(Gvk::new("", "v1", "ConfigMap"), Some("default"), format!("{name}-fetch"));
    let cm = host.cluster().get_sync(&child).expect("the -fetch child");
    cm["data"]["results"].as_str().unwrap_or_default().lines().map(str::to_owned).collect()
}

#[tokio::test]
async fn a_declared_origin_is_reached_and_every_other_is_refused_before_a_connection() {
    let _serial = SERIAL.lock().await;
    let declared = Server::start(true).await;
    let other = Server::start(false).await;
    let mut host = MockHost::new().expect("host");
    host.cluster().use_network(true);
    host.load(guest("fetcher")).await.expect("loads");
    let denied =
        r#"capstan_egress_requests_total{cluster="default",controller="fetcher",origin="undeclared",result="denied"}"#;
    let ok = r#"capstan_egress_requests_total{cluster="default",controller="fetcher",origin="http://127.0.0.1:18000-18099",result="ok"}"#;
    let (denied_before, ok_before) = (metric(denied), metric(ok));
    let urls = [
        declared.url("/ok"),
        other.url("/ok"),
        format!("http://localhost:{}/ok", declared.port),
        format!("https://127.0.0.1:{}/ok", declared.port),
        "http://169.254.169.254/latest/meta-data/iam/security-credentials/".to_owned(),
    ];
    let results = fetch(&mut host, "probe", &urls, 1).await;
    assert_eq!(results.len(), 5, "{results:?}");
    assert_eq!(results[0], "status:200 bytes:5");
    for (url, result) in urls.iter().zip(&results).skip(1) {
        assert!(result.starts_with("denied:"), "{url}: {result}");
    }
    assert_eq!(declared.connections(), 1, "only the declared request connected");
    assert_eq!(other.connections(), 0, "the undeclared port saw no connection");
    assert_eq!(metric(denied) - denied_before, 4.0);
    assert_eq!(metric(ok) - ok_before, 1.0);
}

#[tokio::test]
async fn a_connection_read_to_the_end_is_reused_by_the_next_requests_and_one_the_server_closed_is_not() {
    let _serial = SERIAL.lock().await;
    let server = Server::start(true).await;
    let mut host = MockHost::new().expect("host");
    host.cluster().use_network(true);
    host.load(guest("fetcher")).await.expect("loads");
    let results = fetch(&mut host, "pooled", &[server.url("/keep")], 5).await;
    assert_eq!(results, ["status:200 bytes:5"; 5]);
    let again = fetch(&mut host, "pooled-again", &[server.url("/keep")], 2).await;
    assert_eq!(again, ["status:200 bytes:5"; 2]);
    assert_eq!(server.connections(), 1, "seven requests in two calls on one connection");

    let closing = Server::start(true).await;
    for name in ["closed-1", "closed-2"] {
        let results = fetch(&mut host, name, &[closing.url("/keep-then-close")], 1).await;
        assert_eq!(results, ["status:200 bytes:5"], "{name}");
    }
    assert_eq!(closing.connections(), 2, "a connection the server closed is not reused");
}

#[tokio::test]
async fn a_component_that_declares_no_egress_reaches_nothing() {
    let _serial = SERIAL.lock().await;
    let server = Server::start(true).await;
    let mut host = MockHost::new().expect("host");
    host.cluster().use_network(true);
    host.load(guest("fixture")).await.expect("loads");
    let results = fetch(&mut host, "quiet", &[server.url("/ok")], 1).await;
    assert_eq!(results.len(), 1);
    assert!(results[0].starts_with("denied:"), "{results:?}");
    assert_eq!(server.connections(), 0);
}

#[tokio::test]
async fn requests_past_the_budget_fail_for_the_guest_and_are_not_sent() {
    let _serial = SERIAL.lock().await;
    let server = Server::start(true).await;
    let mut host = MockHost::with_limits(Limits::default().http_calls(3), None).expect("host");
    host.cluster().use_network(true);
    host.load(guest("fetcher")).await.expect("loads");
    let results = fetch(&mut host, "greedy", &[server.url("/ok")], 5).await;
    assert_eq!(results[..3], ["status:200 bytes:5"; 3], "{results:?}");
    for result in &results[3..] {
        assert!(result.starts_with("denied:") && result.contains("http_calls"), "{result}");
    }
    assert_eq!(server.connections(), 3);
}

#[tokio::test]
async fn a_huge_body_and_a_silent_server_cost_only_the_call_and_the_host_serves_on() {
    let _serial = SERIAL.lock().await;
    let server = Server::start(true).await;
    let limits = Limits::default().deadline(Duration::from_secs(2)).http_bytes(1 << 20);
    let mut host = MockHost::with_limits(limits, None).expect("host");
    host.cluster().use_network(true);
    host.load(guest("fetcher")).await.expect("loads");
    let huge = fetch(&mut host, "huge", &[server.url("/huge")], 1).await;
    assert_eq!(huge.len(), 1, "{:?}", &huge[..huge.len().min(3)]);
    assert!(huge[0].starts_with("error:") && huge[0].contains("body size exceeds limit: 1048576"), "{huge:?}");
    let silent = fetch(&mut host, "silent", &[server.url("/hang")], 1).await;
    assert_eq!(silent.len(), 1);
    assert!(silent[0].starts_with("error:"), "{silent:?}");
    // The host goes on: the next call reaches the server.
    let after = fetch(&mut host, "after", &[server.url("/ok")], 1).await;
    assert_eq!(after, ["status:200 bytes:5"]);
}

/// A span a test saw open: its name, its parent's, and its fields as
/// recorded (at the start and later).
#[derive(Debug, Clone)]
struct Seen {
    name: &'static str,
    parent: Option<&'static str>,
    fields: BTreeMap<String, String>,
}

/// A `tracing` layer keeping every span opened while it is the default.
#[derive(Clone, Default)]
struct Spans(Arc<Mutex<Vec<(tracing::span::Id, Seen)>>>);

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }

    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl<S> tracing_subscriber::Layer<S> for Spans
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        let seen = Seen { name: "event", parent: None, fields };
        self.0.lock().expect("not poisoned").push((tracing::span::Id::from_u64(u64::MAX), seen));
    }

    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut fields = BTreeMap::new();
        attrs.record(&mut Fields(&mut fields));
        let parent = ctx.span(id).and_then(|s| s.parent()).map(|p| p.name());
        let seen = Seen { name: attrs.metadata().name(), parent, fields };
        self.0.lock().expect("not poisoned").push((id.clone(), seen));
    }

    fn on_record(
        &self,
        id: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut spans = self.0.lock().expect("not poisoned");
        // The latest span of that id (ids are reused once a span closes).
        if let Some((_, seen)) = spans.iter_mut().rev().find(|(i, _)| i == id) {
            values.record(&mut Fields(&mut seen.fields));
        }
    }
}

impl Spans {
    fn named(&self, name: &str) -> Vec<Seen> {
        self.0.lock().expect("not poisoned").iter().filter(|(_, s)| s.name == name).map(|(_, s)| s.clone()).collect()
    }
}

#[tokio::test]
async fn each_request_is_a_span_of_the_guest_call_with_its_destination_and_answer_never_its_query() {
    let _serial = SERIAL.lock().await;
    use tracing_subscriber::layer::SubscriberExt as _;
    let declared = Server::start(true).await;
    let spans = Spans::default();
    // This test's thread only (the runtime is current-thread): what the
    // guest's requests open, sent from tasks of their own, is seen here;
    // at `info`, as `capstan run` logs by default (wasmtime's own spans
    // of each import are at `trace`).
    let subscriber =
        tracing_subscriber::registry().with(tracing_subscriber::filter::LevelFilter::INFO).with(spans.clone());
    let _default = tracing::subscriber::set_default(subscriber);
    let mut host = MockHost::new().expect("host");
    host.cluster().use_network(true);
    host.load(guest("fetcher")).await.expect("loads");
    let urls = [declared.url("/ok?token=secret-token"), "http://127.0.0.1:1/private?key=secret-key".to_owned()];
    let results = fetch(&mut host, "spanned", &urls, 1).await;
    assert_eq!(results[0], "status:200 bytes:5", "{results:?}");
    assert!(results[1].starts_with("denied:"), "{results:?}");

    let requests = spans.named("http_request");
    assert_eq!(requests.len(), 2, "{requests:?}");
    let (sent, refused) = (&requests[0].fields, &requests[1].fields);
    assert!(requests.iter().all(|s| s.parent == Some("guest_call")), "under the guest's call: {requests:?}");
    assert_eq!(sent["method"], "GET");
    assert_eq!((sent["scheme"].as_str(), sent["host"].as_str()), ("http", "127.0.0.1"));
    assert_eq!(sent["port"], declared.port.to_string());
    assert_eq!(sent["status_code"], "200");
    assert!(!sent.contains_key("refused") && !sent.contains_key("otel.status_code"), "{sent:?}");
    assert_eq!((refused["port"].as_str(), refused["refused"].as_str()), ("1", "denied"));
    assert_eq!(refused["otel.status_code"], "error");
    assert!(!refused.contains_key("status_code"), "{refused:?}");
    let all = format!("{requests:?}");
    assert!(!all.contains("secret") && !all.contains("/ok") && !all.contains("/private"), "a path or query: {all}");
}

#[tokio::test]
async fn on_the_mock_host_stubs_answer_the_declared_origins_and_nothing_leaves_the_process() {
    let _serial = SERIAL.lock().await;
    use capstan_host::cluster::mock::HttpStub;
    let server = Server::start(true).await;
    let other = Server::start(false).await;
    let mut host = MockHost::new().expect("host");
    host.load(guest("fetcher")).await.expect("loads");
    host.cluster().http().stub(HttpStub {
        method: Some("GET".into()),
        url: server.url("/ok"),
        status: Some(201),
        body: Some(json!({"stubbed": true})),
        ..HttpStub::default()
    });
    let urls = [server.url("/ok"), server.url("/not-stubbed"), other.url("/ok")];
    let results = fetch(&mut host, "stubbed", &urls, 1).await;
    assert_eq!(results[0], format!("status:201 bytes:{}", json!({"stubbed": true}).to_string().len()));
    assert!(results[1].starts_with("error:") && results[1].contains("connection-refused"), "{results:?}");
    assert!(results[2].starts_with("denied:"), "the checks hold on the mock host: {results:?}");
    assert_eq!((server.connections(), other.connections()), (0, 0), "nothing left the process");
    // What passed the checks is recorded, stubbed or not; the refused one is not.
    let made: Vec<_> = host.cluster().http().requests().into_iter().map(|r| (r.url, r.stubbed)).collect();
    assert_eq!(made, [(server.url("/ok"), true), (server.url("/not-stubbed"), false)]);
}

// A credential comes from a Secret the component declares by name, reaches
// the origin in the request, and shows in none of what the host keeps or
// tells: no span, log line, journal entry or Event. A Secret it did not
// name is denied, so no other credential can be read.
#[tokio::test]
async fn a_credential_from_a_declared_secret_reaches_the_request_and_shows_nowhere_else() {
    let _serial = SERIAL.lock().await;
    use base64::Engine as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    let server = Server::start(true).await;
    let seen = Spans::default();
    let subscriber =
        tracing_subscriber::registry().with(tracing_subscriber::filter::LevelFilter::TRACE).with(seen.clone());
    let _default = tracing::subscriber::set_default(subscriber);
    let mut host = MockHost::new().expect("host");
    host.cluster().use_network(true);
    host.load(guest("fetcher")).await.expect("loads");
    let encoded = base64::engine::general_purpose::STANDARD.encode(CREDENTIAL);
    for name in ["fetcher-token", "other-token"] {
        host.seed(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": "default"},
            "data": {"token": encoded},
        }))
        .expect("seed");
    }
    let fetch_with = |name: &str, secret: Option<&str>| {
        let mut data = json!({"behaviour": "fetch", "urls": server.url("/auth")});
        if let Some(secret) = secret {
            data["secret"] = json!(secret);
        }
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default"}, "data": data})
    };
    host.seed(fetch_with("with", Some("fetcher-token"))).expect("seed");
    host.seed(fetch_with("without", None)).expect("seed");
    host.seed(fetch_with("other", Some("other-token"))).expect("seed");
    let run = host.run_until_idle().await.expect("runs");
    let result = |name: &str| {
        let child = ObjectRef::new(Gvk::new("", "v1", "ConfigMap"), Some("default"), format!("{name}-fetch"));
        let cm = host.cluster().get_sync(&child).expect("the -fetch child");
        cm["data"]["results"].as_str().unwrap_or_default().to_owned()
    };
    assert_eq!(result("with"), "status:200 bytes:5", "the credential was sent");
    assert_eq!(result("without"), "status:401 bytes:0", "the origin asks for it");
    let other = result("other");
    assert!(other.starts_with("secret:") && other.contains("denied"), "{other}");

    let everything = format!(
        "{:?} {:?} {:?}",
        run.steps.iter().map(|s| &s.report.journal).collect::<Vec<_>>(),
        host.events(),
        seen.0.lock().expect("not poisoned").iter().map(|(_, s)| (s.name, &s.fields)).collect::<Vec<_>>()
    );
    assert!(everything.contains("http_request"), "the requests were traced: {everything}");
    assert!(!everything.contains(CREDENTIAL) && !everything.contains(&encoded), "the credential leaked: {everything}");
}
