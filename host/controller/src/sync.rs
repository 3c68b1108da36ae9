//! Locking that outlives a panic elsewhere: every mutex in the controller goes through [`lock`].

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `m`, also after a panic elsewhere held it: every value guarded in the controller stays
/// consistent between statements, so a poisoned lock holds nothing half-written.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
