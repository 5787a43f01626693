//! holdfast-dist: the node's Debian package, run as `cargo xtask dist deb`.
//!
//! It builds `holdfast` with every feature ([`FEATURES`]) — or, with `--no-build`, checks that
//! the binary an earlier build left has them ([`prebuilt`]) — has that binary write its own man
//! pages and completions ([`steps::generate_docs`]), and hands the rest to cargo-deb
//! ([`steps::package`]), which reads `[package.metadata.deb]` in crates/node/Cargo.toml (the
//! assets, the conffile, the systemd unit and the maintainer scripts under dist/debian/).
//!
//! How the parts fit, leaf first: this module holds what every part shares (the [`Profile`], the
//! features, the completions' files, the [`Error`]); [`prebuilt`] reads what a built binary says
//! of itself (`holdfast version --json`) and judges it; [`steps`] runs the programs (cargo,
//! cargo-deb, git, the binary). The binary (`src/main.rs`) is the command line. It is a crate of
//! its own outside the workspace's `default-members`, so the spec gate's build never compiles it.
//!
//! The README has an example that judges a binary's account of its features (a doctest).

pub mod prebuilt;
pub mod steps;

use std::path::PathBuf;

/// The features the package's binary is built with: every one an operator may configure.
pub const FEATURES: &str = "etcd";

/// The feature a test build has and a release package must not (`[testing]` modules).
pub const TEST_ONLY_FEATURE: &str = "testing-modules";

/// The shells whose completions the package installs, and the file each is written to.
pub const COMPLETIONS: [(&str, &str); 3] = [
    ("bash", "holdfast.bash"),
    ("zsh", "_holdfast"),
    ("fish", "holdfast.fish"),
];

/// The cargo profile the package's binary comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// `--release` (the default).
    Release,
    /// cargo's `dev` profile (`--debug`; CI's install test).
    Debug,
}

impl Profile {
    /// The debug profile when `debug`, else the release one.
    pub fn of(debug: bool) -> Self {
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

    /// The build that makes a binary fit for the package.
    pub fn build_command(self) -> String {
        format!(
            "cargo build -p holdfast --features {FEATURES} --profile {}",
            self.cargo_name()
        )
    }
}

/// Why there is no package.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// cargo-deb is not installed.
    #[error("dist deb: cargo-deb is not installed: run `cargo install --locked cargo-deb`")]
    NoCargoDeb,
    /// A program could not be started.
    #[error("running {what}: {source}")]
    Run {
        /// The command line.
        what: String,
        /// Why.
        source: std::io::Error,
    },
    /// A program ran and failed, or said something unusable: what, and how.
    #[error("{0}")]
    Failed(String),
    /// The binary an earlier build left cannot be packaged (`--no-build`).
    #[error(transparent)]
    Prebuilt(#[from] prebuilt::Refused),
    /// A file or directory could not be written or cleared.
    #[error("{what} {}: {source}", path.display())]
    Write {
        /// What was done (`creating`, `writing`, `clearing`).
        what: &'static str,
        /// Where.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
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

    // i[verify dist.deb+2]
    #[test]
    fn the_completions_are_the_files_the_package_metadata_installs() {
        let manifest = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../crates/node/Cargo.toml"),
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

// The README's example runs as a doctest too.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
