//! A rule's level and what the gate demands of a rule at each level, from one table
//! ([`DEMANDS`]).
//!
//! The level is a marker attribute, as tracey's specs write it and marq (the markdown crate
//! tracey 1.3.0 reads specs with) parses it: `r[area.topic level=should]`, with marq's synonyms
//! (`shall`, `required`, `recommended`, `optional`). marq knows no informative level (it rejects
//! any other `level=` value), so an informative rule says so with marq's other attribute:
//! `tags=informative`. A word in the rule's first sentence was the other choice; it is not taken,
//! since prose says "must" of things that are not the rule's level, and an attribute is explicit,
//! parsed by the same crate as the id, and already in the export. A rule that gives no level is
//! MUST: the gate's demands on today's rules do not change.

use serde::{Deserialize, Serialize};

use super::rules::Rule;

/// A rule's level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Level {
    /// `level=must` (or none).
    Must,
    /// `level=should`.
    Should,
    /// `level=may`.
    May,
    /// `tags=informative`: the rule explains, and demands nothing.
    Informative,
}

impl Level {
    /// As written in reports and the export.
    pub fn name(self) -> &'static str {
        match self {
            Level::Must => "must",
            Level::Should => "should",
            Level::May => "may",
            Level::Informative => "informative",
        }
    }

    /// The level of `rule`, from its marker's attributes.
    // i[impl spec-check.levels]
    pub fn of(rule: &Rule) -> Self {
        if rule.metadata.tags.iter().any(|tag| tag == "informative") {
            return Level::Informative;
        }
        match rule.metadata.level {
            Some(marq::ReqLevel::Should) => Level::Should,
            Some(marq::ReqLevel::May) => Level::May,
            Some(marq::ReqLevel::Must) | None => Level::Must,
        }
    }

    /// The level [`Level::name`] names.
    pub fn named(name: &str) -> Option<Self> {
        [Level::Must, Level::Should, Level::May, Level::Informative]
            .into_iter()
            .find(|level| level.name() == name)
    }

    /// What the gate demands of a rule at this level ([`DEMANDS`]).
    pub fn demands(self) -> Demands {
        DEMANDS
            .iter()
            .find(|(level, _)| *level == self)
            .map_or(Demands::ALL, |(_, demands)| *demands)
    }
}

/// A measure of a rule: what a level demands, what the ratchet keeps and a waiver excuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Measure {
    /// Having a current `impl` annotation.
    Implemented,
    /// Having a `verify` annotation.
    Verified,
    /// A verifying test that ran and passed (test-backed mode).
    Tested,
    /// A recorded proof that holds (`docs/audit/proof.md`).
    Proven,
}

impl Measure {
    /// The word, as written in the file and in the review's messages.
    pub fn word(self) -> &'static str {
        match self {
            Measure::Implemented => "implemented",
            Measure::Verified => "verified",
            Measure::Tested => "tested",
            Measure::Proven => "proven",
        }
    }
}

/// What the gate demands of a rule: each measure it must have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Demands {
    /// A current `impl` annotation (`missing-impl` otherwise).
    pub implemented: bool,
    /// A `verify` annotation (`missing-verify` otherwise).
    pub verified: bool,
    /// In a test-backed run, a verifying test that ran and passed (`not-verified-by-test`).
    pub tested: bool,
    /// A recorded proof that holds: its loss is a problem for the review and the ratchet.
    pub proven: bool,
}

impl Demands {
    /// Everything: what the gate demanded of every rule before levels.
    pub const ALL: Demands = Demands {
        implemented: true,
        verified: true,
        tested: true,
        proven: true,
    };

    /// Whether the measure `what` is demanded.
    pub fn of(self, what: Measure) -> bool {
        match what {
            Measure::Implemented => self.implemented,
            Measure::Verified => self.verified,
            Measure::Tested => self.tested,
            Measure::Proven => self.proven,
        }
    }

    /// What either `self` or `other` demands: a rule judged by its level now and the level it
    /// had before (at the review's base, or when the ratchet's baseline was written), so that
    /// lowering a rule's level excuses no loss.
    // i[impl spec-check.levels]
    #[must_use]
    pub fn or(self, other: Demands) -> Demands {
        Demands {
            implemented: self.implemented || other.implemented,
            verified: self.verified || other.verified,
            tested: self.tested || other.tested,
            proven: self.proven || other.proven,
        }
    }
}

/// The one table of demands per level: MUST tested and proven (and so verified and implemented),
/// SHOULD verified, MAY implemented, informative nothing.
// i[impl spec-check.levels]
pub const DEMANDS: [(Level, Demands); 4] = [
    (Level::Must, Demands::ALL),
    (
        Level::Should,
        Demands {
            implemented: true,
            verified: true,
            tested: false,
            proven: false,
        },
    ),
    (
        Level::May,
        Demands {
            implemented: true,
            verified: false,
            tested: false,
            proven: false,
        },
    ),
    (
        Level::Informative,
        Demands {
            implemented: false,
            verified: false,
            tested: false,
            proven: false,
        },
    ),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Memory;
    use crate::spec_check::problem::Kind;

    const CONFIG: &str = "specs (\n  {\n    name demo\n    include (docs/spec.md)\n    impls (\n      {\n        name rust\n        include (src/**/*.rs)\n      }\n    )\n  }\n)\n";

    /// One rule per level, none of them implemented or verified.
    const SPEC: &str = "# Demo\n\n> r[demo.plain]\n> Plain.\n\n> r[demo.must level=shall]\n> Must.\n\n> r[demo.should level=recommended]\n> Should.\n\n> r[demo.may level=may]\n> May.\n\n> r[demo.about tags=informative]\n> About.\n";

    /// Each rule's id and level, and each problem's kind and rule.
    type Checked = (Vec<(String, Level)>, Vec<(Kind, String)>);

    fn checked() -> Checked {
        let tree = Memory::new([
            (".config/tracey/config.styx", CONFIG),
            ("docs/spec.md", SPEC),
            ("src/lib.rs", "pub fn nothing() {}\n"),
        ]);
        let Ok((_, read)) = crate::spec_check::read(&tree) else {
            panic!("read");
        };
        let levels = read
            .rules()
            .iter()
            .map(|rule| (rule.id.base.clone(), Level::of(rule)))
            .collect();
        let outcome = crate::spec_check::check(&tree, &[], None, &[]).expect("judged");
        let problems = outcome
            .problems
            .iter()
            .filter_map(|p| Some((p.kind, p.rule.clone()?)))
            .collect();
        (levels, problems)
    }

    // i[verify spec-check.levels]
    #[test]
    fn the_level_is_the_markers_attribute_and_none_is_must() {
        let (levels, _) = checked();
        assert_eq!(
            levels,
            [
                ("demo.plain".to_owned(), Level::Must),
                ("demo.must".to_owned(), Level::Must),
                ("demo.should".to_owned(), Level::Should),
                ("demo.may".to_owned(), Level::May),
                ("demo.about".to_owned(), Level::Informative),
            ]
        );
        assert_eq!(Level::Must.demands(), Demands::ALL);
    }

    /// A rule whose level changed is judged by what either level demands, whichever came first.
    // i[verify spec-check.levels]
    #[test]
    fn either_levels_demands_count() {
        let none = Level::Informative.demands();
        assert_eq!(Demands::ALL.or(none), Demands::ALL);
        assert_eq!(none.or(Demands::ALL), Demands::ALL);
        assert_eq!(none.or(none), none);
        assert_eq!(
            Level::May.demands().or(Level::Should.demands()),
            Level::Should.demands()
        );
    }

    // i[verify spec-check.levels]
    #[test]
    fn the_gate_demands_what_the_table_says_of_each_level() {
        let (_, problems) = checked();
        let marker = |id: &str| format!("r[demo.{id}]");
        assert_eq!(
            problems,
            [
                (Kind::MissingImpl, marker("plain")),
                (Kind::MissingVerify, marker("plain")),
                (Kind::MissingImpl, marker("must")),
                (Kind::MissingVerify, marker("must")),
                (Kind::MissingImpl, marker("should")),
                (Kind::MissingVerify, marker("should")),
                (Kind::MissingImpl, marker("may")),
            ]
        );
        // The table: each level demands no more than the one above it.
        for pair in DEMANDS.windows(2) {
            let (above, below) = (pair[0].1, pair[1].1);
            for what in [
                Measure::Implemented,
                Measure::Verified,
                Measure::Tested,
                Measure::Proven,
            ] {
                assert!(above.of(what) || !below.of(what), "{what:?}: {pair:?}");
            }
        }
    }

    /// A test-backed run of a MAY rule whose test passed and of an informative and a MUST rule
    /// whose tests did not run.
    fn run_backed() -> crate::spec_check::report::Outcome {
        const RUN_CONFIG: &str = "specs (\n  {\n    name demo\n    include (docs/spec.md)\n    impls (\n      {\n        name rust\n        include (crates/**/*.rs)\n      }\n    )\n  }\n)\n";
        const RUN_SPEC: &str = "# Demo\n\n> r[demo.may level=may]\n> May.\n\n> r[demo.about tags=informative]\n> About.\n\n> r[demo.plain]\n> Plain.\n";
        const LIB: &str = "// r[impl demo.may]\npub fn may() {}\n\n// r[impl demo.plain]\npub fn plain() {}\n\n#[cfg(test)]\nmod tests {\n    // r[verify demo.may]\n    #[test]\n    fn may_holds() {\n        super::may();\n    }\n\n    // r[verify demo.about]\n    #[test]\n    fn about_holds() {}\n\n    // r[verify demo.plain]\n    #[test]\n    fn plain_holds() {\n        super::plain();\n    }\n}\n";
        // Only the MAY rule's test ran (and passed).
        const JUNIT: &str = "<testsuites><testsuite name=\"demo\" tests=\"1\"><testcase name=\"tests::may_holds\" classname=\"demo\"/></testsuite></testsuites>";
        const RESULTS: &str = "target/nextest/ci/junit.xml";
        let tree = Memory::new([
            (".config/tracey/config.styx", RUN_CONFIG),
            ("docs/spec.md", RUN_SPEC),
            ("Cargo.toml", "[workspace]\nmembers = [\"crates/demo\"]\n"),
            (
                "crates/demo/Cargo.toml",
                "[package]\nname = \"demo\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
            ),
            ("crates/demo/src/lib.rs", LIB),
            (RESULTS, JUNIT),
        ]);
        crate::spec_check::check(&tree, &[std::path::Path::new(RESULTS)], None, &[])
            .expect("judged")
    }

    /// The level decides which rules' missing tests are problems, not what is counted: a test
    /// run judges and counts every verified rule, whatever its level.
    // i[verify spec-check.levels]
    #[test]
    fn a_test_backed_run_counts_every_level_and_demands_tests_by_level() {
        let outcome = run_backed();
        assert_eq!(
            outcome.mode.judged,
            Some(3),
            "every verified rule is judged"
        );
        assert_eq!(
            outcome.specs[0].tested,
            Some(1),
            "the MAY rule's pass counts"
        );
        assert_eq!(outcome.untested, ["r[demo.about]", "r[demo.plain]"]);
        let problems: Vec<(Kind, Option<String>)> = outcome
            .problems
            .iter()
            .map(|p| (p.kind, p.rule.clone()))
            .collect();
        assert_eq!(
            problems,
            [(Kind::NotVerifiedByTest, Some("r[demo.plain]".to_owned()))],
            "only the MUST rule's level demands a passing test"
        );
    }
}
