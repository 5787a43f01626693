//! Matches references to rules and counts per spec exactly like `tracey query status` (1.3.0):
//!
//! - `total`: the spec's rules;
//! - `stale`: rules with at least one reference (impl or verify) to an older version;
//! - `implemented`: rules that are not stale and have an `impl` (or `define`) reference;
//! - `verified`: rules with a `verify` reference, current or stale.
//!
//! References count from every file tracey scans for the impl (`include` and `test_include`),
//! wherever in the file they sit. Every gap also becomes a problem.
//!
//! Test code: tracey's only notion is "a file matching `test_include`" (it flags `impl` there and
//! never checks where `verify` sits). Our unit tests live in `#[cfg(test)]` modules inside `src/`,
//! so the gate also treats those as test code — for its own `verify-outside-test` and
//! `impl-in-test` problems only; the counts above never depend on it, so they stay equal to
//! tracey's.

use std::path::PathBuf;

use serde::Serialize;
use tracey_config::{Impl, SpecConfig};
use tracey_core::{RefVerb, ReqReference, RuleIdMatch, classify_reference_for_rule};

use super::problem::{Kind, Problem};
use super::rules::Rule;
use super::sources::{ParsedFiles, Scanned};
use super::suggest;

/// One row of the table: a spec (or `spec/impl` when a spec has several impls).
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// The spec's name.
    pub name: String,
    /// Rules defined.
    pub total: usize,
    /// Rules with a current `impl` reference and no stale one.
    pub implemented: usize,
    /// Rules with a `verify` reference.
    pub verified: usize,
    /// Rules with a stale reference.
    pub stale: usize,
    /// Problems counted against the spec.
    pub errors: usize,
    /// Test-backed mode only: rules with a verifying test that ran and passed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tested: Option<usize>,
}

/// Where a reference sits.
#[derive(Debug, Clone)]
pub struct Site {
    /// Canonical path.
    pub path: PathBuf,
    /// Root-relative path for messages.
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// Whether the reference names an older version of the rule it matched.
    pub stale: bool,
}

/// A rule and the `impl` and `verify` annotations that name it.
pub struct RuleCoverage {
    /// The rule.
    pub rule: Rule,
    /// Its `impl` (and `define`) references (current or stale).
    pub impl_sites: Vec<Site>,
    /// Its `verify` references (current or stale).
    pub verify_sites: Vec<Site>,
}

/// Everything the gate knows about one spec/impl pair.
pub struct Analysis {
    /// The spec's name (problems count against it).
    pub spec: String,
    /// The spec's marker prefix, when it has rules.
    pub prefix: Option<String>,
    /// The table row.
    pub summary: Summary,
    /// Rules with their verify sites (for test-backed verification).
    pub rules: Vec<RuleCoverage>,
    /// Problems found.
    pub problems: Vec<Problem>,
}

/// What references one rule has, as tracey tallies them.
#[derive(Default)]
struct Tally {
    /// An `impl` or `define` reference, current or stale.
    implemented: bool,
    /// A `verify` reference, current or stale.
    verified: bool,
    /// An `impl`, `define` or `verify` reference to an older version.
    stale: bool,
}

/// Counts and checks `implementation` of `spec`.
// i[impl spec-check.counts]
// i[impl spec-check.missing]
pub fn analyse(
    spec: &SpecConfig,
    implementation: &Impl,
    rules: &[Rule],
    prefix: Option<&str>,
    scanned: &Scanned,
    parsed: &ParsedFiles,
) -> Analysis {
    let name = if spec.impls.len() > 1 {
        format!("{}/{}", spec.name, implementation.name)
    } else {
        spec.name.clone()
    };
    let mut problems = Vec::new();
    let mut coverage: Vec<(RuleCoverage, Tally)> = rules
        .iter()
        .map(|rule| {
            let entry = RuleCoverage {
                rule: rule.clone(),
                impl_sites: Vec::new(),
                verify_sites: Vec::new(),
            };
            (entry, Tally::default())
        })
        .collect();

    for path in &scanned.files {
        let Some(file) = parsed.files.get(path) else {
            continue;
        };
        for reference in &file.refs {
            if Some(reference.prefix.as_str()) != prefix {
                continue;
            }
            let site = Site {
                path: path.clone(),
                file: file.relative.clone(),
                line: reference.line,
                stale: false,
            };
            let mut matched = None;
            for (entry, tally) in &mut coverage {
                let kind = classify_reference_for_rule(&entry.rule.id, &reference.req_id);
                if kind == RuleIdMatch::NoMatch {
                    continue;
                }
                let is_stale = kind == RuleIdMatch::Stale;
                match reference.verb {
                    RefVerb::Impl | RefVerb::Define => {
                        tally.implemented = true;
                        tally.stale |= is_stale;
                        entry.impl_sites.push(Site {
                            stale: is_stale,
                            ..site.clone()
                        });
                    }
                    RefVerb::Verify => {
                        tally.verified = true;
                        tally.stale |= is_stale;
                        entry.verify_sites.push(Site {
                            stale: is_stale,
                            ..site.clone()
                        });
                    }
                    RefVerb::Depends | RefVerb::Related => {}
                }
                matched = Some((entry.rule.clone(), is_stale));
            }
            match matched {
                Some((rule, true)) => {
                    problems.push(stale_problem(reference, &rule, &site, &spec.name))
                }
                Some((_, false)) => {}
                None => problems.push(unknown_rule(reference, rules, &site, &spec.name)),
            }
            problems.extend(placement_problem(
                reference, &site, scanned, parsed, &spec.name,
            ));
        }
    }

    let mut summary = Summary {
        name,
        total: coverage.len(),
        implemented: 0,
        verified: 0,
        stale: 0,
        errors: 0,
        tested: None,
    };
    for (entry, tally) in &coverage {
        let rule = &entry.rule;
        summary.stale += usize::from(tally.stale);
        summary.implemented += usize::from(!tally.stale && tally.implemented);
        summary.verified += usize::from(tally.verified);
        // A missing reference is reported where the rule is defined, with the annotation to add.
        let missing = |kind, verb, place| {
            Problem::new(
                kind,
                format!(
                    "rule {} has no {verb} reference; put `// {}[{verb} {}]` {place}",
                    rule.marker(),
                    rule.prefix,
                    rule.id
                ),
            )
            .at(&rule.file, rule.line)
            .spec(&spec.name)
            .rule(rule.marker())
        };
        if !tally.implemented {
            problems.push(missing(
                Kind::MissingImpl,
                "impl",
                "on the line before the code that implements it",
            ));
        }
        if !tally.verified {
            problems.push(missing(
                Kind::MissingVerify,
                "verify",
                "before a test that proves it",
            ));
        }
    }

    Analysis {
        spec: spec.name.clone(),
        prefix: prefix.map(str::to_owned),
        summary,
        rules: coverage.into_iter().map(|(entry, ..)| entry).collect(),
        problems,
    }
}

fn written(reference: &ReqReference) -> String {
    format!(
        "{}[{} {}]",
        reference.prefix, reference.verb, reference.req_id
    )
}

// i[impl spec-check.stale]
fn stale_problem(reference: &ReqReference, rule: &Rule, site: &Site, spec: &str) -> Problem {
    Problem::new(
        Kind::Stale,
        format!(
            "{} is stale: the rule is now {} ({}:{}); make the code match the new rule text, then \
             bump the annotation",
            written(reference),
            rule.marker(),
            rule.file,
            rule.line
        ),
    )
    .at(&site.file, site.line)
    .spec(spec)
    .rule(rule.marker())
}

// i[impl spec-check.unknown]
fn unknown_rule(reference: &ReqReference, rules: &[Rule], site: &Site, spec: &str) -> Problem {
    let suggestions = suggest::similar(&reference.req_id, rules.iter().map(|r| &r.id));
    let hint = if suggestions.is_empty() {
        String::new()
    } else {
        let names: Vec<String> = suggestions
            .iter()
            .map(|id| format!("{}[{id}]", reference.prefix))
            .collect();
        format!(" (did you mean {}?)", names.join(", "))
    };
    Problem::new(
        Kind::UnknownRule,
        format!(
            "{} names no rule of spec `{spec}`{hint}",
            written(reference)
        ),
    )
    .at(&site.file, site.line)
    .spec(spec)
    .rule(format!("{}[{}]", reference.prefix, reference.req_id))
}

// i[impl spec-check.placement]
fn placement_problem(
    reference: &ReqReference,
    site: &Site,
    scanned: &Scanned,
    parsed: &ParsedFiles,
    spec: &str,
) -> Option<Problem> {
    let test_file = scanned.test_files.contains(&site.path);
    let cfg_test = !test_file && parsed.in_cfg_test(&site.path, site.line);
    let problem = match reference.verb {
        RefVerb::Verify if !test_file && !cfg_test => Problem::new(
            Kind::VerifyOutsideTest,
            format!(
                "{} is not in test code; put it before a test in a `#[cfg(test)]` module or in a \
                 file matching test_include",
                written(reference)
            ),
        ),
        RefVerb::Impl if test_file => Problem::new(
            Kind::ImplInTest,
            format!(
                "{} is in a test file (it matches test_include); `impl` belongs next to the \
                 implementation, tests use `verify`",
                written(reference)
            ),
        ),
        RefVerb::Impl if cfg_test => Problem::new(
            Kind::ImplInTest,
            format!(
                "{} is in `#[cfg(test)]` code; `impl` belongs next to the implementation, tests use \
                 `verify`",
                written(reference)
            ),
        ),
        // i[impl spec-check.verify-on-test]
        RefVerb::Verify => match parsed
            .files
            .get(&site.path)
            .and_then(|f| f.layout.as_ref())
            .map(|layout| layout.function_after(site.line))
        {
            Some(Some(function)) if !function.is_test => Problem::new(
                Kind::VerifyNotOnTest,
                format!(
                    "{} precedes `fn {}`, which is not a test (no `#[test]` or other test \
                     attribute), so no test run can prove the rule; move it to the line before \
                     the test that proves the rule",
                    written(reference),
                    function.name,
                ),
            ),
            Some(None) => Problem::new(
                Kind::VerifyNotOnTest,
                format!(
                    "{} precedes no function, so no test run can prove the rule; move it to the \
                     line before a test",
                    written(reference)
                ),
            ),
            _ => return None,
        },
        _ => return None,
    };
    Some(
        problem
            .at(&site.file, site.line)
            .spec(spec)
            .rule(format!("{}[{}]", reference.prefix, reference.req_id)),
    )
}

/// References with an explicit verb whose prefix belongs to no spec (likely a typo'd prefix).
pub fn unknown_prefixes(parsed: &ParsedFiles, known: &[String]) -> Vec<Problem> {
    let mut problems = Vec::new();
    for file in parsed.files.values() {
        for reference in &file.refs {
            if known.contains(&reference.prefix) || !uses_explicit_verb(&file.content, reference) {
                continue;
            }
            let hint = if known.is_empty() {
                String::new()
            } else {
                format!(" (known prefixes: {})", known.join(", "))
            };
            problems.push(
                Problem::new(
                    Kind::UnknownPrefix,
                    format!(
                        "{} uses prefix `{}`, which no spec defines{hint}",
                        written(reference),
                        reference.prefix
                    ),
                )
                .at(&file.relative, reference.line),
            );
        }
    }
    problems
}

/// `x[verb id]` rather than the bare `x[id]` form, which prose produces by accident.
fn uses_explicit_verb(content: &str, reference: &ReqReference) -> bool {
    let span = reference.span;
    content
        .get(span.offset..span.offset + span.length)
        .is_none_or(|text| text.contains(' '))
}
