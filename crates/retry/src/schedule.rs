//! The nominal exponential schedule and the maximum wait any history can produce.

use std::time::Duration;

use crate::jitter::Jitter;
use crate::policy::Policy;

impl Policy {
    /// The nominal (un-jittered) delay after `failures` consecutive failures:
    /// `min(base * 2^(failures-1), cap)`, zero for no failures.
    ///
    /// The computation saturates, so any streak length, up to `u32::MAX`, stays at the cap.
    // r[impl retry.schedule]
    pub fn nominal_delay(&self, failures: u32) -> Duration {
        if failures == 0 {
            return Duration::ZERO;
        }
        let doublings = failures - 1;
        // base >= 1 ns, so 2^64 ns (about 584 years) is already above any valid cap.
        if doublings >= 64 {
            return self.cap;
        }
        let nanos = self.base.as_nanos().saturating_mul(1u128 << doublings);
        if nanos >= self.cap.as_nanos() {
            self.cap
        } else {
            duration_from_nanos(nanos)
        }
    }

    /// The longest wait any history can produce under this policy: the jittered cap or the
    /// jittered hint cap, whichever is longer. Waiting this long after a failure is always enough.
    // r[impl retry.eligible]
    pub fn max_wait(&self) -> Duration {
        let backoff = match self.jitter {
            Jitter::Additive => self.cap + self.cap / 5,
            Jitter::None | Jitter::Full | Jitter::Equal | Jitter::Decorrelated => self.cap,
        };
        backoff.max(self.hint_cap + self.hint_cap / 5)
    }
}

/// Nanoseconds to a `Duration`, saturating (policy limits keep real values far below that).
pub(crate) fn duration_from_nanos(nanos: u128) -> Duration {
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Policy {
        Policy::builder()
            .base(Duration::from_secs(5))
            .cap(Duration::from_secs(300))
            .build()
            .unwrap()
    }

    // r[verify retry.schedule]
    #[test]
    fn delay_doubles_then_stays_at_the_cap() {
        let p = policy();
        let s = Duration::from_secs;
        let got: Vec<_> = (0..=8).map(|n| p.nominal_delay(n)).collect();
        assert_eq!(
            got,
            [
                s(0),
                s(5),
                s(10),
                s(20),
                s(40),
                s(80),
                s(160),
                s(300),
                s(300)
            ]
        );
    }

    // r[verify retry.schedule]
    #[test]
    fn long_streaks_never_wrap_below_the_cap() {
        let p = policy();
        for n in [64, 65, 99, 1000, u32::MAX - 1, u32::MAX] {
            assert_eq!(p.nominal_delay(n), p.cap(), "streak {n}");
        }
        // The largest base with the largest cap: still saturates instead of overflowing.
        let big = Policy::builder()
            .base(crate::MAX_POLICY_DURATION)
            .cap(crate::MAX_POLICY_DURATION)
            .build()
            .unwrap();
        assert_eq!(big.nominal_delay(63), crate::MAX_POLICY_DURATION);
    }
}
