//! Reads the skip ledger holdfast-test-support writes when a test returns early because a service
//! it needs is absent: JSON lines of `{"test", "binary", "service", "reason"}`. Such a test shows
//! up in JUnit as passed, so only the ledger tells that it proved nothing.

use std::path::Path;

use crate::model::tree::Tree;

use serde::Deserialize;

use super::crate_layout::normalize_executable;

/// One recorded skip.
#[derive(Debug, Clone, Deserialize)]
pub struct Skip {
    /// libtest test name, e.g. `tests::pulls_seeded_image`.
    pub test: String,
    /// Test executable without cargo's hash, e.g. `holdfast_pull`.
    pub binary: String,
    /// The missing service, e.g. `docker`.
    #[serde(default)]
    pub service: Option<String>,
    /// Why the test skipped.
    #[serde(default)]
    pub reason: Option<String>,
}

/// Why a skip ledger cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file exists but cannot be read.
    #[error("cannot read: {0}")]
    Read(#[source] std::io::Error),
    /// A line is not a skip record.
    #[error("line {line}: not a skip record: {source}")]
    Line {
        /// 1-based line.
        line: usize,
        /// The JSON error.
        source: serde_json::Error,
    },
}

/// All skips of a run.
#[derive(Debug, Default)]
pub struct Ledger {
    skips: Vec<Skip>,
}

impl Ledger {
    /// Reads the ledger at `path`; a missing file means no test skipped. A malformed line is an
    /// error naming its line, because a ledger read wrongly would hide skips.
    pub fn read(tree: &dyn Tree, path: &Path) -> Result<Option<Self>, Error> {
        let text = match tree.read(path) {
            Ok(text) => text,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(err) => return Err(Error::Read(err)),
        };
        let mut skips = Vec::new();
        for (index, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let skip: Skip = serde_json::from_str(line).map_err(|source| Error::Line {
                line: index + 1,
                source,
            })?;
            skips.push(skip);
        }
        Ok(Some(Self { skips }))
    }

    /// The skip recorded for test `test` of executable `executable`, if any.
    pub fn find(&self, executable: &str, test: &str) -> Option<&Skip> {
        self.skips
            .iter()
            .find(|s| s.test == test && normalize_executable(&s.binary) == executable)
    }
}
