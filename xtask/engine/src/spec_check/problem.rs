//! One thing the gate found wrong: its kind, where it is (file:line), which rule, and a message
//! that says exactly what to fix.

use std::cmp::Ordering;
use std::fmt;

use serde::Serialize;

/// What kind of problem; the kebab-case name is printed in brackets and in the JSON `kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// `.config/tracey/config.styx` is missing, cannot be parsed, or is unusable.
    Config,
    /// A spec markdown file cannot be read or parsed.
    SpecParse,
    /// Two rule definitions share an id (or a base id across versions).
    DuplicateRule,
    /// A rule has no `impl` reference.
    MissingImpl,
    /// A rule has no `verify` reference.
    MissingVerify,
    /// A reference names an older version of a rule.
    Stale,
    /// A reference names no rule of its spec.
    UnknownRule,
    /// A reference with an explicit verb uses a prefix no spec defines.
    UnknownPrefix,
    /// A `verify` annotation outside test code.
    VerifyOutsideTest,
    /// An `impl` annotation in test code.
    ImplInTest,
    /// A `verify` annotation in test code that precedes a function which is not a test.
    VerifyNotOnTest,
    /// A rule marker inside another rule's blockquote: it merged into that rule and defines nothing.
    MergedRule,
    /// A rule id that tracey accepts but the spec's conventions do not (uppercase).
    RuleId,
    /// `docs/audit/findings.md` is malformed or names a rule wrongly.
    Findings,
    /// A source file the config includes cannot be scanned.
    Unscannable,
    /// Test-backed mode: no test carrying the rule's `verify` ran and passed.
    NotVerifiedByTest,
    /// Test-backed mode: the results or the skip ledger cannot be used.
    TestResults,
    /// Test-backed mode: a file with `verify` annotations changed after the results were written.
    ResultsOutdated,
    /// Test-backed mode: a rule's tests passed, but its text, implementing items or tests changed
    /// since they ran (its fingerprint is not the one recorded for the run).
    EvidenceStale,
    /// `docs/audit/waivers.toml`: a waiver malformed, expired, or naming no rule.
    Waiver,
    /// A coverage count fell below `docs/audit/coverage-baseline.toml`, and no waiver covers it.
    Ratchet,
}

impl Kind {
    /// The kebab-case name used in all output formats.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Config => "config",
            Kind::SpecParse => "spec-parse",
            Kind::DuplicateRule => "duplicate-rule",
            Kind::MissingImpl => "missing-impl",
            Kind::MissingVerify => "missing-verify",
            Kind::Stale => "stale",
            Kind::UnknownRule => "unknown-rule",
            Kind::UnknownPrefix => "unknown-prefix",
            Kind::VerifyOutsideTest => "verify-outside-test",
            Kind::ImplInTest => "impl-in-test",
            Kind::VerifyNotOnTest => "verify-not-on-test",
            Kind::MergedRule => "merged-rule",
            Kind::RuleId => "rule-id",
            Kind::Findings => "findings",
            Kind::Unscannable => "unscannable",
            Kind::NotVerifiedByTest => "not-verified-by-test",
            Kind::TestResults => "test-results",
            Kind::ResultsOutdated => "results-outdated",
            Kind::EvidenceStale => "evidence-stale",
            Kind::Waiver => "waiver",
            Kind::Ratchet => "ratchet",
        }
    }
}

/// A problem, located at `file:line` (relative to the checked root) when it has a place.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// The kind of problem.
    pub kind: Kind,
    /// File relative to the root, with `/` separators.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// 1-based line in `file`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    /// The spec the problem counts against.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spec: Option<String>,
    /// The rule (or referenced rule id) concerned, with its marker, e.g. `r[retry.schedule+2]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// What is wrong and what to do.
    pub message: String,
}

impl Problem {
    /// A problem of `kind` with `message` and nothing else set yet.
    pub fn new(kind: Kind, message: impl Into<String>) -> Self {
        Self {
            kind,
            file: None,
            line: None,
            spec: None,
            rule: None,
            message: message.into(),
        }
    }

    /// Places the problem at `file:line`.
    pub fn at(mut self, file: impl Into<String>, line: usize) -> Self {
        self.file = Some(file.into());
        self.line = Some(line);
        self
    }

    /// Places the problem in `file` without a line.
    pub fn in_file(mut self, file: impl Into<String>) -> Self {
        self.file = Some(file.into());
        self
    }

    /// Counts the problem against `spec`.
    pub fn spec(mut self, spec: impl Into<String>) -> Self {
        self.spec = Some(spec.into());
        self
    }

    /// Names the rule concerned.
    pub fn rule(mut self, rule: impl Into<String>) -> Self {
        self.rule = Some(rule.into());
        self
    }

    /// Problems without a place first, then by file, line and kind.
    pub fn order(a: &Problem, b: &Problem) -> Ordering {
        (a.file.is_some(), &a.file, a.line, a.kind, &a.message).cmp(&(
            b.file.is_some(),
            &b.file,
            b.line,
            b.kind,
            &b.message,
        ))
    }
}

/// A problem is the gate's error type too: reading a tree or a results file can fail with one.
impl std::error::Error for Problem {}

/// `file:line: [kind] message`, or `file: [kind] message`, or `[kind] message`.
impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.file, self.line) {
            (Some(file), Some(line)) => write!(f, "{file}:{line}: ")?,
            (Some(file), None) => write!(f, "{file}: ")?,
            _ => {}
        }
        write!(f, "[{}] {}", self.kind.name(), self.message)
    }
}
