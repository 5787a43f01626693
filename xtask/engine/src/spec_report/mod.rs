//! `cargo xtask spec-report` — one self-contained HTML file (no network at view time) a reviewer
//! can open: coverage per spec and per crate as bars, every rule with its text, its implementing
//! and verifying sites (linked), its tests' last results and the findings it closes, the findings
//! with their verdicts, the rules whose only verifying tests were skipped, highlighted, and the
//! spec debt ([`debt`]: the code no rule names, largest first).
//!
//! It reads the tree once ([`crate::spec_check::read`]) and judges it with the spec gate
//! ([`crate::spec_check::check_read`]: the per-spec counts are the gate's own) and the trace
//! ([`crate::trace::everything`]: per rule and per finding), so the page, `spec-check --json` and
//! `trace` never disagree.

pub mod debt;
pub mod html;

use std::collections::BTreeMap;

use crate::model::tree::Tree as Source;
use crate::spec_check::crate_layout;

/// Coverage of one crate: the rules implemented in it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CrateCoverage {
    /// Rules with a current `impl` annotation in the crate.
    pub rules: usize,
    /// Of those, rules with a current `verify` annotation (anywhere).
    pub verified: usize,
    /// Of those, rules with a verifying test that passed (test-backed only).
    pub tested: usize,
}

/// Per crate (package of the `impl` sites): rules implemented there, verified, tested.
pub fn per_crate(
    source: &dyn Source,
    everything: &crate::trace::Everything,
) -> BTreeMap<String, CrateCoverage> {
    let mut crates: BTreeMap<String, CrateCoverage> = BTreeMap::new();
    for (report, analysis_rule) in everything.rules.iter().zip(everything.tree.rules()) {
        let mut packages: Vec<String> = everything
            .tree
            .coverage_of(analysis_rule)
            .flat_map(|c| c.impl_sites.iter().filter(|s| !s.stale))
            .filter_map(|site| crate_layout::package_of(source, &site.path).map(|(p, _)| p))
            .collect();
        packages.sort();
        packages.dedup();
        let verified = report.verifies.iter().any(|v| !v.stale);
        let tested = report
            .verifies
            .iter()
            .any(|v| !v.stale && v.result.as_deref() == Some("passed"));
        for package in packages {
            let entry = crates.entry(package).or_default();
            entry.rules += 1;
            entry.verified += usize::from(verified);
            entry.tested += usize::from(tested);
        }
    }
    crates
}
