//! spec-engine: the traceability engine over a workspace annotated for
//! [tracey](https://github.com/bearcove/tracey): rules defined in markdown specs, `impl` and
//! `verify` references to them in the code and tests.
//!
//! It reads a tree the way tracey 1.3.0 reads it (tracey's own config, markdown and lexer crates),
//! judges it, and renders what it found to strings; it prints nothing, runs no process and
//! decides no exit code — `cargo xtask spec-check`, `trace` and `spec-report` are thin command
//! lines over it, and `cargo xtask prove` plans its mutation runs from the tree it reads.
//!
//! How the parts fit, leaf first (each module imports only modules listed before it; a test in
//! [`model`] checks that):
//!
//! - [`model`] — reading a tree through the [`Tree`] trait ([`Disk`], [`Memory`]), and the records
//!   every part shares: where the engine's files live (`paths`, from
//!   `[workspace.metadata.spec-engine]`), audit findings, recorded mutation proofs and their
//!   summary, timestamps.
//! - [`spec_check`] — reading the tree (config, rules, references, Rust test layout) into a
//!   [`spec_check::Tree`], the gate's checks over it ([`spec_check::check_read`]) with the
//!   demands of each rule's level ([`spec_check::levels`]), test-backed evidence from JUnit and
//!   the skip ledger, each rule's measures ([`spec_check::measures`]), the items annotations
//!   stand for and the evidence fingerprints of recorded proofs ([`spec_check::fingerprint`]),
//!   and the gate's report as text, JSON or Markdown.
//! - [`shapes`] — trees shaped like other people's tracey workspaces, in memory: what the tests
//!   pin and `cargo xtask tracey-parity` compares with a real tracey.
//! - [`trace`] — each rule to its definition, `impl` and `verify` sites and test results; each
//!   audit finding to a verdict ([`trace::everything`]).
//! - [`spec_report`] — the coverage per crate, the spec debt (code no rule names) and the
//!   self-contained HTML page.
//! - [`review`] — a change's spec review: two read trees (a base revision and the head) compared,
//!   rule by rule, item by item, count by count ([`review::compare`]).
//! - [`export`] — every rule with its text, level, sites, tests, results, proof and findings as
//!   one versioned JSON document ([`export::export`], `spec-check --export`).
//! - [`ratchet`] — waivers of justified gaps (`docs/audit/waivers.toml`) and a baseline of
//!   counts coverage may not fall below (`docs/audit/coverage-baseline.toml`).
//! - [`gate`] — the test-backed gate as one call ([`gate::gate`]): [`spec_check::check_read`]
//!   against a run's results and skip ledger, then the [`ratchet`] on a given day; `spec-check`
//!   and the test runner judge through it.
//! - [`sarif`] — the gate's and the review's problems as a SARIF 2.1.0 log ([`sarif::render`],
//!   `spec-check --sarif`).
//!
//! The README has an example that checks a small tree (it runs as a doctest).

// i[impl xtask.layout.engine]
pub mod export;
pub mod gate;
pub mod model;
pub mod ratchet;
pub mod review;
pub mod sarif;
pub mod shapes;
pub mod spec_check;
pub mod spec_report;
pub mod trace;

pub use model::tree::{Disk, Memory, Tree};

#[cfg(test)]
mod runners;
#[cfg(test)]
mod tests;

// The README's example runs as a doctest too.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
