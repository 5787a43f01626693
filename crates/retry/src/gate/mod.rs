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

use hashbrown::Equivalent;

use crate::budget::RetryBudget;
use crate::lasting::{Lasting, LastingState};
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
/// In flight as a provisional success (see `Lasting`): `at` is the moment it will have lasted.
const PROVISIONAL: u32 = 1 << 28;
const GENERATION: u32 = PROVISIONAL - 1;
/// What names an attempt in flight: its generation, and whether it is a provisional success.
const ATTEMPT: u32 = PROVISIONAL | GENERATION;

/// Who an in-flight or expired slot belongs to: the attempt's generation number.
type Generation = u32;

impl Slot {
    /// In flight since `at` for the attempt of `generation`, keeping the escalation flag.
    ///
    /// The flags and the generation occupy disjoint bits of `meta`, so they are combined in this
    /// one place (on disjoint bits `|` and `^` agree: there is no mutant of rule logic here).
    fn flying(at: Instant, failures: u32, escalated: bool, generation: Generation) -> Slot {
        Slot {
            at,
            failures,
            meta: IN_FLIGHT | (if escalated { ESCALATED } else { 0 }) | (generation & GENERATION),
        }
    }
    /// Idle until `at`: expired from `expired` (the stale attempt's generation) when given.
    fn idle(at: Instant, failures: u32, escalated: bool, expired: Option<Generation>) -> Slot {
        let expired = expired.map_or(0, |generation| EXPIRED | (generation & GENERATION));
        Slot {
            at,
            failures,
            meta: (if escalated { ESCALATED } else { 0 }) | expired,
        }
    }
    /// The generation of the attempt this slot holds (in flight, or expired from).
    fn generation(&self) -> Generation {
        self.meta & GENERATION
    }
    fn in_flight(&self) -> bool {
        self.meta & IN_FLIGHT != 0
    }
    fn escalated(&self) -> bool {
        self.meta & ESCALATED != 0
    }
    /// The token's attempt is the one in flight. The start time is compared too, so a token from
    /// 2^28 grants ago whose generation number came round again cannot pass for the live one.
    // r[impl retry.token.stale]
    fn runs(&self, generation: u32, began: Instant) -> bool {
        self.in_flight() && self.meta & ATTEMPT == generation && self.at == began
    }
    /// The provisional success of this generation, lasting at `lasts_at`, is in flight.
    fn lasts(&self, generation: u32, lasts_at: Instant) -> bool {
        self.in_flight() && self.meta & ATTEMPT == PROVISIONAL | generation && self.at == lasts_at
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
fn settle<Q: ?Sized + Hash>(
    policy: &Policy,
    key: &Q,
    slot: Slot,
    now: Instant,
) -> (Slot, Option<Expiry>) {
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
    // Keep the stale attempt's generation: its late success may still reset the key.
    let settled = Slot::idle(next_at, failures, escalated, Some(slot.generation()));
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
fn droppable<Q: ?Sized + Hash>(policy: &Policy, key: &Q, slot: Slot, now: Instant) -> bool {
    let (slot, _) = settle(policy, key, slot, now);
    !slot.in_flight() && !slot.escalated() && now.saturating_since(slot.at) > policy.cap
}

/// Count one failure of the attempt in `slot` at `now`: the key backs off from `now`.
fn count_failure<K: Hash>(
    policy: &Policy,
    slot: &mut Slot,
    key: K,
    attempt: u32,
    now: Instant,
    hint: Option<Duration>,
) -> Transition<K> {
    let (failures, escalated) = policy.after_failure(slot.failures, slot.escalated());
    let jitter_key = stable_hash(&key);
    let wait = policy.wait_after(failures, jitter_key, hint);
    let hint_applied = hint.is_some() && wait > policy.jittered_delay(failures, jitter_key);
    let escalated_now = escalated && !slot.escalated();
    let at = now.saturating_add(wait);
    *slot = Slot::idle(at, failures, escalated, None);
    Transition {
        key,
        attempt,
        reason: Reason::Failed { hint_applied },
        failures,
        next_attempt_at: Some(at),
        escalation: escalated_now.then_some(Escalation::Escalated),
    }
}

/// Whether a success with this token is the key's: the attempt in flight, or a stale attempt's
/// late success when no newer attempt has begun.
// r[impl retry.in-flight.expiry]
fn succeeds(slot: Slot, generation: Generation, began: Instant) -> bool {
    slot.runs(generation, began) || slot.expired_from(generation)
}

/// The event a success reports: `Recovered` exactly when an escalation was open.
// r[impl retry.escalation]
fn recovery(escalated: bool) -> Option<Escalation> {
    escalated.then_some(Escalation::Recovered)
}

/// An attempt in flight is refused until it becomes stale, saying until when.
// r[impl retry.single-flight]
fn refuse_in_flight(policy: &Policy, slot: Slot, now: Instant) -> Result<(), NotYet> {
    if slot.in_flight() && now < slot.next_at(policy) {
        return Err(NotYet {
            until: slot.next_at(policy),
            reason: WaitReason::InFlight {
                attempt: slot.failures.saturating_add(1),
            },
            expired: None,
        });
    }
    Ok(())
}

/// An idle key backing off is refused until its deadline, and eligible at exactly it.
// r[impl retry.eligible]
fn refuse_backoff(slot: Slot, now: Instant) -> Result<(), NotYet> {
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
    Ok(())
}

/// A retry (not a fresh streak) also needs the global budget's token: the wait is the later of
/// both.
// r[impl retry.budget]
fn refuse_budget(
    budget: Option<&Mutex<RetryBudget>>,
    restarted: bool,
    now: Instant,
) -> Result<(), NotYet> {
    match budget.filter(|_| !restarted) {
        Some(budget) => lock(budget).try_acquire(now).map_err(|until| NotYet {
            until,
            reason: WaitReason::Budget,
            expired: None,
        }),
        None => Ok(()),
    }
}

/// The streak an attempt continues: none after a gap past the cap, else the key's.
// r[impl retry.gap-reset]
fn streak_on_grant(restarted: bool, failures: u32) -> u32 {
    if restarted { 0 } else { failures }
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
    pub(crate) fn begin<Q>(
        &mut self,
        key: &Q,
        now: Instant,
        budget: Option<&Mutex<RetryBudget>>,
    ) -> Result<AttemptToken<K>, NotYet>
    where
        Q: ?Sized + Hash + Equivalent<K> + ToOwned<Owned = K>,
    {
        let granted = self.begin_now(key, now, budget);
        self.maybe_sweep(now);
        granted
    }

    /// The decision itself. Taken before the sweep, so a key whose attempt hung long enough to
    /// hold nothing once settled still reports that attempt's expiry, as a `History` does. Each
    /// step is its rule's own item, so each rule's proof mutates that rule's code; what is left
    /// here is that the answer carries the expiry it recorded.
    // r[impl retry.attempts]
    fn begin_now<Q>(
        &mut self,
        key: &Q,
        now: Instant,
        budget: Option<&Mutex<RetryBudget>>,
    ) -> Result<AttemptToken<K>, NotYet>
    where
        Q: ?Sized + Hash + Equivalent<K> + ToOwned<Owned = K>,
    {
        let policy = self.policy;
        let generation = self.generation();
        let Some(slot) = self.slots.get_mut(key) else {
            return Ok(self.begin_fresh(key, now));
        };
        refuse_in_flight(&policy, *slot, now)?;
        let (settled, expiry) = settle(&policy, key, *slot, now);
        *slot = settled;
        let expired = expiry.map(Expiry::transition);
        let restarted = policy.restarts_streak(settled.at, now);
        if let Err(refused) =
            refuse_backoff(settled, now).and_then(|()| refuse_budget(budget, restarted, now))
        {
            return Err(NotYet {
                expired: expired.map(Box::new),
                ..refused
            });
        }
        let failures = streak_on_grant(restarted, settled.failures);
        *slot = Slot::flying(now, failures, settled.escalated(), generation);
        self.generation = self.generation.wrapping_add(1);
        Ok(AttemptToken {
            key: key.to_owned(),
            generation,
            attempt: failures.saturating_add(1),
            began: now,
            // A gap reset began a new streak (see the gap-reset rule); a release keeps it begun.
            prior: Some((settled.at, failures)),
            expired,
        })
    }

    /// The generation the next granted attempt gets: distinct from the last 2^28 grants', so a
    /// superseded token (with its start time) is told from the live one.
    // r[impl retry.token.stale]
    fn generation(&self) -> Generation {
        self.generation & GENERATION
    }

    /// A key the gate holds nothing for is granted at once: it gets its own slot, and no other
    /// key's state is read or changed.
    // r[impl retry.keys-independent]
    fn begin_fresh<Q>(&mut self, key: &Q, now: Instant) -> AttemptToken<K>
    where
        Q: ?Sized + Hash + Equivalent<K> + ToOwned<Owned = K>,
    {
        let generation = self.generation();
        self.slots
            .insert_new(key.to_owned(), Slot::flying(now, 0, false, generation));
        self.generation = self.generation.wrapping_add(1);
        AttemptToken {
            key: key.to_owned(),
            generation,
            attempt: 1,
            began: now,
            prior: None,
            expired: None,
        }
    }

    fn superseded(&self, token: AttemptToken<K>) -> Transition<K> {
        self.superseded_key(token.key, token.attempt)
    }

    fn superseded_key(&self, key: K, attempt: u32) -> Transition<K> {
        let slot = self.slots.get(&key).copied();
        Transition {
            attempt,
            reason: Reason::Superseded,
            failures: slot.map_or(0, |s| s.failures),
            // As the pure decision says it: no deadline while in flight or with an empty streak.
            next_attempt_at: slot
                .filter(|s| !s.in_flight() && s.failures > 0)
                .map(|s| s.at),
            escalation: None,
            key,
        }
    }

    /// The attempt succeeded, provisionally: the key keeps its streak and stays in flight until
    /// `must_last` has passed.
    // r[impl retry.lasting]
    pub(crate) fn succeed_provisionally(
        &mut self,
        token: AttemptToken<K>,
        now: Instant,
        must_last: Duration,
    ) -> Lasting<K> {
        let lasting = self.succeed_provisionally_now(token, now, must_last);
        self.maybe_sweep(now);
        lasting
    }

    /// The outcome itself. Judged before the sweep, so a long-hung attempt still finds its own
    /// slot and its answer is the one a `History` (which never forgets) gives.
    fn succeed_provisionally_now(
        &mut self,
        token: AttemptToken<K>,
        now: Instant,
        must_last: Duration,
    ) -> Lasting<K> {
        let lasts_at = now.saturating_add(must_last);
        let state = match self.slots.get_mut(&token.key) {
            // As for a success: a stale attempt's late success counts unless a newer one began.
            Some(slot)
                if slot.runs(token.generation, token.began)
                    || slot.expired_from(token.generation) =>
            {
                // A stale attempt was already counted as failed at its stale moment. Take that
                // count back while it runs again, so an early end counts this attempt once (its
                // late failure adds nothing further), not twice.
                let failures = if slot.in_flight() {
                    slot.failures
                } else {
                    slot.failures.saturating_sub(1)
                };
                *slot = Slot {
                    at: lasts_at,
                    failures,
                    meta: IN_FLIGHT | PROVISIONAL | (slot.meta & ESCALATED) | token.generation,
                };
                LastingState::Pending
            }
            _ => LastingState::Superseded,
        };
        Lasting {
            key: token.key,
            generation: token.generation,
            attempt: token.attempt,
            started: now,
            must_last,
            lasts_at,
            state,
        }
    }

    /// The provisional success lasted: a real success now, if it is still the key's.
    fn lasted(&mut self, lasting: &Lasting<K>) -> Transition<K> {
        match self.slots.get(&lasting.key) {
            Some(slot)
                if slot.lasts(lasting.generation, lasting.lasts_at)
                    || slot.expired_from(lasting.generation) =>
            {
                let recovered = slot.escalated();
                self.slots.remove(&lasting.key);
                Transition {
                    key: lasting.key.clone(),
                    attempt: lasting.attempt,
                    reason: Reason::Succeeded,
                    failures: 0,
                    next_attempt_at: None,
                    escalation: recovery(recovered),
                }
            }
            _ => self.superseded_key(lasting.key.clone(), lasting.attempt),
        }
    }

    // r[impl retry.lasting]
    pub(crate) fn confirm(
        &mut self,
        lasting: &mut Lasting<K>,
        now: Instant,
    ) -> Option<Transition<K>> {
        if lasting.state != LastingState::Pending || now < lasting.lasts_at {
            return None;
        }
        // Looked up before the sweep: a success confirmed late still finds its own slot.
        let transition = self.lasted(lasting);
        self.maybe_sweep(now);
        if transition.reason == Reason::Succeeded {
            lasting.state = LastingState::Confirmed;
            Some(transition)
        } else {
            lasting.state = LastingState::Superseded;
            None
        }
    }

    // r[impl retry.lasting]
    pub(crate) fn ended(
        &mut self,
        lasting: Lasting<K>,
        now: Instant,
        hint: Option<Duration>,
    ) -> Transition<K> {
        let transition = self.ended_now(lasting, now, hint);
        self.maybe_sweep(now);
        transition
    }

    fn ended_now(
        &mut self,
        lasting: Lasting<K>,
        now: Instant,
        hint: Option<Duration>,
    ) -> Transition<K> {
        match lasting.state {
            LastingState::Superseded => self.superseded_key(lasting.key, lasting.attempt),
            // Confirmed already (and reported then): the success stands, nothing changes.
            LastingState::Confirmed => Transition {
                key: lasting.key,
                attempt: lasting.attempt,
                reason: Reason::Succeeded,
                failures: 0,
                next_attempt_at: None,
                escalation: None,
            },
            LastingState::Pending if now >= lasting.lasts_at => self.lasted(&lasting),
            // Ended before it lasted: a failure of the same streak.
            LastingState::Pending => {
                let policy = self.policy;
                match self
                    .slots
                    .get_mut(&lasting.key)
                    .filter(|s| s.lasts(lasting.generation, lasting.lasts_at))
                {
                    Some(slot) => {
                        count_failure(&policy, slot, lasting.key, lasting.attempt, now, hint)
                    }
                    None => self.superseded_key(lasting.key, lasting.attempt),
                }
            }
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
        let transition = self.fail_now(token, now, hint);
        self.maybe_sweep(now);
        transition
    }

    /// The outcome itself. Judged before the sweep, so a long-hung attempt still finds its own
    /// slot and its answer is the one a `History` (which never forgets) gives.
    fn fail_now(
        &mut self,
        token: AttemptToken<K>,
        now: Instant,
        hint: Option<Duration>,
    ) -> Transition<K> {
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
        count_failure(&policy, slot, token.key, token.attempt, now, hint)
    }

    // r[impl retry.token.release]
    pub(crate) fn release(&mut self, token: AttemptToken<K>, now: Instant) -> Transition<K> {
        let transition = self.release_now(token, now);
        self.maybe_sweep(now);
        transition
    }

    /// The outcome itself. Judged before the sweep, so a long-hung attempt still finds its own
    /// slot and its answer is the one a `History` (which never forgets) gives.
    fn release_now(&mut self, token: AttemptToken<K>, now: Instant) -> Transition<K> {
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
        let restored = token
            .prior
            .map(|(at, failures)| Slot::idle(at, failures, escalated, None));
        let failures = restored.map_or(0, |s| s.failures);
        // As the pure decision says it: no failures in the streak, no deadline.
        let next_attempt_at = restored.filter(|s| s.failures > 0).map(|s| s.at);
        match restored {
            // Also dropped at once if it already holds nothing a fresh key lacks (the sweep, which
            // runs after, may not be due), so memory stays as bounded as after any other call.
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
        let transition = self.succeed_now(token);
        self.maybe_sweep(now);
        transition
    }

    /// The outcome itself. Judged before the sweep, so a long-hung attempt still finds its own
    /// slot and its answer is the one a `History` (which never forgets) gives.
    fn succeed_now(&mut self, token: AttemptToken<K>) -> Transition<K> {
        match self.slots.get(&token.key) {
            Some(slot) if succeeds(*slot, token.generation, token.began) => {
                self.reset(token.key, token.attempt)
            }
            _ => self.superseded(token),
        }
    }

    /// The key's success: it is as a key never seen, and an open escalation is closed.
    // r[impl retry.success-reset]
    fn reset(&mut self, key: K, attempt: u32) -> Transition<K> {
        let escalated = self.slots.remove(&key).is_some_and(|slot| slot.escalated());
        Transition {
            key,
            attempt,
            reason: Reason::Succeeded,
            failures: 0,
            next_attempt_at: None,
            escalation: recovery(escalated),
        }
    }

    pub(crate) fn check<Q: ?Sized + Hash + Equivalent<K>>(
        &self,
        key: &Q,
        now: Instant,
        budget: Option<&Mutex<RetryBudget>>,
    ) -> Result<(), NotYet> {
        let Some(slot) = self.slots.get(key) else {
            return Ok(());
        };
        // The common case, kept short: an idle key backing off.
        if !slot.in_flight() {
            refuse_backoff(*slot, now)?;
        }
        self.check_slow(key, *slot, now, budget)
    }

    /// In flight, or due (then the budget may still say no).
    fn check_slow<Q: ?Sized + Hash>(
        &self,
        key: &Q,
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
        refuse_backoff(slot, now)?;
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

    pub(crate) fn state<Q: ?Sized + Hash + Equivalent<K>>(&self, key: &Q) -> Option<KeyState> {
        self.slots.get(key).map(|slot| slot.state(&self.policy))
    }

    pub(crate) fn forget<Q: ?Sized + Hash + Equivalent<K>>(&mut self, key: &Q) -> Option<KeyState> {
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
    ///
    /// `key` may be any borrowed form of `K` (`&str` for `String` keys), so no key is built.
    // r[impl retry.borrowed-key]
    pub fn check<Q: ?Sized + Hash + Equivalent<K>>(
        &self,
        key: &Q,
        now: Instant,
    ) -> Result<(), NotYet> {
        self.core.check(key, now, self.budget.as_ref())
    }

    /// Start an attempt on `key` if it may be attempted at `now`. `key` may be a borrowed form of
    /// `K`; an owned key is built only when the gate starts holding state for it.
    // r[impl retry.borrowed-key]
    pub fn begin<Q>(&mut self, key: &Q, now: Instant) -> Result<AttemptToken<K>, NotYet>
    where
        Q: ?Sized + Hash + Equivalent<K> + ToOwned<Owned = K>,
    {
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

    /// The attempt succeeded, but counts only if what it started stays up for `must_last`. Until
    /// then the key keeps its streak and stays in flight (no new attempt is granted for it); call
    /// [`KeyedGate::confirm`] once it has lasted, or [`KeyedGate::ended`] when it ends.
    ///
    /// A provisional success that is neither confirmed nor ended within the stale timeout after
    /// `must_last` counts as a stale attempt (a lost `Lasting` never wedges its key).
    pub fn succeed_provisionally(
        &mut self,
        token: AttemptToken<K>,
        now: Instant,
        must_last: Duration,
    ) -> Lasting<K> {
        self.core.succeed_provisionally(token, now, must_last)
    }

    /// Once `now >= started + must_last`, the provisional success becomes a real one (streak reset,
    /// `Recovered` if the key was escalated) and this returns that transition — once; else `None`.
    pub fn confirm(&mut self, lasting: &mut Lasting<K>, now: Instant) -> Option<Transition<K>> {
        self.core.confirm(lasting, now)
    }

    /// What the success started has ended at `now`. Before it lasted: a failure of the same streak
    /// (with the optional server hint). After it lasted: the success stands (reported here if
    /// [`KeyedGate::confirm`] has not reported it). Either way the key is free for its next
    /// attempt, subject to pacing.
    pub fn ended(
        &mut self,
        lasting: Lasting<K>,
        now: Instant,
        hint: Option<Duration>,
    ) -> Transition<K> {
        self.core.ended(lasting, now, hint)
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
    pub fn state<Q: ?Sized + Hash + Equivalent<K>>(&self, key: &Q) -> Option<KeyState> {
        self.core.state(key)
    }

    /// Forget `key` (the caller no longer cares about it), returning what the gate held.
    pub fn forget<Q: ?Sized + Hash + Equivalent<K>>(&mut self, key: &Q) -> Option<KeyState> {
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
mod tests;
