//! `spec-check --export FILE.json`: every rule of the tree with everything known about it — its
//! text, level, version, implementing sites, verifying tests and their last results, its recorded
//! proof, the findings it closes — as one versioned JSON document for other tools.
//!
//! The document's shape is [`Export`]; `docs/audit/spec-export.schema.json` is its JSON Schema,
//! and a test validates both a fixture's export and this workspace's against it. A change to the
//! shape that a reader could trip on (a field removed, renamed or retyped) bumps [`SCHEMA`].

use serde::Serialize;

use crate::model::tree::Tree as Source;
use crate::spec_check::rules::Rule as SpecRule;
use crate::trace::Everything;
use crate::trace::rule_report::RuleReport;

/// The version of the export's schema, written as `"schema"`.
pub const SCHEMA: u32 = 5;

/// The whole export.
#[derive(Debug, Serialize)]
pub struct Export {
    /// [`SCHEMA`].
    pub schema: u32,
    /// The results that judged the tests (`file (written …)`), `None` for annotations only.
    pub results: Option<String>,
    /// Every rule, in spec order.
    pub rules: Vec<Rule>,
    /// The spec debt: code no rule names, largest first ([`crate::spec_report::debt`]).
    pub debt: Vec<crate::spec_report::debt::Debt>,
}

/// One rule and its evidence.
#[derive(Debug, Serialize)]
pub struct Rule {
    /// The id without its version, e.g. `retry.schedule`.
    pub id: String,
    /// The marker as the spec writes it, e.g. `r[retry.schedule+2]`.
    pub marker: String,
    /// The marker prefix, e.g. `r`.
    pub prefix: String,
    /// The version (1 when the marker has none).
    pub version: u32,
    /// The level the marker gives (`level=must|should|may`, or `tags=informative`), `None` when
    /// it gives none.
    pub level: Option<String>,
    /// What the gate demands of the rule at its level (none given: MUST's).
    pub demands: crate::spec_check::levels::Demands,
    /// The spec that defines it.
    pub spec: Option<String>,
    /// Where it is defined.
    pub defined: Location,
    /// Its text, lines joined.
    pub text: String,
    /// `impl` sites.
    pub impls: Vec<Impl>,
    /// `verify` sites with their tests.
    pub verifies: Vec<Verify>,
    /// The last recorded `cargo xtask prove` of the rule, `None` when none is recorded.
    pub proof: Option<Proof>,
    /// Findings of `docs/audit/findings.md` whose `**Closed by:**` names it.
    pub closes: Vec<Closes>,
    /// `verified`, `not verified` or `regressed` (as `trace RULE` says).
    pub verdict: String,
}

/// A root-relative file and a 1-based line.
#[derive(Debug, Serialize)]
pub struct Location {
    /// The file, `/`-separated.
    pub file: String,
    /// The line.
    pub line: usize,
}

/// An `impl` annotation.
#[derive(Debug, Serialize)]
pub struct Impl {
    /// Where the annotation is.
    #[serde(flatten)]
    pub at: Location,
    /// The item it annotates, e.g. `fn nominal_delay`.
    pub item: Option<String>,
    /// Whether it names an older version of the rule.
    pub stale: bool,
}

/// A `verify` annotation and its test.
#[derive(Debug, Serialize)]
pub struct Verify {
    /// Where the annotation is.
    #[serde(flatten)]
    pub at: Location,
    /// The test it precedes, as the runner names it.
    pub test: Option<String>,
    /// What became of the test in the results; `None` without results.
    pub result: Option<String>,
    /// Whether it names an older version of the rule.
    pub stale: bool,
}

/// A recorded mutation proof.
#[derive(Debug, Serialize)]
pub struct Proof {
    /// Every viable mutant was caught and none was left unjudged.
    pub proven: bool,
    /// Mutants the tests caught.
    pub caught: usize,
    /// Mutants that survived.
    pub missed: usize,
    /// Mutants that did not build.
    pub unviable: usize,
    /// Mutants that timed out.
    pub timeout: usize,
    /// The survivors, as cargo-mutants names them.
    pub survivors: Vec<String>,
    /// Survivors justified in the proof summary, with their reasons.
    pub justified: Vec<String>,
    /// Why the rule cannot be proven, when it cannot.
    pub not_provable: Option<String>,
    /// The commit proven, when recorded.
    pub commit: Option<String>,
    /// When, when recorded.
    pub date: Option<String>,
    /// `TEXT/IMPL/VERIFY` hashes of what the proof judged; `None` when recorded before
    /// fingerprints.
    pub fingerprint: Option<String>,
    /// `proof stale: … changed since …` when the fingerprint no longer matches the tree.
    pub stale: Option<String>,
}

/// A finding a rule closes.
#[derive(Debug, Serialize)]
pub struct Closes {
    /// Its id, e.g. `H3`.
    pub id: String,
    /// Its title.
    pub title: String,
}

/// The export of a traced tree (`trace::everything` over `source`).
// i[impl spec-check.export+2]
pub fn export(source: &dyn Source, everything: &Everything) -> Export {
    let rules = everything
        .tree
        .rules()
        .iter()
        .zip(&everything.rules)
        .map(|(rule, report)| one(source, everything, rule, report))
        .collect();
    Export {
        schema: SCHEMA,
        results: everything.results.clone(),
        rules,
        debt: crate::spec_report::debt::debt(source, &everything.tree),
    }
}

/// The export as pretty JSON, ending with a newline.
// i[impl spec-check.export+2]
pub fn render(export: &Export) -> String {
    let mut text = serde_json::to_string_pretty(export).unwrap_or_default();
    text.push('\n');
    text
}

// i[impl spec-check.export+2]
fn one(source: &dyn Source, everything: &Everything, rule: &SpecRule, report: &RuleReport) -> Rule {
    let spec = everything
        .tree
        .analyses()
        .iter()
        .find(|a| {
            a.rules
                .iter()
                .any(|c| c.rule.file == rule.file && c.rule.line == rule.line)
        })
        .map(|a| a.spec.clone());
    let proof =
        crate::spec_check::fingerprint::recorded(source, &everything.tree, rule).map(|p| Proof {
            proven: p.proven(),
            caught: p.caught,
            missed: p.missed,
            unviable: p.unviable,
            timeout: p.timeout,
            survivors: p.survivors,
            justified: p.justified,
            not_provable: p.not_provable,
            commit: p.commit,
            date: p.date,
            fingerprint: p
                .fingerprint
                .as_ref()
                .map(crate::model::proof::Fingerprint::render),
            stale: p.stale,
        });
    Rule {
        id: rule.id.base.clone(),
        marker: rule.marker(),
        prefix: rule.prefix.clone(),
        version: rule.id.version,
        level: level(rule),
        demands: crate::spec_check::levels::Level::of(rule).demands(),
        spec,
        defined: Location {
            file: rule.file.clone(),
            line: rule.line,
        },
        text: report.text.clone(),
        impls: report
            .impls
            .iter()
            .map(|site| Impl {
                at: location(&site.at),
                item: site.item.clone(),
                stale: site.stale,
            })
            .collect(),
        verifies: report
            .verifies
            .iter()
            .map(|site| Verify {
                at: location(&site.at),
                test: site.test.clone(),
                result: site.result.clone(),
                stale: site.stale,
            })
            .collect(),
        proof,
        closes: report
            .closes
            .iter()
            .map(|f| Closes {
                id: f.id.clone(),
                title: f.title.clone(),
            })
            .collect(),
        verdict: report.verdict.to_owned(),
    }
}

/// `file:line` split at its last colon.
fn location(at: &str) -> Location {
    match at.rsplit_once(':') {
        Some((file, line)) => Location {
            file: file.to_owned(),
            line: line.parse().unwrap_or_default(),
        },
        None => Location {
            file: at.to_owned(),
            line: 0,
        },
    }
}

/// The level the rule's marker gives, as marq parsed it (`must`, `should`, `may`; its synonyms
/// `shall`, `recommended`… normalised), or `informative` (`tags=informative`); `None` when it
/// gives none (the gate then reads it as MUST).
// i[impl spec-check.export+2]
// i[impl spec-check.levels]
pub fn level(rule: &SpecRule) -> Option<String> {
    let level = crate::spec_check::levels::Level::of(rule);
    (level == crate::spec_check::levels::Level::Informative || rule.metadata.level.is_some())
        .then(|| level.name().to_owned())
}

#[cfg(test)]
mod tests;
