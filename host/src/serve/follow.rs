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
//! - A registry that is down, or answers with errors, never stops what
//!   runs: the failure is logged once (`warn`) until the registry answers
//!   again (`info`), and the tag is looked up again at the next poll.
//! - A manifest whose component was rejected (or that could not be
//!   verified) is not pulled again while the tag points at it; moving the
//!   tag (back) to a good version loads that one.
//! - A reference by digest is pulled once and never changes.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::serve::host::{Change, Error, Shared};
use crate::serve::oci::Reference;

/// How often a followed tag is looked up by default.
pub const POLL_INTERVAL: Duration = Duration::from_secs(30);

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
    /// Whether the registry was found unavailable at the last look.
    down: bool,
}

impl Follow {
    /// Pulls and loads what `reference` names as the component of `key`
    /// (the reference itself, or the `*.oci` file naming it); returns the
    /// follower and what that first load did. The follower keeps looking
    /// whatever the first load did: a registry that is down at first is
    /// tried again at each poll.
    pub(crate) async fn start(
        shared: Arc<Shared>,
        key: PathBuf,
        reference: Reference,
    ) -> (Self, Result<Option<Change>, Error>) {
        let mut state = State::default();
        let first = state.step(&shared, &key, &reference).await;
        let every = shared.poll_interval;
        tracing::info!(reference = %reference, every_s = every.as_secs_f64(), "following reference");
        let task = tokio::spawn(async move {
            if reference.digest().is_some() && state.loaded.is_some() {
                return;
            }
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tick.tick().await;
                let _ = state.step(&shared, &key, &reference).await;
            }
        });
        (Self { task }, first)
    }
}

impl State {
    /// One look: resolves the tag, and pulls and loads what it points at
    /// if that is new. `Ok(None)`: nothing new.
    async fn step(
        &mut self,
        shared: &Arc<Shared>,
        key: &std::path::Path,
        reference: &Reference,
    ) -> Result<Option<Change>, Error> {
        let digest = match shared.registry.resolve(reference).await {
            Ok(digest) => {
                if std::mem::take(&mut self.down) {
                    tracing::info!(reference = %reference, "registry answers again");
                }
                digest
            }
            Err(error) => return Err(self.unavailable(shared, key, None, error)),
        };
        if self.loaded.as_ref() == Some(&digest) || self.refused.as_ref() == Some(&digest) {
            return Ok(None);
        }
        let pulled = match shared.registry.pull(&reference.at_digest(&digest)).await {
            Ok(pulled) => pulled,
            Err(error) if error.is_unavailable() => return Err(self.unavailable(shared, key, Some(&digest), error)),
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

    /// A registry that does not answer: logged once per outage; recorded
    /// in the status only while nothing runs from `key` (what runs, serves).
    fn unavailable(
        &mut self,
        shared: &Arc<Shared>,
        key: &std::path::Path,
        digest: Option<&str>,
        error: crate::serve::oci::Error,
    ) -> Error {
        if !std::mem::replace(&mut self.down, true) {
            tracing::warn!(
                path = %key.display(),
                error = %error,
                running = shared.runs(key),
                "cannot look up the reference; what runs keeps serving, trying again at the next poll"
            );
        }
        if shared.runs(key) {
            Error::Pull { path: key.to_owned(), error }
        } else {
            shared.reject_pull(key, digest, error)
        }
    }
}
