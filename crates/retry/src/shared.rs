//! [`SharedGate`]: the keyed gate for concurrent callers, sharded behind mutexes.

use std::hash::{BuildHasher, Hash};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::budget::RetryBudget;
use crate::gate::{GateCore, KeyState};
use crate::policy::Policy;
use crate::transition::{AttemptToken, NotYet, Transition};

/// A [`crate::KeyedGate`] that many threads or tasks can share (`&self` methods).
///
/// Keys are spread over shards, each its own gate behind a mutex, so callers on different keys
/// rarely contend; one optional [`RetryBudget`] is shared by all shards.
#[derive(Debug)]
pub struct SharedGate<K> {
    policy: Policy,
    shards: Box<[Mutex<GateCore<K>>]>,
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
        let shards = (0..shards.max(1))
            .map(|_| Mutex::new(GateCore::new(policy, 4)))
            .collect();
        Self {
            policy,
            shards,
            hasher: Default::default(),
            budget: None,
        }
    }

    /// Also limit retries across all keys by `budget`.
    pub fn with_budget(mut self, budget: RetryBudget) -> Self {
        self.budget = Some(Mutex::new(budget));
        self
    }

    fn shard(&self, key: &K) -> MutexGuard<'_, GateCore<K>> {
        let n = self.shards.len() as u64;
        // Modulo of a 64-bit hash: the shard count is tiny, so the bias is negligible.
        let i = usize::try_from(self.hasher.hash_one(key) % n).unwrap_or(0);
        lock(&self.shards[i])
    }

    /// See [`crate::KeyedGate::check`].
    pub fn check(&self, key: &K, now: Instant) -> Result<(), NotYet> {
        self.shard(key).check(key, now, self.budget.as_ref())
    }

    /// See [`crate::KeyedGate::begin`]. Of many concurrent callers on one key, one gets the token.
    pub fn begin(&self, key: &K, now: Instant) -> Result<AttemptToken<K>, NotYet> {
        self.shard(key).begin(key, now, self.budget.as_ref())
    }

    /// See [`crate::KeyedGate::succeed`].
    pub fn succeed(&self, token: AttemptToken<K>, now: Instant) -> Transition<K> {
        let mut shard = self.shard(&token.key);
        shard.succeed(token, now)
    }

    /// See [`crate::KeyedGate::fail`].
    pub fn fail(
        &self,
        token: AttemptToken<K>,
        now: Instant,
        hint: Option<Duration>,
    ) -> Transition<K> {
        let mut shard = self.shard(&token.key);
        shard.fail(token, now, hint)
    }

    /// See [`crate::KeyedGate::state`].
    pub fn state(&self, key: &K) -> Option<KeyState> {
        self.shard(key).state(key)
    }

    /// See [`crate::KeyedGate::forget`].
    pub fn forget(&self, key: &K) -> Option<KeyState> {
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
