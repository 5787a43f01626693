//! `cargo xtask trace` against small fixture trees built in temp dirs, and once against this
//! repository's own findings. Fixtures are strings here, never checked-in files: the real gate
//! scans this repository, and tracey's lexer reads comments only, so annotation-shaped text inside
//! these literals is inert.

mod fixture;

use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use fixture::{Tree, junit};

const SPEC: &str = "\
# Demo spec

> r[demo.alpha]
> Alpha must hold,
> in every case.

> r[demo.beta] Beta must hold.
";

const FINDINGS: &str = "\
# Audit findings

Prose before the findings, with a fenced example:

```
## H9: not a finding
```

## H1: Alpha and beta failed silently

The old code let alpha and beta fail without a word, and a long description wraps over several
lines in the file.

**Closed by:** `r[demo.alpha]`, `r[demo.beta]`

## H2: Gamma was never built

Gamma's crate does not exist.

**Closed by:** `r[demo.alpha]`, `r[demo.gamma]`, `r[demo.alfa]`

**Still open:** the gamma crate is not written yet.
";

/// When the fixture's results were \"written\": 2026-11-29 22:10:03 UTC.
const RESULTS_WRITTEN: u64 = 1_795_990_203;

struct Fixture(Tree);

impl Fixture {
    fn new(overrides: &[(&str, &str)]) -> Self {
        Self(Tree::new(
            SPEC,
            &[("docs/audit/findings.md", FINDINGS)],
            overrides,
        ))
    }

    fn write(&self, path: &str, text: &str) -> PathBuf {
        self.0.write(path, text.as_bytes())
    }

    /// Writes nextest JUnit at the default results path, dated [`RESULTS_WRITTEN`].
    fn results(&self, cases: &[(&str, &str, &str)]) {
        let path = self.write("target/nextest/ci/junit.xml", &junit(cases));
        // The tree as it was when the run started.
        self.0.date_all(RESULTS_WRITTEN - 60);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .expect("open results")
            .set_modified(UNIX_EPOCH + Duration::from_secs(RESULTS_WRITTEN))
            .expect("date results");
    }

    fn path(&self) -> &Path {
        self.0.path()
    }

    /// Runs `xtask trace --root <fixture> ARGS`; returns the exit code and the output (stdout,
    /// then stderr) with the temp dir replaced by `[ROOT]`.
    fn trace(&self, args: &[&str]) -> (i32, String) {
        run_trace(self.path(), args)
    }
}

fn run_trace(root: &Path, args: &[&str]) -> (i32, String) {
    let run = fixture::xtask("trace", root, args);
    (
        run.code,
        format!("{}--- stderr\n{}", run.stdout, run.stderr),
    )
}

// i[verify trace.walk]
// i[verify trace.verdict]
// i[verify trace.exit-code]
// i[verify trace.output]
#[test]
fn closed_finding_without_results() {
    let fixture = Fixture::new(&[]);
    let (code, out) = fixture.trace(&["H1"]);
    insta::assert_snapshot!(out);
    assert_eq!(code, 0);
}

// i[verify trace.results]
// i[verify trace.verdict]
#[test]
fn closed_finding_with_passing_results() {
    let fixture = Fixture::new(&[]);
    fixture.results(&[
        ("demo", "tests::alpha_holds", "passed"),
        ("demo::beta", "beta_holds", "passed"),
    ]);
    let (code, out) = fixture.trace(&["h1"]);
    insta::assert_snapshot!(out);
    assert_eq!(code, 0);
}

// i[verify trace.walk]
// i[verify trace.verdict]
// i[verify trace.exit-code]
#[test]
fn open_finding_names_a_rule_not_in_the_spec() {
    let fixture = Fixture::new(&[]);
    let (code, out) = fixture.trace(&["H2"]);
    insta::assert_snapshot!(out);
    assert_eq!(code, 1);
}

// i[verify trace.results]
// i[verify trace.verdict]
// i[verify trace.exit-code]
#[test]
fn regressed_finding_has_a_failed_test() {
    let fixture = Fixture::new(&[]);
    let results = fixture.write(
        "elsewhere/run.xml",
        &junit(&[
            ("demo", "tests::alpha_holds", "passed"),
            ("demo::beta", "beta_holds", "failed"),
        ]),
    );
    let results = results.display().to_string();
    let (code, out) = fixture.trace(&["H1", "--results", &results]);
    assert!(
        out.contains("test results: elsewhere/run.xml (written "),
        "{out}"
    );
    let out = out
        .lines()
        .map(|line| match line.split_once(" (written ") {
            Some((head, _)) => format!("{head} (written [TIME])"),
            None => line.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    insta::assert_snapshot!(out);
    assert_eq!(code, 1);
}

// i[verify trace.walk]
// i[verify trace.verdict]
#[test]
fn stale_annotations_and_renamed_rules_do_not_count() {
    let spec = SPEC.replace("> r[demo.beta]", "> r[demo.beta+2]");
    let fixture = Fixture::new(&[("docs/spec/demo.md", &spec)]);
    let (code, renamed) = fixture.trace(&["H1"]);
    assert_eq!(code, 1);
    // The finding brought up to date, the code not: its annotations are stale and do not count.
    let findings = FINDINGS.replace("`r[demo.beta]`", "`r[demo.beta+2]`");
    fixture.write("docs/audit/findings.md", &findings);
    let (code, stale) = fixture.trace(&["H1"]);
    assert_eq!(code, 1);
    // A finding naming a rule under another prefix than the spec's is open, naming the spec's.
    fixture.write(
        "docs/audit/findings.md",
        &findings.replace("`r[demo.alpha]`", "`i[demo.alpha]`"),
    );
    let (code, prefix) = fixture.trace(&["H1"]);
    assert_eq!(code, 1);
    insta::assert_snapshot!(format!("{renamed}{stale}{prefix}"));
}

// i[verify trace.unknown]
#[test]
fn unknown_finding_suggests_close_ids() {
    let fixture = Fixture::new(&[]);
    let (code, typo) = fixture.trace(&["H11"]);
    assert_eq!(code, 2);
    let (code, by_title) = fixture.trace(&["gamma"]);
    assert_eq!(code, 2);
    let (code, nothing) = fixture.trace(&["H7"]);
    assert_eq!(code, 2);
    insta::assert_snapshot!(format!("{typo}{by_title}{nothing}"));
    // The same number under another letter.
    let (code, same_number) = fixture.trace(&["G2"]);
    assert_eq!(code, 2);
    assert!(
        same_number.contains("no finding `G2` in docs/audit/findings.md (did you mean H2 ("),
        "{same_number}"
    );
}

// i[verify trace.exit-code]
// i[verify trace.output]
#[test]
fn all_findings_end_with_a_summary() {
    let fixture = Fixture::new(&[]);
    let (code, out) = fixture.trace(&["--all"]);
    insta::assert_snapshot!(out);
    assert_eq!(code, 0, "open findings alone do not fail --all");

    fixture.results(&[
        ("demo", "tests::alpha_holds", "failed"),
        ("demo::beta", "beta_holds", "passed"),
    ]);
    let (code, out) = fixture.trace(&["--all"]);
    assert!(
        out.contains("2 findings: 0 closed, 0 open, 2 regressed"),
        "{out}"
    );
    assert_eq!(code, 1, "a regressed finding fails --all");
}

// i[verify trace.findings-file]
// i[verify trace.exit-code]
#[test]
fn malformed_findings_file_is_a_usage_error() {
    let findings = FINDINGS.replace("**Closed by:** `r[demo.alpha]`, `r[demo.beta]`", "Nothing.");
    let findings = findings.replace("## H2: Gamma", "## H2 Gamma");
    let fixture = Fixture::new(&[("docs/audit/findings.md", &findings)]);
    let (code, out) = fixture.trace(&["--all"]);
    insta::assert_snapshot!(out);
    assert_eq!(code, 2);
}

// i[verify trace.results]
#[test]
fn broken_results_file_is_a_usage_error() {
    let fixture = Fixture::new(&[]);
    fixture.write("target/nextest/ci/junit.xml", "<html></html>");
    let (code, out) = fixture.trace(&["H1"]);
    assert_eq!(code, 2);
    assert!(out.contains("cannot use the test results"), "{out}");
    let (code, _) = fixture.trace(&["H1", "--no-results"]);
    assert_eq!(code, 0, "--no-results ignores the default results file");
}

/// This repository's own findings parse, and no rule they name that the spec defines is named at a
/// stale version or with the wrong prefix.
// i[verify trace.findings-file]
#[test]
fn the_repository_findings_resolve() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root");
    let (code, out) = run_trace(repo, &["--all", "--no-results"]);
    assert_eq!(code, 0, "{out}");
    let findings = std::fs::read_to_string(repo.join("docs/audit/findings.md")).expect("findings");
    let ids: Vec<&str> = findings
        .lines()
        .filter_map(|line| line.strip_prefix("## H"))
        .filter_map(|rest| rest.split_once(':').map(|(number, _)| number))
        .collect();
    assert!(ids.len() >= 8, "expected the audit's findings, got {ids:?}");
    for id in ids {
        assert!(
            out.contains(&format!("\nH{id}: ")),
            "H{id} not traced:\n{out}"
        );
    }
    for problem in [": stale —", ": wrong prefix —"] {
        assert!(!out.contains(problem), "`{problem}` in the trace:\n{out}");
    }
    assert!(out.contains("H3: Image pull retries"), "{out}");
}

/// A broken config or spec is shown, never traced as an empty tree (issue 7: a misspelt
/// `test_include` listed every finding as open and exited 0).
// i[verify trace.broken-spec]
// i[verify trace.exit-code]
#[test]
fn a_broken_config_or_spec_is_shown_instead_of_a_verdict() {
    let config = fixture::CONFIG.replace("test_include (", "test_includes (");
    let fixture = Fixture::new(&[(".config/tracey/config.styx", &config)]);
    let (code, misspelt) = fixture.trace(&["--all"]);
    assert_eq!(code, 2, "{misspelt}");
    // A rule defined twice: `trace H1` said "closed" with exit 0.
    let spec = format!("{SPEC}\n> r[demo.beta]\n> Beta again.\n");
    let fixture = Fixture::new(&[("docs/spec/demo.md", &spec)]);
    let (code, duplicated) = fixture.trace(&["H1"]);
    assert_eq!(code, 2, "{duplicated}");
    insta::assert_snapshot!(format!("{misspelt}{duplicated}"));
}

// i[verify trace.exit-code]
// i[verify xtask.root]
#[test]
fn a_missing_root_is_a_usage_error() {
    let fixture = Fixture::new(&[]);
    let (code, out) = run_trace(&fixture.path().join("DOES-NOT-EXIST"), &["H1"]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("error: trace: --root"), "{out}");
}

/// `cargo xtask trace --all | head`: the reader goes away; the trace ends quietly.
// i[verify xtask.broken-pipe]
#[test]
fn a_closed_pipe_ends_the_trace_quietly() {
    let fixture = Fixture::new(&[]);
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["trace", "--all", "--root"])
        .arg(fixture.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run xtask");
    // Close the read end before the trace writes anything.
    drop(child.stdout.take());
    let output = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(stderr.is_empty(), "{stderr}");
    assert_eq!(output.status.code(), Some(0));
}

// i[verify trace.freshness]
#[test]
fn results_older_than_the_tests_are_flagged() {
    let fixture = Fixture::new(&[]);
    fixture.results(&[
        ("demo", "tests::alpha_holds", "passed"),
        ("demo::beta", "beta_holds", "passed"),
    ]);
    let beta = fixture.path().join("crates/demo/tests/beta.rs");
    std::fs::File::options()
        .write(true)
        .open(&beta)
        .expect("open")
        .set_modified(UNIX_EPOCH + Duration::from_secs(RESULTS_WRITTEN + 60))
        .expect("date");
    let (code, out) = fixture.trace(&["H1"]);
    insta::assert_snapshot!(out);
    assert_eq!(code, 0);
}

/// A reading of results without their evidence record says so once, on stderr, whether it
/// traces a finding or a rule; with the record its run wrote, it says nothing of it.
// i[verify spec-check.test-backed.fingerprint+2]
#[test]
fn a_missing_evidence_record_is_noted_once() {
    let fixture = Fixture::new(&[]);
    fixture.results(&[
        ("demo", "tests::alpha_holds", "passed"),
        ("demo::beta", "beta_holds", "passed"),
    ]);
    let note = "note: no evidence record for these results: passes judged by file times only";
    for args in [&["H1"][..], &["demo.alpha"][..]] {
        let run = fixture::xtask("trace", fixture.path(), args);
        assert_eq!(run.code, 0, "{args:?}: {}{}", run.stdout, run.stderr);
        assert_eq!(
            run.stderr.matches(note).count(),
            1,
            "{args:?}: {}",
            run.stderr
        );
    }
    let (_, tree) = spec_engine::spec_check::read(&spec_engine::Disk::new(fixture.path()))
        .expect("the tree reads");
    holdfast_test_runner::evidence::write_record(
        &tree,
        &fixture.path().join("target/nextest/ci/junit.xml"),
    )
    .expect("recorded");
    for args in [&["H1"][..], &["demo.alpha"][..]] {
        let run = fixture::xtask("trace", fixture.path(), args);
        assert_eq!(run.code, 0, "{args:?}: {}{}", run.stdout, run.stderr);
        assert!(
            !run.stderr.contains("evidence record"),
            "{args:?}: {}",
            run.stderr
        );
    }
}

// i[verify trace.rule]
#[test]
fn a_rule_is_traced_to_its_items_tests_results_and_findings() {
    let fixture = Fixture::new(&[]);
    fixture.results(&[
        ("demo", "tests::alpha_holds", "passed"),
        ("demo::beta", "beta_holds", "failed"),
    ]);
    let (code, alpha) = fixture.trace(&["demo.alpha"]);
    assert_eq!(code, 0, "{alpha}");
    let (code, beta) = fixture.trace(&["r[demo.beta]"]);
    assert_eq!(code, 1, "{beta}");
    let (code, unknown) = fixture.trace(&["demo.alpah"]);
    assert_eq!(code, 2, "{unknown}");
    insta::assert_snapshot!(format!("{alpha}{beta}{unknown}"));
}

// i[verify trace.rule-output]
#[test]
fn a_rule_trace_as_json_and_markdown() {
    let fixture = Fixture::new(&[]);
    fixture.results(&[
        ("demo", "tests::alpha_holds", "passed"),
        ("demo::beta", "beta_holds", "passed"),
    ]);
    let run = fixture::xtask("trace", fixture.path(), &["demo.alpha", "--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let json: serde_json::Value = serde_json::from_str(&run.stdout).expect("one JSON object");
    insta::assert_json_snapshot!(json);
    let (code, markdown) = fixture.trace(&["demo.beta", "--markdown"]);
    assert_eq!(code, 0, "{markdown}");
    insta::assert_snapshot!(markdown);
    let (code, finding) = fixture.trace(&["H1", "--json"]);
    assert_eq!(code, 2, "{finding}");
    let (code, finding) = fixture.trace(&["H1", "--markdown"]);
    assert_eq!(code, 2, "{finding}");
}

/// A proof record as `cargo xtask prove` writes it under `target/prove/`.
fn proof_record(rule: &str, caught: u32, survivors: &[&str]) -> String {
    serde_json::json!({
        "rule": rule,
        "caught": caught,
        "missed": survivors.len(),
        "unviable": 0,
        "timeout": 0,
        "survivors": survivors,
        "commit": "abc1234",
        "date": "2026-12-02 10:00:00 UTC",
    })
    .to_string()
}

// i[verify trace.rule]
// i[verify prove.shown+2]
#[test]
fn a_rule_trace_shows_its_last_proof_and_whether_mutants_survived() {
    let fixture = Fixture::new(&[]);
    let survivor = "crates/demo/src/lib.rs:2:5: replace alpha -> bool with true";
    fixture.write(
        "target/prove/demo.alpha.json",
        &proof_record("r[demo.alpha]", 3, &[survivor]),
    );
    fixture.write(
        "target/prove/demo.beta.json",
        &proof_record("r[demo.beta]", 2, &[]),
    );
    for (rule, survived) in [("demo.alpha", true), ("demo.beta", false)] {
        let run = fixture::xtask("trace", fixture.path(), &[rule, "--json"]);
        let json: serde_json::Value = serde_json::from_str(&run.stdout).expect("one JSON object");
        assert_eq!(json["survivors"], survived, "{rule}: {json}");
        let proof = json["proof"].as_str().unwrap_or_default();
        assert!(proof.contains("abc1234"), "{rule}: {proof}");
    }
    let (_, text) = fixture.trace(&["demo.alpha"]);
    assert!(text.contains(survivor), "{text}");
    // A finding's id is no rule id: it is traced as a finding.
    let (code, finding) = fixture.trace(&["H1"]);
    assert_eq!(code, 0, "{finding}");
    assert!(finding.contains("verdict: closed"), "{finding}");
}

/// The findings and the default results are read where the workspace's `Cargo.toml` says
/// (`[workspace.metadata.spec-engine]`); a table the trace cannot use is a usage error.
// i[verify xtask.paths]
#[test]
fn the_findings_and_results_are_read_where_the_workspace_says() {
    let manifest = format!(
        "{}\n[workspace.metadata.spec-engine]\nfindings = \"audit/found.md\"\n\
         results = \"target/nextest/default/junit.xml\"\n",
        fixture::WORKSPACE_MANIFEST
    );
    let fixture = Fixture::new(&[("Cargo.toml", &manifest), ("audit/found.md", FINDINGS)]);
    fixture.0.remove("docs/audit/findings.md");
    let results = fixture.write(
        "target/nextest/default/junit.xml",
        &junit(&[
            ("demo", "tests::alpha_holds", "passed"),
            ("demo::beta", "beta_holds", "failed"),
        ]),
    );
    fixture.0.date_all(RESULTS_WRITTEN - 60);
    std::fs::File::options()
        .write(true)
        .open(&results)
        .expect("open results")
        .set_modified(UNIX_EPOCH + Duration::from_secs(RESULTS_WRITTEN))
        .expect("date results");
    let (code, out) = fixture.trace(&["H1"]);
    assert!(out.contains("\n  audit/found.md:9\n"), "{out}");
    assert!(
        out.contains("test results: target/nextest/default/junit.xml (written"),
        "{out}"
    );
    assert!(
        out.contains("verify  crates/demo/tests/beta.rs:1  demo::beta beta_holds  failed"),
        "{out}"
    );
    assert_eq!(code, 1, "{out}");
    let (code, out) = fixture.trace(&["H7"]);
    assert!(out.contains("no finding `H7` in audit/found.md"), "{out}");
    assert_eq!(code, 2);

    let manifest = format!(
        "{}\n[workspace.metadata.spec-engine]\nfindings = \"\"\n",
        fixture::WORKSPACE_MANIFEST
    );
    fixture.write("Cargo.toml", &manifest);
    let (code, out) = fixture.trace(&["H1"]);
    assert!(
        out.contains(
            "error: Cargo.toml: [workspace.metadata.spec-engine]: `findings = \"\"` must be a \
             non-empty path relative to the root"
        ),
        "{out}"
    );
    assert_eq!(code, 2);
}

/// A `verify` heading a test file is traced to that file's tests, and judged by them.
// i[verify spec-check.placement.file-head]
#[test]
fn a_verify_heading_a_test_file_is_traced_to_its_tests() {
    let beta =
        "//! Golden.\n// r[verify demo.beta]\n\nuse demo::beta;\n\n#[test]\nfn golden() {}\n";
    let fixture = Fixture::new(&[("crates/demo/tests/beta.rs", beta)]);
    let (code, out) = fixture.trace(&["demo.beta", "--no-results"]);
    assert!(
        out.contains("verify  crates/demo/tests/beta.rs:2  demo::beta *\n"),
        "{out}"
    );
    assert_eq!(code, 0, "{out}");
    fixture.results(&[
        ("demo", "tests::alpha_holds", "passed"),
        ("demo::beta", "golden", "failed"),
    ]);
    let (code, out) = fixture.trace(&["demo.beta"]);
    assert!(
        out.contains("verify  crates/demo/tests/beta.rs:2  demo::beta *  failed"),
        "{out}"
    );
    assert_eq!(code, 1, "{out}");
}
