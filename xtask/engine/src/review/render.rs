//! The review as text (after the gate's own report), as one pull-request comment in Markdown,
//! and as JSON for tools (`{"gate": …, "review": …}`).

use std::fmt::Write as _;

use super::{Annotation, Changed, Counts, CoverageRow, Fate, Problem, Review};
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

fn annotation_line(a: &Annotation) -> String {
    let from = a
        .from
        .as_ref()
        .map_or_else(String::new, |from| format!(" (from {from})"));
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
        "rules whose code or tests changed",
        review
            .touched
            .iter()
            .map(|t| format!("{}: {}", t.rule, changed(t.changed)))
            .collect(),
    );
    list(
        &mut out,
        "annotations",
        review.annotations.iter().map(annotation_line).collect(),
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

fn markdown(review: &Review, outcome: &Outcome) -> String {
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
            for problem in &review.problems {
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
        for line in lines {
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
        "Rules whose code or tests changed",
        review
            .touched
            .iter()
            .map(|t| {
                let mut items: Vec<String> =
                    t.impl_items.iter().map(|i| format!("impl `{i}`")).collect();
                items.extend(t.verify_items.iter().map(|i| format!("verify `{i}`")));
                format!(
                    "`{}`: **{}** — {}",
                    t.rule,
                    changed(t.changed),
                    items.join("; ")
                )
            })
            .collect(),
    );
    section(
        &mut out,
        "Annotations added, dropped or moved",
        review.annotations.iter().map(annotation_line).collect(),
    );
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
