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

/// All skips of a run.
#[derive(Debug, Default)]
pub struct Ledger {
    skips: Vec<Skip>,
}

impl Ledger {
    /// Reads the ledger at `path`; a missing file means no test skipped. A malformed line is an
    /// error naming its line, because a ledger read wrongly would hide skips.
    pub fn read(tree: &dyn Tree, path: &Path) -> Result<Option<Self>, String> {
        let text = match tree.read(path) {
            Ok(text) => text,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(err) => return Err(format!("cannot read: {err}")),
        };
        let mut skips = Vec::new();
        for (index, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let skip: Skip = serde_json::from_str(line)
                .map_err(|err| format!("line {}: not a skip record: {err}", index + 1))?;
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
