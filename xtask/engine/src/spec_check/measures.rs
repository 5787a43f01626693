//! What each rule has now — implemented, verified, tested, proven — per spec/impl row: one
//! computation that the spec review (two sides compared) and the ratchet (a side against its
//! baseline) both read, so that they never count a rule differently.

use super::Tree;
use super::coverage::RuleCoverage;
use super::report::Outcome;
use crate::model::tree::Tree as Source;

/// What one rule has.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Has {
    /// A current `impl` annotation, and no annotation of it names an older version.
    pub implemented: bool,
    /// A `verify` annotation.
    pub verified: bool,
    /// In a test-backed row: a verifying test that ran and passed.
    pub tested: bool,
    /// A proof in the checked-in summary that holds (a run left in `target/prove/` is not part
    /// of a change, and a base revision has none).
    pub proven: bool,
    /// An annotation of it names an older version.
    pub stale: bool,
}

impl Has {
    /// Whether it has the measure `what`.
    pub fn of(self, what: super::levels::Measure) -> bool {
        use super::levels::Measure;
        match what {
            Measure::Implemented => self.implemented,
            Measure::Verified => self.verified,
            Measure::Tested => self.tested,
            Measure::Proven => self.proven,
        }
    }
}

/// One spec/impl row.
pub struct Row<'t> {
    /// The row's name, as the gate's table prints it.
    pub name: String,
    /// Whether test results judged it (its tested measure means something).
    pub test_backed: bool,
    /// Each rule of the row and what it has.
    pub rules: Vec<(&'t RuleCoverage, Has)>,
}

/// The rows of `tree` as the gate judged it (`outcome`), with the proofs of `source`'s summary.
// i[impl spec-check.review.coverage]
// i[impl spec-check.ratchet]
pub fn rows<'t>(source: &dyn Source, tree: &'t Tree, outcome: &Outcome) -> Vec<Row<'t>> {
    let proofs = crate::model::proof_summary::by_id(source);
    tree.analyses()
        .iter()
        .map(|analysis| {
            let name = analysis.summary.name.clone();
            let test_backed = outcome
                .specs
                .iter()
                .find(|s| s.name == name)
                .and_then(|s| s.tested)
                .is_some();
            let rules = analysis
                .rules
                .iter()
                .map(|coverage| {
                    let stale = coverage
                        .impl_sites
                        .iter()
                        .chain(&coverage.verify_sites)
                        .any(|s| s.stale);
                    let verified = !coverage.verify_sites.is_empty();
                    let has = Has {
                        implemented: !stale && !coverage.impl_sites.is_empty(),
                        verified,
                        tested: test_backed
                            && verified
                            && !outcome.untested.contains(&coverage.rule.marker()),
                        proven: proofs
                            .get(&coverage.rule.id.to_string())
                            .is_some_and(crate::model::proof::Proof::proven),
                        stale,
                    };
                    (coverage, has)
                })
                .collect();
            Row {
                name,
                test_backed,
                rules,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Memory;

    const CONFIG: &str = "specs (\n  {\n    name demo\n    include (docs/spec.md)\n    impls (\n      {\n        name rust\n        include (src/**/*.rs)\n      }\n    )\n  }\n)\n";

    /// Each rule's measures: alpha implemented, verified and proven; beta implemented only;
    /// gamma's annotation names an older version (stale, so not implemented).
    // i[verify spec-check.review.coverage]
    // i[verify spec-check.ratchet]
    #[test]
    fn each_rule_has_what_its_annotations_and_proof_give() {
        let proof = crate::model::proof_summary::render(&[(
            "r[demo.alpha]".to_owned(),
            crate::model::proof::Proof {
                caught: 1,
                ..crate::model::proof::Proof::default()
            },
        )]);
        let tree = Memory::new([
            (".config/tracey/config.styx", CONFIG),
            (
                "docs/spec.md",
                "# Demo\n\n> r[demo.alpha]\n> A.\n\n> r[demo.beta]\n> B.\n\n> r[demo.gamma+2]\n> C.\n",
            ),
            (
                "src/lib.rs",
                "// r[impl demo.alpha]\npub fn a() {}\n// r[impl demo.beta]\npub fn b() {}\n// r[impl demo.gamma]\npub fn c() {}\n#[cfg(test)]\nmod tests {\n    // r[verify demo.alpha]\n    #[test]\n    fn t() {}\n}\n",
            ),
            ("docs/audit/proof.md", &*proof),
        ]);
        let read = crate::spec_check::read(&tree);
        let mut outcome =
            crate::spec_check::check_read(&tree, &read, &[], None, &[]).expect("judged");
        let (_, read) = read.expect("read");
        let rows_now = rows(&tree, &read, &outcome);
        assert_eq!(rows_now.len(), 1);
        assert!(!rows_now[0].test_backed);
        let tested_of = |rows: &[Row<'_>]| -> Vec<(String, bool)> {
            rows[0]
                .rules
                .iter()
                .map(|(c, has)| (c.rule.id.base.clone(), has.tested))
                .collect()
        };
        // Judged against test results: a verified rule is tested unless its tests did not pass.
        for spec in &mut outcome.specs {
            spec.tested = Some(1);
        }
        let backed = rows(&tree, &read, &outcome);
        assert!(backed[0].test_backed);
        assert_eq!(
            tested_of(&backed),
            [
                ("demo.alpha".to_owned(), true),
                ("demo.beta".to_owned(), false),
                ("demo.gamma".to_owned(), false)
            ]
        );
        outcome.untested.push("r[demo.alpha]".to_owned());
        assert!(
            tested_of(&rows(&tree, &read, &outcome))
                .iter()
                .all(|(_, t)| !t)
        );
        let rows = rows_now;
        let has: Vec<(String, Has)> = rows[0]
            .rules
            .iter()
            .map(|(c, has)| (c.rule.id.base.clone(), *has))
            .collect();
        assert_eq!(
            has,
            [
                (
                    "demo.alpha".to_owned(),
                    Has {
                        implemented: true,
                        verified: true,
                        proven: true,
                        ..Has::default()
                    }
                ),
                (
                    "demo.beta".to_owned(),
                    Has {
                        implemented: true,
                        ..Has::default()
                    }
                ),
                (
                    "demo.gamma".to_owned(),
                    Has {
                        stale: true,
                        ..Has::default()
                    }
                ),
            ]
        );
    }
}
