//! Waivers and a ratchet: coverage may only go up.
//!
//! `docs/audit/waivers.toml` holds justified gaps — a rule, what is waived (`implemented`,
//! `verified`, `tested`, `proven`), why, and until when. `docs/audit/coverage-baseline.toml`
//! holds the counts per spec/impl row the workspace has reached (`spec-check --update-baseline`
//! writes it). [`check`] fails on a waiver that is malformed, expired or names no rule, and on a
//! count below the baseline that the live waivers do not cover; [`honour`] drops the review's
//! `coverage-down` problems that a live waiver covers. A tree without these files is not
//! ratcheted.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tracey_core::parse_rule_id;

use crate::model::tree::Tree as Source;
use crate::review::{self, Review};
use crate::spec_check::Tree;
use crate::spec_check::problem::{Kind, Problem};
use crate::spec_check::report::Outcome;

/// The waivers, root-relative.
pub const WAIVERS: &str = "docs/audit/waivers.toml";

/// The baseline of counts, root-relative.
pub const BASELINE: &str = "docs/audit/coverage-baseline.toml";

/// What a waiver excuses a rule from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum What {
    /// Having a current `impl` annotation.
    Implemented,
    /// Having a `verify` annotation.
    Verified,
    /// A verifying test that ran and passed (test-backed mode).
    Tested,
    /// A recorded proof that holds (`docs/audit/proof.md`).
    Proven,
}

impl What {
    /// The word, as written in the file and in the review's messages.
    pub fn word(self) -> &'static str {
        match self {
            What::Implemented => "implemented",
            What::Verified => "verified",
            What::Tested => "tested",
            What::Proven => "proven",
        }
    }
}

/// A waiver as the file writes it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    rule: String,
    waives: Vec<What>,
    why: String,
    until: toml::value::Datetime,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    waiver: Vec<toml::Spanned<Raw>>,
}

/// A live waiver: not expired, naming a rule the spec defines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiver {
    /// The rule's marker, e.g. `r[retry.schedule+2]`.
    pub rule: String,
    /// What it waives.
    pub waives: Vec<What>,
    /// Why.
    pub why: String,
    /// The last day it holds, `YYYY-MM-DD`.
    pub until: String,
    /// Its line in the file.
    pub line: usize,
}

/// The waivers read, and what is wrong with the others.
#[derive(Debug, Default)]
pub struct Waivers {
    /// Those that hold today.
    pub live: Vec<Waiver>,
    /// Malformed, expired, or naming no rule.
    pub problems: Vec<Problem>,
}

impl Waivers {
    /// Whether a live waiver excuses `marker` from `what`.
    pub fn covers(&self, marker: &str, what: What) -> bool {
        self.live
            .iter()
            .any(|w| w.rule == marker && w.waives.contains(&what))
    }
}

/// 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text.get(..offset)
        .map_or(1, |before| before.matches('\n').count() + 1)
}

/// Reads the waivers of `source` (none without the file), judged against the rules of `tree`
/// on `today` (`YYYY-MM-DD`, UTC): a waiver holds through its `until` day.
// i[impl spec-check.waivers]
pub fn waivers(source: &dyn Source, tree: &Tree, today: &str) -> Waivers {
    let mut out = Waivers::default();
    let path = source.root().join(WAIVERS);
    if !source.exists(&path) {
        return out;
    }
    let text = match source.read(&path) {
        Ok(text) => text,
        Err(err) => {
            out.problems.push(
                Problem::new(Kind::Waiver, format!("cannot read the waivers: {err}"))
                    .in_file(WAIVERS),
            );
            return out;
        }
    };
    let file: RawFile = match toml::from_str(&text) {
        Ok(file) => file,
        Err(err) => {
            let line = err.span().map_or(1, |span| line_of(&text, span.start));
            out.problems.push(
                Problem::new(
                    Kind::Waiver,
                    format!(
                        "malformed waivers: {}; each `[[waiver]]` has rule = \"r[ID]\", waives = \
                         [\"implemented\" | \"verified\" | \"tested\" | \"proven\"], why = \"…\" \
                         and until = YYYY-MM-DD",
                        err.message()
                    ),
                )
                .at(WAIVERS, line),
            );
            return out;
        }
    };
    for spanned in file.waiver {
        let line = line_of(&text, spanned.span().start);
        let raw = spanned.into_inner();
        if let Some(problem) = judge(&raw, tree, today) {
            out.problems.push(problem.at(WAIVERS, line));
            continue;
        }
        out.live.push(Waiver {
            rule: raw.rule.trim().to_owned(),
            waives: raw.waives,
            why: raw.why,
            until: raw.until.to_string(),
            line,
        });
    }
    out
}

/// What is wrong with one waiver, if anything (placed by the caller).
// i[impl spec-check.waivers]
fn judge(raw: &Raw, tree: &Tree, today: &str) -> Option<Problem> {
    let problem = |message: String| Some(Problem::new(Kind::Waiver, message).rule(raw.rule.trim()));
    let Some(date) = raw.until.date.filter(|_| raw.until.time.is_none()) else {
        return problem(format!(
            "the waiver of {} has until = {}: give a date (YYYY-MM-DD)",
            raw.rule, raw.until
        ));
    };
    if raw.waives.is_empty() || raw.why.trim().is_empty() {
        return problem(format!(
            "the waiver of {} says nothing it waives or no reason why",
            raw.rule
        ));
    }
    let marker = raw.rule.trim();
    let parsed = marker
        .split_once('[')
        .and_then(|(prefix, rest)| Some((prefix, parse_rule_id(rest.strip_suffix(']')?)?)));
    let Some((prefix, id)) = parsed else {
        return problem(format!(
            "the waiver's rule `{marker}` is not a rule marker such as r[area.topic]"
        ));
    };
    match tree
        .rules
        .iter()
        .find(|r| r.prefix == prefix && r.id.base == id.base)
    {
        None => {
            return problem(format!(
                "the waiver names {marker}, which no spec defines: remove the waiver or fix the id"
            ));
        }
        Some(rule) if rule.id != id => {
            return problem(format!(
                "the waiver names {marker}, but the spec defines {}: judge the gap against the \
                 rule's new text and name its current version",
                rule.marker()
            ));
        }
        Some(_) => {}
    }
    let until = format!("{:04}-{:02}-{:02}", date.year, date.month, date.day);
    (until.as_str() < today).then(|| {
        Problem::new(
            Kind::Waiver,
            format!(
                "the waiver of {marker} expired on {until} (why: {}): close the gap, or renew \
                 the waiver with a reason and a new date",
                raw.why.trim()
            ),
        )
        .rule(marker)
    })
}

/// A spec/impl row's counts, as the baseline records them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Counts {
    /// Rules defined (shown, not ratcheted: a rule may be removed).
    pub rules: usize,
    /// Rules with a current `impl` annotation.
    pub implemented: usize,
    /// Rules with a `verify` annotation.
    pub verified: usize,
    /// Rules with a verifying test that ran and passed (test-backed runs only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tested: Option<usize>,
    /// Rules whose checked-in proof holds.
    pub proven: usize,
}

/// Per rule of a row: its marker and whether it is implemented, verified, tested, proven.
type Flags = Vec<(String, [bool; 4])>;

/// The counts per spec/impl row of `tree`, with the flags per rule behind them. In test-backed
/// mode a rule with a `verify` annotation counts as tested unless the gate found it not verified
/// by a test (with `--crate`, the rules it did not judge by results count by their annotations,
/// as the gate's own tested count does not).
// i[impl spec-check.ratchet]
fn rows(source: &dyn Source, tree: &Tree, outcome: &Outcome) -> BTreeMap<String, (Counts, Flags)> {
    let proofs = crate::model::proof_summary::by_id(source);
    let mut rows = BTreeMap::new();
    for analysis in &tree.analyses {
        let name = analysis.summary.name.clone();
        let tested = outcome
            .specs
            .iter()
            .find(|s| s.name == name)
            .and_then(|s| s.tested);
        let mut flags = Flags::new();
        for coverage in &analysis.rules {
            let marker = coverage.rule.marker();
            let stale = coverage
                .impl_sites
                .iter()
                .chain(&coverage.verify_sites)
                .any(|s| s.stale);
            let untested = outcome.problems.iter().any(|p| {
                p.kind == Kind::NotVerifiedByTest && p.rule.as_deref() == Some(marker.as_str())
            });
            flags.push((
                marker,
                [
                    !stale && !coverage.impl_sites.is_empty(),
                    !coverage.verify_sites.is_empty(),
                    tested.is_some() && !untested && !coverage.verify_sites.is_empty(),
                    proofs
                        .get(&coverage.rule.id.to_string())
                        .is_some_and(crate::model::proof::Proof::proven),
                ],
            ));
        }
        let count = |i: usize| flags.iter().filter(|(_, f)| f[i]).count();
        let counts = Counts {
            rules: flags.len(),
            implemented: count(0),
            verified: count(1),
            tested: tested.map(|_| count(2)),
            proven: count(3),
        };
        rows.insert(name, (counts, flags));
    }
    rows
}

/// The baseline file for the counts of `tree` now (`spec-check --update-baseline`).
// i[impl spec-check.ratchet]
pub fn baseline(source: &dyn Source, tree: &Tree, outcome: &Outcome) -> String {
    let counts: BTreeMap<String, Counts> = rows(source, tree, outcome)
        .into_iter()
        .map(|(name, (counts, _))| (name, counts))
        .collect();
    let body = toml::to_string(&counts).unwrap_or_default();
    format!(
        "# The coverage per spec/impl row this workspace has reached: `cargo xtask spec-check`\n\
         # fails when a count falls below it and no waiver (docs/audit/waivers.toml) covers the\n\
         # rules that lost it. Written by `cargo xtask spec-check --update-baseline`; rewrite it\n\
         # when coverage goes up, and say why in the commit when it goes down.\n\n{body}"
    )
}

/// The waivers' problems and the ratchet's: each count of a baseline row below the baseline
/// once every live waiver of a rule of that row lacking it is counted back.
// i[impl spec-check.ratchet]
// i[impl spec-check.waivers]
pub fn check(source: &dyn Source, tree: &Tree, outcome: &Outcome, today: &str) -> Vec<Problem> {
    let waivers = waivers(source, tree, today);
    let mut problems = waivers.problems.clone();
    let path = source.root().join(BASELINE);
    if !source.exists(&path) {
        return problems;
    }
    let baseline: BTreeMap<String, Counts> = match source
        .read(&path)
        .map_err(|err| err.to_string())
        .and_then(|text| toml::from_str(&text).map_err(|err| err.message().to_owned()))
    {
        Ok(baseline) => baseline,
        Err(err) => {
            problems.push(
                Problem::new(
                    Kind::Ratchet,
                    format!(
                        "unusable baseline: {err}; rewrite it with `cargo xtask spec-check \
                         --update-baseline`"
                    ),
                )
                .in_file(BASELINE),
            );
            return problems;
        }
    };
    let now = rows(source, tree, outcome);
    for (name, was) in &baseline {
        let Some((counts, flags)) = now.get(name) else {
            problems.push(
                Problem::new(
                    Kind::Ratchet,
                    format!(
                        "the baseline has a row `{name}` the tree no longer has; if the spec or \
                         impl was removed or renamed on purpose, rewrite the baseline with \
                         `cargo xtask spec-check --update-baseline`"
                    ),
                )
                .in_file(BASELINE)
                .spec(name),
            );
            continue;
        };
        let measures = [
            (
                What::Implemented,
                Some(was.implemented),
                Some(counts.implemented),
                0,
            ),
            (What::Verified, Some(was.verified), Some(counts.verified), 1),
            (What::Tested, was.tested, counts.tested, 2),
            (What::Proven, Some(was.proven), Some(counts.proven), 3),
        ];
        for (what, before, after, index) in measures {
            let (Some(before), Some(after)) = (before, after) else {
                continue;
            };
            let lacking: Vec<&str> = flags
                .iter()
                .filter(|(_, f)| !f[index])
                .map(|(marker, _)| marker.as_str())
                .collect();
            let waived = lacking
                .iter()
                .filter(|marker| waivers.covers(marker, what))
                .count();
            if after + waived < before {
                let unwaived: Vec<&str> = lacking
                    .iter()
                    .copied()
                    .filter(|marker| !waivers.covers(marker, what))
                    .take(10)
                    .collect();
                problems.push(
                    Problem::new(
                        Kind::Ratchet,
                        format!(
                            "{name}: {after} rules {} (and {waived} waived), below the \
                             baseline's {before}; not {} now and not waived: {}",
                            what.word(),
                            what.word(),
                            unwaived.join(", ")
                        ),
                    )
                    .in_file(BASELINE)
                    .spec(name),
                );
            }
        }
    }
    problems
}

/// Drops the review's `coverage-down` problems of rules whose every loss a live waiver covers.
// i[impl spec-check.waivers]
pub fn honour(review: &mut Review, waivers: &Waivers) {
    review.problems.retain(|p| {
        p.kind != review::Kind::CoverageDown
            || p.lost.is_empty()
            || !p.lost.iter().all(|lost| {
                [What::Implemented, What::Verified, What::Proven]
                    .into_iter()
                    .find(|w| w.word() == *lost)
                    .is_some_and(|what| waivers.covers(&p.rule, what))
            })
    });
}

#[cfg(test)]
mod tests;
