//! Reads a JUnit report. nextest writes one `<testsuite name="BINARY-ID">` per test binary, one
//! `<testcase name="module::fn">` per test that ran. Other runners write the same elements with
//! their own attributes, kept per case ([`Case`]) so a test in their language is found by its file
//! and name: pytest (`--junitxml`; `classname="tests.test_x[.Class]"`, `file` only with
//! `junit_family=xunit1`), go-junit-report (`<testsuite name="IMPORT/PATH">`,
//! `name="TestX[/sub]"`), jest-junit (`<testsuites name="jest tests">`, `name="describe test"`,
//! `file` with `addFileAttribute`) and vitest (`<testsuites name="vitest tests">`, the suite named
//! by the file, `name="describe > test"`). A `<failure>` or `<error>` child means the case failed,
//! `<skipped>` that it was skipped; ignored tests are absent.

use std::collections::BTreeMap;
use std::path::Path;

use crate::model::tree::Tree;

use quick_xml::events::{BytesStart, Event};

/// How a test case ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Status {
    /// Ran and passed (possibly after retries).
    Passed,
    /// Reported as skipped.
    Skipped,
    /// Failed or errored.
    Failed,
}

/// Why a JUnit report cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file cannot be read.
    #[error("cannot read: {0}")]
    Read(#[source] std::io::Error),
    /// The text is not well-formed XML.
    #[error("not valid XML at byte {at}: {source}")]
    Xml {
        /// Byte offset of the reader when it failed.
        at: u64,
        /// The XML reader's error.
        source: quick_xml::Error,
    },
    /// An attribute cannot be decoded.
    #[error("bad attribute on <{element}>: {message}")]
    Attribute {
        /// The element.
        element: String,
        /// What is wrong with it.
        message: String,
    },
    /// A required attribute is missing.
    #[error("<{element}> without a `{key}`")]
    Missing {
        /// The element.
        element: String,
        /// The attribute.
        key: String,
    },
    /// A `<testcase>` outside any `<testsuite>`.
    #[error("test case `{0}` outside a <testsuite>")]
    OutsideSuite(String),
    /// No `<testsuites>` root.
    #[error("no <testsuites> element: not a JUnit report")]
    NotJunit,
}

/// The test runner that wrote a report, told from the report itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Runner {
    /// cargo-nextest (`<testsuites name="nextest-run">`).
    Nextest,
    /// pytest (`<testsuite name="pytest">`).
    Pytest,
    /// go-junit-report (a `go.version` property).
    Go,
    /// jest-junit (`<testsuites name="jest tests">`).
    Jest,
    /// vitest's junit reporter (`<testsuites name="vitest tests">`).
    Vitest,
    /// Any other JUnit writer.
    #[default]
    Other,
}

impl Runner {
    /// The runner's name as a reader knows it.
    pub fn name(self) -> &'static str {
        match self {
            Runner::Nextest => "nextest",
            Runner::Pytest => "pytest",
            Runner::Go => "go test",
            Runner::Jest => "jest",
            Runner::Vitest => "vitest",
            Runner::Other => "junit",
        }
    }
}

/// One test case as the report wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Case {
    /// The enclosing `<testsuite name>`.
    pub suite: String,
    /// The case's `name`.
    pub name: String,
    /// The case's `classname`, when written.
    pub classname: Option<String>,
    /// The case's `file`, when written.
    pub file: Option<String>,
    /// How it ended (the worst of its repeats).
    pub status: Status,
    /// Who wrote the report it is in.
    pub runner: Runner,
}

/// Every test case of a run, keyed by (suite, test name).
#[derive(Debug, Default)]
pub struct Results {
    /// Test cases by (nextest binary id, test name): how nextest's tests are looked up. Another
    /// runner's suite may hold several files' same-named tests (pytest's is always `pytest`):
    /// count and tally with [`Results::statuses`].
    pub cases: BTreeMap<(String, String), Status>,
    /// Every case with its attributes, in report order.
    pub detail: Vec<Case>,
    /// Who wrote the report.
    pub runner: Runner,
}

impl Results {
    /// Adds the cases of another report of the same run (another runner's, say); `runner` stays
    /// the first report's, each case keeps its own.
    pub fn merge(&mut self, other: Results) {
        for (key, status) in other.cases {
            let entry = self.cases.entry(key).or_insert(status);
            *entry = (*entry).max(status);
        }
        self.detail.extend(other.detail);
    }

    /// The runners that wrote the cases, in the order first seen.
    pub fn runners(&self) -> Vec<Runner> {
        let mut runners = vec![self.runner];
        for case in &self.detail {
            if !runners.contains(&case.runner) {
                runners.push(case.runner);
            }
        }
        runners
    }

    /// How each test of the run ended, once per test however often the report lists it: a case
    /// is its suite, class name, file and name (nextest's suite and class name are its binary;
    /// pytest names every suite `pytest`, and the class name tells the files apart), judged by the
    /// worst of its runs.
    pub fn statuses(&self) -> Vec<Status> {
        // (suite, class name, file, name)
        type Key<'a> = (&'a str, Option<&'a str>, Option<&'a str>, &'a str);
        let mut tests: BTreeMap<Key<'_>, Status> = BTreeMap::new();
        for case in &self.detail {
            let key = (
                case.suite.as_str(),
                case.classname.as_deref(),
                case.file.as_deref(),
                case.name.as_str(),
            );
            let status = tests.entry(key).or_insert(case.status);
            *status = (*status).max(case.status);
        }
        tests.into_values().collect()
    }
}

/// Parses the JUnit file at `path`.
pub fn read(tree: &dyn Tree, path: &Path) -> Result<Results, Error> {
    let text = tree.read(path).map_err(Error::Read)?;
    parse(&text)
}

/// Parses a JUnit report's text.
pub(crate) fn parse(text: &str) -> Result<Results, Error> {
    let mut reader = quick_xml::Reader::from_str(text);
    let mut results = Results::default();
    let mut suite: Option<String> = None;
    let mut case: Option<Case> = None;
    let mut saw_suites = false;
    loop {
        let event = reader.read_event().map_err(|source| Error::Xml {
            at: reader.buffer_position(),
            source,
        })?;
        match event {
            Event::Start(tag) => match tag.name().as_ref() {
                b"testsuites" => {
                    saw_suites = true;
                    results.runner = runner_of_suites(&tag)?;
                }
                b"testsuite" => {
                    let name = attribute(&tag, b"name")?;
                    if name == "pytest" && results.runner == Runner::Other {
                        results.runner = Runner::Pytest;
                    }
                    suite = Some(name);
                }
                b"testcase" => case = Some(case_of(&tag, suite.as_deref())?),
                b"property" => go_property(&tag, &mut results)?,
                other => mark(&mut case, other),
            },
            Event::Empty(tag) => match tag.name().as_ref() {
                b"testcase" => record(&mut results, case_of(&tag, suite.as_deref())?),
                b"property" => go_property(&tag, &mut results)?,
                other => mark(&mut case, other),
            },
            Event::End(tag) => match tag.name().as_ref() {
                b"testcase" => {
                    if let Some(case) = case.take() {
                        record(&mut results, case);
                    }
                }
                b"testsuite" => suite = None,
                _ => {}
            },
            Event::Eof => break,
            _ => {}
        }
    }
    if !saw_suites {
        return Err(Error::NotJunit);
    }
    // The runner is told only once the report is read (go-junit-report's property comes late).
    for case in &mut results.detail {
        case.runner = results.runner;
    }
    Ok(results)
}

/// go-junit-report writes the Go version as a suite property.
fn go_property(tag: &BytesStart<'_>, results: &mut Results) -> Result<(), Error> {
    if optional(tag, b"name")?.as_deref() == Some("go.version") {
        results.runner = Runner::Go;
    }
    Ok(())
}

/// The runner named by `<testsuites name>`, if it names one.
fn runner_of_suites(tag: &BytesStart<'_>) -> Result<Runner, Error> {
    Ok(match optional(tag, b"name")?.as_deref() {
        Some("nextest-run") => Runner::Nextest,
        Some("jest tests") => Runner::Jest,
        Some("vitest tests") => Runner::Vitest,
        _ => Runner::Other,
    })
}

/// A `<testcase>` just opened, passed until a child says otherwise.
fn case_of(tag: &BytesStart<'_>, suite: Option<&str>) -> Result<Case, Error> {
    let name = attribute(tag, b"name")?;
    let Some(suite) = suite else {
        return Err(Error::OutsideSuite(name));
    };
    Ok(Case {
        suite: suite.to_owned(),
        name,
        classname: optional(tag, b"classname")?,
        file: optional(tag, b"file")?,
        status: Status::Passed,
        runner: Runner::Other,
    })
}

/// A child element of a test case that decides its status.
fn mark(case: &mut Option<Case>, element: &[u8]) {
    let Some(Case { status, .. }) = case else {
        return;
    };
    let seen = match element {
        b"failure" | b"error" => Status::Failed,
        b"skipped" => Status::Skipped,
        _ => return,
    };
    *status = (*status).max(seen);
}

fn record(results: &mut Results, case: Case) {
    let entry = results
        .cases
        .entry((case.suite.clone(), case.name.clone()))
        .or_insert(case.status);
    *entry = (*entry).max(case.status);
    results.detail.push(case);
}

fn attribute(tag: &BytesStart<'_>, key: &[u8]) -> Result<String, Error> {
    optional(tag, key)?.ok_or_else(|| Error::Missing {
        element: String::from_utf8_lossy(tag.name().as_ref()).into_owned(),
        key: String::from_utf8_lossy(key).into_owned(),
    })
}

fn optional(tag: &BytesStart<'_>, key: &[u8]) -> Result<Option<String>, Error> {
    let bad = |message: String| Error::Attribute {
        element: String::from_utf8_lossy(tag.name().as_ref()).into_owned(),
        message,
    };
    let Some(attr) = tag
        .try_get_attribute(key)
        .map_err(|err| bad(err.to_string()))?
    else {
        return Ok(None);
    };
    attr.unescape_value()
        .map(|v| Some(v.into_owned()))
        .map_err(|err| bad(err.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Trimmed from a real `cargo nextest run --profile ci` report (nextest 0.9).
    const REPORT: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<testsuites name="nextest-run" tests="5" skipped="0" failures="1" errors="0">
    <testsuite name="nxj" tests="3" skipped="0" errors="0" failures="1">
        <testcase name="a::b::tests::deep" classname="nxj" time="0.010"/>
        <testcase name="tests::passes" classname="nxj" time="0.009"/>
        <testcase name="tests::fails" classname="nxj" time="0.094">
            <failure message="thread &apos;tests::fails&apos; panicked" type="test failure with exit code 101">assertion failed</failure>
            <system-out>running 1 test</system-out>
        </testcase>
    </testsuite>
    <testsuite name="nxj::foo" tests="1" skipped="0" errors="0" failures="0">
        <testcase name="m::in_mod" classname="nxj::foo" time="0.005"/>
    </testsuite>
    <testsuite name="nxj::bin/tool" tests="1" skipped="0" errors="0" failures="0">
        <testcase name="flaky" classname="nxj::bin/tool" time="0.005">
            <flakyFailure message="first try failed" type="test failure">boom</flakyFailure>
        </testcase>
    </testsuite>
</testsuites>
"#;

    #[test]
    fn reads_nextest_junit() {
        let results = parse(REPORT).expect("parses");
        let status = |suite: &str, name: &str| {
            results
                .cases
                .get(&(suite.to_owned(), name.to_owned()))
                .copied()
        };
        assert_eq!(results.cases.len(), 5);
        assert_eq!(status("nxj", "a::b::tests::deep"), Some(Status::Passed));
        assert_eq!(status("nxj", "tests::fails"), Some(Status::Failed));
        assert_eq!(status("nxj::foo", "m::in_mod"), Some(Status::Passed));
        assert_eq!(
            status("nxj::bin/tool", "flaky"),
            Some(Status::Passed),
            "passed on retry"
        );
    }

    #[test]
    fn rejects_what_is_not_junit() {
        assert!(matches!(parse("<html></html>"), Err(Error::NotJunit)));
        assert!(parse("<testsuites><testsuite name=\"x\"><testcase").is_err());
        assert!(matches!(
            parse("<testsuites><testcase name=\"loose\"/></testsuites>"),
            Err(Error::OutsideSuite(name)) if name == "loose"
        ));
        assert_eq!(
            parse("<testsuites><testsuite><testcase/></testsuite></testsuites>")
                .map(|_| ())
                .map_err(|e| e.to_string()),
            Err("<testsuite> without a `name`".to_owned())
        );
    }
}
