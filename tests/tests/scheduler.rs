//! The zone scheduler (`examples/zone-scheduler`) on the real API server.
//! Nodes are plain API objects (no kubelet runs): the host's scheduler
//! binds Pods that name `zone-spread` where the policy says, reports the
//! ones that fit nowhere (Event and `PodScheduled` condition) and binds
//! them once a Node fits, binds one of two Pods competing for room for
//! one, binds nothing twice across a restart of the host, and leaves Pods
//! of other schedulers alone. A Pod deleted while it waits for a retry is
//! dropped; a second component claiming the scheduler name is refused.
//!
//! Every Pod selects the Nodes of its own run by a label, so Nodes other
//! tests (or earlier runs) left in the cluster do not change the outcome.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, Result};
use capstan_host::control::controller::{Backoff, Settings};
use capstan_host::control::leader::LeaseSettings;
use capstan_host::serve::host::{Change, Error as HostError, Host, HostBuilder};
use capstan_host::testing::find_component;
use capstan_tests::{ControlPlane, TestNamespace, occurrences, random_suffix, wait_for};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod, ServiceAccount};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(20);
const ZONE: &str = "topology.kubernetes.io/zone";
const RUN: &str = "capstan.dev/scheduler-test-run";

/// A Ready Node of this run in `zone` with `cpu` and 4 GiB allocatable,
/// and `extra` labels; once the node lifecycle controller has lifted the
/// `node.kubernetes.io/not-ready` taint the API server gives every new
/// Node, as on a kubelet's Node (a scheduler places nothing there before).
async fn node(nodes: &Api<Node>, run: &str, name: &str, zone: &str, cpu: &str, extra: Value) -> Result<()> {
    let mut labels = json!({ZONE: zone, RUN: run});
    if let (Some(labels), Some(extra)) = (labels.as_object_mut(), extra.as_object()) {
        labels.extend(extra.clone());
    }
    let node: Node = serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}}))?;
    nodes.create(&PostParams::default(), &node).await.with_context(|| format!("creating node {name}"))?;
    let resources = json!({"cpu": cpu, "memory": "4Gi", "pods": "10"});
    let status = json!({"status": {
        "capacity": resources,
        "allocatable": resources,
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "test node",
            "lastHeartbeatTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
    }});
    nodes.patch_status(name, &PatchParams::default(), &Patch::Merge(&status)).await?;
    wait_for(TIMEOUT, || async {
        let taints = nodes.get(name).await.ok()?.spec.and_then(|s| s.taints).unwrap_or_default();
        (!taints.iter().any(|t| t.key == "node.kubernetes.io/not-ready")).then_some(())
    })
    .await
    .with_context(|| format!("node {name} still tainted not-ready"))
}

/// A Pod asking `scheduler` for `cpu` and 128 MiB, on the Nodes of `run`
/// that carry `selector` too.
fn pod(name: &str, scheduler: &str, run: &str, cpu: &str, selector: Value) -> Result<Pod> {
    let mut node_selector = json!({RUN: run});
    if let (Some(all), Some(extra)) = (node_selector.as_object_mut(), selector.as_object()) {
        all.extend(extra.clone());
    }
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "schedulerName": scheduler,
            "nodeSelector": node_selector,
            "containers": [{"name": "app", "image": "registry.example/app:1",
                "resources": {"requests": {"cpu": cpu, "memory": "128Mi"}}}],
        },
    }))?)
}

fn node_name(pod: &Pod) -> Option<String> {
    pod.spec.as_ref()?.node_name.clone()
}

fn unschedulable(pod: &Pod) -> Option<String> {
    let conditions = pod.status.as_ref()?.conditions.as_ref()?;
    let c = conditions.iter().find(|c| c.type_ == "PodScheduled")?;
    (c.status == "False" && c.reason.as_deref() == Some("Unschedulable")).then(|| c.message.clone().unwrap_or_default())
}

async fn bound(pods: &Api<Pod>, name: &str) -> Result<String> {
    wait_for(TIMEOUT, || async { pods.get(name).await.ok().as_ref().and_then(node_name) })
        .await
        .with_context(|| format!("pod {name} was not bound"))
}

/// Events about Pod `name` with `reason`.
async fn events(ns: &TestNamespace, name: &str, reason: &str) -> Vec<Event> {
    let list = ns.api::<Event>().list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default();
    list.into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .filter(|e| e.reason.as_deref() == Some(reason))
        .collect()
}

/// A host running the zone scheduler on `ns`; with `identity`, electing a
/// leader under that identity, which its Events name as their instance.
async fn start(ns: &TestNamespace, identity: Option<&str>) -> Result<Host> {
    let component = find_component("zone-scheduler").map_err(anyhow::Error::msg)?;
    let settings = Settings {
        backoff: Backoff { base: Duration::from_millis(200), max: Duration::from_secs(2) },
        ..Settings::default()
    };
    Ok(HostBuilder::new(ns.client())
        .namespace(Some(ns.name().to_owned()))
        .settings(settings)
        .leader_election(identity.map(|id| lease(ns, id)))
        .instance(identity.map(str::to_owned))
        .component(component)
        .start()
        .await?)
}

/// One test's namespace, run suffix (on its Nodes' names, zones and
/// labels), and APIs.
struct Run {
    ns: TestNamespace,
    run: String,
    nodes: Api<Node>,
    pods: Api<Pod>,
}

impl Run {
    async fn new(prefix: &str) -> Result<Self> {
        let client = ControlPlane::shared().await?.client()?;
        let ns = TestNamespace::new(prefix).await?;
        // Without kube-controller-manager no one makes the default
        // ServiceAccount that admission wants for a Pod.
        let account: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": "default"}}))?;
        let _ = ns.api::<ServiceAccount>().create(&PostParams::default(), &account).await;
        Ok(Self { run: random_suffix(6), nodes: Api::all(client), pods: ns.api(), ns })
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn pods_are_bound_where_the_policy_says_reported_when_they_fit_nowhere_never_overcommitted_nor_bound_twice()
-> Result<()> {
    let Run { ns, run, nodes, pods } = Run::new("scheduler").await?;
    let (a1, b1, c1, d1) = (format!("a1-{run}"), format!("b1-{run}"), format!("c1-{run}"), format!("d1-{run}"));
    node(&nodes, &run, &a1, &format!("zone-a-{run}"), "2", json!({})).await?;
    node(&nodes, &run, &b1, &format!("zone-b-{run}"), "2", json!({})).await?;
    let host = start(&ns, None).await?;

    // A Pod of another scheduler, made first: looked at last.
    pods.create(&PostParams::default(), &pod("other", "someone-else", &run, "100m", json!({}))?).await?;

    // Four Pods of 500m spread two and two over the zones.
    for i in 0..4 {
        pods.create(&PostParams::default(), &pod(&format!("web-{i}"), "zone-spread", &run, "500m", json!({}))?).await?;
    }
    let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
    for i in 0..4 {
        *per_node.entry(bound(&pods, &format!("web-{i}")).await?).or_default() += 1;
    }
    assert_eq!(per_node, BTreeMap::from([(a1.clone(), 2), (b1.clone(), 2)]), "spread over both zones");
    let scheduled =
        wait_for(TIMEOUT, || async { Some(events(&ns, "web-0", "Scheduled").await).filter(|e| !e.is_empty()) }).await?;
    let note = scheduled[0].note.clone().unwrap_or_default();
    assert!(note.starts_with(&format!("Successfully assigned {}/web-0 to ", ns.name())), "{note}");

    // A Pod that fits nowhere: the condition and the Event, then bound once
    // a Node that fits is added.
    pods.create(&PostParams::default(), &pod("big", "zone-spread", &run, "3", json!({}))?).await?;
    let message = wait_for(TIMEOUT, || async { pods.get("big").await.ok().as_ref().and_then(unschedulable) }).await?;
    assert!(message.contains("Insufficient cpu"), "{message}");
    let failed =
        wait_for(TIMEOUT, || async { Some(events(&ns, "big", "FailedScheduling").await).filter(|e| !e.is_empty()) })
            .await?;
    assert_eq!(failed[0].type_.as_deref(), Some("Warning"));
    assert!(failed[0].note.as_deref().unwrap_or_default().contains("Insufficient cpu"), "{failed:?}");
    node(&nodes, &run, &c1, &format!("zone-c-{run}"), "4", json!({})).await?;
    assert_eq!(bound(&pods, "big").await?, c1);

    // Room for one: of two Pods competing for it, one is bound, the other
    // is reported unschedulable and stays pending.
    node(&nodes, &run, &d1, &format!("zone-d-{run}"), "1", json!({"pool": "solo"})).await?;
    for name in ["solo-1", "solo-2"] {
        pods.create(&PostParams::default(), &pod(name, "zone-spread", &run, "800m", json!({"pool": "solo"}))?).await?;
    }
    let (pending, winner) = wait_for(TIMEOUT, || async {
        let one = pods.get("solo-1").await.ok()?;
        let two = pods.get("solo-2").await.ok()?;
        match (node_name(&one), node_name(&two)) {
            (Some(n), None) if unschedulable(&two).is_some() => Some((two, n)),
            (None, Some(n)) if unschedulable(&one).is_some() => Some((one, n)),
            _ => None,
        }
    })
    .await?;
    assert_eq!(winner, d1);
    let loser = pending.metadata.name.clone().context("named")?;
    assert!(unschedulable(&pending).is_some_and(|m| m.contains("Insufficient cpu")), "{:?}", pending.status);

    // Nothing bound twice, nothing overcommitted: every bound Pod's Node
    // has room for what is bound there.
    let all = pods.list(&ListParams::default()).await?.items;
    let mut cpu: BTreeMap<String, i64> = BTreeMap::new();
    for p in &all {
        if let Some(n) = node_name(p) {
            let requested = p
                .spec
                .as_ref()
                .map(|s| &s.containers[0])
                .and_then(|c| c.resources.as_ref()?.requests.as_ref()?.get("cpu").cloned());
            let milli = capstan_host::control::scheduler::quantity::parse_milli(&requested.context("a cpu request")?.0)
                .context("a quantity")?;
            *cpu.entry(n).or_default() += milli;
        }
    }
    let room = BTreeMap::from([(a1.clone(), 2000), (b1.clone(), 2000), (c1.clone(), 4000), (d1.clone(), 1000)]);
    for (n, used) in &cpu {
        assert!(used <= &room[n], "{n} overcommitted: {used}m");
    }
    assert!(node_name(&pods.get(&loser).await?).is_none(), "the loser stays pending");

    // The scheduler's instance holds the Nodes between decisions and gets
    // only what changed: a cordon and a deletion reach it. With d1 gone a
    // Pod of the solo pool fits nowhere (held stale, d1 would take it: 200m
    // free); with c1 cordoned a Pod goes to a1 or b1, not to the emptiest
    // zone.
    nodes.patch(&c1, &PatchParams::default(), &Patch::Merge(json!({"spec": {"unschedulable": true}}))).await?;
    nodes.delete(&d1, &DeleteParams::default()).await?;
    pods.create(&PostParams::default(), &pod("solo-3", "zone-spread", &run, "100m", json!({"pool": "solo"}))?).await?;
    let message = wait_for(TIMEOUT, || async {
        pods.get("solo-3").await.ok().as_ref().and_then(unschedulable).filter(|m| m.contains("node selector"))
    })
    .await
    .context("solo-3 was not reported as fitting no Node once d1 was gone")?;
    assert!(!message.contains("Insufficient"), "{message}");
    assert!(node_name(&pods.get("solo-3").await?).is_none(), "{message}");
    pods.create(&PostParams::default(), &pod("spread", "zone-spread", &run, "100m", json!({}))?).await?;
    let at = bound(&pods, "spread").await?;
    assert!(at == a1 || at == b1, "bound to {at}, though {c1} is cordoned");

    // A restarted host binds new Pods and none twice: one `Scheduled`
    // Event per bound Pod, never a series.
    host.shutdown().await;
    drop(host);
    let host = start(&ns, None).await?;
    pods.create(&PostParams::default(), &pod("after", "zone-spread", &run, "100m", json!({}))?).await?;
    bound(&pods, "after").await?;
    assert!(node_name(&pods.get(&loser).await?).is_none(), "the loser still waits");
    each_bound_once(&ns, &pods).await?;

    // The other scheduler's Pod was never touched.
    let other = pods.get("other").await?;
    assert!(node_name(&other).is_none() && unschedulable(&other).is_none(), "{:?}", other.status);
    assert!(events(&ns, "other", "FailedScheduling").await.is_empty());

    host.shutdown().await;
    for n in [&a1, &b1, &c1, &d1] {
        let _ = nodes.delete(n, &DeleteParams::default()).await;
    }
    ns.cleanup().await?;
    Ok(())
}

/// Lease 3 s, renew deadline 2 s, retry period 0.5 s, in `ns`.
fn lease(ns: &TestNamespace, identity: &str) -> LeaseSettings {
    LeaseSettings::new(ns.name(), identity).timing(
        Duration::from_secs(3),
        Duration::from_secs(2),
        Duration::from_millis(500),
    )
}

async fn holder(ns: &TestNamespace) -> Option<String> {
    let lease = ns.api::<Lease>().get_opt("capstan-scheduler-zone-spread").await.ok()??;
    lease.spec?.holder_identity.filter(|h| !h.is_empty())
}

/// Makes Pods `p-<i>` of 100m for each `i` in `range`, and waits until
/// each is bound.
async fn bind_all(pods: &Api<Pod>, run: &str, range: std::ops::Range<usize>) -> Result<()> {
    for i in range.clone() {
        pods.create(&PostParams::default(), &pod(&format!("p-{i}"), "zone-spread", run, "100m", json!({}))?).await?;
    }
    for i in range {
        bound(pods, &format!("p-{i}")).await?;
    }
    Ok(())
}

/// Every bound Pod in `ns` has one `Scheduled` Event, never a series;
/// returns the replica that reported it (`reportingInstance`) per Pod.
async fn each_bound_once(ns: &TestNamespace, pods: &Api<Pod>) -> Result<BTreeMap<String, String>> {
    let all = pods.list(&ListParams::default()).await?.items;
    let mut by = BTreeMap::new();
    for p in all.iter().filter(|p| node_name(p).is_some()) {
        let name = p.metadata.name.clone().context("named")?;
        let scheduled =
            wait_for(TIMEOUT, || async { Some(events(ns, &name, "Scheduled").await).filter(|e| !e.is_empty()) })
                .await?;
        assert_eq!(scheduled.len(), 1, "{name}: {scheduled:?}");
        assert!(scheduled[0].series.is_none(), "{name} bound once: {scheduled:?}");
        by.insert(name, scheduled[0].reporting_instance.clone().unwrap_or_default());
    }
    Ok(by)
}

#[tokio::test(flavor = "multi_thread")]
async fn with_leader_election_one_of_two_hosts_schedules_and_the_other_takes_over() -> Result<()> {
    let Run { ns, run, nodes, pods } = Run::new("scheduler-leader").await?;
    let (a1, b1) = (format!("la1-{run}"), format!("lb1-{run}"));
    node(&nodes, &run, &a1, &format!("zone-a-{run}"), "4", json!({})).await?;
    node(&nodes, &run, &b1, &format!("zone-b-{run}"), "4", json!({})).await?;
    let one = start(&ns, Some("replica-1")).await?;
    let two = start(&ns, Some("replica-2")).await?;

    let leader = wait_for(TIMEOUT, || holder(&ns)).await?;
    bind_all(&pods, &run, 0..6).await?;
    let by = each_bound_once(&ns, &pods).await?;
    assert_eq!(by.len(), 6);
    assert!(by.values().all(|i| *i == leader), "only the leader schedules: {by:?}");

    // The leader goes (releasing its Lease): the other one schedules.
    let (gone, stays) = if leader == "replica-1" { (one, two) } else { (two, one) };
    gone.shutdown().await;
    drop(gone);
    let next = wait_for(TIMEOUT, || async { holder(&ns).await.filter(|h| *h != leader) }).await?;
    bind_all(&pods, &run, 6..8).await?;
    let by = each_bound_once(&ns, &pods).await?;
    assert_eq!(by.len(), 8);
    assert!(["p-6", "p-7"].iter().all(|p| by[*p] == next), "taken over by {next}: {by:?}");

    stays.shutdown().await;
    for n in [&a1, &b1] {
        let _ = nodes.delete(n, &DeleteParams::default()).await;
    }
    ns.cleanup().await?;
    Ok(())
}

/// The Events about Pod `name` with `reason`, counting each of a series.
async fn event_count(ns: &TestNamespace, name: &str, reason: &str) -> i32 {
    occurrences(&events(ns, name, reason).await)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pod_deleted_while_queued_for_a_retry_is_dropped_and_later_pods_still_bind() -> Result<()> {
    let Run { ns, run, nodes, pods } = Run::new("scheduler-deleted").await?;
    let (a1, b1) = (format!("da1-{run}"), format!("db1-{run}"));
    node(&nodes, &run, &a1, &format!("zone-a-{run}"), "1", json!({})).await?;
    let host = start(&ns, None).await?;

    // A Pod that fits nowhere waits for a retry (backoff, or a Node change)
    // and is deleted meanwhile.
    pods.create(&PostParams::default(), &pod("ghost", "zone-spread", &run, "3", json!({}))?).await?;
    wait_for(TIMEOUT, || async { pods.get("ghost").await.ok().as_ref().and_then(unschedulable) }).await?;
    pods.delete("ghost", &DeleteParams::default()).await?;
    wait_for(TIMEOUT, || async { pods.get_opt("ghost").await.ok().and_then(|p| p.is_none().then_some(())) }).await?;
    // An attempt the scheduler made before its watch saw the deletion (a
    // retry after backoff, or after another test's Node came) is reported
    // in a task of its own, so its Event may land after the Pod is gone:
    // the count to hold is the one once it stops changing.
    let failures = wait_for(TIMEOUT, || async {
        let before = event_count(&ns, "ghost", "FailedScheduling").await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let after = event_count(&ns, "ghost", "FailedScheduling").await;
        (before == after).then_some(after)
    })
    .await?;

    // A Node it would fit on comes: its retries find nothing to schedule.
    // A later Pod that only fits where the deleted one would have gone
    // binds there: nothing was assumed for the deleted one.
    node(&nodes, &run, &b1, &format!("zone-b-{run}"), "4", json!({})).await?;
    pods.create(&PostParams::default(), &pod("later", "zone-spread", &run, "3", json!({}))?).await?;
    assert_eq!(bound(&pods, "later").await?, b1);
    // Past the longest backoff (2 s), so any retry left has run.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(pods.get_opt("ghost").await?.is_none(), "nothing made the deleted Pod again");
    assert_eq!(event_count(&ns, "ghost", "Scheduled").await, 0, "the deleted Pod was never bound");
    assert_eq!(event_count(&ns, "ghost", "FailedScheduling").await, failures, "no errors about the deleted Pod");
    let scheduler = host.scheduler("zone-spread").context("the scheduler runs")?;
    assert_eq!(scheduler.queue_len(), 0, "nothing left in the queue");

    // A new Pod of the same name is another Pod: scheduled as usual.
    pods.create(&PostParams::default(), &pod("ghost", "zone-spread", &run, "500m", json!({}))?).await?;
    assert_eq!(bound(&pods, "ghost").await?, a1);
    each_bound_once(&ns, &pods).await?;

    host.shutdown().await;
    for n in [&a1, &b1] {
        let _ = nodes.delete(n, &DeleteParams::default()).await;
    }
    ns.cleanup().await?;
    Ok(())
}

/// Writes `from` to `to` with a custom section appended, so that its digest
/// changes and nothing else: a rebuild of the same component.
fn rebuilt(from: &Path, to: &Path) -> Result<()> {
    let mut bytes = std::fs::read(from).with_context(|| format!("reading {}", from.display()))?;
    let name = b"capstan-test-rebuild";
    let mut section = vec![u8::try_from(name.len())?];
    section.extend_from_slice(name);
    section.extend_from_slice(random_suffix(8).as_bytes());
    bytes.push(0);
    bytes.push(u8::try_from(section.len())?);
    bytes.extend_from_slice(&section);
    std::fs::write(to, bytes).with_context(|| format!("writing {}", to.display()))?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_component_claiming_the_scheduler_name_is_refused_and_a_new_version_of_the_first_swaps_in()
-> Result<()> {
    let Run { ns, run, nodes, pods } = Run::new("scheduler-twin").await?;
    let a1 = format!("ta1-{run}");
    node(&nodes, &run, &a1, &format!("zone-a-{run}"), "2", json!({})).await?;
    let dir = std::env::temp_dir().join(format!("capstan-scheduler-twin-{run}"));
    std::fs::create_dir_all(&dir)?;
    let file = dir.join("zone-scheduler.wasm");
    let original = find_component("zone-scheduler").map_err(anyhow::Error::msg)?;
    std::fs::copy(&original, &file)?;
    let host = HostBuilder::new(ns.client()).namespace(Some(ns.name().to_owned())).component(&file).start().await?;

    let twin = find_component("scheduler-twin").map_err(anyhow::Error::msg)?;
    let refused = host.load(&twin).await.expect_err("a second component for zone-spread is refused");
    assert!(matches!(refused, HostError::DuplicateScheduler { .. }), "{refused:?}");
    let message = refused.to_string();
    for part in ["scheduler-twin", "zone-scheduler", "zone-spread", &file.display().to_string()] {
        assert!(message.contains(part), "{message} names {part}");
    }
    let status = host.status().into_iter().find(|s| s.path == twin).context("the twin's status")?;
    assert_eq!(status.rejected.map(|r| r.kind).as_deref(), Some("duplicate"));
    assert!(host.controller("scheduler-twin").is_none(), "the twin does not run");
    pods.create(&PostParams::default(), &pod("first", "zone-spread", &run, "100m", json!({}))?).await?;
    assert_eq!(bound(&pods, "first").await?, a1, "the zone scheduler serves on");

    // A new version of the zone scheduler in its own file keeps the name.
    rebuilt(&original, &file)?;
    let change = host.load(&file).await?;
    assert!(matches!(change, Change::Swapped { .. }), "{change:?}");
    pods.create(&PostParams::default(), &pod("second", "zone-spread", &run, "100m", json!({}))?).await?;
    assert_eq!(bound(&pods, "second").await?, a1);
    assert_eq!(host.schedulers().len(), 1);
    each_bound_once(&ns, &pods).await?;

    host.shutdown().await;
    let _ = nodes.delete(&a1, &DeleteParams::default()).await;
    let _ = std::fs::remove_dir_all(&dir);
    ns.cleanup().await?;
    Ok(())
}
