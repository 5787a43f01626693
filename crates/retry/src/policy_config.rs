//! A [`Policy`] as it is written in config: every setting optional, durations as text (`"5s"`),
//! validated over a caller's defaults with errors that name the offending key.

use std::fmt;
use std::time::Duration;

use crate::jitter::Jitter;
use crate::policy::{Policy, PolicyError};

/// The config form of a [`Policy`]: what is unset comes from the defaults given to
/// [`PolicyConfig::build`]. With feature `serde` it (de)serializes with durations written
/// `"250ms"`, `"5s"`, `"5m"`, `"1h"` and jitter as `"additive"`, `"full"`, `"equal"`,
/// `"decorrelated"` or `"none"`; unknown keys are rejected.
// r[impl retry.policy.config+2]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize, serde::Serialize),
    serde(deny_unknown_fields)
)]
pub struct PolicyConfig {
    /// The delay after the first failure.
    #[cfg_attr(
        feature = "serde",
        serde(
            default,
            with = "crate::duration_text::option",
            skip_serializing_if = "Option::is_none"
        )
    )]
    pub base: Option<Duration>,
    /// The largest nominal delay.
    #[cfg_attr(
        feature = "serde",
        serde(
            default,
            with = "crate::duration_text::option",
            skip_serializing_if = "Option::is_none"
        )
    )]
    pub cap: Option<Duration>,
    /// Escalate when a streak reaches this many consecutive failures.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub escalate_after: Option<u32>,
    /// The jitter strategy.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub jitter: Option<Jitter>,
    /// The largest server hint (Retry-After) honoured.
    #[cfg_attr(
        feature = "serde",
        serde(
            default,
            with = "crate::duration_text::option",
            skip_serializing_if = "Option::is_none"
        )
    )]
    pub hint_cap: Option<Duration>,
    /// How long an attempt may stay in flight before it counts as failed.
    #[cfg_attr(
        feature = "serde",
        serde(
            default,
            with = "crate::duration_text::option",
            skip_serializing_if = "Option::is_none"
        )
    )]
    pub stale_after: Option<Duration>,
}

/// A config that cannot become a policy: which key, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct PolicyConfigError {
    /// The config key at fault (`"base"`, `"cap"`, `"escalate_after"`, `"hint_cap"`,
    /// `"stale_after"`).
    pub key: &'static str,
    /// What is wrong with it.
    pub message: String,
}

impl fmt::Display for PolicyConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.message)
    }
}

impl PolicyConfig {
    /// The policy: `defaults` with what this config sets, seeded with `seed`, validated as
    /// [`crate::PolicyBuilder::build`] validates. A base above the cap names the key that the
    /// config set (`cap` if both or only it; `base` if only the base was set).
    // r[impl retry.policy.config+2]
    pub fn build(&self, defaults: &Policy, seed: u64) -> Result<Policy, PolicyConfigError> {
        let mut builder = Policy::builder()
            .base(self.base.unwrap_or(defaults.base()))
            .cap(self.cap.unwrap_or(defaults.cap()))
            .escalate_after(self.escalate_after.unwrap_or(defaults.escalate_after()))
            .jitter(self.jitter.unwrap_or(defaults.jitter()))
            .hint_cap(self.hint_cap.unwrap_or(defaults.hint_cap()))
            .stale_after(self.stale_after.unwrap_or(defaults.stale_after()));
        builder = builder.seed(seed);
        builder.build().map_err(|err| match err {
            PolicyError::Zero(key) => PolicyConfigError {
                key,
                message: "must be greater than zero".to_owned(),
            },
            PolicyError::TooLong { field, value } => PolicyConfigError {
                key: field,
                message: format!(
                    "{} exceeds the maximum of one year",
                    crate::duration_text::format(value)
                ),
            },
            PolicyError::BaseAboveCap { base, cap } => {
                let (base, cap) = (
                    crate::duration_text::format(base),
                    crate::duration_text::format(cap),
                );
                if self.cap.is_none() && self.base.is_some() {
                    PolicyConfigError {
                        key: "base",
                        message: format!("must be <= cap ({base} > {cap})"),
                    }
                } else {
                    PolicyConfigError {
                        key: "cap",
                        message: format!("must be >= base ({cap} < {base})"),
                    }
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    // r[verify retry.policy.config+2]
    #[test]
    fn unset_keys_come_from_the_defaults_and_errors_name_the_key() {
        let defaults = Policy::builder().base(S(10)).cap(S(300)).build().unwrap();
        let p = PolicyConfig::default().build(&defaults, 7).unwrap();
        assert_eq!(
            p,
            Policy::builder()
                .base(S(10))
                .cap(S(300))
                .seed(7)
                .build()
                .unwrap()
        );
        let p = PolicyConfig {
            cap: Some(S(60)),
            jitter: Some(Jitter::Full),
            ..Default::default()
        }
        .build(&defaults, 1)
        .unwrap();
        assert_eq!(
            (p.base(), p.cap(), p.jitter(), p.seed()),
            (S(10), S(60), Jitter::Full, 1)
        );

        let err = |c: PolicyConfig| c.build(&defaults, 0).unwrap_err().to_string();
        assert_eq!(
            err(PolicyConfig {
                cap: Some(S(5)),
                ..Default::default()
            }),
            "cap: must be >= base (5s < 10s)"
        );
        assert_eq!(
            err(PolicyConfig {
                base: Some(S(600)),
                ..Default::default()
            }),
            "base: must be <= cap (10m > 5m)"
        );
        // Both set: the cap is named, as the key the base is judged against.
        assert_eq!(
            err(PolicyConfig {
                base: Some(S(10)),
                cap: Some(S(5)),
                ..Default::default()
            }),
            "cap: must be >= base (5s < 10s)"
        );
        assert_eq!(
            err(PolicyConfig {
                escalate_after: Some(0),
                ..Default::default()
            }),
            "escalate_after: must be greater than zero"
        );
        assert_eq!(
            err(PolicyConfig {
                stale_after: Some(Duration::ZERO),
                ..Default::default()
            }),
            "stale_after: must be greater than zero"
        );
        assert_eq!(
            err(PolicyConfig {
                hint_cap: Some(S(400 * 86_400)),
                ..Default::default()
            }),
            "hint_cap: 400d exceeds the maximum of one year"
        );
    }

    // r[verify retry.policy.config+2]
    #[cfg(feature = "serde")]
    #[test]
    fn config_text_reads_durations_and_jitter_and_rejects_unknown_keys() {
        let c: PolicyConfig = serde_json::from_str(
            r#"{"base": "250ms", "cap": "5m", "escalate_after": 3, "jitter": "decorrelated",
                "hint_cap": "1h", "stale_after": "10m"}"#,
        )
        .unwrap();
        assert_eq!(
            c,
            PolicyConfig {
                base: Some(Duration::from_millis(250)),
                cap: Some(S(300)),
                escalate_after: Some(3),
                jitter: Some(Jitter::Decorrelated),
                hint_cap: Some(S(3600)),
                stale_after: Some(S(600)),
            }
        );
        let text = serde_json::to_string(&c).unwrap();
        assert_eq!(
            text,
            r#"{"base":"250ms","cap":"5m","escalate_after":3,"jitter":"decorrelated","hint_cap":"1h","stale_after":"10m"}"#
        );
        assert_eq!(serde_json::from_str::<PolicyConfig>(&text).unwrap(), c);
        assert_eq!(
            serde_json::from_str::<PolicyConfig>("{}").unwrap(),
            PolicyConfig::default()
        );
        assert_eq!(
            serde_json::to_string(&PolicyConfig::default()).unwrap(),
            "{}"
        );
        let unknown = serde_json::from_str::<PolicyConfig>(r#"{"bsae": "5s"}"#).unwrap_err();
        assert!(
            unknown.to_string().contains("unknown field `bsae`"),
            "{unknown}"
        );
        let bare = serde_json::from_str::<PolicyConfig>(r#"{"cap": "300"}"#).unwrap_err();
        assert!(
            bare.to_string()
                .contains("invalid duration: write a whole number and a unit"),
            "{bare}"
        );
        let jitter = serde_json::from_str::<PolicyConfig>(r#"{"jitter": "random"}"#).unwrap_err();
        assert!(
            jitter.to_string().contains("unknown variant `random`"),
            "{jitter}"
        );
    }
}
