//! The drivers that live in crates of their own: the drain demo and the retry, gateway, forward and
//! spec-check benchmark drivers (`xtask/drivers/`), the .deb build (`xtask/dist`) and the parity with a real
//! tracey (`xtask/parity`). Each is a binary outside the workspace's `default-members`, with the
//! dependencies xtask itself does without (holdfast-gateway, tokio-tungstenite, plotters, and
//! whatever the gate does not need); the commands here build and run it with `cargo run -p`, the way
//! `attack` runs crates/attack's binary. xtask replaces itself with that cargo (exec), and cargo
//! runs the driver the same way, so the driver's exit status is the command's and a Ctrl-C reaches
//! the driver alone, which cleans up before it exits.

use std::ffi::OsString;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Command, ExitCode};

/// `cargo run --quiet --manifest-path ROOT/Cargo.toml -p PACKAGE -- ARGS`, in the caller's
/// directory, so that a relative path among ARGS means what the caller meant; the driver finds
/// the same root (the workspace above its current directory) and prints its banner itself.
/// Cargo runs without what `cargo xtask` set for running xtask, so the driver's build is the one a
/// plain cargo would do (`i[bench.no-rebuild+2]`).
// i[impl bench.no-rebuild+2]
pub fn command(workspace: &Path, package: &str, args: &[OsString]) -> Command {
    let mut command = holdfast_harness::root::cargo();
    command
        .args(["run", "--quiet", "--manifest-path"])
        .arg(workspace.join("Cargo.toml"))
        .args(["-p", package, "--"])
        .args(args);
    command
}

// i[impl xtask.layout+3]
/// Runs the driver `package` with `args` for the checkout above the current directory, in place
/// of this process; returns only when cargo could not be started.
pub fn run(package: &str, args: &[OsString]) -> anyhow::Result<ExitCode> {
    let workspace =
        crate::root::find(None).map_err(|message| anyhow::anyhow!("{package}: {message}"))?;
    let err = command(&workspace, package, args).exec();
    Err(anyhow::anyhow!("running cargo run -p {package}: {err}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_driver_runs_with_cargo_run_on_the_workspace_with_its_arguments_after_the_dashes() {
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
                "--manifest-path",
                "/w/Cargo.toml",
                "-p",
                "holdfast-drain-demo",
                "--",
                "--clients",
                "4"
            ]
        );
        // The caller's directory: `--holdfast ../../target/release/holdfast` from a
        // subdirectory names the binary the caller meant.
        assert_eq!(c.get_current_dir(), None);
    }

    // i[verify bench.no-rebuild+2]
    #[test]
    fn a_driver_is_built_without_what_cargo_set_for_running_xtask() {
        // `cargo test` sets it for this binary, as `cargo xtask` does for xtask.
        assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
        let c = command(Path::new("/w"), "holdfast-bench", &[]);
        assert!(
            c.get_envs()
                .any(|(name, value)| name == "CARGO_MANIFEST_DIR" && value.is_none()),
            "CARGO_MANIFEST_DIR removed"
        );
    }
}
