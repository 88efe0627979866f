//! The zone scheduler: a custom scheduler, `zone-spread`, written as guest
//! logic. For each pending Pod whose `spec.schedulerName` is `zone-spread`:
//!
//! 1. it keeps the Nodes that can take the Pod: not cordoned
//!    (`spec.unschedulable`), `Ready`, with no `NoSchedule` or `NoExecute`
//!    taint the Pod does not tolerate, matching the Pod's
//!    `spec.nodeSelector`, with room for its CPU and memory requests (and
//!    any other resource it requests) and for one more Pod. As with
//!    kube-scheduler, a Pod that tolerates the taint a cordon puts on a
//!    Node (`node.kubernetes.io/unschedulable:NoSchedule`) may go to a
//!    cordoned Node, and one that tolerates the taint a not-Ready Node gets
//!    (`node.kubernetes.io/not-ready`, or `unreachable` when its `Ready`
//!    status is `Unknown` or missing) to a Node that is not Ready;
//! 2. among the zones (label `topology.kubernetes.io/zone`) of those
//!    Nodes, it picks the zone with the fewest Pods bound there, then in
//!    it the Node with the most free CPU; ties go to the first name.
//!
//! When no Node can take the Pod, it answers why the way kube-scheduler
//! does: `0/3 nodes are available: 2 Insufficient cpu, 1 node(s) didn't
//! match Pod's node selector.` (a tainted Node: `node(s) had untolerated
//! taint(s)`).
//!
//! Build and run it: `capstan run "$(tests/build-guests.sh)/zone-scheduler.wasm"`
//! (see `docs/schedulers.md`).

use std::collections::BTreeMap;

use capstan_guest::k8s_openapi::api::core::v1::{Pod, Taint};
use capstan_guest::prelude::*;
use capstan_guest::scheduler::{NodeInfo, Resources, Unschedulable, pod_requests, tolerates};

/// The scheduler name Pods ask for in `spec.schedulerName`.
pub const SCHEDULER_NAME: &str = "zone-spread";

/// The label that names a Node's zone.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// The policy.
#[derive(Default)]
pub struct ZoneSpread;

impl Component for ZoneSpread {
    fn manifest(&self) -> Manifest {
        Manifest::new("zone-scheduler").scheduler(SCHEDULER_NAME)
    }
}

/// Why one Node cannot take the Pod (kube-scheduler's wording).
fn misfits(node: &NodeInfo, pod: &Pod, needed: &Resources) -> Vec<String> {
    // The taint the node lifecycle controller puts on a Node in this state.
    let state_taint =
        |key: &str| Taint { key: format!("node.kubernetes.io/{key}"), effect: "NoSchedule".into(), ..Taint::default() };
    if node.unschedulable() && !tolerates(pod, &state_taint("unschedulable")) {
        return vec!["node(s) were unschedulable".into()];
    }
    if !node.ready() {
        let key = if node.condition("Ready") == Some("False") { "not-ready" } else { "unreachable" };
        if !tolerates(pod, &state_taint(key)) {
            return vec!["node(s) were not ready".into()];
        }
    }
    if node.untolerated_taint(pod).is_some() {
        return vec!["node(s) had untolerated taint(s)".into()];
    }
    let selector = pod.spec.as_ref().and_then(|s| s.node_selector.as_ref());
    if selector.into_iter().flatten().any(|(key, value)| node.label(key) != Some(value.as_str())) {
        return vec!["node(s) didn't match Pod's node selector".into()];
    }
    needed
        .iter()
        .filter(|(name, amount)| **amount > 0 && node.free(name) < **amount)
        .map(|(name, _)| if name == "pods" { "Too many pods".to_owned() } else { format!("Insufficient {name}") })
        .collect()
}

/// `0/3 nodes are available: 2 Insufficient cpu, 1 …`: reasons by count,
/// most frequent first, then by name.
fn explain(nodes: usize, counts: BTreeMap<String, usize>) -> String {
    let mut counts: Vec<(String, usize)> = counts.into_iter().collect();
    counts.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let reasons: Vec<String> = counts.iter().map(|(reason, n)| format!("{n} {reason}")).collect();
    if reasons.is_empty() {
        return format!("0/{nodes} nodes are available.");
    }
    format!("0/{nodes} nodes are available: {}.", reasons.join(", "))
}

impl Scheduler for ZoneSpread {
    fn schedule(&self, pod: &Pod, nodes: &[NodeInfo]) -> Result<String, Unschedulable> {
        let needed = pod_requests(pod);
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        let mut fitting = Vec::new();
        for node in nodes {
            let why = misfits(node, pod, &needed);
            if why.is_empty() {
                fitting.push(node);
            }
            for reason in why {
                *counts.entry(reason).or_default() += 1;
            }
        }
        if fitting.is_empty() {
            return Err(Unschedulable::new(explain(nodes.len(), counts)));
        }
        // Pods per zone, over every Node of the zone (a Node without the
        // label is in the zone "").
        let mut pods_in: BTreeMap<&str, u32> = BTreeMap::new();
        for node in nodes {
            *pods_in.entry(node.label(ZONE_LABEL).unwrap_or_default()).or_default() += node.pods;
        }
        let zone_pods = |node: &NodeInfo| pods_in.get(node.label(ZONE_LABEL).unwrap_or_default()).copied().unwrap_or(0);
        let best = fitting
            .iter()
            .min_by(|a, b| {
                (zone_pods(a), a.label(ZONE_LABEL))
                    .cmp(&(zone_pods(b), b.label(ZONE_LABEL)))
                    .then_with(|| b.free("cpu").cmp(&a.free("cpu")))
                    .then_with(|| a.name.cmp(&b.name))
            })
            .expect("at least one Node fits");
        Ok(best.name.clone())
    }
}

#[cfg(target_arch = "wasm32")]
capstan_guest::export!(scheduler: ZoneSpread);

#[cfg(test)]
mod tests {
    use capstan_guest::k8s_openapi::api::core::v1::Node;
    use serde_json::json;

    use super::*;

    /// A builder of candidate Nodes: Ready, schedulable, in `zone`, with 2
    /// CPUs, 4 GiB and room for 10 Pods, nothing requested.
    struct Candidate {
        node: serde_json::Value,
        requested: Resources,
        pods: u32,
    }

    fn node(name: &str, zone: &str) -> Candidate {
        let node = json!({
            "metadata": {"name": name, "labels": {ZONE_LABEL: zone, "disk": "hdd"}},
            "spec": {},
            "status": {
                "allocatable": {"cpu": "2", "memory": "4Gi", "pods": "10"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        });
        Candidate { node, requested: Resources::new(), pods: 0 }
    }

    impl Candidate {
        fn requested(mut self, cpu: i64, pods: u32) -> Self {
            self.requested = [("cpu".to_owned(), cpu), ("pods".to_owned(), i64::from(pods) * 1000)].into();
            self.pods = pods;
            self
        }

        fn set(mut self, pointer: &str, value: serde_json::Value) -> Self {
            *self.node.pointer_mut(pointer).expect("the field's parent exists") = value;
            self
        }

        fn build(self) -> NodeInfo {
            let node: Node = serde_json::from_value(self.node).expect("a Node");
            NodeInfo::new(node).with_requested(self.requested, self.pods)
        }
    }

    fn pod(cpu: &str, memory: &str, selector: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {
                "schedulerName": SCHEDULER_NAME,
                "nodeSelector": selector,
                "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
            },
        }))
        .expect("a Pod")
    }

    fn schedule(pod: &Pod, nodes: Vec<Candidate>) -> Result<String, Unschedulable> {
        let nodes: Vec<NodeInfo> = nodes.into_iter().map(Candidate::build).collect();
        ZoneSpread.schedule(pod, &nodes)
    }

    #[test]
    fn the_zone_with_fewest_pods_wins_then_the_node_with_most_free_cpu() {
        let p = pod("500m", "128Mi", json!({}));
        let nodes = vec![
            node("a1", "a").requested(0, 1),
            node("b1", "b").requested(1000, 0),
            node("b2", "b").requested(500, 0),
            node("c1", "c").requested(0, 2),
        ];
        assert_eq!(schedule(&p, nodes), Ok("b2".to_owned()));
    }

    #[test]
    fn ties_go_to_the_first_zone_and_node_by_name() {
        let p = pod("100m", "1Mi", json!({}));
        let nodes = vec![node("z2", "b"), node("z1", "b"), node("y1", "a"), node("y2", "a")];
        assert_eq!(schedule(&p, nodes), Ok("y1".to_owned()));
    }

    #[test]
    fn the_pods_node_selector_is_honoured() {
        let p = pod("100m", "1Mi", json!({"disk": "ssd"}));
        let nodes = vec![node("a1", "a"), node("b1", "b").set("/metadata/labels/disk", json!("ssd")).requested(0, 5)];
        assert_eq!(schedule(&p, nodes), Ok("b1".to_owned()));
    }

    #[test]
    fn cordoned_and_not_ready_nodes_are_skipped() {
        let p = pod("100m", "1Mi", json!({}));
        let nodes = vec![
            node("a1", "a").set("/spec", json!({"unschedulable": true})),
            node("b1", "b").set("/status/conditions/0/status", json!("False")),
            node("c1", "c").requested(0, 3),
        ];
        assert_eq!(schedule(&p, nodes), Ok("c1".to_owned()));
    }

    fn tolerating(mut pod: Pod, tolerations: serde_json::Value) -> Pod {
        pod.spec.as_mut().expect("a spec").tolerations =
            Some(serde_json::from_value(tolerations).expect("tolerations"));
        pod
    }

    #[test]
    fn a_node_with_a_taint_the_pod_does_not_tolerate_is_skipped_unless_it_only_prefers_no_pods() {
        let p = pod("100m", "1Mi", json!({}));
        let taint = |key: &str, effect: &str| json!([{"key": key, "value": "x", "effect": effect}]);
        let nodes = || {
            vec![
                node("a1", "a").set("/spec", json!({"taints": taint("dedicated", "NoSchedule")})),
                node("b1", "b").set("/spec", json!({"taints": taint("maintenance", "NoExecute")})),
            ]
        };
        let reasons = schedule(&p, nodes()).expect_err("both tainted").reasons;
        assert_eq!(reasons, ["0/2 nodes are available: 2 node(s) had untolerated taint(s)."]);
        let mut with_soft = nodes();
        with_soft
            .push(node("c1", "c").set("/spec", json!({"taints": taint("spot", "PreferNoSchedule")})).requested(0, 5));
        assert_eq!(schedule(&p, with_soft), Ok("c1".to_owned()));
        let dedicated = tolerating(p.clone(), json!([{"key": "dedicated", "operator": "Equal", "value": "x"}]));
        assert_eq!(schedule(&dedicated, nodes()), Ok("a1".to_owned()));
        let maintenance = tolerating(p.clone(), json!([{"key": "maintenance", "operator": "Exists"}]));
        assert_eq!(schedule(&maintenance, nodes()), Ok("b1".to_owned()));
        let wrong_effect = tolerating(p, json!([{"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}]));
        assert!(schedule(&wrong_effect, nodes()).is_err());
    }

    #[test]
    fn a_pod_tolerating_the_taint_of_a_cordon_or_of_not_ready_may_go_there_as_with_kube_scheduler() {
        let p = pod("100m", "1Mi", json!({}));
        let cordoned = || node("a1", "a").set("/spec", json!({"unschedulable": true}));
        let not_ready = |status: &str| node("b1", "b").set("/status/conditions/0/status", json!(status));
        let cordon = json!([{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]);
        let reasons = schedule(&p, vec![cordoned(), not_ready("False")]).expect_err("neither").reasons;
        assert_eq!(reasons, ["0/2 nodes are available: 1 node(s) were not ready, 1 node(s) were unschedulable."]);
        assert_eq!(schedule(&tolerating(p.clone(), cordon), vec![cordoned(), not_ready("False")]), Ok("a1".to_owned()));
        let not_ready_taint =
            json!([{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoSchedule"}]);
        assert_eq!(
            schedule(&tolerating(p.clone(), not_ready_taint.clone()), vec![not_ready("False")]),
            Ok("b1".to_owned())
        );
        assert!(schedule(&tolerating(p.clone(), not_ready_taint), vec![not_ready("Unknown")]).is_err());
        let unreachable = json!([{"key": "node.kubernetes.io/unreachable", "operator": "Exists"}]);
        assert_eq!(schedule(&tolerating(p.clone(), unreachable), vec![not_ready("Unknown")]), Ok("b1".to_owned()));
        let everything = tolerating(p, json!([{"operator": "Exists"}]));
        assert_eq!(schedule(&everything, vec![cordoned().requested(0, 1), not_ready("False")]), Ok("b1".to_owned()));
    }

    #[test]
    fn a_full_node_by_cpu_memory_or_pod_count_is_skipped() {
        let p = pod("1", "1Gi", json!({}));
        let full_pods = node("a1", "a").requested(0, 10);
        let full_cpu = node("b1", "b").requested(1500, 1);
        let mut memory = node("c1", "c").build();
        memory.requested.insert("memory".into(), 3 * 1024 * 1024 * 1024 * 1000 + 1);
        let mut nodes: Vec<NodeInfo> = vec![full_pods.build(), full_cpu.build(), memory];
        assert!(ZoneSpread.schedule(&p, &nodes).is_err());
        nodes.push(node("d1", "d").requested(1000, 9).build());
        assert_eq!(ZoneSpread.schedule(&p, &nodes), Ok("d1".to_owned()));
    }

    #[test]
    fn when_nothing_fits_the_reasons_are_counted_like_kube_schedulers() {
        let p = pod("1500m", "1Mi", json!({"disk": "hdd"}));
        let nodes = vec![
            node("a1", "a").requested(1000, 1),
            node("b1", "b").requested(600, 1),
            node("c1", "c").set("/metadata/labels/disk", json!("ssd")),
        ];
        let reasons = schedule(&p, nodes).expect_err("nothing fits").reasons;
        assert_eq!(
            reasons,
            ["0/3 nodes are available: 2 Insufficient cpu, 1 node(s) didn't match Pod's node selector."]
        );
        assert_eq!(schedule(&p, Vec::new()).expect_err("no nodes").reasons, ["0/0 nodes are available."]);
    }

    #[test]
    fn the_component_declares_the_scheduler_and_no_controller() {
        let manifest = ZoneSpread.manifest().into_wit(false);
        assert_eq!(manifest.controller.name, "zone-scheduler");
        assert_eq!(manifest.roles.scheduler.map(|s| s.name), Some(SCHEDULER_NAME.to_owned()));
        assert!(!manifest.roles.reconcile);
        assert_eq!(manifest.controller.primary.kind, "Pod");
    }
}
