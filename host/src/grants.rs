//! What a controller may do through the `kube` import: the permissions its
//! manifest declares, plus those its primary, owned and watched kinds imply.
//! Checked on every host call; the same rules generate RBAC.

use std::collections::BTreeSet;
use std::fmt;

use crate::manifest::{Manifest, Scope, Verb};
use crate::object::Gvk;

/// One rule: verbs on a group/kind within a scope.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// API group (`*` for all).
    pub group: String,
    /// Kind (`*` for all).
    pub kind: String,
    /// Allowed verbs.
    pub verbs: BTreeSet<Verb>,
    /// Where they apply.
    pub scope: Scope,
    /// Whether the status subresource is included.
    pub status: bool,
}

impl Rule {
    fn new(gvk: &Gvk, verbs: &[Verb], scope: Scope, status: bool) -> Self {
        Self { group: gvk.group.clone(), kind: gvk.kind.clone(), verbs: verbs.iter().copied().collect(), scope, status }
    }

    fn matches_kind(&self, gvk: &Gvk) -> bool {
        (self.group == "*" || self.group == gvk.group) && (self.kind == "*" || self.kind == gvk.kind)
    }

    fn allows_namespace(&self, namespace: Option<&str>, own: Option<&str>) -> bool {
        match (&self.scope, namespace) {
            (Scope::Cluster, _) => true,
            (Scope::OwnNamespace, Some(ns)) => own == Some(ns),
            (Scope::Namespaces(list), Some(ns)) => list.iter().any(|n| n == ns),
            (_, None) => false,
        }
    }
}

/// One import call to check.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// The verb.
    pub verb: Verb,
    /// The kind.
    pub kind: &'a Gvk,
    /// The namespace (`None`: cluster-scoped, or all namespaces for list).
    pub namespace: Option<&'a str>,
    /// Whether the status subresource is addressed.
    pub status: bool,
}

/// A denied call.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{verb} {what}{kind} {place} is not granted to controller {controller}")]
pub struct Denied {
    /// The controller.
    pub controller: String,
    /// The verb, as in RBAC.
    pub verb: &'static str,
    /// `status of ` for the status subresource, else empty.
    pub what: &'static str,
    /// The kind.
    pub kind: String,
    /// `in namespace x`, `in all namespaces` or `cluster-wide`.
    pub place: String,
}

/// The rules one controller version holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grants {
    controller: String,
    rules: Vec<Rule>,
}

impl Grants {
    /// The grants a manifest asks for:
    ///
    /// - primary kind: read everywhere; update and patch (and the status
    ///   subresource) in the reconciled object's namespace;
    /// - owned kinds: read everywhere; every verb in the reconciled object's
    ///   namespace;
    /// - watched kinds: read everywhere;
    /// - plus each declared permission as declared.
    pub fn from_manifest(manifest: &Manifest) -> Self {
        let mut rules = vec![
            Rule::new(&manifest.primary, &Verb::READ, Scope::Cluster, true),
            Rule::new(&manifest.primary, &[Verb::Update, Verb::Patch], Scope::OwnNamespace, true),
        ];
        for owned in &manifest.owns {
            rules.push(Rule::new(owned, &Verb::READ, Scope::Cluster, true));
            rules.push(Rule::new(owned, &Verb::ALL, Scope::OwnNamespace, true));
        }
        for watch in &manifest.watches {
            rules.push(Rule::new(&watch.kind, &Verb::READ, Scope::Cluster, false));
        }
        for p in &manifest.permissions {
            rules.push(Rule {
                group: p.group.clone(),
                kind: p.kind.clone(),
                verbs: p.verbs.iter().copied().collect(),
                scope: p.scope.clone(),
                status: p.status,
            });
        }
        Self { controller: manifest.name.clone(), rules }
    }

    /// The rules, for RBAC generation and status reports.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Checks one call. `own_namespace` is the namespace of the object
    /// being reconciled (`None` outside a reconcile or for cluster-scoped
    /// primaries).
    ///
    /// # Errors
    ///
    /// [`Denied`] when no rule allows the call.
    pub fn check(&self, request: Request<'_>, own_namespace: Option<&str>) -> Result<(), Denied> {
        let allowed = self.rules.iter().any(|r| {
            r.matches_kind(request.kind)
                && r.verbs.contains(&request.verb)
                && (!request.status || r.status)
                && r.allows_namespace(request.namespace, own_namespace)
        });
        if allowed {
            return Ok(());
        }
        Err(Denied {
            controller: self.controller.clone(),
            verb: request.verb.as_str(),
            what: if request.status { "status of " } else { "" },
            kind: request.kind.to_string(),
            place: match request.namespace {
                Some(ns) => format!("in namespace {ns}"),
                None if request.verb == Verb::List => "in all namespaces".into(),
                None => "cluster-wide".into(),
            },
        })
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verbs: Vec<_> = self.verbs.iter().map(|v| v.as_str()).collect();
        write!(f, "{} {}/{} {:?}", verbs.join(","), self.group, self.kind, self.scope)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::Permission;

    fn manifest() -> Manifest {
        Manifest {
            name: "greeter".into(),
            primary: Gvk::new("examples.capstan.dev", "v1alpha1", "Greeting"),
            crds: vec![],
            owns: vec![Gvk::new("", "v1", "ConfigMap")],
            watches: vec![],
            finalizer: None,
            permissions: vec![Permission {
                group: String::new(),
                kind: "Secret".into(),
                verbs: vec![Verb::Get],
                scope: Scope::Namespaces(vec!["vault".into()]),
                status: false,
            }],
            resync: None,
            max_concurrency: 1,
        }
    }

    fn req<'a>(verb: Verb, kind: &'a Gvk, ns: Option<&'a str>) -> Request<'a> {
        Request { verb, kind, namespace: ns, status: false }
    }

    #[test]
    fn owned_kinds_are_writable_in_own_namespace_only() {
        let g = Grants::from_manifest(&manifest());
        let cm = Gvk::new("", "v1", "ConfigMap");
        assert!(g.check(req(Verb::Create, &cm, Some("app")), Some("app")).is_ok());
        assert!(g.check(req(Verb::Create, &cm, Some("other")), Some("app")).is_err());
        assert!(g.check(req(Verb::List, &cm, None), Some("app")).is_ok());
    }

    #[test]
    fn undeclared_kind_is_denied_with_a_clear_reason() {
        let g = Grants::from_manifest(&manifest());
        let pod = Gvk::new("", "v1", "Pod");
        let denied = g.check(req(Verb::Delete, &pod, Some("app")), Some("app")).expect_err("denied");
        assert_eq!(denied.to_string(), "delete v1/Pod in namespace app is not granted to controller greeter");
    }

    #[test]
    fn declared_permission_applies_in_its_namespaces_only() {
        let g = Grants::from_manifest(&manifest());
        let secret = Gvk::new("", "v1", "Secret");
        assert!(g.check(req(Verb::Get, &secret, Some("vault")), Some("app")).is_ok());
        assert!(g.check(req(Verb::Get, &secret, Some("app")), Some("app")).is_err());
        assert!(g.check(req(Verb::List, &secret, Some("vault")), Some("app")).is_err());
    }

    #[test]
    fn status_needs_a_rule_that_includes_it() {
        let g = Grants::from_manifest(&manifest());
        let secret = Gvk::new("", "v1", "Secret");
        let r = Request { verb: Verb::Get, kind: &secret, namespace: Some("vault"), status: true };
        assert!(g.check(r, None).is_err());
        let greeting = Gvk::new("examples.capstan.dev", "v1alpha1", "Greeting");
        let r = Request { verb: Verb::Patch, kind: &greeting, namespace: Some("app"), status: true };
        assert!(g.check(r, Some("app")).is_ok());
    }
}
