//! Many clusters from one host, on real API servers: the shared control
//! plane is the cluster `default`, a private one is the member `b`, and a
//! third cluster never answers. One host process (one [`Fleet`]) runs the
//! greeter in both live clusters; the one that is down, restarted or
//! disengaged holds up only itself.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, Result};
use capstan_host::serve::fleet::Fleet;
use capstan_host::serve::host::HostBuilder;
use capstan_host::testing::find_component;
use capstan_tests::{
    ControlPlane, PrivateControlPlane, TestNamespace, capstan_binary, free_port, greeting, greeting_ready, greetings,
    http_get, wait_for,
};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(60);

/// A kubeconfig for an API server that never answers (nothing listens on
/// its port).
fn unreachable_kubeconfig(dir: &Path) -> Result<std::path::PathBuf> {
    let port = free_port()?;
    let path = dir.join(format!("unreachable-{port}.kubeconfig"));
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: gone\n  cluster:\n    server: https://127.0.0.1:{port}\n    insecure-skip-tls-verify: true\n\
         users:\n- name: nobody\n  user:\n    token: nothing\ncontexts:\n- name: gone\n  context:\n    cluster: gone\n    user: nobody\n\
         current-context: gone\n"
    );
    std::fs::write(&path, text)?;
    Ok(path)
}

/// Creates namespace `name` in the cluster of `client`.
async fn namespace(client: &kube::Client, name: &str) -> Result<()> {
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    api.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": name}}))?).await?;
    Ok(())
}

/// Creates Greeting `name` (once the host has installed the CRD in that
/// cluster) and waits until the greeter reports it ready.
async fn converges(client: &kube::Client, ns: &str, name: &str, within: Duration) -> Result<()> {
    let api = greetings(client, ns);
    wait_for(within, || async { api.create(&PostParams::default(), &greeting(name, "hi", 1)).await.ok() })
        .await
        .with_context(|| format!("Greeting {ns}/{name} could not be created (is its CRD installed?)"))?;
    wait_for(within, || async { api.get(name).await.ok().filter(|g| greeting_ready(g, 1)) })
        .await
        .with_context(|| format!("Greeting {ns}/{name} did not converge"))
        .map(drop)
}

/// A fleet whose hosts run the greeter in namespace `ns`, on one runtime.
fn greeter_fleet(ns: &str) -> Result<Fleet> {
    let greeter = find_component("greeter").map_err(anyhow::Error::msg)?;
    let runtime = HostBuilder::new_runtime(Default::default(), 0, false)?;
    let ns = ns.to_owned();
    Ok(Fleet::new(move |client| {
        HostBuilder::new(client)
            .runtime(Some(runtime.clone()))
            .namespace(Some(ns.clone()))
            .install_crds(true)
            .component(&greeter)
    }))
}

#[tokio::test(flavor = "multi_thread")]
async fn one_fleet_serves_two_clusters_and_a_member_down_holds_up_only_itself() -> Result<()> {
    let home = TestNamespace::new("fleet").await?;
    let member = PrivateControlPlane::start(false).await?;
    let member_client = member.plane().client()?;
    // The member's namespace has the home one's name: one `-n` serves both.
    namespace(&member_client, home.name()).await?;
    let fleet = greeter_fleet(home.name())?;
    let dir = std::env::temp_dir();
    let unreachable = unreachable_kubeconfig(&dir)?;
    let home_client = home.client();
    let started = fleet.engage("default", async move { Ok(home_client) });
    let member_started = fleet.engage("b", {
        let client = member_client.clone();
        async move { Ok(client) }
    });
    let _never = fleet
        .engage("gone", async move { capstan_host::tooling::cli::connect_with_retry(Some(&unreachable), None).await });
    started.await?.context("the home cluster starts")?;
    member_started.await?.context("the member starts")?;

    // Both live clusters converge while a third never answers.
    converges(&home.client(), home.name(), "home-1", TIMEOUT).await?;
    converges(&member_client, home.name(), "member-1", TIMEOUT).await?;
    let reasons = fleet.readiness().expect_err("a cluster that never answers keeps the fleet unready");
    assert_eq!(reasons, vec!["cluster gone: host: starting (connecting to the API server)".to_owned()]);
    let doc = fleet.status_document();
    let states: Vec<(&str, &str)> = doc["clusters"]
        .as_array()
        .context("clusters")?
        .iter()
        .map(|c| (c["name"].as_str().unwrap_or_default(), c["state"].as_str().unwrap_or_default()))
        .collect();
    assert_eq!(states, [("b", "running"), ("default", "running"), ("gone", "connecting")]);
    let component_clusters: Vec<&Value> =
        doc["components"].as_array().context("components")?.iter().map(|c| &c["cluster"]).collect();
    assert_eq!(component_clusters, [&json!("b"), &json!("default")], "each cluster runs the greeter once");

    // The member's API server down for a while: the home cluster keeps
    // reconciling, and the member catches up when it returns.
    let restart = member.restart_apiserver(Duration::from_secs(15));
    let during = async {
        capstan_tests::until_down(&member_client, TIMEOUT).await?;
        converges(&home.client(), home.name(), "home-during", Duration::from_secs(12)).await
    };
    let (restarted, during) = tokio::join!(restart, during);
    restarted?;
    during.context("the home cluster converges while the member is down")?;
    converges(&member_client, home.name(), "member-after", TIMEOUT).await?;

    // Disengaged, the member is no longer served; engaged again, it is.
    assert!(fleet.disengage("b").await);
    assert!(fleet.host("b").is_none());
    let api = greetings(&member_client, home.name());
    api.create(&PostParams::default(), &greeting("member-unserved", "hi", 1)).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let unserved = api.get("member-unserved").await?;
    assert!(!greeting_ready(&unserved, 1), "a disengaged cluster is not reconciled: {:?}", unserved.data["status"]);
    let again = fleet.engage("b", {
        let client = member_client.clone();
        async move { Ok(client) }
    });
    again.await?.context("the member starts again")?;
    wait_for(TIMEOUT, || async { api.get("member-unserved").await.ok().filter(|g| greeting_ready(g, 1)) })
        .await
        .context("the member is served again once engaged again")?;

    fleet.shutdown().await;
    assert!(fleet.names().is_empty());
    home.cleanup().await
}

#[tokio::test(flavor = "multi_thread")]
async fn capstan_run_serves_every_cluster_it_is_given() -> Result<()> {
    let home = TestNamespace::new("fleet-run").await?;
    let plane = ControlPlane::shared().await?;
    let member = PrivateControlPlane::start(false).await?;
    let member_client = member.plane().client()?;
    namespace(&member_client, home.name()).await?;
    let dir = std::env::temp_dir().join(format!("capstan-fleet-{}", capstan_tests::random_suffix(8)));
    std::fs::create_dir_all(&dir)?;
    let unreachable = unreachable_kubeconfig(&dir)?;
    let greeter = find_component("greeter").map_err(anyhow::Error::msg)?;
    let port = free_port()?;
    let mut child = tokio::process::Command::new(capstan_binary().await?)
        .arg("run")
        .arg(&greeter)
        .args(["--install-crds", "-n", home.name(), "--listen", &format!("127.0.0.1:{port}")])
        .arg("--kubeconfig")
        .arg(plane.kubeconfig_path())
        .arg("--cluster")
        .arg(format!("b={}", member.plane().kubeconfig_path().display()))
        .arg("--cluster")
        .arg(format!("gone={}", unreachable.display()))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("host.log"))?)
        .kill_on_drop(true)
        .spawn()?;
    converges(&home.client(), home.name(), "home-1", TIMEOUT).await?;
    converges(&member_client, home.name(), "member-1", TIMEOUT).await?;
    let (code, body) = http_get(port, "/readyz").await?;
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("cluster gone: host: starting (connecting to the API server)"), "{body}");
    let (_, status) = http_get(port, "/status").await?;
    let doc: Value = serde_json::from_str(&status)?;
    let clusters: Vec<&str> =
        doc["clusters"].as_array().context("clusters")?.iter().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(clusters, ["b", "default", "gone"]);
    // The same controller in two clusters: series of its own in each (they
    // once shared one queue gauge, the last cluster's).
    let (_, scrape) = http_get(port, "/metrics").await?;
    for cluster in ["default", "b"] {
        for series in [
            format!(r#"capstan_queue_depth{{cluster="{cluster}",controller="greeter"}}"#),
            format!(r#"capstan_reconcile_total{{cluster="{cluster}",controller="greeter","#),
            format!(r#"capstan_controllers{{cluster="{cluster}",state="running"}}"#),
        ] {
            assert!(scrape.lines().any(|l| l.starts_with(&series)), "{series} missing in\n{scrape}");
        }
    }
    assert!(
        !scrape.contains(r#"capstan_reconcile_total{cluster="gone""#),
        "the cluster that never came up reconciled nothing"
    );
    assert!(child.try_wait()?.is_none(), "the host keeps running");
    child.kill().await?;

    // A cluster named twice, or named `default`, is refused before anything starts.
    for args in [["--cluster", "default=x"], ["--cluster", "Bad=x"]] {
        let out = tokio::process::Command::new(capstan_binary().await?)
            .arg("run")
            .arg(&greeter)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .await?;
        assert!(!out.status.success(), "{args:?} is refused");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("--cluster"), "{args:?}: {stderr}");
    }
    let _ = std::fs::remove_dir_all(&dir);
    home.cleanup().await
}

/// The webhook configurations `greeter-webhooks` installs.
const WEBHOOK_CONFIGURATION: &str = "capstan-greeter-webhooks";

/// A `webhooks.examples.capstan.dev` Greeting in `ns` of the cluster of `client`.
fn webhook_greetings(client: &kube::Client, ns: &str) -> Api<kube::api::DynamicObject> {
    use kube::api::{ApiResource, GroupVersionKind};
    let gvk = GroupVersionKind::gvk("webhooks.examples.capstan.dev", "v1alpha1", "Greeting");
    Api::namespaced_with(client.clone(), ns, &ApiResource::from_gvk_with_plural(&gvk, "greetings"))
}

/// The message of the API server's refusal to create Greeting `name` with
/// `message`, once the webhooks are called (the configuration's informer
/// lags its creation): `None` while writes still go through unreviewed.
async fn webhook_refusal(api: &Api<kube::api::DynamicObject>, name: &str, message: &str) -> Option<String> {
    let greeting = serde_json::from_value(json!({
        "apiVersion": "webhooks.examples.capstan.dev/v1alpha1",
        "kind": "Greeting",
        "metadata": {"name": name},
        "spec": {"message": message},
    }))
    .ok()?;
    let dry = PostParams { dry_run: true, ..PostParams::default() };
    match api.create(&dry, &greeting).await {
        Err(kube::Error::Api(status)) if status.message.contains("admission webhook") => Some(status.message),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn webhooks_are_served_to_every_cluster_each_under_its_own_path() -> Result<()> {
    use capstan_host::serve::webhook::{self, Endpoint, Install, Registry, tls::Certs};
    use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
    let home = TestNamespace::new("fleet-webhooks").await?;
    let member = PrivateControlPlane::start(false).await?;
    let member_client = member.plane().client()?;
    namespace(&member_client, home.name()).await?;
    let port = free_port()?;
    let certs = std::sync::Arc::new(Certs::self_managed(&["127.0.0.1".to_owned()])?);
    let install = Install::new(Endpoint::Url(format!("https://127.0.0.1:{port}")), certs.ca_bundle());
    let registry = std::sync::Arc::new(Registry::new().installing(Some(install)));
    let server = webhook::serve(([127, 0, 0, 1], port).into(), certs, std::sync::Arc::clone(&registry)).await?;
    let component = find_component("greeter-webhooks").map_err(anyhow::Error::msg)?;
    let runtime = HostBuilder::new_runtime(Default::default(), 0, false)?;
    let (ns, webhooks) = (home.name().to_owned(), std::sync::Arc::clone(&registry));
    let fleet = Fleet::new(move |client| {
        HostBuilder::new(client)
            .runtime(Some(runtime.clone()))
            .namespace(Some(ns.clone()))
            .install_crds(true)
            .webhooks(Some(std::sync::Arc::clone(&webhooks)))
            .component(&component)
    });
    let home_client = home.client();
    fleet.engage("default", async move { Ok(home_client) }).await?.context("the home cluster starts")?;
    let client = member_client.clone();
    fleet.engage("b", async move { Ok(client) }).await?.context("the member starts")?;

    // Each cluster's API server calls the host under a path of its own.
    for (cluster, client, path) in [
        ("default", home.client(), "/admission/greeter-webhooks/"),
        ("b", member_client.clone(), "/clusters/b/admission/greeter-webhooks/"),
    ] {
        let installed = Api::<ValidatingWebhookConfiguration>::all(client.clone()).get(WEBHOOK_CONFIGURATION).await?;
        let url = installed.webhooks.unwrap_or_default().first().and_then(|w| w.client_config.url.clone());
        let expected = format!("https://127.0.0.1:{port}{path}");
        assert!(url.as_deref().is_some_and(|u| u.starts_with(&expected)), "{cluster}: {url:?}, not {expected}…");
        let api = webhook_greetings(&client, home.name());
        let refused = wait_for(TIMEOUT, || webhook_refusal(&api, "empty", ""))
            .await
            .with_context(|| format!("cluster {cluster}'s API server calls the validating webhook"))?;
        assert!(refused.contains("spec.message must not be empty"), "{cluster}: {refused}");
        assert!(registry.get_in(cluster, "greeter-webhooks").is_ok(), "{cluster}: served");
    }
    // Each cluster's calls are the component's calls in that cluster.
    let scrape = capstan_host::metrics::metrics().encode();
    for cluster in ["default", "b"] {
        let series = format!(r#"capstan_webhook_requests_total{{cluster="{cluster}",controller="greeter-webhooks","#);
        assert!(scrape.lines().any(|l| l.starts_with(&series)), "{series} missing in\n{scrape}");
    }

    // A disengaged cluster's webhooks are no longer served (nothing of it
    // is held); the home's still are.
    assert!(fleet.disengage("b").await);
    assert!(registry.get_in("b", "greeter-webhooks").is_err(), "a disengaged cluster's webhooks are withdrawn");
    let api = webhook_greetings(&home.client(), home.name());
    let refused = webhook_refusal(&api, "still-empty", "").await.context("the home's webhooks still answer")?;
    assert!(refused.contains("spec.message must not be empty"), "{refused}");

    fleet.shutdown().await;
    server.shutdown().await;
    // A stopped host keeps its configurations for its restart: the test
    // removes them (and the CRD it installed in the shared cluster).
    let client = home.client();
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .delete(WEBHOOK_CONFIGURATION, &Default::default())
        .await?;
    Api::<MutatingWebhookConfiguration>::all(client.clone()).delete(WEBHOOK_CONFIGURATION, &Default::default()).await?;
    Api::<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>::all(client)
        .delete("greetings.webhooks.examples.capstan.dev", &Default::default())
        .await?;
    home.cleanup().await
}

#[tokio::test(flavor = "multi_thread")]
async fn kubeconfig_secrets_engage_rotate_and_disengage_clusters() -> Result<()> {
    use capstan_host::serve::fleet::secrets::{self, Source};
    use k8s_openapi::api::core::v1::Secret;
    let home = TestNamespace::new("fleet-secrets").await?;
    let member = PrivateControlPlane::start(false).await?;
    let member_client = member.plane().client()?;
    namespace(&member_client, home.name()).await?;
    let fleet = std::sync::Arc::new(greeter_fleet(home.name())?);
    let home_client = home.client();
    fleet.engage("default", async move { Ok(home_client) }).await?.context("the home cluster starts")?;
    let source = Source { namespace: home.name().to_owned(), selector: None };
    let follow = secrets::follow(std::sync::Arc::clone(&fleet), home.client(), source);

    let kubeconfig = std::fs::read_to_string(member.plane().kubeconfig_path())?;
    let secret = |name: &str, text: &str| -> Result<Secret> {
        Ok(serde_json::from_value(json!({"metadata": {"name": name}, "stringData": {"value": text}}))?)
    };
    let secrets_api: Api<Secret> = home.api();
    secrets_api.create(&PostParams::default(), &secret("b-kubeconfig", &kubeconfig)?).await?;
    // A kubeconfig that would run a command in the host is never engaged.
    let exec = kubeconfig.replace(
        "  user:\n",
        "  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /bin/true\n",
    );
    secrets_api.create(&PostParams::default(), &secret("evil-kubeconfig", &exec)?).await?;
    let engaged = wait_for(TIMEOUT, || async { fleet.host("b") }).await.context("the Secret's cluster is engaged")?;
    converges(&member_client, home.name(), "via-secret", TIMEOUT).await?;
    assert_eq!(fleet.names(), ["b", "default"], "the exec kubeconfig is refused");

    // Rotated credentials: a changed kubeconfig engages the cluster again.
    let rotated = secret("b-kubeconfig", &format!("{kubeconfig}\n# rotated\n"))?;
    secrets_api.replace("b-kubeconfig", &PostParams::default(), &rotated).await?;
    wait_for(TIMEOUT, || async { fleet.host("b").filter(|h| !std::sync::Arc::ptr_eq(h, &engaged)) })
        .await
        .context("a changed kubeconfig engages the cluster again")?;
    converges(&member_client, home.name(), "after-rotation", TIMEOUT).await?;

    // The Secret gone, the cluster is disengaged; back, it is engaged again.
    secrets_api.delete("b-kubeconfig", &Default::default()).await?;
    wait_for(TIMEOUT, || async { (!fleet.names().contains(&"b".to_owned())).then_some(()) })
        .await
        .context("a deleted Secret disengages its cluster")?;
    secrets_api.create(&PostParams::default(), &secret("b-kubeconfig", &kubeconfig)?).await?;
    wait_for(TIMEOUT, || async { fleet.host("b") }).await.context("a re-created Secret engages its cluster")?;

    follow.abort();
    fleet.shutdown().await;
    home.cleanup().await
}

/// A client of `plane` as a ServiceAccount `capstan-member` of namespace
/// `ns` holding only what `capstan gen member-rbac` gives the fleet
/// controllers of `components` (applied there as generated).
async fn member_client(plane: &ControlPlane, ns: &str, components: &[&Path]) -> Result<kube::Client> {
    use capstan_host::tooling::generate::{self, Component, Options};
    use kube::api::{DynamicObject, Patch, PatchParams};
    let admin = plane.client()?;
    let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(admin.clone(), ns);
    accounts
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "capstan-member"}}))?)
        .await?;
    let loader = capstan_host::testing::tool_loader(capstan_host::testing::default_cache_dir())?;
    let mut loaded = Vec::new();
    for path in components {
        let wasm = std::fs::read(path)?;
        let l = loader.load_bytes(path, wasm.clone()).await?;
        loaded.push(Component::new((*l.manifest).clone(), wasm));
    }
    let subject: k8s_openapi::api::rbac::v1::Subject =
        serde_json::from_value(json!({"kind": "ServiceAccount", "name": "capstan-member", "namespace": ns}))?;
    for object in generate::member_rbac(&loaded, &Options::default().install_crds(true), &subject)? {
        let resource = kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            "rbac.authorization.k8s.io",
            "v1",
            object["kind"].as_str().context("a kind")?,
        ));
        let api: Api<DynamicObject> = Api::all_with(admin.clone(), &resource);
        let name = object["metadata"]["name"].as_str().context("a name")?.to_owned();
        api.patch(&name, &PatchParams::apply("capstan-tests"), &Patch::Apply(&object)).await?;
    }
    let token = capstan_tests::token_for_service_account(&admin, ns, "capstan-member").await?;
    plane.client_with_token(&token)
}

/// A member the host may do nothing in refuses the fleet controller at
/// load, naming what is missing, before anything is installed or watched
/// there; the home serves on. (The member is the shared API server again,
/// reached as a ServiceAccount with no RBAC.)
#[tokio::test(flavor = "multi_thread")]
async fn a_member_without_the_grants_a_fleet_controller_needs_refuses_it_at_load() -> Result<()> {
    use k8s_openapi::api::core::v1::ServiceAccount;
    let home = TestNamespace::new("fleet-access").await?;
    let plane = ControlPlane::shared().await?;
    let accounts: Api<ServiceAccount> = home.api();
    accounts.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "nobody"}}))?).await?;
    let token = capstan_tests::token_for_service_account(&home.client(), home.name(), "nobody").await?;
    let nobody = plane.client_with_token(&token)?;
    let greeter = find_component("fleet").map_err(anyhow::Error::msg)?;
    let runtime = HostBuilder::new_runtime(Default::default(), 0, false)?;
    let ns = home.name().to_owned();
    let fleet = Fleet::new(move |client| {
        HostBuilder::new(client)
            .runtime(Some(runtime.clone()))
            .namespace(Some(ns.clone()))
            .install_crds(true)
            .check_permissions(true)
            .component(&greeter)
    });
    let home_client = home.client();
    fleet.engage("default", async move { Ok(home_client) }).await?.context("the home starts")?;
    let member = fleet.engage("poor", async move { Ok(nobody) }).await?;
    let doc = fleet.status_document();
    let said = format!("{:?} {doc}", member.as_ref().err());
    assert!(said.contains("needs permissions the host was not granted"), "{said}");
    assert!(said.contains(&format!("create configmaps (core) in namespace {}", home.name())), "{said}");
    let running = |c: &&Value| c["name"] == "fleet-greeter" && c["cluster"] == "default" && c["state"] == "running";
    assert!(doc["components"].as_array().context("components")?.iter().any(|c| running(&c)), "{doc}");
    fleet.shutdown().await;
    home.cleanup().await
}

/// The `ConfigMap`s of namespace `ns` in the cluster of `client`./// The `ConfigMap`s of namespace `ns` in the cluster of `client`.
fn configmaps(client: &kube::Client, ns: &str) -> Api<k8s_openapi::api::core::v1::ConfigMap> {
    Api::namespaced(client.clone(), ns)
}

/// The FleetGreetings of namespace `ns`.
fn fleet_greetings(client: &kube::Client, ns: &str) -> Api<kube::api::DynamicObject> {
    let resource = kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("examples.capstan.dev", "v1", "FleetGreeting"),
        "fleetgreetings",
    );
    Api::namespaced_with(client.clone(), ns, &resource)
}

/// A FleetGreeting `name` saying `message`.
fn fleet_greeting(name: &str, message: &str) -> Result<kube::api::DynamicObject> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "examples.capstan.dev/v1", "kind": "FleetGreeting",
        "metadata": {"name": name}, "spec": {"message": message},
    }))?)
}

/// Waits until FleetGreeting `name` reports `ready` members ready.
async fn fleet_ready(client: &kube::Client, ns: &str, name: &str, ready: i64, within: Duration) -> Result<Value> {
    let api = fleet_greetings(client, ns);
    let got = wait_for(within, || async {
        api.get(name).await.ok().filter(|g| {
            g.data["status"]["readyMembers"] == ready
                && g.data["status"]["conditions"][0]["status"] == if ready == 2 { "True" } else { "False" }
        })
    })
    .await
    .with_context(|| format!("FleetGreeting {ns}/{name} did not report {ready} members ready"))?;
    Ok(got.data["status"].clone())
}

/// The names of the ConfigMaps in `ns` that the fleet greeter marked.
async fn marked(client: &kube::Client, ns: &str) -> Result<Vec<String>> {
    let lp = kube::api::ListParams::default().labels("capstan.dev/fleet-controller=fleet-greeter");
    let mut names: Vec<String> =
        configmaps(client, ns).list(&lp).await?.items.iter().filter_map(|c| c.metadata.name.clone()).collect();
    names.sort();
    Ok(names)
}

// Three real API servers: the shared control plane is the home `default`,
// two private ones are the members `west` and `east`. One fleet serves the
// fleet greeter (home `default`, every other cluster a member) and the
// `spreader` fixture (home `default`, member `west` only).
#[tokio::test(flavor = "multi_thread")]
async fn a_fleet_controller_spreads_to_its_members_survives_one_down_and_cleans_up_behind_its_finalizer() -> Result<()>
{
    use k8s_openapi::api::core::v1::ConfigMap;
    let home = TestNamespace::new("fleet-ctl").await?;
    let (west, east) = tokio::try_join!(PrivateControlPlane::start(false), PrivateControlPlane::start(false))?;
    let (west_client, east_client) = (west.plane().client()?, east.plane().client()?);
    namespace(&west_client, home.name()).await?;
    namespace(&east_client, home.name()).await?;
    let greeter = find_component("fleet").map_err(anyhow::Error::msg)?;
    let spreader = find_component("spreader").map_err(anyhow::Error::msg)?;
    // West is reached as a ServiceAccount with only what `capstan gen
    // member-rbac` gives the two fleet controllers there.
    let west_as_member = member_client(west.plane(), home.name(), &[&greeter, &spreader]).await?;
    let runtime = HostBuilder::new_runtime(Default::default(), 0, false)?;
    let ns = home.name().to_owned();
    let fleet = Fleet::new(move |client| {
        HostBuilder::new(client)
            .runtime(Some(runtime.clone()))
            .namespace(Some(ns.clone()))
            .install_crds(true)
            // West's grants (generated) pass the host's review there.
            .check_permissions(true)
            .component(&greeter)
            .component(&spreader)
    });
    let home_client = home.client();
    let started = [
        fleet.engage("default", async move { Ok(home_client) }),
        fleet.engage("west", {
            let c = west_as_member.clone();
            async move { Ok(c) }
        }),
        fleet.engage("east", {
            let c = east_client.clone();
            async move { Ok(c) }
        }),
    ];
    for s in started {
        s.await?.context("a cluster starts")?;
    }
    let states = || -> Vec<(String, String)> {
        let doc = fleet.status_document();
        doc["components"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| c["name"] == "fleet-greeter")
            .map(|c| {
                (
                    c["cluster"].as_str().unwrap_or_default().to_owned(),
                    c["state"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    };
    let expected = [("default", "running"), ("east", "elsewhere"), ("west", "elsewhere")]
        .map(|(c, s)| (c.to_owned(), s.to_owned()));
    wait_for(TIMEOUT, || async { (states() == expected).then_some(()) })
        .await
        .with_context(|| format!("a fleet controller runs in its home only: {:?}", states()))?;

    // Spread to both members, marked with the home's identity, read back.
    let api = fleet_greetings(&home.client(), home.name());
    wait_for(TIMEOUT, || async {
        api.create(&PostParams::default(), &fleet_greeting("hello", "hi fleet").ok()?).await.ok()
    })
    .await
    .context("the FleetGreeting CRD is installed in the home")?;
    fleet_ready(&home.client(), home.name(), "hello", 2, TIMEOUT).await?;
    let owner = api.get("hello").await?;
    let system: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(home.client());
    let home_id = system.get("kube-system").await?.metadata.uid.context("a uid")?;
    for client in [&west_client, &east_client] {
        let copy: ConfigMap = configmaps(client, home.name()).get("hello-greeting").await?;
        let labels = copy.metadata.labels.clone().unwrap_or_default();
        assert_eq!(labels.get("capstan.dev/owner-uid"), owner.metadata.uid.as_ref());
        assert_eq!(labels.get("capstan.dev/owner-cluster-id"), Some(&home_id));
        assert!(copy.metadata.owner_references.is_none(), "no ownerReference crosses clusters");
        assert_eq!(copy.data.unwrap_or_default().get("message").map(String::as_str), Some("hi fleet"));
    }
    assert!(configmaps(&home.client(), home.name()).get_opt("hello-greeting").await?.is_none());

    // A copy deleted in a member is put back (its watch there triggers the owner).
    configmaps(&east_client, home.name()).delete("hello-greeting", &Default::default()).await?;
    wait_for(TIMEOUT, || async {
        configmaps(&east_client, home.name()).get_opt("hello-greeting").await.ok().flatten()
    })
    .await
    .context("the copy deleted in east is put back")?;

    // West's API server down for 20 s: a FleetGreeting made meanwhile
    // reaches east at once and west when it is back; nothing lost or doubled.
    let restart = west.restart_apiserver(Duration::from_secs(20));
    let during = async {
        capstan_tests::until_down(&west_client, TIMEOUT).await?;
        api.create(&PostParams::default(), &fleet_greeting("during", "while west is down")?).await?;
        wait_for(Duration::from_secs(15), || async {
            configmaps(&east_client, home.name()).get_opt("during-greeting").await.ok().flatten()
        })
        .await
        .context("east gets its copy while west is down")?;
        fleet_ready(&home.client(), home.name(), "during", 1, Duration::from_secs(15)).await
    };
    let (restarted, during) = tokio::join!(restart, during);
    restarted?;
    let status = during.context("the home reports east ready, west not, while west is down")?;
    assert!(
        status["members"].as_array().is_some_and(|m| m.iter().any(|e| e["cluster"] == "west" && e["ready"] == false)),
        "{status}"
    );
    fleet_ready(&home.client(), home.name(), "during", 2, TIMEOUT).await.context("west catches up")?;
    for client in [&west_client, &east_client] {
        assert_eq!(marked(client, home.name()).await?, ["during-greeting", "hello-greeting"]);
    }

    // A guest naming a cluster it did not declare is refused, and reads
    // there are denied; the spreader places its children in west only.
    let cms = configmaps(&home.client(), home.name());
    let probe = |name: &str, behaviour: &str, target: &str| -> Result<ConfigMap> {
        Ok(serde_json::from_value(
            json!({"metadata": {"name": name}, "data": {"behaviour": behaviour, "target": target}}),
        )?)
    };
    cms.create(&PostParams::default(), &probe("far", "place-undeclared", "east")?).await?;
    cms.create(&PostParams::default(), &probe("peek", "read-in", "east")?).await?;
    cms.create(&PostParams::default(), &probe("spread", "spread", "")?).await?;
    let peek = wait_for(TIMEOUT, || async { cms.get_opt("peek-read-in").await.ok().flatten() }).await?;
    let read = peek.data.unwrap_or_default().get("read").cloned().unwrap_or_default();
    assert!(read.starts_with("error: denied") && read.contains("not a member"), "{read}");
    wait_for(TIMEOUT, || async { configmaps(&west_client, home.name()).get_opt("spread-spread").await.ok().flatten() })
        .await?;
    let spreader = fleet.host("default").and_then(|h| h.controller("spreader")).context("the spreader runs")?;
    let error = wait_for(TIMEOUT, || async { spreader.counts().last_error.filter(|e| e.contains("far")) }).await?;
    assert!(error.contains("not a member of the fleet"), "{error}");
    for name in ["far-placed", "spread-spread", "peek-read-in-w"] {
        assert!(configmaps(&east_client, home.name()).get_opt(name).await?.is_none(), "{name} reached east");
    }

    // A child of a custom kind: the host installed its CRD in the member
    // (the spreader's only, west), marked as the spreader's, with no more
    // than `gen member-rbac --install-crds` gives there.
    cms.create(&PostParams::default(), &probe("beacon", "beacon", "")?).await?;
    let beacons = |client: &kube::Client| {
        let resource = kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("fixtures.capstan.dev", "v1", "Beacon"),
            "beacons",
        );
        Api::<kube::api::DynamicObject>::namespaced_with(client.clone(), home.name(), &resource)
    };
    let beacon = wait_for(TIMEOUT, || async { beacons(&west_client).get_opt("beacon-beacon").await.ok().flatten() })
        .await
        .context("the Beacon reaches west, its CRD installed there")?;
    assert_eq!(beacon.data["spec"]["from"], "default");
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(west_client.clone());
    let crd = crds.get("beacons.fixtures.capstan.dev").await?;
    assert_eq!(
        crd.metadata.annotations.unwrap_or_default().get(capstan_host::serve::host::INSTALLED_BY).map(String::as_str),
        Some("spreader")
    );
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(east_client.clone());
    assert!(crds.get_opt("beacons.fixtures.capstan.dev").await?.is_none(), "east is no member of the spreader");

    // A watched kind is watched in the member too: a Secret there that the
    // watch selects triggers the ConfigMap its label names in the home.
    cms.create(&PostParams::default(), &probe("watcher", "secrets-in", "")?).await?;
    let seen = || async {
        let child = cms.get_opt("watcher-secrets-in").await.ok().flatten()?;
        child.data.unwrap_or_default().get("seen").cloned()
    };
    assert_eq!(wait_for(TIMEOUT, seen).await?, "");
    let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(json!({"metadata": {
        "name": "s1", "labels": {"capstan.dev/watched": "yes", "capstan.dev/configmap": "watcher"},
    }}))?;
    Api::namespaced(west_client.clone(), home.name()).create(&PostParams::default(), &secret).await?;
    wait_for(TIMEOUT, || async { seen().await.filter(|s| s == "west/s1") })
        .await
        .context("the Secret in west triggers its ConfigMap in the home")?;

    // A ConfigMap another home marked (same controller name) is never swept.
    let mut foreign: ConfigMap = configmaps(&west_client, home.name()).get("hello-greeting").await?;
    foreign.metadata = kube::api::ObjectMeta {
        name: Some("foreign".into()),
        labels: foreign.metadata.labels.map(|mut l| {
            l.insert("capstan.dev/owner-cluster-id".into(), "another-home".into());
            l.insert("capstan.dev/owner-uid".into(), "gone".into());
            l
        }),
        annotations: foreign.metadata.annotations,
        ..Default::default()
    };
    configmaps(&west_client, home.name()).create(&PostParams::default(), &foreign).await?;

    // East disengaged, `hello` is deleted: behind the finalizer its copy in
    // west goes at once; east, engaged again, sweeps its orphan.
    assert!(fleet.disengage("east").await);
    api.delete("hello", &Default::default()).await?;
    wait_for(TIMEOUT, || async { api.get_opt("hello").await.ok().filter(Option::is_none) })
        .await
        .context("hello is deleted")?;
    wait_for(TIMEOUT, || async {
        configmaps(&west_client, home.name()).get_opt("hello-greeting").await.ok().filter(Option::is_none)
    })
    .await
    .context("west's copy goes with its owner")?;
    assert!(configmaps(&east_client, home.name()).get_opt("hello-greeting").await?.is_some(), "east was away");
    fleet
        .engage("east", {
            let c = east_client.clone();
            async move { Ok(c) }
        })
        .await?
        .context("east starts again")?;
    wait_for(TIMEOUT, || async {
        configmaps(&east_client, home.name()).get_opt("hello-greeting").await.ok().filter(Option::is_none)
    })
    .await
    .context("east sweeps the copy whose owner went while it was away")?;
    assert_eq!(marked(&east_client, home.name()).await?, ["during-greeting"], "the live owner's copy stays");
    assert!(configmaps(&west_client, home.name()).get_opt("foreign").await?.is_some(), "another home's child stays");

    fleet.shutdown().await;
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(home.client());
    let _ = crds.delete("beacons.fixtures.capstan.dev", &Default::default()).await;
    home.cleanup().await
}
