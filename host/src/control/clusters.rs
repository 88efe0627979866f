//! The clusters one host process serves, by name: the registry fleet
//! controllers reach their member clusters through. The process's fleet
//! ([`crate::serve::fleet`]) engages a cluster here once its host runs and
//! disengages it when it stops; the mock host does the same with its
//! in-memory clusters. A fleet controller subscribes to the changes: a
//! member engaged brings a reconcile of every primary object and a watch
//! of its children there; a member disengaged ends that watch.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use tokio::sync::watch;

use crate::cluster::{Cluster, Members};
use crate::control::informer::Informers;
use crate::sync::{read, write};

/// One engaged cluster.
#[derive(Clone)]
pub struct Engaged {
    /// Where its API calls go.
    pub backend: Arc<dyn Cluster>,
    /// Its shared watches, on a real cluster (the mock host has none).
    pub informers: Option<Arc<Informers>>,
}

impl std::fmt::Debug for Engaged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engaged").field("informers", &self.informers.is_some()).finish_non_exhaustive()
    }
}

/// The engaged clusters by name, and a signal of every change.
pub struct Clusters {
    engaged: RwLock<BTreeMap<String, Engaged>>,
    /// Counts the changes; fleet controllers wait on it.
    changed: watch::Sender<u64>,
}

impl std::fmt::Debug for Clusters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Clusters").field("engaged", &Members::names(self)).finish()
    }
}

impl Default for Clusters {
    fn default() -> Self {
        Self { engaged: RwLock::new(BTreeMap::new()), changed: watch::channel(0).0 }
    }
}

impl Clusters {
    /// No cluster engaged yet.
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    /// Engages the cluster `name` (replacing one engaged under that name
    /// before, e.g. with rotated credentials).
    pub fn engage(&self, name: &str, engaged: Engaged) {
        write(&self.engaged).insert(name.to_owned(), engaged);
        self.changed.send_modify(|n| *n += 1);
    }

    /// Disengages the cluster `name`; returns whether it was engaged.
    pub fn disengage(&self, name: &str) -> bool {
        let was = write(&self.engaged).remove(name).is_some();
        if was {
            self.changed.send_modify(|n| *n += 1);
        }
        was
    }

    /// Disengages the cluster `name` if it is still the one engaged with
    /// `backend` (not one engaged under the same name since); returns
    /// whether it was.
    pub fn disengage_exact(&self, name: &str, backend: &Arc<dyn Cluster>) -> bool {
        let mut engaged = write(&self.engaged);
        if !engaged.get(name).is_some_and(|e| Arc::ptr_eq(&e.backend, backend)) {
            return false;
        }
        engaged.remove(name);
        drop(engaged);
        self.changed.send_modify(|n| *n += 1);
        true
    }

    /// The cluster engaged as `name`.
    pub fn engaged(&self, name: &str) -> Option<Engaged> {
        read(&self.engaged).get(name).cloned()
    }

    /// Every engaged cluster, by name.
    pub fn all(&self) -> Vec<(String, Engaged)> {
        read(&self.engaged).iter().map(|(n, e)| (n.clone(), e.clone())).collect()
    }

    /// A receiver that sees every later engagement and disengagement.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }
}

impl Members for Clusters {
    fn get(&self, name: &str) -> Option<Arc<dyn Cluster>> {
        read(&self.engaged).get(name).map(|e| Arc::clone(&e.backend))
    }

    fn names(&self) -> Vec<String> {
        read(&self.engaged).keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::mock::MockCluster;

    #[test]
    fn clusters_come_and_go_and_each_change_is_signalled() {
        let clusters = Clusters::new();
        let changes = clusters.subscribe();
        let west: Arc<dyn Cluster> = Arc::new(MockCluster::new());
        clusters.engage("west", Engaged { backend: Arc::clone(&west), informers: None });
        clusters.engage("east", Engaged { backend: Arc::new(MockCluster::new()), informers: None });
        assert_eq!(Members::names(&*clusters), ["east", "west"]);
        assert!(Members::get(&*clusters, "west").is_some_and(|c| Arc::ptr_eq(&c, &west)));
        let other: Arc<dyn Cluster> = Arc::new(MockCluster::new());
        assert!(!clusters.disengage_exact("west", &other), "another cluster engaged as west");
        assert!(clusters.disengage_exact("west", &west));
        assert!(!clusters.disengage("west"), "gone already");
        assert!(Members::get(&*clusters, "west").is_none());
        assert_eq!(*changes.borrow(), 3);
    }
}
