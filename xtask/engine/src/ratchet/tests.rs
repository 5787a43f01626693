use crate::Memory;
use crate::review;
use crate::spec_check::problem::{Kind, Problem};
use crate::spec_check::{self, report::Outcome};

const CONFIG: &str = "specs (\n  {\n    name demo\n    include (docs/spec.md)\n    impls (\n      {\n        name rust\n        include (src/**/*.rs)\n      }\n    )\n  }\n)\n";

const SPEC: &str = "# Demo\n\n> r[demo.alpha]\n> Alpha holds.\n\n> r[demo.beta+2]\n> Beta holds.\n";

const LIB: &str = "// r[impl demo.alpha]\npub fn alpha() {}\n\n// r[impl demo.beta+2]\npub fn beta() {}\n\n#[cfg(test)]\nmod tests {\n    // r[verify demo.alpha]\n    #[test]\n    fn alpha_holds() {\n        super::alpha();\n    }\n\n    // r[verify demo.beta+2]\n    #[test]\n    fn beta_holds() {\n        super::beta();\n    }\n}\n";

const PROOF: &str = "# Proof\n\n| rule | verdict | caught | missed | unviable | timeout | justified | commit | date |\n|---|---|---|---|---|---|---|---|---|\n| `r[demo.alpha]` | proven | 3 | 0 | 0 | 0 | - | abc1234 | 2026-12-01 |\n";

const TODAY: &str = "2026-12-06";

/// The demo tree with `lib` and the extra files given.
fn tree(lib: &str, extra: &[(&str, &str)]) -> Memory {
    let mut files = vec![
        (".config/tracey/config.styx", CONFIG),
        ("docs/spec.md", SPEC),
        ("src/lib.rs", lib),
        ("docs/audit/proof.md", PROOF),
    ];
    files.extend_from_slice(extra);
    Memory::new(files)
}

fn judged(source: &Memory) -> (spec_check::Tree, Outcome) {
    let read = spec_check::read(source);
    let outcome = spec_check::check_read(source, &read, &[], None, &[]).expect("judged");
    let (_, tree) = read.expect("read");
    (tree, outcome)
}

fn problems(source: &Memory) -> Vec<Problem> {
    let (tree, outcome) = judged(source);
    super::check(source, &tree, &outcome, TODAY)
}

/// The baseline the full demo tree writes.
fn full_baseline() -> String {
    let source = tree(LIB, &[]);
    let (tree, outcome) = judged(&source);
    super::baseline(&source, &tree, &outcome)
}

// i[verify spec-check.ratchet]
#[test]
fn the_baseline_records_each_rows_rules_per_measure_and_reads_back_clean() {
    let text = full_baseline();
    assert!(text.contains("\n[demo]\n"), "{text}");
    let rows: std::collections::BTreeMap<String, super::Row> = toml::from_str(&text).expect("TOML");
    let row = rows.get("demo").expect("the demo row");
    let both = ["r[demo.alpha]", "r[demo.beta+2]"]
        .map(str::to_owned)
        .to_vec();
    assert_eq!(
        row,
        &super::Row {
            rules: 2,
            implemented: both.clone(),
            verified: both,
            tested: None,
            proven: vec!["r[demo.alpha]".to_owned()],
            levels: std::collections::BTreeMap::new(),
        }
    );
    // The tree it was written from is at its baseline.
    let source = tree(LIB, &[("docs/audit/coverage-baseline.toml", &text)]);
    assert_eq!(problems(&source), Vec::<Problem>::new());
}

// i[verify spec-check.ratchet]
#[test]
fn a_count_below_the_baseline_is_a_problem_unless_a_waiver_covers_it() {
    let baseline = full_baseline();
    // demo.alpha loses its proof (the summary no longer records it).
    let unproven = [
        ("docs/audit/coverage-baseline.toml", baseline.as_str()),
        ("docs/audit/proof.md", "# Proof\n"),
    ];
    let found = problems(&tree(LIB, &unproven));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].kind, Kind::Ratchet);
    assert_eq!(found[0].rule.as_deref(), Some("r[demo.alpha]"));
    assert!(
        found[0]
            .message
            .contains("r[demo.alpha] was proven at the baseline and is no longer"),
        "{}",
        found[0].message
    );
    assert_eq!(
        found[0].file.as_deref(),
        Some("docs/audit/coverage-baseline.toml")
    );
    // At the rule's line in the baseline's proven list.
    let line = baseline
        .lines()
        .position(|l| l.contains("\"r[demo.alpha]\""))
        .map(|i| i + 1);
    let proven_list = baseline.find("proven = [").expect("a proven list");
    let in_list = baseline[proven_list..]
        .find("\"r[demo.alpha]\"")
        .map(|at| baseline[..proven_list + at].matches('\n').count() + 1);
    assert!(line.is_some());
    assert_eq!(found[0].line, in_list, "{baseline}");
    // A live waiver of that proof covers it.
    let waiver = "[[waiver]]\nrule = \"r[demo.alpha]\"\nwaives = [\"proven\"]\nwhy = \"the mutants time out on this runner\"\nuntil = 2027-01-31\n";
    let mut files = unproven.to_vec();
    files.push(("docs/audit/waivers.toml", waiver));
    assert_eq!(problems(&tree(LIB, &files)), Vec::<Problem>::new());
    // A waiver of something else does not.
    let other = waiver.replace("[\"proven\"]", "[\"tested\"]");
    let mut files = unproven.to_vec();
    files.push(("docs/audit/waivers.toml", &other));
    let found = problems(&tree(LIB, &files));
    assert_eq!(
        found.iter().map(|p| p.kind).collect::<Vec<_>>(),
        [Kind::Ratchet]
    );
}

// i[verify spec-check.waivers]
#[test]
fn an_expired_waiver_and_one_naming_no_rule_are_problems_at_their_lines() {
    let waivers = "# Gaps.\n\n[[waiver]]\nrule = \"r[demo.alpha]\"\nwaives = [\"proven\"]\nwhy = \"slow\"\nuntil = 2026-12-05\n\n[[waiver]]\nrule = \"r[demo.gamma]\"\nwaives = [\"verified\"]\nwhy = \"later\"\nuntil = 2027-01-01\n\n[[waiver]]\nrule = \"r[demo.beta]\"\nwaives = [\"tested\"]\nwhy = \"old\"\nuntil = 2027-01-01\n\n[[waiver]]\nrule = \"r[demo.alpha]\"\nwaives = [\"tested\"]\nwhy = \"today is its last day\"\nuntil = 2026-12-06\n";
    let source = tree(LIB, &[("docs/audit/waivers.toml", waivers)]);
    let found = problems(&source);
    let at: Vec<(Option<usize>, &str)> =
        found.iter().map(|p| (p.line, p.message.as_str())).collect();
    assert_eq!(found.len(), 3, "{at:#?}");
    assert!(found.iter().all(|p| p.kind == Kind::Waiver));
    assert_eq!(found[0].line, Some(3));
    assert!(found[0].message.contains("expired on 2026-12-05"), "{at:?}");
    assert_eq!(found[1].line, Some(9));
    assert!(found[1].message.contains("which no spec defines"), "{at:?}");
    assert_eq!(found[2].line, Some(15));
    assert!(
        found[2].message.contains("the spec defines r[demo.beta+2]"),
        "{at:?}"
    );
    // The last one holds through its day.
    let (tree, _) = judged(&source);
    let read = super::waivers(&source, &tree, TODAY);
    assert_eq!(read.live.len(), 1);
    assert_eq!(read.live[0].until, "2026-12-06");
}

// i[verify spec-check.waivers]
#[test]
fn a_malformed_waiver_is_a_problem_at_its_line() {
    for (text, line, says) in [
        (
            "[[waiver]]\nrule = \"r[demo.alpha]\"\nwaives = [\"covered\"]\nwhy = \"x\"\nuntil = 2027-01-01\n",
            3,
            "unknown variant",
        ),
        (
            "[[waiver]]\nrule = \"r[demo.alpha]\"\nwaives = [\"proven\"]\nwhy = \"x\"\nuntil = \"soon\"\n",
            5,
            "expected a TOML datetime",
        ),
        (
            "[[waiver]]\nrule = \"demo.alpha\"\nwaives = [\"proven\"]\nwhy = \"x\"\nuntil = 2027-01-01\n",
            1,
            "is not a rule marker",
        ),
        // Nothing waived, with a reason; a reason of blanks, with something waived.
        (
            "[[waiver]]\nrule = \"r[demo.beta+2]\"\nwaives = []\nwhy = \"x\"\nuntil = 2027-01-01\n",
            1,
            "says nothing it waives or no reason why",
        ),
        (
            "[[waiver]]\nrule = \"r[demo.beta+2]\"\nwaives = [\"proven\"]\nwhy = \"  \"\nuntil = 2027-01-01\n",
            1,
            "says nothing it waives or no reason why",
        ),
    ] {
        let found = problems(&tree(LIB, &[("docs/audit/waivers.toml", text)]));
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].kind, Kind::Waiver);
        assert_eq!(found[0].line, Some(line), "{found:?}");
        assert!(found[0].message.contains(says), "{found:?}");
    }
}

// i[verify spec-check.waivers]
#[test]
fn the_reviews_coverage_down_is_dropped_only_when_waived() {
    let problem = |lost: Vec<&'static str>| review::Problem {
        kind: review::Kind::CoverageDown,
        rule: "r[demo.alpha]".to_owned(),
        file: "docs/spec.md".to_owned(),
        line: 3,
        message: "r[demo.alpha] (demo) was verified, proven at HEAD~1 and is no longer".to_owned(),
        lost,
    };
    let waivers = super::Waivers {
        live: vec![super::Waiver {
            rule: "r[demo.alpha]".to_owned(),
            waives: vec![super::What::Proven],
            why: "slow".to_owned(),
            until: "2027-01-01".to_owned(),
            line: 1,
        }],
        problems: Vec::new(),
    };
    // A coverage-down that names no loss has none a waiver covers; another kind is no loss.
    let unbumped = review::Problem {
        kind: review::Kind::TextChangedWithoutBump,
        message: "the text of r[demo.alpha] changed but its version did not".to_owned(),
        ..problem(Vec::new())
    };
    let mut review = review::Review {
        problems: vec![
            problem(vec!["proven"]),
            problem(vec!["verified", "proven"]),
            problem(Vec::new()),
            unbumped.clone(),
        ],
        ..review::Review::default()
    };
    super::honour(&mut review, &waivers);
    assert_eq!(
        review.problems,
        [
            problem(vec!["verified", "proven"]),
            problem(Vec::new()),
            unbumped
        ]
    );
}

/// A crate of the demo with its manifests, alpha verified by a unit test and beta by an
/// integration test, and a nextest JUnit file in which alpha's test passed and beta's failed.
fn test_backed(extra: &[(&str, &str)]) -> (Memory, std::path::PathBuf) {
    let lib = LIB.replace("    // r[verify demo.beta+2]\n", "").replace(
        "\n    #[test]\n    fn beta_holds() {\n        super::beta();\n    }\n",
        "",
    );
    let mut files = vec![
        (".config/tracey/config.styx", CONFIG.replace("src/**/*.rs", "crates/**/*.rs")),
        ("docs/spec.md", SPEC.to_owned()),
        ("Cargo.toml", "[workspace]\nmembers = [\"crates/demo\"]\n".to_owned()),
        (
            "crates/demo/Cargo.toml",
            "[package]\nname = \"demo\"\nversion = \"0.1.0\"\nedition = \"2021\"\n".to_owned(),
        ),
        ("crates/demo/src/lib.rs", lib),
        (
            "crates/demo/tests/beta.rs",
            "// r[verify demo.beta+2]\n#[test]\nfn beta_holds() {\n    demo::beta();\n}\n".to_owned(),
        ),
        (
            "target/junit.xml",
            "<testsuites><testsuite name=\"demo\" tests=\"1\"><testcase name=\"tests::alpha_holds\" classname=\"demo\"/></testsuite><testsuite name=\"demo::beta\" tests=\"1\"><testcase name=\"beta_holds\" classname=\"demo::beta\"><failure message=\"no\"/></testcase></testsuite></testsuites>".to_owned(),
        ),
    ];
    files.extend(extra.iter().map(|(p, t)| (*p, (*t).to_owned())));
    let tree = Memory::new(files);
    let junit = crate::Tree::root(&tree).join("target/junit.xml");
    (tree, junit)
}

// i[verify spec-check.ratchet]
#[test]
fn in_a_test_backed_run_the_tested_count_is_ratcheted_too() {
    let judge = |source: &Memory, junit: &std::path::Path| {
        let read = spec_check::read(source);
        let outcome = spec_check::check_read(source, &read, &[junit], None, &[]).expect("judged");
        let (_, tree) = read.expect("read");
        (tree, outcome)
    };
    let (source, junit) = test_backed(&[]);
    let (tree, outcome) = judge(&source, &junit);
    assert_eq!(outcome.specs[0].tested, Some(1), "{:?}", outcome.problems);
    let text = super::baseline(&source, &tree, &outcome);
    let rows: std::collections::BTreeMap<String, super::Row> = toml::from_str(&text).expect("TOML");
    assert_eq!(
        rows["demo"].tested,
        Some(vec!["r[demo.alpha]".to_owned()]),
        "{text}"
    );
    // A baseline in which both were tested: beta's failure is a loss, unless waived.
    let higher = text.replace(
        "tested = [\"r[demo.alpha]\"]",
        "tested = [\"r[demo.alpha]\", \"r[demo.beta+2]\"]",
    );
    assert_ne!(higher, text, "{text}");
    let (source, junit) = test_backed(&[("docs/audit/coverage-baseline.toml", &higher)]);
    let (tree, outcome) = judge(&source, &junit);
    let found = super::check(&source, &tree, &outcome, TODAY);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0]
            .message
            .contains("r[demo.beta+2] was tested at the baseline"),
        "{}",
        found[0].message
    );
    let waiver = "[[waiver]]\nrule = \"r[demo.beta+2]\"\nwaives = [\"tested\"]\nwhy = \"flaky on CI\"\nuntil = 2027-01-01\n";
    let (source, junit) = test_backed(&[
        ("docs/audit/coverage-baseline.toml", &higher),
        ("docs/audit/waivers.toml", waiver),
    ]);
    let (tree, outcome) = judge(&source, &junit);
    assert_eq!(
        super::check(&source, &tree, &outcome, TODAY),
        Vec::<Problem>::new()
    );
    // An annotations-only run does not compare tested.
    let (tree, outcome) = judged(&source);
    assert_eq!(
        super::check(&source, &tree, &outcome, TODAY)
            .iter()
            .filter(|p| p.message.contains("tested"))
            .count(),
        0
    );
}

// i[verify spec-check.ratchet]
#[test]
fn a_waiver_of_an_old_gap_does_not_mask_a_new_loss() {
    // alpha proven, beta never proven.
    let baseline = full_baseline();
    let waiver = "[[waiver]]\nrule = \"r[demo.beta+2]\"\nwaives = [\"proven\"]\nwhy = \"never proven: its mutants time out\"\nuntil = 2027-01-31\n";
    let files = [
        ("docs/audit/coverage-baseline.toml", baseline.as_str()),
        ("docs/audit/waivers.toml", waiver),
    ];
    assert_eq!(problems(&tree(LIB, &files)), Vec::<Problem>::new());
    // alpha now loses its proof; no waiver names alpha: beta's waiver does not count it back.
    let files = [
        ("docs/audit/coverage-baseline.toml", baseline.as_str()),
        ("docs/audit/waivers.toml", waiver),
        ("docs/audit/proof.md", "# Proof\n"),
    ];
    let found = problems(&tree(LIB, &files));
    assert_eq!(
        found
            .iter()
            .map(|p| (p.kind, p.rule.as_deref()))
            .collect::<Vec<_>>(),
        [(Kind::Ratchet, Some("r[demo.alpha]"))],
        "{found:?}"
    );
    assert!(
        found[0].message.contains("r[demo.alpha]") && !found[0].message.contains("beta"),
        "{}",
        found[0].message
    );
}

// i[verify spec-check.waivers]
#[test]
fn a_waiver_written_plus_one_is_live_and_covers() {
    let baseline = full_baseline();
    let waiver = "[[waiver]]\nrule = \"r[demo.alpha+1]\"\nwaives = [\"proven\"]\nwhy = \"slow\"\nuntil = 2027-01-31\n";
    let files = [
        ("docs/audit/coverage-baseline.toml", baseline.as_str()),
        ("docs/audit/waivers.toml", waiver),
        ("docs/audit/proof.md", "# Proof\n"),
    ];
    let source = tree(LIB, &files);
    let (tree, _) = judged(&source);
    let read = super::waivers(&source, &tree, TODAY);
    assert_eq!((read.live.len(), read.problems.len()), (1, 0), "{read:?}");
    assert_eq!(read.live[0].rule, "r[demo.alpha]");
    assert_eq!(problems(&source), Vec::<Problem>::new());
}

// i[verify spec-check.ratchet]
#[test]
fn a_renamed_rule_is_judged_under_its_new_id_and_a_removed_one_is_skipped() {
    let baseline = full_baseline();
    // alpha renamed to first (its proof, recorded under alpha, no longer applies); beta removed.
    let spec = "# Demo\n\n> r[demo.first]\n> Alpha holds (was demo.alpha).\n";
    let lib = "// r[impl demo.first]\npub fn alpha() {}\n\n#[cfg(test)]\nmod tests {\n    // r[verify demo.first]\n    #[test]\n    fn alpha_holds() {\n        super::alpha();\n    }\n}\n";
    let files = [
        ("docs/audit/coverage-baseline.toml", baseline.as_str()),
        ("docs/spec.md", spec),
    ];
    let source = Memory::new(
        [
            (".config/tracey/config.styx", CONFIG),
            ("src/lib.rs", lib),
            ("docs/audit/proof.md", PROOF),
        ]
        .into_iter()
        .chain(files)
        .collect::<Vec<_>>(),
    );
    let found = problems(&source);
    assert_eq!(
        found
            .iter()
            .map(|p| (p.kind, p.rule.as_deref()))
            .collect::<Vec<_>>(),
        [(Kind::Ratchet, Some("r[demo.first]"))],
        "{found:?}"
    );
    assert!(
        found[0]
            .message
            .contains("r[demo.first] (the baseline's r[demo.alpha]) was proven"),
        "{}",
        found[0].message
    );
}

// i[verify spec-check.ratchet]
#[test]
fn a_baseline_written_without_results_keeps_the_tested_rules_recorded() {
    let recorded = "[demo]\nrules = 2\nimplemented = []\nverified = []\ntested = [\"r[demo.alpha]\"]\nproven = []\n";
    let source = tree(LIB, &[("docs/audit/coverage-baseline.toml", recorded)]);
    let (tree, outcome) = judged(&source);
    let text = super::baseline(&source, &tree, &outcome);
    let rows: std::collections::BTreeMap<String, super::Row> = toml::from_str(&text).expect("TOML");
    assert_eq!(
        rows["demo"].tested,
        Some(vec!["r[demo.alpha]".to_owned()]),
        "{text}"
    );
    assert_eq!(rows["demo"].verified.len(), 2, "{text}");
}

// i[verify spec-check.waivers]
#[test]
fn a_waiver_more_than_a_year_ahead_is_a_problem() {
    let waiver = |until: &str| {
        format!(
            "[[waiver]]\nrule = \"r[demo.beta+2]\"\nwaives = [\"proven\"]\nwhy = \"slow\"\nuntil = {until}\n"
        )
    };
    // TODAY is 2026-12-06: a year ahead holds, a day more does not.
    let found = problems(&tree(
        LIB,
        &[("docs/audit/waivers.toml", &waiver("2027-12-06"))],
    ));
    assert_eq!(found, Vec::<Problem>::new());
    for until in ["2027-12-07", "2999-12-31"] {
        let found = problems(&tree(LIB, &[("docs/audit/waivers.toml", &waiver(until))]));
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].kind, Kind::Waiver);
        assert_eq!(found[0].line, Some(1));
        assert!(
            found[0].message.contains("more than a year ahead"),
            "{}",
            found[0].message
        );
    }
}

// i[verify spec-check.ratchet]
#[test]
fn coverage_above_the_baseline_is_a_problem_until_recorded() {
    let baseline = full_baseline();
    // beta is now proven too, and the baseline does not record it.
    let proof = format!(
        "{PROOF}| `r[demo.beta+2]` | proven | 2 | 0 | 0 | 0 | - | abc1234 | 2026-12-02 |\n"
    );
    let files = [
        ("docs/audit/coverage-baseline.toml", baseline.as_str()),
        ("docs/audit/proof.md", proof.as_str()),
    ];
    let found = problems(&tree(LIB, &files));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].kind, Kind::Ratchet);
    assert_eq!(
        found[0].message,
        "demo: 1 rules are proven that the baseline does not record (r[demo.beta+2]): record \
         them with `cargo xtask spec-check --update-baseline` so that the ratchet holds them"
    );
    // At the row's header.
    let header = baseline.lines().position(|l| l == "[demo]").map(|i| i + 1);
    assert_eq!(found[0].line, header);
    // Recorded, it is clean.
    let source = tree(LIB, &[("docs/audit/proof.md", proof.as_str())]);
    let (t, outcome) = judged(&source);
    let recorded = super::baseline(&source, &t, &outcome);
    let files = [
        ("docs/audit/coverage-baseline.toml", recorded.as_str()),
        ("docs/audit/proof.md", proof.as_str()),
    ];
    assert_eq!(problems(&tree(LIB, &files)), Vec::<Problem>::new());
}

// i[verify spec-check.ratchet]
// i[verify spec-check.waivers]
#[test]
fn a_change_lists_the_waivers_it_adds_changes_or_removes_and_the_baseline_it_lowers() {
    let baseline = full_baseline();
    let waiver = |rule: &str, until: &str| {
        format!(
            "[[waiver]]\nrule = \"{rule}\"\nwaives = [\"proven\"]\nwhy = \"slow\"\nuntil = {until}\n"
        )
    };
    let base_waivers = format!(
        "{}\n{}",
        waiver("r[demo.alpha]", "2027-01-01"),
        waiver("r[demo.gone]", "2027-01-01")
    );
    let head_waivers = format!(
        "{}\n{}",
        waiver("r[demo.alpha]", "2027-06-01"),
        waiver("r[demo.beta+2]", "2027-01-01")
    );
    let lowered = baseline.replace("proven = [\"r[demo.alpha]\"]", "proven = []");
    assert_ne!(lowered, baseline);
    let base = tree(
        LIB,
        &[
            ("docs/audit/coverage-baseline.toml", baseline.as_str()),
            ("docs/audit/waivers.toml", base_waivers.as_str()),
        ],
    );
    let head = tree(
        LIB,
        &[
            ("docs/audit/coverage-baseline.toml", lowered.as_str()),
            ("docs/audit/waivers.toml", head_waivers.as_str()),
        ],
    );
    let changes = super::changes(&base, &head);
    assert_eq!(changes.len(), 4, "{changes:#?}");
    let says = |needle: &str| changes.iter().any(|c| c.contains(needle));
    assert!(says("waiver added: r[demo.beta+2]"), "{changes:#?}");
    assert!(says("waiver changed: r[demo.alpha]"), "{changes:#?}");
    assert!(says("2027-06-01"), "{changes:#?}");
    assert!(says("waiver removed: r[demo.gone]"), "{changes:#?}");
    assert!(
        says("baseline lowered: demo no longer records r[demo.alpha] as proven"),
        "{changes:#?}"
    );
    // No change, nothing listed.
    assert_eq!(super::changes(&base, &base), Vec::<String>::new());
}

// i[verify spec-check.waivers]
#[test]
fn a_waiver_of_a_gap_that_closed_is_a_problem() {
    // alpha is proven: a waiver of its proof is not needed; beta is not: its waiver is.
    let waivers = "[[waiver]]\nrule = \"r[demo.alpha]\"\nwaives = [\"proven\"]\nwhy = \"slow\"\nuntil = 2027-01-31\n\n[[waiver]]\nrule = \"r[demo.beta+2]\"\nwaives = [\"proven\", \"tested\"]\nwhy = \"slow\"\nuntil = 2027-01-31\n";
    let found = problems(&tree(LIB, &[("docs/audit/waivers.toml", waivers)]));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].kind, Kind::Waiver);
    assert_eq!(found[0].line, Some(1));
    assert_eq!(found[0].rule.as_deref(), Some("r[demo.alpha]"));
    assert!(
        found[0].message.contains("the rule is proven now"),
        "{}",
        found[0].message
    );
}

// i[verify spec-check.ratchet]
#[test]
fn unrecorded_coverage_names_ten_rules_and_counts_the_rest() {
    let ids: Vec<String> = (1..=12).map(|n| format!("demo.r{n:02}")).collect();
    let spec: String = ids
        .iter()
        .map(|id| format!("> r[{id}]\n> {id} holds.\n\n"))
        .collect();
    let lib: String = ids
        .iter()
        .map(|id| {
            format!(
                "// r[impl {id}]\npub fn f_{}() {{}}\n\n",
                id.replace('.', "_")
            )
        })
        .collect();
    let recorded = "[demo]\nrules = 0\nimplemented = []\nverified = []\nproven = []\n";
    let spec = format!("# Demo\n\n{spec}");
    let found = problems(&tree(
        &lib,
        &[
            ("docs/spec.md", spec.as_str()),
            ("docs/audit/coverage-baseline.toml", recorded),
            ("docs/audit/proof.md", "# Proof\n"),
        ],
    ));
    let shown: Vec<String> = ids[..10].iter().map(|id| format!("r[{id}]")).collect();
    assert_eq!(
        found.iter().map(|p| p.message.as_str()).collect::<Vec<_>>(),
        [format!(
            "demo: 12 rules are implemented that the baseline does not record ({} and 2 more): \
             record them with `cargo xtask spec-check --update-baseline` so that the ratchet \
             holds them",
            shown.join(", ")
        )],
        "{found:#?}"
    );
}

// i[verify spec-check.ratchet]
#[test]
fn a_removed_rule_is_not_judged_under_another_rule_of_its_spec() {
    // Both proven at the baseline; beta is then removed, and alpha stays as it was.
    let proof = format!(
        "{PROOF}| `r[demo.beta+2]` | proven | 2 | 0 | 0 | 0 | - | abc1234 | 2026-12-02 |\n"
    );
    let source = tree(LIB, &[("docs/audit/proof.md", proof.as_str())]);
    let (t, outcome) = judged(&source);
    let baseline = super::baseline(&source, &t, &outcome);
    assert!(
        baseline.contains("proven = [\n    \"r[demo.alpha]\",\n    \"r[demo.beta+2]\",\n]"),
        "{baseline}"
    );
    // Now alpha, unproven, is the spec's only rule: its loss is judged, and beta's proof is
    // not judged as alpha's.
    let spec = "# Demo\n\n> r[demo.alpha]\n> Alpha holds.\n";
    let lib = "// r[impl demo.alpha]\npub fn alpha() {}\n\n#[cfg(test)]\nmod tests {\n    // r[verify demo.alpha]\n    #[test]\n    fn alpha_holds() {\n        super::alpha();\n    }\n}\n";
    let found = problems(&tree(
        lib,
        &[
            ("docs/spec.md", spec),
            ("docs/audit/coverage-baseline.toml", baseline.as_str()),
            ("docs/audit/proof.md", "# Proof\n"),
        ],
    ));
    assert_eq!(
        found
            .iter()
            .map(|p| (
                p.kind,
                p.rule.as_deref(),
                p.message.contains("the baseline's")
            ))
            .collect::<Vec<_>>(),
        [(Kind::Ratchet, Some("r[demo.alpha]"), false)],
        "{found:#?}"
    );
}

/// A measure the rule's level does not demand may be lost: no ratchet problem, and in a
/// test-backed run no `not-verified-by-test` problem, while the counts stay as they were.
// i[verify spec-check.levels]
#[test]
fn a_measure_the_level_does_not_demand_is_not_judged() {
    let baseline = full_baseline();
    let should = SPEC.replace("> r[demo.alpha]", "> r[demo.alpha level=should]");
    let unproven = |spec: &str| {
        problems(&tree(
            LIB,
            &[
                ("docs/audit/coverage-baseline.toml", baseline.as_str()),
                ("docs/audit/proof.md", "# Proof\n"),
                ("docs/spec.md", spec),
            ],
        ))
    };
    assert_eq!(unproven(SPEC).len(), 1, "MUST demands the proof");
    // The baseline was written while the rule was MUST: lowering its level since excuses no loss.
    assert_eq!(
        unproven(&should).len(),
        1,
        "the baseline's level demands it"
    );
    // Written while it was SHOULD, the baseline says so, and the loss is not judged.
    let source = tree(LIB, &[("docs/spec.md", should.as_str())]);
    let (read, outcome) = judged(&source);
    let should_baseline = super::baseline(&source, &read, &outcome);
    assert!(
        should_baseline.contains("[demo.levels]\n\"r[demo.alpha]\" = \"should\""),
        "{should_baseline}"
    );
    let problems_now = problems(&tree(
        LIB,
        &[
            (
                "docs/audit/coverage-baseline.toml",
                should_baseline.as_str(),
            ),
            ("docs/audit/proof.md", "# Proof\n"),
            ("docs/spec.md", should.as_str()),
        ],
    ));
    assert_eq!(problems_now, Vec::<Problem>::new());

    let judge = |spec: &str| {
        let (source, junit) = test_backed(&[("docs/spec.md", spec)]);
        let read = spec_check::read(&source);
        spec_check::check_read(&source, &read, &[junit.as_path()], None, &[]).expect("judged")
    };
    let failing = |outcome: &Outcome| {
        outcome
            .problems
            .iter()
            .filter(|p| p.kind == Kind::NotVerifiedByTest)
            .filter_map(|p| p.rule.clone())
            .collect::<Vec<_>>()
    };
    let must = judge(SPEC);
    assert_eq!(failing(&must), ["r[demo.beta+2]"]);
    let should_spec = SPEC.replace("> r[demo.beta+2]", "> r[demo.beta+2 level=should]");
    let beta_should = judge(&should_spec);
    assert_eq!(failing(&beta_should), Vec::<String>::new());
    assert_eq!(beta_should.specs[0].tested, must.specs[0].tested);
    // Its failed test is still no test that passed: the baseline does not record it as tested.
    let (source, _) = test_backed(&[("docs/spec.md", &should_spec)]);
    let read = spec_check::read(&source);
    let (_, tree) = read.as_ref().expect("read");
    let text = super::baseline(&source, tree, &beta_should);
    let rows: std::collections::BTreeMap<String, super::Row> = toml::from_str(&text).expect("TOML");
    assert_eq!(
        rows["demo"].tested,
        Some(vec!["r[demo.alpha]".to_owned()]),
        "{text}"
    );
}
