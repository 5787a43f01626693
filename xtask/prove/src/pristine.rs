//! A proof leaves the tree as it found it. cargo-mutants runs `--in-place`: it writes each mutant
//! into the working tree and writes the original back afterwards, also when it is interrupted
//! (the budget's cut-off). That is its promise, not ours to assume: the files it may mutate are
//! read before the run and compared after it, and any it left changed are written back and named.
//! Tests under mutants must not write into the tree either: proptest's failure persistence would
//! record every mutant's counterexample in a tracked `*.proptest-regressions` file.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Turns off what would let a run under mutants write into the tree (proptest's regression files).
// i[impl prove.pristine]
pub fn quiet(command: &mut Command) {
    command.env("PROPTEST_DISABLE_FAILURE_PERSISTENCE", "1");
}

/// The contents of the files a run may mutate, as they were before it.
#[derive(Debug)]
pub struct Snapshot {
    files: Vec<(PathBuf, Vec<u8>)>,
}

impl Snapshot {
    /// Reads `files` (root-relative) under `root`; a file that cannot be read is not guarded.
    pub fn take<'a>(root: &Path, files: impl IntoIterator<Item = &'a str>) -> Snapshot {
        let mut seen: Vec<PathBuf> = files.into_iter().map(|f| root.join(f)).collect();
        seen.sort();
        seen.dedup();
        let files = seen
            .into_iter()
            .filter_map(|path| std::fs::read(&path).ok().map(|text| (path, text)))
            .collect();
        Snapshot { files }
    }

    /// Writes back every file that differs from its snapshot and returns those it wrote back.
    // i[impl prove.pristine]
    pub fn restore_changed(&self) -> std::io::Result<Vec<PathBuf>> {
        let mut restored = Vec::new();
        for (path, text) in &self.files {
            if std::fs::read(path).ok().as_deref() != Some(text.as_slice()) {
                std::fs::write(path, text)?;
                restored.push(path.clone());
            }
        }
        Ok(restored)
    }
}

impl Snapshot {
    /// Writes back every file that differs from its snapshot; an error naming them, for `rule`'s
    /// run, when there was one.
    // i[impl prove.pristine]
    pub fn ensure_restored(&self, rule: &str) -> crate::error::Result<()> {
        let restored = self.restore_changed()?;
        if restored.is_empty() {
            return Ok(());
        }
        let names: Vec<_> = restored.iter().map(|p| p.display().to_string()).collect();
        Err(crate::Error::LeftMutated {
            files: names.join(", "),
            rule: rule.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // i[verify prove.pristine]
    #[test]
    fn a_file_left_mutated_is_written_back_and_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("src")).unwrap();
        std::fs::write(dir.path().join("src/a.rs"), "fn a() -> u32 { 1 }\n").unwrap();
        std::fs::write(dir.path().join("src/b.rs"), "fn b() {}\n").unwrap();
        let snapshot = Snapshot::take(dir.path(), ["src/a.rs", "src/b.rs", "src/a.rs"]);
        assert_eq!(snapshot.restore_changed().unwrap(), Vec::<PathBuf>::new());
        std::fs::write(dir.path().join("src/a.rs"), "fn a() -> u32 { 0 }\n").unwrap();
        assert_eq!(
            snapshot.restore_changed().unwrap(),
            vec![dir.path().join("src/a.rs")]
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("src/a.rs")).unwrap(),
            "fn a() -> u32 { 1 }\n"
        );
        // A file removed by the run is written back too.
        std::fs::remove_file(dir.path().join("src/b.rs")).unwrap();
        assert_eq!(
            snapshot.restore_changed().unwrap(),
            vec![dir.path().join("src/b.rs")]
        );
        assert!(dir.path().join("src/b.rs").exists());
    }

    // i[verify prove.pristine]
    #[test]
    fn tests_under_mutants_persist_no_proptest_failures() {
        let mut command = Command::new("cargo");
        quiet(&mut command);
        let set: Vec<_> = command
            .get_envs()
            .filter(|(name, value)| {
                *name == "PROPTEST_DISABLE_FAILURE_PERSISTENCE" && value.is_some()
            })
            .collect();
        assert_eq!(set.len(), 1, "proptest's failure persistence is turned off");
    }

    // i[verify prove.pristine]
    #[test]
    fn a_run_that_left_a_file_mutated_fails_naming_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("a.rs"), "fn a() -> u32 { 1 }\n").unwrap();
        let snapshot = Snapshot::take(dir.path(), ["a.rs"]);
        assert!(snapshot.ensure_restored("r[a.b]").is_ok(), "left as found");
        std::fs::write(dir.path().join("a.rs"), "fn a() -> u32 { 0 }\n").unwrap();
        let failed = snapshot
            .ensure_restored("r[a.b]")
            .expect_err("left mutated");
        let message = failed.to_string();
        assert!(
            message.contains("a.rs") && message.contains("for r[a.b]"),
            "{message}"
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a.rs")).unwrap(),
            "fn a() -> u32 { 1 }\n"
        );
        assert!(snapshot.ensure_restored("r[a.b]").is_ok(), "written back");
    }
}
