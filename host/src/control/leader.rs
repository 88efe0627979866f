//! Leader election with `coordination.k8s.io/v1` Leases: one Lease per
//! controller, so that with several host replicas the leadership of
//! different controllers spreads across them.
//!
//! One [`Elections`] per host process names the replica (its identity) and
//! the timing; [`Elections::join`] campaigns for one Lease in a background
//! task and returns a [`Leadership`] that says whether this replica leads.
//! The algorithm is client-go's `leaderelection` with a Lease lock:
//!
//! - A **candidate** reads the Lease every `retry_period`. A Lease is free
//!   when it does not exist, names no holder, or its record (holder, renew
//!   time, …) has not changed for the holder's `leaseDurationSeconds` as
//!   measured on this replica's own monotonic clock since the change was
//!   first seen (no comparison of wall clocks across machines). A free Lease
//!   is taken with a create or a replace carrying the resourceVersion read,
//!   so of several candidates exactly one wins.
//! - The **leader** renews every `retry_period`. It stops leading at once
//!   when a read shows another holder, or when no renewal has succeeded for
//!   `renew_deadline` (counted from when the last successful request was
//!   sent), even while a request hangs. Since `renew_deadline <
//!   lease_duration`, it has stopped before any candidate may take over.
//!   A replica that lost a Lease campaigns for it again.
//! - **Spreading**: a replica that already leads `n` Leases waits
//!   `n × retry_period` after a Lease became free before it tries to take
//!   it, and takes one Lease at a time, so replicas that lead less win free
//!   Leases. Two replicas that join the same `2k` Leases within one retry
//!   period of each other end up leading `k` each (as long as an API request
//!   takes well under a retry period).
//! - [`Leadership::resign`] releases the Lease (empty holder), so a standby
//!   takes over within one retry period; dropping a [`Leadership`] only
//!   stops renewing, like a crash, and a standby takes over once the Lease
//!   expires.
//!
//! Every transition is logged at `info` with `lease` and `identity` fields.
//!
//! ```no_run
//! # async fn example(client: kube::Client) -> Result<(), capstan_host::control::leader::Error> {
//! use capstan_host::control::leader::{Elections, LeaseSettings, default_identity, lease_name};
//!
//! let elections = Elections::new(client, LeaseSettings::new("capstan-system", default_identity()))?;
//! let leadership = elections.join(&lease_name("greeter"))?;
//! let mut leading = leadership.watch();
//! loop {
//!     leading.wait_for(|l| *l).await.ok();
//!     // start reconciling ...
//!     leading.wait_for(|l| !*l).await.ok();
//!     // stop reconciling at once ...
//! }
//! # }
//! ```

use std::collections::HashSet;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until, timeout};

use crate::manifest::{is_dns1123_label, is_dns1123_subdomain};

/// How long a Lease is valid after its last renewal (controller-runtime's
/// default).
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);

/// How long the leader keeps trying to renew before it stops leading
/// (controller-runtime's default).
pub const DEFAULT_RENEW_DEADLINE: Duration = Duration::from_secs(10);

/// How often a candidate tries to acquire and the leader renews
/// (controller-runtime's default).
pub const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(2);

/// Prefix of the Lease of a controller (see [`lease_name`]).
pub const LEASE_PREFIX: &str = "capstan-";

/// Why leader election could not be set up or a Lease not released.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The identity is empty.
    #[error("the leader election identity is empty")]
    EmptyIdentity,
    /// The namespace is not a DNS-1123 label.
    #[error("lease namespace {0:?} is not a DNS-1123 label")]
    Namespace(String),
    /// The renew deadline is not shorter than the lease duration.
    #[error("the renew deadline ({renew_deadline:?}) must be shorter than the lease duration ({lease_duration:?})")]
    RenewDeadline {
        /// The renew deadline.
        renew_deadline: Duration,
        /// The lease duration.
        lease_duration: Duration,
    },
    /// The retry period is zero or not shorter than the renew deadline.
    #[error(
        "the retry period ({retry_period:?}) must be above zero and shorter than the renew deadline ({renew_deadline:?})"
    )]
    RetryPeriod {
        /// The retry period.
        retry_period: Duration,
        /// The renew deadline.
        renew_deadline: Duration,
    },
    /// The Lease name is not a DNS-1123 subdomain.
    #[error("lease name {0:?} is not a DNS-1123 subdomain")]
    LeaseName(String),
    /// This [`Elections`] already campaigns for the Lease.
    #[error("already campaigning for lease {0}")]
    AlreadyJoined(String),
    /// Releasing the Lease failed (a standby takes over once it expires).
    #[error("cannot release lease {lease}: {error}")]
    Release {
        /// The Lease.
        lease: String,
        /// Why.
        error: kube::Error,
    },
}

/// Where the Leases live, who this replica is, and the timing.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub struct LeaseSettings {
    /// Namespace of the Leases (the host's own).
    pub namespace: String,
    /// This replica's identity, written as the Lease's `holderIdentity`;
    /// unique per running process (see [`default_identity`]).
    pub identity: String,
    /// How long a Lease stays valid after its last renewal: how long
    /// standbys wait before taking over from a leader that stopped renewing.
    /// Written to the Lease in whole seconds, rounded up. Default
    /// [`DEFAULT_LEASE_DURATION`] (15 s).
    pub lease_duration: Duration,
    /// How long the leader keeps failing to renew before it stops leading;
    /// shorter than `lease_duration`. Default [`DEFAULT_RENEW_DEADLINE`]
    /// (10 s).
    pub renew_deadline: Duration,
    /// How often candidates try to acquire and the leader renews; shorter
    /// than `renew_deadline`. Default [`DEFAULT_RETRY_PERIOD`] (2 s).
    pub retry_period: Duration,
}

impl LeaseSettings {
    /// Leases in `namespace` held as `identity`, with controller-runtime's
    /// timing (15 s / 10 s / 2 s).
    pub fn new(namespace: impl Into<String>, identity: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            identity: identity.into(),
            lease_duration: DEFAULT_LEASE_DURATION,
            renew_deadline: DEFAULT_RENEW_DEADLINE,
            retry_period: DEFAULT_RETRY_PERIOD,
        }
    }

    /// Sets the lease duration, renew deadline and retry period.
    pub fn timing(self, lease_duration: Duration, renew_deadline: Duration, retry_period: Duration) -> Self {
        Self { lease_duration, renew_deadline, retry_period, ..self }
    }

    /// Checks the settings.
    ///
    /// # Errors
    ///
    /// An empty identity, a namespace that is not a DNS-1123 label, or
    /// timing out of order (`0 < retry_period < renew_deadline <
    /// lease_duration`).
    pub fn validate(&self) -> Result<(), Error> {
        if self.identity.is_empty() {
            return Err(Error::EmptyIdentity);
        }
        if !is_dns1123_label(&self.namespace) {
            return Err(Error::Namespace(self.namespace.clone()));
        }
        if self.renew_deadline >= self.lease_duration {
            return Err(Error::RenewDeadline {
                renew_deadline: self.renew_deadline,
                lease_duration: self.lease_duration,
            });
        }
        if self.retry_period.is_zero() || self.retry_period >= self.renew_deadline {
            return Err(Error::RetryPeriod { retry_period: self.retry_period, renew_deadline: self.renew_deadline });
        }
        Ok(())
    }

    /// The lease duration as written to the Lease: whole seconds, rounded
    /// up, at least 1.
    fn lease_duration_seconds(&self) -> i32 {
        let secs = self.lease_duration.as_secs() + u64::from(self.lease_duration.subsec_nanos() > 0);
        i32::try_from(secs.max(1)).unwrap_or(i32::MAX)
    }
}

/// The Lease of controller `controller`: `capstan-<controller>`. A
/// controller name is a DNS-1123 label, so that is a valid Lease name; any
/// other input is made one (lower-cased, other characters replaced by `-`,
/// cut to 253 characters).
pub fn lease_name(controller: &str) -> String {
    let name = format!("{LEASE_PREFIX}{controller}").to_ascii_lowercase();
    // Dot-separated labels of alphanumerics and '-', each starting and
    // ending with an alphanumeric, at most 63 long.
    let labels: Vec<String> = name
        .split('.')
        .map(|label| {
            let label: String =
                label.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).take(63).collect();
            label.trim_matches('-').to_owned()
        })
        .filter(|label| !label.is_empty())
        .collect();
    let mut name = labels.join(".");
    name.truncate(253);
    name.trim_end_matches(['-', '.']).to_owned()
}

/// A fresh identity for this process: `$HOSTNAME` (the pod name in a
/// cluster) or the host name, an underscore and 8 random characters, so
/// that two processes on one host (or a restarted pod) never share one.
pub fn default_identity() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "capstan".to_owned());
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    // RandomState is seeded from the OS once per process.
    let mut bits = RandomState::new().build_hasher().finish();
    let mut suffix = String::with_capacity(8);
    for _ in 0..8 {
        suffix.push(char::from(ALPHABET[(bits % 36) as usize]));
        bits /= 36;
    }
    format!("{host}_{suffix}")
}

/// What all campaigns of one replica share.
struct Shared {
    api: Api<Lease>,
    settings: LeaseSettings,
    /// How many Leases this replica leads.
    leading: AtomicUsize,
    /// Held while this replica tries to take a Lease: one at a time, so the
    /// count above is exact when the spreading delay is computed.
    taking: tokio::sync::Mutex<()>,
    /// The Leases campaigned for.
    joined: Mutex<HashSet<String>>,
}

/// The leader elections of one host replica: one campaign per Lease.
///
/// Cheap to clone; clones share the count of Leases led (used for
/// spreading).
#[derive(Clone)]
pub struct Elections {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Elections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Elections")
            .field("settings", &self.shared.settings)
            .field("leading", &self.leading())
            .finish_non_exhaustive()
    }
}

impl Elections {
    /// Elections for Leases in `settings.namespace`, talking through
    /// `client`.
    ///
    /// # Errors
    ///
    /// When the settings are invalid (see [`LeaseSettings::validate`]).
    pub fn new(client: kube::Client, settings: LeaseSettings) -> Result<Self, Error> {
        settings.validate()?;
        let shared = Shared {
            api: Api::namespaced(client, &settings.namespace),
            settings,
            leading: AtomicUsize::new(0),
            taking: tokio::sync::Mutex::new(()),
            joined: Mutex::new(HashSet::new()),
        };
        Ok(Self { shared: Arc::new(shared) })
    }

    /// The settings.
    pub fn settings(&self) -> &LeaseSettings {
        &self.shared.settings
    }

    /// How many Leases this replica leads now.
    pub fn leading(&self) -> usize {
        self.shared.leading.load(Ordering::SeqCst)
    }

    /// Starts campaigning for Lease `lease` (see [`lease_name`]) in a
    /// background task; the Lease is created if it does not exist. The
    /// campaign runs until the returned [`Leadership`] is resigned or
    /// dropped. Must be called within a tokio runtime.
    ///
    /// # Errors
    ///
    /// [`Error::LeaseName`] for a name that is not a DNS-1123 subdomain,
    /// [`Error::AlreadyJoined`] if this replica campaigns for it already.
    pub fn join(&self, lease: &str) -> Result<Leadership, Error> {
        if !is_dns1123_subdomain(lease) {
            return Err(Error::LeaseName(lease.to_owned()));
        }
        if !self.shared.joined.lock().unwrap_or_else(PoisonError::into_inner).insert(lease.to_owned()) {
            return Err(Error::AlreadyJoined(lease.to_owned()));
        }
        let (sender, receiver) = watch::channel(false);
        let blocked = Arc::new(Mutex::new(None));
        let campaign = Campaign {
            shared: self.shared.clone(),
            lease: lease.to_owned(),
            observed: None,
            blocked: Arc::clone(&blocked),
        };
        let task = tokio::spawn(campaign.run(sender));
        Ok(Leadership { lease: lease.to_owned(), shared: self.shared.clone(), leading: receiver, blocked, task })
    }
}

/// This replica's standing for one Lease, kept up to date by its campaign.
///
/// Dropping it stops the campaign without releasing the Lease (as a crash
/// would): a standby takes over once the Lease expires.
pub struct Leadership {
    lease: String,
    shared: Arc<Shared>,
    leading: watch::Receiver<bool>,
    blocked: Arc<Mutex<Option<Blocked>>>,
    task: JoinHandle<()>,
}

/// Why a campaign cannot take its Lease, and since when.
#[derive(Clone, Debug)]
struct Blocked {
    since: Instant,
    reason: String,
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership")
            .field("lease", &self.lease)
            .field("leading", &self.is_leading())
            .finish_non_exhaustive()
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        self.task.abort();
        self.shared.joined.lock().unwrap_or_else(PoisonError::into_inner).remove(&self.lease);
    }
}

impl Leadership {
    /// The Lease.
    pub fn lease(&self) -> &str {
        &self.lease
    }

    /// True while this replica leads: it holds the Lease and renewed it
    /// within the renew deadline.
    pub fn is_leading(&self) -> bool {
        *self.leading.borrow()
    }

    /// Why this replica has been kept from the Lease for longer than a
    /// lease duration, if it has: it could not read or write the Lease
    /// (RBAC, the API server), or the Lease names a holder whose record has
    /// not changed since (a live leader renews every retry period; this one
    /// claims a duration it does not renew within, e.g. a Lease written by
    /// hand). `None` while leading, or standing by behind a live leader:
    /// that is a healthy standby.
    pub fn blocked(&self) -> Option<String> {
        let blocked = self.blocked.lock().unwrap_or_else(PoisonError::into_inner);
        blocked
            .as_ref()
            .filter(|b| b.since.elapsed() > self.shared.settings.lease_duration)
            .map(|b| format!("{} for {}s", b.reason, b.since.elapsed().as_secs()))
    }

    /// A receiver of [`is_leading`](Self::is_leading) changes: it turns
    /// `false` as soon as the Lease is lost (and when the campaign ends).
    pub fn watch(&self) -> watch::Receiver<bool> {
        self.leading.clone()
    }

    /// Stops campaigning and, if this replica holds the Lease, releases it
    /// (empty holder) so that a standby takes over within one retry period.
    /// [`is_leading`](Self::is_leading) (and every receiver from
    /// [`watch`](Self::watch)) reads `false` before the Lease is released.
    ///
    /// # Errors
    ///
    /// [`Error::Release`] if the Lease could not be read or written; a
    /// standby then takes over once it expires.
    pub async fn resign(mut self) -> Result<(), Error> {
        self.task.abort();
        // Waits until the campaign is gone, and with it the leading flag.
        let _ = (&mut self.task).await;
        let settings = &self.shared.settings;
        let release = |error| Error::Release { lease: self.lease.clone(), error };
        // A conflict means the Lease changed meanwhile: read it again.
        let mut attempts = 0;
        loop {
            let Some(mut lease) = self.shared.api.get_opt(&self.lease).await.map_err(release)? else {
                return Ok(());
            };
            let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
            if spec.holder_identity.as_deref() != Some(settings.identity.as_str()) {
                return Ok(());
            }
            let now = MicroTime(Timestamp::now());
            spec.holder_identity = None;
            spec.lease_duration_seconds = Some(1);
            spec.acquire_time = Some(now.clone());
            spec.renew_time = Some(now);
            match self.shared.api.replace(&self.lease, &PostParams::default(), &lease).await {
                Ok(_) => {
                    tracing::info!(lease = %self.lease, identity = %settings.identity, "lease released");
                    return Ok(());
                }
                Err(e) if is_conflict(&e) && attempts < 3 => attempts += 1,
                Err(e) => return Err(release(e)),
            }
        }
    }
}

/// When a Lease not held by this replica may be taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Availability {
    /// Another holder's; valid until then unless renewed.
    HeldUntil(Instant),
    /// Free since then (it does not exist, has no holder, or expired then).
    FreeSince(Instant),
    /// It names this replica (left over from a lost renewal or a restart
    /// with the same identity): take it back at once.
    Own,
}

/// The Lease as last read by a candidate, and when its record last changed.
struct Observation {
    spec: Option<LeaseSpec>,
    at: Instant,
}

/// How a Lease stands, given when (on this replica's clock) its record
/// last changed.
fn availability(spec: Option<&LeaseSpec>, changed_at: Instant, identity: &str, fallback: Duration) -> Availability {
    let holder = spec.and_then(|s| s.holder_identity.as_deref()).filter(|h| !h.is_empty());
    match holder {
        None => Availability::FreeSince(changed_at),
        Some(h) if h == identity => Availability::Own,
        Some(_) => {
            let duration = spec
                .and_then(|s| s.lease_duration_seconds)
                .and_then(|s| u64::try_from(s).ok())
                .filter(|s| *s > 0)
                .map_or(fallback, Duration::from_secs);
            Availability::HeldUntil(changed_at + duration)
        }
    }
}

/// The outcome of one renewal.
enum Renewal {
    Renewed,
    /// The Lease names another holder (empty if none).
    Taken(String),
}

/// Why the leader stopped leading.
enum Lost {
    Taken(String),
    Deadline,
}

/// The campaign for one Lease.
struct Campaign {
    shared: Arc<Shared>,
    lease: String,
    observed: Option<Observation>,
    /// What keeps it from the Lease (see [`Leadership::blocked`]).
    blocked: Arc<Mutex<Option<Blocked>>>,
}

/// Set while this replica leads one Lease: counts it and, when dropped
/// (lost, or the campaign aborted), flips the leading flag back at once.
struct Leading<'a> {
    shared: &'a Shared,
    flag: &'a watch::Sender<bool>,
}

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        // Uncounted first: whoever sees the flag fall sees the count too.
        self.shared.leading.fetch_sub(1, Ordering::SeqCst);
        self.flag.send_replace(false);
    }
}

impl Campaign {
    fn settings(&self) -> &LeaseSettings {
        &self.shared.settings
    }

    /// Records what keeps this campaign from the Lease: since `since` if it
    /// was not blocked yet (or was blocked since later), with the newest
    /// reason.
    fn block(&self, since: Instant, reason: String) {
        let mut blocked = self.blocked.lock().unwrap_or_else(PoisonError::into_inner);
        let since = blocked.as_ref().map_or(since, |b| b.since.min(since));
        *blocked = Some(Blocked { since, reason: crate::cluster::bounded(&reason, crate::cluster::MAX_MESSAGE) });
    }

    /// Nothing keeps this campaign from the Lease (it leads, or a live
    /// leader holds it).
    fn unblock(&self) {
        *self.blocked.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    async fn run(mut self, flag: watch::Sender<bool>) {
        loop {
            let renewed_at = self.acquire().await;
            // `acquire` counted the Lease; the guard uncounts it.
            let leading = Leading { shared: &self.shared, flag: &flag };
            flag.send_replace(true);
            let identity = &self.shared.settings.identity;
            tracing::info!(lease = %self.lease, identity = %identity, "lease acquired, leading");
            let lost = self.lead(renewed_at).await;
            drop(leading);
            let identity = &self.shared.settings.identity;
            match lost {
                Lost::Taken(holder) => {
                    tracing::info!(lease = %self.lease, identity = %identity, holder = %holder, "lease taken by another holder, no longer leading");
                }
                Lost::Deadline => {
                    let deadline = self.settings().renew_deadline;
                    tracing::info!(lease = %self.lease, identity = %identity, ?deadline, "lease not renewed within the renew deadline, no longer leading");
                }
            }
            self.observed = None;
        }
    }

    /// Campaigns until the Lease is taken; returns when the successful
    /// request was sent, with the Lease counted as led.
    async fn acquire(&mut self) -> Instant {
        let retry = self.settings().retry_period;
        loop {
            let current = match timeout(self.settings().renew_deadline, self.shared.api.get_opt(&self.lease)).await {
                Ok(Ok(current)) => current,
                Ok(Err(e)) => {
                    tracing::warn!(lease = %self.lease, error = %e, "cannot read lease");
                    self.block(Instant::now(), format!("cannot read Lease {}: {e}", self.lease));
                    tokio::time::sleep(retry).await;
                    continue;
                }
                Err(_) => {
                    tracing::warn!(lease = %self.lease, "reading lease timed out");
                    self.block(Instant::now(), format!("reading Lease {} timed out", self.lease));
                    continue;
                }
            };
            let now = Instant::now();
            let spec = current.as_ref().map(|l| l.spec.clone().unwrap_or_default());
            let changed_at = match &self.observed {
                Some(o) if o.spec == spec => o.at,
                _ => now,
            };
            self.observed = Some(Observation { spec: spec.clone(), at: changed_at });
            let settings = self.settings();
            let available = availability(spec.as_ref(), changed_at, &settings.identity, settings.lease_duration);
            let free_since = match available {
                Availability::HeldUntil(expiry) if expiry > now => {
                    // A live leader changes the record every retry period;
                    // one unchanged for longer than a lease duration holds
                    // the Lease without leading.
                    if now.duration_since(changed_at) > settings.lease_duration {
                        let holder = spec.as_ref().and_then(|s| s.holder_identity.as_deref()).unwrap_or_default();
                        let claimed = spec.as_ref().and_then(|s| s.lease_duration_seconds).unwrap_or_default();
                        let reason = format!(
                            "Lease {} is held by {holder:?}, not renewed (it claims a {claimed}s lease)",
                            self.lease
                        );
                        self.block(changed_at, reason);
                    } else {
                        self.unblock();
                    }
                    sleep_until(expiry.min(now + retry)).await;
                    continue;
                }
                Availability::HeldUntil(expiry) => Some(expiry),
                Availability::FreeSince(since) => Some(since),
                Availability::Own => None,
            };

            let taking = self.shared.taking.lock().await;
            if let Some(since) = free_since {
                // Spreading: the more Leases this replica leads, the longer
                // it leaves a free one to others.
                let led = u32::try_from(self.shared.leading.load(Ordering::SeqCst)).unwrap_or(u32::MAX);
                let ready = since + retry.saturating_mul(led);
                let now = Instant::now();
                if now < ready {
                    drop(taking);
                    sleep_until(ready.min(now + retry)).await;
                    continue;
                }
            }
            let sent = Instant::now();
            match timeout(self.settings().renew_deadline, self.take(current)).await {
                Ok(Ok(())) => {
                    self.shared.leading.fetch_add(1, Ordering::SeqCst);
                    self.unblock();
                    return sent;
                }
                Ok(Err(e)) if is_conflict(&e) => {
                    tracing::debug!(lease = %self.lease, "another candidate took the lease first");
                }
                Ok(Err(e)) => {
                    tracing::warn!(lease = %self.lease, error = %e, "cannot take lease");
                    self.block(Instant::now(), format!("cannot take Lease {}: {e}", self.lease));
                    drop(taking);
                    tokio::time::sleep(retry).await;
                }
                Err(_) => tracing::warn!(lease = %self.lease, "taking lease timed out"),
            }
        }
    }

    /// Creates the Lease, or replaces the version read, with this replica
    /// as the holder.
    async fn take(&self, current: Option<Lease>) -> Result<(), kube::Error> {
        let settings = self.settings();
        let now = MicroTime(Timestamp::now());
        let pp = PostParams::default();
        match current {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta { name: Some(self.lease.clone()), ..ObjectMeta::default() },
                    spec: Some(LeaseSpec {
                        holder_identity: Some(settings.identity.clone()),
                        lease_duration_seconds: Some(settings.lease_duration_seconds()),
                        acquire_time: Some(now.clone()),
                        renew_time: Some(now),
                        lease_transitions: Some(0),
                        ..LeaseSpec::default()
                    }),
                };
                self.shared.api.create(&pp, &lease).await.map(drop)
            }
            Some(mut lease) => {
                let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
                if spec.holder_identity.as_deref() != Some(settings.identity.as_str()) {
                    spec.holder_identity = Some(settings.identity.clone());
                    spec.acquire_time = Some(now.clone());
                    spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
                }
                spec.lease_duration_seconds = Some(settings.lease_duration_seconds());
                spec.renew_time = Some(now);
                // The resourceVersion read makes this fail with a conflict
                // if anyone wrote the Lease since.
                self.shared.api.replace(&self.lease, &pp, &lease).await.map(drop)
            }
        }
    }

    /// Renews every retry period until the Lease is lost.
    async fn lead(&self, mut renewed_at: Instant) -> Lost {
        let settings = self.settings();
        let mut next = renewed_at + settings.retry_period;
        loop {
            let deadline = renewed_at + settings.renew_deadline;
            let wake = next;
            let attempt = async move {
                sleep_until(wake).await;
                let sent = Instant::now();
                (sent, self.renew().await)
            };
            tokio::select! {
                biased;
                () = sleep_until(deadline) => return Lost::Deadline,
                (sent, result) = attempt => {
                    next = sent + settings.retry_period;
                    match result {
                        Ok(Renewal::Renewed) => renewed_at = sent,
                        Ok(Renewal::Taken(holder)) => return Lost::Taken(holder),
                        Err(e) => tracing::warn!(lease = %self.lease, error = %e, "cannot renew lease, retrying"),
                    }
                }
            }
        }
    }

    /// One renewal: reads the Lease and, if it still names this replica,
    /// replaces it with a fresh renew time (re-creating it if it was
    /// deleted).
    async fn renew(&self) -> Result<Renewal, kube::Error> {
        let identity = &self.settings().identity;
        let current = self.shared.api.get_opt(&self.lease).await?;
        if let Some(lease) = &current {
            let holder = lease.spec.as_ref().and_then(|s| s.holder_identity.as_deref()).unwrap_or_default();
            if holder != identity {
                return Ok(Renewal::Taken(holder.to_owned()));
            }
        }
        self.take(current).await.map(|()| Renewal::Renewed)
    }
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(status) if status.code == 409)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(holder: Option<&str>, seconds: Option<i32>) -> LeaseSpec {
        LeaseSpec {
            holder_identity: holder.map(str::to_owned),
            lease_duration_seconds: seconds,
            ..LeaseSpec::default()
        }
    }

    #[test]
    fn defaults_are_controller_runtimes_and_valid() {
        let s = LeaseSettings::new("capstan-system", "a");
        assert_eq!(
            (s.lease_duration, s.renew_deadline, s.retry_period),
            (Duration::from_secs(15), Duration::from_secs(10), Duration::from_secs(2))
        );
        s.validate().expect("defaults are valid");
        assert_eq!(s.lease_duration_seconds(), 15);
    }

    #[test]
    fn timing_out_of_order_is_rejected() {
        let s = |l, r, p| LeaseSettings::new("ns", "a").timing(Duration::from_secs(l), Duration::from_secs(r), p);
        assert!(matches!(s(10, 10, Duration::from_secs(2)).validate(), Err(Error::RenewDeadline { .. })));
        assert!(matches!(s(15, 10, Duration::from_secs(10)).validate(), Err(Error::RetryPeriod { .. })));
        assert!(matches!(s(15, 10, Duration::ZERO).validate(), Err(Error::RetryPeriod { .. })));
        assert!(s(3, 2, Duration::from_millis(500)).validate().is_ok());
        assert!(matches!(LeaseSettings::new("ns", "").validate(), Err(Error::EmptyIdentity)));
        assert!(matches!(LeaseSettings::new("Bad_NS", "a").validate(), Err(Error::Namespace(_))));
    }

    #[test]
    fn a_sub_second_lease_duration_is_written_rounded_up() {
        let s = LeaseSettings::new("ns", "a").timing(
            Duration::from_millis(2500),
            Duration::from_secs(2),
            Duration::from_millis(500),
        );
        assert_eq!(s.lease_duration_seconds(), 3);
    }

    #[test]
    fn lease_names_are_dns_subdomains() {
        assert_eq!(lease_name("greeter"), "capstan-greeter");
        for odd in ["Greeter_V2", "-x-", "a..b", "", &"x".repeat(300), "ü"] {
            let name = lease_name(odd);
            assert!(is_dns1123_subdomain(&name), "{odd:?} gave {name:?}");
        }
        assert_eq!(lease_name("Greeter_V2"), "capstan-greeter-v2");
    }

    #[test]
    fn default_identities_differ_per_call() {
        let (a, b) = (default_identity(), default_identity());
        assert_ne!(a, b);
        assert!(a.contains('_'));
    }

    #[tokio::test(start_paused = true)]
    async fn availability_follows_the_record_and_the_local_clock() {
        let t = Instant::now();
        let fallback = Duration::from_secs(15);
        assert_eq!(availability(None, t, "me", fallback), Availability::FreeSince(t));
        assert_eq!(availability(Some(&spec(None, Some(3))), t, "me", fallback), Availability::FreeSince(t));
        assert_eq!(availability(Some(&spec(Some(""), None)), t, "me", fallback), Availability::FreeSince(t));
        assert_eq!(availability(Some(&spec(Some("me"), Some(3))), t, "me", fallback), Availability::Own);
        assert_eq!(
            availability(Some(&spec(Some("other"), Some(3))), t, "me", fallback),
            Availability::HeldUntil(t + Duration::from_secs(3))
        );
        assert_eq!(
            availability(Some(&spec(Some("other"), None)), t, "me", fallback),
            Availability::HeldUntil(t + fallback)
        );
    }

    #[test]
    fn error_messages_read_right() {
        let cases = [
            (Error::EmptyIdentity, "the leader election identity is empty"),
            (Error::Namespace("A".into()), "lease namespace \"A\" is not a DNS-1123 label"),
            (
                Error::RenewDeadline {
                    renew_deadline: Duration::from_secs(15),
                    lease_duration: Duration::from_secs(10),
                },
                "the renew deadline (15s) must be shorter than the lease duration (10s)",
            ),
            (
                Error::RetryPeriod { retry_period: Duration::ZERO, renew_deadline: Duration::from_secs(10) },
                "the retry period (0ns) must be above zero and shorter than the renew deadline (10s)",
            ),
            (Error::LeaseName("A".into()), "lease name \"A\" is not a DNS-1123 subdomain"),
            (Error::AlreadyJoined("capstan-x".into()), "already campaigning for lease capstan-x"),
        ];
        for (error, message) in cases {
            assert_eq!(error.to_string(), message);
        }
    }
}
