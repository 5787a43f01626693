//! Pacing through holdfast-retry: one [`Attempts`] (a gate plus its attempts' tokens) per kind of
//! key (image references; the daemon), so the actuator can hand a small `Copy` [`Token`] to the
//! spawned attempt and give the real token back to the gate when the result comes in.
//!
//! There is no back-off arithmetic and no token bookkeeping in this crate: when to attempt, single
//! flight, superseding, escalation, recovery and the once-only expiry report are all
//! holdfast-retry's answers; this layer only keeps the names the actuator uses.

use std::hash::Hash;
use std::time::{Duration, Instant};

use holdfast_retry::{Attempts, KeyState, Policy};

/// Identifies one granted attempt (and, through it, the gate's token).
pub use holdfast_retry::AttemptId as Token;
/// A counted failure, as the gate recorded it.
pub use holdfast_retry::Failed;
/// What finishing an attempt did.
pub use holdfast_retry::Finished;

/// The gate's answer to "may this key be attempted now?".
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Permit {
    /// Yes: an attempt is granted. If it superseded a stale attempt, the gate counted that one as
    /// failed, reported here.
    Granted {
        /// The new attempt.
        token: Token,
        /// The superseded stale attempt's failure, if one was superseded.
        expired: Option<Failed>,
    },
    /// No: an attempt is already in flight (single flight).
    InFlight,
    /// No: backing off until `until` after `failures` consecutive failures.
    Wait {
        /// The earliest next attempt.
        until: Instant,
        /// The streak length.
        failures: u32,
        /// An attempt in flight past the stale timeout that this refusal counted as failed (the
        /// caller records it like any stalled attempt, and files its fault if it escalated).
        expired: Option<Failed>,
    },
}

impl From<holdfast_retry::Permit> for Permit {
    fn from(permit: holdfast_retry::Permit) -> Self {
        match permit {
            holdfast_retry::Permit::Granted { id, expired } => {
                Permit::Granted { token: id, expired }
            }
            holdfast_retry::Permit::InFlight => Permit::InFlight,
            holdfast_retry::Permit::Wait {
                until,
                failures,
                expired,
            } => Permit::Wait {
                until,
                failures,
                expired,
            },
        }
    }
}

/// A gate plus the tokens of the attempts it granted that have not reported yet.
#[derive(Debug)]
pub struct Pacer<K> {
    attempts: Attempts<K>,
}

impl<K: Hash + Eq + Clone> Pacer<K> {
    /// A pacer for keys of one kind.
    pub fn new(policy: Policy) -> Self {
        Pacer {
            attempts: Attempts::new(policy),
        }
    }

    /// The policy in force.
    pub fn policy(&self) -> &Policy {
        self.attempts.policy()
    }

    /// Asks the gate whether `key` may be attempted at `now`.
    pub fn begin(&mut self, key: K, now: Instant) -> Permit {
        self.attempts.begin(&key, now).into()
    }

    /// The attempt `token` succeeded at `now`.
    pub fn succeed(&mut self, token: Token, now: Instant) -> Finished {
        self.attempts.succeed(token, now)
    }

    /// The attempt `token` failed at `now`, perhaps with a typed server hint.
    pub fn fail(&mut self, token: Token, now: Instant, hint: Option<Duration>) -> Finished {
        self.attempts.fail(token, now, hint)
    }

    /// The attempt `token` ended at `now` without an outcome: it could not judge the key (the
    /// daemon behind it was unreachable), so the key's streak and wait stay as they were. An
    /// attempt already past the gate's stale timeout had been counted as failed, and stays so.
    pub fn release(&mut self, token: Token, now: Instant) -> Finished {
        self.attempts.release(token, now)
    }

    /// What the gate holds about `key`, without changing anything (`None`: fresh).
    pub fn state(&self, key: &K) -> Option<KeyState> {
        self.attempts.state(key)
    }

    /// Drops the token of an attempt the gate superseded and the caller cancelled: its result will
    /// never come back to finish it.
    pub fn discard(&mut self, token: Token) {
        self.attempts.discard(token);
    }

    /// Drops everything the gate holds about `key` (the caller no longer needs it).
    pub fn forget(&mut self, key: &K) {
        let _ = self.attempts.forget(key);
    }
}
