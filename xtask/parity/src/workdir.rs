//! A directory of this run's: the shapes' trees and tracey's daemon state.

use std::path::{Path, PathBuf};

/// A directory made new (never one left by another process, whose files could be anyone's) and
/// removed when dropped, a panic included.
pub(crate) struct WorkDir(PathBuf);

impl WorkDir {
    /// Makes the directory `path`, which must not exist yet.
    pub(crate) fn new(path: PathBuf) -> std::io::Result<Self> {
        std::fs::create_dir(&path)?;
        Ok(Self(path))
    }

    /// Its path.
    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_work_dir_is_made_new_and_removed_when_dropped() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("run");
        let work = WorkDir::new(path.clone()).expect("made");
        std::fs::write(work.path().join("file"), "x").expect("write");
        assert!(
            WorkDir::new(path.clone()).is_err(),
            "an existing directory is refused"
        );
        drop(work);
        assert!(!path.exists());
    }
}
