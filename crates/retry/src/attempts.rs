//! Attempt bookkeeping for async callers: a [`KeyedGate`] plus the tokens of the attempts it
//! granted, behind a small `Copy` [`AttemptId`].
//!
//! A reconciler that spawns each attempt as a task cannot move the gate's [`AttemptToken`] into
//! the task and back cheaply; it hands the task an id and gives the real token back to the gate
//! when the result comes in. Every async caller needs exactly this, so it lives here once: the
//! gate's answers mapped to [`Permit`] and [`Finished`], and a stale attempt's expiry reported
//! exactly once, in the answer that recorded it (an expiry that escalated nothing on a key the gate
//! then dropped as holding no information is not reported at all: the key is as fresh as new).

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

use hashbrown::Equivalent;

use crate::budget::RetryBudget;
use crate::gate::{KeyState, KeyedGate};
use crate::lasting::Lasting;
use crate::policy::Policy;
use crate::transition::{AttemptToken, Escalation, NotYet, Reason, Transition, WaitReason};

/// Identifies one granted attempt (and, through it, the gate's [`AttemptToken`]). Ids are never
/// reused by one [`Attempts`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AttemptId(u64);

impl AttemptId {
    /// The id as a number (for logs and metrics labels).
    pub fn get(self) -> u64 {
        self.0
    }
}

/// The answer to "may this key be attempted now?".
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Permit {
    /// Yes: an attempt is granted. If it superseded a stale attempt, the gate counted that one as
    /// failed, reported here (and nowhere else).
    Granted {
        /// The new attempt.
        id: AttemptId,
        /// The superseded stale attempt's failure, if one was superseded.
        expired: Option<Failed>,
    },
    /// No: an attempt is already in flight (single flight).
    InFlight,
    /// No: backing off until `until` after `failures` consecutive failures (or, with a global
    /// retry budget, waiting for it: `failures` is still the key's streak).
    Wait {
        /// The earliest next attempt.
        until: Instant,
        /// The key's streak length.
        failures: u32,
        /// An attempt in flight past the stale timeout that this refusal counted as failed (record
        /// it like any stalled attempt, and file its fault if it escalated).
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

impl Failed {
    fn from_transition<K>(t: &Transition<K>, now: Instant) -> Self {
        Failed {
            failures: t.failures,
            until: t.next_attempt_at.unwrap_or(now),
            escalated: t.escalation == Some(Escalation::Escalated),
        }
    }
}

/// What finishing an attempt did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finished {
    /// The id was unknown or its attempt had been superseded: nothing changed.
    Superseded,
    /// The key is fresh again; `recovered` when it had been escalated.
    Succeeded {
        /// The success ended an escalation.
        recovered: bool,
    },
    /// The failure was counted (also: the attempt had gone stale, and counted as failed now).
    Failed(Failed),
    /// The attempt ended without an outcome: the key is as it was before the attempt began.
    Released,
}

impl Finished {
    /// What a gate's transition means for the caller.
    fn from_transition<K>(t: &Transition<K>, now: Instant) -> Self {
        match t.reason {
            Reason::Superseded => Finished::Superseded,
            Reason::Released => Finished::Released,
            Reason::Succeeded => Finished::Succeeded {
                recovered: t.escalation == Some(Escalation::Recovered),
            },
            Reason::Failed { .. } | Reason::Expired => {
                Finished::Failed(Failed::from_transition(t, now))
            }
        }
    }
}

/// A [`KeyedGate`] plus the tokens of the attempts it granted that have not reported yet.
#[derive(Debug)]
pub struct Attempts<K> {
    gate: KeyedGate<K>,
    tokens: HashMap<AttemptId, AttemptToken<K>>,
    next: u64,
}

impl<K: Hash + Eq + Clone> Attempts<K> {
    /// Attempts on keys of one kind, paced by `policy`.
    pub fn new(policy: Policy) -> Self {
        Self::from_gate(KeyedGate::new(policy))
    }

    /// Attempts paced by `gate` (e.g. one built with a retry budget).
    pub fn from_gate(gate: KeyedGate<K>) -> Self {
        Attempts {
            gate,
            tokens: HashMap::new(),
            next: 0,
        }
    }

    /// Also limit retries across all keys by `budget`.
    pub fn with_budget(self, budget: RetryBudget) -> Self {
        Self {
            gate: self.gate.with_budget(budget),
            ..self
        }
    }

    /// The policy in force.
    pub fn policy(&self) -> &Policy {
        self.gate.policy()
    }

    /// The gate, to read (`check`, `state`, `len`).
    pub fn gate(&self) -> &KeyedGate<K> {
        &self.gate
    }

    /// Asks the gate whether `key` may be attempted at `now`; grants an attempt if so.
    // r[impl retry.attempts]
    pub fn begin<Q>(&mut self, key: &Q, now: Instant) -> Permit
    where
        Q: ?Sized + Hash + Equivalent<K> + ToOwned<Owned = K>,
    {
        match self.gate.begin(key, now) {
            Ok(mut attempt) => {
                let expired = attempt
                    .expired
                    .take()
                    .map(|t| Failed::from_transition(&t, now));
                self.next += 1;
                let id = AttemptId(self.next);
                self.tokens.insert(id, attempt);
                Permit::Granted { id, expired }
            }
            Err(NotYet {
                until,
                reason,
                expired,
            }) => {
                let expired = expired.map(|t| Failed::from_transition(&t, now));
                match reason {
                    WaitReason::InFlight { .. } => Permit::InFlight,
                    WaitReason::Backoff { failures, .. } => Permit::Wait {
                        until,
                        failures,
                        expired,
                    },
                    // The budget refused a retry of a key with a streak: report that streak (the
                    // gate settled the key before asking the budget, so its state is current).
                    WaitReason::Budget => Permit::Wait {
                        until,
                        failures: self.gate.state(key).map_or(0, |s| s.failures),
                        expired,
                    },
                }
            }
        }
    }

    /// The attempt `id` succeeded at `now`.
    pub fn succeed(&mut self, id: AttemptId, now: Instant) -> Finished {
        let Some(attempt) = self.tokens.remove(&id) else {
            return Finished::Superseded;
        };
        Finished::from_transition(&self.gate.succeed(attempt, now), now)
    }

    /// The attempt `id` failed at `now`, perhaps with a server hint.
    pub fn fail(&mut self, id: AttemptId, now: Instant, hint: Option<Duration>) -> Finished {
        let Some(attempt) = self.tokens.remove(&id) else {
            return Finished::Superseded;
        };
        Finished::from_transition(&self.gate.fail(attempt, now, hint), now)
    }

    /// The attempt `id` ended at `now` without an outcome (it could not judge the key): the key's
    /// streak and wait stay as they were. An attempt already past the stale timeout had been
    /// counted as failed, and stays so.
    pub fn release(&mut self, id: AttemptId, now: Instant) -> Finished {
        let Some(attempt) = self.tokens.remove(&id) else {
            return Finished::Superseded;
        };
        Finished::from_transition(&self.gate.release(attempt, now), now)
    }

    /// The attempt `id` succeeded provisionally (see [`KeyedGate::succeed_provisionally`]);
    /// `None` for an unknown id.
    pub fn succeed_provisionally(
        &mut self,
        id: AttemptId,
        now: Instant,
        must_last: Duration,
    ) -> Option<Lasting<K>> {
        let attempt = self.tokens.remove(&id)?;
        Some(self.gate.succeed_provisionally(attempt, now, must_last))
    }

    /// See [`KeyedGate::confirm`].
    pub fn confirm(&mut self, lasting: &mut Lasting<K>, now: Instant) -> Option<Transition<K>> {
        self.gate.confirm(lasting, now)
    }

    /// See [`KeyedGate::ended`].
    pub fn ended(
        &mut self,
        lasting: Lasting<K>,
        now: Instant,
        hint: Option<Duration>,
    ) -> Transition<K> {
        self.gate.ended(lasting, now, hint)
    }

    /// What the gate holds about `key`, without changing anything (`None`: fresh).
    pub fn state<Q: ?Sized + Hash + Equivalent<K>>(&self, key: &Q) -> Option<KeyState> {
        self.gate.state(key)
    }

    /// Drops the token of an attempt whose result will never come back (the caller cancelled it
    /// after the gate superseded it). Its key is unaffected.
    pub fn discard(&mut self, id: AttemptId) {
        self.tokens.remove(&id);
    }

    /// Drops everything held about `key` (the caller no longer needs it): its gate state and the
    /// tokens of its attempts, whose later results then change nothing.
    pub fn forget<Q: ?Sized + Hash + Equivalent<K>>(&mut self, key: &Q) -> Option<KeyState> {
        self.tokens
            .retain(|_, attempt| !key.equivalent(attempt.key()));
        self.gate.forget(key)
    }

    /// How many granted attempts have not reported yet.
    pub fn outstanding(&self) -> usize {
        self.tokens.len()
    }
}

#[cfg(test)]
mod tests;
