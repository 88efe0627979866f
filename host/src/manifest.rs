//! What a controller declares, as the host holds it: parsed from the WIT
//! record returned by the guest's `manifest()` (of any contract version the
//! host runs) and validated once per component version.
//!
//! Everything in a manifest is untrusted input: every name, selector and
//! number is checked against the rules and ranges below, and a rejection
//! names the field.

use std::time::Duration;

use serde_json::Value;

use crate::cluster::mock::selector::LabelSelector;
use crate::object::Gvk;
use crate::runtime::bindings::capstan::operator::types as wit;
use crate::runtime::bindings::v0_1::capstan::operator::types as wit_v0_1;

mod children;
pub mod egress;
mod fleet;
mod roles;
pub use children::Unwritable;
pub use fleet::Fleet;
pub use roles::{
    AdmissionWebhook, DEFAULT_WEBHOOK_TIMEOUT_SECONDS, GroupKind, MAX_WEBHOOK_TIMEOUT_SECONDS, MAX_WEBHOOKS, Operation,
    Roles, is_webhook_name,
};

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
    /// Bind a Role or ClusterRole without holding its permissions (RBAC
    /// only: no host call uses it).
    Bind,
    /// Create or update a Role or ClusterRole with permissions one does not
    /// hold (RBAC only).
    Escalate,
}

impl Verb {
    /// Every verb of an API call (not `bind` or `escalate`).
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
            Verb::Bind => "bind",
            Verb::Escalate => "escalate",
        }
    }

    /// True if RBAC can limit this verb to named objects (`resourceNames`):
    /// every verb but `list`, `watch` and `create`.
    pub fn takes_resource_names(self) -> bool {
        !matches!(self, Verb::List | Verb::Watch | Verb::Create)
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
            wit::Verb::Bind => Verb::Bind,
            wit::Verb::Escalate => Verb::Escalate,
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
    /// Only objects of these names (RBAC `resourceNames`); empty: any.
    pub resource_names: Vec<String>,
}

impl Permission {
    /// True if the permission names a wildcard group or kind (`*`).
    pub fn is_wildcard(&self) -> bool {
        self.group == "*" || self.kind == "*"
    }
}

impl Manifest {
    /// Whether the manifest grants `verb` on objects of `kind` somewhere,
    /// for its webhooks: the primary kind when it is reconciled (read,
    /// update, patch), a kind whose CRD the component defines (read,
    /// update, patch: its own kind, checked against the CRD's
    /// `capstan.dev/installed-by` when webhooks are installed), an owned
    /// kind (every verb), a watched kind (read), or a declared permission.
    ///
    /// The primary kind of a component that does not reconcile grants
    /// nothing: the SDKs fill it in (a webhook-only component's first
    /// webhook kind, a scheduler's `Pod`), so it says nothing about what
    /// the component may see.
    pub fn grants(&self, verb: Verb, kind: &Gvk) -> bool {
        self.grants_with(verb, kind, true)
    }

    /// Whether a webhook of the manifest may review `kind` only because
    /// the component defines the kind's CRD: nothing else grants what the
    /// webhook needs (reading, and writing for a mutating one). The host
    /// then installs the webhook only if the CRD in the cluster is the
    /// component's own (`capstan.dev/installed-by`), so that listing a
    /// copy of another component's CRD reaches nothing.
    pub fn reviews_as_own_kind(&self, webhook: &AdmissionWebhook, kind: &Gvk) -> bool {
        let without_crds = |verb| self.grants_with(verb, kind, false);
        let granted =
            without_crds(Verb::Get) && (!webhook.mutating || without_crds(Verb::Patch) || without_crds(Verb::Update));
        !granted && self.crd_for(kind).is_some()
    }

    fn grants_with(&self, verb: Verb, kind: &Gvk, own_crds: bool) -> bool {
        let same = |k: &Gvk| k.group == kind.group && k.kind == kind.kind;
        let reads_and_writes = Verb::READ.contains(&verb) || matches!(verb, Verb::Update | Verb::Patch);
        (reads_and_writes && (self.roles.reconcile && same(&self.primary) || own_crds && self.crd_for(kind).is_some()))
            || self.owns.iter().any(|o| same(&o.kind))
            || (Verb::READ.contains(&verb) && self.watches.iter().any(|w| same(&w.kind)))
            || self.permissions.iter().any(|p| {
                (p.group == "*" || p.group == kind.group)
                    && (p.kind == "*" || p.kind == kind.kind)
                    && p.verbs.contains(&verb)
            })
    }

    /// Admission is access: a webhook sees every object of its kinds
    /// (reading them), a mutating one changes them (writing), a validating
    /// one may refuse them (a veto on others' writes, which needs the read
    /// grant and is limited to the namespaces the host serves when
    /// installed). So each kind of a webhook must be readable (`get`)
    /// under the manifest's grants, and writable (`update` or `patch`) for
    /// a mutating one. Leases are refused: leader election, the host's
    /// own included, must not depend on a component's answer. A declared
    /// permission counts only when it covers every object the webhook
    /// sees: scope `Cluster` and no resource names (a webhook reviews the
    /// kind's objects of every name in every namespace the host serves).
    fn check_admission_grants(&self) -> Result<(), Error> {
        for (i, webhook) in self.roles.admission.iter().enumerate() {
            let bad = |reason: String| Error::Role { field: format!("roles.admission[{i}].kinds"), reason };
            for kind in &webhook.kinds {
                if kind.group == "coordination.k8s.io" && kind.kind == "Lease" {
                    return Err(bad("Leases cannot be reviewed: leader election must not wait for a webhook".into()));
                }
                if let Some(p) = self.narrow_permission(kind) {
                    return Err(bad(format!(
                        "{kind}: a webhook sees every object of its kinds in every namespace the host serves, but the \
                         manifest grants it only {p} (declare the permission with scope cluster and no resource names, \
                         or the kind as the reconciled primary, an owned or a watched kind)"
                    )));
                }
                if !self.grants(Verb::Get, kind) {
                    return Err(bad(format!(
                        "{kind}: a webhook sees every object of its kinds, but the manifest grants no read of it \
                         (reconcile it as the primary kind, define its CRD, own or watch it, or declare a permission with get)"
                    )));
                }
                if webhook.mutating && !self.grants(Verb::Patch, kind) && !self.grants(Verb::Update, kind) {
                    return Err(bad(format!(
                        "{kind}: a mutating webhook changes what it reviews, but the manifest grants no write of it \
                         (reconcile it as the primary kind, define its CRD, own it, or declare a permission with update or patch)"
                    )));
                }
            }
        }
        Ok(())
    }
}

impl Manifest {
    /// For an admission kind granted by nothing but permissions, the first
    /// permission on it that is narrower than what a webhook sees (some
    /// names, or some namespaces), described; `None` when the kind is the
    /// reconciled primary, the component's own CRD kind, owned or
    /// watched, or a permission covers it whole.
    fn narrow_permission(&self, kind: &Gvk) -> Option<String> {
        let same = |k: &Gvk| k.group == kind.group && k.kind == kind.kind;
        if (self.roles.reconcile && same(&self.primary))
            || self.crd_for(kind).is_some()
            || self.owns.iter().any(|o| same(&o.kind))
            || self.watches.iter().any(|w| same(&w.kind))
        {
            return None;
        }
        let on_kind: Vec<&Permission> = self
            .permissions
            .iter()
            .filter(|p| (p.group == "*" || p.group == kind.group) && (p.kind == "*" || p.kind == kind.kind))
            .collect();
        if on_kind.iter().any(|p| p.scope == Scope::Cluster && p.resource_names.is_empty()) {
            return None;
        }
        on_kind.first().map(|p| match (&p.scope, p.resource_names.is_empty()) {
            (_, false) => format!("on the names {:?}", p.resource_names),
            (Scope::OwnNamespace, _) => "in the reconciled object's namespace".to_owned(),
            (Scope::Namespaces(n), _) => format!("in the namespaces {n:?}"),
            (Scope::Cluster, _) => "everywhere".to_owned(),
        })
    }
}

/// Where a [`Reference`] reads a name or namespace on a watched object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FieldRef {
    /// The watched object's name.
    Name,
    /// The watched object's namespace.
    Namespace,
    /// The value of this label.
    Label(String),
    /// The value of this annotation.
    Annotation(String),
}

/// The primary object named by fields of a watched object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reference {
    /// Where the primary's name is read.
    pub name: FieldRef,
    /// Where a namespaced primary's namespace is read; `None`: the watched
    /// object's own.
    pub namespace: Option<FieldRef>,
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
    /// The primary the reference names.
    Reference(Reference),
    /// Every primary.
    All,
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
        selects(self.label_selector.as_deref(), labels)
    }
}

fn selects(selector: Option<&str>, labels: Option<&Value>) -> bool {
    match selector {
        None => true,
        Some(selector) => LabelSelector::parse(selector).is_ok_and(|s| s.matches(labels)),
    }
}

/// A kind of children.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owned {
    /// The kind.
    pub kind: Gvk,
    /// Only children matching this label selector are watched, cached and
    /// pruned; every child an outcome lists must match it.
    pub label_selector: Option<String>,
    /// Where children may be written; `None`: the reconciled object's
    /// namespace (cluster-scoped children only for a cluster-scoped
    /// primary).
    pub scope: Option<Scope>,
}

impl Owned {
    /// An owned kind with no selector and the default scope.
    pub fn kind(kind: Gvk) -> Self {
        Self { kind, label_selector: None, scope: None }
    }

    /// True if a child with these labels matches the selector (always
    /// without one).
    pub fn selects(&self, labels: Option<&Value>) -> bool {
        selects(self.label_selector.as_deref(), labels)
    }

    /// Where children of this kind may be written.
    pub fn effective_scope(&self) -> Scope {
        self.scope.clone().unwrap_or(Scope::OwnNamespace)
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
    pub owns: Vec<Owned>,
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
    /// What the component serves: a reconcile loop, webhooks, a scheduler.
    pub roles: Roles,
    /// The origins it may call over HTTP(S) (contract 0.4.0; none before).
    pub egress: egress::Egress,
    /// The clusters a uniform controller runs in; empty: every cluster
    /// (contract 0.4.0; empty before).
    pub clusters: Vec<String>,
    /// The home and members of a fleet controller; `None`: a uniform one
    /// (contract 0.4.0).
    pub fleet: Option<Fleet>,
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
    /// An owned kind is malformed.
    #[error("owns[{index}]: {reason}")]
    Owned {
        /// Position in `owns`.
        index: usize,
        /// What is wrong.
        reason: String,
    },
    /// A role is declared wrongly.
    #[error("{field}: {reason}")]
    Role {
        /// Which field, e.g. `roles.admission[0].name`.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// The host could write no child of an owned kind: no declared scope
    /// holds one, or a binding needs `bind` the manifest does not declare.
    /// Every object would fail.
    #[error(
        "owns[{}]: controller {} could write no {} child: {}; {}",
        .0.index, .0.controller, .0.kind, .0.reason, .0.fix
    )]
    Unwritable(Box<Unwritable>),
    /// A declared egress origin is malformed.
    #[error(transparent)]
    Egress(egress::Error),
    /// A number or a list length is outside the range the host accepts.
    #[error("{field}: {value} is out of range (allowed: {range})")]
    Range {
        /// Which field.
        field: &'static str,
        /// The value given (or the list's length).
        value: u64,
        /// The allowed range, e.g. `1..=64`.
        range: &'static str,
    },
}

/// Most reconciles in flight per controller.
pub const MAX_CONCURRENCY: u32 = 64;
/// Longest resync period: one week.
pub const MAX_RESYNC_SECONDS: u32 = 7 * 24 * 3600;
/// Most CRDs one component defines.
pub const MAX_CRDS: usize = 32;
/// Most owned kinds, watches or permissions one manifest lists (each).
pub const MAX_ENTRIES: usize = 64;
/// Most resource names one permission lists.
pub const MAX_RESOURCE_NAMES: usize = 64;
/// Most bytes of one CRD's JSON.
pub const MAX_CRD_BYTES: usize = 1 << 20;

fn check_len(field: &'static str, len: usize, max: usize, range: &'static str) -> Result<(), Error> {
    if len > max {
        return Err(Error::Range { field, value: len as u64, range });
    }
    Ok(())
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
    // The version and kind go into request paths: `v1?watch=1` or `-`
    // must not pass (found by the property tests).
    let ok = is_dns1123_label(&k.version)
        && k.kind.len() <= 63
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
    if bytes.len() > MAX_CRD_BYTES {
        return Err(crd_err(format!("{} bytes, more than {MAX_CRD_BYTES}", bytes.len())));
    }
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

fn scope_of(scope: wit::Scope, bad: impl Fn(String) -> Error) -> Result<Scope, Error> {
    Ok(match scope {
        wit::Scope::Cluster => Scope::Cluster,
        wit::Scope::OwnNamespace => Scope::OwnNamespace,
        wit::Scope::Namespaces(list) => {
            check_len("scope.namespaces", list.len(), MAX_ENTRIES, "0..=64")?;
            if let Some(ns) = list.iter().find(|n| !is_dns1123_label(n)) {
                return Err(bad(format!("namespace {ns:?} is not a DNS-1123 label")));
            }
            Scope::Namespaces(list)
        }
    })
}

fn selector_of(selector: Option<String>, bad: impl Fn(String) -> Error) -> Result<Option<String>, Error> {
    if let Some(s) = &selector {
        LabelSelector::parse(s).map_err(|e| bad(format!("invalid label selector {s:?}: {e}")))?;
    }
    Ok(selector)
}

/// True if `key` is a label or annotation key: an optional DNS subdomain
/// prefix and `/`, then a name of at most 63 alphanumerics, `-`, `_`, `.`.
pub fn is_qualified_key(key: &str) -> bool {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    prefix.is_none_or(is_dns1123_subdomain)
        && !name.is_empty()
        && name.len() <= 63
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
}

fn field_ref_of(f: wit::FieldRef, bad: &impl Fn(String) -> Error) -> Result<FieldRef, Error> {
    let key = |k: String| {
        if is_qualified_key(&k) { Ok(k) } else { Err(bad(format!("{k:?} is not a label or annotation key"))) }
    };
    Ok(match f {
        wit::FieldRef::Name => FieldRef::Name,
        wit::FieldRef::Namespace => FieldRef::Namespace,
        wit::FieldRef::Label(k) => FieldRef::Label(key(k)?),
        wit::FieldRef::Annotation(k) => FieldRef::Annotation(key(k)?),
    })
}

impl TryFrom<wit::ControllerManifest> for Manifest {
    type Error = Error;

    fn try_from(m: wit::ControllerManifest) -> Result<Self, Error> {
        if !is_dns1123_label(&m.name) {
            return Err(Error::Name(m.name));
        }
        let primary = kind_of("primary", m.primary)?;
        check_len("crds", m.crds.len(), MAX_CRDS, "0..=32")?;
        check_len("owns", m.owns.len(), MAX_ENTRIES, "0..=64")?;
        check_len("watches", m.watches.len(), MAX_ENTRIES, "0..=64")?;
        check_len("permissions", m.permissions.len(), MAX_ENTRIES, "0..=64")?;
        let crds = m.crds.iter().enumerate().map(|(i, c)| validate_crd(i, c)).collect::<Result<_, _>>()?;
        let owns = m
            .owns
            .into_iter()
            .enumerate()
            .map(|(index, o)| {
                let bad = |reason: String| Error::Owned { index, reason };
                Ok(Owned {
                    kind: kind_of("owns", o.kind)?,
                    label_selector: selector_of(o.label_selector, bad)?,
                    scope: o.scope.map(|s| scope_of(s, bad)).transpose()?,
                })
            })
            .collect::<Result<_, _>>()?;
        let watches = m
            .watches
            .into_iter()
            .enumerate()
            .map(|(index, w)| {
                let bad = |reason: String| Error::Watch { index, reason };
                let mapping = match w.mapping {
                    wit::WatchMapping::None => Mapping::None,
                    wit::WatchMapping::Label(l) if !is_qualified_key(&l) => {
                        return Err(bad(format!("label mapping needs a label key, not {l:?}")));
                    }
                    wit::WatchMapping::Label(l) => Mapping::Label(l),
                    wit::WatchMapping::SameName => Mapping::SameName,
                    wit::WatchMapping::Namespace => Mapping::Namespace,
                    wit::WatchMapping::All => Mapping::All,
                    wit::WatchMapping::Reference(r) => Mapping::Reference(Reference {
                        name: field_ref_of(r.name, &bad)?,
                        namespace: r.namespace.map(|n| field_ref_of(n, &bad)).transpose()?,
                    }),
                };
                Ok(Watch {
                    kind: kind_of("watches", w.kind)?,
                    mapping,
                    label_selector: selector_of(w.label_selector, bad)?,
                })
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
                let bad = |reason: String| Error::Permission { index, reason };
                if p.verbs.is_empty() {
                    return Err(bad("lists no verbs".into()));
                }
                if p.kind.is_empty() {
                    return Err(bad("names no kind".into()));
                }
                let kind_ok = p.kind == "*" || p.kind.chars().all(|c| c.is_ascii_alphanumeric());
                let group_ok = p.group.is_empty() || p.group == "*" || is_dns1123_subdomain(&p.group);
                if !kind_ok || !group_ok {
                    return Err(bad(format!("{:?}/{:?} is not a group and kind", p.group, p.kind)));
                }
                check_len("permissions[].resource-names", p.resource_names.len(), MAX_RESOURCE_NAMES, "0..=64")?;
                if let Some(n) = p.resource_names.iter().find(|n| !is_object_name(n)) {
                    return Err(bad(format!("resource name {n:?} is not an object name")));
                }
                let verbs: Vec<Verb> = p.verbs.into_iter().map(Verb::from).collect();
                if !p.resource_names.is_empty()
                    && let Some(v) = verbs.iter().find(|v| !v.takes_resource_names())
                {
                    return Err(bad(format!("{} cannot be limited to resource names", v.as_str())));
                }
                Ok(Permission {
                    group: p.group,
                    kind: p.kind,
                    verbs,
                    scope: scope_of(p.scope, bad)?,
                    status: p.status,
                    resource_names: p.resource_names,
                })
            })
            .collect::<Result<_, _>>()?;
        if let Some(s) = m.resync_seconds.filter(|s| *s > MAX_RESYNC_SECONDS) {
            return Err(Error::Range { field: "resync-seconds", value: s.into(), range: "0..=604800" });
        }
        if m.max_concurrency > MAX_CONCURRENCY {
            return Err(Error::Range { field: "max-concurrency", value: m.max_concurrency.into(), range: "0..=64" });
        }
        let manifest = Manifest {
            name: m.name,
            primary,
            crds,
            owns,
            watches,
            finalizer: m.finalizer,
            permissions,
            resync: m.resync_seconds.filter(|s| *s > 0).map(|s| Duration::from_secs(s.into())),
            max_concurrency: m.max_concurrency.max(1),
            roles: Roles::reconcile_only(),
            egress: Default::default(),
            clusters: Vec::new(),
            fleet: None,
        };
        manifest.check_children()?;
        Ok(manifest)
    }
}

/// A component's manifest (0.3.0 and later): the controller part as
/// before, the roles, and (0.4.0) the origins it may call.
impl TryFrom<wit::ComponentManifest> for Manifest {
    type Error = Error;

    fn try_from(m: wit::ComponentManifest) -> Result<Self, Error> {
        let mut manifest = Manifest::try_from(m.controller)?;
        manifest.roles = roles::roles_of(m.roles, &manifest.crds)?;
        manifest.egress = egress::Egress::parse(&m.egress).map_err(Error::Egress)?;
        (manifest.clusters, manifest.fleet) = fleet::parse(m.clusters, m.fleet, manifest.roles.reconcile)?;
        manifest.check_admission_grants()?;
        Ok(manifest)
    }
}

/// True if `s` can name an object: a DNS-1123 subdomain (what most kinds
/// require; the strictest rule that never refuses a valid name of those
/// kinds is applied by the API server itself).
pub fn is_object_name(s: &str) -> bool {
    is_dns1123_subdomain(s)
}

/// A manifest of contract 0.1.0 is the current record with the new fields
/// at their defaults: owned kinds without selector or scope, permissions
/// without resource names.
impl From<wit_v0_1::ControllerManifest> for wit::ControllerManifest {
    fn from(m: wit_v0_1::ControllerManifest) -> Self {
        let gvk =
            |k: wit_v0_1::GroupVersionKind| wit::GroupVersionKind { group: k.group, version: k.version, kind: k.kind };
        let scope = |s: wit_v0_1::Scope| match s {
            wit_v0_1::Scope::Cluster => wit::Scope::Cluster,
            wit_v0_1::Scope::OwnNamespace => wit::Scope::OwnNamespace,
            wit_v0_1::Scope::Namespaces(n) => wit::Scope::Namespaces(n),
        };
        let verb = |v: wit_v0_1::Verb| match v {
            wit_v0_1::Verb::Get => wit::Verb::Get,
            wit_v0_1::Verb::List => wit::Verb::List,
            wit_v0_1::Verb::Watch => wit::Verb::Watch,
            wit_v0_1::Verb::Create => wit::Verb::Create,
            wit_v0_1::Verb::Update => wit::Verb::Update,
            wit_v0_1::Verb::Patch => wit::Verb::Patch,
            wit_v0_1::Verb::Delete => wit::Verb::Delete,
        };
        wit::ControllerManifest {
            name: m.name,
            primary: gvk(m.primary),
            crds: m.crds,
            owns: m.owns.into_iter().map(|k| wit::Owned { kind: gvk(k), label_selector: None, scope: None }).collect(),
            watches: m
                .watches
                .into_iter()
                .map(|w| wit::Watch {
                    kind: gvk(w.kind),
                    mapping: match w.mapping {
                        wit_v0_1::WatchMapping::None => wit::WatchMapping::None,
                        wit_v0_1::WatchMapping::Label(l) => wit::WatchMapping::Label(l),
                        wit_v0_1::WatchMapping::SameName => wit::WatchMapping::SameName,
                        wit_v0_1::WatchMapping::Namespace => wit::WatchMapping::Namespace,
                    },
                    label_selector: w.label_selector,
                })
                .collect(),
            finalizer: m.finalizer,
            permissions: m
                .permissions
                .into_iter()
                .map(|p| wit::Permission {
                    group: p.group,
                    kind: p.kind,
                    verbs: p.verbs.into_iter().map(verb).collect(),
                    scope: scope(p.scope),
                    status: p.status,
                    resource_names: vec![],
                })
                .collect(),
            resync_seconds: m.resync_seconds,
            max_concurrency: m.max_concurrency,
        }
    }
}

impl Manifest {
    /// A manifest of controller `name` for `primary` and nothing else, for
    /// tests to build on.
    #[cfg(test)]
    pub(crate) fn bare(name: &str, primary: Gvk) -> Self {
        Self {
            name: name.into(),
            primary,
            crds: vec![],
            owns: vec![],
            watches: vec![],
            finalizer: None,
            permissions: vec![],
            resync: None,
            max_concurrency: 1,
            roles: Roles::reconcile_only(),
            egress: Default::default(),
            clusters: Vec::new(),
            fleet: None,
        }
    }

    /// Whether the component runs in the cluster named `cluster`: a fleet
    /// controller in its home only, a uniform one in the clusters it names
    /// (every cluster when it names none).
    pub fn runs_in(&self, cluster: &str) -> bool {
        match &self.fleet {
            Some(fleet) => fleet.home == cluster,
            None => self.clusters.is_empty() || self.clusters.iter().any(|c| c == cluster),
        }
    }

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

    /// The owned kind of `gvk`'s group and kind, if the manifest owns it.
    pub fn owned(&self, gvk: &Gvk) -> Option<&Owned> {
        self.owns.iter().find(|o| o.kind.same_group_kind(gvk))
    }

    /// Every kind the manifest names (primary, owned, watched, permitted),
    /// each once: the bounded set metric labels are drawn from.
    pub fn kinds(&self) -> impl Iterator<Item = &Gvk> {
        std::iter::once(&self.primary)
            .chain(self.owns.iter().map(|o| &o.kind))
            .chain(self.watches.iter().map(|w| &w.kind))
    }

    /// The declared permissions that name a wildcard group or kind.
    pub fn wildcard_permissions(&self) -> impl Iterator<Item = &Permission> {
        self.permissions.iter().filter(|p| p.is_wildcard())
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
            owns: vec![wit::Owned { kind: gvk("", "v1", "ConfigMap"), label_selector: None, scope: None }],
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
    fn a_version_that_is_not_a_dns_label_is_rejected() {
        for version in ["-", "v1?watch=1", "v1/x", "V1"] {
            let m = wit::ControllerManifest { primary: gvk("apps", version, "Deployment"), ..valid() };
            assert!(matches!(Manifest::try_from(m), Err(Error::Kind { field: "primary", .. })), "{version}");
        }
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
            resource_names: vec![],
        };
        let m = wit::ControllerManifest { permissions: vec![p], ..valid() };
        assert!(matches!(Manifest::try_from(m), Err(Error::Permission { index: 0, .. })));
    }

    fn permission(verbs: Vec<wit::Verb>, names: &[&str]) -> wit::Permission {
        wit::Permission {
            group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            verbs,
            scope: wit::Scope::Cluster,
            status: false,
            resource_names: names.iter().map(|n| (*n).to_owned()).collect(),
        }
    }

    #[test]
    fn bind_on_named_roles_is_accepted_and_list_by_name_is_not() {
        let m = wit::ControllerManifest { permissions: vec![permission(vec![wit::Verb::Bind], &["admin"])], ..valid() };
        let m = Manifest::try_from(m).expect("valid");
        assert_eq!(m.permissions[0].verbs, vec![Verb::Bind]);
        assert_eq!(m.permissions[0].resource_names, vec!["admin".to_owned()]);
        let m = wit::ControllerManifest { permissions: vec![permission(vec![wit::Verb::List], &["admin"])], ..valid() };
        let err = Manifest::try_from(m).expect_err("list cannot be limited by name");
        assert_eq!(err.to_string(), "permissions[0]: list cannot be limited to resource names");
        let m = wit::ControllerManifest { permissions: vec![permission(vec![wit::Verb::Get], &["a?b"])], ..valid() };
        assert!(matches!(Manifest::try_from(m), Err(Error::Permission { index: 0, .. })));
    }

    #[test]
    fn numbers_out_of_range_are_rejected_naming_the_field() {
        let m = wit::ControllerManifest { max_concurrency: u32::MAX, ..valid() };
        let err = Manifest::try_from(m).expect_err("too many workers");
        assert_eq!(err.to_string(), "max-concurrency: 4294967295 is out of range (allowed: 0..=64)");
        let m = wit::ControllerManifest { max_concurrency: 64, ..valid() };
        assert_eq!(Manifest::try_from(m).expect("the maximum").max_concurrency, 64);
        let m = wit::ControllerManifest { resync_seconds: Some(u32::MAX), ..valid() };
        assert!(matches!(Manifest::try_from(m), Err(Error::Range { field: "resync-seconds", .. })));
        let many = (0..65).map(|_| valid().owns[0].clone()).collect();
        let m = wit::ControllerManifest { owns: many, ..valid() };
        assert!(matches!(Manifest::try_from(m), Err(Error::Range { field: "owns", value: 65, .. })));
    }

    #[test]
    fn owned_kinds_take_a_selector_and_a_scope() {
        let owned = wit::Owned {
            kind: gvk("", "v1", "ConfigMap"),
            label_selector: Some("capstan.dev/tenant".into()),
            scope: Some(wit::Scope::Cluster),
        };
        let m = Manifest::try_from(wit::ControllerManifest { owns: vec![owned.clone()], ..valid() }).expect("valid");
        assert_eq!(m.owns[0].effective_scope(), Scope::Cluster);
        assert!(m.owns[0].selects(Some(&serde_json::json!({"capstan.dev/tenant": "acme"}))));
        assert!(!m.owns[0].selects(None));
        let broken = wit::Owned { label_selector: Some("a in (".into()), ..owned };
        let err = Manifest::try_from(wit::ControllerManifest { owns: vec![broken], ..valid() }).expect_err("bad");
        assert!(err.to_string().starts_with("owns[0]: invalid label selector"), "{err}");
    }

    #[test]
    fn reference_mappings_need_real_label_keys() {
        let watch = |name: wit::FieldRef| wit::Watch {
            kind: gvk("", "v1", "Namespace"),
            mapping: wit::WatchMapping::Reference(wit::Reference { name, namespace: None }),
            label_selector: None,
        };
        let ok = wit::ControllerManifest {
            watches: vec![watch(wit::FieldRef::Label("capstan.dev/tenant".into()))],
            ..valid()
        };
        assert!(matches!(
            Manifest::try_from(ok).expect("valid").watches[0].mapping,
            Mapping::Reference(Reference { name: FieldRef::Label(_), namespace: None })
        ));
        let bad = wit::ControllerManifest { watches: vec![watch(wit::FieldRef::Annotation("a b".into()))], ..valid() };
        assert!(matches!(Manifest::try_from(bad), Err(Error::Watch { index: 0, .. })));
    }

    #[test]
    fn a_manifest_of_contract_0_1_0_converts_with_new_fields_at_their_defaults() {
        let old = wit_v0_1::ControllerManifest {
            name: "greeter".into(),
            primary: wit_v0_1::GroupVersionKind {
                group: "examples.capstan.dev".into(),
                version: "v1alpha1".into(),
                kind: "Greeting".into(),
            },
            crds: vec![],
            owns: vec![wit_v0_1::GroupVersionKind {
                group: String::new(),
                version: "v1".into(),
                kind: "ConfigMap".into(),
            }],
            watches: vec![],
            finalizer: None,
            permissions: vec![],
            resync_seconds: None,
            max_concurrency: 2,
        };
        let m = Manifest::try_from(wit::ControllerManifest::from(old)).expect("valid");
        assert_eq!(m.owns, vec![Owned::kind(Gvk::new("", "v1", "ConfigMap"))]);
        assert_eq!(m.max_concurrency, 2);
    }

    #[test]
    fn a_0_1_0_tenant_is_refused_naming_the_rebuild_and_the_scope_to_declare() {
        let kind = |group: &str, version: &str, kind: &str| wit_v0_1::GroupVersionKind {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
        };
        let crd = serde_json::json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "tenants.examples.capstan.dev"},
            "spec": {"group": "examples.capstan.dev", "names": {"plural": "tenants", "kind": "Tenant"},
                     "scope": "Cluster", "versions": [{"name": "v1alpha1", "served": true, "storage": true}]},
        });
        // What a 0.1.0 Tenant could declare: bare owned kinds, no bind.
        let old = wit_v0_1::ControllerManifest {
            name: "tenant".into(),
            primary: kind("examples.capstan.dev", "v1alpha1", "Tenant"),
            crds: vec![serde_json::to_vec(&crd).expect("JSON")],
            owns: vec![kind("", "v1", "Namespace"), kind("", "v1", "ResourceQuota")],
            watches: vec![],
            finalizer: None,
            permissions: vec![],
            resync_seconds: None,
            max_concurrency: 1,
        };
        let err = Manifest::try_from(wit::ControllerManifest::from(old)).expect_err("every quota would be refused");
        assert!(matches!(&err, Error::Unwritable(u) if u.index == 1), "{err:?}");
        let text = err.for_contract("0.1.0").to_string();
        assert!(
            text.starts_with("owns[1]: controller tenant could write no v1/ResourceQuota child: it is namespaced"),
            "{text}"
        );
        assert!(
            text.contains(
                "contract 0.1.0 cannot declare that: rebuild the component against contract 0.2.0 or later \
                           and give the owned kind a scope"
            ),
            "{text}"
        );
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
