//! Which tree a command works on, found when it runs: `--root DIR` when given, else the cargo
//! workspace above the current directory. Never the directory xtask was built from: with a shared
//! `CARGO_TARGET_DIR`, one binary serves several checkouts. Also the cargo such a command runs
//! ([`cargo`]), which builds what a plain `cargo` in the same tree would.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The root to work on: `explicit` (which must exist) or the workspace above the current directory.
// i[impl xtask.root]
pub fn find(explicit: Option<&Path>) -> Result<PathBuf, String> {
    match explicit {
        Some(dir) => dir
            .canonicalize()
            .map_err(|err| format!("--root {}: {err}", dir.display())),
        None => {
            let here = std::env::current_dir()
                .map_err(|err| format!("cannot read the current directory: {err}"))?;
            workspace_above(&here).ok_or_else(|| {
                format!(
                    "no cargo workspace (a Cargo.toml with [workspace]) at or above {}; run inside a \
                     checkout or pass --root DIR",
                    here.display()
                )
            })
        }
    }
}

/// The nearest directory at or above `start` whose `Cargo.toml` declares `[workspace]`.
fn workspace_above(start: &Path) -> Option<PathBuf> {
    let start = start.canonicalize().ok()?;
    start
        .ancestors()
        .find(|dir| {
            std::fs::read_to_string(dir.join("Cargo.toml")).is_ok_and(|manifest| {
                manifest
                    .lines()
                    .any(|line| line.trim_start().starts_with("[workspace]"))
            })
        })
        .map(Path::to_path_buf)
}

/// Cargo's target directory for the workspace at `root`: `$CARGO_TARGET_DIR` (relative to the
/// workspace, as cargo reads it there) or `ROOT/target`.
pub fn target_dir(root: &Path) -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => root.join(dir),
        _ => root.join("target"),
    }
}

/// Cargo (`$CARGO`, else `cargo`) for a command that itself runs under `cargo run` (xtask and
/// its drivers) to build, test and run benches with, as a plain cargo ([`as_plain_cargo`]).
// i[impl bench.no-rebuild+2]
pub fn cargo() -> Command {
    let mut command = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    as_plain_cargo(&mut command);
    command
}

/// Makes `command` (a cargo, or a test's stand-in for one) run with the caller's environment
/// without the variables cargo set for running the caller. A build script that reads one of them
/// (ring's reads `CARGO_MANIFEST_DIR` and `CARGO_PKG_*`) reruns when its value changes, so
/// passing them on would rebuild it, and all above it, each time a plain cargo and this command
/// take turns in one target directory.
// i[impl bench.no-rebuild+2]
pub fn as_plain_cargo(command: &mut Command) -> &mut Command {
    for (name, _) in std::env::vars_os() {
        if set_for_a_run(&name) {
            command.env_remove(name);
        }
    }
    command
}

/// Whether `name` is one of the variables cargo sets for a binary it runs (`cargo run`, `cargo
/// test`), describing that binary's package rather than the build a caller asked for. `CARGO`
/// itself stays: it is the cargo to run.
// i[impl bench.no-rebuild+2]
fn set_for_a_run(name: &OsStr) -> bool {
    let Some(name) = name.to_str() else {
        return false;
    };
    matches!(
        name,
        "CARGO_MANIFEST_DIR"
            | "CARGO_MANIFEST_PATH"
            | "CARGO_CRATE_NAME"
            | "CARGO_BIN_NAME"
            | "CARGO_PRIMARY_PACKAGE"
            | "CARGO_RUSTC_CURRENT_DIR"
            | "OUT_DIR"
    ) || name.starts_with("CARGO_PKG_")
}

/// The first line every command prints: which tree it reads.
pub fn banner(root: &Path) -> String {
    format!("root: {}\n", root.display())
}

#[cfg(test)]
mod tests {
    use super::*;

    // i[verify bench.no-rebuild+2]
    #[test]
    fn cargo_runs_without_what_cargo_set_for_running_this_binary_and_with_everything_else() {
        // `cargo test` runs this binary as `cargo run` runs a driver: with these set.
        for name in ["CARGO_MANIFEST_DIR", "CARGO_PKG_NAME", "CARGO_PKG_VERSION"] {
            assert!(std::env::var_os(name).is_some(), "{name} set by cargo test");
        }
        let removed: Vec<String> = cargo()
            .get_envs()
            .filter(|(_, value)| value.is_none())
            .map(|(name, _)| name.to_string_lossy().into_owned())
            .collect();
        for name in ["CARGO_MANIFEST_DIR", "CARGO_PKG_NAME", "CARGO_PKG_VERSION"] {
            assert!(
                removed.iter().any(|r| r == name),
                "{name} removed: {removed:?}"
            );
        }
        for name in [
            "CARGO_MANIFEST_PATH",
            "CARGO_PKG_VERSION_PRE",
            "CARGO_CRATE_NAME",
            "CARGO_BIN_NAME",
            "CARGO_PRIMARY_PACKAGE",
            "OUT_DIR",
        ] {
            assert!(set_for_a_run(OsStr::new(name)), "{name}");
        }
        // What the caller chose for the build stays: it is the build the caller asked for.
        for name in [
            "CARGO",
            "CARGO_HOME",
            "CARGO_TARGET_DIR",
            "CARGO_INCREMENTAL",
            "CARGO_PROFILE_RELEASE_DEBUG",
            "CARGO_BUILD_JOBS",
            "CARGO_ENCODED_RUSTFLAGS",
            "RUSTFLAGS",
            "PATH",
            "HOLDFAST_BENCH_OUT",
        ] {
            assert!(!set_for_a_run(OsStr::new(name)), "{name}");
        }
    }

    #[test]
    fn the_nearest_workspace_manifest_wins_over_member_manifests() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path().canonicalize().expect("canonical");
        std::fs::write(root.join("Cargo.toml"), "[workspace]\nmembers = [\"a\"]\n").expect("write");
        std::fs::create_dir_all(root.join("a/src")).expect("mkdir");
        std::fs::write(root.join("a/Cargo.toml"), "[package]\nname = \"a\"\n").expect("write");
        assert_eq!(workspace_above(&root.join("a/src")), Some(root.clone()));
        assert_eq!(workspace_above(&root), Some(root));
    }
}
