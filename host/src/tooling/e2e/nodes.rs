//! A case's Nodes on a real cluster: API objects with no kubelet behind
//! them.
//!
//! A kubelet renews its Node's Lease in `kube-node-lease` every 10 s; when
//! none is renewed for the node monitor grace period (40 to 50 s),
//! kube-controller-manager's node lifecycle controller sets the Node's
//! `Ready` condition to `Unknown` and taints it
//! `node.kubernetes.io/unreachable`, and a scheduler stops placing Pods
//! there. [`FakeNodes`] renews the Lease of each Node a case creates, as
//! the kubelet would, while the case runs. A Pod bound to such a Node
//! never terminates gracefully either (the kubelet confirms that), so
//! [`FakeNodes::release_bound_pods`] deletes those with a grace period of
//! zero.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use kube::api::{Api, DeleteParams, ListParams, PatchParams};

/// Where the kubelet's Leases are.
const LEASE_NAMESPACE: &str = "kube-node-lease";

/// How often the Leases are renewed: the kubelet's default.
const RENEW_EVERY: Duration = Duration::from_secs(10);

/// The Leases' duration: the kubelet's default.
const LEASE_SECONDS: i32 = 40;

/// The Nodes a case created (name to uid), and the task renewing their
/// Leases; [`FakeNodes::stop`] ends it.
pub(super) struct FakeNodes {
    client: kube::Client,
    nodes: Arc<Mutex<BTreeMap<String, String>>>,
    renewer: tokio::task::JoinHandle<()>,
}

impl FakeNodes {
    /// Starts renewing (nothing yet: see [`FakeNodes::register`]).
    pub(super) fn start(client: kube::Client) -> Self {
        let nodes = Arc::new(Mutex::new(BTreeMap::new()));
        let renewer = tokio::spawn(renew_forever(client.clone(), Arc::clone(&nodes)));
        Self { client, nodes, renewer }
    }

    /// Renews the Lease of Node `name` from now on, the first time at once.
    /// A Node that cannot be read is left alone (with a warning): the
    /// case's checks will show what it lacks.
    pub(super) async fn register(&self, name: &str) {
        let node = match Api::<Node>::all(self.client.clone()).get(name).await {
            Ok(node) => node,
            Err(error) => {
                tracing::warn!(node = name, %error, "cannot read the case's Node to renew its Lease");
                return;
            }
        };
        let uid = node.metadata.uid.unwrap_or_default();
        renew(&self.client, name, &uid).await;
        self.lock().insert(name.to_owned(), uid);
    }

    /// The names of the Nodes registered.
    pub(super) fn names(&self) -> BTreeSet<String> {
        self.lock().keys().cloned().collect()
    }

    /// Deletes, with a grace period of zero, the Pods in `namespaces` bound
    /// to one of these Nodes (no kubelet would ever confirm that they
    /// stopped). Returns how many it deleted.
    pub(super) async fn release_bound_pods(&self, namespaces: &[String]) -> usize {
        let nodes = self.names();
        if nodes.is_empty() {
            return 0;
        }
        let now = DeleteParams { grace_period_seconds: Some(0), ..DeleteParams::default() };
        let mut released = 0;
        for namespace in namespaces {
            let api = Api::<Pod>::namespaced(self.client.clone(), namespace);
            let Ok(pods) = api.list(&ListParams::default()).await else { continue };
            for pod in pods.items {
                let bound = pod.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some_and(|n| nodes.contains(n));
                let Some(name) = pod.metadata.name.filter(|_| bound) else { continue };
                match api.delete(&name, &now).await {
                    Ok(_) => released += 1,
                    Err(kube::Error::Api(e)) if e.code == 404 => {}
                    Err(error) => {
                        tracing::warn!(namespace, pod = name, %error, "cannot delete a Pod bound to a case's Node")
                    }
                }
            }
        }
        released
    }

    /// Stops renewing; unless `keep`, deletes the Leases (the garbage
    /// collector would, after their Nodes, if the cluster runs one).
    pub(super) async fn stop(self, keep: bool) {
        self.renewer.abort();
        if keep {
            return;
        }
        let api = Api::<Lease>::namespaced(self.client.clone(), LEASE_NAMESPACE);
        for name in self.names() {
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(error) => tracing::warn!(node = name, %error, "cannot delete the Lease of a case's Node"),
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, String>> {
        self.nodes.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

async fn renew_forever(client: kube::Client, nodes: Arc<Mutex<BTreeMap<String, String>>>) {
    loop {
        tokio::time::sleep(RENEW_EVERY).await;
        let now: Vec<(String, String)> =
            nodes.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone().into_iter().collect();
        for (name, uid) in now {
            renew(&client, &name, &uid).await;
        }
    }
}

/// The Lease a kubelet keeps for Node `name` (owned by the Node, as the
/// kubelet makes it), renewed now.
fn lease(name: &str, uid: &str) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(LEASE_NAMESPACE.to_owned()),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".to_owned(),
                kind: "Node".to_owned(),
                name: name.to_owned(),
                uid: uid.to_owned(),
                ..OwnerReference::default()
            }]),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(name.to_owned()),
            lease_duration_seconds: Some(LEASE_SECONDS),
            renew_time: Some(MicroTime(k8s_openapi::jiff::Timestamp::now())),
            ..LeaseSpec::default()
        }),
    }
}

async fn renew(client: &kube::Client, name: &str, uid: &str) {
    let api = Api::<Lease>::namespaced(client.clone(), LEASE_NAMESPACE);
    let apply = PatchParams::apply("capstan-e2e").force();
    if let Err(error) = api.patch(name, &apply, &kube::api::Patch::Apply(lease(name, uid))).await {
        tracing::warn!(node = name, %error, "cannot renew the Lease of a case's Node");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nodes_lease_is_held_by_the_node_and_owned_by_it_like_a_kubelets() {
        let lease = serde_json::to_value(lease("n-a-xyz", "u1")).expect("serializes");
        assert_eq!(lease["apiVersion"], "coordination.k8s.io/v1");
        assert_eq!(lease["metadata"]["namespace"], "kube-node-lease");
        assert_eq!(lease["metadata"]["ownerReferences"][0]["uid"], "u1");
        assert_eq!(lease["spec"]["holderIdentity"], "n-a-xyz");
        assert_eq!(lease["spec"]["leaseDurationSeconds"], 40);
        let renewed = lease["spec"]["renewTime"].as_str().expect("a time");
        assert!(renewed.ends_with('Z') && renewed.contains('.'), "{renewed}");
    }
}
