//! Captured guest stdout and stderr: the first bytes up to a capacity are
//! kept, the rest is counted and dropped. Writing never fails, so a guest
//! that prints too much is truncated, not trapped (wasmtime's
//! `MemoryOutputPipe` traps a write past its capacity).

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

use crate::sync::lock;

/// Most bytes a guest may hand over in one write (what `check-write`
/// permits); more writes are always permitted.
const WRITE_PERMIT: usize = 64 << 10;

#[derive(Debug, Default)]
struct Captured {
    kept: Vec<u8>,
    dropped: u64,
}

/// An output stream that keeps its first `capacity` bytes and counts the
/// rest. Clones share the buffer.
#[derive(Clone, Debug)]
pub(crate) struct CappedPipe {
    capacity: usize,
    captured: Arc<Mutex<Captured>>,
}

impl CappedPipe {
    /// A pipe keeping at most `capacity` bytes.
    pub(crate) fn new(capacity: usize) -> Self {
        Self { capacity, captured: Arc::default() }
    }

    fn keep(&self, bytes: &[u8]) {
        let mut c = lock(&self.captured);
        let room = self.capacity.saturating_sub(c.kept.len());
        let kept = bytes.len().min(room);
        c.kept.extend_from_slice(&bytes[..kept]);
        c.dropped += (bytes.len() - kept) as u64;
    }

    /// Takes what was kept, and how many bytes were dropped over the
    /// capacity, leaving the pipe empty for the next invocation.
    pub(crate) fn take(&self) -> (Vec<u8>, u64) {
        let mut c = lock(&self.captured);
        (std::mem::take(&mut c.kept), std::mem::take(&mut c.dropped))
    }
}

#[async_trait::async_trait]
impl OutputStream for CappedPipe {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.keep(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(WRITE_PERMIT)
    }
}

#[async_trait::async_trait]
impl Pollable for CappedPipe {
    async fn ready(&mut self) {}
}

impl AsyncWrite for CappedPipe {
    fn poll_write(self: Pin<&mut Self>, _cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.keep(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl IsTerminal for CappedPipe {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for CappedPipe {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_past_the_capacity_are_counted_not_refused() {
        let mut pipe = CappedPipe::new(10);
        for _ in 0..3 {
            assert!(pipe.check_write().expect("always writable") > 0);
            pipe.write(Bytes::from_static(b"0123456")).expect("never fails");
        }
        assert_eq!(pipe.take(), (b"0123456012".to_vec(), 11));
        assert_eq!(pipe.take(), (Vec::new(), 0), "taking empties the pipe");
        pipe.write(Bytes::from_static(b"ab")).expect("never fails");
        assert_eq!(pipe.take(), (b"ab".to_vec(), 0), "the capacity is whole again");
    }
}
