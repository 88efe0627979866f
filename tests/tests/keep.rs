//! `keep_children()` in `delete()` keeps the children, on the real API
//! server with its garbage collector (kube-controller-manager): the host
//! removes its ownerReference from them before it removes its finalizer, so
//! the collector leaves them when the object is gone. Without it they
//! follow the object. The fixture is `keeper`
//! (`tests/fixtures/guests/src/keeper.rs`).

use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use capstan_host::serve::host::HostBuilder;
use capstan_host::testing::find_component;
use capstan_tests::{ControlPlane, TestNamespace, wait_for};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(30);
/// The garbage collector learns a new CRD's kind from discovery, which it
/// rereads every 30 s.
const GC_TIMEOUT: Duration = Duration::from_secs(90);

fn keeper_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("fixtures.capstan.dev", "v1", "Keeper"), "keepers")
}

fn owner_uids(cm: &ConfigMap) -> Vec<String> {
    cm.metadata.owner_references.iter().flatten().map(|o| o.uid.clone()).collect()
}

/// A plain (not controller) ownerReference.
fn reference(api_version: &str, kind: &str, name: &str, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: api_version.to_owned(),
        kind: kind.to_owned(),
        name: name.to_owned(),
        uid: uid.to_owned(),
        controller: None,
        block_owner_deletion: None,
    }
}

fn meta(name: &str, owner: Option<OwnerReference>) -> ObjectMeta {
    ObjectMeta { name: Some(name.to_owned()), owner_references: owner.map(|o| vec![o]), ..ObjectMeta::default() }
}

#[tokio::test(flavor = "multi_thread")]
async fn children_kept_by_delete_lose_the_hosts_owner_reference_and_outlive_the_garbage_collector() -> Result<()> {
    ControlPlane::shared().await?;
    let ns = TestNamespace::new("keep").await?;
    let guest = find_component("keeper").unwrap_or_else(|e| panic!("{e}"));
    let host = HostBuilder::new(ns.client())
        .namespace(Some(ns.name().to_owned()))
        .install_crds(true)
        .component(guest)
        .start()
        .await?;
    let keepers: Api<DynamicObject> = Api::namespaced_with(ns.client(), ns.name(), &keeper_resource());
    let cms: Api<ConfigMap> = ns.api();
    let secrets: Api<Secret> = ns.api();

    // `kept` keeps its children when deleted; `followed` does not.
    let mut uids = Vec::new();
    for (name, children, on_delete) in
        [("kept", &["kept-child", "kept-shared"][..], "keep"), ("followed", &["followed-child"][..], "")]
    {
        let spec = json!({"spec": {"children": children, "onDelete": on_delete}});
        let keeper = DynamicObject::new(name, &keeper_resource()).data(spec);
        let created =
            wait_for(TIMEOUT, || async { keepers.create(&PostParams::default(), &keeper).await.ok() }).await?;
        let uid = created.metadata.uid.context("a Keeper has a uid")?;
        for child in children {
            wait_for(TIMEOUT, || async { cms.get(child).await.ok().filter(|c| owner_uids(c) == [uid.clone()]) })
                .await
                .with_context(|| format!("{child} was not applied with its owner's reference"))?;
        }
        uids.push(uid);
    }
    let kept = uids[0].clone();

    // A second owner of `kept-shared`, whose reference must stay (the
    // collector would leave that child anyway: it has an owner left;
    // `kept-child` has none but the Keeper). And a dependent of `kept` that
    // is no child (a Secret, not an owned kind), which the garbage
    // collector deletes with it: once that is gone, the collector has acted
    // on `kept`'s dependents.
    let anchor = ConfigMap { metadata: meta("anchor", None), ..ConfigMap::default() };
    let anchor_uid = cms.create(&PostParams::default(), &anchor).await?.metadata.uid.context("the anchor has a uid")?;
    let add = json!([{"op": "add", "path": "/metadata/ownerReferences/-",
        "value": reference("v1", "ConfigMap", "anchor", &anchor_uid)}]);
    cms.patch("kept-shared", &PatchParams::default(), &Patch::Json::<()>(serde_json::from_value(add)?)).await?;
    let owned_by_kept = reference("fixtures.capstan.dev/v1", "Keeper", "kept", &kept);
    let dependent = Secret { metadata: meta("kept-dependent", Some(owned_by_kept)), ..Secret::default() };
    secrets.create(&PostParams::default(), &dependent).await?;

    for name in ["kept", "followed"] {
        keepers.delete(name, &DeleteParams::background()).await?;
    }
    for name in ["kept", "followed"] {
        wait_for(TIMEOUT, || async { keepers.get_opt(name).await.ok()?.is_none().then_some(()) })
            .await
            .with_context(|| format!("the Keeper {name} was not finalized"))?;
    }
    wait_for(GC_TIMEOUT, || async {
        let dependent = secrets.get_opt("kept-dependent").await.ok()?;
        let followed = cms.get_opt("followed-child").await.ok()?;
        (dependent.is_none() && followed.is_none()).then_some(())
    })
    .await
    .context("the garbage collector deleted neither `kept`'s dependent Secret nor `followed`'s child within 90 s")?;
    // The collector works through dependents concurrently: a moment more.
    tokio::time::sleep(Duration::from_secs(3)).await;

    let child = cms.get_opt("kept-child").await?.context("the kept child was garbage collected")?;
    ensure!(owner_uids(&child).is_empty(), "the kept child has owners still: {:?}", child.metadata.owner_references);
    let shared = cms.get_opt("kept-shared").await?.context("the kept child with two owners is gone")?;
    ensure!(
        owner_uids(&shared) == [anchor_uid],
        "the kept child names its other owner only, not the deleted Keeper {kept}: {:?}",
        shared.metadata.owner_references
    );

    host.shutdown().await;
    ns.cleanup().await
}
