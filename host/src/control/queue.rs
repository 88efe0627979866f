//! The keyed work queue of one controller, with the semantics of
//! client-go's workqueue: an object is queued at most once, at most one
//! reconcile per object is in flight, and a trigger that arrives while the
//! object is being reconciled queues it again once that reconcile ends.
//! Delayed adds (requeue-after, resync, backoff) replace each other per
//! object.
//!
//! A queue made with [`Queue::named`] reports to the [metrics](mod@crate::metrics): adds as
//! they happen, depth and the age of the oldest waiting object when scraped.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::metrics::{self, metrics};
use crate::object::ObjectRef;

#[derive(Default)]
struct State {
    /// Waiting objects, oldest first, with when each was queued.
    ready: VecDeque<(ObjectRef, Instant)>,
    queued: HashSet<ObjectRef>,
    processing: HashSet<ObjectRef>,
    dirty: HashSet<ObjectRef>,
    timers: HashMap<ObjectRef, AbortHandle>,
    closed: bool,
}

/// A keyed, de-duplicating work queue.
#[derive(Default)]
pub struct Queue {
    state: Mutex<State>,
    notify: Notify,
    /// The controller in its cluster, for metrics.
    owner: Option<metrics::Owner>,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue").field("len", &self.len()).finish_non_exhaustive()
    }
}

impl Queue {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty queue of the controller `owner` that reports to the
    /// [metrics](mod@crate::metrics) (`capstan_queue_depth`,
    /// `capstan_queue_oldest_item_age_seconds`, `capstan_queue_adds_total`)
    /// until it is dropped.
    pub fn named(owner: metrics::Owner) -> Arc<Self> {
        let probe_owner = owner.clone();
        let queue = Arc::new(Self { owner: Some(owner), ..Self::default() });
        let probe: std::sync::Weak<Self> = Arc::downgrade(&queue);
        metrics().track_queue(&probe_owner, probe);
        queue
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `r` now (merged with a pending entry; deferred if in flight).
    pub fn add(&self, r: ObjectRef) {
        let mut s = self.state();
        if s.closed {
            return;
        }
        let added = if s.processing.contains(&r) {
            s.dirty.insert(r)
        } else if s.queued.insert(r.clone()) {
            s.ready.push_back((r, Instant::now()));
            drop(s);
            self.notify.notify_one();
            true
        } else {
            false
        };
        if added && let Some(owner) = &self.owner {
            metrics().queue_added(owner);
        }
    }

    /// Queues `r` after `delay`, replacing an earlier delayed add of `r`.
    pub fn add_after(self: &Arc<Self>, r: ObjectRef, delay: Duration) {
        let queue = Arc::clone(self);
        let key = r.clone();
        let handle = tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            queue.state().timers.remove(&r);
            queue.add(r);
        })
        .abort_handle();
        if let Some(old) = self.state().timers.insert(key, handle) {
            old.abort();
        }
    }

    /// Waits for the next object and marks it in flight; `None` once the
    /// queue is closed.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: an object is only taken when the future completes.
    pub async fn next(&self) -> Option<ObjectRef> {
        self.next_waited().await.map(|(r, _)| r)
    }

    /// [`next`](Self::next), with how long the object waited in the queue
    /// (since it was last queued ready to run).
    ///
    /// # Cancel safety
    ///
    /// As [`next`](Self::next).
    pub async fn next_waited(&self) -> Option<(ObjectRef, Duration)> {
        loop {
            let notified = self.notify.notified();
            {
                let mut s = self.state();
                if s.closed {
                    return None;
                }
                if let Some((r, queued_at)) = s.ready.pop_front() {
                    s.queued.remove(&r);
                    s.processing.insert(r.clone());
                    let more = !s.ready.is_empty();
                    drop(s);
                    if more {
                        self.notify.notify_one();
                    }
                    return Some((r, queued_at.elapsed()));
                }
            }
            notified.await;
        }
    }

    /// Marks `r` done; queues it again if it was triggered meanwhile.
    pub fn done(&self, r: &ObjectRef) {
        let requeue = {
            let mut s = self.state();
            s.processing.remove(r);
            s.dirty.remove(r)
        };
        if requeue {
            self.add(r.clone());
        }
    }

    /// Objects waiting (not in flight, not delayed).
    pub fn len(&self) -> usize {
        self.state().ready.len()
    }

    /// How long the oldest waiting object has waited; `None` if none waits.
    pub fn oldest_age(&self) -> Option<Duration> {
        self.state().ready.front().map(|(_, since)| since.elapsed())
    }

    /// True if nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets every object, queued, delayed or in flight (whose workers
    /// must have been cancelled), and stays open: for a controller that
    /// stopped reconciling mid-way and will queue everything again.
    pub fn reset(&self) {
        let mut s = self.state();
        for (_, t) in s.timers.drain() {
            t.abort();
        }
        s.ready.clear();
        s.queued.clear();
        s.processing.clear();
        s.dirty.clear();
    }

    /// Stops handing out work and cancels delayed adds.
    pub fn close(&self) {
        let mut s = self.state();
        s.closed = true;
        for (_, t) in s.timers.drain() {
            t.abort();
        }
        drop(s);
        self.notify.notify_waiters();
    }
}

impl metrics::QueueProbe for Queue {
    fn depth(&self) -> usize {
        self.len()
    }

    fn oldest_age(&self) -> Duration {
        Queue::oldest_age(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::object::Gvk;

    fn r(name: &str) -> ObjectRef {
        ObjectRef::new(Gvk::new("", "v1", "ConfigMap"), Some("ns"), name)
    }

    #[tokio::test]
    async fn duplicate_adds_are_merged() {
        let q = Queue::new();
        q.add(r("a"));
        q.add(r("a"));
        q.add(r("b"));
        assert_eq!(q.len(), 2);
    }

    #[tokio::test]
    async fn an_object_in_flight_is_handed_out_again_only_after_done() {
        let q = Queue::new();
        q.add(r("a"));
        let a = q.next().await.expect("open");
        q.add(r("a"));
        assert!(q.is_empty(), "deferred while in flight");
        q.done(&a);
        assert_eq!(q.next().await, Some(r("a")));
    }

    #[tokio::test(start_paused = true)]
    async fn a_later_delayed_add_replaces_an_earlier_one() {
        let q = Arc::new(Queue::new());
        q.add_after(r("a"), Duration::from_secs(10));
        q.add_after(r("a"), Duration::from_secs(60));
        tokio::time::sleep(Duration::from_secs(11)).await;
        assert!(q.is_empty());
        tokio::time::sleep(Duration::from_secs(50)).await;
        assert_eq!(q.len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn reset_forgets_queued_delayed_and_in_flight_objects_and_stays_open() {
        let q = Arc::new(Queue::new());
        q.add(r("a"));
        q.add(r("b"));
        let a = q.next().await.expect("open");
        q.add(a.clone());
        q.add_after(r("c"), Duration::from_secs(1));
        q.reset();
        assert!(q.is_empty());
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(q.is_empty(), "the delayed add was cancelled");
        // `a` is no longer in flight: adding it queues it at once.
        q.add(a.clone());
        assert_eq!(q.next().await, Some(a));
    }

    #[tokio::test]
    async fn closing_wakes_waiters_with_none() {
        let q = Arc::new(Queue::new());
        let waiter = tokio::spawn({
            let q = Arc::clone(&q);
            async move { q.next().await }
        });
        tokio::task::yield_now().await;
        q.close();
        assert_eq!(waiter.await.expect("joins"), None);
    }

    #[tokio::test(start_paused = true)]
    async fn the_oldest_waiting_object_ages_until_it_is_taken() {
        let q = Queue::new();
        assert_eq!(q.oldest_age(), None);
        q.add(r("a"));
        tokio::time::sleep(Duration::from_secs(3)).await;
        q.add(r("b"));
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(q.oldest_age(), Some(Duration::from_secs(5)));
        q.next().await.expect("open");
        assert_eq!(q.oldest_age(), Some(Duration::from_secs(2)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_taken_object_says_how_long_it_waited() {
        let q = Queue::new();
        q.add(r("a"));
        tokio::time::sleep(Duration::from_secs(3)).await;
        q.add(r("b"));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(q.next_waited().await, Some((r("a"), Duration::from_secs(4))));
        assert_eq!(q.next_waited().await, Some((r("b"), Duration::from_secs(1))));
    }

    #[tokio::test]
    async fn a_named_queue_reports_its_depth_and_adds() {
        let q = Queue::named(metrics::Owner::in_default("queue-metrics"));
        let adds = r#"capstan_queue_adds_total{cluster="default",controller="queue-metrics"}"#;
        let depth = r#"capstan_queue_depth{cluster="default",controller="queue-metrics"}"#;
        let read =
            |series: &str| metrics().encode().lines().find_map(|l| l.strip_prefix(series)?.trim().parse::<f64>().ok());
        q.add(r("a"));
        q.add(r("a"));
        q.add(r("b"));
        assert_eq!(read(adds), Some(2.0), "a merged duplicate is not an add");
        assert_eq!(read(depth), Some(2.0));
        drop(q);
        assert_eq!(read(depth), None, "a dropped queue is no longer reported");
    }
}
