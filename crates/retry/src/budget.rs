//! An optional global retry budget: a token bucket shared by all keys of a gate.
//!
//! Per-key pacing bounds how often one key is retried; the budget bounds how many retries all
//! keys together may start, for the hour when a thousand keys fail at once. A gate with a budget
//! makes a retry wait for the later of the two. First attempts are not retries and never wait for
//! the budget.

use std::time::{Duration, Instant};

use crate::policy::{MAX_POLICY_DURATION, PolicyError};
use crate::time::Timestamp;

/// A token bucket of retries: `burst` at once, refilled at one per `per / burst`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryBudget {
    /// Time to earn one token.
    interval: Duration,
    /// How far ahead of now the bucket may be booked (burst - 1 intervals).
    tolerance: Duration,
    /// The theoretical time at which the bucket is full again (GCRA).
    full_at: Option<Instant>,
}

impl RetryBudget {
    /// Allow `retries` retries per `per`, all of them at once if the bucket is full.
    pub fn new(retries: u32, per: Duration) -> Result<Self, PolicyError> {
        if retries == 0 {
            return Err(PolicyError::Zero("retries"));
        }
        if per.is_zero() {
            return Err(PolicyError::Zero("per"));
        }
        if per > MAX_POLICY_DURATION {
            return Err(PolicyError::TooLong {
                field: "per",
                value: per,
            });
        }
        let interval = (per / retries).max(Duration::from_nanos(1));
        Ok(Self {
            interval,
            tolerance: interval * (retries - 1),
            full_at: None,
        })
    }

    /// When a token will be available (`now` or earlier: one is available now).
    pub fn available_at(&self, now: Instant) -> Instant {
        match self.full_at {
            Some(full_at) if full_at > now => {
                let booked = full_at.saturating_since(now);
                if booked > self.tolerance {
                    // Never more than one interval past `now`; saturating all the same.
                    now.saturating_add(booked - self.tolerance)
                } else {
                    now
                }
            }
            _ => now,
        }
    }

    /// Take a token, or say when one will be available.
    // r[impl retry.budget]
    pub fn try_acquire(&mut self, now: Instant) -> Result<(), Instant> {
        let available = self.available_at(now);
        if available > now {
            return Err(available);
        }
        // Booked from the later of the bucket's own time and now: an idle bucket books no credit.
        let from = self.full_at.map_or(now, |full_at| full_at.max(now));
        self.full_at = Some(from.saturating_add(self.interval));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // r[verify retry.budget]
    #[test]
    fn bucket_allows_a_burst_then_refills_at_its_rate() {
        let mut b = RetryBudget::new(3, Duration::from_secs(3)).unwrap();
        let t0 = Instant::now();
        assert_eq!(b.try_acquire(t0), Ok(()));
        assert_eq!(b.try_acquire(t0), Ok(()));
        assert_eq!(b.try_acquire(t0), Ok(()));
        assert_eq!(b.try_acquire(t0), Err(t0 + Duration::from_secs(1)));
        assert_eq!(
            b.try_acquire(t0 + Duration::from_millis(999)),
            Err(t0 + Duration::from_secs(1))
        );
        assert_eq!(b.try_acquire(t0 + Duration::from_secs(1)), Ok(()));
        assert!(b.try_acquire(t0 + Duration::from_secs(1)).is_err());
        // Idle long enough: full again, but never more than the burst.
        let later = t0 + Duration::from_secs(100);
        for _ in 0..3 {
            assert_eq!(b.try_acquire(later), Ok(()));
        }
        assert!(b.try_acquire(later).is_err());
        assert!(RetryBudget::new(0, Duration::from_secs(1)).is_err());
    }

    // r[verify retry.budget]
    #[test]
    fn a_token_is_taken_at_exactly_the_moment_it_is_earned_and_books_the_next_from_then() {
        let s = Duration::from_secs;
        let mut b = RetryBudget::new(1, s(1)).unwrap();
        let t0 = Instant::now();
        assert_eq!(b.try_acquire(t0), Ok(()));
        let early = t0 + s(1) - Duration::from_nanos(1);
        assert_eq!(
            b.try_acquire(early),
            Err(t0 + s(1)),
            "not a nanosecond early"
        );
        assert_eq!(b.try_acquire(t0 + s(1)), Ok(()), "at exactly the moment");
        assert_eq!(
            b.try_acquire(t0 + s(1)),
            Err(t0 + s(2)),
            "the next one interval on"
        );
        // Idle past its time, the bucket books from now, not from when it was last full.
        assert_eq!(b.try_acquire(t0 + s(10)), Ok(()));
        assert_eq!(b.try_acquire(t0 + s(10)), Err(t0 + s(11)));
    }
}
