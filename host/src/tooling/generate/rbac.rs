//! RBAC objects from the rules of [`crate::policy`]: the ServiceAccount
//! the host runs as, one ClusterRole for what the host itself needs, and
//! one ClusterRole per component for what running that component needs
//! (Roles in the namespaces a permission is limited to).
//!
//! One ClusterRole per component, rather than one for everything, keeps the
//! roles composable: adding a component to an installation (a kustomize
//! overlay, or later a hot-loaded component) adds its role and binding and
//! touches nothing else, and `kubectl describe clusterrole capstan-greeter`
//! shows exactly what the greeter may do.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

use super::{Component, Error, Options, to_value};
use crate::policy::{Resources, Rules, component_rules, host_rules, member_rules};

fn meta(name: &str, namespace: Option<&str>, labels: &BTreeMap<String, String>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: namespace.map(str::to_owned),
        labels: Some(labels.clone()),
        ..ObjectMeta::default()
    }
}

fn subject(options: &Options) -> Vec<Subject> {
    vec![Subject {
        kind: "ServiceAccount".to_owned(),
        name: options.name.clone(),
        namespace: Some(options.namespace.clone()),
        ..Subject::default()
    }]
}

fn role_ref(kind: &str, name: &str) -> RoleRef {
    RoleRef { api_group: Some("rbac.authorization.k8s.io".to_owned()), kind: kind.to_owned(), name: name.to_owned() }
}

/// A Role with `rules` in `namespace` and its binding, as JSON objects.
fn role(
    name: &str,
    namespace: &str,
    rules: &Rules,
    options: &Options,
    labels: &BTreeMap<String, String>,
) -> Result<[Value; 2], Error> {
    let role = Role { metadata: meta(name, Some(namespace), labels), rules: Some(rules.policy_rules()) };
    let binding = RoleBinding {
        metadata: meta(name, Some(namespace), labels),
        role_ref: role_ref("Role", name),
        subjects: Some(subject(options)),
    };
    Ok([to_value(&role)?, to_value(&binding)?])
}

/// A ClusterRole with `rules` and its binding, as JSON objects.
fn cluster_role_and_binding(
    name: &str,
    rules: &Rules,
    options: &Options,
    labels: &BTreeMap<String, String>,
) -> Result<[Value; 2], Error> {
    let role =
        ClusterRole { metadata: meta(name, None, labels), rules: Some(rules.policy_rules()), ..ClusterRole::default() };
    let binding = ClusterRoleBinding {
        metadata: meta(name, None, labels),
        role_ref: role_ref("ClusterRole", name),
        subjects: Some(subject(options)),
    };
    Ok([to_value(&role)?, to_value(&binding)?])
}

/// The host's ServiceAccount, its ClusterRole and binding, and the Role
/// and binding in its own namespace. With watched namespaces, the Events
/// rule is a Role in each of them and in `default`, where Events about
/// cluster-scoped objects land.
pub(crate) fn host_objects(options: &Options) -> Result<Vec<Value>, Error> {
    let labels = options.labels(None);
    let account = ServiceAccount {
        metadata: meta(&options.name, Some(&options.namespace), &labels),
        ..ServiceAccount::default()
    };
    let (cluster, own_namespace) = host_rules();
    let mut namespaces = BTreeMap::from([(options.namespace.clone(), own_namespace)]);
    let cluster = if options.watch_namespaces.is_empty() {
        cluster
    } else {
        let (events, cluster) = cluster.split(|group, resource| (group, resource) == ("events.k8s.io", "events"));
        for ns in options.watch_namespaces.iter().map(String::as_str).chain(["default"]) {
            namespaces.entry(ns.to_owned()).or_default().extend(&events);
        }
        cluster
    };
    let mut out = vec![to_value(&account)?];
    out.extend(cluster_role_and_binding(&options.name, &cluster, options, &labels)?);
    for (namespace, rules) in &namespaces {
        out.extend(role(&options.name, namespace, rules, options, &labels)?);
    }
    Ok(out)
}

/// The ClusterRole and binding of one component (named
/// `<host name>-<controller name>`), and a Role and binding in each
/// namespace one of its permissions is limited to and, with watched
/// namespaces, in each of those for its namespaced resources.
pub(crate) fn component_objects(
    component: &Component,
    resources: &Resources,
    options: &Options,
) -> Result<Vec<Value>, Error> {
    let mut rules = component_rules(&component.manifest, resources, options.install_crds)?;
    if super::webhooks::serves(&component.manifest) {
        // Without the Deployment, the host runs outside the cluster and
        // creates the configurations itself.
        rules.cluster.extend(&super::webhooks::rules(&component.manifest, options.skip_deployment));
    }
    let rules = rules.within(&options.watch_namespaces, resources);
    let name = options.component_object_name(&component.manifest.name)?;
    let labels = options.labels(Some(&component.manifest.name));
    let mut out = Vec::new();
    if !rules.cluster.is_empty() {
        let mut objects = cluster_role_and_binding(&name, &rules.cluster, options, &labels)?;
        if let Some(reach) = admission_reach(&component.manifest, &options.watch_namespaces) {
            // RBAC cannot say what a webhook sees, changes or refuses: the
            // role says it beside its rules.
            objects[0]["metadata"]["annotations"] = serde_json::json!({ADMISSION_ANNOTATION: reach});
        }
        out.extend(objects);
    }
    for (namespace, rules) in &rules.namespaces {
        out.extend(role(&name, namespace, rules, options, &labels)?);
    }
    Ok(out)
}

/// The ClusterRole `<name>-<controller>-member` and its binding to
/// `subject` of a fleet controller's member clusters (see
/// [`member_rules`]); none for a uniform controller.
pub(crate) fn member_objects(
    component: &Component,
    resources: &Resources,
    options: &Options,
    subject: &Subject,
) -> Result<Vec<Value>, Error> {
    let Some(rules) = member_rules(&component.manifest, resources, options.install_crds)? else {
        return Ok(Vec::new());
    };
    let name = format!("{}-member", options.component_object_name(&component.manifest.name)?);
    let labels = options.labels(Some(&component.manifest.name));
    let role = ClusterRole {
        metadata: meta(&name, None, &labels),
        rules: Some(rules.policy_rules()),
        ..ClusterRole::default()
    };
    let binding = ClusterRoleBinding {
        metadata: meta(&name, None, &labels),
        role_ref: role_ref("ClusterRole", &name),
        subjects: Some(vec![subject.clone()]),
    };
    Ok(vec![to_value(&role)?, to_value(&binding)?])
}

/// The annotation on a component's ClusterRole that says what its
/// admission webhooks reach, which no RBAC rule expresses.
pub const ADMISSION_ANNOTATION: &str = "capstan.dev/admission";

/// What the admission webhooks of `manifest` reach, one line each:
/// `NAME (validating: read, veto) KIND, … in NAMESPACES`; `None` without
/// webhooks.
fn admission_reach(manifest: &crate::manifest::Manifest, watched: &[String]) -> Option<String> {
    let where_ = if watched.is_empty() {
        format!("in every namespace but {}", crate::serve::webhook::install::SYSTEM_NAMESPACES.join(", "))
    } else {
        format!("in {}", watched.join(", "))
    };
    let lines: Vec<String> = manifest
        .roles
        .admission
        .iter()
        .map(|w| {
            let access = if w.mutating { "mutating: read, write, veto" } else { "validating: read, veto" };
            let kinds: Vec<String> = w
                .kinds
                .iter()
                .map(|k| if k.group.is_empty() { k.kind.clone() } else { format!("{}.{}", k.kind, k.group) })
                .collect();
            format!("{} ({access}) {} {where_}", w.name, kinds.join(", "))
        })
        .collect();
    (!lines.is_empty()).then(|| lines.join("\n"))
}
