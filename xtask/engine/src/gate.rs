//! The test-backed gate as one call: the tree read, checked against a run's results and skip
//! ledger, the waivers and the coverage ratchet applied on a given day. `cargo xtask spec-check`
//! and the test runner (holdfast-test-runner) judge through these functions, so the two cannot
//! drift apart.

use std::path::Path;
use std::time::SystemTime;

use crate::model::tree::Tree as Source;
use crate::spec_check::problem::Problem;
use crate::spec_check::report::Outcome;
use crate::spec_check::{Tree, check_read, config, shown};

/// The day waivers are judged on, `YYYY-MM-DD` in UTC, of `now` (the caller's clock).
pub fn today(now: SystemTime) -> String {
    let now = crate::model::timestamp::utc(now);
    now.get(..10).unwrap_or_default().to_owned()
}

/// The waivers and the ratchet on `tree` (read from `source`) on `today`: their problems join
/// `outcome`'s, and every problem is put in the report's order.
pub fn apply_ratchet(source: &dyn Source, tree: &Tree, outcome: &mut Outcome, today: &str) {
    let found = crate::ratchet::check(source, tree, outcome, today);
    outcome.problems.extend(found);
    outcome.problems.sort_by(Problem::order);
}

/// The gate on `read` (what [`crate::spec_check::read`] gave for `source`): [`check_read`] with the run's
/// `results`, `skips` and `crates`, then [`apply_ratchet`] on `today`. A fatal problem (an
/// unusable results file or ledger) names its file relative to the root when the file is there,
/// as a command run in the root names the path it was given.
pub fn gate(
    source: &dyn Source,
    read: &Result<(config::Loaded, Tree), Problem>,
    results: &[&Path],
    skips: Option<&Path>,
    crates: &[String],
    today: &str,
) -> Result<Outcome, Problem> {
    let mut outcome = check_read(source, read, results, skips, crates).map_err(|mut fatal| {
        if let Some(file) = &mut fatal.file
            && source.is_file(Path::new(file.as_str()))
        {
            *file = shown(source, Path::new(file.as_str()));
        }
        fatal
    })?;
    if let Ok((_, tree)) = read {
        apply_ratchet(source, tree, &mut outcome, today);
    }
    Ok(outcome)
}

/// The two lines (for stderr) of a gate that judged nothing because of `fatal`; the command
/// exits 2 after them.
pub fn fatal_lines(fatal: &Problem) -> [String; 2] {
    [
        format!("error: spec-check: {fatal}"),
        "error: spec-check: nothing was judged (exit 2)".to_owned(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn today_is_the_utc_date_of_the_clock_given() {
        // 2026-12-06T23:59:59Z, and a second later.
        let at = |secs| SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(secs);
        assert_eq!(today(at(1_796_601_599)), "2026-12-06");
        assert_eq!(today(at(1_796_601_600)), "2026-12-07");
    }
}
