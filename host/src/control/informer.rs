//! Shared watches: one informer per kind (and label selector), shared by
//! every controller that watches the kind. An informer runs one watcher and
//! reflector store for all namespaces, or, when the host watches a list of
//! namespaces, one per namespace (a reflector store cannot take the
//! interleaved relists of two watchers), presented as one cache and one
//! stream of changes. Restarts, relists and bookmarks are handled by
//! kube-runtime's watcher, so an API server restart only delays events.
//!
//! Cached objects keep their `managedFields` trimmed to the managers (see
//! [`trim_managed_fields`]), and each store has an [`OwnerIndex`], so a
//! controller finds an owner's children at a cost that grows with the
//! children, not with the namespace.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DynamicObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector;
use kube::runtime::watcher::{self, Event};
use tokio::sync::{broadcast, watch};

use crate::cluster;
use crate::cluster::kube::{Cache, KubeCluster, OwnerIndex, trim_managed_fields};
use crate::object::Gvk;

/// Changes buffered per subscriber before it lags (a lagging subscriber
/// re-reads the whole store instead).
pub const CHANGE_BUFFER: usize = 4096;

/// One change seen by a watch: the object's metadata, which is what
/// routing a change needs (the object itself is in the cache). A change
/// stream buffers up to [`CHANGE_BUFFER`] changes per kind, so carrying
/// whole objects would keep that many stale copies alive.
#[derive(Clone, Debug)]
pub struct Change {
    /// The object's metadata (its last state, for a deletion), without
    /// `managedFields`.
    pub meta: Arc<ObjectMeta>,
    /// True if it was deleted.
    pub deleted: bool,
}

impl Change {
    /// The change of `object`.
    pub fn of(object: &DynamicObject, deleted: bool) -> Self {
        let mut meta = object.metadata.clone();
        meta.managed_fields = None;
        Self { meta: Arc::new(meta), deleted }
    }
}

/// A running watch of one kind, with its cache: one watcher for all
/// namespaces (or a cluster-scoped kind), or one per namespace watched.
pub struct Informer {
    gvk: Gvk,
    cache: Cache,
    changes: broadcast::Sender<Change>,
    restarts: Arc<AtomicU64>,
    watches: Vec<Watch>,
}

/// One watcher of an informer, feeding one reflector store.
struct Watch {
    /// The namespace watched; `None`: all.
    namespace: Option<String>,
    synced: watch::Receiver<bool>,
    last_error: Arc<Mutex<Option<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl std::fmt::Debug for Informer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Informer").field("gvk", &self.gvk).field("cache", &self.cache).finish_non_exhaustive()
    }
}

impl Informer {
    /// The kind watched.
    pub fn gvk(&self) -> &Gvk {
        &self.gvk
    }

    /// The cache: every object of the kind in the namespaces watched, as
    /// last seen.
    pub fn store(&self) -> &Cache {
        &self.cache
    }

    /// Subscribes to changes from now on, in every namespace watched.
    pub fn subscribe(&self) -> broadcast::Receiver<Change> {
        self.changes.subscribe()
    }

    /// How often a watch was (re)started after its first list, summed over
    /// the namespaces watched.
    pub fn restarts(&self) -> u64 {
        self.restarts.load(Ordering::Relaxed)
    }

    /// The last error of a watch, cleared by the next event it delivers
    /// (e.g. a 403 when the host's RBAC does not allow watching the kind).
    /// With several namespaces watched, the first namespace that has one,
    /// named in the message.
    pub fn last_error(&self) -> Option<String> {
        self.watches.iter().find_map(|w| {
            let error = w.last_error.lock().unwrap_or_else(PoisonError::into_inner).clone()?;
            Some(match &w.namespace {
                Some(ns) if self.watches.len() > 1 => format!("in namespace {ns}: {error}"),
                _ => error,
            })
        })
    }

    /// Waits until the first list is complete in every namespace watched.
    pub async fn synced(&self) {
        for w in &self.watches {
            let mut synced = w.synced.clone();
            let _ = synced.wait_for(|s| *s).await;
        }
    }
}

/// Group, kind and label selector of a watch.
type InformerKey = (String, String, Option<String>);

/// The shared watches of one host.
pub struct Informers {
    cluster: KubeCluster,
    /// The cluster's name (the `cluster` label of the watch metrics).
    cluster_name: Arc<str>,
    /// The namespaces watched; empty: all.
    namespaces: BTreeSet<String>,
    running: Mutex<HashMap<InformerKey, Arc<Informer>>>,
}

impl std::fmt::Debug for Informers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Informers").field("namespaces", &self.namespaces).finish_non_exhaustive()
    }
}

impl Informers {
    /// Watches namespaced kinds in `namespaces`, or in all namespaces when
    /// there are none. Cluster-scoped kinds are watched whole either way.
    pub fn new(cluster: KubeCluster, namespaces: impl IntoIterator<Item = String>) -> Self {
        Self {
            cluster,
            cluster_name: cluster::DEFAULT_CLUSTER.into(),
            namespaces: namespaces.into_iter().collect(),
            running: Mutex::new(HashMap::new()),
        }
    }

    /// The same, for the cluster named `name` (default:
    /// [`DEFAULT_CLUSTER`](crate::cluster::DEFAULT_CLUSTER)), which labels
    /// the watch metrics.
    #[must_use]
    pub fn in_cluster(mut self, name: Arc<str>) -> Self {
        self.cluster_name = name;
        self
    }

    /// How many kinds are watched.
    pub fn len(&self) -> usize {
        self.running.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// Stops the watches no controller uses any more (after one stopped, or
    /// was swapped for a version that watches less), and stops serving reads
    /// from their caches. Returns how many were stopped.
    pub fn prune(&self) -> usize {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        let unused: Vec<InformerKey> =
            running.iter().filter(|(_, i)| Arc::strong_count(i) == 1).map(|(k, _)| k.clone()).collect();
        for key in &unused {
            running.remove(key);
            match &key.2 {
                None => self.cluster.forget_cache(&key.0, &key.1),
                Some(selector) => self.cluster.forget_marked_cache(&key.0, &key.1, selector),
            }
            tracing::info!(group = %key.0, kind = %key.1, selector = key.2.as_deref().unwrap_or_default(), "watch stopped: no controller uses it");
        }
        unused.len()
    }

    /// True if no kind is watched.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The informer of `gvk`, started on first use; its cache also serves
    /// the cluster backend's reads of the kind.
    ///
    /// # Errors
    ///
    /// [`cluster::Error::NotFound`] if the server does not serve the kind.
    pub async fn get(&self, gvk: &Gvk) -> Result<Arc<Informer>, cluster::Error> {
        self.get_selected(gvk, None).await
    }

    /// The informer of a fleet controller's children of `gvk` in this
    /// cluster: the objects `selector` (its marks, see
    /// [`Owner::selector`](crate::object::mark::Owner::selector)) picks.
    /// Its cache also answers the cluster backend's reads of them and
    /// [`list_marked`](crate::cluster::Cluster::list_marked).
    ///
    /// # Errors
    ///
    /// [`cluster::Error::NotFound`] if the server does not serve the kind.
    pub async fn get_marked(&self, gvk: &Gvk, selector: &str) -> Result<Arc<Informer>, cluster::Error> {
        let informer = self.get_selected(gvk, Some(selector)).await?;
        self.cluster.use_marked_cache(&gvk.group, &gvk.kind, selector, informer.cache.clone());
        Ok(informer)
    }

    /// The informer of the objects of `gvk` that match `label_selector`
    /// (all objects with `None`). Only unfiltered informers serve the cluster
    /// backend's reads: a filtered cache would answer "not found" for
    /// objects that exist.
    ///
    /// # Errors
    ///
    /// [`cluster::Error::NotFound`] if the server does not serve the kind.
    pub async fn get_selected(&self, gvk: &Gvk, label_selector: Option<&str>) -> Result<Arc<Informer>, cluster::Error> {
        let key = (gvk.group.clone(), gvk.kind.clone(), label_selector.map(str::to_owned));
        if let Some(i) = self.running.lock().unwrap_or_else(PoisonError::into_inner).get(&key) {
            return Ok(Arc::clone(i));
        }
        let resolved = self.cluster.resolve(gvk).await?;
        let client = self.cluster.client();
        // One watch per namespace for a namespaced kind and a list of
        // namespaces; one watch of everything otherwise.
        let scopes: Vec<Option<&str>> = if resolved.namespaced() && !self.namespaces.is_empty() {
            self.namespaces.iter().map(|ns| Some(ns.as_str())).collect()
        } else {
            vec![None]
        };
        let (changes, _) = broadcast::channel(CHANGE_BUFFER);
        let restarts = Arc::new(AtomicU64::new(0));
        let mut config = watcher::Config::default();
        if let Some(selector) = label_selector {
            config = config.labels(selector);
        }
        let mut watches = Vec::new();
        let mut stores = Vec::new();
        for namespace in scopes {
            let api: Api<DynamicObject> = match namespace {
                Some(ns) => Api::namespaced_with(client.clone(), ns, &resolved.resource),
                None => Api::all_with(client.clone(), &resolved.resource),
            };
            let writer = reflector::store::Writer::new(resolved.resource.clone());
            let index = OwnerIndex::default();
            stores.push((namespace.map(str::to_owned), writer.as_reader(), index.clone()));
            let (synced_tx, synced) = watch::channel(false);
            let last_error = Arc::new(Mutex::new(None));
            let span = tracing::info_span!(
                "watch",
                kind = %gvk,
                namespace = namespace.unwrap_or_default(),
                selector = label_selector.unwrap_or_default(),
            );
            let run = run_watch(
                Arc::clone(&self.cluster_name),
                gvk.clone(),
                api,
                config.clone(),
                writer,
                index,
                changes.clone(),
                synced_tx,
                Arc::clone(&restarts),
                Arc::clone(&last_error),
            );
            let task = tokio::spawn(tracing::Instrument::instrument(run, span));
            watches.push(Watch { namespace: namespace.map(str::to_owned), synced, last_error, task });
        }
        let cache = Cache::indexed(resolved.resource.clone(), stores);
        let informer = Arc::new(Informer { gvk: gvk.clone(), cache, changes, restarts, watches });
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        // Another caller may have started it meanwhile: keep theirs.
        let informer = Arc::clone(running.entry(key).or_insert(informer));
        drop(running);
        if label_selector.is_none() {
            self.cluster.use_cache(&gvk.group, &gvk.kind, informer.cache.clone());
        }
        Ok(informer)
    }
}

/// Retry delays of a failed watch: 250 ms doubling to at most 5 s, ±20 %
/// jitter, reset by the first event that arrives. kube-runtime's default
/// (0.8 s to 30 s, reset after 120 s) kept objects waiting half a minute
/// after an API server restart in our tests; a controller host wants to be
/// back within seconds, and a watch costs the server little.
#[derive(Debug, Clone, Default)]
pub struct WatchBackoff {
    attempt: u32,
}

impl WatchBackoff {
    /// First delay.
    pub const MIN: std::time::Duration = std::time::Duration::from_millis(250);
    /// Longest delay.
    pub const MAX: std::time::Duration = std::time::Duration::from_secs(5);
}

impl Iterator for WatchBackoff {
    type Item = std::time::Duration;

    fn next(&mut self) -> Option<Self::Item> {
        let plain = Self::MIN.saturating_mul(1u32 << self.attempt.min(10)).min(Self::MAX);
        self.attempt = self.attempt.saturating_add(1);
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
        let jitter = 0.8 + 0.4 * (f64::from(nanos % 1000) / 1000.0);
        Some(plain.mul_f64(jitter))
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.attempt = 0;
    }
}

#[allow(clippy::too_many_arguments, reason = "one private task wiring a watch to its consumers")]
async fn run_watch(
    cluster_name: Arc<str>,
    gvk: Gvk,
    api: Api<DynamicObject>,
    config: watcher::Config,
    writer: reflector::store::Writer<DynamicObject>,
    index: OwnerIndex,
    changes: broadcast::Sender<Change>,
    synced: watch::Sender<bool>,
    restarts: Arc<AtomicU64>,
    last_error: Arc<Mutex<Option<String>>>,
) {
    tracing::info!(kind = %gvk, "watch starting");
    // Cached objects keep who manages them, not the field sets.
    let stream = watcher::watcher(api, config)
        .backoff(WatchBackoff::default())
        .modify(|o| trim_managed_fields(&mut o.metadata))
        .reflect(writer);
    let mut stream = std::pin::pin!(stream);
    let mut first_list_done = false;
    // Objects of a (re)list are announced only once the list is complete:
    // the reflector swaps its store at `InitDone`, and a consumer that reads
    // the store on an earlier announcement would find the object missing.
    let mut listed = Vec::new();
    while let Some(event) = stream.next().await {
        let mut error = last_error.lock().unwrap_or_else(PoisonError::into_inner);
        *error = event.as_ref().err().map(ToString::to_string);
        drop(error);
        if let Ok(event) = &event {
            index.apply(event);
        }
        match event {
            Ok(Event::Apply(o)) => {
                tracing::trace!(kind = %gvk, name = ?o.metadata.name, "applied");
                let _ = changes.send(Change::of(&o, false));
            }
            Ok(Event::InitApply(o)) => listed.push(o),
            Ok(Event::Delete(o)) => {
                let _ = changes.send(Change::of(&o, true));
            }
            Ok(Event::Init) => {
                listed.clear();
                if first_list_done {
                    restarts.fetch_add(1, Ordering::Relaxed);
                    crate::metrics::metrics().watch_restarted(&cluster_name, &gvk);
                    tracing::info!(kind = %gvk, "watch restarted, relisting");
                }
            }
            Ok(Event::InitDone) => {
                tracing::debug!(kind = %gvk, objects = listed.len(), "list done");
                for o in listed.drain(..) {
                    let _ = changes.send(Change::of(&o, false));
                }
                first_list_done = true;
                let _ = synced.send(true);
            }
            Err(e) => {
                crate::metrics::metrics().watch_failed(&cluster_name, &gvk);
                tracing::warn!(kind = %gvk, error = %e, "watch failed, retrying with backoff");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watch_backoff_doubles_to_its_cap_and_resets() {
        use kube::runtime::utils::Backoff as _;
        let mut b = WatchBackoff::default();
        let first = b.next().expect("endless");
        assert!(first >= WatchBackoff::MIN.mul_f64(0.8) && first <= WatchBackoff::MIN.mul_f64(1.2));
        let later: Vec<_> = (0..10).filter_map(|_| b.next()).collect();
        assert!(later.iter().all(|d| *d <= WatchBackoff::MAX.mul_f64(1.2)));
        b.reset();
        assert!(b.next().expect("endless") <= WatchBackoff::MIN.mul_f64(1.2));
    }
}
