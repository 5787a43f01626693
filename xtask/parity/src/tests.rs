//! The comparison against a stand-in tracey: what is asked, how often, and what a failure says.

use std::path::PathBuf;

use holdfast_harness::stand_in::Script;

use super::*;

/// A root tree (the first workspace shape) under `dir`, and a stand-in tracey in `dir` whose
/// `query status` runs `query` (sh; `$calls` is a file it may count its calls in), noting each
/// call's first argument and directory's name in `dir/calls`.
fn root_and_tracey(dir: &Path, query: &str) -> (PathBuf, Script) {
    let root = dir.join("root");
    for (path, text) in &spec_engine::shapes::all()[0].files {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    }
    let calls = dir.join("calls");
    let script = Script::new(
        dir,
        "tracey.sh",
        &format!(
            "calls='{}'\n\
             echo \"$1 $(basename \"$PWD\")\" >> \"$calls\"\n\
             case \"$1\" in\n\
             --version) echo 'tracey 1.3.0'; exit 0;;\n\
             kill) exit 0;;\n\
             esac\n\
             {query}\n",
            calls.display()
        ),
    );
    (root, script)
}

/// The stand-in's calls, one line each.
fn calls(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("calls"))
        .expect("tracey was called")
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The comparison with the stand-in, with no pause between asks.
fn run(root: &Path, tracey: &Script) -> Result<Run, Error> {
    compare(root, &|| tracey.command(), "tracey.sh", Duration::ZERO)
}

/// One coverage line tracey could print, equal to no tree's counts.
const ODD: &str = "echo 'other/rust: 0 of 7 requirements are covered. 0 of 7 have a \
                   verification reference.'";

// i[verify spec-check.parity+2]
#[test]
fn counts_that_differ_disagree_with_unexplained_rows() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (root, tracey) = root_and_tracey(dir.path(), ODD);
    let run = run(&root, &tracey).expect("judged");
    assert!(!run.agrees());
    let page = run.page();
    assert!(
        page.contains("| this workspace | other/rust | 7/0/0/0 | — | **unexplained**: the gate has no such row |"),
        "{page}"
    );
    // tracey asked once per tree (nine shapes and the root), its daemon stopped after each.
    let calls = calls(dir.path());
    assert!(calls[0].starts_with("--version "), "{calls:?}");
    assert_eq!(calls.iter().filter(|c| c.starts_with("query ")).count(), 10);
    assert_eq!(calls.iter().filter(|c| c.starts_with("kill ")).count(), 10);
}

// i[verify spec-check.parity+2]
#[test]
fn a_failing_tracey_is_an_error_with_its_status_and_stderr() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (root, tracey) = root_and_tracey(dir.path(), "echo 'boom: daemon crashed' >&2\nexit 3");
    let err = run(&root, &tracey).expect_err("nothing to judge");
    let err = format!("{err:#}");
    assert!(
        err.contains("several_specs_and_impls")
            && err.contains("exit status: 3")
            && err.contains("boom: daemon crashed"),
        "{err}"
    );
    // Coverage lines from a tracey that then fails are not trusted either.
    let dir = tempfile::tempdir().expect("temp dir");
    let (root, tracey) = root_and_tracey(dir.path(), &format!("{ODD}\nexit 1"));
    let err = format!("{:#}", run(&root, &tracey).expect_err("failed"));
    assert!(err.contains("exit status: 1"), "{err}");
    // An answer that says nothing usable names what tracey said on stderr.
    let dir = tempfile::tempdir().expect("temp dir");
    let (root, tracey) = root_and_tracey(dir.path(), "echo 'hmm' >&2");
    let err = format!("{:#}", run(&root, &tracey).expect_err("unusable"));
    assert!(
        err.contains("no coverage line") && err.contains("hmm"),
        "{err}"
    );
}

// i[verify spec-check.parity+2]
#[test]
fn only_cancelled_is_asked_again_and_the_error_says_how_often() {
    // Cancelled once while the daemon starts, then an answer: judged.
    let dir = tempfile::tempdir().expect("temp dir");
    let (root, tracey) = root_and_tracey(
        dir.path(),
        &format!(
            "if [ \"$(grep -c '^query' \"$calls\")\" = 1 ]; then echo 'Error: Cancelled'; exit 1; fi\n{ODD}"
        ),
    );
    assert!(!run(&root, &tracey).expect("judged").agrees());
    let calls = calls(dir.path());
    assert_eq!(
        calls[1..4],
        [
            "query several_specs_and_impls",
            "query several_specs_and_impls",
            "kill several_specs_and_impls"
        ],
        "{calls:?}"
    );
    // Cancelled every time: an error after every attempt.
    let dir = tempfile::tempdir().expect("temp dir");
    let (root, tracey) = root_and_tracey(dir.path(), "echo 'Error: Cancelled'");
    let err = format!("{:#}", run(&root, &tracey).expect_err("cancelled"));
    assert!(
        err.contains(&format!("after {ATTEMPTS} attempts")) && err.contains("Cancelled"),
        "{err}"
    );
    assert_eq!(
        self::calls(dir.path())
            .iter()
            .filter(|c| c.starts_with("query "))
            .count(),
        ATTEMPTS
    );
    // Any other error is not asked again.
    let dir = tempfile::tempdir().expect("temp dir");
    let (root, tracey) = root_and_tracey(dir.path(), "echo 'Error: config is broken'");
    let err = format!("{:#}", run(&root, &tracey).expect_err("broken"));
    assert!(err.contains("Error: config is broken"), "{err}");
    assert_eq!(
        self::calls(dir.path())
            .iter()
            .filter(|c| c.starts_with("query "))
            .count(),
        1
    );
}
