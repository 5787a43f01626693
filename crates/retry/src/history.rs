//! The one pure decision: may this key be attempted now, given its failure history?
//!
//! [`crate::KeyedGate`] and any caller that keeps attempts elsewhere (a SQLite table that survives
//! restarts) use the same functions, so their decisions cannot drift apart.

use std::hash::Hash;
use std::time::Duration;

use crate::policy::Policy;
use crate::stable_hash::stable_hash;
use crate::time::Timestamp;
use crate::transition::{Escalation, NotYet, Reason, Transition, WaitReason};

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

/// A key's failure history: everything the decision depends on, and the attempt in flight.
///
/// Drive it as a gate is driven — [`History::begin`], then [`History::fail`],
/// [`History::succeed`] or [`History::release`] with the [`HistoryAttempt`] it granted — and it
/// answers with the gate's own refusals and [`Transition`]s, stale attempts included (a crashed
/// process leaves an attempt with no outcome; [`History::settle`] counts it as failed at its stale
/// moment, as the gate does). Or replay persisted rows with the lower-level
/// [`History::begin_attempt`], [`History::record_failure`] and [`History::record_success`], and
/// ask [`decide`].
///
/// A history is its rows folded: store it (feature `serde`) beside the id of the last row it
/// folded, and a decision after a restart applies only the rows after that one instead of
/// replaying them all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
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
    /// When the attempt in flight began (`None`: none is).
    pub in_flight: Option<T>,
    /// When the attempt that went stale and was counted as failed began, while no newer attempt
    /// has begun: its late success still resets the key.
    pub expired: Option<T>,
}

/// What [`History::begin`] answers: the granted attempt and the expiry of a stale attempt this
/// call counted as failed (if any), or the gate's refusal.
pub type HistoryBegin<T> = Result<(HistoryAttempt<T>, Option<Transition<(), T>>), NotYet<T>>;

/// An attempt a [`History`] granted: its start (what identifies it, as a persisted row's start
/// does) and its number within its streak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct HistoryAttempt<T> {
    /// When it began.
    pub began: T,
    /// Its number within its streak (1 for the first attempt after a success).
    pub attempt: u32,
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
            in_flight: None,
            expired: None,
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

    /// An attempt in flight past the stale timeout counts as failed at the moment it became
    /// stale, exactly as in the gate; returns that expiry (once). The gate settles on every
    /// `begin`, `fail` and `release`; so do [`History::begin`], [`History::fail`] and
    /// [`History::release`].
    // r[impl retry.history]
    pub fn settle(&mut self, policy: &Policy, now: T) -> Option<Transition<(), T>> {
        let began = self.in_flight?;
        let stale_at = began.saturating_add(policy.stale_after);
        if now < stale_at {
            return None;
        }
        let attempt = self.failures.saturating_add(1);
        let recorded = self.record_failure(policy, stale_at, None);
        self.in_flight = None;
        self.expired = Some(began);
        Some(Transition {
            key: (),
            attempt,
            reason: Reason::Expired,
            failures: recorded.failures,
            next_attempt_at: self.next_attempt_at(policy),
            escalation: recorded.escalated.then_some(Escalation::Escalated),
        })
    }

    /// Start an attempt at `now` if the key may be attempted, with the gate's answers: refused
    /// while an attempt is in flight and not yet stale, or while backing off; granted otherwise
    /// (with the expiry of a stale attempt this call counted as failed, if any).
    // r[impl retry.history]
    pub fn begin(&mut self, policy: &Policy, now: T) -> HistoryBegin<T> {
        if let Some(began) = self.in_flight {
            let stale_at = began.saturating_add(policy.stale_after);
            if now < stale_at {
                return Err(NotYet {
                    until: stale_at,
                    reason: WaitReason::InFlight {
                        attempt: self.failures.saturating_add(1),
                    },
                    expired: None,
                });
            }
        }
        let expired = self.settle(policy, now);
        if let Decision::WaitUntil(until) = decide(policy, self, now) {
            return Err(NotYet {
                until,
                reason: WaitReason::Backoff {
                    failures: self.failures,
                    escalated: self.escalated,
                },
                expired: expired.map(Box::new),
            });
        }
        self.begin_attempt(policy, now);
        self.in_flight = Some(now);
        self.expired = None;
        let attempt = HistoryAttempt {
            began: now,
            attempt: self.failures.saturating_add(1),
        };
        Ok((attempt, expired))
    }

    /// The attempt failed at `now`, perhaps with a server hint: the gate's transition. An attempt
    /// that is no longer the one in flight changes nothing (`Superseded`); one already past its
    /// stale timeout has counted as failed at its stale moment, and that expiry is the answer.
    // r[impl retry.history]
    pub fn fail(
        &mut self,
        policy: &Policy,
        attempt: HistoryAttempt<T>,
        now: T,
        hint: Option<Duration>,
    ) -> Transition<(), T> {
        if self.in_flight != Some(attempt.began) {
            return self.superseded(policy, attempt);
        }
        if let Some(expiry) = self.settle(policy, now) {
            return expiry;
        }
        let recorded = self.record_failure(policy, now, hint);
        self.in_flight = None;
        let wait = policy.wait_after(recorded.failures, self.jitter_key, hint);
        let hint_applied =
            hint.is_some() && wait > policy.jittered_delay(recorded.failures, self.jitter_key);
        Transition {
            key: (),
            attempt: attempt.attempt,
            reason: Reason::Failed { hint_applied },
            failures: recorded.failures,
            next_attempt_at: self.next_attempt_at(policy),
            escalation: recorded.escalated.then_some(Escalation::Escalated),
        }
    }

    /// The attempt succeeded: the key is fresh again, `Recovered` if it was escalated. A stale
    /// attempt's late success counts while no newer attempt has begun, as in the gate.
    // r[impl retry.history]
    pub fn succeed(&mut self, policy: &Policy, attempt: HistoryAttempt<T>) -> Transition<(), T> {
        let live = self.in_flight == Some(attempt.began) || self.expired == Some(attempt.began);
        if !live {
            return self.superseded(policy, attempt);
        }
        let done = self.record_success();
        Transition {
            key: (),
            attempt: attempt.attempt,
            reason: Reason::Succeeded,
            failures: 0,
            next_attempt_at: None,
            escalation: done.recovered.then_some(Escalation::Recovered),
        }
    }

    /// The attempt ended without an outcome: nothing recorded, the key as `begin` left it.
    // r[impl retry.history]
    pub fn release(
        &mut self,
        policy: &Policy,
        attempt: HistoryAttempt<T>,
        now: T,
    ) -> Transition<(), T> {
        if self.in_flight != Some(attempt.began) {
            return self.superseded(policy, attempt);
        }
        if let Some(expiry) = self.settle(policy, now) {
            return expiry;
        }
        self.in_flight = None;
        Transition {
            key: (),
            attempt: attempt.attempt,
            reason: Reason::Released,
            failures: self.failures,
            next_attempt_at: self.next_attempt_at(policy),
            escalation: None,
        }
    }

    fn superseded(&self, policy: &Policy, attempt: HistoryAttempt<T>) -> Transition<(), T> {
        Transition {
            key: (),
            attempt: attempt.attempt,
            reason: Reason::Superseded,
            failures: self.failures,
            next_attempt_at: self
                .in_flight
                .is_none()
                .then(|| self.next_attempt_at(policy))
                .flatten(),
            escalation: None,
        }
    }

    /// The operator's force-retry: the key may be attempted at once, and its streak, hint and
    /// escalation are cleared. Returns whether an escalation was open, so the caller clears its
    /// fault itself; the next success does not report a `Recovered` for it (nothing recovered).
    /// An attempt in flight stays in flight (single flight holds), and its outcome counts in the
    /// new streak.
    // r[impl retry.history.force-retry]
    pub fn force_retry(&mut self) -> bool {
        let was_escalated = self.escalated;
        self.failures = 0;
        self.last_failure = None;
        self.hint = None;
        self.escalated = false;
        self.expired = None;
        was_escalated
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

    // r[verify retry.history]
    #[test]
    fn an_attempt_a_crashed_process_left_open_counts_as_failed_at_its_stale_moment() {
        let p = policy();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let mut h = History::for_key("example.org");
        let (attempt, expired) = h.begin(&p, t0).unwrap();
        assert_eq!((attempt.attempt, expired), (1, None));
        // The process crashed here: the row has a start and no outcome. After a restart, within
        // the stale timeout the attempt still counts as in flight...
        let refused = h
            .clone()
            .begin(&p, t0 + Duration::from_secs(60))
            .unwrap_err();
        assert_eq!(refused.until, t0 + p.stale_after());
        assert_eq!(refused.reason, WaitReason::InFlight { attempt: 1 });
        // At exactly the stale moment it is stale, as in the gate.
        let at_stale = h.clone().begin(&p, t0 + p.stale_after()).unwrap_err();
        assert_eq!(at_stale.expired.map(|e| e.reason), Some(Reason::Expired));
        // ...and after it, as failed at the stale moment, reported once by the call that saw it.
        let later = t0 + p.stale_after() + Duration::from_secs(1);
        let refused = h.begin(&p, later).unwrap_err();
        let expiry = *refused.expired.unwrap();
        let stale_at = t0 + p.stale_after();
        assert_eq!(expiry.reason, Reason::Expired);
        assert_eq!((expiry.attempt, expiry.failures), (1, 1));
        assert_eq!(h.last_failure, Some(stale_at));
        assert_eq!(expiry.next_attempt_at, h.next_attempt_at(&p));
        assert!(expiry.next_attempt_at.unwrap() >= stale_at + p.base());
        assert_eq!(
            h.begin(&p, later).unwrap_err().expired,
            None,
            "reported once"
        );
        // The crashed attempt's outcome, if it ever arrives, is that expiry (a late failure adds
        // nothing); a newer attempt supersedes it.
        let next = expiry.next_attempt_at.unwrap();
        let (live, _) = h.begin(&p, next).unwrap();
        assert_eq!(h.fail(&p, attempt, next, None).reason, Reason::Superseded);
        let failed = h.fail(&p, live, next, Some(Duration::from_secs(3600)));
        assert_eq!(failed.reason, Reason::Failed { hint_applied: true });
        assert_eq!((failed.attempt, failed.failures), (2, 2));
    }

    // r[verify retry.history]
    #[cfg(feature = "serde")]
    #[test]
    fn a_stored_fold_decides_as_a_full_replay() {
        let p = policy();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        // Forty rows of attempts: failures, a release, a success, a hint.
        let drive = |h: &mut History<SystemTime>, from: usize, to: usize| {
            let mut t = t0 + Duration::from_secs(from as u64 * 400);
            for row in from..to {
                let Ok((attempt, _)) = h.begin(&p, t) else {
                    t += Duration::from_secs(400);
                    continue;
                };
                let _ = match row % 7 {
                    3 => h.release(&p, attempt, t),
                    6 => h.succeed(&p, attempt),
                    5 => h.fail(&p, attempt, t, Some(Duration::from_secs(900))),
                    _ => h.fail(&p, attempt, t, None),
                };
                t += Duration::from_secs(400);
            }
        };
        let mut replayed = History::for_key("example.org");
        drive(&mut replayed, 0, 40);
        let mut folded = History::for_key("example.org");
        drive(&mut folded, 0, 25);
        let stored = serde_json::to_string(&folded).unwrap();
        let mut restored: History<SystemTime> = serde_json::from_str(&stored).unwrap();
        assert_eq!(restored, folded);
        drive(&mut restored, 25, 40);
        assert_eq!(restored, replayed);
        let later = t0 + Duration::from_secs(40 * 400);
        assert_eq!(decide(&p, &restored, later), decide(&p, &replayed, later));
    }

    // r[verify retry.history.force-retry]
    #[test]
    fn force_retry_clears_escalation_without_a_false_recovery() {
        let p = policy();
        let mut h = History::new(1);
        let mut t = Duration::ZERO;
        for _ in 0..4 {
            let (attempt, _) = h.begin(&p, t).unwrap();
            let _ = h.fail(&p, attempt, t, Some(Duration::from_secs(3600)));
            t = h.next_attempt_at(&p).unwrap();
        }
        assert!(h.escalated);
        let now = Duration::from_secs(10);
        assert!(!decide(&p, &h, now).is_eligible());
        assert!(
            h.force_retry(),
            "an escalation was open: the caller clears its fault"
        );
        assert!(!h.force_retry(), "nothing left to clear");
        assert_eq!(
            decide(&p, &h, now),
            Decision::Eligible,
            "at once, hint and all"
        );
        let (attempt, _) = h.begin(&p, now).unwrap();
        assert_eq!(attempt.attempt, 1);
        let done = h.succeed(&p, attempt);
        assert_eq!((done.reason, done.escalation), (Reason::Succeeded, None));
        // An attempt in flight during a force-retry stays single-flight, and counts afresh.
        let (attempt, _) = h.begin(&p, now).unwrap();
        let _ = h.fail(&p, attempt, now, None);
        let (attempt, _) = h.begin(&p, h.next_attempt_at(&p).unwrap()).unwrap();
        h.force_retry();
        assert!(h.clone().begin(&p, now).is_err(), "still in flight");
        let failed = h.fail(&p, attempt, now, None);
        assert_eq!((failed.failures, failed.escalation), (1, None));
    }
}
