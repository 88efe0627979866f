//! `capstan e2e <component> <scenario-dir>`: the scenario folders `capstan
//! test` runs on the mock host, run against a real cluster.
//!
//! Each case gets a namespace of its own (`e2e-<case>-<random>`): every
//! namespaced object of its files (`metadata.namespace`, and
//! `regarding.namespace` in `events.yaml`) is moved there, and the host runs
//! the component in process, watching only that namespace, with its CRDs
//! installed (`--install-crds`) and, when it declares webhooks, serving
//! them on loopback with their configurations installed (the API server
//! must reach this machine: true of `capstan cluster` and any local
//! cluster).
//!
//! Then, as on the mock host: `given.yaml` is applied (CRDs first, each
//! waited for until established; a new object's `status` is written through
//! the status subresource afterwards), and the case waits, up to the step
//! timeout, until every object of `expect.yaml` matches (subset match, as
//! `capstan test`), every object of `absent.yaml` is gone, every event of
//! `events.yaml` was recorded (Events of the namespace), and the text of
//! `error.txt`, if any, appears in a refused write, the controller's last
//! error or a Warning Event's note. Then each step: `apply.yaml` (create,
//! or a merge patch of an existing object), `delete.yaml`, and the same
//! wait. On timeout the case fails with what still did not hold.
//!
//! A case's Nodes are cluster-scoped: each is renamed `<name>-<random>`
//! (as namespaces are moved, in every file, and where its name appears as
//! a word in text such as an Event's note; `<namespace>/` references in
//! text move with the namespace), and, having no kubelet, is kept alive by
//! renewing its Lease while the case runs, as a kubelet would. A new
//! `Ready` Node is waited for until the node lifecycle controller has
//! lifted the `node.kubernetes.io/not-ready` taint the API server gave it,
//! so the Pods given after it do not race that controller.
//!
//! `conversion.yaml` checks are not run here (they need no cluster: `capstan
//! test` runs them); a case that has one says so. A case that stubs
//! outbound HTTP (`http.yaml`, in it or a step) fails without running:
//! on a cluster its requests would reach the real services.
//!
//! # Several clusters
//!
//! An entry of a case's files may name its cluster with a top-level
//! `cluster: NAME`, as on the mock host. Each cluster other than `default`
//! must be given ([`Options::members`], `capstan e2e --cluster
//! NAME=KUBECONFIG`); a case that names one that is not fails without
//! running. When clusters are given, every case runs in all of them: the
//! component runs once per cluster, as `capstan run --cluster` runs it
//! (a fleet controller reconciles in its home and places children in the
//! members given), the case's namespace is made in each, and so is each
//! namespace its files name as a Namespace (the same namespace name is the
//! same namespace in every cluster). Recorded Events carry their
//! `cluster`, so an `events.yaml` entry without one matches any cluster's.
//! Nodes (and their fake kubelet) are `default`'s only.
//!
//! The objects the case created (deleted first, while the controller still
//! runs, so it finalizes them; Pods bound to the case's Nodes with a grace
//! period of zero, as no kubelet will confirm they stopped), its namespace
//! and the cluster-scoped ones are deleted afterwards (`--keep` leaves
//! them); CRDs stay.

mod nodes;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::cluster::kube::KubeCluster;
use crate::cluster::{Cluster, ListParams, Patch, Propagation, Subresource};
use crate::object::{Gvk, ObjectRef};
use crate::serve::host::{Host, HostBuilder};
use crate::tooling::scenario::{self, CaseResult, read_yaml_documents, subset_diff};
use crate::tooling::testing::default_cache_dir;

/// Why scenarios could not be run at all (as opposed to failing).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A scenario folder or file could not be read.
    #[error(transparent)]
    Scenario(#[from] scenario::Error),
    /// The host did not start the component.
    #[error("the host did not start {component}: {error}")]
    Host {
        /// The component.
        component: PathBuf,
        /// Why.
        error: Box<crate::serve::host::Error>,
    },
    /// The webhook server did not start.
    #[error("cannot serve webhooks: {0}")]
    Webhooks(String),
    /// The case's namespace could not be made.
    #[error("cannot create namespace {namespace}: {error}")]
    Namespace {
        /// The namespace.
        namespace: String,
        /// Why.
        error: crate::cluster::Error,
    },
}

/// How to run.
#[derive(Clone)]
pub struct Options {
    /// How long each step may take to hold.
    pub timeout: Duration,
    /// Leave each case's namespace behind.
    pub keep: bool,
    /// The compile cache (default: [`default_cache_dir`], the one `capstan
    /// run` uses). The component runs on the baseline compiler's code
    /// (Winch), which goes into the cache: the first case compiles it, or
    /// none if the cache holds it already; the others load it from there.
    pub cache_dir: Option<PathBuf>,
    /// More clusters, each a name (a DNS-1123 label, not `default`) and a
    /// client: see [several clusters](self#several-clusters). Default:
    /// none.
    pub members: Vec<(String, kube::Client)>,
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let members: Vec<&str> = self.members.iter().map(|(name, _)| name.as_str()).collect();
        f.debug_struct("Options")
            .field("timeout", &self.timeout)
            .field("keep", &self.keep)
            .field("cache_dir", &self.cache_dir)
            .field("members", &members)
            .finish()
    }
}

impl Default for Options {
    fn default() -> Self {
        Self { timeout: Duration::from_secs(30), keep: false, cache_dir: default_cache_dir(), members: Vec::new() }
    }
}

/// The clusters a case runs in, by name: `default` and the members given.
struct CaseClusters(BTreeMap<String, KubeCluster>);

impl CaseClusters {
    fn new(client: kube::Client, members: &[(String, kube::Client)]) -> Self {
        let default = (crate::cluster::DEFAULT_CLUSTER.to_owned(), KubeCluster::new(client, None));
        let members = members.iter().map(|(name, client)| (name.clone(), KubeCluster::new(client.clone(), None)));
        Self(std::iter::once(default).chain(members).collect())
    }

    /// The cluster named `default`.
    fn home(&self) -> &KubeCluster {
        &self.0[crate::cluster::DEFAULT_CLUSTER]
    }

    /// More than `default`.
    fn several(&self) -> bool {
        self.0.len() > 1
    }

    /// The cluster `entry` names, its name, and the entry without the
    /// `cluster` field; or why it cannot be had.
    fn of(&self, entry: Value) -> Result<(&str, &KubeCluster, Value), String> {
        let (name, entry) = scenario::take_cluster(entry)?;
        match self.0.get_key_value(&name) {
            Some((name, cluster)) => Ok((name.as_str(), cluster, entry)),
            None => Err(format!("cluster {name:?} is not given")),
        }
    }

    /// How a mismatch names an object in cluster `name`: nothing for
    /// `default`.
    fn label(name: &str) -> String {
        if name == crate::cluster::DEFAULT_CLUSTER { String::new() } else { format!("cluster {name}: ") }
    }
}

/// Runs every case under `dir` against `component` on the cluster of
/// `client`, one after the other.
///
/// # Errors
///
/// When a case cannot be run at all; a failing case is a [`CaseResult`]
/// with what did not hold.
pub async fn run_all(
    client: kube::Client,
    component: &Path,
    dir: &Path,
    options: &Options,
) -> Result<Vec<CaseResult>, Error> {
    let mut results = Vec::new();
    for case in scenario::discover(dir)? {
        results.push(run_case(client.clone(), component, &case, options).await?);
    }
    Ok(results)
}

/// Six random lower-case letters, for the names of one run of a case.
fn random_suffix() -> String {
    (0..6).map(|_| char::from(b'a' + rand_below(26))).collect()
}

/// A namespace name for case `name`: `e2e-<name>-<suffix>`, a DNS label.
fn namespace_for(name: &str, suffix: &str) -> String {
    let mut slug: String =
        name.to_lowercase().chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).take(40).collect();
    slug = slug.trim_matches('-').to_owned();
    if slug.is_empty() { format!("e2e-{suffix}") } else { format!("e2e-{slug}-{suffix}") }
}

fn rand_below(n: u8) -> u8 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(Instant::now().elapsed().as_nanos());
    u8::try_from(h.finish() % u64::from(n)).unwrap_or(0)
}

/// Where a case runs: its own namespace, the namespaces its files name as
/// Namespace objects (made by the controller, as a tenant controller
/// does), which keep their names, the namespaces its files put objects in
/// (all moved to its own), and its Nodes' names on the cluster.
#[derive(Clone, Debug, Default)]
struct Place {
    namespace: String,
    own: BTreeSet<String>,
    moved: BTreeSet<String>,
    nodes: BTreeMap<String, String>,
}

impl Place {
    /// The place of the case whose files name `names`, run with `suffix`.
    fn new(names: Names, suffix: &str, namespace: String) -> Self {
        let Names { own, used, nodes } = names;
        let moved = used.difference(&own).cloned().collect();
        let nodes = nodes.into_iter().map(|n| (n.clone(), format!("{n}-{suffix}"))).collect();
        Self { namespace, own, moved, nodes }
    }

    /// `object` moved into the case's namespace: its own namespace if it
    /// has one (unless a Namespace of the case), and that of the object an
    /// event is about; then every text in it, as [`Place::text`].
    fn localize(&self, mut object: Value) -> Value {
        for pointer in ["/metadata/namespace", "/regarding/namespace"] {
            if let Some(ns) = object.pointer_mut(pointer)
                && ns.as_str().is_some_and(|n| !self.own.contains(n))
            {
                *ns = json!(self.namespace);
            }
        }
        self.rewrite_strings(&mut object);
        object
    }

    fn rewrite_strings(&self, value: &mut Value) {
        match value {
            Value::String(s) => *s = self.text(s),
            Value::Array(items) => items.iter_mut().for_each(|v| self.rewrite_strings(v)),
            Value::Object(fields) => fields.values_mut().for_each(|v| self.rewrite_strings(v)),
            _ => {}
        }
    }

    /// `text` as on the cluster: each of the case's Node names, as a whole
    /// word, becomes the Node's name on the cluster, and each `<ns>/`
    /// reference to a moved namespace (`demo/p1` in an Event's note)
    /// points into the case's namespace.
    fn text(&self, text: &str) -> String {
        let mut text = text.to_owned();
        for (from, to) in &self.nodes {
            text = replace_word(&text, from, to);
        }
        let into = format!("{}/", self.namespace);
        for from in &self.moved {
            text = replace_word(&text, &format!("{from}/"), &into);
        }
        text
    }

    /// `text` (a mismatch) in the case's own words: `<case namespace>`, and
    /// its Nodes' names as in its files.
    fn restore(&self, text: &str) -> String {
        let mut text = text.replace(&self.namespace, "<case namespace>");
        for (name, renamed) in &self.nodes {
            text = text.replace(renamed, name);
        }
        text
    }

    fn read(&self, path: &Path) -> Result<Vec<Value>, Error> {
        Ok(read_yaml_documents(path)?.into_iter().map(|o| self.localize(o)).collect())
    }

    /// Every namespace the host watches and the checks look into.
    fn namespaces(&self) -> Vec<String> {
        std::iter::once(self.namespace.clone()).chain(self.own.iter().cloned()).collect()
    }
}

/// Whether `c` can be part of a name or a path (so not a word's edge).
fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/')
}

/// `text` with each occurrence of `from` that is a whole word replaced by
/// `to`: not preceded by a character of a name or path, and (unless `from`
/// ends with `/`) not followed by one (a sentence's final `.` may follow).
fn replace_word(text: &str, from: &str, to: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut before: Option<char> = None;
    while let Some(at) = rest.find(from) {
        let after = &rest[at + from.len()..];
        let starts = !rest[..at].chars().next_back().or(before).is_some_and(is_name_char);
        let mut next = after.chars();
        let ends = from.ends_with('/')
            || match next.next() {
                None => true,
                Some('.') => !next.next().is_some_and(|c| c.is_ascii_alphanumeric()),
                Some(c) => !is_name_char(c),
            };
        out.push_str(&rest[..at]);
        out.push_str(if starts && ends { to } else { from });
        before = from.chars().next_back();
        rest = after;
    }
    out.push_str(rest);
    out
}

/// What a case's files name: the Namespace objects, the namespaces objects
/// are in (`metadata.namespace`, `regarding.namespace`), the `v1` Nodes.
#[derive(Debug, Default)]
struct Names {
    own: BTreeSet<String>,
    used: BTreeSet<String>,
    nodes: BTreeSet<String>,
}

/// Adds what every YAML file under `dir` names to `out`.
fn names_in(dir: &Path, out: &mut Names) -> Result<(), Error> {
    for path in scenario::entries_of(dir)? {
        if path.is_dir() {
            names_in(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "yaml") {
            for object in read_yaml_documents(&path)? {
                let text = |pointer: &str| object.pointer(pointer).and_then(Value::as_str).map(str::to_owned);
                if let Some(name) = text("/metadata/name") {
                    match (object["apiVersion"].as_str(), object["kind"].as_str()) {
                        (_, Some("Namespace")) => {
                            out.own.insert(name);
                        }
                        (Some("v1"), Some("Node")) => {
                            out.nodes.insert(name);
                        }
                        _ => {}
                    }
                }
                out.used.extend(["/metadata/namespace", "/regarding/namespace"].into_iter().filter_map(text));
            }
        }
    }
    Ok(())
}

/// A webhook server on loopback for the case's host, if the component
/// declares webhooks (the registry installs their configurations).
pub(crate) struct Webhooks {
    pub(crate) registry: Arc<crate::serve::webhook::Registry>,
    pub(crate) server: crate::serve::server::Server,
}

pub(crate) async fn serve_webhooks() -> Result<Webhooks, Error> {
    use crate::serve::webhook::{Endpoint, Install, Registry, tls::Certs};
    let port = std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map_err(|e| Error::Webhooks(e.to_string()))?
        .port();
    let certs = Arc::new(Certs::self_managed(&["127.0.0.1".to_owned()]).map_err(|e| Error::Webhooks(e.to_string()))?);
    let install = Install::new(Endpoint::Url(format!("https://127.0.0.1:{port}")), certs.ca_bundle());
    let registry = Arc::new(Registry::new().installing(Some(install)));
    let server = crate::serve::webhook::serve(([127, 0, 0, 1], port).into(), certs, Arc::clone(&registry))
        .await
        .map_err(|e| Error::Webhooks(e.to_string()))?;
    Ok(Webhooks { registry, server })
}

/// Requests the webhook server answered for `component` so far.
fn webhook_requests(component: &str) -> f64 {
    let prefix = format!("capstan_webhook_requests_total{{cluster=\"default\",controller=\"{component}\"");
    crate::metrics::metrics()
        .encode()
        .lines()
        .filter(|l| l.starts_with(&prefix))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum()
}

/// Runs one case in a namespace of its own.
///
/// # Errors
///
/// As [`run_all`].
pub async fn run_case(
    client: kube::Client,
    component: &Path,
    case: &Path,
    options: &Options,
) -> Result<CaseResult, Error> {
    let name = case.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    // Stubbed origins need the mock host: on a cluster the component's
    // requests would go to the real services.
    let stubbed =
        std::iter::once(case.to_owned()).chain(scenario::steps_of(case)?).find(|d| d.join("http.yaml").is_file());
    if let Some(dir) = stubbed {
        let at = dir.strip_prefix(case).unwrap_or(&dir).join("http.yaml");
        let why = format!(
            "{}: stubs outbound HTTP, which only the mock host can (run this case with `capstan test`)",
            at.display()
        );
        return Ok(CaseResult { name, mismatches: vec![why] });
    }
    // So does a cluster this run was not given.
    let missing = scenario::other_clusters(case)?
        .into_iter()
        .find(|(cluster, _)| !options.members.iter().any(|(given, _)| given == cluster));
    if let Some((cluster, at)) = missing {
        let why = format!(
            "{}: puts an object in cluster {cluster:?}, which this run was not given (pass --cluster \
             {cluster}=KUBECONFIG, or run this case with `capstan test`)",
            at.display()
        );
        return Ok(CaseResult { name, mismatches: vec![why] });
    }
    // A case of `conversion.yaml` alone has nothing for a cluster to do.
    if !case.join("given.yaml").is_file() && scenario::steps_of(case)?.is_empty() {
        tracing::info!(case = %name, "conversion.yaml is checked by `capstan test`, not on the cluster");
        return Ok(CaseResult { name, mismatches: Vec::new() });
    }
    let suffix = random_suffix();
    let namespace = namespace_for(&name, &suffix);
    let clusters = CaseClusters::new(client, &options.members);
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}});
    let r = ObjectRef::new(Gvk::new("", "v1", "Namespace"), None, namespace.clone());
    let mut made = Vec::new();
    let mut result = Ok(());
    for (cluster_name, cluster) in &clusters.0 {
        match cluster.create(ns.clone()).await {
            Ok(_) => made.push(cluster),
            Err(error) => {
                let namespace = format!("{}{namespace}", CaseClusters::label(cluster_name));
                result = Err(Error::Namespace { namespace, error });
                break;
            }
        }
    }
    let mut names = Names::default();
    names_in(case, &mut names)?;
    let place = Place::new(names, &suffix, namespace.clone());
    let result = match result {
        Ok(()) => run_in(&clusters, component, case, &place, options).await,
        Err(e) => Err(e),
    };
    if !options.keep {
        for cluster in made {
            if let Err(e) = cluster.delete(&r, Propagation::Background).await {
                tracing::warn!(namespace, error = %e, "cannot delete the case's namespace");
            }
        }
    }
    let mut mismatches = result?;
    if case.join("conversion.yaml").is_file() {
        tracing::info!(case = %name, "conversion.yaml is checked by `capstan test`, not on the cluster");
    }
    mismatches.iter_mut().for_each(|m| *m = place.restore(m));
    Ok(CaseResult { name, mismatches })
}

/// The hosts of a case, one per cluster, each engaged in `clusters` (where
/// a fleet controller reaches its members).
struct CaseHosts {
    hosts: Vec<(String, Host)>,
    clusters: Arc<crate::control::clusters::Clusters>,
}

impl CaseHosts {
    /// Starts the component in every cluster, members first (so a fleet
    /// controller in `default` finds them at its first reconcile).
    async fn start(
        clusters: &CaseClusters,
        component: &Path,
        place: &Place,
        webhooks: &Webhooks,
        options: &Options,
    ) -> Result<Self, Error> {
        let mut started = Self { hosts: Vec::new(), clusters: crate::control::clusters::Clusters::new() };
        let order = clusters.0.iter().filter(|(name, _)| *name != crate::cluster::DEFAULT_CLUSTER);
        let order = order.chain(clusters.0.get_key_value(crate::cluster::DEFAULT_CLUSTER));
        for (name, cluster) in order {
            let host = HostBuilder::new(cluster.client().clone())
                .cluster_name(name.as_str())
                .clusters(Some(Arc::clone(&started.clusters)))
                .namespaces(place.namespaces())
                .install_crds(true)
                .webhooks(Some(Arc::clone(&webhooks.registry)))
                .baseline(true)
                .optimize(false)
                .cache_dir(options.cache_dir.clone())
                .component(component)
                .start()
                .await;
            let host = match host {
                Ok(host) => host,
                Err(error) => {
                    started.shutdown().await;
                    return Err(Error::Host { component: component.to_owned(), error: Box::new(error) });
                }
            };
            let engaged =
                crate::control::clusters::Engaged { backend: host.backend(), informers: Some(host.informers()) };
            started.clusters.engage(name, engaged);
            started.hosts.push((name.clone(), host));
        }
        Ok(started)
    }

    /// The host of cluster `default`.
    fn home(&self) -> Option<&Host> {
        self.hosts.iter().find(|(name, _)| name == crate::cluster::DEFAULT_CLUSTER).map(|(_, host)| host)
    }

    /// Every controller's last error, in any cluster.
    fn last_errors(&self) -> Vec<String> {
        self.hosts.iter().flat_map(|(_, host)| host.controllers()).filter_map(|c| c.counts().last_error).collect()
    }

    /// The components serving webhooks in each cluster.
    fn served(
        &self,
        registry: &crate::serve::webhook::Registry,
    ) -> Vec<(String, Arc<crate::runtime::component::Loaded>)> {
        let mut served = Vec::new();
        for (name, host) in &self.hosts {
            for component in host.status().into_iter().filter_map(|s| s.name) {
                if let Ok(s) = registry.get_in(name, &component) {
                    served.push((name.clone(), Arc::clone(&s.component)));
                }
            }
        }
        served
    }

    /// Stops every host, each disengaged first.
    async fn shutdown(&self) {
        for (name, host) in &self.hosts {
            self.clusters.disengage_exact(name, &host.backend());
            host.shutdown().await;
        }
    }
}

async fn run_in(
    clusters: &CaseClusters,
    component: &Path,
    case: &Path,
    place: &Place,
    options: &Options,
) -> Result<Vec<String>, Error> {
    let mut mismatches = Vec::new();
    let since = k8s_openapi::jiff::Timestamp::now();
    let given = place.read(&case.join("given.yaml"))?;
    let steps = scenario::steps_of(case)?;
    let mut objects = Vec::new();
    for entry in given {
        match clusters.of(entry) {
            Ok((name, cluster, object)) => objects.push((name, cluster, object)),
            Err(e) => mismatches.push(format!("given.yaml: {e}")),
        }
    }
    let is_crd = |o: &Value| o.get("kind").and_then(Value::as_str) == Some("CustomResourceDefinition");
    let (crds, objects): (Vec<_>, Vec<_>) = objects.into_iter().partition(|(_, _, o)| is_crd(o));
    for (name, cluster, crd) in crds {
        if let Err(e) = install_crd(cluster, crd, options.timeout).await {
            mismatches.push(format!("given.yaml: {}{e}", CaseClusters::label(name)));
        }
    }
    let fake_nodes = nodes::FakeNodes::start(clusters.home().client().clone());
    let mut created: Vec<(&str, ObjectRef)> = Vec::new();
    if clusters.several() {
        // The same namespace name is the same namespace in every cluster.
        for own in &place.own {
            for (name, cluster) in &clusters.0 {
                let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": own}});
                let mut made = Vec::new();
                if let Err(e) = apply(cluster, &fake_nodes, ns, &mut made).await {
                    mismatches.push(format!("{}namespace {own}: {e}", CaseClusters::label(name)));
                }
                created.extend(made.into_iter().map(|r| (name.as_str(), r)));
            }
        }
    }
    let webhooks = serve_webhooks().await?;
    let hosts = match CaseHosts::start(clusters, component, place, &webhooks, options).await {
        Ok(hosts) => hosts,
        Err(e) => {
            fake_nodes.stop(options.keep).await;
            webhooks.server.shutdown().await;
            return Err(e);
        }
    };
    let served = hosts.home().and_then(|h| h.status().first().and_then(|s| s.name.clone())).unwrap_or_default();
    if webhooks.registry.get(&served).is_ok() {
        let mut home: Vec<Value> =
            objects.iter().filter(|(_, c, _)| std::ptr::eq(*c, clusters.home())).map(|(_, _, o)| o.clone()).collect();
        if home.is_empty() {
            // Nothing given: probe with what the steps write (a file that
            // cannot be read is reported at its step).
            for step in &steps {
                for entry in place.read(&step.join("apply.yaml")).unwrap_or_default() {
                    if let Ok((_, cluster, object)) = clusters.of(entry)
                        && std::ptr::eq(cluster, clusters.home())
                        && !is_crd(&object)
                    {
                        home.push(object);
                    }
                }
            }
        }
        wait_for_webhooks(clusters.home(), &served, &home, options.timeout).await;
    }
    for (name, cluster) in &clusters.0 {
        let kinds = objects
            .iter()
            .filter(|(n, _, _)| n == name)
            .filter_map(|(_, _, o)| ObjectRef::of(o).map(|r| r.gvk))
            .collect();
        wait_until_served(cluster, kinds, options.timeout).await;
    }
    let mut refused = Vec::new();
    for (name, cluster, object) in objects {
        apply_in(name, cluster, &fake_nodes, object, &mut created, &mut refused).await;
    }
    let step = Step { dir: case, label: String::new(), refused };
    check(clusters, &hosts, place, since, step, options.timeout, &mut mismatches).await?;

    for step in steps {
        let label = format!("steps/{}/", step.file_name().map(|n| n.to_string_lossy()).unwrap_or_default());
        let mut refused = Vec::new();
        for entry in place.read(&step.join("apply.yaml"))? {
            let (name, cluster, object) = match clusters.of(entry) {
                Ok(found) => found,
                Err(e) => {
                    mismatches.push(format!("{label}apply.yaml: {e}"));
                    continue;
                }
            };
            if is_crd(&object) {
                if let Err(e) = install_crd(cluster, object, options.timeout).await {
                    mismatches.push(format!("{label}apply.yaml: {}{e}", CaseClusters::label(name)));
                }
            } else {
                apply_in(name, cluster, &fake_nodes, object, &mut created, &mut refused).await;
            }
        }
        for entry in place.read(&step.join("delete.yaml"))? {
            let (name, cluster, object) = match clusters.of(entry) {
                Ok(found) => found,
                Err(e) => {
                    mismatches.push(format!("{label}delete.yaml: {e}"));
                    continue;
                }
            };
            let Some(r) = ObjectRef::of(&object) else {
                mismatches.push(format!("{label}delete.yaml: an entry lacks apiVersion, kind or metadata.name"));
                continue;
            };
            if let Err(e) = cluster.delete(&r, Propagation::Background).await {
                refused.push(format!("{}{r}: {e}", CaseClusters::label(name)));
            }
        }
        let step = Step { dir: &step, label, refused };
        check(clusters, &hosts, place, since, step, options.timeout, &mut mismatches).await?;
    }
    // What the case created goes with it, unless kept, while the controller
    // still runs: it finalizes its objects (a finalizer left behind would
    // hold the case's namespace in Terminating for good).
    if !options.keep {
        for (name, cluster) in &clusters.0 {
            let here: Vec<ObjectRef> = created.iter().filter(|(n, _)| n == name).map(|(_, r)| r.clone()).collect();
            remove_created(cluster, &here, &fake_nodes, &place.namespaces(), options.timeout.min(CLEANUP_WAIT)).await;
        }
    }
    fake_nodes.stop(options.keep).await;
    let installed = hosts.served(&webhooks.registry);
    hosts.shutdown().await;
    webhooks.server.shutdown().await;
    for (name, component) in installed {
        let (Some(cluster), Some(install)) = (clusters.0.get(&name), webhooks.registry.install_for(&name)) else {
            continue;
        };
        if let Err(e) = crate::serve::webhook::install::uninstall(cluster, &component.manifest, &install).await {
            tracing::warn!(cluster = %name, component = %component.manifest.name, error = %e, "cannot remove the webhook configurations");
        }
    }
    Ok(mismatches)
}

/// [`apply`] in cluster `name`, noting what it created and what it
/// refused. A Node only in `default`: the fake kubelet runs there.
async fn apply_in<'a>(
    name: &'a str,
    cluster: &KubeCluster,
    fake_nodes: &nodes::FakeNodes,
    object: Value,
    created: &mut Vec<(&'a str, ObjectRef)>,
    refused: &mut Vec<String>,
) {
    let label = CaseClusters::label(name);
    if !label.is_empty() && object.get("kind").and_then(Value::as_str) == Some("Node") {
        refused.push(format!("{label}a Node: `capstan e2e` keeps Nodes alive in cluster default only"));
        return;
    }
    let mut made = Vec::new();
    if let Err(e) = apply(cluster, fake_nodes, object, &mut made).await {
        refused.push(format!("{label}{e}"));
    }
    created.extend(made.into_iter().map(|r| (name, r)));
}

/// Longest wait for the objects a case created to be finalized and gone.
const CLEANUP_WAIT: Duration = Duration::from_secs(30);

/// Deletes `created` (newest first) and waits up to `wait` until they are
/// gone, meanwhile deleting at once the Pods in `namespaces` bound to the
/// case's Nodes (those the deletions leave terminating, and those the
/// garbage collector deletes after their owners); warns about each object
/// still there, saying what holds it.
async fn remove_created(
    cluster: &KubeCluster,
    created: &[ObjectRef],
    fake_nodes: &nodes::FakeNodes,
    namespaces: &[String],
    wait: Duration,
) {
    fake_nodes.release_bound_pods(namespaces).await;
    for r in created.iter().rev() {
        if let Err(e) = cluster.delete(r, Propagation::Background).await
            && !e.is_not_found()
        {
            tracing::warn!(object = %r, error = %e, "cannot delete what the case created");
        }
    }
    let deadline = Instant::now() + wait;
    let mut left: Vec<&ObjectRef> = created.iter().collect();
    loop {
        fake_nodes.release_bound_pods(namespaces).await;
        let mut still = Vec::new();
        for r in left {
            match cluster.get(r).await {
                Err(e) if e.is_not_found() => {}
                Ok(object) if Instant::now() >= deadline => {
                    tracing::warn!(object = %r, reason = why_still_there(&object), "still there after the case");
                }
                _ => still.push(r),
            }
        }
        left = still;
        if left.is_empty() || Instant::now() >= deadline {
            for r in &left {
                tracing::warn!(object = %r, "cannot tell whether it is gone after the case");
            }
            return;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// What keeps `object`, deleted, on the cluster.
fn why_still_there(object: &Value) -> String {
    let finalizers: Vec<&str> = object
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let node = object.pointer("/spec/nodeName").and_then(Value::as_str);
    if object.pointer("/metadata/deletionTimestamp").is_none() {
        "not being deleted (the deletion was refused or not made)".to_owned()
    } else if !finalizers.is_empty() {
        format!("finalizers not removed: {}", finalizers.join(", "))
    } else if let (Some(node), Some("Pod")) = (node, object["kind"].as_str()) {
        format!("a Pod bound to Node {node}, waiting for its kubelet to confirm it stopped")
    } else {
        "still being deleted (dependents in foreground deletion?)".to_owned()
    }
}

/// Creates or updates a CRD and waits until it is established.
async fn install_crd(cluster: &KubeCluster, crd: Value, timeout: Duration) -> Result<(), String> {
    let r = ObjectRef::of(&crd).ok_or("a CRD lacks its name")?;
    let patch = Patch::Apply { object: crd.clone(), field_manager: "capstan-e2e".into(), force: true };
    cluster.patch(&r, patch, Subresource::Main).await.map_err(|e| format!("{r}: {e}"))?;
    let deadline = Instant::now() + timeout;
    loop {
        let established = cluster.get(&r).await.ok().is_some_and(|c| {
            c.pointer("/status/conditions")
                .and_then(Value::as_array)
                .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Established" && c["status"] == "True"))
        });
        if established {
            let kind = crd.pointer("/spec/names/kind").and_then(Value::as_str).unwrap_or_default();
            let group = crd.pointer("/spec/group").and_then(Value::as_str).unwrap_or_default();
            let served = crd.pointer("/spec/versions").and_then(Value::as_array).into_iter().flatten();
            let kinds = served
                .filter(|v| v["served"] == true)
                .filter_map(|v| v["name"].as_str())
                .map(|version| Gvk::new(group, version, kind))
                .collect();
            wait_until_served(cluster, kinds, deadline.saturating_duration_since(Instant::now())).await;
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("{r} is not established after {timeout:?}"));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits (at most `timeout`) until discovery serves `kinds`: a CRD is
/// established before the API server's discovery lists its kind, and a
/// write in between fails as "not served". A kind still not served then is
/// left to the write to report.
async fn wait_until_served(cluster: &KubeCluster, mut kinds: Vec<Gvk>, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    kinds.sort_by_key(ToString::to_string);
    kinds.dedup();
    for kind in kinds {
        while let Err(e) = cluster.resolve(&kind).await {
            if !e.is_not_found() || Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// Waits (at most `timeout`) until the API server calls the component's
/// webhooks: it takes new configurations from an informer, so the first
/// writes could pass unreviewed. Probes with server-side dry runs of the
/// given objects.
async fn wait_for_webhooks(cluster: &KubeCluster, component: &str, objects: &[Value], timeout: Duration) {
    if objects.is_empty() {
        // Nothing to probe with: no call could be seen, and no given
        // object is written unreviewed.
        return;
    }
    let before = webhook_requests(component);
    let deadline = Instant::now() + timeout;
    let dry = kube::api::PostParams { dry_run: true, ..kube::api::PostParams::default() };
    while Instant::now() < deadline {
        for object in objects {
            let (Some(r), Ok(typed)) =
                (ObjectRef::of(object), serde_json::from_value::<kube::api::DynamicObject>(object.clone()))
            else {
                continue;
            };
            let Ok(resolved) = cluster.resolve(&r.gvk).await else { continue };
            let api: kube::Api<kube::api::DynamicObject> = match &r.namespace {
                Some(ns) => kube::Api::namespaced_with(cluster.client().clone(), ns, &resolved.resource),
                None => kube::Api::all_with(cluster.client().clone(), &resolved.resource),
            };
            let _ = api.create(&dry, &typed).await;
        }
        if webhook_requests(component) > before {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tracing::warn!(component, "no webhook call seen for the given objects; going on");
}

/// Creates `object`, or merges it into the existing one (spec and metadata;
/// status through the status subresource, as `capstan test` does). An
/// error (a refused write) is returned as text. A Node is created with its
/// status too, as a kubelet registers one (so no scheduler sees it without
/// its conditions), and has its Lease renewed by `fake_nodes` from then on;
/// a new Node that is `Ready` is waited for until it is schedulable (see
/// [`wait_until_schedulable`]).
async fn apply(
    cluster: &KubeCluster,
    fake_nodes: &nodes::FakeNodes,
    object: Value,
    created: &mut Vec<ObjectRef>,
) -> Result<(), String> {
    let r = ObjectRef::of(&object).ok_or("an object lacks apiVersion, kind or metadata.name")?;
    let node = r.gvk == Gvk::new("", "v1", "Node");
    let mut main = object.clone();
    let status = if node { main.get("status").cloned() } else { main.as_object_mut().and_then(|m| m.remove("status")) };
    let exists = match cluster.get(&r).await {
        Ok(_) => true,
        Err(e) if e.is_not_found() => false,
        Err(e) => return Err(format!("{r}: {e}")),
    };
    let written = if exists {
        cluster.patch(&r, Patch::Merge(main), Subresource::Main).await
    } else {
        cluster.create(main).await
    };
    written.map_err(|e| format!("{r}: {e}"))?;
    if !exists {
        created.push(r.clone());
        if node {
            fake_nodes.register(&r.name).await;
        }
    }
    if let Some(status) = status {
        let patch = Patch::Merge(json!({"status": status}));
        cluster.patch(&r, patch, Subresource::Status).await.map_err(|e| format!("{r} status: {e}"))?;
    }
    if node && !exists && is_ready(&object) && !has_taint(&object, NOT_READY_TAINT) {
        wait_until_schedulable(cluster, &r).await;
    }
    Ok(())
}

/// The taint the API server's `TaintNodesByCondition` admission plugin puts
/// on every new Node, until the node lifecycle controller sees it `Ready`.
const NOT_READY_TAINT: &str = "node.kubernetes.io/not-ready";

/// Longest wait for a new `Ready` Node to lose [`NOT_READY_TAINT`].
const SCHEDULABLE_WAIT: Duration = Duration::from_secs(10);

/// True if the Node's `Ready` condition is `True`.
fn is_ready(node: &Value) -> bool {
    let mut conditions = node.pointer("/status/conditions").and_then(Value::as_array).into_iter().flatten();
    conditions.any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// True if the Node has a taint with this key.
fn has_taint(node: &Value, key: &str) -> bool {
    let mut taints = node.pointer("/spec/taints").and_then(Value::as_array).into_iter().flatten();
    taints.any(|t| t["key"] == key)
}

/// Waits (at most [`SCHEDULABLE_WAIT`]) until a new Node has lost the
/// [`NOT_READY_TAINT`] the API server gave it at creation, as a kubelet's
/// Node does once the node lifecycle controller has seen it `Ready`: a
/// scheduler that honours taints (kube-scheduler, the zone scheduler)
/// places nothing there before, so the Pods given after the Node would
/// otherwise race that controller. A Node the scenario gives not `Ready`,
/// or with that taint, is not waited for; one still tainted then is left
/// to the case's checks.
async fn wait_until_schedulable(cluster: &KubeCluster, node: &ObjectRef) {
    let deadline = Instant::now() + SCHEDULABLE_WAIT;
    while Instant::now() < deadline {
        match cluster.get(node).await {
            Ok(now) if !has_taint(&now, NOT_READY_TAINT) => return,
            Ok(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(_) => return,
        }
    }
    tracing::warn!(node = %node, "a Ready Node is still tainted not-ready; going on");
}

/// One step to check: its folder, how mismatches name it, and the writes
/// the API server refused.
struct Step<'a> {
    dir: &'a Path,
    label: String,
    refused: Vec<String>,
}

/// Waits until what the step expects holds, or `timeout`; adds to
/// `mismatches` what still did not hold then.
async fn check(
    clusters: &CaseClusters,
    hosts: &CaseHosts,
    place: &Place,
    since: k8s_openapi::jiff::Timestamp,
    step: Step<'_>,
    timeout: Duration,
    mismatches: &mut Vec<String>,
) -> Result<(), Error> {
    let Step { dir, label, refused } = step;
    let expected_error = std::fs::read_to_string(dir.join("error.txt")).ok().map(|s| place.text(s.trim()));
    let expect = place.read(&dir.join("expect.yaml"))?;
    let absent = place.read(&dir.join("absent.yaml"))?;
    let events = place.read(&dir.join("events.yaml"))?;
    if expected_error.is_none() {
        for r in &refused {
            mismatches.push(format!("{label}unexpected error: {r}"));
        }
    }
    let deadline = Instant::now() + timeout;
    loop {
        let mut now = Vec::new();
        let recorded = recorded_events(clusters, place, since).await;
        if let Some(text) = &expected_error {
            let mut errors = refused.clone();
            errors.extend(hosts.last_errors());
            errors.extend(
                recorded
                    .iter()
                    .filter(|e| e["type"] == "Warning")
                    .filter_map(|e| e["note"].as_str().map(str::to_owned)),
            );
            if !errors.iter().any(|e| e.contains(text.as_str())) {
                now.push(format!("{label}error.txt: expected an error containing {text:?}, got {errors:?}"));
            }
        }
        for entry in &expect {
            let (name, cluster, expected) = match clusters.of(entry.clone()) {
                Ok(found) => found,
                Err(e) => {
                    now.push(format!("{label}expect.yaml: {e}"));
                    continue;
                }
            };
            let Some(r) = ObjectRef::of(&expected) else {
                now.push(format!("{label}expect.yaml: an entry lacks apiVersion, kind or metadata.name"));
                continue;
            };
            let at = CaseClusters::label(name);
            match cluster.get(&r).await {
                Ok(actual) => {
                    let mut diffs = Vec::new();
                    subset_diff(&expected, &actual, String::new(), &mut diffs);
                    now.extend(diffs.into_iter().map(|d| format!("{label}expect.yaml: {at}{r}: {d}")));
                }
                Err(e) => now.push(format!("{label}expect.yaml: {at}{r}: {e}")),
            }
        }
        for entry in &absent {
            let (name, cluster, gone) = match clusters.of(entry.clone()) {
                Ok(found) => found,
                Err(e) => {
                    now.push(format!("{label}absent.yaml: {e}"));
                    continue;
                }
            };
            let Some(r) = ObjectRef::of(&gone) else {
                now.push(format!("{label}absent.yaml: an entry lacks apiVersion, kind or metadata.name"));
                continue;
            };
            if cluster.get(&r).await.is_ok() {
                now.push(format!("{label}absent.yaml: {}{r} still exists", CaseClusters::label(name)));
            }
        }
        for expected in &events {
            let found = recorded.iter().any(|actual| {
                let mut diffs = Vec::new();
                subset_diff(expected, actual, String::new(), &mut diffs);
                diffs.is_empty()
            });
            if !found {
                now.push(format!(
                    "{label}events.yaml: no recorded event matches {expected}; recorded: {}",
                    recorded.iter().map(Value::to_string).collect::<Vec<_>>().join(", ")
                ));
            }
        }
        if now.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            mismatches.push(format!("{label}still not so after {timeout:?}:"));
            mismatches.extend(now);
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The Events recorded since the case started in its namespaces and in
/// `default` (where Events about cluster-scoped objects go), in every
/// cluster, in the shape `events.yaml` matches, each with its `cluster`.
async fn recorded_events(clusters: &CaseClusters, place: &Place, since: k8s_openapi::jiff::Timestamp) -> Vec<Value> {
    let mut recorded = Vec::new();
    for (name, cluster) in &clusters.0 {
        recorded.extend(recorded_in(name, cluster, place, since).await);
    }
    recorded
}

/// [`recorded_events`] of one cluster, `name`.
async fn recorded_in(
    name: &str,
    cluster: &KubeCluster,
    place: &Place,
    since: k8s_openapi::jiff::Timestamp,
) -> Vec<Value> {
    let kind = Gvk::new("events.k8s.io", "v1", "Event");
    let since = since.as_second();
    let mut recorded = Vec::new();
    for namespace in place.namespaces().iter().map(String::as_str).chain(["default"]) {
        let events = cluster.list(&kind, Some(namespace), &ListParams::default()).await.unwrap_or_default();
        recorded.extend(
            events
                .into_iter()
                .filter(|e| {
                    e.pointer("/metadata/creationTimestamp")
                        .and_then(Value::as_str)
                        .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
                        .is_some_and(|t| t.as_second() >= since)
                })
                .map(|e| {
                    json!({
                        "cluster": name,
                        "reason": e["reason"],
                        "type": e["type"],
                        "action": e["action"],
                        "note": e["note"],
                        "regarding": e["regarding"],
                    })
                }),
        );
    }
    recorded
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A case of `conversion.yaml` alone asks nothing of a cluster: it
    /// neither makes a namespace nor starts a host (one that did waited its
    /// whole timeout for a webhook call nothing would make).
    #[tokio::test]
    async fn a_case_of_conversion_yaml_alone_passes_without_touching_the_cluster() {
        let dir = std::env::temp_dir().join(format!("capstan-e2e-conversion-only-{}", random_suffix()));
        std::fs::create_dir_all(&dir).expect("made");
        std::fs::write(dir.join("conversion.yaml"), "desiredAPIVersion: example.com/v1\nobjects: []\nexpect: []\n")
            .expect("written");
        // An API server that is not there: any request fails.
        let config = kube::Config::new("http://127.0.0.1:1".parse().expect("a URL"));
        let client = kube::Client::try_from(config).expect("a client");
        let result = run_case(client, Path::new("no-component.wasm"), &dir, &Options::default()).await;
        std::fs::remove_dir_all(&dir).expect("removed");
        let result = result.expect("no request made");
        assert!(result.mismatches.is_empty(), "{:?}", result.mismatches);
    }

    #[test]
    fn a_case_namespace_is_a_dns_label_named_after_the_case() {
        let ns = namespace_for("Empty_Message", &random_suffix());
        assert!(ns.starts_with("e2e-empty-message-") && ns.len() == "e2e-empty-message-".len() + 6, "{ns}");
        let long = namespace_for(&"x".repeat(100), &random_suffix());
        assert!(long.len() <= 63, "{long}");
        assert!(namespace_for("__", "abcdef") == "e2e-abcdef");
        crate::policy::names::check("namespace", &long, crate::policy::names::Rule::Dns1123Label).expect("valid");
    }

    #[test]
    fn objects_and_events_move_into_the_case_namespace_and_the_cases_own_namespaces_stay() {
        let place =
            Place { namespace: "e2e-x".into(), own: BTreeSet::from(["tenant-acme".to_owned()]), ..Place::default() };
        let cm = place.localize(json!({"kind": "ConfigMap", "metadata": {"name": "a", "namespace": "demo"}}));
        assert_eq!(cm["metadata"]["namespace"], "e2e-x");
        let node = place.localize(json!({"kind": "Node", "metadata": {"name": "n"}}));
        assert!(node["metadata"].get("namespace").is_none());
        let quota =
            place.localize(json!({"kind": "ResourceQuota", "metadata": {"name": "q", "namespace": "tenant-acme"}}));
        assert_eq!(quota["metadata"]["namespace"], "tenant-acme");
        let event = place.localize(json!({"reason": "Created", "regarding": {"name": "a", "namespace": "demo"}}));
        assert_eq!(event["regarding"]["namespace"], "e2e-x");
        assert_eq!(place.namespaces(), ["e2e-x", "tenant-acme"]);
    }

    fn scheduler_case() -> Place {
        let names = Names {
            own: BTreeSet::new(),
            used: BTreeSet::from(["demo".to_owned()]),
            nodes: BTreeSet::from(["n-a".to_owned(), "a".to_owned()]),
        };
        Place::new(names, "qwerty", "e2e-x-qwerty".into())
    }

    #[test]
    fn namespaces_and_node_names_in_event_notes_are_those_on_the_cluster() {
        let place = scheduler_case();
        let event = place.localize(json!({
            "note": "Successfully assigned demo/p1 to n-a",
            "regarding": {"kind": "Pod", "name": "p1", "namespace": "demo"},
        }));
        assert_eq!(event["note"], "Successfully assigned e2e-x-qwerty/p1 to n-a-qwerty");
        assert_eq!(event["regarding"]["namespace"], "e2e-x-qwerty");
        assert_eq!(
            place.restore("note: Successfully assigned e2e-x-qwerty/p1 to n-a-qwerty"),
            "note: Successfully assigned <case namespace>/p1 to n-a"
        );
    }

    #[test]
    fn a_nodes_name_is_renamed_wherever_it_is_a_whole_word_and_nowhere_else() {
        let place = scheduler_case();
        let node = place.localize(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n-a",
            "labels": {"kubernetes.io/hostname": "n-a", "zone": "a"}}}));
        assert_eq!(node["metadata"]["name"], "n-a-qwerty");
        assert_eq!(node["metadata"]["labels"], json!({"kubernetes.io/hostname": "n-a-qwerty", "zone": "a-qwerty"}));
        for (text, expected) in [
            ("bound to n-a.", "bound to n-a-qwerty."),
            ("n-a, a", "n-a-qwerty, a-qwerty"),
            ("n-ab n-a.b x-n-a a.b", "n-ab n-a.b x-n-a a.b"),
            ("0/2 nodes are available: 2 Insufficient cpu.", "0/2 nodes are available: 2 Insufficient cpu."),
            ("registry.example/demo/app:1 and demo/p1", "registry.example/demo/app:1 and e2e-x-qwerty/p1"),
            ("demo is not demo/", "demo is not e2e-x-qwerty/"),
        ] {
            assert_eq!(place.text(text), expected, "{text}");
        }
    }

    #[test]
    fn only_a_ready_node_given_without_the_not_ready_taint_is_waited_for() {
        let ready = json!({"status": {"conditions": [{"type": "MemoryPressure", "status": "False"},
            {"type": "Ready", "status": "True"}]}});
        assert!(is_ready(&ready) && !has_taint(&ready, NOT_READY_TAINT));
        assert!(!is_ready(&json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}})));
        assert!(!is_ready(&json!({"metadata": {"name": "n"}})));
        let tainted = json!({"spec": {"taints": [{"key": "a", "effect": "NoSchedule"},
            {"key": NOT_READY_TAINT, "effect": "NoSchedule"}]}});
        assert!(has_taint(&tainted, NOT_READY_TAINT) && !has_taint(&tainted, "b"));
    }

    #[test]
    fn what_keeps_a_deleted_object_is_named() {
        let deleting = "2026-01-01T00:00:00Z";
        let cases = [
            (json!({"kind": "ConfigMap", "metadata": {}}), "not being deleted"),
            (
                json!({"kind": "ConfigMap", "metadata": {"deletionTimestamp": deleting, "finalizers": ["a/b"]}}),
                "finalizers not removed: a/b",
            ),
            (
                json!({"kind": "Pod", "metadata": {"deletionTimestamp": deleting}, "spec": {"nodeName": "n1"}}),
                "a Pod bound to Node n1, waiting for its kubelet",
            ),
            (json!({"kind": "ConfigMap", "metadata": {"deletionTimestamp": deleting}}), "still being deleted"),
        ];
        for (object, expected) in cases {
            assert!(why_still_there(&object).starts_with(expected), "{object}: {}", why_still_there(&object));
        }
    }
}
