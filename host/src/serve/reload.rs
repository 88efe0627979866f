//! Following a components directory (`capstan run --components DIR`).
//!
//! File-system events only tell the host to look again: each look compares
//! the directory's `*.wasm` and `*.wasm.gz` files (size and mtime, then
//! digest) with what it knows, so it does not matter which events a
//! platform reports, or how an editor, `cp`, or a ConfigMap volume's
//! symlink swap writes the file. The first event starts a look at once;
//! events during a look start one more after it (however many came). A
//! version seen before (its digest is in the compile cache, or it is the
//! one running) is loaded at that look: its bytes are complete. Any other file whose
//! size or mtime is still moving is not loaded until it holds still
//! ([`SETTLE`]), so a half-written file is not loaded; write to a temporary name (not ending in `.wasm`) and
//! rename it into place to be sure (`greeter.wasm.tmp`, then
//! `greeter.wasm`). A periodic look ([`RESCAN`]) covers file systems that
//! report no events.
//!
//! A new file starts a controller, a changed one replaces the running
//! version ([`Host::load`](crate::serve::host::Host::load)), a removed one stops
//! its controller ([`Host::unload`](crate::serve::host::Host::unload)). A file that
//! is rejected leaves the running version serving.
//!
//! A `*.oci` file names a component in an OCI registry instead: its first
//! line that is not empty or a `#` comment is a reference
//! (`oci://REGISTRY/REPOSITORY:TAG` or `…@sha256:DIGEST`). The component is
//! pulled and run as if it were the file, and its tag is followed (see
//! [`crate::serve::follow`]); editing the file to name another reference pulls
//! that one; removing it stops the controller. A file whose reference does
//! not parse is rejected, and what ran from it keeps serving.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use notify_debouncer_mini::notify::{self, RecommendedWatcher, RecursiveMode, Watcher as _};
use tokio::sync::mpsc;

use crate::serve::follow::Follow;
use crate::serve::host::{Error, Shared};
use crate::serve::oci::Reference;

/// Events closer together than this are handled as one (by the
/// certificate watch; the components directory looks at the first event).
pub const DEBOUNCE: Duration = Duration::from_millis(20);
/// How long a file's size and mtime must hold still before it is loaded
/// (unless it is a version seen before, which is loaded at once).
pub const SETTLE: Duration = Duration::from_millis(100);
/// Longest wait for a file to hold still; it is loaded (and most likely
/// rejected, then loaded again on its next change) after that.
pub const SETTLE_MAX: Duration = Duration::from_secs(10);
/// How often the directory is looked at without events.
pub const RESCAN: Duration = Duration::from_secs(30);

/// Size and mtime of a file, as last looked at.
type Stamp = (u64, Option<SystemTime>);

/// What the watch knows of the directory.
#[derive(Debug, Default)]
struct Known {
    stamps: HashMap<PathBuf, Stamp>,
    /// The `*.oci` files followed, with their references.
    follows: HashMap<PathBuf, (Reference, Follow)>,
    /// Whether the last look could not read the directory (the failure is
    /// logged at the first look of a streak).
    unreadable: bool,
}

/// What a look does: unload the files `gone`, look at the files `changed`
/// (both sorted).
#[derive(Debug, Default, PartialEq, Eq)]
struct Changes {
    gone: Vec<PathBuf>,
    changed: Vec<PathBuf>,
}

impl Known {
    /// What changed since the last look, given what this one saw of `dir`.
    /// A listing that failed changes nothing: a directory that cannot be
    /// read is not an empty one.
    fn changes(&mut self, dir: &Path, listing: std::io::Result<Listing>) -> Changes {
        let listing = match listing {
            Ok(listing) => {
                if std::mem::take(&mut self.unreadable) {
                    tracing::info!(dir = %dir.display(), "components directory readable again");
                }
                listing
            }
            Err(error) => {
                crate::metrics::metrics().components_dir_unreadable();
                if !std::mem::replace(&mut self.unreadable, true) {
                    tracing::warn!(
                        dir = %dir.display(),
                        error = %error,
                        "cannot read the components directory; what runs keeps running until it can be read"
                    );
                }
                return Changes::default();
            }
        };
        let mut gone: Vec<PathBuf> = self.stamps.keys().filter(|p| !listing.contains_key(*p)).cloned().collect();
        gone.sort();
        let mut changed: Vec<PathBuf> = listing
            .iter()
            .filter(|(p, s)| s.as_ref().is_some_and(|s| self.stamps.get(*p) != Some(s)))
            .map(|(p, _)| p.clone())
            .collect();
        changed.sort();
        Changes { gone, changed }
    }
}

/// A running watch of a components directory; stops when dropped.
pub struct DirWatch {
    task: tokio::task::JoinHandle<()>,
    _watcher: RecommendedWatcher,
}

impl std::fmt::Debug for DirWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirWatch").finish_non_exhaustive()
    }
}

impl Drop for DirWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl DirWatch {
    /// Loads every component in `dir` (a rejected one is reported in the
    /// host's status, not an error), then follows the directory.
    pub(crate) async fn start(shared: Arc<Shared>, dir: PathBuf) -> Result<Self, Error> {
        let watch_error = |error: String| Error::Watch { path: dir.clone(), error };
        if !dir.is_dir() {
            return Err(watch_error("not a directory".into()));
        }
        // One pending look at most: a burst of events while a look runs
        // makes one more look, not one per event.
        let (tx, mut rx) = mpsc::channel(1);
        let mut watcher = notify::recommended_watcher(move |result: notify::Result<notify::Event>| {
            match &result {
                Ok(event) if !is_change(event) => return,
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "components directory watch error"),
            }
            let _ = tx.try_send(());
        })
        .map_err(|e| watch_error(e.to_string()))?;
        watcher.watch(&dir, RecursiveMode::NonRecursive).map_err(|e| watch_error(e.to_string()))?;

        let mut known = Known::default();
        look(&shared, &dir, &mut known).await;
        tracing::info!(dir = %dir.display(), components = known.stamps.len(), "following components directory");
        let task = tokio::spawn(async move {
            let mut rescan = tokio::time::interval(RESCAN);
            rescan.tick().await;
            loop {
                tokio::select! {
                    event = rx.recv() => if event.is_none() { return },
                    _ = rescan.tick() => {}
                }
                look(&shared, &dir, &mut known).await;
            }
        });
        Ok(Self { task, _watcher: watcher })
    }

    /// Stops following the directory (the controllers keep running).
    /// Dropping it does the same.
    pub fn stop(self) {
        self.task.abort();
    }
}

/// Whether `event` may change what a look sees: a file created, written
/// (or closed after writing), renamed, removed, or its metadata changed.
/// Opening, reading and closing a file without writing are not: a look
/// opens the directory and its files itself, and a look on every access
/// would make the next one at once, for ever.
pub(crate) fn is_change(event: &notify::Event) -> bool {
    use notify::EventKind;
    use notify::event::{AccessKind, AccessMode};
    match event.kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        // What the platform could not classify (or events were lost):
        // look again.
        EventKind::Any | EventKind::Other => true,
        EventKind::Create(_) | EventKind::Modify(_) | EventKind::Remove(_) => true,
    }
}

/// What a look saw of the directory: each component file with its stamp,
/// or `None` for a file that is there but could not be looked at (it is
/// neither loaded nor unloaded for it).
type Listing = HashMap<PathBuf, Option<Stamp>>;

/// The `*.wasm`, `*.wasm.gz` and `*.oci` files of `dir` with their stamps
/// (following symlinks).
///
/// # Errors
///
/// When the directory, or one of its entries, cannot be read (e.g. no
/// file descriptor is left): the listing would miss files that are
/// there, and a look would unload them.
fn components_in(dir: &Path) -> std::io::Result<Listing> {
    let entries = std::fs::read_dir(dir)?.map(|entry| entry.map(|e| e.path()));
    listing(entries, |path| std::fs::metadata(path).map(|m| m.is_file().then(|| stamp(&m))))
}

/// The component files among `entries`, stamped by `stat` (`None`: not a
/// file). A file `stat` does not find is not there (removed since, or a
/// dangling symlink); one it fails on otherwise is listed without a stamp.
///
/// # Errors
///
/// The first entry that could not be read.
fn listing(
    entries: impl IntoIterator<Item = std::io::Result<PathBuf>>,
    stat: impl Fn(&Path) -> std::io::Result<Option<Stamp>>,
) -> std::io::Result<Listing> {
    let mut listing = Listing::new();
    for path in entries {
        let path = path?;
        if !is_component_file(&path) || path.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.')) {
            continue;
        }
        match stat(&path) {
            Ok(Some(stamp)) => {
                listing.insert(path, Some(stamp));
            }
            Ok(None) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::debug!(path = %path.display(), error = %e, "component file not looked at");
                listing.insert(path, None);
            }
        }
    }
    Ok(listing)
}

/// `*.wasm`, `*.wasm.gz` (gzipped, e.g. from a ConfigMap), or `*.oci` (a
/// reference).
fn is_component_file(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.ends_with(".wasm") || n.ends_with(".wasm.gz") || is_reference_file(path))
}

/// `*.oci`: a file naming a component in a registry.
fn is_reference_file(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "oci")
}

/// The reference a `*.oci` file names: its first line that is not empty
/// or a `#` comment.
pub fn reference_in(text: &str) -> Result<Reference, crate::serve::oci::Error> {
    let line = text.lines().map(str::trim).find(|l| !l.is_empty() && !l.starts_with('#')).unwrap_or_default();
    line.parse()
}

fn stamp(m: &std::fs::Metadata) -> Stamp {
    (m.len(), m.modified().ok())
}

/// Waits until `path` holds still; its stamp then, or `None` if it went.
async fn settled(path: &Path) -> Option<Stamp> {
    let started = tokio::time::Instant::now();
    let mut last = stamp(&tokio::fs::metadata(path).await.ok()?);
    loop {
        tokio::time::sleep(SETTLE).await;
        let now = stamp(&tokio::fs::metadata(path).await.ok()?);
        if now == last || started.elapsed() > SETTLE_MAX {
            return Some(now);
        }
        last = now;
    }
}

/// Compares the directory with `known` and loads, reloads or unloads.
async fn look(shared: &Arc<Shared>, dir: &Path, known: &mut Known) {
    let Changes { gone, changed } = known.changes(dir, components_in(dir));
    for path in gone {
        known.stamps.remove(&path);
        known.follows.remove(&path);
        shared.unload(&path).await;
    }
    for path in &changed {
        tracing::debug!(path = %path.display(), "changed");
        // A version seen before (its digest in the compile cache, or the
        // one running) is complete: no need to wait for it to hold still.
        if !is_reference_file(path)
            && let Some(stamp) = std::fs::metadata(path).ok().map(|m| stamp(&m))
            && let Some(_result) = shared.load_if_known(path).await
        {
            known.stamps.insert(path.clone(), stamp);
            continue;
        }
        let Some(stamp) = settled(path).await else { continue };
        known.stamps.insert(path.clone(), stamp);
        if is_reference_file(path) {
            follow(shared, path, &mut known.follows).await;
        } else {
            // Errors are logged and kept in the host's status by `load`.
            let _ = shared.load(path).await;
        }
    }
}

/// Follows the reference a new or changed `*.oci` file names (unless it
/// is the one followed already).
async fn follow(shared: &Arc<Shared>, path: &Path, follows: &mut HashMap<PathBuf, (Reference, Follow)>) {
    let reference = match tokio::fs::read_to_string(path).await {
        Ok(text) => reference_in(&text),
        Err(e) => {
            Err(crate::serve::oci::Error::Reference { reference: path.display().to_string(), reason: e.to_string() })
        }
    };
    let reference = match reference {
        Ok(reference) => reference,
        Err(error) => {
            shared.reject_pull(path, None, error);
            return;
        }
    };
    if follows.get(path).is_some_and(|(followed, _)| *followed == reference) {
        return;
    }
    // The old reference stops being followed; what it loaded serves until
    // the new one replaces it.
    follows.remove(path);
    let follow = Follow::start(Arc::clone(shared), path.to_owned(), reference.clone()).await;
    follows.insert(path.to_owned(), (reference, follow));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reference_file_names_its_first_line_that_is_not_a_comment() {
        let text = "# the greeter, pushed by CI\n\n  oci://127.0.0.1:5000/capstan/greeter:v2  \noci://ignored/x:y\n";
        assert_eq!(reference_in(text).expect("parses").to_string(), "oci://127.0.0.1:5000/capstan/greeter:v2");
        assert_eq!(reference_in("# nothing\n").expect_err("empty").reason(), "reference");
        assert!(is_component_file(Path::new("/c/greeter.oci")) && is_reference_file(Path::new("/c/greeter.oci")));
        assert!(!is_component_file(Path::new("/c/greeter.oci.tmp")));
    }

    fn stamped(size: u64) -> Option<Stamp> {
        Some((size, Some(SystemTime::UNIX_EPOCH + Duration::from_secs(size))))
    }

    fn known(files: &[(&str, u64)]) -> Known {
        let stamps = files.iter().map(|(name, size)| (PathBuf::from(name), stamped(*size).expect("a stamp")));
        Known { stamps: stamps.collect(), ..Known::default() }
    }

    fn emfile() -> std::io::Error {
        std::io::Error::from_raw_os_error(24)
    }

    #[test]
    fn a_directory_that_cannot_be_read_unloads_nothing_until_it_can_be_read_again() {
        let dir = Path::new("/components");
        let mut known = known(&[("/components/a.wasm", 1), ("/components/b.wasm", 2)]);

        // read_dir fails: nothing is gone, nothing changed.
        assert_eq!(known.changes(dir, Err(emfile())), Changes::default());
        assert!(known.unreadable);
        // An entry fails while the directory is read: the same.
        let entries = vec![Ok(PathBuf::from("/components/a.wasm")), Err(emfile())];
        let listed = listing(entries, |_| Ok(stamped(1)));
        assert_eq!(listed.as_ref().map_err(std::io::Error::raw_os_error).err(), Some(Some(24)));
        assert_eq!(known.changes(dir, listed), Changes::default());
        assert!(known.unreadable, "still one streak");

        // Readable again: b went, c came, a is as it was.
        let entries = ["/components/a.wasm", "/components/c.wasm", "/components/notes.txt"].map(|p| Ok(p.into()));
        let listed = listing(entries, |p| Ok(stamped(if p.ends_with("a.wasm") { 1 } else { 3 })));
        let changes = known.changes(dir, listed);
        assert_eq!(changes.gone, [PathBuf::from("/components/b.wasm")]);
        assert_eq!(changes.changed, [PathBuf::from("/components/c.wasm")]);
        assert!(!known.unreadable);
    }

    #[test]
    fn a_file_that_cannot_be_looked_at_is_neither_unloaded_nor_loaded() {
        let dir = Path::new("/components");
        let mut known = known(&[("/components/a.wasm", 1)]);
        let entries = ["/components/a.wasm", "/components/new.wasm", "/components/gone.wasm"].map(|p| Ok(p.into()));
        let listed = listing(entries, |p| match p.file_name().and_then(|n| n.to_str()) {
            Some("gone.wasm") => Err(std::io::ErrorKind::NotFound.into()),
            _ => Err(std::io::Error::from_raw_os_error(40)),
        })
        .expect("the directory was read");
        assert_eq!(listed.len(), 2, "{listed:?}");
        assert_eq!(known.changes(dir, Ok(listed)), Changes::default());
    }

    #[test]
    fn only_changes_make_a_look_not_opening_or_reading_a_file() {
        use notify::event::{AccessKind, AccessMode, CreateKind, DataChange, MetadataKind, ModifyKind, RenameMode};
        use notify::{Event, EventKind};
        let kinds = [
            (EventKind::Access(AccessKind::Open(AccessMode::Any)), false),
            (EventKind::Access(AccessKind::Close(AccessMode::Read)), false),
            (EventKind::Access(AccessKind::Read), false),
            (EventKind::Access(AccessKind::Close(AccessMode::Write)), true),
            (EventKind::Create(CreateKind::File), true),
            (EventKind::Modify(ModifyKind::Data(DataChange::Any)), true),
            (EventKind::Modify(ModifyKind::Name(RenameMode::To)), true),
            (EventKind::Modify(ModifyKind::Metadata(MetadataKind::Any)), true),
            (EventKind::Remove(notify::event::RemoveKind::File), true),
            (EventKind::Other, true),
        ];
        for (kind, change) in kinds {
            assert_eq!(is_change(&Event::new(kind)), change, "{kind:?}");
        }
    }
}
