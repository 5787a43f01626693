//! Running the workspace's tests against the started services, then the test-backed spec gate.

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};

use anyhow::Context as _;

use holdfast_harness::{output, root};
use spec_engine::gate;
use spec_engine::spec_check;
use spec_engine::spec_check::junit::{self, Status};
use spec_engine::spec_check::report::{self, Format};

/// Pass/fail counts, for the closing line of the run.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Tests that ran and passed.
    pub passed: u64,
    /// Tests that ran and failed (or errored).
    pub failed: u64,
    /// Tests that were skipped or ignored.
    pub skipped: u64,
}

impl std::ops::Add for Counts {
    type Output = Counts;
    fn add(self, other: Counts) -> Counts {
        Counts {
            passed: self.passed + other.passed,
            failed: self.failed + other.failed,
            skipped: self.skipped + other.skipped,
        }
    }
}

/// `cargo nextest run --workspace --profile ci <args>` with the services' environment, `cargo`
/// being [`root::cargo`] (a stand-in in tests), run as a plain cargo ([`root::as_plain_cargo`]);
/// its JUnit report lands at `junit` (`<target>/nextest/ci/junit.xml`, see
/// `.config/nextest.toml`).
// i[impl harness.results+3]
// i[impl bench.no-rebuild+2]
pub fn nextest(
    mut cargo: Command,
    workspace: &Path,
    junit: &Path,
    env: &[(String, String)],
    args: &[String],
) -> anyhow::Result<ExitStatus> {
    // A report left by an earlier run must never be read as this run's.
    let _ = std::fs::remove_file(junit);
    root::as_plain_cargo(&mut cargo)
        .args(nextest_args(args))
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(workspace)
        .status()
        .context("running cargo nextest (install it with `cargo install cargo-nextest`)")
}

/// Cargo features the suite builds with, each `(package, feature)`: code behind a feature that
/// needs a build tool the harness installs (holdfast-gateway's etcd registry needs `protoc`),
/// enabled whenever that package is in the run.
/// The node's own `etcd` is among them so that the node binary the suite builds has every
/// feature: CI packages that one (`dist deb --no-build`) instead of building the node again.
// i[impl harness.build-once]
pub const SUITE_FEATURES: &[(&str, &str)] = &[("holdfast-gateway", "etcd"), ("holdfast", "etcd")];

/// The whole workspace unless the caller named packages (`-p`/`--package`), which cargo would
/// otherwise ignore next to `--workspace`; with [`SUITE_FEATURES`] of the packages in the run.
pub fn nextest_args(extra: &[String]) -> Vec<String> {
    let names_packages = extra.iter().any(|a| {
        a == "-p"
            || a == "--package"
            || a.starts_with("--package=")
            || (a.starts_with("-p") && a.len() > 2 && !a.starts_with("--"))
    });
    let mut args: Vec<String> = vec!["nextest".into(), "run".into()];
    if !names_packages {
        args.push("--workspace".into());
    }
    args.extend(["--profile".into(), "ci".into()]);
    let named = packages_named(extra);
    let features: Vec<String> = SUITE_FEATURES
        .iter()
        .filter(|(package, _)| !names_packages || named.iter().any(|n| n == package))
        .map(|(package, feature)| format!("{package}/{feature}"))
        .collect();
    if !features.is_empty() {
        args.extend(["--features".into(), features.join(",")]);
    }
    args.extend(extra.iter().cloned());
    args
}

/// [`nextest_args`] that build the same tests and run none (`--no-run`).
// i[impl harness.build-once]
pub fn build_args(extra: &[String]) -> Vec<String> {
    let mut args = nextest_args(extra);
    args.insert(2, "--no-run".into());
    args
}

/// `cargo nextest run --no-run` of the tests [`nextest`] would run with `args`: their build alone,
/// `cargo` run as [`nextest`] runs it.
// i[impl bench.no-rebuild+2]
pub fn build(mut cargo: Command, workspace: &Path, args: &[String]) -> anyhow::Result<ExitStatus> {
    root::as_plain_cargo(&mut cargo)
        .args(build_args(args))
        .current_dir(workspace)
        .status()
        .context("running cargo nextest (install it with `cargo install cargo-nextest`)")
}

/// `cargo test --workspace --doc` with the features of the whole workspace's nextest run: under
/// other features cargo would build the libraries (and every dependency whose features differ)
/// once more for the doctests alone.
// i[impl harness.build-once]
pub fn doctest_args() -> Vec<String> {
    let mut args: Vec<String> = ["test", "--workspace", "--doc"].map(String::from).into();
    let features: Vec<String> = SUITE_FEATURES
        .iter()
        .map(|(package, feature)| format!("{package}/{feature}"))
        .collect();
    args.extend(["--features".into(), features.join(",")]);
    args
}

/// [`doctest_args`] (nextest does not run doctests), `cargo` run as [`nextest`] runs it; returns
/// its status and counts.
// i[impl bench.no-rebuild+2]
pub fn doctests(
    mut cargo: Command,
    workspace: &Path,
    env: &[(String, String)],
) -> anyhow::Result<(ExitStatus, Counts)> {
    let mut child = root::as_plain_cargo(&mut cargo)
        .args(doctest_args())
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(workspace)
        .stdout(Stdio::piped())
        .spawn()
        .context("running cargo test --doc")?;
    let mut counts = Counts::default();
    if let Some(stdout) = child.stdout.take() {
        for line in BufReader::new(stdout).lines() {
            let line = line?;
            println!("{line}");
            counts = counts + parse_libtest_result(&line);
        }
    }
    Ok((child.wait()?, counts))
}

/// Counts from a libtest summary line: `test result: ok. 3 passed; 0 failed; 1 ignored; ...`.
pub fn parse_libtest_result(line: &str) -> Counts {
    let Some(rest) = line.trim().strip_prefix("test result: ") else {
        return Counts::default();
    };
    let mut counts = Counts::default();
    for part in rest.split(['.', ';']) {
        let mut words = part.split_whitespace();
        if let (Some(n), Some(kind)) = (words.next(), words.next()) {
            let Ok(n) = n.parse::<u64>() else { continue };
            match kind {
                "passed" => counts.passed += n,
                "failed" => counts.failed += n,
                "ignored" => counts.skipped += n,
                _ => {}
            }
        }
    }
    counts
}

/// Counts from the run's JUnit report, read by the spec gate's own reader ([`junit`]); an
/// unreadable report counts nothing (the gate then fails the run on it).
pub fn junit_counts(path: &Path) -> Counts {
    // The gate's reader reads through a tree; the report may lie anywhere on the disk.
    let dir = path.parent().unwrap_or(path);
    match junit::read(&spec_engine::Disk::new(dir), path) {
        Ok(results) => counts_of(&results),
        Err(_) => Counts::default(),
    }
}

/// Pass/fail/skip counts of parsed results.
fn counts_of(results: &junit::Results) -> Counts {
    let mut counts = Counts::default();
    for status in results.statuses() {
        match status {
            Status::Passed => counts.passed += 1,
            Status::Failed => counts.failed += 1,
            Status::Skipped => counts.skipped += 1,
        }
    }
    counts
}

/// The packages `-p NAME` / `--package NAME` / `--package=NAME` / `-pNAME` name in nextest's
/// arguments: a run of only these, whose gate judges only their rules by results.
pub fn packages_named(args: &[String]) -> Vec<String> {
    let mut packages = Vec::new();
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        if arg == "-p" || arg == "--package" {
            packages.extend(iter.next().cloned());
        } else if let Some(name) = arg.strip_prefix("--package=") {
            packages.push(name.to_owned());
        } else if let Some(name) = arg
            .strip_prefix("-p")
            .filter(|n| !n.is_empty() && !arg.starts_with("--"))
        {
            packages.push(name.to_owned());
        }
    }
    packages
}

/// What the test-backed gate found: whether the run passed it, the report for stdout, and the
/// fatal error (for stderr) that kept it from judging anything.
#[derive(Debug)]
pub struct Judged {
    /// Every rule implemented and verified by a passing test, and every reference sound.
    pub passed: bool,
    /// The gate's report as text (only the `root:` line when it judged nothing).
    pub report: String,
    /// The lines for stderr (`error: spec-check: …`) when nothing was judged: an unreadable
    /// report or ledger, or a panic inside the gate.
    pub fatal: Option<String>,
}

/// The test-backed gate on the run: what `cargo xtask spec-check --results <junit> --skips
/// <ledger>` (with `--crate P` for each of `packages`) judges, run here through spec-engine's
/// [`gate::gate`] (the one `spec-check` uses) on `today` (`YYYY-MM-DD`, the day waivers are
/// judged on), its report rendered as text. A panic inside the engine fails the gate with a fatal
/// error rather than ending the run without its closing line.
// i[impl harness.results+3]
pub fn judge(
    workspace: &Path,
    junit: &Path,
    ledger: &Path,
    packages: &[String],
    today: &str,
) -> Judged {
    let judged = std::panic::catch_unwind(|| {
        let disk = spec_engine::Disk::new(workspace);
        let read_now = spec_check::read(&disk);
        gate::gate(&disk, &read_now, &[junit], Some(ledger), packages, today)
    });
    match judged {
        Ok(Ok(outcome)) => Judged {
            passed: outcome.problems.is_empty(),
            report: report::render(&outcome, Format::Text),
            fatal: None,
        },
        Ok(Err(fatal)) => Judged {
            passed: false,
            report: root::banner(workspace),
            fatal: Some(gate::fatal_lines(&fatal).join("\n")),
        },
        Err(_) => Judged {
            passed: false,
            report: root::banner(workspace),
            fatal: Some(
                "error: spec-check: the gate panicked (see above); nothing was judged".to_owned(),
            ),
        },
    }
}

/// [`judge`] on today's date, printed as `cargo xtask spec-check` prints it; whether the run
/// passed the gate (a fatal error fails it, as the command's exit 2 does).
pub fn judge_and_print(workspace: &Path, junit: &Path, ledger: &Path, packages: &[String]) -> bool {
    let today = gate::today(std::time::SystemTime::now());
    let judged = judge(workspace, junit, ledger, packages, &today);
    output::print(&judged.report);
    if let Some(fatal) = &judged.fatal {
        eprintln!("{fatal}");
    }
    judged.passed
}

#[cfg(test)]
mod tests {
    use holdfast_test_support::services;

    use super::*;

    #[test]
    fn naming_a_package_narrows_the_run() {
        let args = |extra: &[&str]| {
            nextest_args(&extra.iter().map(|s| s.to_string()).collect::<Vec<_>>()).join(" ")
        };
        assert_eq!(
            args(&[]),
            "nextest run --workspace --profile ci --features holdfast-gateway/etcd,holdfast/etcd"
        );
        assert_eq!(
            args(&["smoke"]),
            "nextest run --workspace --profile ci --features holdfast-gateway/etcd,holdfast/etcd smoke"
        );
        assert_eq!(
            args(&["-p", "holdfast-gateway"]),
            "nextest run --profile ci --features holdfast-gateway/etcd -p holdfast-gateway"
        );
        assert_eq!(
            args(&["-p", "holdfast-pull"]),
            "nextest run --profile ci -p holdfast-pull"
        );
        assert_eq!(
            args(&["--package=holdfast-pull"]),
            "nextest run --profile ci --package=holdfast-pull"
        );
    }

    // i[verify harness.build-once]
    #[test]
    fn the_build_only_run_and_the_doctests_build_with_the_suite_s_features() {
        let to_strings = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        for extra in [&[][..], &["smoke"][..], &["-p", "holdfast-gateway"][..]] {
            let mut run = nextest_args(&to_strings(extra));
            let build = build_args(&to_strings(extra));
            assert_eq!(build[..3], ["nextest", "run", "--no-run"]);
            run.insert(2, "--no-run".into());
            assert_eq!(build, run, "{extra:?}");
        }
        // The doctests cover the whole workspace: the whole workspace's features.
        let workspace = nextest_args(&[]);
        let features = |args: &[String]| {
            let at = args
                .iter()
                .position(|a| a == "--features")
                .expect("--features");
            args[at + 1].clone()
        };
        assert_eq!(features(&doctest_args()), features(&workspace));
        assert!(
            features(&workspace)
                .split(',')
                .any(|f| f == "holdfast/etcd")
        );
        assert_eq!(doctest_args()[..3], ["test", "--workspace", "--doc"]);
    }

    // i[verify harness.build-once]
    #[test]
    fn the_build_runs_cargo_as_the_suite_does_with_no_run_and_returns_its_status() {
        let dir = tempfile::tempdir().expect("temp dir");
        let junit = dir.path().join("target/nextest/ci/junit.xml");
        // A stand-in cargo, run in the workspace: it appends its arguments, then exits 0 for a
        // build and 5 for a run.
        let cargo = |name: &str| {
            holdfast_harness::stand_in::script(
                dir.path(),
                name,
                "echo \"$*\" >> called\n\
                 for a; do [ \"$a\" = --no-run ] && exit 0; done\n\
                 exit 5\n",
            )
        };
        for args in [
            &[][..],
            &["smoke"][..],
            &["-p", "holdfast-gateway", "--no-capture"][..],
        ] {
            let _ = std::fs::remove_file(dir.path().join("called"));
            let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
            let built = build(cargo("build.sh"), dir.path(), &args).expect("ran");
            assert!(built.success(), "the build's own status");
            let ran = nextest(cargo("run.sh"), dir.path(), &junit, &[], &args).expect("ran");
            assert_eq!(ran.code(), Some(5), "the run's own status");
            let called = std::fs::read_to_string(dir.path().join("called")).expect("cargo ran");
            let lines: Vec<&str> = called.lines().collect();
            assert_eq!(lines.len(), 2, "{called}");
            // The build is the run's command, features and filters alike, with --no-run: what it
            // builds is what the run would.
            assert_eq!(
                lines[0],
                lines[1].replacen("nextest run", "nextest run --no-run", 1),
                "{args:?}"
            );
            // The whole workspace's build makes the node with every feature (the package's).
            let node = if args.iter().any(|a| a == "-p") {
                "holdfast-gateway/etcd"
            } else {
                "holdfast/etcd"
            };
            assert!(lines[0].contains(node), "{}", lines[0]);
        }
    }

    #[test]
    fn libtest_summary_lines_are_counted() {
        let line = "test result: FAILED. 3 passed; 1 failed; 2 ignored; 0 measured; 0 filtered out; finished in 0.01s";
        assert_eq!(
            parse_libtest_result(line),
            Counts {
                passed: 3,
                failed: 1,
                skipped: 2
            }
        );
        assert_eq!(parse_libtest_result("running 3 tests"), Counts::default());
    }

    // i[verify harness.results+3]
    #[test]
    fn the_closing_line_counts_what_the_gate_reads() {
        let dir = tempfile::tempdir().expect("temp dir");
        let junit = dir.path().join("target/nextest/ci/junit.xml");
        std::fs::create_dir_all(junit.parent().expect("parent")).expect("mkdir");
        // A passing test whose captured output mentions `<failure>`: a string-splitting counter
        // calls it failed, the gate's XML reader (and nextest) passed.
        std::fs::write(
            &junit,
            r#"<?xml version="1.0" encoding="UTF-8"?>
<testsuites name="nextest-run"><testsuite name="x">
<testcase name="a" classname="x" time="0.1"/>
<testcase name="b" classname="x" time="0.1"><failure message="1 > 0" type="test failure">boom</failure><system-err>e</system-err></testcase>
<testcase name="c" classname="x" time="0.1"><skipped/></testcase>
<testcase name="d" classname="x" time="0.1"><system-out><![CDATA[a passing test that printed <failure> and <skipped/>]]></system-out></testcase>
</testsuite></testsuites>"#,
        )
        .expect("write");
        let results =
            junit::read(&spec_engine::Disk::new(dir.path()), &junit).expect("the gate reads it");
        assert_eq!(results.cases.len(), 4);
        assert_eq!(
            junit_counts(&junit),
            Counts {
                passed: 2,
                failed: 1,
                skipped: 1
            }
        );
        assert_eq!(
            nextest_args(&["-p".into(), "holdfast-retry".into()]).join(" "),
            "nextest run --profile ci -p holdfast-retry"
        );
    }

    /// A one-crate workspace with two rules, `demo.alpha` verified by a unit test and `demo.beta`
    /// by an integration test, its files dated before any report; returns the temp dir.
    fn demo_tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("temp dir");
        let files = [
            ("Cargo.toml", "[workspace]\nresolver = \"2\"\n"),
            (
                ".config/tracey/config.styx",
                "specs (\n    {\n        name demo\n        include (docs/spec/demo.md)\n        \
                 impls (\n            {\n                name rust\n                \
                 include (crates/**/*.rs)\n                test_include (crates/**/tests/**/*.rs)\n            \
                 }\n        )\n    }\n)\n",
            ),
            (
                "docs/spec/demo.md",
                "# Demo\n\n> r[demo.alpha]\n> Alpha holds.\n\n> r[demo.beta]\n> Beta holds.\n",
            ),
            (
                "crates/demo/Cargo.toml",
                "[package]\nname = \"demo\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
            ),
            (
                "crates/demo/src/lib.rs",
                "// r[impl demo.alpha]\npub fn alpha() -> u32 {\n    1\n}\n\n\
                 // r[impl demo.beta]\npub fn beta() -> u32 {\n    2\n}\n\n\
                 #[cfg(test)]\nmod tests {\n    // r[verify demo.alpha]\n    #[test]\n    \
                 fn alpha_holds() {\n        assert_eq!(super::alpha(), 1);\n    }\n}\n",
            ),
            (
                "crates/demo/tests/beta.rs",
                "// r[verify demo.beta]\n#[test]\nfn beta_holds() {\n    assert_eq!(demo::beta(), 2);\n}\n",
            ),
        ];
        let before = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
        for (path, text) in files {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(&path, text).expect("write");
            let file = std::fs::File::options()
                .write(true)
                .open(&path)
                .expect("open");
            file.set_modified(before).expect("date");
        }
        dir
    }

    /// Writes nextest's report of `alpha_holds` and `beta_holds` with these outcomes.
    fn report(junit: &Path, alpha: &str, beta: &str) {
        let case = |suite: &str, name: &str, outcome: &str| match outcome {
            "passed" => format!("<testcase name=\"{name}\" classname=\"{suite}\" time=\"0.01\"/>"),
            _ => format!(
                "<testcase name=\"{name}\" classname=\"{suite}\" time=\"0.01\">\
                 <failure message=\"panicked\" type=\"test failure\">boom</failure></testcase>"
            ),
        };
        std::fs::create_dir_all(junit.parent().expect("parent")).expect("mkdir");
        std::fs::write(
            junit,
            format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"nextest-run\">\
                 <testsuite name=\"demo\">{}</testsuite><testsuite name=\"demo::beta\">{}</testsuite>\
                 </testsuites>\n",
                case("demo", "tests::alpha_holds", alpha),
                case("demo::beta", "beta_holds", beta),
            ),
        )
        .expect("write the report");
    }

    /// The day the unit tests judge waivers on.
    const TODAY: &str = "2026-12-06";

    // i[verify harness.results+3]
    #[test]
    fn the_gate_judges_the_run_by_its_report_and_its_ledger() {
        let tree = demo_tree();
        let root = tree.path().canonicalize().expect("canonical");
        let junit = root.join("target/nextest/ci/junit.xml");
        let ledger = root.join("target").join(services::LEDGER_FILE);
        report(&junit, "passed", "passed");
        let judged = judge(&root, &junit, &ledger, &[], TODAY);
        assert!(judged.passed, "{}", judged.report);
        assert!(judged.fatal.is_none());
        assert!(
            judged.report.starts_with(&root::banner(&root)),
            "{}",
            judged.report
        );
        assert!(
            judged.report.contains("target/nextest/ci/junit.xml"),
            "judged by the run's own report: {}",
            judged.report
        );

        // A rule whose only test failed is not verified: the run fails the gate.
        report(&junit, "failed", "passed");
        let judged = judge(&root, &junit, &ledger, &[], TODAY);
        assert!(!judged.passed, "{}", judged.report);
        assert!(judged.report.contains("r[demo.alpha]"), "{}", judged.report);

        // A test that skipped for want of a service, in the ledger: its rule is not verified.
        report(&junit, "passed", "passed");
        let skip = services::Skip {
            test: "beta_holds".into(),
            binary: "beta".into(),
            service: "dockerd".into(),
            reason: format!("{} is not set", services::DOCKER_HOST_VAR),
        };
        skip.append_to(&ledger).expect("ledger");
        let judged = judge(&root, &junit, &ledger, &[], TODAY);
        assert!(!judged.passed, "{}", judged.report);
        assert!(judged.report.contains("r[demo.beta]"), "{}", judged.report);
        std::fs::remove_file(&ledger).expect("clear the ledger");

        // An unreadable report judges nothing: fatal, and the run fails.
        std::fs::write(&junit, "not xml <").expect("write");
        let judged = judge(&root, &junit, &ledger, &[], TODAY);
        assert!(!judged.passed);
        let fatal = judged.fatal.expect("fatal");
        assert!(
            fatal.starts_with("error: spec-check: ")
                && fatal.contains(" target/nextest/ci/junit.xml")
                && fatal.ends_with("\nerror: spec-check: nothing was judged (exit 2)"),
            "the path as the workspace names it: {fatal}"
        );
        assert_eq!(judged.report, root::banner(&root));
    }

    // i[verify harness.results+3]
    #[test]
    fn nextest_runs_the_ci_profile_with_the_services_env_and_returns_its_status() {
        let dir = tempfile::tempdir().expect("temp dir");
        let junit = dir.path().join("target/nextest/ci/junit.xml");
        std::fs::create_dir_all(junit.parent().expect("parent")).expect("mkdir");
        std::fs::write(&junit, "an earlier run's report").expect("write");
        // A stand-in cargo, run in the workspace: it notes its arguments, the services' variable
        // and whether an old report was still there, then fails as a failing suite does.
        let cargo = holdfast_harness::stand_in::script(
            dir.path(),
            "cargo.sh",
            &format!(
                "old=no; [ -e target/nextest/ci/junit.xml ] && old=yes\n\
                 echo \"$* services=${} old=$old\" > called\n\
                 exit 3\n",
                services::SERVICES_VAR
            ),
        );
        let env = [(services::SERVICES_VAR.to_owned(), "1".to_owned())];
        let args = ["-p".to_owned(), "holdfast-retry".to_owned()];
        let status = nextest(cargo, dir.path(), &junit, &env, &args).expect("ran");
        assert_eq!(status.code(), Some(3), "the suite's own status");
        let called = std::fs::read_to_string(dir.path().join("called")).expect("cargo ran");
        assert_eq!(
            called.trim(),
            "nextest run --profile ci -p holdfast-retry services=1 old=no"
        );
    }

    // i[verify bench.no-rebuild+2]
    #[test]
    fn the_suite_s_cargo_runs_without_what_cargo_set_for_running_xtask_and_with_everything_else() {
        // `cargo test` sets these for this binary, as `cargo xtask` does for xtask.
        let set_for_this_run = ["CARGO_MANIFEST_DIR", "CARGO_PKG_NAME"];
        for name in set_for_this_run {
            assert!(std::env::var_os(name).is_some(), "{name} set by cargo test");
        }
        let dir = tempfile::tempdir().expect("temp dir");
        let junit = dir.path().join("target/nextest/ci/junit.xml");
        // A stand-in cargo that writes its environment (`NAME=value` lines) to `<itself>.env`.
        let cargo =
            |name: &str| holdfast_harness::stand_in::script(dir.path(), name, "env > \"$0.env\"\n");
        let env = [(services::SERVICES_VAR.to_owned(), "1".to_owned())];
        let built = build(cargo("build"), dir.path(), &[]).expect("ran");
        assert!(built.success());
        let ran = nextest(cargo("nextest"), dir.path(), &junit, &env, &[]).expect("ran");
        assert!(ran.success());
        let (doc, _) = doctests(cargo("doctests"), dir.path(), &env).expect("ran");
        assert!(doc.success());
        let path = std::env::var("PATH").expect("PATH is set");
        for run in ["build", "nextest", "doctests"] {
            let seen = std::fs::read_to_string(dir.path().join(format!("{run}.env")))
                .expect("the stand-in ran");
            let has = |wanted: &str| seen.lines().any(|line| line == wanted);
            let names: Vec<&str> = seen
                .lines()
                .filter_map(|line| line.split_once('=').map(|(name, _)| name))
                .collect();
            for name in set_for_this_run {
                assert!(!names.contains(&name), "{run}: {name} passed on:\n{seen}");
            }
            assert!(
                !names.iter().any(|name| name.starts_with("CARGO_PKG_")),
                "{run}: CARGO_PKG_* passed on:\n{seen}"
            );
            // What the caller has otherwise reaches cargo as it is.
            assert!(has(&format!("PATH={path}")), "{run}: PATH:\n{seen}");
            if run != "build" {
                let services = format!("{}=1", services::SERVICES_VAR);
                assert!(has(&services), "{run}: the services' environment:\n{seen}");
            }
        }
    }

    #[test]
    fn packages_are_read_in_every_spelling() {
        let named =
            |args: &[&str]| packages_named(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(
            named(&["-p", "a", "--package", "b", "--package=c", "-pd", "smoke"]),
            ["a", "b", "c", "d"]
        );
        assert!(named(&["--no-capture"]).is_empty());
    }
}
