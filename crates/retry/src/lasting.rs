//! Success that must last: an attempt whose success counts only once what it started stays up.
//!
//! A connection that is accepted and then dropped, a container that starts and exits, a module
//! that starts and crashes: each "succeeded" for a moment. Resetting the streak at that moment
//! would re-arm the gate with every partial success, so the crash loop would be relaunched at full
//! speed. A [`Lasting`] holds such a success until it has lasted (then it is a real success) or
//! until what it started ends (before it lasted: a failure of the same streak).

use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LastingState {
    /// Not yet lasted, or lasted and not yet confirmed.
    Pending,
    /// Confirmed: the success stands, and was reported.
    Confirmed,
    /// The gate had superseded the attempt: nothing this does changes the key.
    Superseded,
}

/// A provisional success, from a gate's `succeed_provisionally`: hand it back to the same gate's
/// `confirm` (each tick, until it reports the success) and `ended` (when what it started ends).
#[must_use = "finish a provisional success with confirm() and ended(), or it goes stale"]
#[derive(Debug, PartialEq, Eq)]
pub struct Lasting<K> {
    pub(crate) key: K,
    pub(crate) generation: u32,
    pub(crate) attempt: u32,
    pub(crate) started: Instant,
    pub(crate) must_last: Duration,
    pub(crate) lasts_at: Instant,
    pub(crate) state: LastingState,
}

impl<K> Lasting<K> {
    /// The key.
    pub fn key(&self) -> &K {
        &self.key
    }
    /// When the success was recorded (what it started was up from then).
    pub fn started(&self) -> Instant {
        self.started
    }
    /// How long it must stay up to count.
    pub fn must_last(&self) -> Duration {
        self.must_last
    }
    /// The moment it will have lasted (`started + must_last`).
    pub fn lasts_at(&self) -> Instant {
        self.lasts_at
    }
    /// The attempt's number within its streak.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }
    /// Whether the success was confirmed (it lasted and was reported).
    pub fn is_confirmed(&self) -> bool {
        self.state == LastingState::Confirmed
    }
    /// Whether the gate had superseded the attempt, so this changes nothing.
    pub fn is_superseded(&self) -> bool {
        self.state == LastingState::Superseded
    }
}
