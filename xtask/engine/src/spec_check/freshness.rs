//! Results older than the annotations they judge: a file holding `verify` annotations that changed
//! after the JUnit file was written may hold tests that never ran in that run (or ran in an older
//! form), so the gate says so instead of lending them the old run's results.

use crate::model::tree::Tree;
use std::collections::BTreeMap;

use super::coverage::Analysis;
use super::crate_layout;
use super::problem::{Kind, Problem};
use super::test_backed::Evidence;
use crate::model::timestamp;

/// One problem per file with `verify` annotations (of the rules judged) modified after the results.
// i[impl spec-check.freshness]
pub fn outdated(
    tree: &dyn Tree,
    analyses: &[Analysis],
    evidence: &Evidence,
    crates: &[String],
) -> Vec<Problem> {
    let mut newer: BTreeMap<String, (std::time::SystemTime, Option<String>)> = BTreeMap::new();
    for analysis in analyses {
        for coverage in &analysis.rules {
            for site in &coverage.verify_sites {
                let package = crate_layout::package_of(tree, &site.path).map(|(p, _)| p);
                if !crates.is_empty() && !package.as_ref().is_some_and(|p| crates.contains(p)) {
                    continue;
                }
                let Ok(modified) = tree.modified(&site.path) else {
                    continue;
                };
                if modified > evidence.written {
                    newer.insert(site.file.clone(), (modified, package));
                }
            }
        }
    }
    newer
        .into_iter()
        .map(|(file, (modified, package))| {
            let rerun = match package {
                Some(package) => format!("`cargo xtask test -- -p {package}`"),
                None => "`cargo xtask test`".to_owned(),
            };
            Problem::new(
                Kind::ResultsOutdated,
                format!(
                    "changed {} after the test results were written ({}), so they may not \
                     describe its tests; rerun {rerun}",
                    timestamp::utc(modified),
                    timestamp::utc(evidence.written)
                ),
            )
            .in_file(file)
        })
        .collect()
}
