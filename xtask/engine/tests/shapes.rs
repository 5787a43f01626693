//! A Python workspace (`tests/fixtures/python`: a tracey config, a spec of three rules, a package
//! and its pytest suite, and the JUnit file pytest 7.2 wrote for it with `--junitxml`), checked
//! annotations only from the disk, and test-backed and traced from a memory copy.

// This test copies a checked-in fixture from the disk into a memory tree.
#![allow(clippy::disallowed_methods)]

use std::fmt::Write as _;
use std::path::Path;

use spec_engine::spec_check::{self, report::Outcome};
use spec_engine::{Disk, Memory, Tree as _};

/// The fixture as a memory tree: every file written at one instant, so no test file is newer
/// than the JUnit file (on the disk that depends on the order a checkout wrote them in).
fn in_memory(root: &Path) -> Memory {
    let mut files = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("read dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                let relative = path.strip_prefix(root).expect("under the root");
                let text = std::fs::read_to_string(&path).expect("a text file");
                files.push((relative.display().to_string(), text));
            }
        }
    }
    Memory::new(files)
}

fn summary(outcome: &Outcome) -> String {
    let mut out = String::from("spec: rules implemented verified stale errors tested\n");
    for spec in &outcome.specs {
        let _ = writeln!(
            out,
            "{}: {} {} {} {} {} {}",
            spec.name,
            spec.total,
            spec.implemented,
            spec.verified,
            spec.stale,
            spec.errors,
            spec.tested.map_or("-".to_owned(), |n| n.to_string())
        );
    }
    for problem in &outcome.problems {
        let _ = writeln!(out, "problem {problem}");
    }
    for note in &outcome.notes {
        let _ = writeln!(out, "note {note}");
    }
    out
}

#[test]
fn a_python_suite_is_judged_by_its_pytest_junit() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/python");
    let disk = Disk::new(&root);
    let annotations = spec_check::check(&disk, &[], None, &[]).expect("a config");
    insta::assert_snapshot!("python_annotations", summary(&annotations));
    let memory = in_memory(&root);
    let results = memory.root().join("junit.xml");
    let tested = spec_check::check(&memory, &[results.as_path()], None, &[]).expect("a config");
    insta::assert_snapshot!("python_test_backed", summary(&tested));
}

/// The trace names a Python test with the runner that judged it.
#[test]
fn the_trace_names_the_runner_of_a_python_test() {
    use spec_engine::trace::rule_report::{Format, render};

    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/python");
    let memory = in_memory(&root);
    let results = memory.root().join("junit.xml");
    let everything = spec_engine::trace::everything(
        &memory,
        spec_check::read(&memory),
        &[results.as_path()],
        None,
        false,
    )
    .expect("the tree and its results are usable");
    let text: Vec<String> = everything
        .rules
        .iter()
        .map(|rule| render(rule, Format::Text))
        .collect();
    let text = text.join("\n");
    assert!(
        text.contains("pytest tests/test_ops.py::test_add_gives_the_sum  passed"),
        "{text}"
    );
    assert!(
        text.contains("pytest tests/test_ops.py::test_by_zero_raises  passed"),
        "{text}"
    );
    assert!(
        text.contains("pytest tests/test_ops.py::test_rounds_to_two_decimals  skipped"),
        "{text}"
    );
}
