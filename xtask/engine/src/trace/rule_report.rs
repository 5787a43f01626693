//! `cargo xtask trace RULE`: one rule, from its text to its code, its tests and their results, and
//! the findings it closes — as text, JSON (for tools) or markdown (for a pull-request comment).

use std::fmt::Write as _;

use serde::Serialize;
use tracey_core::parse_rule_id;

use crate::spec_check::rules::Rule;
use crate::spec_check::test_backed::Evidence;
use crate::spec_check::{Tree, suggest};

use super::Error;
use super::rule_trace::{self, RuleState};
use super::verdict::{self, Verdict};
use crate::model::findings::{Finding, NamedRule};
use crate::model::tree::Tree as Source;

/// Output format of a rule trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Plain text.
    Text,
    /// One JSON object.
    Json,
    /// GitHub-flavoured markdown.
    Markdown,
}

/// Whether `wanted` names a rule rather than a finding: `x.y`, `r[x.y]`, `x.y+2`.
pub fn is_rule_id(wanted: &str) -> bool {
    let wanted = wanted.trim();
    wanted.contains('.') || wanted.ends_with(']')
}

/// A rule traced: everything the report shows, in the shape `--json` prints.
#[derive(Debug, Serialize)]
pub struct RuleReport {
    /// The tree.
    pub root: String,
    /// The results used: file and time, or `None` for annotations only.
    pub results: Option<String>,
    /// The rule as the spec writes it, e.g. `r[actuate.image.retry]`.
    pub rule: String,
    /// Its spec file and line.
    pub defined_at: String,
    /// What was asked for, when it named another version than the spec's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub asked: Option<String>,
    /// The rule's text, lines joined.
    pub text: String,
    /// `impl` sites.
    pub impls: Vec<ImplSite>,
    /// `verify` sites.
    pub verifies: Vec<VerifySite>,
    /// The findings whose `**Closed by:**` names the rule.
    pub closes: Vec<ClosedFinding>,
    /// The last `cargo xtask prove` of the rule, in words (`None`: never proven here).
    pub proof: Option<String>,
    /// Whether that proof left surviving mutants.
    pub survivors: bool,
    /// `verified`, `not verified` or `regressed`.
    pub verdict: &'static str,
    /// Why it is not verified.
    pub reasons: Vec<String>,
}

/// An `impl` annotation and the item it annotates.
#[derive(Debug, Serialize)]
pub struct ImplSite {
    /// `file:line`.
    pub at: String,
    /// The item, e.g. `fn nominal_delay`.
    pub item: Option<String>,
    /// Whether it names an older version.
    pub stale: bool,
}

/// A `verify` annotation, its test and its fate.
#[derive(Debug, Serialize)]
pub struct VerifySite {
    /// `file:line`.
    pub at: String,
    /// The test as nextest names it.
    pub test: Option<String>,
    /// Its fate in the results, when there are results.
    pub result: Option<String>,
    /// Whether it names an older version.
    pub stale: bool,
}

/// A finding the rule closes.
#[derive(Debug, Serialize)]
pub struct ClosedFinding {
    /// Its id.
    pub id: String,
    /// Its title.
    pub title: String,
}

/// Traces the rule `wanted` names; an unknown rule is an error with a did-you-mean.
// i[impl trace.rule]
pub fn trace(
    source: &dyn Source,
    tree: &Tree,
    findings: &[Finding],
    wanted: &str,
    evidence: Option<(&Evidence, &str)>,
) -> Result<RuleReport, Error> {
    trace_closing(
        source,
        tree,
        findings,
        &Closers::of(findings),
        wanted,
        evidence,
    )
}

/// The findings (their indices, in file order) that name each base id: what a rule closes is then
/// found in constant time, not by a walk of every finding per rule.
pub(crate) struct Closers(std::collections::HashMap<String, Vec<usize>>);

impl Closers {
    pub(crate) fn of(findings: &[Finding]) -> Self {
        let mut by_base: std::collections::HashMap<String, Vec<usize>> =
            std::collections::HashMap::new();
        for (index, finding) in findings.iter().enumerate() {
            for named in &finding.rules {
                let entry = by_base.entry(named.id.base.clone()).or_default();
                // A finding naming a rule twice closes it once.
                if entry.last() != Some(&index) {
                    entry.push(index);
                }
            }
        }
        Self(by_base)
    }
}

/// [`trace`] with the findings already indexed by the rules they name.
pub(crate) fn trace_closing(
    source: &dyn Source,
    tree: &Tree,
    findings: &[Finding],
    closers: &Closers,
    wanted: &str,
    evidence: Option<(&Evidence, &str)>,
) -> Result<RuleReport, Error> {
    let trimmed = wanted.trim();
    let id_text = match trimmed.split_once('[') {
        Some((_, rest)) => rest.strip_suffix(']').unwrap_or(rest),
        None => trimmed,
    };
    let id = parse_rule_id(id_text).ok_or_else(|| Error::NotARuleId(wanted.to_owned()))?;
    let Some(rule) = tree.rule(&id.base) else {
        let similar: Vec<String> = suggest::similar(&id, tree.rules().iter().map(|r| &r.id))
            .into_iter()
            .filter_map(|found| tree.rules().iter().find(|r| &r.id == found))
            .map(Rule::marker)
            .collect();
        return Err(Error::UnknownRule {
            id: id_text.to_owned(),
            similar,
        });
    };
    let named = NamedRule {
        prefix: rule.prefix.clone(),
        id: rule.id.clone(),
    };
    let traced = rule_trace::trace(source, tree, &named, evidence.map(|(e, _)| e));
    let judgement = verdict::judge(std::slice::from_ref(&traced), evidence.is_some());
    let RuleState::Defined(defined) = traced.state else {
        return Err(Error::Untraceable(rule.marker()));
    };
    let impls = defined
        .impls
        .iter()
        .map(|site| ImplSite {
            at: format!("{}:{}", site.file, site.line),
            item: tree
                .parsed
                .get(&site.path)
                .and_then(|f| f.layout.as_ref())
                .and_then(|layout| layout.item_at(site.line))
                .map(|item| item.describe()),
            stale: site.stale,
        })
        .collect();
    let verifies = defined
        .verifies
        .iter()
        .map(|verify| VerifySite {
            at: format!("{}:{}", verify.site.file, verify.site.line),
            test: verify.test.clone(),
            result: verify.fate.as_ref().map(|fate| fate.describe()),
            stale: verify.site.stale,
        })
        .collect();
    let closes = closers
        .0
        .get(&rule.id.base)
        .into_iter()
        .flatten()
        .map(|&index| &findings[index])
        .map(|f| ClosedFinding {
            id: f.id.clone(),
            title: f.title.clone(),
        })
        .collect();
    let proof = crate::spec_check::fingerprint::recorded(source, tree, rule);
    Ok(RuleReport {
        survivors: proof.as_ref().is_some_and(|p| p.missed > 0),
        proof: proof.map(|p| p.line(&rule.marker())),
        root: source.root().display().to_string(),
        results: evidence.map(|(_, source)| source.to_owned()),
        rule: rule.marker(),
        defined_at: format!("{}:{}", rule.file, rule.line),
        asked: (id != rule.id).then(|| id.to_string()),
        text: rule_text(rule),
        impls,
        verifies,
        closes,
        verdict: match judgement.verdict {
            Verdict::Closed => "verified",
            Verdict::Open => "not verified",
            Verdict::Regressed => "regressed",
        },
        reasons: judgement.reasons,
    })
}

/// The rule's whole text as marq read it (lazy continuation lines included), lines joined with
/// spaces.
fn rule_text(rule: &Rule) -> String {
    rule.text_lines().collect::<Vec<_>>().join(" ")
}

/// Renders the report.
// i[impl trace.rule-output]
pub fn render(report: &RuleReport, format: Format) -> String {
    match format {
        Format::Json => {
            let mut json = serde_json::to_string_pretty(report)
                .unwrap_or_else(|err| format!("{{\"error\":\"cannot serialize: {err}\"}}"));
            json.push('\n');
            json
        }
        Format::Text => text(report),
        Format::Markdown => markdown(report),
    }
}

fn text(report: &RuleReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}",
        report.results.as_deref().unwrap_or(
            "test results: none — annotations only (`cargo xtask test` writes target/nextest/ci/junit.xml)"
        )
    );
    let _ = writeln!(out, "\n{}  {}", report.rule, report.defined_at);
    if let Some(asked) = &report.asked {
        let _ = writeln!(
            out,
            "  (asked for {asked}; the spec defines {})",
            report.rule
        );
    }
    super::report::wrap(&mut out, &report.text, "  ");
    out.push('\n');
    if report.impls.is_empty() {
        let _ = writeln!(out, "  impl    (none)");
    }
    for site in &report.impls {
        let item = site
            .item
            .as_deref()
            .map(|i| format!("  {i}"))
            .unwrap_or_default();
        let stale = if site.stale {
            "  (stale reference)"
        } else {
            ""
        };
        let _ = writeln!(out, "  impl    {}{item}{stale}", site.at);
    }
    if report.verifies.is_empty() {
        let _ = writeln!(out, "  verify  (none)");
    }
    for site in &report.verifies {
        let test = site.test.as_deref().unwrap_or("(no test function follows)");
        let fate = if site.stale {
            "  (stale reference)".to_owned()
        } else {
            site.result
                .as_deref()
                .map(|r| format!("  {r}"))
                .unwrap_or_default()
        };
        let _ = writeln!(out, "  verify  {}  {test}{fate}", site.at);
    }
    if report.closes.is_empty() {
        let _ = writeln!(out, "  closes  (no finding)");
    }
    for finding in &report.closes {
        let _ = writeln!(out, "  closes  {}: {}", finding.id, finding.title);
    }
    match &report.proof {
        Some(proof) => {
            let proof = proof.replacen(&format!("{}: ", report.rule), "", 1);
            let _ = writeln!(out, "  proof   {proof}");
        }
        None => {
            let _ = writeln!(
                out,
                "  proof   not run (`cargo xtask prove {}`)",
                report.rule
            );
        }
    }
    let _ = writeln!(out, "\n  verdict: {}", report.verdict);
    for reason in &report.reasons {
        let _ = writeln!(out, "    - {reason}");
    }
    out
}

fn markdown(report: &RuleReport) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "### `{}` — {}\n", report.rule, report.verdict);
    let _ = writeln!(out, "> {}\n", report.text);
    let _ = writeln!(
        out,
        "Defined at `{}`. {}\n",
        report.defined_at,
        match &report.results {
            Some(results) => results.clone(),
            None => "Annotations only (no test results).".to_owned(),
        }
    );
    let _ = writeln!(out, "| | site | item or test | result |");
    let _ = writeln!(out, "|---|---|---|---|");
    for site in &report.impls {
        let stale = if site.stale { " (stale)" } else { "" };
        let _ = writeln!(
            out,
            "| impl | `{}`{stale} | {} | |",
            site.at,
            site.item
                .as_deref()
                .map(|i| format!("`{i}`"))
                .unwrap_or_default()
        );
    }
    for site in &report.verifies {
        let stale = if site.stale { " (stale)" } else { "" };
        let _ = writeln!(
            out,
            "| verify | `{}`{stale} | {} | {} |",
            site.at,
            site.test
                .as_deref()
                .map(|t| format!("`{t}`"))
                .unwrap_or_default(),
            site.result.as_deref().unwrap_or("")
        );
    }
    if !report.closes.is_empty() {
        let closes: Vec<String> = report
            .closes
            .iter()
            .map(|f| format!("{} ({})", f.id, f.title))
            .collect();
        let _ = writeln!(out, "\nCloses: {}.", closes.join(", "));
    }
    let _ = writeln!(
        out,
        "\nProof: {}",
        report
            .proof
            .as_deref()
            .map_or("not run".to_owned(), |p| p.replacen(
                &format!("{}: ", report.rule),
                "",
                1
            ))
            .replace('\n', "<br>")
    );
    if !report.reasons.is_empty() {
        out.push('\n');
    }
    for reason in &report.reasons {
        let _ = writeln!(out, "- {reason}");
    }
    out
}

#[cfg(test)]
mod tests {
    use crate::model::tree::Memory;

    const CONFIG: &str = "specs (\n  {\n    name demo\n    include (docs/demo.md)\n    impls (\n      {\n        name rust\n        include (src/**/*.rs)\n      }\n    )\n  }\n)\n";

    /// A line without `>` continues the blockquote (markdown's lazy continuation): the trace
    /// quotes it with the rest of the rule.
    // i[verify trace.rule-output]
    #[test]
    fn the_rule_text_keeps_a_lazy_continuation_line() {
        let memory = Memory::new([
            (".config/tracey/config.styx", CONFIG),
            (
                "docs/demo.md",
                "# Demo\n\n> t[demo.alpha]\n> Alpha holds\nwith exit 2.\n\nProse.\n",
            ),
            ("src/lib.rs", "// t[impl demo.alpha]\npub fn alpha() {}\n"),
        ]);
        let read = crate::trace::usable(crate::spec_check::read(&memory)).expect("a usable tree");
        let report = super::trace(&memory, &read, &[], "demo.alpha", None).expect("traced");
        assert_eq!(report.text, "Alpha holds with exit 2.");
    }
}
