//! Which tree a command works on, found when it runs: `--root DIR` when given, else the cargo
//! workspace above the current directory. Never the directory xtask was built from: with a shared
//! `CARGO_TARGET_DIR`, one binary serves several checkouts.

use std::path::{Path, PathBuf};

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

/// The first line every command prints: which tree it reads.
pub fn banner(root: &Path) -> String {
    format!("root: {}\n", root.display())
}

#[cfg(test)]
mod tests {
    use super::*;

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
