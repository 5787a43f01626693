//! The review as text (after the gate's own report), as one pull-request comment in Markdown,
//! and as JSON for tools (`{"gate": …, "review": …}`).

use std::fmt::Write as _;

use super::{Annotation, Changed, Counts, CoverageRow, Fate, Problem, ProofState, Review};
use crate::spec_check::report::{self, Format, Outcome};

/// Renders `review` beside the gate's `outcome` on the head, in `format`.
// i[impl spec-check.review.output]
pub fn render(review: &Review, outcome: &Outcome, format: Format) -> String {
    match format {
        Format::Text => {
            let mut out = report::render(outcome, Format::Text);
            out.push('\n');
            out.push_str(&text(review));
            out
        }
        Format::Markdown => markdown(review, outcome),
        Format::Json => {
            let value = serde_json::json!({ "gate": outcome, "review": review });
            let mut json = serde_json::to_string_pretty(&value)
                .unwrap_or_else(|err| format!("{{\"error\":\"cannot serialize: {err}\"}}"));
            json.push('\n');
            json
        }
    }
}

fn changed(c: Changed) -> &'static str {
    match c {
        Changed::ImplOnly => "implementation only — its tests did not change",
        Changed::VerifyOnly => "tests only",
        Changed::Both => "implementation and tests",
    }
}

/// A touched rule's proof state in the comment: stale in bold, the reviewer's cue.
fn proof_cell(proof: &ProofState) -> String {
    match proof {
        ProofState::Stale { .. } => format!("**{}**", proof.describe()),
        _ => proof.describe(),
    }
}

fn fate(f: Fate) -> &'static str {
    match f {
        Fate::Added => "added",
        Fate::Dropped => "dropped",
        Fate::Moved => "moved",
    }
}

fn counts(c: Option<Counts>) -> [String; 5] {
    match c {
        None => std::array::from_fn(|_| "—".to_owned()),
        Some(c) => [
            c.total.to_string(),
            c.implemented.to_string(),
            c.verified.to_string(),
            c.tested.map_or_else(|| "—".to_owned(), |t| t.to_string()),
            c.proven.to_string(),
        ],
    }
}

/// `before → after`, or one number when equal.
fn cell(before: &str, after: &str) -> String {
    if before == after {
        before.to_owned()
    } else {
        format!("{before} → {after}")
    }
}

fn row_cells(row: &CoverageRow) -> Vec<String> {
    let before = counts(row.before);
    let after = counts(row.after);
    before.iter().zip(&after).map(|(b, a)| cell(b, a)).collect()
}

const COLUMNS: [&str; 6] = [
    "spec",
    "rules",
    "implemented",
    "verified",
    "tested",
    "proven",
];

fn problem_line(problem: &Problem) -> String {
    if problem.file.is_empty() {
        format!("[{}] {}", problem.kind.name(), problem.message)
    } else {
        format!(
            "{}:{}: [{}] {}",
            problem.file,
            problem.line,
            problem.kind.name(),
            problem.message
        )
    }
}

/// One annotation's line; in Markdown (`code`) where it came from is a code span, so an item
/// such as `impl From<T>` is shown, not taken for HTML.
fn annotation_line(a: &Annotation, code: bool) -> String {
    let from = a.from.as_ref().map_or_else(String::new, |from| {
        if code {
            format!(" (from `{from}`)")
        } else {
            format!(" (from {from})")
        }
    });
    format!(
        "{} `{}` {} at {} on `{}`{from}",
        fate(a.fate),
        a.verb,
        a.rule,
        a.at,
        a.item
    )
}

fn text(review: &Review) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "review against {}:", review.base);
    let mut any = false;
    let mut list = |out: &mut String, title: &str, lines: Vec<String>| {
        if !lines.is_empty() {
            any = true;
            let _ = writeln!(out, "  {title}:");
            for line in lines {
                let _ = writeln!(out, "    {line}");
            }
        }
    };
    list(
        &mut out,
        "rules added",
        review
            .added
            .iter()
            .map(|r| format!("{} ({}:{})", r.rule, r.file, r.line))
            .collect(),
    );
    list(
        &mut out,
        "rules removed",
        review.removed.iter().map(|r| r.rule.clone()).collect(),
    );
    list(
        &mut out,
        "rules renamed",
        review
            .renamed
            .iter()
            .map(|r| format!("{} → {}", r.from, r.to.rule))
            .collect(),
    );
    list(
        &mut out,
        "rules bumped",
        review
            .bumped
            .iter()
            .map(|r| format!("{} → {}", r.from, r.to.rule))
            .collect(),
    );
    list(
        &mut out,
        "rules whose level changed",
        review
            .levelled
            .iter()
            .map(|l| format!("{}: {} → {}", l.rule.rule, l.from, l.to))
            .collect(),
    );
    list(
        &mut out,
        "rules whose code or tests changed",
        review
            .touched
            .iter()
            .map(|t| format!("{}: {}; {}", t.rule, changed(t.changed), t.proof.describe()))
            .collect(),
    );
    list(
        &mut out,
        "annotations",
        review
            .annotations
            .iter()
            .map(|a| annotation_line(a, false))
            .collect(),
    );
    if !any {
        let _ = writeln!(out, "  no rule, annotation or annotated item changed");
    }
    let _ = writeln!(out, "  coverage ({}):", COLUMNS[1..].join(", "));
    for row in &review.coverage {
        let _ = writeln!(out, "    {}: {}", row.name, row_cells(row).join(", "));
    }
    match review.problems.len() {
        0 => out.push_str("review: ok\n"),
        n => {
            let _ = writeln!(out, "review: {n} problem{}:", if n == 1 { "" } else { "s" });
            for problem in &review.problems {
                let _ = writeln!(out, "  {}", problem_line(problem));
            }
        }
    }
    out
}

/// Lines shown per list of the Markdown comment; the rest is counted and left to `--json`.
const SHOWN: usize = 50;
/// Items shown per rule whose code or tests changed.
const SHOWN_ITEMS: usize = 10;
/// The comment's size bound in bytes (so in characters too): GitHub refuses a comment over
/// 65,536 characters, and a little room is left.
const COMMENT_BYTES: usize = 60_000;

/// The first [`SHOWN`] of `lines`, and a line counting the rest.
fn capped(lines: Vec<String>) -> Vec<String> {
    let more = lines.len().saturating_sub(SHOWN);
    let mut lines: Vec<String> = lines.into_iter().take(SHOWN).collect();
    if more > 0 {
        lines.push(format!("… and {more} more, see `--json`"));
    }
    lines
}

/// `text` cut at a line boundary to at most `bytes` bytes, saying so when it was cut.
fn bounded(mut text: String, bytes: usize) -> String {
    const CUT: &str = "\n… the rest is cut to fit one comment, see `--json`\n\n";
    if text.len() <= bytes {
        return text;
    }
    let mut end = bytes.saturating_sub(CUT.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    end = text[..end].rfind('\n').map_or(0, |i| i + 1);
    text.truncate(end);
    text.push_str(CUT);
    text
}

fn markdown(review: &Review, outcome: &Outcome) -> String {
    let body = markdown_review(review, outcome);
    let gate = bounded(markdown_gate(outcome), COMMENT_BYTES / 4);
    let mut out = bounded(body, COMMENT_BYTES - gate.len());
    out.push_str(&gate);
    out
}

fn markdown_review(review: &Review, outcome: &Outcome) -> String {
    let mut out = String::new();
    let verdict = if review.passes() && outcome.problems.is_empty() {
        "✅"
    } else {
        "❌"
    };
    let _ = writeln!(out, "### {verdict} Spec review against `{}`\n", review.base);
    match review.problems.len() {
        0 => out.push_str("**No review problems.**\n\n"),
        n => {
            let _ = writeln!(
                out,
                "**{n} review problem{}**\n",
                if n == 1 { "" } else { "s" }
            );
            for problem in review.problems.iter().take(SHOWN) {
                let place = if problem.file.is_empty() {
                    String::new()
                } else {
                    format!("`{}:{}` ", problem.file, problem.line)
                };
                let _ = writeln!(
                    out,
                    "- {place}**{}** {}",
                    problem.kind.name(),
                    problem.message
                );
            }
            if n > SHOWN {
                let _ = writeln!(out, "- … and {} more, see `--json`", n - SHOWN);
            }
            out.push('\n');
        }
    }
    let _ = writeln!(out, "| {} |", COLUMNS.join(" | "));
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|");
    for row in &review.coverage {
        let _ = writeln!(out, "| {} | {} |", row.name, row_cells(row).join(" | "));
    }
    out.push('\n');
    let section = |out: &mut String, title: &str, lines: Vec<String>| {
        if lines.is_empty() {
            return;
        }
        let _ = writeln!(
            out,
            "<details><summary>{title} ({})</summary>\n",
            lines.len()
        );
        for line in capped(lines) {
            let _ = writeln!(out, "- {line}");
        }
        out.push_str("\n</details>\n\n");
    };
    let rule = |r: &super::RuleAt| format!("`{}` ({}:{})", r.rule, r.file, r.line);
    section(
        &mut out,
        "Rules added",
        review.added.iter().map(rule).collect(),
    );
    section(
        &mut out,
        "Rules removed",
        review
            .removed
            .iter()
            .map(|r| format!("`{}`", r.rule))
            .collect(),
    );
    let moved = |r: &super::Renamed| {
        format!(
            "`{}` → {}{}",
            r.from,
            rule(&r.to),
            if r.text_changed { ", text changed" } else { "" }
        )
    };
    section(
        &mut out,
        "Rules renamed",
        review.renamed.iter().map(moved).collect(),
    );
    section(
        &mut out,
        "Rules bumped",
        review.bumped.iter().map(moved).collect(),
    );
    section(
        &mut out,
        "Rules whose level changed",
        review
            .levelled
            .iter()
            .map(|l| format!("`{}`: {} → **{}**", l.rule.rule, l.from, l.to))
            .collect(),
    );
    section(
        &mut out,
        "Rules whose code or tests changed",
        review
            .touched
            .iter()
            .map(|t| {
                let mut items: Vec<String> =
                    t.impl_items.iter().map(|i| format!("impl `{i}`")).collect();
                items.extend(t.verify_items.iter().map(|i| format!("verify `{i}`")));
                let more = items.len().saturating_sub(SHOWN_ITEMS);
                items.truncate(SHOWN_ITEMS);
                if more > 0 {
                    items.push(format!("… and {more} more"));
                }
                format!(
                    "`{}`: **{}**, {} — {}",
                    t.rule,
                    changed(t.changed),
                    proof_cell(&t.proof),
                    items.join("; ")
                )
            })
            .collect(),
    );
    section(
        &mut out,
        "Annotations added, dropped or moved",
        review
            .annotations
            .iter()
            .map(|a| annotation_line(a, true))
            .collect(),
    );
    out
}

/// The gate's problems on the head, the comment's last part.
fn markdown_gate(outcome: &Outcome) -> String {
    let mut out = String::new();
    match outcome.problems.len() {
        0 => out.push_str("Gate on this change: **no problems**.\n"),
        n => {
            let _ = writeln!(
                out,
                "Gate on this change: **{n} problem{}** (`cargo xtask spec-check`):\n",
                if n == 1 { "" } else { "s" }
            );
            for problem in outcome.problems.iter().take(20) {
                let _ = writeln!(out, "- {problem}");
            }
            if n > 20 {
                let _ = writeln!(out, "- … and {} more", n - 20);
            }
        }
    }
    out
}
