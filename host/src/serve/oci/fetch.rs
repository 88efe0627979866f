//! Reading what a registry sends within bounds: every body is read chunk
//! by chunk and the reading stops at a limit, whatever `Content-Length`
//! or a manifest said; a layer goes to disk chunk by chunk, never whole
//! into memory; an error answer's text is cut to [`MAX_ERROR_TEXT`]
//! before it goes anywhere.

use std::borrow::Cow;

use super::cache::Partial;
use super::{Error, Reference};
use reqwest::StatusCode;

/// The most of a registry's error text kept, logged or shown, in bytes
/// (cut on a character boundary, marked with `…`).
pub const MAX_ERROR_TEXT: usize = 512;
/// The most of an error answer's body that is read.
const MAX_ERROR_BODY: u64 = 4 << 10;

/// `text` cut to at most [`MAX_ERROR_TEXT`] bytes on a character
/// boundary (with `…` when cut), control characters and line breaks
/// turned into spaces, so that it fits on one log line.
pub fn bounded_text(text: &str) -> String {
    let mut end = text.len().min(MAX_ERROR_TEXT);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut out: String = text[..end].chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    if end < text.len() {
        out.push('…');
    }
    out
}

/// Reads `response`'s body into memory (a manifest), at most `limit`
/// bytes. `Ok(None)` when the body is longer than `limit` (the reading
/// stopped there).
pub(super) async fn read_bounded(
    reference: &Reference,
    response: &mut reqwest::Response,
    limit: u64,
) -> Result<Option<Vec<u8>>, Error> {
    let start = usize::try_from(limit.min(1 << 20)).unwrap_or(0);
    let mut body = Vec::with_capacity(start);
    while let Some(chunk) = response.chunk().await.map_err(|e| transport(reference, &e))? {
        if u64::try_from(body.len() + chunk.len()).unwrap_or(u64::MAX) > limit {
            return Ok(None);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Some(body))
}

/// A body that arrives chunk by chunk: a registry's [`Answer`] (or, in
/// tests, chunks given one by one).
pub(super) trait Body: Send {
    /// The next chunk; `None` at the end.
    fn chunk(&mut self) -> impl Future<Output = Result<Option<bytes::Bytes>, Error>> + Send;
}

/// A registry's answer about `reference`, as a [`Body`].
pub(super) struct Answer<'a> {
    /// What was asked for.
    pub(super) reference: &'a Reference,
    /// The answer.
    pub(super) response: reqwest::Response,
}

impl Body for Answer<'_> {
    async fn chunk(&mut self) -> Result<Option<bytes::Bytes>, Error> {
        self.response.chunk().await.map_err(|e| transport(self.reference, &e))
    }
}

/// Writes `body` into `partial` as it comes, at most `limit` bytes: each
/// chunk is on disk, and hashed, before the next is asked for.
/// `Ok(false)` when the body is longer than `limit` (the writing stopped
/// before the chunk that passed it; nothing more is read).
pub(super) async fn stream_bounded(body: &mut impl Body, limit: u64, partial: &mut Partial) -> Result<bool, Error> {
    while let Some(chunk) = body.chunk().await? {
        if partial.written().saturating_add(chunk.len() as u64) > limit {
            return Ok(false);
        }
        partial.write(&chunk).await.map_err(|error| Error::Cache { path: partial.path().to_owned(), error })?;
    }
    Ok(true)
}

/// The error an answer other than a success stands for, with at most
/// [`MAX_ERROR_TEXT`] bytes of its body: [`Error::Unavailable`] for a
/// server error, a timeout or too many requests (it may pass), else
/// [`Error::Registry`].
pub(super) async fn refusal(reference: &Reference, mut response: reqwest::Response) -> Error {
    let status = response.status();
    let mut body = Vec::new();
    while let Ok(Some(chunk)) = response.chunk().await {
        body.extend_from_slice(&chunk);
        if u64::try_from(body.len()).unwrap_or(u64::MAX) >= MAX_ERROR_BODY {
            break;
        }
    }
    let text = String::from_utf8_lossy(&body);
    let text = match text.trim() {
        "" => Cow::Borrowed(""),
        t => Cow::Owned(format!(": {}", bounded_text(t))),
    };
    let reason = format!("{status}{text}");
    let reference = reference.to_string();
    if status.is_server_error() || status == StatusCode::REQUEST_TIMEOUT || status == StatusCode::TOO_MANY_REQUESTS {
        Error::Unavailable { reference, reason }
    } else if status == StatusCode::NOT_FOUND {
        Error::Registry { reference, reason: format!("not found: {reason}") }
    } else {
        Error::Registry { reference, reason }
    }
}

/// A request that did not get an answer: the registry is unavailable.
pub(super) fn transport(reference: &Reference, error: &reqwest::Error) -> Error {
    let mut reason = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        reason.push_str(": ");
        reason.push_str(&cause.to_string());
        source = cause.source();
    }
    Error::Unavailable { reference: reference.to_string(), reason: bounded_text(&reason) }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::path::{Path, PathBuf};

    use super::*;

    /// A fresh folder under the temporary directory.
    fn folder(what: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("capstan-oci-fetch-{what}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    /// The sizes of the files in `dir`.
    fn sizes(dir: &Path) -> Vec<u64> {
        std::fs::read_dir(dir)
            .map(|entries| entries.filter_map(|e| Some(e.ok()?.metadata().ok()?.len())).collect())
            .unwrap_or_default()
    }

    /// Chunks given one by one; before giving one, notes how much it gave
    /// so far and the sizes of the files in `dir`.
    struct Chunks {
        chunks: VecDeque<&'static [u8]>,
        dir: PathBuf,
        given: u64,
        seen: Vec<(u64, Vec<u64>)>,
    }

    impl Chunks {
        fn new(chunks: &[&'static [u8]], dir: &Path) -> Self {
            Self { chunks: chunks.iter().copied().collect(), dir: dir.to_owned(), given: 0, seen: Vec::new() }
        }
    }

    impl Body for Chunks {
        async fn chunk(&mut self) -> Result<Option<bytes::Bytes>, Error> {
            self.seen.push((self.given, sizes(&self.dir)));
            let chunk = self.chunks.pop_front();
            self.given += chunk.map_or(0, |c| c.len() as u64);
            Ok(chunk.map(bytes::Bytes::from_static))
        }
    }

    #[tokio::test]
    async fn a_layer_is_on_disk_chunk_by_chunk_before_the_next_chunk_is_read() {
        let dir = folder("stream");
        let mut partial = Partial::create(&dir, "layer").await.expect("created");
        let mut body = Chunks::new(&[b"abc", b"defg", b"h"], &dir);
        assert!(stream_bounded(&mut body, 8, &mut partial).await.expect("streamed"), "within the limit");
        // What was given so far is in the file before more is asked for.
        assert_eq!(body.seen, [(0, vec![0]), (3, vec![3]), (7, vec![7]), (8, vec![8])]);
        assert_eq!(partial.digest(), crate::serve::oci::sha256(b"abcdefgh"));
        drop(partial);
        assert!(sizes(&dir).is_empty(), "not persisted: removed");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn a_body_longer_than_its_limit_is_refused_before_the_chunk_that_passes_it_is_written() {
        let dir = folder("limit");
        let mut partial = Partial::create(&dir, "layer").await.expect("created");
        let mut body = Chunks::new(&[b"abc", b"defg", b"never read"], &dir);
        assert!(!stream_bounded(&mut body, 5, &mut partial).await.expect("read"), "past the limit");
        assert_eq!((partial.written(), sizes(&dir)), (3, vec![3]), "the chunk that passed it is not written");
        assert_eq!(body.chunks.len(), 1, "nothing more is read");
        drop(partial);
        assert!(sizes(&dir).is_empty(), "refused: removed");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn error_text_is_cut_on_a_character_boundary_and_kept_on_one_line() {
        assert_eq!(bounded_text("not found\nat all"), "not found at all");
        let long = "é".repeat(MAX_ERROR_TEXT);
        let cut = bounded_text(&long);
        assert!(cut.ends_with('…') && cut.len() <= MAX_ERROR_TEXT + '…'.len_utf8(), "{}", cut.len());
        assert_eq!(cut.trim_end_matches('…'), "é".repeat(MAX_ERROR_TEXT / 2));
        let odd = format!("x{long}");
        assert_eq!(bounded_text(&odd).trim_end_matches('…').len(), MAX_ERROR_TEXT - 1);
    }
}
