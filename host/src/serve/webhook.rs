//! Serving admission and conversion webhooks written as guest logic.
//!
//! The host serves HTTPS (rustls) on its own address (`capstan run
//! --webhook-listen`):
//!
//! | route | body | guest export |
//! |---|---|---|
//! | `POST /admission/<component>/<webhook>` | `admission.k8s.io/v1` `AdmissionReview` | `admission.review` |
//! | `POST /convert/<component>` | `apiextensions.k8s.io/v1` `ConversionReview` | `conversion.convert` |
//! | `POST /clusters/<cluster>/admission/<component>/<webhook>` | as above, from cluster `<cluster>` | `admission.review` |
//! | `POST /clusters/<cluster>/convert/<component>` | as above, from cluster `<cluster>` | `conversion.convert` |
//!
//! A host serving several clusters (`capstan run --cluster`) serves each
//! cluster's webhooks under a prefix of its own (none for `default`,
//! [`route_prefix`]): the configurations it installs in a cluster point
//! there, and a call runs the component as it runs in that cluster (its
//! grants there, its reads there), so one cluster's API server never
//! reaches another's objects through a webhook.
//!
//! Components are found in a [`Registry`] the host keeps current: a call
//! uses the version that serves when it starts, so a hot swap fails no
//! request (calls in flight finish on the old version).
//!
//! # Failure policy
//!
//! A guest that traps, runs past its deadline (below the webhook's
//! timeout) or its memory cap, or answers something the host refuses (see
//! [`admission`]) gets an HTTP 500 with a `Status` naming the cause: the
//! API server treats that as a failed call and applies the webhook's
//! `failurePolicy` (`Fail` rejects the request with that message, `Ignore`
//! lets it through). A deliberate denial by the guest is an answer, not a
//! failure: `failurePolicy` does not apply to it. Conversion has no
//! failure policy: every failure is a `Failure` result with the message.
//!
//! # Budget
//!
//! Each component has its own budget of calls in flight at once
//! ([`Registry::budget`], default [`DEFAULT_BUDGET`]), admission and
//! conversion together: a slow or flooded component holds at most that
//! many guest instances, so it cannot take the instances other
//! components' webhooks and the reconcile loops need. A call past the
//! budget waits up to [`BUDGET_WAIT`] for a place, then is answered HTTP
//! 429 (a failed call: the webhook's `failurePolicy` applies), counted in
//! `capstan_webhook_requests_total` with `code="429"`.
//!
//! # Certificates and callers
//!
//! See [`tls`]: files from a directory, reloaded when they change, or a CA
//! and serving certificate the host makes at start. With
//! [`tls::ClientAuth`] (`--webhook-client-ca`), admission calls must come
//! with a client certificate of that CA (the API server presents one
//! when its admission configuration names a `kubeConfigFile`); others get
//! HTTP 401. Conversion calls are not asked for one: the API server
//! presents no client certificate to conversion webhooks.

pub mod admission;
pub mod conversion;
pub mod install;
pub mod policy;
pub mod tls;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use tokio_rustls::TlsAcceptor;

use crate::cluster::Cluster;
use crate::metrics::Owner;
use crate::policy::names;
use crate::runtime::component::Loaded;
use crate::runtime::grants::Grants;
use crate::runtime::imports::Caller;
use crate::runtime::invocation::{self as runtime, Runtime};
use crate::serve::server::{Limits, Server};
use crate::sync::lock;

/// Largest request body served, like the API server's own limit (3 MiB);
/// larger ones get 413.
pub const MAX_BODY: usize = 3 << 20;
/// Calls in flight at once per component, unless set otherwise
/// ([`Registry::budget`]): an eighth of the engine's default instance pool.
pub const DEFAULT_BUDGET: usize = 8;
/// Longest a call waits for a place in its component's budget before it
/// is answered HTTP 429.
pub const BUDGET_WAIT: std::time::Duration = std::time::Duration::from_secs(1);
/// Longest a TLS handshake may take.
pub const HANDSHAKE_TIMEOUT: std::time::Duration = Limits::webhooks().handshake_timeout();

/// Why a webhook call or the webhook setup failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request body is not a review the host understands.
    #[error("bad review: {0}")]
    BadReview(String),
    /// No component of that name serves here (for that cluster: `NAME in
    /// cluster CLUSTER`).
    #[error("no component {0} serves webhooks here")]
    NoComponent(String),
    /// The component declares no admission webhook of that name.
    #[error("component {component} declares no admission webhook {webhook}")]
    NoWebhook {
        /// The component.
        component: String,
        /// The webhook asked for.
        webhook: String,
    },
    /// The guest invocation failed (trap, deadline, memory).
    #[error(transparent)]
    Guest(#[from] runtime::Error),
    /// The component's budget of calls in flight is taken, and no place
    /// came free within [`BUDGET_WAIT`].
    #[error("component {component} already serves {budget} webhook calls, its budget; try again")]
    Busy {
        /// The component.
        component: String,
        /// Its budget.
        budget: usize,
    },
    /// An admission call came without a client certificate while
    /// `--webhook-client-ca` asks for one.
    #[error("admission calls need a client certificate of the API server (--webhook-client-ca)")]
    Unauthenticated,
    /// The guest answered something the host refuses to pass on.
    #[error("invalid answer from the guest: {0}")]
    Answer(String),
    /// Certificates could not be read or made.
    #[error("webhook certificates: {0}")]
    Certs(String),
    /// A webhook configuration or CRD conversion could not be installed.
    #[error("cannot install {what}: {error}")]
    Install {
        /// What, e.g. `ValidatingWebhookConfiguration capstan-greeter`.
        what: String,
        /// Why.
        error: String,
    },
    /// Another host (or tool) installed the object and still answers at
    /// its address: this one leaves it alone.
    #[error(
        "{what} is installed by another host ({owner}), which still answers there; left as it is \
         (stop that host, or pass --take-over-webhooks to replace it)"
    )]
    Owned {
        /// What, e.g. `ValidatingWebhookConfiguration capstan-greeter`.
        what: String,
        /// The owner's endpoint, as in [`OWNER_ANNOTATION`](install::OWNER_ANNOTATION).
        owner: String,
    },
    /// The CRD whose conversion the component declares belongs to another
    /// component (its `capstan.dev/installed-by` annotation).
    #[error("the conversion of CRD {crd} belongs to component {owner}, not {component}")]
    ConversionOwned {
        /// The CRD.
        crd: String,
        /// The component that installed it.
        owner: String,
        /// The component that declared its conversion.
        component: String,
    },
    /// The CRD whose conversion the component declares belongs to no
    /// component (no `capstan.dev/installed-by` annotation: kubectl, Helm
    /// or an older host installed it) and the operator did not name it in
    /// `--adopt-crd`.
    #[error(
        "CRD {crd} was not installed by a Capstan component (no capstan.dev/installed-by annotation), so component {component} \
         may not set its conversion: annotate it capstan.dev/installed-by={component} (as `capstan gen` writes it), or run with \
         --adopt-crd {crd}"
    )]
    ConversionUnowned {
        /// The CRD.
        crd: String,
        /// The component that declared its conversion.
        component: String,
    },
    /// A webhook reviews a kind the component may see only as its own
    /// (it defines the kind's CRD, nothing else grants it), but the CRD
    /// in the cluster belongs to another component.
    #[error("webhooks of component {component} may not review the kind of CRD {crd}: it belongs to component {owner}")]
    AdmissionOwned {
        /// The CRD.
        crd: String,
        /// The component that installed it.
        owner: String,
        /// The component whose webhook reviews its kind.
        component: String,
    },
    /// A webhook reviews a kind the component may see only as its own,
    /// but the CRD in the cluster belongs to no component (kubectl, Helm
    /// or an older host installed it) and the operator did not name it in
    /// `--adopt-crd`, or it is not installed at all.
    #[error(
        "webhooks of component {component} review the kind of CRD {crd}, which the component may see only as its own, but \
         {}: install it with the component (--install-crds, or `capstan gen crd`, which mark it \
         capstan.dev/installed-by={component}), run with --adopt-crd {crd}, or declare a permission on the kind",
        if *.installed { "no Capstan component installed it (no capstan.dev/installed-by annotation)" } else { "it is not installed" }
    )]
    AdmissionUnowned {
        /// The CRD.
        crd: String,
        /// The component whose webhook reviews its kind.
        component: String,
        /// Whether the CRD exists (without the annotation).
        installed: bool,
    },
    /// `--webhook-failure-policy` gives one target both policies.
    #[error("--webhook-failure-policy {0} is given both Ignore and Fail")]
    PolicyTwice(String),
    /// `--webhook-failure-policy` names a webhook the component does not
    /// declare, or a component that declares no admission webhook.
    #[error(
        "--webhook-failure-policy {target}: component {component} declares no such admission webhook \
         (it declares: {declared})"
    )]
    PolicyUnmatched {
        /// What the choice names: `COMPONENT/WEBHOOK` or `COMPONENT`.
        target: String,
        /// The component.
        component: String,
        /// The admission webhooks it declares.
        declared: String,
    },
    /// `--webhook-failure-policy` names a component that is not here.
    #[error("--webhook-failure-policy names component {component}, not one of the components here ({known})")]
    PolicyComponent {
        /// The component named.
        component: String,
        /// The components there are, by name.
        known: String,
    },
}

impl Error {
    /// The HTTP status the API server gets for this error.
    pub fn status(&self) -> StatusCode {
        match self {
            Error::BadReview(_) => StatusCode::BAD_REQUEST,
            Error::NoComponent(_) | Error::NoWebhook { .. } => StatusCode::NOT_FOUND,
            Error::Busy { .. } => StatusCode::TOO_MANY_REQUESTS,
            Error::Unauthenticated => StatusCode::UNAUTHORIZED,
            Error::Guest(_)
            | Error::Answer(_)
            | Error::Certs(_)
            | Error::Install { .. }
            | Error::Owned { .. }
            | Error::ConversionOwned { .. }
            | Error::ConversionUnowned { .. }
            | Error::AdmissionOwned { .. }
            | Error::AdmissionUnowned { .. }
            | Error::PolicyTwice(_)
            | Error::PolicyUnmatched { .. }
            | Error::PolicyComponent { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let code = self.status();
        let status = json!({
            "apiVersion": "v1",
            "kind": "Status",
            "status": "Failure",
            "code": code.as_u16(),
            // A guest's trap or answer is untrusted: the API server quotes
            // this to the client and in its own log.
            "message": crate::cluster::bounded(&self.to_string(), crate::cluster::MAX_MESSAGE),
        });
        reply(code, &status)
    }
}

fn respond(result: Result<Value, Error>) -> Response {
    match result {
        Ok(review) => reply(StatusCode::OK, &review),
        Err(e) => e.into_response(),
    }
}

/// A JSON response.
fn reply(code: StatusCode, body: &Value) -> Response {
    let bytes = serde_json::to_vec(body).expect("a JSON value serializes");
    (code, [(axum::http::header::CONTENT_TYPE, "application/json")], bytes).into_response()
}

/// The envelope of an `AdmissionReview` or a `ConversionReview`.
#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Review<R> {
    api_version: String,
    kind: String,
    request: Option<R>,
}

/// The request of a review of `api_version` and `kind` in `body`.
fn request_of<R: serde::de::DeserializeOwned>(body: &[u8], api_version: &str, kind: &str) -> Result<R, Error> {
    let review: Review<R> = serde_json::from_slice(body).map_err(|e| Error::BadReview(e.to_string()))?;
    if review.api_version != api_version || review.kind != kind {
        return Err(Error::BadReview(format!(
            "expected {api_version} {kind}, got {} {}",
            review.api_version, review.kind
        )));
    }
    review.request.ok_or_else(|| Error::BadReview("no request".into()))
}

/// A component version serving webhooks: what a call needs.
#[derive(Clone)]
pub struct Served {
    /// The version in use.
    pub component: Arc<Loaded>,
    /// Runs it.
    pub runtime: Runtime,
    /// Whom its host calls are made for (grants of this version).
    pub caller: Caller,
}

impl std::fmt::Debug for Served {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Served").field("component", &self.component).finish_non_exhaustive()
    }
}

/// Where to reach the host's webhooks from the API server, for
/// `--install-webhooks` and the manifests `capstan gen` writes.
#[derive(Clone, Debug)]
pub struct Install {
    /// Where the API server sends the calls.
    pub endpoint: Endpoint,
    /// PEM CA bundle the API server trusts the serving certificate with;
    /// empty leaves `caBundle` out (it is filled in later, by the host or
    /// by cert-manager).
    pub ca_bundle: Vec<u8>,
    /// The operator's `failurePolicy` choices (`--webhook-failure-policy`)
    /// over what the components declare. Default: none.
    pub failure_policies: policy::FailurePolicies,
    /// The cluster whose API server makes the calls: its routes carry
    /// [`route_prefix`] of it. Default: `default` (no prefix).
    pub cluster: String,
    /// Where the API servers of clusters other than `default` call, when
    /// not at `endpoint` (a Service reaches the host from its own cluster
    /// only). Default: none, `endpoint` for every cluster.
    pub members_endpoint: Option<Endpoint>,
}

impl Install {
    /// Calls at `endpoint`, trusting `ca_bundle` (PEM; empty: no
    /// `caBundle`), with the failure policies the components declare,
    /// from the cluster named `default`.
    pub fn new(endpoint: Endpoint, ca_bundle: Vec<u8>) -> Self {
        Self {
            endpoint,
            ca_bundle,
            failure_policies: policy::FailurePolicies::default(),
            cluster: crate::cluster::DEFAULT_CLUSTER.to_owned(),
            members_endpoint: None,
        }
    }

    /// The same settings for the configurations installed in cluster
    /// `name`: routes under that cluster's prefix, at
    /// [`members_endpoint`](Self::members_endpoint) if the cluster is not
    /// `default` and one is set, else at the same endpoint (which that
    /// cluster's API server must reach).
    #[must_use]
    pub fn in_cluster(&self, name: &str) -> Self {
        let member = name != crate::cluster::DEFAULT_CLUSTER;
        let endpoint = match &self.members_endpoint {
            Some(endpoint) if member => endpoint.clone(),
            _ => self.endpoint.clone(),
        };
        Self { cluster: name.to_owned(), endpoint, ..self.clone() }
    }

    /// The path of `route` (`/admission/…`, `/convert/…`) for calls from
    /// this cluster.
    pub fn path(&self, route: &str) -> String {
        format!("{}{route}", route_prefix(&self.cluster))
    }

    /// Who installs: the endpoint the API server calls, as written into
    /// [`install::OWNER_ANNOTATION`] (`https://127.0.0.1:9443`, or
    /// `service:NAMESPACE/NAME:PORT`). Replicas behind one Service are one
    /// owner; `capstan dev` and `capstan e2e` each listen on a port of
    /// their own, and so are owners of their own.
    pub fn owner(&self) -> String {
        self.endpoint.owner()
    }
}

impl Endpoint {
    /// The owner string of this endpoint (see [`Install::owner`]).
    pub fn owner(&self) -> String {
        match self {
            Endpoint::Url(url) => url.trim_end_matches('/').to_owned(),
            Endpoint::Service(s) => format!("service:{}/{}:{}", s.namespace, s.name, s.port),
        }
    }
}

/// How the API server reaches the webhooks: the `clientConfig` of each
/// webhook configuration and conversion stanza.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// A base URL, e.g. `https://127.0.0.1:9443` (`clientConfig.url`): a
    /// host outside the cluster.
    Url(String),
    /// A Service in the cluster (`clientConfig.service`): the host in a
    /// Pod behind it.
    Service(ServiceRef),
}

/// A Service in front of the host: `NAMESPACE/NAME[:PORT]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceRef {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its port (443 unless given).
    pub port: u16,
}

impl ServiceRef {
    /// The DNS names the serving certificate must carry for the API server
    /// to reach the host through this Service.
    pub fn dns_names(&self) -> Vec<String> {
        let short = format!("{}.{}.svc", self.name, self.namespace);
        vec![format!("{short}.cluster.local"), short]
    }
}

impl std::str::FromStr for ServiceRef {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("{s:?} is not NAMESPACE/NAME[:PORT]");
        let (namespace, rest) = s.split_once('/').ok_or_else(bad)?;
        let (name, port) = match rest.split_once(':') {
            Some((name, port)) => (name, port.parse::<u16>().map_err(|_| bad())?),
            None => (rest, 443),
        };
        for (what, value) in [("namespace", namespace), ("name", name)] {
            names::check(format!("service {what}"), value, names::Rule::Dns1123Label)
                .map_err(|e| format!("{s:?}: {e}"))?;
        }
        if port == 0 {
            return Err(bad());
        }
        Ok(Self { namespace: namespace.to_owned(), name: name.to_owned(), port })
    }
}

/// The route prefix of the calls from cluster `cluster`: none for
/// `default` (`/admission/…`, as a single-cluster host serves), else
/// `/clusters/<cluster>`.
pub fn route_prefix(cluster: &str) -> String {
    if cluster == crate::cluster::DEFAULT_CLUSTER { String::new() } else { format!("/clusters/{cluster}") }
}

/// A component in a cluster: what the registry holds things by.
type Key = (String, String);

fn key(cluster: &str, name: &str) -> Key {
    (cluster.to_owned(), name.to_owned())
}

/// The components that serve webhooks, by cluster and name: the host of
/// each cluster publishes each version it runs there, and withdraws it
/// when the component goes.
#[derive(Debug)]
pub struct Registry {
    served: Mutex<HashMap<Key, Served>>,
    install: Option<Install>,
    take_over: bool,
    /// Calls in flight per component.
    budget: usize,
    /// The places of each component's budget, by cluster and name: kept
    /// across versions, so a hot swap does not double them.
    budgets: Mutex<HashMap<Key, Arc<tokio::sync::Semaphore>>>,
}

impl Default for Registry {
    fn default() -> Self {
        Self {
            served: Mutex::default(),
            install: None,
            take_over: false,
            budget: DEFAULT_BUDGET,
            budgets: Mutex::default(),
        }
    }
}

impl Registry {
    /// An empty registry that installs nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// Installs the webhook configurations and CRD conversion stanzas of
    /// every component that declares webhooks (see [`install`]).
    #[must_use]
    pub fn installing(mut self, install: Option<Install>) -> Self {
        self.install = install;
        self
    }

    /// What [`installing`](Self::installing) set.
    pub fn install_settings(&self) -> Option<&Install> {
        self.install.as_ref()
    }

    /// What [`installing`](Self::installing) set, for the configurations
    /// installed in cluster `cluster` ([`Install::in_cluster`]).
    pub fn install_for(&self, cluster: &str) -> Option<Install> {
        self.install.as_ref().map(|i| i.in_cluster(cluster))
    }

    /// Replaces webhook configurations and conversion stanzas that another
    /// host installed and that still answers (`--take-over-webhooks`).
    /// Default: such objects are left alone and the component is rejected
    /// with [`Error::Owned`].
    #[must_use]
    pub fn taking_over(mut self, yes: bool) -> Self {
        self.take_over = yes;
        self
    }

    /// What [`taking_over`](Self::taking_over) set.
    pub fn takes_over(&self) -> bool {
        self.take_over
    }

    /// Most calls in flight at once for one component (admission and
    /// conversion together; at least 1): see [the module docs](self#budget).
    /// Default: [`DEFAULT_BUDGET`]. Keep the sum over the components that
    /// serve webhooks, plus their reconciles, below the engine's instance
    /// pool.
    #[must_use]
    pub fn budget(mut self, calls: usize) -> Self {
        self.budget = calls.max(1);
        self
    }

    /// A place in the budget of component `name` in cluster `cluster`,
    /// waiting up to [`BUDGET_WAIT`]; given back when dropped. Each
    /// cluster's API server has a budget of its own: one flooding the
    /// webhooks takes no place another's calls need.
    ///
    /// # Errors
    ///
    /// [`Error::Busy`] when none came free.
    pub async fn enter(&self, cluster: &str, name: &str) -> Result<tokio::sync::OwnedSemaphorePermit, Error> {
        let places = Arc::clone(
            lock(&self.budgets)
                .entry(key(cluster, name))
                .or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(self.budget))),
        );
        match tokio::time::timeout(BUDGET_WAIT, places.acquire_owned()).await {
            Ok(Ok(place)) => Ok(place),
            _ => Err(Error::Busy { component: name.to_owned(), budget: self.budget }),
        }
    }

    /// Makes `component` the version that serves its name's webhooks in
    /// cluster `cluster_name`: calls from there that start afterwards use
    /// it.
    pub fn publish(
        &self,
        runtime: Runtime,
        component: Arc<Loaded>,
        grants: Arc<Grants>,
        cluster: Arc<dyn Cluster>,
        cluster_name: Arc<str>,
    ) {
        let manifest = &component.manifest;
        let key = key(&cluster_name, &manifest.name);
        if manifest.roles.admission.is_empty() && manifest.roles.conversion.is_empty() {
            lock(&self.served).remove(&key);
            return;
        }
        let caller = Caller {
            controller: manifest.name.as_str().into(),
            cluster_name,
            field_manager: manifest.field_manager().into(),
            grants,
            cluster,
            reconciling: None,
            // A webhook reads only the cluster whose API server called:
            // no other cluster is within its reach.
            reach: None,
        };
        tracing::info!(cluster = %key.0, component = %key.1, digest = %component.digest, "webhooks served");
        lock(&self.served).insert(key, Served { component, runtime, caller });
    }

    /// Stops serving the webhooks of component `name` in cluster `cluster`.
    pub fn withdraw(&self, cluster: &str, name: &str) {
        if lock(&self.served).remove(&key(cluster, name)).is_some() {
            tracing::info!(cluster, component = %name, "webhooks withdrawn");
        }
    }

    /// The version of component `name` that serves the cluster named
    /// `default` now.
    ///
    /// # Errors
    ///
    /// [`Error::NoComponent`] when none does.
    pub fn get(&self, name: &str) -> Result<Served, Error> {
        self.get_in(crate::cluster::DEFAULT_CLUSTER, name)
    }

    /// The version of component `name` that serves cluster `cluster` now.
    ///
    /// # Errors
    ///
    /// [`Error::NoComponent`] when none does.
    pub fn get_in(&self, cluster: &str, name: &str) -> Result<Served, Error> {
        lock(&self.served).get(&key(cluster, name)).cloned().ok_or_else(|| {
            Error::NoComponent(if cluster == crate::cluster::DEFAULT_CLUSTER {
                name.to_owned()
            } else {
                format!("{name} in cluster {cluster}")
            })
        })
    }
}

/// The webhook routes on `registry`.
pub fn router(registry: Arc<Registry>) -> Router {
    Router::new()
        .route("/admission/{component}/{webhook}", post(review))
        .route("/convert/{component}", post(convert))
        .route("/clusters/{cluster}/admission/{component}/{webhook}", post(review_in))
        .route("/clusters/{cluster}/convert/{component}", post(convert_in))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(registry)
}

/// The metric labels of a request: the names as served, `unknown` for
/// names this host does not serve (they come from the request).
fn labels(served: Option<&Served>, webhook: Option<&str>) -> (Owner, String) {
    let Some(served) = served else {
        return (Owner::in_default("unknown"), "unknown".to_owned());
    };
    let manifest = &served.component.manifest;
    let webhook = match webhook {
        None => "convert",
        Some(name) if manifest.roles.admission.iter().any(|w| w.name == name) => name,
        Some(_) => "unknown",
    };
    (served.caller.owner(), webhook.to_owned())
}

/// Answers with `result` and counts the request.
fn answered(result: Result<Value, Error>, labels: (Owner, String), started: std::time::Instant) -> Response {
    let response = respond(result);
    crate::metrics::metrics().webhook_served(&labels.0, &labels.1, response.status().as_u16(), started.elapsed());
    response
}

async fn review(
    State(registry): State<Arc<Registry>>,
    Path((component, webhook)): Path<(String, String)>,
    caller: Option<axum::Extension<tls::Peer>>,
    body: Bytes,
) -> Response {
    reviewed(&registry, crate::cluster::DEFAULT_CLUSTER, &component, &webhook, caller, &body).await
}

async fn review_in(
    State(registry): State<Arc<Registry>>,
    Path((cluster, component, webhook)): Path<(String, String, String)>,
    caller: Option<axum::Extension<tls::Peer>>,
    body: Bytes,
) -> Response {
    reviewed(&registry, &cluster, &component, &webhook, caller, &body).await
}

/// Answers an admission call from cluster `cluster`.
async fn reviewed(
    registry: &Registry,
    cluster: &str,
    component: &str,
    webhook: &str,
    caller: Option<axum::Extension<tls::Peer>>,
    body: &[u8],
) -> Response {
    let started = std::time::Instant::now();
    let served = registry.get_in(cluster, component);
    let labels = labels(served.as_ref().ok(), Some(webhook));
    let result = async {
        if caller.is_some_and(|axum::Extension(peer)| peer == tls::Peer::Unverified) {
            return Err(Error::Unauthenticated);
        }
        let served = served?;
        let _place = registry.enter(cluster, component).await?;
        admission::handle(&served, webhook, body).await
    };
    answered(result.await, labels, started)
}

async fn convert(State(registry): State<Arc<Registry>>, Path(component): Path<String>, body: Bytes) -> Response {
    converted(&registry, crate::cluster::DEFAULT_CLUSTER, &component, &body).await
}

async fn convert_in(
    State(registry): State<Arc<Registry>>,
    Path((cluster, component)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    converted(&registry, &cluster, &component, &body).await
}

/// Answers a conversion call from cluster `cluster`.
async fn converted(registry: &Registry, cluster: &str, component: &str, body: &[u8]) -> Response {
    let started = std::time::Instant::now();
    let served = registry.get_in(cluster, component);
    let labels = labels(served.as_ref().ok(), None);
    let result = async {
        let served = served?;
        let _place = registry.enter(cluster, component).await?;
        conversion::handle(&served, body).await
    };
    answered(result.await, labels, started)
}

/// Binds `addr` and serves the webhooks of `registry` over HTTPS with the
/// certificates of `certs`, in a background task, within
/// [`Limits::webhooks`].
///
/// # Errors
///
/// When `addr` cannot be bound.
pub async fn serve(addr: SocketAddr, certs: Arc<tls::Certs>, registry: Arc<Registry>) -> std::io::Result<Server> {
    serve_within(addr, certs, registry, Limits::webhooks()).await
}

/// [`serve`] within other `limits`: connections open at once (TLS
/// handshakes included: they run side by side, so a slow client holds up
/// no other), and the time a handshake, a request head and a request may
/// take.
///
/// # Errors
///
/// When `addr` cannot be bound.
pub async fn serve_within(
    addr: SocketAddr,
    certs: Arc<tls::Certs>,
    registry: Arc<Registry>,
    limits: Limits,
) -> std::io::Result<Server> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let config = certs.server_config().map_err(std::io::Error::other)?;
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let handshake = move |tcp: tokio::net::TcpStream| {
        let accepting = acceptor.accept(tcp);
        let certs = Arc::clone(&certs);
        async move {
            let peer = accepting.get_ref().and_then(|tcp| tcp.peer_addr().ok());
            match tokio::time::timeout(limits.handshake_timeout(), accepting).await {
                Ok(Ok(tls)) => {
                    let Some(caller) = certs.peer(tls.get_ref().1) else {
                        tracing::debug!(peer = ?peer, "webhook client certificate carries none of the names asked for");
                        return None;
                    };
                    let mut extensions = axum::http::Extensions::new();
                    extensions.insert(caller);
                    Some((tls, extensions))
                }
                Ok(Err(e)) => {
                    tracing::debug!(peer = ?peer, error = %e, "webhook tls handshake failed");
                    None
                }
                Err(_) => {
                    tracing::debug!(peer = ?peer, "webhook tls handshake timed out");
                    None
                }
            }
        }
    };
    let server = crate::serve::server::spawn(vec![listener], limits, router(registry), handshake)?;
    tracing::info!(address = %server.local_addr(), connections = limits.max_connections(), "serving webhooks (https)");
    Ok(server)
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn call(path: &str, body: Vec<u8>) -> (StatusCode, Value) {
        use http_body_util::BodyExt as _;
        use tower::ServiceExt as _;
        let request = axum::http::Request::post(path).body(axum::body::Body::from(body)).expect("a request");
        let response = router(Arc::new(Registry::new())).oneshot(request).await.expect("the router answers");
        let status = response.status();
        let bytes = response.into_body().collect().await.expect("a body").to_bytes();
        (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }

    #[tokio::test]
    async fn unknown_component_is_a_404_status_and_an_oversized_body_a_413() {
        let (status, body) = call("/admission/nobody/v.example.com", b"{}".to_vec()).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert_eq!(body["kind"], "Status");
        assert_eq!(body["message"], "no component nobody serves webhooks here");
        let (status, body) = call("/clusters/west/admission/nobody/v.example.com", b"{}".to_vec()).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert_eq!(body["message"], "no component nobody in cluster west serves webhooks here");
        let (status, body) = call("/clusters/west/convert/nobody", b"{}".to_vec()).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
        let (status, _) = call("/convert/nobody", vec![b' '; MAX_BODY + 1]).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
        // Names from the request never become labels.
        let scrape = crate::metrics::metrics().encode();
        assert!(scrape.contains(
            r#"capstan_webhook_requests_total{cluster="default",controller="unknown",webhook="unknown",code="404"}"#
        ));
        assert!(!scrape.contains("nobody"), "{scrape}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_handshake_that_never_comes_is_given_up_and_connections_past_the_cap_wait() {
        use tokio::io::AsyncReadExt as _;
        let certs = Arc::new(tls::Certs::self_managed(&["127.0.0.1".into()]).expect("certs"));
        let limits = Limits::webhooks().connections(1).handshake(std::time::Duration::from_secs(5));
        let server =
            serve_within(([127, 0, 0, 1], 0).into(), certs, Arc::new(Registry::new()), limits).await.expect("binds");
        // Two clients that never say hello: the first holds the one slot.
        let mut first = tokio::net::TcpStream::connect(server.local_addr()).await.expect("connects");
        let mut second = tokio::net::TcpStream::connect(server.local_addr()).await.expect("connects");
        assert!(matches!(first.read(&mut [0; 64]).await, Ok(0) | Err(_)), "closed at 5 s");
        // The second was taken in when the first went: open until 10 s.
        let open = tokio::time::timeout(std::time::Duration::from_secs(4), second.read(&mut [0; 64])).await;
        assert!(open.is_err(), "the second waited for the slot: {open:?}");
        assert!(matches!(second.read(&mut [0; 64]).await, Ok(0) | Err(_)), "closed at 10 s");
        server.shutdown().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_component_past_its_budget_waits_then_is_busy_and_others_keep_theirs() {
        let registry = Registry::new().budget(2);
        let enter = |name| registry.enter("default", name);
        let held = [enter("slow").await.expect("a place"), enter("slow").await.expect("a place")];
        let started = tokio::time::Instant::now();
        let busy = enter("slow").await.expect_err("the budget is taken");
        assert!(matches!(busy, Error::Busy { budget: 2, .. }), "{busy}");
        assert_eq!(started.elapsed(), BUDGET_WAIT, "it waited for a place first");
        let _other = enter("other").await.expect("another component has its own budget");
        let _elsewhere = registry.enter("west", "slow").await.expect("so has the same component in another cluster");
        drop(held);
        let _again = enter("slow").await.expect("places come back");
    }

    #[test]
    fn error_messages_read_right() {
        assert_eq!(Error::BadReview("no request".into()).to_string(), "bad review: no request");
        assert_eq!(Error::NoComponent("greeter".into()).to_string(), "no component greeter serves webhooks here");
        let e = Error::NoWebhook { component: "greeter".into(), webhook: "v.example.com".into() };
        assert_eq!(e.to_string(), "component greeter declares no admission webhook v.example.com");
        assert_eq!(e.status(), StatusCode::NOT_FOUND);
        let e = Error::Guest(runtime::Error::Trap("unreachable".into()));
        assert_eq!(e.to_string(), "guest trapped: unreachable");
        assert_eq!(e.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(Error::Answer("code 200".into()).to_string(), "invalid answer from the guest: code 200");
        let e = Error::Busy { component: "greeter".into(), budget: 8 };
        assert_eq!(e.to_string(), "component greeter already serves 8 webhook calls, its budget; try again");
        assert_eq!(e.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(
            Error::Unauthenticated.to_string(),
            "admission calls need a client certificate of the API server (--webhook-client-ca)"
        );
        assert_eq!(Error::Unauthenticated.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(
            Error::PolicyTwice("greeter".into()).to_string(),
            "--webhook-failure-policy greeter is given both Ignore and Fail"
        );
        let e = Error::PolicyUnmatched {
            target: "greeter/typo.example.com".into(),
            component: "greeter".into(),
            declared: "validate.example.com".into(),
        };
        assert_eq!(
            e.to_string(),
            "--webhook-failure-policy greeter/typo.example.com: component greeter declares no such admission \
             webhook (it declares: validate.example.com)"
        );
        let e = Error::AdmissionOwned {
            crd: "vaults.example.com".into(),
            owner: "vaults".into(),
            component: "thief".into(),
        };
        assert_eq!(
            e.to_string(),
            "webhooks of component thief may not review the kind of CRD vaults.example.com: it belongs to component vaults"
        );
        for (installed, why) in [
            (true, "no Capstan component installed it (no capstan.dev/installed-by annotation)"),
            (false, "it is not installed"),
        ] {
            let e = Error::AdmissionUnowned { crd: "vaults.example.com".into(), component: "vaults".into(), installed };
            assert_eq!(
                e.to_string(),
                format!(
                    "webhooks of component vaults review the kind of CRD vaults.example.com, which the component may \
                     see only as its own, but {why}: install it with the component (--install-crds, or `capstan gen \
                     crd`, which mark it capstan.dev/installed-by=vaults), run with --adopt-crd vaults.example.com, \
                     or declare a permission on the kind"
                )
            );
        }
        let e = Error::PolicyComponent { component: "other".into(), known: "greeter".into() };
        assert_eq!(
            e.to_string(),
            "--webhook-failure-policy names component other, not one of the components here (greeter)"
        );
    }
}
