//! Which test run the trace judges against: the `--results` JUnit file, or by default the one
//! `cargo xtask test` leaves at `target/nextest/ci/junit.xml` (the configured `results` path,
//! [`crate::model::paths`]) when it exists; plus the skip ledger
//! of that run. Read with the spec gate's own [`Evidence`], so a test counts the same in both.

use std::path::{Path, PathBuf};

use crate::spec_check::test_backed::Evidence;

use super::Error;
use crate::model::timestamp;
use crate::model::tree::Tree;

/// Where holdfast-test-support writes the skip ledger by default, relative to the root.
pub const DEFAULT_SKIPS: &str = "target/holdfast-test-skips.jsonl";

/// A run's results, and how to name them.
pub struct Run {
    /// The JUnit file and the ledger, read.
    pub evidence: Evidence,
    /// One line saying which files were used and when the results were written.
    pub source: String,
}

/// Reads the results to use, if any: `results` when given (one report per runner; an unusable
/// file is an error), else the default file under `root` when it exists; `None` when there are
/// none or `--no-results`. The run's evidence fingerprints are the record its producer wrote
/// beside the results ([`crate::spec_check::evidence`]); none is made here.
// i[impl trace.results]
pub fn load(
    tree: &dyn Tree,
    results: &[&Path],
    skips: Option<&Path>,
    no_results: bool,
) -> Result<Option<Run>, Error> {
    let root = tree.root();
    if no_results {
        return Ok(None);
    }
    let results: Vec<PathBuf> = if results.is_empty() {
        let default = root.join(crate::model::paths::of(tree).results);
        if !tree.is_file(&default) {
            return Ok(None);
        }
        vec![default]
    } else {
        results.iter().map(|path| path.to_path_buf()).collect()
    };
    let skips = skips.map_or_else(|| root.join(DEFAULT_SKIPS), Path::to_path_buf);
    let paths: Vec<&Path> = results.iter().map(PathBuf::as_path).collect();
    let mut evidence =
        Evidence::load(tree, &paths, Some(&skips)).map_err(|problem| Error::Results {
            problem: Box::new(problem),
            root: root.display().to_string(),
        })?;
    evidence.fingerprint(tree);
    let modified = evidence.written;
    let ledger = if tree.is_file(&skips) {
        format!("skips from {}", shown(tree, &skips))
    } else {
        format!("no skip ledger at {}", shown(tree, &skips))
    };
    let files: Vec<String> = paths.iter().map(|path| shown(tree, path)).collect();
    Ok(Some(Run {
        evidence,
        source: format!(
            "test results: {} (written {}); {ledger}",
            files.join(", "),
            timestamp::utc(modified)
        ),
    }))
}

/// `path` relative to `root` when it lies under it.
fn shown(tree: &dyn Tree, path: &Path) -> String {
    let absolute = tree.canonical(path);
    absolute.strip_prefix(tree.root()).map_or_else(
        |_| path.display().to_string(),
        |rel| rel.display().to_string(),
    )
}
