//! Following an OCI reference (`capstan run oci://…`, or a `*.oci` file in
//! a components folder): the component it names is pulled, verified and
//! loaded; then its tag is looked up every [`POLL_INTERVAL`] (or the
//! host's [`poll_interval`](crate::serve::host::HostBuilder::poll_interval)), and
//! when it points at another manifest, that version is pulled, verified and
//! loaded like a changed file ([`Host::load`](crate::serve::host::Host::load):
//! swapped in, tried on a canary share, or rejected while the running
//! version keeps serving).
//!
//! # Guarantees
//!
//! - A registry that is down, too slow, or answers with errors, never
//!   stops what runs: each look (the lookup of the tag and the pull of
//!   what it points at, together) ends within the registry's deadline
//!   ([`Options::timeout`](crate::serve::oci::Options::timeout), 60 s by
//!   default), and the tag is looked up again at the next poll.
//!   A failure is logged (`warn`) and recorded in the status once per
//!   streak of the same failure, again at most every [`REPEAT_LOG`] while
//!   it lasts, and `info` once the registry answers again.
//! - Pulls run in the follower's own task, beside everything else: the
//!   first one does not hold up the caller (the host's start, or the look
//!   at a components folder), nor another reference. Until it arrives,
//!   the reference shows as `pending` in the host's status and keeps the
//!   host from being ready.
//! - A manifest whose component was rejected (or that could not be
//!   verified) is not pulled again while the tag points at it; moving the
//!   tag (back) to a good version loads that one.
//! - A reference by digest is pulled once and never changes.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::serve::host::{Change, Error, Shared};
use crate::serve::oci::Reference;

/// How often a followed tag is looked up by default.
pub const POLL_INTERVAL: Duration = Duration::from_secs(30);
/// How often a failure that goes on unchanged is logged again.
pub const REPEAT_LOG: Duration = Duration::from_secs(300);

/// A followed reference; stops following when dropped (what it loaded
/// keeps running).
pub(crate) struct Follow {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Follow {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl std::fmt::Debug for Follow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Follow").finish_non_exhaustive()
    }
}

/// What a follower knows between polls.
#[derive(Debug, Default)]
struct State {
    /// The manifest digest last loaded (or found unchanged).
    loaded: Option<String>,
    /// A manifest digest that was refused: not pulled again.
    refused: Option<String>,
    /// The failures of lookups and pulls in a row.
    streak: Streak,
}

/// Failures in a row: each new one is logged, the same one again only
/// every [`REPEAT_LOG`].
#[derive(Debug, Default)]
struct Streak {
    /// The last failure, as logged.
    last: Option<String>,
    /// When it was last logged.
    logged_at: Option<Instant>,
    /// How often it came since.
    repeats: u64,
}

impl Streak {
    /// Notes a failure; `Some(repeats)` if it is to be logged (a new one,
    /// or the same for [`REPEAT_LOG`]): how often it came unlogged before.
    fn fail(&mut self, failure: &str, now: Instant) -> Option<u64> {
        let same = self.last.as_deref() == Some(failure);
        if same && self.logged_at.is_some_and(|at| now.duration_since(at) < REPEAT_LOG) {
            self.repeats += 1;
            return None;
        }
        self.last = Some(failure.to_owned());
        self.logged_at = Some(now);
        Some(std::mem::take(&mut self.repeats))
    }

    /// Ends the streak; whether there was one.
    fn end(&mut self) -> bool {
        self.repeats = 0;
        self.logged_at = None;
        self.last.take().is_some()
    }
}

impl Follow {
    /// Starts following `reference` as the component of `key` (the
    /// reference itself, or the `*.oci` file naming it): its own task
    /// pulls and loads it, then looks again at every poll. Returns at
    /// once; until the first pull arrives, `key` shows as `pending` in the
    /// host's status (and keeps it from being ready), unless a version
    /// runs from it already. The follower keeps looking whatever the first
    /// look did: a registry that is down or too slow at first is tried
    /// again at each poll.
    ///
    /// `async` for its callers (a components folder's look awaits it), it
    /// waits for nothing.
    pub(crate) async fn start(shared: Arc<Shared>, key: PathBuf, reference: Reference) -> Self {
        let every = shared.poll_interval;
        tracing::info!(reference = %reference, every_s = every.as_secs_f64(), "following reference");
        shared.expect(&key);
        let task = tokio::spawn(async move {
            let mut state = State::default();
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                // Failures are logged and kept in the status by `step`.
                let _ = state.step(&shared, &key, &reference).await;
                if reference.digest().is_some() && state.loaded.is_some() {
                    return;
                }
            }
        });
        Self { task }
    }
}

impl State {
    /// One look: resolves the tag, and pulls and loads what it points at
    /// if that is new; the lookup and the pull share one deadline (one
    /// fetch). `Ok(None)`: nothing new.
    async fn step(
        &mut self,
        shared: &Arc<Shared>,
        key: &std::path::Path,
        reference: &Reference,
    ) -> Result<Option<Change>, Error> {
        let deadline = shared.registry.deadline();
        let digest = match shared.registry.resolve_by(reference, deadline).await {
            Ok(digest) => {
                if self.streak.end() {
                    tracing::info!(reference = %reference, "registry answers again");
                }
                digest
            }
            Err(error) => return Err(self.failed(shared, key, None, error)),
        };
        if self.loaded.as_ref() == Some(&digest) || self.refused.as_ref() == Some(&digest) {
            return Ok(None);
        }
        let pulled = match shared.registry.pull_by(&reference.at_digest(&digest), deadline).await {
            Ok(pulled) => pulled,
            Err(error) if error.is_unavailable() => return Err(self.failed(shared, key, Some(&digest), error)),
            Err(error) => {
                self.refused = Some(digest.clone());
                return Err(shared.reject_pull(key, Some(&digest), error));
            }
        };
        tracing::info!(
            reference = %reference,
            manifest = %digest,
            layer = %pulled.layer_digest,
            cached = pulled.cached,
            "pulled component"
        );
        match shared.load_pulled(key, reference, pulled).await {
            Ok(change) => {
                self.loaded = Some(digest);
                self.refused = None;
                Ok(Some(change))
            }
            Err(e) => {
                self.refused = Some(digest);
                Err(e)
            }
        }
    }

    /// A lookup, or a pull that may pass by itself, failed: logged once
    /// per streak of the same failure (and every [`REPEAT_LOG`] while it
    /// lasts); recorded in the status only while nothing runs from `key`
    /// (what runs, serves), as often as it is logged.
    fn failed(
        &mut self,
        shared: &Arc<Shared>,
        key: &std::path::Path,
        digest: Option<&str>,
        error: crate::serve::oci::Error,
    ) -> Error {
        let Some(repeats) = self.streak.fail(&error.to_string(), Instant::now()) else {
            return Error::Pull { path: key.to_owned(), error };
        };
        if shared.runs(key) {
            tracing::warn!(
                path = %key.display(),
                reason = error.reason(),
                error = %error,
                repeats,
                "cannot look up the reference; what runs keeps serving, trying again at the next poll"
            );
            Error::Pull { path: key.to_owned(), error }
        } else {
            if repeats > 0 {
                tracing::warn!(path = %key.display(), repeats, "the same failure went on since it was last logged");
            }
            shared.reject_pull(key, digest, error)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_same_failure_is_logged_once_then_every_few_minutes_and_a_new_one_at_once() {
        let mut streak = Streak::default();
        let start = Instant::now();
        assert_eq!(streak.fail("down", start), Some(0), "the first is logged");
        for _ in 0..9 {
            tokio::time::advance(Duration::from_secs(1)).await;
            assert_eq!(streak.fail("down", Instant::now()), None, "a repeat is not");
        }
        tokio::time::advance(REPEAT_LOG).await;
        assert_eq!(streak.fail("down", Instant::now()), Some(9), "logged again, with how often it came");
        assert_eq!(streak.fail("too slow", Instant::now()), Some(0), "another failure is logged at once");
        assert!(streak.end(), "the streak ended");
        assert!(!streak.end(), "no streak");
        assert_eq!(streak.fail("too slow", Instant::now()), Some(0), "after an answer, logged again");
    }
}
