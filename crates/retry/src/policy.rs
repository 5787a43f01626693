//! The pacing configuration shared by every gate and every persisted decision.

use std::hash::Hash;
use std::time::Duration;

use crate::jitter::Jitter;
use crate::stable_hash::stable_hash;

/// The longest duration a policy accepts for any of its settings (one year).
///
/// Keeping every duration far from the numeric limits means no addition in the crate can
/// overflow into a short wait.
pub const MAX_POLICY_DURATION: Duration = Duration::from_secs(366 * 24 * 60 * 60);

/// A policy setting that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// A duration that must be positive was zero.
    #[error("{0} must be greater than zero")]
    Zero(&'static str),
    /// `base` was larger than `cap`.
    #[error("base ({base:?}) must not exceed cap ({cap:?})")]
    BaseAboveCap {
        /// The configured base.
        base: Duration,
        /// The configured cap.
        cap: Duration,
    },
    /// A duration exceeded [`MAX_POLICY_DURATION`].
    #[error("{field} ({value:?}) exceeds the maximum of one year")]
    TooLong {
        /// Which setting.
        field: &'static str,
        /// The configured value.
        value: Duration,
    },
}

/// How one class of keys is paced: schedule, jitter, escalation, hints and stale attempts.
///
/// Build one with [`Policy::builder`]; [`Policy::default`] is base 5 s, cap 300 s, escalation after
/// 5 consecutive failures, additive jitter, Retry-After hints honoured up to 1 hour, attempts in
/// flight for more than 10 minutes considered stale, seed 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub(crate) base: Duration,
    pub(crate) cap: Duration,
    pub(crate) escalate_after: u32,
    pub(crate) jitter: Jitter,
    pub(crate) hint_cap: Duration,
    pub(crate) stale_after: Duration,
    pub(crate) seed: u64,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            base: Duration::from_secs(5),
            cap: Duration::from_secs(300),
            escalate_after: 5,
            jitter: Jitter::Additive,
            hint_cap: Duration::from_secs(3600),
            stale_after: Duration::from_secs(600),
            seed: 0,
        }
    }
}

impl Policy {
    /// Start from the defaults and change what differs.
    pub fn builder() -> PolicyBuilder {
        PolicyBuilder {
            policy: Policy::default(),
        }
    }

    /// The delay after the first failure.
    pub fn base(&self) -> Duration {
        self.base
    }
    /// The largest nominal delay; also the quiet time after which a key starts a new streak.
    pub fn cap(&self) -> Duration {
        self.cap
    }
    /// The streak length at which a key is escalated.
    pub fn escalate_after(&self) -> u32 {
        self.escalate_after
    }
    /// The jitter strategy.
    pub fn jitter(&self) -> Jitter {
        self.jitter
    }
    /// The largest server hint (Retry-After) that is honoured.
    pub fn hint_cap(&self) -> Duration {
        self.hint_cap
    }
    /// How long an attempt may stay in flight before a new one may supersede it.
    pub fn stale_after(&self) -> Duration {
        self.stale_after
    }
    /// The jitter seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }
}

/// Builds a validated [`Policy`].
#[derive(Debug, Clone, Copy)]
pub struct PolicyBuilder {
    policy: Policy,
}

impl PolicyBuilder {
    /// The delay after the first failure.
    pub fn base(mut self, base: Duration) -> Self {
        self.policy.base = base;
        self
    }
    /// The largest nominal delay.
    pub fn cap(mut self, cap: Duration) -> Self {
        self.policy.cap = cap;
        self
    }
    /// Escalate when a streak reaches this many consecutive failures (at least 1).
    pub fn escalate_after(mut self, failures: u32) -> Self {
        self.policy.escalate_after = failures;
        self
    }
    /// The jitter strategy.
    pub fn jitter(mut self, jitter: Jitter) -> Self {
        self.policy.jitter = jitter;
        self
    }
    /// The largest server hint (Retry-After) that is honoured; longer hints are cut to this.
    pub fn hint_cap(mut self, hint_cap: Duration) -> Self {
        self.policy.hint_cap = hint_cap;
        self
    }
    /// How long an attempt may stay in flight before it counts as failed and may be superseded.
    pub fn stale_after(mut self, stale_after: Duration) -> Self {
        self.policy.stale_after = stale_after;
        self
    }
    /// The jitter seed. Give each node its own (see [`PolicyBuilder::seed_from`]) so that nodes
    /// failing against the same server do not come back in lockstep.
    pub fn seed(mut self, seed: u64) -> Self {
        self.policy.seed = seed;
        self
    }
    /// Derive the seed from a stable value such as the node's name.
    pub fn seed_from<H: Hash + ?Sized>(mut self, value: &H) -> Self {
        self.policy.seed = stable_hash(value);
        self
    }

    /// Validate and return the policy.
    // r[impl retry.policy.validate]
    pub fn build(self) -> Result<Policy, PolicyError> {
        let p = self.policy;
        for (field, value) in [
            ("base", p.base),
            ("cap", p.cap),
            ("hint_cap", p.hint_cap),
            ("stale_after", p.stale_after),
        ] {
            if value.is_zero() {
                return Err(PolicyError::Zero(field));
            }
            if value > MAX_POLICY_DURATION {
                return Err(PolicyError::TooLong { field, value });
            }
        }
        if p.escalate_after == 0 {
            return Err(PolicyError::Zero("escalate_after"));
        }
        if p.base > p.cap {
            return Err(PolicyError::BaseAboveCap {
                base: p.base,
                cap: p.cap,
            });
        }
        Ok(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // r[verify retry.policy.validate]
    #[test]
    fn invalid_policies_are_typed_errors() {
        let s = Duration::from_secs;
        assert_eq!(
            Policy::builder().base(Duration::ZERO).build(),
            Err(PolicyError::Zero("base"))
        );
        assert_eq!(
            Policy::builder().base(s(10)).cap(s(5)).build(),
            Err(PolicyError::BaseAboveCap {
                base: s(10),
                cap: s(5)
            })
        );
        assert_eq!(
            Policy::builder().escalate_after(0).build(),
            Err(PolicyError::Zero("escalate_after"))
        );
        assert_eq!(
            Policy::builder().stale_after(Duration::ZERO).build(),
            Err(PolicyError::Zero("stale_after"))
        );
        assert!(matches!(
            Policy::builder().cap(s(400 * 24 * 3600)).build(),
            Err(PolicyError::TooLong { field: "cap", .. })
        ));
        // The maximum itself is allowed: only beyond it is too long.
        assert!(Policy::builder().cap(MAX_POLICY_DURATION).build().is_ok());
        assert_eq!(Policy::builder().build(), Ok(Policy::default()));
        let p = Policy::builder().base(s(1)).cap(s(1)).build().unwrap();
        assert_eq!((p.base(), p.cap()), (s(1), s(1)));
    }
}
