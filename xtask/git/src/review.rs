//! The spec review of a work tree against a revision: both read, both judged by the gate, and
//! compared by the engine ([`spec_engine::review::compare`]).

use std::path::Path;

use spec_engine::review::{self, Review};
use spec_engine::spec_check::config::Loaded;
use spec_engine::spec_check::problem::Problem;
use spec_engine::spec_check::report::Outcome;
use spec_engine::spec_check::{self, check_read};
use spec_engine::{Disk, Tree};

use crate::revision::{self, Revision};

/// What [`read_tree`](spec_check::read) made of a tree: its config and its rules and references,
/// or the problem that stopped it.
pub type Read = Result<(Loaded, spec_check::Tree), Problem>;

/// Why there is no review.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The base revision's files could not be read.
    #[error(transparent)]
    Base(#[from] revision::Error),
    /// The gate cannot judge the work tree.
    #[error("{0}")]
    Now(Problem),
    /// The gate cannot judge the base revision.
    #[error("{0}")]
    Then(Problem),
}

/// The review of the work tree at `root` (read from the disk) against the commit `base` names,
/// and the gate's outcome on the work tree (judged by `results` when given; the base by its
/// annotations).
///
/// # Errors
///
/// As [`review`].
pub fn review_work_tree(
    root: &Path,
    base: &str,
    results: &[&Path],
    skips: Option<&Path>,
    crates: &[String],
) -> Result<(Review, Outcome), Error> {
    let then = revision::read(root, base)?;
    let now = Disk::new(root);
    review(
        base,
        &then,
        &now,
        &spec_check::read(&now),
        results,
        skips,
        crates,
    )
}

/// [`review_work_tree`] with the base `base` already read as `then` (the caller may want it again:
/// xtask compares its waivers) and the work tree `now` already read as `read_now`.
///
/// # Errors
///
/// The gate cannot judge either side (a tree whose config cannot be read is judged: it has no
/// rules, and the gate's outcome says why).
// i[impl spec-check.review]
pub fn review(
    base: &str,
    then: &Revision,
    now: &dyn Tree,
    read_now: &Read,
    results: &[&Path],
    skips: Option<&Path>,
    crates: &[String],
) -> Result<(Review, Outcome), Error> {
    let outcome = check_read(now, read_now, results, skips, crates).map_err(Error::Now)?;
    let read_then = spec_check::read(then);
    let outcome_then = check_read(then, &read_then, &[], None, &[]).map_err(Error::Then)?;
    // A side whose config cannot be read has no rules to compare: the gate says why.
    let (empty_now, empty_then) = (spec_check::Tree::empty(), spec_check::Tree::empty());
    let tree_now = read_now.as_ref().map_or(&empty_now, |(_, tree)| tree);
    let tree_then = read_then.as_ref().map_or(&empty_then, |(_, tree)| tree);
    let review = review::compare(
        base,
        review::Side {
            source: then,
            tree: tree_then,
            outcome: &outcome_then,
        },
        review::Side {
            source: now,
            tree: tree_now,
            outcome: &outcome,
        },
    );
    Ok((review, outcome))
}
