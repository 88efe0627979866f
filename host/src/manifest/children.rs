//! Whether the host can write any child of each owned kind, decided from the
//! manifest alone when a component loads: a controller whose every child
//! would be refused (every object failing with `InvalidOutcome`) is refused
//! at load, naming the declaration to add, instead of shown `running`.
//!
//! Two declarations decide it, both since contract 0.2.0:
//!
//! - the scope of an owned kind: a cluster-scoped owner's own scope holds
//!   cluster-scoped objects only, so its namespaced children need the scope
//!   `cluster` or a list of namespaces, and a list holds no cluster-scoped
//!   child (a namespaced owner's children live in its namespace, which its
//!   own scope always holds);
//! - `bind`: a RoleBinding or ClusterRoleBinding child is written only with
//!   `bind` declared on the role it refers to.
//!
//! The rules are the grants' ([`Grants::can_ever`]), so the check and the
//! check of every child agree. Only what the manifest tells is judged: a
//! kind whose scope it does not tell (neither a CRD it defines nor a
//! built-in kind) passes, as does a primary of unknown scope for the scope
//! rule.

use serde_json::Value;

use super::{Error, Manifest, Scope, Verb};
use crate::object::{Gvk, builtin};
use crate::runtime::grants::Grants;

/// The RBAC group.
const RBAC: &str = "rbac.authorization.k8s.io";

/// The first contract that can declare a scope on an owned kind and `bind`.
const SCOPES_SINCE: &str = "0.2.0";

/// How to declare the scope of an owned kind, in each SDK.
const SCOPE_IN_SDKS: &str = "Rust `Owns::new::<K>().scope(Scope::Cluster)` with `owns_with`, \
                             Python `owns(api_version, kind, scope=Scope.CLUSTER)`, \
                             JavaScript `owns(apiVersion, kind, { scope: Scope.CLUSTER })`";

/// An owned kind of which the host could write no child: what
/// [`Error::Unwritable`] says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unwritable {
    /// Position in `owns`.
    pub index: usize,
    /// The controller's name.
    pub controller: String,
    /// The owned kind.
    pub kind: String,
    /// Why no child passes.
    pub reason: String,
    /// The declaration to add, in the SDKs' words.
    pub fix: String,
}

impl Manifest {
    /// Whether objects of `kind` live in a namespace, as far as the
    /// manifest tells: a CRD it defines, else the built-in kinds; `None`
    /// when it does not tell.
    pub fn is_namespaced(&self, kind: &Gvk) -> Option<bool> {
        match self.crd_for(kind) {
            Some(crd) => match crd.pointer("/spec/scope").and_then(Value::as_str) {
                Some("Namespaced") => Some(true),
                Some("Cluster") => Some(false),
                _ => None,
            },
            None => builtin::is_namespaced(&kind.group, &kind.kind),
        }
    }

    /// Refuses the first owned kind of which the host could write no child.
    pub(super) fn check_children(&self) -> Result<(), Error> {
        let grants = Grants::from_manifest(self);
        let primary = self.is_namespaced(&self.primary);
        for (index, owned) in self.owns.iter().enumerate() {
            let unwritable = |reason: String, fix: String| {
                Error::Unwritable(Box::new(Unwritable {
                    index,
                    controller: self.name.clone(),
                    kind: owned.kind.to_string(),
                    reason,
                    fix,
                }))
            };
            if primary == Some(false)
                && let Some(namespaced) = self.is_namespaced(&owned.kind)
                && !grants.can_ever(Verb::Patch, &owned.kind, namespaced, primary)
            {
                let scope = owned.effective_scope();
                return Err(match (namespaced, &scope) {
                    (true, Scope::Namespaces(_)) => unwritable(
                        "its scope lists no namespace".into(),
                        format!(
                            "list the namespaces its children live in, or give it the scope cluster ({SCOPE_IN_SDKS})"
                        ),
                    ),
                    (true, _) => unwritable(
                        format!(
                            "it is namespaced, and the own scope of its cluster-scoped owner {} holds cluster-scoped \
                             objects only",
                            self.primary
                        ),
                        format!(
                            "give the owned kind a scope: cluster, or the namespaces its children live in \
                             ({SCOPE_IN_SDKS})"
                        ),
                    ),
                    (false, _) => unwritable(
                        "it is cluster-scoped, and its scope lists namespaces only".into(),
                        "give the owned kind the scope cluster, or none (a cluster-scoped owner's own scope holds \
                         cluster-scoped objects)"
                            .into(),
                    ),
                });
            }
            let roles: &[&str] = match (owned.kind.group.as_str(), owned.kind.kind.as_str()) {
                (RBAC, "RoleBinding") => &["Role", "ClusterRole"],
                (RBAC, "ClusterRoleBinding") => &["ClusterRole"],
                _ => &[],
            };
            let can_bind =
                |role: &&str| grants.can_ever(Verb::Bind, &Gvk::new(RBAC, "v1", *role), *role == "Role", primary);
            if !roles.is_empty() && !roles.iter().any(can_bind) {
                let roles = roles.join(" or ");
                return Err(unwritable(
                    format!(
                        "a binding is written only with `bind` declared on the role it refers to, and no permission \
                         grants bind on a {roles} it can refer to"
                    ),
                    format!(
                        "declare a permission with the verb bind on the roles it binds, e.g. Rust \
                         `Permission::new::<ClusterRole>(&[Verb::Bind]).scope(Scope::Cluster).names(&[\"admin\"])`, \
                         Python and JavaScript `Verb.BIND` (a {} binding names a ClusterRole cluster-wide)",
                        owned.kind.kind
                    ),
                ));
            }
        }
        Ok(())
    }
}

impl Error {
    /// The same error for a component built against `contract`: a 0.1.0
    /// component cannot declare what [`Error::Unwritable`] asks for, so it
    /// is told to rebuild against a later contract first.
    #[must_use]
    pub fn for_contract(self, contract: &str) -> Self {
        match self {
            Error::Unwritable(mut u) if contract == "0.1.0" => {
                u.fix = format!(
                    "contract 0.1.0 cannot declare that: rebuild the component against contract {SCOPES_SINCE} or \
                     later and {}",
                    u.fix
                );
                Error::Unwritable(u)
            }
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::manifest::{Owned, Permission};

    fn tenant_crd() -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "tenants.examples.capstan.dev"},
            "spec": {"group": "examples.capstan.dev", "names": {"plural": "tenants", "kind": "Tenant"},
                     "scope": "Cluster", "versions": [{"name": "v1alpha1", "served": true, "storage": true}]},
        })
    }

    /// A cluster-scoped Tenant, as its CRD says, owning `owns`.
    fn tenant(owns: Vec<Owned>) -> Manifest {
        let mut m = Manifest::bare("tenant", Gvk::new("examples.capstan.dev", "v1alpha1", "Tenant"));
        m.crds = vec![tenant_crd()];
        m.owns = owns;
        m
    }

    fn scoped(kind: Gvk, scope: Scope) -> Owned {
        Owned { scope: Some(scope), ..Owned::kind(kind) }
    }

    fn quota() -> Gvk {
        Gvk::new("", "v1", "ResourceQuota")
    }

    fn binding() -> Gvk {
        Gvk::new(RBAC, "v1", "RoleBinding")
    }

    fn bind(kind: &str, scope: Scope) -> Permission {
        Permission {
            group: RBAC.into(),
            kind: kind.into(),
            verbs: vec![Verb::Bind],
            scope,
            status: false,
            resource_names: vec!["admin".into()],
        }
    }

    fn refused(m: &Manifest) -> (usize, String) {
        match m.check_children() {
            Err(Error::Unwritable(u)) => (u.index, u.kind),
            other => panic!("expected an unwritable owned kind, got {other:?}"),
        }
    }

    #[test]
    fn the_scope_of_a_kind_comes_from_the_crds_then_the_built_in_kinds() {
        let m = tenant(vec![]);
        assert_eq!(m.is_namespaced(&m.primary), Some(false), "the CRD says Cluster");
        assert_eq!(m.is_namespaced(&quota()), Some(true));
        assert_eq!(m.is_namespaced(&Gvk::new("", "v1", "Namespace")), Some(false));
        assert_eq!(m.is_namespaced(&Gvk::new("example.com", "v1", "Widget")), None);
    }

    #[test]
    fn namespaced_children_of_a_cluster_scoped_owner_without_a_scope_are_refused() {
        let m = tenant(vec![Owned::kind(Gvk::new("", "v1", "Namespace")), Owned::kind(quota())]);
        assert_eq!(refused(&m), (1, "v1/ResourceQuota".into()));
        let m = tenant(vec![scoped(quota(), Scope::OwnNamespace)]);
        assert_eq!(refused(&m), (0, "v1/ResourceQuota".into()), "own-namespace declared is the default");
        let m = tenant(vec![scoped(quota(), Scope::Namespaces(vec![]))]);
        assert_eq!(refused(&m), (0, "v1/ResourceQuota".into()), "an empty list holds nothing");
    }

    #[test]
    fn a_scope_that_holds_the_children_or_a_permission_that_writes_them_passes() {
        tenant(vec![scoped(quota(), Scope::Cluster)]).check_children().expect("cluster");
        tenant(vec![scoped(quota(), Scope::Namespaces(vec!["team-a".into()]))]).check_children().expect("listed");
        let mut m = tenant(vec![Owned::kind(quota())]);
        m.permissions = vec![Permission {
            group: String::new(),
            kind: "ResourceQuota".into(),
            verbs: vec![Verb::Patch],
            scope: Scope::Cluster,
            status: false,
            resource_names: vec![],
        }];
        m.check_children().expect("a declared permission writes them");
    }

    #[test]
    fn cluster_scoped_children_in_a_list_of_namespaces_are_refused() {
        let m = tenant(vec![scoped(Gvk::new("", "v1", "Namespace"), Scope::Namespaces(vec!["a".into()]))]);
        assert_eq!(refused(&m), (0, "v1/Namespace".into()));
    }

    #[test]
    fn a_namespaced_owner_or_one_of_unknown_scope_is_not_judged_on_scopes() {
        let mut m = tenant(vec![Owned::kind(quota())]);
        m.primary = Gvk::new("", "v1", "ConfigMap");
        m.check_children().expect("children of a namespaced owner live in its namespace");
        m.primary = Gvk::new("example.com", "v1", "Widget");
        m.check_children().expect("a primary of unknown scope");
        let m = tenant(vec![Owned::kind(Gvk::new("example.com", "v1", "Widget"))]);
        m.check_children().expect("an owned kind of unknown scope");
    }

    #[test]
    fn a_binding_without_bind_on_a_role_it_can_name_is_refused() {
        let m = tenant(vec![scoped(binding(), Scope::Cluster)]);
        assert_eq!(refused(&m), (0, "rbac.authorization.k8s.io/v1/RoleBinding".into()));
        // bind on ClusterRoles in the own scope of a namespaced owner: no
        // ClusterRole is in a namespace.
        let mut m = tenant(vec![Owned::kind(binding())]);
        m.primary = Gvk::new("", "v1", "ConfigMap");
        m.permissions = vec![bind("ClusterRole", Scope::OwnNamespace)];
        assert_eq!(refused(&m).0, 0);
        // A ClusterRoleBinding names a ClusterRole only.
        let mut m = tenant(vec![Owned::kind(Gvk::new(RBAC, "v1", "ClusterRoleBinding"))]);
        m.permissions = vec![bind("Role", Scope::Cluster)];
        assert_eq!(refused(&m).0, 0);
    }

    #[test]
    fn a_binding_with_bind_on_a_role_it_can_name_passes() {
        let mut m = tenant(vec![scoped(binding(), Scope::Cluster)]);
        m.permissions = vec![bind("ClusterRole", Scope::Cluster)];
        m.check_children().expect("the tenant's declaration");
        let mut m = tenant(vec![Owned::kind(binding())]);
        m.primary = Gvk::new("", "v1", "ConfigMap");
        m.permissions = vec![bind("Role", Scope::OwnNamespace)];
        m.check_children().expect("Roles in the owner's namespace");
        let mut m = tenant(vec![Owned::kind(Gvk::new(RBAC, "v1", "ClusterRoleBinding"))]);
        m.permissions = vec![Permission { group: "*".into(), kind: "*".into(), ..bind("", Scope::Cluster) }];
        m.check_children().expect("a wildcard bind");
    }

    #[test]
    fn the_refusal_names_the_controller_the_kind_and_the_declaration_to_add() {
        let err = tenant(vec![Owned::kind(quota())]).check_children().expect_err("refused");
        assert_eq!(
            err.to_string(),
            "owns[0]: controller tenant could write no v1/ResourceQuota child: it is namespaced, and the own scope \
             of its cluster-scoped owner examples.capstan.dev/v1alpha1/Tenant holds cluster-scoped objects only; \
             give the owned kind a scope: cluster, or the namespaces its children live in (Rust \
             `Owns::new::<K>().scope(Scope::Cluster)` with `owns_with`, Python `owns(api_version, kind, \
             scope=Scope.CLUSTER)`, JavaScript `owns(apiVersion, kind, { scope: Scope.CLUSTER })`)"
        );
        let err = tenant(vec![scoped(binding(), Scope::Cluster)]).check_children().expect_err("refused");
        let text = err.to_string();
        assert!(text.starts_with("owns[0]: controller tenant could write no rbac.authorization.k8s.io/v1/RoleBinding child: a binding is written only with `bind` declared"), "{text}");
        assert!(text.contains("declare a permission with the verb bind"), "{text}");
        let old = err.clone().for_contract("0.1.0").to_string();
        assert!(old.contains("contract 0.1.0 cannot declare that: rebuild the component against contract 0.2.0 or later and declare a permission"), "{old}");
        assert_eq!(err.clone().for_contract("0.2.0"), err, "later contracts can declare it");
    }
}
