//! The crate's one mutex helper. A leaf: it imports nothing of the crate, so any module may use
//! it without depending on the server.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, taking over a lock a panicking holder poisoned: every value kept behind these
/// mutexes stays consistent between statements (no invariant spans a panic point), so the next
/// caller may go on with it rather than panic in turn.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
