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
    // A reader never sees a partial record: the whole text is renamed into place, from a file
    // made beside it (a rename does not cross file systems).
    let mut file = tempfile::NamedTempFile::new_in(dir_of(&path))?;
    file.write_all(evidence::render(&record).as_bytes())?;
    file.persist(&path).map_err(|error| error.error)?;
    Ok(path)
}

/// The directory holding `path`: its parent, or `.` for a bare file name (whose parent is empty).
// i[impl spec-check.test-backed.fingerprint+2]
fn dir_of(path: &Path) -> &Path {
    path.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
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

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = "specs (\n  {\n    name demo\n    include (docs/spec.md)\n    impls (\n      {\n        name rust\n        include (crates/**/*.rs)\n      }\n    )\n  }\n)\n";
    const LIB: &str = "// r[impl demo.alpha]\npub fn alpha() -> u32 {\n    1\n}\n\n#[cfg(test)]\nmod tests {\n    // r[verify demo.alpha]\n    #[test]\n    fn alpha_holds() {\n        assert_eq!(super::alpha(), 1);\n    }\n}\n";
    const JUNIT: &str = "<testsuites><testsuite name=\"demo\" tests=\"1\"><testcase name=\"tests::alpha_holds\" classname=\"demo\"/></testsuite></testsuites>";

    fn workspace() -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        let files = [
            (".config/tracey/config.styx", CONFIG),
            (
                "docs/spec.md",
                "# Demo\n\n> r[demo.alpha]\n> Alpha holds.\n",
            ),
            ("Cargo.toml", "[workspace]\nmembers = [\"crates/demo\"]\n"),
            (
                "crates/demo/Cargo.toml",
                "[package]\nname = \"demo\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
            ),
            ("crates/demo/src/lib.rs", LIB),
        ];
        for (path, text) in files {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("dir");
            std::fs::write(path, text).expect("write");
        }
        dir
    }

    /// The record is of the tree read before the tests: an impl edit during the run (after the
    /// read, before the results) is stale evidence to the run's own gate, whatever file times say.
    // i[verify spec-check.test-backed.fingerprint+2]
    #[test]
    fn the_record_is_of_the_tree_read_before_the_run() {
        let dir = workspace();
        let before = tree_before(dir.path());
        assert!(before.is_some());
        let lib = dir.path().join("crates/demo/src/lib.rs");
        std::fs::write(&lib, LIB.replace("    1\n", "    2\n")).expect("edit");
        let junit = dir.path().join("target/nextest/ci/junit.xml");
        std::fs::create_dir_all(junit.parent().expect("parent")).expect("dir");
        std::fs::write(&junit, JUNIT).expect("results");
        record_run(before.as_ref(), &junit);
        let record = dir
            .path()
            .join("target/nextest/ci/junit.xml.spec-evidence.json");
        assert!(record.is_file(), "the run writes its record");
        let disk = spec_engine::Disk::new(dir.path());
        let outcome = spec_engine::gate::gate(
            &disk,
            &spec_check::read(&disk),
            &[junit.as_path()],
            None,
            &[],
            "2026-12-06",
        )
        .expect("judged");
        let kinds: Vec<&str> = outcome.problems.iter().map(|p| p.kind.name()).collect();
        assert!(kinds.contains(&"evidence-stale"), "{:?}", outcome.problems);
    }

    /// No results (a failed build): nothing is written, nothing is said.
    #[test]
    fn a_run_without_results_writes_no_record() {
        let dir = workspace();
        let before = tree_before(dir.path());
        let junit = dir.path().join("target/nextest/ci/junit.xml");
        record_run(before.as_ref(), &junit);
        assert!(!evidence::path_for(&junit).exists());
        assert!(write_record(before.as_ref().expect("tree"), &junit).is_err());
    }

    /// The record is made beside the results, so it is renamed into place within one
    /// directory; a bare file name is in the current directory.
    // i[verify spec-check.test-backed.fingerprint+2]
    #[test]
    fn the_record_is_made_in_the_results_directory() {
        let record = evidence::path_for(Path::new("target/nextest/ci/junit.xml"));
        assert_eq!(dir_of(&record), Path::new("target/nextest/ci"));
        assert_eq!(dir_of(Path::new("/abs/junit.xml")), Path::new("/abs"));
        assert_eq!(dir_of(Path::new("junit.xml")), Path::new("."));
    }
}
