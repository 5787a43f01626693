//! What can stop a proof run, typed: the command line (xtask) decides how to print it and which
//! exit code it means.

use std::path::PathBuf;

/// Why `run` could not finish, or why cargo-mutants' results could not be read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading or writing a file, or starting a process, failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// cargo-mutants' JSON (its `--list` or `outcomes.json`) or a result written here is not the
    /// JSON expected.
    #[error("not the JSON expected: {0}")]
    Json(#[from] serde_json::Error),
    /// cargo-mutants exited without writing `outcomes.json`.
    #[error(
        "cargo-mutants (exit {code:?}) left no {}: {source}; see cargo-mutants.log beside it",
        path.display()
    )]
    NoOutcomes {
        /// cargo-mutants' exit code.
        code: Option<i32>,
        /// Where the outcomes were expected.
        path: PathBuf,
        /// Why they could not be read.
        source: std::io::Error,
    },
    /// cargo-mutants' baseline (the unmutated tree) failed, by its `outcomes.json`.
    #[error("the unmutated tree failed its tests ({0})")]
    BaselineFailed(String),
    /// An outcome this reader does not know.
    #[error("unexpected cargo-mutants outcome `{0}`")]
    UnexpectedOutcome(String),
    /// The unmutated tree failed the build or the tests before any mutant ran.
    #[error("the unmutated tree failed the {phase} of {rule}'s tests ({status}); see {}", log.display())]
    UnmutatedFailed {
        /// `build` or `run`.
        phase: String,
        /// The rule being proven.
        rule: String,
        /// How the process ended.
        status: String,
        /// Its log.
        log: PathBuf,
    },
    /// `cargo mutants --list` failed.
    #[error("cargo mutants --list failed for {rules}: {stderr}")]
    ListFailed {
        /// The rules whose mutants were listed.
        rules: String,
        /// What cargo-mutants said.
        stderr: String,
    },
    /// cargo-mutants ended with an exit code that means no result.
    #[error("cargo-mutants ended with {code:?} for {rule}; see {}", log.display())]
    MutantsFailed {
        /// Its exit code.
        code: Option<i32>,
        /// The rule being proven.
        rule: String,
        /// Its log.
        log: PathBuf,
    },
    /// cargo-mutants left source files mutated (they were written back).
    #[error("cargo-mutants left {files} mutated for {rule}; written back from before the run")]
    LeftMutated {
        /// The files written back, comma-separated.
        files: String,
        /// The rule being proven.
        rule: String,
    },
}

/// A result of this crate.
pub type Result<T> = std::result::Result<T, Error>;
