//! The mock host's scheduler: each run, after the reconciles settle, every
//! pending Pod that names a loaded scheduler gets one attempt, in namespace
//! and name order, each decision seeing the ones before it, with the same
//! Events, condition and messages as the host's scheduler
//! ([`crate::control::scheduler`]). A binding sets `spec.nodeName` (the mock has no
//! `pods/binding`); a failed attempt is tried again in the next run.

use std::hash::{Hash as _, Hasher as _};

use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::{Value, json};

use super::{Error, MockHost};
use crate::cluster::mock::MockCluster;
use crate::cluster::{Cluster, EventRecord, Patch, Subresource};
use crate::control::scheduler::{FAILED_SCHEDULING, SCHEDULED, UNSCHEDULABLE, quantity};
use crate::object::{Gvk, ObjectRef};
use crate::runtime::bindings::capstan::operator::types as wit;
use crate::runtime::nodes;

/// One scheduling attempt of the mock host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempt {
    /// The Pod.
    pub pod: ObjectRef,
    /// The Node it was bound to, or why not.
    pub result: Result<String, String>,
}

fn pending_for(pod: &Pod, scheduler: &str) -> bool {
    let spec = pod.spec.as_ref();
    spec.and_then(|s| s.scheduler_name.as_deref()) == Some(scheduler)
        && spec.and_then(|s| s.node_name.as_deref()).is_none_or(str::is_empty)
        && pod.metadata.deletion_timestamp.is_none()
}

fn holds_resources(pod: &Pod) -> bool {
    !matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"))
}

fn amounts(resources: quantity::Resources) -> Vec<wit::ResourceAmount> {
    resources.into_iter().map(|(name, milli)| wit::ResourceAmount { name, milli }).collect()
}

impl MockHost {
    /// Makes one attempt for every pending Pod of every loaded scheduler.
    ///
    /// # Errors
    ///
    /// When the mock cluster refuses a read or a write (a bug).
    pub async fn schedule_pending(&self) -> Result<Vec<Attempt>, Error> {
        let pod_kind = Gvk::new("", "v1", "Pod");
        let mut attempts = Vec::new();
        for controller in &self.controllers {
            let Some(scheduler) = controller.manifest.roles.scheduler.as_deref() else { continue };
            let engaged = &self.clusters[controller.cluster];
            let cluster = &engaged.cluster;
            let pods: Vec<Pod> =
                cluster.objects(&pod_kind).into_iter().filter_map(|p| serde_json::from_value(p).ok()).collect();
            for pod in pods.iter().filter(|p| pending_for(p, scheduler)) {
                let Some(r) = ObjectRef::of(&serde_json::to_value(pod).expect("a Pod serializes")) else { continue };
                let decision = decision(cluster, &engaged.name, pod);
                let invocation = controller.reconciler.schedule(&decision).await;
                let nodes = cluster.objects(&Gvk::new("", "v1", "Node"));
                let known = |name: &str| nodes.iter().any(|n| crate::object::meta_str(n, "name") == Some(name));
                let result = match invocation.result {
                    Ok(Ok(node)) if known(&node) => Ok(node),
                    Ok(Ok(node)) => Err(format!("the scheduler chose Node {node:?}, which does not exist")),
                    Ok(Err(u)) if u.reasons.is_empty() => Err("no reason given".to_owned()),
                    Ok(Err(u)) => Err(u.reasons.join("; ")),
                    Err(e) => Err(format!("the scheduler failed: {e}")),
                };
                let uid = pod.metadata.uid.clone();
                let event = |warning: bool, reason: &str, action: &str, note: String| EventRecord {
                    regarding: r.clone(),
                    regarding_uid: uid.clone(),
                    warning,
                    reason: reason.to_owned(),
                    action: action.to_owned(),
                    note: Some(note),
                    reporting_controller: controller.manifest.name.clone(),
                };
                match &result {
                    Ok(node) => {
                        let bind = json!({"spec": {"nodeName": node}});
                        cluster.patch(&r, Patch::Merge(bind), Subresource::Main).await?;
                        let namespace = r.namespace.as_deref().unwrap_or_default();
                        let note = format!("Successfully assigned {namespace}/{} to {node}", r.name);
                        cluster.record_event(event(false, SCHEDULED, "Binding", note)).await?;
                    }
                    Err(message) => {
                        cluster.record_event(event(true, FAILED_SCHEDULING, "Scheduling", message.clone())).await?;
                        if !message.starts_with("the scheduler failed") {
                            let condition = json!({"status": {"conditions": [{
                                "type": "PodScheduled", "status": "False", "reason": UNSCHEDULABLE, "message": message,
                            }]}});
                            cluster.patch(&r, Patch::Strategic(condition), Subresource::Status).await?;
                        }
                    }
                }
                attempts.push(Attempt { pod: r, result });
            }
        }
        Ok(attempts)
    }
}

/// The decision for `pod` in `cluster` (named `name`): every Node in name
/// order, with what the Pods bound there request. A Node's revision is a
/// hash of what the guest gets of it.
fn decision(cluster: &MockCluster, name: &str, pod: &Pod) -> nodes::Decision {
    let pods: Vec<Pod> = cluster
        .objects(&Gvk::new("", "v1", "Pod"))
        .into_iter()
        .filter_map(|p| serde_json::from_value(p).ok())
        .filter(holds_resources)
        .collect();
    let mut all: Vec<Value> = cluster.objects(&Gvk::new("", "v1", "Node"));
    all.sort_by(|a, b| crate::object::meta_str(a, "name").cmp(&crate::object::meta_str(b, "name")));
    let nodes = all
        .into_iter()
        .filter_map(|json| {
            let node: Node = serde_json::from_value(json.clone()).ok()?;
            let name = node.metadata.name.clone()?;
            let allocatable = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
            let mut requested = quantity::Resources::new();
            let mut count = 0u32;
            for p in pods.iter().filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&name)) {
                count += 1;
                for (resource, amount) in quantity::pod_requests(p) {
                    *requested.entry(resource).or_default() += amount;
                }
            }
            let json = serde_json::to_vec(&json).expect("JSON serializes");
            let mut hasher = std::hash::DefaultHasher::new();
            json.hash(&mut hasher);
            Some(nodes::Node {
                name,
                revision: hasher.finish(),
                json: json.into(),
                allocatable: amounts(quantity::resources(allocatable.into_iter().flatten())).into(),
                requested: amounts(requested),
                pods: count,
            })
        })
        .collect();
    nodes::Decision { pod: serde_json::to_vec(pod).expect("a Pod serializes"), nodes, cluster: name.to_owned() }
}
