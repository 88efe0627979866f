//! The blob cache, `<cache>/oci/blobs/sha256/<hex>`, and the temporary
//! files a layer streams into on its way there.
//!
//! A layer is written into a [`Partial`] next to the place it is cached
//! at (the same file system, so that the rename into place is atomic) as
//! it arrives, hashed as it goes; only a layer whose digest matches is
//! renamed into place ([`Partial::persist`]). A `Partial` that is dropped
//! before, because the pull failed, was refused or ran out of time, takes
//! its file with it: nothing half-written or refused stays in the cache.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest as _, Sha256};
use tokio::io::{AsyncReadExt as _, AsyncSeekExt as _, AsyncWriteExt as _};

/// Tells the temporary files of one process apart.
static PARTIALS: AtomicU64 = AtomicU64::new(0);

/// A temporary file a blob is written into, hashed as it is written;
/// removed when dropped unless [`persist`](Self::persist)ed.
#[derive(Debug)]
pub(super) struct Partial {
    path: PathBuf,
    file: tokio::fs::File,
    sha256: Sha256,
    written: u64,
    /// Renamed into place: not removed when dropped.
    kept: bool,
}

impl Partial {
    /// A new, empty temporary file in `dir` (made if missing) for the blob
    /// whose digest is `hex`: `<hex>.part-<pid>-<n>`, so that it never
    /// passes for a cached blob.
    pub(super) async fn create(dir: &Path, hex: &str) -> std::io::Result<Self> {
        tokio::fs::create_dir_all(dir).await?;
        let n = PARTIALS.fetch_add(1, Ordering::Relaxed);
        let path = dir.join(format!("{hex}.part-{}-{n}", std::process::id()));
        let file = tokio::fs::OpenOptions::new().read(true).write(true).create_new(true).open(&path).await?;
        Ok(Self { path, file, sha256: Sha256::new(), written: 0, kept: false })
    }

    /// Appends `chunk` to the file (written through when this returns) and
    /// to the digest.
    pub(super) async fn write(&mut self, chunk: &[u8]) -> std::io::Result<()> {
        self.file.write_all(chunk).await?;
        self.file.flush().await?;
        self.sha256.update(chunk);
        self.written += chunk.len() as u64;
        Ok(())
    }

    /// The temporary file.
    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// How many bytes were written.
    pub(super) fn written(&self) -> u64 {
        self.written
    }

    /// `sha256:<hex>` of what was written.
    pub(super) fn digest(&self) -> String {
        format!("sha256:{}", hex::encode(self.sha256.clone().finalize()))
    }

    /// Everything written, read back from the file.
    pub(super) async fn read_back(&mut self) -> std::io::Result<Vec<u8>> {
        self.file.flush().await?;
        self.file.seek(std::io::SeekFrom::Start(0)).await?;
        let mut bytes = Vec::with_capacity(usize::try_from(self.written).unwrap_or(0));
        (&mut self.file).take(self.written).read_to_end(&mut bytes).await?;
        Ok(bytes)
    }

    /// Renames the file to `path` (in the same file system): it is no
    /// longer removed. If the rename fails, it is removed.
    pub(super) async fn persist(mut self, path: &Path) -> std::io::Result<()> {
        self.file.flush().await?;
        tokio::fs::rename(&self.path, path).await?;
        self.kept = true;
        Ok(())
    }
}

impl Drop for Partial {
    fn drop(&mut self) {
        if !self.kept {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Reads a cached blob, if it is there, has `size` bytes and still
/// matches `digest`; one that does not is removed (and pulled again).
pub(super) fn read_cached(path: &Path, digest: &str, size: u64) -> Option<Vec<u8>> {
    let len = std::fs::metadata(path).ok()?.len();
    let bytes = if len == size { std::fs::read(path).ok() } else { None };
    if let Some(bytes) = bytes.filter(|b| super::sha256(b) == digest) {
        return Some(bytes);
    }
    tracing::warn!(path = %path.display(), "cached blob does not match its digest, pulling it again");
    let _ = std::fs::remove_file(path);
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh folder under the temporary directory.
    fn folder(what: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("capstan-oci-cache-{what}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn files_in(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .map(|entries| entries.filter_map(|e| Some(e.ok()?.file_name().to_string_lossy().into_owned())).collect())
            .unwrap_or_default();
        names.sort();
        names
    }

    #[tokio::test]
    async fn a_blob_is_renamed_into_place_when_persisted_and_a_dropped_one_leaves_no_file() {
        let dir = folder("persist");
        let digest = crate::serve::oci::sha256(b"component");
        let hex = digest.trim_start_matches("sha256:");
        let mut partial = Partial::create(&dir, hex).await.expect("created");
        partial.write(b"compo").await.expect("written");
        partial.write(b"nent").await.expect("written");
        assert_eq!((partial.written(), partial.digest()), (9, digest.clone()));
        let [name] = files_in(&dir).try_into().expect("one file");
        assert!(name.starts_with(&format!("{hex}.part-")), "{name}");
        assert_eq!(partial.read_back().await.expect("read back"), b"component");
        partial.persist(&dir.join(hex)).await.expect("renamed");
        assert_eq!(files_in(&dir), [hex.to_owned()]);
        assert_eq!(read_cached(&dir.join(hex), &digest, 9).as_deref(), Some(&b"component"[..]));

        let mut dropped = Partial::create(&dir, "other").await.expect("created");
        dropped.write(b"half a layer").await.expect("written");
        assert_eq!(files_in(&dir).len(), 2);
        drop(dropped);
        assert_eq!(files_in(&dir), [hex.to_owned()], "the dropped file is gone");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn a_cached_blob_that_no_longer_matches_or_has_another_size_is_dropped() {
        let dir = folder("tampered");
        std::fs::create_dir_all(&dir).expect("made");
        let digest = crate::serve::oci::sha256(b"component");
        let path = dir.join("blob");
        std::fs::write(&path, b"component").expect("written");
        assert_eq!(read_cached(&path, &digest, 9).as_deref(), Some(&b"component"[..]));
        assert_eq!(read_cached(&path, &digest, 8), None, "not the declared size");
        assert!(!path.exists(), "the bad entry is removed");
        std::fs::write(&path, b"tampered!").expect("written");
        assert_eq!(read_cached(&path, &digest, 9), None, "not the digest");
        assert!(!path.exists(), "the bad entry is removed");
        let _ = std::fs::remove_dir_all(dir);
    }
}
