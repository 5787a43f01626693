//! spec-git: a workspace's files at a git revision, as a tree [spec-engine](spec_engine) reads
//! like any other, and the spec review of the work tree against such a revision.
//!
//! The engine runs no process; reading a revision needs git. This crate runs it — `git
//! rev-parse`, `git ls-tree` and one `git cat-file --batch`, so a whole tree costs three
//! processes and no git library in the gate's build — and hands the engine a [`Revision`], which
//! implements the engine's [`Tree`](spec_engine::Tree) trait. `cargo xtask spec-check --base REV`
//! reviews against it and `cargo xtask prove --changed-since REV` compares fingerprints with it.
//!
//! How the parts fit, leaf first (each imports only the ones before it):
//!
//! - `git` — running git: one command's output, many blobs through one batch ([`GitError`]).
//! - `listing` — a commit's listing: its blobs and links, and where a link leads.
//! - `ignored` — a revision's `.gitignore` and `.ignore` files, matched as the engine's walk of
//!   the disk matches them.
//! - [`revision`] — [`read`]: a commit's files under a workspace as a [`Revision`], read as the
//!   walk reads the work tree (ignored files, links, submodules and non-UTF-8 files alike).
//! - [`review`] — [`review_work_tree`]: both sides read, judged by the gate, and compared.
//!
//! The README has an example that reviews a one-commit repository (it runs as a doctest).

mod git;
mod ignored;
mod listing;
pub mod review;
pub mod revision;

#[cfg(any(test, feature = "fixtures"))]
pub mod fixture;

pub use git::GitError;
pub use review::{review, review_work_tree};
pub use revision::{Revision, read, read_with};

#[cfg(test)]
mod tests;

// The README's example runs as a doctest too.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
