//! The review against a revision, on small git repositories: a revision reads as its work tree
//! does, and what changed between them is what the review says.

use std::path::Path;
use std::process::Command;

use spec_engine::review;

use crate::fixture::{REVIEW_CONFIG, REVIEW_LIB, REVIEW_SPEC, git, two_commits, two_commits_with};
use crate::review::{Error, review_work_tree as review_at};
use crate::revision;

fn review_of_last_commit(dir: &tempfile::TempDir) -> review::Review {
    let root = dir.path().canonicalize().expect("root");
    let (review, _) = review_at(&root, "HEAD~1", &[], None, &[]).expect("reviewed");
    review
}

fn review_kinds(review: &review::Review) -> Vec<review::Kind> {
    review.problems.iter().map(|p| p.kind).collect()
}

// i[verify spec-check.review]
// i[verify spec-check.review.rules+2]
#[test]
fn with_git_text_changed_without_a_bump_fails_the_review() {
    let dir = two_commits(
        &REVIEW_SPEC.replace("Beta holds.", "Beta holds, always."),
        REVIEW_LIB,
    );
    let review = review_of_last_commit(&dir);
    assert_eq!(
        review_kinds(&review),
        [review::Kind::TextChangedWithoutBump]
    );
    assert_eq!(review.unbumped[0].rule, "r[demo.beta]");
    assert_eq!(review.base, "HEAD~1");
    // The base was read from git, not from the work tree: an unchanged repository is clean.
    let root = dir.path().canonicalize().expect("root");
    let (same, outcome) = review_at(&root, "HEAD", &[], None, &[]).expect("reviewed");
    assert!(same.passes() && same.unbumped.is_empty(), "{same:?}");
    assert!(outcome.problems.is_empty(), "{:?}", outcome.problems);
}

// i[verify spec-check.review]
#[test]
fn with_git_a_revision_that_names_no_commit_is_an_error_saying_so() {
    let dir = two_commits(REVIEW_SPEC, REVIEW_LIB);
    let root = dir.path().canonicalize().expect("root");
    let err = review_at(&root, "no-such-rev", &[], None, &[]).expect_err("no commit");
    assert!(
        matches!(err, Error::Base(revision::Error::NoSuchCommit { .. })),
        "{err:?}"
    );
    assert!(
        err.to_string().starts_with("no-such-rev: no such commit"),
        "{err}"
    );
}

// i[verify spec-check.review.rename]
#[test]
fn with_git_a_rename_naming_its_previous_id_is_a_rename() {
    let dir = two_commits(
        &REVIEW_SPEC.replace(
            "> r[demo.beta]\n> Beta holds.",
            "> r[demo.bravo]\n> Beta holds. (was demo.beta)",
        ),
        &REVIEW_LIB.replace("demo.beta]", "demo.bravo]"),
    );
    let review = review_of_last_commit(&dir);
    assert!(review.passes(), "{:?}", review.problems);
    assert!(review.added.is_empty() && review.removed.is_empty());
    assert_eq!(
        (
            review.renamed[0].from.as_str(),
            review.renamed[0].to.rule.as_str()
        ),
        ("r[demo.beta]", "r[demo.bravo]")
    );
}

// i[verify spec-check.review.items+2]
#[test]
fn with_git_impl_changed_with_tests_unchanged_is_shown() {
    let dir = two_commits(REVIEW_SPEC, &REVIEW_LIB.replace("    1\n}", "    2\n}"));
    let review = review_of_last_commit(&dir);
    assert_eq!(review.touched.len(), 1, "{:?}", review.touched);
    assert_eq!(review.touched[0].rule, "r[demo.alpha]");
    assert_eq!(review.touched[0].changed, review::Changed::ImplOnly);
    assert!(review.passes());
}

// i[verify spec-check.review.coverage]
#[test]
fn with_git_coverage_going_down_fails_the_review() {
    let dir = two_commits(
        REVIEW_SPEC,
        &REVIEW_LIB.replace("    // r[verify demo.beta]\n", ""),
    );
    let review = review_of_last_commit(&dir);
    assert_eq!(review_kinds(&review), [review::Kind::CoverageDown]);
    let row = &review.coverage[0];
    assert_eq!(
        (
            row.before.map(|c| c.verified),
            row.after.map(|c| c.verified)
        ),
        (Some(2), Some(1))
    );
}

/// A repository of one commit holding the demo tree, `.gitignore` ignoring
/// `src/generated.rs` (tracked all the same, and holding beta's only verify), `src/extra.rs`
/// a link to `other/extra.rs` (holding alpha's second verify), and `extra` (raw bytes as
/// path, text): what the work tree and a revision must read alike.
fn repo_with(extra: &[(&[u8], &[u8])]) -> tempfile::TempDir {
    repo_under("", extra)
}

/// [`repo_with`], its workspace in the directory `under` of the repository ("" for the top).
fn repo_under(under: &str, extra: &[(&[u8], &[u8])]) -> tempfile::TempDir {
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().expect("temp dir");
    let top = dir.path();
    git(top, &["init", "--quiet"]);
    let root = &top.join(under);
    std::fs::create_dir_all(root).expect("mkdir");
    let write = |path: &Path, text: &[u8]| {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    };
    write(
        Path::new(".config/tracey/config.styx"),
        REVIEW_CONFIG.as_bytes(),
    );
    write(Path::new("docs/spec.md"), REVIEW_SPEC.as_bytes());
    let lib = REVIEW_LIB.replace("    // r[verify demo.beta]\n", "");
    write(Path::new("src/lib.rs"), lib.as_bytes());
    write(Path::new(".gitignore"), b"src/generated.rs\n");
    write(
        Path::new("src/generated.rs"),
        b"// r[verify demo.beta]\n#[test]\nfn generated() {}\n",
    );
    write(
        Path::new("other/extra.rs"),
        b"// r[verify demo.alpha]\n#[test]\nfn extra() {}\n",
    );
    std::os::unix::fs::symlink("../other/extra.rs", root.join("src/extra.rs")).expect("link");
    for (path, text) in extra {
        write(Path::new(std::ffi::OsStr::from_bytes(path)), text);
    }
    git(root, &["add", "-A"]);
    git(root, &["add", "-f", "src/generated.rs"]);
    git(root, &["commit", "--quiet", "-m", "base"]);
    dir
}

/// The review of the work tree against `HEAD`, which it equals.
fn review_of_unchanged(dir: &tempfile::TempDir) -> review::Review {
    review_of_unchanged_under(dir, "")
}

fn review_of_unchanged_under(dir: &tempfile::TempDir, under: &str) -> review::Review {
    let root = dir.path().join(under).canonicalize().expect("root");
    let (review, _) = review_at(&root, "HEAD", &[], None, &[]).expect("reviewed");
    review
}

/// Nothing changed, so nothing is said: the whole review is empty.
fn assert_empty(review: &review::Review) {
    assert!(review.passes(), "{:?}", review.problems);
    assert!(
        review.added.is_empty()
            && review.removed.is_empty()
            && review.touched.is_empty()
            && review.annotations.is_empty(),
        "{review:?}"
    );
    for row in &review.coverage {
        assert_eq!(row.before, row.after, "{row:?}");
    }
}

// i[verify spec-check.review]
#[test]
fn with_git_a_revision_is_read_as_the_work_tree_is_ignored_files_and_links_alike() {
    let dir = repo_with(&[]);
    assert_empty(&review_of_unchanged(&dir));
}

// i[verify spec-check.review]
#[test]
fn with_git_a_path_that_is_not_utf8_is_skipped() {
    let dir = repo_with(&[(b"notes/caf\xe9.txt", b"latin-1 name\n")]);
    assert_empty(&review_of_unchanged(&dir));
}

/// Everything git may hold that the engine does not read, in one repository whose workspace
/// is a directory below its top: a submodule, a blob that is not UTF-8, a path that is not
/// UTF-8, an ignored tracked file and a link (from [`repo_under`]).
// i[verify spec-check.review]
#[test]
fn with_git_a_workspace_below_the_top_with_everything_git_holds_reads_alike() {
    let dir = repo_under(
        "ws",
        &[
            (b"notes/blob.bin", b"\xff\xfe\x00binary"),
            (b"notes/caf\xe9.txt", b"latin-1 name\n"),
        ],
    );
    let top = dir.path();
    // A submodule: a gitlink entry (mode 160000), no directory in the work tree.
    let commit = String::from_utf8(
        Command::new("git")
            .arg("-C")
            .arg(top)
            .args(["rev-parse", "HEAD"])
            .output()
            .expect("git runs")
            .stdout,
    )
    .expect("utf-8");
    git(
        top,
        &[
            "update-index",
            "--add",
            "--cacheinfo",
            &format!("160000,{},ws/vendor/sub", commit.trim()),
        ],
    );
    git(top, &["commit", "--quiet", "-m", "submodule"]);
    assert_empty(&review_of_unchanged_under(&dir, "ws"));
}

// i[verify spec-check.review]
#[test]
fn with_git_an_empty_base_tree_has_every_rule_added() {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path();
    git(root, &["init", "--quiet"]);
    git(root, &["commit", "--quiet", "--allow-empty", "-m", "empty"]);
    std::fs::create_dir_all(root.join(".config/tracey")).expect("mkdir");
    std::fs::create_dir_all(root.join("docs")).expect("mkdir");
    std::fs::create_dir_all(root.join("src")).expect("mkdir");
    std::fs::write(root.join(".config/tracey/config.styx"), REVIEW_CONFIG).expect("write");
    std::fs::write(root.join("docs/spec.md"), REVIEW_SPEC).expect("write");
    std::fs::write(root.join("src/lib.rs"), REVIEW_LIB).expect("write");
    let root = root.canonicalize().expect("root");
    let (review, _) = review_at(&root, "HEAD", &[], None, &[]).expect("reviewed");
    let added: Vec<&str> = review.added.iter().map(|r| r.rule.as_str()).collect();
    assert_eq!(added, ["r[demo.alpha]", "r[demo.beta]"]);
    assert!(review.passes(), "{:?}", review.problems);
}

/// Without git (`PATH=""` in effect: the program cannot be run), the error says so, not
/// that the revision names no commit.
// i[verify spec-check.review]
#[test]
fn without_git_the_error_says_git_cannot_run() {
    let dir = repo_with(&[]);
    let root = dir.path().canonicalize().expect("root");
    let err = revision::read_with(std::ffi::OsStr::new("/nonexistent/git"), &root, "HEAD")
        .expect_err("no git");
    assert!(matches!(err, revision::Error::CannotRun { .. }), "{err:?}");
    let err = err.to_string();
    assert!(err.contains("cannot run git"), "{err}");
    assert!(!err.contains("no such commit"), "{err}");
}

/// A proof recorded (with its fingerprint) at the base and kept by a change to the rule's
/// implementation: the review of that change says the proof is stale, in the gate's words.
// i[verify spec-check.review.items+2]
#[test]
fn with_git_an_impl_change_makes_a_recorded_proof_stale_and_the_review_says_so() {
    use spec_engine::model::proof::Proof;
    let base = spec_engine::Memory::new([
        (".config/tracey/config.styx", REVIEW_CONFIG),
        ("docs/spec.md", REVIEW_SPEC),
        ("src/lib.rs", REVIEW_LIB),
    ]);
    let Ok((_, read)) = spec_engine::spec_check::read(&base) else {
        panic!("the demo tree reads");
    };
    let print =
        spec_engine::spec_check::fingerprint::of(&read, read.rule("demo.alpha").expect("alpha"));
    let summary = spec_engine::model::proof_summary::render(&[(
        "r[demo.alpha]".to_owned(),
        Proof {
            caught: 3,
            commit: Some("3f2a1b2".into()),
            fingerprint: Some(print),
            ..Proof::default()
        },
    )]);
    let dir = two_commits_with(
        &[("docs/audit/proof.md", &summary)],
        REVIEW_SPEC,
        &REVIEW_LIB.replace("    1\n}", "    2\n}"),
    );

    let review = review_of_last_commit(&dir);
    assert_eq!(review.touched.len(), 1, "{:?}", review.touched);
    assert_eq!(review.touched[0].rule, "r[demo.alpha]");
    assert_eq!(
        review.touched[0].proof,
        review::ProofState::Stale {
            changed: vec!["impl"],
            note: "proof stale: impl changed since 3f2a1b2".to_owned(),
        }
    );
    // Shown, not judged.
    assert!(review.passes(), "{:?}", review.problems);
    // Against itself nothing is touched; the proof, still kept, stays as the gate notes it.
    let root = dir.path().canonicalize().expect("root");
    let (same, outcome) = review_at(&root, "HEAD", &[], None, &[]).expect("reviewed");
    assert!(same.touched.is_empty(), "{:?}", same.touched);
    assert!(
        outcome
            .notes
            .contains(&"r[demo.alpha]: proof stale: impl changed since 3f2a1b2".to_owned()),
        "{:?}",
        outcome.notes
    );
}
