//! Prints the outcome: a table per spec and the problems, as text (terminal), JSON
//! (`{"specs":[..],"problems":[..]}`) or markdown (CI job summaries).

use std::fmt::Write as _;

use serde::Serialize;

use super::coverage::Summary;
use super::problem::Problem;

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Aligned table and one problem per line.
    Text,
    /// One JSON object.
    Json,
    /// GitHub-flavoured markdown.
    Markdown,
}

/// Everything the gate found.
#[derive(Debug, Serialize)]
pub struct Outcome {
    /// The tree that was checked.
    pub root: String,
    /// Which mode ran and on which results.
    pub mode: Mode,
    /// One row per spec (per spec/impl when a spec has several impls).
    pub specs: Vec<Summary>,
    /// Every problem, sorted by place.
    pub problems: Vec<Problem>,
    /// Remarks that do not fail the gate.
    #[serde(skip)]
    pub notes: Vec<String>,
    /// Rules the findings name that no spec defines yet (planned), with the findings naming them.
    pub planned: Vec<String>,
    /// In a test-backed run, the markers of the rules judged by results none of whose tests
    /// passed, whatever their level demands (the ratchet's tested measure).
    #[serde(skip)]
    pub untested: Vec<String>,
}

/// Annotations only, or test-backed by a run's results.
#[derive(Debug, Serialize)]
pub struct Mode {
    /// Whether test results backed the verification.
    pub test_backed: bool,
    /// The results file, relative to the root when inside it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub results: Option<String>,
    /// When the results file was written (UTC).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub written: Option<String>,
    /// Test cases in the results.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cases: Option<usize>,
    /// The skip ledger read, if one was found.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skips: Option<String>,
    /// `--crate`: the packages the run covered (empty: all).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub crates: Vec<String>,
    /// Rules judged by test results.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub judged: Option<usize>,
}

impl Mode {
    /// The lines that open the text output, after `root:`.
    // i[impl spec-check.mode]
    fn lines(&self) -> Vec<String> {
        if !self.test_backed {
            return vec![
                format!("spec-check: {ANNOTATIONS_ONLY}"),
                "  for test-backed: `cargo xtask test` (every crate) or `cargo xtask test -- -p \
                 CRATE` (one crate)"
                    .to_owned(),
            ];
        }
        let mut lines = vec![format!("spec-check: {TEST_BACKED}")];
        let skips = match &self.skips {
            Some(skips) => format!("skips from {skips}"),
            None => "no skip ledger".to_owned(),
        };
        lines.push(format!(
            "results: {} (written {}, {} test cases); {skips}",
            self.results.as_deref().unwrap_or("?"),
            self.written.as_deref().unwrap_or("?"),
            self.cases.unwrap_or(0),
        ));
        if !self.crates.is_empty() {
            lines.push(format!(
                "scope: {} rules verified in {} judged by test results; the rest by annotations \
                 only",
                self.judged.unwrap_or(0),
                self.crates.join(", ")
            ));
        }
        lines
    }
}

const ANNOTATIONS_ONLY: &str = "annotations only — no test results read; a rule counts as verified \
     when a test carries its `verify` annotation";
const TEST_BACKED: &str =
    "test-backed — a rule counts as tested only if one of its verifying tests ran and passed";

/// Renders `outcome` in `format`.
// i[impl spec-check.output]
pub fn render(outcome: &Outcome, format: Format) -> String {
    match format {
        Format::Text => text(outcome),
        Format::Json => {
            let mut json = serde_json::to_string_pretty(outcome).unwrap_or_else(|err| {
                format!("{{\"error\":\"cannot serialize the outcome: {err}\"}}")
            });
            json.push('\n');
            json
        }
        Format::Markdown => markdown(outcome),
    }
}

fn columns(test_backed: bool) -> Vec<&'static str> {
    let mut columns = vec!["spec", "rules", "implemented", "verified", "stale"];
    if test_backed {
        columns.push("tested");
    }
    columns.push("errors");
    columns
}

fn row(summary: &Summary, test_backed: bool) -> Vec<String> {
    let mut row = vec![
        summary.name.clone(),
        summary.total.to_string(),
        summary.implemented.to_string(),
        summary.verified.to_string(),
        summary.stale.to_string(),
    ];
    if test_backed {
        row.push(summary.tested.unwrap_or(0).to_string());
    }
    row.push(summary.errors.to_string());
    row
}

fn text(outcome: &Outcome) -> String {
    let mut out = String::new();
    let test_backed = outcome.mode.test_backed;
    let _ = writeln!(out, "root: {}", outcome.root);
    for line in outcome.mode.lines() {
        let _ = writeln!(out, "{line}");
    }
    if !outcome.specs.is_empty() {
        let header: Vec<String> = columns(test_backed)
            .into_iter()
            .map(str::to_owned)
            .collect();
        let rows: Vec<Vec<String>> = std::iter::once(header)
            .chain(outcome.specs.iter().map(|s| row(s, test_backed)))
            .collect();
        let widths: Vec<usize> = (0..rows[0].len())
            .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
            .collect();
        out.push('\n');
        for cells in &rows {
            let line: Vec<String> = cells
                .iter()
                .enumerate()
                .map(|(i, cell)| {
                    if i == 0 {
                        format!("{cell:<width$}", width = widths[i])
                    } else {
                        format!("{cell:>width$}", width = widths[i])
                    }
                })
                .collect();
            let _ = writeln!(out, "{}", line.join("  ").trim_end());
        }
    }
    if !outcome.notes.is_empty() {
        out.push('\n');
        for note in &outcome.notes {
            let _ = writeln!(out, "note: {note}");
        }
    }
    if !outcome.planned.is_empty() {
        let _ = writeln!(
            out,
            "\nplanned: {} rule{} named by findings not in the spec yet (allowed while no rule of \
             their area exists): {}",
            outcome.planned.len(),
            if outcome.planned.len() == 1 { "" } else { "s" },
            outcome.planned.join(", ")
        );
    }
    out.push('\n');
    match outcome.problems.len() {
        0 => out.push_str("ok: no problems\n"),
        n => {
            let _ = writeln!(out, "{n} problem{}:", if n == 1 { "" } else { "s" });
            for problem in &outcome.problems {
                let _ = writeln!(out, "  {problem}");
            }
        }
    }
    out
}

fn markdown(outcome: &Outcome) -> String {
    let mut out = String::new();
    let test_backed = outcome.mode.test_backed;
    let mode = if test_backed {
        "test-backed"
    } else {
        "annotations only"
    };
    let _ = writeln!(out, "### spec-check ({mode})\n");
    let _ = writeln!(out, "root: `{}`\n", outcome.root);
    if let (Some(results), Some(written)) = (&outcome.mode.results, &outcome.mode.written) {
        let _ = writeln!(out, "results: `{results}` (written {written})\n");
    }
    if !outcome.specs.is_empty() {
        let columns = columns(test_backed);
        let _ = writeln!(out, "| {} |", columns.join(" | "));
        let align: Vec<&str> = columns
            .iter()
            .enumerate()
            .map(|(i, _)| if i == 0 { "---" } else { "---:" })
            .collect();
        let _ = writeln!(out, "| {} |", align.join(" | "));
        for summary in &outcome.specs {
            let _ = writeln!(out, "| {} |", row(summary, test_backed).join(" | "));
        }
        out.push('\n');
    }
    match outcome.problems.len() {
        0 => out.push_str("**No problems.**\n"),
        n => {
            let _ = writeln!(out, "**{n} problem{}**\n", if n == 1 { "" } else { "s" });
            for problem in &outcome.problems {
                let place = match (&problem.file, problem.line) {
                    (Some(file), Some(line)) => format!("`{file}:{line}` "),
                    (Some(file), None) => format!("`{file}` "),
                    _ => String::new(),
                };
                let _ = writeln!(
                    out,
                    "- {place}**{}** {}",
                    problem.kind.name(),
                    problem.message
                );
            }
        }
    }
    if !outcome.notes.is_empty() {
        out.push('\n');
        for note in &outcome.notes {
            let _ = writeln!(out, "- note: {note}");
        }
    }
    if !outcome.planned.is_empty() {
        let _ = writeln!(
            out,
            "\n- planned (named by findings, not in the spec yet): {}",
            outcome.planned.join(", ")
        );
    }
    out
}
