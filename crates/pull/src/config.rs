//! The actuator's configuration: pacing of image references and of the daemon, the stall bound,
//! and the node's jitter seed, validated as a whole.
//!
//! There is deliberately no `Default`: every node must bring its own seed (the node derives it from
//! its identity, `NodeIdentity::seed("pull")`), or every node would retry a recovering registry for
//! one image at the same instant.

use std::time::Duration;

use holdfast_retry::{Policy, PolicyError};

use crate::watchdog::DEFAULT_STALL_TIMEOUT;

/// How long an image pull may stay in flight before its gate counts it as stale and lets a new
/// attempt supersede it (6 h). The progress watchdog is what ends a pull that stops moving; this
/// bound only catches an attempt that somehow never reports, so it sits far above any watchdog
/// bound, and a slow but healthy pull is never counted as stale.
pub const DEFAULT_PULL_STALE_AFTER: Duration = Duration::from_secs(6 * 60 * 60);

/// How many waits of an image attempt are each bounded by the stall timeout: the connection and
/// version negotiation, the image inspect, and the pull stream's progress.
pub const IMAGE_ATTEMPT_WAITS: u32 = 3;

/// A configuration that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PullConfigError {
    /// One of the two policies is invalid in itself.
    #[error("{which}: {source}")]
    Policy {
        /// `image_policy` or `daemon_policy`.
        which: &'static str,
        /// What is wrong with it.
        source: PolicyError,
    },
    /// The stall bound was zero: every attempt would be abandoned at once.
    #[error("stall_timeout must be greater than zero")]
    ZeroStallTimeout,
    /// An image attempt waits, each under the stall bound, for the daemon's connection, for its
    /// image inspect and for progress of the pull stream: an attempt that makes no progress may so
    /// run for [`IMAGE_ATTEMPT_WAITS`] times the stall bound, and must end by the watchdog before
    /// its gate may count it as stale.
    #[error(
        "stall_timeout ({stall_timeout:?}) bounds each of an image attempt's {IMAGE_ATTEMPT_WAITS} waits (connect, inspect, pull stream), so {IMAGE_ATTEMPT_WAITS} x stall_timeout must be shorter than image_policy's stale_after ({stale_after:?})"
    )]
    AttemptNotBelowStale {
        /// The configured stall bound.
        stall_timeout: Duration,
        /// The image policy's stale timeout.
        stale_after: Duration,
    },
    /// A daemon probe would count as stale (and be superseded) before its stall bound could end
    /// it, so a daemon that is merely slow would be superseded instead of judged by its answer.
    #[error(
        "stall_timeout ({stall_timeout:?}) must be shorter than {which}'s stale_after ({stale_after:?})"
    )]
    StallNotBelowStale {
        /// The policy concerned (`daemon_policy`).
        which: &'static str,
        /// The configured stall bound.
        stall_timeout: Duration,
        /// That policy's stale timeout.
        stale_after: Duration,
    },
}

/// Configuration of an [`Actuator`](crate::Actuator). Build it with [`PullConfig::builder`] (or
/// [`PullConfig::new`] for the reference numbers); its fields are read through accessors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PullConfig {
    image_policy: Policy,
    daemon_policy: Policy,
    stall_timeout: Duration,
}

impl PullConfig {
    /// The reference numbers (base 5 s, cap 300 s, escalation after 5 failures, image attempts
    /// stale after [`DEFAULT_PULL_STALE_AFTER`], stall bound 60 s), jittered with `seed`.
    pub fn new(seed: u64) -> Self {
        PullConfig {
            image_policy: default_image_policy(seed),
            daemon_policy: reseeded(Policy::default(), seed),
            stall_timeout: DEFAULT_STALL_TIMEOUT,
        }
    }

    /// Starts from [`PullConfig::new`]`(seed)` and changes what differs. The seed is applied to
    /// both policies, whatever seed a policy passed in was built with.
    pub fn builder(seed: u64) -> PullConfigBuilder {
        PullConfigBuilder {
            seed,
            config: PullConfig::new(seed),
        }
    }

    /// Pacing per image reference.
    pub fn image_policy(&self) -> &Policy {
        &self.image_policy
    }

    /// Pacing of the daemon while it is unreachable.
    pub fn daemon_policy(&self) -> &Policy {
        &self.daemon_policy
    }

    /// How long a pull (or a wait for the daemon's answer) may go without progress before it is
    /// abandoned.
    pub fn stall_timeout(&self) -> Duration {
        self.stall_timeout
    }

    /// The jitter seed both policies use.
    pub fn seed(&self) -> u64 {
        self.image_policy.seed()
    }
}

/// Builds a validated [`PullConfig`].
#[derive(Debug, Clone, Copy)]
pub struct PullConfigBuilder {
    seed: u64,
    config: PullConfig,
}

impl PullConfigBuilder {
    /// Pacing per image reference (its seed is replaced by the builder's).
    pub fn image_policy(mut self, policy: Policy) -> Self {
        self.config.image_policy = policy;
        self
    }

    /// Pacing of the daemon while it is unreachable (its seed is replaced by the builder's).
    pub fn daemon_policy(mut self, policy: Policy) -> Self {
        self.config.daemon_policy = policy;
        self
    }

    /// How long a pull may go without progress before it is abandoned.
    pub fn stall_timeout(mut self, stall_timeout: Duration) -> Self {
        self.config.stall_timeout = stall_timeout;
        self
    }

    // r[impl actuate.image.config+2]
    /// Validates and returns the configuration.
    pub fn build(self) -> Result<PullConfig, PullConfigError> {
        let PullConfig {
            image_policy,
            daemon_policy,
            stall_timeout,
        } = self.config;
        let image_policy = reseed(image_policy, self.seed, "image_policy")?;
        let daemon_policy = reseed(daemon_policy, self.seed, "daemon_policy")?;
        if stall_timeout.is_zero() {
            return Err(PullConfigError::ZeroStallTimeout);
        }
        // An image attempt without progress ends after at most its waits' bounds together; a
        // probe (one wait) and a pull must each end so before their gate may count them stale.
        let attempt_bound = stall_timeout.checked_mul(IMAGE_ATTEMPT_WAITS);
        if attempt_bound.is_none_or(|bound| bound >= image_policy.stale_after()) {
            return Err(PullConfigError::AttemptNotBelowStale {
                stall_timeout,
                stale_after: image_policy.stale_after(),
            });
        }
        if stall_timeout >= daemon_policy.stale_after() {
            return Err(PullConfigError::StallNotBelowStale {
                which: "daemon_policy",
                stall_timeout,
                stale_after: daemon_policy.stale_after(),
            });
        }
        Ok(PullConfig {
            image_policy,
            daemon_policy,
            stall_timeout,
        })
    }
}

/// `policy` rebuilt through the validating builder with `seed`.
fn reseed(policy: Policy, seed: u64, which: &'static str) -> Result<Policy, PullConfigError> {
    Policy::builder()
        .base(policy.base())
        .cap(policy.cap())
        .escalate_after(policy.escalate_after())
        .jitter(policy.jitter())
        .hint_cap(policy.hint_cap())
        .stale_after(policy.stale_after())
        .seed(seed)
        .build()
        .map_err(|source| PullConfigError::Policy { which, source })
}

/// A valid policy with its seed replaced (used only on policies already known valid).
fn reseeded(policy: Policy, seed: u64) -> Policy {
    reseed(policy, seed, "policy").unwrap_or(policy)
}

fn default_image_policy(seed: u64) -> Policy {
    reseeded(
        Policy::builder()
            .stale_after(DEFAULT_PULL_STALE_AFTER)
            .build()
            .unwrap_or_default(),
        seed,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    // r[verify actuate.image.config+2]
    #[test]
    fn a_stall_bound_at_or_above_the_stale_timeout_is_refused() {
        let short_stale = Policy::builder()
            .stale_after(Duration::from_secs(30))
            .build()
            .unwrap();
        let err = PullConfig::builder(1)
            .image_policy(short_stale)
            .stall_timeout(Duration::from_secs(60))
            .build()
            .unwrap_err();
        assert_eq!(
            err,
            PullConfigError::AttemptNotBelowStale {
                stall_timeout: Duration::from_secs(60),
                stale_after: Duration::from_secs(30),
            }
        );
        assert!(err.to_string().contains("stall_timeout"), "{err}");
        // Above the stall bound but not above an attempt's three bounded waits: a slow daemon
        // answering connect and inspect just in time, then a stalled stream, would count as stale
        // before its watchdog ended it.
        let stale_150 = Policy::builder()
            .stale_after(Duration::from_secs(150))
            .build()
            .unwrap();
        assert_eq!(
            PullConfig::builder(1)
                .image_policy(stale_150)
                .stall_timeout(Duration::from_secs(60))
                .build(),
            Err(PullConfigError::AttemptNotBelowStale {
                stall_timeout: Duration::from_secs(60),
                stale_after: Duration::from_secs(150),
            })
        );
        assert!(
            PullConfig::builder(1)
                .image_policy(stale_150)
                .stall_timeout(Duration::from_secs(49))
                .build()
                .is_ok()
        );
        // A bound too large to triple is refused, not an overflow.
        assert!(matches!(
            PullConfig::builder(1).stall_timeout(Duration::MAX).build(),
            Err(PullConfigError::AttemptNotBelowStale { .. })
        ));
        // The daemon's gate is held to the same bound (its default stale timeout is 600 s).
        let err = PullConfig::builder(1)
            .stall_timeout(Duration::from_secs(600))
            .build()
            .unwrap_err();
        assert!(
            matches!(
                err,
                PullConfigError::StallNotBelowStale {
                    which: "daemon_policy",
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(
            PullConfig::builder(1).stall_timeout(Duration::ZERO).build(),
            Err(PullConfigError::ZeroStallTimeout)
        );
        assert_eq!(PullConfig::builder(1).build(), Ok(PullConfig::new(1)));
    }

    // r[verify actuate.image.config+2]
    #[test]
    fn the_seed_is_the_callers_and_reaches_both_policies() {
        let policy = Policy::builder().seed(99).build().unwrap();
        let a = PullConfig::builder(7)
            .image_policy(policy)
            .daemon_policy(policy)
            .build()
            .unwrap();
        assert_eq!(a.image_policy().seed(), 7);
        assert_eq!(a.daemon_policy().seed(), 7);
        assert_eq!(a.seed(), 7);
        let b = PullConfig::new(8);
        assert_ne!(a.seed(), b.seed(), "two nodes, two seeds");
        assert_eq!(b.image_policy().stale_after(), DEFAULT_PULL_STALE_AFTER);
        assert_eq!(b.stall_timeout(), DEFAULT_STALL_TIMEOUT);
        assert!(DEFAULT_PULL_STALE_AFTER >= 100 * DEFAULT_STALL_TIMEOUT);
    }
}
