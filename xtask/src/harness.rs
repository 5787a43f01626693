//! `cargo xtask test`: the command line over holdfast-test-runner (`xtask/runner`), which starts
//! the real services, runs the workspace's tests against them and judges the run with the
//! test-backed spec gate.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use holdfast_test_runner::{Options, Outcome};

/// Arguments of `cargo xtask test`.
#[derive(clap::Args)]
pub struct Args {
    /// Install missing Debian packages first (apt-get; needs root). Implied when CI=true.
    #[arg(long)]
    pub install: bool,
    /// Start the services, print their environment (also written to
    /// target/holdfast-services/env), and keep them running until Ctrl-C instead of running tests.
    #[arg(long)]
    pub services_only: bool,
    /// After the tests and doctests pass, run `cargo xtask prove --ci` while the services are
    /// still up (CI's mutation proof: tests that need a service judge mutants against it).
    #[arg(long, conflicts_with = "services_only")]
    pub prove_ci: bool,
    /// Build the tests the same arguments would run, with the same features, and stop: no
    /// service starts and no test runs (CI builds once for the package and the tests).
    #[arg(long, conflicts_with_all = ["services_only", "prove_ci"])]
    pub no_run: bool,
    /// Install what a test run needs and lacks (Debian packages with apt-get, cargo-nextest,
    /// cargo-mutants), then stop: nothing is built, started or run. Implies --install.
    #[arg(long, conflicts_with_all = ["services_only", "prove_ci", "no_run"])]
    pub install_only: bool,
    /// Arguments for `cargo nextest run` (a filter, `--no-capture`, ...), after `--`.
    #[arg(last = true)]
    pub test_args: Vec<String>,
}

/// Runs `cargo xtask test`: 0 when everything asked for passed, 1 when something failed, 130
/// when interrupted before the gate judged the run.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let options = Options {
        install: args.install,
        services_only: args.services_only,
        // Found now: building the tests can rebuild xtask in place.
        prove_ci: if args.prove_ci {
            Some(xtask_path()?)
        } else {
            None
        },
        no_run: args.no_run,
        install_only: args.install_only,
        test_args: args.test_args,
    };
    Ok(ExitCode::from(exit_code(holdfast_test_runner::run(
        options,
    )?)))
}

/// The exit code of a run that ended with `outcome`: 0 passed, 1 failed, 130 interrupted (as a
/// shell reports a Ctrl-C).
fn exit_code(outcome: Outcome) -> u8 {
    match outcome {
        Outcome::Passed => 0,
        Outcome::Failed => 1,
        Outcome::Interrupted => 130,
    }
}

/// This binary's path, without the " (deleted)" Linux appends once the file has been replaced.
fn xtask_path() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("finding the xtask binary")?;
    Ok(undeleted(exe))
}

/// `exe` without the " (deleted)" suffix `/proc/self/exe` gains once the file is replaced.
fn undeleted(exe: PathBuf) -> PathBuf {
    match exe.to_string_lossy().strip_suffix(" (deleted)") {
        Some(path) => PathBuf::from(path),
        None => exe,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_map_to_0_1_and_130() {
        assert_eq!(exit_code(Outcome::Passed), 0);
        assert_eq!(exit_code(Outcome::Failed), 1);
        assert_eq!(exit_code(Outcome::Interrupted), 130);
    }

    #[test]
    fn a_replaced_binary_is_named_by_its_path() {
        assert_eq!(
            undeleted(PathBuf::from("/t/debug/xtask (deleted)")),
            PathBuf::from("/t/debug/xtask")
        );
        assert_eq!(
            undeleted(PathBuf::from("/t/debug/xtask")),
            PathBuf::from("/t/debug/xtask")
        );
    }
}
