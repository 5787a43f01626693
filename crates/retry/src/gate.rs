//! The keyed gate: per-key pacing, single flight with attempt tokens, escalation events, and
//! memory that bounds itself.
//!
//! [`KeyedGate`] is the single-owner form (`&mut self`, no locks: a reconciler owns its gate);
//! [`crate::SharedGate`] shards it behind mutexes for concurrent callers. Both store 24 bytes of
//! state per failing key: the deadline (or, in flight, the start) as an `Instant`, the streak
//! length, and flags with the attempt's generation. The deadline is computed once per failure by
//! the pure decision's functions, so a check is one lookup and one comparison — kept that short on
//! purpose: with a million keys a check is a cache miss, and the fewer instructions around it, the
//! more independent checks the CPU overlaps.

use std::hash::Hash;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::budget::RetryBudget;
use crate::policy::Policy;
use crate::slots::Slots;
use crate::stable_hash::stable_hash;
use crate::time::Timestamp;
use crate::transition::{AttemptToken, Escalation, NotYet, Reason, Transition, WaitReason};

/// Per-key state (24 bytes). Exists only for keys in flight or with failures in their streak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Slot {
    /// Idle: when the key may next be attempted. In flight: when the attempt began.
    at: Instant,
    /// Consecutive failures in the current streak.
    failures: u32,
    /// Flags and the in-flight attempt's generation.
    meta: u32,
}

const IN_FLIGHT: u32 = 1 << 31;
const ESCALATED: u32 = 1 << 30;
/// Idle because the attempt of the stored generation went stale and was counted as failed; that
/// attempt's late success (no newer attempt has begun) still resets the key.
const EXPIRED: u32 = 1 << 29;
const GENERATION: u32 = EXPIRED - 1;

impl Slot {
    fn in_flight(&self) -> bool {
        self.meta & IN_FLIGHT != 0
    }
    fn escalated(&self) -> bool {
        self.meta & ESCALATED != 0
    }
    /// The token's attempt is the one in flight. The start time is compared too, so a token from
    /// 2^29 attempts ago whose generation number came round again cannot pass for the live one.
    fn runs(&self, generation: u32, began: Instant) -> bool {
        self.in_flight() && self.meta & GENERATION == generation && self.at == began
    }
    /// The token's attempt went stale, was counted as failed, and no newer attempt has begun.
    fn expired_from(&self, generation: u32) -> bool {
        !self.in_flight() && self.meta & EXPIRED != 0 && self.meta & GENERATION == generation
    }
    /// Idle keys: the earliest next attempt. In flight: when that attempt becomes stale.
    fn next_at(&self, policy: &Policy) -> Instant {
        if self.in_flight() {
            self.at.saturating_add(policy.stale_after)
        } else {
            self.at
        }
    }
    fn state(&self, policy: &Policy) -> KeyState {
        KeyState {
            failures: self.failures,
            escalated: self.escalated(),
            in_flight: self.in_flight(),
            next_attempt_at: self.next_at(policy),
        }
    }
}

/// A stale attempt that [`settle`] counted as failed.
struct Expiry {
    attempt: u32,
    failures: u32,
    escalated_now: bool,
    next_at: Instant,
}

impl Expiry {
    fn transition(self) -> Transition<()> {
        Transition {
            key: (),
            attempt: self.attempt,
            reason: Reason::Expired,
            failures: self.failures,
            next_attempt_at: Some(self.next_at),
            escalation: self.escalated_now.then_some(Escalation::Escalated),
        }
    }
}

/// The slot as it stands at `now`: an attempt in flight past the stale timeout is counted as a
/// failure at the moment it became stale, so a hung attempt still backs the key off.
// r[impl retry.in-flight.expiry]
fn settle<K: Hash>(policy: &Policy, key: &K, slot: Slot, now: Instant) -> (Slot, Option<Expiry>) {
    if !slot.in_flight() {
        return (slot, None);
    }
    let stale_at = slot.at.saturating_add(policy.stale_after);
    if now < stale_at {
        return (slot, None);
    }
    let (failures, escalated) = policy.after_failure(slot.failures, slot.escalated());
    let wait = policy.wait_after(failures, stable_hash(key), None);
    let next_at = stale_at.saturating_add(wait);
    let settled = Slot {
        at: next_at,
        failures,
        // Keep the stale attempt's generation: its late success may still reset the key.
        meta: (if escalated { ESCALATED } else { 0 }) | EXPIRED | (slot.meta & GENERATION),
    };
    let expiry = Expiry {
        attempt: slot.failures.saturating_add(1),
        failures,
        escalated_now: escalated && !slot.escalated(),
        next_at,
    };
    (settled, Some(expiry))
}

/// A key that holds no information: idle, not escalated, and eligible for more than the cap, so
/// its next attempt would start a new streak exactly as a fresh key's would. (An escalated key
/// holds an open fault, which only a success or `forget` closes.)
// r[impl retry.memory+2]
fn droppable<K: Hash>(policy: &Policy, key: &K, slot: Slot, now: Instant) -> bool {
    let (slot, _) = settle(policy, key, slot, now);
    !slot.in_flight() && !slot.escalated() && now.saturating_since(slot.at) > policy.cap
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A snapshot of one key, for status pages and "waiting until T after n failures" answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyState {
    /// Consecutive failures in the current streak.
    pub failures: u32,
    /// An escalation is open.
    pub escalated: bool,
    /// An attempt is in flight.
    pub in_flight: bool,
    /// Idle keys: the earliest next attempt. In flight: when that attempt becomes stale.
    pub next_attempt_at: Instant,
}

/// The gate's state without its budget, so a sharded gate can share one budget.
#[derive(Debug)]
pub(crate) struct GateCore<K> {
    policy: Policy,
    slots: Slots<K, Slot>,
    generation: u32,
}

impl<K: Hash + Eq + Clone> GateCore<K> {
    /// Shard `shard` of `shards` (a single gate: 0 of 1), its map in `parts` partitions.
    pub(crate) fn new(policy: Policy, parts: usize, shard: usize, shards: usize) -> Self {
        Self {
            policy,
            slots: Slots::staggered(parts, shard, shards),
            generation: 0,
        }
    }

    pub(crate) fn policy(&self) -> &Policy {
        &self.policy
    }

    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// When a sweep next falls due (`None`: at once).
    pub(crate) fn next_sweep_due(&self) -> Option<Instant> {
        self.slots.next_sweep_due()
    }

    /// Drop keys that hold no information, during ordinary calls: each partition of the map is
    /// swept once per quarter cap, the partitions staggered so that one call pays for a share.
    // r[impl retry.memory+2]
    pub(crate) fn maybe_sweep(&mut self, now: Instant) {
        let policy = self.policy;
        self.slots.sweep_due(now, policy.cap / 4, |key, slot| {
            droppable(&policy, key, *slot, now)
        });
    }

    // r[impl retry.single-flight]
    pub(crate) fn begin(
        &mut self,
        key: &K,
        now: Instant,
        budget: Option<&Mutex<RetryBudget>>,
    ) -> Result<AttemptToken<K>, NotYet> {
        self.maybe_sweep(now);
        let policy = self.policy;
        let generation = self.generation & GENERATION;
        let Some(slot) = self.slots.get_mut(key) else {
            // r[impl retry.keys-independent]
            self.slots.insert_new(
                key.clone(),
                Slot {
                    at: now,
                    failures: 0,
                    meta: IN_FLIGHT | generation,
                },
            );
            self.generation = self.generation.wrapping_add(1);
            return Ok(AttemptToken {
                key: key.clone(),
                generation,
                attempt: 1,
                began: now,
                prior: None,
                expired: None,
            });
        };
        if slot.in_flight() && now < slot.next_at(&policy) {
            return Err(NotYet {
                until: slot.next_at(&policy),
                reason: WaitReason::InFlight {
                    attempt: slot.failures.saturating_add(1),
                },
                expired: None,
            });
        }
        let (settled, expiry) = settle(&policy, key, *slot, now);
        *slot = settled;
        let expired = expiry.map(Expiry::transition);
        // r[impl retry.eligible]
        if now < settled.at {
            return Err(NotYet {
                until: settled.at,
                reason: WaitReason::Backoff {
                    failures: settled.failures,
                    escalated: settled.escalated(),
                },
                expired: expired.map(Box::new),
            });
        }
        let restarted = policy.restarts_streak(settled.at, now);
        // A retry (not a fresh streak) also needs the global budget: the wait is the later of both.
        // r[impl retry.budget]
        if let Some(budget) = budget.filter(|_| !restarted) {
            if let Err(until) = lock(budget).try_acquire(now) {
                return Err(NotYet {
                    until,
                    reason: WaitReason::Budget,
                    expired: expired.map(Box::new),
                });
            }
        }
        let failures = if restarted { 0 } else { settled.failures };
        *slot = Slot {
            at: now,
            failures,
            meta: IN_FLIGHT | (settled.meta & ESCALATED) | generation,
        };
        self.generation = self.generation.wrapping_add(1);
        Ok(AttemptToken {
            key: key.clone(),
            generation,
            attempt: failures.saturating_add(1),
            began: now,
            // A gap reset began a new streak (see the gap-reset rule); a release keeps it begun.
            prior: Some((settled.at, failures)),
            expired,
        })
    }

    fn superseded(&self, token: AttemptToken<K>) -> Transition<K> {
        let slot = self.slots.get(&token.key).copied();
        Transition {
            attempt: token.attempt,
            reason: Reason::Superseded,
            failures: slot.map_or(0, |s| s.failures),
            next_attempt_at: slot.filter(|s| !s.in_flight()).map(|s| s.at),
            escalation: None,
            key: token.key,
        }
    }

    // r[impl retry.token.stale]
    // r[impl retry.token.granted-only]
    pub(crate) fn fail(
        &mut self,
        token: AttemptToken<K>,
        now: Instant,
        hint: Option<Duration>,
    ) -> Transition<K> {
        self.maybe_sweep(now);
        let policy = self.policy;
        let Some(slot) = self
            .slots
            .get_mut(&token.key)
            .filter(|s| s.runs(token.generation, token.began))
        else {
            return self.superseded(token);
        };
        // Past the stale timeout the attempt already counts as failed at the stale moment; its
        // own late failure adds nothing.
        let (settled, expiry) = settle(&policy, &token.key, *slot, now);
        if let Some(expiry) = expiry {
            *slot = settled;
            return expiry.transition().with_key(token.key);
        }
        let (failures, escalated) = policy.after_failure(slot.failures, slot.escalated());
        let jitter_key = stable_hash(&token.key);
        let wait = policy.wait_after(failures, jitter_key, hint);
        let hint_applied = hint.is_some() && wait > policy.jittered_delay(failures, jitter_key);
        let escalated_now = escalated && !slot.escalated();
        let at = now.saturating_add(wait);
        *slot = Slot {
            at,
            failures,
            meta: if escalated { ESCALATED } else { 0 },
        };
        Transition {
            key: token.key,
            attempt: token.attempt,
            reason: Reason::Failed { hint_applied },
            failures,
            next_attempt_at: Some(at),
            escalation: escalated_now.then_some(Escalation::Escalated),
        }
    }

    // r[impl retry.token.release]
    pub(crate) fn release(&mut self, token: AttemptToken<K>, now: Instant) -> Transition<K> {
        self.maybe_sweep(now);
        let policy = self.policy;
        let Some(slot) = self
            .slots
            .get_mut(&token.key)
            .filter(|s| s.runs(token.generation, token.began))
        else {
            return self.superseded(token);
        };
        // Past the stale timeout the attempt already counts as failed at the stale moment, as for a
        // late failure; releasing it cannot undo that.
        let (settled, expiry) = settle(&policy, &token.key, *slot, now);
        if let Some(expiry) = expiry {
            *slot = settled;
            return expiry.transition().with_key(token.key);
        }
        let escalated = slot.escalated();
        // The key goes back to how it stood before `begin`: a fresh key leaves nothing behind, a
        // failing one gets back its deadline and streak (the deadline already carries any hint).
        let restored = token.prior.map(|(at, failures)| Slot {
            at,
            failures,
            meta: if escalated { ESCALATED } else { 0 },
        });
        let failures = restored.map_or(0, |s| s.failures);
        // As the pure decision says it: no failures in the streak, no deadline.
        let next_attempt_at = restored.filter(|s| s.failures > 0).map(|s| s.at);
        match restored {
            // Also dropped at once if it already holds nothing a fresh key lacks (the sweep that
            // ran above saw it in flight), so memory stays as bounded as after any other call.
            Some(restored) if !droppable(&policy, &token.key, restored, now) => {
                *slot = restored;
            }
            _ => {
                self.slots.remove(&token.key);
            }
        }
        Transition {
            key: token.key,
            attempt: token.attempt,
            reason: Reason::Released,
            failures,
            next_attempt_at,
            escalation: None,
        }
    }

    pub(crate) fn succeed(&mut self, token: AttemptToken<K>, now: Instant) -> Transition<K> {
        self.maybe_sweep(now);
        match self.slots.get(&token.key) {
            // A stale attempt's late success still resets the key unless a newer attempt began.
            // r[impl retry.in-flight.expiry]
            Some(slot)
                if slot.runs(token.generation, token.began)
                    || slot.expired_from(token.generation) =>
            {
                let recovered = slot.escalated();
                // r[impl retry.success-reset]
                self.slots.remove(&token.key);
                Transition {
                    key: token.key,
                    attempt: token.attempt,
                    reason: Reason::Succeeded,
                    failures: 0,
                    next_attempt_at: None,
                    // r[impl retry.escalation]
                    escalation: recovered.then_some(Escalation::Recovered),
                }
            }
            _ => self.superseded(token),
        }
    }

    pub(crate) fn check(
        &self,
        key: &K,
        now: Instant,
        budget: Option<&Mutex<RetryBudget>>,
    ) -> Result<(), NotYet> {
        let Some(slot) = self.slots.get(key) else {
            return Ok(());
        };
        // The common case, kept short: an idle key backing off.
        if !slot.in_flight() && now < slot.at {
            return Err(NotYet {
                until: slot.at,
                reason: WaitReason::Backoff {
                    failures: slot.failures,
                    escalated: slot.escalated(),
                },
                expired: None,
            });
        }
        self.check_slow(key, *slot, now, budget)
    }

    /// In flight, or due (then the budget may still say no).
    fn check_slow(
        &self,
        key: &K,
        slot: Slot,
        now: Instant,
        budget: Option<&Mutex<RetryBudget>>,
    ) -> Result<(), NotYet> {
        if slot.in_flight() && now < slot.next_at(&self.policy) {
            return Err(NotYet {
                until: slot.next_at(&self.policy),
                reason: WaitReason::InFlight {
                    attempt: slot.failures.saturating_add(1),
                },
                expired: None,
            });
        }
        let (slot, _) = settle(&self.policy, key, slot, now);
        if now < slot.at {
            return Err(NotYet {
                until: slot.at,
                reason: WaitReason::Backoff {
                    failures: slot.failures,
                    escalated: slot.escalated(),
                },
                expired: None,
            });
        }
        let retry = !self.policy.restarts_streak(slot.at, now);
        if let Some(budget) = budget.filter(|_| retry) {
            let until = lock(budget).available_at(now);
            if until > now {
                return Err(NotYet {
                    until,
                    reason: WaitReason::Budget,
                    expired: None,
                });
            }
        }
        Ok(())
    }

    pub(crate) fn state(&self, key: &K) -> Option<KeyState> {
        self.slots.get(key).map(|slot| slot.state(&self.policy))
    }

    pub(crate) fn forget(&mut self, key: &K) -> Option<KeyState> {
        self.slots.remove(key).map(|slot| slot.state(&self.policy))
    }
}

/// Per-key pacing for one owner: a reconciler's "may I attempt this key now?".
///
/// - [`KeyedGate::begin`] grants at most one attempt in flight per key and returns an
///   [`AttemptToken`]; finish it with [`KeyedGate::succeed`] or [`KeyedGate::fail`], or end it
///   without an outcome with [`KeyedGate::release`].
/// - Keys that hold no information are dropped during ordinary calls; there is no `gc()`.
/// - Every decision is [`crate::decide`] over the key's history, computed once per failure.
#[derive(Debug)]
pub struct KeyedGate<K> {
    core: GateCore<K>,
    budget: Option<Mutex<RetryBudget>>,
}

impl<K: Hash + Eq + Clone> KeyedGate<K> {
    /// An empty gate pacing every key by `policy`.
    pub fn new(policy: Policy) -> Self {
        Self {
            core: GateCore::new(policy, 16, 0, 1),
            budget: None,
        }
    }

    /// Also limit retries across all keys by `budget` (first attempts never wait for it).
    pub fn with_budget(mut self, budget: RetryBudget) -> Self {
        self.budget = Some(Mutex::new(budget));
        self
    }

    /// The policy.
    pub fn policy(&self) -> &Policy {
        self.core.policy()
    }

    /// May `key` be attempted at `now`? Does not change anything.
    pub fn check(&self, key: &K, now: Instant) -> Result<(), NotYet> {
        self.core.check(key, now, self.budget.as_ref())
    }

    /// Start an attempt on `key` if it may be attempted at `now`.
    pub fn begin(&mut self, key: &K, now: Instant) -> Result<AttemptToken<K>, NotYet> {
        self.core.begin(key, now, self.budget.as_ref())
    }

    /// The attempt succeeded: the key is fresh again (and `Recovered` if it was escalated).
    pub fn succeed(&mut self, token: AttemptToken<K>, now: Instant) -> Transition<K> {
        self.core.succeed(token, now)
    }

    /// The attempt failed, perhaps with a server hint (Retry-After) for the next wait.
    pub fn fail(
        &mut self,
        token: AttemptToken<K>,
        now: Instant,
        hint: Option<Duration>,
    ) -> Transition<K> {
        self.core.fail(token, now, hint)
    }

    /// End the attempt without an outcome (it could not judge the key: something else failed).
    ///
    /// Neither a failure nor a success: the key's streak, next attempt time and escalation are as
    /// they were before [`KeyedGate::begin`], and nothing is in flight. A superseded token changes
    /// nothing; an attempt already past its stale timeout has counted as failed, and stays so.
    pub fn release(&mut self, token: AttemptToken<K>, now: Instant) -> Transition<K> {
        self.core.release(token, now)
    }

    /// A snapshot of `key` (`None`: the gate holds nothing about it, so it is fresh).
    pub fn state(&self, key: &K) -> Option<KeyState> {
        self.core.state(key)
    }

    /// Forget `key` (the caller no longer cares about it), returning what the gate held.
    pub fn forget(&mut self, key: &K) -> Option<KeyState> {
        self.core.forget(key)
    }

    /// How many keys the gate holds state for (in flight or failing).
    pub fn len(&self) -> usize {
        self.core.len()
    }

    /// Whether the gate holds no state.
    pub fn is_empty(&self) -> bool {
        self.core.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Clock, History, Jitter, ManualClock, decide};

    const S: fn(u64) -> Duration = Duration::from_secs;

    fn policy() -> Policy {
        Policy::builder()
            .base(S(5))
            .cap(S(300))
            .escalate_after(5)
            .stale_after(S(600))
            .hint_cap(S(3600))
            .build()
            .unwrap()
    }

    /// Begin and fail `key` at `now`; panics if the gate refuses.
    fn fail_now(
        gate: &mut KeyedGate<&'static str>,
        key: &'static str,
        now: Instant,
    ) -> Transition<&'static str> {
        let token = gate.begin(&key, now).expect("eligible");
        gate.fail(token, now, None)
    }

    // r[verify retry.eligible]
    #[test]
    fn attempts_are_withheld_until_the_delay_and_allowed_at_exactly_the_boundary() {
        let clock = ManualClock::new();
        let mut gate = KeyedGate::new(policy());
        let failed = fail_now(&mut gate, "img", clock.now());
        let deadline = failed.next_attempt_at.unwrap();
        let wait = deadline - clock.now();
        assert!(wait >= S(5) && wait < S(6), "{wait:?}");
        clock.advance(wait - Duration::from_nanos(1));
        let refused = gate.begin(&"img", clock.now()).unwrap_err();
        assert_eq!(refused.until, deadline);
        assert_eq!(
            refused.reason,
            WaitReason::Backoff {
                failures: 1,
                escalated: false
            }
        );
        assert_eq!(gate.check(&"img", clock.now()), Err(refused));
        clock.advance(Duration::from_nanos(1));
        assert_eq!(gate.check(&"img", clock.now()), Ok(()));
        assert!(
            gate.begin(&"img", clock.now()).is_ok(),
            "allowed at exactly the deadline"
        );
    }

    // r[verify retry.eligible]
    // r[verify retry.schedule]
    #[test]
    fn a_99_failure_streak_stays_at_the_cap_and_stays_eligible_after_max_wait() {
        let clock = ManualClock::new();
        let p = policy();
        let mut gate = KeyedGate::new(p);
        let mut waits = Vec::new();
        for _ in 0..99 {
            let t = fail_now(&mut gate, "img", clock.now());
            let wait = t.next_attempt_at.unwrap() - clock.now();
            waits.push(wait);
            assert!(wait <= p.max_wait());
            clock.advance(wait);
        }
        assert_eq!(gate.state(&"img").unwrap().failures, 99);
        for w in &waits[7..] {
            assert!(*w >= p.cap() && *w < p.cap() * 6 / 5, "{w:?}");
        }
        // And a streak of u32::MAX (replayed through the pure decision) is no different.
        let mut h = History::<Duration>::new(42);
        h.failures = u32::MAX - 1;
        h.last_failure = Some(Duration::ZERO);
        h.record_failure(&p, Duration::ZERO, None);
        assert_eq!(h.failures, u32::MAX);
        h.record_failure(&p, Duration::ZERO, None);
        assert_eq!(h.failures, u32::MAX, "saturates");
        assert!(decide(&p, &h, p.max_wait()).is_eligible());
        assert!(!decide(&p, &h, p.cap() - Duration::from_nanos(1)).is_eligible());
    }

    // r[verify retry.keys-independent]
    #[test]
    fn keys_are_paced_independently() {
        let clock = ManualClock::new();
        let mut gate = KeyedGate::new(policy());
        for _ in 0..3 {
            let t = fail_now(&mut gate, "a", clock.now());
            clock.advance(t.next_attempt_at.unwrap() - clock.now());
        }
        assert_eq!(gate.check(&"b", clock.now()), Ok(()));
        let t = fail_now(&mut gate, "b", clock.now());
        assert_eq!(t.failures, 1);
        let wait = t.next_attempt_at.unwrap() - clock.now();
        assert!(wait < S(6), "b starts at base, not at a's delay: {wait:?}");
        assert_eq!(gate.state(&"a").unwrap().failures, 3);
        // An attempt in flight on one key does not hold back another.
        let token = gate.begin(&"a", clock.now()).unwrap();
        assert_eq!(gate.check(&"c", clock.now()), Ok(()));
        let _ = gate.succeed(token, clock.now());
        assert_eq!(gate.state(&"b").unwrap().failures, 1);
    }

    // r[verify retry.single-flight]
    #[test]
    fn one_attempt_in_flight_per_key() {
        let clock = ManualClock::new();
        let mut gate = KeyedGate::new(policy());
        let token = gate.begin(&"img", clock.now()).unwrap();
        let refused = gate.begin(&"img", clock.now()).unwrap_err();
        assert_eq!(refused.reason, WaitReason::InFlight { attempt: 1 });
        assert_eq!(refused.until, clock.now() + S(600));
        clock.advance(S(599));
        assert!(gate.begin(&"img", clock.now()).is_err());
        let done = gate.succeed(token, clock.now());
        assert_eq!(done.reason, Reason::Succeeded);
        assert!(gate.begin(&"img", clock.now()).is_ok());
    }

    // r[verify retry.token.stale]
    // r[verify retry.in-flight.expiry]
    #[test]
    fn a_late_failure_from_a_superseded_attempt_changes_nothing() {
        let clock = ManualClock::new();
        let p = policy();
        let mut gate = KeyedGate::new(p);
        let old = gate.begin(&"img", clock.now()).unwrap();
        // The attempt hangs past the stale timeout: it counts as failure 1 at the stale moment.
        clock.advance(S(600));
        let refused = gate.begin(&"img", clock.now()).unwrap_err();
        let expired = refused.expired.expect("the stale attempt is reported once");
        assert_eq!(
            (expired.reason, expired.attempt, expired.failures),
            (Reason::Expired, 1, 1)
        );
        assert_eq!(
            refused.reason,
            WaitReason::Backoff {
                failures: 1,
                escalated: false
            }
        );
        clock.advance(refused.until - clock.now());
        let live = gate.begin(&"img", clock.now()).unwrap();
        assert!(live.expired.is_none());
        assert_eq!(live.attempt(), 2);
        let before = gate.state(&"img");
        // The old attempt finally fails (or even succeeds): ignored.
        let late = gate.fail(old, clock.now(), Some(S(3000)));
        assert_eq!(late.reason, Reason::Superseded);
        assert_eq!(gate.state(&"img"), before);
        assert!(
            gate.begin(&"img", clock.now()).is_err(),
            "the live attempt is still in flight"
        );
        let t = gate.fail(live, clock.now(), None);
        assert_eq!(
            (t.reason, t.failures),
            (
                Reason::Failed {
                    hint_applied: false
                },
                2
            )
        );
    }

    // r[verify retry.token.release]
    #[test]
    fn a_released_fresh_key_stays_fresh_and_eligible() {
        let clock = ManualClock::new();
        let mut gate = KeyedGate::new(policy());
        let token = gate.begin(&"img", clock.now()).unwrap();
        clock.advance(S(3));
        let t = gate.release(token, clock.now());
        assert_eq!(
            t,
            Transition {
                key: "img",
                attempt: 1,
                reason: Reason::Released,
                failures: 0,
                next_attempt_at: None,
                escalation: None,
            }
        );
        assert_eq!(
            t.to_string(),
            "img attempt 1: released, no outcome (0 in a row)"
        );
        // Nothing left behind: the key is as fresh as before, and eligible at once.
        assert_eq!(gate.state(&"img"), None);
        assert!(gate.is_empty());
        assert_eq!(gate.check(&"img", clock.now()), Ok(()));
        let token = gate.begin(&"img", clock.now()).unwrap();
        assert_eq!(token.attempt(), 1);
        let t = gate.fail(token, clock.now(), None);
        assert_eq!(t.failures, 1, "the release counted for nothing");
    }

    // r[verify retry.token.release]
    #[test]
    fn a_release_on_a_key_with_a_streak_keeps_its_wait() {
        let clock = ManualClock::new();
        let p = policy();
        let mut gate = KeyedGate::new(p);
        // A streak of 2, the second failure with a server hint that sets the wait.
        let t = fail_now(&mut gate, "img", clock.now());
        clock.advance(t.next_attempt_at.unwrap() - clock.now());
        let token = gate.begin(&"img", clock.now()).unwrap();
        let failed = gate.fail(token, clock.now(), Some(S(120)));
        assert_eq!(failed.reason, Reason::Failed { hint_applied: true });
        let deadline = failed.next_attempt_at.unwrap();
        clock.advance(deadline - clock.now() + S(7));
        let before = gate.state(&"img").unwrap();
        assert_eq!(gate.check(&"img", clock.now()), Ok(()));
        let token = gate.begin(&"img", clock.now()).unwrap();
        assert_eq!(token.attempt(), 3);
        clock.advance(S(30));
        let t = gate.release(token, clock.now());
        assert_eq!(
            (
                t.reason,
                t.attempt,
                t.failures,
                t.next_attempt_at,
                t.escalation
            ),
            (Reason::Released, 3, 2, Some(deadline), None)
        );
        assert_eq!(
            t.to_string(),
            "img attempt 3: released, no outcome (2 in a row)"
        );
        // Exactly as before the attempt: same streak, same deadline (hint included), idle.
        assert_eq!(gate.state(&"img"), Some(before));
        assert!(!before.in_flight);
        assert_eq!(gate.check(&"img", clock.now()), Ok(()));
        // The next attempt is still attempt 3, and its failure is failure 3 on the schedule.
        let token = gate.begin(&"img", clock.now()).unwrap();
        assert_eq!(token.attempt(), 3);
        let t = gate.fail(token, clock.now(), None);
        assert_eq!(t.failures, 3);
        assert_eq!(
            t.next_attempt_at.unwrap() - clock.now(),
            p.jittered_delay(3, stable_hash(&"img"))
        );
        // A release of an attempt that began after a gap past the cap (a new streak) also leaves
        // the key as it was, and the attempt after it starts the new streak just the same.
        clock.advance(t.next_attempt_at.unwrap() - clock.now() + p.cap() + S(1));
        let before = gate.state(&"img").unwrap();
        assert_eq!(before.failures, 3);
        let token = gate.begin(&"img", clock.now()).unwrap();
        assert_eq!(token.attempt(), 1);
        let t = gate.release(token, clock.now());
        // The gap had already started a new, empty streak when the attempt began; the release
        // leaves it so, and a fresh key's state is no state at all.
        assert_eq!(
            (t.reason, t.failures, t.next_attempt_at, t.escalation),
            (Reason::Released, 0, None, None)
        );
        assert_eq!(gate.state(&"img"), None);
        assert_eq!(gate.check(&"img", clock.now()), Ok(()));
        let token = gate.begin(&"img", clock.now()).unwrap();
        assert_eq!(token.attempt(), 1);
        assert_eq!(gate.fail(token, clock.now(), None).failures, 1);
    }

    // r[verify retry.token.release]
    #[test]
    fn a_stale_or_superseded_release_changes_nothing() {
        let clock = ManualClock::new();
        let p = policy();
        let mut gate = KeyedGate::new(p);
        let old = gate.begin(&"img", clock.now()).unwrap();
        // The attempt hangs past the stale timeout; it is counted as failed and superseded.
        clock.advance(S(600));
        let refused = gate.begin(&"img", clock.now()).unwrap_err();
        clock.advance(refused.until - clock.now());
        let live = gate.begin(&"img", clock.now()).unwrap();
        assert_eq!(live.attempt(), 2);
        let before = gate.state(&"img");
        let late = gate.release(old, clock.now());
        assert_eq!(late.reason, Reason::Superseded);
        assert_eq!(gate.state(&"img"), before, "the live attempt is untouched");
        assert!(gate.state(&"img").unwrap().in_flight);
        assert_eq!(gate.fail(live, clock.now(), None).failures, 2);
        // A token whose key was forgotten meanwhile: nothing comes back.
        let token = gate.begin(&"other", clock.now()).unwrap();
        let _ = gate.forget(&"other");
        assert_eq!(gate.release(token, clock.now()).reason, Reason::Superseded);
        assert_eq!(gate.state(&"other"), None);
        // Released only after its stale timeout: it already failed at the stale moment, and its
        // release undoes none of that.
        let t0 = clock.now();
        let hung = gate.begin(&"hung", t0).unwrap();
        clock.advance(S(900));
        let t = gate.release(hung, clock.now());
        assert_eq!((t.reason, t.attempt, t.failures), (Reason::Expired, 1, 1));
        assert_eq!(
            t.next_attempt_at.unwrap() - (t0 + S(600)),
            p.jittered_delay(1, stable_hash(&"hung"))
        );
        assert_eq!(gate.state(&"hung").unwrap().failures, 1);
    }

    // r[verify retry.token.release]
    #[test]
    fn releases_never_count_toward_escalation() {
        let clock = ManualClock::new();
        let mut gate = KeyedGate::new(policy());
        for _ in 0..4 {
            let t = fail_now(&mut gate, "img", clock.now());
            assert_eq!(t.escalation, None);
            clock.advance(t.next_attempt_at.unwrap() - clock.now());
        }
        for _ in 0..20 {
            let token = gate.begin(&"img", clock.now()).unwrap();
            clock.advance(S(1));
            let t = gate.release(token, clock.now());
            assert_eq!((t.failures, t.escalation), (4, None));
        }
        let state = gate.state(&"img").unwrap();
        assert_eq!((state.failures, state.escalated), (4, false));
        // The next granted failure is the fifth, and it escalates.
        let t = fail_now(&mut gate, "img", clock.now());
        assert_eq!((t.failures, t.escalation), (5, Some(Escalation::Escalated)));
        // An escalated key's release neither recovers it nor files the escalation again.
        clock.advance(t.next_attempt_at.unwrap() - clock.now());
        let token = gate.begin(&"img", clock.now()).unwrap();
        let t = gate.release(token, clock.now());
        assert_eq!((t.failures, t.escalation), (5, None));
        assert!(gate.state(&"img").unwrap().escalated);
        let token = gate.begin(&"img", clock.now()).unwrap();
        assert_eq!(
            gate.succeed(token, clock.now()).escalation,
            Some(Escalation::Recovered)
        );
    }

    // r[verify retry.token.release]
    #[test]
    fn a_shared_gate_releases_like_a_keyed_gate() {
        let clock = ManualClock::new();
        let gate = crate::SharedGate::new(policy());
        let token = gate.begin(&"img", clock.now()).unwrap();
        let failed = gate.fail(token, clock.now(), None);
        clock.advance(failed.next_attempt_at.unwrap() - clock.now());
        let before = gate.state(&"img");
        let token = gate.begin(&"img", clock.now()).unwrap();
        assert!(gate.begin(&"img", clock.now()).is_err(), "in flight");
        let t = gate.release(token, clock.now());
        assert_eq!((t.reason, t.failures), (Reason::Released, 1));
        assert_eq!(gate.state(&"img"), before);
        assert!(gate.begin(&"img", clock.now()).is_ok());
    }

    // r[verify retry.in-flight.expiry]
    #[test]
    fn a_hung_attempt_fails_at_its_stale_moment_and_its_late_failure_adds_nothing() {
        let clock = ManualClock::new();
        let p = policy();
        let mut gate = KeyedGate::new(p);
        let t0 = clock.now();
        let token = gate.begin(&"img", t0).unwrap();
        clock.advance(S(900));
        // Nobody superseded it, but it is past the stale timeout: it failed at t0 + 600 s.
        let t = gate.fail(token, clock.now(), Some(S(3000)));
        assert_eq!((t.reason, t.attempt, t.failures), (Reason::Expired, 1, 1));
        let next = t.next_attempt_at.unwrap();
        assert_eq!(
            next - (t0 + S(600)),
            p.jittered_delay(1, stable_hash(&"img"))
        );
        assert_eq!(
            gate.check(&"img", clock.now()),
            Ok(()),
            "the hint of the late failure is ignored"
        );
        // A late success, with no newer attempt begun, still resets the key.
        let token = gate.begin(&"img", clock.now()).unwrap();
        clock.advance(S(700));
        assert_eq!(gate.succeed(token, clock.now()).reason, Reason::Succeeded);
        assert_eq!(gate.state(&"img"), None);
    }

    // r[verify retry.token.stale]
    #[test]
    fn a_late_success_of_a_superseded_attempt_changes_nothing() {
        let clock = ManualClock::new();
        let mut gate = KeyedGate::new(policy());
        let old = gate.begin(&"img", clock.now()).unwrap();
        clock.advance(S(700));
        let live = gate.begin(&"img", clock.now()).unwrap();
        assert_eq!(
            live.expired.as_ref().map(|e| e.reason),
            Some(Reason::Expired)
        );
        let late = gate.succeed(old, clock.now());
        assert_eq!(late.reason, Reason::Superseded);
        assert!(gate.state(&"img").unwrap().in_flight);
        let t = gate.fail(live, clock.now(), None);
        assert_eq!(t.failures, 2);
    }

    // r[verify retry.in-flight.expiry]
    #[test]
    fn a_stale_attempts_late_success_resets_the_key_after_a_refused_begin_recorded_its_expiry() {
        let clock = ManualClock::new();
        let p = Policy::builder()
            .base(S(5))
            .cap(S(300))
            .escalate_after(1)
            .stale_after(S(600))
            .build()
            .unwrap();
        let mut gate = KeyedGate::new(p);
        let hung = gate.begin(&"img", clock.now()).unwrap();
        clock.advance(S(601));
        // Another caller asks: the hung attempt is counted as failed (and escalates), and the key
        // is backing off, so no newer attempt begins.
        let refused = gate.begin(&"img", clock.now()).unwrap_err();
        let expired = refused.expired.expect("the expiry is reported");
        assert_eq!(
            (expired.reason, expired.escalation),
            (Reason::Expired, Some(Escalation::Escalated))
        );
        // The hung attempt finally succeeds: the key is reset and the fault cleared.
        let late = gate.succeed(hung, clock.now());
        assert_eq!(
            (late.reason, late.failures, late.escalation),
            (Reason::Succeeded, 0, Some(Escalation::Recovered))
        );
        assert_eq!(gate.state(&"img"), None);
        assert_eq!(gate.check(&"img", clock.now()), Ok(()));
    }

    // r[verify retry.in-flight.expiry]
    // r[verify retry.token.stale]
    #[test]
    fn a_stale_attempts_late_outcome_changes_nothing_once_a_newer_attempt_began() {
        let clock = ManualClock::new();
        let mut gate = KeyedGate::new(policy());
        let hung = gate.begin(&"img", clock.now()).unwrap();
        clock.advance(S(601));
        let refused = gate.begin(&"img", clock.now()).unwrap_err();
        clock.advance(refused.until - clock.now());
        let live = gate.begin(&"img", clock.now()).unwrap();
        let before = gate.state(&"img");
        assert_eq!(gate.succeed(hung, clock.now()).reason, Reason::Superseded);
        assert_eq!(gate.state(&"img"), before);
        assert_eq!(gate.fail(live, clock.now(), None).failures, 2);
    }

    // r[verify retry.token.stale]
    #[test]
    fn a_token_whose_generation_came_round_again_is_still_superseded() {
        let clock = ManualClock::new();
        let mut gate = KeyedGate::new(policy());
        let old = gate.begin(&"img", clock.now()).unwrap();
        let _ = gate.succeed(old, clock.now());
        // Fake the counter wrapping: the next grant reuses generation 0, at a later time.
        gate.core.generation = 0;
        let replayed_generation = AttemptToken {
            key: "img",
            generation: 0,
            attempt: 1,
            began: clock.now(),
            prior: None,
            expired: None,
        };
        clock.advance(S(1));
        let live = gate.begin(&"img", clock.now()).unwrap();
        assert_eq!(live.generation, replayed_generation.generation);
        let late = gate.fail(replayed_generation, clock.now(), None);
        assert_eq!(late.reason, Reason::Superseded);
        assert!(gate.state(&"img").unwrap().in_flight);
        assert_eq!(gate.succeed(live, clock.now()).reason, Reason::Succeeded);
    }

    // r[verify retry.token.granted-only]
    #[test]
    fn refused_calls_never_grow_the_streak() {
        let clock = ManualClock::new();
        let mut gate = KeyedGate::new(policy());
        let t = fail_now(&mut gate, "img", clock.now());
        for _ in 0..1000 {
            assert!(gate.begin(&"img", clock.now()).is_err());
            clock.advance(Duration::from_millis(1));
        }
        assert_eq!(gate.state(&"img").unwrap().failures, 1);
        assert_eq!(
            gate.state(&"img").unwrap().next_attempt_at,
            t.next_attempt_at.unwrap()
        );
        // A token from another gate names a generation this gate never granted.
        let mut other = KeyedGate::new(policy());
        let _ = other.begin(&"img", clock.now()).unwrap();
        let foreign = other.begin(&"x", clock.now()).unwrap();
        let mut fresh = KeyedGate::new(policy());
        let _live = fresh.begin(&"x", clock.now()).unwrap();
        assert_eq!(
            fresh.fail(foreign, clock.now(), None).reason,
            Reason::Superseded
        );
        assert_eq!(fresh.state(&"x").unwrap().failures, 0);
    }

    // r[verify retry.escalation]
    // r[verify retry.observe]
    #[test]
    fn escalated_once_per_streak_recovered_once_and_pacing_unchanged() {
        let clock = ManualClock::new();
        let p = policy();
        let mut gate = KeyedGate::new(p);
        let mut escalations = Vec::new();
        for n in 1..=9u32 {
            let token = gate.begin(&"img", clock.now()).unwrap();
            assert_eq!(token.attempt(), n);
            let t = gate.fail(token, clock.now(), None);
            assert_eq!((t.key, t.attempt, t.failures), ("img", n, n));
            let next = t.next_attempt_at.unwrap();
            assert_eq!(
                next - clock.now(),
                p.jittered_delay(n, stable_hash(&"img")),
                "pacing is the schedule"
            );
            escalations.push(t.escalation);
            clock.advance(next - clock.now());
        }
        let expected: Vec<_> = (1..=9)
            .map(|n| (n == 5).then_some(Escalation::Escalated))
            .collect();
        assert_eq!(escalations, expected);
        assert!(gate.state(&"img").unwrap().escalated);
        let token = gate.begin(&"img", clock.now()).unwrap();
        let t = gate.succeed(token, clock.now());
        assert_eq!(
            t,
            Transition {
                key: "img",
                attempt: 10,
                reason: Reason::Succeeded,
                failures: 0,
                next_attempt_at: None,
                escalation: Some(Escalation::Recovered)
            }
        );
        assert_eq!(t.to_string(), "img attempt 10: succeeded, recovered");
        let token = gate.begin(&"img", clock.now()).unwrap();
        assert_eq!(
            gate.succeed(token, clock.now()).escalation,
            None,
            "recovered once"
        );
    }

    // r[verify retry.success-reset]
    #[test]
    fn success_resets_the_key_fully() {
        let clock = ManualClock::new();
        let mut gate = KeyedGate::new(policy());
        for _ in 0..6 {
            let t = fail_now(&mut gate, "img", clock.now());
            clock.advance(t.next_attempt_at.unwrap() - clock.now());
        }
        let token = gate.begin(&"img", clock.now()).unwrap();
        let _ = gate.succeed(token, clock.now());
        assert_eq!(gate.state(&"img"), None);
        assert!(gate.is_empty());
        let t = fail_now(&mut gate, "img", clock.now());
        assert_eq!((t.attempt, t.failures, t.escalation), (1, 1, None));
        assert!(t.next_attempt_at.unwrap() - clock.now() < S(6));
    }

    // r[verify retry.gap-reset]
    #[test]
    fn a_gap_past_the_cap_starts_a_new_streak() {
        let clock = ManualClock::new();
        let p = policy();
        let mut gate = KeyedGate::new(p);
        for _ in 0..8 {
            let t = fail_now(&mut gate, "img", clock.now());
            clock.advance(t.next_attempt_at.unwrap() - clock.now());
        }
        // Prompt retry at the cap, even a whole cap late: same streak.
        clock.advance(p.cap());
        let t = fail_now(&mut gate, "img", clock.now());
        assert_eq!(t.failures, 9);
        // Quiet for longer than the cap after becoming eligible: a new streak at n = 1.
        clock.advance(t.next_attempt_at.unwrap() - clock.now() + p.cap() + S(1));
        let token = gate.begin(&"img", clock.now()).unwrap();
        assert_eq!(token.attempt(), 1);
        let t = gate.fail(token, clock.now(), None);
        assert_eq!(t.failures, 1);
        assert!(t.next_attempt_at.unwrap() - clock.now() < S(6));
        assert_eq!(t.escalation, None, "the open escalation is not filed twice");
    }

    // r[verify retry.retry-after]
    #[test]
    fn retry_after_is_merged_into_the_keys_pacing() {
        let clock = ManualClock::new();
        let mut gate = KeyedGate::new(policy());
        let token = gate.begin(&"img", clock.now()).unwrap();
        let t = gate.fail(token, clock.now(), Some(S(120)));
        let wait = t.next_attempt_at.unwrap() - clock.now();
        assert!(wait >= S(120) && wait < S(144), "{wait:?}");
        assert_eq!(t.reason, Reason::Failed { hint_applied: true });
        clock.advance(wait);
        let token = gate.begin(&"img", clock.now()).unwrap();
        let t = gate.fail(token, clock.now(), Some(S(1)));
        let wait = t.next_attempt_at.unwrap() - clock.now();
        assert!(
            wait >= S(10) && wait < S(12),
            "a short hint is ignored: {wait:?}"
        );
        assert_eq!(
            t.reason,
            Reason::Failed {
                hint_applied: false
            }
        );
        clock.advance(wait);
        let token = gate.begin(&"img", clock.now()).unwrap();
        let t = gate.fail(token, clock.now(), Some(S(86_400)));
        let wait = t.next_attempt_at.unwrap() - clock.now();
        assert!(
            wait >= S(3600) && wait < S(4320),
            "capped at the hint cap: {wait:?}"
        );
    }

    // r[verify retry.memory+2]
    #[test]
    fn idle_keys_are_dropped_during_ordinary_calls() {
        let clock = ManualClock::new();
        let p = policy();
        let mut gate = KeyedGate::new(p);
        let keys: Vec<String> = (0..10_000).map(|i| format!("image-{i}")).collect();
        for k in &keys {
            let token = gate.begin(k, clock.now()).unwrap();
            let _ = gate.fail(token, clock.now(), None);
        }
        assert_eq!(gate.len(), 10_000);
        // Eligible since at most 6 s; one cap later nothing is known that a fresh key lacks.
        clock.advance(S(6) + p.cap());
        let busy = "busy".to_string();
        let token = gate.begin(&busy, clock.now()).unwrap();
        let _ = gate.fail(token, clock.now(), None);
        clock.advance(p.cap() / 4 + S(1));
        assert!(gate.check(&keys[0], clock.now()).is_ok());
        // A quarter cap after they held nothing, the next ordinary call has dropped them all:
        // what is left is `busy` (backing off) and `other` (in flight).
        let token = gate.begin(&"other".to_string(), clock.now()).unwrap();
        assert_eq!(gate.len(), 2, "idle keys dropped");
        assert!(gate.state(&busy).is_some() && gate.state(&keys[0]).is_none());
        let _ = gate.succeed(token, clock.now());
        // A dropped key decides as it would have: eligible, and its next failure is failure 1.
        let token = gate.begin(&keys[0], clock.now()).unwrap();
        assert_eq!(gate.fail(token, clock.now(), None).failures, 1);
    }

    // r[verify retry.memory+2]
    #[test]
    fn keys_in_flight_are_kept_until_stale() {
        let clock = ManualClock::new();
        let p = policy();
        let mut gate = KeyedGate::new(p);
        let token = gate.begin(&"slow", clock.now()).unwrap();
        clock.advance(S(599));
        let _ = gate.begin(&"other", clock.now());
        assert!(gate.state(&"slow").unwrap().in_flight);
        let _ = gate.succeed(token, clock.now());
        // A lost token: the attempt goes stale, counts as a failure, and is then forgotten.
        let _lost = gate.begin(&"lost", clock.now()).unwrap();
        clock.advance(p.stale_after() + p.max_wait() + p.cap() + p.cap() / 4 + S(1));
        let _ = gate.begin(&"other2", clock.now());
        assert_eq!(gate.state(&"lost"), None);
    }

    // r[verify retry.escalation]
    #[test]
    fn forgetting_an_escalated_key_hands_back_its_state() {
        let clock = ManualClock::new();
        let p = policy();
        let mut gate = KeyedGate::new(p);
        for _ in 0..5 {
            let t = fail_now(&mut gate, "img", clock.now());
            clock.advance(t.next_attempt_at.unwrap() - clock.now());
        }
        // An escalated key is not dropped however long it sits idle: its fault is open.
        clock.advance(p.cap() * 10);
        let _ = gate.begin(&"other", clock.now());
        let state = gate.state(&"img").expect("kept while escalated");
        assert!(state.escalated && !state.in_flight);
        assert_eq!(gate.forget(&"img"), Some(state));
        assert_eq!(gate.state(&"img"), None);
        let t = fail_now(&mut gate, "img", clock.now());
        assert_eq!((t.failures, t.escalation), (1, None));
    }

    // r[verify retry.budget]
    #[test]
    fn the_global_budget_composes_with_per_key_pacing() {
        let clock = ManualClock::new();
        let p = Policy::builder()
            .base(S(1))
            .cap(S(60))
            .jitter(Jitter::None)
            .build()
            .unwrap();
        let budget = RetryBudget::new(2, S(20)).unwrap();
        let mut gate = KeyedGate::new(p).with_budget(budget);
        let keys = ["a", "b", "c", "d"];
        for k in keys {
            let t = fail_now(&mut gate, k, clock.now());
            assert_eq!(t.next_attempt_at.unwrap() - clock.now(), S(1));
        }
        clock.advance(S(1));
        // All four keys are due; the budget lets two retries through, then says when.
        assert!(gate.begin(&"a", clock.now()).is_ok());
        assert!(gate.begin(&"b", clock.now()).is_ok());
        let refused = gate.begin(&"c", clock.now()).unwrap_err();
        assert_eq!(refused.reason, WaitReason::Budget);
        assert_eq!(refused.until, clock.now() + S(10));
        assert_eq!(
            gate.check(&"d", clock.now()).unwrap_err().reason,
            WaitReason::Budget
        );
        // Per-key pacing still applies when it is the later of the two.
        assert_eq!(
            gate.check(&"a", clock.now()).unwrap_err().reason,
            WaitReason::InFlight { attempt: 2 }
        );
        // First attempts are not retries.
        assert!(gate.begin(&"fresh", clock.now()).is_ok());
        clock.advance(S(10));
        assert!(gate.begin(&"c", clock.now()).is_ok());
    }
}
