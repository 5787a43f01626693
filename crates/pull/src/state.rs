//! What the actuator answers for one image reference.

use std::time::Instant;

use crate::classify::PullError;
use crate::progress::PullProgress;

/// What [`Actuator::ensure`](crate::Actuator::ensure) answers for a reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageState {
    /// The image is in the daemon's store.
    Present,
    /// An attempt is in flight.
    Pulling {
        /// Its progress so far.
        progress: PullProgress,
    },
    /// The last attempt failed; the next one is allowed at `until`.
    Waiting {
        /// When the next attempt is allowed (caller's clock).
        until: Instant,
        /// Consecutive failures of this reference.
        failures: u32,
        /// The latest failure, classified.
        last_error: PullError,
    },
    /// Like `Waiting`, with an open operator-visible fault. Attempts continue at the same pace.
    Escalated {
        /// When the next attempt is allowed (caller's clock).
        until: Instant,
        /// Consecutive failures of this reference.
        failures: u32,
        /// The latest failure, classified.
        last_error: PullError,
    },
    /// The gate holds the reference back although no failure of its own has been recorded (a
    /// node-wide retry budget would do this); the next attempt is allowed at `until`.
    Deferred {
        /// When the next attempt is allowed (caller's clock).
        until: Instant,
        /// The streak the gate holds for the reference (0 when it has none).
        failures: u32,
    },
    /// The daemon cannot be reached; no pull is started until it answers again.
    DaemonUnreachable {
        /// When the daemon is next probed (caller's clock).
        until: Instant,
        /// Consecutive failures to reach the daemon.
        failures: u32,
        /// The latest failure to reach it.
        last_error: PullError,
    },
}
