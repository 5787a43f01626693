//! Reads cargo-mutants' `outcomes.json` into one rule's proof: mutants caught, missed, unviable and
//! timed out, and each survivor's place and mutation.

use std::path::Path;

use serde::Deserialize;

pub use spec_engine::model::proof::Proof;

use super::plan::Plan;
use crate::Error;

/// A rule with nothing to mutate or nothing to judge with.
pub fn not_provable(plan: &Plan) -> Proof {
    let why = if plan.targets.is_empty() {
        "no `impl` annotation precedes a Rust item"
    } else {
        "no `verify` annotation precedes a test"
    };
    Proof {
        not_provable: Some(why.to_owned()),
        ..Proof::default()
    }
}

#[derive(Deserialize)]
struct Lab {
    outcomes: Vec<Outcome>,
}

#[derive(Deserialize)]
struct Outcome {
    scenario: serde_json::Value,
    summary: String,
}

/// Why a rule is not provable when cargo-mutants found nothing to mutate in its items.
pub const NO_MUTANTS: &str = "cargo-mutants finds no mutant to make in the annotated items";

/// Whether a mutant at (file, line) lies in the rule's items.
pub type Within<'a> = &'a dyn Fn(&str, usize) -> bool;

/// Reads `outcomes.json`; `code` is cargo-mutants' exit code, for the error when there is none.
/// Only the mutants `within` places in the rule's items count.
// i[impl prove.outcomes+2]
pub fn read(path: &Path, code: Option<i32>, within: Within) -> crate::error::Result<Proof> {
    // cargo-mutants exits 0 and writes no outcomes when the filters leave no mutant ("Found 0
    // mutants to test"): nothing was judged, which is not an error of the run.
    if code == Some(0) && !path.exists() {
        return Ok(Proof {
            not_provable: Some(NO_MUTANTS.to_owned()),
            ..Proof::default()
        });
    }
    let text = std::fs::read_to_string(path).map_err(|source| Error::NoOutcomes {
        code,
        path: path.to_path_buf(),
        source,
    })?;
    parse(&text, within)
}

/// Parses `outcomes.json`, counting only the mutants `within` places in the rule's items:
/// cargo-mutants 27 applies `--re` to no struct-field deletion (`delete field x from struct S
/// expression`), so it tries those of every function in the file, other rules' code included.
// i[impl prove.outcomes+2]
pub fn parse(text: &str, within: Within) -> crate::error::Result<Proof> {
    let lab: Lab = serde_json::from_str(text)?;
    let mut proof = Proof::default();
    for outcome in lab.outcomes {
        let Some(mutant) = outcome.scenario.get("Mutant") else {
            // The baseline: cargo-mutants stops before any mutant when it fails.
            if outcome.summary != "Success" {
                return Err(Error::BaselineFailed(outcome.summary));
            }
            continue;
        };
        let file = mutant.get("file").and_then(|f| f.as_str()).unwrap_or("?");
        let (line, col) = mutant
            .get("span")
            .and_then(|s| s.get("start"))
            .map_or((0, 0), |start| {
                (
                    start.get("line").and_then(|v| v.as_u64()).unwrap_or(0),
                    start.get("column").and_then(|v| v.as_u64()).unwrap_or(0),
                )
            });
        if !within(file, usize::try_from(line).unwrap_or(usize::MAX)) {
            continue;
        }
        match outcome.summary.as_str() {
            "CaughtMutant" => proof.caught += 1,
            "Timeout" => proof.timeout += 1,
            "Unviable" => proof.unviable += 1,
            "MissedMutant" => {
                proof.missed += 1;
                let name = mutant
                    .get("name")
                    .and_then(|n| n.as_str())
                    .unwrap_or("?")
                    .to_owned();
                // cargo-mutants' names already start with `file:line:col: `; older ones did not.
                if name.starts_with(file) {
                    proof.survivors.push(name);
                } else {
                    proof.survivors.push(format!("{file}:{line}:{col}: {name}"));
                }
            }
            other => return Err(Error::UnexpectedOutcome(other.to_owned())),
        }
    }
    Ok(proof)
}

#[cfg(test)]
mod tests {
    use super::*;

    // i[verify prove.outcomes+2]
    #[test]
    fn outcomes_are_counted_and_survivors_placed() {
        let json = r#"{"outcomes":[
            {"scenario":"Baseline","summary":"Success"},
            {"scenario":{"Mutant":{"name":"replace alpha -> u32 with 0","file":"crates/demo/src/lib.rs","span":{"start":{"line":3,"column":5},"end":{"line":3,"column":6}}}},"summary":"CaughtMutant"},
            {"scenario":{"Mutant":{"name":"crates/demo/src/lib.rs:3:5: replace alpha -> u32 with 1","file":"crates/demo/src/lib.rs","span":{"start":{"line":3,"column":5},"end":{"line":3,"column":6}}}},"summary":"MissedMutant"},
            {"scenario":{"Mutant":{"name":"replace + with -","file":"crates/demo/src/lib.rs","span":{"start":{"line":4,"column":7},"end":{"line":4,"column":8}}}},"summary":"Unviable"},
            {"scenario":{"Mutant":{"name":"replace loop","file":"crates/demo/src/lib.rs","span":{"start":{"line":5,"column":1},"end":{"line":5,"column":2}}}},"summary":"Timeout"}
        ],"total_mutants":4}"#;
        let proof = parse(json, &|_, _| true).expect("parses");
        assert_eq!(
            (proof.caught, proof.missed, proof.unviable, proof.timeout),
            (1, 1, 1, 1)
        );
        assert_eq!(
            proof.survivors,
            ["crates/demo/src/lib.rs:3:5: replace alpha -> u32 with 1"]
        );
        assert!(!proof.proven());
        let failed = r#"{"outcomes":[{"scenario":"Baseline","summary":"Failure"}]}"#;
        assert!(
            matches!(parse(failed, &|_, _| true), Err(Error::BaselineFailed(summary)) if summary == "Failure"),
            "a failing baseline proves nothing"
        );
        let odd = r#"{"outcomes":[{"scenario":{"Mutant":{"file":"a.rs"}},"summary":"Exploded"}]}"#;
        assert!(matches!(
            parse(odd, &|_, _| true),
            Err(Error::UnexpectedOutcome(outcome)) if outcome == "Exploded"
        ));
        assert!(matches!(parse("{", &|_, _| true), Err(Error::Json(_))));
    }

    // i[verify prove.outcomes+2]
    #[test]
    fn no_mutant_to_make_is_not_provable_but_a_missing_report_after_a_run_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let absent = dir.path().join("mutants.out/outcomes.json");
        let proof =
            read(&absent, Some(0), &|_, _| true).expect("exit 0 without outcomes is no mutant");
        assert_eq!(proof.not_provable.as_deref(), Some(NO_MUTANTS));
        assert!(!proof.proven());
        assert_eq!(
            proof.line("r[demo]"),
            format!("r[demo]: not provable — {NO_MUTANTS}")
        );
        // Survivors or timeouts were reported, so the outcomes must be there.
        assert!(matches!(
            read(&absent, Some(2), &|_, _| true),
            Err(Error::NoOutcomes { code: Some(2), .. })
        ));
        assert!(read(&absent, Some(3), &|_, _| true).is_err());
    }

    // i[verify prove.outcomes+2]
    #[test]
    fn a_mutant_outside_the_rules_items_is_not_counted() {
        let json = r#"{"outcomes":[
            {"scenario":"Baseline","summary":"Success"},
            {"scenario":{"Mutant":{"name":"a.rs:3:5: replace f -> u32 with 0","file":"a.rs","span":{"start":{"line":3,"column":5}}}},"summary":"CaughtMutant"},
            {"scenario":{"Mutant":{"name":"a.rs:40:9: delete field x from struct S expression in g","file":"a.rs","span":{"start":{"line":40,"column":9}}}},"summary":"MissedMutant"},
            {"scenario":{"Mutant":{"name":"b.rs:3:1: replace h with ()","file":"b.rs","span":{"start":{"line":3,"column":1}}}},"summary":"MissedMutant"}
        ]}"#;
        let items = |file: &str, line: usize| file == "a.rs" && (1..=10).contains(&line);
        let proof = parse(json, &items).expect("parses");
        assert_eq!((proof.caught, proof.missed), (1, 0), "{proof:?}");
        assert!(proof.proven());
        let all = parse(json, &|_, _| true).expect("parses");
        assert_eq!(all.missed, 2);
    }
}
