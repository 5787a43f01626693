//! `cargo xtask dist deb`: the Debian package of the node. It builds `holdfast` with every feature,
//! has the built binary write its own man pages and completions into `target/PROFILE/dist/`, and
//! hands the rest to cargo-deb, which reads `[package.metadata.deb]` in crates/node/Cargo.toml
//! (the assets, the conffile, the systemd unit and the maintainer scripts under dist/debian/).
//! It prints the path of the `.deb` on its last line.
//! With `--no-build` it builds nothing and packages the binary an earlier build left (CI's test
//! build), once that binary says it has every feature.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use anyhow::{Context as _, bail};

/// `cargo xtask dist`'s flags.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub what: What,
}

/// What to build.
#[derive(Debug, clap::Subcommand)]
pub enum What {
    /// A .deb of the node (cargo-deb; install it with `cargo install --locked cargo-deb`).
    Deb(DebArgs),
}

/// `cargo xtask dist deb`'s flags.
#[derive(Debug, clap::Args)]
pub struct DebArgs {
    /// Package a debug build (faster to build; CI's install test uses it). Default: release.
    #[arg(long)]
    pub debug: bool,
    /// Where the .deb goes (default: target/debian/).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Build nothing: package the `holdfast` an earlier build left in target/PROFILE/ (CI's
    /// `cargo xtask test --no-run`, with the suite's features), which must have every feature.
    #[arg(long)]
    pub no_build: bool,
}

/// The features the package's binary is built with: every one an operator may configure.
pub const FEATURES: &str = "etcd";

/// The shells whose completions the package installs, and the file each is written to.
pub const COMPLETIONS: [(&str, &str); 3] = [
    ("bash", "holdfast.bash"),
    ("zsh", "_holdfast"),
    ("fish", "holdfast.fish"),
];

// i[impl dist.deb+2]
/// Runs the command.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let What::Deb(deb) = args.what;
    let workspace =
        crate::root::find(None).map_err(|message| anyhow::anyhow!("dist: {message}"))?;
    crate::output::print(&crate::root::banner(&workspace));
    let target = crate::root::target_dir(&workspace);
    let profile = Profile::of(deb.debug);
    cargo_deb_present()?;
    let products = target.join(profile.dir());
    let binary = products.join("holdfast");
    if deb.no_build {
        prebuilt_has_every_feature(&binary, profile, git_commit(&workspace).as_deref())?;
    } else {
        build(&workspace, profile)?;
    }
    generate_docs(&binary, &products.join("dist"))?;
    let out = deb.out.unwrap_or_else(|| target.join("debian"));
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let package = package(&workspace, profile, &out)?;
    println!("{}", package.display());
    Ok(ExitCode::SUCCESS)
}

/// The cargo profile the package's binary comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    Release,
    Debug,
}

impl Profile {
    fn of(debug: bool) -> Self {
        if debug { Self::Debug } else { Self::Release }
    }

    /// The directory under the target dir its products land in.
    pub fn dir(self) -> &'static str {
        match self {
            Self::Release => "release",
            Self::Debug => "debug",
        }
    }

    /// Its name as cargo and cargo-deb's `--profile` take it.
    pub fn cargo_name(self) -> &'static str {
        match self {
            Self::Release => "release",
            Self::Debug => "dev",
        }
    }
}

fn cargo_deb_present() -> anyhow::Result<()> {
    let found = Command::new("cargo")
        .args(["deb", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        bail!("dist deb: cargo-deb is not installed: run `cargo install --locked cargo-deb`");
    }
    Ok(())
}

/// The binary, with the commit it is built from named for `holdfast version`.
fn build(workspace: &Path, profile: Profile) -> anyhow::Result<()> {
    let mut command = Command::new("cargo");
    command
        .current_dir(workspace)
        .args(["build", "-p", "holdfast", "--features", FEATURES])
        .args(["--profile", profile.cargo_name()]);
    if std::env::var_os("HOLDFAST_GIT_COMMIT").is_none()
        && let Some(commit) = git_commit(workspace)
    {
        command.env("HOLDFAST_GIT_COMMIT", commit);
    }
    let status = command.status().context("running cargo build")?;
    if !status.success() {
        bail!("dist deb: building holdfast failed ({status})");
    }
    Ok(())
}

// i[impl dist.deb.no-build]
/// Whether the binary another build left has every one of [`FEATURES`], by its own account
/// (`holdfast version --json`); an error says what to build when it has not. More is fine for a
/// debug package (CI's: the test build's binary also has `testing-modules`, inert unless
/// configured), but a release package must not accept a `[testing]` config, so it refuses
/// [`TEST_ONLY_FEATURE`]. A binary built at another commit than `head` is packaged with a
/// warning (its sources may be the same: the commit is only what its build read).
fn prebuilt_has_every_feature(
    binary: &Path,
    profile: Profile,
    head: Option<&str>,
) -> anyhow::Result<()> {
    let build = format!(
        "cargo build -p holdfast --features {FEATURES} --profile {}",
        profile.cargo_name()
    );
    if !binary.is_file() {
        bail!(
            "dist deb --no-build: there is no {} to package: build it first ({build})",
            binary.display()
        );
    }
    let out = Command::new(binary)
        .args(["version", "--json"])
        .output()
        .with_context(|| format!("running {} version --json", binary.display()))?;
    if !out.status.success() {
        bail!(
            "dist deb --no-build: `holdfast version --json` failed ({})",
            out.status
        );
    }
    let built = features_of(&out.stdout)
        .context("dist deb --no-build: `holdfast version --json` named no features")?;
    if profile == Profile::Release && built.iter().any(|f| f == TEST_ONLY_FEATURE) {
        bail!(
            "dist deb --no-build: {} has the test-only feature {TEST_ONLY_FEATURE} (a test build's, \
             e.g. through holdfast-e2e): a release package must not; build it without ({build}) \
             or package a debug build (--debug)",
            binary.display()
        );
    }
    if let (Some(built_at), Some(head)) = (commit_of(&out.stdout), head)
        && built_at != head
    {
        eprintln!(
            "dist deb --no-build: warning: {} was built at commit {built_at}, HEAD is {head}",
            binary.display()
        );
    }
    let missing = missing_features(&built);
    if !missing.is_empty() {
        bail!(
            "dist deb --no-build: {} lacks the feature(s) {}: build it with every feature first ({build})",
            binary.display(),
            missing.join(", ")
        );
    }
    Ok(())
}

/// The feature a test build has and a release package must not (`[testing]` modules).
const TEST_ONLY_FEATURE: &str = "testing-modules";

/// The `commit` of `holdfast version --json`'s output, when it names one.
fn commit_of(json: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(json).ok()?;
    value.get("commit")?.as_str().map(str::to_owned)
}

/// The `features` of `holdfast version --json`'s output.
fn features_of(json: &[u8]) -> Option<Vec<String>> {
    let value: serde_json::Value = serde_json::from_slice(json).ok()?;
    value
        .get("features")?
        .as_array()?
        .iter()
        .map(|f| f.as_str().map(str::to_owned))
        .collect()
}

/// Those of [`FEATURES`] not among `built`.
fn missing_features(built: &[String]) -> Vec<&'static str> {
    FEATURES
        .split(',')
        .filter(|f| !built.iter().any(|b| b == f))
        .collect()
}

fn git_commit(workspace: &Path) -> Option<String> {
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
fn generate_docs(binary: &Path, dist: &Path) -> anyhow::Result<()> {
    if dist.exists() {
        std::fs::remove_dir_all(dist).with_context(|| format!("clearing {}", dist.display()))?;
    }
    let man = dist.join("man");
    let status = Command::new(binary)
        .arg("man")
        .arg(&man)
        .stdout(Stdio::null())
        .status()
        .with_context(|| format!("running {} man", binary.display()))?;
    if !status.success() {
        bail!("dist deb: `holdfast man` failed ({status})");
    }
    let completions = dist.join("completions");
    std::fs::create_dir_all(&completions)
        .with_context(|| format!("creating {}", completions.display()))?;
    for (shell, file) in COMPLETIONS {
        let out = Command::new(binary)
            .args(["completions", shell])
            .output()
            .with_context(|| format!("running {} completions {shell}", binary.display()))?;
        if !out.status.success() || out.stdout.is_empty() {
            bail!(
                "dist deb: `holdfast completions {shell}` failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let path = completions.join(file);
        std::fs::write(&path, &out.stdout)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

// i[impl dist.deb.install]
/// cargo-deb over the products already built, with crates/node's `[package.metadata.deb]` (the
/// unit, the conffile and dist/debian/'s maintainer scripts); returns the path of the `.deb`.
fn package(workspace: &Path, profile: Profile, out: &Path) -> anyhow::Result<PathBuf> {
    let output = Command::new("cargo")
        .current_dir(workspace)
        .args(["deb", "-p", "holdfast", "--no-build", "--no-dbgsym"])
        .args(["--profile", profile.cargo_name()])
        .arg("--output")
        .arg(out)
        .stderr(Stdio::inherit())
        .output()
        .context("running cargo deb")?;
    if !output.status.success() {
        bail!("dist deb: cargo deb failed ({})", output.status);
    }
    // cargo-deb prints the path of the package it wrote on stdout.
    let stdout = String::from_utf8_lossy(&output.stdout);
    stdout
        .lines()
        .map(str::trim)
        .rfind(|l| l.ends_with(".deb"))
        .map(PathBuf::from)
        .context("cargo deb did not print the path of a .deb")
}

#[cfg(test)]
mod tests {
    use super::*;

    // i[verify dist.deb+2]
    #[test]
    fn the_debug_package_comes_from_cargo_s_dev_profile() {
        assert_eq!(Profile::of(true).cargo_name(), "dev");
        assert_eq!(Profile::of(true).dir(), "debug");
        assert_eq!(Profile::of(false).cargo_name(), "release");
        assert_eq!(Profile::of(false).dir(), "release");
    }

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
        assert_eq!(commit_of(br#"{"commit":"abc"}"#).as_deref(), Some("abc"));
        assert_eq!(commit_of(br#"{"commit":null}"#), None);
    }

    // i[verify dist.deb+2]
    #[test]
    fn the_completions_are_the_files_the_package_metadata_installs() {
        let manifest = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates/node/Cargo.toml"),
        )
        .expect("crates/node/Cargo.toml");
        for (_, file) in COMPLETIONS {
            assert!(
                manifest.contains(&format!("target/release/dist/completions/{file}")),
                "{file} is not an asset of [package.metadata.deb]"
            );
        }
        assert!(manifest.contains("target/release/dist/man/*.1"));
    }
}
