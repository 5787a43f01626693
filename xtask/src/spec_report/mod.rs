//! `cargo xtask spec-report` — one self-contained HTML file (no network at view time) a reviewer
//! can open: coverage per spec and per crate as bars, every rule with its text, its implementing
//! and verifying sites (linked), its tests' last results and the findings it closes, the findings
//! with their verdicts, and the rules whose only verifying tests were skipped, highlighted.
//!
//! It reads the tree once ([`crate::spec_check::read`]) and judges it with the spec gate
//! ([`crate::spec_check::check_read`]: the per-spec counts are the gate's own) and the trace
//! ([`crate::trace::everything`]: per rule and per finding), so the page, `spec-check --json` and
//! `trace` never disagree.

mod html;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::model::paths;
use crate::spec_check::{self, crate_layout};
use crate::trace::results::DEFAULT_SKIPS;

/// Arguments of `cargo xtask spec-report`.
#[derive(clap::Args)]
pub struct Args {
    /// Root of the tree (default: the cargo workspace above the current directory).
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
    /// Where to write the page (default: target/spec-report.html under the root).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// nextest JUnit file of a test run (default: the configured `results`,
    /// target/nextest/ci/junit.xml, when it exists).
    #[arg(long, value_name = "JUNIT_XML")]
    results: Option<PathBuf>,
    /// Skip ledger of that run (default: target/holdfast-test-skips.jsonl).
    #[arg(long, value_name = "LEDGER_JSONL")]
    skips: Option<PathBuf>,
    /// Report annotations only, even when a results file exists.
    #[arg(long, conflicts_with_all = ["results", "skips"])]
    no_results: bool,
}

/// Coverage of one crate: the rules implemented in it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CrateCoverage {
    /// Rules with a current `impl` annotation in the crate.
    pub rules: usize,
    /// Of those, rules with a current `verify` annotation (anywhere).
    pub verified: usize,
    /// Of those, rules with a verifying test that passed (test-backed only).
    pub tested: usize,
}

/// Writes the report; exit 0 when written, 2 when the tree or results cannot be read.
// i[impl spec-report.file]
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let root = match crate::root::find(args.root.as_deref()) {
        Ok(root) => root,
        Err(message) => {
            eprintln!("error: spec-report: {message}");
            return Ok(ExitCode::from(spec_check::USAGE_ERROR));
        }
    };
    crate::output::print(&crate::root::banner(&root));
    if let Err(message) = paths::load(&root) {
        eprintln!("error: spec-report: {message}");
        return Ok(ExitCode::from(spec_check::USAGE_ERROR));
    }
    let results = if args.no_results {
        None
    } else {
        args.results
            .clone()
            .or_else(|| Some(root.join(paths::of(&root).results)).filter(|p| p.is_file()))
    };
    let skips = args
        .skips
        .clone()
        .unwrap_or_else(|| root.join(DEFAULT_SKIPS));
    let skips = results.as_ref().map(|_| skips).filter(|p| p.is_file());
    // Read and parsed once: the gate borrows the tree, then the trace keeps it.
    let read = spec_check::read(&root);
    let outcome =
        match spec_check::check_read(&root, &read, results.as_deref(), skips.as_deref(), &[]) {
            Ok(outcome) => outcome,
            Err(problem) => {
                eprintln!("error: spec-report: {problem}");
                return Ok(ExitCode::from(spec_check::USAGE_ERROR));
            }
        };
    let everything = match crate::trace::everything(
        &root,
        read,
        results.as_deref(),
        skips.as_deref(),
        results.is_none(),
    ) {
        Ok(everything) => everything,
        Err(message) => {
            eprintln!("error: spec-report: {message}");
            return Ok(ExitCode::from(spec_check::USAGE_ERROR));
        }
    };
    let crates = per_crate(&root, &everything);
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| root.join("target/spec-report.html"));
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let base = link_base(&root, &out);
    let page = html::page(&outcome, &everything, &crates, &base);
    std::fs::write(&out, page)?;
    crate::output::print(&format!("spec-report: wrote {}\n", out.display()));
    Ok(ExitCode::SUCCESS)
}

/// Per crate (package of the `impl` sites): rules implemented there, verified, tested.
fn per_crate(
    root: &Path,
    everything: &crate::trace::Everything,
) -> BTreeMap<String, CrateCoverage> {
    let mut crates: BTreeMap<String, CrateCoverage> = BTreeMap::new();
    for (report, analysis_rule) in everything.rules.iter().zip(&everything.tree.rules) {
        let mut packages: Vec<String> = everything
            .tree
            .analyses
            .iter()
            .flat_map(|a| a.rules.iter())
            .filter(|c| c.rule.file == analysis_rule.file && c.rule.line == analysis_rule.line)
            .flat_map(|c| c.impl_sites.iter().filter(|s| !s.stale))
            .filter_map(|site| crate_layout::package_of(root, &site.path).map(|(p, _)| p))
            .collect();
        packages.sort();
        packages.dedup();
        let verified = report.verifies.iter().any(|v| !v.stale);
        let tested = report
            .verifies
            .iter()
            .any(|v| !v.stale && v.result.as_deref() == Some("passed"));
        for package in packages {
            let entry = crates.entry(package).or_default();
            entry.rules += 1;
            entry.verified += usize::from(verified);
            entry.tested += usize::from(tested);
        }
    }
    crates
}

/// How the page links to the tree's files: relative from the page when it is written inside the
/// root, else `file://` URLs.
fn link_base(root: &Path, out: &Path) -> String {
    let dir = out
        .parent()
        .map(|d| d.canonicalize().unwrap_or_else(|_| d.to_path_buf()));
    match dir.as_deref().and_then(|d| d.strip_prefix(root).ok()) {
        Some(relative) => "../".repeat(relative.components().count()),
        None => format!("file://{}/", root.display()),
    }
}
