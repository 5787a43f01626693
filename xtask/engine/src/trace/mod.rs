//! `cargo xtask trace FINDING` — walks an audit finding to the rules that close it, the code that
//! implements them, the tests that verify them, and (given a test run) what became of those tests.
//!
//! One file per step:
//!
//! 1. [`crate::model::findings`] parses `docs/audit/findings.md` (the model the gate shares).
//! 2. The spec gate reads the tree ([`crate::spec_check::read_tree`]: config, rules, references),
//!    so trace and gate agree on every rule and annotation.
//! 3. [`results`] picks the test run (`--results`, or `target/nextest/ci/junit.xml` when present)
//!    and reads it with the gate's test-backed evidence.
//! 4. [`rule_trace`] follows each named rule to its definition, `impl` and `verify` sites and tests.
//! 5. [`verdict`] judges the finding: closed, open or regressed.
//! 6. [`report`] prints it.
//!
//! Exit codes: for one finding, 0 when it is closed and 1 when it is open or regressed; with
//! `--all`, 0 unless a finding is regressed (open findings are expected while their crates are
//! unwritten), 1 if one is; 2 for a usage error — an unknown finding id, a malformed findings
//! file, an unusable tracey config or results file.

mod error;
pub mod report;
pub mod results;
pub mod rule_report;
pub mod rule_trace;
pub mod verdict;

use std::path::Path;

use crate::model::tree::Tree as Source;

use crate::spec_check::problem::Problem;
use crate::spec_check::{self, config};

use crate::model::findings::{self, Finding};
use crate::model::paths;

pub use self::error::Error;

/// Everything a report of the whole tree needs, read the way the trace reads it.
pub struct Everything {
    /// The tree.
    pub tree: spec_check::Tree,
    /// Each rule, traced (in spec order).
    pub rules: Vec<rule_report::RuleReport>,
    /// Each finding with its verdict word and reasons.
    pub findings: Vec<(Finding, &'static str, Vec<String>)>,
    /// Which results were used, or `None` for annotations only.
    pub results: Option<String>,
}

/// Traces every rule and every finding of `source`, whose tree is already [`spec_check::read`].
pub fn everything(
    source: &dyn Source,
    read: Result<(config::Loaded, spec_check::Tree), Problem>,
    results: &[&Path],
    skips: Option<&Path>,
    no_results: bool,
) -> Result<Everything, Error> {
    let tree = usable(read)?;
    // A tree without findings has nothing to list; a broken findings file is an error.
    let all = if source.exists(&source.root().join(paths::of(source).findings)) {
        findings::load(source)?
    } else {
        Vec::new()
    };
    let run = results::load(source, results, skips, no_results)?;
    let evidence = run.as_ref().map(|r| (&r.evidence, r.source.as_str()));
    let closers = rule_report::Closers::of(&all);
    // Each rule's trace reads only the tree: on the parse pool, in spec order.
    let rules = spec_check::pool::map(tree.rules().iter().collect(), |rule| {
        rule_report::trace_closing(source, &tree, &all, &closers, &rule.marker(), evidence)
    })
    .into_iter()
    .collect::<Result<Vec<_>, _>>()?;
    let findings = traced(
        source,
        &tree,
        all.iter().collect(),
        evidence.map(|(e, _)| e),
    )
    .into_iter()
    .map(|t| (t.finding, t.judgement.verdict.word(), t.judgement.reasons))
    .collect();
    Ok(Everything {
        tree,
        rules,
        findings,
        results: run.map(|r| r.source),
    })
}

/// Each of `findings` traced to its rules in `tree` and judged (by a test run's `evidence` when
/// there is one), in the order given; the findings are traced on the pool, each independently
/// of the others.
// i[impl trace.exit-code]
pub fn traced(
    source: &dyn Source,
    tree: &spec_check::Tree,
    findings: Vec<&Finding>,
    evidence: Option<&spec_check::test_backed::Evidence>,
) -> Vec<report::Traced> {
    spec_check::pool::map(findings, |finding| {
        let rules: Vec<_> = finding
            .rules
            .iter()
            .map(|named| rule_trace::trace(source, tree, named, evidence))
            .collect();
        let judgement = verdict::judge(&rules, evidence.is_some());
        report::Traced {
            finding: finding.clone(),
            rules,
            judgement,
        }
    })
}

/// The tree of `read` when the trace can judge it: a config or spec with problems of its own is
/// an error.
pub fn usable(
    read: Result<(config::Loaded, spec_check::Tree), Problem>,
) -> Result<spec_check::Tree, Error> {
    let (config, tree) = read.map_err(|problem| Error::Unreadable(Box::new(problem)))?;
    // i[impl trace.broken-spec]
    let broken: Vec<Problem> = config
        .problems
        .iter()
        .chain(&tree.problems)
        .cloned()
        .collect();
    if !broken.is_empty() {
        return Err(Error::Broken(broken));
    }
    Ok(tree)
}
