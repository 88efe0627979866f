//! Which resource (the plural in RBAC rules and URLs) serves a kind: the
//! CRDs the components define, plurals given by the user, and a table of
//! the built-in kinds taken from k8s-openapi. An unknown kind is an error,
//! never a guess.

use std::collections::BTreeMap;
use std::str::FromStr;

use serde_json::Value;

use super::Error;
use super::names::{self, Rule};
use crate::object::builtin::KINDS as BUILTIN;

/// The built-in kinds of [`BUILTIN`] that have a `status` subresource
/// (`(group, kind)`), as the API server serves them.
const WITH_STATUS: &[(&str, &str)] = &[
    ("", "Namespace"),
    ("", "Node"),
    ("", "PersistentVolume"),
    ("", "PersistentVolumeClaim"),
    ("", "Pod"),
    ("", "ReplicationController"),
    ("", "ResourceQuota"),
    ("", "Service"),
    ("apps", "DaemonSet"),
    ("apps", "Deployment"),
    ("apps", "ReplicaSet"),
    ("apps", "StatefulSet"),
    ("autoscaling", "HorizontalPodAutoscaler"),
    ("batch", "CronJob"),
    ("batch", "Job"),
    ("certificates.k8s.io", "CertificateSigningRequest"),
    ("networking.k8s.io", "Ingress"),
    ("policy", "PodDisruptionBudget"),
    ("storage.k8s.io", "VolumeAttachment"),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"),
    ("apiextensions.k8s.io", "CustomResourceDefinition"),
    ("apiregistration.k8s.io", "APIService"),
];

/// A plural given on the command line for a kind no component defines and
/// the built-in table does not know: `Certificate.cert-manager.io=certificates`
/// (`KIND=PLURAL` for the core group).
///
/// ```
/// let p: capstan_host::policy::PluralOverride = "Certificate.cert-manager.io=certificates".parse()?;
/// assert_eq!((p.group.as_str(), p.kind.as_str(), p.plural.as_str()), ("cert-manager.io", "Certificate", "certificates"));
/// # Ok::<(), capstan_host::policy::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluralOverride {
    /// API group (`""`: core).
    pub group: String,
    /// Kind.
    pub kind: String,
    /// Plural resource name.
    pub plural: String,
}

impl FromStr for PluralOverride {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        let invalid = || Error::PluralOverride(s.to_owned());
        let (kind_group, plural) = s.split_once('=').ok_or_else(invalid)?;
        let (kind, group) = kind_group.split_once('.').unwrap_or((kind_group, ""));
        if !Rule::Kind.allows(kind) || !(group.is_empty() || Rule::Dns1123Subdomain.allows(group)) {
            return Err(invalid());
        }
        names::check(format!("plural of {kind_group}"), plural, Rule::Dns1035Label)?;
        Ok(Self { group: group.to_owned(), kind: kind.to_owned(), plural: plural.to_owned() })
    }
}

/// Kind → plural lookup for one generation run or permission review.
#[derive(Clone, Debug, Default)]
pub(crate) struct Resources {
    plurals: BTreeMap<(String, String), String>,
    /// Kinds known to have a status subresource.
    status: std::collections::BTreeSet<(String, String)>,
    /// Whether the objects of a resource (group, plural) are namespaced,
    /// where that is known.
    namespaced: BTreeMap<(String, String), bool>,
}

impl Resources {
    /// The built-in table, then the CRDs' `spec.names` (checked by the
    /// caller), then the overrides: a later source wins.
    pub(crate) fn new<'a>(crds: impl IntoIterator<Item = &'a Value>, overrides: &[PluralOverride]) -> Self {
        let mut plurals: BTreeMap<(String, String), String> =
            BUILTIN.iter().map(|(g, k, p, _)| (((*g).to_owned(), (*k).to_owned()), (*p).to_owned())).collect();
        let mut namespaced: BTreeMap<(String, String), bool> =
            BUILTIN.iter().map(|(g, _, p, n)| (((*g).to_owned(), (*p).to_owned()), *n)).collect();
        let mut status: std::collections::BTreeSet<(String, String)> =
            WITH_STATUS.iter().map(|(g, k)| ((*g).to_owned(), (*k).to_owned())).collect();
        for crd in crds {
            let field = |p: &str| crd.pointer(p).and_then(Value::as_str).unwrap_or_default().to_owned();
            let key = (field("/spec/group"), field("/spec/names/kind"));
            plurals.insert(key.clone(), field("/spec/names/plural"));
            namespaced.insert((key.0.clone(), field("/spec/names/plural")), field("/spec/scope") != "Cluster");
            let versions = crd.pointer("/spec/versions").and_then(Value::as_array).into_iter().flatten();
            if versions.into_iter().any(|v| v.pointer("/subresources/status").is_some()) {
                status.insert(key);
            }
        }
        for o in overrides {
            plurals.insert((o.group.clone(), o.kind.clone()), o.plural.clone());
        }
        Self { plurals, status, namespaced }
    }

    /// Whether the objects of `resource` (a plural, or `plural/subresource`)
    /// in `group` are namespaced: `None` when that is not known (a kind
    /// given only by a `--plural` override, a wildcard).
    pub(crate) fn is_namespaced(&self, group: &str, resource: &str) -> Option<bool> {
        let plural = resource.split_once('/').map_or(resource, |(plural, _)| plural);
        self.namespaced.get(&(group.to_owned(), plural.to_owned())).copied()
    }

    /// True if `kind` of `group` is known to serve a `status` subresource
    /// (built-in kinds that have one, CRDs that declare one). Wildcards
    /// count as having one.
    pub(crate) fn has_status(&self, group: &str, kind: &str) -> bool {
        group == "*" || kind == "*" || self.status.contains(&(group.to_owned(), kind.to_owned()))
    }

    /// The plural serving `kind` in `group`; `*` stays `*`. With group `*`
    /// the kind must have the same plural in every group that has it.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownKind`] for a kind nobody defines, or one whose plural
    /// differs between groups under a `*` group.
    pub(crate) fn plural(&self, group: &str, kind: &str) -> Result<String, Error> {
        let unknown = || Error::UnknownKind { group: group.to_owned(), kind: kind.to_owned() };
        if kind == "*" {
            return Ok("*".to_owned());
        }
        if group == "*" {
            let mut found = self.plurals.iter().filter(|((_, k), _)| k == kind).map(|(_, p)| p);
            let first = found.next().ok_or_else(unknown)?;
            return if found.all(|p| p == first) { Ok(first.clone()) } else { Err(unknown()) };
        }
        self.plurals.get(&(group.to_owned(), kind.to_owned())).cloned().ok_or_else(unknown)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn crd() -> Value {
        json!({"spec": {"group": "examples.capstan.dev", "names": {"kind": "Greeting", "plural": "greetings"}}})
    }

    #[test]
    fn built_in_kinds_map_to_their_plurals() {
        let r = Resources::new([], &[]);
        assert_eq!(r.plural("", "ConfigMap").expect("known"), "configmaps");
        assert_eq!(r.plural("apps", "Deployment").expect("known"), "deployments");
        assert_eq!(r.plural("networking.k8s.io", "Ingress").expect("known"), "ingresses");
        assert_eq!(r.plural("", "Endpoints").expect("known"), "endpoints");
        assert_eq!(r.plural("events.k8s.io", "Event").expect("known"), "events");
        assert_eq!(r.plural("policy", "PodDisruptionBudget").expect("known"), "poddisruptionbudgets");
    }

    #[test]
    fn only_kinds_that_serve_a_status_subresource_have_one() {
        let crd = json!({"spec": {"group": "x.io", "names": {"kind": "W", "plural": "ws"},
            "versions": [{"name": "v1", "subresources": {"status": {}}}]}});
        let r = Resources::new([&crd], &[]);
        assert!(r.has_status("apps", "Deployment"));
        assert!(r.has_status("x.io", "W"));
        assert!(!r.has_status("", "ConfigMap"));
        assert!(!r.has_status("rbac.authorization.k8s.io", "RoleBinding"));
    }

    #[test]
    fn the_scope_of_built_in_and_crd_kinds_is_known_and_of_others_not() {
        let namespaced = crd();
        let cluster = json!({"spec": {"group": "x.io", "scope": "Cluster", "names": {"kind": "W", "plural": "ws"}}});
        let o: PluralOverride = "Certificate.cert-manager.io=certificates".parse().expect("valid");
        let r = Resources::new([&namespaced, &cluster], &[o]);
        assert_eq!(r.is_namespaced("", "configmaps"), Some(true));
        assert_eq!(r.is_namespaced("apps", "deployments/status"), Some(true));
        assert_eq!(r.is_namespaced("", "namespaces"), Some(false));
        assert_eq!(r.is_namespaced("apiextensions.k8s.io", "customresourcedefinitions"), Some(false));
        assert_eq!(r.is_namespaced("examples.capstan.dev", "greetings"), Some(true));
        assert_eq!(r.is_namespaced("x.io", "ws"), Some(false));
        assert_eq!(r.is_namespaced("cert-manager.io", "certificates"), None);
        assert_eq!(r.is_namespaced("apps", "*"), None);
    }

    #[test]
    fn crd_kinds_map_to_the_plural_their_crd_declares() {
        let crd = crd();
        let r = Resources::new([&crd], &[]);
        assert_eq!(r.plural("examples.capstan.dev", "Greeting").expect("defined"), "greetings");
    }

    #[test]
    fn wildcards_stay_wildcards_and_a_wildcard_group_needs_one_plural() {
        let r = Resources::new([], &[]);
        assert_eq!(r.plural("apps", "*").expect("wildcard"), "*");
        assert_eq!(r.plural("*", "Event").expect("same plural in both groups"), "events");
        assert!(r.plural("*", "Nothing").is_err());
    }

    #[test]
    fn an_unknown_kind_is_an_error_naming_the_way_out() {
        let r = Resources::new([], &[]);
        let err = r.plural("cert-manager.io", "Certificate").expect_err("unknown");
        assert_eq!(
            err.to_string(),
            "unknown kind Certificate in group \"cert-manager.io\": no component defines its CRD and it is not a \
             common built-in kind; pass --plural Certificate.cert-manager.io=<plural>"
        );
        let err = r.plural("apps", "ConfigMap").expect_err("wrong group");
        assert!(matches!(err, Error::UnknownKind { .. }));
    }

    #[test]
    fn overrides_supply_plurals_for_kinds_defined_elsewhere() {
        let o: PluralOverride = "Certificate.cert-manager.io=certificates".parse().expect("valid");
        let r = Resources::new([], &[o]);
        assert_eq!(r.plural("cert-manager.io", "Certificate").expect("overridden"), "certificates");
        let core: PluralOverride = "Widget=widgets".parse().expect("valid");
        assert_eq!(core.group, "");
        assert!(matches!("Widget".parse::<PluralOverride>(), Err(Error::PluralOverride(_))));
        assert!(matches!("widget.x.io=widgets".parse::<PluralOverride>(), Err(Error::PluralOverride(_))));
        assert!(matches!("Widget.x.io=Widgets".parse::<PluralOverride>(), Err(Error::Name { .. })));
    }
}
