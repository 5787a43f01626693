//! `cargo xtask attack`: builds the node and holdfast-attack (crates/attack), each unless a flag
//! names a built one (`--holdfast`, `--attacker`), then runs the adversarial suite against the
//! node and passes its exit status on (0 every budget held, 1 a budget broke, 2 it could not
//! measure). The suite itself lives in its own crate, beside the crates it attacks; this is only
//! the command.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{Context as _, bail};

/// `cargo xtask attack`'s flags.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The bounded floods CI runs (smaller, 5 s each) instead of the full ones.
    #[arg(long)]
    pub ci: bool,
    /// Seconds each flood runs (default 20, or 5 with --ci).
    #[arg(long)]
    pub duration: Option<u64>,
    /// Run only this flood (repeatable).
    #[arg(long)]
    pub only: Vec<String>,
    /// Build the node and the attacker with --release.
    #[arg(long)]
    pub release: bool,
    /// Attack this holdfast binary instead of building the checkout's (e.g. an older build, for
    /// a before/after).
    #[arg(long)]
    pub holdfast: Option<PathBuf>,
    /// Run this holdfast-attack binary instead of building it (CI passes the test build's, which
    /// has every dependency built already).
    #[arg(long)]
    pub attacker: Option<PathBuf>,
}

// i[impl xtask.attack+2]
/// Runs the command.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let workspace =
        crate::root::find(None).map_err(|message| anyhow::anyhow!("attack: {message}"))?;
    crate::output::print(&crate::root::banner(&workspace));
    let target = crate::root::target_dir(&workspace);
    if let Some(build) = build_step(&args, &workspace) {
        run_build(build, &packages(&args))?;
    }
    let mut attack = attacker(&args, &workspace, &target);
    let status = attack
        .status()
        .with_context(|| format!("running {}", Path::new(attack.get_program()).display()))?;
    Ok(match status.code() {
        Some(0) => ExitCode::SUCCESS,
        Some(1) => ExitCode::from(1),
        _ => ExitCode::from(2),
    })
}

/// What `cargo build` must build: the attacker and the node, less what the flags name.
fn packages(args: &Args) -> Vec<&'static str> {
    let mut packages = Vec::new();
    if args.attacker.is_none() {
        packages.extend(["-p", "holdfast-attack"]);
    }
    if args.holdfast.is_none() {
        packages.extend(["-p", "holdfast"]);
    }
    packages
}

/// The attacker's command line: the node it attacks, the scale, and target/attack for reports.
fn attacker(args: &Args, workspace: &Path, target: &Path) -> Command {
    let profile = target.join(if args.release { "release" } else { "debug" });
    let node = args
        .holdfast
        .clone()
        .unwrap_or_else(|| profile.join("holdfast"));
    let attacker = args
        .attacker
        .clone()
        .unwrap_or_else(|| profile.join("holdfast-attack"));
    let mut command = Command::new(attacker);
    command
        .current_dir(workspace)
        .arg("--node-bin")
        .arg(&node)
        .args(["--scale", if args.ci { "ci" } else { "full" }])
        .arg("--out")
        .arg(target.join("attack"));
    if let Some(d) = args.duration {
        command.args(["--duration", &d.to_string()]);
    }
    for name in &args.only {
        command.args(["--only", name]);
    }
    command
}

/// The build to run before the attack, or none when both binaries are given: a `cargo build`
/// naming no package would build the workspace's default members instead.
fn build_step(args: &Args, workspace: &Path) -> Option<Command> {
    let packages = packages(args);
    (!packages.is_empty()).then(|| build_command(workspace, &packages, args.release))
}

fn run_build(mut build: Command, packages: &[&str]) -> anyhow::Result<()> {
    eprintln!("attack: cargo build {}", packages.join(" "));
    let status = build.status().context("running cargo build")?;
    if !status.success() {
        bail!("cargo build {} failed: {status}", packages.join(" "));
    }
    Ok(())
}

/// `cargo build PACKAGES [--release]` in `workspace`, without what `cargo xtask` set for running
/// xtask (`i[bench.no-rebuild+2]`).
// i[impl bench.no-rebuild+2]
fn build_command(workspace: &Path, packages: &[&str], release: bool) -> Command {
    let mut command = holdfast_harness::root::cargo();
    command.current_dir(workspace).arg("build").args(packages);
    if release {
        command.arg("--release");
    }
    command
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(args: &Args) -> Vec<String> {
        let c = attacker(args, Path::new("/w"), Path::new("/w/target"));
        std::iter::once(c.get_program())
            .chain(c.get_args())
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    // i[verify bench.no-rebuild+2]
    #[test]
    fn the_attacker_and_node_are_built_without_what_cargo_set_for_running_xtask() {
        // `cargo test` sets it for this binary, as `cargo xtask` does for xtask.
        assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
        let c = build_command(Path::new("/w"), &["-p", "holdfast"], true);
        assert!(
            c.get_envs()
                .any(|(name, value)| name == "CARGO_MANIFEST_DIR" && value.is_none()),
            "CARGO_MANIFEST_DIR removed"
        );
        let args: Vec<_> = c.get_args().collect();
        assert_eq!(args, ["build", "-p", "holdfast", "--release"]);
    }

    // i[verify xtask.attack+2]
    #[test]
    fn the_attacker_gets_the_built_node_or_the_given_one_and_writes_under_target_attack() {
        let ci = Args {
            ci: true,
            duration: None,
            only: vec![],
            release: false,
            holdfast: None,
            attacker: None,
        };
        assert_eq!(
            line(&ci),
            [
                "/w/target/debug/holdfast-attack",
                "--node-bin",
                "/w/target/debug/holdfast",
                "--scale",
                "ci",
                "--out",
                "/w/target/attack"
            ]
        );
        let before = Args {
            ci: false,
            duration: Some(30),
            only: vec!["admin-slowloris".into()],
            release: true,
            holdfast: Some(PathBuf::from("/old/holdfast")),
            attacker: None,
        };
        assert_eq!(
            line(&before),
            [
                "/w/target/release/holdfast-attack",
                "--node-bin",
                "/old/holdfast",
                "--scale",
                "full",
                "--out",
                "/w/target/attack",
                "--duration",
                "30",
                "--only",
                "admin-slowloris"
            ]
        );
    }

    // i[verify xtask.attack+2]
    #[test]
    fn a_given_attacker_and_node_are_run_and_nothing_is_built() {
        let mut args = Args {
            ci: true,
            duration: None,
            only: vec![],
            release: false,
            holdfast: None,
            attacker: None,
        };
        assert_eq!(packages(&args), ["-p", "holdfast-attack", "-p", "holdfast"]);
        args.holdfast = Some(PathBuf::from("/ci/holdfast"));
        assert_eq!(packages(&args), ["-p", "holdfast-attack"]);
        let build = build_step(&args, Path::new("/w")).expect("the attacker is built");
        let built: Vec<_> = build.get_args().collect();
        assert_eq!(built, ["build", "-p", "holdfast-attack"]);
        args.attacker = Some(PathBuf::from("/ci/holdfast-attack"));
        assert!(packages(&args).is_empty(), "both given: nothing to build");
        assert!(
            build_step(&args, Path::new("/w")).is_none(),
            "both given: no cargo build runs (a bare one would build the default members)"
        );
        assert_eq!(
            line(&args),
            [
                "/ci/holdfast-attack",
                "--node-bin",
                "/ci/holdfast",
                "--scale",
                "ci",
                "--out",
                "/w/target/attack"
            ]
        );
    }
}
