//! Reading what a registry sends within bounds: every body is read chunk
//! by chunk and the reading stops at a limit, whatever `Content-Length`
//! or a manifest said; an error answer's text is cut to
//! [`MAX_ERROR_TEXT`] before it goes anywhere.

use std::borrow::Cow;

use reqwest::StatusCode;
use sha2::{Digest as _, Sha256};

use super::{Error, Reference};

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

/// Reads `response`'s body, at most `limit` bytes, feeding `sha256` as it
/// goes. `Ok(None)` when the body is longer than `limit` (the reading
/// stopped there).
pub(super) async fn read_bounded(
    reference: &Reference,
    response: &mut reqwest::Response,
    limit: u64,
    mut sha256: Option<&mut Sha256>,
) -> Result<Option<Vec<u8>>, Error> {
    let start = usize::try_from(limit.min(1 << 20)).unwrap_or(0);
    let mut body = Vec::with_capacity(start);
    while let Some(chunk) = response.chunk().await.map_err(|e| transport(reference, &e))? {
        if u64::try_from(body.len() + chunk.len()).unwrap_or(u64::MAX) > limit {
            return Ok(None);
        }
        if let Some(sha256) = sha256.as_deref_mut() {
            sha256.update(&chunk);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Some(body))
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
    use super::*;

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
