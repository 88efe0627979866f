//! What the host writes into a primary object's status, on the real API
//! server: the guest's status and the host's `Reconciled` condition, never
//! the status it read before the guest ran. The fixture is `status-writer`
//! (`tests/fixtures/guests/src/probe.rs`), a custom kind whose
//! `status.conditions` is an atomic list.

use std::time::Duration;

use anyhow::{Context as _, Result};
use capstan_host::serve::host::HostBuilder;
use capstan_host::testing::find_component;
use capstan_tests::{ControlPlane, TestNamespace, wait_for};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(30);

fn probe_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("fixtures.capstan.dev", "v1", "Probe"), "probes")
}

fn probes(ns: &TestNamespace) -> Api<DynamicObject> {
    Api::namespaced_with(ns.client(), ns.name(), &probe_resource())
}

/// The condition of `type_` in the status of `object`.
fn condition<'a>(object: &'a DynamicObject, type_: &str) -> Option<&'a Value> {
    object.data["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == type_)
}

// The guest's second pass runs while the spec changes: the host's status
// write then changes nothing and answers at the spec's resourceVersion,
// which must stay a trigger (it was taken for the host's own write once,
// and the new generation waited for a resync).
#[tokio::test(flavor = "multi_thread")]
async fn a_terminal_failure_keeps_what_the_guest_and_others_wrote_to_the_status_while_it_ran() -> Result<()> {
    ControlPlane::shared().await?;
    let ns = TestNamespace::new("status-kept").await?;
    let guest = find_component("status-writer").unwrap_or_else(|e| panic!("{e}"));
    let host = HostBuilder::new(ns.client())
        .namespace(Some(ns.name().to_owned()))
        .install_crds(true)
        .component(guest)
        .start()
        .await?;
    let probes = probes(&ns);

    // A first pass writes the guest's status; then another writer sets a
    // field of its own.
    let spec = json!({"spec": {"status": {"count": 1}}});
    probes.create(&PostParams::default(), &DynamicObject::new("p", &probe_resource()).data(spec)).await?;
    wait_for(TIMEOUT, || async {
        probes.get("p").await.ok().filter(|p| p.data["status"]["observedGeneration"] == json!(1)).map(|_| ())
    })
    .await
    .context("the first pass wrote no status")?;
    let other = json!({"apiVersion": "fixtures.capstan.dev/v1", "kind": "Probe", "metadata": {"name": "p"},
        "status": {"other": "before"}});
    probes.patch_status("p", &PatchParams::apply("e2e-other").force(), &Patch::Apply(other)).await?;

    // Now the guest writes Ready=False and `other` through the API, then
    // fails for good without a status.
    let change = json!({"spec": {"behaviour": "write-then-fail", "status": null}});
    probes.patch("p", &PatchParams::default(), &Patch::Merge(change)).await?;
    let p = wait_for(TIMEOUT, || async {
        probes.get("p").await.ok().filter(|p| {
            condition(p, "Reconciled").is_some_and(|c| c["status"] == "False" && c["observedGeneration"] == json!(2))
        })
    })
    .await;
    let p = match p {
        Ok(p) => p,
        Err(e) => {
            anyhow::bail!("no Reconciled=False condition for generation 2: {e}: {:#}", probes.get("p").await?.data)
        }
    };
    assert_eq!(condition(&p, "Reconciled").map(|c| &c["reason"]), Some(&json!("TerminalError")), "{:#}", p.data);
    let ready = condition(&p, "Ready").with_context(|| format!("the guest's Ready condition is gone: {:#}", p.data))?;
    assert_eq!(ready["status"], "False", "{:#}", p.data);
    assert_eq!(p.data["status"]["other"], "during", "reverted to what the host read: {:#}", p.data);

    host.shutdown().await;
    ns.cleanup().await
}
