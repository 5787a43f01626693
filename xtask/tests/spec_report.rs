//! `cargo xtask spec-report` on a fixture tree: one self-contained page whose numbers are the
//! gate's. Fixtures are strings here, never checked-in files (see `fixture/mod.rs`).

mod fixture;

use std::time::{Duration, UNIX_EPOCH};

use fixture::{Tree, junit};

const SPEC: &str = "\
# Demo spec

> r[demo.alpha]
> Alpha must hold.

> r[demo.beta]
> Beta must hold.
";

const FINDINGS: &str = "\
# Findings

## H1: Alpha and beta failed silently

The old code let alpha and beta fail without a word.

**Closed by:** `r[demo.alpha]`, `r[demo.beta]`
";

/// Writes the default results (alpha's and beta's tests passed) and the default skip ledger,
/// which says beta's test returned early; returns the results' path.
fn results_with_beta_skipped(tree: &Tree) -> std::path::PathBuf {
    let results = tree.write(
        "target/nextest/ci/junit.xml",
        junit(&[
            ("demo", "tests::alpha_holds", "passed"),
            ("demo::beta", "beta_holds", "passed"),
        ])
        .as_bytes(),
    );
    tree.write(
        "target/holdfast-test-skips.jsonl",
        b"{\"test\":\"beta_holds\",\"binary\":\"beta\",\"service\":\"docker\",\"reason\":\"not running\"}\n",
    );
    results
}

/// When the fixture's results were written: 2026-11-29 22:10:03 UTC.
const RESULTS_WRITTEN: u64 = 1_795_990_203;

/// The values of `attribute` on the elements whose opening tag contains `marker`, in page order.
fn attributes(page: &str, marker: &str, attribute: &str) -> Vec<String> {
    page.split('<')
        .filter(|tag| tag.contains(marker))
        .filter_map(|tag| {
            let needle = format!("{attribute}=\"");
            let start = tag.find(&needle)? + needle.len();
            let end = tag[start..].find('"')?;
            Some(tag[start..start + end].to_owned())
        })
        .collect()
}

// i[verify spec-report.file]
// i[verify spec-report.content]
#[test]
fn the_page_is_self_contained_and_its_numbers_are_the_gates() {
    let tree = Tree::new(SPEC, &[("docs/audit/findings.md", FINDINGS)], &[]);
    // beta's only test returned early: it proves nothing.
    let results = results_with_beta_skipped(&tree);
    tree.date_all(RESULTS_WRITTEN - 60);
    std::fs::File::options()
        .write(true)
        .open(&results)
        .expect("open")
        .set_modified(UNIX_EPOCH + Duration::from_secs(RESULTS_WRITTEN))
        .expect("date");

    let run = fixture::xtask("spec-report", tree.path(), &[]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert!(run.stdout.starts_with("root: [ROOT]\n"), "{}", run.stdout);
    let page = std::fs::read_to_string(tree.path().join("target/spec-report.html")).expect("page");

    // Self-contained: nothing is fetched at view time.
    for outside in ["http://", "https://", "<script", "<link", "src=", "@import"] {
        assert!(!page.contains(outside), "`{outside}` in the page");
    }

    let gate = fixture::xtask(
        "spec-check",
        tree.path(),
        &[
            "--json",
            "--results",
            "target/nextest/ci/junit.xml",
            "--skips",
            "target/holdfast-test-skips.jsonl",
        ],
    );
    let json: serde_json::Value = serde_json::from_str(&gate.stdout).expect("json");
    for key in [
        "total",
        "implemented",
        "verified",
        "stale",
        "errors",
        "tested",
    ] {
        let ours: Vec<String> = attributes(&page, "class=\"spec\"", &format!("data-{key}"));
        let gates: Vec<String> = json["specs"]
            .as_array()
            .expect("specs")
            .iter()
            .map(|s| s[key].to_string())
            .collect();
        assert_eq!(ours, gates, "{key}");
    }
    assert_eq!(
        attributes(&page, "id=\"verdict\"", "data-problems"),
        [json["problems"]
            .as_array()
            .expect("problems")
            .len()
            .to_string()]
    );
    // beta is highlighted as verified only by a skipped test; H1 is open because of it.
    assert_eq!(
        attributes(&page, "id=\"skipped-only\"", "data-count"),
        ["1"]
    );
    assert!(
        page.contains("<a class=\"marker\" href=\"#r[demo.beta]\">"),
        "{page}"
    );
    assert_eq!(
        attributes(&page, "class=\"finding\"", "data-verdict"),
        ["open"]
    );
    // Links are relative to the page, so they work from a copy of the tree.
    assert!(
        page.contains("href=\"../crates/demo/src/lib.rs#L1\""),
        "{page}"
    );
    insta::assert_snapshot!(
        page.replace(
            &tree
                .path()
                .canonicalize()
                .expect("root")
                .display()
                .to_string(),
            "[ROOT]"
        )
    );
}

/// The class of each rule's block, in page order.
fn rule_classes(page: &str) -> Vec<(String, String)> {
    let rules = attributes(page, "data-rule=", "data-rule");
    let classes = attributes(page, "data-rule=", "class");
    rules.into_iter().zip(classes).collect()
}

/// A rule whose verifying test failed, and a verified rule with surviving mutants, are both shown
/// as bad; a verified rule without survivors is plain.
// i[verify spec-report.content]
#[test]
fn regressed_rules_and_rules_with_survivors_are_marked_bad() {
    let spec = format!("{SPEC}\n> r[demo.gamma]\n> Gamma must hold.\n");
    let lib = fixture::LIB.replace(
        "#[cfg(test)]",
        "// r[impl demo.gamma]\npub fn gamma() {}\n\n#[cfg(test)]",
    ) + "\n// r[verify demo.gamma]\n#[test]\nfn gamma_holds() {}\n";
    let tree = Tree::new(
        &spec,
        &[],
        &[
            ("crates/demo/src/lib.rs", &lib),
            (
                "target/prove/demo.alpha.json",
                "{\"rule\": \"r[demo.alpha]\", \"caught\": 1, \"missed\": 1, \"unviable\": 0, \
                 \"timeout\": 0, \"survivors\": [\"crates/demo/src/lib.rs:2:5: replace alpha -> \
                 u32 with 0\"]}",
            ),
        ],
    );
    let results = tree.write(
        "junit.xml",
        junit(&[
            ("demo", "tests::alpha_holds", "passed"),
            ("demo", "gamma_holds", "passed"),
            ("demo::beta", "beta_holds", "failed"),
        ])
        .as_bytes(),
    );
    tree.date_all(RESULTS_WRITTEN - 60);
    std::fs::File::options()
        .write(true)
        .open(&results)
        .expect("open")
        .set_modified(UNIX_EPOCH + Duration::from_secs(RESULTS_WRITTEN))
        .expect("date");
    let out = tree.path().join("report.html");
    let run = fixture::xtask(
        "spec-report",
        tree.path(),
        &[
            "--results",
            results.to_str().expect("utf-8"),
            "--out",
            out.to_str().expect("utf-8"),
        ],
    );
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    let page = std::fs::read_to_string(&out).expect("page");
    assert_eq!(
        rule_classes(&page),
        [
            ("r[demo.alpha]".to_owned(), "rule bad".to_owned()),
            ("r[demo.beta]".to_owned(), "rule bad".to_owned()),
            ("r[demo.gamma]".to_owned(), "rule".to_owned()),
        ]
    );
    assert_eq!(
        attributes(&page, "data-rule=", "data-verdict"),
        ["verified", "regressed", "verified"]
    );
}

/// `--out` into directories that do not exist yet creates them.
// i[verify spec-report.file]
// i[verify spec-report.debt]
#[test]
fn the_page_is_written_into_new_directories() {
    let tree = Tree::new(SPEC, &[], &[]);
    // Code no rule names: the spec debt, printed and shown.
    tree.write(
        "crates/demo/src/extra.rs",
        b"/// Nothing states this.\npub fn loose() {}\n",
    );
    let out = tree.path().join("reports/today/spec.html");
    let run = fixture::xtask(
        "spec-report",
        tree.path(),
        &["--no-results", "--out", out.to_str().expect("utf-8")],
    );
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert!(
        run.stdout.contains(
            "spec-report: wrote [ROOT]/reports/today/spec.html\n\
             spec-report: spec debt: 1 entry, 2 lines; the largest:\n    \
             2  demo  crates/demo/src/extra.rs:1  fn loose (public)\n"
        ),
        "{}",
        run.stdout
    );
    let page = std::fs::read_to_string(&out).expect("page");
    assert!(
        page.contains("<p class=\"muted\" id=\"debt\" data-count=\"1\" data-lines=\"2\">"),
        "{page}"
    );
    assert!(
        page.contains("<tr class=\"debt\"><td class=\"num\">2</td><td>demo</td>"),
        "{page}"
    );
    let page = std::fs::read_to_string(&out).expect("page written");
    assert!(page.contains("data-rule=\"r[demo.alpha]\""), "{page}");
}

/// A `--skips` file that does not exist is no ledger, for the page's gate counts and its rule
/// blocks alike, as for the trace: the default ledger beside it is not read in its place.
// i[verify spec-report.file]
#[test]
fn a_named_skip_ledger_that_is_missing_is_no_ledger_and_the_default_is_not_read_instead() {
    let tree = Tree::new(SPEC, &[], &[]);
    // The default ledger says beta's test skipped; the run names another, missing, ledger.
    results_with_beta_skipped(&tree);
    let run = fixture::xtask(
        "spec-report",
        tree.path(),
        &["--skips", "target/elsewhere.jsonl"],
    );
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    let page = std::fs::read_to_string(tree.path().join("target/spec-report.html")).expect("page");
    assert_eq!(
        attributes(&page, "id=\"skipped-only\"", "data-count"),
        ["0"],
        "beta judged by the default ledger the run did not name"
    );
    let trace = fixture::xtask(
        "trace",
        tree.path(),
        &["demo.beta", "--skips", "target/elsewhere.jsonl"],
    );
    assert!(!trace.stdout.contains("skipped"), "{}", trace.stdout);
    // Unnamed, the default ledger is read: the word the assertion above looks for is there.
    let trace = fixture::xtask("trace", tree.path(), &["demo.beta"]);
    assert!(trace.stdout.contains("skipped"), "{}", trace.stdout);
}
