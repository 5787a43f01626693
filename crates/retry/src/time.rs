//! Time as the caller passes it in.
//!
//! The crate never reads a clock in its core: every call takes `now`. [`Timestamp`] lets the pure
//! decision run over [`Instant`] (in-memory gates), [`SystemTime`] (persisted history that survives
//! restarts) or a plain [`Duration`] offset from an epoch the caller chooses. [`Clock`] and
//! [`ManualClock`] are conveniences for callers and tests that want an object to ask.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

/// A point in time that the pure decision can compute with.
///
/// Arithmetic saturates: adding a delay never wraps to an earlier time, and a time before
/// `earlier` is zero time since it.
pub trait Timestamp: Copy + Ord + fmt::Debug {
    /// `self + d`, or the latest representable time not before `self` if that overflows.
    fn saturating_add(self, d: Duration) -> Self;
    /// `self - earlier`, or zero when `earlier` is later than `self`.
    fn saturating_since(self, earlier: Self) -> Duration;
}

/// Add `d`, halving what is added until it fits, so the result is never earlier than `t`.
fn add_saturating_by_halving<T: Copy>(
    t: T,
    d: Duration,
    add: impl Fn(T, Duration) -> Option<T>,
) -> T {
    let mut step = d;
    loop {
        if let Some(later) = add(t, step) {
            return later;
        }
        if step.is_zero() {
            return t;
        }
        step /= 2;
    }
}

impl Timestamp for Instant {
    fn saturating_add(self, d: Duration) -> Self {
        add_saturating_by_halving(self, d, |t: Instant, d| t.checked_add(d))
    }
    fn saturating_since(self, earlier: Self) -> Duration {
        self.saturating_duration_since(earlier)
    }
}

impl Timestamp for SystemTime {
    fn saturating_add(self, d: Duration) -> Self {
        add_saturating_by_halving(self, d, |t: SystemTime, d| t.checked_add(d))
    }
    fn saturating_since(self, earlier: Self) -> Duration {
        self.duration_since(earlier).unwrap_or(Duration::ZERO)
    }
}

impl Timestamp for Duration {
    fn saturating_add(self, d: Duration) -> Self {
        Duration::saturating_add(self, d)
    }
    fn saturating_since(self, earlier: Self) -> Duration {
        Duration::saturating_sub(self, earlier)
    }
}

/// Something that can say what time it is.
pub trait Clock {
    /// The current instant.
    fn now(&self) -> Instant;
}

/// The process's monotonic clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A clock that only moves when told to; clones share the same time.
///
/// Tests of timing logic drive this instead of sleeping.
#[derive(Debug, Clone)]
pub struct ManualClock {
    origin: Instant,
    offset_nanos: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock standing at an arbitrary fixed instant.
    pub fn new() -> Self {
        Self::starting_at(Instant::now())
    }

    /// A clock standing at `origin`.
    pub fn starting_at(origin: Instant) -> Self {
        Self {
            origin,
            offset_nanos: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Move the clock forward by `d` (saturating at about 584 years past its origin).
    pub fn advance(&self, d: Duration) {
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let _ = self
            .offset_nanos
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |cur| {
                Some(cur.saturating_add(nanos))
            });
    }

    /// How far the clock has moved since its origin.
    pub fn elapsed(&self) -> Duration {
        Duration::from_nanos(self.offset_nanos.load(Ordering::SeqCst))
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        self.origin.saturating_add(self.elapsed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_advanced_and_clones_share_it() {
        let clock = ManualClock::new();
        let t0 = clock.now();
        assert_eq!(clock.now(), t0);
        let other = clock.clone();
        other.advance(Duration::from_secs(3));
        assert_eq!(clock.now() - t0, Duration::from_secs(3));
    }

    #[test]
    fn timestamps_saturate_instead_of_wrapping() {
        let t = Instant::now();
        assert_eq!(
            t.saturating_since(t + Duration::from_secs(1)),
            Duration::ZERO
        );
        assert!(t.saturating_add(Duration::MAX) >= t);
        assert_eq!(
            Duration::MAX.saturating_add(Duration::from_secs(1)),
            Duration::MAX
        );
        let s = SystemTime::UNIX_EPOCH;
        assert_eq!(
            s.saturating_since(s + Duration::from_secs(1)),
            Duration::ZERO
        );
    }
}
