//! Kubernetes Events (`events.k8s.io/v1`) as client-go's event recorder
//! writes them: the first occurrence is created; the same event again
//! within [`SERIES_TTL`] of its last occurrence patches that Event's
//! `series` (count and last observed time) instead of making a new one.
//!
//! Which Events are "the same" is kept in a [`Series`] cache whose cost per
//! recorded Event does not grow with how many were recorded: entries expire
//! oldest first from a queue, and at most [`MAX_SERIES`] are kept (the
//! oldest is forgotten first, so a flood of distinct events costs bounded
//! memory). kube-runtime's `Recorder`, used before, kept every Event of the
//! last six minutes in full and scanned them all on each publish: 12 % of
//! the host's CPU with 5 000 objects each recording one Event.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, Patch, PatchParams, PostParams};

use crate::sync::lock;
use crate::telemetry::TRACE_ID_ANNOTATION;

/// How long after its last occurrence an Event can still grow a series
/// (client-go's and kube-runtime's 6 minutes).
pub const SERIES_TTL: Duration = Duration::from_secs(6 * 60);

/// Most series remembered per recorder (client-go's LRU keeps 4096).
pub const MAX_SERIES: usize = 4096;

/// What makes two Events the same occurrence (client-go's key: everything
/// but the time).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    /// `Normal` or `Warning`.
    type_: &'static str,
    /// The action.
    action: String,
    /// The reason.
    reason: String,
    /// The note, if any.
    note: Option<String>,
    /// The regarding object: API version, kind, namespace, name, uid.
    regarding: [Option<String>; 5],
}

impl Key {
    fn of(event: &Event) -> Self {
        let r = event.regarding.clone().unwrap_or_default();
        Self {
            type_: if event.type_.as_deref() == Some("Warning") { "Warning" } else { "Normal" },
            action: event.action.clone().unwrap_or_default(),
            reason: event.reason.clone().unwrap_or_default(),
            note: event.note.clone(),
            regarding: [r.api_version, r.kind, r.namespace, r.name, r.uid],
        }
    }
}

/// A recorded Event that can grow a series: where it is and how often it
/// occurred.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Recorded {
    /// The Event's namespace.
    namespace: String,
    /// The Event's name.
    name: String,
    /// Occurrences so far.
    count: i32,
    last: Instant,
}

/// The series cache: recent Events by [`Key`], expiring oldest first.
#[derive(Debug, Default)]
struct Series {
    entries: HashMap<Key, Recorded>,
    /// Occurrences in time order; an entry whose `Recorded.last` is later
    /// than its place here was seen again and is skipped when this expires.
    order: VecDeque<(Instant, Key)>,
}

impl Series {
    /// The Event recorded as `key` less than [`SERIES_TTL`] before `now`.
    fn get(&mut self, key: &Key, now: Instant) -> Option<Recorded> {
        self.expire(now);
        self.entries.get(key).cloned()
    }

    /// Notes that `key` occurred at `now` as the Event `namespace`/`name`,
    /// `count` times so far.
    fn insert(&mut self, key: Key, namespace: String, name: String, count: i32, now: Instant) {
        self.expire(now);
        self.order.push_back((now, key.clone()));
        self.entries.insert(key, Recorded { namespace, name, count, last: now });
        while self.entries.len() > MAX_SERIES {
            self.pop_oldest();
        }
        // Stale places of re-observed entries: at most one per occurrence
        // still remembered, so the queue stays within twice the bound.
        if self.order.len() > 2 * MAX_SERIES {
            self.order.retain(|(at, key)| self.entries.get(key).is_some_and(|r| r.last == *at));
        }
    }

    /// Forgets `key` (its Event is gone from the server).
    fn remove(&mut self, key: &Key) {
        self.entries.remove(key);
    }

    fn expire(&mut self, now: Instant) {
        while self.order.front().is_some_and(|(at, _)| now.saturating_duration_since(*at) >= SERIES_TTL) {
            self.pop_oldest();
        }
    }

    fn pop_oldest(&mut self) {
        let Some((at, key)) = self.order.pop_front() else { return };
        if self.entries.get(&key).is_some_and(|r| r.last == at) {
            self.entries.remove(&key);
        }
    }
}

/// Records Events for one reporting controller and instance.
pub struct Recorder {
    client: kube::Client,
    controller: String,
    instance: String,
    series: Mutex<Series>,
}

impl Recorder {
    /// A recorder reporting as `controller` (`reportingController`) and
    /// `instance` (`reportingInstance`; the controller's name if `None`).
    pub fn new(client: kube::Client, controller: String, instance: Option<String>) -> Self {
        let instance = instance.unwrap_or_else(|| controller.clone());
        Self { client, controller, instance, series: Mutex::default() }
    }

    /// Records an Event about `regarding`, in its namespace (`default` for a
    /// cluster-scoped object): created the first time, a series patch when
    /// the same Event occurred within [`SERIES_TTL`]. A series whose Event
    /// is gone (deleted, or expired by the API server) starts again with a
    /// new Event. `trace_id` (the trace the Event was recorded in, if
    /// exported) goes into the [`TRACE_ID_ANNOTATION`] annotation, of the
    /// series' last occurrence for a repeated Event.
    pub async fn publish(
        &self,
        warning: bool,
        reason: String,
        action: String,
        note: Option<String>,
        regarding: ObjectReference,
        trace_id: Option<String>,
    ) -> kube::Result<()> {
        let now = k8s_openapi::jiff::Timestamp::now();
        let namespace = regarding.namespace.clone().unwrap_or_else(|| "default".into());
        let name = format!("{}.{:x}", regarding.name.as_deref().unwrap_or(&self.controller), now.as_nanosecond());
        let annotations = trace_id.as_ref().map(|id| [(TRACE_ID_ANNOTATION.to_owned(), id.clone())].into());
        let event = Event {
            metadata: ObjectMeta {
                namespace: Some(namespace.clone()),
                name: Some(name),
                annotations,
                ..ObjectMeta::default()
            },
            action: Some(action),
            reason: Some(reason),
            note,
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding),
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            type_: Some(if warning { "Warning" } else { "Normal" }.into()),
            ..Event::default()
        };
        let key = Key::of(&event);
        let seen = lock(&self.series).get(&key, Instant::now());
        if let Some(seen) = seen {
            let count = seen.count + 1;
            let series = EventSeries { count, last_observed_time: MicroTime(now) };
            let mut patch = serde_json::json!({ "series": series });
            if let Some(id) = &trace_id {
                patch["metadata"] = serde_json::json!({ "annotations": { TRACE_ID_ANNOTATION: id } });
            }
            let api: Api<Event> = Api::namespaced(self.client.clone(), &seen.namespace);
            match api.patch(&seen.name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                Ok(_) => {
                    lock(&self.series).insert(key, seen.namespace, seen.name, count, Instant::now());
                    return Ok(());
                }
                Err(kube::Error::Api(e)) if e.code == 404 => lock(&self.series).remove(&key),
                Err(e) => return Err(e),
            }
        }
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let created = api.create(&PostParams::default(), &event).await?;
        let name = created.metadata.name.unwrap_or_default();
        lock(&self.series).insert(key, namespace, name, 1, Instant::now());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> Key {
        Key {
            type_: "Normal",
            action: "Reconcile".into(),
            reason: "Created".into(),
            note: Some(format!("greeted {name}")),
            regarding: [None, Some("Greeting".into()), Some("ns".into()), Some(name.into()), None],
        }
    }

    #[test]
    fn the_same_event_within_the_ttl_is_found_and_expires_after_its_last_occurrence() {
        let mut series = Series::default();
        let t0 = Instant::now();
        series.insert(key("a"), "ns".into(), "a.1".into(), 1, t0);
        assert_eq!(series.get(&key("a"), t0 + Duration::from_secs(60)).map(|r| r.count), Some(1));
        assert!(series.get(&key("b"), t0).is_none(), "another object's event is another series");
        let other_note = Key { note: Some("other".into()), ..key("a") };
        assert!(series.get(&other_note, t0).is_none(), "a different note is a different event");

        // Seen again at 5 min: it lives until 11 min, not 6.
        let t5 = t0 + Duration::from_secs(300);
        series.insert(key("a"), "ns".into(), "a.1".into(), 2, t5);
        assert_eq!(series.get(&key("a"), t0 + Duration::from_secs(400)).map(|r| r.count), Some(2));
        assert!(series.get(&key("a"), t5 + SERIES_TTL).is_none());
        assert!(series.entries.is_empty());
    }

    #[test]
    fn at_most_max_series_are_kept_the_oldest_forgotten_first() {
        let mut series = Series::default();
        let t0 = Instant::now();
        for i in 0..MAX_SERIES + 10 {
            series.insert(key(&i.to_string()), "ns".into(), format!("e{i}"), 1, t0 + Duration::from_millis(i as u64));
        }
        assert_eq!(series.entries.len(), MAX_SERIES);
        let later = t0 + Duration::from_secs(1);
        assert!(series.get(&key("0"), later).is_none());
        assert!(series.get(&key("9"), later).is_none());
        assert!(series.get(&key("10"), later).is_some());
        assert!(series.get(&key(&(MAX_SERIES + 9).to_string()), later).is_some());
    }

    #[test]
    fn an_event_seen_again_and_again_keeps_the_queue_bounded() {
        let mut series = Series::default();
        let t0 = Instant::now();
        for i in 0..10 * MAX_SERIES {
            series.insert(key("a"), "ns".into(), "a.1".into(), i as i32 + 1, t0 + Duration::from_micros(i as u64));
        }
        assert_eq!(series.entries.len(), 1);
        assert!(series.order.len() <= 2 * MAX_SERIES, "{} places queued", series.order.len());
        let last = t0 + Duration::from_micros(10 * MAX_SERIES as u64);
        assert_eq!(series.get(&key("a"), last).map(|r| r.count), Some(10 * MAX_SERIES as i32));
    }
}
