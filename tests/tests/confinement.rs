//! A hostile component must not reach past its grants on the real API
//! server: children stay in the owner's namespace (and in the namespaces
//! the host watches), never take over another owner's object, carry no
//! forged ownerReferences, and Events stay where the controller may look.
//! The hostile behaviours live in the fixture guest (`tests/fixtures/guests`).

use std::time::Duration;

use anyhow::{Context as _, Result};
use capstan_host::serve::host::HostBuilder;
use capstan_host::testing::find_component;
use capstan_tests::{ControlPlane, TestNamespace, wait_for};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::events::v1::Event;
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
    let host = HostBuilder::new(ns.client())
        .namespace(Some(ns.name().to_owned()))
        .install_crds(true)
        .component(greeter)
        .start()
        .await?;
    let thief = find_component("crd-thief").map_err(anyhow::Error::msg)?;
    let err = host.load(&thief).await.expect_err("the thief is refused");
    assert!(
        matches!(&err, capstan_host::serve::host::Error::CrdOwned { owner, controller, .. } if owner == "greeter" && controller == "thief"),
        "{err}"
    );
    let crds: kube::Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        kube::Api::all(plane.client()?);
    let crd = crds.get("greetings.examples.capstan.dev").await?;
    let schema = serde_json::to_value(&crd.spec.versions[0].schema)?;
    assert!(schema.pointer("/openAPIV3Schema/properties/spec").is_some(), "the greeter's schema stays: {schema}");
    host.shutdown().await;
    ns.cleanup().await?;
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
