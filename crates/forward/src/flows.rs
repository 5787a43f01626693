//! Which flows give way, and to whom. At a forward's flow bound: the least recently active one,
//! once it has been idle for the flow idle time. A bound without this would fill up with peers
//! that are long gone (every `dig` is a new source port) and then refuse every new peer for good.
//! Across the node: every connection sweeps its idle flows whatever their forward's bound, and
//! the node's flow sockets are shared fairly between connections ([`FlowPool`]), so neither a
//! churn of source ports nor one busy connection holds them all for good.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// How often each connection sweeps its flows: ends those idle for the flow idle time, and gives
/// back what it holds beyond its share of the node's flow sockets while another connection
/// waits for one.
pub(crate) const FLOW_SWEEP: Duration = Duration::from_secs(1);

/// How long a connection refused a flow socket below its share counts as waiting: two sweeps, so
/// every other connection sweeps at least once while it waits.
pub(crate) const WAITING_FOR: Duration = Duration::from_secs(2);

/// The flows a sweep ends: every one that has carried nothing for `idle`, and never one active
/// within the last [`FLOW_SWEEP`] (a flow idle time shorter than that is for the per-forward
/// bound, where a new peer asks for the place).
// r[impl forward.flows.sweep]
pub(crate) fn idle_flows<K>(
    flows: impl IntoIterator<Item = (K, Instant)>,
    now: Instant,
    idle: Duration,
) -> Vec<K> {
    let idle = idle.max(FLOW_SWEEP);
    flows
        .into_iter()
        .filter(|(_, last)| now.saturating_duration_since(*last) >= idle)
        .map(|(key, _)| key)
        .collect()
}

/// The `count` least recently active of `flows`: those a connection over its share gives back.
// r[impl forward.limits.flow-sockets+3]
pub(crate) fn least_recent<K>(
    flows: impl IntoIterator<Item = (K, Instant)>,
    count: usize,
) -> Vec<K> {
    let mut flows: Vec<_> = flows.into_iter().collect();
    flows.sort_by_key(|(_, last)| *last);
    flows.into_iter().take(count).map(|(key, _)| key).collect()
}

/// The node's flow sockets, shared fairly between connections: a connection takes any free one
/// while nobody waits; once a connection below its share (the pool divided by the connections
/// holding or waiting for sockets) has been refused, no connection takes one beyond its share,
/// and those above it give back their least recently active flows at their next sweep.
#[derive(Debug)]
pub(crate) struct FlowPool {
    capacity: usize,
    state: Mutex<PoolState>,
    /// Bumped when a connection starts waiting, so that those above their share give back at
    /// once instead of at their next sweep (a real client waits for a wake-up, not a tick).
    wake: tokio::sync::watch::Sender<u64>,
}

#[derive(Debug, Default)]
struct PoolState {
    /// Sockets held, by connection (only connections holding one).
    held: HashMap<u64, usize>,
    total: usize,
    /// Connections refused below their share, and when.
    waiting: HashMap<u64, Instant>,
}

impl PoolState {
    fn forget_waits(&mut self, now: Instant) {
        self.waiting
            .retain(|_, since| now.saturating_duration_since(*since) < WAITING_FOR);
    }

    /// The share of `capacity` each connection holding or waiting for a socket is due (`conn`
    /// counted among them), at least one.
    fn share(&self, capacity: usize, conn: u64) -> usize {
        let mut sharing = self.held.len()
            + self
                .waiting
                .keys()
                .filter(|c| !self.held.contains_key(c))
                .count();
        if !self.held.contains_key(&conn) && !self.waiting.contains_key(&conn) {
            sharing += 1;
        }
        (capacity / sharing.max(1)).max(1)
    }

    fn others_wait(&self, conn: u64) -> bool {
        self.waiting.keys().any(|c| *c != conn)
    }

    fn mine(&self, conn: u64) -> usize {
        self.held.get(&conn).copied().unwrap_or(0)
    }
}

impl FlowPool {
    /// A pool of `capacity` sockets.
    pub(crate) fn new(capacity: usize) -> Arc<Self> {
        Arc::new(FlowPool {
            capacity,
            state: Mutex::new(PoolState::default()),
            wake: tokio::sync::watch::Sender::new(0),
        })
    }

    fn state(&self) -> MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// One more socket for connection `conn` at `now`, or `None` when the pool is full or `conn`
    /// is at its share while another connection waits. A connection refused below its share
    /// counts as waiting until it has its share, or for [`WAITING_FOR`] after it last was.
    // r[impl forward.limits.flow-sockets+3]
    pub(crate) fn acquire(self: &Arc<Self>, conn: u64, now: Instant) -> Option<PoolPermit> {
        let mut state = self.state();
        state.forget_waits(now);
        let share = state.share(self.capacity, conn);
        let mine = state.mine(conn);
        let fits = state.total < self.capacity && (mine < share || !state.others_wait(conn));
        if !fits {
            // Only a connection that starts waiting wakes the others: a flood of refused
            // datagrams from one already waiting wakes nobody again.
            if mine < share && state.waiting.insert(conn, now).is_none() {
                self.wake.send_modify(|n| *n = n.wrapping_add(1));
            }
            return None;
        }
        // A waiting connection waits until it has its share (or gives up asking), so the others
        // do not take back at once what they gave it room for.
        if mine + 1 >= share {
            state.waiting.remove(&conn);
        }
        *state.held.entry(conn).or_default() += 1;
        state.total += 1;
        Some(PoolPermit {
            pool: self.clone(),
            conn,
        })
    }

    /// How many sockets `conn` must give back at `now`: what it holds beyond its share while
    /// another connection waits; none otherwise.
    // r[impl forward.limits.flow-sockets+3]
    pub(crate) fn excess(&self, conn: u64, now: Instant) -> usize {
        let mut state = self.state();
        state.forget_waits(now);
        if !state.others_wait(conn) {
            return 0;
        }
        let share = state.share(self.capacity, conn);
        state.mine(conn).saturating_sub(share)
    }

    /// Changes each time a connection starts waiting for a socket: a connection's relay sweeps
    /// at once then, giving back what it holds beyond its share.
    // r[impl forward.limits.flow-sockets+3]
    pub(crate) fn wakeups(&self) -> tokio::sync::watch::Receiver<u64> {
        self.wake.subscribe()
    }

    /// Sockets held now, across every connection.
    pub(crate) fn in_use(&self) -> usize {
        self.state().total
    }

    fn release(&self, conn: u64) {
        let mut state = self.state();
        state.total = state.total.saturating_sub(1);
        if let Some(held) = state.held.get_mut(&conn) {
            *held = held.saturating_sub(1);
            if *held == 0 {
                state.held.remove(&conn);
            }
        }
    }
}

/// One socket of a [`FlowPool`], given back when dropped.
#[derive(Debug)]
pub(crate) struct PoolPermit {
    pool: Arc<FlowPool>,
    conn: u64,
}

impl Drop for PoolPermit {
    fn drop(&mut self) {
        self.pool.release(self.conn);
    }
}

/// The flow to evict so that a new one fits: the least recently active of `flows` (key, last
/// activity), if it has been idle for at least `idle`; `None` while every flow is in use.
// r[impl forward.flows+2]
pub(crate) fn evictable<K>(
    flows: impl IntoIterator<Item = (K, Instant)>,
    now: Instant,
    idle: Duration,
) -> Option<K> {
    flows
        .into_iter()
        .min_by_key(|(_, last)| *last)
        .filter(|(_, last)| now.saturating_duration_since(*last) >= idle)
        .map(|(key, _)| key)
}

/// When a flow last carried a datagram (either way), updated without a lock from the tasks that
/// relay it.
#[derive(Debug)]
pub(crate) struct Activity {
    epoch: Instant,
    /// Milliseconds from `epoch` to the last datagram.
    last_ms: AtomicU64,
}

impl Activity {
    /// A flow active at `now`.
    pub(crate) fn new(now: Instant) -> Self {
        Activity {
            epoch: now,
            last_ms: AtomicU64::new(0),
        }
    }

    /// The flow carried a datagram at `now`.
    pub(crate) fn touch(&self, now: Instant) {
        let ms = now.saturating_duration_since(self.epoch).as_millis();
        self.last_ms
            .fetch_max(u64::try_from(ms).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// When the flow last carried a datagram.
    pub(crate) fn last(&self) -> Instant {
        self.epoch + Duration::from_millis(self.last_ms.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t0: Instant, secs: u64) -> Instant {
        t0 + Duration::from_secs(secs)
    }

    // r[verify forward.flows.sweep]
    #[test]
    fn a_sweep_ends_every_flow_idle_for_the_idle_time_and_none_just_active() {
        let t0 = Instant::now();
        let idle = Duration::from_secs(60);
        let flows = [("a", at(t0, 0)), ("b", at(t0, 30)), ("c", at(t0, 59))];
        assert!(idle_flows(flows, at(t0, 59), idle).is_empty());
        assert_eq!(idle_flows(flows, at(t0, 60), idle), ["a"]);
        assert_eq!(idle_flows(flows, at(t0, 119), idle), ["a", "b", "c"]);
        // An idle time shorter than a sweep: a flow active within the last sweep stays.
        let quick = [("a", at(t0, 10)), ("b", at(t0, 12))];
        assert_eq!(idle_flows(quick, at(t0, 12), Duration::ZERO), ["a"]);
        assert_eq!(least_recent(flows, 2), ["a", "b"]);
        assert!(least_recent(flows, 0).is_empty());
    }

    // r[verify forward.limits.flow-sockets+3]
    #[test]
    fn a_connection_that_starts_waiting_wakes_the_others_once() {
        let t0 = Instant::now();
        let pool = FlowPool::new(2);
        let mut wakeups = pool.wakeups();
        let _hog: Vec<_> = (0..2)
            .map(|_| pool.acquire(1, t0).expect("a free socket"))
            .collect();
        // The hog itself refused at the full pool, at no share to wait for: nobody is woken.
        assert!(pool.acquire(1, t0).is_none());
        assert!(!wakeups.has_changed().expect("the pool's sender"));
        // A connection refused below its share starts waiting: the others are woken to give back.
        assert!(pool.acquire(2, at(t0, 1)).is_none());
        assert!(wakeups.has_changed().expect("the pool's sender"));
        wakeups.mark_unchanged();
        // Refused again while it waits: no second wake-up (a flood wakes nobody again) ...
        assert!(pool.acquire(2, at(t0, 1)).is_none());
        assert!(!wakeups.has_changed().expect("the pool's sender"));
        // ... until its wait has lapsed and it starts waiting anew.
        assert!(
            pool.acquire(2, t0 + WAITING_FOR + Duration::from_secs(2))
                .is_none()
        );
        assert!(wakeups.has_changed().expect("the pool's sender"));
    }

    // r[verify forward.limits.flow-sockets+3]
    #[test]
    fn one_connection_takes_the_pool_only_until_another_waits_then_gives_back_its_excess() {
        let t0 = Instant::now();
        let pool = FlowPool::new(4);
        // Alone, a connection may take every socket.
        let mut hog: Vec<_> = (0..4)
            .map(|_| pool.acquire(1, t0).expect("a free socket"))
            .collect();
        assert!(pool.acquire(1, t0).is_none(), "the pool is full");
        assert_eq!((pool.in_use(), pool.excess(1, t0)), (4, 0));
        // A second connection is refused below its share: it waits, and the hog is told to give
        // back what it holds beyond half.
        assert!(pool.acquire(2, at(t0, 1)).is_none());
        assert_eq!(pool.excess(1, at(t0, 1)), 2);
        assert_eq!(pool.excess(2, at(t0, 1)), 0);
        hog.truncate(2);
        assert_eq!(pool.in_use(), 2);
        // While the other waits, the hog does not take the freed sockets back...
        assert!(pool.acquire(1, at(t0, 1)).is_none());
        // ... and the waiting connection gets them, up to its share, waiting until it has it.
        let mut fair = vec![pool.acquire(2, at(t0, 1)).expect("its share")];
        assert_eq!(pool.excess(1, at(t0, 1)), 0);
        assert!(
            pool.acquire(1, at(t0, 1)).is_none(),
            "2 still waits, below its share"
        );
        fair.push(pool.acquire(2, at(t0, 1)).expect("its share"));
        assert!(pool.acquire(2, at(t0, 1)).is_none(), "the pool is full");
        assert_eq!(
            (pool.excess(1, at(t0, 1)), pool.excess(2, at(t0, 1))),
            (0, 0)
        );
        // The waiting connection served, nobody waits: a free socket is anyone's again.
        fair.pop();
        hog.push(pool.acquire(1, at(t0, 1)).expect("nobody waits"));
        // A connection that was refused and never asks again stops counting as waiting.
        assert!(pool.acquire(3, at(t0, 2)).is_none());
        assert_eq!(pool.excess(1, at(t0, 2)), 2, "three share four: one each");
        assert_eq!(pool.excess(1, at(t0, 2) + WAITING_FOR), 0);
        drop((hog, fair));
        assert_eq!(pool.in_use(), 0);
    }

    // r[verify forward.limits.flow-sockets+3]
    #[test]
    fn the_share_counts_the_connections_holding_or_waiting() {
        let t0 = Instant::now();
        let pool = FlowPool::new(9);
        let held: Vec<_> = (0..9).map(|_| pool.acquire(1, t0).expect("free")).collect();
        assert!(pool.acquire(2, t0).is_none());
        assert!(pool.acquire(3, t0).is_none());
        // Three connections share nine: the hog keeps three.
        assert_eq!(pool.excess(1, t0), 6);
        // A connection with a socket is not waiting, and its own socket ends nothing of it.
        drop(held);
        assert_eq!(pool.in_use(), 0);
        let one = pool.acquire(2, t0).expect("free");
        drop(one);
        assert_eq!(pool.in_use(), 0);
    }

    // r[verify forward.flows+2]
    #[test]
    fn the_longest_idle_flow_gives_way_only_once_it_is_idle() {
        let t0 = Instant::now();
        let idle = Duration::from_secs(60);
        let flows = |a: u64, b: u64| {
            [
                ("a", t0 + Duration::from_secs(a)),
                ("b", t0 + Duration::from_secs(b)),
            ]
        };
        // Both active within the idle time: nothing gives way.
        assert_eq!(
            evictable(flows(10, 20), t0 + Duration::from_secs(69), idle),
            None
        );
        // The least recently active one, exactly once it has been idle long enough.
        assert_eq!(
            evictable(flows(10, 20), t0 + Duration::from_secs(70), idle),
            Some("a")
        );
        assert_eq!(
            evictable(flows(30, 20), t0 + Duration::from_secs(80), idle),
            Some("b")
        );
        assert_eq!(evictable(Vec::<(u8, Instant)>::new(), t0, idle), None);

        let activity = Activity::new(t0);
        activity.touch(t0 + Duration::from_millis(1500));
        activity.touch(t0 + Duration::from_millis(700));
        assert_eq!(activity.last(), t0 + Duration::from_millis(1500));
    }
}
