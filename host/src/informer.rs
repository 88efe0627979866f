//! Shared watches: one watcher and reflector store per kind (and
//! namespace scope), shared by every controller that watches the kind.
//! Restarts, relists and bookmarks are handled by kube-runtime's watcher
//! with its default backoff, so an API server restart only delays events.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event};
use tokio::sync::{broadcast, watch};

use crate::cluster;
use crate::cluster::kube::KubeCluster;
use crate::object::Gvk;

/// Changes buffered per subscriber before it lags (a lagging subscriber
/// re-reads the whole store instead).
pub const CHANGE_BUFFER: usize = 4096;

/// One change seen by a watch.
#[derive(Clone, Debug)]
pub struct Change {
    /// The object (its last state, for a deletion).
    pub object: Arc<DynamicObject>,
    /// True if it was deleted.
    pub deleted: bool,
}

/// A running watch of one kind, with its cache.
pub struct Informer {
    gvk: Gvk,
    store: Store<DynamicObject>,
    changes: broadcast::Sender<Change>,
    synced: watch::Receiver<bool>,
    restarts: Arc<AtomicU64>,
    last_error: Arc<Mutex<Option<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for Informer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Informer").field("gvk", &self.gvk).finish_non_exhaustive()
    }
}

impl Drop for Informer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Informer {
    /// The kind watched.
    pub fn gvk(&self) -> &Gvk {
        &self.gvk
    }

    /// The cache: every object of the kind, as last seen.
    pub fn store(&self) -> &Store<DynamicObject> {
        &self.store
    }

    /// Subscribes to changes from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Change> {
        self.changes.subscribe()
    }

    /// How often the watch was (re)started after the first list.
    pub fn restarts(&self) -> u64 {
        self.restarts.load(Ordering::Relaxed)
    }

    /// The last error of the watch, cleared by the next event it delivers
    /// (e.g. a 403 when the host's RBAC does not allow watching the kind).
    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Waits until the first list is complete.
    pub async fn synced(&self) {
        let mut synced = self.synced.clone();
        let _ = synced.wait_for(|s| *s).await;
    }
}

/// Group, kind and label selector of a watch.
type InformerKey = (String, String, Option<String>);

/// The shared watches of one host.
pub struct Informers {
    cluster: KubeCluster,
    namespace: Option<String>,
    running: Mutex<HashMap<InformerKey, Arc<Informer>>>,
}

impl std::fmt::Debug for Informers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Informers").field("namespace", &self.namespace).finish_non_exhaustive()
    }
}

impl Informers {
    /// Watches in `namespace`, or in all namespaces with `None`.
    pub fn new(cluster: KubeCluster, namespace: Option<String>) -> Self {
        Self { cluster, namespace, running: Mutex::new(HashMap::new()) }
    }

    /// How many kinds are watched.
    pub fn len(&self) -> usize {
        self.running.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// True if no kind is watched.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The informer of `gvk`, started on first use; its store also serves
    /// the cluster backend's reads of the kind.
    ///
    /// # Errors
    ///
    /// [`cluster::Error::NotFound`] if the server does not serve the kind.
    pub async fn get(&self, gvk: &Gvk) -> Result<Arc<Informer>, cluster::Error> {
        self.get_selected(gvk, None).await
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
        let client = self.cluster.client().clone();
        let api: Api<DynamicObject> = match (&self.namespace, resolved.namespaced()) {
            (Some(ns), true) => Api::namespaced_with(client, ns, &resolved.resource),
            _ => Api::all_with(client, &resolved.resource),
        };
        let writer = reflector::store::Writer::new(resolved.resource.clone());
        let store = writer.as_reader();
        let (changes, _) = broadcast::channel(CHANGE_BUFFER);
        let (synced_tx, synced) = watch::channel(false);
        let restarts = Arc::new(AtomicU64::new(0));
        let last_error = Arc::new(Mutex::new(None));
        let span = tracing::info_span!("watch", kind = %gvk, selector = label_selector.unwrap_or_default());
        let errors = Arc::clone(&last_error);
        let mut config = watcher::Config::default();
        if let Some(selector) = label_selector {
            config = config.labels(selector);
        }
        let watch =
            run_watch(gvk.clone(), api, config, writer, changes.clone(), synced_tx, Arc::clone(&restarts), errors);
        let task = tokio::spawn(tracing::Instrument::instrument(watch, span));
        let informer =
            Arc::new(Informer { gvk: gvk.clone(), store: store.clone(), changes, synced, restarts, last_error, task });
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        // Another caller may have started it meanwhile: keep theirs.
        let informer = Arc::clone(running.entry(key).or_insert(informer));
        drop(running);
        if label_selector.is_none() {
            self.cluster.use_cache(&gvk.group, &gvk.kind, informer.store.clone());
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
    gvk: Gvk,
    api: Api<DynamicObject>,
    config: watcher::Config,
    writer: reflector::store::Writer<DynamicObject>,
    changes: broadcast::Sender<Change>,
    synced: watch::Sender<bool>,
    restarts: Arc<AtomicU64>,
    last_error: Arc<Mutex<Option<String>>>,
) {
    tracing::info!(kind = %gvk, "watch starting");
    let stream = watcher::watcher(api, config).backoff(WatchBackoff::default()).reflect(writer);
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
        match event {
            Ok(Event::Apply(o)) => {
                tracing::trace!(kind = %gvk, name = ?o.metadata.name, "applied");
                let _ = changes.send(Change { object: Arc::new(o), deleted: false });
            }
            Ok(Event::InitApply(o)) => listed.push(o),
            Ok(Event::Delete(o)) => {
                let _ = changes.send(Change { object: Arc::new(o), deleted: true });
            }
            Ok(Event::Init) => {
                listed.clear();
                if first_list_done {
                    restarts.fetch_add(1, Ordering::Relaxed);
                    crate::metrics::metrics().watch_restarted(&gvk);
                    tracing::info!(kind = %gvk, "watch restarted, relisting");
                }
            }
            Ok(Event::InitDone) => {
                tracing::debug!(kind = %gvk, objects = listed.len(), "list done");
                for o in listed.drain(..) {
                    let _ = changes.send(Change { object: Arc::new(o), deleted: false });
                }
                first_list_done = true;
                let _ = synced.send(true);
            }
            Err(e) => tracing::warn!(kind = %gvk, error = %e, "watch failed, retrying with backoff"),
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
