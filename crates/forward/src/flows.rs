//! Which flow gives way when a forward is at its flow bound: the least recently active one, once
//! it has been idle for the flow idle time. A bound without this would fill up with peers that
//! are long gone (every `dig` is a new source port) and then refuse every new peer for good.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

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
