//! `cargo xtask spec-check`: the command line over the engine's spec gate
//! ([`spec_engine::spec_check`]): finding the root, the flags, printing and the exit code.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use spec_engine::spec_check::check;
use spec_engine::spec_check::report::{self, Format};

/// Arguments of `cargo xtask spec-check`.
#[derive(clap::Args)]
pub struct Args {
    /// Root of the tree to check (default: the cargo workspace above the current directory).
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
    /// Print the summary and problems as JSON.
    #[arg(long, conflicts_with = "markdown")]
    json: bool,
    /// Print a markdown table (for CI job summaries).
    #[arg(long)]
    markdown: bool,
    /// JUnit file of a test run: count a rule as verified only if one of its tests passed.
    /// Repeatable: one report per test runner (nextest, pytest, go-junit-report, jest, vitest).
    #[arg(long, value_name = "JUNIT_XML")]
    results: Vec<PathBuf>,
    /// Skip ledger (JSON lines) written by holdfast-test-support during that run.
    #[arg(long, value_name = "LEDGER_JSONL", requires = "results")]
    skips: Option<PathBuf>,
    /// With --results from a run of only these packages: judge by test results only the rules
    /// their tests verify (the others by annotations). Repeatable.
    #[arg(long = "crate", value_name = "PACKAGE", requires = "results")]
    crates: Vec<String>,
}

/// Exit code of a usage or fatal error: nothing was judged.
pub(crate) const USAGE_ERROR: u8 = 2;

/// Runs the gate: exit 0 when every rule is implemented and verified and every reference is sound,
/// 1 (with the list of problems) otherwise, 2 when it could not judge (no such root, unusable
/// results).
// i[impl spec-check.exit-code+2]
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let root = match crate::root::find(args.root.as_deref()) {
        Ok(root) => root,
        Err(message) => {
            eprintln!("error: spec-check: {message}");
            return Ok(ExitCode::from(USAGE_ERROR));
        }
    };
    let format = if args.json {
        Format::Json
    } else if args.markdown {
        Format::Markdown
    } else {
        Format::Text
    };
    let results: Vec<PathBuf> = args
        .results
        .iter()
        .map(|p| root_relative(&root, p))
        .collect();
    let results: Vec<&Path> = results.iter().map(PathBuf::as_path).collect();
    let skips = args.skips.as_deref().map(|p| root_relative(&root, p));
    match check(
        &spec_engine::Disk::new(&root),
        &results,
        skips.as_deref(),
        &args.crates,
    ) {
        Ok(outcome) => {
            crate::output::print(&report::render(&outcome, format));
            Ok(if outcome.problems.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Err(fatal) => {
            if format == Format::Text {
                crate::output::print(&crate::root::banner(&root));
            }
            eprintln!("error: spec-check: {fatal}");
            eprintln!("error: spec-check: nothing was judged (exit 2)");
            Ok(ExitCode::from(USAGE_ERROR))
        }
    }
}

/// A path given on the command line, read relative to the current directory when it exists
/// there, else relative to the root.
fn root_relative(root: &Path, path: &Path) -> PathBuf {
    if path.is_absolute() || path.exists() {
        path.to_path_buf()
    } else {
        root.join(path)
    }
}
