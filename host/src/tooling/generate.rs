//! Deployment manifests generated from components: the CRDs they define,
//! the RBAC they need and the host's Deployment, as multi-document YAML,
//! as files, or as a kustomize base or overlay (`capstan gen`).
//!
//! The single source of truth is each component's own [`Manifest`]: its
//! CRDs as declared, and RBAC rules derived from [`Grants::from_manifest`]
//! by [`crate::policy`], the same rules the host checks on every call and
//! reviews before it runs a component.
//!
//! ```no_run
//! # async fn example(loader: capstan_host::runtime::component::Loader) -> Result<(), Box<dyn std::error::Error>> {
//! use capstan_host::tooling::generate::{self, Component, Options};
//!
//! let wasm = std::fs::read("greeter.wasm")?;
//! let loaded = loader.load_bytes("greeter.wasm".as_ref(), wasm.clone()).await?;
//! let greeter = Component::new((*loaded.manifest).clone(), wasm);
//! let options = Options::default().namespace("operators");
//! let objects = generate::manifest(&[greeter], &options)?;
//! print!("{}", generate::to_yaml(&objects, "generated for the docs")?);
//! # Ok(()) }
//! ```
//!
//! # What is generated
//!
//! | object | name | notes |
//! |---|---|---|
//! | Namespace | `--namespace` (`capstan-system`) | enforces the `restricted` Pod Security Standard |
//! | CustomResourceDefinition | as declared | every CRD of every component, once, by name |
//! | ServiceAccount | `--name` (`capstan`) | the host runs as it |
//! | ClusterRole + binding | `capstan` | the host's own needs: Events, reading CRDs |
//! | Role + binding | `capstan`, in the host's namespace | Leases (leader election) |
//! | ClusterRole + binding | `capstan-<controller>` | one per component: see [`rbac`](self#rbac) |
//! | Role + binding | `capstan-<controller>` | in each namespace a permission is limited to, and each watched namespace |
//! | ConfigMap | `capstan-components` | the components: `<controller>.oci` (a reference) or `<controller>.wasm.gz` each |
//! | NetworkPolicy | `capstan` | only with [`network_policy`](Options::network_policy): see [`network`] |
//! | Deployment | `capstan` | one replica of `capstan run --components /components` |
//! | Service | `capstan-webhooks` | only with webhooks: port 443 to the host's port 9443 |
//! | Validating/MutatingWebhookConfiguration | `capstan-<controller>` | only with webhooks; the host fills in the `caBundle` |
//!
//! # RBAC
//!
//! Each rule of [`Grants::from_manifest`] becomes a rule on the kind's
//! resource: the CRD's `spec.names.plural` for kinds a given component
//! defines, else a table of the built-in kinds, else a `--plural`
//! override; an unknown kind is an error, never a guess. A grant that
//! includes status adds `<plural>/status` with the verbs a status
//! subresource serves (get, update, patch). A grant limited to the
//! reconciled object's namespace becomes cluster-wide (the host reconciles
//! in every namespace); one limited to named namespaces becomes Roles
//! there. On top, what the host does for the component: primary kind get,
//! list, watch, update, patch (finalizers) and status patch; owned kinds
//! every verb (server-side apply and pruning); watched kinds get, list,
//! watch; with `install_crds`, create of CRDs and patch of its own CRDs by
//! name. Rules are merged per group + resource and sorted; nothing is a
//! wildcard unless a component declared one.
//!
//! With [watched namespaces](Options::watch_namespace) (the host run with
//! `-n`), every rule on a namespaced resource goes into a Role and binding
//! in each watched namespace instead of the ClusterRole, the host's
//! Events rule into Roles in the watched namespaces and `default` (where
//! Events about cluster-scoped objects land); the ClusterRoles keep only
//! cluster-scoped resources (CRDs, Namespaces, cluster-scoped CRD kinds)
//! and resources whose scope is not known (a `--plural` override, a
//! wildcard). Guests then read namespaced objects only in the watched
//! namespaces (and where a permission names a namespace).
//!
//! # Component delivery
//!
//! A ConfigMap mounted at `/components` carries each component, either by
//! reference or whole:
//!
//! - a component given with a [reference](Component::reference) (pushed
//!   with `capstan push`) is a `<controller>.oci` key holding the
//!   `oci://` reference: the host pulls it, verifies it and follows its
//!   tag (see [`crate::serve::follow`]). Any size, any language;
//! - any other is a gzipped `<controller>.wasm.gz` key in `binaryData`
//!   (the host loads it as it is).
//!
//! `kubectl apply` of a new ConfigMap hot-loads the new versions. The
//! ConfigMap must fit what applies it: client-side `kubectl apply -f`
//! copies the whole object into its last-applied annotation, which holds
//! [`LAST_APPLIED_LIMIT`] (256 KiB); with
//! [`server_side`](Options::server_side) (`kubectl apply --server-side`), a
//! ConfigMap holds [`CONFIG_MAP_LIMIT`] (1 MiB). Past that,
//! [`Error::TooLargeForConfigMap`]. The Rust greeter (1.9 MB, 0.46 MB
//! gzipped) fits server-side only; a Python or JavaScript component (12 to
//! 19 MB) goes by reference, or into an image that holds it at
//! `/components` ([`Delivery::Image`]).

mod deployment;
mod kustomize;
pub mod network;
mod rbac;
pub mod sample;
pub mod trace;
mod webhooks;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value;

pub use deployment::{
    CACHE_DIR, COMPONENTS_DIR, CONFIG_MAP_LIMIT, HEALTH_PORT, LAST_APPLIED_LIMIT, REGISTRY_CREDENTIALS_DIR, RUN_AS,
};
pub use rbac::ADMISSION_ANNOTATION;
pub use webhooks::WEBHOOK_PORT;

/// A `--plural` value, now [`crate::policy::PluralOverride`]; re-exported
/// so `tooling::generate::PluralOverride` keeps working.
pub use crate::policy::PluralOverride;
/// The Kubernetes name rules, now [`crate::policy::names`]; re-exported so
/// `tooling::generate::names` keeps working.
pub use crate::policy::names;

use crate::manifest::Manifest;
use crate::policy::names::Rule;
use crate::policy::{self, Resources};
#[cfg(doc)]
use crate::runtime::grants::Grants;

/// The image of the host when none is given: a placeholder under the
/// reserved `.invalid` domain (RFC 2606), which never resolves. No host
/// image is published: build `deploy/Dockerfile`, push it where the
/// cluster pulls from, and pass its name ([`Options::image`], `--image`,
/// or `kustomize edit set image`).
pub const DEFAULT_IMAGE: &str = concat!("registry.invalid/capstan:", env!("CARGO_PKG_VERSION"));

/// Why manifests cannot be generated.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A name, a kind's plural or a `--plural` value is wrong (see
    /// [`policy::Error`]).
    #[error(transparent)]
    Policy(#[from] policy::Error),
    /// Two components declare the same controller name.
    #[error("two components are named {0:?}: controller names must be unique")]
    DuplicateController(String),
    /// Two components define the same CRD differently.
    #[error("crd {name} is defined differently by controllers {first} and {second}")]
    ConflictingCrd {
        /// The CRD's name.
        name: String,
        /// One controller.
        first: String,
        /// The other.
        second: String,
    },
    /// A CRD lacks something the output needs.
    #[error("crd {name}: {reason}")]
    Crd {
        /// The CRD's name.
        name: String,
        /// What is missing.
        reason: String,
    },
    /// The components do not fit into a ConfigMap.
    #[error(
        "the components ConfigMap would take {total} bytes ({}), more than {}: push the large components to a \
         registry (`capstan push FILE oci://REGISTRY/REPOSITORY:TAG`) and give the reference instead of the file, \
         or bake them into an image (--image IMAGE --components-in-image)",
        .sizes.join(", "),
        if *.server_side {
            format!("the {CONFIG_MAP_LIMIT} bytes (1 MiB) a ConfigMap holds")
        } else {
            format!(
                "the {LAST_APPLIED_LIMIT} bytes (256 KiB) the last-applied annotation of a client-side \
                 `kubectl apply` holds (--server-side, for `kubectl apply --server-side`, allows 1 MiB)"
            )
        }
    )]
    TooLargeForConfigMap {
        /// What counts against the limit, in bytes: the object as JSON
        /// (client-side apply) or its data (server-side).
        total: usize,
        /// `<controller> <n> bytes, <m> gzipped` for each component file.
        sizes: Vec<String>,
        /// Whether the limit is server-side apply's.
        server_side: bool,
    },
    /// A component reference does not parse.
    #[error("component {controller}: {error}")]
    Reference {
        /// The controller.
        controller: String,
        /// Why.
        error: crate::serve::oci::Error,
    },
    /// The image reference is empty or has whitespace.
    #[error("image {0:?} is not a valid image reference")]
    Image(String),
    /// `gen member-rbac` was given no fleet controller.
    #[error(
        "none of the components is a fleet controller: a uniform one needs the RBAC of `capstan gen rbac` in each cluster"
    )]
    NoFleet,
    /// An object could not be serialised.
    #[error("cannot serialise {what}: {reason}")]
    Serialise {
        /// What.
        what: String,
        /// The serialiser's reason.
        reason: String,
    },
    /// `--webhook-failure-policy` names a component or webhook the
    /// components do not have.
    #[error(transparent)]
    FailurePolicy(crate::serve::webhook::Error),
    /// The NetworkPolicy cannot be generated as asked.
    #[error(transparent)]
    NetworkPolicy(network::Error),
    /// An output file could not be written.
    #[error("{path}: cannot write: {error}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        error: std::io::Error,
    },
}

/// `Result` with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// One component as input: its validated manifest and, for the ConfigMap
/// delivery, its bytes.
#[derive(Clone, Debug)]
pub struct Component {
    /// What it declares.
    pub manifest: Manifest,
    /// The `.wasm` file's bytes (may be empty unless delivered by ConfigMap).
    pub wasm: Vec<u8>,
    /// Where the host pulls it from (`oci://…`), instead of carrying its
    /// bytes in the ConfigMap.
    pub reference: Option<String>,
}

impl Component {
    /// A component from its manifest (as [`Loader`](crate::runtime::component::Loader)
    /// reads it) and its bytes.
    pub fn new(manifest: Manifest, wasm: Vec<u8>) -> Self {
        Self { manifest, wasm, reference: None }
    }

    /// Delivers the component by `reference` (`oci://REGISTRY/REPOSITORY:TAG`
    /// or `…@sha256:DIGEST`, where `capstan push` put it): the ConfigMap
    /// names it, the host pulls it and follows its tag.
    #[must_use]
    pub fn reference(mut self, reference: impl Into<String>) -> Self {
        self.reference = Some(reference.into());
        self
    }
}

/// How the components reach the host's pod.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Delivery {
    /// In a ConfigMap (`<name>-components`) mounted at `/components`: at
    /// most 1 MiB in all. The default.
    #[default]
    ConfigMap,
    /// Already in the image, at `/components`.
    Image,
}

/// What to generate, beyond the components. Every default is documented on
/// its builder method.
#[derive(Clone, Debug)]
#[must_use]
pub struct Options {
    namespace: String,
    name: String,
    image: String,
    delivery: Delivery,
    install_crds: bool,
    skip_deployment: bool,
    plurals: Vec<PluralOverride>,
    watch_namespaces: Vec<String>,
    server_side: bool,
    registry_secret: Option<String>,
    failure_policies: crate::serve::webhook::policy::FailurePolicies,
    network_policy: Option<network::Policy>,
    traces: Option<trace::Traces>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            namespace: "capstan-system".to_owned(),
            name: "capstan".to_owned(),
            image: DEFAULT_IMAGE.to_owned(),
            delivery: Delivery::ConfigMap,
            install_crds: false,
            skip_deployment: false,
            plurals: Vec::new(),
            watch_namespaces: Vec::new(),
            server_side: false,
            registry_secret: None,
            failure_policies: crate::serve::webhook::policy::FailurePolicies::default(),
            network_policy: None,
            traces: None,
        }
    }
}

impl Options {
    /// The host's namespace. Default: `capstan-system`.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// The name of the host's ServiceAccount, ClusterRole, Deployment, and
    /// the prefix of the per-component roles and the components ConfigMap.
    /// Default: `capstan`.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// The host's image. Default: [`DEFAULT_IMAGE`].
    pub fn image(mut self, image: impl Into<String>) -> Self {
        self.image = image.into();
        self
    }

    /// How the components reach the pod. Default: [`Delivery::ConfigMap`].
    pub fn delivery(mut self, delivery: Delivery) -> Self {
        self.delivery = delivery;
        self
    }

    /// Lets the host create CRDs and patch the components' own CRDs.
    /// Default: false (install the CRDs with the manifest).
    pub fn install_crds(mut self, yes: bool) -> Self {
        self.install_crds = yes;
        self
    }

    /// Leaves out the Deployment and the components ConfigMap, to run the
    /// host outside the cluster. Default: false.
    pub fn skip_deployment(mut self, yes: bool) -> Self {
        self.skip_deployment = yes;
        self
    }

    /// Adds a plural for a kind no component defines. Default: none.
    pub fn plural(mut self, plural: PluralOverride) -> Self {
        self.plurals.push(plural);
        self
    }

    /// Adds a namespace the host watches (`capstan run -n`): the
    /// Deployment passes it to the host, and namespaced resources get a
    /// Role and binding in each watched namespace instead of a
    /// ClusterRole (see [RBAC](self#rbac)). Default: none, every
    /// namespace.
    pub fn watch_namespace(mut self, namespace: impl Into<String>) -> Self {
        self.watch_namespaces.push(namespace.into());
        self
    }

    /// The namespaces [`watch_namespace`](Self::watch_namespace) named.
    pub fn watched_namespaces(&self) -> &[String] {
        &self.watch_namespaces
    }

    /// The manifest is applied server-side (`kubectl apply --server-side`):
    /// the components ConfigMap may hold [`CONFIG_MAP_LIMIT`] (1 MiB)
    /// instead of what the last-applied annotation of a client-side apply
    /// holds ([`LAST_APPLIED_LIMIT`], 256 KiB). Default: false.
    pub fn server_side(mut self, yes: bool) -> Self {
        self.server_side = yes;
        self
    }

    /// The image pull secret (`kubernetes.io/dockerconfigjson`) in the
    /// host's namespace with the credentials of the registries components
    /// are pulled from: mounted at [`REGISTRY_CREDENTIALS_DIR`] as the
    /// host's docker config (`DOCKER_CONFIG`), and an `imagePullSecret` of
    /// the pod (for the host's image). Default: none, anonymous pulls.
    pub fn registry_secret(mut self, name: Option<String>) -> Self {
        self.registry_secret = name;
        self
    }

    /// The operator's `failurePolicy` of the components' admission
    /// webhooks (`--webhook-failure-policy`): written into the generated
    /// configurations and passed to the host, which installs them again
    /// at start. Each must name a component given, and a webhook it
    /// declares. Default: none, the declared policies.
    pub fn failure_policies(mut self, policies: crate::serve::webhook::policy::FailurePolicies) -> Self {
        self.failure_policies = policies;
        self
    }

    /// Adds a NetworkPolicy for the host's Pods (`network-policy.yaml`,
    /// `--network-policy`): ingress to the health port from anywhere and,
    /// when a component serves webhooks, to the webhook port from outside
    /// the Pod network only; egress to DNS, the API server, the
    /// components' declared egress origins and their registries. See
    /// [`network`] for the rules and their caveats. Left out with
    /// [`skip_deployment`](Self::skip_deployment) (no host Pod to select).
    /// Default: none.
    pub fn network_policy(mut self, policy: network::Policy) -> Self {
        self.network_policy = Some(policy);
        self
    }

    /// The collector the host in the cluster exports its traces to: the
    /// Deployment gets the `OTEL_*` variables `capstan run` reads, and the
    /// [NetworkPolicy](Self::network_policy) allows egress to the
    /// collector's port (its address if the URL gives one, else any).
    /// Default: none, the host exports no traces.
    pub fn traces(mut self, traces: trace::Traces) -> Self {
        self.traces = Some(traces);
        self
    }

    fn validate(&self) -> Result<()> {
        names::check("namespace", &self.namespace, Rule::Dns1123Label)?;
        for ns in &self.watch_namespaces {
            names::check("watched namespace", ns, Rule::Dns1123Label)?;
        }
        names::check("name", &self.name, Rule::Dns1123Label)?;
        names::check("name of the components ConfigMap", &deployment::config_map_name(self), Rule::Dns1123Subdomain)?;
        if self.image.is_empty() || self.image.chars().any(char::is_whitespace) {
            return Err(Error::Image(self.image.clone()));
        }
        if let Some(secret) = &self.registry_secret {
            names::check("registry secret", secret, Rule::Dns1123Subdomain)?;
        }
        Ok(())
    }

    /// Labels of every generated object; `controller` for a component's own.
    fn labels(&self, controller: Option<&str>) -> BTreeMap<String, String> {
        let mut labels = BTreeMap::from([
            ("app.kubernetes.io/name".to_owned(), self.name.clone()),
            ("app.kubernetes.io/part-of".to_owned(), "capstan".to_owned()),
        ]);
        if let Some(c) = controller {
            labels.insert("capstan.dev/controller".to_owned(), c.to_owned());
        }
        labels
    }

    /// `<name>-<controller>`, checked.
    fn component_object_name(&self, controller: &str) -> Result<String> {
        let name = format!("{}-{controller}", self.name);
        names::check(format!("role name for controller {controller}"), &name, Rule::Dns1123Subdomain)?;
        Ok(name)
    }
}

fn to_value<T: serde::Serialize + k8s_openapi::Resource>(object: &T) -> Result<Value> {
    serde_json::to_value(object).map_err(|e| Error::Serialise { what: format!("a {}", T::KIND), reason: e.to_string() })
}

/// Checks a CRD's names the way the API server will.
fn check_crd(crd: &Value) -> Result<String> {
    let name = crate::object::meta_str(crd, "name").unwrap_or_default().to_owned();
    let names = crd
        .pointer("/spec/names")
        .ok_or_else(|| Error::Crd { name: name.clone(), reason: "has no spec.names".into() })?;
    let field = |f: &str| names.get(f).and_then(Value::as_str);
    let what = |f: &str| format!("crd {name} spec.names.{f}");
    let plural = field("plural").unwrap_or_default();
    names::check(what("plural"), plural, Rule::Dns1035Label)?;
    names::check(what("kind"), field("kind").unwrap_or_default(), Rule::Kind)?;
    if let Some(v) = field("singular") {
        names::check(what("singular"), v, Rule::Dns1035Label)?;
    }
    if let Some(v) = field("listKind") {
        names::check(what("listKind"), v, Rule::Kind)?;
    }
    for list in ["shortNames", "categories"] {
        for v in names.get(list).and_then(Value::as_array).into_iter().flatten() {
            names::check(what(list), v.as_str().unwrap_or_default(), Rule::Dns1035Label)?;
        }
    }
    names::check("crd name", &name, Rule::Dns1123Subdomain)?;
    Ok(name)
}

/// Checks the components together: unique controller names, valid CRD
/// names, each CRD defined once or identically.
fn check_components(components: &[Component]) -> Result<BTreeMap<String, Value>> {
    let mut controllers = BTreeSet::new();
    let mut crds: BTreeMap<String, (Value, &str)> = BTreeMap::new();
    for c in components {
        let controller = c.manifest.name.as_str();
        if !controllers.insert(controller) {
            return Err(Error::DuplicateController(controller.to_owned()));
        }
        for crd in &c.manifest.crds {
            let name = check_crd(crd)?;
            match crds.get(&name) {
                Some((existing, _)) if existing == crd => {}
                Some((_, first)) => {
                    return Err(Error::ConflictingCrd {
                        name,
                        first: (*first).to_owned(),
                        second: controller.to_owned(),
                    });
                }
                None => {
                    crds.insert(name, (crd.clone(), controller));
                }
            }
        }
    }
    Ok(crds
        .into_iter()
        .map(|(name, (mut crd, controller))| {
            crd["metadata"]["annotations"][crate::serve::host::INSTALLED_BY] = Value::from(controller);
            (name, crd)
        })
        .collect())
}

/// The CRDs the components define, each once, sorted by name, each
/// marked as the first defining component's
/// ([`INSTALLED_BY`](crate::serve::host::INSTALLED_BY)), so that a host
/// sets the conversion of, or installs over, a CRD applied from this
/// output only for that component.
///
/// # Errors
///
/// [`Error::Policy`] for a CRD name Kubernetes would reject,
/// [`Error::ConflictingCrd`], [`Error::DuplicateController`].
pub fn crds(components: &[Component]) -> Result<Vec<Value>> {
    Ok(check_components(components)?.into_values().collect())
}

/// One output file: a path relative to the output folder and the objects
/// it holds.
#[derive(Clone, Debug, PartialEq)]
pub struct File {
    /// Relative path, e.g. `deployment.yaml`.
    pub path: PathBuf,
    /// Its objects, written as YAML documents.
    pub objects: Vec<Value>,
}

impl File {
    fn new(path: impl Into<PathBuf>, objects: Vec<Value>) -> Self {
        Self { path: path.into(), objects }
    }
}

/// The pieces of an installation, as files in apply order.
struct Parts {
    namespace: File,
    crds: Vec<File>,
    host_rbac: File,
    component_rbac: Vec<File>,
    config_map: Option<File>,
    network_policy: Option<File>,
    deployment: Option<File>,
    webhooks: Option<File>,
}

impl Parts {
    fn new(components: &[Component], options: &Options) -> Result<Self> {
        options.validate()?;
        let mut crds = check_components(components)?;
        let names: Vec<&str> = components.iter().map(|c| c.manifest.name.as_str()).collect();
        let policies = &options.failure_policies;
        policies.check_components(&names).map_err(Error::FailurePolicy)?;
        for c in components {
            policies.check(&c.manifest).map_err(Error::FailurePolicy)?;
        }
        let resources = Resources::new(crds.values(), &options.plurals);
        // Webhooks are served by the host in the cluster, behind a Service:
        // without the Deployment there is nothing to point them at.
        let serve_webhooks = !options.skip_deployment && components.iter().any(|c| webhooks::serves(&c.manifest));
        let webhooks = if serve_webhooks {
            let mut objects = vec![webhooks::service(options)];
            for c in components {
                let (configurations, conversions) = webhooks::objects(c, &resources, options)?;
                objects.extend(configurations);
                for (name, conversion) in conversions {
                    if let Some(crd) = crds.get_mut(&name) {
                        crd["spec"]["conversion"] = conversion;
                    }
                }
            }
            Some(File::new("webhooks.yaml", objects))
        } else {
            None
        };
        let crd_files = crds.into_iter().map(|(name, crd)| File::new(format!("crd-{name}.yaml"), vec![crd])).collect();
        let component_rbac = components
            .iter()
            .map(|c| {
                Ok(File::new(
                    format!("rbac-{}.yaml", c.manifest.name),
                    rbac::component_objects(c, &resources, options)?,
                ))
            })
            .collect::<Result<_>>()?;
        let carried = |c: &&Component| c.reference.is_some() || options.delivery == Delivery::ConfigMap;
        let deliver_config_map = !options.skip_deployment && components.iter().any(|c| carried(&c));
        let config_map = if deliver_config_map {
            let carried: Vec<Component> = components.iter().filter(carried).cloned().collect();
            Some(File::new("components.yaml", vec![deployment::components_config_map(&carried, options)?]))
        } else {
            None
        };
        let network_policy = match &options.network_policy {
            Some(policy) if !options.skip_deployment => Some(File::new(
                "network-policy.yaml",
                vec![network::network_policy(components, options, policy, serve_webhooks)?],
            )),
            _ => None,
        };
        let deployment = if options.skip_deployment {
            None
        } else {
            Some(File::new(
                "deployment.yaml",
                vec![deployment::deployment(options, deliver_config_map, serve_webhooks)?],
            ))
        };
        Ok(Self {
            namespace: File::new("namespace.yaml", vec![deployment::namespace(options)?]),
            crds: crd_files,
            host_rbac: File::new("rbac.yaml", rbac::host_objects(options)?),
            component_rbac,
            config_map,
            network_policy,
            deployment,
            webhooks,
        })
    }

    fn into_files(self) -> Vec<File> {
        let mut files = vec![self.namespace];
        files.extend(self.crds);
        files.push(self.host_rbac);
        files.extend(self.component_rbac);
        files.extend(self.config_map);
        files.extend(self.network_policy);
        files.extend(self.deployment);
        files.extend(self.webhooks);
        files
    }
}

/// The ServiceAccount, ClusterRoles, Roles and bindings the host and the
/// components need (see [RBAC](self#rbac)).
///
/// # Errors
///
/// [`Error::Policy`] for a kind with no known plural or a name Kubernetes
/// would reject, and the errors of [`crds`].
pub fn rbac(components: &[Component], options: &Options) -> Result<Vec<Value>> {
    let parts = Parts::new(components, &options.clone().skip_deployment(true))?;
    Ok(std::iter::once(parts.host_rbac).chain(parts.component_rbac).flat_map(|f| f.objects).collect())
}

/// What the host needs in a member cluster of each fleet controller among
/// `components`, for `subject` (whom the host's kubeconfig for that member
/// authenticates as): a ClusterRole `<name>-<controller>-member` with the
/// rules of [`policy::member_rules`](crate::policy) and a
/// ClusterRoleBinding of it to `subject`. Components that are not fleet
/// controllers are left out.
///
/// # Errors
///
/// [`Error::NoFleet`] when none is a fleet controller; the errors of
/// [`rbac`].
pub fn member_rbac(
    components: &[Component],
    options: &Options,
    subject: &k8s_openapi::api::rbac::v1::Subject,
) -> Result<Vec<Value>> {
    let crds = check_components(components)?;
    let resources = Resources::new(crds.values(), &options.plurals);
    let mut out = Vec::new();
    for component in components {
        out.extend(rbac::member_objects(component, &resources, options, subject)?);
    }
    if out.is_empty() {
        return Err(Error::NoFleet);
    }
    Ok(out)
}

/// Every object of an installation, in apply order: Namespace, CRDs, RBAC,
/// the components ConfigMap, the NetworkPolicy (if asked for) and the
/// Deployment.
///
/// # Errors
///
/// [`Error::TooLargeForConfigMap`], [`Error::Image`],
/// [`Error::NetworkPolicy`], and the errors of [`rbac`].
pub fn manifest(components: &[Component], options: &Options) -> Result<Vec<Value>> {
    Ok(files(components, options)?.into_iter().flat_map(|f| f.objects).collect())
}

/// The objects of [`manifest`], one file per piece: `namespace.yaml`,
/// `crd-<name>.yaml`, `rbac.yaml`, `rbac-<controller>.yaml`,
/// `components.yaml`, `network-policy.yaml`, `deployment.yaml`,
/// `webhooks.yaml`.
///
/// # Errors
///
/// As [`manifest`].
pub fn files(components: &[Component], options: &Options) -> Result<Vec<File>> {
    Ok(Parts::new(components, options)?.into_files())
}

/// A kustomize folder. Without `base`: a self-contained base, the
/// [`files`] and a `kustomization.yaml` listing them. With `base` (a path
/// relative to the output folder): an overlay that adds the components to
/// a base generated without them: their CRDs, their RBAC, the components
/// ConfigMap, the NetworkPolicy (generate the base without it: kustomize
/// refuses two of the same name), and `deployment-patch.yaml`, which sets
/// the image (and mounts the ConfigMap). The overlay's namespace and name
/// must be the base's.
///
/// # Errors
///
/// As [`manifest`].
pub fn kustomize(components: &[Component], options: &Options, base: Option<&str>) -> Result<Vec<File>> {
    let parts = Parts::new(components, options)?;
    Ok(match base {
        None => kustomize::base(parts.into_files()),
        Some(base) => {
            let patch = (!options.skip_deployment).then(|| {
                let with_config_map = parts.config_map.is_some();
                let with_webhooks = parts.webhooks.is_some();
                let patch = deployment::deployment_patch(options, with_config_map, with_webhooks);
                File::new("deployment-patch.yaml", vec![patch])
            });
            let resources = parts
                .crds
                .into_iter()
                .chain(parts.component_rbac)
                .chain(parts.config_map)
                .chain(parts.network_policy)
                .chain(parts.webhooks)
                .collect();
            kustomize::overlay(base, resources, patch)
        }
    })
}

/// The header comment of generated files: `command` is what generated
/// them.
pub fn header(command: &str, components: &[Component]) -> String {
    let from = if components.is_empty() {
        "no components".to_owned()
    } else {
        let names: Vec<&str> = components.iter().map(|c| c.manifest.name.as_str()).collect();
        let noun = if names.len() == 1 { "controller" } else { "controllers" };
        format!("{noun} {}", names.join(", "))
    };
    format!(
        "Generated by `{command}` (capstan {}) from {from}.\nDo not edit: change the components or the command \
         line and generate again.",
        env!("CARGO_PKG_VERSION")
    )
}

/// Renders objects as multi-document YAML after `header` (each of its
/// lines becomes a `#` comment).
///
/// # Errors
///
/// [`Error::Serialise`] if an object cannot be written as YAML.
pub fn to_yaml(objects: &[Value], header: &str) -> Result<String> {
    let mut out: String = header.lines().map(|l| format!("# {l}\n")).collect();
    for (i, object) in objects.iter().enumerate() {
        if i > 0 {
            out.push_str("---\n");
        }
        let yaml = serde_yaml_ng::to_string(object)
            .map_err(|e| Error::Serialise { what: "an object as YAML".into(), reason: e.to_string() })?;
        out.push_str(&yaml);
    }
    Ok(out)
}

/// Writes `files` under `dir` (created if missing), each with `header`.
/// Other files in `dir` are left alone.
///
/// # Errors
///
/// [`Error::Write`] naming the file, [`Error::Serialise`].
pub fn write(dir: &Path, files: &[File], header: &str) -> Result<()> {
    for file in files {
        let path = dir.join(&file.path);
        let yaml = to_yaml(&file.objects, header)?;
        let write_err = |error| Error::Write { path: path.clone(), error };
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(write_err)?;
        }
        std::fs::write(&path, yaml).map_err(write_err)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::object::Gvk;

    fn crd(plural: &str, kind: &str) -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{plural}.examples.capstan.dev")},
            "spec": {
                "group": "examples.capstan.dev",
                "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase(), "shortNames": ["gr"]},
                "scope": "Namespaced",
                "versions": [{"name": "v1alpha1", "served": true, "storage": true}],
            },
        })
    }

    fn component(name: &str, crds: Vec<Value>) -> Component {
        Component::new(
            Manifest {
                crds,
                owns: vec![crate::manifest::Owned::kind(Gvk::new("", "v1", "ConfigMap"))],
                ..Manifest::bare(name, Gvk::new("examples.capstan.dev", "v1alpha1", "Greeting"))
            },
            b"\0asm".to_vec(),
        )
    }

    fn kinds(objects: &[Value]) -> Vec<String> {
        objects
            .iter()
            .map(|o| format!("{}/{}", o["kind"].as_str().unwrap_or("?"), o["metadata"]["name"].as_str().unwrap_or("?")))
            .collect()
    }

    #[test]
    fn the_manifest_lists_objects_in_apply_order() {
        let objects = manifest(&[component("greeter", vec![crd("greetings", "Greeting")])], &Options::default())
            .expect("generates");
        assert_eq!(
            kinds(&objects),
            [
                "Namespace/capstan-system",
                "CustomResourceDefinition/greetings.examples.capstan.dev",
                "ServiceAccount/capstan",
                "ClusterRole/capstan",
                "ClusterRoleBinding/capstan",
                "Role/capstan",
                "RoleBinding/capstan",
                "ClusterRole/capstan-greeter",
                "ClusterRoleBinding/capstan-greeter",
                "ConfigMap/capstan-components",
                "Deployment/capstan",
            ]
        );
    }

    /// The greeter, serving a validating and a defaulting webhook on
    /// Greetings and converting them.
    fn webhook_component() -> Component {
        let webhook = |name: &str, mutating: bool| crate::manifest::AdmissionWebhook {
            name: name.into(),
            mutating,
            kinds: vec![Gvk::new("examples.capstan.dev", "v1alpha1", "Greeting")],
            operations: vec![crate::manifest::Operation::Create],
            ignore_failures: false,
            timeout: std::time::Duration::from_secs(5),
            side_effects_on_dry_run: false,
            namespace_selector: None,
            object_selector: None,
        };
        let mut c = component("greeter", vec![crd("greetings", "Greeting")]);
        c.manifest.roles.admission =
            vec![webhook("validate.examples.capstan.dev", false), webhook("default.examples.capstan.dev", true)];
        c.manifest.roles.conversion =
            vec![crate::manifest::GroupKind { group: "examples.capstan.dev".into(), kind: "Greeting".into() }];
        c
    }

    #[test]
    fn webhooks_are_served_behind_a_service_the_host_fills_the_ca_bundle_of() {
        let objects = manifest(&[webhook_component()], &Options::default()).expect("generates");
        let names = kinds(&objects);
        assert_eq!(
            names[names.len() - 4..],
            [
                "Deployment/capstan",
                "Service/capstan-webhooks",
                "ValidatingWebhookConfiguration/capstan-greeter",
                "MutatingWebhookConfiguration/capstan-greeter",
            ]
        );
        let find = |kind: &str| objects.iter().find(|o| o["kind"] == kind).expect(kind);
        let validating = &find("ValidatingWebhookConfiguration")["webhooks"][0];
        assert_eq!(
            validating["clientConfig"],
            json!({"service": {"namespace": "capstan-system", "name": "capstan-webhooks", "port": 443,
                               "path": "/admission/greeter/validate.examples.capstan.dev"}}),
            "no caBundle: the host writes it"
        );
        assert_eq!(validating["rules"][0]["resources"], json!(["greetings"]));
        let conversion = &find("CustomResourceDefinition")["spec"]["conversion"];
        assert_eq!(conversion["strategy"], "Webhook");
        assert_eq!(conversion["webhook"]["clientConfig"]["service"]["path"], "/convert/greeter");
        let service = find("Service");
        assert_eq!(service["spec"]["ports"][0]["targetPort"], "webhooks");
        assert_eq!(service["spec"]["selector"], json!({"app.kubernetes.io/name": "capstan"}));
        let container = &find("Deployment")["spec"]["template"]["spec"]["containers"][0];
        let args: Vec<&str> = container["args"].as_array().expect("args").iter().filter_map(Value::as_str).collect();
        assert!(
            args.windows(2).any(|w| w == ["--webhook-service", "capstan-system/capstan-webhooks:443"])
                && args.windows(2).any(|w| w == ["--webhook-listen", "0.0.0.0:9443"])
                && args.contains(&"--install-webhooks"),
            "{args:?}"
        );
        assert_eq!(container["ports"][1], json!({"name": "webhooks", "containerPort": 9443, "protocol": "TCP"}));
        // RBAC: get, patch and delete of its own configurations and CRD by
        // name, no create.
        let role = objects.iter().find(|o| o["kind"] == "ClusterRole" && o["metadata"]["name"] == "capstan-greeter");
        // What the webhooks reach, which no rule says, beside the rules.
        assert_eq!(
            role.expect("the greeter's role")["metadata"]["annotations"][ADMISSION_ANNOTATION],
            "validate.examples.capstan.dev (validating: read, veto) Greeting.examples.capstan.dev in every namespace \
             but kube-system, kube-public, kube-node-lease\ndefault.examples.capstan.dev (mutating: read, write, veto) \
             Greeting.examples.capstan.dev in every namespace but kube-system, kube-public, kube-node-lease"
        );
        let rules = role.expect("the greeter's role")["rules"].as_array().expect("rules").clone();
        let on = |resource: &str| -> Vec<Value> {
            rules.iter().filter(|r| r["resources"][0] == resource).cloned().collect()
        };
        for resource in ["validatingwebhookconfigurations", "mutatingwebhookconfigurations"] {
            assert_eq!(
                on(resource),
                [json!({"apiGroups": ["admissionregistration.k8s.io"], "resources": [resource],
                                               "resourceNames": ["capstan-greeter"], "verbs": ["get", "patch", "delete"]})]
            );
        }
        assert_eq!(on("customresourcedefinitions")[0]["resourceNames"], json!(["greetings.examples.capstan.dev"]));
    }

    #[test]
    fn the_operators_failure_policy_is_generated_and_passed_to_the_host() {
        use crate::serve::webhook::policy::FailurePolicies;
        let policies = |values: &[&str]| {
            FailurePolicies::new(values.iter().map(|v| v.parse().expect("valid"))).expect("no conflict")
        };
        let options = Options::default().failure_policies(policies(&["greeter/validate.examples.capstan.dev=Ignore"]));
        let objects = manifest(&[webhook_component()], &options).expect("generates");
        let find = |kind: &str| objects.iter().find(|o| o["kind"] == kind).expect(kind);
        assert_eq!(find("ValidatingWebhookConfiguration")["webhooks"][0]["failurePolicy"], "Ignore");
        assert_eq!(find("MutatingWebhookConfiguration")["webhooks"][0]["failurePolicy"], "Fail", "as declared");
        // The host installs them again at start: with the same choice.
        let args = &find("Deployment")["spec"]["template"]["spec"]["containers"][0]["args"];
        let args: Vec<&str> = args.as_array().expect("args").iter().filter_map(Value::as_str).collect();
        assert!(
            args.windows(2).any(|w| w == ["--webhook-failure-policy", "greeter/validate.examples.capstan.dev=Ignore"]),
            "{args:?}"
        );
        // A component or webhook that is not there is an error, not ignored.
        for (bad, says) in [
            ("other=Ignore", "names component other, not one of the components here (greeter)"),
            ("greeter/typo.examples.capstan.dev=Ignore", "it declares: validate.examples.capstan.dev"),
        ] {
            let err = manifest(&[webhook_component()], &Options::default().failure_policies(policies(&[bad])))
                .expect_err(bad);
            assert!(matches!(err, Error::FailurePolicy(_)) && err.to_string().contains(says), "{bad}: {err}");
        }
    }

    #[test]
    fn without_the_deployment_the_host_creates_the_webhook_configurations_itself() {
        let objects = rbac(&[webhook_component()], &Options::default()).expect("generates");
        assert!(kinds(&objects).iter().all(|k| !k.contains("Webhook") && !k.starts_with("Service/")));
        let role = objects.iter().find(|o| o["kind"] == "ClusterRole" && o["metadata"]["name"] == "capstan-greeter");
        let rules = role.expect("the greeter's role")["rules"].as_array().expect("rules").clone();
        let create = rules.iter().filter(|r| r["verbs"] == json!(["create"]) && r["resourceNames"].is_null());
        let resources: Vec<&Value> = create.map(|r| &r["resources"][0]).collect();
        assert_eq!(resources, ["mutatingwebhookconfigurations", "validatingwebhookconfigurations"]);
    }

    #[test]
    fn a_kustomize_overlay_adds_the_webhooks_and_patches_the_command_line() {
        let files = kustomize(&[webhook_component()], &Options::default(), Some("../base")).expect("generates");
        let paths: Vec<String> = files.iter().map(|f| f.path.display().to_string()).collect();
        assert!(paths.contains(&"webhooks.yaml".to_owned()), "{paths:?}");
        let patch = files.iter().find(|f| f.path == Path::new("deployment-patch.yaml")).expect("a patch");
        let container = &patch.objects[0]["spec"]["template"]["spec"]["containers"][0];
        assert!(container["args"].as_array().expect("args").contains(&json!("--install-webhooks")));
        assert_eq!(container["ports"][1]["name"], "webhooks");
    }

    #[test]
    fn skip_deployment_leaves_out_the_deployment_and_the_components() {
        let options = Options::default().skip_deployment(true);
        let objects =
            manifest(&[component("greeter", vec![crd("greetings", "Greeting")])], &options).expect("generates");
        assert!(kinds(&objects).iter().all(|k| !k.starts_with("Deployment/") && !k.starts_with("ConfigMap/")));
    }

    #[test]
    fn a_crd_defined_twice_alike_is_generated_once_and_differently_is_an_error() {
        let same =
            [component("a", vec![crd("greetings", "Greeting")]), component("b", vec![crd("greetings", "Greeting")])];
        let generated = crds(&same).expect("identical");
        assert_eq!(generated.len(), 1);
        assert_eq!(
            generated[0]["metadata"]["annotations"][crate::serve::host::INSTALLED_BY],
            json!("a"),
            "marked as the first defining component's, so a host applies over or converts it only for that one"
        );
        let mut other = crd("greetings", "Greeting");
        other["spec"]["scope"] = json!("Cluster");
        let clash = [component("a", vec![crd("greetings", "Greeting")]), component("b", vec![other])];
        assert!(matches!(crds(&clash), Err(Error::ConflictingCrd { .. })));
        let twins = [component("a", vec![]), component("a", vec![])];
        assert!(matches!(crds(&twins), Err(Error::DuplicateController(_))));
    }

    #[test]
    fn crd_names_kubernetes_would_reject_are_errors() {
        let mut bad = crd("greetings", "Greeting");
        bad["spec"]["names"]["shortNames"] = json!(["1gr"]);
        let err = crds(&[component("a", vec![bad])]).expect_err("short name starts with a digit");
        assert!(
            err.to_string().starts_with(
                "crd greetings.examples.capstan.dev spec.names.shortNames \"1gr\" is not a valid DNS-1035 label"
            ),
            "{err}"
        );
        let mut bad = crd("greetings", "Greeting");
        bad["spec"]["names"]["listKind"] = json!("greeting-list");
        assert!(matches!(
            crds(&[component("a", vec![bad])]),
            Err(Error::Policy(policy::Error::Name { rule: Rule::Kind, .. }))
        ));
    }

    #[test]
    fn invalid_options_are_errors_not_broken_manifests() {
        let c = [component("greeter", vec![])];
        assert!(matches!(
            manifest(&c, &Options::default().namespace("Ops")),
            Err(Error::Policy(policy::Error::Name { .. }))
        ));
        assert!(matches!(
            manifest(&c, &Options::default().name("capstan_host")),
            Err(Error::Policy(policy::Error::Name { .. }))
        ));
        assert!(matches!(manifest(&c, &Options::default().image("has space")), Err(Error::Image(_))));
    }

    #[test]
    fn yaml_has_the_header_and_one_document_per_object() {
        let yaml = to_yaml(&[json!({"kind": "A"}), json!({"kind": "B"})], "line one\nline two").expect("renders");
        assert_eq!(yaml, "# line one\n# line two\nkind: A\n---\nkind: B\n");
    }

    #[test]
    fn an_overlay_adds_only_the_components_parts_and_a_patch() {
        let c = [component("greeter", vec![crd("greetings", "Greeting")])];
        let options = Options::default().image("example.com/greeter:1").delivery(Delivery::Image);
        let files = kustomize(&c, &options, Some("../../base")).expect("generates");
        let paths: Vec<_> = files.iter().map(|f| f.path.display().to_string()).collect();
        assert_eq!(
            paths,
            [
                "crd-greetings.examples.capstan.dev.yaml",
                "rbac-greeter.yaml",
                "deployment-patch.yaml",
                "kustomization.yaml"
            ]
        );
        let kustomization = &files[3].objects[0];
        assert_eq!(kustomization["resources"][0], "../../base");
        assert_eq!(files[2].objects[0]["spec"]["template"]["spec"]["containers"][0]["image"], "example.com/greeter:1");
    }

    #[test]
    fn error_messages_read_right() {
        let e = Error::from(policy::Error::UnknownKind { group: String::new(), kind: "Widget".into() });
        assert_eq!(
            e.to_string(),
            "unknown kind Widget in group \"\": no component defines its CRD and it is not a common built-in kind; \
             pass --plural Widget=<plural>"
        );
        let e = Error::TooLargeForConfigMap {
            total: 2_000_000,
            sizes: vec!["greeter 2000000 bytes".into()],
            server_side: true,
        };
        assert!(e.to_string().starts_with(
            "the components ConfigMap would take 2000000 bytes (greeter 2000000 bytes), more than the 1048576 bytes \
             (1 MiB) a ConfigMap holds: push the large components to a registry (`capstan push FILE"
        ));
        let e = Error::TooLargeForConfigMap { total: 300_000, sizes: vec![], server_side: false };
        assert!(e.to_string().contains("more than the 262144 bytes (256 KiB) the last-applied annotation"), "{e}");
        assert_eq!(
            Error::DuplicateController("a".into()).to_string(),
            "two components are named \"a\": controller names must be unique"
        );
    }
}
