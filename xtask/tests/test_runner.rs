//! The test runner's gate (holdfast-test-runner, in its own process) beside `cargo xtask
//! spec-check --results --skips [--crate]` on the same fixture tree: the same report, the same
//! verdict. Fixtures are strings here, never checked-in files (see `fixture`).

mod fixture;

use std::path::Path;

use fixture::{Tree, junit};

const SPEC: &str = "\
# Demo spec

> r[demo.alpha]
> Alpha must hold.

> r[demo.beta]
> Beta must hold.
";

/// A run: its test cases (suite, name, outcome), its skip ledger, the packages it named.
type Case<'a> = (
    &'a [(&'a str, &'a str, &'a str)],
    Option<&'a str>,
    &'a [&'a str],
);

/// Dates the tree a minute before its report, as a run leaves them.
fn dated(tree: &Tree, report: &Path) {
    const WRITTEN: u64 = 1_795_990_203;
    tree.date_all(WRITTEN - 60);
    std::fs::File::options()
        .write(true)
        .open(report)
        .expect("open")
        .set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(WRITTEN))
        .expect("date");
}

// i[verify harness.results+3]
#[test]
fn the_runner_s_gate_reports_and_judges_as_spec_check_with_the_run_s_results() {
    let skip = "{\"test\":\"beta_holds\",\"binary\":\"beta\",\"service\":\"docker\",\"reason\":\"not set\"}\n";
    let cases: [Case; 5] = [
        (
            &[
                ("demo", "tests::alpha_holds", "passed"),
                ("demo::beta", "beta_holds", "passed"),
            ],
            None,
            &[],
        ),
        (
            &[
                ("demo", "tests::alpha_holds", "passed"),
                ("demo::beta", "beta_holds", "passed"),
            ],
            None,
            &[],
        ),
        (
            &[
                ("demo", "tests::alpha_holds", "failed"),
                ("demo::beta", "beta_holds", "passed"),
            ],
            None,
            &[],
        ),
        (
            &[
                ("demo", "tests::alpha_holds", "passed"),
                ("demo::beta", "beta_holds", "passed"),
            ],
            Some(skip),
            &[],
        ),
        (&[("demo", "tests::alpha_holds", "passed")], None, &["demo"]),
    ];
    // The waivers and the ratchet join the gate's problems in both: an expired waiver of no rule.
    let waivers = "[[waiver]]\nrule = \"r[demo.gone]\"\nwaives = [\"proven\"]\nwhy = \"gone\"\nuntil = 2001-01-01\n";
    // A baseline claiming a proof the fixture lacks: a ratchet problem, ordered among the rest.
    let baseline = "[demo]\nrules = 2\nproven = [\"r[demo.alpha]\"]\n";
    let mut verdicts = Vec::new();
    for (at, (results, ledger_text, crates)) in cases.into_iter().enumerate() {
        let extra: &[(&str, &str)] = if at == 0 {
            &[
                ("docs/audit/waivers.toml", waivers),
                ("docs/audit/coverage-baseline.toml", baseline),
            ]
        } else {
            &[]
        };
        let tree = Tree::new(SPEC, extra, &[]);
        let root = tree.path().canonicalize().expect("canonical");
        let report = tree.write("target/nextest/ci/junit.xml", junit(results).as_bytes());
        let ledger = root.join("target/holdfast-test-skips.jsonl");
        if let Some(text) = ledger_text {
            tree.write("target/holdfast-test-skips.jsonl", text.as_bytes());
        }
        dated(&tree, &report);
        let mut args = vec![
            "--results",
            "target/nextest/ci/junit.xml",
            "--skips",
            "target/holdfast-test-skips.jsonl",
        ];
        for package in crates {
            args.extend(["--crate", package]);
        }
        let command = fixture::xtask_in(&root, &root, "spec-check", &args);
        let packages: Vec<String> = crates.iter().map(|c| (*c).to_owned()).collect();
        let today = spec_engine::gate::today(std::time::SystemTime::now());
        let judged = holdfast_test_runner::judge(&root, &report, &ledger, &packages, &today);
        let case = format!("{results:?}, ledger {ledger_text:?}, crates {crates:?}");
        assert_eq!(
            judged.report.replace(&root.display().to_string(), "[ROOT]"),
            command.stdout,
            "{case}"
        );
        assert_eq!(judged.passed, command.code == 0, "{case}");
        assert!(
            command.code == 0 || command.code == 1,
            "{case}: {}",
            command.stderr
        );
        assert!(judged.fatal.is_none(), "{case}");
        if at == 0 {
            assert!(judged.report.contains("waivers.toml"), "{}", judged.report);
            assert!(
                judged.report.contains("coverage-baseline.toml"),
                "{}",
                judged.report
            );
        }
        verdicts.push(judged.passed);
    }
    // Both verdicts among the cases: the comparison is not only of passes.
    assert!(
        verdicts.contains(&true) && verdicts.contains(&false),
        "{verdicts:?}"
    );
}

// A run whose report is missing or unreadable judges nothing: the runner's gate prints what the
// command prints (the banner on stdout, the two `error: spec-check:` lines on stderr) and fails,
// as the command's exit 2 does.
// i[verify harness.results+3]
#[test]
fn the_runner_s_gate_fails_as_spec_check_does_when_the_report_is_missing_or_malformed() {
    for malformed in [None, Some("not xml <")] {
        let tree = Tree::new(SPEC, &[], &[]);
        let root = tree.path().canonicalize().expect("canonical");
        let report = root.join("target/nextest/ci/junit.xml");
        if let Some(text) = malformed {
            tree.write("target/nextest/ci/junit.xml", text.as_bytes());
        }
        let ledger = root.join("target/holdfast-test-skips.jsonl");
        let args = [
            "--results",
            "target/nextest/ci/junit.xml",
            "--skips",
            "target/holdfast-test-skips.jsonl",
        ];
        let command = fixture::xtask_in(&root, &root, "spec-check", &args);
        let today = spec_engine::gate::today(std::time::SystemTime::now());
        let judged = holdfast_test_runner::judge(&root, &report, &ledger, &[], &today);
        let case = format!("report {malformed:?}");
        assert_eq!(command.code, 2, "{case}: {}", command.stderr);
        assert!(!judged.passed, "{case}");
        let root_text = root.display().to_string();
        assert_eq!(
            judged.report.replace(&root_text, "[ROOT]"),
            command.stdout,
            "{case}"
        );
        let fatal = judged.fatal.expect("fatal");
        assert_eq!(
            format!("{}\n", fatal.replace(&root_text, "[ROOT]")),
            command.stderr,
            "{case}"
        );
    }
}

/// Whether everything `cargo xtask test` needs is on this machine already (then `--install-only`
/// must install nothing, so the test can run it without root or a package registry); when not,
/// a loud skip (the harness installs it all first, so there it fails instead).
fn everything_installed() -> bool {
    use holdfast_harness::packages;
    let missing: Vec<&str> = packages::missing(&packages::search_path())
        .iter()
        .map(|r| r.program)
        .chain((!packages::has_nextest()).then_some("cargo-nextest"))
        .chain((!packages::has_mutants()).then_some("cargo-mutants"))
        .collect();
    if !missing.is_empty() {
        holdfast_test_support::services::skip_loudly(
            "the test run's programs",
            &format!("missing: {}", missing.join(", ")),
            holdfast_test_support::services::FailWhen::Harness,
        );
    }
    missing.is_empty()
}

// i[verify harness.install.only]
#[test]
fn install_only_with_nothing_missing_builds_starts_and_runs_nothing() {
    if !everything_installed() {
        return;
    }
    let tree = fixture::Tree::new(SPEC, &[], &[]);
    let run = fixture::xtask_in(tree.path(), tree.path(), "test", &["--install-only"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stdout
            .contains("everything a test run needs is installed"),
        "{}",
        run.stdout
    );
    // No test ran (the run's closing count), and nothing was built or started in the tree.
    assert!(!run.stdout.contains(" passed, "), "{}", run.stdout);
    assert!(!run.stderr.contains("Compiling"), "{}", run.stderr);
    assert!(!tree.path().join("target").exists());

    let clash = fixture::xtask_in(
        tree.path(),
        tree.path(),
        "test",
        &["--install-only", "--no-run"],
    );
    assert_ne!(clash.code, 0, "{}", clash.stdout);
    assert!(
        clash.stderr.contains("cannot be used with"),
        "{}",
        clash.stderr
    );
}
