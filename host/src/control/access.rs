//! Checks a component's permissions against what the host may do: every
//! rule the generated RBAC would grant the component (the rules of
//! [`policy`](crate::policy), which `capstan gen` renders) is asked of the
//! API server as a `SelfSubjectAccessReview`. A component that needs more
//! than the operator granted the host is rejected when it loads, instead
//! of failing with 403s at run time.

use k8s_openapi::api::authorization::v1::{ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec};
use kube::Api;
use kube::api::PostParams;

use crate::cluster::kube::KubeCluster;
use crate::manifest::Manifest;
use crate::policy::{PluralOverride, Resources, component_rules, member_rules};

/// Why a component's permissions could not be confirmed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The host may not do something the component needs.
    #[error("needs permissions the host was not granted: {}", .0.join("; "))]
    Denied(Vec<String>),
    /// The rules could not be worked out (e.g. a kind with no known plural).
    #[error("cannot work out the permissions it needs: {0}")]
    Rules(String),
    /// The API server did not answer a review.
    #[error("cannot review permissions (run with --skip-permission-check to do without): {0}")]
    Review(String),
}

/// Reviews every permission `manifest` needs, in each of `namespaces`
/// (all namespaces when empty). `install_crds` adds the rights to create
/// and patch its CRDs.
///
/// # Errors
///
/// [`Error::Denied`] lists each verb, resource and namespace the host may
/// not use.
pub async fn check(
    cluster: &KubeCluster,
    manifest: &Manifest,
    namespaces: &[String],
    install_crds: bool,
) -> Result<(), Error> {
    let resources = resources(cluster, manifest).await;
    let rules = component_rules(manifest, &resources, install_crds).map_err(|e| Error::Rules(e.to_string()))?;
    let mut asks = everywhere(&rules.cluster.policy_rules(), namespaces);
    for (namespace, rules) in &rules.namespaces {
        asks.extend(rules.policy_rules().into_iter().map(|r| (Some(namespace.clone()), r)));
    }
    review(cluster, asks).await
}

/// Reviews, in a member cluster of `manifest`'s fleet, what the host
/// needs there for it (the rules `capstan gen member-rbac` grants): its
/// children's kinds, its reads, and with `install_crds` its owned kinds'
/// CRDs, in each of `namespaces` (all namespaces when empty). Nothing for
/// a component that is not a fleet controller.
///
/// # Errors
///
/// As [`check`].
pub async fn check_member(
    cluster: &KubeCluster,
    manifest: &Manifest,
    namespaces: &[String],
    install_crds: bool,
) -> Result<(), Error> {
    let resources = resources(cluster, manifest).await;
    let Some(rules) = member_rules(manifest, &resources, install_crds).map_err(|e| Error::Rules(e.to_string()))? else {
        return Ok(());
    };
    review(cluster, everywhere(&rules.policy_rules(), namespaces)).await
}

/// The resources of `manifest`'s kinds: plurals of kinds other operators
/// define come from discovery.
async fn resources(cluster: &KubeCluster, manifest: &Manifest) -> Resources {
    let mut overrides = Vec::new();
    for gvk in manifest.kinds() {
        if let Ok(resolved) = cluster.resolve(gvk).await {
            let plural = resolved.resource.plural.clone();
            overrides.push(PluralOverride { group: gvk.group.clone(), kind: gvk.kind.clone(), plural });
        }
    }
    Resources::new(&manifest.crds, &overrides)
}

/// Each rule in each of `namespaces` (once, in all namespaces, when empty).
fn everywhere(
    rules: &[k8s_openapi::api::rbac::v1::PolicyRule],
    namespaces: &[String],
) -> Vec<(Option<String>, k8s_openapi::api::rbac::v1::PolicyRule)> {
    let scopes: Vec<Option<&str>> =
        if namespaces.is_empty() { vec![None] } else { namespaces.iter().map(|n| Some(n.as_str())).collect() };
    let mut asks = Vec::new();
    for rule in rules {
        for &namespace in &scopes {
            asks.push((namespace.map(str::to_owned), rule.clone()));
        }
    }
    asks
}

/// Asks the API server about each rule in its namespace.
async fn review(
    cluster: &KubeCluster,
    asks: Vec<(Option<String>, k8s_openapi::api::rbac::v1::PolicyRule)>,
) -> Result<(), Error> {
    let api: Api<SelfSubjectAccessReview> = Api::all(cluster.client().clone());
    let mut denied = Vec::new();
    for (namespace, rule) in asks {
        let group = rule.api_groups.as_ref().and_then(|g| g.first()).cloned().unwrap_or_default();
        for resource in rule.resources.iter().flatten() {
            let (resource, subresource) = match resource.split_once('/') {
                Some((r, s)) => (r.to_owned(), Some(s.to_owned())),
                None => (resource.clone(), None),
            };
            let names: Vec<Option<String>> = match &rule.resource_names {
                Some(names) => names.iter().cloned().map(Some).collect(),
                None => vec![None],
            };
            for verb in &rule.verbs {
                for name in &names {
                    let review = SelfSubjectAccessReview {
                        spec: SelfSubjectAccessReviewSpec {
                            resource_attributes: Some(ResourceAttributes {
                                group: Some(group.clone()),
                                resource: Some(resource.clone()),
                                subresource: subresource.clone(),
                                verb: Some(verb.clone()),
                                namespace: namespace.clone(),
                                name: name.clone(),
                                ..ResourceAttributes::default()
                            }),
                            ..SelfSubjectAccessReviewSpec::default()
                        },
                        ..SelfSubjectAccessReview::default()
                    };
                    let answer =
                        api.create(&PostParams::default(), &review).await.map_err(|e| Error::Review(e.to_string()))?;
                    if !answer.status.is_some_and(|s| s.allowed) {
                        let what = match &subresource {
                            Some(s) => format!("{resource}/{s}"),
                            None => resource.clone(),
                        };
                        let group = if group.is_empty() { "core".to_owned() } else { group.clone() };
                        let place =
                            namespace.as_deref().map_or("all namespaces".to_owned(), |n| format!("namespace {n}"));
                        let named = name.as_deref().map(|n| format!(" {n}")).unwrap_or_default();
                        denied.push(format!("{verb} {what}{named} ({group}) in {place}"));
                    }
                }
            }
        }
    }
    if denied.is_empty() { Ok(()) } else { Err(Error::Denied(denied)) }
}
