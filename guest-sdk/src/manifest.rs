//! What a controller declares: the [`Manifest`] builder.

use std::time::Duration;

use kube::Resource;

use crate::wit::capstan::operator::types as wit;

/// The group, version and kind of a kube `Resource` type.
pub(crate) fn gvk_of<K: Resource<DynamicType = ()>>() -> wit::GroupVersionKind {
    wit::GroupVersionKind {
        group: K::group(&()).into_owned(),
        version: K::version(&()).into_owned(),
        kind: K::kind(&()).into_owned(),
    }
}

/// A Kubernetes API verb, as in RBAC rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    /// Read one object.
    Get,
    /// Read many objects.
    List,
    /// Watch for changes.
    Watch,
    /// Create objects.
    Create,
    /// Replace objects.
    Update,
    /// Patch objects, including server-side apply.
    Patch,
    /// Delete objects.
    Delete,
}

impl Verb {
    /// Every verb.
    pub const ALL: [Verb; 7] =
        [Verb::Get, Verb::List, Verb::Watch, Verb::Create, Verb::Update, Verb::Patch, Verb::Delete];
    /// The read-only verbs: get, list, watch.
    pub const READ: [Verb; 3] = [Verb::Get, Verb::List, Verb::Watch];
}

impl From<Verb> for wit::Verb {
    fn from(v: Verb) -> Self {
        match v {
            Verb::Get => Self::Get,
            Verb::List => Self::List,
            Verb::Watch => Self::Watch,
            Verb::Create => Self::Create,
            Verb::Update => Self::Update,
            Verb::Patch => Self::Patch,
            Verb::Delete => Self::Delete,
        }
    }
}

/// Where a permission applies.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum Scope {
    /// Every namespace, and cluster-scoped kinds.
    Cluster,
    /// Only the namespace of the object being reconciled (the default).
    #[default]
    OwnNamespace,
    /// Only these namespaces.
    Namespaces(Vec<String>),
}

/// One permission: verbs on a kind, within a scope.
///
/// ```
/// use capstan_guest::{Permission, Scope, Verb};
/// use capstan_guest::k8s_openapi::api::core::v1::Secret;
///
/// let read_secrets = Permission::new::<Secret>(&Verb::READ).scope(Scope::OwnNamespace);
/// ```
#[derive(Clone, Debug)]
pub struct Permission(wit::Permission);

impl Permission {
    /// `verbs` on kind `K`.
    pub fn new<K: Resource<DynamicType = ()>>(verbs: &[Verb]) -> Self {
        Self::for_kind(&K::group(&()), &K::kind(&()), verbs)
    }

    /// `verbs` on a kind named by group and kind (`*` for all).
    pub fn for_kind(group: &str, kind: &str, verbs: &[Verb]) -> Self {
        Self(wit::Permission {
            group: group.to_owned(),
            kind: kind.to_owned(),
            verbs: verbs.iter().map(|v| (*v).into()).collect(),
            scope: wit::Scope::OwnNamespace,
            status: false,
        })
    }

    /// Sets where the permission applies (default: the reconciled object's
    /// namespace).
    #[must_use]
    pub fn scope(mut self, scope: Scope) -> Self {
        self.0.scope = match scope {
            Scope::Cluster => wit::Scope::Cluster,
            Scope::OwnNamespace => wit::Scope::OwnNamespace,
            Scope::Namespaces(n) => wit::Scope::Namespaces(n),
        };
        self
    }

    /// Also allows the `status` subresource with the same verbs.
    #[must_use]
    pub fn with_status(mut self) -> Self {
        self.0.status = true;
        self
    }
}

/// How a change to a watched object maps to primary objects to reconcile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mapping {
    /// Trigger nothing: cache the kind for reads.
    None,
    /// The primary object in the same namespace named by this label's value.
    Label(String),
    /// The primary object in the same namespace with the same name.
    SameName,
    /// Every primary object in the same namespace.
    Namespace,
}

/// A kind watched besides the primary and owned kinds.
#[derive(Clone, Debug)]
pub struct Watch(wit::Watch);

impl Watch {
    /// Watches kind `K`; a change triggers the primary objects `mapping`
    /// names. Read access (get, list, watch) is granted with it.
    pub fn new<K: Resource<DynamicType = ()>>(mapping: Mapping) -> Self {
        Self(wit::Watch {
            kind: gvk_of::<K>(),
            mapping: match mapping {
                Mapping::None => wit::WatchMapping::None,
                Mapping::Label(l) => wit::WatchMapping::Label(l),
                Mapping::SameName => wit::WatchMapping::SameName,
                Mapping::Namespace => wit::WatchMapping::Namespace,
            },
            label_selector: None,
        })
    }

    /// Only watches objects matching a label selector.
    #[must_use]
    pub fn label_selector(mut self, selector: &str) -> Self {
        self.0.label_selector = Some(selector.to_owned());
        self
    }
}

/// What a controller declares about itself; built in
/// [`Controller::manifest`](crate::Controller::manifest).
///
/// ```
/// use capstan_guest::{Manifest, Mapping, Watch};
/// use capstan_guest::k8s_openapi::api::{apps::v1::Deployment, core::v1::{ConfigMap, Secret}};
/// use std::time::Duration;
///
/// let manifest = Manifest::new("web")
///     .primary::<Deployment>()
///     .owns::<ConfigMap>()
///     .watches(Watch::new::<Secret>(Mapping::Label("app".into())))
///     .finalizer("example.com/cleanup")
///     .resync(Duration::from_secs(600))
///     .max_concurrency(4);
/// ```
#[derive(Clone, Debug)]
pub struct Manifest(wit::ControllerManifest);

impl Manifest {
    /// A manifest for a controller named `name` (a DNS-1123 label, unique
    /// in one host). Set the primary kind with [`primary`](Self::primary).
    pub fn new(name: &str) -> Self {
        Self(wit::ControllerManifest {
            name: name.to_owned(),
            primary: wit::GroupVersionKind { group: String::new(), version: String::new(), kind: String::new() },
            crds: Vec::new(),
            owns: Vec::new(),
            watches: Vec::new(),
            finalizer: None,
            permissions: Vec::new(),
            resync_seconds: None,
            max_concurrency: 1,
        })
    }

    /// The kind this controller reconciles.
    #[must_use]
    pub fn primary<K: Resource<DynamicType = ()>>(mut self) -> Self {
        self.0.primary = gvk_of::<K>();
        self
    }

    /// A CustomResourceDefinition this controller defines, e.g.
    /// `Greeting::crd()` from kube's `CustomResourceExt`. The host can
    /// install it (`capstan run --install-crds`) and generates manifests
    /// from it (`capstan gen crd`).
    #[must_use]
    pub fn crd(mut self, crd: &impl serde::Serialize) -> Self {
        self.0.crds.push(serde_json::to_vec(crd).expect("a CRD always serializes to JSON"));
        self
    }

    /// A kind of child objects this controller creates.
    #[must_use]
    pub fn owns<K: Resource<DynamicType = ()>>(mut self) -> Self {
        self.0.owns.push(gvk_of::<K>());
        self
    }

    /// Another kind this controller reads or reacts to.
    #[must_use]
    pub fn watches(mut self, watch: Watch) -> Self {
        self.0.watches.push(watch.0);
        self
    }

    /// A finalizer the host adds to primary objects, so that `delete` is
    /// delivered before they go away. Use a domain-qualified name, e.g.
    /// `example.com/cleanup`.
    #[must_use]
    pub fn finalizer(mut self, name: &str) -> Self {
        self.0.finalizer = Some(name.to_owned());
        self
    }

    /// A permission beyond those the primary, owned and watched kinds
    /// imply.
    #[must_use]
    pub fn permission(mut self, permission: Permission) -> Self {
        self.0.permissions.push(permission.0);
        self
    }

    /// Reconcile every object at least this often (rounded up to seconds).
    #[must_use]
    pub fn resync(mut self, every: Duration) -> Self {
        let secs = every.as_secs() + u64::from(every.subsec_nanos() > 0);
        self.0.resync_seconds = Some(u32::try_from(secs).unwrap_or(u32::MAX));
        self
    }

    /// At most `n` reconciles in flight at once (minimum 1, the default).
    #[must_use]
    pub fn max_concurrency(mut self, n: u32) -> Self {
        self.0.max_concurrency = n.max(1);
        self
    }

    #[doc(hidden)]
    pub fn into_wit(self) -> wit::ControllerManifest {
        self.0
    }
}
