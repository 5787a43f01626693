//! Prints a finding's trace as text: the finding, then each rule with its definition, its `impl`
//! sites and its `verify` sites with their tests and fates, then the verdict and its reasons.

use std::fmt::Write as _;

use super::rule_trace::{RuleState, RuleTrace};
use super::verdict::{Judgement, Verdict};
use crate::model::findings::Finding;

/// Lines are wrapped to this width (descriptions only; paths and names are never broken).
const WIDTH: usize = 100;

/// One finding, traced and judged.
pub struct Traced {
    /// The finding.
    pub finding: Finding,
    /// Its rules, in the order the finding names them.
    pub rules: Vec<RuleTrace>,
    /// Its verdict.
    pub judgement: Judgement,
}

/// Renders one traced finding.
// i[impl trace.output]
pub fn finding(out: &mut String, traced: &Traced, findings_file: &str) {
    let finding = &traced.finding;
    let _ = writeln!(out, "{}: {}", finding.id, finding.title);
    let _ = writeln!(out, "  {findings_file}:{}", finding.line);
    for paragraph in finding.description.split("\n\n") {
        out.push('\n');
        wrap(out, paragraph, "  ");
    }
    for trace in &traced.rules {
        out.push('\n');
        rule(out, trace);
    }
    if let Some(still_open) = &finding.still_open {
        out.push('\n');
        wrap(out, &format!("still open: {still_open}"), "  ");
    }
    out.push('\n');
    let judgement = &traced.judgement;
    match judgement.verdict {
        Verdict::Closed => {
            let _ = writeln!(
                out,
                "  verdict: closed — every rule is implemented and verified"
            );
        }
        verdict => {
            let _ = writeln!(out, "  verdict: {}", verdict.word());
            for reason in &judgement.reasons {
                let _ = writeln!(out, "    - {reason}");
            }
        }
    }
}

fn rule(out: &mut String, trace: &RuleTrace) {
    let marker = trace.named.marker();
    match &trace.state {
        RuleState::NotInSpec { similar } => {
            let _ = writeln!(out, "  {marker}: not in the spec yet — finding open");
            if !similar.is_empty() {
                let _ = writeln!(out, "    (did you mean {}?)", similar.join(", "));
            }
        }
        RuleState::OtherVersion(rule) => {
            let _ = writeln!(
                out,
                "  {marker}: stale — the spec now defines {} at {}:{}; re-read it and update the \
                 finding",
                rule.marker(),
                rule.file,
                rule.line
            );
        }
        RuleState::OtherPrefix(rule) => {
            let _ = writeln!(
                out,
                "  {marker}: wrong prefix — the spec defines {} at {}:{}",
                rule.marker(),
                rule.file,
                rule.line
            );
        }
        RuleState::Defined(defined) => {
            let rule = &defined.rule;
            let _ = writeln!(out, "  {marker}  {}:{}", rule.file, rule.line);
            let ellipsis = if defined.more { " …" } else { "" };
            let _ = writeln!(out, "    {}{ellipsis}", defined.first_line);
            if defined.impls.is_empty() {
                let _ = writeln!(out, "    impl    (none)");
            }
            for site in &defined.impls {
                let stale = if site.stale {
                    "  (stale reference)"
                } else {
                    ""
                };
                let _ = writeln!(out, "    impl    {}:{}{stale}", site.file, site.line);
            }
            if defined.verifies.is_empty() {
                let _ = writeln!(out, "    verify  (none)");
            }
            for verify in &defined.verifies {
                let test = verify
                    .test
                    .as_deref()
                    .unwrap_or("(no test function follows)");
                let fate = if verify.site.stale {
                    "  (stale reference)".to_owned()
                } else {
                    verify
                        .fate
                        .as_ref()
                        .map(|fate| format!("  {}", fate.describe()))
                        .unwrap_or_default()
                };
                let _ = writeln!(
                    out,
                    "    verify  {}:{}  {test}{fate}",
                    verify.site.file, verify.site.line
                );
            }
        }
    }
}

/// The one-line-per-finding table that ends `--all`.
pub fn summary(out: &mut String, traced: &[Traced]) {
    let _ = writeln!(out, "summary");
    let id_width = traced.iter().map(|t| t.finding.id.len()).max().unwrap_or(2);
    let mut counts = [0usize; 3];
    for t in traced {
        let verdict = t.judgement.verdict;
        counts[verdict as usize] += 1;
        let _ = writeln!(
            out,
            "  {:id_width$}  {:9}  {}",
            t.finding.id,
            verdict.word(),
            t.finding.title
        );
    }
    let _ = writeln!(
        out,
        "{} findings: {} closed, {} open, {} regressed",
        traced.len(),
        counts[Verdict::Closed as usize],
        counts[Verdict::Open as usize],
        counts[Verdict::Regressed as usize]
    );
}

/// Appends `text` word-wrapped to [`WIDTH`], each line indented by `indent`.
pub fn wrap(out: &mut String, text: &str, indent: &str) {
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && indent.len() + line.len() + 1 + word.chars().count() > WIDTH {
            let _ = writeln!(out, "{indent}{line}");
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        let _ = writeln!(out, "{indent}{line}");
    }
}
