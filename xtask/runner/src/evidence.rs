//! The run's evidence record: the producer of the results writes it, readers only read it.
//!
//! The tree is read before the tests are built and run; after the run, whatever its verdict, every
//! rule's fingerprint in that tree is written beside the JUnit file, keyed by the results'
//! contents ([`spec_engine::spec_check::evidence`] makes the record; the engine writes no files,
//! so the writing is here, where `cargo xtask test` and the tests that play a run share it).

use std::io::Write as _;
use std::path::{Path, PathBuf};

use spec_engine::spec_check::{self, Tree, evidence};

/// The tree the tests are about to run on, read through the engine; `None` (said on stderr) when
/// it cannot be read: the gate then says why, and the run leaves no record.
pub fn tree_before(workspace: &Path) -> Option<Tree> {
    match spec_check::read(&spec_engine::Disk::new(workspace)) {
        Ok((_, tree)) => Some(tree),
        Err(problem) => {
            eprintln!(
                "warning: cannot read the spec tree before the tests ({problem}): this run writes no test evidence record"
            );
            None
        }
    }
}

/// Writes the record of the results in `junit` as fingerprints of `tree` (the tree the tests ran
/// on), atomically, beside them ([`evidence::path_for`]); its path.
// i[impl spec-check.test-backed.fingerprint+2]
pub fn write_record(tree: &Tree, junit: &Path) -> std::io::Result<PathBuf> {
    let text = std::fs::read_to_string(junit)?;
    let written = std::fs::metadata(junit)?.modified()?;
    let record = evidence::record(tree, evidence::key([text.as_str()]), written);
    let path = evidence::path_for(junit);
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    // A reader never sees a partial record: the whole text is renamed into place.
    let mut file = tempfile::NamedTempFile::new_in(dir)?;
    file.write_all(evidence::render(&record).as_bytes())?;
    file.persist(&path).map_err(|error| error.error)?;
    Ok(path)
}

/// [`write_record`] after a run, when the tree was read before it; a record that cannot be
/// written is one line on stderr, never an error.
pub fn record_run(tree: Option<&Tree>, junit: &Path) {
    // No results (the build failed) or no tree read: nothing to record.
    let Some(tree) = tree.filter(|_| junit.is_file()) else {
        return;
    };
    if let Err(error) = write_record(tree, junit) {
        eprintln!(
            "warning: cannot write the test evidence record {}: {error}; this run's passes are judged by file times only",
            evidence::path_for(junit).display()
        );
    }
}
