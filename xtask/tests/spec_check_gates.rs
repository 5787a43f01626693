//! `cargo xtask spec-check`'s counting, placement, findings and test-backed gates at their
//! boundaries: exact lines for each branch, against fixture trees built in temp dirs (annotation
//! text inside these string literals is inert: tracey's lexer reads comments only).

mod fixture;

use std::path::{Path, PathBuf};

use fixture::{BETA_TEST, CONFIG, LIB, Tree, junit};

const SPEC: &str = "\
# Demo spec

> r[demo.alpha]
> Alpha must hold.

> r[demo.beta]
> Beta must hold.
";

/// When the fixtures' results were "written"; the tree is dated a minute before.
const RESULTS_WRITTEN: u64 = 1_795_990_203;

fn tree(overrides: &[(&str, &str)]) -> Tree {
    Tree::new(SPEC, &[], overrides)
}

fn check(tree: &Tree, args: &[&str]) -> (i32, String) {
    let run = fixture::xtask("spec-check", tree.path(), args);
    (run.code, run.stdout)
}

/// The problem lines of a plain-text report.
fn problems(out: &str) -> Vec<&str> {
    out.lines()
        .skip_while(|line| !(line.ends_with(" problem:") || line.ends_with(" problems:")))
        .filter(|line| line.starts_with("  "))
        .map(str::trim)
        .collect()
}

fn write_results(tree: &Tree, cases: &[(&str, &str, &str)]) -> PathBuf {
    let path = tree.path().join("junit.xml");
    std::fs::write(&path, junit(cases)).expect("write junit");
    tree.date_all(RESULTS_WRITTEN - 60);
    date(&path, RESULTS_WRITTEN);
    path
}

fn date(path: &Path, seconds: u64) {
    std::fs::File::options()
        .write(true)
        .open(path)
        .expect("open")
        .set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(seconds))
        .expect("date");
}

fn utf8(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// A spec with two impls gets one row per impl, named `spec/impl`; one impl's row is the spec's.
// i[verify spec-check.counts]
#[test]
fn a_spec_with_two_impls_has_a_row_per_impl() {
    let config = CONFIG.replace(
        "        )\n    }\n)",
        "            {\n                name second\n                include (second/**/*.rs)\n            }\n        )\n    }\n)",
    );
    assert_ne!(config, CONFIG);
    let tree = tree(&[
        (".config/tracey/config.styx", &config),
        (
            "second/lib.rs",
            "// r[impl demo.alpha]\npub fn alpha() {}\n",
        ),
    ]);
    let (code, out) = check(&tree, &["--json"]);
    let json: serde_json::Value = serde_json::from_str(&out).expect("json output");
    let rows: Vec<(String, u64, u64, u64)> = json["specs"]
        .as_array()
        .expect("specs")
        .iter()
        .map(|row| {
            (
                row["name"].as_str().expect("name").to_owned(),
                row["total"].as_u64().expect("total"),
                row["implemented"].as_u64().expect("implemented"),
                row["verified"].as_u64().expect("verified"),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("demo/rust".to_owned(), 2, 2, 2),
            ("demo/second".to_owned(), 2, 1, 0)
        ]
    );
    assert_eq!(code, 1);

    let (code, out) = check(&self::tree(&[]), &["--json"]);
    let json: serde_json::Value = serde_json::from_str(&out).expect("json output");
    assert_eq!(json["specs"][0]["name"], "demo");
    assert_eq!(json["specs"].as_array().map(Vec::len), Some(1));
    assert_eq!(code, 0);
}

/// A rule whose only references are stale still has them: it is not reported missing (tracey
/// counts it verified), while a rule with no reference of a verb is, once per verb.
// i[verify spec-check.missing]
#[test]
fn missing_means_no_reference_at_all_not_no_current_one() {
    let spec = SPEC.replace("> r[demo.beta]", "> r[demo.beta+2]");
    let lib = LIB.replace("// r[impl demo.alpha]\n", "");
    let tree = tree(&[
        ("docs/spec/demo.md", &spec),
        ("crates/demo/src/lib.rs", &lib),
    ]);
    let (code, out) = check(&tree, &[]);
    assert_eq!(
        problems(&out),
        [
            "crates/demo/src/lib.rs:5: [stale] r[impl demo.beta] is stale: the rule is now \
             r[demo.beta+2] (docs/spec/demo.md:6); make the code match the new rule text, then \
             bump the annotation",
            "crates/demo/tests/beta.rs:1: [stale] r[verify demo.beta] is stale: the rule is now \
             r[demo.beta+2] (docs/spec/demo.md:6); make the code match the new rule text, then \
             bump the annotation",
            "docs/spec/demo.md:3: [missing-impl] rule r[demo.alpha] has no impl reference; put \
             `// r[impl demo.alpha]` on the line before the code that implements it",
        ],
        "{out}"
    );
    assert_eq!(code, 1);
}

/// A `verify` annotation in test code that no function follows cannot be proven by any run.
// i[verify spec-check.verify-on-test+2]
#[test]
fn verify_before_no_function_in_test_code_fails() {
    let beta = format!("{BETA_TEST}\n// r[verify demo.alpha]\n");
    let tree = tree(&[("crates/demo/tests/beta.rs", &beta)]);
    let (code, out) = check(&tree, &[]);
    assert_eq!(
        problems(&out),
        [
            "crates/demo/tests/beta.rs:7: [verify-not-on-test] r[verify demo.alpha] precedes no \
             function, so no test run can prove the rule; move it to the line before a test"
        ],
        "{out}"
    );
    assert_eq!(code, 1);
}

/// Verify annotations outside test code are placement problems only; impl annotations before
/// ordinary functions are fine.
// i[verify spec-check.placement]
// i[verify spec-check.verify-on-test+2]
#[test]
fn verify_outside_test_code_is_only_a_placement_problem() {
    let lib = format!("{LIB}\n// r[verify demo.alpha]\npub fn not_a_test() {{}}\n");
    let tree = tree(&[("crates/demo/src/lib.rs", &lib)]);
    let (code, out) = check(&tree, &[]);
    assert_eq!(
        problems(&out),
        [
            "crates/demo/src/lib.rs:20: [verify-outside-test] r[verify demo.alpha] is not in test \
             code; put it before a test in a `#[cfg(test)]` module or in a file matching \
             test_include"
        ],
        "{out}"
    );
    assert_eq!(code, 1);
}

/// A rule whose tests all share one fate says so in the headline; mixed fates do not.
// i[verify spec-check.test-backed]
#[test]
fn a_rule_whose_tests_all_share_a_fate_says_so() {
    let beta = format!("{BETA_TEST}\n// r[verify demo.beta]\n#[test]\nfn beta_again() {{}}\n");
    let tree = tree(&[("crates/demo/tests/beta.rs", &beta)]);
    let results = write_results(&tree, &[("demo", "tests::alpha_holds", "passed")]);
    let (code, out) = check(&tree, &["--results", utf8(&results)]);
    assert_eq!(
        problems(&out),
        [
            "docs/spec/demo.md:6: [not-verified-by-test] rule r[demo.beta] is not verified by a \
             passing test (all 2 of its tests: ignored or not run): `demo::beta beta_holds` \
             (crates/demo/tests/beta.rs:1) ignored or not run (absent from the results); \
             `demo::beta beta_again` (crates/demo/tests/beta.rs:7) ignored or not run (absent \
             from the results)"
        ],
        "{out}"
    );
    assert_eq!(code, 1);

    let results = write_results(
        &tree,
        &[
            ("demo", "tests::alpha_holds", "passed"),
            ("demo::beta", "beta_holds", "failed"),
        ],
    );
    let (code, out) = check(&tree, &["--results", utf8(&results)]);
    assert_eq!(
        problems(&out),
        [
            "docs/spec/demo.md:6: [not-verified-by-test] rule r[demo.beta] is not verified by a \
             passing test (no test passed): `demo::beta beta_holds` (crates/demo/tests/beta.rs:1) \
             failed; `demo::beta beta_again` (crates/demo/tests/beta.rs:7) ignored or not run \
             (absent from the results)"
        ],
        "{out}"
    );
    assert_eq!(code, 1);
}

/// A rule with one test that did not pass has the plain headline.
// i[verify spec-check.test-backed]
#[test]
fn a_rule_with_one_failed_test_says_no_test_passed() {
    let tree = tree(&[]);
    let results = write_results(
        &tree,
        &[
            ("demo", "tests::alpha_holds", "passed"),
            ("demo::beta", "beta_holds", "failed"),
        ],
    );
    let (code, out) = check(&tree, &["--results", utf8(&results)]);
    assert_eq!(
        problems(&out),
        [
            "docs/spec/demo.md:6: [not-verified-by-test] rule r[demo.beta] is not verified by a \
             passing test (no test passed): `demo::beta beta_holds` (crates/demo/tests/beta.rs:1) \
             failed"
        ],
        "{out}"
    );
    assert_eq!(code, 1);
}

/// A test in a file cargo's layout cannot place (a shared `tests/common/mod.rs`) is found by its
/// function name within its package — in the package's own suite or one of its binaries, under
/// any module path — and only a unique match counts.
// i[verify spec-check.test-identity]
#[test]
fn an_unplaceable_test_is_found_by_its_unique_name_in_its_package() {
    let common = "// r[verify demo.beta]\n#[test]\nfn beta_shared() {}\n";
    let tree = tree(&[("crates/demo/tests/common/mod.rs", common)]);
    tree.remove("crates/demo/tests/beta.rs");
    let judge = |cases: &[(&str, &str, &str)]| {
        let results = write_results(&tree, cases);
        check(&tree, &["--results", utf8(&results)])
    };

    // In one of the package's binaries, under a module path; a same-named test of another
    // package does not count against it.
    let (code, out) = judge(&[
        ("demo", "tests::alpha_holds", "passed"),
        ("demo::beta", "common::beta_shared", "passed"),
        ("other", "common::beta_shared", "failed"),
    ]);
    assert_eq!(problems(&out), Vec::<&str>::new(), "{out}");
    assert_eq!(code, 0);

    // In the package's own suite, at the crate root.
    let (code, out) = judge(&[
        ("demo", "tests::alpha_holds", "passed"),
        ("demo", "beta_shared", "passed"),
    ]);
    assert_eq!(problems(&out), Vec::<&str>::new(), "{out}");
    assert_eq!(code, 0);

    // Two matches: neither counts.
    let (code, out) = judge(&[
        ("demo", "tests::alpha_holds", "passed"),
        ("demo::beta", "common::beta_shared", "passed"),
        ("demo::gamma", "common::beta_shared", "passed"),
    ]);
    assert_eq!(
        problems(&out),
        [
            "docs/spec/demo.md:6: [not-verified-by-test] rule r[demo.beta] is not verified by a \
             passing test (no test passed): `beta_shared` (crates/demo/tests/common/mod.rs:1) \
             ambiguous: matches 2 test cases (demo::beta common::beta_shared, demo::gamma \
             common::beta_shared)"
        ],
        "{out}"
    );
    assert_eq!(code, 1);

    // A name that only ends like the function's is no match.
    let (code, out) = judge(&[
        ("demo", "tests::alpha_holds", "passed"),
        ("demo::beta", "common::not_beta_shared", "passed"),
    ]);
    assert_eq!(
        problems(&out),
        [
            "docs/spec/demo.md:6: [not-verified-by-test] rule r[demo.beta] is not verified by a \
             passing test (no test passed): `beta_shared` (crates/demo/tests/common/mod.rs:1) \
             ignored or not run (absent from the results)"
        ],
        "{out}"
    );
    assert_eq!(code, 1);
}

/// Only files changed strictly after the results are outdated, and a one-crate run looks only at
/// that crate's files.
// i[verify spec-check.freshness]
#[test]
fn freshness_is_strict_and_scoped_to_the_crates_run() {
    let spec = format!("{SPEC}\n> r[demo.gamma]\n> Gamma must hold.\n");
    let other_lib = "// r[impl demo.gamma]\npub fn gamma() {}\n\n#[cfg(test)]\nmod tests {\n    \
                     // r[verify demo.gamma]\n    #[test]\n    fn gamma_holds() {}\n}\n";
    let tree = tree(&[
        ("docs/spec/demo.md", &spec),
        (
            "crates/other/Cargo.toml",
            "[package]\nname = \"other\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n",
        ),
        ("crates/other/src/lib.rs", other_lib),
    ]);
    let results = write_results(
        &tree,
        &[
            ("demo", "tests::alpha_holds", "passed"),
            ("demo::beta", "beta_holds", "passed"),
            ("other", "tests::gamma_holds", "passed"),
        ],
    );
    // Written in the same second as the results: not after them.
    date(
        &tree.path().join("crates/demo/tests/beta.rs"),
        RESULTS_WRITTEN,
    );
    // Edited a minute after the run, in the other crate.
    date(
        &tree.path().join("crates/other/src/lib.rs"),
        RESULTS_WRITTEN + 60,
    );
    let outdated = "crates/other/src/lib.rs: [results-outdated] changed 2026-11-29 22:11:03 UTC \
                    after the test results were written (2026-11-29 22:10:03 UTC), so they may \
                    not describe its tests; rerun `cargo xtask test -- -p other`";

    let (code, out) = check(&tree, &["--results", utf8(&results)]);
    assert_eq!(problems(&out), [outdated], "{out}");
    assert_eq!(code, 1);

    let (code, out) = check(&tree, &["--results", utf8(&results), "--crate", "other"]);
    assert_eq!(problems(&out), [outdated], "{out}");
    assert_eq!(code, 1);

    let (code, out) = check(&tree, &["--results", utf8(&results), "--crate", "demo"]);
    assert_eq!(problems(&out), Vec::<&str>::new(), "{out}");
    assert_eq!(code, 0);
}

/// Without a findings file the gate has nothing to check; one it cannot read fails it.
// i[verify spec-check.findings+2]
#[test]
fn findings_file_absent_is_fine_and_unreadable_fails() {
    let tree = tree(&[]);
    let (code, out) = check(&tree, &[]);
    assert_eq!(problems(&out), Vec::<&str>::new(), "{out}");
    assert!(!out.contains("planned:"), "{out}");
    assert_eq!(code, 0);

    std::fs::create_dir_all(tree.path().join("docs/audit/findings.md")).expect("mkdir");
    let (code, out) = check(&tree, &[]);
    assert_eq!(
        problems(&out),
        [
            "docs/audit/findings.md: [findings] cannot read the findings: Is a directory (os error 21)"
        ],
        "{out}"
    );
    assert_eq!(code, 1);
}

/// A planned id named by several findings is listed once, with every finding that names it.
// i[verify spec-check.findings+2]
#[test]
fn a_planned_id_is_listed_once_with_each_finding_naming_it() {
    let findings = "# Findings\n\n## H1: One\n\n**Closed by:** `r[gamma.planned]`\n\n\
                    ## H2: Two\n\n**Closed by:** `r[zeta.later]`\n\n\
                    ## H3: Three\n\n**Closed by:** `r[gamma.planned]`\n";
    let tree = tree(&[("docs/audit/findings.md", findings)]);
    let (code, out) = check(&tree, &[]);
    let planned: Vec<&str> = out.lines().filter(|l| l.starts_with("planned:")).collect();
    assert_eq!(
        planned,
        [
            "planned: 2 rules named by findings not in the spec yet (allowed while no rule of \
             their area exists): r[gamma.planned] (H1, H3), r[zeta.later] (H2)"
        ],
        "{out}"
    );
    assert_eq!(code, 0);
}

/// Test files in the shapes other tracey workspaces write: a `verify` annotation between a
/// function's test attribute and the function, among several attributes and doc comments.
const BETA_BETWEEN_ATTRIBUTES: &str = "\
/// Beta, on the runtime.
#[tokio::test(start_paused = true)]
// r[verify demo.beta]
async fn beta_holds() {}

#[test_case(1 ; \"one\")]
#[test_case(2 ; \"two\")]
/// Every case.
// r[verify demo.beta]
#[allow(unused)]
fn beta_cases(n: u32) {}

#[rstest]
#[case(1)]
// r[verify demo.beta]
fn beta_rstest(#[case] n: u32) {}
";

/// A `verify` annotation after `#[test]` (or `#[tokio::test]`, `#[test_case(..)]`, among other
/// attributes and doc comments) is on that test: no problem, and its result is that test's.
// i[verify spec-check.placement.between-attributes]
#[test]
fn a_verify_between_a_test_attribute_and_its_fn_is_on_that_test() {
    let lib = LIB.replace(
        "    // r[verify demo.alpha]\n    #[test]\n",
        "    #[test]\n    // r[verify demo.alpha]\n",
    );
    assert_ne!(lib, LIB);
    let tree = tree(&[
        ("crates/demo/src/lib.rs", &lib),
        ("crates/demo/tests/beta.rs", BETA_BETWEEN_ATTRIBUTES),
    ]);
    let (code, out) = check(&tree, &[]);
    assert_eq!(problems(&out), Vec::<&str>::new(), "{out}");
    assert_eq!(code, 0, "{out}");

    let results = write_results(
        &tree,
        &[
            ("demo", "tests::alpha_holds", "passed"),
            ("demo::beta", "beta_holds", "passed"),
        ],
    );
    let (code, out) = check(&tree, &["--results", utf8(&results)]);
    assert_eq!(problems(&out), Vec::<&str>::new(), "{out}");
    assert_eq!(code, 0, "{out}");

    // Each annotation is judged by the test it sits on, by name.
    let results = write_results(
        &tree,
        &[
            ("demo", "tests::alpha_holds", "failed"),
            ("demo::beta", "beta_holds", "failed"),
        ],
    );
    let (code, out) = check(&tree, &["--results", utf8(&results)]);
    assert_eq!(
        problems(&out),
        [
            "docs/spec/demo.md:3: [not-verified-by-test] rule r[demo.alpha] is not verified by a \
             passing test (no test passed): `demo tests::alpha_holds` (crates/demo/src/lib.rs:14) \
             failed",
            "docs/spec/demo.md:6: [not-verified-by-test] rule r[demo.beta] is not verified by a \
             passing test (no test passed): `demo::beta beta_holds` (crates/demo/tests/beta.rs:3) \
             failed; `demo::beta beta_cases` (crates/demo/tests/beta.rs:9) ignored or not run \
             (absent from the results); `demo::beta beta_rstest` (crates/demo/tests/beta.rs:15) \
             ignored or not run (absent from the results)",
        ],
        "{out}"
    );
    assert_eq!(code, 1);
}

/// A golden test file whose head verifies a rule for all its tests.
const WIRE_TEST: &str = "\
//! Golden conformance tests for the wire protocol.
// r[verify demo.beta]

use demo::beta;

#[test]
fn golden_beta() {
    assert_eq!(beta(), 2);
}

#[test]
fn golden_again() {}
";

/// The demo crate with `demo.alpha` verified at the head of its `#[cfg(test)]` module and
/// `demo.beta` at the head of `tests/wire.rs`.
fn headed_tree() -> Tree {
    let lib = LIB.replace(
        "mod tests {\n    // r[verify demo.alpha]\n    #[test]\n",
        "mod tests {\n    // r[verify demo.alpha]\n\n    use super::alpha;\n\n    #[test]\n",
    );
    assert_ne!(lib, LIB);
    let tree = tree(&[
        ("crates/demo/src/lib.rs", &lib),
        ("crates/demo/tests/wire.rs", WIRE_TEST),
    ]);
    tree.remove("crates/demo/tests/beta.rs");
    tree
}

/// A `verify` annotation heading a test file or a `#[cfg(test)]` module is no placement problem:
/// the file's (module's) tests verify the rule.
// i[verify spec-check.placement.file-head]
#[test]
fn a_verify_heading_a_test_file_or_module_is_accepted() {
    let tree = headed_tree();
    let (code, out) = check(&tree, &[]);
    assert_eq!(problems(&out), Vec::<&str>::new(), "{out}");
    assert_eq!(code, 0, "{out}");

    // A head followed by no test at all still proves nothing.
    let empty = tree.path().join("crates/demo/tests/empty.rs");
    std::fs::write(
        &empty,
        "//! Nothing here.\n// r[verify demo.beta]\n\nuse demo::beta;\n",
    )
    .expect("write");
    let (code, out) = check(&tree, &[]);
    assert_eq!(
        problems(&out),
        [
            "crates/demo/tests/empty.rs:2: [verify-not-on-test] r[verify demo.beta] heads this \
             file, which holds no test, so no test run can prove the rule; move it to the line \
             before a test"
        ],
        "{out}"
    );
    assert_eq!(code, 1);

    // Nor does a head of a test module holding only helpers.
    std::fs::remove_file(&empty).expect("rm");
    let lib = std::fs::read_to_string(tree.path().join("crates/demo/src/lib.rs")).expect("read");
    let lib = format!(
        "{lib}\n#[cfg(test)]\nmod helpers {{\n    // r[verify demo.alpha]\n\n    use super::alpha;\n\n    \
         fn one() -> u32 {{\n        alpha()\n    }}\n}}\n"
    );
    tree.write("crates/demo/src/lib.rs", lib.as_bytes());
    let (code, out) = check(&tree, &[]);
    assert_eq!(
        problems(&out),
        [
            "crates/demo/src/lib.rs:25: [verify-not-on-test] r[verify demo.alpha] heads `mod \
             helpers`, which holds no test, so no test run can prove the rule; move it to the line \
             before a test"
        ],
        "{out}"
    );
    assert_eq!(code, 1);
}

/// In test-backed mode a headed rule is verified when its file's (module's) tests ran and passed:
/// one failure or an absent file fails it, naming the test.
// i[verify spec-check.placement.file-head]
#[test]
fn a_verify_heading_a_file_is_judged_by_that_files_tests() {
    let tree = headed_tree();
    let results = write_results(
        &tree,
        &[
            ("demo", "tests::alpha_holds", "passed"),
            ("demo::wire", "golden_beta", "passed"),
            ("demo::wire", "golden_again", "passed"),
        ],
    );
    let (code, out) = check(&tree, &["--results", utf8(&results)]);
    assert_eq!(problems(&out), Vec::<&str>::new(), "{out}");
    assert_eq!(code, 0, "{out}");

    let results = write_results(
        &tree,
        &[
            ("demo", "tests::alpha_holds", "passed"),
            ("demo::wire", "golden_beta", "passed"),
            ("demo::wire", "golden_again", "failed"),
        ],
    );
    let (code, out) = check(&tree, &["--results", utf8(&results)]);
    assert_eq!(
        problems(&out),
        [
            "docs/spec/demo.md:6: [not-verified-by-test] rule r[demo.beta] is not verified by a \
             passing test (no test passed): `demo::wire golden_again` \
             (crates/demo/tests/wire.rs:2) failed"
        ],
        "{out}"
    );
    assert_eq!(code, 1);

    // Neither the module's nor the file's tests ran.
    let results = write_results(&tree, &[("demo", "other", "passed")]);
    let (code, out) = check(&tree, &["--results", utf8(&results)]);
    assert_eq!(
        problems(&out),
        [
            "docs/spec/demo.md:3: [not-verified-by-test] rule r[demo.alpha] is not verified by a \
             passing test (no test passed): `demo tests::*` (crates/demo/src/lib.rs:13) ignored \
             or not run (absent from the results)",
            "docs/spec/demo.md:6: [not-verified-by-test] rule r[demo.beta] is not verified by a \
             passing test (no test passed): `demo::wire *` (crates/demo/tests/wire.rs:2) ignored \
             or not run (absent from the results)",
        ],
        "{out}"
    );
    assert_eq!(code, 1);
}

/// The workspace manifest with a `[workspace.metadata.spec-engine]` table of `keys`.
fn manifest_with(keys: &str) -> String {
    format!(
        "{}\n[workspace.metadata.spec-engine]\n{keys}",
        fixture::WORKSPACE_MANIFEST
    )
}

/// The findings and the proof summary are read where the workspace's `Cargo.toml` says, not at
/// holdfast's paths; a table the gate cannot use fails it.
// i[verify xtask.paths]
#[test]
fn the_engines_files_are_read_where_the_workspace_says() {
    let manifest = manifest_with("findings = \"audit/found.md\"\nproof = \"audit/proven.md\"\n");
    let tree = tree(&[
        ("Cargo.toml", &manifest),
        // At the default paths, no longer read: each would add a problem or a proof.
        (
            "docs/audit/findings.md",
            "# Findings\n\n## H9: Ignored\n\n**Closed by:** `r[demo.alpah]`\n",
        ),
        (
            "docs/audit/proof.md",
            "| `r[demo.beta]` | proven | 1 | 0 | 0 | 0 | 0 | abc | - |\n",
        ),
        (
            "audit/found.md",
            "# Findings\n\n## H1: Alpha\n\nAlpha failed.\n\n**Closed by:** `r[demo.alpha+2]`\n",
        ),
        (
            "audit/proven.md",
            "| `r[demo.alpha]` | proven | 3 | 0 | 0 | 0 | 0 | abc | - |\n",
        ),
    ]);
    let (code, out) = check(&tree, &[]);
    assert_eq!(
        problems(&out),
        [
            "audit/found.md:7: [findings] finding H1 names r[demo.alpha+2]: stale: the spec \
             defines r[demo.alpha] (docs/spec/demo.md:3); check the finding still holds under \
             the new text, then write that marker"
        ],
        "{out}"
    );
    assert!(
        out.contains(
            "note: proof (target/prove/, audit/proven.md): 1 of 2 rules proven; with surviving \
             mutants: none; justified survivors: 0"
        ),
        "{out}"
    );
    assert_eq!(code, 1);

    let tree = self::tree(&[("Cargo.toml", &manifest_with("finding = \"a.md\"\n"))]);
    let (code, out) = check(&tree, &[]);
    let problems = problems(&out);
    assert_eq!(problems.len(), 1, "{out}");
    assert!(
        problems[0].starts_with(
            "Cargo.toml: [config] Cargo.toml: [workspace.metadata.spec-engine]: line 5: unknown \
             field `finding`"
        ),
        "{out}"
    );
    assert_eq!(code, 1);

    let tree = self::tree(&[("Cargo.toml", &manifest_with("proof = \"../proof.md\"\n"))]);
    let (code, out) = check(&tree, &[]);
    assert!(
        out.contains("`proof = \"../proof.md\"` must be a non-empty path relative to the root"),
        "{out}"
    );
    assert_eq!(code, 1);
}

/// A head of a file that its parent declares `#[cfg(test)] mod golden;` is test code too, and its
/// tests are found at their module path.
// i[verify spec-check.placement.file-head]
#[test]
fn a_verify_heading_a_cfg_test_module_file_is_judged_by_its_tests() {
    let lib = LIB.replace(
        "    // r[verify demo.alpha]\n    #[test]\n",
        "    #[test]\n",
    );
    let lib = format!("{lib}\n#[cfg(test)]\nmod golden;\n");
    let golden = "//! Golden alpha.\n// r[verify demo.alpha]\n\nuse super::alpha;\n\n#[test]\nfn alpha_golden() {\n    assert_eq!(alpha(), 1);\n}\n";
    let tree = tree(&[
        ("crates/demo/src/lib.rs", &lib),
        ("crates/demo/src/golden.rs", golden),
    ]);
    let (code, out) = check(&tree, &[]);
    assert_eq!(problems(&out), Vec::<&str>::new(), "{out}");
    assert_eq!(code, 0, "{out}");

    let results = write_results(
        &tree,
        &[
            ("demo", "golden::alpha_golden", "passed"),
            ("demo::beta", "beta_holds", "passed"),
        ],
    );
    let (code, out) = check(&tree, &["--results", utf8(&results)]);
    assert_eq!(problems(&out), Vec::<&str>::new(), "{out}");
    assert_eq!(code, 0, "{out}");

    // Only `tests::alpha_holds` passed, which is not a test of that file.
    let results = write_results(
        &tree,
        &[
            ("demo", "tests::alpha_holds", "passed"),
            ("demo::beta", "beta_holds", "passed"),
        ],
    );
    let (code, out) = check(&tree, &["--results", utf8(&results)]);
    assert_eq!(
        problems(&out),
        [
            "docs/spec/demo.md:3: [not-verified-by-test] rule r[demo.alpha] is not verified by a \
             passing test (no test passed): `demo golden::*` (crates/demo/src/golden.rs:2) \
             ignored or not run (absent from the results)"
        ],
        "{out}"
    );
    assert_eq!(code, 1);
}
