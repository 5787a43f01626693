//! `spec-check --sarif FILE`: every problem of the gate and of the review as a SARIF 2.1.0
//! result, for GitHub's code scanning: an alert on a line the pull request changed shows on its
//! diff, the others in the repository's code-scanning list.
//!
//! The types are our own serde structs for the small part of SARIF 2.1.0 written (a tool with
//! its rules, results with a location); the tests validate the output against the OASIS schema
//! checked in under `tests/schemas/`. Each result's `ruleId` is the problem's kind
//! (`missing-verify`, `text-changed-without-bump`…). Every kind is described in the run's rules
//! every time, in a fixed order, so that a `ruleIndex` means the same kind in every log, with a
//! help text saying how such a problem is fixed. A result's message is the problem's own, which
//! names the spec rule and says what to do; the spec rule is also in the result's
//! `properties.rule`. A problem without a place (a config without specs, results unusable, a
//! review problem of a row) or with a file outside the root is placed on the tracey config,
//! line 1: code scanning refuses a result without a location.

use std::path::Path;

use serde::Serialize;

use crate::review;
use crate::spec_check::config::CONFIG_PATH;
use crate::spec_check::problem::{Kind, Problem};

/// The schema the document names.
pub const SCHEMA_URI: &str = "https://json.schemastore.org/sarif-2.1.0.json";

/// The SARIF version written.
const VERSION: &str = "2.1.0";

/// Every kind of the gate, in the order of the run's rules ([`gate_index`] says where each is).
const GATE_KINDS: [Kind; 21] = [
    Kind::Config,
    Kind::SpecParse,
    Kind::DuplicateRule,
    Kind::MissingImpl,
    Kind::MissingVerify,
    Kind::Stale,
    Kind::UnknownRule,
    Kind::UnknownPrefix,
    Kind::VerifyOutsideTest,
    Kind::ImplInTest,
    Kind::VerifyNotOnTest,
    Kind::MergedRule,
    Kind::RuleId,
    Kind::Findings,
    Kind::Unscannable,
    Kind::NotVerifiedByTest,
    Kind::TestResults,
    Kind::ResultsOutdated,
    Kind::EvidenceStale,
    Kind::Waiver,
    Kind::Ratchet,
];

/// Every kind of the review, after the gate's.
const REVIEW_KINDS: [review::Kind; 2] = [
    review::Kind::TextChangedWithoutBump,
    review::Kind::CoverageDown,
];

/// Where `kind`'s descriptor is among the run's rules: its place in [`GATE_KINDS`]. A match, so
/// that a kind added to the gate does not compile until it has a place, and so a descriptor.
// i[impl spec-check.sarif]
fn gate_index(kind: Kind) -> usize {
    match kind {
        Kind::Config => 0,
        Kind::SpecParse => 1,
        Kind::DuplicateRule => 2,
        Kind::MissingImpl => 3,
        Kind::MissingVerify => 4,
        Kind::Stale => 5,
        Kind::UnknownRule => 6,
        Kind::UnknownPrefix => 7,
        Kind::VerifyOutsideTest => 8,
        Kind::ImplInTest => 9,
        Kind::VerifyNotOnTest => 10,
        Kind::MergedRule => 11,
        Kind::RuleId => 12,
        Kind::Findings => 13,
        Kind::Unscannable => 14,
        Kind::NotVerifiedByTest => 15,
        Kind::TestResults => 16,
        Kind::ResultsOutdated => 17,
        Kind::EvidenceStale => 18,
        Kind::Waiver => 19,
        Kind::Ratchet => 20,
    }
}

/// Where a review `kind`'s descriptor is: after the gate's, in [`REVIEW_KINDS`]' order.
// i[impl spec-check.sarif]
fn review_index(kind: review::Kind) -> usize {
    GATE_KINDS.len()
        + match kind {
            review::Kind::TextChangedWithoutBump => 0,
            review::Kind::CoverageDown => 1,
        }
}

/// `sarifLog`: the subset written.
#[derive(Serialize)]
struct Log<'a> {
    #[serde(rename = "$schema")]
    schema: &'static str,
    version: &'static str,
    runs: [Run<'a>; 1],
}

#[derive(Serialize)]
struct Run<'a> {
    tool: Tool<'a>,
    results: Vec<SarifResult<'a>>,
}

#[derive(Serialize)]
struct Tool<'a> {
    driver: Driver<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Driver<'a> {
    name: &'static str,
    rules: Vec<Descriptor<'a>>,
}

/// `reportingDescriptor`: one problem kind.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Descriptor<'a> {
    id: &'a str,
    short_description: Text,
    full_description: Text,
    help: Text,
}

/// `message` / `multiformatMessageString`: plain text only.
#[derive(Serialize)]
struct Text {
    text: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SarifResult<'a> {
    rule_id: &'a str,
    rule_index: usize,
    level: &'static str,
    message: Text,
    locations: [Location; 1],
    #[serde(skip_serializing_if = "Option::is_none")]
    properties: Option<Properties<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Location {
    physical_location: PhysicalLocation,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PhysicalLocation {
    artifact_location: ArtifactLocation,
    region: Region,
}

/// A root-relative uri: code scanning resolves it against the checkout.
#[derive(Serialize)]
struct ArtifactLocation {
    uri: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Region {
    start_line: usize,
}

#[derive(Serialize)]
struct Properties<'a> {
    rule: &'a str,
}

/// One problem, whichever check found it.
struct Found<'a> {
    kind: &'static str,
    /// Its descriptor's place among the run's rules.
    index: usize,
    file: Option<&'a str>,
    line: Option<usize>,
    rule: Option<&'a str>,
    message: &'a str,
}

/// The gate's problems and the review's (none without `--base`) as one SARIF 2.1.0 log, pretty
/// JSON ending with a newline; files are made relative to `root`.
// i[impl spec-check.sarif]
pub fn render(root: &Path, gate: &[Problem], review: &[review::Problem]) -> String {
    let found: Vec<Found<'_>> = gate
        .iter()
        .map(|p| Found {
            kind: p.kind.name(),
            index: gate_index(p.kind),
            file: p.file.as_deref(),
            line: p.line,
            rule: p.rule.as_deref(),
            message: &p.message,
        })
        .chain(review.iter().map(|p| Found {
            kind: p.kind.name(),
            // A review problem of a row (not of a rule) has an empty file, line 0, no rule.
            index: review_index(p.kind),
            file: Some(p.file.as_str()),
            line: Some(p.line),
            rule: Some(p.rule.as_str()),
            message: &p.message,
        }))
        .collect();
    // Every kind, in a fixed order; results point at theirs by index.
    let kinds: Vec<(&str, &str)> = GATE_KINDS
        .iter()
        .map(|k| (k.name(), help(*k)))
        .chain(REVIEW_KINDS.iter().map(|k| (k.name(), review_help(*k))))
        .collect();
    let rules: Vec<Descriptor<'_>> = kinds
        .iter()
        .map(|(kind, help)| Descriptor {
            id: kind,
            short_description: text(&format!("spec-check: {kind}")),
            full_description: text(help),
            help: text(help),
        })
        .collect();
    let results: Vec<SarifResult<'_>> = found.iter().map(|f| result(root, f, f.index)).collect();
    let log = Log {
        schema: SCHEMA_URI,
        version: VERSION,
        runs: [Run {
            tool: Tool {
                driver: Driver {
                    name: "holdfast spec-check",
                    rules,
                },
            },
            results,
        }],
    };
    let mut out = serde_json::to_string_pretty(&log).unwrap_or_default();
    out.push('\n');
    out
}

// i[impl spec-check.sarif]
fn result<'a>(root: &Path, found: &Found<'a>, rule_index: usize) -> SarifResult<'a> {
    let (file, line) = place(root, found.file, found.line);
    let rule = found.rule.filter(|rule| !rule.is_empty());
    SarifResult {
        rule_id: found.kind,
        rule_index,
        level: "error",
        message: Text {
            text: match rule {
                Some(rule) if !found.message.contains(rule) => {
                    format!("{rule}: {}", found.message)
                }
                _ => found.message.to_owned(),
            },
        },
        locations: [Location {
            physical_location: PhysicalLocation {
                artifact_location: ArtifactLocation { uri: file },
                region: Region { start_line: line },
            },
        }],
        properties: rule.map(|rule| Properties { rule }),
    }
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

fn text(text: &str) -> Text {
    Text {
        text: text.to_owned(),
    }
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
        Kind::EvidenceStale => {
            "Rerun the tests of the rule's crate: its text, code or tests changed since the results given with --results were written."
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
