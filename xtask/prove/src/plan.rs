//! What `prove` mutates and which tests judge it, per rule: the items under the rule's current
//! `impl` annotations (file and line span, comments and attributes included) and the test
//! functions under its current `verify` annotations, named as nextest names them.

use std::collections::BTreeSet;

use spec_engine::model::tree::Tree as Source;
use spec_engine::spec_check::crate_layout;
use spec_engine::spec_check::items;
use spec_engine::spec_check::test_backed;
use spec_engine::spec_check::{self, Tree};

/// An item to mutate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// File, root-relative with `/`.
    pub file: String,
    /// First and last line of the item.
    pub lines: (usize, usize),
    /// `fn name`, `impl Type`, …
    pub item: String,
    /// The package that owns the file.
    pub package: Option<String>,
}

/// A test that judges the mutants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judge {
    /// nextest binary id (`holdfast-pull::dockerd`), when the file's binary is known.
    pub binary: Option<String>,
    /// libtest name (`tests::alpha_holds`).
    pub name: String,
    /// The package whose tests hold it.
    pub package: Option<String>,
    /// The test's file, root-relative with `/`.
    pub file: String,
    /// First and last line of the test function (comments and attributes included), when known.
    pub lines: Option<(usize, usize)>,
}

/// One rule's proof plan.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The rule's marker, e.g. `r[retry.schedule]`.
    pub rule: String,
    /// The id without prefix, e.g. `retry.schedule` (names its output directory).
    pub id: String,
    /// Items to mutate.
    pub targets: Vec<Target>,
    /// Tests to run against each mutant.
    pub judges: Vec<Judge>,
}

impl Plan {
    /// Whether line `line` of `file` lies in one of the rule's items.
    pub fn covers(&self, file: &str, line: usize) -> bool {
        self.targets
            .iter()
            .any(|t| t.file == file && (t.lines.0..=t.lines.1).contains(&line))
    }

    /// `cargo mutants --re` patterns: a mutant's name starts `FILE:LINE:COL:`; one pattern per
    /// target, matching the lines of its item.
    pub fn name_patterns(&self) -> Vec<String> {
        self.targets
            .iter()
            .map(|t| {
                let lines: Vec<String> = (t.lines.0..=t.lines.1).map(|l| l.to_string()).collect();
                format!("^{}:({}):", regex_escape(&t.file), lines.join("|"))
            })
            .collect()
    }

    /// The packages whose tests must be built to judge (`None`: one of them is unknown, so the
    /// whole workspace's tests are built).
    pub fn test_packages(&self) -> Option<Vec<String>> {
        let mut packages: Vec<String> = self
            .judges
            .iter()
            .map(|j| j.package.clone())
            .collect::<Option<_>>()?;
        packages.sort();
        packages.dedup();
        Some(packages)
    }

    /// Whether the rule can be proven at all: it has an item to mutate and a test to judge it.
    // i[impl prove.run+2]
    pub fn provable(&self) -> bool {
        !self.targets.is_empty() && !self.judges.is_empty()
    }

    /// The cargo target selection (`--lib`, `--bin=NAME`, `--test=NAME`, `--bench=NAME`) that
    /// builds exactly the test binaries holding the rule's verifying tests, deduplicated and
    /// sorted; `None` when one test's binary is unknown, so every test target of the packages is
    /// built. cargo applies a selection to each selected package, so with several packages a
    /// target kind one of them needs may also be built in another: never fewer than needed.
    // i[impl prove.targets]
    pub fn test_targets(&self) -> Option<Vec<String>> {
        let mut selection: Vec<String> = self
            .judges
            .iter()
            .map(|j| j.binary.as_deref().map(target_of_binary))
            .collect::<Option<_>>()?;
        selection.sort();
        selection.dedup();
        Some(selection)
    }

    /// The nextest filterset selecting exactly the rule's verifying tests.
    pub fn test_filter(&self) -> String {
        let one: Vec<String> = self
            .judges
            .iter()
            .map(|j| match &j.binary {
                Some(binary) => format!("(binary_id(={binary}) & test(={}))", j.name),
                None => format!("test(={})", j.name),
            })
            .collect();
        one.join(" | ")
    }
}

/// A mutant as `cargo mutants --list --json` names it: where it starts, and whether the name
/// filter (`--re`) reaches it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// File, root-relative with `/`.
    pub file: String,
    /// The line the mutant starts on.
    pub line: usize,
    /// A struct-field deletion: cargo-mutants 27 applies no `--re` to those, so a run tries every
    /// one in the files it is given.
    pub unfiltered: bool,
}

/// Reads the output of `cargo mutants --list --json`.
// i[impl prove.budget+3]
pub fn listed(json: &[u8]) -> crate::error::Result<Vec<Listed>> {
    let entries: Vec<serde_json::Value> = serde_json::from_slice(json)?;
    Ok(entries
        .iter()
        .map(|entry| Listed {
            file: entry["file"].as_str().unwrap_or_default().to_owned(),
            line: entry["span"]["start"]["line"]
                .as_u64()
                .and_then(|l| usize::try_from(l).ok())
                .unwrap_or(0),
            unfiltered: entry["genre"] == "StructField",
        })
        .collect())
}

impl Plan {
    /// How many of `listed` (one listing over several rules' files and items) the rule's own run
    /// would try: those in its items, and the unfiltered ones in its files.
    // i[impl prove.budget+3]
    pub fn mutants_among(&self, listed: &[Listed]) -> usize {
        listed
            .iter()
            .filter(|m| {
                self.covers(&m.file, m.line)
                    || (m.unfiltered && self.targets.iter().any(|t| t.file == m.file))
            })
            .count()
    }
}

/// The cargo option that builds the test binary nextest names `binary`: `PACKAGE` is the
/// library's unit tests, `PACKAGE::bin/NAME` a binary's, `PACKAGE::bench/NAME` a bench's,
/// `PACKAGE::NAME` the integration test `tests/NAME.rs`.
// i[impl prove.targets]
fn target_of_binary(binary: &str) -> String {
    let Some((_, target)) = binary.split_once("::") else {
        return "--lib".to_owned();
    };
    if let Some(name) = target.strip_prefix("bin/") {
        format!("--bin={name}")
    } else if let Some(name) = target.strip_prefix("bench/") {
        format!("--bench={name}")
    } else {
        format!("--test={target}")
    }
}

fn regex_escape(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if "\\.+*?()|[]{}^$#&-~".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The plan of every rule in `tree` (in spec order); rules with no Rust item or no test to judge
/// it get an empty target or judge list, which `prove` reports as not provable.
// i[impl prove.plan+4]
pub fn plans(source: &dyn spec_engine::Tree, tree: &Tree) -> Vec<Plan> {
    let mut plans = Vec::new();
    for rule in tree.rules() {
        let mut targets: Vec<Target> = Vec::new();
        let mut judges: Vec<Judge> = Vec::new();
        for coverage in tree
            .analyses()
            .iter()
            .flat_map(|a| a.rules.iter())
            .filter(|c| c.rule.file == rule.file && c.rule.line == rule.line)
        {
            for site in coverage.impl_sites.iter().filter(|s| !s.stale) {
                let layout = tree.parsed.get(&site.path).and_then(|f| f.layout.as_ref());
                let Some(layout) = layout else {
                    continue;
                };
                let package = crate_layout::package_of(source, &site.path).map(|(p, _)| p);
                for item in items::covered_items(layout, site.line) {
                    let target = Target {
                        file: site.file.clone(),
                        lines: (item.start, item.end),
                        item: item.describe(),
                        package: package.clone(),
                    };
                    if !targets.contains(&target) {
                        targets.push(target);
                    }
                }
            }
            for site in coverage.verify_sites.iter().filter(|s| !s.stale) {
                let layout = tree.parsed.get(&site.path).and_then(|f| f.layout.as_ref());
                let span = |line: usize| {
                    layout
                        .and_then(|layout| layout.item_at(line))
                        .map(|item| (item.start, item.end))
                };
                // The test the annotation precedes, else every test of the file or module it
                // heads.
                let tests: Vec<(test_backed::TestFn, Option<(usize, usize)>)> =
                    match test_backed::test_fn(source, site, &tree.parsed) {
                        Some(test) => vec![(test, span(site.line))],
                        None => test_backed::scope_tests(source, site, &tree.parsed)
                            .into_iter()
                            .map(|test| {
                                let lines = span(test.line);
                                (test, lines)
                            })
                            .collect(),
                    };
                for (test, lines) in tests {
                    let judge = Judge {
                        package: crate_layout::package_of(source, &site.path).map(|(p, _)| p),
                        binary: test.target.map(|t| t.suite),
                        name: test.full_name,
                        file: site.file.clone(),
                        lines,
                    };
                    if !judges.contains(&judge) {
                        judges.push(judge);
                    }
                }
            }
        }
        plans.push(Plan {
            rule: rule.marker(),
            id: rule.id.to_string(),
            targets,
            judges,
        });
    }
    plans
}

/// The markers of the rules of `now` whose evidence differs from the tree `then` (a revision's,
/// read as `spec-check --base` reads it): by their fingerprints, not by the lines a diff touched.
/// `None` when `then`'s spec cannot be read for want of a config ([`spec_at`]).
// i[impl prove.changed+2]
pub fn changed_since(
    then: &dyn Source,
    now: &spec_check::Tree,
) -> Result<Option<BTreeSet<String>>, spec_check::problem::Problem> {
    let Some(then) = spec_at(then)? else {
        return Ok(None);
    };
    Ok(Some(
        spec_check::fingerprint::changed_between(&then, now)
            .into_iter()
            .map(spec_check::rules::Rule::marker)
            .collect(),
    ))
}

/// What `--changed-since REV` chooses, once REV's tree has been read ([`changed_since`]).
#[derive(Debug, PartialEq, Eq)]
pub enum Since {
    /// The markers of the rules that changed.
    Changed(BTreeSet<String>),
    /// Every rule, REV's spec being unreadable for want of a config; the warning says so.
    All {
        /// The one line for stderr, naming REV.
        warning: String,
    },
}

/// Turns what [`changed_since`] made of REV `rev` into the choice, the warning when REV has no
/// spec config, or the usage error, naming REV and the problem, when its config does not parse.
// i[impl prove.changed.unreadable]
pub fn since(
    rev: &str,
    changed: Result<Option<BTreeSet<String>>, spec_check::problem::Problem>,
) -> Result<Since, String> {
    match changed {
        Ok(Some(changed)) => Ok(Since::Changed(changed)),
        Ok(None) => Ok(Since::All {
            warning: format!(
                "warning: prove: --changed-since {rev}: that revision has no {}, so its spec \
                 cannot be read: every rule is chosen",
                spec_check::config::CONFIG_PATH
            ),
        }),
        Err(problem) => Err(format!(
            "--changed-since {rev}: that revision's spec cannot be read: {problem}"
        )),
    }
}

/// The spec of the revision's tree `then`: `None` when it has no spec config (its spec cannot be
/// read: the caller says so and chooses every rule); an error when it has one that does not
/// parse.
// i[impl prove.changed.unreadable]
fn spec_at(then: &dyn Source) -> Result<Option<spec_check::Tree>, spec_check::problem::Problem> {
    match spec_check::read(then) {
        Ok((_, tree)) => Ok(Some(tree)),
        Err(_) if !then.is_file(std::path::Path::new(spec_check::config::CONFIG_PATH)) => Ok(None),
        Err(problem) => Err(problem),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // i[verify prove.changed.unreadable]
    #[test]
    fn a_revision_without_a_spec_config_chooses_all_and_a_broken_one_is_an_error() {
        const CONFIG: &str = "specs (\n  {\n    name demo\n    include (docs/spec.md)\n    impls (\n      {\n        name rust\n        include (src/**/*.rs)\n      }\n    )\n  }\n)\n";
        let now = spec_engine::Memory::new([
            (spec_check::config::CONFIG_PATH, CONFIG),
            (
                "docs/spec.md",
                "# Demo\n\n> r[demo.alpha]\n> Alpha holds.\n",
            ),
            ("src/lib.rs", "// r[impl demo.alpha]\npub fn alpha() {}\n"),
        ]);
        let (_, tree) = spec_check::read(&now).expect("read");
        let without = spec_engine::Memory::new([("README.md", "before the spec\n")]);
        assert_eq!(changed_since(&without, &tree).expect("no config"), None);
        let broken = spec_engine::Memory::new([(spec_check::config::CONFIG_PATH, "specs (\n")]);
        assert!(changed_since(&broken, &tree).is_err());
        assert_eq!(
            changed_since(&now, &tree).expect("same"),
            Some(BTreeSet::new())
        );
    }

    // i[verify prove.changed.unreadable]
    #[test]
    fn an_unreadable_revision_is_named_in_the_warning_or_the_usage_error() {
        let Ok(Since::All { warning }) = since("v0.1", Ok(None)) else {
            panic!("a revision without a spec config chooses every rule");
        };
        assert_eq!(
            warning,
            "warning: prove: --changed-since v0.1: that revision has no \
             .config/tracey/config.styx, so its spec cannot be read: every rule is chosen"
        );
        let broken = spec_engine::Memory::new([(spec_check::config::CONFIG_PATH, "specs (\n")]);
        let Err(problem) = spec_check::read(&broken) else {
            panic!("a config that does not parse");
        };
        let error = since("v0.1", Err(problem.clone())).expect_err("a usage error");
        assert_eq!(
            error,
            format!("--changed-since v0.1: that revision's spec cannot be read: {problem}")
        );
        assert!(!problem.to_string().is_empty(), "the problem is named");
        let changed = BTreeSet::from(["r[demo.alpha]".to_owned()]);
        assert_eq!(
            since("v0.1", Ok(Some(changed.clone()))),
            Ok(Since::Changed(changed))
        );
    }

    // i[verify prove.plan+4]
    #[test]
    fn patterns_select_the_items_lines_and_the_filter_the_rules_tests() {
        let plan = Plan {
            rule: "r[retry.schedule]".into(),
            id: "retry.schedule".into(),
            targets: vec![Target {
                file: "crates/retry/src/schedule.rs".into(),
                lines: (3, 5),
                item: "fn nominal_delay".into(),
                package: Some("holdfast-retry".into()),
            }],
            judges: vec![
                Judge {
                    binary: Some("holdfast-retry".into()),
                    name: "schedule::tests::doubles".into(),
                    package: Some("holdfast-retry".into()),
                    file: "crates/retry/src/schedule.rs".into(),
                    lines: Some((10, 20)),
                },
                Judge {
                    binary: None,
                    name: "caps".into(),
                    package: None,
                    file: "elsewhere/caps.rs".into(),
                    lines: None,
                },
            ],
        };
        assert_eq!(
            plan.name_patterns(),
            [r"^crates/retry/src/schedule\.rs:(3|4|5):"]
        );
        assert_eq!(plan.test_packages(), None, "caps's package is unknown");
        assert_eq!(
            plan.test_filter(),
            "(binary_id(=holdfast-retry) & test(=schedule::tests::doubles)) | test(=caps)"
        );
    }

    // i[verify prove.plan+4]
    #[test]
    fn an_impl_blocks_type_is_its_name_without_path_generics_or_reference() {
        assert_eq!(items::self_type("Gather<K>"), "Gather");
        assert_eq!(items::self_type("Gathered<'_, K>"), "Gathered");
        assert_eq!(items::self_type("crate::udp::Gather<K>"), "Gather");
        assert_eq!(items::self_type("&Gather"), "Gather");
        assert_eq!(items::self_type("&mut Gather"), "Gather");
        assert_eq!(items::self_type("Gather"), "Gather");
    }

    fn judge(binary: Option<&str>, package: &str) -> Judge {
        Judge {
            binary: binary.map(str::to_owned),
            name: "tests::t".into(),
            package: Some(package.into()),
            file: "x.rs".into(),
            lines: None,
        }
    }

    fn plan_of(judges: Vec<Judge>, targets: usize) -> Plan {
        let target = Target {
            file: "crates/a/src/lib.rs".into(),
            lines: (1, 2),
            item: "fn f".into(),
            package: Some("a".into()),
        };
        Plan {
            rule: "r[a.b]".into(),
            id: "a.b".into(),
            targets: vec![target; targets],
            judges,
        }
    }

    // i[verify prove.targets]
    #[test]
    fn each_judging_test_binary_is_selected_once_and_no_other() {
        let plan = plan_of(
            vec![
                judge(Some("holdfast-pull::dockerd"), "holdfast-pull"),
                judge(Some("xtask::bin/xtask"), "xtask"),
                judge(Some("holdfast-retry"), "holdfast-retry"),
                judge(Some("holdfast-pull::dockerd"), "holdfast-pull"),
                judge(Some("holdfast-retry::bench/schedule"), "holdfast-retry"),
                judge(Some("holdfast-retry"), "holdfast-retry"),
            ],
            1,
        );
        assert_eq!(
            plan.test_targets(),
            Some(vec![
                "--bench=schedule".to_owned(),
                "--bin=xtask".to_owned(),
                "--lib".to_owned(),
                "--test=dockerd".to_owned(),
            ])
        );
        assert_eq!(
            plan_of(vec![judge(Some("xtask::prove"), "xtask")], 1).test_targets(),
            Some(vec!["--test=prove".to_owned()])
        );
        let unknown = plan_of(
            vec![judge(Some("xtask::prove"), "xtask"), judge(None, "xtask")],
            1,
        );
        assert_eq!(
            unknown.test_targets(),
            None,
            "one binary unknown: every test target is built"
        );
        assert_eq!(plan_of(Vec::new(), 1).test_targets(), Some(Vec::new()));
    }

    // i[verify prove.run+2]
    #[test]
    fn a_rule_needs_an_item_and_a_test_to_be_provable() {
        let one = || vec![judge(Some("a"), "a")];
        assert!(plan_of(one(), 1).provable());
        assert!(!plan_of(one(), 0).provable(), "nothing to mutate");
        assert!(!plan_of(Vec::new(), 1).provable(), "nothing to judge");
        assert!(!plan_of(Vec::new(), 0).provable());
    }

    // i[verify prove.budget+3]
    #[test]
    fn one_listing_counts_each_rules_mutants_as_its_own_run_would() {
        let json = br#"[
            {"name":"crates/retry/src/schedule.rs:3:5: replace f -> u32 with 0","file":"crates/retry/src/schedule.rs","span":{"start":{"line":3,"column":5}},"genre":"FnValue"},
            {"name":"crates/retry/src/schedule.rs:5:9: replace + with -","file":"crates/retry/src/schedule.rs","span":{"start":{"line":5,"column":9}},"genre":"BinaryOperator"},
            {"name":"crates/retry/src/schedule.rs:6:9: replace + with -","file":"crates/retry/src/schedule.rs","span":{"start":{"line":6,"column":9}},"genre":"BinaryOperator"},
            {"name":"crates/retry/src/schedule.rs:40:9: delete field x from struct S expression","file":"crates/retry/src/schedule.rs","span":{"start":{"line":40,"column":9}},"genre":"StructField"},
            {"name":"crates/retry/src/lib.rs:40:9: delete field y from struct S expression","file":"crates/retry/src/lib.rs","span":{"start":{"line":40,"column":9}},"genre":"StructField"},
            {"name":"crates/retry/src/lib.rs:4:1: replace g with ()","file":"crates/retry/src/lib.rs","span":{"start":{"line":4,"column":1}},"genre":"FnValue"}
        ]"#;
        let listed = listed(json).expect("parses");
        assert_eq!(
            listed[3],
            Listed {
                file: "crates/retry/src/schedule.rs".into(),
                line: 40,
                unfiltered: true,
            }
        );
        assert!(!listed[0].unfiltered);
        let mut plan = plan_of(Vec::new(), 1);
        plan.targets[0].file = "crates/retry/src/schedule.rs".into();
        plan.targets[0].lines = (3, 5);
        // Lines 3 and 5 in its item, and the field deletion its file's run would try too.
        assert_eq!(plan.mutants_among(&listed), 3);
        plan.targets[0].file = "crates/retry/src/other.rs".into();
        assert_eq!(plan.mutants_among(&listed), 0, "another file's mutants");
        assert!(super::listed(b"not json").is_err());
    }
}
