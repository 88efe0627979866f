//! The Nodes a scheduler decides over, and what each instance was given
//! of them: a decision hands an instance only the Nodes that changed since
//! its previous one (`schedule-request.nodes` and `removed`, contract
//! 0.4.0), so that a guest does not lift and parse every Node at every
//! attempt.
//!
//! # Guarantees
//!
//! - What an instance holds is what it was handed: the record of it lives
//!   in the instance's store ([`HostState`](crate::runtime::imports::HostState)),
//!   so an instance dropped (after a trap, a deadline, its last reuse)
//!   takes the record with it, and a fresh instance gets every Node.
//! - A Node is handed over again when any field the guest sees of it
//!   changed: its JSON or allocatable resources (its [`revision`](Node::revision)),
//!   what is requested there, or its Pod count.
//! - What an instance holds is kept per cluster, as the SDKs keep it (an
//!   instance serves one controller, of one cluster, so this is a guard,
//!   not a path).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use crate::runtime::bindings::capstan::operator::types as wit;

/// One Node as the scheduler knows it at a decision.
#[derive(Clone, Debug)]
pub struct Node {
    /// The Node's name.
    pub name: String,
    /// Changes whenever [`json`](Self::json) or
    /// [`allocatable`](Self::allocatable) do (a counter the scheduler
    /// keeps, or a hash of both).
    pub revision: u64,
    /// The Node as JSON, as the guest gets it.
    pub json: Arc<[u8]>,
    /// Its allocatable resources.
    pub allocatable: Arc<[wit::ResourceAmount]>,
    /// What the Pods bound there request (assumed ones included).
    pub requested: Vec<wit::ResourceAmount>,
    /// How many Pods are bound there.
    pub pods: u32,
}

impl Node {
    fn info(&self) -> wit::NodeInfo {
        wit::NodeInfo {
            name: self.name.clone(),
            node: self.json.to_vec(),
            allocatable: self.allocatable.to_vec(),
            requested: self.requested.clone(),
            pods: self.pods,
        }
    }
}

/// One decision to make: the pending Pod and every Node, in name order.
#[derive(Clone, Debug)]
pub struct Decision {
    /// The pending Pod as JSON.
    pub pod: Vec<u8>,
    /// The cluster the Pod is in.
    pub cluster: String,
    /// Every Node the scheduler knows, in name order.
    pub nodes: Vec<Node>,
}

impl Decision {
    /// The request with every Node, as a fresh instance gets it (and an
    /// instance of contract 0.3.0, which keeps nothing, every time).
    pub fn whole(&self) -> wit::ScheduleRequest {
        wit::ScheduleRequest {
            pod: self.pod.clone(),
            nodes: self.nodes.iter().map(Node::info).collect(),
            removed: Vec::new(),
            cluster: self.cluster.clone(),
        }
    }
}

/// What the guest sees of a Node, to tell whether it changed.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    revision: u64,
    requested: Vec<(String, i64)>,
    pods: u32,
}

impl Seen {
    fn of(node: &Node) -> Self {
        Self {
            revision: node.revision,
            requested: node.requested.iter().map(|r| (r.name.clone(), r.milli)).collect(),
            pods: node.pods,
        }
    }

    fn is(&self, node: &Node) -> bool {
        self.revision == node.revision
            && self.pods == node.pods
            && self.requested.len() == node.requested.len()
            && self.requested.iter().zip(&node.requested).all(|((name, milli), r)| *name == r.name && *milli == r.milli)
    }
}

/// What one instance was handed: per cluster, the Nodes as of its last
/// decision there.
#[derive(Debug, Default)]
pub struct Given {
    clusters: BTreeMap<String, BTreeMap<String, Seen>>,
}

impl Given {
    /// The request for `decision` to this instance, holding only what
    /// changed since what it was given; records that it now holds every
    /// Node of `decision`. A call that fails drops the instance, and this
    /// record with it.
    pub fn request(&mut self, decision: &Decision) -> wit::ScheduleRequest {
        let held = self.clusters.entry(decision.cluster.clone()).or_default();
        let mut nodes = Vec::new();
        for node in &decision.nodes {
            match held.get_mut(&node.name) {
                Some(seen) if seen.is(node) => {}
                Some(seen) => {
                    *seen = Seen::of(node);
                    nodes.push(node.info());
                }
                None => {
                    held.insert(node.name.clone(), Seen::of(node));
                    nodes.push(node.info());
                }
            }
        }
        // Held now: what it held and every Node of the decision (names are
        // unique), so anything more is gone.
        let removed = if held.len() > decision.nodes.len() {
            let now: HashSet<&str> = decision.nodes.iter().map(|n| n.name.as_str()).collect();
            let gone: Vec<String> = held.keys().filter(|name| !now.contains(name.as_str())).cloned().collect();
            for name in &gone {
                held.remove(name);
            }
            gone
        } else {
            Vec::new()
        };
        wit::ScheduleRequest { pod: decision.pod.clone(), nodes, removed, cluster: decision.cluster.clone() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, revision: u64, cpu: i64) -> Node {
        Node {
            name: name.into(),
            revision,
            json: Arc::from(format!(r#"{{"metadata":{{"name":"{name}"}}}}"#).into_bytes()),
            allocatable: Arc::from(vec![wit::ResourceAmount { name: "cpu".into(), milli: 4000 }]),
            requested: vec![wit::ResourceAmount { name: "cpu".into(), milli: cpu }],
            pods: u32::try_from(cpu / 100).expect("small"),
        }
    }

    fn decision(cluster: &str, nodes: Vec<Node>) -> Decision {
        Decision { pod: b"{}".to_vec(), cluster: cluster.into(), nodes }
    }

    fn names(request: &wit::ScheduleRequest) -> Vec<&str> {
        request.nodes.iter().map(|n| n.name.as_str()).collect()
    }

    #[test]
    fn an_instance_gets_every_node_first_then_only_what_changed() {
        let mut given = Given::default();
        let first = given.request(&decision("default", vec![node("a", 1, 0), node("b", 1, 0), node("c", 1, 0)]));
        assert_eq!(names(&first), ["a", "b", "c"]);
        assert!(first.removed.is_empty());

        let same = given.request(&decision("default", vec![node("a", 1, 0), node("b", 1, 0), node("c", 1, 0)]));
        assert!(same.nodes.is_empty() && same.removed.is_empty(), "nothing changed: {same:?}");

        // b's Pods, c's Node object, a new d; a gone.
        let next = given.request(&decision("default", vec![node("b", 1, 100), node("c", 2, 0), node("d", 1, 0)]));
        assert_eq!(names(&next), ["b", "c", "d"]);
        assert_eq!(next.removed, ["a"]);
        assert_eq!(next.nodes[0].pods, 1);
        assert_eq!(next.pod, b"{}");
    }

    #[test]
    fn what_was_handed_over_matches_the_whole_request() {
        let d = decision("east", vec![node("a", 7, 300)]);
        let whole = d.whole();
        let first = Given::default().request(&d);
        assert_eq!(format!("{whole:?}"), format!("{first:?}"));
        assert_eq!(first.nodes[0].node, br#"{"metadata":{"name":"a"}}"#);
        assert_eq!(first.nodes[0].requested[0].milli, 300);
        assert_eq!(first.cluster, "east");
    }

    #[test]
    fn each_cluster_is_kept_apart() {
        let mut given = Given::default();
        given.request(&decision("east", vec![node("a", 1, 0), node("x", 1, 0)]));
        let west = given.request(&decision("west", vec![node("a", 1, 0), node("b", 1, 0)]));
        assert_eq!(names(&west), ["a", "b"], "west's Nodes are not east's");
        assert!(west.removed.is_empty(), "nothing of west was handed over, so nothing is gone");
        let east = given.request(&decision("east", vec![node("a", 1, 0)]));
        assert!(east.nodes.is_empty(), "east's a was handed over before: {east:?}");
        assert_eq!(east.removed, ["x"]);
    }
}
