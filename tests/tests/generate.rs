//! What `capstan gen` generates, proven on a real kube-apiserver: the
//! greeter's manifest applies by server-side apply, its CRD is served with
//! its printer columns, the host's pod template passes the `restricted` Pod
//! Security Standard, the generated RBAC allows what the greeter needs and
//! nothing else, and the host converges running as the generated
//! ServiceAccount. The generated NetworkPolicy (`--network-policy`) is
//! accepted and stored as generated, and so is a Deployment exporting
//! traces (`--otlp-endpoint`).
//!
//! Cluster-scoped names (ClusterRoles and bindings) are made unique per test
//! with `--name`, and deleted at the end; the CRD is shared with the other
//! suites and stays.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use capstan_host::runtime::component::Loader;
use capstan_host::runtime::engine::{Engine, EngineConfig};
use capstan_host::runtime::invocation::Runtime;
use capstan_host::runtime::limits::Limits;
use capstan_host::serve::host::HostBuilder;
use capstan_host::testing::{default_cache_dir, find_component};
use capstan_host::tooling::generate::{self, Component, Delivery, Options};
use capstan_tests::{ControlPlane, FIELD_MANAGER, TestNamespace, install_crd, token_for_service_account, wait_for};
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference, Pod, Secret};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use kube::discovery::{self, Scope};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(30);

/// The greeter, loaded the way `capstan gen` loads it.
async fn greeter() -> Result<Component> {
    built_component("greeter").await
}

/// A built component (`greeter`, `greeter-v2`, …), loaded the way `capstan
/// gen` loads it.
async fn built_component(stem: &str) -> Result<Component> {
    let path = find_component(stem).map_err(anyhow::Error::msg)?;
    let engine = Engine::new(EngineConfig::default())?;
    let runtime = Runtime::new(&engine, Limits::default()).map_err(|e| anyhow::anyhow!("{e:#}"))?;
    let wasm = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    let loaded = Loader::new(runtime, default_cache_dir()).load_bytes(&path, wasm.clone()).await?;
    Ok(Component::new((*loaded.manifest).clone(), wasm))
}

fn gvk_of(object: &Value) -> Result<GroupVersionKind> {
    let api_version = object["apiVersion"].as_str().context("no apiVersion")?;
    let kind = object["kind"].as_str().context("no kind")?;
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    Ok(GroupVersionKind::gvk(group, version, kind))
}

/// Cluster-scoped objects an installation created (CRDs and Namespaces
/// aside), to delete at the end.
#[derive(Default)]
struct Installed {
    cluster_scoped: Vec<(ApiResource, String)>,
}

impl Installed {
    async fn remove(self, client: &Client) -> Result<()> {
        for (resource, name) in self.cluster_scoped {
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e).with_context(|| format!("deleting {} {name}", resource.kind)),
            }
        }
        Ok(())
    }
}

/// Server-side applies `objects` in order, finding each kind by discovery;
/// CRDs through the harness, which waits until they are established and
/// served.
async fn apply_all(client: &Client, objects: &[Value]) -> Result<Installed> {
    let mut installed = Installed::default();
    for object in objects {
        let gvk = gvk_of(object)?;
        if gvk.kind == "CustomResourceDefinition" {
            install_crd(client, object.clone()).await?;
            continue;
        }
        let (resource, caps) = discovery::pinned_kind(client, &gvk).await?;
        let obj: DynamicObject = serde_json::from_value(object.clone())?;
        let name = obj.metadata.name.clone().context("no name")?;
        let api: Api<DynamicObject> = match caps.scope {
            Scope::Namespaced => Api::namespaced_with(
                client.clone(),
                obj.metadata.namespace.as_deref().context("no namespace")?,
                &resource,
            ),
            Scope::Cluster => Api::all_with(client.clone(), &resource),
        };
        api.patch(&name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&obj))
            .await
            .with_context(|| format!("server-side apply of {} {name}", gvk.kind))?;
        if caps.scope == Scope::Cluster && gvk.kind != "Namespace" {
            installed.cluster_scoped.push((resource, name));
        }
    }
    Ok(installed)
}

fn greetings(client: Client, namespace: &str) -> Api<DynamicObject> {
    capstan_tests::greetings(&client, namespace)
}

fn greeting(name: &str, message: &str, replicas: i64) -> Result<DynamicObject> {
    Ok(capstan_tests::greeting(name, message, replicas))
}

fn code<T>(result: &kube::Result<T>) -> Option<u16> {
    match result {
        Err(kube::Error::Api(status)) => Some(status.code),
        _ => None,
    }
}

/// Runs kubectl against the shared control plane; returns stdout.
async fn kubectl(plane: &ControlPlane, args: &[&str]) -> Result<String> {
    let out = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(plane.kubeconfig_path())
        .args(args)
        .output()
        .await
        .context("running kubectl (is it on PATH?)")?;
    ensure!(out.status.success(), "kubectl {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_generated_manifest_for_the_greeter_applies_and_its_crd_serves_the_printer_columns() -> Result<()> {
    let plane = ControlPlane::shared().await?;
    let ns = TestNamespace::new("gen-manifest").await?;
    let client = ns.client();
    let name = ns.name().to_owned();
    let options = Options::default()
        .namespace(ns.name())
        .name(&name)
        .image("registry.example/capstan-greeter:test")
        .delivery(Delivery::Image);
    let objects = generate::manifest(&[greeter().await?], &options)?;
    let installed = apply_all(&client, &objects).await?;

    // Everything is there, as generated.
    let deployment: Deployment = ns.api().get(&name).await?;
    assert_eq!(deployment.spec.replicas, Some(1));
    let template = deployment.spec.template.spec.clone().context("pod spec")?;
    assert_eq!(template.service_account_name.as_deref(), Some(name.as_str()));

    // The pod template passes the restricted Pod Security Standard the
    // Namespace enforces (checked by dry-run; no kubelet runs pods here).
    let pods: Api<Pod> = ns.api();
    let dry_run = PostParams { dry_run: true, ..PostParams::default() };
    let mut privileged = Pod {
        metadata: ObjectMeta { name: Some("pss-privileged".to_owned()), ..ObjectMeta::default() },
        spec: Some(template.clone()),
        ..Pod::default()
    };
    if let Some(spec) = privileged.spec.as_mut() {
        spec.security_context = None;
        spec.containers[0].security_context = None;
    }
    wait_for(TIMEOUT, || async { (code(&pods.create(&dry_run, &privileged).await) == Some(403)).then_some(()) })
        .await
        .context("the Namespace does not enforce the restricted Pod Security Standard")?;
    let pod = Pod {
        metadata: ObjectMeta { name: Some("pss-generated".to_owned()), ..ObjectMeta::default() },
        spec: Some(template),
        ..Pod::default()
    };
    pods.create(&dry_run, &pod).await.context("the generated pod template violates the restricted standard")?;

    // The CRD serves its printer columns.
    greetings(client.clone(), ns.name()).create(&PostParams::default(), &greeting("hello", "hi", 2)?).await?;
    let table = kubectl(plane, &["get", "greetings", "-n", ns.name(), "-o", "wide"]).await?;
    let mut lines = table.lines();
    let header: Vec<&str> = lines.next().context("no header")?.split_whitespace().collect();
    assert_eq!(header, ["NAME", "MESSAGE", "REPLICAS", "READY", "AGE"], "{table}");
    let row: Vec<&str> = lines.next().context("no row")?.split_whitespace().collect();
    assert_eq!(row[..3], ["hello", "hi", "2"], "{table}");
    let short = kubectl(plane, &["get", "greet", "-n", ns.name(), "-o", "name"]).await?;
    assert_eq!(short.trim(), "greeting.examples.capstan.dev/hello", "short name");

    installed.remove(&client).await?;
    ns.cleanup().await
}

/// Installs the greeter's CRD and generated RBAC (with `--install-crds`)
/// for a host named after the namespace, and with `watching` for a host
/// that watches only that namespace (`--watch-namespace`); returns a
/// client that authenticates as its ServiceAccount, once its roles are in
/// effect.
async fn install_rbac(ns: &TestNamespace, watching: bool) -> Result<(Installed, Client)> {
    let plane = ControlPlane::shared().await?;
    let greeter = greeter().await?;
    let mut options = Options::default().namespace(ns.name()).name(ns.name()).install_crds(true);
    if watching {
        options = options.watch_namespace(ns.name());
    }
    let mut objects = generate::crds(std::slice::from_ref(&greeter))?;
    objects.extend(generate::rbac(&[greeter], &options)?);
    let installed = apply_all(&ns.client(), &objects).await?;
    let token = token_for_service_account(&ns.client(), ns.name(), ns.name()).await?;
    let sa = plane.client_with_token(&token)?;
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("examples.capstan.dev", "v1alpha1", "Greeting"),
        "greetings",
    );
    let all: Api<DynamicObject> = if watching {
        Api::namespaced_with(sa.clone(), ns.name(), &resource)
    } else {
        Api::all_with(sa.clone(), &resource)
    };
    // The RBAC authorizer reads each role and binding from an informer
    // cache: wait until all three of them (one read each) are in effect.
    let crds: Api<CustomResourceDefinition> = Api::all(sa.clone());
    let leases: Api<Lease> = Api::namespaced(sa.clone(), ns.name());
    wait_for(Duration::from_secs(10), || async {
        let lp = ListParams::default();
        (all.list(&lp).await.is_ok() && crds.list(&lp).await.is_ok() && leases.list(&lp).await.is_ok()).then_some(())
    })
    .await
    .context("the ServiceAccount cannot read Greetings, CRDs and Leases with the generated RBAC")?;
    Ok((installed, sa))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_generated_rbac_lets_the_service_account_do_what_the_greeter_needs_and_nothing_else() -> Result<()> {
    let ns = TestNamespace::new("gen-rbac").await?;
    let (installed, sa) = install_rbac(&ns, false).await?;
    let admin = ns.client();
    let n = ns.name();
    let pp = PostParams::default();
    greetings(admin.clone(), n).create(&pp, &greeting("hello", "hi", 1)?).await?;

    // The primary kind: read, finalizers, status; never create.
    let as_sa = greetings(sa.clone(), n);
    as_sa.get("hello").await.context("get greetings")?;
    let finalizer = json!({"metadata": {"finalizers": ["examples.capstan.dev/greeter-cleanup"]}});
    as_sa.patch("hello", &PatchParams::default(), &Patch::Merge(&finalizer)).await.context("patch greetings")?;
    let status = json!({"status": {"message": "hi", "replicas": 0, "conditions": []}});
    as_sa.patch_status("hello", &PatchParams::default(), &Patch::Merge(&status)).await.context("patch status")?;
    assert_eq!(code(&as_sa.create(&pp, &greeting("other", "no", 1)?).await), Some(403), "create greetings");

    // Owned kinds: create, server-side apply, delete.
    let cms: Api<ConfigMap> = Api::namespaced(sa.clone(), n);
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "child"}, "data": {"a": "b"}}))?;
    cms.create(&pp, &cm).await.context("create configmaps")?;
    let apply = PatchParams::apply("capstan-greeter").force();
    let cm_patch = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "child"}, "data": {"a": "c"}});
    cms.patch("child", &apply, &Patch::Apply(&cm_patch)).await.context("patch configmaps")?;
    cms.delete("child", &DeleteParams::default()).await.context("delete configmaps")?;
    let deployments: Api<Deployment> = Api::namespaced(sa.clone(), n);
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "child"},
        "spec": {
            "selector": {"matchLabels": {"app": "child"}},
            "template": {
                "metadata": {"labels": {"app": "child"}},
                "spec": {"containers": [{"name": "c", "image": "busybox:1.37"}]},
            },
        },
    }))?;
    deployments.create(&pp, &deployment).await.context("create deployments")?;
    let scale =
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "child"}, "spec": {"replicas": 3}});
    deployments.patch("child", &apply, &Patch::Apply(&scale)).await.context("patch deployments")?;

    // Events, Leases in the host's namespace only.
    let event = Event {
        metadata: ObjectMeta { generate_name: Some("hello-".to_owned()), ..ObjectMeta::default() },
        event_time: Some(MicroTime(Timestamp::now())),
        reporting_controller: Some("capstan.dev/greeter".to_owned()),
        reporting_instance: Some("test".to_owned()),
        action: Some("Reconcile".to_owned()),
        reason: Some("Created".to_owned()),
        type_: Some("Normal".to_owned()),
        regarding: Some(ObjectReference {
            api_version: Some("examples.capstan.dev/v1alpha1".to_owned()),
            kind: Some("Greeting".to_owned()),
            name: Some("hello".to_owned()),
            namespace: Some(n.to_owned()),
            ..ObjectReference::default()
        }),
        ..Event::default()
    };
    let created = Api::<Event>::namespaced(sa.clone(), n).create(&pp, &event).await;
    ensure!(created.is_ok(), "create events: {created:?}");
    let lease: Lease = serde_json::from_value(json!({"metadata": {"name": "greeter"}}))?;
    Api::<Lease>::namespaced(sa.clone(), n).create(&pp, &lease).await.context("create leases")?;
    assert_eq!(code(&Api::<Lease>::namespaced(sa.clone(), "default").create(&pp, &lease).await), Some(403));

    // Its own CRD may be patched (--install-crds), no other.
    let crds: Api<DynamicObject> = Api::all_with(
        sa.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "customresourcedefinitions",
        ),
    );
    let dry_apply = PatchParams::apply("capstan").force().dry_run();
    let own = crds.get("greetings.examples.capstan.dev").await.context("get crds")?;
    let own_patch = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "greetings.examples.capstan.dev", "labels": {"checked": "yes"}},
    });
    crds.patch("greetings.examples.capstan.dev", &dry_apply, &Patch::Apply(&own_patch))
        .await
        .context("patch own crd")?;
    ensure!(own.metadata.name.is_some());
    let other = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com", "labels": {"checked": "yes"}},
    });
    assert_eq!(code(&crds.patch("widgets.example.com", &dry_apply, &Patch::Apply(&other)).await), Some(403));

    // And nothing else.
    let secrets: Api<Secret> = Api::namespaced(sa.clone(), n);
    assert_eq!(code(&secrets.list(&ListParams::default()).await), Some(403), "list secrets");
    assert_eq!(code(&Api::<Secret>::all(sa.clone()).list(&ListParams::default()).await), Some(403));
    let pods: Api<Pod> = Api::namespaced(sa, n);
    assert_eq!(code(&pods.list(&ListParams::default()).await), Some(403), "list pods");

    // No host runs here to remove the finalizer: remove it, or the
    // namespace would never finish terminating.
    let no_finalizers = json!({"metadata": {"finalizers": null}});
    greetings(admin.clone(), n).patch("hello", &PatchParams::default(), &Patch::Merge(&no_finalizers)).await?;
    installed.remove(&admin).await?;
    ns.cleanup().await
}

#[tokio::test(flavor = "multi_thread")]
async fn the_host_running_as_the_generated_service_account_converges_the_greeter() -> Result<()> {
    let ns = TestNamespace::new("gen-host").await?;
    // The RBAC for a host that watches only this namespace: Roles here,
    // nothing namespaced anywhere else.
    let (installed, sa) = install_rbac(&ns, true).await?;
    let admin = ns.client();
    let elsewhere: Api<ConfigMap> = Api::namespaced(sa.clone(), "default");
    assert_eq!(code(&elsewhere.list(&ListParams::default()).await), Some(403), "ConfigMaps outside the namespace");
    let greetings_everywhere: Api<DynamicObject> = Api::all_with(
        sa.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("examples.capstan.dev", "v1alpha1", "Greeting"),
            "greetings",
        ),
    );
    assert_eq!(code(&greetings_everywhere.list(&ListParams::default()).await), Some(403), "Greetings everywhere");
    let greeter = find_component("greeter").map_err(anyhow::Error::msg)?;
    // The host reviews each component's permissions against its own: the
    // fixture also watches Secrets, which the greeter's RBAC does not allow,
    // and is rejected before it runs, naming what is missing; for the
    // greeter, the generated RBAC is enough.
    let refused = HostBuilder::new(sa.clone())
        .namespace(Some(ns.name().to_owned()))
        .check_permissions(true)
        .component(find_component("fixture").map_err(anyhow::Error::msg)?)
        .start()
        .await;
    match refused {
        Err(e @ capstan_host::serve::host::Error::Access { .. }) => {
            let message = e.to_string();
            let place = format!("(core) in namespace {}", ns.name());
            for verb in ["get", "list", "watch"] {
                assert!(message.contains(&format!("{verb} secrets {place}")), "{message}");
            }
            assert!(!message.contains("configmaps"), "ConfigMaps are granted: {message}");
        }
        other => bail!("the fixture was not rejected for its permissions: {other:?}"),
    }
    let host = HostBuilder::new(sa)
        .namespace(Some(ns.name().to_owned()))
        .install_crds(true)
        .check_permissions(true)
        .component(greeter)
        .start()
        .await
        .context("the host does not start with the generated RBAC")?;

    let api = greetings(admin.clone(), ns.name());
    api.create(&PostParams::default(), &greeting("hello", "hi", 2)?).await?;
    let ready = |g: &DynamicObject| {
        let status = &g.data["status"];
        status["observedGeneration"] == json!(1)
            && status["conditions"]
                .as_array()
                .is_some_and(|c| c.iter().any(|c| c["type"] == json!("Ready") && c["status"] == json!("True")))
    };
    wait_for(TIMEOUT, || async { api.get("hello").await.ok().filter(ready) })
        .await
        .context("the Greeting did not become Ready")?;
    let cm: ConfigMap = ns.api().get("hello-greeting").await?;
    assert_eq!(cm.data.and_then(|d| d.get("message").cloned()).as_deref(), Some("hi"));
    let deployment: Deployment = ns.api().get("hello-greeter").await?;
    assert_eq!(deployment.spec.replicas, Some(2));
    wait_for(TIMEOUT, || async {
        let events = Api::<Event>::namespaced(admin.clone(), ns.name()).list(&ListParams::default()).await.ok()?;
        events.items.iter().any(|e| e.reason.as_deref() == Some("Created")).then_some(())
    })
    .await
    .context("no Created event")?;

    api.delete("hello", &DeleteParams::default()).await?;
    wait_for(TIMEOUT, || async { api.get_opt("hello").await.ok().and_then(|g| g.is_none().then_some(())) })
        .await
        .context("the finalizer was not removed")?;
    // Converged, children, status, Events and the finalizer's removal all
    // went through. A reconcile may still have failed transiently (a 409
    // conflict on the Greeting is retried): only a denial would be RBAC's.
    let counts = host.controllers()[0].counts();
    let last_error = counts.last_error.clone().unwrap_or_default().to_lowercase();
    if ["forbidden", "denied", "not granted"].iter().any(|w| last_error.contains(w)) {
        bail!("a reconcile was denied: {counts:?}");
    }
    host.shutdown().await;
    installed.remove(&admin).await?;
    ns.cleanup().await
}

/// The objects `kubectl kustomize` renders from `deploy/examples/<example>`.
async fn render_overlay(example: &str) -> Result<Vec<Value>> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/examples").join(example);
    let out = tokio::process::Command::new("kubectl")
        .arg("kustomize")
        .arg(&dir)
        .output()
        .await
        .context("running kubectl kustomize")?;
    ensure!(out.status.success(), "kubectl kustomize failed: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|doc| serde::Deserialize::deserialize(doc).map_err(anyhow::Error::from))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_committed_greeter_overlay_renders_with_kustomize() -> Result<()> {
    let objects = render_overlay("greeter").await?;
    let names: Vec<String> = objects
        .iter()
        .map(|o| format!("{}/{}", o["kind"].as_str().unwrap_or("?"), o["metadata"]["name"].as_str().unwrap_or("?")))
        .collect();
    for expected in [
        "Namespace/capstan-system",
        "CustomResourceDefinition/greetings.examples.capstan.dev",
        "ServiceAccount/capstan",
        "ClusterRole/capstan",
        "ClusterRole/capstan-greeter",
        "ClusterRoleBinding/capstan-greeter",
        "Deployment/capstan",
    ] {
        ensure!(names.iter().any(|n| n == expected), "{expected} missing from {names:?}");
    }
    // Nothing published is named: placeholders under the reserved
    // `registry.invalid`, to replace with your own.
    let deployment = objects.iter().find(|o| o["kind"] == "Deployment").context("no Deployment")?;
    let pod = &deployment["spec"]["template"]["spec"];
    let image = pod["containers"][0]["image"].as_str().context("no image")?;
    ensure!(image.starts_with("registry.invalid/capstan:"), "the overlay's image: {image}");
    ensure!(
        pod["volumes"].as_array().is_some_and(|v| v.iter().any(|v| v["configMap"]["name"] == "capstan-components"))
    );
    let cm = objects.iter().find(|o| o["kind"] == "ConfigMap").context("no components ConfigMap")?;
    let reference = cm["data"]["greeter.oci"].as_str().context("no greeter.oci")?;
    ensure!(reference.starts_with("oci://registry.invalid/capstan/greeter:"), "{reference}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_committed_webhooks_overlay_renders_the_service_the_configurations_and_the_host_flags() -> Result<()> {
    let objects = render_overlay("greeter-webhooks").await?;
    let find = |kind: &str| objects.iter().find(|o| o["kind"] == kind).with_context(|| format!("no {kind}"));
    let service = find("Service")?;
    ensure!(service["metadata"]["name"] == "capstan-webhooks", "{service}");
    for kind in ["ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"] {
        let config = find(kind)?;
        let target = &config["webhooks"][0]["clientConfig"]["service"];
        ensure!(target["name"] == "capstan-webhooks" && target["namespace"] == "capstan-system", "{config}");
    }
    let crd = find("CustomResourceDefinition")?;
    ensure!(crd["spec"]["conversion"]["strategy"] == "Webhook", "{crd}");
    let container = &find("Deployment")?["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<&str> = container["args"].as_array().context("args")?.iter().filter_map(Value::as_str).collect();
    ensure!(args.contains(&"--install-webhooks") && args.contains(&"--leader-elect"), "{args:?}");
    let mut ports: Vec<&str> =
        container["ports"].as_array().context("ports")?.iter().filter_map(|p| p["name"].as_str()).collect();
    ports.sort_unstable();
    ensure!(ports == ["http", "webhooks"], "the base's port is kept and the webhooks' added: {ports:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_permission_removed_from_the_generated_role_surfaces_as_a_403() -> Result<()> {
    use k8s_openapi::api::rbac::v1::ClusterRole;
    let ns = TestNamespace::new("gen-403").await?;
    let (installed, sa) = install_rbac(&ns, false).await?;
    let admin = ns.client();
    // Take `configmaps` out of whichever generated ClusterRole grants it.
    let roles: Api<ClusterRole> = Api::all(admin.clone());
    let mut role = roles
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|r| r.metadata.name.as_deref().is_some_and(|n| n.starts_with(ns.name())))
        .find(|r| r.rules.iter().flatten().any(|rule| rule.resources.iter().flatten().any(|x| x == "configmaps")))
        .context("no generated ClusterRole grants configmaps")?;
    let name = role.metadata.name.clone().context("role name")?;
    if let Some(rules) = role.rules.as_mut() {
        for rule in rules.iter_mut() {
            if let Some(resources) = rule.resources.as_mut() {
                resources.retain(|r| r != "configmaps");
            }
        }
        rules.retain(|rule| rule.resources.as_ref().is_none_or(|r| !r.is_empty()));
    }
    role.metadata.managed_fields = None;
    roles.replace(&name, &PostParams::default(), &role).await?;
    let sa_cms: Api<ConfigMap> = Api::namespaced(sa.clone(), ns.name());
    wait_for(Duration::from_secs(10), || async { sa_cms.list(&ListParams::default()).await.err().map(|_| ()) })
        .await
        .context("the ServiceAccount can still list configmaps")?;

    let host = HostBuilder::new(sa)
        .namespace(Some(ns.name().to_owned()))
        .component(find_component("greeter").map_err(anyhow::Error::msg)?)
        .start()
        .await?;
    // Without `configmaps` the host cannot even watch its owned kind: the
    // controller reports the 403 rather than reconciling half-blind.
    let api = greetings(admin.clone(), ns.name());
    api.create(&PostParams::default(), &greeting("hello", "hi", 1)?).await?;
    let reported = wait_for(TIMEOUT, || async {
        host.controllers()[0].counts().last_error.filter(|e| e.contains("configmaps") && e.contains("forbidden"))
    })
    .await
    .context("the host did not report the 403")?;
    assert_eq!(host.controllers()[0].state(), capstan_host::control::controller::State::Syncing, "{reported}");
    let g = api.get("hello").await?;
    assert!(g.data.get("status").is_none_or(|s| s.get("observedGeneration").is_none()), "must not converge: {g:?}");
    assert!(ns.api::<ConfigMap>().get_opt("hello-greeting").await?.is_none());
    host.shutdown().await;
    installed.remove(&admin).await?;
    ns.cleanup().await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_project_made_by_capstan_new_runs_on_the_control_plane() -> Result<()> {
    use capstan_host::tooling::scaffold::{self, Options as NewOptions, Sdk};
    let ns = TestNamespace::new("gen-new").await?;
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..").canonicalize()?;
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map(std::path::PathBuf::from).unwrap_or_else(|| repo.join("target"));
    let dir = target.join("tmp").join(format!("capstan-new-e2e-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let project = scaffold::create(
        &NewOptions::new("NewE2e").dir(&dir).sdk(Sdk::Path(repo.join("guest-sdk"))).lockfile(repo.join("Cargo.lock")),
    )?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let built = tokio::process::Command::new(cargo)
        .args(["build", "--quiet", "--release", "--target", "wasm32-wasip2"])
        .current_dir(&dir)
        .env("CARGO_TARGET_DIR", &target)
        .status()
        .await?;
    ensure!(built.success(), "the scaffolded project does not build");
    let wasm = target.join("wasm32-wasip2/release/new_e2e.wasm");

    let host = HostBuilder::new(ns.client())
        .namespace(Some(ns.name().to_owned()))
        .install_crds(true)
        .component(&wasm)
        .start()
        .await?;
    let gvk = GroupVersionKind::gvk(&project.group, "v1alpha1", &project.kind);
    let api: Api<DynamicObject> =
        Api::namespaced_with(ns.client(), ns.name(), &ApiResource::from_gvk_with_plural(&gvk, &project.plural));
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{}/v1alpha1", project.group),
        "kind": project.kind,
        "metadata": {"name": "hello"},
        "spec": {"message": "scaffolded"},
    }))?;
    api.create(&PostParams::default(), &object).await?;
    wait_for(TIMEOUT, || async {
        api.get("hello").await.ok().filter(|o| o.data["status"]["observedGeneration"] == json!(1))
    })
    .await
    .context("the scaffolded controller did not reconcile")?;
    let cm: ConfigMap = ns.api().get("hello-message").await?;
    assert_eq!(cm.data.and_then(|d| d.get("message").cloned()).as_deref(), Some("scaffolded"));
    host.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
    ns.cleanup().await
}

/// Writes `files` into `dir` the way the kubelet projects a ConfigMap volume:
/// a new timestamped folder, `..data` pointing at it (swapped atomically by
/// a rename), and one symlink per key through `..data`.
fn project_like_the_kubelet(dir: &std::path::Path, files: &BTreeMap<String, ByteString>) -> Result<()> {
    let version = format!("..{}", capstan_tests::random_suffix(8));
    std::fs::create_dir_all(dir.join(&version))?;
    for (key, bytes) in files {
        std::fs::write(dir.join(&version).join(key), &bytes.0)?;
    }
    let _ = std::fs::remove_file(dir.join("..data_tmp"));
    std::os::unix::fs::symlink(&version, dir.join("..data_tmp"))?;
    std::fs::rename(dir.join("..data_tmp"), dir.join("..data"))?;
    for key in files.keys() {
        let link = dir.join(key);
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(std::path::Path::new("..data").join(key), &link)?;
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn components_delivered_by_config_map_run_and_a_new_config_map_hot_loads() -> Result<()> {
    ControlPlane::shared().await?;
    let ns = TestNamespace::new("gen-cm").await?;
    // Applied server-side: the greeter (0.46 MB gzipped) fits 1 MiB.
    let options = Options::default().namespace(ns.name()).name(ns.name()).server_side(true);
    let configmaps: Api<ConfigMap> = ns.api();
    let cm_name = format!("{}-components", ns.name());
    // Generate the ConfigMap, apply it, read it back as the kubelet would.
    let deliver = |stem: &'static str| {
        let (options, configmaps, cm_name) = (options.clone(), configmaps.clone(), cm_name.clone());
        let client = ns.client();
        async move {
            let objects = generate::manifest(&[built_component(stem).await?], &options)?;
            let cm = objects.into_iter().find(|o| o["kind"] == "ConfigMap").context("a components ConfigMap")?;
            apply_all(&client, &[cm]).await?;
            let applied = configmaps.get(&cm_name).await?;
            applied.binary_data.context("binaryData")
        }
    };
    let dir = std::env::temp_dir().join(format!("capstan-{}", ns.name()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let files = deliver("greeter").await?;
    assert_eq!(files.keys().collect::<Vec<_>>(), ["greeter.wasm.gz"]);
    project_like_the_kubelet(&dir, &files)?;

    let host = HostBuilder::new(ns.client())
        .namespace(Some(ns.name().to_owned()))
        .install_crds(true)
        .components_dir(Some(dir.clone()))
        .start()
        .await?;
    let api = greetings(ns.client(), ns.name());
    api.create(&PostParams::default(), &greeting("hello", "from a ConfigMap", 1)?).await?;
    let version = || async {
        let cm: ConfigMap = configmaps.get("hello-greeting").await.ok()?;
        Some(cm.data.unwrap_or_default().get("greeter-version").cloned())
    };
    assert_eq!(wait_for(TIMEOUT, version).await?, None, "v1 from the ConfigMap reconciles");

    // `kubectl apply` of the new version's ConfigMap; the kubelet swaps the
    // volume; the host hot-loads it.
    project_like_the_kubelet(&dir, &deliver("greeter-v2").await?)?;
    wait_for(TIMEOUT, || async { version().await.flatten().filter(|v| v == "2") })
        .await
        .context("v2 from the new ConfigMap converges")?;
    let status = host.status();
    assert_eq!(status.len(), 1, "one component file: {status:?}");
    assert_eq!((status[0].swaps, status[0].failed), (1, 0), "{status:?}");

    // Gone before the host stops, so that the finalizer does not hold the
    // namespace.
    api.delete("hello", &DeleteParams::default()).await?;
    wait_for(TIMEOUT, || async { api.get_opt("hello").await.ok().and_then(|g| g.is_none().then_some(())) }).await?;
    host.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
    ns.cleanup().await
}

#[tokio::test(flavor = "multi_thread")]
async fn the_generated_webhook_manifest_applies_with_kubectl_and_the_host_as_its_account_fills_in_the_ca_bundle()
-> Result<()> {
    use base64::Engine as _;
    use capstan_host::serve::webhook::tls::Certs;
    use capstan_host::serve::webhook::{Endpoint, Install, Registry, ServiceRef};
    let ns = TestNamespace::new("gen-hooks").await?;
    let plane = ControlPlane::shared().await?;
    let admin = ns.client();
    let hooks = built_component("greeter-webhooks").await?;
    // The component is baked in (the ConfigMap is not applied here).
    let options = Options::default().namespace(ns.name()).name(ns.name()).delivery(Delivery::Image);
    // What needs no kubelet: CRD, RBAC, Service and the webhook
    // configurations (the namespace exists; no Deployment, no ConfigMap).
    let files = generate::files(std::slice::from_ref(&hooks), &options)?;
    let objects: Vec<Value> = files
        .into_iter()
        .filter(|f| !["namespace.yaml", "deployment.yaml", "components.yaml"].contains(&&*f.path.to_string_lossy()))
        .flat_map(|f| f.objects)
        .collect();
    let kinds: Vec<&str> = objects.iter().filter_map(|o| o["kind"].as_str()).collect();
    for kind in ["Service", "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"] {
        ensure!(kinds.contains(&kind), "no {kind} generated: {kinds:?}");
    }
    let file = std::env::temp_dir().join(format!("{}-webhooks.yaml", ns.name()));
    std::fs::write(&file, generate::to_yaml(&objects, "test")?)?;
    let file = file.to_string_lossy().into_owned();
    let crd_name = "greetings.webhooks.examples.capstan.dev";
    let crds: Api<CustomResourceDefinition> = Api::all(admin.clone());
    // A fresh cluster, as a user's first apply: an earlier test's host or
    // `capstan e2e` leaves the CRD's conversion pointing at its URL (a tool
    // never turns a conversion off), which a client-side apply of the
    // Service-based stanza cannot replace.
    if crds.get_opt(crd_name).await?.is_some() {
        crds.delete(crd_name, &Default::default()).await?;
        wait_for(TIMEOUT, || async { crds.get_opt(crd_name).await.ok().and_then(|c| c.is_none().then_some(())) })
            .await
            .context("an earlier test's CRD goes")?;
    }
    // Plain client-side `kubectl apply`, as a user would.
    kubectl(plane, &["apply", "-f", &file]).await?;
    let crd = crds.get(crd_name).await?;
    let conversion = crd.spec.conversion.as_ref().context("no conversion stanza")?;
    assert_eq!(conversion.strategy, "Webhook");
    let service = conversion.webhook.as_ref().and_then(|w| w.client_config.as_ref()).and_then(|c| c.service.as_ref());
    assert_eq!(
        service.map(|s| (s.namespace.as_str(), s.path.as_deref())),
        Some((ns.name(), Some("/convert/greeter-webhooks")))
    );

    // The host, as the generated ServiceAccount, serving behind the
    // Service: it makes a CA for the Service's name and patches its
    // caBundle into what `kubectl apply` created, with no more RBAC than
    // generated.
    let token = token_for_service_account(&admin, ns.name(), ns.name()).await?;
    let sa = plane.client_with_token(&token)?;
    let service = ServiceRef { namespace: ns.name().to_owned(), name: format!("{}-webhooks", ns.name()), port: 443 };
    let certs = Arc::new(Certs::self_managed(&service.dns_names())?);
    let ca = base64::engine::general_purpose::STANDARD.encode(certs.ca_bundle());
    let install = Install::new(Endpoint::Service(service), certs.ca_bundle());
    let registry = Arc::new(Registry::new().installing(Some(install)));
    let server = capstan_host::serve::webhook::serve(([127, 0, 0, 1], 0).into(), certs, Arc::clone(&registry)).await?;
    let host = wait_for(TIMEOUT, || {
        let (sa, registry) = (sa.clone(), Arc::clone(&registry));
        async move {
            let path = find_component("greeter-webhooks").ok()?;
            let host = HostBuilder::new(sa).check_permissions(true).webhooks(Some(registry)).component(path);
            host.start().await.inspect_err(|e| eprintln!("not yet: {e}")).ok()
        }
    })
    .await
    .context("the host did not start with the generated RBAC")?;
    let configurations = [
        ("admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration", "validatingwebhookconfigurations"),
        ("admissionregistration.k8s.io", "v1", "MutatingWebhookConfiguration", "mutatingwebhookconfigurations"),
    ];
    for (group, version, kind, plural) in configurations {
        let resource = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
        let api: Api<DynamicObject> = Api::all_with(admin.clone(), &resource);
        let filled = wait_for(TIMEOUT, || async {
            let c = api.get("capstan-greeter-webhooks").await.ok()?;
            let hooks = c.data["webhooks"].as_array()?.clone();
            hooks.iter().all(|h| h["clientConfig"]["caBundle"] == json!(ca)).then_some(hooks)
        })
        .await
        .with_context(|| format!("the host did not fill in the caBundle of the {kind}"))?;
        for hook in filled {
            assert_eq!(hook["clientConfig"]["service"]["name"], json!(format!("{}-webhooks", ns.name())), "{hook}");
            assert!(hook["clientConfig"]["url"].is_null(), "still behind the Service: {hook}");
        }
    }
    wait_for(TIMEOUT, || async {
        let crd = crds.get(crd_name).await.ok()?;
        let config = crd.spec.conversion?.webhook?.client_config?;
        (config.ca_bundle.map(|b| base64::engine::general_purpose::STANDARD.encode(b.0)) == Some(ca.clone()))
            .then_some(())
    })
    .await
    .context("the host did not fill in the caBundle of the CRD's conversion")?;

    host.shutdown().await;
    server.shutdown().await;
    kubectl(plane, &["delete", "-f", &file, "--ignore-not-found", "--wait=false"]).await?;
    std::fs::remove_file(&file)?;
    ns.cleanup().await
}

#[tokio::test(flavor = "multi_thread")]
async fn the_generated_network_policy_for_declared_egress_webhooks_and_traces_is_stored_as_generated() -> Result<()> {
    use capstan_host::manifest::egress::Egress;
    use capstan_host::telemetry::Protocol;
    use capstan_host::tooling::generate::network::Policy;
    use capstan_host::tooling::generate::trace::Traces;
    use k8s_openapi::api::networking::v1::NetworkPolicy;
    let ns = TestNamespace::new("gen-netpol").await?;
    // The silences example declares its Alertmanager by name; the test
    // adds an IPv4 origin with a port range and an IPv6 one, and delivers
    // it by a reference to a registry named by address, so that every
    // shape of peer and port goes to the API server. The webhooks greeter
    // opens the webhook port.
    let mut silences = built_component("silences").await?;
    let mut origins: Vec<String> = silences.manifest.egress.origins().iter().map(|o| o.as_str().to_owned()).collect();
    ensure!(origins == ["http://alertmanager.monitoring.svc:9093"], "the example's egress: {origins:?}");
    origins.extend(["http://10.0.0.7:9000-9100".to_owned(), "https://[fd00::7]:8443".to_owned()]);
    silences.manifest.egress = Egress::parse(&origins)?;
    let silences = silences.reference("oci://10.0.0.5:5000/capstan/silences:v1");
    let hooks = built_component("greeter-webhooks").await?;
    let policy = Policy::new()
        .pod_cidr("10.244.0.0/16".parse()?)
        .pod_cidr("fd00:10:244::/56".parse()?)
        .api_server_cidr("172.18.0.0/16".parse()?);
    // And a trace collector by address, on gRPC's port.
    let traces = Traces::new("http://10.0.0.11:4317", Protocol::Grpc)?.sampler("traceidratio", Some("0.5"))?;
    let options = Options::default()
        .namespace(ns.name())
        .name(ns.name())
        .delivery(Delivery::Image)
        .network_policy(policy)
        .traces(traces);
    let files = generate::files(&[silences, hooks], &options)?;
    let deployment =
        files.iter().find(|f| f.path == std::path::Path::new("deployment.yaml")).context("no deployment.yaml")?.clone();
    let file = files
        .into_iter()
        .find(|f| f.path == std::path::Path::new("network-policy.yaml"))
        .context("no network-policy.yaml")?;
    let generated = &file.objects[0];
    let text = generated.to_string();
    for shape in [
        "\"endPort\":9100",
        "\"cidr\":\"10.0.0.7/32\"",
        "\"cidr\":\"fd00::7/128\"",
        "\"cidr\":\"10.0.0.5/32\"",
        "\"cidr\":\"172.18.0.0/16\"",
        "\"except\":[\"fd00:10:244::/56\"]",
        "\"port\":9443",
        "\"port\":9093",
        "\"cidr\":\"10.0.0.11/32\"",
        "\"port\":4317",
    ] {
        ensure!(text.contains(shape), "{shape} not generated: {text}");
    }

    apply_all(&ns.client(), &file.objects).await?;
    let stored: NetworkPolicy = ns.api().get(ns.name()).await?;
    assert_eq!(
        serde_json::to_value(&stored.spec)?,
        generated["spec"],
        "the API server keeps the policy as generated (nothing dropped or defaulted)"
    );

    // The host's container carries the collector as `capstan run` reads it.
    apply_all(&ns.client(), &deployment.objects).await?;
    let stored: Deployment = ns.api().get(ns.name()).await?;
    let env: BTreeMap<String, String> = stored
        .spec
        .template
        .spec
        .and_then(|p| p.containers.into_iter().next())
        .and_then(|c| c.env)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|v| Some((v.name, v.value?)))
        .collect();
    assert_eq!(env.get("OTEL_EXPORTER_OTLP_ENDPOINT").map(String::as_str), Some("http://10.0.0.11:4317"));
    assert_eq!(env.get("OTEL_EXPORTER_OTLP_PROTOCOL").map(String::as_str), Some("grpc"));
    assert_eq!(env.get("OTEL_SERVICE_NAME").map(String::as_str), Some(ns.name()));
    assert_eq!(env.get("OTEL_TRACES_SAMPLER_ARG").map(String::as_str), Some("0.5"));
    ns.cleanup().await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_manifest_with_a_python_component_by_reference_applies_with_plain_kubectl_apply_and_its_account_serves_it()
-> Result<()> {
    use capstan_host::serve::oci::{Options as RegistryOptions, Registry, Summary};
    use capstan_tests::registry::TestRegistry;
    let plane = ControlPlane::shared().await?;
    let ns = TestNamespace::new("gen-oci").await?;
    let admin = ns.client();
    let server = TestRegistry::start().await?;
    let registry = Arc::new(Registry::new(RegistryOptions::default()));
    let python = find_component("greeter-python").map_err(anyhow::Error::msg)?;
    let reference = server.reference("capstan/greeter-python:v1");
    let summary = Summary { controller: "greeter".into(), contract: "0.3.0".into(), grants_digest: String::new() };
    registry.push(&reference.parse()?, std::fs::read(&python)?, &summary, "greeter-python.wasm").await?;

    // `capstan gen manifest` with the Python greeter by reference (pulled to
    // read its manifest) and a small component carried whole.
    let noop = find_component("noop").map_err(anyhow::Error::msg)?;
    let capstan = capstan_tests::capstan_binary().await?;
    let out = tokio::process::Command::new(&capstan)
        .args(["gen", "manifest", &reference])
        .arg(&noop)
        .args(["--namespace", ns.name(), "--name", ns.name(), "--image", "registry.invalid/capstan:test"])
        .output()
        .await?;
    ensure!(out.status.success(), "capstan gen manifest: {}", String::from_utf8_lossy(&out.stderr));
    let file = std::env::temp_dir().join(format!("{}.yaml", ns.name()));
    std::fs::write(&file, &out.stdout)?;
    let file = file.to_string_lossy().into_owned();

    // Plain client-side `kubectl apply -f`, as a new user would.
    kubectl(plane, &["apply", "-f", &file]).await?;
    let cm: ConfigMap = ns.api().get(&format!("{}-components", ns.name())).await?;
    let last_applied =
        cm.metadata.annotations.as_ref().and_then(|a| a.get("kubectl.kubernetes.io/last-applied-configuration"));
    ensure!(last_applied.is_some(), "applied client-side: {:?}", cm.metadata.annotations);
    let data = cm.data.clone().unwrap_or_default();
    ensure!(data.get("greeter.oci").map(|r| r.trim()) == Some(reference.as_str()), "{data:?}");
    let binary = cm.binary_data.clone().unwrap_or_default();
    ensure!(binary.keys().collect::<Vec<_>>() == ["noop.wasm.gz"], "{binary:?}");

    // No kubelet here: the host runs in this process, with the token of the
    // ServiceAccount the manifest created, the ConfigMap projected as the
    // kubelet would, and pulls the Python greeter from the registry.
    let token = token_for_service_account(&admin, ns.name(), ns.name()).await?;
    let sa = plane.client_with_token(&token)?;
    let dir = std::env::temp_dir().join(format!("capstan-{}", ns.name()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let mut files = binary;
    files.extend(data.into_iter().map(|(k, v)| (k, ByteString(v.into_bytes()))));
    project_like_the_kubelet(&dir, &files)?;
    // Its own namespace only: other tests' Greetings are not its business.
    let host = HostBuilder::new(sa)
        .namespace(Some(ns.name().to_owned()))
        .check_permissions(true)
        .registry(Some(Arc::clone(&registry)))
        .poll_interval(Duration::from_millis(500))
        .cache_dir(default_cache_dir())
        .components_dir(Some(dir.clone()))
        .start()
        .await?;
    let api = greetings(admin.clone(), ns.name());
    api.create(&PostParams::default(), &greeting("py", "from the registry", 1)?).await?;
    // The controller reports "syncing" until its caches are filled.
    wait_for(TIMEOUT, || async {
        host.status()
            .iter()
            .any(|s| s.reference.as_deref() == Some(reference.as_str()) && s.state == "running")
            .then_some(())
    })
    .await
    .with_context(|| format!("the Python greeter runs from its reference: {:?}", host.status()))?;
    wait_for(Duration::from_secs(90), || async {
        api.get("py").await.ok().filter(|g| capstan_tests::greeting_ready(g, 1))
    })
    .await
    .context("the Python greeter from the registry made the Greeting Ready")?;
    let counts = host.controller("greeter").context("greeter")?.counts();
    let last_error = counts.last_error.clone().unwrap_or_default().to_lowercase();
    ensure!(
        !["forbidden", "denied"].iter().any(|w| last_error.contains(w)),
        "denied under the generated RBAC: {counts:?}"
    );

    api.delete("py", &DeleteParams::default()).await?;
    wait_for(TIMEOUT, || async { api.get_opt("py").await.ok().and_then(|g| g.is_none().then_some(())) }).await?;
    host.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
    // Cluster-scoped objects of this installation (the CRD is shared, it stays).
    let selector = format!("app.kubernetes.io/name={}", ns.name());
    kubectl(plane, &["delete", "clusterrole,clusterrolebinding", "-l", &selector, "--wait=false"]).await?;
    ns.cleanup().await
}
