//! `cargo xtask spec-report`: the command line over the engine's report
//! ([`spec_engine::spec_report`]): finding the root, the flags, writing the page and the exit code.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use spec_engine::model::paths;
use spec_engine::spec_check;
use spec_engine::spec_report::{html, per_crate};
use spec_engine::trace::results::DEFAULT_SKIPS;

use crate::spec_check::USAGE_ERROR;

/// Arguments of `cargo xtask spec-report`.
#[derive(clap::Args)]
pub struct Args {
    /// Root of the tree (default: the cargo workspace above the current directory).
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
    /// Where to write the page (default: target/spec-report.html under the root).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// JUnit file of a test run (default: the configured `results`,
    /// target/nextest/ci/junit.xml, when it exists). Repeatable: one report per test runner.
    #[arg(long, value_name = "JUNIT_XML")]
    results: Vec<PathBuf>,
    /// Skip ledger of that run (default: target/holdfast-test-skips.jsonl).
    #[arg(long, value_name = "LEDGER_JSONL")]
    skips: Option<PathBuf>,
    /// Report annotations only, even when a results file exists.
    #[arg(long, conflicts_with_all = ["results", "skips"])]
    no_results: bool,
}

/// Writes the report; exit 0 when written, 2 when the tree or results cannot be read.
// i[impl spec-report.file]
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let root = match crate::root::find(args.root.as_deref()) {
        Ok(root) => root,
        Err(message) => {
            eprintln!("error: spec-report: {message}");
            return Ok(ExitCode::from(USAGE_ERROR));
        }
    };
    crate::output::print(&crate::root::banner(&root));
    let disk = spec_engine::Disk::new(&root);
    if let Err(message) = paths::load(&disk) {
        eprintln!("error: spec-report: {message}");
        return Ok(ExitCode::from(USAGE_ERROR));
    }
    let results: Vec<PathBuf> = if args.no_results {
        Vec::new()
    } else if args.results.is_empty() {
        Some(root.join(paths::of(&disk).results))
            .filter(|p| p.is_file())
            .into_iter()
            .collect()
    } else {
        args.results.clone()
    };
    let results: Vec<&Path> = results.iter().map(PathBuf::as_path).collect();
    let skips = args
        .skips
        .clone()
        .unwrap_or_else(|| root.join(DEFAULT_SKIPS));
    // The named (or default) ledger, missing or not, as the trace reads it: a missing one is no
    // ledger, never a cue to read the default one instead.
    let skips = Some(skips).filter(|_| !results.is_empty());
    // Read and parsed once: the gate borrows the tree, then the trace keeps it.
    let read = spec_check::read(&disk);
    let outcome = match spec_check::check_read(&disk, &read, &results, skips.as_deref(), &[]) {
        Ok(outcome) => outcome,
        Err(problem) => {
            eprintln!("error: spec-report: {problem}");
            return Ok(ExitCode::from(USAGE_ERROR));
        }
    };
    let everything = match spec_engine::trace::everything(
        &disk,
        read,
        &results,
        skips.as_deref(),
        results.is_empty(),
    ) {
        Ok(everything) => everything,
        Err(message) => {
            eprintln!("error: spec-report: {message}");
            return Ok(ExitCode::from(USAGE_ERROR));
        }
    };
    let crates = per_crate(&disk, &everything);
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| root.join("target/spec-report.html"));
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let base = link_base(&root, &out);
    let debt = spec_engine::spec_report::debt::debt(&disk, &everything.tree);
    let page = html::page(&outcome, &everything, &crates, &debt, &base);
    // The command ends here: freeing the traced tree's allocations one by one (a seventh of the
    // main thread's work at ten times this workspace) would only delay the exit.
    std::mem::forget(everything);
    std::fs::write(&out, page)?;
    crate::output::print(&format!("spec-report: wrote {}\n", out.display()));
    crate::output::print(&format!(
        "spec-report: spec debt: {} entr{}, {} lines; the largest:\n{}",
        debt.len(),
        if debt.len() == 1 { "y" } else { "ies" },
        debt.iter().map(|d| d.size).sum::<usize>(),
        spec_engine::spec_report::debt::top(&debt, 10)
    ));
    Ok(ExitCode::SUCCESS)
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
