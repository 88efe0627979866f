//! Outbound connections kept open between requests, per component and
//! origin, so that a controller calling the same API again and again pays
//! for TCP (and TLS) once, as any HTTP client with a pool does.
//!
//! A connection is pooled only after its response body was read to the
//! end; one whose body the guest dropped, or that the server closed, is
//! not. Each is keyed by the component that opened it (its cluster and
//! name) and where it goes: no component ever sends on a connection
//! another one opened, so nothing a server ties to a connection crosses
//! between components. At most [`MAX_IDLE_PER_ORIGIN`] idle connections
//! per key and [`MAX_IDLE`] in all are kept.
//!
//! Every connection has a *lease*: while a request is on it, the end of
//! that request's invocation; while idle, [`IDLE_TIMEOUT`] after it was
//! returned. The connection's task closes it when the lease runs out, so
//! neither a guest that never reads a body nor an idle pool holds a
//! socket past it.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use hyper::client::conn::http1::SendRequest;
use tokio::sync::watch;
use tokio::time::Instant;
use wasmtime_wasi_http::WasiBody;

use crate::metrics::Owner;

/// How long an idle connection is kept: below the idle timeouts of common
/// servers and load balancers (60 s and up), so the server rarely closes
/// one first.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// The most idle connections kept per component and origin.
pub const MAX_IDLE_PER_ORIGIN: usize = 8;

/// The most idle connections kept in all.
pub const MAX_IDLE: usize = 256;

/// Which connections a request may reuse: those the same component opened
/// to the same scheme, host and port.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    pub owner: Owner,
    pub https: bool,
    pub host: String,
    pub port: u16,
    /// The declared origin names the IP itself (link-local allowed).
    pub by_ip: bool,
}

/// One HTTP/1.1 connection: where requests are sent, and its lease.
pub struct Conn {
    pub sender: SendRequest<WasiBody>,
    lease: watch::Sender<Instant>,
}

impl Conn {
    /// Runs `connection` (hyper's half) on a task of its own until it ends
    /// or its lease, starting at `until`, runs out.
    pub fn spawn<F>(sender: SendRequest<WasiBody>, connection: F, until: Instant) -> Self
    where
        F: Future + Send + 'static,
    {
        let (lease, mut leased) = watch::channel(until);
        tokio::spawn(async move {
            tokio::pin!(connection);
            let mut held = true;
            loop {
                let until = *leased.borrow_and_update();
                tokio::select! {
                    _ = &mut connection => return,
                    () = tokio::time::sleep_until(until) => {
                        if *leased.borrow() <= Instant::now() {
                            return;
                        }
                    }
                    changed = leased.changed(), if held => held = changed.is_ok(),
                }
            }
        });
        Self { sender, lease }
    }

    /// Moves the lease to `until`.
    fn lease(&self, until: Instant) {
        self.lease.send_replace(until);
    }
}

/// The idle connections of the process.
#[derive(Default)]
pub struct Pool {
    idle: Mutex<HashMap<Key, Vec<Conn>>>,
}

/// The pool outbound requests share.
pub static POOL: LazyLock<Pool> = LazyLock::new(Pool::default);

impl Pool {
    /// An idle connection for `key` not known to be closed, leased until
    /// `until` (the end of the invocation sending on it).
    pub fn checkout(&self, key: &Key, until: Instant) -> Option<Conn> {
        let mut idle = self.idle.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let conns = idle.get_mut(key)?;
        let conn = std::iter::from_fn(|| conns.pop()).find(|c| !c.sender.is_closed());
        if conns.is_empty() {
            idle.remove(key);
        }
        let conn = conn?;
        conn.lease(until);
        Some(conn)
    }

    /// Keeps `conn`, whose last response was read to the end, for reuse
    /// by `key` for [`IDLE_TIMEOUT`]; drops it (closing it) when it is
    /// closed already or the pool is full.
    pub fn checkin(&self, key: Key, conn: Conn) {
        if conn.sender.is_closed() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        idle.retain(|_, conns| {
            conns.retain(|c| !c.sender.is_closed());
            !conns.is_empty()
        });
        let total: usize = idle.values().map(Vec::len).sum();
        if total >= MAX_IDLE || idle.get(&key).map_or(0, Vec::len) >= MAX_IDLE_PER_ORIGIN {
            return;
        }
        conn.lease(Instant::now() + IDLE_TIMEOUT);
        idle.entry(key).or_default().push(conn);
    }
}
