//! `capstan e2e`: the scenario folders `capstan test` runs on the mock host,
//! run by the binary against the real API server (tests/control-plane/cp.sh):
//! the greeter's, a cluster-scoped controller that manages RBAC (tenant),
//! webhooks, a scheduler's (zone-scheduler in Rust and JavaScript, with
//! Nodes that have no kubelet), and the fleet example's on three API
//! servers. These install cluster-wide objects (webhook configurations,
//! Tenants, Nodes), so this suite takes its turn among those that do
//! (scripts/run-suites.py); `e2e_runs` has the runs that install none.

use anyhow::{Context as _, Result, ensure};
use capstan_tests::{ControlPlane, PrivateControlPlane, e2e, repo};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::ListParams;

#[tokio::test(flavor = "multi_thread")]
async fn the_examples_scenarios_hold_on_the_api_server_too() -> Result<()> {
    for (component, scenarios, cases) in [
        ("greeter", "examples/greeter/scenarios", 2),
        ("tenant", "examples/tenant/scenarios", 1),
        ("greeter-webhooks", "examples/greeter-webhooks/scenarios", 9),
    ] {
        // A step holds as soon as it does; 90 s leaves room for the
        // namespace controller's backoff when the tenant's Namespace goes.
        let (code, out) = e2e(component, &repo().join(scenarios), &["--timeout", "90"]).await?;
        ensure!(code == 0, "{component}: exit code {code}:\n{out}");
        ensure!(out.contains(&format!("{cases} passed, 0 failed")), "{component}:\n{out}");
    }
    Ok(())
}

/// The fleet example's scenario, on three API servers: `capstan e2e
/// --cluster west=… --cluster east=…` runs the fleet controller in the
/// shared cluster and places its marked children in the two members, as
/// the mock host does for `capstan test`.
#[tokio::test(flavor = "multi_thread")]
async fn a_fleet_scenario_holds_on_three_api_servers() -> Result<()> {
    let (west, east) = tokio::try_join!(PrivateControlPlane::start(false), PrivateControlPlane::start(false))?;
    let mut args = vec!["--timeout".to_owned(), "60".to_owned()];
    for (name, plane) in [("west", &west), ("east", &east)] {
        args.push("--cluster".to_owned());
        args.push(format!("{name}={}", plane.plane().kubeconfig_path().display()));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, out) = e2e("fleet", &repo().join("examples/fleet/scenarios"), &args).await?;
    ensure!(code == 0, "exit code {code}:\n{out}");
    ensure!(out.contains("1 passed, 0 failed"), "{out}");
    // The case's namespaces go with it, in the members too.
    for (name, plane) in [("west", &west), ("east", &east)] {
        let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(plane.plane().client()?);
        let left: Vec<String> = namespaces
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|n| n.metadata.deletion_timestamp.is_none())
            .filter_map(|n| n.metadata.name)
            .filter(|n| n == "demo" || n.starts_with("e2e-"))
            .collect();
        ensure!(left.is_empty(), "{name} keeps {left:?}");
    }
    Ok(())
}

/// The zone-scheduler's scenarios.
const ZONE_SCENARIOS: [&str; 3] = ["cordoned-and-not-ready", "spread-fit-and-retry", "taints-and-tolerations"];

/// Whether `name` is one of the zone-scheduler scenarios' Nodes as `capstan
/// e2e` names them on the cluster (`n-a-<random>`).
fn a_zone_scenario_node(name: &str) -> bool {
    ["n-a-", "n-b-", "n-c-", "n-gpu-", "n-drain-", "n-spot-", "n-off-", "n-down-"]
        .iter()
        .any(|p| name.strip_prefix(p).is_some_and(|s| s.len() == 6))
}

/// A scheduler sees every Node of the cluster, those of another case
/// too: the scheduler cases run one after the other, in one test.
#[tokio::test(flavor = "multi_thread")]
async fn scheduler_scenarios_hold_on_the_api_server() -> Result<()> {
    the_zone_scenarios_hold_and_leave_no_node_or_bound_pod_behind().await?;
    a_scenario_node_stays_ready_past_the_node_monitor_grace_period().await
}

/// A scheduler's scenarios on the API server: the case's Nodes get names
/// of their own, and the Event notes naming them and the Pods' namespace
/// are expected with the names on the cluster; afterwards the Pods bound
/// to those Nodes (which no kubelet will ever confirm stopped) are gone at
/// once, and so are the Nodes and their Leases.
async fn the_zone_scenarios_hold_and_leave_no_node_or_bound_pod_behind() -> Result<()> {
    let scenarios = repo().join("examples/zone-scheduler/scenarios");
    for component in ["zone-scheduler", "zone-scheduler-js"] {
        let (code, out) = e2e(component, &scenarios, &[]).await?;
        ensure!(code == 0, "{component}: exit code {code}:\n{out}");
        for case in ZONE_SCENARIOS {
            ensure!(out.contains(&format!("scenario {case} ... ok")), "{component}: {case}:\n{out}");
        }
        ensure!(out.contains("3 passed, 0 failed"), "{component}:\n{out}");
    }
    let client = ControlPlane::shared().await?.client()?;
    let nodes = kube::Api::<Node>::all(client.clone()).list(&ListParams::default()).await?;
    let nodes: Vec<String> = nodes.items.into_iter().filter_map(|n| n.metadata.name).collect();
    ensure!(!nodes.iter().any(|n| a_zone_scenario_node(n)), "the case's Nodes are left: {nodes:?}");
    let leases = kube::Api::<Lease>::namespaced(client.clone(), "kube-node-lease").list(&ListParams::default()).await?;
    let leases: Vec<String> = leases.items.into_iter().filter_map(|n| n.metadata.name).collect();
    ensure!(!leases.iter().any(|n| a_zone_scenario_node(n)), "the case's Node Leases are left: {leases:?}");
    let pods = kube::Api::<Pod>::all(client).list(&ListParams::default()).await?;
    let left: Vec<String> = pods
        .items
        .iter()
        .filter(|p| {
            let ns = p.metadata.namespace.as_deref().unwrap_or_default();
            ZONE_SCENARIOS.iter().any(|case| ns.starts_with(&format!("e2e-{case}-")))
        })
        .filter_map(|p| Some(format!("{}/{}", p.metadata.namespace.as_deref()?, p.metadata.name.as_deref()?)))
        .collect();
    ensure!(left.is_empty(), "the case's Pods are left (bound ones wait for a kubelet): {left:?}");
    Ok(())
}

/// A case's Node has no kubelet: `capstan e2e` renews its Lease, so
/// kube-controller-manager's node lifecycle controller does not mark it
/// `Unknown` (and taint it unreachable) after its node monitor grace period
/// (50 s): a step after a minute still schedules there. The step between
/// waits for something that never comes, so this case fails with exactly
/// that.
async fn a_scenario_node_stays_ready_past_the_node_monitor_grace_period() -> Result<()> {
    let dir = std::env::temp_dir().join(format!("capstan-e2e-steady-{}", std::process::id()));
    let case = dir.join("steady-node");
    let pod = |name: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: demo}}\nspec:\n  schedulerName: zone-spread\n  \
             containers: [{{name: app, image: registry.k8s.io/pause:3.10, resources: {{requests: {{cpu: 100m}}}}}}]\n"
        )
    };
    let bound = |name: &str| {
        format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: demo}}\nspec: {{nodeName: steady}}\n")
    };
    let node = "apiVersion: v1\nkind: Node\nmetadata: {name: steady, labels: {topology.kubernetes.io/zone: a}}\n\
                status:\n  allocatable: {cpu: \"2\", memory: 1Gi, pods: \"10\"}\n  \
                capacity: {cpu: \"2\", memory: 1Gi, pods: \"10\"}\n  conditions: [{type: Ready, status: \"True\"}]\n";
    for (file, text) in [
        ("given.yaml", format!("{node}---\n{}", pod("first"))),
        ("expect.yaml", bound("first")),
        (
            "steps/01-a-minute/expect.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: never, namespace: demo}\n".to_owned(),
        ),
        ("steps/02-later/apply.yaml", pod("second")),
        (
            "steps/02-later/expect.yaml",
            format!(
                "{}---\napiVersion: v1\nkind: Node\nmetadata: {{name: steady}}\nspec: {{taints: null}}\n\
                 status: {{conditions: [{{type: Ready, status: \"True\"}}]}}\n",
                bound("second")
            ),
        ),
    ] {
        let path = case.join(file);
        std::fs::create_dir_all(path.parent().context("a folder")?)?;
        std::fs::write(path, text)?;
    }
    let (code, out) = e2e("zone-scheduler", &dir, &["--timeout", "60"]).await?;
    std::fs::remove_dir_all(&dir)?;
    ensure!(code == 1, "exit code {code}:\n{out}");
    ensure!(out.contains("steps/01-a-minute/expect.yaml: v1/ConfigMap <case namespace>/never: not found"), "{out}");
    ensure!(!out.contains("steps/02-later/"), "the Node did not stay Ready for a minute:\n{out}");
    Ok(())
}
