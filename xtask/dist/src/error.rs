//! Why there is no package.

use std::path::PathBuf;

use crate::prebuilt;

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
