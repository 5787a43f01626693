//! [`SharedGate`]: the keyed gate for concurrent callers, sharded behind mutexes.

use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use hashbrown::Equivalent;

use crate::budget::RetryBudget;
use crate::gate::{GateCore, KeyState};
use crate::lasting::Lasting;
use crate::policy::Policy;
use crate::transition::{AttemptToken, NotYet, Transition};

/// A [`crate::KeyedGate`] that many threads or tasks can share (`&self` methods).
///
/// Keys are spread over shards, each its own gate behind a mutex, so callers on different keys
/// rarely contend; one optional [`RetryBudget`] is shared by all shards. A call that records
/// something (`begin`, `succeed`, `fail`, `release`) also sweeps any other shard that is due, so idle keys
/// are dropped even in shards that no call reaches.
#[derive(Debug)]
pub struct SharedGate<K> {
    policy: Policy,
    shards: Box<[Mutex<GateCore<K>>]>,
    /// Per shard, when its next sweep falls due, in nanoseconds from `origin` (lock-free, so a
    /// call looks at the other shards without taking their locks).
    sweep_due: Box<[AtomicI64]>,
    origin: Instant,
    hasher: hashbrown::DefaultHashBuilder,
    budget: Option<Mutex<RetryBudget>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<K: Hash + Eq + Clone> SharedGate<K> {
    /// A gate with 16 shards.
    pub fn new(policy: Policy) -> Self {
        Self::with_shards(policy, 16)
    }

    /// A gate with `shards` shards (at least one).
    pub fn with_shards(policy: Policy, shards: usize) -> Self {
        let count = shards.max(1);
        let shards: Box<[_]> = (0..count)
            .map(|i| Mutex::new(GateCore::new(policy, 4, i, count)))
            .collect();
        Self {
            policy,
            // Never swept yet: due at once.
            sweep_due: shards.iter().map(|_| AtomicI64::new(i64::MIN)).collect(),
            shards,
            origin: Instant::now(),
            hasher: Default::default(),
            budget: None,
        }
    }

    /// Also limit retries across all keys by `budget`.
    pub fn with_budget(mut self, budget: RetryBudget) -> Self {
        self.budget = Some(Mutex::new(budget));
        self
    }

    fn index<Q: ?Sized + Hash>(&self, key: &Q) -> usize {
        let n = self.shards.len() as u64;
        // Modulo of a 64-bit hash: the shard count is tiny, so the bias is negligible.
        usize::try_from(self.hasher.hash_one(key) % n).unwrap_or(0)
    }

    fn shard<Q: ?Sized + Hash>(&self, key: &Q) -> MutexGuard<'_, GateCore<K>> {
        lock(&self.shards[self.index(key)])
    }

    /// `t` as signed nanoseconds from `origin` (callers' instants may predate the gate).
    fn offset(&self, t: Instant) -> i64 {
        match t.checked_duration_since(self.origin) {
            Some(after) => i64::try_from(after.as_nanos()).unwrap_or(i64::MAX),
            None => {
                i64::try_from(self.origin.duration_since(t).as_nanos()).map_or(i64::MIN, |n| -n)
            }
        }
    }

    /// Run `op` on shard `own`, then sweep the other shards that are due, so a shard that no call
    /// reaches still gives back its idle keys. No call holds two shard locks at once, so there is
    /// no lock order to get wrong.
    // r[impl retry.memory+2]
    fn recording<R>(&self, own: usize, now: Instant, op: impl FnOnce(&mut GateCore<K>) -> R) -> R {
        let result = {
            let mut core = lock(&self.shards[own]);
            let result = op(&mut core);
            self.note_sweep_due(own, &core);
            result
        };
        let at = self.offset(now);
        for (i, due) in self.sweep_due.iter().enumerate() {
            if i != own && due.load(Ordering::Relaxed) <= at {
                let mut core = lock(&self.shards[i]);
                core.maybe_sweep(now);
                self.note_sweep_due(i, &core);
            }
        }
        result
    }

    fn note_sweep_due(&self, i: usize, core: &GateCore<K>) {
        let due = core.next_sweep_due().map_or(i64::MIN, |t| self.offset(t));
        self.sweep_due[i].store(due, Ordering::Relaxed);
    }

    /// See [`crate::KeyedGate::check`].
    // r[impl retry.borrowed-key]
    pub fn check<Q: ?Sized + Hash + Equivalent<K>>(
        &self,
        key: &Q,
        now: Instant,
    ) -> Result<(), NotYet> {
        self.shard(key).check(key, now, self.budget.as_ref())
    }

    /// See [`crate::KeyedGate::begin`]. Of many concurrent callers on one key, one gets the token.
    // r[impl retry.borrowed-key]
    pub fn begin<Q>(&self, key: &Q, now: Instant) -> Result<AttemptToken<K>, NotYet>
    where
        Q: ?Sized + Hash + Equivalent<K> + ToOwned<Owned = K>,
    {
        self.recording(self.index(key), now, |core| {
            core.begin(key, now, self.budget.as_ref())
        })
    }

    /// See [`crate::KeyedGate::succeed`].
    pub fn succeed(&self, token: AttemptToken<K>, now: Instant) -> Transition<K> {
        let own = self.index(&token.key);
        self.recording(own, now, |core| core.succeed(token, now))
    }

    /// See [`crate::KeyedGate::fail`].
    pub fn fail(
        &self,
        token: AttemptToken<K>,
        now: Instant,
        hint: Option<Duration>,
    ) -> Transition<K> {
        let own = self.index(&token.key);
        self.recording(own, now, |core| core.fail(token, now, hint))
    }

    /// See [`crate::KeyedGate::succeed_provisionally`].
    pub fn succeed_provisionally(
        &self,
        token: AttemptToken<K>,
        now: Instant,
        must_last: Duration,
    ) -> Lasting<K> {
        let own = self.index(&token.key);
        self.recording(own, now, |core| {
            core.succeed_provisionally(token, now, must_last)
        })
    }

    /// See [`crate::KeyedGate::confirm`].
    pub fn confirm(&self, lasting: &mut Lasting<K>, now: Instant) -> Option<Transition<K>> {
        let own = self.index(&lasting.key);
        self.recording(own, now, |core| core.confirm(lasting, now))
    }

    /// See [`crate::KeyedGate::ended`].
    pub fn ended(
        &self,
        lasting: Lasting<K>,
        now: Instant,
        hint: Option<Duration>,
    ) -> Transition<K> {
        let own = self.index(&lasting.key);
        self.recording(own, now, |core| core.ended(lasting, now, hint))
    }

    /// See [`crate::KeyedGate::release`].
    pub fn release(&self, token: AttemptToken<K>, now: Instant) -> Transition<K> {
        let own = self.index(&token.key);
        self.recording(own, now, |core| core.release(token, now))
    }

    /// See [`crate::KeyedGate::state`].
    pub fn state<Q: ?Sized + Hash + Equivalent<K>>(&self, key: &Q) -> Option<KeyState> {
        self.shard(key).state(key)
    }

    /// See [`crate::KeyedGate::forget`].
    pub fn forget<Q: ?Sized + Hash + Equivalent<K>>(&self, key: &Q) -> Option<KeyState> {
        self.shard(key).forget(key)
    }

    /// How many keys the gate holds state for.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).len()).sum()
    }

    /// Whether the gate holds no state.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }
}
