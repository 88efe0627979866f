//! What a controller may do through the `kube` import: the permissions its
//! manifest declares, plus those its primary, owned and watched kinds imply.
//! Checked on every host call and on every child an outcome lists; the same
//! rules generate RBAC.
//!
//! # Scopes
//!
//! `own-namespace` is the namespace of the object being reconciled; for a
//! cluster-scoped primary it means cluster-scoped objects only. When the
//! host watches a list of namespaces (`-n`), no write reaches an object in
//! any other namespace, whatever a rule says.

use std::collections::BTreeSet;
use std::fmt;

use crate::manifest::egress::Egress;
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
    /// Only objects of these names; empty: any.
    pub resource_names: Vec<String>,
}

impl Rule {
    fn new(gvk: &Gvk, verbs: &[Verb], scope: Scope, status: bool) -> Self {
        Self {
            group: gvk.group.clone(),
            kind: gvk.kind.clone(),
            verbs: verbs.iter().copied().collect(),
            scope,
            status,
            resource_names: Vec::new(),
        }
    }

    fn allows_name(&self, name: Option<&str>) -> bool {
        self.resource_names.is_empty() || name.is_some_and(|n| self.resource_names.iter().any(|r| r == n))
    }

    fn matches_kind(&self, gvk: &Gvk) -> bool {
        (self.group == "*" || self.group == gvk.group) && (self.kind == "*" || self.kind == gvk.kind)
    }

    fn allows_namespace(&self, namespace: Option<&str>, own: Option<&str>) -> bool {
        match (&self.scope, namespace) {
            (Scope::Cluster, _) => true,
            (Scope::OwnNamespace, Some(ns)) => own == Some(ns),
            // A cluster-scoped primary's own scope: cluster-scoped objects.
            (Scope::OwnNamespace, None) => own.is_none(),
            (Scope::Namespaces(list), Some(ns)) => list.iter().any(|n| n == ns),
            (Scope::Namespaces(_), None) => false,
        }
    }

    /// True if the rule's scope reaches some object that is namespaced or
    /// not (`namespaced`) while reconciling some object of a primary kind
    /// that is namespaced or not (`primary_namespaced`; `None`: not
    /// known): [`allows_namespace`](Self::allows_namespace) over every
    /// namespace. `false` means no object of that scope ever passes.
    fn reaches(&self, namespaced: bool, primary_namespaced: Option<bool>) -> bool {
        match &self.scope {
            Scope::Cluster => true,
            Scope::OwnNamespace => primary_namespaced.is_none_or(|p| p == namespaced),
            Scope::Namespaces(list) => namespaced && !list.is_empty(),
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
    /// The object's name, for rules limited to resource names (`None` for
    /// list and create... of no particular name).
    pub name: Option<&'a str>,
}

impl<'a> Request<'a> {
    /// A request for `verb` on `kind` in `namespace`, of any name, not the
    /// status.
    pub fn new(verb: Verb, kind: &'a Gvk, namespace: Option<&'a str>) -> Self {
        Self { verb, kind, namespace, status: false, name: None }
    }

    /// The same request, for the object `name`.
    #[must_use]
    pub fn named(self, name: &'a str) -> Self {
        Self { name: Some(name), ..self }
    }

    /// The same request, for the status subresource.
    #[must_use]
    pub fn status(self) -> Self {
        Self { status: true, ..self }
    }
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
    /// The namespaces the host watches, if it watches a list: writes to
    /// namespaced objects elsewhere are denied.
    namespaces: Option<Vec<String>>,
    /// The origins it may call over HTTP(S).
    egress: Egress,
}

impl Grants {
    /// The grants a manifest asks for:
    ///
    /// - primary kind, with the reconcile role: read everywhere; update
    ///   and patch (and the status subresource) in the reconciled object's
    ///   own scope; without it, nothing;
    /// - owned kinds: read everywhere; every verb of an API call in the
    ///   scope the manifest gives them (default: the own scope), not on
    ///   their status subresource, which only a permission declared
    ///   [`with_status`](crate::manifest::Permission) writes (the host
    ///   applies children's spec; a child's status belongs to its own
    ///   controller, e.g. a ResourceQuota's usage);
    /// - watched kinds: read everywhere;
    /// - plus each declared permission as declared.
    pub fn from_manifest(manifest: &Manifest) -> Self {
        // Without the reconcile role the primary kind (`Pod` for a
        // scheduler, the reviewed kind for webhooks) is not reconciled, and
        // implies no grant: a scheduler binds through the host, and may
        // not touch other Pods (other schedulers' among them) unless it
        // declares a permission.
        let mut rules = if manifest.roles.reconcile {
            vec![
                Rule::new(&manifest.primary, &Verb::READ, Scope::Cluster, true),
                Rule::new(&manifest.primary, &[Verb::Update, Verb::Patch], Scope::OwnNamespace, true),
            ]
        } else {
            Vec::new()
        };
        for owned in &manifest.owns {
            rules.push(Rule::new(&owned.kind, &Verb::READ, Scope::Cluster, true));
            rules.push(Rule::new(&owned.kind, &Verb::ALL, owned.effective_scope(), false));
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
                resource_names: p.resource_names.clone(),
            });
        }
        Self { controller: manifest.name.clone(), rules, namespaces: None, egress: manifest.egress.clone() }
    }

    /// The origins the component may call over HTTP(S): exactly those its
    /// manifest declares (none by default).
    pub fn egress(&self) -> &Egress {
        &self.egress
    }

    /// The same grants with `egress` as the declared origins (the mock
    /// host's and tests' way to grant origins without a manifest).
    #[must_use]
    pub fn with_egress(mut self, egress: Egress) -> Self {
        self.egress = egress;
        self
    }

    /// The same grants on a host that watches only `namespaces` (empty:
    /// all): writes to namespaced objects anywhere else are denied.
    #[must_use]
    pub fn within(mut self, namespaces: &[String]) -> Self {
        self.namespaces = (!namespaces.is_empty()).then(|| namespaces.to_vec());
        self
    }

    /// The namespaces the host serves ([`within`](Self::within)); `None`:
    /// all.
    pub fn served_namespaces(&self) -> Option<&[String]> {
        self.namespaces.as_deref()
    }

    /// True if some rule allows `verb` on some object of `kind`, which is
    /// namespaced or not (`namespaced`), in some namespace, of some name,
    /// while reconciling some object of a primary kind that is namespaced
    /// or not (`primary_namespaced`; `None`: not known). `false` means
    /// [`check`](Self::check) denies every such call, whatever the object:
    /// what a manifest check decides before a component runs.
    pub fn can_ever(&self, verb: Verb, kind: &Gvk, namespaced: bool, primary_namespaced: Option<bool>) -> bool {
        self.rules
            .iter()
            .any(|r| r.matches_kind(kind) && r.verbs.contains(&verb) && r.reaches(namespaced, primary_namespaced))
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
        let write = !Verb::READ.contains(&request.verb);
        let outside_host = match (&self.namespaces, request.namespace) {
            (Some(watched), Some(ns)) => write && !watched.iter().any(|w| w == ns),
            _ => false,
        };
        let allowed = !outside_host
            && self.rules.iter().any(|r| {
                r.matches_kind(request.kind)
                    && r.verbs.contains(&request.verb)
                    && (!request.status || r.status)
                    && r.allows_namespace(request.namespace, own_namespace)
                    && r.allows_name(request.name)
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
                Some(ns) if outside_host => format!("in namespace {ns}, which this host does not watch"),
                Some(ns) => format!("in namespace {ns}"),
                None if request.verb == Verb::List => "in all namespaces".into(),
                None => "cluster-wide".into(),
            },
        })
    }
}

impl Grants {
    /// Checks an Event about `regarding`: the controller must be able to
    /// read that object, and the Event (which lands in the object's
    /// namespace) must stay inside the namespaces the host watches.
    ///
    /// # Errors
    ///
    /// [`Denied`] naming what is missing.
    pub fn check_event(&self, regarding: &crate::object::ObjectRef, own_namespace: Option<&str>) -> Result<(), Denied> {
        let ns = regarding.namespace.as_deref();
        if let (Some(watched), Some(ns)) = (&self.namespaces, ns)
            && !watched.iter().any(|w| w == ns)
        {
            return Err(Denied {
                controller: self.controller.clone(),
                verb: "create",
                what: "",
                kind: "events.k8s.io/v1/Event".into(),
                place: format!("in namespace {ns}, which this host does not watch"),
            });
        }
        self.check(Request::new(Verb::Get, &regarding.gvk, ns).named(&regarding.name), own_namespace)
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verbs: Vec<_> = self.verbs.iter().map(|v| v.as_str()).collect();
        write!(f, "{} {}/{} {:?}", verbs.join(","), self.group, self.kind, self.scope)?;
        if !self.resource_names.is_empty() {
            write!(f, " named {}", self.resource_names.join(","))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::{Owned, Permission};

    fn manifest() -> Manifest {
        Manifest {
            name: "greeter".into(),
            primary: Gvk::new("examples.capstan.dev", "v1alpha1", "Greeting"),
            crds: vec![],
            owns: vec![Owned::kind(Gvk::new("", "v1", "ConfigMap"))],
            watches: vec![],
            finalizer: None,
            permissions: vec![
                Permission {
                    group: String::new(),
                    kind: "Secret".into(),
                    verbs: vec![Verb::Get],
                    scope: Scope::Namespaces(vec!["vault".into()]),
                    status: false,
                    resource_names: vec![],
                },
                Permission {
                    group: "rbac.authorization.k8s.io".into(),
                    kind: "ClusterRole".into(),
                    verbs: vec![Verb::Bind],
                    scope: Scope::Cluster,
                    status: false,
                    resource_names: vec!["admin".into()],
                },
            ],
            resync: None,
            max_concurrency: 1,
            roles: crate::manifest::Roles::reconcile_only(),
            egress: Default::default(),
            clusters: vec![],
            fleet: None,
        }
    }

    fn req<'a>(verb: Verb, kind: &'a Gvk, ns: Option<&'a str>) -> Request<'a> {
        Request::new(verb, kind, ns)
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
        let r = Request::new(Verb::Get, &secret, Some("vault")).status();
        assert!(g.check(r, None).is_err());
        let greeting = Gvk::new("examples.capstan.dev", "v1alpha1", "Greeting");
        let r = Request::new(Verb::Patch, &greeting, Some("app")).status();
        assert!(g.check(r, Some("app")).is_ok());
    }

    #[test]
    fn a_childs_status_is_written_only_with_a_permission_that_declares_it() {
        let mut m = manifest();
        m.owns.push(Owned::kind(Gvk::new("", "v1", "ResourceQuota")));
        let quota = Gvk::new("", "v1", "ResourceQuota");
        let write = |g: &Grants, verb| g.check(Request::new(verb, &quota, Some("app")).status(), Some("app"));
        let owned = Grants::from_manifest(&m);
        assert!(write(&owned, Verb::Patch).is_err(), "owning a kind does not reach its status");
        assert!(write(&owned, Verb::Update).is_err());
        assert!(
            owned.check(Request::new(Verb::Get, &quota, Some("app")).status(), Some("app")).is_ok(),
            "reading it does"
        );
        m.permissions.push(Permission {
            group: String::new(),
            kind: "ResourceQuota".into(),
            verbs: vec![Verb::Patch],
            scope: Scope::OwnNamespace,
            status: true,
            resource_names: vec![],
        });
        assert!(write(&Grants::from_manifest(&m), Verb::Patch).is_ok(), "declared with its status");
    }

    #[test]
    fn a_scheduler_may_touch_no_pod_it_did_not_declare() {
        let mut m = manifest();
        m.primary = Gvk::new("", "v1", "Pod");
        m.owns.clear();
        m.permissions.clear();
        m.roles = crate::manifest::Roles { reconcile: false, scheduler: Some("zone-spread".into()), ..m.roles };
        let pod = Gvk::new("", "v1", "Pod");
        let g = Grants::from_manifest(&m);
        for verb in [Verb::Patch, Verb::Update, Verb::Get, Verb::Delete] {
            assert!(g.check(Request::new(verb, &pod, Some("app")), Some("app")).is_err(), "{verb:?}");
            assert!(g.check(Request::new(verb, &pod, Some("app")).status(), Some("app")).is_err(), "{verb:?} status");
        }
        assert!(g.rules().is_empty(), "{:?}", g.rules());
    }

    fn tenant() -> Manifest {
        let mut m = manifest();
        m.name = "tenant".into();
        m.primary = Gvk::new("examples.capstan.dev", "v1alpha1", "Tenant");
        m.owns = vec![
            Owned::kind(Gvk::new("", "v1", "Namespace")),
            Owned { scope: Some(Scope::Cluster), ..Owned::kind(Gvk::new("", "v1", "ConfigMap")) },
        ];
        m
    }

    #[test]
    fn a_cluster_scoped_primary_owns_cluster_scoped_children_in_its_own_scope() {
        let g = Grants::from_manifest(&tenant());
        let ns = Gvk::new("", "v1", "Namespace");
        // Reconciling a cluster-scoped Tenant: its own scope is the cluster.
        assert!(g.check(req(Verb::Delete, &ns, None).named("tenant-acme"), None).is_ok());
        // A namespaced primary's own scope never reaches cluster-scoped objects.
        assert!(Grants::from_manifest(&tenant()).check(req(Verb::Delete, &ns, None), Some("app")).is_err());
        let cm = Gvk::new("", "v1", "ConfigMap");
        assert!(g.check(req(Verb::Create, &cm, Some("tenant-acme")), None).is_ok(), "declared scope: cluster");
    }

    #[test]
    fn writes_never_leave_the_namespaces_the_host_watches() {
        let g = Grants::from_manifest(&tenant()).within(&["team-a".to_owned()]);
        let cm = Gvk::new("", "v1", "ConfigMap");
        assert!(g.check(req(Verb::Patch, &cm, Some("team-a")), None).is_ok());
        let denied = g.check(req(Verb::Patch, &cm, Some("kube-system")), None).expect_err("outside");
        assert_eq!(
            denied.to_string(),
            "patch v1/ConfigMap in namespace kube-system, which this host does not watch is not granted to controller tenant"
        );
        assert!(g.check(req(Verb::Get, &cm, Some("kube-system")), None).is_ok(), "reads follow the rules alone");
        let ns = Gvk::new("", "v1", "Namespace");
        assert!(g.check(req(Verb::Create, &ns, None), None).is_ok(), "cluster-scoped objects are in no namespace");
    }

    #[test]
    fn rules_limited_to_resource_names_allow_only_those() {
        let g = Grants::from_manifest(&manifest());
        let role = Gvk::new("rbac.authorization.k8s.io", "v1", "ClusterRole");
        assert!(g.check(req(Verb::Bind, &role, None).named("admin"), None).is_ok());
        assert!(g.check(req(Verb::Bind, &role, None).named("cluster-admin"), None).is_err());
        assert!(g.check(req(Verb::Bind, &role, None), None).is_err(), "no name, no match");
    }
}
