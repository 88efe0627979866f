//! Trace export against a real backend: `capstan run` with the greeter
//! (or the zone scheduler), exporting over OTLP (HTTP, and gRPC) to a
//! Jaeger the harness starts ([`capstan_tests::jaeger`]), on the real API
//! server.
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
use k8s_openapi::api::core::v1::{Node, Pod, ServiceAccount};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::process::Child;

/// How long a Greeting may take to be ready, and its trace to arrive.
const CONVERGE: Duration = Duration::from_secs(90);

/// Where a host sends its traces: the collector's URL and the OTLP
/// protocol (`http/protobuf` or `grpc`), under the service name `service`.
struct Export<'a> {
    endpoint: &'a str,
    protocol: &'a str,
    service: &'a str,
    /// The host's `--log` filter (`CAPSTAN_LOG`).
    log: &'a str,
}

impl<'a> Export<'a> {
    /// OTLP/HTTP, the default protocol, to `endpoint`.
    fn http(endpoint: &'a str, service: &'a str) -> Self {
        Self { endpoint, protocol: "http/protobuf", service, log: "info" }
    }

    /// OTLP/gRPC to `endpoint`.
    fn grpc(endpoint: &'a str, service: &'a str) -> Self {
        Self { endpoint, protocol: "grpc", service, log: "info" }
    }

    /// The same with the host's log filtered to `log`.
    fn logging(self, log: &'a str) -> Self {
        Self { log, ..self }
    }
}

/// A `capstan run` process with one component (the greeter unless said
/// otherwise), exporting traces as `export` says, its JSON log lines in
/// `<dir>.log`.
struct Host {
    dir: PathBuf,
    port: u16,
    _child: Child,
}

impl Host {
    async fn start(kubeconfig: &Path, namespace: &str, export: Export<'_>) -> Result<Self> {
        Self::start_with(kubeconfig, namespace, "greeter", export).await
    }

    async fn start_with(kubeconfig: &Path, namespace: &str, component: &str, export: Export<'_>) -> Result<Self> {
        let dir = std::env::temp_dir().join(format!("capstan-traces-{}", random_suffix(8)));
        std::fs::create_dir_all(&dir)?;
        let wasm = find_component(component).map_err(|e| anyhow::anyhow!("{e}"))?;
        std::fs::copy(wasm, dir.join(format!("{component}.wasm")))?;
        let port = free_port()?;
        let log = std::fs::File::create(dir.with_extension("log"))?;
        let child = tokio::process::Command::new(capstan_binary().await?)
            .args(["run", "--install-crds", "--skip-permission-check", "--components"])
            .arg(&dir)
            .args(["-n", namespace, "--listen", &format!("127.0.0.1:{port}"), "--kubeconfig"])
            .arg(kubeconfig)
            .env("CAPSTAN_LOG", export.log)
            .env("CAPSTAN_LOG_FORMAT", "json")
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", export.endpoint)
            .env("OTEL_EXPORTER_OTLP_PROTOCOL", export.protocol)
            .env("OTEL_SERVICE_NAME", export.service)
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

/// The trace whose root span is `root` with the tag `key` naming the
/// object `name` (`Kind namespace/name` as the host writes an object
/// reference, matched on the name's ending) and, if `event` is given, the
/// tag `event` saying so, once it holds every span in `wanted`.
async fn trace_of(jaeger: &Jaeger, service: &str, root: Root<'_>, wanted: &[&str]) -> Result<Value> {
    let found = wait_for(CONVERGE, || async {
        let traces = jaeger.traces(service).await.ok()?;
        traces.into_iter().find(|t| {
            let spans = t["spans"].as_array().map(Vec::as_slice).unwrap_or_default();
            spans.iter().any(|s| root.is(s)) && wanted.iter().all(|w| spans.iter().any(|s| s["operationName"] == *w))
        })
    })
    .await;
    found.with_context(|| format!("no trace of a {} of {} with the spans {wanted:?} in Jaeger", root.span, root.name))
}

/// What the root span of a trace is: its name, the tag naming the object,
/// the object's name, and the tag `event` if given.
struct Root<'a> {
    span: &'a str,
    key: &'a str,
    name: &'a str,
    event: Option<&'a str>,
}

impl Root<'_> {
    fn is(&self, s: &Value) -> bool {
        s["operationName"] == self.span
            && s["references"].as_array().is_none_or(Vec::is_empty)
            && tag(s, self.key).and_then(Value::as_str).is_some_and(|o| o.ends_with(&format!("/{}", self.name)))
            && self.event.is_none_or(|e| tag(s, "event").and_then(Value::as_str) == Some(e))
    }
}

/// The trace of a reconcile of `name`, of `event` if given (`added`: the
/// first one; later passes, such as the one a child's status change
/// triggers, skip the children that did not change), once it holds every
/// span in `wanted`.
async fn reconcile_trace(
    jaeger: &Jaeger,
    service: &str,
    name: &str,
    event: Option<&str>,
    wanted: &[&str],
) -> Result<Value> {
    trace_of(jaeger, service, Root { span: "reconcile", key: "object", name, event }, wanted).await
}

/// Whether `span` is a child of `parent`.
fn is_child(span: &Value, parent: &Value) -> bool {
    span["references"].as_array().is_some_and(|r| r.iter().any(|r| r["spanID"] == parent["spanID"]))
}

/// The start of a span of the query API, in microseconds since the epoch.
fn start_us(span: &Value) -> i64 {
    span["startTime"].as_i64().unwrap_or_default()
}

#[tokio::test]
async fn a_greetings_reconcile_is_a_trace_in_jaeger_with_the_guest_call_and_its_host_calls() -> Result<()> {
    let plane = ControlPlane::shared().await?;
    let ns = TestNamespace::new("traces").await?;
    let jaeger = Jaeger::start().await?;
    let service = format!("capstan-{}", random_suffix(6));
    let endpoint = jaeger.otlp_endpoint();
    let host = Host::start(plane.kubeconfig_path(), ns.name(), Export::http(&endpoint, &service)).await?;

    create_ready(&ns, "traced").await?;
    let trace = reconcile_trace(
        &jaeger,
        &service,
        "traced",
        Some("added"),
        &["queue_wait", "guest_call", "observe-deployment", "host_call", "apply_child", "write_status", "record_event"],
    )
    .await
    .with_context(|| format!("host log:\n{}\nJaeger log:\n{}", host.log(), jaeger.log()))?;
    let spans = trace["spans"].as_array().context("spans")?;
    let named = |name: &'static str| spans.iter().filter(move |s| s["operationName"] == name);
    let root = spans.iter().find(|s| s["operationName"] == "reconcile").context("the reconcile span")?;

    // The time the Greeting waited in the queue: a span of the reconcile,
    // ending where the reconcile begins.
    let wait = named("queue_wait").next().context("a queue_wait span")?;
    ensure!(is_child(wait, root), "the wait is a child of the reconcile: {wait}");
    ensure!(start_us(wait) <= start_us(root), "the wait begins before the reconcile: {wait} {root}");
    ensure!(wait["duration"].as_i64().is_some_and(|d| d >= 0), "{wait}");

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

    // The greeter opens a span of its own around its read of the
    // Deployment (`ctx.span`), with its attribute ...
    let observe = named("observe-deployment").next().context("the span the guest opened")?;
    ensure!(is_child(observe, guest), "the guest's span is a child of its call: {observe}");
    ensure!(tag(observe, "deployment") == Some(&Value::from("traced-greeter")), "{observe}");
    // ... and the read is a host call inside it.
    let get = named("host_call")
        .find(|s| tag(s, "verb") == Some(&Value::from("get")))
        .with_context(|| format!("a host_call span of the guest's get: {spans:?}"))?;
    ensure!(tag(get, "kind") == Some(&Value::from("apps/v1/Deployment")), "{get}");
    ensure!(tag(get, "namespace") == Some(&Value::from(ns.name())), "{get}");
    ensure!(tag(get, "name") == Some(&Value::from("traced-greeter")), "{get}");
    ensure!(is_child(get, observe), "the host call is a child of the guest's span: {get}");

    // The children the host applied, and the status write.
    let kinds: Vec<_> = named("apply_child").filter_map(|s| tag(s, "kind").and_then(Value::as_str)).collect();
    ensure!(kinds.contains(&"v1/ConfigMap") && kinds.contains(&"apps/v1/Deployment"), "children applied: {kinds:?}");

    // The greeter's Event of the first pass (`Created`, in its outcome):
    // reason, type and the object it is about, not the note.
    let event = named("record_event")
        .find(|s| tag(s, "reason") == Some(&Value::from("Created")))
        .with_context(|| format!("a record_event span of the Created Event: {spans:?}"))?;
    ensure!(tag(event, "type") == Some(&Value::from("Normal")), "{event}");
    ensure!(tag(event, "action") == Some(&Value::from("Reconcile")), "{event}");
    ensure!(
        tag(event, "regarding").and_then(Value::as_str).is_some_and(|r| r.ends_with(&format!("{}/traced", ns.name()))),
        "the Event's span names the Greeting: {event}"
    );
    ensure!(is_child(event, root), "the Event is recorded under the reconcile: {event}");
    // No object contents on any span: neither the Greeting's message nor
    // the Event's note.
    ensure!(!trace.to_string().contains("\"hello\""), "a span carries the object's contents: {trace}");
    ensure!(!trace.to_string().contains("set up"), "a span carries the Event's note: {trace}");

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

/// The Python and JavaScript greeters open the same span as the Rust one,
/// through their SDKs (`ctx.span`, `ctx.log.inSpan`): in Jaeger, a child of
/// the guest call with the read of the Deployment inside it.
#[tokio::test]
async fn the_span_a_python_or_javascript_guest_opens_is_in_its_reconciles_trace() -> Result<()> {
    let plane = ControlPlane::shared().await?;
    let jaeger = Jaeger::start().await?;
    for component in ["greeter-python", "greeter-js"] {
        let ns = TestNamespace::new("traces-polyglot").await?;
        let service = format!("capstan-{}", random_suffix(6));
        let endpoint = jaeger.otlp_endpoint();
        let host =
            Host::start_with(plane.kubeconfig_path(), ns.name(), component, Export::http(&endpoint, &service)).await?;
        create_ready(&ns, "spanned").await.with_context(|| host.log())?;
        let trace = reconcile_trace(&jaeger, &service, "spanned", Some("added"), &["guest_call", "observe-deployment"])
            .await
            .with_context(|| format!("{component}: host log:\n{}", host.log()))?;
        let spans = trace["spans"].as_array().context("spans")?;
        let named = |name: &'static str| spans.iter().find(|s| s["operationName"] == name);
        let guest = named("guest_call").context("the guest call")?;
        let observe = named("observe-deployment").context("the guest's span")?;
        ensure!(is_child(observe, guest), "{component}: the guest's span is a child of its call: {observe}");
        ensure!(tag(observe, "deployment") == Some(&Value::from("spanned-greeter")), "{component}: {observe}");
        let get = spans
            .iter()
            .find(|s| s["operationName"] == "host_call" && tag(s, "verb") == Some(&Value::from("get")))
            .with_context(|| format!("{component}: the read of the Deployment: {spans:?}"))?;
        ensure!(is_child(get, observe), "{component}: the read is inside the guest's span: {get}");
        drop(host);
        ns.cleanup().await?;
    }
    Ok(())
}

#[tokio::test]
async fn a_reconcile_exported_over_grpc_is_a_trace_in_jaeger() -> Result<()> {
    let plane = ControlPlane::shared().await?;
    let ns = TestNamespace::new("traces-grpc").await?;
    let jaeger = Jaeger::start().await?;
    let service = format!("capstan-{}", random_suffix(6));
    // Jaeger's OTLP/gRPC receiver only: nothing listens for HTTP there.
    let endpoint = jaeger.otlp_grpc_endpoint();
    // The host logs warnings only: what is exported does not depend on it.
    let export = Export::grpc(&endpoint, &service).logging("warn");
    let host = Host::start(plane.kubeconfig_path(), ns.name(), export).await?;

    create_ready(&ns, "over-grpc").await?;
    let trace =
        reconcile_trace(&jaeger, &service, "over-grpc", Some("added"), &["queue_wait", "guest_call", "host_call"])
            .await
            .with_context(|| format!("host log:\n{}\nJaeger log:\n{}", host.log(), jaeger.log()))?;
    let spans = trace["spans"].as_array().context("spans")?;
    let guest = spans.iter().find(|s| s["operationName"] == "guest_call").context("a guest_call span")?;
    ensure!(tag(guest, "component") == Some(&Value::from("greeter")), "{guest}");
    // The guest's info line is exported as an event of its call, though the
    // host's log kept out everything below warnings.
    ensure!(
        guest["logs"].as_array().is_some_and(|logs| logs.iter().any(|l| l.to_string().contains("reconciled"))),
        "the guest's log line is an event of its call under --log warn: {guest}"
    );
    ensure!(
        !host.log().contains(r#""level":"INFO""#),
        "the host's log holds info lines under --log warn:\n{}",
        host.log()
    );
    let failed = r#"capstan_trace_spans_dropped_total{reason="export_failed"}"#;
    ensure!(host.counter(failed).await? == 0.0, "spans were dropped over gRPC:\n{}", host.log());
    ns.cleanup().await
}

/// The zone scheduler's spread label, and the label that picks this
/// test's Node.
const ZONE: &str = "topology.kubernetes.io/zone";
const RUN: &str = "capstan.dev/traces-test-run";

#[tokio::test]
async fn a_scheduling_attempt_is_a_trace_with_the_guest_call_the_bind_and_its_event() -> Result<()> {
    let plane = ControlPlane::shared().await?;
    let ns = TestNamespace::new("traces-sched").await?;
    let run = random_suffix(6);
    // A Node of this run (no kubelet: an API object with room), made
    // before the host starts, so its first attempt finds it.
    let nodes: Api<Node> = Api::all(ns.client());
    let node_name = format!("traces-{run}");
    let node: Node = serde_json::from_value(json!({"metadata": {"name": node_name, "labels": {ZONE: "a", RUN: run}}}))?;
    nodes.create(&PostParams::default(), &node).await?;
    let room = json!({"cpu": "2", "memory": "4Gi", "pods": "10"});
    let status = json!({"status": {"capacity": room, "allocatable": room}});
    nodes.patch_status(&node_name, &PatchParams::default(), &Patch::Merge(&status)).await?;
    // Without kube-controller-manager no one makes the default
    // ServiceAccount that admission wants for a Pod.
    let account: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": "default"}}))?;
    let _ = ns.api::<ServiceAccount>().create(&PostParams::default(), &account).await;

    let jaeger = Jaeger::start().await?;
    let service = format!("capstan-{}", random_suffix(6));
    let endpoint = jaeger.otlp_endpoint();
    let export = Export::http(&endpoint, &service);
    let host = Host::start_with(plane.kubeconfig_path(), ns.name(), "zone-scheduler", export).await?;

    // A Pod for this run's Node; tolerating every taint, as the Node has
    // no kubelet to make it Ready.
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "placed"},
        "spec": {
            "schedulerName": "zone-spread",
            "nodeSelector": {RUN: run},
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "app", "image": "registry.example/app:1",
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}],
        },
    }))?;
    let pods: Api<Pod> = ns.api();
    pods.create(&PostParams::default(), &pod).await?;

    let root = Root { span: "schedule", key: "pod", name: "placed", event: None };
    let trace = trace_of(&jaeger, &service, root, &["guest_call", "bind", "record_event"])
        .await
        .with_context(|| format!("host log:\n{}\nJaeger log:\n{}", host.log(), jaeger.log()))?;
    let spans = trace["spans"].as_array().context("spans")?;
    let named = |name: &'static str| spans.iter().find(|s| s["operationName"] == name);
    let schedule = named("schedule").context("the schedule span")?;
    ensure!(tag(schedule, "outcome") == Some(&Value::from("bind")), "{schedule}");
    let guest = named("guest_call").context("a guest_call span")?;
    ensure!(tag(guest, "component") == Some(&Value::from("zone-scheduler")), "{guest}");
    ensure!(tag(guest, "export") == Some(&Value::from("schedule")), "{guest}");
    // The binding, after the guest's decision, in the attempt's trace.
    let bind = named("bind").context("a bind span")?;
    ensure!(is_child(bind, schedule), "the binding is a child of the attempt: {bind}");
    ensure!(tag(bind, "node") == Some(&Value::from(node_name.as_str())), "{bind}");
    ensure!(tag(bind, "pod").and_then(Value::as_str).is_some_and(|p| p.ends_with("/placed")), "{bind}");
    ensure!(tag(bind, "status_code").is_none(), "a binding that went through has no error code: {bind}");
    let event = named("record_event").context("a record_event span")?;
    ensure!(tag(event, "reason") == Some(&Value::from("Scheduled")), "{event}");
    ensure!(!trace.to_string().contains("Successfully assigned"), "a span carries the Event's note: {trace}");

    let _ = nodes.delete(&node_name, &DeleteParams::default()).await;
    ns.cleanup().await
}

#[tokio::test]
async fn a_collector_that_goes_away_costs_only_dropped_spans() -> Result<()> {
    let plane = ControlPlane::shared().await?;
    let ns = TestNamespace::new("traces-gone").await?;
    let mut jaeger = Jaeger::start().await?;
    let service = format!("capstan-{}", random_suffix(6));
    let endpoint = jaeger.otlp_endpoint();
    let host = Host::start(plane.kubeconfig_path(), ns.name(), Export::http(&endpoint, &service)).await?;
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
