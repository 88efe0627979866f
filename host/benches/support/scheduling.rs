//! What the scheduling benchmarks hand a scheduler: shared by
//! `runtime.rs` and `languages.rs` (included with `#[path]`).

use std::sync::Arc;

use capstan_host::runtime::bindings::capstan::operator::types::ResourceAmount;
use capstan_host::runtime::nodes::{Decision, Node};
use serde_json::json;

/// A pending Pod and `n` Nodes as the API server returns them (uid,
/// resourceVersion, timestamps, a `Ready` condition, as bench-scheduler
/// makes them), each `trimmed` to what the host's Node cache hands the
/// guest or whole, in cluster `cluster`. Node `i` has revision `i + 1`.
pub fn decision(n: usize, trimmed: bool, cluster: &str) -> Decision {
    let amount = |name: &str, milli: i64| ResourceAmount { name: name.into(), milli };
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p-1", "namespace": "bench", "uid": "6b1a3c1e-1111-4c4c-9d9d-000000000001",
            "resourceVersion": "1001", "creationTimestamp": "2026-12-01T06:00:00Z"},
        "spec": {"schedulerName": "zone-spread", "nodeSelector": {"bench": "yes"},
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]},
        "status": {"phase": "Pending"},
    });
    let nodes = (0..n)
        .map(|i| {
            let name = format!("node-{i:03}");
            let node: k8s_openapi::api::core::v1::Node = serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "uid": format!("6b1a3c1e-2222-4c4c-9d9d-{i:012}"),
                    "resourceVersion": format!("{}", 100 + i), "creationTimestamp": "2026-12-01T06:00:00Z",
                    "labels": {"bench": "yes", "kubernetes.io/hostname": name,
                        "topology.kubernetes.io/zone": format!("zone-{}", i % 4)}},
                "spec": {},
                "status": {
                    "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                    "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                    "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                        "message": "kubelet is posting ready status",
                        "lastHeartbeatTime": "2026-12-01T06:00:00Z", "lastTransitionTime": "2026-12-01T06:00:00Z"}],
                    "nodeInfo": {"machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "",
                        "osImage": "", "containerRuntimeVersion": "", "kubeletVersion": "", "kubeProxyVersion": "",
                        "operatingSystem": "", "architecture": ""},
                    "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
                },
            }))
            .expect("a Node");
            let json = if trimmed {
                capstan_host::control::scheduler::guest_node(&node)
            } else {
                serde_json::to_vec(&node).expect("json")
            };
            Node {
                name,
                revision: i as u64 + 1,
                json: json.into(),
                allocatable: Arc::from(vec![amount("cpu", 8000), amount("memory", 32 << 40), amount("pods", 110_000)]),
                requested: vec![amount("cpu", 100 * (i as i64 % 7)), amount("pods", 1000 * (i as i64 % 7))],
                pods: (i % 7) as u32,
            }
        })
        .collect();
    Decision { pod: serde_json::to_vec(&pod).expect("json"), nodes, cluster: cluster.into() }
}

/// What the next decision sees after Pod `k` was bound: one more Pod (and
/// its 100m of CPU) on Node `k % n`, the one change a binding makes.
pub fn bound(decision: &mut Decision, k: usize) {
    let n = decision.nodes.len();
    let node = &mut decision.nodes[k % n];
    node.pods += 1;
    for r in &mut node.requested {
        r.milli += if r.name == "cpu" { 100 } else { 1000 };
    }
}

/// Every Node changed (a new revision each): what a fresh instance gets,
/// and what every decision handed over before the host sent changes only.
pub fn all_changed(decision: &mut Decision) {
    let n = decision.nodes.len() as u64;
    for node in &mut decision.nodes {
        node.revision += n;
    }
}
