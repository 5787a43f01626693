//! The gate's counts beside a real tracey 1.3.0's (`tracey query status`) on the same tree: what
//! `cargo xtask tracey-parity` prints and writes to `docs/audit/tracey-parity.md`.
//!
//! tracey answers in prose, one line per spec/impl:
//! `demo/rust: 2 of 5 requirements are covered. 2 are stale — … 1 have no implementation
//! reference at all. 3 of 5 have a verification reference.` — [`parse`] reads those lines (and
//! "No specs configured", its answer to a config it cannot use). [`compare`] matches each line with
//! the gate's row (the gate names a spec with one impl by the spec alone) and names each count
//! that differs. The one difference it explains is a spec without rules when tracey answers "No
//! specs configured" (tracey 1.3.0 cannot infer that spec's prefix and refuses the whole config;
//! the gate counts it empty); it does not check that this is tracey's reason. Every other
//! difference, and a row only one side has, is unexplained: a defect of the gate, or of tracey.
//! The gate's own problem kinds where tracey says nothing ([`Comparison::gate_only`]) are listed
//! beside the counts and never explain a count.

use std::fmt::Write as _;

use super::problem::Kind;
use super::report::Outcome;

/// Counts of one spec/impl, as tracey names them: rules, covered (implemented), stale, verified.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counts {
    /// Rules the spec defines.
    pub total: usize,
    /// Rules with a current impl reference and no stale one (tracey's "covered").
    pub covered: usize,
    /// Rules with a reference to an older version.
    pub stale: usize,
    /// Rules with a verify reference.
    pub verified: usize,
}

impl Counts {
    /// `rules/covered/stale/verified`, as the parity table shows them.
    pub fn shown(&self) -> String {
        format!(
            "{}/{}/{}/{}",
            self.total, self.covered, self.stale, self.verified
        )
    }
}

/// One line of tracey's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceyRow {
    /// The spec's name.
    pub spec: String,
    /// The impl's name.
    pub implementation: String,
    /// Its counts.
    pub counts: Counts,
}

/// What `tracey query status` answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// One row per spec/impl.
    Rows(Vec<TraceyRow>),
    /// "No specs configured": tracey could not use the config (it exits 0 all the same).
    NoSpecs,
}

/// tracey's answer could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Neither a coverage line nor "No specs configured".
    #[error("tracey's answer has no coverage line (and does not say \"No specs configured\"): {0}")]
    Unrecognised(String),
    /// A coverage line whose numbers cannot be read.
    #[error("cannot read tracey's coverage line `{0}`")]
    Line(String),
}

/// Reads the coverage lines of `tracey query status`'s answer.
// i[impl spec-check.parity+2]
pub fn parse(answer: &str) -> Result<Answer, Error> {
    const COVERED: &str = " requirements are covered.";
    let mut rows = Vec::new();
    for line in answer.lines().filter(|line| line.contains(COVERED)) {
        rows.push(row(line).ok_or_else(|| Error::Line(line.to_owned()))?);
    }
    if rows.is_empty() {
        if answer
            .lines()
            .any(|line| line.trim() == "No specs configured")
        {
            return Ok(Answer::NoSpecs);
        }
        return Err(Error::Unrecognised(answer.trim().to_owned()));
    }
    Ok(Answer::Rows(rows))
}

/// `spec/impl: C of T requirements are covered.[ S are stale …][ U have no …] V of T have a
/// verification reference.`
fn row(line: &str) -> Option<TraceyRow> {
    let (name, rest) = line.split_once(": ")?;
    let (spec, implementation) = name.split_once('/')?;
    let words: Vec<&str> = rest.split_whitespace().collect();
    let number = |at: usize| words.get(at)?.parse::<usize>().ok();
    // "C of T requirements are covered."
    let covered = number(0)?;
    (words.get(1) == Some(&"of")).then_some(())?;
    let total = number(2)?;
    // "S are stale" follows the covered sentence when there are stale rules.
    let stale = match (number(6), words.get(7), words.get(8)) {
        (Some(stale), Some(&"are"), Some(&"stale")) => stale,
        _ => 0,
    };
    // "V of T have a verification reference." ends the line.
    let end = words.len().checked_sub(7)?;
    (words[end + 1..]
        == [
            "of",
            &total.to_string(),
            "have",
            "a",
            "verification",
            "reference.",
        ])
    .then_some(())?;
    let verified = number(end)?;
    Some(TraceyRow {
        spec: spec.to_owned(),
        implementation: implementation.to_owned(),
        counts: Counts {
            total,
            covered,
            stale,
            verified,
        },
    })
}

/// One spec/impl of a tree: tracey's counts, the gate's, and what explains any difference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// `spec/impl`, as tracey names it (or the gate's name when tracey has no such row).
    pub name: String,
    /// tracey's counts, if tracey has the row.
    pub tracey: Option<Counts>,
    /// The gate's counts, if the gate has the row.
    pub ours: Option<Counts>,
    /// Why the counts differ, one reason each; empty when they are equal.
    pub explained: Vec<String>,
    /// Differences nothing explains.
    pub unexplained: Vec<String>,
}

/// One tree's comparison.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Comparison {
    /// The tree's name.
    pub tree: String,
    /// One row per spec/impl either side reports.
    pub rows: Vec<Row>,
    /// What the gate reports on the tree that tracey does not, by problem kind (kind, count):
    /// never a count difference, said so the table shows where they disagree on purpose.
    pub gate_only: Vec<(String, usize)>,
}

impl Comparison {
    /// Whether every difference is explained.
    pub fn agrees(&self) -> bool {
        self.rows.iter().all(|row| row.unexplained.is_empty())
    }
}

/// The problem kinds the gate reports where tracey reports nothing, while counting as tracey
/// counts: the gate disagrees with tracey about the tree, not about the numbers.
const GATE_ONLY: [Kind; 6] = [
    Kind::MergedRule,
    Kind::RuleId,
    Kind::VerifyNotOnTest,
    Kind::VerifyOutsideTest,
    Kind::ImplInTest,
    Kind::UnknownPrefix,
];

/// Compares `outcome` (the gate on the tree `tree`) with tracey's `answer` on the same tree.
// i[impl spec-check.parity+2]
pub fn compare(tree: &str, outcome: &Outcome, answer: &Answer) -> Comparison {
    let ours: Vec<(String, Counts)> = outcome
        .specs
        .iter()
        .map(|spec| {
            (
                spec.name.clone(),
                Counts {
                    total: spec.total,
                    covered: spec.implemented,
                    stale: spec.stale,
                    verified: spec.verified,
                },
            )
        })
        .collect();
    let mut rows = Vec::new();
    let mut matched = vec![false; ours.len()];
    match answer {
        Answer::NoSpecs => {
            // tracey 1.3.0 cannot infer the prefix of a spec without rules and then refuses the
            // whole config; the gate counts such a spec as empty (and notes why).
            for (index, (name, counts)) in ours.iter().enumerate() {
                matched[index] = true;
                let mut row = Row {
                    name: name.clone(),
                    tracey: None,
                    ours: Some(*counts),
                    explained: Vec::new(),
                    unexplained: Vec::new(),
                };
                if counts.total == 0 {
                    row.explained.push(
                        "a spec without rules: tracey 1.3.0 cannot infer its prefix and answers \
                         \"No specs configured\" for the whole config"
                            .to_owned(),
                    );
                } else {
                    row.unexplained
                        .push("tracey answered \"No specs configured\"".to_owned());
                }
                rows.push(row);
            }
        }
        Answer::Rows(tracey) => {
            for theirs in tracey {
                let full = format!("{}/{}", theirs.spec, theirs.implementation);
                let only_impl = tracey.iter().filter(|t| t.spec == theirs.spec).count() == 1;
                let found = ours.iter().enumerate().position(|(index, (name, _))| {
                    !matched[index] && (*name == full || (only_impl && *name == theirs.spec))
                });
                let mut row = Row {
                    name: full,
                    tracey: Some(theirs.counts),
                    ours: None,
                    explained: Vec::new(),
                    unexplained: Vec::new(),
                };
                match found {
                    Some(index) => {
                        matched[index] = true;
                        let counts = ours[index].1;
                        row.ours = Some(counts);
                        row.unexplained = differences(&theirs.counts, &counts);
                    }
                    None => row.unexplained.push("the gate has no such row".to_owned()),
                }
                rows.push(row);
            }
        }
    }
    for (index, (name, counts)) in ours.iter().enumerate() {
        if !matched[index] {
            rows.push(Row {
                name: name.clone(),
                tracey: None,
                ours: Some(*counts),
                explained: Vec::new(),
                unexplained: vec!["tracey has no such row".to_owned()],
            });
        }
    }
    let gate_only = GATE_ONLY
        .iter()
        .map(|kind| {
            let n = outcome.problems.iter().filter(|p| p.kind == *kind).count();
            (kind.name().to_owned(), n)
        })
        .filter(|(_, n)| *n > 0)
        .collect();
    Comparison {
        tree: tree.to_owned(),
        rows,
        gate_only,
    }
}

/// Each count that differs, named.
fn differences(tracey: &Counts, ours: &Counts) -> Vec<String> {
    [
        ("rules", tracey.total, ours.total),
        ("covered", tracey.covered, ours.covered),
        ("stale", tracey.stale, ours.stale),
        ("verified", tracey.verified, ours.verified),
    ]
    .into_iter()
    .filter(|(_, theirs, ours)| theirs != ours)
    .map(|(what, theirs, ours)| format!("{what}: tracey {theirs}, the gate {ours}"))
    .collect()
}

/// How the page's line naming the tracey that ran starts.
pub const TRACEY_LINE: &str = "The tracey that ran: ";

/// The comparisons as a markdown page: a table (tree, spec/impl, tracey's counts, the gate's,
/// explanation), then a line per tree of what the gate reports beyond tracey. `command` is the
/// command that wrote it, `tracey` the binary's version line.
// i[impl spec-check.parity+2]
pub fn render(comparisons: &[Comparison], command: &str, tracey: &str) -> String {
    let mut out = String::from("# The gate's counts beside tracey's\n\n");
    let _ = writeln!(
        out,
        "Written by `{command}` (do not edit by hand). Each tree is one of spec-engine's \
         workspace shapes (`xtask/engine/src/shapes.rs`), written to a directory of its own, or \
         this workspace. Counts are rules/covered/stale/verified: tracey's from `tracey query \
         status`, the gate's from spec-engine's `spec_check::check` run in-process on the same \
         tree (the counts `cargo xtask spec-check` prints). The one difference explained is a \
         spec without rules when tracey answers \"No specs configured\"; any other fails the \
         command.\n"
    );
    // On a line of its own, so a check of the page against a fresh run can leave it out.
    let _ = writeln!(out, "{TRACEY_LINE}{tracey}.\n");
    out.push_str("| tree | spec/impl | tracey | gate | difference |\n|---|---|---|---|---|\n");
    for comparison in comparisons {
        for row in &comparison.rows {
            let shown = |counts: &Option<Counts>| counts.map_or("—".to_owned(), |c| c.shown());
            let difference = if row.explained.is_empty() && row.unexplained.is_empty() {
                "none".to_owned()
            } else {
                row.explained
                    .iter()
                    .map(|reason| format!("explained: {reason}"))
                    .chain(
                        row.unexplained
                            .iter()
                            .map(|reason| format!("**unexplained**: {reason}")),
                    )
                    .collect::<Vec<_>>()
                    .join("; ")
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {difference} |",
                comparison.tree,
                row.name,
                shown(&row.tracey),
                shown(&row.ours)
            );
        }
    }
    out.push_str(
        "\nWhere the gate disagrees with tracey on purpose, it says so in problems of kinds of \
         its own, which change no count:\n\n",
    );
    for comparison in comparisons {
        let reported = if comparison.gate_only.is_empty() {
            "nothing beyond tracey".to_owned()
        } else {
            comparison
                .gate_only
                .iter()
                .map(|(kind, n)| format!("{n} `{kind}`"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = writeln!(out, "- {}: {reported}", comparison.tree);
    }
    let agree = comparisons.iter().filter(|c| c.agrees()).count();
    let _ = writeln!(
        out,
        "\n{agree} of {} trees: every count equal to tracey's or its difference explained.",
        comparisons.len()
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tree::Memory;

    /// Lines as tracey 1.3.0 prints them (`src/bridge/query.rs`), with its config summary and
    /// hints around them.
    const ANSWER: &str = "\
This project tracks requirements for \"demo\". The requirements are defined in docs/demo.md and are referenced in code using t[...] annotations (for example, t[demo.some-requirement]).
The implementation being checked: rust.

demo/rust: 2 of 5 requirements are covered. 2 are stale — the spec has been updated since the code was last annotated, and the code needs to be adjusted accordingly before its annotations are bumped. 1 have no implementation reference at all. 3 of 5 have a verification reference.
core/rust: 1 of 1 requirements are covered. 0 of 1 have a verification reference.
core/python: 1 of 1 requirements are covered. 1 of 1 have a verification reference.

---
→ Run `tracey query stale`
";

    fn counts(total: usize, covered: usize, stale: usize, verified: usize) -> Counts {
        Counts {
            total,
            covered,
            stale,
            verified,
        }
    }

    // i[verify spec-check.parity+2]
    #[test]
    fn tracey_status_lines_are_read() {
        let Answer::Rows(rows) = parse(ANSWER).expect("an answer") else {
            panic!("rows expected");
        };
        let read: Vec<(&str, &str, Counts)> = rows
            .iter()
            .map(|r| (r.spec.as_str(), r.implementation.as_str(), r.counts))
            .collect();
        assert_eq!(
            read,
            [
                ("demo", "rust", counts(5, 2, 2, 3)),
                ("core", "rust", counts(1, 1, 0, 0)),
                ("core", "python", counts(1, 1, 0, 1)),
            ]
        );
        assert_eq!(parse("No specs configured\n"), Ok(Answer::NoSpecs));
        assert!(matches!(
            parse("Error: connection refused"),
            Err(Error::Unrecognised(_))
        ));
        assert!(matches!(
            parse(
                "demo/rust: many of 5 requirements are covered. 3 of 5 have a verification reference."
            ),
            Err(Error::Line(_))
        ));
    }

    fn outcome_of(files: &[(&str, &str)]) -> Outcome {
        crate::spec_check::check(&Memory::new(files.iter().copied()), &[], None, &[])
            .expect("a config")
    }

    const CONFIG: &str = "specs (\n  {\n    name demo\n    include (docs/demo.md)\n    impls (\n      {\n        name rust\n        include (src/**/*.rs)\n      }\n    )\n  }\n)\n";

    // i[verify spec-check.parity+2]
    #[test]
    fn equal_counts_agree_and_a_difference_is_unexplained() {
        let outcome = outcome_of(&[
            (".config/tracey/config.styx", CONFIG),
            (
                "docs/demo.md",
                "# Demo\n\n> t[demo.a]\n> A.\n\n> t[demo.b]\n> B.\n",
            ),
            ("src/lib.rs", "// t[impl demo.a]\npub fn a() {}\n"),
        ]);
        let same = "demo/rust: 1 of 2 requirements are covered. 1 have no implementation reference at all. 0 of 2 have a verification reference.\n";
        let compared = compare("tree", &outcome, &parse(same).expect("answer"));
        assert!(compared.agrees(), "{compared:?}");
        assert_eq!(compared.rows[0].name, "demo/rust");
        assert_eq!(compared.rows[0].tracey, compared.rows[0].ours);

        let other =
            "demo/rust: 2 of 2 requirements are covered. 0 of 2 have a verification reference.\n";
        let compared = compare("tree", &outcome, &parse(other).expect("answer"));
        assert!(!compared.agrees());
        assert_eq!(
            compared.rows[0].unexplained,
            ["covered: tracey 2, the gate 1"]
        );
        let page = render(&[compared], "cargo xtask tracey-parity", "tracey 1.3.0");
        assert!(
            page.contains("| tree | demo/rust | 2/2/0/0 | 2/1/0/0 | **unexplained**: covered: tracey 2, the gate 1 |"),
            "{page}"
        );
        assert!(page.contains("0 of 1 trees"), "{page}");
        assert!(
            page.starts_with("# The gate's counts beside tracey's\n")
                && page.contains("\nThe tracey that ran: tracey 1.3.0.\n"),
            "{page}"
        );
    }

    // i[verify spec-check.parity+2]
    #[test]
    fn rows_either_side_lacks_and_gate_only_problems_are_shown() {
        // A spec without rules: tracey refuses the config, the gate counts it empty.
        let empty = outcome_of(&[
            (".config/tracey/config.styx", CONFIG),
            ("docs/demo.md", "# Demo\n\nNo rules yet.\n"),
            ("src/lib.rs", "pub fn a() {}\n"),
        ]);
        let compared = compare("empty", &empty, &Answer::NoSpecs);
        assert!(compared.agrees(), "{compared:?}");
        assert_eq!(compared.rows[0].explained.len(), 1);

        // A verify on a helper: tracey counts the rule verified, so does the gate, and the gate
        // says more in a kind of its own.
        let helper = outcome_of(&[
            (".config/tracey/config.styx", CONFIG),
            ("docs/demo.md", "# Demo\n\n> t[demo.a]\n> A.\n"),
            (
                "src/lib.rs",
                "// t[impl demo.a]\npub fn a() {}\n\n#[cfg(test)]\nmod tests {\n    // t[verify demo.a]\n    fn helper() {}\n}\n",
            ),
        ]);
        let answer = "demo/rust: 1 of 1 requirements are covered. 1 of 1 have a verification reference.\nextra/rust: 0 of 3 requirements are covered. 3 have no implementation reference at all. 0 of 3 have a verification reference.\n";
        let compared = compare("helper", &helper, &parse(answer).expect("answer"));
        assert_eq!(compared.rows.len(), 2);
        assert!(compared.rows[0].unexplained.is_empty(), "{compared:?}");
        assert_eq!(compared.rows[1].ours, None);
        assert_eq!(compared.rows[1].unexplained, ["the gate has no such row"]);
        assert_eq!(compared.gate_only, [("verify-not-on-test".to_owned(), 1)]);
        let page = render(&[compared], "cmd", "tracey 1.3.0");
        assert!(page.contains("- helper: 1 `verify-not-on-test`"), "{page}");
    }
}
