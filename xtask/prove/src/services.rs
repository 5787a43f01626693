//! Rules whose tests need a real service: run without it, each such test skips (and passes), so
//! every mutant would survive and the run judged nothing. Each rule's cargo-mutants run gets its
//! own skip ledger (holdfast-test-support's); a rule whose ledger is not empty is NOT RUN, never
//! a verdict. Under `cargo xtask test --prove-ci` the services are up and a missing one panics.

use std::collections::BTreeSet;
use std::path::Path;

/// holdfast-test-support's variable naming the skip ledger (its own constant: the name is
/// written once).
pub const LEDGER_VAR: &str = holdfast_test_support::services::SKIP_LEDGER_VAR;
/// The ledger's name inside `target/prove/RULE/`.
pub const LEDGER: &str = "skips.jsonl";

/// The services the tests recorded in `ledger` skipped for want of, sorted and deduplicated.
// i[impl ci.prove+2]
pub fn skipped(ledger: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(ledger).unwrap_or_default();
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            serde_json::from_str::<serde_json::Value>(line)
                .ok()
                .and_then(|v| v.get("service")?.as_str().map(str::to_owned))
                // A line we cannot read is still a skip.
                .unwrap_or_else(|| "a service".to_owned())
        })
        .collect()
}

/// The NOT RUN reason for a rule whose tests skipped for want of `services`.
pub fn reason(services: &BTreeSet<String>) -> String {
    let names: Vec<&str> = services.iter().map(String::as_str).collect();
    format!(
        "its tests need {} and skipped without it, so no mutant was judged (prove it under `cargo xtask test --prove-ci`)",
        names.join(", ")
    )
}

/// The closing warning naming the rules left unrun for want of services, if any.
pub fn warning(rules: &[String]) -> Option<String> {
    if rules.is_empty() {
        return None;
    }
    Some(format!(
        "prove: WARNING: {} rule{} NOT RUN because their tests skipped without their services, so not proven by this run: {}",
        rules.len(),
        if rules.len() == 1 { "" } else { "s" },
        rules.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    // i[verify ci.prove+2]
    #[test]
    fn a_rule_whose_tests_skipped_names_the_services_and_is_warned_about() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ledger = dir.path().join(LEDGER);
        assert!(skipped(&ledger).is_empty(), "no ledger: nothing skipped");
        std::fs::write(&ledger, "").expect("write");
        assert!(
            skipped(&ledger).is_empty(),
            "an empty ledger: nothing skipped"
        );
        std::fs::write(
            &ledger,
            concat!(
                r#"{"test":"t::a","binary":"pull","service":"registry","reason":"x"}"#,
                "\n",
                r#"{"test":"t::b","binary":"pull","service":"dockerd","reason":"x"}"#,
                "\n",
                r#"{"test":"t::c","binary":"pull","service":"registry","reason":"x"}"#,
                "\n",
            ),
        )
        .expect("write");
        let needed = skipped(&ledger);
        assert_eq!(
            needed.iter().map(String::as_str).collect::<Vec<_>>(),
            ["dockerd", "registry"]
        );
        let why = reason(&needed);
        assert!(why.contains("dockerd, registry"), "{why}");
        assert!(why.contains("cargo xtask test --prove-ci"), "{why}");
        std::fs::write(&ledger, "not json\n").expect("write");
        assert_eq!(
            skipped(&ledger).len(),
            1,
            "an unreadable line is still a skip"
        );
        assert_eq!(warning(&[]), None);
        let warning = warning(&["r[pull.seed]".to_owned()]).expect("a warning");
        assert!(warning.contains("1 rule NOT RUN"), "{warning}");
        assert!(warning.contains("r[pull.seed]"), "{warning}");
    }
}
