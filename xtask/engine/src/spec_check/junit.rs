//! Reads nextest's JUnit report: one `<testsuite name="BINARY-ID">` per test binary, one
//! `<testcase name="module::fn">` per test that ran. A `<failure>` or `<error>` child means it
//! failed, `<skipped>` that it was skipped; ignored tests are absent.

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

/// Every test case of a run, keyed by (suite, test name).
#[derive(Debug, Default)]
pub struct Results {
    /// Test cases by (nextest binary id, test name).
    pub cases: BTreeMap<(String, String), Status>,
}

/// Parses the JUnit file at `path`.
pub fn read(tree: &dyn Tree, path: &Path) -> Result<Results, String> {
    let text = tree
        .read(path)
        .map_err(|err| format!("cannot read: {err}"))?;
    parse(&text)
}

fn parse(text: &str) -> Result<Results, String> {
    let mut reader = quick_xml::Reader::from_str(text);
    let mut results = Results::default();
    let mut suite: Option<String> = None;
    let mut case: Option<(String, Status)> = None;
    let mut saw_suites = false;
    loop {
        let event = reader
            .read_event()
            .map_err(|err| format!("not valid XML at byte {}: {err}", reader.buffer_position()))?;
        match event {
            Event::Start(tag) => match tag.name().as_ref() {
                b"testsuites" => saw_suites = true,
                b"testsuite" => suite = Some(attribute(&tag, b"name")?),
                b"testcase" => case = Some((attribute(&tag, b"name")?, Status::Passed)),
                other => mark(&mut case, other),
            },
            Event::Empty(tag) => match tag.name().as_ref() {
                b"testcase" => {
                    let name = attribute(&tag, b"name")?;
                    record(&mut results, suite.as_deref(), name, Status::Passed)?;
                }
                other => mark(&mut case, other),
            },
            Event::End(tag) => match tag.name().as_ref() {
                b"testcase" => {
                    if let Some((name, status)) = case.take() {
                        record(&mut results, suite.as_deref(), name, status)?;
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
        return Err("no <testsuites> element: not a JUnit report".to_owned());
    }
    Ok(results)
}

/// A child element of a test case that decides its status.
fn mark(case: &mut Option<(String, Status)>, element: &[u8]) {
    let Some((_, status)) = case else {
        return;
    };
    let seen = match element {
        b"failure" | b"error" => Status::Failed,
        b"skipped" => Status::Skipped,
        _ => return,
    };
    *status = (*status).max(seen);
}

fn record(
    results: &mut Results,
    suite: Option<&str>,
    name: String,
    status: Status,
) -> Result<(), String> {
    let suite = suite.ok_or_else(|| format!("test case `{name}` outside a <testsuite>"))?;
    let entry = results
        .cases
        .entry((suite.to_owned(), name))
        .or_insert(status);
    *entry = (*entry).max(status);
    Ok(())
}

fn attribute(tag: &BytesStart<'_>, key: &[u8]) -> Result<String, String> {
    let element = String::from_utf8_lossy(tag.name().as_ref()).into_owned();
    let attr = tag
        .try_get_attribute(key)
        .map_err(|err| format!("bad attribute on <{element}>: {err}"))?
        .ok_or_else(|| format!("<{element}> without a `{}`", String::from_utf8_lossy(key)))?;
    attr.unescape_value()
        .map(|v| v.into_owned())
        .map_err(|err| format!("bad attribute on <{element}>: {err}"))
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
        assert!(parse("<html></html>").is_err());
        assert!(parse("<testsuites><testsuite name=\"x\"><testcase").is_err());
    }
}
