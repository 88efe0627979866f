//! The RBAC rules the host and each component need: each rule of
//! [`Grants::from_manifest`], and what the host does on a component's
//! behalf, merged per group + resource and sorted. `capstan gen` renders
//! them as ClusterRoles and Roles, and the host reviews them before it
//! runs a component.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::rbac::v1::PolicyRule;

use super::Error;
use super::names::{self, Rule};
use super::resources::Resources;
use crate::manifest::{Manifest, Scope, Verb};
use crate::runtime::grants::Grants;

/// The verbs a status subresource serves.
const STATUS_VERBS: [Verb; 3] = [Verb::Get, Verb::Update, Verb::Patch];

/// Where one set of verbs applies: group, resource (plural or
/// `plural/subresource`) and, when limited, object names.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Target {
    group: String,
    resource: String,
    names: Vec<String>,
}

/// Policy rules, merged: one per group + resource (+ names), verbs united.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Rules(BTreeMap<Target, BTreeSet<Verb>>);

impl Rules {
    /// Adds `verbs` on `group`/`resource`; an empty verb list adds nothing.
    pub(crate) fn add(&mut self, group: &str, resource: &str, verbs: impl IntoIterator<Item = Verb>) {
        self.add_named(group, resource, &[], verbs);
    }

    /// Adds `verbs` on the objects `names` of `group`/`resource`.
    pub(crate) fn add_named(
        &mut self,
        group: &str,
        resource: &str,
        names: &[String],
        verbs: impl IntoIterator<Item = Verb>,
    ) {
        let verbs: BTreeSet<Verb> = verbs.into_iter().collect();
        if verbs.is_empty() {
            return;
        }
        let mut names = names.to_vec();
        names.sort();
        names.dedup();
        let target = Target { group: group.to_owned(), resource: resource.to_owned(), names };
        self.0.entry(target).or_default().extend(verbs);
    }

    /// Adds `verbs` on the objects `names` (any with none) of a resource
    /// and, if `status`, the subset of them the status subresource serves
    /// on `<resource>/status`.
    pub(crate) fn add_with_status(
        &mut self,
        group: &str,
        resource: &str,
        names: &[String],
        verbs: &BTreeSet<Verb>,
        status: bool,
    ) {
        self.add_named(group, resource, names, verbs.iter().copied());
        if status {
            let status_verbs = verbs.iter().copied().filter(|v| STATUS_VERBS.contains(v));
            self.add_named(group, &format!("{resource}/status"), names, status_verbs);
        }
    }

    /// True if there are no rules.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Adds every rule of `other`.
    pub(crate) fn extend(&mut self, other: &Rules) {
        for (target, verbs) in &other.0 {
            self.0.entry(target.clone()).or_default().extend(verbs.iter().copied());
        }
    }

    /// Splits the rules in two: those on resources `namespaced` says are
    /// namespaced, and the others.
    pub(crate) fn split(self, namespaced: impl Fn(&str, &str) -> bool) -> (Rules, Rules) {
        let (inside, rest) = self.0.into_iter().partition(|(t, _)| namespaced(&t.group, &t.resource));
        (Rules(inside), Rules(rest))
    }

    /// The rules in a deterministic order: by group, resource, names; verbs
    /// in the order get, list, watch, create, update, patch, delete.
    pub(crate) fn policy_rules(&self) -> Vec<PolicyRule> {
        self.0
            .iter()
            .map(|(t, verbs)| PolicyRule {
                api_groups: Some(vec![t.group.clone()]),
                resources: Some(vec![t.resource.clone()]),
                resource_names: (!t.names.is_empty()).then(|| t.names.clone()),
                verbs: verbs.iter().map(|v| v.as_str().to_owned()).collect(),
                ..PolicyRule::default()
            })
            .collect()
    }
}

/// What one component needs: cluster-wide rules, and rules limited to
/// named namespaces.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ComponentRules {
    /// Rules cluster-wide (a ClusterRole).
    pub(crate) cluster: Rules,
    /// Rules in one namespace each (a Role there), by namespace.
    pub(crate) namespaces: BTreeMap<String, Rules>,
}

impl ComponentRules {
    /// The same rules for a host that watches only `watched` (none: all
    /// namespaces): the cluster-wide rules on resources known to be
    /// namespaced move to each watched namespace.
    pub(crate) fn within(mut self, watched: &[String], resources: &Resources) -> Self {
        if watched.is_empty() {
            return self;
        }
        let cluster = std::mem::take(&mut self.cluster);
        let (namespaced, cluster) =
            cluster.split(|group, resource| resources.is_namespaced(group, resource) == Some(true));
        self.cluster = cluster;
        for ns in watched {
            self.namespaces.entry(ns.clone()).or_default().extend(&namespaced);
        }
        self
    }
}

/// What the host needs whatever it runs: Events everywhere (cluster-wide)
/// and CRDs read (cluster-wide); Leases for leader election in its own
/// namespace (namespaced).
pub(crate) fn host_rules() -> (Rules, Rules) {
    let mut cluster = Rules::default();
    cluster.add("events.k8s.io", "events", [Verb::Create, Verb::Patch]);
    cluster.add("apiextensions.k8s.io", "customresourcedefinitions", Verb::READ);
    let mut own_namespace = Rules::default();
    own_namespace.add(
        "coordination.k8s.io",
        "leases",
        [Verb::Get, Verb::List, Verb::Watch, Verb::Create, Verb::Update, Verb::Patch],
    );
    (cluster, own_namespace)
}

/// The rules one component needs: each rule of [`Grants::from_manifest`]
/// (its own namespace means any namespace: the host reconciles in all of
/// them), what the host does on its behalf (primary: read, update and
/// patch for finalizers, patch status; owned: every verb for server-side
/// apply and pruning; watched: read), and with `install_crds`, create and
/// patch of its own CRDs.
///
/// # Errors
///
/// [`Error::UnknownKind`] for a kind whose plural is not known,
/// [`Error::Name`] for a permission's namespace that is not a DNS-1123
/// label.
pub(crate) fn component_rules(
    manifest: &Manifest,
    resources: &Resources,
    install_crds: bool,
) -> Result<ComponentRules, Error> {
    let mut out = ComponentRules::default();
    for rule in Grants::from_manifest(manifest).rules() {
        let plural = resources.plural(&rule.group, &rule.kind)?;
        // A status subresource only where the kind serves one.
        let status = rule.status && resources.has_status(&rule.group, &rule.kind);
        let names = &rule.resource_names;
        match &rule.scope {
            Scope::Cluster | Scope::OwnNamespace => {
                out.cluster.add_with_status(&rule.group, &plural, names, &rule.verbs, status);
            }
            Scope::Namespaces(namespaces) => {
                for ns in namespaces {
                    names::check(
                        format!("namespace of a permission of controller {}", manifest.name),
                        ns,
                        Rule::Dns1123Label,
                    )?;
                    let rules = out.namespaces.entry(ns.clone()).or_default();
                    rules.add_with_status(&rule.group, &plural, names, &rule.verbs, status);
                }
            }
        }
    }
    if manifest.roles.reconcile {
        let primary = resources.plural(&manifest.primary.group, &manifest.primary.kind)?;
        let verbs = [Verb::Get, Verb::List, Verb::Watch, Verb::Update, Verb::Patch];
        out.cluster.add(&manifest.primary.group, &primary, verbs);
        if resources.has_status(&manifest.primary.group, &manifest.primary.kind) {
            out.cluster.add(&manifest.primary.group, &format!("{primary}/status"), [Verb::Patch]);
        }
    }
    if manifest.roles.scheduler.is_some() {
        // What the host's scheduler does: watch Pods and Nodes, bind,
        // set `PodScheduled`, record `Scheduled` / `FailedScheduling`.
        out.cluster.add("", "pods", Verb::READ);
        out.cluster.add("", "pods/binding", [Verb::Create]);
        out.cluster.add("", "pods/status", [Verb::Update, Verb::Patch]);
        out.cluster.add("", "nodes", Verb::READ);
        out.cluster.add("events.k8s.io", "events", [Verb::Create, Verb::Patch]);
    }
    for owned in &manifest.owns {
        let kind = &owned.kind;
        out.cluster.add(&kind.group, &resources.plural(&kind.group, &kind.kind)?, Verb::ALL);
    }
    for watch in &manifest.watches {
        out.cluster.add(&watch.kind.group, &resources.plural(&watch.kind.group, &watch.kind.kind)?, Verb::READ);
    }
    if manifest.fleet.is_some() {
        // The home cluster's identity, which the marks on children in
        // members carry (`Cluster::id`).
        out.cluster.add_named("", "namespaces", &["kube-system".to_owned()], [Verb::Get]);
    }
    if install_crds && !manifest.crds.is_empty() {
        let names: Vec<String> =
            manifest.crds.iter().filter_map(|c| crate::object::meta_str(c, "name").map(str::to_owned)).collect();
        // `create` cannot be limited to names: the name is not known when
        // the request is authorised.
        out.cluster.add("apiextensions.k8s.io", "customresourcedefinitions", [Verb::Create]);
        out.cluster.add_named("apiextensions.k8s.io", "customresourcedefinitions", &names, [Verb::Patch]);
    }
    Ok(out)
}

/// What a fleet controller's host needs in each of its member clusters:
/// every verb on its owned kinds (it applies, watches, prunes and deletes
/// its children there, and sweeps orphans), and the read verbs of each of
/// its other rules (what `kube.get-in` and `kube.list-in` may read there).
/// Cluster-wide: the host's children there follow their owners'
/// namespaces. With `install_crds`, the rights to install there the CRDs
/// of its owned kinds it declares (create, and get and patch of those by
/// name). `None` for a component that is not a fleet controller.
///
/// # Errors
///
/// [`Error::UnknownKind`] for a kind whose plural is not known.
pub(crate) fn member_rules(
    manifest: &Manifest,
    resources: &Resources,
    install_crds: bool,
) -> Result<Option<Rules>, Error> {
    if manifest.fleet.is_none() {
        return Ok(None);
    }
    let mut rules = Rules::default();
    for owned in &manifest.owns {
        let kind = &owned.kind;
        rules.add(&kind.group, &resources.plural(&kind.group, &kind.kind)?, Verb::ALL);
    }
    for rule in Grants::from_manifest(manifest).rules() {
        let plural = resources.plural(&rule.group, &rule.kind)?;
        let reads = rule.verbs.iter().copied().filter(|v| Verb::READ.contains(v)).collect();
        rules.add_with_status(&rule.group, &plural, &rule.resource_names, &reads, false);
    }
    let owned_crds: Vec<String> = manifest
        .owns
        .iter()
        .filter_map(|o| manifest.crd_for(&o.kind))
        .filter_map(|c| crate::object::meta_str(c, "name").map(str::to_owned))
        .collect();
    if install_crds && !owned_crds.is_empty() {
        rules.add("apiextensions.k8s.io", "customresourcedefinitions", [Verb::Create]);
        rules.add_named("apiextensions.k8s.io", "customresourcedefinitions", &owned_crds, [Verb::Get, Verb::Patch]);
    }
    Ok(Some(rules))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::manifest::{Mapping, Owned, Permission, Watch};
    use crate::object::Gvk;

    fn greeter() -> Manifest {
        let crd = json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "greetings.examples.capstan.dev"},
            "spec": {"group": "examples.capstan.dev", "names": {"kind": "Greeting", "plural": "greetings"},
                "versions": [{"name": "v1alpha1", "subresources": {"status": {}}}]},
        });
        Manifest {
            name: "greeter".into(),
            primary: Gvk::new("examples.capstan.dev", "v1alpha1", "Greeting"),
            crds: vec![crd],
            owns: vec![Owned::kind(Gvk::new("", "v1", "ConfigMap")), Owned::kind(Gvk::new("apps", "v1", "Deployment"))],
            watches: vec![Watch { kind: Gvk::new("", "v1", "Secret"), mapping: Mapping::None, label_selector: None }],
            finalizer: None,
            permissions: vec![],
            resync: None,
            max_concurrency: 1,
            roles: crate::manifest::Roles::reconcile_only(),
            egress: Default::default(),
            clusters: vec![],
            fleet: None,
        }
    }

    fn resources(m: &Manifest) -> Resources {
        Resources::new(&m.crds, &[])
    }

    fn verbs(rules: &[PolicyRule], group: &str, resource: &str) -> Vec<String> {
        rules
            .iter()
            .find(|r| {
                r.api_groups.as_deref() == Some(&[group.to_owned()])
                    && r.resources.as_deref() == Some(&[resource.to_owned()])
                    && r.resource_names.is_none()
            })
            .map(|r| r.verbs.clone())
            .unwrap_or_default()
    }

    #[test]
    fn rules_for_the_same_group_and_resource_are_merged() {
        let mut rules = Rules::default();
        rules.add("", "configmaps", Verb::READ);
        rules.add("", "configmaps", [Verb::Create, Verb::Get]);
        rules.add("apps", "deployments", [Verb::Patch]);
        rules.add("", "secrets", []);
        let policy = rules.policy_rules();
        assert_eq!(policy.len(), 2, "{policy:?}");
        assert_eq!(verbs(&policy, "", "configmaps"), ["get", "list", "watch", "create"]);
        assert_eq!(verbs(&policy, "apps", "deployments"), ["patch"]);
    }

    #[test]
    fn merged_rules_come_out_in_a_deterministic_order() {
        let mut a = Rules::default();
        a.add("apps", "deployments", [Verb::Patch]);
        a.add("", "configmaps", [Verb::Get]);
        let mut b = Rules::default();
        b.add("", "configmaps", [Verb::Get]);
        b.add("apps", "deployments", [Verb::Patch]);
        assert_eq!(a.policy_rules(), b.policy_rules());
        assert_eq!(a.policy_rules()[0].resources.as_deref(), Some(&["configmaps".to_owned()][..]));
    }

    #[test]
    fn the_status_subresource_gets_only_the_verbs_it_serves() {
        let mut rules = Rules::default();
        rules.add_with_status("apps", "deployments", &[], &Verb::ALL.into_iter().collect(), true);
        let policy = rules.policy_rules();
        assert_eq!(verbs(&policy, "apps", "deployments/status"), ["get", "update", "patch"]);
        let mut rules = Rules::default();
        rules.add_with_status("", "pods", &[], &[Verb::Create].into_iter().collect(), true);
        assert_eq!(rules.policy_rules().len(), 1, "no empty status rule");
    }

    #[test]
    fn a_component_gets_what_its_kinds_imply_and_nothing_else() {
        let c = greeter();
        let rules = component_rules(&c, &resources(&c), false).expect("known kinds");
        let policy = rules.cluster.policy_rules();
        assert_eq!(verbs(&policy, "examples.capstan.dev", "greetings"), ["get", "list", "watch", "update", "patch"]);
        assert_eq!(verbs(&policy, "examples.capstan.dev", "greetings/status"), ["get", "update", "patch"]);
        let all = ["get", "list", "watch", "create", "update", "patch", "delete"];
        assert_eq!(verbs(&policy, "", "configmaps"), all);
        assert_eq!(verbs(&policy, "apps", "deployments"), all);
        // A child's status belongs to its own controller: read, not written.
        assert_eq!(verbs(&policy, "apps", "deployments/status"), ["get"]);
        assert!(verbs(&policy, "", "configmaps/status").is_empty(), "ConfigMaps serve no status subresource");
        assert_eq!(verbs(&policy, "", "secrets"), ["get", "list", "watch"]);
        assert!(verbs(&policy, "apiextensions.k8s.io", "customresourcedefinitions").is_empty());
        assert!(rules.namespaces.is_empty());
        assert!(policy.iter().all(|r| r.api_groups.iter().flatten().all(|g| g != "*")), "no wildcard");
        assert!(policy.iter().all(|r| r.resources.iter().flatten().all(|g| g != "*")), "no wildcard");
    }

    #[test]
    fn a_fleet_controller_reads_its_home_clusters_identity_and_a_uniform_one_does_not() {
        let m = greeter();
        let rules = component_rules(&m, &resources(&m), false).expect("rules").cluster.policy_rules();
        assert!(!rules.iter().any(|r| r.resources.as_deref() == Some(&["namespaces".to_owned()])));
        let fleet =
            Manifest { fleet: Some(crate::manifest::Fleet { home: "default".into(), members: vec![] }), ..greeter() };
        let rules = component_rules(&fleet, &resources(&fleet), false).expect("rules").cluster.policy_rules();
        let identity = rules
            .iter()
            .find(|r| r.resources.as_deref() == Some(&["namespaces".to_owned()]))
            .expect("a rule on namespaces");
        assert_eq!(identity.resource_names.as_deref(), Some(&["kube-system".to_owned()][..]));
        assert_eq!(identity.verbs, ["get"]);
    }

    #[test]
    fn a_fleet_controller_may_do_everything_with_its_children_in_a_member_and_read_what_it_may_read() {
        assert_eq!(
            member_rules(&greeter(), &resources(&greeter()), false).expect("rules"),
            None,
            "a uniform controller"
        );
        let fleet = Manifest {
            fleet: Some(crate::manifest::Fleet { home: "default".into(), members: vec![] }),
            permissions: vec![Permission {
                group: String::new(),
                kind: "Secret".into(),
                verbs: [Verb::Get, Verb::Create].into(),
                scope: Scope::OwnNamespace,
                status: false,
                resource_names: vec!["token".into()],
            }],
            ..greeter()
        };
        let rules = member_rules(&fleet, &resources(&fleet), true).expect("rules").expect("a fleet").policy_rules();
        assert_eq!(verbs(&rules, "", "configmaps"), Verb::ALL.map(|v| v.as_str().to_owned()));
        assert_eq!(verbs(&rules, "apps", "deployments"), Verb::ALL.map(|v| v.as_str().to_owned()));
        assert_eq!(verbs(&rules, "", "secrets"), ["get", "list", "watch"], "the watched kind, read only");
        let named = rules.iter().find(|r| r.resource_names.is_some()).expect("the named Secret");
        assert_eq!(
            (named.resource_names.as_deref(), named.verbs.as_slice()),
            (Some(&["token".to_owned()][..]), &["get".to_owned()][..])
        );
        assert_eq!(
            verbs(&rules, "examples.capstan.dev", "greetings"),
            ["get", "list", "watch"],
            "the primary, read only"
        );
        assert!(
            !rules
                .iter()
                .any(|r| r.verbs.iter().any(|v| v == "create")
                    && r.resources.as_deref() == Some(&["secrets".to_owned()]))
        );
    }

    #[test]
    fn a_fleet_controller_may_install_in_a_member_the_crds_of_the_kinds_it_owns_only() {
        // A fleet of Greetings whose children are Greetings too: their CRD
        // is needed in the members.
        let mut fleet =
            Manifest { fleet: Some(crate::manifest::Fleet { home: "default".into(), members: vec![] }), ..greeter() };
        let crd_rules = |m: &Manifest, install| {
            let rules = member_rules(m, &resources(m), install).expect("rules").expect("a fleet").policy_rules();
            rules
                .into_iter()
                .filter(|r| r.resources.as_deref() == Some(&["customresourcedefinitions".to_owned()]))
                .map(|r| (r.resource_names.unwrap_or_default(), r.verbs))
                .collect::<Vec<_>>()
        };
        assert_eq!(crd_rules(&fleet, true), [], "its CRD is its primary's: the home's only");
        fleet.owns.push(Owned::kind(fleet.primary.clone()));
        assert_eq!(crd_rules(&fleet, false), [], "without --install-crds");
        let name = "greetings.examples.capstan.dev".to_owned();
        let mut got = crd_rules(&fleet, true);
        got.sort();
        assert_eq!(
            got,
            [(vec![], vec!["create".to_owned()]), (vec![name], vec!["get".to_owned(), "patch".to_owned()])]
        );
    }

    #[test]
    fn install_crds_adds_create_and_patch_limited_to_the_components_crds() {
        let c = greeter();
        let rules = component_rules(&c, &resources(&c), true).expect("known kinds");
        let policy = rules.cluster.policy_rules();
        assert_eq!(verbs(&policy, "apiextensions.k8s.io", "customresourcedefinitions"), ["create"]);
        let named = policy.iter().find(|r| r.resource_names.is_some()).expect("a named rule");
        assert_eq!(named.resource_names.as_deref(), Some(&["greetings.examples.capstan.dev".to_owned()][..]));
        assert_eq!(named.verbs, ["patch"]);
    }

    #[test]
    fn a_permission_limited_to_namespaces_becomes_roles_there() {
        let mut c = greeter();
        c.permissions.push(Permission {
            group: String::new(),
            kind: "Secret".into(),
            verbs: vec![Verb::Get],
            scope: Scope::Namespaces(vec!["vault".into(), "keys".into()]),
            status: false,
            resource_names: vec![],
        });
        let rules = component_rules(&c, &resources(&c), false).expect("known kinds");
        assert_eq!(rules.namespaces.keys().collect::<Vec<_>>(), ["keys", "vault"]);
        assert_eq!(verbs(&rules.namespaces["vault"].policy_rules(), "", "secrets"), ["get"]);
        assert_eq!(verbs(&rules.cluster.policy_rules(), "", "secrets"), ["get", "list", "watch"], "from the watch");
    }

    #[test]
    fn a_declared_wildcard_is_kept_as_declared() {
        let mut c = greeter();
        c.permissions.push(Permission {
            group: "apps".into(),
            kind: "*".into(),
            verbs: vec![Verb::List],
            scope: Scope::Cluster,
            status: false,
            resource_names: vec![],
        });
        let rules = component_rules(&c, &resources(&c), false).expect("known kinds");
        assert_eq!(verbs(&rules.cluster.policy_rules(), "apps", "*"), ["list"]);
    }

    #[test]
    fn binding_a_named_cluster_role_becomes_a_bind_rule_limited_to_that_name() {
        let mut c = greeter();
        c.permissions.push(Permission {
            group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            verbs: vec![Verb::Bind],
            scope: Scope::Cluster,
            status: false,
            resource_names: vec!["admin".into()],
        });
        let rules = component_rules(&c, &resources(&c), false).expect("known kinds");
        let policy = rules.cluster.policy_rules();
        let bind = policy.iter().find(|r| r.verbs == ["bind"]).expect("a bind rule");
        assert_eq!(bind.resources.as_deref(), Some(&["clusterroles".to_owned()][..]));
        assert_eq!(bind.resource_names.as_deref(), Some(&["admin".to_owned()][..]));
    }

    #[test]
    fn a_kind_without_a_known_plural_fails_instead_of_being_guessed() {
        let mut c = greeter();
        c.owns.push(Owned::kind(Gvk::new("cert-manager.io", "v1", "Certificate")));
        let err = component_rules(&c, &resources(&c), false).expect_err("unknown kind");
        assert!(matches!(err, Error::UnknownKind { ref kind, .. } if kind == "Certificate"), "{err}");
    }

    #[test]
    fn with_watched_namespaces_namespaced_rules_become_roles_there_and_cluster_scoped_ones_stay() {
        let c = greeter();
        let rules = component_rules(&c, &resources(&c), true)
            .expect("known kinds")
            .within(&["a".into(), "b".into()], &resources(&c));
        let cluster = rules.cluster.policy_rules();
        assert_eq!(verbs(&cluster, "apiextensions.k8s.io", "customresourcedefinitions"), ["create"]);
        assert!(verbs(&cluster, "", "configmaps").is_empty(), "{cluster:?}");
        assert!(verbs(&cluster, "examples.capstan.dev", "greetings").is_empty(), "{cluster:?}");
        assert_eq!(rules.namespaces.keys().collect::<Vec<_>>(), ["a", "b"]);
        for ns in ["a", "b"] {
            let policy = rules.namespaces[ns].policy_rules();
            assert_eq!(
                verbs(&policy, "", "configmaps"),
                ["get", "list", "watch", "create", "update", "patch", "delete"]
            );
            assert_eq!(verbs(&policy, "examples.capstan.dev", "greetings/status"), ["get", "update", "patch"]);
            assert_eq!(verbs(&policy, "", "secrets"), ["get", "list", "watch"]);
        }
        let all = component_rules(&c, &resources(&c), true).expect("known kinds");
        assert_eq!(all.clone().within(&[], &resources(&c)), all, "no watched namespaces: as before");
    }

    #[test]
    fn a_scheduler_gets_pods_bindings_pod_status_nodes_and_events_and_nothing_more() {
        // The greeter's manifest made a scheduler of Pods and nothing else.
        let mut m = greeter();
        (m.name, m.primary) = ("zone-scheduler".into(), Gvk::new("", "v1", "Pod"));
        (m.crds, m.owns, m.watches) = (vec![], vec![], vec![]);
        m.roles.reconcile = false;
        m.roles.scheduler = Some("zone-spread".into());
        let rules = component_rules(&m, &resources(&m), false).expect("known kinds");
        let mut policy: Vec<(String, String, Vec<String>)> = rules
            .cluster
            .policy_rules()
            .into_iter()
            .map(|r| (r.api_groups.unwrap_or_default().join(","), r.resources.unwrap_or_default().join(","), r.verbs))
            .collect();
        policy.sort();
        let rule =
            |g: &str, r: &str, v: &[&str]| (g.to_owned(), r.to_owned(), v.iter().map(|v| (*v).to_owned()).collect());
        assert_eq!(
            policy,
            [
                rule("", "nodes", &["get", "list", "watch"]),
                rule("", "pods", &["get", "list", "watch"]),
                rule("", "pods/binding", &["create"]),
                rule("", "pods/status", &["update", "patch"]),
                rule("events.k8s.io", "events", &["create", "patch"]),
            ]
        );
        assert!(rules.namespaces.is_empty());
    }

    #[test]
    fn the_host_reads_crds_records_events_and_holds_leases_in_its_namespace() {
        let (cluster, own) = host_rules();
        let cluster = cluster.policy_rules();
        assert_eq!(verbs(&cluster, "events.k8s.io", "events"), ["create", "patch"]);
        assert_eq!(verbs(&cluster, "apiextensions.k8s.io", "customresourcedefinitions"), ["get", "list", "watch"]);
        assert_eq!(
            verbs(&own.policy_rules(), "coordination.k8s.io", "leases"),
            ["get", "list", "watch", "create", "update", "patch"]
        );
    }
}
