//! Why there is no comparison.

use spec_engine::spec_check::parity;
use spec_engine::spec_check::problem::Problem;

/// Why there is no comparison.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// tracey cannot be run.
    #[error("cannot run {shown}: {source}")]
    CannotRun {
        /// tracey as the errors name it.
        shown: String,
        /// Why.
        source: std::io::Error,
    },
    /// The run's directory or a shape's file cannot be written.
    #[error("{path}: {source}")]
    Write {
        /// What was written.
        path: String,
        /// Why it failed.
        source: std::io::Error,
    },
    /// The gate cannot judge a tree.
    #[error("{name}: the gate cannot judge the tree: {problem}")]
    Gate {
        /// The tree.
        name: String,
        /// What stopped the gate.
        problem: Box<Problem>,
    },
    /// tracey's daemon did not start in as many asks as it is given (`ATTEMPTS`).
    #[error(
        "{name}: tracey answered `Error: Cancelled` (its daemon did not start) after {attempts} attempts"
    )]
    Cancelled {
        /// The tree.
        name: String,
        /// How often it was asked.
        attempts: usize,
    },
    /// `query status` failed.
    #[error("{name}: `{shown} query status` failed ({status}){said}")]
    Failed {
        /// The tree.
        name: String,
        /// tracey as the errors name it.
        shown: String,
        /// Its exit status.
        status: String,
        /// What it wrote on stderr and stdout, quoted.
        said: String,
    },
    /// `query status` answered nothing the comparison can use.
    #[error("{name}: {error}{said}")]
    Unusable {
        /// The tree.
        name: String,
        /// What was wrong with the answer.
        error: parity::Error,
        /// What it wrote on stderr, quoted.
        said: String,
    },
}
