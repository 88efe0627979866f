//! A hostile component must not reach past its grants on the real API
//! server: children stay in the owner's namespace (and in the namespaces
//! the host watches), never take over another owner's object, carry no
//! forged ownerReferences, and Events stay where the controller may look.
//! The hostile behaviours live in the fixture guest (`tests/fixtures/guests`).

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result};
use capstan_host::serve::host::{Error as HostError, HOST_FIELD_MANAGER, HostBuilder, INSTALLED_BY};
use capstan_host::serve::webhook::tls::Certs;
use capstan_host::serve::webhook::{self, Endpoint, Install, Registry};
use capstan_host::testing::find_component;
use capstan_tests::{ControlPlane, TestNamespace, wait_for};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ListParams, PostParams};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(30);

fn cm(value: serde_json::Value) -> ConfigMap {
    serde_json::from_value(value).expect("a ConfigMap")
}

async fn notes(ns: &TestNamespace, name: &str, reason: &str) -> Vec<String> {
    let list = ns.api::<Event>().list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default();
    list.into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter_map(|e| e.note)
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hostile_component_stays_inside_its_owners_namespace_and_its_grants() -> Result<()> {
    ControlPlane::shared().await?;
    let home = TestNamespace::new("confined").await?;
    let elsewhere = TestNamespace::new("elsewhere").await?;
    let fixture = find_component("fixture").map_err(anyhow::Error::msg)?;
    let host =
        HostBuilder::new(home.client()).namespace(Some(home.name().to_owned())).component(fixture).start().await?;
    let cms = home.api::<ConfigMap>();
    let victims = elsewhere.api::<ConfigMap>();

    // A ConfigMap in a namespace the host does not watch is never written.
    victims
        .create(&PostParams::default(), &cm(json!({"metadata": {"name": "escaper-escaped"}, "data": {"owner": "me"}})))
        .await?;
    let escaper = json!({"metadata": {"name": "escaper"}, "data": {"behaviour": "escape", "target": elsewhere.name()}});
    cms.create(&PostParams::default(), &cm(escaper)).await?;
    let refused =
        wait_for(TIMEOUT, || async { Some(notes(&home, "escaper", "InvalidOutcome").await).filter(|n| !n.is_empty()) })
            .await?;
    assert!(refused[0].contains("live in its namespace"), "{refused:?}");
    let victim = victims.get("escaper-escaped").await?;
    assert_eq!(victim.data.context("data")?.get("owner").map(String::as_str), Some("me"));
    assert!(victim.metadata.owner_references.is_none(), "not taken over");

    // An object another owner controls is refused, not taken over. (The
    // owner is a Secret: a ConfigMap owner would be the fixture's own
    // primary, and would prune it.)
    let boss_secret: Secret = serde_json::from_value(json!({"metadata": {"name": "boss"}}))?;
    let boss = home.api::<Secret>().create(&PostParams::default(), &boss_secret).await?;
    let owned = json!({"metadata": {"name": "owned", "ownerReferences": [{
        "apiVersion": "v1", "kind": "Secret", "name": "boss", "uid": boss.metadata.uid, "controller": true,
    }]}, "data": {"owner": "boss"}});
    cms.create(&PostParams::default(), &cm(owned)).await?;
    let taker = json!({"metadata": {"name": "taker"}, "data": {"behaviour": "take-over", "target": "owned"}});
    cms.create(&PostParams::default(), &cm(taker)).await?;
    let refused =
        wait_for(TIMEOUT, || async { Some(notes(&home, "taker", "ChildRefused").await).filter(|n| !n.is_empty()) })
            .await?;
    assert!(refused[0].contains("owned") && refused[0].contains("AlreadyOwned"), "{refused:?}");
    let owned = cms.get("owned").await?;
    assert_eq!(owned.data.context("data")?.get("owner").map(String::as_str), Some("boss"));
    assert_eq!(owned.metadata.owner_references.context("refs")?[0].name, "boss");

    // A forged ownerReference on a child is dropped: only the host's stays.
    let forger = json!({"metadata": {"name": "forger"}, "data": {"behaviour": "forged-owner", "target": "boss"}});
    let forger = cms.create(&PostParams::default(), &cm(forger)).await?;
    let forged = wait_for(TIMEOUT, || async { cms.get("forger-forged").await.ok() }).await?;
    let refs = forged.metadata.owner_references.context("refs")?;
    assert_eq!(refs.len(), 1, "{refs:?}");
    assert_eq!(refs[0].uid, forger.metadata.uid.context("uid")?);

    // An Event about an object in a namespace the host does not watch is denied.
    let secret: Secret = serde_json::from_value(json!({"metadata": {"name": "s"}}))?;
    elsewhere.api::<Secret>().create(&PostParams::default(), &secret).await?;
    let target = format!("{}/s", elsewhere.name());
    let spoofer = json!({"metadata": {"name": "spoofer"}, "data": {"behaviour": "event-about", "target": target}});
    cms.create(&PostParams::default(), &cm(spoofer)).await?;
    let denied =
        wait_for(TIMEOUT, || async { Some(notes(&home, "spoofer", "Denied").await).filter(|n| !n.is_empty()) }).await?;
    assert!(denied[0].contains("does not watch"), "{denied:?}");
    let spoofed = elsewhere.api::<Event>().list(&ListParams::default()).await?.items;
    assert!(spoofed.iter().all(|e| e.reason.as_deref() != Some("Spoofed")), "no event landed elsewhere");

    host.shutdown().await;
    home.cleanup().await?;
    elsewhere.cleanup().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_component_may_not_replace_a_crd_another_component_installed() -> Result<()> {
    let plane = ControlPlane::shared().await?;
    let ns = TestNamespace::new("crd-owner").await?;
    let greeter = find_component("greeter").map_err(anyhow::Error::msg)?;
    // On the shared cluster the CRD may exist unmarked (another suite
    // applies it as kubectl would): the greeter's host takes it over.
    let host = HostBuilder::new(ns.client())
        .namespace(Some(ns.name().to_owned()))
        .install_crds(true)
        .adopt_crds(["greetings.examples.capstan.dev"])
        .component(greeter)
        .start()
        .await?;
    let thief = find_component("crd-thief").map_err(anyhow::Error::msg)?;
    let err = host.load(&thief).await.expect_err("the thief is refused");
    assert!(
        matches!(&err, capstan_host::serve::host::Error::CrdOwned { owner, controller, .. } if owner == "greeter" && controller == "thief"),
        "{err}"
    );
    let crds: kube::Api<CustomResourceDefinition> = kube::Api::all(plane.client()?);
    let crd = crds.get("greetings.examples.capstan.dev").await?;
    let schema = serde_json::to_value(&crd.spec.versions[0].schema)?;
    assert!(schema.pointer("/openAPIV3Schema/properties/spec").is_some(), "the greeter's schema stays: {schema}");
    host.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

/// The CRD of `component`, as its manifest defines it.
async fn crd_of(component: &std::path::Path) -> Result<serde_json::Value> {
    let engine = capstan_host::runtime::engine::Engine::new(Default::default())?;
    let runtime =
        capstan_host::runtime::invocation::Runtime::new(&engine, capstan_host::runtime::limits::Limits::default())
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    let loaded = capstan_host::runtime::component::Loader::new(runtime, None).load(component).await?;
    loaded.manifest.crds.first().cloned().context("the component defines a CRD")
}

/// Whether the CRD carries the host's marker and was written by the
/// host's field manager.
async fn taken_by_host(crds: &kube::Api<CustomResourceDefinition>, name: &str) -> Result<(Option<String>, bool)> {
    let crd = crds.get(name).await?;
    let marker = crd.metadata.annotations.unwrap_or_default().get(INSTALLED_BY).cloned();
    let written = crd
        .metadata
        .managed_fields
        .unwrap_or_default()
        .iter()
        .any(|m| m.manager.as_deref() == Some(HOST_FIELD_MANAGER));
    Ok((marker, written))
}

/// #29.3: a CRD that kubectl or Helm installed (no `capstan.dev/installed-by`)
/// is neither overwritten nor locked to a component by `--install-crds`,
/// nor given a conversion by `--install-webhooks`, unless the operator
/// names it in `--adopt-crd`. A private control plane: the test owns
/// the CRDs' history.
#[tokio::test(flavor = "multi_thread")]
async fn a_crd_someone_else_installed_is_taken_over_only_when_the_operator_says_so() -> Result<()> {
    let private = capstan_tests::PrivateControlPlane::start(false).await?;
    let client = private.plane().client()?;
    let crds: kube::Api<CustomResourceDefinition> = kube::Api::all(client.clone());
    let greeter = find_component("greeter").map_err(anyhow::Error::msg)?;

    // As Helm would install it: labelled, no marker.
    let mut crd = crd_of(&greeter).await?;
    crd["metadata"]["labels"] = json!({"app.kubernetes.io/managed-by": "Helm"});
    let name = crd["metadata"]["name"].as_str().context("a named CRD")?.to_owned();
    capstan_tests::install_crd(&client, crd).await?;

    let host = HostBuilder::new(client.clone()).install_crds(true).component(&greeter).start().await?;
    wait_for(TIMEOUT, || async { (host.status()[0].state == "running").then_some(()) })
        .await
        .with_context(|| format!("the component runs with the CRD as it is: {:?}", host.status()))?;
    assert_eq!(taken_by_host(&crds, &name).await?, (None, false), "left as Helm installed it");
    host.shutdown().await;

    // A component with a conversion (and webhooks reviewing its kind as
    // its own) on a CRD installed that way is refused, naming the way
    // out; the CRD keeps no conversion.
    let converter = find_component("greeter-webhooks").map_err(anyhow::Error::msg)?;
    let mut converted = crd_of(&converter).await?;
    let converted_name = converted["metadata"]["name"].as_str().context("a named CRD")?.to_owned();
    converted["metadata"]["labels"] = json!({"app.kubernetes.io/managed-by": "Helm"});
    capstan_tests::install_crd(&client, converted).await?;
    let webhooks = || async {
        let port = capstan_tests::free_port()?;
        let certs = Arc::new(Certs::self_managed(&["127.0.0.1".to_owned()])?);
        let install = Install::new(Endpoint::Url(format!("https://127.0.0.1:{port}")), certs.ca_bundle());
        let registry = Arc::new(Registry::new().installing(Some(install)));
        let server = webhook::serve(([127, 0, 0, 1], port).into(), certs, Arc::clone(&registry)).await?;
        anyhow::Ok((registry, server))
    };
    let (registry, server) = webhooks().await?;
    let refused = HostBuilder::new(client.clone())
        .webhooks(Some(Arc::clone(&registry)))
        .component(&converter)
        .start()
        .await
        .expect_err("its conversion is refused");
    assert!(
        matches!(&refused, HostError::Webhook {
            error: webhook::Error::ConversionUnowned { crd, .. } | webhook::Error::AdmissionUnowned { crd, installed: true, .. },
            ..
        } if *crd == converted_name),
        "{refused}"
    );
    assert!(refused.to_string().contains(&format!("--adopt-crd {converted_name}")), "names the way out: {refused}");
    let strategy = crds.get(&converted_name).await?.spec.conversion.map(|c| c.strategy);
    assert_ne!(strategy.as_deref(), Some("Webhook"), "no conversion was set");
    server.shutdown().await;

    // Named by the operator: taken over, marked, and converted.
    let (registry, server) = webhooks().await?;
    let host = HostBuilder::new(client.clone())
        .install_crds(true)
        .adopt_crds([name.clone(), converted_name.clone()])
        .webhooks(Some(Arc::clone(&registry)))
        .component(&greeter)
        .component(&converter)
        .start()
        .await?;
    assert_eq!(taken_by_host(&crds, &name).await?, (Some("greeter".to_owned()), true), "adopted");
    let strategy = crds.get(&converted_name).await?.spec.conversion.map(|c| c.strategy);
    assert_eq!(strategy.as_deref(), Some("Webhook"), "its conversion is set once adopted");
    host.shutdown().await;
    server.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wildcard_permission_is_refused_unless_the_host_allows_it() -> Result<()> {
    ControlPlane::shared().await?;
    let ns = TestNamespace::new("wildcard").await?;
    let wildcard = find_component("wildcard").map_err(anyhow::Error::msg)?;
    let host = HostBuilder::new(ns.client()).namespace(Some(ns.name().to_owned())).start().await?;
    let err = host.load(&wildcard).await.expect_err("refused by default");
    assert!(matches!(&err, capstan_host::serve::host::Error::Wildcard { what, .. } if what.contains("*/*")), "{err}");
    assert!(err.to_string().contains("--allow-wildcard-permissions"), "{err}");
    host.shutdown().await;
    let allowing = HostBuilder::new(ns.client())
        .namespace(Some(ns.name().to_owned()))
        .allow_wildcard_permissions(true)
        .start()
        .await?;
    allowing.load(&wildcard).await.expect("accepted when allowed");
    allowing.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}
