use crate::Memory;
use crate::review;
use crate::spec_check::{self, problem::Kind};

/// The SARIF 2.1.0 JSON Schema (OASIS), checked in so that the test runs offline.
const SARIF_SCHEMA: &str = include_str!("../../tests/schemas/sarif-2.1.0.schema.json");

const CONFIG: &str = "specs (\n  {\n    name demo\n    include (docs/spec.md)\n    impls (\n      {\n        name rust\n        include (src/**/*.rs)\n      }\n    )\n  }\n)\n";

/// A tree with problems: a rule never verified, a stale reference, a reference to no rule.
fn with_problems() -> Memory {
    Memory::new([
        (".config/tracey/config.styx", CONFIG),
        (
            "docs/spec.md",
            "# Demo\n\n> r[demo.alpha+2]\n> Alpha holds.\n\n> r[demo.beta]\n> Beta holds.\n",
        ),
        (
            "src/lib.rs",
            "// r[impl demo.alpha]\npub fn alpha() {}\n\n// r[impl demo.beta]\n// r[impl demo.gamma]\npub fn beta() {}\n",
        ),
    ])
}

fn violations(log: &serde_json::Value) -> Vec<String> {
    let schema: serde_json::Value = serde_json::from_str(SARIF_SCHEMA).expect("schema is JSON");
    let validator = jsonschema::validator_for(&schema).expect("a valid schema");
    validator
        .iter_errors(log)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect()
}

// i[verify spec-check.sarif]
#[test]
fn every_gate_and_review_problem_is_a_valid_sarif_result() {
    let tree = with_problems();
    let outcome = spec_check::check(&tree, &[], None, &[]).expect("a config");
    assert!(outcome.problems.len() >= 3, "{:?}", outcome.problems);
    // One problem without a place, as the gate reports some.
    let mut gate = outcome.problems.clone();
    gate.push(spec_check::problem::Problem::new(
        Kind::TestResults,
        "the results file is not JUnit",
    ));
    let reviewed = [review::Problem {
        kind: review::Kind::TextChangedWithoutBump,
        rule: "r[demo.beta]".to_owned(),
        file: "docs/spec.md".to_owned(),
        line: 6,
        message: "the text of r[demo.beta] changed; bump it to r[demo.beta+2]".to_owned(),
        lost: Vec::new(),
    }];
    let log: serde_json::Value =
        serde_json::from_str(&super::render(std::path::Path::new("/"), &gate, &reviewed))
            .expect("JSON");
    assert_eq!(violations(&log), Vec::<String>::new(), "{log:#}");
    assert_eq!(log["version"], "2.1.0");
    let results = log["runs"][0]["results"].as_array().expect("results");
    assert_eq!(results.len(), gate.len() + 1);
    let rules = log["runs"][0]["tool"]["driver"]["rules"]
        .as_array()
        .expect("rules");
    for result in results {
        // Each result points at the descriptor of its kind, which says how to fix it.
        let index = usize::try_from(result["ruleIndex"].as_u64().expect("index")).expect("usize");
        assert_eq!(rules[index]["id"], result["ruleId"], "{result:#}");
        assert!(
            rules[index]["help"]["text"]
                .as_str()
                .is_some_and(|t| !t.is_empty())
        );
        let place = &result["locations"][0]["physicalLocation"];
        assert!(place["artifactLocation"]["uri"].is_string(), "{result:#}");
        assert!(
            place["region"]["startLine"]
                .as_u64()
                .is_some_and(|l| l >= 1)
        );
    }
    let missing = results
        .iter()
        .find(|r| r["ruleId"] == "missing-verify" && r["properties"]["rule"] == "r[demo.alpha+2]")
        .expect("demo.alpha is not verified");
    let at = &missing["locations"][0]["physicalLocation"];
    assert_eq!(
        (
            at["artifactLocation"]["uri"].as_str(),
            at["region"]["startLine"].as_u64()
        ),
        (Some("docs/spec.md"), Some(3))
    );
    assert!(results.iter().any(|r| r["ruleId"] == "stale"));
    assert!(results.iter().any(|r| r["ruleId"] == "unknown-rule"));
    let unbumped = results
        .iter()
        .find(|r| r["ruleId"] == "text-changed-without-bump")
        .expect("the review's problem");
    assert!(
        unbumped["message"]["text"]
            .as_str()
            .is_some_and(|t| t.contains("bump it to r[demo.beta+2]"))
    );
    // The problem without a place is on the config's first line.
    let unplaced = results
        .iter()
        .find(|r| r["ruleId"] == "test-results")
        .expect("placed");
    assert_eq!(
        unplaced["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
        ".config/tracey/config.styx"
    );
}

// i[verify spec-check.sarif]
#[test]
fn a_clean_tree_is_a_valid_log_without_results() {
    let log: serde_json::Value =
        serde_json::from_str(&super::render(std::path::Path::new("/"), &[], &[])).expect("JSON");
    assert_eq!(violations(&log), Vec::<String>::new(), "{log:#}");
    assert_eq!(log["runs"][0]["results"], serde_json::json!([]));
    // The schema is no rubber stamp: a level SARIF does not know, or a result without a
    // message, is refused.
    let mut broken = log.clone();
    broken["runs"][0]["results"] = serde_json::json!([{"level": "fatal", "ruleId": "x"}]);
    assert_eq!(violations(&broken).len(), 2, "{:?}", violations(&broken));
}

// i[verify spec-check.sarif]
#[test]
fn a_problem_without_a_place_or_outside_the_root_is_placed_on_the_config() {
    let root = std::path::Path::new("/work/repo");
    let gate = [
        spec_check::problem::Problem::new(Kind::TestResults, "cannot use the test results")
            .in_file("/work/repo/target/junit.xml"),
        spec_check::problem::Problem::new(Kind::TestResults, "cannot use the skip ledger")
            .in_file("/elsewhere/skips.jsonl"),
        spec_check::problem::Problem::new(Kind::Config, "no specs").in_file(""),
    ];
    // A review problem of a row, not of a rule: no file, no line, no rule.
    let reviewed = [review::Problem {
        kind: review::Kind::CoverageDown,
        rule: String::new(),
        file: String::new(),
        line: 0,
        message: "demo: tested rules went from 2 to 1".to_owned(),
        lost: Vec::new(),
    }];
    let log: serde_json::Value =
        serde_json::from_str(&super::render(root, &gate, &reviewed)).expect("JSON");
    assert_eq!(violations(&log), Vec::<String>::new(), "{log:#}");
    let results = log["runs"][0]["results"].as_array().expect("results");
    let placed: Vec<(&str, u64)> = results
        .iter()
        .map(|r| {
            let at = &r["locations"][0]["physicalLocation"];
            (
                at["artifactLocation"]["uri"].as_str().unwrap_or_default(),
                at["region"]["startLine"].as_u64().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        placed,
        [
            ("target/junit.xml", 1),
            (".config/tracey/config.styx", 1),
            (".config/tracey/config.styx", 1),
            (".config/tracey/config.styx", 1),
        ],
        "{log:#}"
    );
    // Every uri is non-empty and relative; no result names an empty rule.
    for result in results {
        let uri = result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
            .as_str()
            .unwrap_or_default();
        assert!(!uri.is_empty() && !uri.starts_with('/'), "{result:#}");
        assert_ne!(result["properties"]["rule"], "", "{result:#}");
    }
}

// i[verify spec-check.sarif]
#[test]
fn every_kind_is_described_every_time_so_rule_indexes_are_stable() {
    let root = std::path::Path::new("/");
    let empty: serde_json::Value =
        serde_json::from_str(&super::render(root, &[], &[])).expect("JSON");
    let tree = with_problems();
    let outcome = spec_check::check(&tree, &[], None, &[]).expect("a config");
    let full: serde_json::Value =
        serde_json::from_str(&super::render(root, &outcome.problems, &[])).expect("JSON");
    let driver = |log: &serde_json::Value| log["runs"][0]["tool"]["driver"].clone();
    // The same descriptors whatever was found.
    assert_eq!(driver(&empty)["rules"], driver(&full)["rules"]);
    let rules = driver(&empty)["rules"].as_array().expect("rules").clone();
    let ids: Vec<&str> = rules.iter().filter_map(|r| r["id"].as_str()).collect();
    for kind in [
        "config",
        "missing-verify",
        "ratchet",
        "waiver",
        "coverage-down",
        "text-changed-without-bump",
    ] {
        assert!(ids.contains(&kind), "{ids:?}");
    }
    for rule in &rules {
        // GitHub wants a full description; each kind has a help text.
        for field in ["shortDescription", "fullDescription", "help"] {
            assert!(
                rule[field]["text"].as_str().is_some_and(|t| !t.is_empty()),
                "{rule:#}"
            );
        }
    }
    // No base id is used that the run does not define, and the tool is not tracey.
    let text = serde_json::to_string(&full).expect("JSON");
    assert!(!text.contains("uriBaseId"), "{text}");
    assert!(!text.contains("bearcove/tracey"), "{text}");
    for result in full["runs"][0]["results"].as_array().expect("results") {
        let index = usize::try_from(result["ruleIndex"].as_u64().expect("index")).expect("usize");
        assert_eq!(rules[index]["id"], result["ruleId"]);
    }
}

// i[verify spec-check.sarif]
#[test]
fn each_kind_points_at_its_own_descriptor_with_its_own_help() {
    for (at, kind) in super::GATE_KINDS.iter().enumerate() {
        assert_eq!(super::gate_index(*kind), at, "{kind:?}");
    }
    for (at, kind) in super::REVIEW_KINDS.iter().enumerate() {
        assert_eq!(
            super::review_index(*kind),
            super::GATE_KINDS.len() + at,
            "{kind:?}"
        );
    }
    let log: serde_json::Value =
        serde_json::from_str(&super::render(std::path::Path::new("/"), &[], &[])).expect("JSON");
    let rules = log["runs"][0]["tool"]["driver"]["rules"]
        .as_array()
        .expect("rules")
        .clone();
    assert_eq!(
        rules.len(),
        super::GATE_KINDS.len() + super::REVIEW_KINDS.len()
    );
    // Each kind is fixed its own way: no two descriptors share a help text.
    let helps: std::collections::BTreeSet<&str> = rules
        .iter()
        .filter_map(|r| r["help"]["text"].as_str())
        .collect();
    assert_eq!(helps.len(), rules.len(), "{rules:#?}");
}

// i[verify spec-check.sarif]
#[test]
fn a_message_is_prefixed_with_its_rule_unless_it_names_it_and_dot_segments_are_dropped() {
    let named =
        spec_check::problem::Problem::new(Kind::MissingVerify, "r[demo.alpha] is not verified")
            .at("./src/lib.rs", 4)
            .rule("r[demo.alpha]".to_owned());
    let unnamed = spec_check::problem::Problem::new(Kind::MissingVerify, "not verified")
        .at("src/./lib.rs", 7)
        .rule("r[demo.beta]".to_owned());
    let log: serde_json::Value = serde_json::from_str(&super::render(
        std::path::Path::new("/"),
        &[named, unnamed],
        &[],
    ))
    .expect("JSON");
    let results = log["runs"][0]["results"].as_array().expect("results");
    let shown: Vec<(&str, &str, u64)> = results
        .iter()
        .map(|r| {
            let at = &r["locations"][0]["physicalLocation"];
            (
                r["message"]["text"].as_str().expect("text"),
                at["artifactLocation"]["uri"].as_str().expect("uri"),
                at["region"]["startLine"].as_u64().expect("line"),
            )
        })
        .collect();
    assert_eq!(
        shown,
        [
            ("r[demo.alpha] is not verified", "src/lib.rs", 4),
            ("r[demo.beta]: not verified", "src/lib.rs", 7),
        ]
    );
}
