//! Trace export against a real backend: `capstan run` with the greeter,
//! exporting over OTLP/HTTP to a Jaeger the harness starts
//! ([`capstan_tests::jaeger`]), on the real API server.
//!
//! Run: `CAPSTAN_E2E_KUBECONFIG=1 KUBECONFIG=… cargo test -p capstan-tests --test traces`
//! (the first run builds Jaeger into `$CAPSTAN_CACHE/jaeger`).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use capstan_host::telemetry::TRACE_ID_ANNOTATION;
use capstan_host::testing::find_component;
use capstan_tests::jaeger::{Jaeger, tag};
use capstan_tests::{
    ControlPlane, TestNamespace, capstan_binary, free_port, greeting, greeting_ready, greetings, http_get,
    random_suffix, wait_for,
};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, PostParams};
use serde_json::Value;
use tokio::process::Child;

/// How long a Greeting may take to be ready, and its trace to arrive.
const CONVERGE: Duration = Duration::from_secs(90);

/// A `capstan run` process with the greeter, exporting traces to
/// `endpoint` as `service`, its JSON log lines in `<dir>.log`.
struct Host {
    dir: PathBuf,
    port: u16,
    _child: Child,
}

impl Host {
    async fn start(kubeconfig: &Path, namespace: &str, endpoint: &str, service: &str) -> Result<Self> {
        let dir = std::env::temp_dir().join(format!("capstan-traces-{}", random_suffix(8)));
        std::fs::create_dir_all(&dir)?;
        let greeter = find_component("greeter").map_err(|e| anyhow::anyhow!("{e}"))?;
        std::fs::copy(greeter, dir.join("greeter.wasm"))?;
        let port = free_port()?;
        let log = std::fs::File::create(dir.with_extension("log"))?;
        let child = tokio::process::Command::new(capstan_binary().await?)
            .args(["run", "--install-crds", "--skip-permission-check", "--components"])
            .arg(&dir)
            .args(["-n", namespace, "--listen", &format!("127.0.0.1:{port}"), "--kubeconfig"])
            .arg(kubeconfig)
            .env("CAPSTAN_LOG", "info")
            .env("CAPSTAN_LOG_FORMAT", "json")
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
            .env("OTEL_SERVICE_NAME", service)
            // Batches every 200 ms (the SDK reads it), not every 5 s.
            .env("OTEL_BSP_SCHEDULE_DELAY", "200")
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()?;
        Ok(Self { dir, port, _child: child })
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.with_extension("log")).unwrap_or_default()
    }

    /// A counter of `/metrics`, 0 while it has no series.
    async fn counter(&self, series: &str) -> Result<f64> {
        let (_, body) = http_get(self.port, "/metrics").await?;
        Ok(body.lines().find_map(|l| l.strip_prefix(series)?.trim().parse().ok()).unwrap_or(0.0))
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn create_ready(ns: &TestNamespace, name: &str) -> Result<()> {
    let api = greetings(&ns.client(), ns.name());
    // The host installs the CRD: retried until it is there.
    wait_for(CONVERGE, || async {
        api.create(&PostParams::default(), &greeting(name, "hello", 1)).await.ok().map(|_| ())
    })
    .await
    .with_context(|| format!("creating Greeting {name}"))?;
    wait_for(CONVERGE, || async { api.get(name).await.ok().filter(|g| greeting_ready(g, 1)).map(|_| ()) })
        .await
        .with_context(|| format!("Greeting {name} ready"))
}

/// The spans of the trace whose root is a reconcile of `object` (`Kind
/// namespace/name` as the host writes an object reference, matched on the
/// name's ending), of `event` if given (`added`: the first one; later
/// passes, such as the one a child's status change triggers, skip the
/// children that did not change), once it holds every span in `wanted`.
async fn reconcile_trace(
    jaeger: &Jaeger,
    service: &str,
    name: &str,
    event: Option<&str>,
    wanted: &[&str],
) -> Result<Value> {
    let found = wait_for(CONVERGE, || async {
        let traces = jaeger.traces(service).await.ok()?;
        traces.into_iter().find(|t| {
            let spans = t["spans"].as_array().map(Vec::as_slice).unwrap_or_default();
            let root = spans.iter().find(|s| {
                s["operationName"] == "reconcile"
                    && s["references"].as_array().is_none_or(Vec::is_empty)
                    && tag(s, "object").and_then(Value::as_str).is_some_and(|o| o.ends_with(&format!("/{name}")))
                    && event.is_none_or(|e| tag(s, "event").and_then(Value::as_str) == Some(e))
            });
            root.is_some() && wanted.iter().all(|w| spans.iter().any(|s| s["operationName"] == *w))
        })
    })
    .await;
    found.with_context(|| format!("no trace of a reconcile of {name} with the spans {wanted:?} in Jaeger"))
}

#[tokio::test]
async fn a_greetings_reconcile_is_a_trace_in_jaeger_with_the_guest_call_and_its_host_calls() -> Result<()> {
    let plane = ControlPlane::shared().await?;
    let ns = TestNamespace::new("traces").await?;
    let jaeger = Jaeger::start().await?;
    let service = format!("capstan-{}", random_suffix(6));
    let host = Host::start(plane.kubeconfig_path(), ns.name(), &jaeger.otlp_endpoint(), &service).await?;

    create_ready(&ns, "traced").await?;
    let trace = reconcile_trace(
        &jaeger,
        &service,
        "traced",
        Some("added"),
        &["guest_call", "host_call", "apply_child", "write_status"],
    )
    .await
    .with_context(|| format!("host log:\n{}\nJaeger log:\n{}", host.log(), jaeger.log()))?;
    let spans = trace["spans"].as_array().context("spans")?;
    let named = |name: &'static str| spans.iter().filter(move |s| s["operationName"] == name);

    let guest = named("guest_call").next().context("a guest_call span")?;
    ensure!(tag(guest, "component") == Some(&Value::from("greeter")), "the guest call names the component: {guest}");
    ensure!(
        tag(guest, "digest").and_then(Value::as_str).is_some_and(|d| d.len() == 64),
        "the guest call carries the digest: {guest}"
    );
    ensure!(tag(guest, "contract").is_some(), "the guest call carries the contract: {guest}");
    // The greeter's log line is an event of the guest call.
    ensure!(
        guest["logs"].as_array().is_some_and(|logs| logs.iter().any(|l| l.to_string().contains("reconciled"))),
        "the guest's log line is an event of its call: {guest}"
    );

    // The greeter reads its Deployment: a host call under the guest call.
    let get = named("host_call")
        .find(|s| tag(s, "verb") == Some(&Value::from("get")))
        .with_context(|| format!("a host_call span of the guest's get: {spans:?}"))?;
    ensure!(tag(get, "kind") == Some(&Value::from("apps/v1/Deployment")), "{get}");
    ensure!(tag(get, "namespace") == Some(&Value::from(ns.name())), "{get}");
    ensure!(tag(get, "name") == Some(&Value::from("traced-greeter")), "{get}");
    let parent = get["references"][0]["spanID"].as_str().context("the host call has a parent")?;
    ensure!(parent == guest["spanID"].as_str().context("spanID")?, "the host call is a child of the guest call");

    // The children the host applied, and the status write.
    let kinds: Vec<_> = named("apply_child").filter_map(|s| tag(s, "kind").and_then(Value::as_str)).collect();
    ensure!(kinds.contains(&"v1/ConfigMap") && kinds.contains(&"apps/v1/Deployment"), "children applied: {kinds:?}");
    // No object contents on any span: the Greeting's message is not there.
    ensure!(!trace.to_string().contains("\"hello\""), "a span carries the object's contents: {trace}");

    // The trace id is in the host's JSON log lines of that reconcile.
    let trace_id = trace["traceID"].as_str().context("traceID")?;
    let log = host.log();
    ensure!(
        log.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).any(|l| l.to_string().contains(trace_id)),
        "no JSON log line carries the trace id {trace_id}:\n{log}"
    );

    // The greeter's Event about the Greeting names the trace it was
    // recorded in, and that trace is in Jaeger: a reconcile of the Greeting.
    let events: Api<Event> = Api::namespaced(ns.client(), ns.name());
    let about = |e: &Event| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("traced");
    let annotated = wait_for(CONVERGE, || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        list.items.into_iter().filter(|e| about(e)).find_map(|e| e.metadata.annotations?.remove(TRACE_ID_ANNOTATION))
    })
    .await
    .context("no Event about the Greeting carries a trace id")?;
    let traces = jaeger.traces(&service).await?;
    let traced = traces.iter().find(|t| t["traceID"] == annotated.as_str());
    let root = traced.and_then(|t| t["spans"].as_array()?.iter().find(|s| s["operationName"] == "reconcile"));
    ensure!(
        root.and_then(|s| tag(s, "object")).and_then(Value::as_str).is_some_and(|o| o.ends_with("/traced")),
        "the Event's trace {annotated} is not a reconcile of the Greeting in Jaeger"
    );
    ns.cleanup().await
}

#[tokio::test]
async fn a_collector_that_goes_away_costs_only_dropped_spans() -> Result<()> {
    let plane = ControlPlane::shared().await?;
    let ns = TestNamespace::new("traces-gone").await?;
    let mut jaeger = Jaeger::start().await?;
    let service = format!("capstan-{}", random_suffix(6));
    let host = Host::start(plane.kubeconfig_path(), ns.name(), &jaeger.otlp_endpoint(), &service).await?;
    create_ready(&ns, "before").await?;
    reconcile_trace(&jaeger, &service, "before", None, &["guest_call"]).await?;

    jaeger.stop().await;
    let dropped = r#"capstan_trace_spans_dropped_total{reason="export_failed"}"#;
    // The host keeps reconciling without its collector ...
    create_ready(&ns, "during").await.with_context(|| host.log())?;
    // ... and counts what it could not send.
    wait_for(CONVERGE, || async { host.counter(dropped).await.ok().filter(|n| *n > 0.0) })
        .await
        .with_context(|| format!("no {dropped}:\n{}", host.log()))?;

    // The collector back: new traces arrive again.
    jaeger.resume().await?;
    create_ready(&ns, "after").await?;
    reconcile_trace(&jaeger, &service, "after", None, &["guest_call"]).await.with_context(|| host.log())?;
    ns.cleanup().await
}
