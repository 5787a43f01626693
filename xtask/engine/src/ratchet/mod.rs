//! Waivers and a ratchet: coverage may only go up.
//!
//! `docs/audit/waivers.toml` holds justified gaps — a rule, what is waived (`implemented`,
//! `verified`, `tested`, `proven`), why, and until when. `docs/audit/coverage-baseline.toml`
//! holds the counts per spec/impl row the workspace has reached (`spec-check --update-baseline`
//! writes it). [`check`] fails on a waiver that is malformed, expired or names no rule, and on a
//! count below the baseline that the live waivers do not cover; [`honour`] drops the review's
//! `coverage-down` problems that a live waiver covers. A tree without these files is not
//! ratcheted.

use crate::spec_check::levels::Level;
use crate::spec_check::measures::Has;
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

/// How far ahead a waiver's `until` may be, as the problem says it.
const MAX_HORIZON: &str = "a year of today";

/// What a waiver excuses a rule from: a measure ([`crate::spec_check::levels::Measure`]).
pub use crate::spec_check::levels::Measure as What;

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
    /// Whether a live waiver excuses `marker` from `what`: how a waiver covers a loss in the
    /// ratchet and in the review.
    // i[impl spec-check.waivers]
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
        // The spec's form of the marker (`r[x+1]` is `r[x]`), which `covers` compares.
        let rule = canonical(raw.rule.trim()).unwrap_or_else(|| raw.rule.trim().to_owned());
        out.live.push(Waiver {
            rule,
            waives: raw.waives,
            why: raw.why,
            until: raw.until.to_string(),
            line,
        });
    }
    out
}

/// A marker in the spec's form: the version written only when above 1.
fn canonical(marker: &str) -> Option<String> {
    let (prefix, rest) = marker.split_once('[')?;
    let id = parse_rule_id(rest.strip_suffix(']')?)?;
    Some(format!("{prefix}[{id}]"))
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
        .rules()
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
    // A waiver is a debt with a date: at most a year ahead, so it is judged again.
    let horizon = today
        .split_once('-')
        .and_then(|(year, rest)| Some(format!("{:04}-{rest}", year.parse::<u32>().ok()? + 1)));
    if horizon.is_some_and(|horizon| until > horizon) {
        return problem(format!(
            "the waiver of {marker} runs until {until}, more than a year ahead: give a date \
             within {MAX_HORIZON}, and renew it then if the gap still stands"
        ));
    }
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

/// A spec/impl row as the baseline records it: its rule count and, per measure, the markers of
/// the rules that have it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Row {
    /// Rules defined (shown, not ratcheted: a rule may be removed).
    pub rules: usize,
    /// Rules with a current `impl` annotation.
    pub implemented: Vec<String>,
    /// Rules with a `verify` annotation.
    pub verified: Vec<String>,
    /// Rules with a verifying test that ran and passed (test-backed runs only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tested: Option<Vec<String>>,
    /// Rules whose checked-in proof holds.
    pub proven: Vec<String>,
    /// The level of each rule below MUST when the baseline was written (a rule not listed was
    /// MUST): a loss is judged by the stricter of this level and the rule's level now, so lowering
    /// a level excuses no loss.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub levels: BTreeMap<String, String>,
}

impl Row {
    /// The markers that have `what`, `None` when the row does not record it.
    fn having(&self, what: What) -> Option<&[String]> {
        match what {
            What::Implemented => Some(&self.implemented),
            What::Verified => Some(&self.verified),
            What::Tested => self.tested.as_deref(),
            What::Proven => Some(&self.proven),
        }
    }
}

/// The measures, in the baseline's order.
const MEASURES: [What; 4] = [
    What::Implemented,
    What::Verified,
    What::Tested,
    What::Proven,
];

/// Per rule of a row: the rule and what it has.
type Flags = Vec<(crate::spec_check::rules::Rule, Has)>;

/// The rows of `tree` now, with whether each was judged by test results and the flags per rule
/// ([`crate::spec_check::measures`], the review's too). In test-backed mode a rule with a `verify`
/// annotation counts as tested unless the run judged it and none of its tests passed (with
/// `--crate`, the rules it did not judge by results count by their annotations, which is why
/// `--update-baseline` refuses `--crate`).
// i[impl spec-check.ratchet]
fn rows(source: &dyn Source, tree: &Tree, outcome: &Outcome) -> BTreeMap<String, (bool, Flags)> {
    crate::spec_check::measures::rows(source, tree, outcome)
        .into_iter()
        .map(|row| {
            let flags = row
                .rules
                .into_iter()
                .map(|(coverage, has)| (coverage.rule.clone(), has))
                .collect();
            (row.name, (row.test_backed, flags))
        })
        .collect()
}

/// The previous baseline of `source`, `None` when there is none or it cannot be read.
fn previous(source: &dyn Source) -> Option<BTreeMap<String, Row>> {
    let text = source.read(&source.root().join(BASELINE)).ok()?;
    toml::from_str(&text).ok()
}

/// The baseline file for `tree` now (`spec-check --update-baseline`). A run without test
/// results keeps the tested markers the previous baseline recorded for the row.
// i[impl spec-check.ratchet]
pub fn baseline(source: &dyn Source, tree: &Tree, outcome: &Outcome) -> String {
    let before = previous(source).unwrap_or_default();
    let rows: BTreeMap<String, Row> = rows(source, tree, outcome)
        .into_iter()
        .map(|(name, (tested, flags))| {
            let having = |what: What| -> Vec<String> {
                flags
                    .iter()
                    .filter(|(_, has)| has.of(what))
                    .map(|(rule, _)| rule.marker())
                    .collect()
            };
            let row = Row {
                rules: flags.len(),
                implemented: having(What::Implemented),
                verified: having(What::Verified),
                tested: if tested {
                    Some(having(What::Tested))
                } else {
                    before.get(&name).and_then(|row| row.tested.clone())
                },
                proven: having(What::Proven),
                levels: flags
                    .iter()
                    .map(|(rule, _)| (rule.marker(), Level::of(rule)))
                    .filter(|(_, level)| *level != Level::Must)
                    .map(|(marker, level)| (marker, level.name().to_owned()))
                    .collect(),
            };
            (name, row)
        })
        .collect();
    let body = toml::to_string_pretty(&rows).unwrap_or_default();
    format!(
        "# The coverage per spec/impl row this workspace has reached: per measure, the rules that\n\
         # have it. `cargo xtask spec-check` fails when one of them no longer has it and no waiver\n\
         # (docs/audit/waivers.toml) covers that. Written by `cargo xtask spec-check\n\
         # --update-baseline`; rewrite it when coverage goes up, and say why in the commit when\n\
         # it goes down.\n\n{body}"
    )
}

/// The rule of `flags` that a baseline `marker` names now: the same id at any version, else
/// the rule that names the id as its previous one; `None` when the rule was removed.
// i[impl spec-check.ratchet]
fn now_of<'f>(flags: &'f Flags, marker: &str) -> Option<&'f (crate::spec_check::rules::Rule, Has)> {
    let (prefix, rest) = marker.split_once('[')?;
    let id = parse_rule_id(rest.strip_suffix(']')?)?;
    flags
        .iter()
        .find(|(rule, _)| rule.prefix == prefix && rule.id.base == id.base)
        .or_else(|| {
            flags.iter().find(|(rule, _)| {
                rule.prefix == prefix
                    && review::rule_text(rule)
                        .1
                        .iter()
                        .filter_map(|was| parse_rule_id(was))
                        .any(|was| was.base == id.base)
            })
        })
}

/// 1-based line of `marker` in the `what` list of the row `name` of the baseline `text`, else
/// (or for an empty `marker`) of the row's header, else 1.
fn baseline_line(text: &str, name: &str, what: What, marker: &str) -> usize {
    let header = [format!("[{name}]"), format!("[\"{name}\"]")]
        .into_iter()
        .find_map(|h| {
            text.match_indices(&h)
                .find(|(at, _)| *at == 0 || text[..*at].ends_with('\n'))
                .map(|(at, _)| at)
        });
    let Some(header) = header else {
        return 1;
    };
    let list = text[header..]
        .find(&format!("\n{} = [", what.word()))
        .map(|at| header + at);
    let at = list
        .filter(|_| !marker.is_empty())
        .and_then(|list| {
            text[list..]
                .find(&format!("\"{marker}\""))
                .map(|at| list + at)
        })
        .unwrap_or(header);
    line_of(text, at)
}

/// A live waiver of a measure its rule has now (tested only judged in a test-backed run): the gap
/// closed, so the waiver is to be removed before it hides a later loss.
// i[impl spec-check.waivers]
fn unneeded(waivers: &Waivers, now: &BTreeMap<String, (bool, Flags)>) -> Vec<Problem> {
    let mut out = Vec::new();
    for waiver in &waivers.live {
        for (tested, flags) in now.values() {
            let Some((_, has)) = flags.iter().find(|(rule, _)| rule.marker() == waiver.rule) else {
                continue;
            };
            let closed: Vec<&str> = MEASURES
                .iter()
                .filter(|what| {
                    waiver.waives.contains(what)
                        && has.of(**what)
                        && (**what != What::Tested || *tested)
                })
                .map(|what| what.word())
                .collect();
            if !closed.is_empty() {
                out.push(
                    Problem::new(
                        Kind::Waiver,
                        format!(
                            "the waiver of {} is not needed: the rule is {} now; remove it (or \
                             what it waives that holds)",
                            waiver.rule,
                            closed.join(" and ")
                        ),
                    )
                    .at(WAIVERS, waiver.line)
                    .rule(&waiver.rule),
                );
            }
        }
    }
    out
}

/// Whether the ratchet judges the loss of `what` by `rule` (the baseline's `marker` in its row
/// `was`): by the stricter of its level now and the level the baseline recorded (a rule the
/// baseline does not list below MUST was MUST).
// i[impl spec-check.levels]
fn demanded(rule: &crate::spec_check::rules::Rule, was: &Row, marker: &str, what: What) -> bool {
    let was_level = was
        .levels
        .get(marker)
        .and_then(|name| Level::named(name))
        .unwrap_or(Level::Must);
    Level::of(rule).demands().or(was_level.demands()).of(what)
}

/// The waivers' problems and the ratchet's (`ratchet`), judged with the live waivers.
// i[impl spec-check.waivers]
pub fn check(source: &dyn Source, tree: &Tree, outcome: &Outcome, today: &str) -> Vec<Problem> {
    let waivers = waivers(source, tree, today);
    let now = rows(source, tree, outcome);
    let mut problems = waivers.problems.clone();
    problems.extend(unneeded(&waivers, &now));
    problems.extend(ratchet(source, &now, &waivers));
    problems
}

/// The ratchet's problems: each rule a baseline row records as having a measure that (under its
/// id now, or the id that renamed it) lacks it now, unless a live waiver covers that or its
/// level does not demand it; a rule since removed is skipped, a rule added is not judged; and
/// the coverage `now` has that the baseline does not record.
// i[impl spec-check.ratchet]
fn ratchet(
    source: &dyn Source,
    now: &BTreeMap<String, (bool, Flags)>,
    waivers: &Waivers,
) -> Vec<Problem> {
    let mut problems = Vec::new();
    let path = source.root().join(BASELINE);
    if !source.exists(&path) {
        return problems;
    }
    let read = source.read(&path).map_err(|err| err.to_string());
    let (text, baseline) = match read.and_then(|text| {
        toml::from_str::<BTreeMap<String, Row>>(&text)
            .map(|rows| (text, rows))
            .map_err(|err| err.message().to_owned())
    }) {
        Ok(read) => read,
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
    for (name, was) in &baseline {
        let Some((tested, flags)) = now.get(name) else {
            problems.push(
                Problem::new(
                    Kind::Ratchet,
                    format!(
                        "the baseline has a row `{name}` the tree no longer has; if the spec or \
                         impl was removed or renamed on purpose, rewrite the baseline with \
                         `cargo xtask spec-check --update-baseline`"
                    ),
                )
                .at(BASELINE, baseline_line(&text, name, What::Implemented, ""))
                .spec(name),
            );
            continue;
        };
        for what in MEASURES {
            if what == What::Tested && !tested {
                continue;
            }
            // The rules now that the baseline records as having the measure.
            let mut recorded = std::collections::BTreeSet::new();
            for marker in was.having(what).unwrap_or_default() {
                let Some((rule, has)) = now_of(flags, marker) else {
                    continue;
                };
                let current = rule.marker();
                recorded.insert(current.clone());
                // Neither a waived loss nor one of what the rule's level does not demand.
                if has.of(what)
                    || waivers.covers(&current, what)
                    || !demanded(rule, was, marker, what)
                {
                    continue;
                }
                let renamed = if current == *marker {
                    String::new()
                } else {
                    format!(" (the baseline's {marker})")
                };
                problems.push(
                    Problem::new(
                        Kind::Ratchet,
                        format!(
                            "{name}: {current}{renamed} was {word} at the baseline and is no \
                             longer; restore it, or waive it in {WAIVERS} (waives = [\"{word}\"]) \
                             with a reason and a date",
                            word = what.word(),
                        ),
                    )
                    .at(BASELINE, baseline_line(&text, name, what, marker))
                    .spec(name)
                    .rule(&current),
                );
            }
            // Slack is lag: coverage the baseline does not record could be lost unnoticed.
            // Tested is left out: it is the run's, and a run of some crates counts more.
            let unrecorded: Vec<String> = flags
                .iter()
                .filter(|(_, has)| has.of(what))
                .map(|(rule, _)| rule.marker())
                .filter(|marker| !recorded.contains(marker))
                .collect();
            if what != What::Tested && !unrecorded.is_empty() {
                let shown: Vec<&str> = unrecorded.iter().take(10).map(String::as_str).collect();
                let more = unrecorded.len() - shown.len();
                problems.push(
                    Problem::new(
                        Kind::Ratchet,
                        format!(
                            "{name}: {} rules are {} that the baseline does not record ({}{}): \
                             record them with `cargo xtask spec-check --update-baseline` so that \
                             the ratchet holds them",
                            unrecorded.len(),
                            what.word(),
                            shown.join(", "),
                            if more > 0 {
                                format!(" and {more} more")
                            } else {
                                String::new()
                            },
                        ),
                    )
                    .at(BASELINE, baseline_line(&text, name, what, ""))
                    .spec(name),
                );
            }
        }
    }
    problems
}

/// The waivers of `source` as written, keyed by rule (none when unreadable).
fn raw_waivers(source: &dyn Source) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let Ok(text) = source.read(&source.root().join(WAIVERS)) else {
        return out;
    };
    let Ok(file) = toml::from_str::<RawFile>(&text) else {
        return out;
    };
    for raw in file.waiver.into_iter().map(toml::Spanned::into_inner) {
        let waives: Vec<&str> = raw.waives.iter().map(|w| w.word()).collect();
        out.entry(raw.rule.trim().to_owned())
            .or_default()
            .push(format!(
                "waives {} until {}: {}",
                waives.join(", "),
                raw.until,
                raw.why.trim()
            ));
    }
    out
}

/// What a change did to the waivers and the baseline, from `base` to `head`, one line each: a
/// waiver added, changed or removed, and each rule a baseline row no longer records as having a
/// measure (a lowered baseline), for the review to show.
// i[impl spec-check.ratchet]
// i[impl spec-check.waivers]
pub fn changes(base: &dyn Source, head: &dyn Source) -> Vec<String> {
    let mut out = Vec::new();
    let (was, now) = (raw_waivers(base), raw_waivers(head));
    for (rule, terms) in &now {
        match was.get(rule) {
            None => out.push(format!("waiver added: {rule} {}", terms.join("; "))),
            Some(before) if before != terms => out.push(format!(
                "waiver changed: {rule} {} (was: {})",
                terms.join("; "),
                before.join("; ")
            )),
            Some(_) => {}
        }
    }
    for (rule, terms) in &was {
        if !now.contains_key(rule) {
            out.push(format!("waiver removed: {rule} ({})", terms.join("; ")));
        }
    }
    let (was, now) = (
        previous(base).unwrap_or_default(),
        previous(head).unwrap_or_default(),
    );
    for (name, before) in &was {
        let after = now.get(name);
        for what in MEASURES {
            // By id without version: a bumped rule re-recorded is not a lowering.
            let base_of = |marker: &String| {
                let (prefix, rest) = marker.split_once('[')?;
                let id = parse_rule_id(rest.strip_suffix(']')?)?;
                Some(format!("{prefix}[{}]", id.base))
            };
            let kept: std::collections::BTreeSet<Option<String>> = after
                .and_then(|row| row.having(what))
                .unwrap_or_default()
                .iter()
                .map(base_of)
                .collect();
            for marker in before.having(what).unwrap_or_default() {
                if !kept.contains(&base_of(marker)) {
                    out.push(format!(
                        "baseline lowered: {name} no longer records {marker} as {}",
                        what.word()
                    ));
                }
            }
        }
    }
    out
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
