//! Locking shared state.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `m`, also when a thread panicked while holding it: every critical
/// section in the host is a plain read or update of the data, which leaves
/// it consistent, so a poisoned lock is still good to use (and a panic in
/// one reconcile must not take every other one down with it).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
