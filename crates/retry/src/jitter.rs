//! Jitter strategies and the seeded, deterministic randomness behind them.
//!
//! Every random draw is a pure function of (policy seed, key, streak length, stream), so the
//! in-memory gate and a decision recomputed from persisted history pick the same wait.

use std::time::Duration;

use crate::policy::Policy;
use crate::schedule::duration_from_nanos;

/// How a nominal delay `d` is spread out.
///
/// At the cap nothing is clamped: a key at the cap still gets a spread of waits, because clamping
/// would put every client that reached the cap into lockstep.
///
/// With feature `serde` it is written in lower case: `"additive"`, `"full"`, `"equal"`,
/// `"decorrelated"`, `"none"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize, serde::Serialize),
    serde(rename_all = "lowercase")
)]
pub enum Jitter {
    /// Exactly `d`. Clients that failed together retry together; for tests and single clients.
    None,
    /// Uniform in `[d, 1.2 d)`: never shorter than the nominal wait. The default; right for pacing,
    /// where the nominal wait is a promise (to an operator, to a rate-limited server).
    #[default]
    Additive,
    /// Uniform in `[0, d)`: the fewest calls when many clients contend for one resource.
    Full,
    /// `d/2` plus uniform in `[0, d/2)`.
    Equal,
    /// Uniform in `[base, min(3 × previous, cap))`, walking the chain over (at most) the last 32
    /// failures of the streak so the cost stays constant. Unlike the AWS formulation it draws
    /// below the cap instead of clamping to it, so keys at the cap do not coincide.
    Decorrelated,
}

/// How many links of the decorrelated chain are replayed (the chain forgets its start quickly).
const DECORRELATED_WINDOW: u32 = 32;

/// Separate streams so the hint's jitter is independent of the backoff's.
const STREAM_BACKOFF: u64 = 0x6261_636b;
const STREAM_HINT: u64 = 0x6869_6e74;

/// splitmix64's finaliser: a good 64-bit mix (also for spreading other schedules, such as a
/// periodic check's offset, from a seed and a [`stable_hash`](crate::stable_hash)).
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A uniform 32-bit fraction (of 2^32) for this seed, key, stream and step.
// r[impl retry.jitter.seeded]
fn draw(seed: u64, jitter_key: u64, stream: u64, step: u32) -> u64 {
    mix(mix(seed ^ mix(jitter_key)) ^ stream.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ u64::from(step))
        >> 32
}

/// `d * fraction / 2^32`.
fn scale(d: Duration, fraction: u64) -> Duration {
    duration_from_nanos((d.as_nanos() * u128::from(fraction)) >> 32)
}

/// Positive-only spread: uniform in `[d, 1.2 d)`.
fn additive(d: Duration, fraction: u64) -> Duration {
    d + scale(d, fraction) / 5
}

impl Policy {
    /// The jittered backoff after `failures` consecutive failures of the key with `jitter_key`.
    // r[impl retry.jitter+2]
    // r[impl retry.jitter.cap]
    pub fn jittered_delay(&self, failures: u32, jitter_key: u64) -> Duration {
        if failures == 0 {
            return Duration::ZERO;
        }
        let d = self.nominal_delay(failures);
        let r = draw(self.seed, jitter_key, STREAM_BACKOFF, failures);
        match self.jitter {
            Jitter::None => d,
            Jitter::Additive => additive(d, r),
            Jitter::Full => scale(d, r),
            Jitter::Equal => d / 2 + scale(d / 2, r),
            Jitter::Decorrelated => self.decorrelated(failures, jitter_key),
        }
    }

    /// The decorrelated chain's link for `failures`: each link uniform in
    /// `[base, min(3 × previous, cap))`, from `base`, replayed over (at most) the streak's last
    /// `DECORRELATED_WINDOW` failures so a wait costs the same at any streak length.
    // r[impl retry.jitter+2]
    fn decorrelated(&self, failures: u32, jitter_key: u64) -> Duration {
        let first = failures.saturating_sub(DECORRELATED_WINDOW - 1).max(1);
        let mut prev = self.base;
        for step in first..=failures {
            let hi = (prev * 3).min(self.cap);
            let r = draw(self.seed, jitter_key, STREAM_BACKOFF, step);
            prev = self.base + scale(hi.saturating_sub(self.base), r);
        }
        prev
    }

    /// The wait after the latest failure: the jittered backoff, or the capped, positively
    /// jittered server hint when that is longer. A hint never shortens the wait.
    // r[impl retry.retry-after]
    pub fn wait_after(&self, failures: u32, jitter_key: u64, hint: Option<Duration>) -> Duration {
        let backoff = self.jittered_delay(failures, jitter_key);
        match hint {
            None => backoff,
            Some(hint) => {
                let hint = hint.min(self.hint_cap);
                let r = draw(self.seed, jitter_key, STREAM_HINT, failures);
                backoff.max(additive(hint, r))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EVERY_JITTER: [Jitter; 4] = [
        Jitter::Additive,
        Jitter::Full,
        Jitter::Equal,
        Jitter::Decorrelated,
    ];

    /// The distinct waits that keys 0..100 draw after `failures` failures, sorted.
    fn distinct_waits(p: &Policy, failures: u32) -> Vec<Duration> {
        let mut waits: Vec<_> = (0..100u64).map(|k| p.jittered_delay(failures, k)).collect();
        waits.sort();
        waits.dedup();
        waits
    }

    fn policy(jitter: Jitter) -> Policy {
        Policy::builder()
            .base(Duration::from_millis(100))
            .cap(Duration::from_secs(10))
            .jitter(jitter)
            .build()
            .unwrap()
    }

    // r[verify retry.jitter+2]
    #[test]
    fn each_strategy_stays_in_its_range() {
        for key in 0..200u64 {
            for n in 1..12 {
                let d = policy(Jitter::None).nominal_delay(n);
                assert_eq!(policy(Jitter::None).jittered_delay(n, key), d);
                // The spec's intervals are half-open: the upper bound is never reached.
                let a = policy(Jitter::Additive).jittered_delay(n, key);
                assert!(a >= d && a * 5 < d * 6, "additive {a:?} vs {d:?}");
                assert!(policy(Jitter::Full).jittered_delay(n, key) < d);
                let e = policy(Jitter::Equal).jittered_delay(n, key);
                assert!(e >= d / 2 && e < d, "equal {e:?} vs {d:?}");
                let p = policy(Jitter::Decorrelated);
                let c = p.jittered_delay(n, key);
                assert!(c >= p.base() && c < p.cap(), "decorrelated {c:?}");
                if n == 1 {
                    assert!(c < p.base() * 3, "the first draw is below 3 × base: {c:?}");
                }
            }
        }
    }

    // r[verify retry.jitter+2]
    #[test]
    fn jitter_spreads_keys_apart() {
        for jitter in EVERY_JITTER {
            let p = policy(jitter);
            let waits = distinct_waits(&p, 3);
            assert!(
                waits.len() > 90,
                "{jitter:?}: only {} distinct waits",
                waits.len()
            );
        }
    }

    // r[verify retry.jitter+2]
    #[test]
    fn the_decorrelated_chain_draws_below_three_times_its_previous_link_over_the_last_32() {
        let p = policy(Jitter::Decorrelated);
        // The rule's chain, link by link, replayed from `base` at failure max(1, n - 31).
        let chain = |n: u32, key: u64| {
            let mut prev = p.base();
            for step in n.saturating_sub(31).max(1)..=n {
                let hi = (prev * 3).min(p.cap());
                let fraction = draw(p.seed, key, STREAM_BACKOFF, step);
                let next = p.base() + scale(hi - p.base(), fraction);
                assert!(
                    next >= p.base() && (next < hi || hi == p.base()),
                    "{next:?}"
                );
                prev = next;
            }
            prev
        };
        for key in 0..20 {
            for n in (1..70).chain([1_000, u32::MAX]) {
                assert_eq!(
                    p.jittered_delay(n, key),
                    chain(n, key),
                    "n = {n}, key = {key}"
                );
            }
        }
    }

    // r[verify retry.jitter.cap]
    #[test]
    fn jitter_is_not_clamped_away_at_the_cap() {
        for jitter in EVERY_JITTER {
            let p = policy(jitter);
            let at_cap = distinct_waits(&p, 40);
            assert!(
                at_cap.len() > 90,
                "{jitter:?}: only {} distinct waits at the cap",
                at_cap.len()
            );
            let max = *at_cap.last().unwrap();
            assert!(max <= p.max_wait(), "{jitter:?}: {max:?} above max_wait");
        }
        // At the cap each strategy spreads over its own range, with the cap as its nominal delay.
        let cap = policy(Jitter::None).cap();
        for k in 0..100 {
            for n in [40, u32::MAX] {
                let w = policy(Jitter::Additive).jittered_delay(n, k);
                assert!(w >= cap && w < cap + cap / 5, "additive {w:?}");
                assert!(policy(Jitter::Full).jittered_delay(n, k) < cap);
                let w = policy(Jitter::Equal).jittered_delay(n, k);
                assert!(w >= cap / 2 && w < cap, "equal {w:?}");
                let w = policy(Jitter::Decorrelated).jittered_delay(n, k);
                assert!(
                    w >= policy(Jitter::None).base() && w < cap,
                    "decorrelated {w:?}"
                );
            }
        }
    }

    // r[verify retry.jitter.seeded]
    #[test]
    fn jitter_is_a_function_of_seed_key_and_streak() {
        let p = policy(Jitter::Additive);
        assert_eq!(p.jittered_delay(4, 7), p.jittered_delay(4, 7));
        let other_seed = Policy::builder()
            .base(p.base())
            .cap(p.cap())
            .seed(99)
            .build()
            .unwrap();
        let differs = (0..50).any(|k| other_seed.jittered_delay(4, k) != p.jittered_delay(4, k));
        assert!(differs, "the seed must change the draws");
        // Decorrelated replays its chain deterministically too, even for huge streaks.
        let d = policy(Jitter::Decorrelated);
        assert_eq!(d.jittered_delay(u32::MAX, 3), d.jittered_delay(u32::MAX, 3));
        // "In every process": the draw is pinned, so no build or version gives other waits.
        assert_eq!(draw(1, 2, 3, 4), 0x15f6_9422);
        assert_eq!(draw(42, 7, 1, 9), 0xb842_ca74);
    }

    // r[verify retry.retry-after]
    #[test]
    fn hints_never_shorten_are_capped_and_jittered() {
        let p = Policy::builder()
            .base(Duration::from_secs(1))
            .cap(Duration::from_secs(60))
            .hint_cap(Duration::from_secs(120))
            .build()
            .unwrap();
        let s = Duration::from_secs;
        for key in 0..50 {
            let backoff = p.jittered_delay(2, key);
            // Below the computed delay: ignored.
            assert_eq!(p.wait_after(2, key, Some(s(1))), backoff);
            // Above it: honoured, with positive-only jitter.
            let w = p.wait_after(2, key, Some(s(30)));
            assert!(w >= s(30) && w < s(36), "{w:?}");
            // Above the hint cap: capped, then jittered.
            let w = p.wait_after(2, key, Some(s(10_000)));
            assert!(w >= s(120) && w < s(144), "{w:?}");
        }
        let mut hinted: Vec<_> = (0..100).map(|k| p.wait_after(1, k, Some(s(30)))).collect();
        hinted.sort();
        hinted.dedup();
        assert!(
            hinted.len() > 90,
            "the same hint must not bring clients back in lockstep"
        );
    }
}
