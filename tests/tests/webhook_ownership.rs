//! Who owns the webhook configurations and the CRD conversion a host
//! installs (`--install-webhooks`), on the real kube-apiserver: a second
//! host or a tool (`capstan dev`, `capstan e2e`) never replaces or removes
//! what a running host installed, takes over from one that is gone, and a
//! component removed from a host takes its admission webhooks with it
//! while its conversion stays (turning it off would lose data).
//!
//! One test: the configurations are cluster-wide, named by the component.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use capstan_host::serve::host::{Host, HostBuilder};
use capstan_host::serve::server::Server;
use capstan_host::serve::webhook::install::{self, OWNER_ANNOTATION};
use capstan_host::serve::webhook::tls::Certs;
use capstan_host::serve::webhook::{self, Endpoint, Install, Registry};
use capstan_host::testing::find_component;
use capstan_tests::{ControlPlane, TestNamespace, free_port, wait_for};
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use serde_json::{Value, json};

const GROUP: &str = "webhooks.examples.capstan.dev";
const CONFIGURATION: &str = "capstan-greeter-webhooks";

/// A host serving `greeter-webhooks` on a port of its own, installing its
/// webhooks there.
struct Serving {
    install: Install,
    registry: Arc<Registry>,
    server: Server,
}

async fn serving() -> Result<Serving> {
    let port = free_port()?;
    let certs = Arc::new(Certs::self_managed(&["127.0.0.1".to_owned()])?);
    let install = Install::new(Endpoint::Url(format!("https://127.0.0.1:{port}")), certs.ca_bundle());
    let registry = Arc::new(Registry::new().installing(Some(install.clone())));
    let server = webhook::serve(([127, 0, 0, 1], port).into(), certs, Arc::clone(&registry)).await?;
    Ok(Serving { install, registry, server })
}

async fn host(ns: &TestNamespace, serving: &Serving) -> Result<Host, capstan_host::serve::host::Error> {
    let component = find_component("greeter-webhooks").map_err(|e| anyhow::anyhow!(e)).expect("built");
    HostBuilder::new(ns.client())
        .namespace(Some(ns.name().to_owned()))
        .install_crds(true)
        .webhooks(Some(Arc::clone(&serving.registry)))
        .component(component)
        .start()
        .await
}

/// The owner annotation and the URL of the first webhook of the
/// validating configuration, if there is one.
async fn validating(ns: &TestNamespace) -> Result<Option<(String, String)>> {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(ns.client());
    let Some(config) = api.get_opt(CONFIGURATION).await? else { return Ok(None) };
    let owner = config.metadata.annotations.unwrap_or_default().get(OWNER_ANNOTATION).cloned().unwrap_or_default();
    let url = config.webhooks.unwrap_or_default().first().and_then(|w| w.client_config.url.clone()).unwrap_or_default();
    Ok(Some((owner, url)))
}

/// The CRD's conversion strategy and webhook URL.
async fn conversion(ns: &TestNamespace) -> Result<(String, String)> {
    let crd = Api::<CustomResourceDefinition>::all(ns.client()).get(&format!("greetings.{GROUP}")).await?;
    let conversion = crd.spec.conversion.context("a conversion stanza")?;
    let url = conversion.webhook.and_then(|w| w.client_config).and_then(|c| c.url).unwrap_or_default();
    Ok((conversion.strategy, url))
}

fn greetings(ns: &TestNamespace, version: &str) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, version, "Greeting"), "greetings");
    Api::namespaced_with(ns.client(), ns.name(), &resource)
}

/// Creates a Greeting at v1alpha1 (retrying while the API server's webhook
/// informer catches up) and reads it back at v1: the conversion ran.
async fn converts(ns: &TestNamespace, name: &str) -> Result<Value> {
    let v1alpha1 = greetings(ns, "v1alpha1");
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{GROUP}/v1alpha1"), "kind": "Greeting",
        "metadata": {"name": name}, "spec": {"message": "kept", "replicas": 2},
    }))?;
    wait_for(Duration::from_secs(30), || async { v1alpha1.create(&PostParams::default(), &object).await.ok() }).await?;
    Ok(greetings(ns, "v1").get(name).await?.data)
}

#[tokio::test(flavor = "multi_thread")]
async fn webhooks_belong_to_the_host_that_installed_them() -> Result<()> {
    let _ = tracing_subscriber::fmt().with_env_filter("info,kube_client=off").with_test_writer().try_init();
    ControlPlane::shared().await?;
    let ns = TestNamespace::new("webhook-owner").await?;

    // The host that serves the cluster installs the webhooks and conversion.
    let first = serving().await?;
    let first_host = host(&ns, &first).await?;
    let first_owner = first.install.owner();
    let (owner, url) = validating(&ns).await?.context("installed")?;
    assert_eq!(owner, first_owner);
    assert!(url.starts_with(&first_owner), "{url}");
    assert_eq!(conversion(&ns).await?, ("Webhook".to_owned(), format!("{first_owner}/convert/greeter-webhooks")));

    // A tool (capstan e2e, capstan dev) runs the same component with a
    // webhook server of its own: it is refused, names the owner, and
    // replaces nothing.
    let tool = serving().await?;
    let refused = host(&ns, &tool).await.err().context("a second host takes over a live host's webhooks")?;
    let message = refused.to_string();
    assert!(message.contains("installed by another host") && message.contains(&first_owner), "{message}");
    assert_eq!(validating(&ns).await?.map(|(owner, _)| owner), Some(first_owner.clone()));

    // ... and what it does when it stops removes nothing of the other's:
    // the configurations stay, and so does the conversion, so a write at
    // the old version keeps the fields only the new one has.
    let manifest = first.registry.get("greeter-webhooks")?.component.manifest.clone();
    let cluster = capstan_host::cluster::kube::KubeCluster::new(ns.client(), None);
    install::uninstall(&cluster, &manifest, &tool.install).await?;
    assert_eq!(validating(&ns).await?.map(|(owner, _)| owner), Some(first_owner.clone()));
    assert!(Api::<MutatingWebhookConfiguration>::all(ns.client()).get_opt(CONFIGURATION).await?.is_some());
    assert_eq!(conversion(&ns).await?.0, "Webhook");
    let read = converts(&ns, "after-the-tool").await?;
    assert_eq!(read["spec"]["greeting"], json!({"text": "kept", "replicas": 2}), "{read}");

    // The first host is gone without a word (a crash): nothing answers at
    // its address, so the next host takes over.
    first.server.shutdown().await;
    let second = serving().await?;
    let second_host = host(&ns, &second).await?;
    let second_owner = second.install.owner();
    assert_eq!(validating(&ns).await?.map(|(owner, _)| owner), Some(second_owner.clone()));
    assert_eq!(conversion(&ns).await?.1, format!("{second_owner}/convert/greeter-webhooks"));

    // A component removed from the host takes its admission webhooks
    // with it; its conversion stays (fail closed, nothing lost).
    let component = find_component("greeter-webhooks").map_err(|e| anyhow::anyhow!(e))?;
    second_host.unload(&component).await.context("the component was loaded")?;
    ensure!(validating(&ns).await?.is_none(), "the validating configuration outlived its component");
    assert!(Api::<MutatingWebhookConfiguration>::all(ns.client()).get_opt(CONFIGURATION).await?.is_none());
    assert_eq!(conversion(&ns).await?.0, "Webhook");

    second_host.shutdown().await;
    first_host.shutdown().await;
    second.server.shutdown().await;
    tool.server.shutdown().await;
    Api::<CustomResourceDefinition>::all(ns.client())
        .delete(&format!("greetings.{GROUP}"), &DeleteParams::default())
        .await?;
    ns.cleanup().await
}
