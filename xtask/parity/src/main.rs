//! `spec-parity` (run as `cargo xtask tracey-parity`): finds the root and tracey, compares, prints
//! the table, writes it with `--out`, and exits 0 when every difference is explained, 1 otherwise,
//! 2 when nothing was judged (no root, no tracey, tracey failed).

use std::path::PathBuf;
use std::process::{Command, ExitCode};

use clap::Parser;
use holdfast_command::exit::USAGE_ERROR;

#[derive(Parser)]
#[command(
    name = "spec-parity",
    bin_name = "cargo xtask tracey-parity",
    about = "Compare the gate's counts with a real tracey 1.3.0's on the workspace shapes and this tree"
)]
struct Args {
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

// i[impl spec-check.parity+2]
fn main() -> ExitCode {
    let args = Args::parse();
    let root = match holdfast_command::root::find(args.root.as_deref()) {
        Ok(root) => root,
        Err(message) => return usage_error(&message),
    };
    let tracey = std::env::current_dir().ok().and_then(|cwd| {
        spec_parity::locate::find(
            args.tracey.as_deref(),
            std::env::var_os("TRACEY").as_deref(),
            &cwd,
            std::env::var_os("PATH").as_deref(),
        )
    });
    let Some(tracey) = tracey else {
        return usage_error(
            "no tracey (or no such file): pass --tracey BIN, set TRACEY, or put tracey on PATH \
             (cargo install --locked tracey --version 1.3.0; its build needs Node and pnpm)",
        );
    };
    let run = match spec_parity::compare(
        &root,
        &|| Command::new(&tracey),
        &tracey.display().to_string(),
        spec_parity::RETRY_PAUSE,
    ) {
        Ok(run) => run,
        Err(err) => {
            eprintln!("error: {err}");
            return ExitCode::from(USAGE_ERROR);
        }
    };
    let page = run.page();
    holdfast_command::output::print(&page);
    if let Some(out) = &args.out
        && let Err(err) = std::fs::write(out, &page)
    {
        eprintln!("error: cannot write {}: {err}", out.display());
        return ExitCode::from(USAGE_ERROR);
    }
    if run.agrees() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// `error: tracey-parity: MESSAGE` and exit 2.
fn usage_error(message: &str) -> ExitCode {
    eprintln!("error: tracey-parity: {message}");
    ExitCode::from(USAGE_ERROR)
}
