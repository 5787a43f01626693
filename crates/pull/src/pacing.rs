//! Pacing through holdfast-retry: one [`KeyedGate`] per kind of key (image references; the
//! daemon), with the gate's attempt tokens kept here so the actuator can hand a small `Copy` id to
//! the spawned attempt and give the real token back to the gate when the result comes in.
//!
//! There is no back-off arithmetic in this crate: when to attempt, single flight, superseding,
//! escalation and recovery are all the gate's answers.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

use holdfast_retry::{
    AttemptToken, Escalation, KeyState, KeyedGate, NotYet, Policy, Reason, Transition, WaitReason,
};

/// Identifies one granted attempt (and, through it, the gate's [`AttemptToken`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Token(u64);

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

/// A counted failure, as the gate recorded it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failed {
    /// The streak length after it.
    pub failures: u32,
    /// The earliest next attempt.
    pub until: Instant,
    /// This failure escalated the key (once per streak).
    pub escalated: bool,
}

/// The failure the gate recorded for a stale attempt.
fn expiry(t: &Transition<()>, now: Instant) -> Failed {
    Failed {
        failures: t.failures,
        until: t.next_attempt_at.unwrap_or(now),
        escalated: t.escalation == Some(Escalation::Escalated),
    }
}

/// What finishing an attempt did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finished {
    /// The token had been superseded: nothing changed.
    Superseded,
    /// The key is fresh again; `recovered` when it had been escalated.
    Succeeded {
        /// The success ended an escalation.
        recovered: bool,
    },
    /// The failure was counted.
    Failed(Failed),
    /// The attempt ended without an outcome: the key is as it was before the attempt began.
    Released,
}

/// A [`KeyedGate`] plus the tokens of the attempts it granted that have not reported yet.
#[derive(Debug)]
pub struct Pacer<K> {
    gate: KeyedGate<K>,
    tokens: HashMap<Token, AttemptToken<K>>,
    next: u64,
}

impl<K: Hash + Eq + Clone> Pacer<K> {
    /// A pacer for keys of one kind.
    pub fn new(policy: Policy) -> Self {
        Pacer {
            gate: KeyedGate::new(policy),
            tokens: HashMap::new(),
            next: 0,
        }
    }

    /// The policy in force.
    pub fn policy(&self) -> &Policy {
        self.gate.policy()
    }

    // r[impl actuate.image.retry]
    /// Asks the gate whether `key` may be attempted at `now`.
    pub fn begin(&mut self, key: K, now: Instant) -> Permit {
        match self.gate.begin(&key, now) {
            Ok(mut attempt) => {
                let expired = attempt.expired.take().map(|t| expiry(&t, now));
                self.next += 1;
                let token = Token(self.next);
                self.tokens.insert(token, attempt);
                Permit::Granted { token, expired }
            }
            Err(NotYet {
                until,
                reason,
                expired,
            }) => {
                let expired = expired.map(|t| expiry(&t, now));
                match reason {
                    WaitReason::InFlight { .. } => Permit::InFlight,
                    WaitReason::Backoff { failures, .. } => Permit::Wait {
                        until,
                        failures,
                        expired,
                    },
                    WaitReason::Budget => Permit::Wait {
                        until,
                        failures: expired.map_or(0, |e| e.failures),
                        expired,
                    },
                }
            }
        }
    }

    /// The attempt `token` succeeded at `now`.
    pub fn succeed(&mut self, token: Token, now: Instant) -> Finished {
        let Some(attempt) = self.tokens.remove(&token) else {
            return Finished::Superseded;
        };
        let transition = self.gate.succeed(attempt, now);
        match transition.reason {
            Reason::Superseded => Finished::Superseded,
            _ => Finished::Succeeded {
                recovered: transition.escalation == Some(Escalation::Recovered),
            },
        }
    }

    /// The attempt `token` failed at `now`, perhaps with a typed server hint.
    pub fn fail(&mut self, token: Token, now: Instant, hint: Option<Duration>) -> Finished {
        let Some(attempt) = self.tokens.remove(&token) else {
            return Finished::Superseded;
        };
        let transition = self.gate.fail(attempt, now, hint);
        match transition.reason {
            Reason::Superseded => Finished::Superseded,
            _ => Finished::Failed(Failed {
                failures: transition.failures,
                until: transition.next_attempt_at.unwrap_or(now),
                escalated: transition.escalation == Some(Escalation::Escalated),
            }),
        }
    }

    /// The attempt `token` ended at `now` without an outcome: it could not judge the key (the
    /// daemon behind it was unreachable), so the key's streak and wait stay as they were. An
    /// attempt already past the gate's stale timeout had been counted as failed, and stays so.
    pub fn release(&mut self, token: Token, now: Instant) -> Finished {
        let Some(attempt) = self.tokens.remove(&token) else {
            return Finished::Superseded;
        };
        let transition = self.gate.release(attempt, now);
        match transition.reason {
            Reason::Superseded => Finished::Superseded,
            Reason::Released => Finished::Released,
            _ => Finished::Failed(Failed {
                failures: transition.failures,
                until: transition.next_attempt_at.unwrap_or(now),
                escalated: transition.escalation == Some(Escalation::Escalated),
            }),
        }
    }

    /// What the gate holds about `key`, without changing anything (`None`: fresh).
    pub fn state(&self, key: &K) -> Option<KeyState> {
        self.gate.state(key)
    }

    /// Drops the token of an attempt the gate superseded and the caller cancelled: its result will
    /// never come back to finish it.
    pub fn discard(&mut self, token: Token) {
        self.tokens.remove(&token);
    }

    /// Drops everything the gate holds about `key` (the caller no longer needs it).
    pub fn forget(&mut self, key: &K) {
        let _ = self.gate.forget(key);
        self.tokens.retain(|_, attempt| attempt.key() != key);
    }
}
