//! The keyed gate's storage: a hash table split into partitions that are swept one at a time.
//!
//! Sweeping a whole million-key table in one call would stall that call for tens of
//! milliseconds. Each partition keeps its own sweep schedule, staggered across the sweep interval,
//! so under steady traffic a call sweeps at most a small share of the keys. A key is hashed once
//! per operation: the same hash picks the partition and probes its table.

use std::hash::{BuildHasher, Hash};
use std::time::{Duration, Instant};

use hashbrown::{DefaultHashBuilder, Equivalent, HashTable};

use crate::time::Timestamp;

struct Part<K, V> {
    table: HashTable<(K, V)>,
    /// When this partition is next due for a sweep (`None`: before the first call).
    next_sweep: Option<Instant>,
}

/// A map from keys to `V`, partitioned for incremental sweeping.
pub(crate) struct Slots<K, V> {
    hasher: DefaultHashBuilder,
    parts: Box<[Part<K, V>]>,
    /// This map's place among maps swept together (a sharded gate's shards): partition `i` takes
    /// phase `first_phase + i` of `phases`, so the shards' partitions fall due at different calls.
    first_phase: u32,
    phases: u32,
}

impl<K, V> std::fmt::Debug for Slots<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slots")
            .field("partitions", &self.parts.len())
            .finish_non_exhaustive()
    }
}

impl<K: Hash + Eq, V> Slots<K, V> {
    /// An empty map with `parts` partitions (rounded up to a power of two) that is map `index` of
    /// `of` maps swept together (a single map: 0 of 1): its partitions' sweeps are staggered
    /// against theirs.
    pub(crate) fn staggered(parts: usize, index: usize, of: usize) -> Self {
        let parts = parts.max(1).next_power_of_two();
        let count = u32::try_from(parts).unwrap_or(u32::MAX);
        let index = u32::try_from(index).unwrap_or(0);
        let of = u32::try_from(of.max(1)).unwrap_or(u32::MAX);
        Self {
            first_phase: index.saturating_mul(count),
            phases: of.saturating_mul(count),
            hasher: DefaultHashBuilder::default(),
            parts: (0..parts)
                .map(|_| Part {
                    table: HashTable::new(),
                    next_sweep: None,
                })
                .collect(),
        }
    }

    /// Hashes a borrowed form of a key. `Equivalent` requires it to hash as the key itself does,
    /// so the same partition and bucket are found without building a `K`.
    fn locate<Q: ?Sized + Hash>(&self, key: &Q) -> (u64, usize) {
        let hash = self.hasher.hash_one(key);
        // The table uses the low bits (bucket) and the top 7 (tag); partition by the middle ones.
        let part = (hash >> 32) as usize & (self.parts.len() - 1);
        (hash, part)
    }

    // Each key finds its own entry and only that: keys never share state.
    // r[impl retry.keys-independent]
    pub(crate) fn get<Q: ?Sized + Hash + Equivalent<K>>(&self, key: &Q) -> Option<&V> {
        let (hash, part) = self.locate(key);
        self.parts[part]
            .table
            .find(hash, |(k, _)| key.equivalent(k))
            .map(|(_, v)| v)
    }

    // r[impl retry.keys-independent]
    pub(crate) fn get_mut<Q: ?Sized + Hash + Equivalent<K>>(&mut self, key: &Q) -> Option<&mut V> {
        let (hash, part) = self.locate(key);
        self.parts[part]
            .table
            .find_mut(hash, |(k, _)| key.equivalent(k))
            .map(|(_, v)| v)
    }

    /// Insert a key known to be absent.
    // r[impl retry.keys-independent]
    pub(crate) fn insert_new(&mut self, key: K, value: V) {
        let (hash, part) = self.locate(&key);
        let hasher = &self.hasher;
        self.parts[part]
            .table
            .insert_unique(hash, (key, value), |(k, _)| hasher.hash_one(k));
    }

    /// Removes a key's entry, so that the key is as one never seen.
    // r[impl retry.success-reset]
    pub(crate) fn remove<Q: ?Sized + Hash + Equivalent<K>>(&mut self, key: &Q) -> Option<V> {
        let (hash, part) = self.locate(key);
        match self.parts[part]
            .table
            .find_entry(hash, |(k, _)| key.equivalent(k))
        {
            Ok(entry) => Some(entry.remove().0.1),
            Err(_) => None,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.parts.iter().map(|p| p.table.len()).sum()
    }

    /// When the next partition falls due for a sweep (`None`: one has never been swept, so it
    /// is due at once).
    pub(crate) fn next_sweep_due(&self) -> Option<Instant> {
        self.parts.iter().map(|p| p.next_sweep).min().flatten()
    }

    /// Sweep every partition that is due at `now`: drop the entries `droppable` says to drop, give
    /// memory back, and schedule the partition's next sweep one `interval` later. Partitions start
    /// staggered across the interval so that they fall due at different calls.
    pub(crate) fn sweep_due(
        &mut self,
        now: Instant,
        interval: Duration,
        mut droppable: impl FnMut(&K, &V) -> bool,
    ) {
        let (first, phases) = (self.first_phase, self.phases.max(1));
        let interval = interval.max(Duration::from_nanos(1));
        let hasher = &self.hasher;
        for (i, part) in self.parts.iter_mut().enumerate() {
            // Partition i's phase within the interval; kept while calls are frequent, restored
            // after a quiet spell in which every partition fell due at once.
            let phase = first.saturating_add(i as u32 + 1).min(phases);
            let staggered =
                now.saturating_add((interval * phase / phases).max(Duration::from_nanos(1)));
            let next = match part.next_sweep {
                None => staggered,
                Some(at) if now < at => continue,
                Some(at) => {
                    let next = at.saturating_add(interval);
                    if next > now { next } else { staggered }
                }
            };
            part.table.retain(|(k, v)| !droppable(k, v));
            if part.table.capacity() > 64 && part.table.len() * 4 < part.table.capacity() {
                part.table
                    .shrink_to(part.table.len() * 2, |(k, _)| hasher.hash_one(k));
            }
            part.next_sweep = Some(next);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_are_swept_one_share_at_a_time() {
        let mut slots: Slots<u64, u64> = Slots::staggered(4, 0, 1);
        let t0 = Instant::now();
        let interval = Duration::from_secs(4);
        slots.sweep_due(t0, interval, |_, _| true); // schedules partitions at 1, 2, 3, 4 s
        for k in 0..1000 {
            slots.insert_new(k, k);
        }
        assert_eq!(slots.len(), 1000);
        let mut swept = Vec::new();
        for s in 1..=4 {
            let before = slots.len();
            slots.sweep_due(t0 + Duration::from_secs(s), interval, |_, _| true);
            swept.push(before - slots.len());
        }
        assert_eq!(slots.len(), 0);
        assert!(
            swept.iter().all(|n| *n > 150 && *n < 350),
            "one partition per call: {swept:?}"
        );
        slots.insert_new(7, 70);
        assert_eq!(slots.get(&7), Some(&70));
        *slots.get_mut(&7).unwrap() = 71;
        assert_eq!(slots.remove(&7), Some(71));
        assert_eq!(slots.remove(&7), None);
    }

    #[test]
    fn maps_swept_together_fall_due_at_different_times() {
        let t0 = Instant::now();
        let interval = Duration::from_secs(8);
        let mut due = Vec::new();
        for index in 0..2 {
            let mut slots: Slots<u64, u64> = Slots::staggered(4, index, 2);
            slots.sweep_due(t0, interval, |_, _| false);
            due.extend(slots.parts.iter().map(|p| p.next_sweep));
        }
        let expected: Vec<_> = (1..=8).map(|s| Some(t0 + Duration::from_secs(s))).collect();
        assert_eq!(
            due, expected,
            "eight partitions, one per second of the interval"
        );
    }
}
