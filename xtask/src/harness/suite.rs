//! Running the workspace's tests against the started services, then the test-backed spec gate.

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};

use anyhow::Context as _;

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

/// `cargo nextest run --workspace --profile ci <args>` with the services' environment; its JUnit
/// report lands at `junit` (`<target>/nextest/ci/junit.xml`, see `.config/nextest.toml`).
// i[impl harness.results]
pub fn nextest(
    workspace: &Path,
    junit: &Path,
    env: &[(String, String)],
    args: &[String],
) -> anyhow::Result<ExitStatus> {
    // A report left by an earlier run must never be read as this run's.
    let _ = std::fs::remove_file(junit);
    Command::new("cargo")
        .args(nextest_args(args))
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(workspace)
        .status()
        .context("running cargo nextest (install it with `cargo install cargo-nextest`)")
}

/// The whole workspace unless the caller named packages (`-p`/`--package`), which cargo would
/// otherwise ignore next to `--workspace`.
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
    args.extend(extra.iter().cloned());
    args
}

/// `cargo test --workspace --doc` (nextest does not run doctests); returns its status and counts.
pub fn doctests(
    workspace: &Path,
    env: &[(String, String)],
) -> anyhow::Result<(ExitStatus, Counts)> {
    let mut child = Command::new("cargo")
        .args(["test", "--workspace", "--doc"])
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

/// Counts from a JUnit report: a `<testcase>` passed unless it holds `<failure`, `<error` or
/// `<skipped`.
pub fn parse_junit(xml: &str) -> Counts {
    let mut counts = Counts::default();
    for case in xml.split("<testcase").skip(1) {
        let open_end = case.find('>').unwrap_or(case.len());
        let body = if case[..open_end].ends_with('/') {
            ""
        } else {
            &case[..case.find("</testcase>").unwrap_or(case.len())]
        };
        if body.contains("<failure") || body.contains("<error") {
            counts.failed += 1;
        } else if body.contains("<skipped") {
            counts.skipped += 1;
        } else {
            counts.passed += 1;
        }
    }
    counts
}

/// `<this xtask> spec-check --results <junit> --skips <ledger>`: the gate decides the run's result.
/// Paths are given relative to the workspace when they are inside it
/// (`target/nextest/ci/junit.xml`, `target/holdfast-test-skips.jsonl`).
///
/// `xtask` is this binary's path as found at start-up: building the tests can rebuild xtask in place,
/// after which `current_exe()` names the replaced file ("… (deleted)").
pub fn spec_check(
    xtask: &Path,
    workspace: &Path,
    junit: &Path,
    ledger: &Path,
) -> anyhow::Result<ExitStatus> {
    let relative = |p: &Path| p.strip_prefix(workspace).unwrap_or(p).to_owned();
    Command::new(xtask)
        .arg("spec-check")
        .arg("--results")
        .arg(relative(junit))
        .arg("--skips")
        .arg(relative(ledger))
        .current_dir(workspace)
        .status()
        .context("running spec-check")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn naming_a_package_narrows_the_run() {
        let args = |extra: &[&str]| {
            nextest_args(&extra.iter().map(|s| s.to_string()).collect::<Vec<_>>()).join(" ")
        };
        assert_eq!(args(&[]), "nextest run --workspace --profile ci");
        assert_eq!(
            args(&["smoke"]),
            "nextest run --workspace --profile ci smoke"
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

    // i[verify harness.results]
    #[test]
    fn junit_cases_are_classified() {
        let xml = r#"<testsuites tests="4" failures="1"><testsuite name="x">
<testcase name="a" classname="x" time="0.1"/>
<testcase name="b" classname="x" time="0.1"><failure type="test failure">boom</failure><system-err>e</system-err></testcase>
<testcase name="c" classname="x" time="0.1"><skipped/></testcase>
<testcase name="d" classname="x" time="0.1"><system-out>ok</system-out></testcase>
</testsuite></testsuites>"#;
        assert_eq!(
            parse_junit(xml),
            Counts {
                passed: 2,
                failed: 1,
                skipped: 1
            }
        );
    }
}
