//! The tenant operator: a cluster-scoped `Tenant` custom resource whose
//! controller makes, for each tenant, a Namespace `tenant-<name>` and in it
//! a ResourceQuota, a RoleBinding that makes the tenant's admins `admin`
//! there, and a ConfigMap describing the tenant.
//!
//! It shows the shapes the greeter does not:
//!
//! - a **cluster-scoped primary** with a cluster-scoped child (the
//!   Namespace, in the primary's own scope) and namespaced children (given
//!   the scope `Cluster` with [`Owns::scope`]) selected by a label;
//! - **RBAC management**: a RoleBinding to the ClusterRole `admin`, which
//!   needs `bind` on that role, declared with [`Permission::names`];
//! - **failing with status**: an invalid spec is a terminal error that sets
//!   `Ready=False` (reason `InvalidSpec`) and keeps the children;
//! - **children refused by the API server** (e.g. a quota the API server
//!   rejects) seen through [`Context::failed_children`] and reported as
//!   `Ready=False` (reason `ChildRefused`);
//! - a **reference mapping**: Secrets anywhere annotated
//!   `tenants.examples.capstan.dev/tenant: <name>` trigger that Tenant, and
//!   its ConfigMap counts them;
//! - **conditions** kept with [`conditions::set_condition`].

#![allow(clippy::duplicated_attributes, reason = "kube's printcolumn(...) repeats its keys by design")]

use std::collections::BTreeMap;

use capstan_guest::conditions::{self, condition};
use capstan_guest::k8s_openapi::api::core::v1::{ConfigMap, Namespace, ResourceQuota, ResourceQuotaSpec, Secret};
use capstan_guest::k8s_openapi::api::rbac::v1::{ClusterRole, RoleBinding, RoleRef, Subject};
use capstan_guest::k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use capstan_guest::k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use capstan_guest::kube::CustomResource;
use capstan_guest::kube::core::CustomResourceExt;
use capstan_guest::prelude::*;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The finalizer the tenant controller asks the host to manage.
pub const FINALIZER: &str = "tenants.examples.capstan.dev/cleanup";
/// The label every child carries: the tenant's name.
pub const TENANT_LABEL: &str = "tenants.examples.capstan.dev/tenant";
/// The annotation that ties a Secret anywhere to a tenant.
pub const SECRET_ANNOTATION: &str = "tenants.examples.capstan.dev/tenant";
/// The ClusterRole the tenant's admins are bound to in its namespace.
pub const ADMIN_ROLE: &str = "admin";

/// Desired state of a `Tenant`.
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "examples.capstan.dev",
    version = "v1alpha1",
    kind = "Tenant",
    plural = "tenants",
    shortname = "tn",
    category = "capstan",
    status = "TenantStatus",
    printcolumn(name = "Namespace", type_ = "string", json_path = ".status.namespace"),
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Reason", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].reason")
)]
#[serde(rename_all = "camelCase")]
pub struct TenantSpec {
    /// Users made `admin` of the tenant's namespace. At least one.
    pub admins: Vec<String>,
    /// Hard limits of the namespace, e.g. `{"pods": "10", "requests.cpu": "2"}`.
    #[serde(default)]
    pub quota: BTreeMap<String, String>,
}

/// Observed state of a `Tenant`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TenantStatus {
    /// The generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The tenant's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// `Ready`, and the host's `Reconciled` after a failure.
    #[serde(default)]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// The name of a tenant's namespace.
pub fn namespace_name(tenant: &str) -> String {
    format!("tenant-{tenant}")
}

/// The tenant controller.
#[derive(Default)]
pub struct Tenants;

fn meta(name: &str, namespace: Option<&str>, tenant: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: namespace.map(str::to_owned),
        labels: Some([(TENANT_LABEL.to_owned(), tenant.to_owned())].into()),
        ..ObjectMeta::default()
    }
}

/// What is wrong with a spec, if anything.
fn invalid(spec: &TenantSpec) -> Option<String> {
    if spec.admins.is_empty() {
        return Some("spec.admins lists no one".into());
    }
    spec.admins.iter().find(|a| a.trim().is_empty()).map(|_| "spec.admins has an empty name".into())
}

/// The status with `Ready` set, keeping the other conditions.
fn status(tenant: &Tenant, ready: Condition) -> TenantStatus {
    let mut status = tenant.status.clone().unwrap_or_default();
    conditions::set_condition(&mut status.conditions, ready);
    status.namespace = Some(namespace_name(&tenant.name_any()));
    status.observed_generation = tenant.metadata.generation;
    status
}

impl Controller for Tenants {
    type Resource = Tenant;

    fn manifest(&self) -> Manifest {
        let selected = |owns: Owns| owns.scope(Scope::Cluster).label_selector(TENANT_LABEL);
        Manifest::new("tenants")
            .primary::<Tenant>()
            .crd(&Tenant::crd())
            .owns::<Namespace>()
            .owns_with(selected(Owns::new::<ResourceQuota>()))
            .owns_with(selected(Owns::new::<RoleBinding>()))
            .owns_with(selected(Owns::new::<ConfigMap>()))
            .watches(
                Watch::new::<Secret>(Mapping::Reference {
                    name: Field::Annotation(SECRET_ANNOTATION.into()),
                    namespace: None,
                })
                .label_selector(TENANT_LABEL),
            )
            .permission(Permission::new::<ClusterRole>(&[Verb::Bind]).scope(Scope::Cluster).names(&[ADMIN_ROLE]))
            .finalizer(FINALIZER)
    }

    fn add(&self, ctx: &Context, tenant: Tenant) -> Result<Outcome> {
        let outcome = self.reconcile(ctx, tenant)?;
        Ok(outcome.event(Event::normal("Created", "Provision").note("tenant namespace provisioned")))
    }

    fn delete(&self, ctx: &Context, tenant: Tenant) -> Result<Outcome> {
        ctx.log().info("tenant deleted", &[("name", &tenant.name_any())]);
        // The namespace and everything in it follow through their owner
        // references: the garbage collector deletes them once the tenant is
        // gone. (`keep_children()` here would keep them, ownerless.)
        Ok(Outcome::new().event(Event::normal("Deleted", "Cleanup").note("tenant namespace follows")))
    }

    fn reconcile(&self, ctx: &Context, tenant: Tenant) -> Result<Outcome> {
        let name = tenant.name_any();
        if let Some(reason) = invalid(&tenant.spec) {
            // Keep what exists; say why nothing changes.
            let ready = condition("Ready", "False", "InvalidSpec", &reason);
            return Err(Error::terminal(reason).with_status(&status(&tenant, ready)));
        }
        let ns = namespace_name(&name);
        let namespace = Namespace { metadata: meta(&ns, None, &name), ..Namespace::default() };
        let quota = ResourceQuota {
            metadata: meta("quota", Some(&ns), &name),
            spec: Some(ResourceQuotaSpec {
                hard: Some(tenant.spec.quota.iter().map(|(k, v)| (k.clone(), Quantity(v.clone()))).collect()),
                ..ResourceQuotaSpec::default()
            }),
            ..ResourceQuota::default()
        };
        let binding = RoleBinding {
            metadata: meta("tenant-admins", Some(&ns), &name),
            role_ref: RoleRef {
                api_group: Some("rbac.authorization.k8s.io".into()),
                kind: "ClusterRole".into(),
                name: ADMIN_ROLE.into(),
            },
            subjects: Some(
                tenant
                    .spec
                    .admins
                    .iter()
                    .map(|user| Subject {
                        api_group: Some("rbac.authorization.k8s.io".into()),
                        kind: "User".into(),
                        name: user.clone(),
                        namespace: None,
                    })
                    .collect(),
            ),
        };
        let selector = format!("{TENANT_LABEL}={name}");
        let secrets = ctx
            .api::<Secret>(None)
            .list(&ListParams::default().labels(TENANT_LABEL))?
            .into_iter()
            .filter(|s| s.annotations().get(SECRET_ANNOTATION) == Some(&name))
            .count();
        let info = ConfigMap {
            metadata: meta("tenant-info", Some(&ns), &name),
            data: Some(BTreeMap::from([
                ("tenant".to_owned(), name.clone()),
                ("admins".to_owned(), tenant.spec.admins.join(",")),
                ("secrets".to_owned(), secrets.to_string()),
                ("selector".to_owned(), selector),
            ])),
            ..ConfigMap::default()
        };
        let ready = match ctx.failed_children() {
            [] => condition("Ready", "True", "Provisioned", &format!("namespace {ns} is ready")),
            failed => {
                let what: Vec<String> =
                    failed.iter().map(|f| format!("{} {}: {}", f.kind, f.name, f.message)).collect();
                condition("Ready", "False", "ChildRefused", &what.join("; "))
            }
        };
        Ok(Outcome::new().child(&namespace).child(&quota).child(&binding).child(&info).status(&status(&tenant, ready)))
    }
}

#[cfg(target_arch = "wasm32")]
capstan_guest::export!(Tenants);
