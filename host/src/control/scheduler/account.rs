//! The per-node account of a scheduler: what the Pods bound to each Node
//! request, counting the Pods this scheduler bound that the watch has not
//! shown yet (assumed Pods), as kube-scheduler's cache does.
//!
//! # Guarantees
//!
//! - A Pod is counted once, by uid: when the watch shows a Pod this
//!   scheduler assumed, the watch's entry replaces the assumed one.
//! - An assumed Pod the watch never shows is dropped after the time
//!   given to [`Account::expire`] (the binding was lost, or the Pod was
//!   deleted before the watch showed it bound).

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use super::quantity::Resources;

/// One Pod counted on a Node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The Node it is bound to.
    pub node: String,
    /// Its namespace (to replace what a relist of one namespace shows).
    pub namespace: Option<String>,
    /// What it requests, in milli-units, `pods` included.
    pub requests: Resources,
}

/// What is requested on one Node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// The sum of the requests, in milli-units (`pods` included).
    pub requested: Resources,
    /// How many Pods.
    pub pods: u32,
}

/// The account of every Node.
#[derive(Debug, Default)]
pub struct Account {
    /// Pods the watch shows bound, by uid.
    bound: HashMap<String, Entry>,
    /// Pods this scheduler bound that the watch has not shown yet, by uid.
    assumed: HashMap<String, (Entry, Instant)>,
    /// The totals per Node, kept with every change.
    nodes: HashMap<String, Usage>,
}

impl Account {
    /// An empty account.
    pub fn new() -> Self {
        Self::default()
    }

    fn add(&mut self, entry: &Entry) {
        let usage = self.nodes.entry(entry.node.clone()).or_default();
        usage.pods += 1;
        for (name, amount) in &entry.requests {
            *usage.requested.entry(name.clone()).or_default() += amount;
        }
    }

    fn subtract(&mut self, entry: &Entry) {
        let Some(usage) = self.nodes.get_mut(&entry.node) else { return };
        usage.pods = usage.pods.saturating_sub(1);
        for (name, amount) in &entry.requests {
            if let Some(total) = usage.requested.get_mut(name) {
                *total -= amount;
            }
        }
        if usage.pods == 0 {
            self.nodes.remove(&entry.node);
        }
    }

    /// The watch shows Pod `uid` bound (or changed): it replaces what was
    /// counted for it, assumed or not.
    pub fn bound(&mut self, uid: &str, entry: Entry) {
        self.unbound(uid);
        self.add(&entry);
        self.bound.insert(uid.to_owned(), entry);
    }

    /// Pod `uid` is gone (deleted, or finished): it no longer counts.
    pub fn unbound(&mut self, uid: &str) {
        if let Some(old) = self.bound.remove(uid) {
            self.subtract(&old);
        }
        self.forget(uid);
    }

    /// A relist of `namespace` (`None`: all) shows exactly `entries`: the
    /// Pods bound there before that it does not show are gone.
    pub fn relisted(&mut self, namespace: Option<&str>, entries: Vec<(String, Entry)>) {
        let gone: Vec<String> = self
            .bound
            .iter()
            .filter(|(_, e)| namespace.is_none() || e.namespace.as_deref() == namespace)
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in gone {
            if let Some(old) = self.bound.remove(&uid) {
                self.subtract(&old);
            }
        }
        for (uid, entry) in entries {
            self.bound(&uid, entry);
        }
    }

    /// This scheduler binds Pod `uid` (counted from now on, until the watch
    /// shows it, [`forget`](Self::forget) or [`expire`](Self::expire)).
    pub fn assume(&mut self, uid: &str, entry: Entry, now: Instant) {
        if self.bound.contains_key(uid) {
            return;
        }
        self.forget(uid);
        self.add(&entry);
        self.assumed.insert(uid.to_owned(), (entry, now));
    }

    /// The binding of an assumed Pod failed: it no longer counts.
    pub fn forget(&mut self, uid: &str) {
        if let Some((old, _)) = self.assumed.remove(uid) {
            self.subtract(&old);
        }
    }

    /// Drops the assumed Pods older than `ttl` at `now`; returns how many.
    pub fn expire(&mut self, now: Instant, ttl: Duration) -> usize {
        let old: Vec<String> = self
            .assumed
            .iter()
            .filter(|(_, (_, since))| now.saturating_duration_since(*since) > ttl)
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in &old {
            self.forget(uid);
        }
        old.len()
    }

    /// True if Pod `uid` is bound or assumed: it must not be bound again.
    pub fn knows(&self, uid: &str) -> bool {
        self.bound.contains_key(uid) || self.assumed.contains_key(uid)
    }

    /// What is requested on `node`.
    pub fn usage(&self, node: &str) -> Usage {
        self.nodes.get(node).cloned().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(node: &str, cpu: i64) -> Entry {
        Entry {
            node: node.into(),
            namespace: Some("ns".into()),
            requests: [("cpu".to_owned(), cpu), ("pods".to_owned(), 1000)].into(),
        }
    }

    #[test]
    fn bound_and_assumed_pods_are_summed_per_node() {
        let mut a = Account::new();
        let now = Instant::now();
        a.bound("a", entry("n1", 500));
        a.assume("b", entry("n1", 250), now);
        a.bound("c", entry("n2", 100));
        let n1 = a.usage("n1");
        assert_eq!((n1.requested["cpu"], n1.requested["pods"], n1.pods), (750, 2000, 2));
        assert_eq!(a.usage("n2").pods, 1);
        assert_eq!(a.usage("n3"), Usage::default());
        assert!(a.knows("b") && !a.knows("d"));
    }

    #[test]
    fn the_watch_showing_an_assumed_pod_replaces_it_once() {
        let mut a = Account::new();
        a.assume("b", entry("n1", 250), Instant::now());
        a.bound("b", entry("n1", 250));
        assert_eq!(a.usage("n1").pods, 1);
        a.unbound("b");
        assert_eq!(a.usage("n1"), Usage::default());
        assert!(!a.knows("b"));
    }

    #[tokio::test(start_paused = true)]
    async fn assumed_pods_expire_and_failed_bindings_are_forgotten() {
        let mut a = Account::new();
        a.assume("old", entry("n1", 100), Instant::now());
        tokio::time::sleep(Duration::from_secs(20)).await;
        a.assume("new", entry("n1", 200), Instant::now());
        a.assume("failed", entry("n2", 200), Instant::now());
        a.forget("failed");
        assert_eq!(a.expire(Instant::now(), Duration::from_secs(10)), 1);
        assert_eq!(a.usage("n1").requested["cpu"], 200);
        assert_eq!(a.usage("n2"), Usage::default());
    }

    #[test]
    fn a_relist_of_a_namespace_replaces_only_that_namespace() {
        let mut a = Account::new();
        a.bound("a", entry("n1", 100));
        let mut other = entry("n1", 10);
        other.namespace = Some("other".into());
        a.bound("o", other);
        a.relisted(Some("ns"), vec![("b".into(), entry("n1", 300))]);
        assert_eq!(a.usage("n1").requested["cpu"], 310);
        assert!(!a.knows("a") && a.knows("o") && a.knows("b"));
    }
}
