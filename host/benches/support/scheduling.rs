//! What the scheduling benchmarks hand a scheduler: shared by
//! `runtime.rs` and `languages.rs` (included with `#[path]`).

use capstan_host::runtime::bindings::capstan::operator::types::{NodeInfo, ResourceAmount, ScheduleRequest};
use serde_json::json;

/// A pending Pod and `n` Nodes as the API server returns them (uid,
/// resourceVersion, timestamps, a `Ready` condition, as bench-scheduler
/// makes them), each `trimmed` to what the host's Node cache hands the
/// guest or whole.
pub fn schedule_request(n: usize, trimmed: bool) -> ScheduleRequest {
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
            NodeInfo {
                name,
                node: if trimmed {
                    capstan_host::control::scheduler::guest_node(&node)
                } else {
                    serde_json::to_vec(&node).expect("json")
                },
                allocatable: vec![amount("cpu", 8000), amount("memory", 32 << 40), amount("pods", 110_000)],
                requested: vec![amount("cpu", 100 * (i as i64 % 7)), amount("pods", 1000 * (i as i64 % 7))],
                pods: (i % 7) as u32,
            }
        })
        .collect();
    ScheduleRequest { pod: serde_json::to_vec(&pod).expect("json"), nodes, cluster: "default".into() }
}
