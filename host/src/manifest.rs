//! What a controller declares, as the host holds it: parsed from the WIT
//! record returned by the guest's `manifest()` and validated once per
//! component version.

use std::time::Duration;

use serde_json::Value;

use crate::bindings::capstan::operator::types as wit;
use crate::cluster::mock::selector::LabelSelector;
use crate::object::Gvk;

/// A Kubernetes API verb.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Verb {
    /// Read one object.
    Get,
    /// Read many.
    List,
    /// Watch.
    Watch,
    /// Create.
    Create,
    /// Replace.
    Update,
    /// Patch, including server-side apply.
    Patch,
    /// Delete.
    Delete,
}

impl Verb {
    /// Every verb.
    pub const ALL: [Verb; 7] =
        [Verb::Get, Verb::List, Verb::Watch, Verb::Create, Verb::Update, Verb::Patch, Verb::Delete];
    /// get, list, watch.
    pub const READ: [Verb; 3] = [Verb::Get, Verb::List, Verb::Watch];

    /// The RBAC spelling, e.g. `get`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
        }
    }
}

impl From<wit::Verb> for Verb {
    fn from(v: wit::Verb) -> Self {
        match v {
            wit::Verb::Get => Verb::Get,
            wit::Verb::List => Verb::List,
            wit::Verb::Watch => Verb::Watch,
            wit::Verb::Create => Verb::Create,
            wit::Verb::Update => Verb::Update,
            wit::Verb::Patch => Verb::Patch,
            wit::Verb::Delete => Verb::Delete,
        }
    }
}

/// Where a permission applies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Everywhere, including cluster-scoped kinds.
    Cluster,
    /// The namespace of the object being reconciled.
    OwnNamespace,
    /// The listed namespaces.
    Namespaces(Vec<String>),
}

/// Verbs on a kind within a scope.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Permission {
    /// API group (`""` core, `*` all).
    pub group: String,
    /// Kind (`*` all kinds of the group).
    pub kind: String,
    /// Allowed verbs.
    pub verbs: Vec<Verb>,
    /// Where.
    pub scope: Scope,
    /// Also the status subresource.
    pub status: bool,
}

/// Which primary objects a change to a watched object triggers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mapping {
    /// None: read-only cache.
    None,
    /// The primary in the same namespace named by this label's value.
    Label(String),
    /// The primary in the same namespace with the same name.
    SameName,
    /// Every primary in the same namespace.
    Namespace,
}

/// A kind watched besides the primary and owned kinds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Watch {
    /// The kind.
    pub kind: Gvk,
    /// What a change triggers.
    pub mapping: Mapping,
    /// Only objects matching this label selector.
    pub label_selector: Option<String>,
}

impl Watch {
    /// True if an object with these labels (`metadata.labels`, possibly
    /// absent) matches the watch's label selector; always true without one.
    /// A selector that does not parse (a manifest converted from the WIT
    /// record never has one) matches nothing.
    ///
    /// ```
    /// use capstan_host::manifest::{Mapping, Watch};
    /// use capstan_host::object::Gvk;
    /// use serde_json::json;
    ///
    /// let watch = Watch {
    ///     kind: Gvk::new("", "v1", "Secret"),
    ///     mapping: Mapping::SameName,
    ///     label_selector: Some("capstan.dev/watched=yes".into()),
    /// };
    /// assert!(watch.selects(Some(&json!({"capstan.dev/watched": "yes"}))));
    /// assert!(!watch.selects(Some(&json!({"capstan.dev/watched": "no"}))));
    /// assert!(!watch.selects(None));
    /// ```
    pub fn selects(&self, labels: Option<&Value>) -> bool {
        match &self.label_selector {
            None => true,
            Some(selector) => LabelSelector::parse(selector).is_ok_and(|s| s.matches(labels)),
        }
    }
}

/// A controller's validated declaration.
#[derive(Clone, Debug, PartialEq)]
pub struct Manifest {
    /// DNS-1123 label, unique per host.
    pub name: String,
    /// The reconciled kind.
    pub primary: Gvk,
    /// CustomResourceDefinitions, as JSON objects.
    pub crds: Vec<Value>,
    /// Kinds of children.
    pub owns: Vec<Gvk>,
    /// Other watched kinds.
    pub watches: Vec<Watch>,
    /// Finalizer managed by the host on primary objects.
    pub finalizer: Option<String>,
    /// Declared permissions beyond those implied by the kinds above.
    pub permissions: Vec<Permission>,
    /// Periodic resync.
    pub resync: Option<Duration>,
    /// Reconciles in flight at once (≥ 1).
    pub max_concurrency: u32,
}

/// Why a manifest is invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The controller name is not a DNS-1123 label.
    #[error("controller name {0:?} is not a DNS-1123 label (lower-case alphanumerics and '-', at most 63)")]
    Name(String),
    /// A kind has an empty or malformed part.
    #[error("{field}: kind {kind:?} needs a version and an UpperCamelCase kind")]
    Kind {
        /// Which field of the manifest.
        field: &'static str,
        /// The kind as given.
        kind: String,
    },
    /// A CRD is not valid JSON or not an apiextensions.k8s.io/v1 CRD.
    #[error("crds[{index}]: {reason}")]
    Crd {
        /// Position in `crds`.
        index: usize,
        /// What is wrong.
        reason: String,
    },
    /// The finalizer is not a qualified name like `example.com/cleanup`.
    #[error("finalizer {0:?} must be a qualified name like example.com/cleanup")]
    Finalizer(String),
    /// A permission lists no verbs, or names no kind.
    #[error("permissions[{index}]: {reason}")]
    Permission {
        /// Position in `permissions`.
        index: usize,
        /// What is wrong.
        reason: String,
    },
    /// A watch is malformed.
    #[error("watches[{index}]: {reason}")]
    Watch {
        /// Position in `watches`.
        index: usize,
        /// What is wrong.
        reason: String,
    },
}

/// True if `s` is a DNS-1123 label: `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, ≤ 63.
pub fn is_dns1123_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// True if `s` is a DNS-1123 subdomain: dot-separated labels, ≤ 253.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns1123_label)
}

/// True if `s` is a DNS-1035 label: `[a-z]([-a-z0-9]*[a-z0-9])?`, ≤ 63: a
/// DNS-1123 label that starts with a letter. CRD plural, singular and short
/// names, categories and the lower-cased kind must be one.
pub fn is_dns1035_label(s: &str) -> bool {
    is_dns1123_label(s) && s.starts_with(|c: char| c.is_ascii_lowercase())
}

fn kind_of(field: &'static str, k: wit::GroupVersionKind) -> Result<Gvk, Error> {
    let ok = !k.version.is_empty()
        && k.kind.chars().next().is_some_and(|c| c.is_ascii_uppercase())
        && k.kind.chars().all(|c| c.is_ascii_alphanumeric())
        && (k.group.is_empty() || is_dns1123_subdomain(&k.group));
    if !ok {
        return Err(Error::Kind { field, kind: format!("{}/{}/{}", k.group, k.version, k.kind) });
    }
    Ok(Gvk::new(k.group, k.version, k.kind))
}

fn validate_crd(index: usize, bytes: &[u8]) -> Result<Value, Error> {
    let crd_err = |reason: String| Error::Crd { index, reason };
    let crd: Value = serde_json::from_slice(bytes).map_err(|e| crd_err(format!("not JSON: {e}")))?;
    if crd.get("apiVersion").and_then(Value::as_str) != Some("apiextensions.k8s.io/v1")
        || crd.get("kind").and_then(Value::as_str) != Some("CustomResourceDefinition")
    {
        return Err(crd_err("not an apiextensions.k8s.io/v1 CustomResourceDefinition".into()));
    }
    let spec = crd.get("spec").ok_or_else(|| crd_err("has no spec".into()))?;
    let group = spec.get("group").and_then(Value::as_str).unwrap_or_default();
    let plural = spec.pointer("/names/plural").and_then(Value::as_str).unwrap_or_default();
    if !is_dns1123_subdomain(group) || !group.contains('.') {
        return Err(crd_err(format!("spec.group {group:?} must be a DNS subdomain with a dot")));
    }
    if !is_dns1123_label(plural) {
        return Err(crd_err(format!("spec.names.plural {plural:?} must be a lower-case DNS-1123 label")));
    }
    let expected = format!("{plural}.{group}");
    if crate::object::meta_str(&crd, "name") != Some(expected.as_str()) {
        return Err(crd_err(format!("metadata.name must be {expected:?}")));
    }
    if spec.get("versions").and_then(Value::as_array).is_none_or(Vec::is_empty) {
        return Err(crd_err("spec.versions is empty".into()));
    }
    Ok(crd)
}

impl TryFrom<wit::ControllerManifest> for Manifest {
    type Error = Error;

    fn try_from(m: wit::ControllerManifest) -> Result<Self, Error> {
        if !is_dns1123_label(&m.name) {
            return Err(Error::Name(m.name));
        }
        let primary = kind_of("primary", m.primary)?;
        let crds = m.crds.iter().enumerate().map(|(i, c)| validate_crd(i, c)).collect::<Result<_, _>>()?;
        let owns = m.owns.into_iter().map(|k| kind_of("owns", k)).collect::<Result<_, _>>()?;
        let watches = m
            .watches
            .into_iter()
            .enumerate()
            .map(|(index, w)| {
                let mapping = match w.mapping {
                    wit::WatchMapping::None => Mapping::None,
                    wit::WatchMapping::Label(l) if l.is_empty() => {
                        return Err(Error::Watch { index, reason: "label mapping needs a label key".into() });
                    }
                    wit::WatchMapping::Label(l) => Mapping::Label(l),
                    wit::WatchMapping::SameName => Mapping::SameName,
                    wit::WatchMapping::Namespace => Mapping::Namespace,
                };
                if let Some(selector) = &w.label_selector {
                    LabelSelector::parse(selector).map_err(|e| Error::Watch {
                        index,
                        reason: format!("invalid label selector {selector:?}: {e}"),
                    })?;
                }
                Ok(Watch { kind: kind_of("watches", w.kind)?, mapping, label_selector: w.label_selector })
            })
            .collect::<Result<_, _>>()?;
        if let Some(f) = &m.finalizer {
            let valid = f.split_once('/').is_some_and(|(domain, name)| {
                is_dns1123_subdomain(domain) && !name.is_empty() && name.len() <= 63 && !name.contains('/')
            });
            if !valid {
                return Err(Error::Finalizer(f.clone()));
            }
        }
        let permissions = m
            .permissions
            .into_iter()
            .enumerate()
            .map(|(index, p)| {
                if p.verbs.is_empty() {
                    return Err(Error::Permission { index, reason: "lists no verbs".into() });
                }
                if p.kind.is_empty() {
                    return Err(Error::Permission { index, reason: "names no kind".into() });
                }
                Ok(Permission {
                    group: p.group,
                    kind: p.kind,
                    verbs: p.verbs.into_iter().map(Verb::from).collect(),
                    scope: match p.scope {
                        wit::Scope::Cluster => Scope::Cluster,
                        wit::Scope::OwnNamespace => Scope::OwnNamespace,
                        wit::Scope::Namespaces(n) => Scope::Namespaces(n),
                    },
                    status: p.status,
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Manifest {
            name: m.name,
            primary,
            crds,
            owns,
            watches,
            finalizer: m.finalizer,
            permissions,
            resync: m.resync_seconds.filter(|s| *s > 0).map(|s| Duration::from_secs(s.into())),
            max_concurrency: m.max_concurrency.max(1),
        })
    }
}

impl Manifest {
    /// The CRD in `crds` that defines `gvk`'s group and kind, if any.
    pub fn crd_for(&self, gvk: &Gvk) -> Option<&Value> {
        self.crds.iter().find(|crd| {
            crd.pointer("/spec/group").and_then(Value::as_str) == Some(gvk.group.as_str())
                && crd.pointer("/spec/names/kind").and_then(Value::as_str) == Some(gvk.kind.as_str())
        })
    }

    /// The field manager used for this controller's server-side applies.
    pub fn field_manager(&self) -> String {
        format!("capstan-{}", self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gvk(group: &str, version: &str, kind: &str) -> wit::GroupVersionKind {
        wit::GroupVersionKind { group: group.into(), version: version.into(), kind: kind.into() }
    }

    fn valid() -> wit::ControllerManifest {
        wit::ControllerManifest {
            name: "greeter".into(),
            primary: gvk("examples.capstan.dev", "v1alpha1", "Greeting"),
            crds: vec![],
            owns: vec![gvk("", "v1", "ConfigMap")],
            watches: vec![],
            finalizer: Some("examples.capstan.dev/cleanup".into()),
            permissions: vec![],
            resync_seconds: Some(300),
            max_concurrency: 0,
        }
    }

    #[test]
    fn valid_manifest_converts_with_defaults_applied() {
        let m = Manifest::try_from(valid()).expect("valid");
        assert_eq!(m.max_concurrency, 1);
        assert_eq!(m.resync, Some(Duration::from_secs(300)));
        assert_eq!(m.field_manager(), "capstan-greeter");
    }

    #[test]
    fn invalid_name_is_rejected() {
        let m = wit::ControllerManifest { name: "Greeter_1".into(), ..valid() };
        assert_eq!(Manifest::try_from(m), Err(Error::Name("Greeter_1".into())));
    }

    #[test]
    fn empty_kind_is_rejected() {
        let m = wit::ControllerManifest { primary: gvk("", "", ""), ..valid() };
        assert!(matches!(Manifest::try_from(m), Err(Error::Kind { field: "primary", .. })));
    }

    #[test]
    fn unqualified_finalizer_is_rejected() {
        let m = wit::ControllerManifest { finalizer: Some("cleanup".into()), ..valid() };
        assert!(matches!(Manifest::try_from(m), Err(Error::Finalizer(_))));
    }

    #[test]
    fn crd_that_is_not_a_crd_is_rejected() {
        let m = wit::ControllerManifest { crds: vec![br#"{"kind":"ConfigMap"}"#.to_vec()], ..valid() };
        assert!(matches!(Manifest::try_from(m), Err(Error::Crd { index: 0, .. })));
        let m = wit::ControllerManifest { crds: vec![b"not json".to_vec()], ..valid() };
        assert!(matches!(Manifest::try_from(m), Err(Error::Crd { index: 0, .. })));
    }

    #[test]
    fn permission_without_verbs_is_rejected() {
        let p = wit::Permission {
            group: String::new(),
            kind: "Secret".into(),
            verbs: vec![],
            scope: wit::Scope::Cluster,
            status: false,
        };
        let m = wit::ControllerManifest { permissions: vec![p], ..valid() };
        assert!(matches!(Manifest::try_from(m), Err(Error::Permission { index: 0, .. })));
    }

    #[test]
    fn malformed_watch_label_selector_is_rejected() {
        let watch = |selector: &str| wit::Watch {
            kind: gvk("", "v1", "Secret"),
            mapping: wit::WatchMapping::SameName,
            label_selector: Some(selector.into()),
        };
        let m = wit::ControllerManifest { watches: vec![watch("app in (")], ..valid() };
        let err = Manifest::try_from(m).expect_err("unterminated set");
        assert_eq!(
            err.to_string(),
            "watches[0]: invalid label selector \"app in (\": unterminated set of values",
            "{err:?}"
        );
        let m = wit::ControllerManifest { watches: vec![watch("capstan.dev/watched=yes,!legacy")], ..valid() };
        assert!(Manifest::try_from(m).is_ok());
    }

    #[test]
    fn dns_names_follow_kubernetes_rules() {
        assert!(is_dns1123_label("a-1"));
        assert!(!is_dns1123_label("-a"));
        assert!(!is_dns1123_label("A"));
        assert!(!is_dns1123_label(&"a".repeat(64)));
        assert!(is_dns1123_subdomain("examples.capstan.dev"));
        assert!(!is_dns1123_subdomain("examples..dev"));
        assert!(is_dns1035_label("greetings"));
        assert!(!is_dns1035_label("1greetings"));
        assert!(!is_dns1035_label("Greetings"));
    }

    #[test]
    fn error_messages_read_right() {
        assert_eq!(
            Error::Finalizer("x".into()).to_string(),
            "finalizer \"x\" must be a qualified name like example.com/cleanup"
        );
        assert_eq!(
            Error::Crd { index: 2, reason: "spec.versions is empty".into() }.to_string(),
            "crds[2]: spec.versions is empty"
        );
    }
}
