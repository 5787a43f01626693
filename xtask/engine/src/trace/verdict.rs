//! The verdict on a finding: closed when every rule it names is in the spec, implemented and
//! verified (and, given a run's results, verified by a test that ran and passed); regressed when a
//! verifying test failed; open otherwise — with every reason in words.

use crate::spec_check::test_backed::Outcome;

use super::rule_trace::{RuleState, RuleTrace};

/// A finding's verdict, worst last.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verdict {
    /// Every rule implemented and verified (and, with results, tested).
    Closed,
    /// A rule is missing, not in the spec yet, unimplemented, unverified or untested.
    Open,
    /// A verifying test failed.
    Regressed,
}

impl Verdict {
    /// The word printed.
    pub fn word(self) -> &'static str {
        match self {
            Verdict::Closed => "closed",
            Verdict::Open => "open",
            Verdict::Regressed => "regressed",
        }
    }
}

/// A verdict and why.
pub struct Judgement {
    /// The verdict.
    pub verdict: Verdict,
    /// One line per reason the finding is not closed (empty when closed).
    pub reasons: Vec<String>,
}

/// Judges a finding by its rules; `with_results` says whether test results were read.
// i[impl trace.verdict]
pub fn judge(rules: &[RuleTrace], with_results: bool) -> Judgement {
    let mut issues: Vec<(Verdict, String)> = Vec::new();
    for trace in rules {
        let marker = trace.named.marker();
        match &trace.state {
            RuleState::NotInSpec { .. } => {
                issues.push((Verdict::Open, format!("{marker} is not in the spec yet")));
            }
            RuleState::OtherVersion(rule) => issues.push((
                Verdict::Open,
                format!(
                    "{marker} is stale: the spec now defines {}; re-read the rule and update the \
                     finding",
                    rule.marker()
                ),
            )),
            RuleState::OtherPrefix(rule) => issues.push((
                Verdict::Open,
                format!(
                    "{marker} has the wrong prefix: the spec defines {}",
                    rule.marker()
                ),
            )),
            RuleState::Defined(defined) => {
                let only_stale = |any: bool| if any { " (only stale ones)" } else { "" };
                if !defined.impls.iter().any(|s| !s.stale) {
                    let stale = only_stale(!defined.impls.is_empty());
                    issues.push((
                        Verdict::Open,
                        format!("{marker} has no current impl annotation{stale}"),
                    ));
                }
                let current: Vec<_> = defined.verifies.iter().filter(|v| !v.site.stale).collect();
                if current.is_empty() {
                    let stale = only_stale(!defined.verifies.is_empty());
                    issues.push((
                        Verdict::Open,
                        format!("{marker} has no current verify annotation{stale}"),
                    ));
                    continue;
                }
                if !with_results {
                    continue;
                }
                let failed: Vec<&str> = current
                    .iter()
                    .filter(|v| v.fate == Some(Outcome::Failed))
                    .map(|v| v.test.as_deref().unwrap_or("?"))
                    .collect();
                if !failed.is_empty() {
                    issues.push((
                        Verdict::Regressed,
                        format!("{marker}: a verifying test failed: {}", failed.join(", ")),
                    ));
                } else if let Some(Outcome::Stale(why)) = current
                    .iter()
                    .find_map(|v| v.fate.as_ref().filter(|f| matches!(f, Outcome::Stale(_))))
                {
                    // Its tests passed, on a tree that is no longer this one.
                    issues.push((
                        Verdict::Open,
                        format!("{marker}: its test evidence is stale: {why}"),
                    ));
                } else if !current.iter().any(|v| v.fate == Some(Outcome::Passed)) {
                    issues.push((
                        Verdict::Open,
                        format!("{marker}: no verifying test ran and passed"),
                    ));
                }
            }
        }
    }
    Judgement {
        verdict: issues
            .iter()
            .map(|(verdict, _)| *verdict)
            .max()
            .unwrap_or(Verdict::Closed),
        reasons: issues.into_iter().map(|(_, reason)| reason).collect(),
    }
}
