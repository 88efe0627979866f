//! Custom schedulers: pick the Node a pending Pod runs on.
//!
//! Declare the scheduler name with
//! [`Manifest::scheduler`](crate::Manifest::scheduler), implement
//! [`Scheduler`], and export it with `scheduler: T`. The host watches the
//! Pods that name the scheduler in `spec.schedulerName` and have no Node,
//! keeps an account of every Node (what is requested there, counting Pods it
//! bound that the watch has not shown yet), calls
//! [`Scheduler::schedule`] once per attempt, binds the Pod, records the
//! `Scheduled` / `FailedScheduling` Events and retries with backoff.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Pod};

use crate::wit::capstan::operator::types as wit;

/// Resource amounts by name (`cpu`, `memory`, `pods`, …), in milli-units:
/// CPU in millicores, memory in thousandths of a byte.
pub type Resources = BTreeMap<String, i64>;

/// A candidate Node and what the host knows of it.
#[derive(Clone, Debug)]
pub struct NodeInfo {
    /// The Node's name.
    pub name: String,
    /// The Node: labels, taints, conditions.
    pub node: Node,
    /// Allocatable resources.
    pub allocatable: Resources,
    /// Requested by the Pods bound there (assumed ones included).
    pub requested: Resources,
    /// How many Pods are bound there.
    pub pods: u32,
}

impl NodeInfo {
    /// What is left of `resource` (allocatable minus requested), in
    /// milli-units; a resource the Node does not list has none.
    pub fn free(&self, resource: &str) -> i64 {
        self.allocatable.get(resource).copied().unwrap_or(0) - self.requested.get(resource).copied().unwrap_or(0)
    }

    /// True if every resource `needed` lists fits in what is free.
    pub fn fits(&self, needed: &Resources) -> bool {
        needed.iter().all(|(name, amount)| *amount <= 0 || self.free(name) >= *amount)
    }

    /// The value of a label of the Node.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.node.metadata.labels.as_ref()?.get(key).map(String::as_str)
    }
}

/// Why a Pod fits no Node now. The host joins the reasons into the
/// `FailedScheduling` Event and the `PodScheduled` condition, and tries
/// again later and when Nodes change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unschedulable {
    /// One reason per kind of misfit, e.g. `2 nodes have too little cpu`.
    pub reasons: Vec<String>,
}

impl Unschedulable {
    /// Unschedulable for one reason.
    pub fn new(reason: impl Into<String>) -> Self {
        Self { reasons: vec![reason.into()] }
    }
}

/// A scheduling policy.
pub trait Scheduler: Default + 'static {
    /// Picks the Node for `pod` among `nodes` (every Node the host knows,
    /// in name order), by name.
    ///
    /// # Errors
    ///
    /// Why the Pod fits nowhere now.
    fn schedule(&self, pod: &Pod, nodes: &[NodeInfo]) -> Result<String, Unschedulable>;
}

/// What a Pod requests: the sum over its containers, or the largest of
/// its init containers where that is more (as kube-scheduler counts), plus
/// its overhead; `pods` is always 1000 (one Pod).
pub fn pod_requests(pod: &Pod) -> Resources {
    let mut total = Resources::new();
    let Some(spec) = &pod.spec else { return total };
    let requests = |c: &k8s_openapi::api::core::v1::Container| {
        let mut r = Resources::new();
        for (name, q) in c.resources.as_ref().and_then(|r| r.requests.as_ref()).into_iter().flatten() {
            r.insert(name.clone(), parse_quantity(&q.0).unwrap_or(0));
        }
        r
    };
    for c in &spec.containers {
        for (name, amount) in requests(c) {
            *total.entry(name).or_default() += amount;
        }
    }
    for c in spec.init_containers.iter().flatten() {
        for (name, amount) in requests(c) {
            let slot = total.entry(name).or_default();
            *slot = (*slot).max(amount);
        }
    }
    for (name, q) in spec.overhead.iter().flatten() {
        *total.entry(name.clone()).or_default() += parse_quantity(&q.0).unwrap_or(0);
    }
    total.insert("pods".into(), 1000);
    total
}

/// Parses a Kubernetes quantity (`500m`, `2`, `1.5`, `128Mi`, `1G`, `1e3`)
/// into milli-units, rounding up like `MilliValue`. `None` when it is not
/// a quantity or does not fit.
pub fn parse_quantity(s: &str) -> Option<i64> {
    let s = s.trim();
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-')).unwrap_or(s.len());
    let (number, suffix) = s.split_at(split);
    let (mantissa, exp10): (&str, i32) = match suffix {
        "" => (number, 0),
        "m" => (number, -3),
        "k" => (number, 3),
        "M" => (number, 6),
        "G" => (number, 9),
        "T" => (number, 12),
        "P" => (number, 15),
        "E" => (number, 18),
        "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" => {
            let power = match suffix {
                "Ki" => 1,
                "Mi" => 2,
                "Gi" => 3,
                "Ti" => 4,
                "Pi" => 5,
                _ => 6,
            };
            let value: f64 = number.parse().ok()?;
            let milli = value * 1024f64.powi(power) * 1000.0;
            return (milli.is_finite() && milli.abs() < 9.2e18).then(|| milli.ceil() as i64);
        }
        e if e.starts_with(['e', 'E']) => (number, e[1..].parse().ok()?),
        _ => return None,
    };
    let value: f64 = mantissa.parse().ok()?;
    let milli = value * 10f64.powi(exp10 + 3);
    (milli.is_finite() && milli.abs() < 9.2e18).then(|| milli.ceil() as i64)
}

fn resources(list: Vec<wit::ResourceAmount>) -> Resources {
    list.into_iter().map(|r| (r.name, r.milli)).collect()
}

/// Answers one request through `S` (used by [`export!`](crate::export)).
pub(crate) fn schedule<S: Scheduler>(request: wit::ScheduleRequest) -> Result<String, wit::Unschedulable> {
    let unschedulable = |reason: String| wit::Unschedulable { reasons: vec![reason] };
    let pod: Pod =
        serde_json::from_slice(&request.pod).map_err(|e| unschedulable(format!("the Pod does not decode: {e}")))?;
    let nodes = request
        .nodes
        .into_iter()
        .map(|n| {
            let node: Node = serde_json::from_slice(&n.node)
                .map_err(|e| unschedulable(format!("Node {} does not decode: {e}", n.name)))?;
            Ok(NodeInfo {
                name: n.name,
                node,
                allocatable: resources(n.allocatable),
                requested: resources(n.requested),
                pods: n.pods,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    S::default().schedule(&pod, &nodes).map_err(|u| wit::Unschedulable { reasons: u.reasons })
}

#[cfg(test)]
mod tests {
    use super::parse_quantity;

    #[test]
    fn quantities_parse_to_milli_units() {
        assert_eq!(parse_quantity("500m"), Some(500));
        assert_eq!(parse_quantity("2"), Some(2000));
        assert_eq!(parse_quantity("1.5"), Some(1500));
        assert_eq!(parse_quantity("1Ki"), Some(1_024_000));
        assert_eq!(parse_quantity("128Mi"), Some(128 * 1024 * 1024 * 1000));
        assert_eq!(parse_quantity("1G"), Some(1_000_000_000_000));
        assert_eq!(parse_quantity("1e3"), Some(1_000_000));
        assert_eq!(parse_quantity("0.1m"), Some(1));
        assert_eq!(parse_quantity("lots"), None);
        assert_eq!(parse_quantity("1Qi"), None);
    }
}
