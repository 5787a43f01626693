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

use super::foreign;
use super::problem::{Kind, Problem};
use super::rules::Rule;
use super::sources::{self, ParsedFile, ParsedFiles, Scanned};
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

impl RuleCoverage {
    /// Whether any reference (impl, define or verify) names an older version of the rule: tracey
    /// counts such a rule as stale, and not as implemented.
    // i[impl spec-check.counts]
    fn is_stale(&self) -> bool {
        self.impl_sites
            .iter()
            .chain(&self.verify_sites)
            .any(|site| site.stale)
    }
}

/// Counts and checks `implementation` of `spec`.
// i[impl spec-check.counts]
pub fn analyse(
    spec: &SpecConfig,
    implementation: &Impl,
    rules: &[Rule],
    prefix: Option<&str>,
    scanned: &Scanned,
    parsed: &ParsedFiles,
) -> Analysis {
    let mut problems = Vec::new();
    let mut coverage: Vec<RuleCoverage> = rules
        .iter()
        .map(|rule| RuleCoverage {
            rule: rule.clone(),
            impl_sites: Vec::new(),
            verify_sites: Vec::new(),
        })
        .collect();

    // The entries of each base id: only those can match a reference (tracey's match compares the
    // base first), so each reference is matched in constant time, not against every rule.
    let mut by_base: std::collections::HashMap<String, Vec<usize>> =
        std::collections::HashMap::new();
    for (index, entry) in coverage.iter().enumerate() {
        by_base
            .entry(entry.rule.id.base.clone())
            .or_default()
            .push(index);
    }
    // The parsed files are hashed by path: a test-module question looks up to four parent files.
    let lookup = |path: &std::path::Path| parsed.get(path);
    let files: Vec<(&std::path::PathBuf, &ParsedFile)> = scanned
        .files
        .iter()
        .filter_map(|path| Some((path, lookup(path)?)))
        .collect();
    // Whether each reference lies in test code, and what its place breaks, read only its file
    // (and the files above it): judged file by file on the parse pool, in the files' order.
    let placed: Vec<Vec<Vec<Problem>>> = super::pool::map(files.clone(), |(path, file)| {
        // What places a reference in test code, looked up once per file rather than per
        // reference: whether the file is a `test_include` one, and (asked only for a reference
        // outside a `#[cfg(test)]` item) whether its parent declares it `#[cfg(test)] mod`.
        let test_file = scanned.test_files.contains(path);
        let declared = std::cell::OnceCell::new();
        file.refs
            .iter()
            .filter(|reference| Some(reference.prefix.as_str()) == prefix)
            .map(|reference| {
                let site = Site {
                    path: path.clone(),
                    file: file.relative.clone(),
                    line: reference.line,
                    stale: false,
                };
                let code = code_at(test_file, file, reference.line, || {
                    *declared.get_or_init(|| sources::declared_as_test_module(path, &lookup))
                });
                placement_problem(reference, &site, code, &spec.name)
                    .into_iter()
                    .chain(verify_not_on_test(reference, &site, code, file, &spec.name))
                    .collect()
            })
            .collect()
    });
    for ((path, file), placed) in files.into_iter().zip(placed) {
        // One entry per reference of the spec's prefix, in the file's order.
        let mut placed = placed.into_iter();
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
            let candidates = by_base
                .get(&reference.req_id.base)
                .map_or(&[][..], Vec::as_slice);
            for &index in candidates {
                let entry = &mut coverage[index];
                let kind = classify_reference_for_rule(&entry.rule.id, &reference.req_id);
                if kind == RuleIdMatch::NoMatch {
                    continue;
                }
                let is_stale = kind == RuleIdMatch::Stale;
                let sited = Site {
                    stale: is_stale,
                    ..site.clone()
                };
                match reference.verb {
                    RefVerb::Impl | RefVerb::Define => entry.impl_sites.push(sited),
                    RefVerb::Verify => entry.verify_sites.push(sited),
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
            problems.extend(placed.next().into_iter().flatten());
        }
    }

    for entry in &coverage {
        problems.extend(missing_problems(entry, &spec.name));
    }
    Analysis {
        spec: spec.name.clone(),
        prefix: prefix.map(str::to_owned),
        summary: summarise(row_name(spec, implementation), &coverage),
        rules: coverage,
        problems,
    }
}

/// The table row's name: the spec's, or `spec/impl` when the spec has several impls.
// i[impl spec-check.counts]
fn row_name(spec: &SpecConfig, implementation: &Impl) -> String {
    if spec.impls.len() > 1 {
        format!("{}/{}", spec.name, implementation.name)
    } else {
        spec.name.clone()
    }
}

/// The counts as tracey 1.3.0 tallies them (errors are added once every problem is known).
// i[impl spec-check.counts]
fn summarise(name: String, coverage: &[RuleCoverage]) -> Summary {
    let mut summary = Summary {
        name,
        total: coverage.len(),
        implemented: 0,
        verified: 0,
        stale: 0,
        errors: 0,
        tested: None,
    };
    for entry in coverage {
        let stale = entry.is_stale();
        summary.stale += usize::from(stale);
        summary.implemented += usize::from(!stale && !entry.impl_sites.is_empty());
        summary.verified += usize::from(!entry.verify_sites.is_empty());
    }
    summary
}

/// A rule without any `impl` (or `define`) reference, or without any `verify` reference, current
/// or stale, is reported where it is defined, with the annotation to add, when its level
/// demands that measure.
// i[impl spec-check.missing]
// i[impl spec-check.levels]
fn missing_problems(entry: &RuleCoverage, spec: &str) -> Vec<Problem> {
    let rule = &entry.rule;
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
        .spec(spec)
        .rule(rule.marker())
    };
    let mut problems = Vec::new();
    // Only what the rule's level demands is missing.
    let demands = super::levels::Level::of(rule).demands();
    if entry.impl_sites.is_empty() && demands.implemented {
        problems.push(missing(
            Kind::MissingImpl,
            "impl",
            "on the line before the code that implements it",
        ));
    }
    if entry.verify_sites.is_empty() && demands.verified {
        problems.push(missing(
            Kind::MissingVerify,
            "verify",
            "before a test that proves it",
        ));
    }
    problems
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

/// Whether a reference sits in test code, and which kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Code {
    /// A file matching the impl's `test_include` (tracey's notion of test code).
    TestFile,
    /// An item under `#[cfg(test)]` in a file that does not match `test_include`.
    CfgTest,
    /// Neither.
    NotTest,
}

// i[impl spec-check.placement]
fn code_at(
    test_file: bool,
    file: &ParsedFile,
    line: usize,
    declared_test_module: impl FnOnce() -> bool,
) -> Code {
    if test_file {
        Code::TestFile
    } else if file.in_cfg_test_item(line) || declared_test_module() {
        Code::CfgTest
    } else {
        Code::NotTest
    }
}

// i[impl spec-check.placement]
fn placement_problem(
    reference: &ReqReference,
    site: &Site,
    code: Code,
    spec: &str,
) -> Option<Problem> {
    let problem = match (reference.verb, code) {
        (RefVerb::Verify, Code::NotTest) => Problem::new(
            Kind::VerifyOutsideTest,
            format!(
                "{} is not in test code; put it before a test in a `#[cfg(test)]` module or in a \
                 file matching test_include",
                written(reference)
            ),
        ),
        (RefVerb::Impl, Code::TestFile) => Problem::new(
            Kind::ImplInTest,
            format!(
                "{} is in a test file (it matches test_include); `impl` belongs next to the \
                 implementation, tests use `verify`",
                written(reference)
            ),
        ),
        (RefVerb::Impl, Code::CfgTest) => Problem::new(
            Kind::ImplInTest,
            format!(
                "{} is in `#[cfg(test)]` code; `impl` belongs next to the implementation, tests use \
                 `verify`",
                written(reference)
            ),
        ),
        _ => return None,
    };
    Some(located(problem, reference, site, spec))
}

/// A `verify` annotation in test code must precede a test function, or head a file or module
/// holding tests (one outside test code is a placement problem instead).
// i[impl spec-check.verify-on-test+2]
// i[impl spec-check.placement.file-head]
fn verify_not_on_test(
    reference: &ReqReference,
    site: &Site,
    code: Code,
    file: &ParsedFile,
    spec: &str,
) -> Option<Problem> {
    if reference.verb != RefVerb::Verify || code == Code::NotTest {
        return None;
    }
    let Some(layout) = file.layout.as_ref() else {
        return foreign_not_on_test(reference, site, &file.content, spec);
    };
    let problem = match layout.function_after(site.line) {
        Some(function) if !function.is_test => Problem::new(
            Kind::VerifyNotOnTest,
            format!(
                "{} precedes `fn {}`, which is not a test (no `#[test]` or other test \
                 attribute), so no test run can prove the rule; move it to the line before \
                 the test that proves the rule",
                written(reference),
                function.name,
            ),
        ),
        Some(_) => return None,
        // At the head of a file or `#[cfg(test)]` module: that scope's tests verify the rule.
        None => match layout.scope_headed_at(site.line) {
            Some(scope) if !scope.tests.is_empty() => return None,
            Some(scope) => Problem::new(
                Kind::VerifyNotOnTest,
                format!(
                    "{} heads {}, which holds no test, so no test run can prove the rule; move \
                     it to the line before a test",
                    written(reference),
                    match scope.modules.last() {
                        Some(module) => format!("`mod {module}`"),
                        None => "this file".to_owned(),
                    }
                ),
            ),
            None => Problem::new(
                Kind::VerifyNotOnTest,
                format!(
                    "{} precedes no function, so no test run can prove the rule; move it to the \
                     line before a test",
                    written(reference)
                ),
            ),
        },
    };
    Some(located(problem, reference, site, spec))
}

/// A `verify` annotation in a Python, Go or script test file must precede a test its runner
/// collects.
// i[impl spec-check.test-backed.runners+2]
// i[impl spec-check.placement.foreign+2]
fn foreign_not_on_test(
    reference: &ReqReference,
    site: &Site,
    content: &str,
    spec: &str,
) -> Option<Problem> {
    foreign::Language::of(&site.file)?;
    if foreign::test_after(&site.file, content, site.line).is_some() {
        return None;
    }
    let problem = Problem::new(
        Kind::VerifyNotOnTest,
        format!(
            "{} precedes no test its runner collects (`def test_*`, `func TestX`, `it(\"...\")` \
             or `test(\"...\")`), so no test run can prove the rule; move it to the line before \
             a test",
            written(reference)
        ),
    );
    Some(located(problem, reference, site, spec))
}

/// A placement problem at the reference, counted against `spec`.
fn located(problem: Problem, reference: &ReqReference, site: &Site, spec: &str) -> Problem {
    problem
        .at(&site.file, site.line)
        .spec(spec)
        .rule(format!("{}[{}]", reference.prefix, reference.req_id))
}

/// References with an explicit verb whose prefix belongs to no spec (likely a typo'd prefix).
pub fn unknown_prefixes(parsed: &ParsedFiles, known: &[String]) -> Vec<Problem> {
    let mut problems = Vec::new();
    for file in parsed.values() {
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
