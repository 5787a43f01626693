//! Test-backed verification: a rule counts as verified only if a test carrying its `verify`
//! annotation ran and passed in this run and did not record a skip.
//!
//! Each `verify` annotation is attributed to the function it precedes (or, at the head of a file
//! or module, to every test in it, all of which must pass when they ran); a function is looked up
//! among the JUnit test cases by its binary and full module path, or — only when the file's place
//! in the crate is not conventional, so its binary cannot be named — by a unique function name
//! within its package.

use std::fmt::Write as _;
use std::path::Path;

use crate::model::tree::Tree;
use std::time::SystemTime;

use super::coverage::{Analysis, Site};
use super::crate_layout::{self, executable_of_suite};
use super::evidence::Staleness;
use super::foreign;
use super::junit::{self, Results, Status};
use super::problem::{Kind, Problem};
use super::rust_layout::{AttributedFn, RustLayout, TestScope};
use super::skips::Ledger;
use super::sources::ParsedFiles;

/// A run's test results and skip ledger.
pub struct Evidence {
    results: Results,
    ledger: Ledger,
    /// When the results file was last written.
    pub written: SystemTime,
    /// How many test cases the results hold.
    pub cases: usize,
    /// Whether a skip ledger was found.
    pub has_ledger: bool,
    /// The first results file and the SHA-256 of the results' contents: what
    /// [`Evidence::fingerprint`] keys the run's record by.
    run: Option<(std::path::PathBuf, String)>,
    /// The rules' fingerprints when the tests ran, once [`Evidence::fingerprint`] read them.
    pub prints: Option<super::evidence::Prints>,
}

impl Evidence {
    /// Reads the JUnit files (one per runner, say) as one run, and (optionally) the skip
    /// ledger. Any being unusable is fatal: a run that cannot be read is never judged as an
    /// empty one.
    // i[impl spec-check.fatal]
    // i[impl spec-check.test-backed.runners+2]
    pub fn load(tree: &dyn Tree, results: &[&Path], skips: Option<&Path>) -> Result<Self, Problem> {
        let fatal = |what: &str, path: &Path, err: String| {
            Problem::new(Kind::TestResults, format!("cannot use the {what}: {err}"))
                .in_file(path.display().to_string())
        };
        let mut run: Option<(Results, SystemTime)> = None;
        let mut texts = Vec::new();
        for &path in results {
            let written = tree
                .modified(path)
                .map_err(|err| fatal("test results", path, format!("cannot read: {err}")))?;
            let text = tree
                .read(path)
                .map_err(|err| fatal("test results", path, junit::Error::Read(err).to_string()))?;
            let parsed =
                junit::parse(&text).map_err(|err| fatal("test results", path, err.to_string()))?;
            texts.push(text);
            // jest-junit names a test's file only with `addFileAttribute`; without it a title
            // would match same-titled tests of every file.
            if parsed.runner == junit::Runner::Jest
                && parsed.detail.iter().any(|c| c.file.is_none())
            {
                let err = "a jest-junit report without `file` attributes cannot say which file a \
                           test is in: run jest-junit with addFileAttribute=\"true\"";
                return Err(fatal("test results", path, err.to_owned()));
            }
            run = Some(match run {
                None => (parsed, written),
                // The run is as old as its oldest report, so a file changed since is outdated.
                Some((mut merged, oldest)) => {
                    merged.merge(parsed);
                    (merged, oldest.min(written))
                }
            });
        }
        let (parsed, written) = run.unwrap_or_else(|| (Results::default(), SystemTime::UNIX_EPOCH));
        let (ledger, has_ledger) = match skips {
            None => (Ledger::default(), false),
            Some(path) => match Ledger::read(tree, path) {
                Ok(Some(ledger)) => (ledger, true),
                Ok(None) => (Ledger::default(), false),
                Err(err) => return Err(fatal("skip ledger", path, err.to_string())),
            },
        };
        Ok(Self {
            cases: parsed.statuses().len(),
            results: parsed,
            ledger,
            written,
            has_ledger,
            run: results.first().map(|first| {
                let key = super::evidence::key(texts.iter().map(String::as_str));
                (first.to_path_buf(), key)
            }),
            prints: None,
        })
    }

    /// Reads the rules' fingerprints when the tests ran ([`super::evidence::take`]): the record
    /// the run's producer wrote beside the results; never made here.
    // i[impl spec-check.test-backed.fingerprint+2]
    pub fn fingerprint(&mut self, source: &dyn Tree) {
        if let Some((first, key)) = &self.run {
            self.prints = Some(super::evidence::take(source, first, key));
        }
    }

    /// Why the run has no usable evidence record, when it has none (a note for the report).
    pub fn record_note(&self) -> Option<&str> {
        self.prints.as_ref()?.note.as_deref()
    }

    /// When the results were written: the record's time when there is one, else the results
    /// file's modification time.
    pub fn written_shown(&self) -> String {
        self.prints
            .as_ref()
            .and_then(|p| p.record.as_ref())
            .map_or_else(
                || crate::model::timestamp::utc(self.written),
                |record| record.written.clone(),
            )
    }

    /// Why `rule`'s evidence is stale, when it is ([`super::evidence::Prints::stale`]).
    pub fn stale(&self, tree: &super::Tree, rule: &super::rules::Rule) -> Option<Staleness> {
        self.prints.as_ref()?.stale(tree, rule)
    }

    /// The runners that wrote the results, the first report's first.
    pub fn runners(&self) -> Vec<junit::Runner> {
        self.results.runners()
    }
}

/// What became of one verifying test.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Ran and passed, and recorded no skip.
    Passed,
    /// Reported skipped, or passed after recording a skip (why).
    Skipped(String),
    /// Failed or errored.
    Failed,
    /// Not in the results: ignored or not run.
    Absent,
    /// The function matches several test cases (their names).
    Ambiguous(Vec<String>),
    /// No test function follows the annotation.
    NoFunction,
    /// Passed, but its rule's evidence changed since the tests ran (why, e.g. `impl changed
    /// since the tests ran`): no pass.
    Stale(String),
}

impl Outcome {
    /// A pass turned into the stale evidence it is, when its rule's evidence is `stale`; any
    /// other fate kept. The gate and the trace both judge a pass through this.
    // i[impl spec-check.test-backed.fingerprint+2]
    pub fn staled(&mut self, stale: &Staleness) {
        if *self == Outcome::Passed {
            *self = Outcome::Stale(stale.describe());
        }
    }

    /// The fate in words, e.g. `skipped (needs docker: ...)`.
    pub fn describe(&self) -> String {
        match self {
            Outcome::Passed => "passed".to_owned(),
            Outcome::Skipped(why) => format!("skipped ({why})"),
            Outcome::Failed => "failed".to_owned(),
            Outcome::Absent => "ignored or not run (absent from the results)".to_owned(),
            Outcome::Ambiguous(names) => {
                format!(
                    "ambiguous: matches {} test cases ({})",
                    names.len(),
                    names.join(", ")
                )
            }
            Outcome::NoFunction => "no test function follows the annotation".to_owned(),
            Outcome::Stale(why) => format!("stale (passed, but {why})"),
        }
    }

    fn category(&self) -> &'static str {
        match self {
            Outcome::Passed => "passed",
            Outcome::Skipped(_) => "skipped",
            Outcome::Failed => "failed",
            Outcome::Absent => "ignored or not run",
            Outcome::Ambiguous(_) => "ambiguous",
            Outcome::NoFunction => "not attached to a test",
            Outcome::Stale(_) => "stale",
        }
    }
}

/// What re-judging one analysis against a run found.
pub struct Judged {
    /// Rules judged by test results (the others keep their annotations' verdict).
    pub judged: usize,
    /// Of those, rules with a verifying test that passed.
    pub tested: usize,
    /// One problem per judged rule none of whose tests passed, when its level demands a test.
    pub problems: Vec<Problem>,
    /// The markers of the judged rules none of whose tests passed, whatever their level.
    pub untested: Vec<String>,
}

/// Re-judges `analysis`'s rules (of `spec`, read from `tree`) against the run: how many have a
/// passing test, and a problem for each rule none of whose tests passed, or whose passes are
/// stale evidence. The analysis is only read, so one tree serves several reports.
// i[impl spec-check.test-backed]
// i[impl spec-check.levels]
// i[impl spec-check.test-backed.fingerprint+2]
pub fn apply(
    tree: &dyn Tree,
    spec: &super::Tree,
    analysis: &Analysis,
    evidence: &Evidence,
    crates: &[String],
) -> Judged {
    let parsed = &spec.parsed;
    let mut tested = 0;
    let mut judged = 0;
    let mut untested = Vec::new();
    let mut problems = Vec::new();
    for coverage in &analysis.rules {
        if coverage.verify_sites.is_empty() {
            continue; // already a missing-verify problem
        }
        // A one-crate run judges only the rules that crate's tests verify.
        let in_scope = crates.is_empty()
            || coverage.verify_sites.iter().any(|site| {
                crate_layout::package_of(tree, &site.path)
                    .is_some_and(|(package, _)| crates.contains(&package))
            });
        if !in_scope {
            continue;
        }
        judged += 1;
        let mut outcomes: Vec<(String, &Site, Outcome)> = coverage
            .verify_sites
            .iter()
            .map(|site| {
                let (name, outcome) = judge(tree, site, evidence, parsed);
                (name, site, outcome)
            })
            .collect();
        let rule = &coverage.rule;
        // A pass counts only while the rule's evidence is the one the tests ran on.
        let passed = outcomes.iter().any(|(_, _, o)| *o == Outcome::Passed);
        let stale = if passed {
            evidence.stale(spec, rule)
        } else {
            None
        };
        if passed && stale.is_none() {
            tested += 1;
            continue;
        }
        untested.push(rule.marker());
        // Counted either way; a problem only when the rule's level demands a passing test.
        if !super::levels::Level::of(rule).demands().tested {
            continue;
        }
        problems.push(match stale {
            Some(stale) => {
                stale_passes(&mut outcomes, &stale);
                stale_problem(tree, analysis, rule, evidence, &stale, &outcomes)
            }
            None => not_verified(analysis, rule, &outcomes),
        });
    }
    Judged {
        untested,
        judged,
        tested,
        problems,
    }
}

/// Each pass in `outcomes` turned into the stale evidence it is.
fn stale_passes<T>(outcomes: &mut [(String, T, Outcome)], stale: &Staleness) {
    for (_, _, outcome) in outcomes.iter_mut() {
        outcome.staled(stale);
    }
}

/// `rule r[x] has stale test evidence: impl changed since the tests ran (…)`, naming the tests
/// that passed on the older tree and the command that reruns them.
fn stale_problem(
    tree: &dyn Tree,
    analysis: &Analysis,
    rule: &super::rules::Rule,
    evidence: &Evidence,
    stale: &Staleness,
    outcomes: &[(String, &Site, Outcome)],
) -> Problem {
    let mut packages: Vec<String> = outcomes
        .iter()
        .filter(|(_, _, o)| matches!(o, Outcome::Stale(_)))
        .filter_map(|(_, site, _)| crate_layout::package_of(tree, &site.path).map(|(p, _)| p))
        .collect();
    packages.sort();
    packages.dedup();
    let rerun = if packages.is_empty() {
        "`cargo xtask test`".to_owned()
    } else {
        let flags: Vec<String> = packages.iter().map(|p| format!("-p {p}")).collect();
        format!("`cargo xtask test -- {}`", flags.join(" "))
    };
    let tests: Vec<String> = outcomes
        .iter()
        .filter(|(_, _, o)| matches!(o, Outcome::Stale(_)))
        .map(|(name, site, _)| format!("`{name}` ({}:{})", site.file, site.line))
        .collect();
    Problem::new(
        Kind::EvidenceStale,
        format!(
            "rule {} has stale test evidence: {} (results written {}): {} passed on the \
             older tree; rerun {rerun}",
            rule.marker(),
            stale.describe(),
            evidence.written_shown(),
            tests.join(", ")
        ),
    )
    .at(&rule.file, rule.line)
    .spec(&analysis.spec)
    .rule(rule.marker())
}

/// `rule r[x] is not verified by a passing test (…)`, with each test's fate.
fn not_verified(
    analysis: &Analysis,
    rule: &super::rules::Rule,
    outcomes: &[(String, &Site, Outcome)],
) -> Problem {
    let mut categories: Vec<&str> = outcomes.iter().map(|(_, _, o)| o.category()).collect();
    categories.dedup();
    let headline = match categories.as_slice() {
        [one] if outcomes.len() > 1 => format!("all {} of its tests: {one}", outcomes.len()),
        _ => "no test passed".to_owned(),
    };
    let mut message = format!(
        "rule {} is not verified by a passing test ({headline}):",
        rule.marker()
    );
    for (name, site, outcome) in outcomes {
        let _ = write!(
            message,
            " `{name}` ({}:{}) {};",
            site.file,
            site.line,
            outcome.describe()
        );
    }
    message.pop();
    Problem::new(Kind::NotVerifiedByTest, message)
        .at(&rule.file, rule.line)
        .spec(&analysis.spec)
        .rule(rule.marker())
}

/// The test function a `verify` site precedes, placed in its test binary.
pub struct TestFn {
    /// The function's name.
    pub function: String,
    /// A line of the function's item in its file.
    pub line: usize,
    /// Its test binary, when cargo's conventional layout says which.
    pub target: Option<crate_layout::TestTarget>,
    /// Its libtest name: module path and function, e.g. `tests::delay_doubles`.
    pub full_name: String,
    /// How nextest prints it: `BINARY-ID test::path` (the bare path when the binary is unknown).
    pub shown: String,
}

/// Finds the test function a `verify` site precedes, if any.
pub fn test_fn(tree: &dyn Tree, site: &Site, parsed: &ParsedFiles) -> Option<TestFn> {
    let function = layout_of(site, parsed).and_then(|layout| layout.function_after(site.line))?;
    Some(placed(tree, site, parsed, function))
}

fn layout_of<'a>(site: &Site, parsed: &'a ParsedFiles) -> Option<&'a RustLayout> {
    parsed.get(&site.path).and_then(|f| f.layout.as_ref())
}

/// `function` (of the file at `site`) placed in its test binary.
fn placed(tree: &dyn Tree, site: &Site, parsed: &ParsedFiles, function: AttributedFn) -> TestFn {
    let target = parsed.locate(tree, &site.path);
    let mut full_path = target
        .as_ref()
        .map(|t| t.modules.clone())
        .unwrap_or_default();
    full_path.extend(function.modules.iter().cloned());
    full_path.push(function.name.clone());
    let full_name = full_path.join("::");
    // Name tests the way nextest prints them: `BINARY-ID test::path`.
    let shown = match &target {
        Some(t) => format!("{} {full_name}", t.suite),
        None => full_name.clone(),
    };
    TestFn {
        function: function.name,
        line: function.line,
        target,
        full_name,
        shown,
    }
}

/// Finds the test a `verify` site belongs to and how it ended. A site heading a file or module
/// stands for that scope's tests.
pub fn judge(
    tree: &dyn Tree,
    site: &Site,
    evidence: &Evidence,
    parsed: &ParsedFiles,
) -> (String, Outcome) {
    let layout = layout_of(site, parsed);
    if let Some(function) = layout.and_then(|layout| layout.function_after(site.line)) {
        return lookup(tree, site, evidence, placed(tree, site, parsed, function));
    }
    match layout.and_then(|layout| layout.scope_headed_at(site.line)) {
        Some(scope) => judge_scope(tree, site, evidence, parsed, scope),
        None => match foreign_test(site, parsed) {
            Some(test) => lookup_foreign(tree, site, evidence, parsed, &test),
            None => ("?".to_owned(), Outcome::NoFunction),
        },
    }
}

/// The test of another language the `verify` site precedes.
fn foreign_test(site: &Site, parsed: &ParsedFiles) -> Option<foreign::ForeignTest> {
    let file = parsed.get(&site.path)?;
    foreign::test_after(&site.file, &file.content, site.line)
}

/// A test of another language, shown as `RUNNER FILE::NAME`, and how it ended.
fn lookup_foreign(
    tree: &dyn Tree,
    site: &Site,
    evidence: &Evidence,
    parsed: &ParsedFiles,
    test: &foreign::ForeignTest,
) -> (String, Outcome) {
    let shown = |runner: junit::Runner| format!("{} {}::{}", runner.name(), site.file, test.name);
    if test.skipped {
        let why = "declared with todo, skip, xit or xtest: it never runs";
        return (
            shown(evidence.results.runner),
            Outcome::Skipped(why.to_owned()),
        );
    }
    let context = foreign::Context {
        tree,
        files: parsed.values().map(|file| file.relative.as_str()).collect(),
    };
    // Shown with the runner whose case judged it; with none, the run's first runner.
    let Some((runner, status)) =
        foreign::status(&evidence.results.detail, &context, &site.file, test)
    else {
        return (shown(evidence.results.runner), Outcome::Absent);
    };
    let outcome = match status {
        Err(names) => Outcome::Ambiguous(names),
        Ok(Status::Passed) => Outcome::Passed,
        Ok(Status::Skipped) => Outcome::Skipped("reported skipped".to_owned()),
        Ok(Status::Failed) => Outcome::Failed,
    };
    (shown(runner), outcome)
}

/// A scope's verdict: passed when at least one of its tests ran and passed and none failed or
/// recorded a skip (ignored tests are absent from the results and do not count); otherwise the
/// first failed, then skipped test names the fate.
// i[impl spec-check.placement.file-head]
fn judge_scope(
    tree: &dyn Tree,
    site: &Site,
    evidence: &Evidence,
    parsed: &ParsedFiles,
    scope: TestScope,
) -> (String, Outcome) {
    let shown = scope_shown(tree, site, parsed, &scope);
    if scope.tests.is_empty() {
        return (shown, Outcome::NoFunction);
    }
    let outcomes: Vec<(String, Outcome)> = scope
        .tests
        .into_iter()
        .map(|function| lookup(tree, site, evidence, placed(tree, site, parsed, function)))
        .collect();
    let first = |wanted: fn(&Outcome) -> bool| outcomes.iter().find(|(_, o)| wanted(o)).cloned();
    first(|o| *o == Outcome::Failed)
        .or_else(|| first(|o| matches!(o, Outcome::Skipped(_))))
        .or_else(|| first(|o| *o == Outcome::Passed).map(|(_, o)| (shown.clone(), o)))
        .or_else(|| first(|o| matches!(o, Outcome::Ambiguous(_))))
        .unwrap_or((shown, Outcome::Absent))
}

/// How nextest would name a scope's tests as a pattern: `BINARY-ID module::path::*`.
fn scope_shown(tree: &dyn Tree, site: &Site, parsed: &ParsedFiles, scope: &TestScope) -> String {
    let target = parsed.locate(tree, &site.path);
    let mut path = target
        .as_ref()
        .map(|t| t.modules.clone())
        .unwrap_or_default();
    path.extend(scope.modules.iter().cloned());
    path.push("*".to_owned());
    match &target {
        Some(t) => format!("{} {}", t.suite, path.join("::")),
        None => path.join("::"),
    }
}

/// The tests of the file or module a `verify` site heads (none when it heads none), placed in
/// their test binary.
pub fn scope_tests(tree: &dyn Tree, site: &Site, parsed: &ParsedFiles) -> Vec<TestFn> {
    layout_of(site, parsed)
        .and_then(|layout| layout.scope_headed_at(site.line))
        .map(|scope| {
            scope
                .tests
                .into_iter()
                .map(|function| placed(tree, site, parsed, function))
                .collect()
        })
        .unwrap_or_default()
}

/// The tests a `verify` site stands for, as shown: its test function, or the pattern of the
/// file's or module's tests when it heads one that holds a test.
pub fn tests_shown(tree: &dyn Tree, site: &Site, parsed: &ParsedFiles) -> Option<String> {
    if let Some(test) = test_fn(tree, site, parsed) {
        return Some(test.shown);
    }
    let Some(layout) = layout_of(site, parsed) else {
        return foreign_test(site, parsed).map(|test| format!("{}::{}", site.file, test.name));
    };
    let scope = layout.scope_headed_at(site.line)?;
    (!scope.tests.is_empty()).then(|| scope_shown(tree, site, parsed, &scope))
}

/// Looks `test` up in the results and says how it ended.
fn lookup(tree: &dyn Tree, site: &Site, evidence: &Evidence, test: TestFn) -> (String, Outcome) {
    let TestFn {
        function,
        target,
        full_name,
        shown,
        ..
    } = test;

    let exact = target.as_ref().and_then(|t| {
        evidence
            .results
            .cases
            .get_key_value(&(t.suite.clone(), full_name.clone()))
    });
    // i[impl spec-check.test-identity]
    let found = match (exact, &target) {
        (Some(found), _) => found,
        // The binary is known and the test is not in it: absent, never another test's result.
        (None, Some(_)) => return (shown, Outcome::Absent),
        (None, None) => {
            // Fallback: a unique test function of that name within the package.
            let Some((package, _)) = crate_layout::package_of(tree, &site.path) else {
                return (shown, Outcome::Absent);
            };
            let suffix = format!("::{function}");
            let candidates: Vec<_> = evidence
                .results
                .cases
                .iter()
                .filter(|((suite, name), _)| {
                    (suite == &package || suite.starts_with(&format!("{package}::")))
                        && (name == &function || name.ends_with(&suffix))
                })
                .collect();
            match candidates.as_slice() {
                [] => return (shown, Outcome::Absent),
                [one] => *one,
                many => {
                    let names = many
                        .iter()
                        .map(|((suite, name), _)| format!("{suite} {name}"))
                        .collect();
                    return (shown, Outcome::Ambiguous(names));
                }
            }
        }
    };
    let ((suite, name), status) = found;
    let outcome = match status {
        Status::Failed => Outcome::Failed,
        Status::Skipped => Outcome::Skipped("reported skipped".to_owned()),
        Status::Passed => match evidence.ledger.find(&executable_of_suite(suite), name) {
            Some(skip) => {
                let service = skip.service.as_deref().unwrap_or("a service");
                let reason = skip.reason.as_deref().unwrap_or("no reason recorded");
                Outcome::Skipped(format!("needs {service}: {reason}"))
            }
            None => Outcome::Passed,
        },
    };
    (format!("{suite} {name}"), outcome)
}
