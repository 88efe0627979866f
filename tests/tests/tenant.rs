//! The tenant operator (`examples/tenant`) on the real API server: a
//! cluster-scoped primary with namespaced children in a namespace it makes,
//! a RoleBinding to `admin` (RBAC management), failing with status,
//! children the API server refuses, and restarts.

use std::time::Duration;

use anyhow::{Context as _, Result};
use capstan_host::serve::host::{Host, HostBuilder};
use capstan_host::testing::find_component;
use capstan_tests::bench::RequestCounts;
use capstan_tests::{ControlPlane, TestNamespace, occurrences, random_suffix, wait_for};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ResourceQuota};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(40);

fn tenants(client: &kube::Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("examples.capstan.dev", "v1alpha1", "Tenant");
    Api::all_with(client.clone(), &ApiResource::from_gvk_with_plural(&gvk, "tenants"))
}

async fn start(client: &kube::Client, namespaces: &[&str]) -> Result<Host> {
    let component = find_component("tenant").map_err(anyhow::Error::msg)?;
    Ok(HostBuilder::new(client.clone())
        .namespaces(namespaces.iter().copied())
        .install_crds(true)
        .component(component)
        .start()
        .await?)
}

fn condition<'a>(t: &'a DynamicObject, type_: &str) -> Option<&'a Value> {
    t.data["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == type_)
}

fn has(t: &DynamicObject, type_: &str, status: &str, reason: &str) -> bool {
    condition(t, type_).is_some_and(|c| c["status"] == status && c["reason"] == reason)
}

/// Events (in any namespace) about the Tenant `name` with `reason`.
async fn events(client: &kube::Client, name: &str, reason: &str) -> Vec<Event> {
    let list =
        Api::<Event>::all(client.clone()).list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default();
    list.into_iter()
        .filter(|e| {
            e.regarding.as_ref().is_some_and(|r| r.kind.as_deref() == Some("Tenant") && r.name.as_deref() == Some(name))
        })
        .filter(|e| e.reason.as_deref() == Some(reason))
        .collect()
}

async fn merge(api: &Api<DynamicObject>, name: &str, patch: Value) -> Result<()> {
    api.patch(name, &PatchParams::default(), &Patch::Merge(patch)).await?;
    Ok(())
}

/// Held by each test of this file: every host here reconciles the
/// cluster-scoped Tenants of all of them, so they run one at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread")]
async fn a_cluster_scoped_tenant_provisions_fails_with_status_reports_refused_children_and_survives_restarts()
-> Result<()> {
    let _serial = ONE_AT_A_TIME.lock().await;
    let plane = ControlPlane::shared().await?;
    let client = plane.client()?;
    let vault = TestNamespace::new("tenant-vault").await?;
    let name = format!("acme-{}", random_suffix(6));
    let ns = format!("tenant-{name}");
    let host = start(&client, &[&ns, vault.name()]).await?;
    let tenants = tenants(&client);

    let tenant: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "examples.capstan.dev/v1alpha1", "kind": "Tenant",
        "metadata": {"name": name},
        "spec": {"admins": ["alice"], "quota": {"pods": "10"}},
    }))?;
    wait_for(TIMEOUT, || async { tenants.create(&PostParams::default(), &tenant).await.ok() }).await?;
    let ready = wait_for(TIMEOUT, || async {
        tenants.get(&name).await.ok().filter(|t| has(t, "Ready", "True", "Provisioned"))
    })
    .await?;
    let uid = ready.metadata.uid.clone().context("uid")?;

    // The cluster-scoped Namespace child, in the Tenant's own scope.
    let namespace = Api::<Namespace>::all(client.clone()).get(&ns).await?;
    let owner = &namespace.metadata.owner_references.as_ref().context("owned")?[0];
    assert_eq!((owner.uid.as_str(), owner.controller), (uid.as_str(), Some(true)));
    // Namespaced children in it, under a cluster-scoped owner.
    let quota = Api::<ResourceQuota>::namespaced(client.clone(), &ns).get("quota").await?;
    assert_eq!(quota.metadata.owner_references.as_ref().context("owned")?[0].uid, uid);
    let binding = Api::<RoleBinding>::namespaced(client.clone(), &ns).get("tenant-admins").await?;
    assert_eq!(binding.role_ref.name, "admin");
    Api::<ConfigMap>::namespaced(client.clone(), &ns).get("tenant-info").await?;

    // Events about a cluster-scoped object carry no namespace in `regarding`.
    let created =
        wait_for(TIMEOUT, || async { Some(events(&client, &name, "Created").await).filter(|e| !e.is_empty()) }).await?;
    assert_eq!(created.len(), 1, "one Created event");
    assert!(created.iter().all(|e| e.regarding.as_ref().is_some_and(|r| r.namespace.is_none())), "{created:?}");

    // A Secret in another namespace, annotated for the tenant, triggers it.
    let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(json!({
        "metadata": {"name": "creds", "labels": {"tenants.examples.capstan.dev/tenant": name},
            "annotations": {"tenants.examples.capstan.dev/tenant": name}},
        "data": {"token": "czNjcmV0"},
    }))?;
    let before = RequestCounts::scrape(&client, &["configmaps", "rolebindings"]).await?;
    vault.api::<k8s_openapi::api::core::v1::Secret>().create(&PostParams::default(), &secret).await?;
    let cms = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    wait_for(TIMEOUT, || async {
        cms.get("tenant-info")
            .await
            .ok()
            .filter(|c| c.data.as_ref().and_then(|d| d.get("secrets")).map(String::as_str) == Some("1"))
    })
    .await?;
    // That pass changed the ConfigMap only: the RoleBinding, still as the
    // host last applied it (no one else writes it), is not applied again.
    // (This is the only test of this binary; no other writes RoleBindings.)
    let served = RequestCounts::scrape(&client, &["configmaps", "rolebindings"]).await?.since(&before);
    let applies = |call: &str| served.by_call.get(call).copied().unwrap_or(0.0);
    assert!(applies("APPLY configmaps") >= 1.0, "{:?}", served.by_call);
    assert_eq!(applies("APPLY rolebindings"), 0.0, "{:?}", served.by_call);

    // A child the API server refuses (422: a negative quota) reaches the
    // object: an Event naming it, the host's condition, and the guest's
    // own Ready=False from `failed_children`.
    merge(&tenants, &name, json!({"spec": {"quota": {"pods": "-1"}}})).await?;
    let refused = wait_for(TIMEOUT, || async {
        tenants
            .get(&name)
            .await
            .ok()
            .filter(|t| has(t, "Reconciled", "False", "ChildRefused") && has(t, "Ready", "False", "ChildRefused"))
    })
    .await?;
    let message = condition(&refused, "Reconciled").and_then(|c| c["message"].as_str()).unwrap_or_default().to_owned();
    assert!(message.contains("ResourceQuota") && message.contains("quota"), "names the child: {message}");
    let refusals =
        wait_for(TIMEOUT, || async { Some(events(&client, &name, "ChildRefused").await).filter(|e| !e.is_empty()) })
            .await?;
    // Backoff, then it waits for a change: a handful of attempts, not a hot loop.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let later = events(&client, &name, "ChildRefused").await;
    assert!(occurrences(&later) <= 6, "retried with backoff, not hot: {} refusals", occurrences(&later));
    // The same refusal again is one Event with a series, not a new object each time.
    assert!(
        later.len() < occurrences(&later) as usize
            && later.iter().any(|e| e.series.as_ref().is_some_and(|s| s.count >= 2)),
        "repeated refusals grow a series: {} Events, {} occurrences",
        later.len(),
        occurrences(&later)
    );
    let _ = refusals;

    // An invalid spec: a terminal failure with status; the children stay.
    merge(&tenants, &name, json!({"spec": {"admins": [], "quota": {"pods": "5"}}})).await?;
    wait_for(TIMEOUT, || async {
        tenants
            .get(&name)
            .await
            .ok()
            .filter(|t| has(t, "Ready", "False", "InvalidSpec") && has(t, "Reconciled", "False", "TerminalError"))
    })
    .await?;
    assert!(Api::<RoleBinding>::namespaced(client.clone(), &ns).get("tenant-admins").await.is_ok(), "children kept");

    // Fixed: Ready again, the host's condition gone (the CRD makes
    // `conditions` a list-map: the host must remove its own entry).
    merge(&tenants, &name, json!({"spec": {"admins": ["alice", "bob"]}})).await?;
    let fixed = wait_for(TIMEOUT, || async {
        tenants
            .get(&name)
            .await
            .ok()
            .filter(|t| has(t, "Ready", "True", "Provisioned") && condition(t, "Reconciled").is_none())
    })
    .await?;
    assert_eq!(fixed.data["status"]["conditions"].as_array().map(Vec::len), Some(1), "{}", fixed.data["status"]);

    // Restarts deliver no `added`: no second Created event.
    host.shutdown().await;
    drop(host);
    for _ in 0..2 {
        let restarted = start(&client, &[&ns, vault.name()]).await?;
        tokio::time::sleep(Duration::from_secs(3)).await;
        restarted.shutdown().await;
    }
    let host = start(&client, &[&ns, vault.name()]).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(events(&client, &name, "Created").await.len(), 1, "a restart is not a new tenant");

    // Deleted: `deleted` delivered, the finalizer removed, the namespace
    // follows: `delete()` does not keep the children, so the garbage
    // collector deletes it through the host's ownerReference (it learns the
    // Tenant kind from discovery, reread every 30 s).
    tenants.delete(&name, &DeleteParams::default()).await?;
    wait_for(TIMEOUT, || async { tenants.get(&name).await.is_err().then_some(()) }).await?;
    assert!(!events(&client, &name, "Deleted").await.is_empty());
    let namespaces = Api::<Namespace>::all(client.clone());
    wait_for(Duration::from_secs(90), || async {
        let namespace = namespaces.get_opt(&ns).await.ok()?;
        namespace.is_none_or(|n| n.metadata.deletion_timestamp.is_some()).then_some(())
    })
    .await
    .context("the tenant's namespace was not garbage collected")?;
    // `delete()` ran once (#28.7): neither the namespace going nor the
    // cache still showing the Tenant deleting brought a second `Deleted`.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(occurrences(&events(&client, &name, "Deleted").await), 1, "delete() ran once");
    host.shutdown().await;
    vault.cleanup().await?;
    Ok(())
}

// Issue 28 item 6: a component whose every child would be refused (a
// cluster-scoped primary owning a namespaced kind with no scope, as a 0.1.0
// Tenant declares it) is refused at load, naming the declaration to add;
// the host keeps running the others: the Tenant still provisions.
#[tokio::test(flavor = "multi_thread")]
async fn a_component_that_could_write_no_child_is_refused_at_load_and_the_others_run() -> Result<()> {
    let _serial = ONE_AT_A_TIME.lock().await;
    let plane = ControlPlane::shared().await?;
    let client = plane.client()?;
    let name = format!("upgrade-{}", random_suffix(6));
    let ns = format!("tenant-{name}");
    let dir = std::env::temp_dir().join(format!("capstan-unwritable-{}", random_suffix(8)));
    std::fs::create_dir_all(&dir)?;
    for component in ["tenant", "unwritable"] {
        std::fs::copy(find_component(component).map_err(anyhow::Error::msg)?, dir.join(format!("{component}.wasm")))?;
    }
    let host = HostBuilder::new(client.clone())
        .namespaces([ns.as_str()])
        .install_crds(true)
        .components_dir(Some(dir.clone()))
        .start()
        .await?;

    let status = host.status();
    let unwritable = status.iter().find(|c| c.path.ends_with("unwritable.wasm")).context("listed")?;
    assert_eq!(unwritable.state, "rejected", "{unwritable:?}");
    let rejected = unwritable.rejected.as_ref().context("a rejection")?;
    assert_eq!(rejected.kind, "manifest", "{rejected:?}");
    assert!(
        rejected.reason.contains("owns[0]: controller unwritable could write no v1/ConfigMap child")
            && rejected.reason.contains("give the owned kind a scope"),
        "{rejected:?}"
    );

    let tenants = tenants(&client);
    let tenant: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "examples.capstan.dev/v1alpha1", "kind": "Tenant",
        "metadata": {"name": name},
        "spec": {"admins": ["alice"]},
    }))?;
    wait_for(TIMEOUT, || async { tenants.create(&PostParams::default(), &tenant).await.ok() }).await?;
    wait_for(TIMEOUT, || async { tenants.get(&name).await.ok().filter(|t| has(t, "Ready", "True", "Provisioned")) })
        .await
        .context("the tenant provisions beside the refused component")?;

    tenants.delete(&name, &DeleteParams::default()).await?;
    wait_for(TIMEOUT, || async { tenants.get(&name).await.is_err().then_some(()) }).await?;
    host.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
