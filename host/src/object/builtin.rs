//! The built-in kinds whose plural and scope are known without asking a
//! cluster, taken from k8s-openapi: what `gen` needs to name resources in
//! RBAC rules, and what a manifest check needs to know which kinds live in
//! a namespace.

use k8s_openapi::Resource;
use k8s_openapi::api::{
    admissionregistration, apps, autoscaling, batch, certificates, coordination, core, discovery, events, networking,
    node, policy, rbac, scheduling, storage,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration;

/// Whether a k8s-openapi scope type is that of namespaced objects.
trait Namespaced {
    const NAMESPACED: bool;
}

impl Namespaced for k8s_openapi::NamespaceResourceScope {
    const NAMESPACED: bool = true;
}

impl Namespaced for k8s_openapi::ClusterResourceScope {
    const NAMESPACED: bool = false;
}

/// `(group, kind, plural, namespaced)` of each listed k8s-openapi type.
macro_rules! builtin {
    ($($ty:ty),* $(,)?) => {
        &[$((
            <$ty as Resource>::GROUP,
            <$ty as Resource>::KIND,
            <$ty as Resource>::URL_PATH_SEGMENT,
            <<$ty as Resource>::Scope as Namespaced>::NAMESPACED,
        )),*]
    };
}

/// The built-in kinds whose plural and scope are known without asking a
/// cluster: `(group, kind, plural, namespaced)`.
pub const KINDS: &[(&str, &str, &str, bool)] = builtin![
    core::v1::ConfigMap,
    core::v1::Endpoints,
    core::v1::Event,
    core::v1::LimitRange,
    core::v1::Namespace,
    core::v1::Node,
    core::v1::PersistentVolume,
    core::v1::PersistentVolumeClaim,
    core::v1::Pod,
    core::v1::PodTemplate,
    core::v1::ReplicationController,
    core::v1::ResourceQuota,
    core::v1::Secret,
    core::v1::Service,
    core::v1::ServiceAccount,
    apps::v1::ControllerRevision,
    apps::v1::DaemonSet,
    apps::v1::Deployment,
    apps::v1::ReplicaSet,
    apps::v1::StatefulSet,
    autoscaling::v2::HorizontalPodAutoscaler,
    batch::v1::CronJob,
    batch::v1::Job,
    certificates::v1::CertificateSigningRequest,
    coordination::v1::Lease,
    discovery::v1::EndpointSlice,
    events::v1::Event,
    networking::v1::Ingress,
    networking::v1::IngressClass,
    networking::v1::NetworkPolicy,
    node::v1::RuntimeClass,
    policy::v1::PodDisruptionBudget,
    rbac::v1::ClusterRole,
    rbac::v1::ClusterRoleBinding,
    rbac::v1::Role,
    rbac::v1::RoleBinding,
    scheduling::v1::PriorityClass,
    storage::v1::CSIDriver,
    storage::v1::CSINode,
    storage::v1::CSIStorageCapacity,
    storage::v1::StorageClass,
    storage::v1::VolumeAttachment,
    admissionregistration::v1::MutatingWebhookConfiguration,
    admissionregistration::v1::ValidatingAdmissionPolicy,
    admissionregistration::v1::ValidatingAdmissionPolicyBinding,
    admissionregistration::v1::ValidatingWebhookConfiguration,
    apiextensions::v1::CustomResourceDefinition,
    apiregistration::v1::APIService,
];

/// Whether objects of the built-in `kind` of `group` live in a namespace:
/// `None` for a kind not in [`KINDS`] (a custom kind, or one the table
/// does not list).
///
/// ```
/// use capstan_host::object::builtin::is_namespaced;
///
/// assert_eq!(is_namespaced("", "ConfigMap"), Some(true));
/// assert_eq!(is_namespaced("", "Namespace"), Some(false));
/// assert_eq!(is_namespaced("examples.capstan.dev", "Tenant"), None);
/// ```
pub fn is_namespaced(group: &str, kind: &str) -> Option<bool> {
    KINDS.iter().find(|(g, k, _, _)| *g == group && *k == kind).map(|(_, _, _, namespaced)| *namespaced)
}
