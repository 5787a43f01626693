//! Follows one rule a finding names into the tree: its definition in the spec (file, line, first
//! line of text), its `impl` sites, its `verify` sites with the test function each precedes, and —
//! given a run's results — what became of each test. Everything comes from the spec gate's own
//! reading of the tree, so trace and gate never disagree about what is annotated where.

use crate::spec_check::Tree;
use crate::spec_check::coverage::Site;
use crate::spec_check::foreign;
use crate::spec_check::rules::Rule;
use crate::spec_check::suggest;
use crate::spec_check::test_backed::{self, Evidence, Outcome};

use crate::model::findings::NamedRule;
use crate::model::tree::Tree as Source;

/// A `verify` site and the test behind it.
pub struct Verify {
    /// Where the annotation is.
    pub site: Site,
    /// The test function as nextest names it, if one follows the annotation.
    pub test: Option<String>,
    /// With results: what became of it.
    pub fate: Option<Outcome>,
}

/// A rule found in the spec, with its references.
pub struct Defined {
    /// The definition.
    pub rule: Rule,
    /// The first line of its text.
    pub first_line: String,
    /// Whether the text goes on after that line.
    pub more: bool,
    /// `impl` references (stale ones flagged).
    pub impls: Vec<Site>,
    /// `verify` references (stale ones flagged) with their tests.
    pub verifies: Vec<Verify>,
}

/// What the spec says about a rule a finding names.
pub enum RuleState {
    /// No spec defines the id (a rule planned for a crate not written yet, or a typo).
    NotInSpec {
        /// Ids of similar spelling that do exist.
        similar: Vec<String>,
    },
    /// The spec defines another version of it.
    OtherVersion(Rule),
    /// The spec defines it under another prefix.
    OtherPrefix(Rule),
    /// The spec defines it as named.
    Defined(Box<Defined>),
}

/// A named rule and its state.
pub struct RuleTrace {
    /// As the finding names it.
    pub named: NamedRule,
    /// What the tree says.
    pub state: RuleState,
}

/// Follows `named` into `tree`.
// i[impl trace.walk]
pub fn trace(
    source: &dyn Source,
    tree: &Tree,
    named: &NamedRule,
    evidence: Option<&Evidence>,
) -> RuleTrace {
    let state = match tree.rule(&named.id.base) {
        None => RuleState::NotInSpec {
            similar: suggest::similar(&named.id, tree.rules().iter().map(|r| &r.id))
                .into_iter()
                .filter_map(|id| tree.rules().iter().find(|r| &r.id == id))
                .map(Rule::marker)
                .collect(),
        },
        Some(rule) if rule.prefix != named.prefix => RuleState::OtherPrefix(rule.clone()),
        Some(rule) if rule.id != named.id => RuleState::OtherVersion(rule.clone()),
        Some(rule) => RuleState::Defined(Box::new(defined(source, tree, rule, evidence))),
    };
    RuleTrace {
        named: named.clone(),
        state,
    }
}

fn defined(source: &dyn Source, tree: &Tree, rule: &Rule, evidence: Option<&Evidence>) -> Defined {
    let (first_line, more) = first_line(rule);
    let mut impls: Vec<Site> = Vec::new();
    let mut verify_sites: Vec<Site> = Vec::new();
    // A spec with several impls analyses the same rule once per impl; a file two impls share
    // yields the same site twice.
    for coverage in tree.coverage_of(rule) {
        impls.extend(coverage.impl_sites.iter().cloned());
        verify_sites.extend(coverage.verify_sites.iter().cloned());
    }
    for sites in [&mut impls, &mut verify_sites] {
        sites.sort_by(|a, b| (&a.file, a.line).cmp(&(&b.file, b.line)));
        sites.dedup_by(|a, b| a.file == b.file && a.line == b.line);
    }
    let verifies = verify_sites
        .into_iter()
        .map(|site| {
            let mut test = test_backed::tests_shown(source, &site, &tree.parsed);
            let judged = evidence
                .filter(|_| !site.stale)
                .map(|evidence| test_backed::judge(source, &site, evidence, &tree.parsed));
            // A test of another language is named with the runner that judged it (when one
            // follows the annotation at all).
            if let Some((shown, _)) = judged.as_ref().filter(|(_, fate)| {
                foreign::Language::of(&site.file).is_some() && *fate != Outcome::NoFunction
            }) {
                test = Some(shown.clone());
            }
            let fate = judged.map(|(_, fate)| fate);
            Verify { site, test, fate }
        })
        .collect();
    let verifies = stale_passes(tree, rule, evidence, verifies);
    Defined {
        rule: rule.clone(),
        first_line,
        more,
        impls,
        verifies,
    }
}

/// `verifies` with each pass turned stale when the rule's evidence changed since the tests ran
/// ([`Evidence::stale`]), as the gate judges it.
// i[impl spec-check.test-backed.fingerprint+2]
fn stale_passes(
    tree: &Tree,
    rule: &Rule,
    evidence: Option<&Evidence>,
    mut verifies: Vec<Verify>,
) -> Vec<Verify> {
    let passed = verifies.iter().any(|v| v.fate == Some(Outcome::Passed));
    let Some(stale) = evidence
        .filter(|_| passed)
        .and_then(|e| e.stale(tree, rule))
    else {
        return verifies;
    };
    for fate in verifies.iter_mut().filter_map(|v| v.fate.as_mut()) {
        fate.staled(&stale);
    }
    verifies
}

/// The rule's first line of text (after the marker, or the next line of the blockquote), and
/// whether more follows; lazy continuation lines count, as marq reads them.
fn first_line(rule: &Rule) -> (String, bool) {
    let mut lines = rule.text_lines();
    let first = lines.next().unwrap_or_default().to_owned();
    (first, lines.next().is_some())
}
