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
use std::sync::OnceLock;

use k8s_openapi::api::core::v1::{Node, Pod, Taint, Toleration};
use serde::Deserialize;

use crate::wit::capstan::operator::types as wit;

/// Resource amounts by name (`cpu`, `memory`, `pods`, …), in milli-units:
/// CPU in millicores, memory in thousandths of a byte.
pub type Resources = BTreeMap<String, i64>;

/// A candidate Node and what the host knows of it.
///
/// What a policy reads of every Node (labels, `spec.unschedulable`, taints,
/// the conditions' statuses) is at hand through [`label`](Self::label),
/// [`labels`](Self::labels), [`unschedulable`](Self::unschedulable),
/// [`taints`](Self::taints), [`condition`](Self::condition) and
/// [`ready`](Self::ready), and whether a Pod tolerates the taints through
/// [`untolerated_taint`](Self::untolerated_taint); the whole `v1` Node through
/// [`node`](Self::node), decoded on first use. An instance keeps the
/// Nodes between attempts and the host hands over only those that changed,
/// so each Node is decoded (that far) once per change.
///
/// ```
/// use capstan_guest::k8s_openapi::api::core::v1::Node;
/// use capstan_guest::scheduler::NodeInfo;
///
/// let node: Node = serde_json::from_value(serde_json::json!({
///     "metadata": {"name": "n1", "labels": {"topology.kubernetes.io/zone": "a"}},
///     "status": {"allocatable": {"cpu": "2"}, "conditions": [{"type": "Ready", "status": "True"}]},
/// }))
/// .unwrap();
/// let info = NodeInfo::new(node);
/// assert_eq!(info.label("topology.kubernetes.io/zone"), Some("a"));
/// assert!(info.ready() && !info.unschedulable());
/// assert_eq!(info.free("cpu"), 2000);
/// ```
#[derive(Clone, Debug)]
pub struct NodeInfo {
    /// The Node's name.
    pub name: String,
    /// Allocatable resources.
    pub allocatable: Resources,
    /// Requested by the Pods bound there (assumed ones included).
    pub requested: Resources,
    /// How many Pods are bound there.
    pub pods: u32,
    summary: Summary,
    /// The Node as JSON, decoded into `node` on first use.
    json: Vec<u8>,
    node: OnceLock<Node>,
}

/// What a policy reads of every Node, decoded at once.
#[derive(Clone, Debug, Default)]
struct Summary {
    labels: BTreeMap<String, String>,
    unschedulable: bool,
    taints: Vec<Taint>,
    /// `(type, status)` of each condition.
    conditions: Vec<(String, String)>,
}

/// The part of a Node's JSON that [`Summary`] holds; the rest is skipped
/// without being decoded.
#[derive(Deserialize)]
struct Essentials {
    metadata: Option<EssentialMetadata>,
    spec: Option<EssentialSpec>,
    status: Option<EssentialStatus>,
}

#[derive(Deserialize)]
struct EssentialMetadata {
    labels: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize)]
struct EssentialSpec {
    unschedulable: Option<bool>,
    taints: Option<Vec<Taint>>,
}

#[derive(Deserialize)]
struct EssentialStatus {
    conditions: Option<Vec<EssentialCondition>>,
}

#[derive(Deserialize)]
struct EssentialCondition {
    #[serde(rename = "type")]
    type_: String,
    status: String,
}

impl Summary {
    fn decode(json: &[u8]) -> serde_json::Result<Self> {
        let e: Essentials = serde_json::from_slice(json)?;
        let spec = e.spec;
        let conditions = e.status.and_then(|s| s.conditions).unwrap_or_default();
        Ok(Self {
            labels: e.metadata.and_then(|m| m.labels).unwrap_or_default(),
            unschedulable: spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false),
            taints: spec.and_then(|s| s.taints).unwrap_or_default(),
            conditions: conditions.into_iter().map(|c| (c.type_, c.status)).collect(),
        })
    }

    fn of(node: &Node) -> Self {
        let spec = node.spec.as_ref();
        let conditions = node.status.as_ref().and_then(|s| s.conditions.as_ref());
        Self {
            labels: node.metadata.labels.clone().unwrap_or_default(),
            unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
            taints: spec.and_then(|s| s.taints.clone()).unwrap_or_default(),
            conditions: conditions.into_iter().flatten().map(|c| (c.type_.clone(), c.status.clone())).collect(),
        }
    }
}

impl NodeInfo {
    /// A Node with nothing requested and no Pods: its name and allocatable
    /// resources are taken from it. For tests of a policy; the host makes
    /// the `NodeInfo`s a policy gets.
    pub fn new(node: Node) -> Self {
        let allocatable = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
        let allocatable = allocatable
            .into_iter()
            .flatten()
            .map(|(name, q)| (name.clone(), parse_quantity(&q.0).unwrap_or(0)))
            .collect();
        Self {
            name: node.metadata.name.clone().unwrap_or_default(),
            allocatable,
            requested: Resources::new(),
            pods: 0,
            summary: Summary::of(&node),
            json: Vec::new(),
            node: OnceLock::from(node),
        }
    }

    /// The whole `v1` Node, as the host hands it over: `metadata` (name,
    /// uid, resourceVersion, generation, labels, annotations,
    /// creationTimestamp), `spec`, and `status`'s `capacity`, `allocatable`
    /// and `conditions`. Decoded on the first call; what the other methods
    /// answer needs no decoding.
    ///
    /// # Panics
    ///
    /// If the host handed over a Node that does not decode as a `v1` Node
    /// (it serializes each from a decoded Node: a bug, and a trap of this
    /// attempt, reported as a failed scheduling).
    pub fn node(&self) -> &Node {
        self.node.get_or_init(|| serde_json::from_slice(&self.json).expect("the host hands over a v1 Node"))
    }

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
        self.summary.labels.get(key).map(String::as_str)
    }

    /// The Node's labels.
    pub fn labels(&self) -> &BTreeMap<String, String> {
        &self.summary.labels
    }

    /// True if the Node is cordoned (`spec.unschedulable`).
    pub fn unschedulable(&self) -> bool {
        self.summary.unschedulable
    }

    /// The Node's taints (`spec.taints`).
    pub fn taints(&self) -> &[Taint] {
        &self.summary.taints
    }

    /// The status (`True`, `False`, `Unknown`) of the Node's condition of
    /// type `type_` (`Ready`, `MemoryPressure`, …), if it has one.
    pub fn condition(&self, type_: &str) -> Option<&str> {
        self.summary.conditions.iter().find(|(t, _)| t == type_).map(|(_, s)| s.as_str())
    }

    /// True if the Node's `Ready` condition is `True`.
    pub fn ready(&self) -> bool {
        self.condition("Ready") == Some("True")
    }

    /// The first of the Node's `NoSchedule` and `NoExecute` taints that
    /// the Pod does not [tolerate](tolerates), if any: the taint that keeps
    /// the Pod off this Node, as kube-scheduler's `TaintToleration` filter
    /// finds it. `PreferNoSchedule` taints are a preference, not a filter,
    /// and never returned.
    ///
    /// ```
    /// use capstan_guest::k8s_openapi::api::core::v1::{Node, Pod};
    /// use capstan_guest::scheduler::NodeInfo;
    ///
    /// let node: Node = serde_json::from_value(serde_json::json!({
    ///     "metadata": {"name": "gpu1"},
    ///     "spec": {"taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]},
    /// }))
    /// .unwrap();
    /// let pod = |tolerations| -> Pod {
    ///     serde_json::from_value(serde_json::json!({"spec": {"containers": [], "tolerations": tolerations}})).unwrap()
    /// };
    /// let node = NodeInfo::new(node);
    /// let plain = pod(serde_json::json!([]));
    /// assert_eq!(node.untolerated_taint(&plain).map(|t| t.key.as_str()), Some("dedicated"));
    /// let gpu = pod(serde_json::json!([{"key": "dedicated", "operator": "Equal", "value": "gpu"}]));
    /// assert_eq!(node.untolerated_taint(&gpu), None);
    /// ```
    pub fn untolerated_taint(&self, pod: &Pod) -> Option<&Taint> {
        self.summary
            .taints
            .iter()
            .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
            .find(|t| !tolerates(pod, t))
    }

    /// The Node as the host hands it over; decodes its summary only.
    /// The Node as the host hands it over, or its name and why its JSON
    /// does not decode.
    fn from_wit(n: wit::NodeInfo) -> Result<Self, (String, String)> {
        let summary = match Summary::decode(&n.node) {
            Ok(summary) => summary,
            Err(e) => return Err((n.name, e.to_string())),
        };
        Ok(Self {
            name: n.name,
            allocatable: resources(n.allocatable),
            requested: resources(n.requested),
            pods: n.pods,
            summary,
            json: n.node,
            node: OnceLock::new(),
        })
    }

    /// Sets what is requested on the Node and how many Pods are bound
    /// there (for tests of a policy).
    pub fn with_requested(mut self, requested: Resources, pods: u32) -> Self {
        self.requested = requested;
        self.pods = pods;
        self
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

    /// What the host calls: by default [`schedule`](Self::schedule) with
    /// the request's Pod and Nodes. Implement it (and have `schedule`
    /// answer for the default cluster) when the choice depends on
    /// what only the request tells, such as [`Request::cluster`].
    ///
    /// # Errors
    ///
    /// Why the Pod fits nowhere now.
    fn schedule_request(&self, request: &Request<'_>) -> Result<String, Unschedulable> {
        self.schedule(request.pod(), request.nodes())
    }
}

/// One scheduling attempt, as the host asks it: the Pod, every Node, and
/// the cluster they are in.
///
/// ```
/// use capstan_guest::k8s_openapi::api::core::v1::Pod;
/// use capstan_guest::scheduler::Request;
///
/// let pod = Pod::default();
/// let request = Request::new(&pod, &[]).in_cluster("east");
/// assert_eq!(request.cluster(), "east");
/// assert!(request.nodes().is_empty());
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    pod: &'a Pod,
    nodes: &'a [NodeInfo],
    cluster: &'a str,
}

impl<'a> Request<'a> {
    /// A request for `pod` among `nodes`, in the cluster `default`.
    pub fn new(pod: &'a Pod, nodes: &'a [NodeInfo]) -> Self {
        Self { pod, nodes, cluster: crate::DEFAULT_CLUSTER }
    }

    /// The same request, in the cluster named `cluster`.
    #[must_use]
    pub fn in_cluster(mut self, cluster: &'a str) -> Self {
        self.cluster = cluster;
        self
    }

    /// The Pod to place.
    pub fn pod(&self) -> &'a Pod {
        self.pod
    }

    /// Every Node the host knows, in name order.
    pub fn nodes(&self) -> &'a [NodeInfo] {
        self.nodes
    }

    /// The name of the cluster the Pod is in: `default` for the host's own
    /// cluster, else the name the host engaged it by. Hosts before contract
    /// 0.4.0 run one cluster, `default`.
    pub fn cluster(&self) -> &'a str {
        self.cluster
    }
}

/// True if one of the Pod's tolerations (`spec.tolerations`) tolerates
/// `taint`, matched as Kubernetes matches them: a toleration's `effect`,
/// when set, must be the taint's; its `key`, when set, must be the
/// taint's; operator `Exists` then matches any value, and `Equal` (or no
/// operator) only the taint's value. So `{operator: Exists}` with no key
/// and no effect tolerates every taint. Any other operator (the alpha
/// `Lt` and `Gt`, off by default in kube-scheduler) tolerates nothing.
///
/// It also answers whether a Pod may go where a Node's state would put a
/// taint: kube-scheduler lets a Pod onto a cordoned Node if it tolerates
/// `node.kubernetes.io/unschedulable:NoSchedule`.
///
/// ```
/// use capstan_guest::k8s_openapi::api::core::v1::{Pod, Taint};
/// use capstan_guest::scheduler::tolerates;
///
/// let pod: Pod = serde_json::from_value(serde_json::json!({"spec": {
///     "containers": [],
///     "tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}],
/// }}))
/// .unwrap();
/// let cordon =
///     Taint { key: "node.kubernetes.io/unschedulable".into(), effect: "NoSchedule".into(), ..Taint::default() };
/// assert!(tolerates(&pod, &cordon));
/// assert!(!tolerates(&pod, &Taint { effect: "NoExecute".into(), ..cordon }));
/// ```
pub fn tolerates(pod: &Pod, taint: &Taint) -> bool {
    let tolerations = pod.spec.as_ref().and_then(|s| s.tolerations.as_deref()).unwrap_or_default();
    tolerations.iter().any(|t| toleration_matches(t, taint))
}

/// Whether one toleration tolerates one taint (Kubernetes'
/// `Toleration.ToleratesTaint`, comparison operators off).
fn toleration_matches(toleration: &Toleration, taint: &Taint) -> bool {
    let effect = toleration.effect.as_deref().unwrap_or_default();
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or_default();
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or_default() {
        "" | "Equal" => toleration.value.as_deref().unwrap_or_default() == taint.value.as_deref().unwrap_or_default(),
        "Exists" => true,
        _ => false,
    }
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

/// The Nodes this instance holds for one cluster: the host hands each
/// instance every Node once, then only what changed (`schedule-request`).
#[derive(Default)]
struct Held {
    /// The Nodes that decode, in name order.
    nodes: Vec<NodeInfo>,
    /// The Nodes whose JSON does not decode, and why: held too (the host
    /// counts them handed over), and the reason of every attempt until
    /// they change or go.
    broken: BTreeMap<String, String>,
}

impl Held {
    /// Applies one request's changes: `removed` go, `nodes` are added or
    /// replace the entry of the same name. Linear in the Nodes held (plus
    /// a sort when Nodes were added), however many changed.
    fn apply(&mut self, removed: Vec<String>, nodes: Vec<wit::NodeInfo>) {
        let mut gone: std::collections::HashSet<String> = removed.into_iter().collect();
        for name in &gone {
            self.broken.remove(name);
        }
        let mut added = Vec::new();
        for node in nodes {
            self.broken.remove(&node.name);
            match NodeInfo::from_wit(node) {
                Ok(info) => match self.nodes.binary_search_by(|n| n.name.cmp(&info.name)) {
                    Ok(at) => self.nodes[at] = info,
                    Err(_) => added.push(info),
                },
                Err((name, why)) => {
                    gone.insert(name.clone());
                    self.broken.insert(name, why);
                }
            }
        }
        if !gone.is_empty() {
            self.nodes.retain(|n| !gone.contains(&n.name));
        }
        if !added.is_empty() {
            self.nodes.append(&mut added);
            self.nodes.sort_by(|a, b| a.name.cmp(&b.name));
        }
    }
}

thread_local! {
    /// What this instance holds, per cluster.
    static HELD: std::cell::RefCell<BTreeMap<String, Held>> = std::cell::RefCell::default();
}

/// Answers one request through `S` (used by [`export!`](crate::export)):
/// applies its changes to the Nodes this instance holds, then asks the
/// policy with every Node. Each Node is decoded once per change, and only
/// as far as [`NodeInfo`]'s summary goes; the policy decodes the rest if it
/// asks for [`NodeInfo::node`].
pub(crate) fn schedule<S: Scheduler>(request: wit::ScheduleRequest) -> Result<String, wit::Unschedulable> {
    let unschedulable = |reason: String| wit::Unschedulable { reasons: vec![reason] };
    let wit::ScheduleRequest { pod, nodes, removed, cluster } = request;
    HELD.with_borrow_mut(|held| {
        // The changes first: the host counts them handed over whatever
        // this attempt answers.
        let held = held.entry(cluster.clone()).or_default();
        held.apply(removed, nodes);
        if let Some((name, why)) = held.broken.first_key_value() {
            return Err(unschedulable(format!("Node {name} does not decode: {why}")));
        }
        let pod: Pod =
            serde_json::from_slice(&pod).map_err(|e| unschedulable(format!("the Pod does not decode: {e}")))?;
        let request = Request::new(&pod, &held.nodes).in_cluster(&cluster);
        S::default().schedule_request(&request).map_err(|u| wit::Unschedulable { reasons: u.reasons })
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn node_json() -> serde_json::Value {
        json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "n1", "uid": "u1", "labels": {"zone": "a", "disk": "ssd"}},
            "spec": {"unschedulable": true, "taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]},
            "status": {
                "allocatable": {"cpu": "2"},
                "conditions": [
                    {"type": "MemoryPressure", "status": "False"},
                    {"type": "Ready", "status": "True", "reason": "KubeletReady",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"},
                ],
            },
        })
    }

    fn from_host(node: &serde_json::Value) -> NodeInfo {
        let amount = |name: &str, milli| wit::ResourceAmount { name: name.into(), milli };
        NodeInfo::from_wit(wit::NodeInfo {
            name: "n1".into(),
            node: serde_json::to_vec(node).expect("json"),
            allocatable: vec![amount("cpu", 2000)],
            requested: vec![amount("cpu", 500)],
            pods: 1,
        })
        .expect("decodes")
    }

    #[test]
    fn a_node_from_the_host_answers_what_a_policy_reads_and_decodes_whole_on_demand() {
        let info = from_host(&node_json());
        assert_eq!(info.label("zone"), Some("a"));
        assert_eq!(info.labels().len(), 2);
        assert!(info.unschedulable());
        assert_eq!(info.taints().len(), 1);
        assert_eq!(info.taints()[0].effect, "NoSchedule");
        assert_eq!(info.condition("MemoryPressure"), Some("False"));
        assert_eq!(info.condition("DiskPressure"), None);
        assert!(info.ready());
        assert_eq!(info.free("cpu"), 1500);
        let whole: Node = serde_json::from_value(node_json()).expect("a Node");
        assert!(info.node.get().is_none(), "not decoded before it is asked for");
        assert_eq!(info.node(), &whole);
    }

    #[test]
    fn a_node_made_in_a_test_answers_like_one_from_the_host() {
        let whole: Node = serde_json::from_value(node_json()).expect("a Node");
        let made = NodeInfo::new(whole.clone()).with_requested([("cpu".to_owned(), 500)].into(), 1);
        let hosted = from_host(&node_json());
        assert_eq!(made.name, hosted.name);
        assert_eq!(made.allocatable, hosted.allocatable);
        assert_eq!((made.requested.clone(), made.pods), (hosted.requested.clone(), hosted.pods));
        assert_eq!(made.labels(), hosted.labels());
        assert_eq!((made.unschedulable(), made.ready()), (hosted.unschedulable(), hosted.ready()));
        assert_eq!(made.taints(), hosted.taints());
        assert_eq!(made.node(), &whole);
    }

    #[test]
    fn a_node_without_spec_or_status_is_schedulable_unready_and_unlabelled() {
        let info = from_host(&json!({"metadata": {"name": "n1"}}));
        assert!(!info.unschedulable() && !info.ready());
        assert!(info.labels().is_empty() && info.taints().is_empty());
    }

    fn named(name: &str, pods: u32, node: &[u8]) -> wit::NodeInfo {
        wit::NodeInfo { name: name.into(), node: node.to_vec(), allocatable: Vec::new(), requested: Vec::new(), pods }
    }

    fn request(nodes: Vec<wit::NodeInfo>, removed: &[&str], cluster: &str) -> wit::ScheduleRequest {
        let pod =
            serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}})).expect("json");
        wit::ScheduleRequest {
            pod,
            nodes,
            removed: removed.iter().map(|&r| r.to_owned()).collect(),
            cluster: cluster.into(),
        }
    }

    /// Answers with every Node it is given: `name:pods`, in order.
    #[derive(Default)]
    struct Lister;

    impl Scheduler for Lister {
        fn schedule(&self, _pod: &Pod, nodes: &[NodeInfo]) -> Result<String, Unschedulable> {
            Ok(nodes.iter().map(|n| format!("{}:{}", n.name, n.pods)).collect::<Vec<_>>().join(","))
        }
    }

    #[test]
    fn the_policy_gets_every_node_held_with_each_request_s_changes_applied() {
        let seen = |r| schedule::<Lister>(r).expect("answers");
        let first = request(vec![named("a", 0, b"{}"), named("b", 0, b"{}"), named("c", 0, b"{}")], &[], "default");
        assert_eq!(seen(first), "a:0,b:0,c:0");
        assert_eq!(seen(request(vec![], &[], "default")), "a:0,b:0,c:0", "nothing changed");
        let changes = request(vec![named("aa", 0, b"{}"), named("c", 2, b"{}")], &["b"], "default");
        assert_eq!(seen(changes), "a:0,aa:0,c:2", "b gone, aa added in name order, c replaced");
        assert_eq!(seen(request(vec![named("z", 1, b"{}")], &[], "east")), "z:1", "east holds its own");
        assert_eq!(seen(request(vec![], &["a"], "default")), "aa:0,c:2");
    }

    #[test]
    fn a_node_that_is_not_json_is_the_reason_of_every_attempt_until_it_changes_or_goes() {
        let reasons = |r| schedule::<Lister>(r).expect_err("unschedulable").reasons;
        let broken = request(vec![named("n1", 0, b"{"), named("n2", 0, b"{}")], &[], "default");
        let why = reasons(broken);
        assert!(why[0].starts_with("Node n1 does not decode: "), "{why:?}");
        assert_eq!(reasons(request(vec![], &[], "default")), why, "held, so still the reason");
        let fixed = request(vec![named("n1", 0, b"{}")], &[], "default");
        assert_eq!(schedule::<Lister>(fixed).ok().as_deref(), Some("n1:0,n2:0"));
        schedule::<Lister>(request(vec![named("n3", 0, b"[")], &[], "default")).expect_err("n3 broken");
        let gone = request(vec![], &["n3"], "default");
        assert_eq!(schedule::<Lister>(gone).ok().as_deref(), Some("n1:0,n2:0"));
    }

    #[test]
    fn a_pod_that_does_not_decode_still_takes_the_changes() {
        let mut bad = request(vec![named("a", 0, b"{}")], &[], "default");
        bad.pod = b"{".to_vec();
        let why = schedule::<Lister>(bad).expect_err("the Pod does not decode").reasons;
        assert!(why[0].starts_with("the Pod does not decode"), "{why:?}");
        assert_eq!(schedule::<Lister>(request(vec![], &[], "default")).ok().as_deref(), Some("a:0"));
    }

    fn taint(key: &str, value: Option<&str>, effect: &str) -> Taint {
        Taint { key: key.into(), value: value.map(Into::into), effect: effect.into(), time_added: None }
    }

    fn tolerating(tolerations: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"spec": {"containers": [], "tolerations": tolerations}})).expect("a Pod")
    }

    #[test]
    fn tolerations_match_taints_by_key_operator_value_and_effect_as_kubernetes_does() {
        let gpu = taint("dedicated", Some("gpu"), "NoSchedule");
        let bare = taint("maintenance", None, "NoExecute");
        let cases = [
            (json!({"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}), true, false),
            (json!({"key": "dedicated", "value": "gpu"}), true, false),
            (json!({"key": "dedicated", "operator": "Equal", "value": "cpu"}), false, false),
            (json!({"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoExecute"}), false, false),
            (json!({"key": "dedicated", "operator": "Exists"}), true, false),
            (json!({"key": "maintenance", "operator": "Exists", "effect": ""}), false, true),
            (json!({"key": "maintenance", "operator": "Equal"}), false, true),
            (json!({"key": "maintenance", "operator": "Equal", "value": ""}), false, true),
            (json!({"key": "maintenance", "operator": "Exists", "effect": "NoSchedule"}), false, false),
            (json!({"operator": "Exists"}), true, true),
            (json!({"operator": "Exists", "effect": "NoExecute"}), false, true),
            (json!({"key": "dedicated", "operator": "Gt", "value": "1"}), false, false),
            (json!({"key": "dedicated", "operator": "Exists", "tolerationSeconds": 300}), true, false),
        ];
        for (toleration, of_gpu, of_bare) in cases {
            let pod = tolerating(json!([toleration]));
            assert_eq!((tolerates(&pod, &gpu), tolerates(&pod, &bare)), (of_gpu, of_bare), "{toleration}");
        }
        let no_spec: Pod = serde_json::from_value(json!({})).expect("a Pod");
        assert!(!tolerates(&no_spec, &gpu) && !tolerates(&tolerating(json!([])), &bare));
    }

    #[test]
    fn the_untolerated_taint_is_the_first_no_schedule_or_no_execute_taint_the_pod_does_not_tolerate() {
        let node = |taints: serde_json::Value| {
            NodeInfo::new(serde_json::from_value(json!({"spec": {"taints": taints}})).expect("a Node"))
        };
        let tainted = node(json!([
            {"key": "spot", "value": "true", "effect": "PreferNoSchedule"},
            {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
            {"key": "maintenance", "effect": "NoExecute"},
        ]));
        let first = |pod: &Pod| tainted.untolerated_taint(pod).map(|t| t.key.clone());
        assert_eq!(first(&tolerating(json!([]))), Some("dedicated".into()));
        assert_eq!(first(&tolerating(json!([{"key": "dedicated", "value": "gpu"}]))), Some("maintenance".into()));
        let both =
            tolerating(json!([{"key": "dedicated", "value": "gpu"}, {"key": "maintenance", "operator": "Exists"}]));
        assert_eq!(first(&both), None, "PreferNoSchedule is not a filter");
        assert_eq!(node(json!([])).untolerated_taint(&tolerating(json!([]))), None);
        let from_host = from_host(&node_json());
        assert_eq!(from_host.untolerated_taint(&tolerating(json!([]))).map(|t| t.key.as_str()), Some("k"));
    }

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

    /// Places every Pod on the Node named like its cluster.
    #[derive(Default)]
    struct ByCluster;

    impl Scheduler for ByCluster {
        fn schedule(&self, _pod: &Pod, _nodes: &[NodeInfo]) -> Result<String, Unschedulable> {
            Err(Unschedulable::new("asked without a cluster"))
        }

        fn schedule_request(&self, request: &Request<'_>) -> Result<String, Unschedulable> {
            Ok(request.cluster().to_owned())
        }
    }

    #[test]
    fn a_scheduler_sees_the_cluster_the_host_names() {
        assert_eq!(schedule::<ByCluster>(request(vec![], &[], "east")).ok().as_deref(), Some("east"));
    }
}
