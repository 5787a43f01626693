//! The drivers that live in crates of their own (`xtask/drivers/`): the drain demo and the
//! gateway's and forward's benchmark drivers. Each is a binary outside the workspace's
//! `default-members`, with the heavy dependencies xtask itself does without (holdfast-gateway,
//! tokio-tungstenite, plotters); the commands here build and run it with `cargo run -p`, the way
//! `attack` runs crates/attack's binary, and pass its exit status on.

use std::ffi::OsString;
use std::path::Path;
use std::process::{Command, ExitCode};

use anyhow::Context as _;

/// `cargo run --quiet -p PACKAGE -- ARGS` in `workspace`: the driver finds the same root (the
/// workspace above its current directory) and prints its banner itself.
pub fn command(workspace: &Path, package: &str, args: &[OsString]) -> Command {
    let mut command = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    command
        .current_dir(workspace)
        .args(["run", "--quiet", "-p", package, "--"])
        .args(args);
    command
}

// i[impl xtask.layout]
/// Runs the driver `package` with `args` in the checkout above the current directory and passes
/// its exit status on (a driver killed by a signal is a failure to run, 2).
pub fn run(package: &str, args: &[OsString]) -> anyhow::Result<ExitCode> {
    let workspace =
        crate::root::find(None).map_err(|message| anyhow::anyhow!("{package}: {message}"))?;
    let status = command(&workspace, package, args)
        .status()
        .with_context(|| format!("running cargo run -p {package}"))?;
    Ok(match status.code() {
        Some(0) => ExitCode::SUCCESS,
        Some(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        None => ExitCode::from(2),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_driver_runs_with_cargo_run_in_the_workspace_with_its_arguments_after_the_dashes() {
        let c = command(
            Path::new("/w"),
            "holdfast-drain-demo",
            &["--clients".into(), "4".into()],
        );
        let args: Vec<String> = c
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            args,
            [
                "run",
                "--quiet",
                "-p",
                "holdfast-drain-demo",
                "--",
                "--clients",
                "4"
            ]
        );
        assert_eq!(c.get_current_dir(), Some(Path::new("/w")));
    }
}
