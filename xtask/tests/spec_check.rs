//! `cargo xtask spec-check` against small fixture trees built in temp dirs, one per failure kind.
//! Fixtures are strings here, never checked-in files: the real gate scans this repository, and
//! tracey's lexer reads comments only, so annotation-shaped text inside these literals is inert.

mod fixture;

use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::process::Command;

use fixture::{BETA_TEST, CONFIG, LIB, Tree, junit};

const SPEC: &str = "\
# Demo spec

> r[demo.alpha]
> Alpha must hold.

> r[demo.beta]
> Beta must hold.
";

/// A fixture tree: the clean demo crate, with `overrides` replacing or adding files.
struct Fixture(Tree);

impl Fixture {
    fn new(overrides: &[(&str, &str)]) -> Self {
        Self(Tree::new(SPEC, &[], overrides))
    }

    /// Runs `xtask spec-check --root <fixture> ARGS`; returns the exit code and stdout with the
    /// temp dir replaced by `[ROOT]`.
    fn check(&self, args: &[&str]) -> (i32, String) {
        let run = fixture::xtask("spec-check", self.path(), args);
        (run.code, run.stdout)
    }

    /// Like [`Fixture::check`], with stderr after stdout.
    fn check_all(&self, args: &[&str]) -> (i32, String) {
        let run = fixture::xtask("spec-check", self.path(), args);
        (
            run.code,
            format!("{}--- stderr\n{}", run.stdout, run.stderr),
        )
    }
}

impl Deref for Fixture {
    type Target = Tree;

    fn deref(&self) -> &Tree {
        &self.0
    }
}

// i[verify spec-check.exit-code+2]
// i[verify spec-check.placement]
#[test]
fn clean_tree_passes() {
    let fixture = Fixture::new(&[]);
    let (code, out) = fixture.check(&[]);
    insta::assert_snapshot!(out);
    assert_eq!(code, 0);
}

// i[verify spec-check.missing]
#[test]
fn rule_without_impl_fails() {
    let lib = LIB.replace("// r[impl demo.beta]\n", "");
    let fixture = Fixture::new(&[("crates/demo/src/lib.rs", &lib)]);
    let (code, out) = fixture.check(&[]);
    insta::assert_snapshot!(out);
    assert_eq!(code, 1);
}

// i[verify spec-check.missing]
#[test]
fn rule_without_verify_fails() {
    let fixture = Fixture::new(&[]);
    fixture.remove("crates/demo/tests/beta.rs");
    let (code, out) = fixture.check(&[]);
    insta::assert_snapshot!(out);
    assert_eq!(code, 1);
}

// i[verify spec-check.stale]
#[test]
fn stale_reference_fails() {
    let spec = SPEC.replace("> r[demo.beta]", "> r[demo.beta+2]");
    let fixture = Fixture::new(&[("docs/spec/demo.md", &spec)]);
    let (code, out) = fixture.check(&[]);
    insta::assert_snapshot!(out);
    assert_eq!(code, 1);
}

// i[verify spec-check.unknown]
#[test]
fn unknown_rule_fails_with_did_you_mean() {
    let lib = LIB.replace("// r[impl demo.beta]", "// r[impl demo.betta]");
    let fixture = Fixture::new(&[("crates/demo/src/lib.rs", &lib)]);
    let (code, out) = fixture.check(&[]);
    insta::assert_snapshot!(out);
    assert_eq!(code, 1);
}

// i[verify spec-check.placement]
#[test]
fn verify_outside_test_code_fails() {
    let lib = format!("{LIB}\n// r[verify demo.alpha]\npub fn not_a_test() {{}}\n");
    let fixture = Fixture::new(&[("crates/demo/src/lib.rs", &lib)]);
    let (code, out) = fixture.check(&[]);
    insta::assert_snapshot!(out);
    assert_eq!(code, 1);
}

// i[verify spec-check.placement]
#[test]
fn impl_in_test_code_fails() {
    // One in a test_include file (tracey's notion), one in a #[cfg(test)] module (ours).
    let beta = format!("{BETA_TEST}\n// r[impl demo.beta]\nfn helper() {{}}\n");
    let lib = LIB.replace(
        "    // r[verify demo.alpha]",
        "    // r[impl demo.alpha]\n    fn fake() {}\n\n    // r[verify demo.alpha]",
    );
    let fixture = Fixture::new(&[
        ("crates/demo/tests/beta.rs", &beta),
        ("crates/demo/src/lib.rs", &lib),
    ]);
    let (code, out) = fixture.check(&[]);
    insta::assert_snapshot!(out);
    assert_eq!(code, 1);
}

// i[verify spec-check.duplicate]
#[test]
fn rule_defined_twice_in_one_file_fails() {
    let spec = format!("{SPEC}\n> r[demo.alpha]\n> Alpha again.\n");
    let fixture = Fixture::new(&[("docs/spec/demo.md", &spec)]);
    let (code, out) = fixture.check(&[]);
    insta::assert_snapshot!(out);
    assert_eq!(code, 1);
}

// i[verify spec-check.duplicate]
#[test]
fn rule_defined_twice_across_files_fails() {
    let config = CONFIG.replace("include (docs/spec/demo.md)", "include (docs/spec/*.md)");
    let fixture = Fixture::new(&[
        (".config/tracey/config.styx", &config),
        (
            "docs/spec/more.md",
            "# More\n\n> r[demo.beta+2]\n> Beta, changed.\n",
        ),
    ]);
    let (code, out) = fixture.check(&[]);
    insta::assert_snapshot!(out);
    assert_eq!(code, 1);
}

// i[verify spec-check.config]
#[test]
fn unparsable_config_fails_loudly() {
    let broken = CONFIG.replace("impls (", "impls ((");
    let fixture = Fixture::new(&[(".config/tracey/config.styx", &broken)]);
    let (code, out) = fixture.check(&[]);
    insta::assert_snapshot!(out);
    assert_eq!(code, 1);
}

// i[verify spec-check.config]
#[test]
fn misspelt_config_key_fails() {
    // tracey would silently ignore the key, and with it every test file.
    let typo = CONFIG.replace("test_include (", "test_includes (");
    let fixture = Fixture::new(&[(".config/tracey/config.styx", &typo)]);
    let (code, out) = fixture.check(&[]);
    insta::assert_snapshot!(out);
    assert_eq!(code, 1);
}

// i[verify spec-check.config]
#[test]
fn missing_config_fails_loudly() {
    let fixture = Fixture::new(&[]);
    fixture.remove(".config/tracey/config.styx");
    let (code, out) = fixture.check(&[]);
    insta::assert_snapshot!(out);
    assert_eq!(code, 1);
}

// i[verify spec-check.config]
#[test]
fn config_without_specs_fails() {
    let fixture = Fixture::new(&[(".config/tracey/config.styx", "specs ()\n")]);
    let (code, out) = fixture.check(&[]);
    insta::assert_snapshot!(out);
    assert_eq!(code, 1);
}

// i[verify spec-check.spec-parse]
#[test]
fn unparsable_spec_fails() {
    let spec = SPEC.replace("> r[demo.beta]", "> r[demo.beta status=bogus]");
    let fixture = Fixture::new(&[("docs/spec/demo.md", &spec)]);
    let (code, out) = fixture.check(&[]);
    insta::assert_snapshot!(out);
    assert_eq!(code, 1);
}

// i[verify spec-check.spec-parse]
#[test]
fn unreadable_spec_fails() {
    let fixture = Fixture::new(&[]);
    fixture.write(
        "docs/spec/demo.md",
        b"# Demo\n\n> r[demo.alpha]\n> \xff\xfe not UTF-8\n",
    );
    let (code, out) = fixture.check(&[]);
    insta::assert_snapshot!(out);
    assert_eq!(code, 1);
}

/// Five rules covering every way tracey 1.3.0 counts a rule.
const COUNTS_SPEC: &str = "\
# Counts

> r[demo.alpha]
> Implemented and verified.

> r[demo.beta+2]
> Implemented at an older version, verified at the current one.

> r[demo.gamma]
> Implemented only.

> r[demo.delta+3]
> Verified at an older version only.

> r[demo.epsilon]
> Nothing at all.
";

const COUNTS_LIB: &str = "\
// r[impl demo.alpha]
pub fn alpha() {}

// r[impl demo.beta]
pub fn beta() {}

// r[impl demo.gamma]
pub fn gamma() {}

#[cfg(test)]
mod tests {
    // r[verify demo.alpha]
    #[test]
    fn alpha() {}

    // r[verify demo.beta+2]
    #[test]
    fn beta() {}

    // r[verify demo.delta+2]
    #[test]
    fn delta() {}
}
";

fn counts_fixture() -> Fixture {
    let fixture = Fixture::new(&[
        ("docs/spec/demo.md", COUNTS_SPEC),
        ("crates/demo/src/lib.rs", COUNTS_LIB),
    ]);
    fixture.remove("crates/demo/tests/beta.rs");
    fixture
}

// i[verify spec-check.counts]
#[test]
fn counts_follow_tracey() {
    // tracey 1.3.0: stale rules are not "implemented"; stale verify references still count as
    // "verified"; a rule is stale if any reference to it is.
    let fixture = counts_fixture();
    let (code, out) = fixture.check(&["--json"]);
    let json: serde_json::Value = serde_json::from_str(&out).expect("json output");
    let demo = &json["specs"][0];
    assert_eq!(demo["name"], "demo");
    assert_eq!(demo["total"], 5);
    assert_eq!(demo["implemented"], 2, "alpha and gamma; beta is stale");
    assert_eq!(demo["verified"], 3, "alpha, beta and (stale) delta");
    assert_eq!(demo["stale"], 2, "beta and delta");
    assert_eq!(code, 1);
}

// i[verify spec-check.output]
#[test]
fn json_output() {
    let lib = LIB.replace("// r[impl demo.beta]", "// r[impl demo.betta]");
    let fixture = Fixture::new(&[("crates/demo/src/lib.rs", &lib)]);
    let (code, out) = fixture.check(&["--json"]);
    let json: serde_json::Value = serde_json::from_str(&out).expect("json output");
    insta::assert_json_snapshot!(json);
    assert_eq!(code, 1);
}

// i[verify spec-check.output]
#[test]
fn markdown_output() {
    let lib = LIB.replace("// r[impl demo.beta]", "// r[impl demo.betta]");
    let fixture = Fixture::new(&[("crates/demo/src/lib.rs", &lib)]);
    let (code, out) = fixture.check(&["--markdown"]);
    insta::assert_snapshot!(out);
    assert_eq!(code, 1);
}

/// When the fixtures' results were "written": 2026-11-29 22:10:03 UTC; the tree is dated a minute
/// before.
const RESULTS_WRITTEN: u64 = 1_795_990_203;

fn write_results(fixture: &Fixture, cases: &[(&str, &str, &str)]) -> PathBuf {
    let path = fixture.path().join("junit.xml");
    std::fs::write(&path, junit(cases)).expect("write junit");
    fixture.date_all(RESULTS_WRITTEN - 60);
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

// i[verify spec-check.test-backed]
#[test]
fn test_backed_passes_when_every_rule_has_a_passing_test() {
    let fixture = Fixture::new(&[]);
    let results = write_results(
        &fixture,
        &[
            ("demo", "tests::alpha_holds", "passed"),
            ("demo::beta", "beta_holds", "passed"),
        ],
    );
    let (code, out) = fixture.check(&["--results", results.to_str().expect("utf-8")]);
    insta::assert_snapshot!(out);
    assert_eq!(code, 0);
}

// i[verify spec-check.test-backed]
#[test]
fn test_backed_fails_when_the_only_verifying_test_is_ignored() {
    let beta = BETA_TEST.replace("#[test]\n", "#[test]\n#[ignore]\n");
    let fixture = Fixture::new(&[("crates/demo/tests/beta.rs", &beta)]);
    // nextest leaves ignored tests out of its JUnit report.
    let results = write_results(&fixture, &[("demo", "tests::alpha_holds", "passed")]);
    let (code, out) = fixture.check(&["--results", results.to_str().expect("utf-8")]);
    insta::assert_snapshot!(out);
    assert!(out.contains("rule r[demo.beta] is not verified by a passing test"));
    assert_eq!(code, 1);
}

// i[verify spec-check.test-backed]
#[test]
fn test_backed_fails_on_failed_and_skipped_tests() {
    let fixture = Fixture::new(&[]);
    let results = write_results(
        &fixture,
        &[
            ("demo", "tests::alpha_holds", "failed"),
            ("demo::beta", "beta_holds", "passed"),
        ],
    );
    let ledger = fixture.path().join("skips.jsonl");
    std::fs::write(
        &ledger,
        "{\"test\":\"beta_holds\",\"binary\":\"beta\",\"service\":\"docker\",\"reason\":\"HOLDFAST_TEST_DOCKER_HOST is not set\"}\n",
    )
    .expect("write ledger");
    let (code, out) = fixture.check(&[
        "--results",
        results.to_str().expect("utf-8"),
        "--skips",
        ledger.to_str().expect("utf-8"),
    ]);
    insta::assert_snapshot!(out);
    assert_eq!(code, 1);
}

// i[verify spec-check.test-backed]
#[test]
fn test_backed_rejects_a_broken_results_file() {
    let fixture = Fixture::new(&[]);
    let results = fixture.path().join("junit.xml");
    std::fs::write(&results, "<testsuites><testsuite name=\"demo\"><testcase").expect("write");
    let (code, out) = fixture.check_all(&["--results", results.to_str().expect("utf-8")]);
    insta::assert_snapshot!(out);
    assert!(!out.contains("not-verified-by-test"), "{out}");
    assert_eq!(code, 2);
}

// i[verify spec-check.fatal]
// i[verify spec-check.exit-code+2]
#[test]
fn a_missing_results_file_is_fatal_and_alone() {
    let fixture = Fixture::new(&[]);
    let (code, out) = fixture.check_all(&["--results", "/nonexistent/junit.xml"]);
    insta::assert_snapshot!(out);
    assert_eq!(code, 2);
}

// i[verify spec-check.exit-code+2]
// i[verify xtask.root]
#[test]
fn a_missing_root_is_a_usage_error() {
    let fixture = Fixture::new(&[]);
    let missing = fixture.path().join("does-not-exist");
    let run = fixture::xtask("spec-check", &missing, &[]);
    insta::assert_snapshot!(
        format!("{}--- stderr\n{}", run.stdout, run.stderr).replace(
            &fixture
                .path()
                .canonicalize()
                .expect("canonical")
                .display()
                .to_string(),
            "[TMP]"
        )
    );
    assert_eq!(run.code, 2);
}

/// A copy of the fixture tree in a second temp dir, as a second checkout would be.
fn second_checkout(first: &Fixture, overrides: &[(&str, &str)]) -> Tree {
    let second = Tree::new(SPEC, &[], overrides);
    assert_ne!(first.path(), second.path());
    second
}

/// One binary (as with a shared `CARGO_TARGET_DIR`) run inside two checkouts without `--root`:
/// each run checks the checkout it is run in, and says which.
// i[verify xtask.root]
#[test]
fn a_second_checkout_sharing_the_binary_checks_itself() {
    let first = Fixture::new(&[]);
    let lib = LIB.replace("// r[impl demo.beta]\n", "");
    let second = second_checkout(&first, &[("crates/demo/src/lib.rs", &lib)]);

    let run = fixture::xtask_in(
        &first.path().join("docs/spec"),
        first.path(),
        "spec-check",
        &[],
    );
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert!(run.stdout.starts_with("root: [ROOT]\n"), "{}", run.stdout);

    let run = fixture::xtask_in(
        &second.path().join("crates"),
        second.path(),
        "spec-check",
        &[],
    );
    insta::assert_snapshot!(run.stdout);
    assert!(run.stdout.starts_with("root: [ROOT]\n"), "{}", run.stdout);
    assert_eq!(run.code, 1);
}

// i[verify xtask.root]
#[test]
fn outside_any_workspace_is_a_usage_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    let run = fixture::xtask_in(dir.path(), dir.path(), "spec-check", &[]);
    assert_eq!(run.code, 2);
    assert!(run.stdout.is_empty(), "{}", run.stdout);
    assert!(run.stderr.contains("no cargo workspace"), "{}", run.stderr);
}

// i[verify spec-check.merged-rule]
#[test]
fn a_rule_without_a_blank_line_before_it_fails() {
    let spec = format!("{SPEC}> r[demo.gamma]\n> Gamma must hold.\n");
    let lib = format!("{LIB}\n// r[impl demo.gamma]\npub fn gamma() {{}}\n");
    let fixture = Fixture::new(&[
        ("docs/spec/demo.md", &spec),
        ("crates/demo/src/lib.rs", &lib),
    ]);
    let (code, out) = fixture.check(&[]);
    insta::assert_snapshot!(out);
    assert_eq!(code, 1);
}

// i[verify spec-check.rule-id]
#[test]
fn an_uppercase_rule_id_fails() {
    let spec = SPEC.replace("> r[demo.beta]", "> r[Demo.Beta]");
    let lib = LIB.replace("// r[impl demo.beta]", "// r[impl Demo.Beta]");
    let beta = BETA_TEST.replace("// r[verify demo.beta]", "// r[verify Demo.Beta]");
    let fixture = Fixture::new(&[
        ("docs/spec/demo.md", &spec),
        ("crates/demo/src/lib.rs", &lib),
        ("crates/demo/tests/beta.rs", &beta),
    ]);
    let (code, out) = fixture.check(&[]);
    insta::assert_snapshot!(out);
    assert_eq!(code, 1);
}

// i[verify spec-check.verify-on-test+2]
#[test]
fn verify_before_a_helper_in_test_code_fails() {
    let lib = LIB.replace(
        "    // r[verify demo.alpha]\n    #[test]\n    fn alpha_holds() {",
        "    // r[verify demo.alpha]\n    fn helper() -> u32 {\n        1\n    }\n\n    #[test]\n    fn alpha_holds() {",
    );
    assert_ne!(lib, LIB);
    let fixture = Fixture::new(&[("crates/demo/src/lib.rs", &lib)]);
    let (code, out) = fixture.check(&[]);
    insta::assert_snapshot!(out);
    assert_eq!(code, 1);
}

const FINDINGS: &str = "\
# Findings

## H1: Alpha failed

Alpha failed silently.

**Closed by:** `r[demo.alpha]`, `r[demo.beta]`

## H2: Gamma was never built

**Closed by:** `r[gamma.planned]`
";

// i[verify spec-check.findings+2]
#[test]
fn findings_with_planned_rules_pass_and_are_listed() {
    let fixture = Fixture::new(&[("docs/audit/findings.md", FINDINGS)]);
    let (code, out) = fixture.check(&[]);
    insta::assert_snapshot!(out);
    assert_eq!(code, 0);
}

// i[verify spec-check.findings+2]
#[test]
fn malformed_findings_fail_the_gate() {
    let findings = FINDINGS.replace("**Closed by:** `r[gamma.planned]`", "Nothing closes it.");
    let fixture = Fixture::new(&[("docs/audit/findings.md", &findings)]);
    let (code, out) = fixture.check(&[]);
    insta::assert_snapshot!(out);
    assert_eq!(code, 1);
}

// i[verify spec-check.findings+2]
#[test]
fn findings_naming_stale_or_mistyped_rules_fail_the_gate() {
    let findings = FINDINGS
        .replace(
            "`r[demo.beta]`",
            "`r[demo.beta]`, `i[demo.alpha]`, `r[demo.alfa]`, `r[demo.gamma.missing]`",
        )
        .replace("`r[demo.alpha]`,", "`r[demo.alpha+2]`,");
    let fixture = Fixture::new(&[("docs/audit/findings.md", &findings)]);
    let (code, out) = fixture.check(&[]);
    insta::assert_snapshot!(out);
    assert_eq!(code, 1);
}

// i[verify spec-check.freshness]
#[test]
fn results_older_than_the_tests_they_judge_are_flagged() {
    let fixture = Fixture::new(&[]);
    let results = write_results(
        &fixture,
        &[
            ("demo", "tests::alpha_holds", "passed"),
            ("demo::beta", "beta_holds", "passed"),
        ],
    );
    // Beta's test is edited a minute after the run.
    date(
        &fixture.path().join("crates/demo/tests/beta.rs"),
        RESULTS_WRITTEN + 60,
    );
    let (code, out) = fixture.check(&["--results", results.to_str().expect("utf-8")]);
    insta::assert_snapshot!(out);
    assert_eq!(code, 1);
}

/// A second crate whose rule only its own tests verify.
const OTHER_SPEC_RULE: &str = "\n> r[demo.gamma]\n> Gamma must hold.\n";
const OTHER_MANIFEST: &str =
    "[package]\nname = \"other\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n";
const OTHER_LIB: &str = "\
// r[impl demo.gamma]
pub fn gamma() {}

#[cfg(test)]
mod tests {
    // r[verify demo.gamma]
    #[test]
    fn gamma_holds() {}
}
";

// i[verify spec-check.test-backed]
// i[verify spec-check.mode]
#[test]
fn a_one_crate_run_judges_only_that_crates_rules() {
    let spec = format!("{SPEC}{OTHER_SPEC_RULE}");
    let fixture = Fixture::new(&[
        ("docs/spec/demo.md", &spec),
        ("crates/other/Cargo.toml", OTHER_MANIFEST),
        ("crates/other/src/lib.rs", OTHER_LIB),
    ]);
    // `cargo xtask test -- -p demo` ran demo's tests only.
    let results = write_results(
        &fixture,
        &[
            ("demo", "tests::alpha_holds", "passed"),
            ("demo::beta", "beta_holds", "passed"),
        ],
    );
    let results = results.to_str().expect("utf-8");
    let (code, out) = fixture.check(&["--results", results, "--crate", "demo"]);
    insta::assert_snapshot!(out);
    assert_eq!(code, 0);
    // The same results judged as a whole-workspace run: gamma's test did not run.
    let (code, out) = fixture.check(&["--results", results]);
    assert!(
        out.contains("rule r[demo.gamma] is not verified by a passing test"),
        "{out}"
    );
    assert_eq!(code, 1);
}

/// An ignored test must not borrow the result of a passing test of the same name elsewhere in
/// its package: its binary is known, so only that binary's result counts.
// i[verify spec-check.test-identity]
#[test]
fn an_ignored_test_cannot_borrow_a_same_named_passing_test() {
    let beta = "// r[verify demo.beta]\n#[test]\n#[ignore]\nfn alpha_holds() {}\n";
    let fixture = Fixture::new(&[("crates/demo/tests/beta.rs", beta)]);
    let results = write_results(&fixture, &[("demo", "tests::alpha_holds", "passed")]);
    let (code, out) = fixture.check(&["--results", results.to_str().expect("utf-8")]);
    insta::assert_snapshot!(out);
    assert!(
        out.contains("`demo::beta alpha_holds` (crates/demo/tests/beta.rs:1) ignored or not run"),
        "{out}"
    );
    assert_eq!(code, 1);
}

/// The whole chain on a real run: nextest runs the fixture crate (whose only `demo.beta` test is
/// `#[ignore]`d) and writes JUnit; the test-backed check must fail naming `demo.beta` and nothing
/// else.
// i[verify spec-check.test-backed]
#[test]
fn real_nextest_run_with_an_ignored_test_fails_the_check() {
    let beta = BETA_TEST.replace("#[test]\n", "#[test]\n#[ignore]\n");
    let fixture = Fixture::new(&[
        ("crates/demo/tests/beta.rs", &beta),
        (
            "crates/demo/.config/nextest.toml",
            "[profile.ci]\nfail-fast = false\n\n[profile.ci.junit]\npath = \"junit.xml\"\n",
        ),
    ]);
    let crate_dir = fixture.path().join("crates/demo");
    let run = Command::new(env!("CARGO"))
        .args(["nextest", "run", "--profile", "ci", "--offline"])
        .current_dir(&crate_dir)
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("RUSTFLAGS")
        .output()
        .expect("run cargo nextest (cargo-nextest must be installed: cargo install cargo-nextest)");
    assert!(
        run.status.success(),
        "nextest run failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    // Keep the report, drop the build tree so the gate does not walk it.
    let results = fixture.path().join("junit.xml");
    std::fs::copy(crate_dir.join("target/nextest/ci/junit.xml"), &results).expect("junit.xml");
    std::fs::remove_dir_all(crate_dir.join("target")).expect("remove target");
    let (code, out) = fixture.check(&["--results", results.to_str().expect("utf-8")]);
    assert_eq!(code, 1, "{out}");
    let problems: Vec<&str> = out.lines().filter(|l| l.starts_with("  ")).collect();
    assert_eq!(problems.len(), 1, "{out}");
    assert!(
        problems[0].contains("[not-verified-by-test] rule r[demo.beta] is not verified")
            && problems[0].contains(
                "`demo::beta beta_holds` (crates/demo/tests/beta.rs:1) ignored or not run"
            ),
        "{out}"
    );
}

/// The run's producer writes the rules' fingerprints beside its results (as `cargo xtask test`
/// does, through the runner's own function); a later reading of the same results calls a rule
/// whose code changed since stale, not tested, even when the file's time does not show it (a
/// checkout, a copy). A reader never creates or replaces the record: deleting or corrupting it
/// notes it and judges by file times only, and never turns the stale pass into a pass for good.
// i[verify spec-check.test-backed.fingerprint+2]
#[test]
fn a_pass_is_stale_once_its_rules_code_changed_since_the_run() {
    let fixture = Fixture::new(&[]);
    let cases = [
        ("demo", "tests::alpha_holds", "passed"),
        ("demo::beta", "beta_holds", "passed"),
    ];
    let results = write_results(&fixture, &cases);
    let produce = |fixture: &Fixture| {
        let (_, tree) = spec_engine::spec_check::read(&spec_engine::Disk::new(fixture.path()))
            .expect("the tree reads");
        holdfast_test_runner::evidence::write_record(&tree, &results).expect("recorded")
    };
    let args = ["--json", "--results", results.to_str().expect("utf-8")];
    let judged = |fixture: &Fixture| {
        let (code, out) = fixture.check(&args);
        let json: serde_json::Value = serde_json::from_str(&out).expect("json output");
        let problems: Vec<(String, String)> = json["problems"]
            .as_array()
            .expect("problems")
            .iter()
            .map(|p| {
                let text = |key: &str| p[key].as_str().unwrap_or_default().to_owned();
                (text("kind"), text("message"))
            })
            .collect();
        (code, problems, json["specs"][0]["tested"].clone())
    };
    let record = produce(&fixture);
    assert_eq!(record, fixture.path().join("junit.xml.spec-evidence.json"));
    let (code, problems, tested) = judged(&fixture);
    assert_eq!((code, problems, tested), (0, vec![], serde_json::json!(2)));
    let recorded = std::fs::read_to_string(&record).expect("recorded beside the results");
    assert!(recorded.contains("\"r[demo.beta]\": \""), "{recorded}");

    // beta's body changes; the file keeps a time before the run.
    let lib = LIB.replace("    2\n", "    3\n");
    fixture.write("crates/demo/src/lib.rs", lib.as_bytes());
    date(
        &fixture.path().join("crates/demo/src/lib.rs"),
        RESULTS_WRITTEN - 60,
    );
    let (code, problems, tested) = judged(&fixture);
    assert_eq!(
        problems,
        [(
            "evidence-stale".to_owned(),
            "rule r[demo.beta] has stale test evidence: impl changed since the tests ran \
             (results written 2026-11-29 22:10:03 UTC): `demo::beta beta_holds` \
             (crates/demo/tests/beta.rs:1) passed on the older tree; rerun `cargo xtask test -- \
             -p demo`"
                .to_owned()
        )]
    );
    assert_eq!((code, tested), (1, serde_json::json!(1)));
    assert_eq!(
        std::fs::read_to_string(&record).expect("kept"),
        recorded,
        "a later reading keeps the run's record"
    );

    // The reviewer's reproduction: the record deleted, then corrupted. A reader notes it, judges
    // by file times only (the edit's time is before the run: no stale), and writes nothing.
    let notes = |fixture: &Fixture| {
        let (_, out) = fixture.check(&args[1..]);
        out.lines()
            .filter(|line| line.contains("evidence record"))
            .map(|line| line.trim().to_owned())
            .collect::<Vec<_>>()
    };
    std::fs::remove_file(&record).expect("deleted");
    assert_eq!(
        notes(&fixture),
        ["note: no evidence record for these results: passes judged by file times only"]
    );
    assert!(!record.exists(), "a reader never creates the record");
    std::fs::write(&record, "{").expect("corrupted");
    let noted = notes(&fixture);
    assert!(
        noted.len() == 1 && noted[0].contains("is malformed"),
        "{noted:?}"
    );
    assert_eq!(std::fs::read_to_string(&record).expect("kept"), "{");
    // The run's record put back: still stale.
    std::fs::write(&record, &recorded).expect("restored");
    assert_eq!(
        judged(&fixture).0,
        1,
        "the deletion did not make the pass fresh"
    );

    // A rerun's results are another run: until its producer records it, the old record is
    // named as of other results and kept; recorded, nothing is stale.
    std::fs::write(&results, format!("{}\n", junit(&cases))).expect("rerun");
    let noted = notes(&fixture);
    assert!(
        noted.len() == 1 && noted[0].contains("is of other results"),
        "{noted:?}"
    );
    assert_eq!(std::fs::read_to_string(&record).expect("kept"), recorded);
    produce(&fixture);
    let (code, problems, _) = judged(&fixture);
    assert_eq!((code, problems), (0, vec![]));
    assert_ne!(
        std::fs::read_to_string(&record).expect("rewritten"),
        recorded
    );
}
