use crate::Memory;
use crate::spec_check;

/// The export's JSON Schema, as checked in.
const SCHEMA_TEXT: &str = include_str!("../../../../docs/audit/spec-export.schema.json");

const CONFIG: &str = "specs (\n  {\n    name demo\n    include (docs/spec.md)\n    impls (\n      {\n        name rust\n        include (src/**/*.rs)\n      }\n    )\n  }\n)\n";

/// A tree with a rule at a level, verified, closing a finding and proven; a second one only
/// implemented, at version 2 and with the `shall` synonym.
fn fixture() -> Memory {
    Memory::new([
        (".config/tracey/config.styx", CONFIG),
        (
            "docs/spec.md",
            "# Demo\n\n> r[demo.alpha level=must]\n> Alpha holds,\n> always.\n\n> r[demo.beta+2 level=shall]\n> Beta holds.\n",
        ),
        (
            "src/lib.rs",
            "// r[impl demo.alpha]\npub fn alpha() {}\n\n// r[impl demo.beta+2]\npub fn beta() {}\n\n#[cfg(test)]\nmod tests {\n    // r[verify demo.alpha]\n    #[test]\n    fn alpha_holds() {\n        super::alpha();\n    }\n}\n",
        ),
        (
            "docs/audit/findings.md",
            "# Findings\n\n## H1: Alpha did not hold\n\nIt did not.\n\n**Closed by:** `r[demo.alpha]`\n",
        ),
        (
            "docs/audit/proof.md",
            "# Proof\n\n| rule | verdict | caught | missed | unviable | timeout | justified | commit | date | fingerprint |\n|---|---|---|---|---|---|---|---|---|---|\n| `r[demo.alpha]` | proven | 3 | 0 | 1 | 0 | - | abc1234 | 2026-12-01 | 000000000000/000000000000/000000000000 |\n",
        ),
    ])
}

/// The export of `tree`, annotations only.
fn export_of(tree: &dyn crate::Tree) -> serde_json::Value {
    let read = spec_check::read(tree);
    let everything = crate::trace::everything(tree, read, &[], None, true).expect("traced");
    serde_json::from_str(&super::render(&super::export(tree, &everything))).expect("JSON")
}

/// The schema's complaints about `export`, one line each.
fn violations(export: &serde_json::Value) -> Vec<String> {
    let schema: serde_json::Value = serde_json::from_str(SCHEMA_TEXT).expect("schema is JSON");
    let validator = jsonschema::validator_for(&schema).expect("a valid schema");
    validator
        .iter_errors(export)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect()
}

// i[verify spec-check.export+2]
// i[verify prove.fingerprint]
#[test]
fn a_fixtures_export_has_every_field_and_matches_the_schema() {
    let export = export_of(&fixture());
    assert_eq!(violations(&export), Vec::<String>::new(), "{export:#}");
    assert_eq!(export["schema"], super::SCHEMA);
    assert_eq!(export["results"], serde_json::Value::Null);
    let alpha = &export["rules"][0];
    assert_eq!(alpha["id"], "demo.alpha");
    assert_eq!(alpha["marker"], "r[demo.alpha]");
    assert_eq!(alpha["version"], 1);
    assert_eq!(alpha["level"], "must");
    assert_eq!(
        alpha["demands"],
        serde_json::json!({"implemented": true, "verified": true, "tested": true, "proven": true})
    );
    assert_eq!(alpha["spec"], "demo");
    assert_eq!(alpha["text"], "Alpha holds, always.");
    assert_eq!(
        alpha["defined"],
        serde_json::json!({"file": "docs/spec.md", "line": 3})
    );
    assert_eq!(alpha["impls"][0]["file"], "src/lib.rs");
    assert_eq!(alpha["impls"][0]["line"], 1);
    assert_eq!(alpha["impls"][0]["item"], "fn alpha");
    assert_eq!(alpha["verifies"][0]["line"], 9);
    assert_eq!(alpha["verifies"][0]["result"], serde_json::Value::Null);
    assert!(
        alpha["verifies"][0]["test"]
            .as_str()
            .is_some_and(|t| t.ends_with("alpha_holds")),
        "{alpha:#}"
    );
    assert_eq!(
        alpha["closes"],
        serde_json::json!([{"id": "H1", "title": "Alpha did not hold"}])
    );
    assert_eq!(alpha["proof"]["caught"], 3);
    assert_eq!(alpha["proof"]["commit"], "abc1234");
    // Its fingerprint is none of the tree's: every part changed since.
    assert_eq!(
        alpha["proof"]["fingerprint"],
        "000000000000/000000000000/000000000000"
    );
    assert_eq!(
        alpha["proof"]["stale"],
        "proof stale: text, impl and tests changed since abc1234"
    );
    assert_eq!(alpha["verdict"], "verified");
    let beta = &export["rules"][1];
    assert_eq!(
        (beta["version"].as_u64(), beta["level"].as_str()),
        (Some(2), Some("must"))
    );
    assert_eq!(beta["verifies"], serde_json::json!([]));
    assert_eq!(beta["proof"], serde_json::Value::Null);
    assert_eq!(beta["verdict"], "not verified");
}

// i[verify spec-check.export+2]
#[test]
fn the_schema_rejects_an_export_of_another_shape() {
    let mut export = export_of(&fixture());
    export["schema"] = serde_json::json!(super::SCHEMA + 1);
    export["rules"][0]["level"] = serde_json::json!("urgent");
    let found = violations(&export);
    assert_eq!(found.len(), 2, "{found:?}");
}

// i[verify spec-check.export+2]
#[test]
fn this_workspaces_export_matches_the_schema() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let export = export_of(&crate::Disk::new(&root));
    assert_eq!(violations(&export), Vec::<String>::new());
    let rules = export["rules"].as_array().expect("rules");
    assert!(rules.len() > 100, "{}", rules.len());
    assert!(
        rules.iter().any(|r| r["marker"] == "i[spec-check.export+2]"
            && r["impls"].as_array().is_some_and(|i| !i.is_empty())),
        "the export names its own rule"
    );
}

// i[verify spec-check.export+2]
#[test]
fn a_test_backed_export_gives_each_verifying_test_its_result() {
    // alpha verified by a unit test that passed, beta by an integration test that failed.
    let tree = Memory::new([
        (
            ".config/tracey/config.styx",
            CONFIG.replace("src/**/*.rs", "crates/**/*.rs").as_str(),
        ),
        (
            "docs/spec.md",
            "# Demo\n\n> r[demo.alpha]\n> Alpha holds.\n\n> r[demo.beta+2]\n> Beta holds.\n",
        ),
        ("Cargo.toml", "[workspace]\nmembers = [\"crates/demo\"]\n"),
        (
            "crates/demo/Cargo.toml",
            "[package]\nname = \"demo\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
        ),
        (
            "crates/demo/src/lib.rs",
            "// r[impl demo.alpha]\npub fn alpha() {}\n\n// r[impl demo.beta+2]\npub fn beta() {}\n\n#[cfg(test)]\nmod tests {\n    // r[verify demo.alpha]\n    #[test]\n    fn alpha_holds() {\n        super::alpha();\n    }\n}\n",
        ),
        (
            "crates/demo/tests/beta.rs",
            "// r[verify demo.beta+2]\n#[test]\nfn beta_holds() {\n    demo::beta();\n}\n",
        ),
        (
            "target/junit.xml",
            "<testsuites><testsuite name=\"demo\" tests=\"1\"><testcase name=\"tests::alpha_holds\" classname=\"demo\"/></testsuite><testsuite name=\"demo::beta\" tests=\"1\"><testcase name=\"beta_holds\" classname=\"demo::beta\"><failure message=\"no\"/></testcase></testsuite></testsuites>",
        ),
    ]);
    let junit = crate::Tree::root(&tree).join("target/junit.xml");
    let read = spec_check::read(&tree);
    let everything =
        crate::trace::everything(&tree, read, &[junit.as_path()], None, false).expect("traced");
    let export: serde_json::Value =
        serde_json::from_str(&super::render(&super::export(&tree, &everything))).expect("JSON");
    assert_eq!(violations(&export), Vec::<String>::new(), "{export:#}");
    assert!(
        export["results"]
            .as_str()
            .is_some_and(|r| r.contains("junit.xml")),
        "{export:#}"
    );
    let result = |rule: usize| export["rules"][rule]["verifies"][0]["result"].clone();
    assert_eq!(export["rules"][0]["marker"], "r[demo.alpha]");
    assert_eq!(result(0), "passed", "{export:#}");
    assert_eq!(export["rules"][1]["marker"], "r[demo.beta+2]");
    assert_eq!(result(1), "failed", "{export:#}");
    assert_eq!(export["rules"][0]["verdict"], "verified");
    assert_ne!(export["rules"][1]["verdict"], "verified", "{export:#}");
}

// i[verify spec-check.export+2]
#[test]
fn the_schema_constrains_locations_and_results() {
    let mut export = export_of(&fixture());
    export["rules"][0]["defined"]["column"] = serde_json::json!(4);
    export["rules"][0]["verifies"][0]["result"] = serde_json::json!("exploded");
    let found = violations(&export);
    assert_eq!(found.len(), 2, "{found:?}");
    // Every fate the results can give is accepted.
    for fate in [
        "passed",
        "failed",
        "skipped (needs docker: no socket)",
        "ignored or not run (absent from the results)",
        "ambiguous: matches 2 test cases (a, b)",
        "no test function follows the annotation",
    ] {
        let mut export = export_of(&fixture());
        export["rules"][0]["verifies"][0]["result"] = serde_json::json!(fate);
        assert_eq!(violations(&export), Vec::<String>::new(), "{fate}");
    }
}

/// An informative rule's level and demands are exported, and a MAY rule's.
// i[verify spec-check.export+2]
// i[verify spec-check.levels]
#[test]
fn each_rules_level_and_demands_are_exported() {
    let mut tree = fixture();
    tree.insert(
        "docs/spec.md",
        "# Demo\n\n> r[demo.alpha tags=informative]\n> Alpha explains.\n\n> r[demo.beta+2 level=optional]\n> Beta holds.\n",
    );
    let export = export_of(&tree);
    assert_eq!(violations(&export), Vec::<String>::new(), "{export:#}");
    let none = serde_json::json!({"implemented": false, "verified": false, "tested": false, "proven": false});
    assert_eq!(export["rules"][0]["level"], "informative");
    assert_eq!(export["rules"][0]["demands"], none);
    assert_eq!(export["rules"][1]["level"], "may");
    assert_eq!(
        export["rules"][1]["demands"],
        serde_json::json!({"implemented": true, "verified": false, "tested": false, "proven": false})
    );
}

/// The spec debt is exported beside the rules, largest first, in the schema's shape.
// i[verify spec-check.export+2]
// i[verify spec-report.debt]
#[test]
fn the_spec_debt_is_exported_largest_first() {
    let mut tree = fixture();
    assert_eq!(export_of(&tree)["debt"], serde_json::json!([]));
    let long: String = (0..crate::spec_report::debt::LONG_FN)
        .map(|i| format!("    let _x{i} = {i};\n"))
        .collect();
    tree.insert(
        "src/extra.rs",
        format!("pub struct Loose;\n\nfn long() {{\n{long}}}\n"),
    );
    let export = export_of(&tree);
    assert_eq!(violations(&export), Vec::<String>::new(), "{export:#}");
    let debt: Vec<(&str, u64, &str)> = export["debt"]
        .as_array()
        .expect("debt")
        .iter()
        .filter_map(|d| Some((d["item"].as_str()?, d["size"].as_u64()?, d["why"].as_str()?)))
        .collect();
    let size = u64::try_from(crate::spec_report::debt::LONG_FN).expect("small") + 2;
    assert_eq!(
        debt,
        [("fn long", size, "long-fn"), ("struct Loose", 1, "public")]
    );
    assert_eq!(export["debt"][0]["file"], "src/extra.rs");
    assert_eq!(export["debt"][0]["line"], 3);
}

// i[verify spec-check.export+2]
#[test]
fn the_schema_file_is_pinned_to_its_schema_version() {
    use sha2::Digest as _;
    // A changed schema file is a changed contract: bump export::SCHEMA when a reader could trip
    // on it, then pin the new file here.
    let digest = sha2::Sha256::digest(SCHEMA_TEXT.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(
        (super::SCHEMA, hex.as_str()),
        (
            5,
            "e484459c32bc7e808032ff8768890225b71eeb365f8f9abf08f96c91853b4324"
        ),
        "docs/audit/spec-export.schema.json changed"
    );
}

/// A pass whose rule changed since the run is exported as the stale evidence it is, in the
/// schema's shape.
// i[verify spec-check.test-backed.fingerprint+2]
#[test]
fn a_stale_pass_is_exported_in_the_schemas_shape() {
    let lib = "// r[impl demo.alpha]\npub fn alpha() -> u32 {\n    1\n}\n\n// r[impl demo.beta+2]\npub fn beta() {}\n\n#[cfg(test)]\nmod tests {\n    // r[verify demo.alpha]\n    #[test]\n    fn alpha_holds() {\n        super::alpha();\n    }\n\n    // r[verify demo.beta+2]\n    #[test]\n    fn beta_holds() {\n        super::beta();\n    }\n}\n";
    let junit_text = "<testsuites><testsuite name=\"demo\" tests=\"2\"><testcase name=\"tests::alpha_holds\" classname=\"demo\"/><testcase name=\"tests::beta_holds\" classname=\"demo\"/></testsuite></testsuites>";
    let mut tree = Memory::new([
        (
            ".config/tracey/config.styx",
            CONFIG.replace("src/**/*.rs", "crates/**/*.rs").as_str(),
        ),
        (
            "docs/spec.md",
            "# Demo\n\n> r[demo.alpha]\n> Alpha holds.\n\n> r[demo.beta+2]\n> Beta holds.\n",
        ),
        ("Cargo.toml", "[workspace]\nmembers = [\"crates/demo\"]\n"),
        (
            "crates/demo/Cargo.toml",
            "[package]\nname = \"demo\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
        ),
        ("crates/demo/src/lib.rs", lib),
        ("target/junit.xml", junit_text),
    ]);
    // The run's record, of the tree the tests ran on; then alpha's body changes.
    let (_, then) = spec_check::read(&tree).expect("read");
    let evidence = spec_check::evidence::record(
        &then,
        spec_check::evidence::key([junit_text]),
        std::time::SystemTime::UNIX_EPOCH,
    );
    tree.insert(
        "target/junit.xml.spec-evidence.json",
        spec_check::evidence::render(&evidence),
    );
    tree.insert("crates/demo/src/lib.rs", lib.replace("    1\n", "    2\n"));
    let junit = crate::Tree::root(&tree).join("target/junit.xml");
    let read = spec_check::read(&tree);
    let everything =
        crate::trace::everything(&tree, read, &[junit.as_path()], None, false).expect("traced");
    let export: serde_json::Value =
        serde_json::from_str(&super::render(&super::export(&tree, &everything))).expect("JSON");
    assert_eq!(violations(&export), Vec::<String>::new(), "{export:#}");
    assert_eq!(export["rules"][0]["marker"], "r[demo.alpha]");
    assert_eq!(
        export["rules"][0]["verifies"][0]["result"],
        "stale (passed, but impl changed since the tests ran)",
        "{export:#}"
    );
    assert_ne!(export["rules"][0]["verdict"], "verified", "{export:#}");
    assert_eq!(export["rules"][1]["verifies"][0]["result"], "passed");
}

// i[verify spec-check.export+2]
#[test]
fn each_rule_is_exported_under_its_own_spec() {
    // Two specs whose rules sit on the same line of their files, the second spec's only rule:
    // a rule is placed by its file and its line together.
    let config = "specs (\n  {\n    name one\n    include (docs/one.md)\n    impls (\n      {\n        name rust\n        include (src/one.rs)\n      }\n    )\n  }\n  {\n    name two\n    include (docs/two.md)\n    impls (\n      {\n        name rust\n        include (src/two.rs)\n      }\n    )\n  }\n)\n";
    let tree = Memory::new([
        (".config/tracey/config.styx", config),
        (
            "docs/one.md",
            "# One\n\n> o[one.alpha]\n> Alpha holds.\n\n> o[one.beta]\n> Beta holds.\n",
        ),
        ("docs/two.md", "# Two\n\n> t[two.gamma]\n> Gamma holds.\n"),
        (
            "src/one.rs",
            "// o[impl one.alpha]\npub fn alpha() {}\n\n// o[impl one.beta]\npub fn beta() {}\n",
        ),
        ("src/two.rs", "// t[impl two.gamma]\npub fn gamma() {}\n"),
    ]);
    let export = export_of(&tree);
    let specs: Vec<(&str, &str)> = export["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .map(|r| {
            (
                r["marker"].as_str().expect("marker"),
                r["spec"].as_str().unwrap_or("(none)"),
            )
        })
        .collect();
    assert_eq!(
        specs,
        [
            ("o[one.alpha]", "one"),
            ("o[one.beta]", "one"),
            ("t[two.gamma]", "two")
        ]
    );
}
