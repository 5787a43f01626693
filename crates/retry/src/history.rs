//! The one pure decision: may this key be attempted now, given its failure history?
//!
//! [`crate::KeyedGate`] and any caller that keeps attempts elsewhere (a SQLite table that survives
//! restarts) use the same functions, so their decisions cannot drift apart.

use std::hash::Hash;
use std::time::Duration;

use crate::policy::Policy;
use crate::stable_hash::stable_hash;
use crate::time::Timestamp;

/// What the pure decision says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision<T> {
    /// An attempt may start now.
    Eligible,
    /// No attempt before this time.
    WaitUntil(T),
}

impl<T> Decision<T> {
    /// Whether an attempt may start now.
    pub fn is_eligible(&self) -> bool {
        matches!(self, Decision::Eligible)
    }
}

/// A key's failure history: everything the decision depends on.
///
/// Replay persisted attempts into it in order with [`History::begin_attempt`] then
/// [`History::record_failure`] or [`History::record_success`], and ask [`decide`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct History<T> {
    /// Consecutive failures in the current streak.
    pub failures: u32,
    /// When the latest failure happened (`None` for a fresh key).
    pub last_failure: Option<T>,
    /// The server's hint (Retry-After) that came with the latest failure.
    pub hint: Option<Duration>,
    /// Whether the key is escalated (an operator-visible fault is open).
    pub escalated: bool,
    /// Selects this key's jitter draws; [`History::for_key`] derives it stably from the key.
    pub jitter_key: u64,
}

/// What recording a failure did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailureRecorded {
    /// The streak length after this failure.
    pub failures: u32,
    /// This failure made the key escalated (reported once per escalation).
    pub escalated: bool,
}

/// What recording a success did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SuccessRecorded {
    /// The streak length that the success ended.
    pub failures_before: u32,
    /// The key was escalated, and this success clears it.
    pub recovered: bool,
}

impl<T: Timestamp> History<T> {
    /// A fresh key with the given jitter key.
    pub fn new(jitter_key: u64) -> Self {
        Self {
            failures: 0,
            last_failure: None,
            hint: None,
            escalated: false,
            jitter_key,
        }
    }

    /// A fresh key, with its jitter key derived stably from `key` (the same in every process).
    pub fn for_key<Q: Hash + ?Sized>(key: &Q) -> Self {
        Self::new(stable_hash(key))
    }

    /// When the key may next be attempted (`None`: it may be attempted at any time).
    pub fn next_attempt_at(&self, policy: &Policy) -> Option<T> {
        let last = self.last_failure?;
        if self.failures == 0 {
            return None;
        }
        Some(last.saturating_add(policy.wait_after(self.failures, self.jitter_key, self.hint)))
    }

    /// An attempt starts at `began`. Returns whether it starts a new streak because the key had
    /// been eligible and quiet for more than `cap` (the escalation, if any, stays open).
    pub fn begin_attempt(&mut self, policy: &Policy, began: T) -> bool {
        let Some(eligible_since) = self.next_attempt_at(policy) else {
            return false;
        };
        let restarted = policy.restarts_streak(eligible_since, began);
        if restarted {
            self.failures = 0;
            self.last_failure = None;
            self.hint = None;
        }
        restarted
    }

    /// The attempt failed at `failed_at`, perhaps with a server hint.
    pub fn record_failure(
        &mut self,
        policy: &Policy,
        failed_at: T,
        hint: Option<Duration>,
    ) -> FailureRecorded {
        let (failures, escalated) = policy.after_failure(self.failures, self.escalated);
        self.failures = failures;
        self.last_failure = Some(failed_at);
        self.hint = hint;
        let newly = escalated && !self.escalated;
        self.escalated = escalated;
        FailureRecorded {
            failures,
            escalated: newly,
        }
    }

    /// The attempt succeeded: the key is fresh again.
    // r[impl retry.success-reset]
    pub fn record_success(&mut self) -> SuccessRecorded {
        let done = SuccessRecorded {
            failures_before: self.failures,
            recovered: self.escalated,
        };
        *self = Self::new(self.jitter_key);
        done
    }
}

impl Policy {
    /// Whether an attempt that begins at `began`, on a key eligible since `eligible_since`, starts a
    /// new streak: the key sat eligible and quiet for more than `cap`.
    // r[impl retry.gap-reset]
    pub fn restarts_streak<T: Timestamp>(&self, eligible_since: T, began: T) -> bool {
        began.saturating_since(eligible_since) > self.cap
    }

    /// The streak length and escalation state after one more failure.
    // r[impl retry.escalation]
    pub(crate) fn after_failure(&self, failures: u32, escalated: bool) -> (u32, bool) {
        let failures = failures.saturating_add(1);
        (failures, escalated || failures >= self.escalate_after)
    }
}

/// The pure decision: eligible once the wait after the latest failure has passed (exactly at the
/// boundary included). No history makes a key permanently ineligible: the wait is at most
/// [`Policy::max_wait`].
// r[impl retry.pure-decision]
// r[impl retry.eligible]
pub fn decide<T: Timestamp>(policy: &Policy, history: &History<T>, now: T) -> Decision<T> {
    match history.next_attempt_at(policy) {
        Some(at) if now < at => Decision::WaitUntil(at),
        _ => Decision::Eligible,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

    fn policy() -> Policy {
        Policy::builder()
            .base(Duration::from_secs(5))
            .cap(Duration::from_secs(300))
            .escalate_after(3)
            .build()
            .unwrap()
    }

    fn fail(h: &mut History<Duration>, p: &Policy, at: Duration) -> FailureRecorded {
        h.begin_attempt(p, at);
        h.record_failure(p, at, None)
    }

    // r[verify retry.pure-decision]
    #[test]
    fn decision_from_persisted_wall_clock_history() {
        let p = policy();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let mut h = History::for_key("example.org");
        h.begin_attempt(&p, t0);
        h.record_failure(&p, t0, None);
        let Decision::WaitUntil(at) = decide(&p, &h, t0) else {
            panic!("must wait")
        };
        let wait = at.duration_since(t0).unwrap();
        assert!(wait >= p.base() && wait < p.base() * 6 / 5);
        assert_eq!(decide(&p, &h, at), Decision::Eligible);
        // The same history keyed the same way gives the same answer in another "process".
        let mut again = History::for_key("example.org");
        again.begin_attempt(&p, t0);
        again.record_failure(&p, t0, None);
        assert_eq!(decide(&p, &again, t0), Decision::WaitUntil(at));
    }

    // r[verify retry.gap-reset]
    #[test]
    fn a_gap_past_the_cap_starts_a_new_streak() {
        let p = policy();
        let mut h = History::new(1);
        let mut t = Duration::ZERO;
        for _ in 0..10 {
            fail(&mut h, &p, t);
            t = h.next_attempt_at(&p).unwrap();
        }
        assert_eq!(h.failures, 10);
        // Retrying promptly at the cap (even with jitter above the cap) continues the streak.
        fail(&mut h, &p, t + p.cap());
        assert_eq!(h.failures, 11);
        // Quiet for more than the cap after becoming eligible: a new streak at n = 1.
        let eligible = h.next_attempt_at(&p).unwrap();
        let restarted = h.begin_attempt(&p, eligible + p.cap() + Duration::from_nanos(1));
        assert!(restarted);
        h.record_failure(&p, eligible + p.cap() + Duration::from_secs(1), None);
        assert_eq!(h.failures, 1);
        assert!(
            h.escalated,
            "a new streak does not close an open escalation"
        );
    }

    // r[verify retry.success-reset]
    #[test]
    fn success_resets_fully() {
        let p = policy();
        let mut h = History::new(1);
        let mut t = Duration::ZERO;
        for _ in 0..4 {
            fail(&mut h, &p, t);
            t = h.next_attempt_at(&p).unwrap();
        }
        let done = h.record_success();
        assert_eq!(
            done,
            SuccessRecorded {
                failures_before: 4,
                recovered: true
            }
        );
        assert_eq!(h, History::new(1));
        assert_eq!(decide(&p, &h, Duration::ZERO), Decision::Eligible);
    }

    // r[verify retry.escalation]
    #[test]
    fn escalation_is_reported_once_and_recovery_once() {
        let p = policy();
        let mut h = History::new(1);
        let mut events = Vec::new();
        let mut t = Duration::ZERO;
        for _ in 0..8 {
            h.begin_attempt(&p, t);
            events.push(h.record_failure(&p, t, None).escalated);
            t = h.next_attempt_at(&p).unwrap();
        }
        assert_eq!(
            events,
            [false, false, true, false, false, false, false, false]
        );
        // Pacing is unchanged by escalation: still the schedule.
        assert_eq!(h.failures, 8);
        assert!(h.record_success().recovered);
        h.begin_attempt(&p, t);
        assert!(!h.record_success().recovered, "recovery is reported once");
    }
}
