//! A Python workspace read from the disk (`tests/fixtures/python`: a tracey config, a spec of three
//! rules, a package and its pytest suite, and the JUnit file pytest 7.2 wrote for it with
//! `--junitxml`), checked annotations only and test-backed.

use std::fmt::Write as _;
use std::path::Path;

use spec_engine::Disk;
use spec_engine::spec_check::{self, report::Outcome};

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
    let annotations = spec_check::check(&disk, None, None, &[]).expect("a config");
    insta::assert_snapshot!("python_annotations", summary(&annotations));
    let results = root.join("junit.xml");
    let tested = spec_check::check(&disk, Some(&results), None, &[]).expect("a config");
    insta::assert_snapshot!("python_test_backed", summary(&tested));
}
