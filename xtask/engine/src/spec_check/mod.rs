//! `cargo xtask spec-check` — the maintainers' traceability gate.
//!
//! One process, no daemon. The pipeline, one file per step:
//!
//! 1. [`config`] reads `.config/tracey/config.styx` with tracey-config's types and the styx parser
//!    tracey 1.3.0 uses (facet-styx); a broken config is a problem, never an empty result.
//! 2. [`rules`] extracts the rule definitions from each spec's markdown with marq, the crate tracey
//!    1.3.0 renders specs with.
//! 3. [`sources`] walks each impl's `include` and `test_include` exactly as tracey does and extracts
//!    references as tracey-core's tree-sitter lexer does (the `reverse` feature tracey itself
//!    enables): a Rust file's from one parse that also gives its code units ([`rust_read`]), another
//!    language's with tracey-core's own call;
//!    [`read_cache`] keeps what a file's bytes gave, so an unchanged file is not parsed again.
//! 4. [`rust_layout`] knows what tracey does not: which lines sit in `#[cfg(test)]` code, which
//!    test function a `verify` annotation precedes (its test attribute may sit above the
//!    annotation), and which file or module's tests an annotation at its head stands for.
//! 5. [`coverage`] counts per spec like `tracey query status` (total, implemented, verified, stale)
//!    and turns every gap into a [`problem::Problem`].
//! 6. With `--results`, [`test_backed`] reads the run's nextest JUnit ([`junit`]) and skip ledger
//!    ([`skips`]), maps tests to files with [`crate_layout`], and keeps a rule verified only if one of
//!    its tests ran and passed; a `verify` in a Python, Go or script test file is looked up among
//!    pytest's, go-junit-report's, jest's or vitest's cases ([`foreign`]). A pass counts only while
//!    the rule's fingerprint is the one [`evidence`] the run's producer recorded.
//! 7. [`report`] prints the table and the problems as text, JSON or markdown.
//!
//! Beside the pipeline: [`levels`] (what the gate demands of a rule at its level), [`measures`]
//! (each rule's implemented, verified, tested and proven flags, for the review and the ratchet),
//! [`items`] and [`rule_text`] (an annotation's item and a rule's text, normalised as the review
//! compares them) and [`fingerprint`] (recorded proofs judged stale by those hashes).

mod block_on;
mod comment_refs;
pub mod config;
pub mod coverage;
pub mod crate_layout;
pub mod evidence;
mod findings_gate;
pub mod fingerprint;
pub mod foreign;
pub mod freshness;
pub mod items;
pub mod junit;
pub mod levels;
pub mod measures;
pub mod parity;
pub(crate) mod pool;
pub mod problem;
pub mod read_cache;
pub mod report;
pub mod rule_text;
pub mod rules;
pub mod rust_layout;
pub mod rust_read;
pub mod skips;
pub mod sources;
pub mod suggest;
pub mod test_backed;
mod walk;

use std::path::Path;

use self::problem::Problem;
use self::report::Outcome;
use crate::model::tree::Tree as Source;

/// Runs every step on `source` and collects the summary and the problems, judged by the test
/// results in `results` (one JUnit report per runner; none: annotations only); an unusable
/// results file or skip ledger is fatal.
pub fn check(
    source: &dyn Source,
    results: &[&Path],
    skips: Option<&Path>,
    crates: &[String],
) -> Result<Outcome, Problem> {
    check_read(source, &read(source), results, skips, crates)
}

/// Reads `source`'s config and, when it is usable, its tree: what [`check_read`] judges and
/// `cargo xtask spec-report` also traces, so the tree is read and parsed once.
pub fn read(source: &dyn Source) -> Result<(config::Loaded, Tree), Problem> {
    let mut config = config::load(source)?;
    // The engine's own paths (findings, proof summary, …): an unusable table fails the gate
    // rather than quietly reading the defaults.
    if let Err(error) = crate::model::paths::load(source) {
        config
            .problems
            .push(Problem::new(problem::Kind::Config, error.to_string()).in_file("Cargo.toml"));
    }
    let tree = read_tree(source, &config.config);
    Ok((config, tree))
}

/// [`check`] on a tree already [`read`] from `source`; the tree is only borrowed.
pub fn check_read(
    source: &dyn Source,
    read: &Result<(config::Loaded, Tree), Problem>,
    results: &[&Path],
    skips: Option<&Path>,
    crates: &[String],
) -> Result<Outcome, Problem> {
    let root = source.root();
    let mut problems = Vec::new();
    let mut notes = Vec::new();

    // Fatal before anything is judged: a run that cannot be read must not bury its one error
    // under a "not verified" problem per rule.
    let mut evidence = (!results.is_empty())
        .then(|| test_backed::Evidence::load(source, results, skips))
        .transpose()?;
    let mut mode = report::Mode {
        test_backed: evidence.is_some(),
        results: None,
        written: None,
        cases: None,
        skips: None,
        crates: crates.to_vec(),
        judged: None,
    };
    if let Some(evidence) = &evidence {
        let shown_results: Vec<String> = results.iter().map(|path| shown(source, path)).collect();
        mode.results = Some(shown_results.join(", "));
        mode.written = Some(crate::model::timestamp::utc(evidence.written));
        mode.cases = Some(evidence.cases);
        mode.skips = skips
            .filter(|_| evidence.has_ledger)
            .map(|path| shown(source, path));
    }

    let (config, tree) = match read {
        Ok(read) => read,
        Err(problem) => {
            return Ok(Outcome {
                root: root.display().to_string(),
                mode,
                specs: Vec::new(),
                problems: vec![problem.clone()],
                notes,
                planned: Vec::new(),
                untested: Vec::new(),
            });
        }
    };
    problems.extend(config.problems.iter().cloned());
    // The rules' fingerprints when the tests ran: the record the run's producer wrote.
    if let Some(evidence) = &mut evidence {
        evidence.fingerprint(source);
        notes.extend(evidence.record_note().map(str::to_owned));
    }

    let Tree {
        rules,
        analyses,
        parsed,
        problems: tree_problems,
        notes: tree_notes,
        ..
    } = tree;
    problems.extend(tree_problems.iter().cloned());
    notes.extend(tree_notes.iter().cloned());
    let mut specs = Vec::new();

    // A reference whose prefix belongs to no spec is only reported when it uses an explicit verb,
    // so that prose like `a[i]` in a comment never trips the gate.
    // While a spec has no rules its prefix is unknown, and any unclaimed prefix may be its own.
    let known_prefixes: Vec<String> = analyses.iter().filter_map(|a| a.prefix.clone()).collect();
    if analyses.iter().all(|a| a.prefix.is_some()) {
        problems.extend(coverage::unknown_prefixes(parsed, &known_prefixes));
    } else {
        notes.push(
            "references with an unclaimed prefix are not checked while a spec has no rules"
                .to_owned(),
        );
    }

    // The last mutation proofs, shown but never judged here: `cargo xtask prove` is the gate.
    // Each is read against its fingerprint: a stale one is named, an unfingerprinted one counted.
    // On the parse pool: each proof's fingerprint hashes its rule's items, independently of
    // every other rule's, and one after another they were an eighth of an uncached run.
    let proofs: Vec<(String, crate::model::proof::Proof)> =
        pool::map(rules.iter().collect(), |r| {
            fingerprint::recorded(source, tree, r).map(|p| (r.marker(), p))
        })
        .into_iter()
        .flatten()
        .collect();
    if !proofs.is_empty() {
        notes.extend(fingerprint::notes(&proofs));
        let survivors: Vec<&str> = proofs
            .iter()
            .filter(|(_, p)| p.missed > 0)
            .map(|(m, _)| m.as_str())
            .collect();
        let justified: usize = proofs.iter().map(|(_, p)| p.justified.len()).sum();
        notes.push(format!(
            "proof (target/prove/, {}): {} of {} rules proven; with surviving mutants: {}; \
             justified survivors: {justified}",
            crate::model::paths::of(source).proof,
            proofs.iter().filter(|(_, p)| p.proven()).count(),
            rules.len(),
            if survivors.is_empty() {
                "none".to_owned()
            } else {
                survivors.join(", ")
            }
        ));
    }

    let findings = findings_gate::check(source, rules);
    problems.extend(findings.problems);

    // The test-backed verdicts, kept beside the (borrowed) analyses they re-judge.
    let judged: Option<Vec<test_backed::Judged>> = evidence.as_ref().map(|evidence| {
        analyses
            .iter()
            .map(|analysis| test_backed::apply(source, tree, analysis, evidence, crates))
            .collect()
    });
    if let (Some(evidence), Some(judged)) = (&evidence, &judged) {
        mode.judged = Some(judged.iter().map(|j| j.judged).sum());
        // nextest is the default runner; any other is named, since its tests are matched by
        // file and name rather than by binary and module path.
        for runner in evidence.runners() {
            if runner != junit::Runner::Nextest {
                notes.push(format!(
                    "test results written by {}: its tests are matched by file and test name",
                    runner.name()
                ));
            }
        }
        problems.extend(freshness::outdated(source, analyses, evidence, crates));
    }

    for (index, analysis) in analyses.iter().enumerate() {
        problems.extend(analysis.problems.iter().cloned());
        if let Some(judged) = &judged {
            problems.extend(judged[index].problems.iter().cloned());
        }
    }
    problems.sort_by(Problem::order);
    problems.dedup();
    for (index, analysis) in analyses.iter().enumerate() {
        let mut summary = analysis.summary.clone();
        if let Some(judged) = &judged {
            summary.tested = Some(judged[index].tested);
        }
        summary.errors = problems
            .iter()
            .filter(|p| p.spec.as_deref() == Some(analysis.spec.as_str()))
            .count();
        specs.push(summary);
    }
    notes.sort();
    notes.dedup();
    Ok(Outcome {
        root: root.display().to_string(),
        mode,
        specs,
        problems,
        notes,
        planned: findings.planned,
        untested: judged
            .iter()
            .flatten()
            .flat_map(|j| j.untested.iter().cloned())
            .collect(),
    })
}

/// `path` relative to the root of `source` when it lies under it.
pub fn shown(source: &dyn Source, path: &Path) -> String {
    let absolute = source.canonical(path);
    absolute.strip_prefix(source.root()).map_or_else(
        |_| path.display().to_string(),
        |rel| rel.display().to_string(),
    )
}

/// A tree's rules and the references to them, before any judgement: what `check` and
/// `cargo xtask trace` both start from.
///
/// Its rules and analyses are read-only, so the lookups indexed on first use stay true:
///
/// ```compile_fail
/// fn drop_first(tree: &mut spec_engine::spec_check::Tree) {
///     tree.rules.remove(0);
/// }
/// ```
///
/// ```compile_fail
/// fn drop_first(tree: &mut spec_engine::spec_check::Tree) {
///     tree.analyses.remove(0);
/// }
/// ```
pub struct Tree {
    /// Every rule of every spec, in config and file order (read through [`Tree::rules`]).
    rules: Vec<rules::Rule>,
    /// One analysis per spec/impl pair (read through [`Tree::analyses`]).
    analyses: Vec<coverage::Analysis>,
    /// Every scanned source file. Never changed after [`read_tree`]: the fingerprints computed
    /// once per tree ([`Tree::fingerprint`]) hash these files' items.
    pub parsed: sources::ParsedFiles,
    /// Problems reading the specs and sources (not yet the coverage problems).
    pub problems: Vec<Problem>,
    /// Remarks that do not fail the gate.
    pub notes: Vec<String>,
    /// The lookups a trace of every rule makes, built on the first one (see [`Tree::rule`]).
    index: std::sync::OnceLock<Index>,
    /// Each rule's evidence fingerprint, by its definition's file and line, once computed: the
    /// gate's proof notes and the trace both ask for every rule's (see [`Tree::fingerprint`]).
    fingerprints: Fingerprints,
}

/// The fingerprints a tree has computed, by rule definition (its marker, spec file and line: a
/// rule of another tree at the same place misses rather than takes this one's).
type Fingerprints = std::sync::Mutex<
    std::collections::HashMap<(String, String, usize), crate::model::proof::Fingerprint>,
>;

/// Where each rule's entries lie, so tracing every rule costs one pass over the tree rather than
/// a walk of every rule per rule (quadratic in the tree's size).
struct Index {
    /// The first rule of each base id, as `rules.iter().find` finds it.
    by_base: std::collections::HashMap<String, usize>,
    /// Per rule definition (spec file and line): its coverage entries, as (analysis, entry), in
    /// analysis and entry order.
    coverage: std::collections::HashMap<(String, usize), Vec<(usize, usize)>>,
}

impl Tree {
    /// A tree with no rule, no source and nothing said about it: the side of a review whose
    /// config cannot be read (the gate says why).
    pub fn empty() -> Self {
        Self {
            rules: Vec::new(),
            analyses: Vec::new(),
            parsed: sources::ParsedFiles::default(),
            problems: Vec::new(),
            notes: Vec::new(),
            index: std::sync::OnceLock::new(),
            fingerprints: Fingerprints::default(),
        }
    }

    fn index(&self) -> &Index {
        self.index.get_or_init(|| {
            let mut by_base = std::collections::HashMap::new();
            for (at, rule) in self.rules.iter().enumerate() {
                by_base.entry(rule.id.base.clone()).or_insert(at);
            }
            let mut coverage: std::collections::HashMap<(String, usize), Vec<(usize, usize)>> =
                std::collections::HashMap::new();
            for (a, analysis) in self.analyses.iter().enumerate() {
                for (c, entry) in analysis.rules.iter().enumerate() {
                    coverage
                        .entry((entry.rule.file.clone(), entry.rule.line))
                        .or_default()
                        .push((a, c));
                }
            }
            Index { by_base, coverage }
        })
    }

    /// Every rule of every spec, in config and file order.
    pub fn rules(&self) -> &[rules::Rule] {
        &self.rules
    }

    /// One analysis per spec/impl pair.
    pub fn analyses(&self) -> &[coverage::Analysis] {
        &self.analyses
    }

    /// The first rule (in spec order) whose base id is `base`. The lookups are indexed on first
    /// use; the rules and analyses cannot change after [`read_tree`], so the index stays true.
    pub fn rule(&self, base: &str) -> Option<&rules::Rule> {
        self.index().by_base.get(base).map(|&at| &self.rules[at])
    }

    /// `compute`'s fingerprint of `rule`, one of this tree's rules, computed once per tree: what
    /// it hashes (the rule's text and the items of its sites) cannot change after [`read_tree`].
    pub(crate) fn fingerprint(
        &self,
        rule: &rules::Rule,
        compute: impl FnOnce() -> crate::model::proof::Fingerprint,
    ) -> crate::model::proof::Fingerprint {
        let key = (rule.marker(), rule.file.clone(), rule.line);
        if let Some(known) = self
            .fingerprints
            .lock()
            .ok()
            .and_then(|seen| seen.get(&key).cloned())
        {
            return known;
        }
        let print = compute();
        if let Ok(mut seen) = self.fingerprints.lock() {
            seen.insert(key, print.clone());
        }
        print
    }

    /// Every analysis's entry for the rule defined at `rule`'s file and line, in analysis order.
    pub fn coverage_of<'a>(
        &'a self,
        rule: &rules::Rule,
    ) -> impl Iterator<Item = &'a coverage::RuleCoverage> + 'a {
        self.index()
            .coverage
            .get(&(rule.file.clone(), rule.line))
            .into_iter()
            .flatten()
            .map(|&(a, c)| &self.analyses[a].rules[c])
    }
}

/// Extracts every spec's rules and scans every impl's sources for references.
pub fn read_tree(source: &dyn Source, config: &tracey_config::Config) -> Tree {
    let mut tree = Tree {
        rules: Vec::new(),
        analyses: Vec::new(),
        parsed: sources::ParsedFiles::default(),
        problems: Vec::new(),
        notes: Vec::new(),
        index: std::sync::OnceLock::new(),
        fingerprints: Fingerprints::default(),
    };
    for spec in &config.specs {
        // The spec's rules and its impls' file lists are read side by side: the walk of the
        // sources (and each path's canonical form) overlaps the parse of the spec files.
        let (extracted, selected) = pool::join(
            || rules::extract(source, spec),
            || {
                spec.impls
                    .iter()
                    .map(|implementation| sources::select(source, implementation))
                    .collect::<Vec<_>>()
            },
        );
        tree.problems.extend(extracted.problems);
        tree.notes.extend(extracted.notes);
        for (implementation, selected) in spec.impls.iter().zip(selected) {
            let scanned = sources::scan(source, implementation, selected, &mut tree.parsed);
            tree.problems.extend(scanned.problems.iter().cloned());
            tree.notes.extend(scanned.notes.iter().cloned());
            tree.analyses.push(coverage::analyse(
                spec,
                implementation,
                &extracted.rules,
                extracted.prefix.as_deref(),
                &scanned,
                &tree.parsed,
            ));
        }
        tree.rules.extend(extracted.rules);
    }
    tree
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tree::Memory;

    const CONFIG: &str = "@schema {id crate:tracey-config@1, cli tracey}\n\nspecs (\n    {\n        \
        name calc\n        include (docs/spec.md)\n        impls (\n            {\n                \
        name rust\n                include (src/**/*.rs)\n            }\n        )\n    }\n)\n";

    fn deep_tree() -> Memory {
        // tree-sitter's parse and tracey-core's walks recurse once per nesting level: a long sum
        // nests as deep as it has terms.
        let sum = vec!["1"; 5_000].join(" + ");
        let deep = format!("// r[impl calc.add]\nfn f() -> i32 {{\n    {sum}\n}}\n");
        Memory::new([
            (config::CONFIG_PATH, CONFIG.to_owned()),
            (
                "docs/spec.md",
                "# Spec\n\n> r[calc.add]\n> Adds.\n".to_owned(),
            ),
            ("src/deep.rs", deep),
            (
                "src/other.rs",
                "// r[impl calc.add]\nfn g() {}\n".to_owned(),
            ),
        ])
    }

    // A deeply nested file is parsed on the pool's threads as it was on the main thread (8 MiB),
    // not on rayon's default 2 MiB worker stacks, which overflow (the process aborts).
    #[test]
    fn a_deeply_nested_file_is_read_from_an_eight_mib_thread() {
        let tree = deep_tree();
        let read = std::thread::Builder::new()
            .stack_size(8 << 20)
            .spawn(move || {
                let loaded = config::load(&tree).expect("the config loads");
                let read = read_tree(&tree, &loaded.config);
                (read.parsed.len(), read.rules.len(), read.problems.len())
            })
            .expect("a thread")
            .join()
            .expect("no panic");
        assert_eq!(read, (2, 1, 0));
    }

    // The indexed lookups answer as a walk of the read-only rules and analyses does.
    #[test]
    fn the_index_answers_as_a_walk_of_the_rules() {
        let tree = Memory::new([
            (config::CONFIG_PATH, CONFIG.to_owned()),
            (
                "docs/spec.md",
                "# Spec\n\n> r[calc.add]\n> Adds.\n\n> r[calc.sub]\n> Subtracts.\n".to_owned(),
            ),
            ("src/a.rs", "// r[impl calc.sub]\nfn g() {}\n".to_owned()),
        ]);
        let loaded = config::load(&tree).expect("the config loads");
        let read = read_tree(&tree, &loaded.config);
        assert_eq!(read.rules().len(), 2);
        for rule in read.rules() {
            let found = read.rule(&rule.id.base).expect("every rule is found");
            assert_eq!((&found.file, found.line), (&rule.file, rule.line));
            let walked: Vec<_> = read
                .analyses()
                .iter()
                .flat_map(|a| a.rules.iter())
                .filter(|c| (&c.rule.file, c.rule.line) == (&rule.file, rule.line))
                .map(|c| c.rule.id.base.clone())
                .collect();
            let indexed: Vec<_> = read
                .coverage_of(rule)
                .map(|c| c.rule.id.base.clone())
                .collect();
            assert_eq!(indexed, walked);
            assert_eq!(indexed.len(), 1);
        }
        assert!(read.rule("calc.mul").is_none());
    }

    // A rule's fingerprint is computed once per tree and each rule keeps its own: asked again,
    // every rule's is what computing it gives; a rule of another tree at the same place is not
    // given this one's.
    // i[verify prove.fingerprint]
    #[test]
    fn each_rule_keeps_its_own_fingerprint_once_computed() {
        let tree = Memory::new([
            (config::CONFIG_PATH, CONFIG.to_owned()),
            (
                "docs/spec.md",
                "# Spec\n\n> r[calc.add]\n> Adds.\n\n> r[calc.sub]\n> Subtracts.\n".to_owned(),
            ),
            (
                "src/a.rs",
                "// r[impl calc.add]\nfn f() -> i32 { 1 + 1 }\n\n// r[impl calc.sub]\nfn g() -> i32 { 1 - 1 }\n"
                    .to_owned(),
            ),
        ]);
        let loaded = config::load(&tree).expect("the config loads");
        let read = read_tree(&tree, &loaded.config);
        let first: Vec<_> = read
            .rules()
            .iter()
            .map(|rule| fingerprint::of(&read, rule))
            .collect();
        assert_eq!(first.len(), 2);
        assert_ne!(first[0], first[1], "two rules, two items: two fingerprints");
        for (rule, print) in read.rules().iter().zip(&first) {
            assert_eq!(&fingerprint::of(&read, rule), print);
            assert_eq!(
                &read.fingerprint(rule, || unreachable!("computed once")),
                print
            );
        }
        let mut foreign = read.rules()[0].clone();
        foreign.id = read.rules()[1].id.clone();
        let mut computed = false;
        read.fingerprint(&foreign, || {
            computed = true;
            first[1].clone()
        });
        assert!(
            computed,
            "another rule at the same place is computed, not taken from the cache"
        );
    }
}
