//! holdfast-dist: the node's Debian package, run as `cargo xtask dist deb`.
//!
//! It builds `holdfast` with every feature ([`FEATURES`]) — or, with `--no-build`, checks that
//! the binary an earlier build left has them ([`prebuilt`]) — has that binary write its own man
//! pages and completions ([`steps::generate_docs`]), and hands the rest to cargo-deb
//! ([`steps::package`]), which reads `[package.metadata.deb]` in crates/node/Cargo.toml (the
//! assets, the conffile, the systemd unit and the maintainer scripts under dist/debian/).
//!
//! How the parts fit, leaf first (each imports only the ones before it): `package` holds what
//! every part shares (the [`Profile`], the features, the completions' files); [`prebuilt`] reads
//! what a built binary says of itself (`holdfast version --json`) and judges it; `error` is why
//! there is no package ([`Error`]); [`steps`] runs the programs (cargo, cargo-deb, git, the
//! binary). The binary (`src/main.rs`) is the command line. It is a crate of
//! its own outside the workspace's `default-members`, so the spec gate's build never compiles it.
//!
//! The README has an example that judges a binary's account of its features (a doctest).

mod error;
mod package;
pub mod prebuilt;
pub mod steps;

pub use error::Error;
pub use package::{COMPLETIONS, FEATURES, Profile, TEST_ONLY_FEATURE};

// The README's example runs as a doctest too.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
