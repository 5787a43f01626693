//! `spec-check --sarif FILE`: every problem of the gate and of the review as a SARIF 2.1.0
//! result, so that GitHub's code scanning shows each on the lines of a pull request's diff.
//!
//! The types are serde-sarif's (generated from the SARIF 2.1.0 schema). Each result's `ruleId`
//! is the problem's kind (`missing-verify`, `text-changed-without-bump`…), described once in the
//! run's rules with a help text saying how such a problem is fixed; its message is the problem's
//! own, which names the spec rule and says what to do; the spec rule is also in the result's
//! `properties.rule`. A problem without a place (a config without specs, results unusable, a
//! review problem of a row) or with a file outside the root is
//! placed on the tracey config, line 1: code scanning refuses a result without a location.

use std::collections::BTreeMap;
use std::path::Path;

use serde_sarif::sarif::{
    ArtifactLocation, Location, Message, MultiformatMessageString, PhysicalLocation, PropertyBag,
    Region, ReportingDescriptor, Result as SarifResult, ResultLevel, Run, Sarif, Tool,
    ToolComponent,
};

use crate::review;
use crate::spec_check::config::CONFIG_PATH;
use crate::spec_check::problem::{Kind, Problem};

/// The schema the document names.
pub const SCHEMA_URI: &str = "https://json.schemastore.org/sarif-2.1.0.json";

/// One problem, whichever check found it.
struct Found<'a> {
    kind: &'static str,
    help: &'static str,
    file: Option<&'a str>,
    line: Option<usize>,
    rule: Option<&'a str>,
    message: &'a str,
}

/// The gate's problems and the review's (none without `--base`) as one SARIF 2.1.0 log, pretty
/// JSON ending with a newline.
// i[impl spec-check.sarif]
pub fn render(root: &Path, gate: &[Problem], review: &[review::Problem]) -> String {
    let found: Vec<Found<'_>> = gate
        .iter()
        .map(|p| Found {
            kind: p.kind.name(),
            help: help(p.kind),
            file: p.file.as_deref(),
            line: p.line,
            rule: p.rule.as_deref(),
            message: &p.message,
        })
        .chain(review.iter().map(|p| Found {
            kind: p.kind.name(),
            help: review_help(p.kind),
            // A review problem of a row (not of a rule) has an empty file, line 0, no rule.
            file: Some(p.file.as_str()),
            line: Some(p.line),
            rule: Some(p.rule.as_str()),
            message: &p.message,
        }))
        .collect();
    // One descriptor per kind found, in name order; results point at it by index.
    let kinds: BTreeMap<&str, &str> = found.iter().map(|f| (f.kind, f.help)).collect();
    let index: BTreeMap<&str, usize> = kinds.keys().enumerate().map(|(i, k)| (*k, i)).collect();
    let rules: Vec<ReportingDescriptor> = kinds
        .iter()
        .map(|(kind, help)| {
            ReportingDescriptor::builder()
                .id((*kind).to_owned())
                .short_description(text(&format!("spec-check: {kind}")))
                .help(text(help))
                .build()
        })
        .collect();
    let results: Vec<SarifResult> = found
        .iter()
        .map(|f| result(root, f, index.get(f.kind).copied().unwrap_or_default()))
        .collect();
    let driver = ToolComponent::builder()
        .name("holdfast spec-check".to_owned())
        .information_uri("https://github.com/bearcove/tracey".to_owned())
        .rules(rules)
        .build();
    let run = Run::builder()
        .tool(Tool::builder().driver(driver).build())
        .results(results)
        .build();
    let log = Sarif::builder()
        .schema(SCHEMA_URI.to_owned())
        .version(serde_json::json!("2.1.0"))
        .runs(vec![run])
        .build();
    let mut out = serde_json::to_string_pretty(&log).unwrap_or_default();
    out.push('\n');
    out
}

// i[impl spec-check.sarif]
fn result(root: &Path, found: &Found<'_>, rule_index: usize) -> SarifResult {
    let (file, line) = place(root, found.file, found.line);
    let rule = found.rule.filter(|rule| !rule.is_empty());
    let properties = rule.map(|rule| PropertyBag {
        additional_properties: BTreeMap::from([("rule".to_owned(), serde_json::json!(rule))]),
        ..PropertyBag::default()
    });
    let mut result = SarifResult::builder()
        .rule_id(found.kind.to_owned())
        .level(ResultLevel::Error)
        .message(Message {
            text: Some(match rule {
                Some(rule) if !found.message.contains(rule) => {
                    format!("{rule}: {}", found.message)
                }
                _ => found.message.to_owned(),
            }),
            ..Message::default()
        })
        .locations(vec![Location {
            physical_location: Some(PhysicalLocation {
                artifact_location: Some(ArtifactLocation {
                    uri: Some(file),
                    uri_base_id: Some("%SRCROOT%".to_owned()),
                    ..ArtifactLocation::default()
                }),
                region: Some(Region {
                    start_line: i64::try_from(line).ok(),
                    ..Region::default()
                }),
                ..PhysicalLocation::default()
            }),
            ..Location::default()
        }])
        .build();
    result.rule_index = i64::try_from(rule_index).ok();
    result.properties = properties;
    result
}

/// Where a result is placed: its file relative to `root` (`/`-separated) and its line; a problem
/// without a file, or with one outside the root, is placed on the tracey config's first line.
// i[impl spec-check.sarif]
fn place(root: &Path, file: Option<&str>, line: Option<usize>) -> (String, usize) {
    let relative = file.filter(|f| !f.is_empty()).and_then(|f| {
        let path = Path::new(f);
        let path = if path.is_absolute() {
            path.strip_prefix(root).ok()?
        } else {
            path
        };
        let parts: Vec<String> = path
            .components()
            .map(|c| match c {
                std::path::Component::Normal(part) => Some(part.to_string_lossy().into_owned()),
                std::path::Component::CurDir => Some(String::new()),
                _ => None,
            })
            .collect::<Option<_>>()?;
        let parts: Vec<String> = parts.into_iter().filter(|p| !p.is_empty()).collect();
        (!parts.is_empty()).then(|| parts.join("/"))
    });
    match relative {
        Some(file) => (file, line.unwrap_or(1).max(1)),
        None => (CONFIG_PATH.to_owned(), 1),
    }
}

fn text(text: &str) -> MultiformatMessageString {
    MultiformatMessageString::builder()
        .text(text.to_owned())
        .build()
}

/// How a problem of `kind` is fixed, in general (its message says what, here).
// i[impl spec-check.sarif]
fn help(kind: Kind) -> &'static str {
    match kind {
        Kind::Config => {
            "Fix .config/tracey/config.styx: every spec needs a name, include globs that match markdown files and impls that match sources."
        }
        Kind::SpecParse => {
            "Fix the spec file's markdown or rule marker: lowercase dot-separated ids, an optional +N version, attributes status=, level=, since=, until=, tags= only."
        }
        Kind::DuplicateRule => "Give each rule one definition: remove or rename the later one.",
        Kind::MissingImpl => {
            "Put an impl annotation naming the rule on the line before the item that implements it."
        }
        Kind::MissingVerify => {
            "Put a verify annotation naming the rule before the attributes of a test that proves it."
        }
        Kind::Stale => {
            "The rule's version was bumped: review the code or test against the new text, then name the current version in the annotation."
        }
        Kind::UnknownRule => {
            "The annotation names no rule of its spec: fix the id (see the suggestion) or define the rule."
        }
        Kind::UnknownPrefix => {
            "No spec uses this marker prefix: use the spec's prefix (r for runtime, i for interface)."
        }
        Kind::VerifyOutsideTest => {
            "Move the verify annotation onto a test function (or the head of a test module)."
        }
        Kind::ImplInTest => {
            "Move the impl annotation onto non-test code; tests carry verify annotations."
        }
        Kind::VerifyNotOnTest => {
            "Put the verify annotation right before a test function's attributes."
        }
        Kind::MergedRule => {
            "Separate the rule from the blockquote above it with a blank line so that it is a rule of its own."
        }
        Kind::RuleId => "Write rule ids as lowercase dot-separated words.",
        Kind::Findings => {
            "Fix docs/audit/findings.md: each finding's Closed by must name rules the spec defines, at their current version."
        }
        Kind::Unscannable => {
            "Make the file readable UTF-8 or exclude it from the impl's include globs."
        }
        Kind::NotVerifiedByTest => {
            "Make one of the rule's verifying tests run and pass (not skip) in the test run given with --results."
        }
        Kind::TestResults => {
            "Give spec-check a usable JUnit results file (and skip ledger) from a finished test run."
        }
        Kind::ResultsOutdated => {
            "Rerun the tests of the file's crate so that the results are newer than the file."
        }
        Kind::Waiver => {
            "Fix the waiver in docs/audit/waivers.toml: name a rule the spec defines at its current version, say what is waived and why, and give an end date not past (or remove it once the gap is closed)."
        }
        Kind::Ratchet => {
            "Restore the coverage the baseline records, or waive the rules that lost it in docs/audit/waivers.toml; after a justified removal of rules, rewrite the baseline with spec-check --update-baseline."
        }
    }
}

/// How a review problem of `kind` is fixed.
// i[impl spec-check.sarif]
fn review_help(kind: review::Kind) -> &'static str {
    match kind {
        review::Kind::TextChangedWithoutBump => {
            "The rule's text changed: bump its version (+N) so that its code and tests are reviewed against the new text, or restore the text."
        }
        review::Kind::CoverageDown => {
            "The change lost an implementation, verification or proof of a kept rule: restore it, or waive it in docs/audit/waivers.toml with a reason and an end date."
        }
    }
}

#[cfg(test)]
mod tests;
