//! Wall-clock times as monotonic instants, for the work queue's timers.

use conclave_core::k8s::now;
use conclave_core::time::Timestamp;
use std::time::Duration;
use tokio::time::Instant;

/// The monotonic instant at wall-clock time `at` (now if it has passed).
pub fn instant_at(at: Timestamp) -> Instant {
    let wait = at.as_micros().saturating_sub(now().as_micros()).max(0);
    Instant::now() + Duration::from_micros(wait.unsigned_abs())
}
