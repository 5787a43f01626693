//! holdfast-command: what every command of xtask and its drivers shares, and nothing else.
//!
//! [`root`] finds the tree a command works on (`--root DIR`, else the cargo workspace above the
//! current directory), its target directory, the banner naming it, and the cargo a command that
//! itself runs under `cargo run` builds with. [`output`] prints a report without a panic when the
//! reader has gone away. [`exit`] names the code of a run that judged nothing. None imports
//! another.
//!
//! It depends on nothing, so the drivers that start no service (holdfast-dist, spec-parity)
//! build only it beside their own code; holdfast-harness re-exports both modules for the drivers
//! and the test runner, which start services.
//!
//! The README has an example that finds a workspace and names it (a doctest).

pub mod exit;
pub mod output;
pub mod root;

// The README's example runs as a doctest too.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
