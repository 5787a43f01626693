//! `cargo xtask spec-check`: the command line over the engine's spec gate
//! ([`spec_engine::spec_check`]): finding the root, the flags, printing and the exit code.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use spec_engine::spec_check::report::{self, Format};
use spec_engine::spec_check::{check, parity};

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

/// Arguments of `cargo xtask tracey-parity`.
#[derive(clap::Args)]
pub struct ParityArgs {
    /// Root of the workspace compared beside the shapes (default: the cargo workspace above the
    /// current directory).
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
    /// The tracey 1.3.0 binary (default: `$TRACEY`, else `tracey` on `PATH`).
    #[arg(long, value_name = "BIN")]
    tracey: Option<PathBuf>,
    /// Also write the table as markdown to FILE (docs/audit/tracey-parity.md).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
}

/// The command that writes `docs/audit/tracey-parity.md`, as the page names it.
const PARITY_COMMAND: &str = "cargo xtask tracey-parity --out docs/audit/tracey-parity.md";

/// Runs tracey and the gate on every workspace shape and on the workspace and prints their counts
/// side by side: exit 0 when every difference is explained, 1 otherwise, 2 without a tracey.
// i[impl spec-check.parity]
pub fn parity(args: ParityArgs) -> anyhow::Result<ExitCode> {
    let root = match crate::root::find(args.root.as_deref()) {
        Ok(root) => root,
        Err(message) => {
            eprintln!("error: tracey-parity: {message}");
            return Ok(ExitCode::from(USAGE_ERROR));
        }
    };
    let Some(tracey) = args.tracey.or_else(find_tracey) else {
        eprintln!(
            "error: tracey-parity: no tracey: pass --tracey BIN, set TRACEY, or put tracey on PATH \
             (cargo install --locked tracey --version 1.3.0; its build needs Node and pnpm)"
        );
        return Ok(ExitCode::from(USAGE_ERROR));
    };
    let version = Command::new(&tracey)
        .arg("--version")
        .output()
        .map_err(|err| anyhow::anyhow!("cannot run {}: {err}", tracey.display()))?;
    let version = String::from_utf8_lossy(&version.stdout)
        .lines()
        .next()
        .unwrap_or("tracey (version unknown)")
        .trim()
        .to_owned();
    // The shapes' trees, and tracey's daemon state (XDG_STATE_HOME), in a directory of this run's.
    let work = std::env::temp_dir().join(format!("holdfast-tracey-parity-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    let state = work.join("state");
    std::fs::create_dir_all(&state)?;
    let compared = (|| -> anyhow::Result<Vec<parity::Comparison>> {
        let mut compared = Vec::new();
        for shape in spec_engine::shapes::all() {
            let dir = work.join("trees").join(shape.name);
            for (path, text) in &shape.files {
                let path = dir.join(path);
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                std::fs::write(path, text)?;
            }
            compared.push(compare_one(
                &tracey,
                &state,
                shape.name,
                &dir.canonicalize()?,
            )?);
        }
        compared.push(compare_one(&tracey, &state, "this workspace", &root)?);
        Ok(compared)
    })();
    let _ = std::fs::remove_dir_all(&work);
    let compared = compared?;
    let page = parity::render(&compared, PARITY_COMMAND, &version);
    crate::output::print(&page);
    if let Some(out) = args.out {
        std::fs::write(&out, &page)
            .map_err(|err| anyhow::anyhow!("cannot write {}: {err}", out.display()))?;
    }
    Ok(if compared.iter().all(parity::Comparison::agrees) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `$TRACEY`, else the first `tracey` on `PATH`.
fn find_tracey() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("TRACEY").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(path));
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join("tracey"))
        .find(|path| path.is_file())
}

/// The gate and `tracey query status` on the tree at `dir` (tracey's daemon is stopped after).
fn compare_one(
    tracey: &Path,
    state: &Path,
    name: &str,
    dir: &Path,
) -> anyhow::Result<parity::Comparison> {
    let outcome = check(&spec_engine::Disk::new(dir), &[], None, &[])
        .map_err(|problem| anyhow::anyhow!("{name}: the gate cannot judge the tree: {problem}"))?;
    let run = |args: &[&str]| {
        Command::new(tracey)
            .args(args)
            .current_dir(dir)
            .env("XDG_STATE_HOME", state)
            .output()
    };
    // The first query starts tracey's daemon and gives up when it takes more than 5 s to listen
    // (a big tree on a busy machine), answering `Error: Cancelled`: ask again while it starts.
    let mut answer = String::new();
    for attempt in 0..6 {
        if attempt > 0 {
            std::thread::sleep(std::time::Duration::from_secs(2));
        }
        let output = run(&["query", "status"])
            .map_err(|err| anyhow::anyhow!("cannot run {}: {err}", tracey.display()))?;
        answer = String::from_utf8_lossy(&output.stdout).into_owned();
        if !answer.trim_start().starts_with("Error:") {
            break;
        }
    }
    let _ = run(&["kill"]);
    let answer = parity::parse(&answer).map_err(|err| anyhow::anyhow!("{name}: {err}"))?;
    Ok(parity::compare(name, &outcome, &answer))
}
