//! The one decision taken for a hostname before any source is dispatched.
//!
//! [`decide`] is pure: (policy, the current certificate, the hostname's history, operator flags,
//! now) → [`Verdict`]. Pacing comes from holdfast-retry's [`holdfast_retry::decide`], the same
//! function the in-memory gates use; this module adds only renewal and the block on top of it.

use std::time::{Duration, SystemTime};

use holdfast_retry::{Decision, History, Policy, Timestamp as _};

use crate::cert::CertInfo;

/// What the operator can do to clear a block (shown in the verdict and the fault).
pub const FORCE_RETRY_HINT: &str =
    "wait for the block to expire, or run `holdfast certs retry HOST`";

/// How certificates are paced and when a hostname is blocked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IssuePolicy {
    /// Pacing of failed attempts (holdfast-retry's schedule, jitter and Retry-After handling).
    pub retry: Policy,
    /// A streak this long blocks the hostname.
    pub block_after: u32,
    /// How long a block lasts after the failure that (re)engaged it; never longer than the cap,
    /// so the attempt after a block continues its streak rather than starting a new one.
    pub block_for: Duration,
}

/// A block that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IssuePolicyError {
    /// The retry policy itself.
    #[error("pacing: {0}")]
    Retry(#[from] holdfast_retry::PolicyError),
    /// `block_after` was zero.
    #[error("block_after: must be at least 1")]
    BlockAfterZero,
    /// `block_for` was zero or longer than the cap.
    #[error("block_for: must be positive and not longer than the pacing cap ({cap:?})")]
    BlockFor {
        /// The pacing cap it must not exceed.
        cap: Duration,
    },
}

impl IssuePolicy {
    /// The defaults: base 5 min, doubling to a 6 h cap, additive jitter, Retry-After honoured up
    /// to 24 h, blocked for 6 h once 6 consecutive attempts failed.
    ///
    /// Failed attempts then start at 0, 5, 15, 35, 75 and 155 minutes (each wait up to 20 % longer):
    /// at most 4 inside any hour, under Let's Encrypt's 5 failed validations per identifier per
    /// account per hour. certmagic, for comparison, retries after 1, 2, 2, 5, 10 … minutes up to 6 h.
    // r[impl issue.pacing.defaults]
    pub fn standard(seed: u64) -> Self {
        let retry = Policy::builder()
            .base(Duration::from_secs(5 * 60))
            .cap(Duration::from_secs(6 * 3600))
            .escalate_after(6)
            .hint_cap(Duration::from_secs(24 * 3600))
            // An attempt is bounded by the attempt timeout long before this.
            .stale_after(Duration::from_secs(3600))
            .seed(seed)
            .build();
        // The builder's inputs are constants that satisfy every check.
        let retry = retry.unwrap_or_default();
        Self {
            retry,
            block_after: 6,
            block_for: Duration::from_secs(6 * 3600),
        }
    }

    /// Checks the block against the pacing policy.
    pub fn validate(self) -> Result<Self, IssuePolicyError> {
        if self.block_after == 0 {
            return Err(IssuePolicyError::BlockAfterZero);
        }
        if self.block_for.is_zero() || self.block_for > self.retry.cap() {
            return Err(IssuePolicyError::BlockFor {
                cap: self.retry.cap(),
            });
        }
        Ok(self)
    }
}

/// What the operator asked for this hostname.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Flags {
    /// Issue now even though the certificate is valid or the hostname is debounced (never
    /// through a block: force-retry is what clears a block).
    pub manual: bool,
}

/// Why an attempt is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IssueReason {
    /// There is no usable certificate.
    Missing,
    /// The certificate has expired.
    Expired,
    /// The renewal time has passed.
    Renewal,
    /// The operator asked for it.
    Manual,
    /// The previous attempt failed and its wait has passed.
    Retry,
}

/// Why a hostname is blocked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockReason {
    /// This many consecutive attempts failed.
    SustainedFailure {
        /// The streak length.
        failures: u32,
    },
}

/// The decision for one hostname.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The certificate is good; nothing happens before `renew_at`.
    Valid {
        /// When renewal becomes due.
        renew_at: SystemTime,
    },
    /// Dispatch the source now.
    Issue(IssueReason),
    /// A previous attempt failed; no attempt before `until`.
    Debounced {
        /// The earliest next attempt.
        until: SystemTime,
        /// The streak length.
        failures: u32,
    },
    /// Sustained failure: no attempt before `until`, unless the operator forces a retry.
    Blocked {
        /// Why.
        reason: BlockReason,
        /// When the block expires by itself (every block has one).
        until: SystemTime,
        /// How to clear it.
        clear: &'static str,
    },
}

impl Verdict {
    /// Whether the source may be dispatched.
    pub fn is_issue(&self) -> bool {
        matches!(self, Verdict::Issue(_))
    }
}

/// When a block engaged by this history ends (`None`: the history blocks nothing): a streak of at
/// least the threshold blocks until `block_for` after its latest failure.
// r[impl issue.block+2]
pub fn block_until(policy: &IssuePolicy, history: &History<SystemTime>) -> Option<SystemTime> {
    if history.failures < policy.block_after {
        return None;
    }
    let last = history.last_failure?;
    Some(last.saturating_add(policy.block_for))
}

/// The block in force at `now`, as its expiry: before the expiry the hostname is blocked, at the
/// expiry itself it no longer is.
// r[impl issue.block+2]
pub fn blocked_at(
    policy: &IssuePolicy,
    history: &History<SystemTime>,
    now: SystemTime,
) -> Option<SystemTime> {
    block_until(policy, history).filter(|&until| now < until)
}

/// Why the current certificate calls for an attempt at `now` (`None`: it is valid and before
/// its renewal time): missing; expired from its not-after time on; renewal due from its renewal
/// time on.
// r[impl issue.decision+2]
pub fn due(current: Option<&CertInfo>, now: SystemTime) -> Option<IssueReason> {
    let cert = match current {
        None => return Some(IssueReason::Missing),
        Some(cert) => cert,
    };
    if now >= cert.not_after {
        Some(IssueReason::Expired)
    } else if renewal_due(cert, now) {
        Some(IssueReason::Renewal)
    } else {
        None
    }
}

/// Whether a stored certificate's renewal time has come: from `renew_at` on, not before.
// r[impl issue.renewal.valid+2]
pub fn renewal_due(cert: &CertInfo, now: SystemTime) -> bool {
    now >= cert.renew_at
}

/// The pacing step, once there is a reason to issue: debounced while holdfast-retry's decision
/// over the persisted history says wait; else issue, as a retry when the streak is not empty.
// r[impl issue.pacing]
pub fn paced(
    policy: &Policy,
    history: &History<SystemTime>,
    reason: IssueReason,
    now: SystemTime,
) -> Verdict {
    match holdfast_retry::decide(policy, history, now) {
        Decision::WaitUntil(until) => Verdict::Debounced {
            until,
            failures: history.failures,
        },
        Decision::Eligible if history.failures > 0 => Verdict::Issue(IssueReason::Retry),
        Decision::Eligible => Verdict::Issue(reason),
    }
}

/// `history` as seen at `now`: a latest failure dated after `now` (written while the clock was
/// ahead, before it was set back) has no usable time, so it neither debounces nor blocks; the
/// streak's length is kept, and the next attempt's outcome is recorded at the present time.
///
/// Clamping it to `now` instead would not do: the wait would then start afresh at every `now`
/// until the clock caught up with the stored date, which may be years away.
// r[impl issue.decision.future]
pub fn as_of(history: &History<SystemTime>, now: SystemTime) -> History<SystemTime> {
    match history.last_failure {
        Some(at) if at > now => History {
            last_failure: None,
            hint: None,
            ..*history
        },
        _ => *history,
    }
}

/// The decision, before any source is called.
///
/// A latest failure dated after `now` neither debounces nor blocks ([`as_of`]). Order: a block wins over
/// everything (a manual trigger does not pass it); then a valid
/// certificate before its renewal time (unless manual); then the debounce (unless manual); else
/// issue, with the reason.
// r[impl issue.decision+2]
// r[impl issue.decision.future]
pub fn decide(
    policy: &IssuePolicy,
    current: Option<&CertInfo>,
    history: &History<SystemTime>,
    flags: Flags,
    now: SystemTime,
) -> Verdict {
    let history = &as_of(history, now);
    if let Some(until) = blocked_at(policy, history, now) {
        return Verdict::Blocked {
            reason: BlockReason::SustainedFailure {
                failures: history.failures,
            },
            until,
            clear: FORCE_RETRY_HINT,
        };
    }
    if flags.manual {
        return Verdict::Issue(IssueReason::Manual);
    }
    let Some(reason) = due(current, now) else {
        return Verdict::Valid {
            renew_at: current.map_or(now, |c| c.renew_at),
        };
    };
    paced(&policy.retry, history, reason, now)
}

/// How long before its not-after a certificate whose renewal is failing is a fault.
pub const EXPIRY_WARNING: Duration = Duration::from_secs(7 * 86400);

/// A certificate near or past its end while its renewal fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpiryFault {
    /// Ends within [`EXPIRY_WARNING`]; this much is left.
    Expiring(Duration),
    /// Ended this long ago.
    Expired(Duration),
}

impl ExpiryFault {
    /// The fault's kind on the board.
    pub fn kind(&self) -> &'static str {
        match self {
            ExpiryFault::Expiring(_) => "expiring",
            ExpiryFault::Expired(_) => "expired",
        }
    }
}

/// Whether a certificate ending at `not_after` is a fault at `now` with `failures` consecutive
/// failed attempts (the latest attempt failed when it is more than zero).
// r[impl issue.expiry.fault]
pub fn expiry_fault(not_after: SystemTime, failures: u32, now: SystemTime) -> Option<ExpiryFault> {
    if failures == 0 {
        return None;
    }
    match not_after.duration_since(now) {
        // The instant itself is expired (`r[issue.expiry+2]`).
        Ok(left) if left.is_zero() => Some(ExpiryFault::Expired(Duration::ZERO)),
        Ok(left) if left <= EXPIRY_WARNING => Some(ExpiryFault::Expiring(left)),
        Ok(_) => None,
        Err(past) => Some(ExpiryFault::Expired(past.duration())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn t(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
    }

    fn policy() -> IssuePolicy {
        IssuePolicy::standard(7)
    }

    fn cert(not_before: u64, not_after: u64) -> CertInfo {
        CertInfo::new(t(not_before), t(not_after))
    }

    fn failed(p: &IssuePolicy, n: u32, last: SystemTime) -> History<SystemTime> {
        let mut h = History::for_key("a.example");
        for _ in 0..n {
            h.begin_attempt(&p.retry, last);
            h.record_failure(&p.retry, last, None);
        }
        h
    }

    // r[verify issue.decision+2]
    #[test]
    fn every_branch_of_the_decision() {
        let p = policy();
        let fresh = History::for_key("a.example");
        let none = Flags::default();
        let manual = Flags { manual: true };
        // No certificate, no history: issue.
        assert_eq!(
            decide(&p, None, &fresh, none, t(0)),
            Verdict::Issue(IssueReason::Missing)
        );
        // Valid certificate before its renewal time: nothing, even long after issuance.
        let c = cert(0, 90 * 86400);
        assert_eq!(
            decide(&p, Some(&c), &fresh, none, t(86400)),
            Verdict::Valid {
                renew_at: c.renew_at
            }
        );
        // Renewal time passed.
        assert_eq!(
            decide(&p, Some(&c), &fresh, none, t(61 * 86400)),
            Verdict::Issue(IssueReason::Renewal)
        );
        // Expired.
        assert_eq!(
            decide(&p, Some(&c), &fresh, none, t(91 * 86400)),
            Verdict::Issue(IssueReason::Expired)
        );
        // A manual trigger issues even with a valid certificate.
        assert_eq!(
            decide(&p, Some(&c), &fresh, manual, t(86400)),
            Verdict::Issue(IssueReason::Manual)
        );
        // One failure: debounced for at least the base, then a retry.
        let h = failed(&p, 1, t(0));
        let Verdict::Debounced { until, failures } = decide(&p, None, &h, none, t(1)) else {
            panic!("debounced")
        };
        assert_eq!(failures, 1);
        assert!(until >= t(300) && until < t(360));
        assert_eq!(
            decide(&p, None, &h, none, until),
            Verdict::Issue(IssueReason::Retry)
        );
        // A manual trigger skips the debounce.
        assert_eq!(
            decide(&p, None, &h, manual, t(1)),
            Verdict::Issue(IssueReason::Manual)
        );
    }

    const NS: Duration = Duration::from_nanos(1);

    // r[verify issue.decision+2]
    #[test]
    fn expiry_and_renewal_take_effect_at_their_instants() {
        let p = policy();
        let fresh = History::for_key("a.example");
        let none = Flags::default();
        let c = cert(0, 90 * 86400);
        let at = |now| decide(&p, Some(&c), &fresh, none, now);
        assert_eq!(
            at(c.renew_at - NS),
            Verdict::Valid {
                renew_at: c.renew_at
            }
        );
        assert_eq!(at(c.renew_at), Verdict::Issue(IssueReason::Renewal));
        assert_eq!(at(c.not_after - NS), Verdict::Issue(IssueReason::Renewal));
        assert_eq!(at(c.not_after), Verdict::Issue(IssueReason::Expired));
        assert_eq!(due(None, t(0)), Some(IssueReason::Missing));
        assert_eq!(due(Some(&c), c.renew_at - NS), None);
        // A manual trigger does not pass a block.
        let h = failed(&p, p.block_after, t(0));
        assert!(matches!(
            decide(&p, Some(&c), &h, Flags { manual: true }, t(1)),
            Verdict::Blocked { .. }
        ));
    }

    // r[verify issue.renewal.valid+2]
    #[test]
    fn a_valid_certificate_is_left_alone_until_the_renewal_instant() {
        let p = policy();
        let fresh = History::for_key("a.example");
        let c = cert(0, 90 * 86400);
        // Renewal at two thirds of 90 days.
        assert_eq!(c.renew_at, t(60 * 86400));
        assert!(!renewal_due(&c, t(0)));
        assert!(!renewal_due(&c, c.renew_at - NS));
        assert!(renewal_due(&c, c.renew_at));
        assert!(renewal_due(&c, c.renew_at + NS));
        assert!(!decide(&p, Some(&c), &fresh, Flags::default(), c.renew_at - NS).is_issue());
        assert!(decide(&p, Some(&c), &fresh, Flags::default(), c.renew_at).is_issue());
    }

    // r[verify issue.pacing]
    #[test]
    fn a_failure_debounces_until_the_retry_decision_then_issues_as_a_retry() {
        let p = policy();
        let fresh = History::for_key("a.example");
        // No streak: the reason stands.
        for reason in [
            IssueReason::Missing,
            IssueReason::Renewal,
            IssueReason::Expired,
        ] {
            assert_eq!(
                paced(&p.retry, &fresh, reason, t(0)),
                Verdict::Issue(reason)
            );
        }
        // One failure: debounced until the instant holdfast-retry names, a retry from then on.
        let h = failed(&p, 1, t(0));
        let Decision::WaitUntil(until) = holdfast_retry::decide(&p.retry, &h, t(1)) else {
            panic!("waits")
        };
        assert!(until >= t(300) && until <= t(360), "{until:?}");
        assert_eq!(
            paced(&p.retry, &h, IssueReason::Missing, until - NS),
            Verdict::Debounced { until, failures: 1 }
        );
        assert_eq!(
            paced(&p.retry, &h, IssueReason::Missing, until),
            Verdict::Issue(IssueReason::Retry)
        );
        // Through `decide` too, with a certificate due for renewal.
        let c = cert(0, 90);
        assert_eq!(
            decide(&p, Some(&c), &h, Flags::default(), t(61)),
            Verdict::Debounced { until, failures: 1 }
        );
        assert_eq!(
            decide(&p, Some(&c), &h, Flags::default(), until),
            Verdict::Issue(IssueReason::Retry)
        );
    }

    proptest! {
        // r[verify issue.pacing]
        #[test]
        fn a_retry_after_lengthens_the_wait_and_never_shortens_it(
            failures in 1u32..5,
            hint in 0u64..(20 * 3600),
        ) {
            let p = policy();
            let mut plain = History::for_key("a.example");
            let mut hinted = History::for_key("a.example");
            for i in 0..failures {
                let at = t(u64::from(i));
                plain.begin_attempt(&p.retry, at);
                plain.record_failure(&p.retry, at, None);
                hinted.begin_attempt(&p.retry, at);
                let last = i + 1 == failures;
                hinted.record_failure(&p.retry, at, last.then(|| Duration::from_secs(hint)));
            }
            let now = t(u64::from(failures));
            let until = |h: &History<SystemTime>| match paced(&p.retry, h, IssueReason::Missing, now) {
                Verdict::Debounced { until, failures: f } => {
                    assert_eq!(f, failures);
                    until
                }
                other => panic!("debounced: {other:?}"),
            };
            let (plain_until, hinted_until) = (until(&plain), until(&hinted));
            prop_assert!(hinted_until >= plain_until);
            let last = t(u64::from(failures - 1));
            prop_assert!(hinted_until >= last + Duration::from_secs(hint));
            prop_assert_eq!(
                paced(&p.retry, &hinted, IssueReason::Missing, hinted_until),
                Verdict::Issue(IssueReason::Retry)
            );
        }
    }

    // r[verify issue.block+2]
    #[test]
    fn a_block_holds_before_its_expiry_and_not_at_it() {
        let p = policy();
        let h = failed(&p, p.block_after, t(0));
        let until = t(0) + p.block_for;
        assert_eq!(block_until(&p, &h), Some(until));
        assert_eq!(blocked_at(&p, &h, until - NS), Some(until));
        assert_eq!(blocked_at(&p, &h, until), None);
        assert!(matches!(
            decide(&p, None, &h, Flags::default(), until - NS),
            Verdict::Blocked { until: u, .. } if u == until
        ));
        // At the expiry the one attempt is due (the streak's wait is shorter than the block).
        assert_eq!(
            decide(&p, None, &h, Flags::default(), until),
            Verdict::Issue(IssueReason::Retry)
        );
        // The threshold itself blocks; one short of it and one past it are as they should be.
        assert_eq!(block_until(&p, &failed(&p, p.block_after - 1, t(0))), None);
        assert_eq!(
            block_until(&p, &failed(&p, p.block_after + 1, t(0))),
            Some(until)
        );
        assert_eq!(block_until(&p, &History::for_key("a.example")), None);
    }

    // r[verify issue.block+2]
    #[test]
    fn a_block_has_an_expiry_and_a_manual_trigger_does_not_pass_it() {
        let p = policy();
        let h = failed(&p, p.block_after, t(0));
        let v = decide(&p, None, &h, Flags { manual: true }, t(60));
        let Verdict::Blocked {
            until,
            reason,
            clear,
        } = v
        else {
            panic!("blocked: {v:?}")
        };
        assert_eq!(until, t(0) + p.block_for);
        assert_eq!(
            reason,
            BlockReason::SustainedFailure {
                failures: p.block_after
            }
        );
        assert!(clear.contains("holdfast certs retry"));
        // One failure short of the threshold: only debounced.
        let h = failed(&p, p.block_after - 1, t(0));
        assert!(matches!(
            decide(&p, None, &h, Flags::default(), t(60)),
            Verdict::Debounced { .. }
        ));
        // Force-retry resets the streak: the block is gone and the next decision issues.
        let mut h = failed(&p, p.block_after, t(0));
        h.record_success();
        assert!(decide(&p, None, &h, Flags::default(), t(60)).is_issue());
    }

    #[test]
    fn policies_that_cannot_work_are_rejected() {
        let mut p = policy();
        p.block_after = 0;
        assert_eq!(p.validate(), Err(IssuePolicyError::BlockAfterZero));
        let mut p = policy();
        p.block_for = p.retry.cap() * 2;
        assert!(matches!(
            p.validate(),
            Err(IssuePolicyError::BlockFor { .. })
        ));
        assert!(policy().validate().is_ok());
    }

    // r[verify issue.pacing.defaults]
    #[test]
    fn defaults_stay_under_five_failed_validations_per_hour() {
        let p = policy();
        assert_eq!(p.retry.base(), Duration::from_secs(5 * 60));
        assert_eq!(p.retry.cap(), Duration::from_secs(6 * 3600));
        assert_eq!(p.retry.escalate_after(), 6);
        assert_eq!(p.retry.hint_cap(), Duration::from_secs(24 * 3600));
        assert_eq!(p.block_after, 6);
        assert_eq!(p.block_for, Duration::from_secs(6 * 3600));
        let mut h = History::for_key("a.example");
        let mut now = t(0);
        let mut attempts = Vec::new();
        while now < t(86400) {
            match decide(&p, None, &h, Flags::default(), now) {
                Verdict::Issue(_) => {
                    h.begin_attempt(&p.retry, now);
                    h.record_failure(&p.retry, now, None);
                    attempts.push(now);
                }
                Verdict::Blocked { until, .. } | Verdict::Debounced { until, .. } => {
                    assert!(until > now);
                }
                Verdict::Valid { .. } => panic!("no certificate"),
            }
            now += Duration::from_secs(60);
        }
        for (i, start) in attempts.iter().enumerate() {
            let within = attempts[i..]
                .iter()
                .take_while(|a| {
                    a.duration_since(*start).unwrap_or_default() < Duration::from_secs(3600)
                })
                .count();
            assert!(within < 5, "{within} failures in the hour from attempt {i}");
        }
        // Blocked after 6, then one attempt per block: about 9 in a day.
        assert!((8..=10).contains(&attempts.len()), "{}", attempts.len());
    }

    proptest! {
        // r[verify issue.block+2]
        #[test]
        fn no_outcome_sequence_blocks_forever(
            outcomes in proptest::collection::vec((any::<bool>(), 0u64..20_000, proptest::option::of(0u64..200_000)), 0..60),
            later in 0u64..100_000,
        ) {
            let p = policy();
            let mut h = History::for_key("a.example");
            let mut now = t(0);
            for (ok, gap, hint) in outcomes {
                now += Duration::from_secs(gap);
                h.begin_attempt(&p.retry, now);
                if ok {
                    h.record_success();
                } else {
                    h.record_failure(&p.retry, now, hint.map(Duration::from_secs));
                }
            }
            let probe = now + Duration::from_secs(later);
            if let Verdict::Blocked { until, .. } = decide(&p, None, &h, Flags::default(), probe) {
                // The block expires, at most block_for after the latest failure...
                prop_assert!(until > probe);
                prop_assert!(until <= now + p.block_for);
                // ... the wait after it is bounded by the policy's maximum ...
                let Some(last) = h.last_failure else { unreachable!() };
                let bound = last + p.block_for.max(p.retry.max_wait());
                prop_assert!(decide(&p, None, &h, Flags::default(), bound).is_issue());
                // ... and force-retry clears it at once.
                let mut forced = h;
                forced.record_success();
                prop_assert!(decide(&p, None, &forced, Flags::default(), probe).is_issue());
            }
        }
    }

    /// One case of the future-dated property; shared by the proptest and its regression cases.
    fn future_dated_case(
        failures: u32,
        ahead: u64,
        hint: Option<u64>,
        at: u64,
        spare: u64,
        manual: bool,
    ) -> Result<(), proptest::test_runner::TestCaseError> {
        let p = policy();
        let now = t(at);
        // Attempts stored by a clock that was ahead: the clock has since jumped back.
        let dated = now + Duration::from_secs(ahead);
        let mut h = History::for_key("a.example");
        for i in 0..failures {
            h.begin_attempt(&p.retry, dated);
            let last = i + 1 == failures;
            h.record_failure(
                &p.retry,
                dated,
                hint.filter(|_| last).map(Duration::from_secs),
            );
        }
        // The longest a failure now could hold the hostname back.
        let longest = p.block_for.max(p.retry.max_wait());
        // A certificate due for renewal now that expires only after that wait.
        let not_after = now + longest + Duration::from_secs(spare);
        let mut c = CertInfo::new(now - Duration::from_secs(90 * 86400), not_after);
        c.renew_at = now;
        let flags = Flags { manual };
        // The future-dated streak never holds it back before its date...
        prop_assert!(decide(&p, Some(&c), &h, flags, now).is_issue());
        let before = now + Duration::from_secs(ahead) - Duration::from_secs(1);
        prop_assert!(decide(&p, Some(&c), &h, Flags::default(), before).is_issue());
        // ...and the attempt that verdict starts, failing now, paces like any present-day
        // failure: never past the longest wait, nor past the certificate's expiry. (Not asserted:
        // that `until` itself issues; a block's end may still be inside the jittered wait.)
        h.begin_attempt(&p.retry, now);
        h.record_failure(&p.retry, now, hint.map(Duration::from_secs));
        match decide(&p, Some(&c), &h, Flags::default(), now) {
            Verdict::Blocked { until, .. } | Verdict::Debounced { until, .. } => {
                prop_assert!(until <= now + longest, "{until:?} > {:?}", now + longest);
                prop_assert!(until < not_after);
            }
            other => prop_assert!(false, "a failure now paces: {other:?}"),
        }
        prop_assert!(decide(&p, Some(&c), &h, Flags::default(), now + longest).is_issue());
        Ok(())
    }

    proptest! {
        // r[verify issue.decision.future]
        #[test]
        fn future_dated_attempts_never_hold_a_certificate_past_its_expiry(
            failures in 1u32..30,
            ahead in 1u64..(20 * 365 * 86400),
            hint in proptest::option::of(0u64..200_000),
            at in 0u64..(365 * 86400),
            spare in 1u64..(30 * 86400),
            manual in any::<bool>(),
        ) {
            future_dated_case(failures, ahead, hint, at, spare, manual)?;
        }
    }

    // r[verify issue.decision.future]
    #[test]
    fn a_future_dated_failure_within_the_longest_wait_is_not_read_as_a_past_one() {
        // The case the proptest once shrank to on CI.
        future_dated_case(1, 12211, Some(86400), 0, 1, false).unwrap();
    }

    // r[verify issue.decision.future]
    #[test]
    fn a_failure_dated_in_the_future_neither_debounces_nor_blocks() {
        let p = policy();
        let now = t(1000);
        let year = Duration::from_secs(365 * 86400);
        for n in [1, p.block_after] {
            let from_the_future = failed(&p, n, now + year);
            assert_eq!(
                decide(&p, None, &from_the_future, Flags::default(), now),
                Verdict::Issue(IssueReason::Retry)
            );
            assert_eq!(as_of(&from_the_future, now).failures, n);
            // Its failure, recorded at the present time, paces and blocks from now on.
            let mut h = from_the_future;
            h.begin_attempt(&p.retry, now);
            h.record_failure(&p.retry, now, None);
            let v = decide(&p, None, &h, Flags::default(), now);
            let until = match v {
                Verdict::Debounced { until, .. } | Verdict::Blocked { until, .. } => until,
                other => panic!("paced: {other:?}"),
            };
            assert!(until > now && until <= now + p.block_for.max(p.retry.max_wait()));
        }
        // A failure dated in the past, or at now itself, is untouched.
        let past = failed(&p, 2, t(0));
        assert_eq!(as_of(&past, now), past);
        assert_eq!(as_of(&past, t(0)), past);
    }

    // r[verify issue.expiry.fault]
    #[test]
    fn a_failing_renewal_within_seven_days_of_the_end_is_a_fault_and_past_it_expired() {
        let end = t(100 * 86400);
        let day = Duration::from_secs(86400);
        // Renewal not failing: never a fault, however close the end.
        assert_eq!(expiry_fault(end, 0, end - day), None);
        assert_eq!(expiry_fault(end, 0, end + day), None);
        // Failing, but more than 7 days left.
        assert_eq!(
            expiry_fault(end, 3, end - EXPIRY_WARNING - Duration::from_secs(1)),
            None
        );
        // Exactly 7 days left, and less.
        assert_eq!(
            expiry_fault(end, 1, end - EXPIRY_WARNING),
            Some(ExpiryFault::Expiring(EXPIRY_WARNING))
        );
        assert_eq!(
            expiry_fault(end, 2, end - day),
            Some(ExpiryFault::Expiring(day))
        );
        // The instant itself and after: expired.
        assert_eq!(
            expiry_fault(end, 1, end),
            Some(ExpiryFault::Expired(Duration::ZERO))
        );
        let late = expiry_fault(end, 1, end + day).unwrap();
        assert_eq!(late, ExpiryFault::Expired(day));
        assert_eq!(late.kind(), "expired");
        assert_eq!(ExpiryFault::Expiring(day).kind(), "expiring");
    }
}
