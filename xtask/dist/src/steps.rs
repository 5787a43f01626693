//! The programs the package is made with: cargo (the build), the built `holdfast` (its account
//! of itself, its man pages and completions), cargo-deb (the package) and git (the commit).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

// `cargo run -p holdfast-dist` set CARGO_PKG_* and CARGO_MANIFEST_DIR for this binary; cargo
// without them builds what a plain `cargo` in the tree would, rebuilding nothing for their sake.
use holdfast_command::root::cargo;

use crate::error::Error;
use crate::package::{COMPLETIONS, FEATURES, Profile};
use crate::prebuilt::{self, Refused};

/// `Error::Run` for the command line `what`.
fn running(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let what = what.into();
    move |source| Error::Run { what, source }
}

/// `Error::Write` for `what` (`creating`, `writing`, `clearing`) at `path`.
fn writing(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.to_path_buf();
    move |source| Error::Write { what, path, source }
}

/// Whether `cargo deb` runs.
///
/// # Errors
///
/// It does not ([`Error::NoCargoDeb`]).
pub fn cargo_deb_present() -> Result<(), Error> {
    let found = cargo()
        .args(["deb", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if found {
        Ok(())
    } else {
        Err(Error::NoCargoDeb)
    }
}

/// Builds the binary, with the commit it is built from named for `holdfast version`.
///
/// # Errors
///
/// cargo cannot run or the build fails.
pub fn build(workspace: &Path, profile: Profile) -> Result<(), Error> {
    let mut command = cargo();
    command
        .current_dir(workspace)
        .args(["build", "-p", "holdfast", "--features", FEATURES])
        .args(["--profile", profile.cargo_name()]);
    if std::env::var_os("HOLDFAST_GIT_COMMIT").is_none()
        && let Some(commit) = git_commit(workspace)
    {
        command.env("HOLDFAST_GIT_COMMIT", commit);
    }
    let status = command.status().map_err(running("cargo build"))?;
    if !status.success() {
        return Err(Error::Failed(format!(
            "dist deb: building holdfast failed ({status})"
        )));
    }
    Ok(())
}

/// Whether the binary another build left has every one of [`FEATURES`], by its own account
/// (`holdfast version --json`, judged by [`prebuilt::judge`]). A binary built at another commit
/// than `head` is packaged with a warning (its sources may be the same: the commit is only what
/// its build read).
///
/// # Errors
///
/// There is no binary, it cannot say, or [`prebuilt::judge`] refuses it.
// i[impl dist.deb.no-build]
pub fn prebuilt_has_every_feature(
    binary: &Path,
    profile: Profile,
    head: Option<&str>,
) -> Result<(), Error> {
    if !binary.is_file() {
        return Err(Refused::Missing {
            binary: binary.to_path_buf(),
            build: profile.build_command(),
        }
        .into());
    }
    let out = Command::new(binary)
        .args(["version", "--json"])
        .output()
        .map_err(running(format!("{} version --json", binary.display())))?;
    if !out.status.success() {
        return Err(Refused::Unanswered {
            said: format!("failed ({})", out.status),
        }
        .into());
    }
    prebuilt::judge(binary, profile, &out.stdout)?;
    if let (Some(built_at), Some(head)) = (prebuilt::commit_of(&out.stdout), head)
        && built_at != head
    {
        eprintln!(
            "dist deb --no-build: warning: {} was built at commit {built_at}, HEAD is {head}",
            binary.display()
        );
    }
    Ok(())
}

/// The commit checked out in `workspace`, when git names one.
pub fn git_commit(workspace: &Path) -> Option<String> {
    let out = Command::new("git")
        .current_dir(workspace)
        .args(["rev-parse", "HEAD"])
        .output()
        .ok()?;
    let sha = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (out.status.success() && !sha.is_empty()).then_some(sha)
}

/// Man pages into `dist/man/`, completions into `dist/completions/`, each written by the binary
/// being packaged, so they describe exactly its command line. The directory is emptied first, so
/// a page of a subcommand that no longer exists is not packaged.
///
/// # Errors
///
/// The binary fails to write them, or they cannot be written.
pub fn generate_docs(binary: &Path, dist: &Path) -> Result<(), Error> {
    if dist.exists() {
        std::fs::remove_dir_all(dist).map_err(writing("clearing", dist))?;
    }
    let man = dist.join("man");
    let status = Command::new(binary)
        .arg("man")
        .arg(&man)
        .stdout(Stdio::null())
        .status()
        .map_err(running(format!("{} man", binary.display())))?;
    if !status.success() {
        return Err(Error::Failed(format!(
            "dist deb: `holdfast man` failed ({status})"
        )));
    }
    let completions = dist.join("completions");
    std::fs::create_dir_all(&completions).map_err(writing("creating", &completions))?;
    for (shell, file) in COMPLETIONS {
        let out = Command::new(binary)
            .args(["completions", shell])
            .output()
            .map_err(running(format!("{} completions {shell}", binary.display())))?;
        if !out.status.success() || out.stdout.is_empty() {
            return Err(Error::Failed(format!(
                "dist deb: `holdfast completions {shell}` failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        let path = completions.join(file);
        std::fs::write(&path, &out.stdout).map_err(writing("writing", &path))?;
    }
    Ok(())
}

/// cargo-deb over the products already built, with crates/node's `[package.metadata.deb]` (the
/// unit, the conffile and dist/debian/'s maintainer scripts); returns the path of the `.deb`.
///
/// # Errors
///
/// cargo-deb cannot run, fails, or prints no `.deb`.
// i[impl dist.deb.install]
pub fn package(workspace: &Path, profile: Profile, out: &Path) -> Result<PathBuf, Error> {
    let output = cargo()
        .current_dir(workspace)
        .args(["deb", "-p", "holdfast", "--no-build", "--no-dbgsym"])
        .args(["--profile", profile.cargo_name()])
        .arg("--output")
        .arg(out)
        .stderr(Stdio::inherit())
        .output()
        .map_err(running("cargo deb"))?;
    if !output.status.success() {
        return Err(Error::Failed(format!(
            "dist deb: cargo deb failed ({})",
            output.status
        )));
    }
    deb_path(&String::from_utf8_lossy(&output.stdout))
        .ok_or_else(|| Error::Failed("cargo deb did not print the path of a .deb".to_owned()))
}

/// The `.deb` cargo-deb names on its last such line of stdout.
fn deb_path(stdout: &str) -> Option<PathBuf> {
    stdout
        .lines()
        .map(str::trim)
        .rfind(|l| l.ends_with(".deb"))
        .map(PathBuf::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prebuilt::{features_of, missing_features};

    // i[verify dist.deb.no-build]
    #[test]
    fn a_prebuilt_binary_is_packaged_only_with_every_feature() {
        let json = |features: &str| {
            format!(r#"{{"version":"0.1.0","commit":null,"features":{features}}}"#)
        };
        let built = features_of(json(r#"["etcd"]"#).as_bytes()).expect("features");
        assert!(missing_features(&built).is_empty());
        let built = features_of(json(r#"["testing-modules"]"#).as_bytes()).expect("features");
        assert_eq!(missing_features(&built), ["etcd"]);
        let built = features_of(json("[]").as_bytes()).expect("features");
        assert_eq!(missing_features(&built), ["etcd"]);
        assert!(features_of(b"holdfast 0.1.0").is_none());
        let missing = tempfile::tempdir().expect("tempdir");
        let err =
            prebuilt_has_every_feature(&missing.path().join("holdfast"), Profile::Debug, None)
                .expect_err("no binary");
        assert!(
            err.to_string()
                .contains("cargo build -p holdfast --features etcd --profile dev"),
            "{err}"
        );
    }

    /// A stand-in `holdfast` in `dir` whose `version --json` prints `json`.
    fn stand_in_holdfast(dir: &Path, json: &str) -> std::path::PathBuf {
        use std::os::unix::fs::PermissionsExt as _;
        let path = dir.join("holdfast");
        std::fs::write(&path, format!("#!/bin/sh\ncat <<'EOF'\n{json}\nEOF\n")).expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        path
    }

    // i[verify dist.deb.no-build]
    #[test]
    fn a_prebuilt_binary_is_asked_for_its_features_and_a_release_refuses_test_ones() {
        let dir = tempfile::tempdir().expect("tempdir");
        let binary = stand_in_holdfast(
            dir.path(),
            r#"{"commit":"abc","features":["testing-modules"]}"#,
        );
        let err = prebuilt_has_every_feature(&binary, Profile::Debug, Some("abc"))
            .expect_err("lacks etcd");
        assert!(
            err.to_string().contains("lacks the feature(s) etcd"),
            "{err}"
        );
        let binary = stand_in_holdfast(
            dir.path(),
            r#"{"commit":"abc","features":["etcd","testing-modules"]}"#,
        );
        prebuilt_has_every_feature(&binary, Profile::Debug, Some("abc"))
            .expect("CI's debug package");
        let err = prebuilt_has_every_feature(&binary, Profile::Release, Some("abc"))
            .expect_err("a release package of a test build");
        assert!(
            err.to_string()
                .contains("test-only feature testing-modules"),
            "{err}"
        );
        let binary = stand_in_holdfast(dir.path(), r#"{"commit":"abc","features":["etcd"]}"#);
        prebuilt_has_every_feature(&binary, Profile::Release, Some("def"))
            .expect("another commit is a warning");
        assert_eq!(
            crate::prebuilt::commit_of(br#"{"commit":"abc"}"#).as_deref(),
            Some("abc")
        );
        assert_eq!(crate::prebuilt::commit_of(br#"{"commit":null}"#), None);
    }

    #[test]
    fn the_package_is_the_last_deb_cargo_deb_names() {
        assert_eq!(
            deb_path("warning: x\n/t/debian/holdfast_0.1.0_amd64.deb\n"),
            Some(PathBuf::from("/t/debian/holdfast_0.1.0_amd64.deb"))
        );
        assert_eq!(deb_path("nothing here\n"), None);
    }
}
