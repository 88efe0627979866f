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
    /// Bind a Role or ClusterRole in a binding without holding its
    /// permissions. Declare it on `ClusterRole` / `Role` (group
    /// `rbac.authorization.k8s.io`), limited with [`Permission::names`]:
    /// the host refuses a RoleBinding child whose role the controller may
    /// not bind.
    Bind,
    /// Create or update a Role or ClusterRole with permissions one does not
    /// hold.
    Escalate,
}

impl Verb {
    /// Every verb of an API call (not `bind` or `escalate`, which are
    /// asked for by name).
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
            Verb::Bind => Self::Bind,
            Verb::Escalate => Self::Escalate,
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

impl From<Scope> for wit::Scope {
    fn from(scope: Scope) -> Self {
        match scope {
            Scope::Cluster => wit::Scope::Cluster,
            Scope::OwnNamespace => wit::Scope::OwnNamespace,
            Scope::Namespaces(n) => wit::Scope::Namespaces(n),
        }
    }
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
            resource_names: Vec::new(),
        })
    }

    /// Only the objects with these names (RBAC `resourceNames`). Not for
    /// `list`, `watch` or `create`, which RBAC cannot limit by name.
    ///
    /// ```
    /// use capstan_guest::{Permission, Scope, Verb};
    /// use capstan_guest::k8s_openapi::api::rbac::v1::ClusterRole;
    /// let bind_admin = Permission::new::<ClusterRole>(&[Verb::Bind]).scope(Scope::Cluster).names(&["admin"]);
    /// ```
    #[must_use]
    pub fn names(mut self, names: &[&str]) -> Self {
        self.0.resource_names = names.iter().map(|n| (*n).to_owned()).collect();
        self
    }

    /// Sets where the permission applies (default: the reconciled object's
    /// namespace).
    #[must_use]
    pub fn scope(mut self, scope: Scope) -> Self {
        self.0.scope = scope.into();
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
    /// The primary object whose name (and namespace, for a namespaced
    /// primary) are read from the watched object: maps any object,
    /// namespaced or not, to any primary, namespaced or not.
    Reference {
        /// Where the primary's name is read.
        name: Field,
        /// Where a namespaced primary's namespace is read; `None`: the
        /// watched object's own namespace.
        namespace: Option<Field>,
    },
    /// Every primary object.
    All,
}

/// Where a [`Mapping::Reference`] reads a value on a watched object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Field {
    /// The object's name.
    Name,
    /// The object's namespace.
    Namespace,
    /// The value of this label.
    Label(String),
    /// The value of this annotation.
    Annotation(String),
}

impl From<Field> for wit::FieldRef {
    fn from(f: Field) -> Self {
        match f {
            Field::Name => Self::Name,
            Field::Namespace => Self::Namespace,
            Field::Label(l) => Self::Label(l),
            Field::Annotation(a) => Self::Annotation(a),
        }
    }
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
                Mapping::Reference { name, namespace } => wit::WatchMapping::Reference(wit::Reference {
                    name: name.into(),
                    namespace: namespace.map(Into::into),
                }),
                Mapping::All => wit::WatchMapping::All,
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

/// A kind of children, with what limits it: [`Manifest::owns_with`].
///
/// ```
/// use capstan_guest::{Manifest, Owns, Scope};
/// use capstan_guest::k8s_openapi::api::core::v1::{ConfigMap, Namespace};
///
/// // A cluster-scoped primary that makes a Namespace and ConfigMaps in it:
/// // the ConfigMaps need a scope, and a selector keeps the cache small.
/// let m = Manifest::new("tenant")
///     .owns::<Namespace>()
///     .owns_with(Owns::new::<ConfigMap>().scope(Scope::Cluster).label_selector("capstan.dev/tenant"));
/// ```
#[derive(Clone, Debug)]
pub struct Owns(wit::Owned);

impl Owns {
    /// Children of kind `K`, in the default scope: the reconciled object's
    /// namespace (cluster-scoped children only, for a cluster-scoped
    /// primary).
    pub fn new<K: Resource<DynamicType = ()>>() -> Self {
        Self(wit::Owned { kind: gvk_of::<K>(), label_selector: None, scope: None })
    }

    /// Only children matching this label selector are watched, cached and
    /// pruned; every child an outcome lists must carry matching labels.
    #[must_use]
    pub fn label_selector(mut self, selector: &str) -> Self {
        self.0.label_selector = Some(selector.to_owned());
        self
    }

    /// Where children may be written: for a cluster-scoped primary with
    /// namespaced children, [`Scope::Cluster`] or [`Scope::Namespaces`]. A
    /// namespaced primary's children always live in its namespace.
    #[must_use]
    pub fn scope(mut self, scope: Scope) -> Self {
        self.0.scope = Some(scope.into());
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
pub struct Manifest(wit::ControllerManifest, wit::Roles, Vec<String>, Vec<String>, Option<wit::Fleet>);

/// The clusters of a fleet controller (contract 0.4.0), for
/// [`Manifest::fleet`]: it reconciles the primary objects of its *home*
/// cluster, places children in its *member* clusters with
/// [`Outcome::child_in`](crate::Outcome::child_in) and reads there with
/// [`Context::api_in`](crate::Context::api_in).
///
/// ```
/// use capstan_guest::Fleet;
///
/// let every_member = Fleet::home("default");
/// let two = Fleet::home("default").member("west").member("east");
/// ```
#[derive(Clone, Debug)]
pub struct Fleet(wit::Fleet);

impl Fleet {
    /// A fleet whose primary objects live in the cluster named `home`
    /// (`default`: the host's own) and whose members are every other
    /// cluster the host serves, unless some are named with
    /// [`member`](Self::member).
    pub fn home(home: &str) -> Self {
        Self(wit::Fleet { home: home.to_owned(), members: Vec::new() })
    }

    /// A member cluster, by the name the host engaged it by; call once per
    /// member. Children in any cluster not named are refused.
    #[must_use]
    pub fn member(mut self, name: &str) -> Self {
        self.0.members.push(name.to_owned());
        self
    }
}

impl Manifest {
    /// A manifest for a controller named `name` (a DNS-1123 label, unique
    /// in one host). Set the primary kind with [`primary`](Self::primary).
    pub fn new(name: &str) -> Self {
        Self(
            wit::ControllerManifest {
                name: name.to_owned(),
                primary: wit::GroupVersionKind { group: String::new(), version: String::new(), kind: String::new() },
                crds: Vec::new(),
                owns: Vec::new(),
                watches: Vec::new(),
                finalizer: None,
                permissions: Vec::new(),
                resync_seconds: None,
                max_concurrency: 1,
            },
            wit::Roles { reconcile: false, admission: Vec::new(), conversion: Vec::new(), scheduler: None },
            Vec::new(),
            Vec::new(),
            None,
        )
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
    pub fn owns<K: Resource<DynamicType = ()>>(self) -> Self {
        self.owns_with(Owns::new::<K>())
    }

    /// Children of a kind, with a label selector or a scope (see [`Owns`]).
    #[must_use]
    pub fn owns_with(mut self, owns: Owns) -> Self {
        self.0.owns.push(owns.0);
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

    /// An admission webhook this component serves (see
    /// [`admission`](crate::admission)).
    #[must_use]
    pub fn webhook(mut self, webhook: crate::admission::Webhook) -> Self {
        self.1.admission.push(webhook.0);
        self
    }

    /// This component converts `K`'s CRD between its versions (see
    /// [`conversion`](crate::conversion)); the CRD must be one of
    /// [`crd`](Self::crd), with two or more versions.
    #[must_use]
    pub fn converts<K: Resource<DynamicType = ()>>(mut self) -> Self {
        let gvk = gvk_of::<K>();
        self.1.conversion.push(wit::GroupKind { group: gvk.group, kind: gvk.kind });
        self
    }

    /// An origin this component may call over HTTP(S) (through
    /// `wasi:http/outgoing-handler`, contract 0.4.0); every other request
    /// is refused before a connection is made. Call once per origin.
    ///
    /// An origin is `SCHEME://HOST[:PORT]`: scheme `http` or `https`; host
    /// a DNS name, `*.` and a domain for any name below it, or an IP
    /// address (IPv6 in brackets); port a number or a range `LOW-HIGH`,
    /// the scheme's default when left out. No path, query, user or bare
    /// `*`. The host checks them when it loads the component.
    ///
    /// ```
    /// use capstan_guest::Manifest;
    ///
    /// let manifest = Manifest::new("notifier")
    ///     .egress("https://hooks.slack.com")
    ///     .egress("https://*.example.com")
    ///     .egress("http://alertmanager.monitoring.svc:9093");
    /// ```
    #[must_use]
    pub fn egress(mut self, origin: &str) -> Self {
        self.2.push(origin.to_owned());
        self
    }

    /// Runs this component in the cluster named `name` (the name the host
    /// engaged it by: `default` for its own) and no cluster left unnamed;
    /// call once per cluster. Without it, a uniform controller runs in
    /// every cluster the host serves (contract 0.4.0; see
    /// docs/multicluster.md).
    #[must_use]
    pub fn cluster(mut self, name: &str) -> Self {
        self.3.push(name.to_owned());
        self
    }

    /// Makes this component a fleet controller (contract 0.4.0): it
    /// reconciles the primary objects of `fleet`'s home cluster only, and
    /// its outcomes place children in the members
    /// ([`Outcome::child_in`](crate::Outcome::child_in)), which the host
    /// marks, prunes and deletes with their owner.
    ///
    /// ```
    /// use capstan_guest::{Fleet, Manifest};
    /// use capstan_guest::k8s_openapi::api::core::v1::ConfigMap;
    ///
    /// let manifest = Manifest::new("spreader").primary::<ConfigMap>().owns::<ConfigMap>().fleet(Fleet::home("default"));
    /// ```
    #[must_use]
    pub fn fleet(mut self, fleet: Fleet) -> Self {
        self.4 = Some(fleet.0);
        self
    }

    /// This component schedules the Pods whose `spec.schedulerName` is
    /// `name` (see [`scheduler`](crate::scheduler)).
    #[must_use]
    pub fn scheduler(mut self, name: &str) -> Self {
        self.1.scheduler = Some(wit::SchedulerManifest { name: name.to_owned() });
        self
    }

    /// The contract's record. `reconcile` says whether the component serves
    /// the controller role. Without a primary kind, the component is about
    /// `v1` `Pod` when it schedules, else about the first kind its
    /// webhooks check or the first CRD it converts.
    #[doc(hidden)]
    pub fn into_wit(mut self, reconcile: bool) -> wit::ComponentManifest {
        self.1.reconcile = reconcile;
        if self.0.primary.kind.is_empty() {
            if self.1.scheduler.is_some() {
                self.0.primary = gvk_of::<k8s_openapi::api::core::v1::Pod>();
            } else if let Some(kind) = self.1.admission.iter().find_map(|w| w.kinds.first()) {
                self.0.primary = kind.clone();
            } else if let Some(gk) = self.1.conversion.first() {
                let version = self
                    .0
                    .crds
                    .iter()
                    .filter_map(|c| serde_json::from_slice::<serde_json::Value>(c).ok())
                    .find(|c| c.pointer("/spec/names/kind").and_then(|k| k.as_str()) == Some(gk.kind.as_str()))
                    .and_then(|c| c.pointer("/spec/versions/0/name").and_then(|v| v.as_str()).map(str::to_owned))
                    .unwrap_or_default();
                self.0.primary = wit::GroupVersionKind { group: gk.group.clone(), version, kind: gk.kind.clone() };
            }
        }
        wit::ComponentManifest { controller: self.0, roles: self.1, egress: self.2, clusters: self.3, fleet: self.4 }
    }
}
