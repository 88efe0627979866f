//! A canary's webhooks, on the real kube-apiserver: a new version on trial
//! (`--canary`) serves no webhook until it is promoted (the version in use
//! answers every review), so the configurations the host installs stay the
//! version in use's until then. A rejected canary leaves them as they were;
//! a promoted one installs its own.
//!
//! A file of its own: the configurations are cluster-wide, named by the
//! component, and `tests/tests/webhooks.rs` installs the same component's.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result};
use capstan_host::serve::host::{ComponentStatus, Host, HostBuilder};
use capstan_host::testing::find_component;
use capstan_tests::webhook::WebhookServer;
use capstan_tests::{ControlPlane, TestNamespace, wait_for};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(60);
const CONFIGURATION: &str = "capstan-strict-webhooks";
const VALIDATE: &str = "validate.vaults.fixtures.capstan.dev";
const AUDIT: &str = "audit.vaults.fixtures.capstan.dev";
const FINALIZER: &str = "fixtures.capstan.dev/vault";

fn component(stem: &str) -> Result<PathBuf> {
    find_component(stem).map_err(anyhow::Error::msg)
}

fn status_of(host: &Host, file: &Path) -> Option<ComponentStatus> {
    host.status().into_iter().find(|s| s.path == file)
}

/// The validating webhooks the component's installed configuration holds.
async fn validating(client: &kube::Client) -> Result<Vec<String>> {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let config = api.get_opt(CONFIGURATION).await?.context("the validating configuration is installed")?;
    let mut names: Vec<String> = config.webhooks.unwrap_or_default().into_iter().map(|w| w.name).collect();
    names.sort();
    Ok(names)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_canary_installs_its_webhooks_only_once_promoted_and_a_rejected_one_leaves_them_as_they_were() -> Result<()> {
    ControlPlane::shared().await?;
    let ns = TestNamespace::new("canary-webhooks").await?;
    let dir = std::env::temp_dir().join(format!("capstan-canary-webhooks-{}", ns.name()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let file = dir.join("vaults.wasm");
    std::fs::copy(component("strict-webhooks")?, &file)?;
    let webhooks = WebhookServer::start(true).await?;
    let host = HostBuilder::new(ns.client())
        .namespace(Some(ns.name().to_owned()))
        .install_crds(true)
        .canary(Some(50))
        .webhooks(Some(Arc::clone(&webhooks.registry)))
        .components_dir(Some(dir.clone()))
        .start()
        .await?;
    let resource =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("fixtures.capstan.dev", "v1", "Vault"), "vaults");
    let vaults: Api<DynamicObject> = Api::namespaced_with(ns.client(), ns.name(), &resource);
    // Enough Vaults that the canary's share (half, by a hash of namespace
    // and name) holds two of them: a canary with an empty share would be
    // promoted at once.
    let gvk = capstan_host::object::Gvk::new("fixtures.capstan.dev", "v1", "Vault");
    let mut names = Vec::new();
    while names.len() < 4
        || names
            .iter()
            .filter(|n: &&String| {
                let r = capstan_host::object::ObjectRef::new(gvk.clone(), Some(ns.name()), n.as_str());
                capstan_host::control::reconciler::in_share(&r, 50)
            })
            .count()
            < 2
    {
        names.push(format!("v{}", names.len()));
    }
    for name in &names {
        let vault: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "fixtures.capstan.dev/v1", "kind": "Vault",
            "metadata": {"name": name}, "spec": {"size": 1},
        }))?;
        wait_for(TIMEOUT, || async { vaults.create(&PostParams::default(), &vault).await.ok() }).await?;
    }
    for name in &names {
        wait_for(TIMEOUT, || async {
            let v = vaults.get(name).await.ok()?;
            v.metadata.finalizers.as_ref().is_some_and(|f| f.iter().any(|f| f == FINALIZER)).then_some(())
        })
        .await
        .with_context(|| format!("{name} reconciled"))?;
    }
    assert_eq!(validating(&ns.client()).await?, [VALIDATE]);

    // A version that declares the audit webhook and fails: rejected, and
    // the configuration is still the running version's.
    std::fs::copy(component("strict-webhooks-audit-broken")?, &file)?;
    let rejected = wait_for(TIMEOUT, || async { status_of(&host, &file).and_then(|s| s.rejected) }).await?;
    assert_eq!(rejected.kind, "canary", "{rejected:?}");
    assert_eq!(
        validating(&ns.client()).await?,
        [VALIDATE],
        "a rejected canary left its webhook installed, answered by a version that does not declare it"
    );

    // A good one: once promoted, its webhooks are installed.
    std::fs::copy(component("strict-webhooks-audit")?, &file)?;
    wait_for(TIMEOUT, || async { status_of(&host, &file).filter(|s| s.swaps == 1 && s.canary.is_none()) })
        .await
        .context("the good version is promoted")?;
    wait_for(TIMEOUT, || async { validating(&ns.client()).await.ok().filter(|w| w.len() == 2) })
        .await
        .context("the promoted version's webhooks are installed")?;
    assert_eq!(validating(&ns.client()).await?, [AUDIT, VALIDATE]);

    // The Vaults go while the host runs, so that it removes its finalizer:
    // left behind, they would hold the namespace and the CRD in
    // `Terminating` for every later test that deletes or installs it.
    for name in &names {
        vaults.delete(name, &Default::default()).await?;
    }
    wait_for(TIMEOUT, || async { vaults.list(&Default::default()).await.ok().filter(|l| l.items.is_empty()) })
        .await
        .context("the Vaults did not go")?;
    host.shutdown().await;
    webhooks.server.shutdown().await;
    for kind in ["validatingwebhookconfigurations", "mutatingwebhookconfigurations"] {
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(
                "admissionregistration.k8s.io",
                "v1",
                if kind.starts_with('v') { "ValidatingWebhookConfiguration" } else { "MutatingWebhookConfiguration" },
            ),
            kind,
        );
        let api: Api<DynamicObject> = Api::all_with(ns.client(), &resource);
        let _ = api.delete(CONFIGURATION, &Default::default()).await;
    }
    let _ = std::fs::remove_dir_all(&dir);
    ns.cleanup().await
}
