//! The review on two memory trees, one per case.

use super::*;
use crate::Memory;
use crate::spec_check::report::Format;

const CONFIG: &str = "specs (\n  {\n    name demo\n    include (docs/spec.md)\n    impls (\n      {\n        name rust\n        include (src/**/*.rs)\n      }\n    )\n  }\n)\n";

const SPEC: &str = "# Demo\n\n> r[demo.alpha]\n> Alpha holds.\n\n> r[demo.beta]\n> Beta holds.\n";

const LIB: &str = "// r[impl demo.alpha]\npub fn alpha() -> u32 {\n    1\n}\n\n// r[impl demo.beta]\npub fn beta() {}\n\n#[cfg(test)]\nmod tests {\n    // r[verify demo.alpha]\n    #[test]\n    fn alpha_holds() {\n        assert_eq!(super::alpha(), 1);\n    }\n\n    // r[verify demo.beta]\n    #[test]\n    fn beta_holds() {\n        super::beta();\n    }\n}\n";

/// A tree of the demo config with `spec` and `lib`.
pub(crate) fn tree(spec: &str, lib: &str) -> Memory {
    Memory::new([
        (".config/tracey/config.styx", CONFIG),
        ("docs/spec.md", spec),
        ("src/lib.rs", lib),
    ])
}

/// The review of `head` against `base`, with the gate's outcome on the head.
pub(crate) fn review_of(base: &Memory, head: &Memory) -> (Review, Outcome) {
    let read_base = crate::spec_check::read(base);
    let read_head = crate::spec_check::read(head);
    let outcome_base =
        crate::spec_check::check_read(base, &read_base, &[], None, &[]).expect("judged");
    let outcome_head =
        crate::spec_check::check_read(head, &read_head, &[], None, &[]).expect("judged");
    let (Ok((_, tree_base)), Ok((_, tree_head))) = (&read_base, &read_head) else {
        panic!("both trees read");
    };
    let review = compare(
        "main",
        Side {
            source: base,
            tree: tree_base,
            outcome: &outcome_base,
        },
        Side {
            source: head,
            tree: tree_head,
            outcome: &outcome_head,
        },
    );
    (review, outcome_head)
}

fn kinds(review: &Review) -> Vec<Kind> {
    review.problems.iter().map(|p| p.kind).collect()
}

// i[verify spec-check.review]
#[test]
fn an_unchanged_tree_has_an_empty_review() {
    let (review, outcome) = review_of(&tree(SPEC, LIB), &tree(SPEC, LIB));
    assert!(outcome.problems.is_empty(), "{:?}", outcome.problems);
    assert!(review.passes());
    assert!(review.added.is_empty() && review.removed.is_empty() && review.renamed.is_empty());
    assert!(review.touched.is_empty() && review.annotations.is_empty());
    let counts = Counts {
        total: 2,
        implemented: 2,
        verified: 2,
        tested: None,
        proven: 0,
    };
    assert_eq!(
        review.coverage,
        [CoverageRow {
            name: "demo".to_owned(),
            before: Some(counts),
            after: Some(counts),
        }]
    );
}

// i[verify spec-check.review.rules+2]
#[test]
fn rules_added_and_removed_are_listed() {
    let head_spec =
        "# Demo\n\n> r[demo.alpha]\n> Alpha holds.\n\n> r[demo.gamma]\n> Gamma holds.\n";
    let head_lib = LIB
        .replace("demo.beta]", "demo.gamma]")
        .replace("beta", "gamma");
    let (review, _) = review_of(&tree(SPEC, LIB), &tree(head_spec, &head_lib));
    let added: Vec<&str> = review.added.iter().map(|r| r.rule.as_str()).collect();
    let removed: Vec<&str> = review.removed.iter().map(|r| r.rule.as_str()).collect();
    assert_eq!(added, ["r[demo.gamma]"]);
    assert_eq!(removed, ["r[demo.beta]"]);
    assert_eq!(review.added[0].line, 6);
    // Their annotations come and go with them: not listed one by one.
    assert!(review.annotations.is_empty(), "{:?}", review.annotations);
    assert!(review.touched.is_empty(), "{:?}", review.touched);
    // Removing a rule is not a loss of coverage: its removal is said above.
    assert!(review.passes(), "{:?}", review.problems);
}

// i[verify spec-check.review.rules+2]
#[test]
fn text_changed_without_a_bump_is_a_problem_and_with_one_is_not() {
    let changed = SPEC.replace("Beta holds.", "Beta holds, always.");
    let (review, _) = review_of(&tree(SPEC, LIB), &tree(&changed, LIB));
    assert_eq!(kinds(&review), [Kind::TextChangedWithoutBump]);
    assert_eq!(review.unbumped[0].rule, "r[demo.beta]");
    assert_eq!(
        (review.problems[0].file.as_str(), review.problems[0].line),
        ("docs/spec.md", 6)
    );
    assert!(
        review.problems[0].message.contains("r[demo.beta+2]"),
        "{}",
        review.problems[0].message
    );

    // Reflowing the text is no change.
    let reflowed = SPEC.replace("> Beta holds.", ">   Beta\n>   holds.");
    let (review, _) = review_of(&tree(SPEC, LIB), &tree(&reflowed, LIB));
    assert!(review.passes() && review.unbumped.is_empty(), "{review:?}");

    // Bumped, with every reference following: no problem.
    let bumped = changed.replace("r[demo.beta]", "r[demo.beta+2]");
    let lib = LIB.replace("demo.beta]", "demo.beta+2]");
    let (review, _) = review_of(&tree(SPEC, LIB), &tree(&bumped, &lib));
    assert!(review.passes(), "{:?}", review.problems);
    assert_eq!(review.bumped.len(), 1);
    assert_eq!(review.bumped[0].from, "r[demo.beta]");
    assert_eq!(review.bumped[0].to.rule, "r[demo.beta+2]");
    assert!(review.bumped[0].text_changed);
}

// i[verify spec-check.review.rename]
#[test]
fn a_rule_naming_its_previous_id_is_renamed_not_added_and_removed() {
    let spec = SPEC.replace(
        "> r[demo.beta]\n> Beta holds.",
        "> r[demo.bravo]\n> Beta holds. (was demo.beta)",
    );
    let lib = LIB.replace("demo.beta]", "demo.bravo]");
    let (review, _) = review_of(&tree(SPEC, LIB), &tree(&spec, &lib));
    assert!(
        review.added.is_empty() && review.removed.is_empty(),
        "{review:?}"
    );
    assert_eq!(review.renamed.len(), 1);
    assert_eq!(review.renamed[0].from, "r[demo.beta]");
    assert_eq!(review.renamed[0].to.rule, "r[demo.bravo]");
    assert!(!review.renamed[0].text_changed, "the note is not text");
    // Its annotations followed it: nothing added or dropped.
    assert!(review.annotations.is_empty(), "{:?}", review.annotations);
    assert!(review.passes());

    // A note naming an id the base never had (an old rename) renames nothing.
    let (review, _) = review_of(&tree(&spec, &lib), &tree(&spec, &lib));
    assert!(review.renamed.is_empty() && review.added.is_empty());
    // The marker form `(was r[demo.beta])` reads the same.
    let spec = SPEC.replace("Beta holds.", "Beta (was r[demo.beta]) holds.");
    let read = crate::spec_check::read(&tree(&spec, LIB));
    let Ok((_, read)) = &read else {
        panic!("read");
    };
    let beta = read
        .rules()
        .iter()
        .find(|r| r.id.base == "demo.beta")
        .expect("beta");
    let (text, was) = rule_text(beta);
    assert_eq!(
        (text.as_str(), was.as_slice()),
        ("Beta holds.", &["demo.beta".to_owned()][..])
    );
}

// i[verify spec-check.review.items+2]
#[test]
fn impl_changed_with_tests_unchanged_is_shown_as_such() {
    let lib = LIB.replace("    1\n}", "    2\n}");
    let (review, _) = review_of(&tree(SPEC, LIB), &tree(SPEC, &lib));
    assert_eq!(review.touched.len(), 1, "{:?}", review.touched);
    let touched = &review.touched[0];
    assert_eq!(touched.rule, "r[demo.alpha]");
    assert_eq!(touched.changed, Changed::ImplOnly);
    assert_eq!(touched.impl_items, ["src/lib.rs: fn alpha"]);
    assert!(review.passes(), "it is shown, not failed");

    // Reformatting and comments do not count.
    let lib = LIB.replace("    1\n}", "    // one\n    1 }");
    let (review, _) = review_of(&tree(SPEC, LIB), &tree(SPEC, &lib));
    assert!(review.touched.is_empty(), "{:?}", review.touched);

    // Both sides.
    let lib = LIB
        .replace("    1\n}", "    2\n}")
        .replace("super::alpha(), 1", "super::alpha(), 2");
    let (review, _) = review_of(&tree(SPEC, LIB), &tree(SPEC, &lib));
    assert_eq!(review.touched[0].changed, Changed::Both);
    // Tests only.
    let lib = LIB.replace("super::beta();", "super::beta();\n        super::beta();");
    let (review, _) = review_of(&tree(SPEC, LIB), &tree(SPEC, &lib));
    assert_eq!(review.touched[0].rule, "r[demo.beta]");
    assert_eq!(review.touched[0].changed, Changed::VerifyOnly);
}

// i[verify spec-check.review.annotations]
#[test]
fn annotations_added_dropped_and_moved() {
    // beta's impl moves to another item; alpha gets a second verify.
    let lib = LIB
        .replace(
            "// r[impl demo.beta]\npub fn beta() {}",
            "pub fn beta() {}\n\n// r[impl demo.beta]\npub fn beta_too() {}",
        )
        .replace(
            "    // r[verify demo.beta]\n",
            "    // r[verify demo.beta]\n    // r[verify demo.alpha]\n",
        );
    let (review, _) = review_of(&tree(SPEC, LIB), &tree(SPEC, &lib));
    let fates: Vec<(Fate, &str, &str)> = review
        .annotations
        .iter()
        .map(|a| (a.fate, a.rule.as_str(), a.item.as_str()))
        .collect();
    assert_eq!(
        fates,
        [
            (Fate::Added, "r[demo.alpha]", "fn beta_holds"),
            (Fate::Moved, "r[demo.beta]", "fn beta_too"),
        ]
    );
    assert_eq!(
        review.annotations[1].from.as_deref(),
        Some("src/lib.rs:6 (fn beta)")
    );
    // Moving an impl changes the rule's implementation.
    assert!(
        review
            .touched
            .iter()
            .any(|t| t.rule == "r[demo.beta]" && t.changed == Changed::ImplOnly)
    );

    // Dropped: beta's verify goes (and with it, its verification).
    let lib = LIB.replace("    // r[verify demo.beta]\n", "");
    let (review, _) = review_of(&tree(SPEC, LIB), &tree(SPEC, &lib));
    assert_eq!(review.annotations.len(), 1);
    assert_eq!(review.annotations[0].fate, Fate::Dropped);
    assert_eq!(review.annotations[0].at, "src/lib.rs:17");
    assert_eq!(review.annotations[0].item, "fn beta_holds");
}

// i[verify spec-check.review.coverage]
#[test]
fn coverage_going_down_is_a_problem_and_counts_are_shown_before_and_after() {
    let lib = LIB.replace("    // r[verify demo.beta]\n", "");
    let (review, outcome) = review_of(&tree(SPEC, LIB), &tree(SPEC, &lib));
    assert_eq!(kinds(&review), [Kind::CoverageDown]);
    assert_eq!(review.problems[0].rule, "r[demo.beta]");
    assert!(
        review.problems[0].message.contains("was verified at main"),
        "{}",
        review.problems[0].message
    );
    let row = &review.coverage[0];
    assert_eq!(row.before.map(|c| c.verified), Some(2));
    assert_eq!(row.after.map(|c| c.verified), Some(1));
    // The gate on the head says so too, in its own words.
    assert!(!outcome.problems.is_empty());

    // Going up is no problem.
    let (review, _) = review_of(&tree(SPEC, &lib), &tree(SPEC, LIB));
    assert!(review.passes(), "{:?}", review.problems);

    // A renamed rule keeps its history: losing its impl across the rename is still a loss.
    let spec = SPEC.replace(
        "r[demo.beta]\n> Beta holds.",
        "r[demo.bravo]\n> Beta holds. (was demo.beta)",
    );
    let lib = LIB
        .replace("// r[impl demo.beta]\n", "")
        .replace("demo.beta]", "demo.bravo]");
    let (review, _) = review_of(&tree(SPEC, LIB), &tree(&spec, &lib));
    assert_eq!(kinds(&review), [Kind::CoverageDown]);
    assert!(review.problems[0].message.contains("implemented"));
}

/// `id`'s fingerprint in `tree` as the gate computes it.
fn fingerprint_in(tree: &Memory, id: &str) -> crate::model::proof::Fingerprint {
    let Ok((_, read)) = crate::spec_check::read(tree) else {
        panic!("read");
    };
    crate::spec_check::fingerprint::of(&read, read.rule(id).expect("rule"))
}

/// `tree` with a proof summary holding `proof` as `marker`'s.
fn proved(mut tree: Memory, marker: &str, proof: crate::model::proof::Proof) -> Memory {
    tree.insert(
        "docs/audit/proof.md",
        crate::model::proof_summary::render(&[(marker.to_owned(), proof)]),
    );
    tree
}

/// A proof of three caught mutants at `3f2a1b2`, with `fingerprint`.
fn proof_at(fingerprint: Option<crate::model::proof::Fingerprint>) -> crate::model::proof::Proof {
    crate::model::proof::Proof {
        caught: 3,
        commit: Some("3f2a1b2".into()),
        fingerprint,
        ..crate::model::proof::Proof::default()
    }
}

/// The proof state the review gives `rule` among the touched rules.
fn proof_of<'r>(review: &'r Review, rule: &str) -> &'r ProofState {
    &review
        .touched
        .iter()
        .find(|t| t.rule == rule)
        .unwrap_or_else(|| panic!("{rule} not touched: {:?}", review.touched))
        .proof
}

/// Each touched rule says whether its recorded proof still matches the head, by the gate's own
/// fingerprint comparison: the gate's note and the review say the same.
// i[verify spec-check.review.items+2]
#[test]
fn a_touched_rules_proof_is_fresh_stale_unfingerprinted_or_none() {
    let base = tree(SPEC, LIB);
    let print = fingerprint_in(&base, "demo.alpha");
    // alpha's impl changes; the proof recorded at the base is kept as it was.
    let lib = LIB.replace("    1\n}", "    2\n}");
    let (review, outcome) = review_of(
        &proved(
            tree(SPEC, LIB),
            "r[demo.alpha]",
            proof_at(Some(print.clone())),
        ),
        &proved(
            tree(SPEC, &lib),
            "r[demo.alpha]",
            proof_at(Some(print.clone())),
        ),
    );
    assert_eq!(
        proof_of(&review, "r[demo.alpha]"),
        &ProofState::Stale {
            changed: vec!["impl"],
            note: "proof stale: impl changed since 3f2a1b2".to_owned(),
        }
    );
    assert!(
        outcome
            .notes
            .contains(&"r[demo.alpha]: proof stale: impl changed since 3f2a1b2".to_owned()),
        "the gate says the same: {:?}",
        outcome.notes
    );
    // Shown, not judged: a stale proof is no problem (and still counts as proven).
    assert!(review.passes(), "{:?}", review.problems);

    // Only alpha's test changes: the impl part still matches, the tests part does not.
    let lib = LIB.replace("super::alpha(), 1", "super::alpha(), 1, \"one\"");
    let (review, _) = review_of(
        &proved(
            tree(SPEC, LIB),
            "r[demo.alpha]",
            proof_at(Some(print.clone())),
        ),
        &proved(
            tree(SPEC, &lib),
            "r[demo.alpha]",
            proof_at(Some(print.clone())),
        ),
    );
    assert!(
        matches!(proof_of(&review, "r[demo.alpha]"), ProofState::Stale { changed, .. } if changed == &["tests"]),
        "{:?}",
        review.touched
    );

    // Fresh: the head's proof was recorded on the head (its fingerprint matches it).
    let lib = LIB.replace("    1\n}", "    2\n}");
    let head_print = fingerprint_in(&tree(SPEC, &lib), "demo.alpha");
    let (review, _) = review_of(
        &proved(tree(SPEC, LIB), "r[demo.alpha]", proof_at(Some(print))),
        &proved(
            tree(SPEC, &lib),
            "r[demo.alpha]",
            proof_at(Some(head_print)),
        ),
    );
    assert_eq!(proof_of(&review, "r[demo.alpha]"), &ProofState::Fresh);

    // Unfingerprinted: recorded before fingerprints, it cannot say (never stale).
    let (review, _) = review_of(
        &proved(tree(SPEC, LIB), "r[demo.alpha]", proof_at(None)),
        &proved(tree(SPEC, &lib), "r[demo.alpha]", proof_at(None)),
    );
    assert_eq!(
        proof_of(&review, "r[demo.alpha]"),
        &ProofState::Unfingerprinted
    );

    // None recorded: no summary, or a proof of another rule only.
    let (review, _) = review_of(&tree(SPEC, LIB), &tree(SPEC, &lib));
    assert_eq!(
        proof_of(&review, "r[demo.alpha]"),
        &ProofState::NoneRecorded
    );
    let (review, _) = review_of(
        &tree(SPEC, LIB),
        &proved(tree(SPEC, &lib), "r[demo.beta]", proof_at(None)),
    );
    assert_eq!(
        proof_of(&review, "r[demo.alpha]"),
        &ProofState::NoneRecorded
    );
}

/// A bumped rule's recorded proof is of its old version: none is recorded at the head's.
// i[verify spec-check.review.items+2]
#[test]
fn a_bumped_rules_old_proof_is_no_proof_of_it() {
    let print = fingerprint_in(&tree(SPEC, LIB), "demo.alpha");
    let spec = SPEC.replace(
        "r[demo.alpha]\n> Alpha holds.",
        "r[demo.alpha+2]\n> Alpha holds, always.",
    );
    let lib = LIB
        .replace("demo.alpha]", "demo.alpha+2]")
        .replace("    1\n}", "    2\n}");
    let (review, _) = review_of(
        &proved(
            tree(SPEC, LIB),
            "r[demo.alpha]",
            proof_at(Some(print.clone())),
        ),
        &proved(tree(&spec, &lib), "r[demo.alpha]", proof_at(Some(print))),
    );
    assert_eq!(
        proof_of(&review, "r[demo.alpha+2]"),
        &ProofState::NoneRecorded
    );
}

/// The proof state in each rendering: text and Markdown say the gate's words, JSON a field.
// i[verify spec-check.review.items+2]
// i[verify spec-check.review.output]
#[test]
fn each_rendering_says_a_touched_rules_proof_state() {
    let print = fingerprint_in(&tree(SPEC, LIB), "demo.alpha");
    let lib = LIB.replace("    1\n}", "    2\n}");
    let (review, outcome) = review_of(
        &proved(
            tree(SPEC, LIB),
            "r[demo.alpha]",
            proof_at(Some(print.clone())),
        ),
        &proved(tree(SPEC, &lib), "r[demo.alpha]", proof_at(Some(print))),
    );
    let text = render(&review, &outcome, Format::Text);
    assert!(
        text.contains(
            "    r[demo.alpha]: implementation only — its tests did not change; proof stale: \
             impl changed since 3f2a1b2\n"
        ),
        "{text}"
    );
    let markdown = render(&review, &outcome, Format::Markdown);
    assert!(
        markdown.contains(
            "- `r[demo.alpha]`: **implementation only — its tests did not change**, **proof \
             stale: impl changed since 3f2a1b2** — impl `src/lib.rs: fn alpha`"
        ),
        "{markdown}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&render(&review, &outcome, Format::Json)).expect("json");
    assert_eq!(
        json["review"]["touched"][0]["proof"],
        serde_json::json!({
            "state": "stale",
            "changed": ["impl"],
            "note": "proof stale: impl changed since 3f2a1b2",
        })
    );
    for (state, said) in [
        (ProofState::Fresh, "proof fresh"),
        (ProofState::Unfingerprinted, "proof unfingerprinted"),
        (ProofState::NoneRecorded, "no proof recorded"),
    ] {
        let mut review = review.clone();
        review.touched[0].proof = state.clone();
        let text = render(&review, &outcome, Format::Text);
        assert!(
            text.contains(&format!("did not change; {said}\n")),
            "{text}"
        );
        let json: serde_json::Value =
            serde_json::from_str(&render(&review, &outcome, Format::Json)).expect("json");
        let name = match state {
            ProofState::Fresh => "fresh",
            ProofState::Unfingerprinted => "unfingerprinted",
            _ => "none",
        };
        assert_eq!(json["review"]["touched"][0]["proof"]["state"], name);
    }
}

/// A review with something in every part, rendered.
fn busy_review() -> (Review, Outcome) {
    let spec = "# Demo\n\n> r[demo.alpha]\n> Alpha holds, always.\n\n> r[demo.bravo]\n> Beta holds. (was demo.beta)\n\n> r[demo.gamma+2]\n> Gamma holds.\n";
    let base_spec = format!("{SPEC}\n> r[demo.gamma]\n> Gamma is.\n");
    let base_lib = format!(
        "{LIB}\n// r[impl demo.gamma]\npub fn gamma() {{}}\n\n// r[verify demo.gamma]\n#[test]\nfn gamma_is() {{}}\n"
    );
    let lib = base_lib
        .replace("demo.beta]", "demo.bravo]")
        .replace("    1\n}", "    2\n}")
        .replace("demo.gamma]", "demo.gamma+2]")
        .replace("    // r[verify demo.alpha]\n", "");
    // alpha's proof, recorded at the base and kept: its text, impl and tests changed since.
    let base = tree(&base_spec, &base_lib);
    let proof = proof_at(Some(fingerprint_in(&base, "demo.alpha")));
    review_of(
        &proved(base, "r[demo.alpha]", proof.clone()),
        &proved(tree(spec, &lib), "r[demo.alpha]", proof),
    )
}

// i[verify spec-check.review.output]
#[test]
fn the_review_renders_as_one_pull_request_comment_and_as_json() {
    let (review, outcome) = busy_review();
    insta::assert_snapshot!(
        "review_markdown",
        render(&review, &outcome, Format::Markdown)
    );
    let json: serde_json::Value =
        serde_json::from_str(&render(&review, &outcome, Format::Json)).expect("json");
    insta::assert_json_snapshot!("review_json", json["review"]);
    assert_eq!(
        json["gate"]["problems"].as_array().map(Vec::len),
        Some(outcome.problems.len())
    );
    let text = render(&review, &outcome, Format::Text);
    assert!(
        text.contains("review against main:") && text.contains("[text-changed-without-bump]"),
        "{text}"
    );
}

// i[verify spec-check.review.rules+2]
#[test]
fn a_lazy_continuation_line_is_part_of_the_rule_text() {
    // Markdown keeps a line without `>` in the blockquote above it (lazy continuation).
    let spec = SPEC.replace("> Beta holds.", "> Beta holds\nwith exit 2.");
    let changed = spec.replace("exit 2", "exit 3");
    let (review, _) = review_of(&tree(&spec, LIB), &tree(&changed, LIB));
    assert_eq!(kinds(&review), [Kind::TextChangedWithoutBump], "{review:?}");
    assert_eq!(review.unbumped[0].rule, "r[demo.beta]");
}

// i[verify spec-check.review.items+2]
#[test]
fn a_changed_signature_is_a_changed_item_not_a_move() {
    let lib = LIB.replace("pub fn alpha() -> u32", "pub fn alpha() -> u64");
    let (review, _) = review_of(&tree(SPEC, LIB), &tree(SPEC, &lib));
    assert!(review.annotations.is_empty(), "{:?}", review.annotations);
    assert_eq!(review.touched.len(), 1, "{:?}", review.touched);
    assert_eq!(review.touched[0].changed, Changed::ImplOnly);
    assert_eq!(review.touched[0].impl_items, ["src/lib.rs: fn alpha"]);
}

// i[verify spec-check.review.annotations]
#[test]
fn an_item_moved_to_another_file_with_its_annotation_is_a_move() {
    let lib = LIB.replace("// r[impl demo.beta]\npub fn beta() {}\n", "");
    let mut head = tree(SPEC, &lib);
    head.insert("src/beta.rs", "// r[impl demo.beta]\npub fn beta() {}\n");
    let (review, _) = review_of(&tree(SPEC, LIB), &head);
    let fates: Vec<(Fate, &str, &str)> = review
        .annotations
        .iter()
        .map(|a| (a.fate, a.at.as_str(), a.item.as_str()))
        .collect();
    assert_eq!(fates, [(Fate::Moved, "src/beta.rs:1", "fn beta")]);
    assert_eq!(
        review.annotations[0].from.as_deref(),
        Some("src/lib.rs:6 (fn beta)")
    );
}

// i[verify spec-check.review.rename]
#[test]
fn a_note_naming_an_id_the_head_still_has_renames_nothing() {
    let spec = format!("{SPEC}\n> r[demo.gamma]\n> Gamma holds. (was demo.alpha)\n");
    let (review, _) = review_of(&tree(SPEC, LIB), &tree(&spec, LIB));
    assert!(review.renamed.is_empty(), "{:?}", review.renamed);
    let added: Vec<&str> = review.added.iter().map(|r| r.rule.as_str()).collect();
    assert_eq!(added, ["r[demo.gamma]"]);
    assert!(review.removed.is_empty(), "{:?}", review.removed);
}

// i[verify spec-check.review.rules+2]
#[test]
fn a_paragraph_rule_is_compared_by_its_paragraph() {
    let spec = format!("{SPEC}\nr[demo.delta]\nDelta holds.\n\nProse after it.\n");
    let lib = format!("{LIB}\n// r[impl demo.delta]\npub fn delta() {{}}\n");
    // The prose after it is not its text.
    let prose = spec.replace("Prose after it.", "Other prose.");
    let (review, _) = review_of(&tree(&spec, &lib), &tree(&prose, &lib));
    assert!(review.unbumped.is_empty(), "{:?}", review.unbumped);
    // Its own text is.
    let changed = spec.replace("Delta holds.", "Delta holds, always.");
    let (review, _) = review_of(&tree(&spec, &lib), &tree(&changed, &lib));
    let unbumped: Vec<&str> = review.unbumped.iter().map(|r| r.rule.as_str()).collect();
    assert_eq!(unbumped, ["r[demo.delta]"]);
}

/// The tree of the demo with a proof summary holding `alpha`'s proof.
fn with_proof(alpha: crate::model::proof::Proof) -> Memory {
    let mut tree = tree(SPEC, LIB);
    tree.insert(
        "docs/audit/proof.md",
        crate::model::proof_summary::render(&[("r[demo.alpha]".to_owned(), alpha)]),
    );
    tree
}

// i[verify spec-check.review.coverage]
#[test]
fn a_proven_rule_losing_its_proof_is_coverage_down() {
    use crate::model::proof::Proof;
    let proven = Proof {
        caught: 3,
        ..Proof::default()
    };
    let survived = Proof {
        caught: 2,
        missed: 1,
        ..Proof::default()
    };
    let (review, _) = review_of(&with_proof(proven.clone()), &with_proof(proven.clone()));
    assert!(review.passes(), "{:?}", review.problems);
    let proven_counts = |review: &Review| {
        let row = &review.coverage[0];
        (row.before.map(|c| c.proven), row.after.map(|c| c.proven))
    };
    assert_eq!(proven_counts(&review), (Some(1), Some(1)));
    let (review, _) = review_of(&with_proof(proven), &with_proof(survived));
    assert_eq!(kinds(&review), [Kind::CoverageDown]);
    assert_eq!(review.problems[0].rule, "r[demo.alpha]");
    assert!(
        review.problems[0].message.contains("proven"),
        "{}",
        review.problems[0].message
    );
    assert_eq!(proven_counts(&review), (Some(1), Some(0)));
}

// i[verify spec-check.review.output]
#[test]
fn a_huge_review_still_fits_one_pull_request_comment() {
    let (mut review, mut outcome) = busy_review();
    let long = "x".repeat(200);
    review.added = (0..2000)
        .map(|n| RuleAt {
            rule: format!("r[demo.{long}.{n}]"),
            file: "docs/spec.md".to_owned(),
            line: n,
        })
        .collect();
    review.touched = (0..2000)
        .map(|n| Touched {
            rule: format!("r[demo.{n}]"),
            changed: Changed::Both,
            impl_items: (0..100)
                .map(|i| format!("src/lib.rs: fn {long}{i}"))
                .collect(),
            verify_items: Vec::new(),
            proof: ProofState::NoneRecorded,
        })
        .collect();
    review.problems = (0..2000)
        .map(|n| Problem {
            kind: Kind::CoverageDown,
            rule: format!("r[demo.{n}]"),
            file: "docs/spec.md".to_owned(),
            line: n,
            message: long.clone(),
            lost: Vec::new(),
        })
        .collect();
    outcome.problems.clear();
    let markdown = render(&review, &outcome, Format::Markdown);
    // GitHub refuses a comment over 65,536 characters.
    assert!(
        markdown.chars().count() <= 65_536,
        "{} characters",
        markdown.chars().count()
    );
    assert!(
        markdown.contains("… and 1950 more, see `--json`"),
        "{markdown}"
    );
    assert!(markdown.contains("Gate on this change"), "the end is kept");
}

// i[verify spec-check.review.coverage]
#[test]
fn a_lost_proof_or_implementation_says_why_and_what_to_do() {
    use crate::model::proof::Proof;
    let proven = Proof {
        caught: 3,
        ..Proof::default()
    };
    // Bumped: the recorded proof is of the old version.
    let spec = SPEC.replace(
        "r[demo.alpha]\n> Alpha holds.",
        "r[demo.alpha+2]\n> Alpha holds, always.",
    );
    let lib = LIB.replace("demo.alpha]", "demo.alpha+2]");
    let mut head = tree(&spec, &lib);
    head.insert(
        "docs/audit/proof.md",
        crate::model::proof_summary::render(&[("r[demo.alpha]".to_owned(), proven.clone())]),
    );
    let (review, _) = review_of(&with_proof(proven), &head);
    assert_eq!(kinds(&review), [Kind::CoverageDown]);
    let message = &review.problems[0].message;
    assert!(
        message.contains("its proof was of r[demo.alpha]") && message.contains("cargo xtask prove"),
        "{message}"
    );
    // Bumped, the annotations left at the old version: they are stale, and it says so.
    let lib = LIB.replace("// r[impl demo.alpha]", "// r[impl demo.alpha+2]");
    let (review, _) = review_of(&tree(SPEC, LIB), &tree(&spec, &lib));
    let message = &review.problems.last().expect("a problem").message;
    assert!(
        message.contains("older version") && message.contains("r[demo.alpha+2]"),
        "{review:?}"
    );
}

// i[verify spec-check.review.coverage]
#[test]
fn a_loss_with_no_version_change_gives_no_version_advice() {
    use crate::model::proof::Proof;
    let proven = Proof {
        caught: 3,
        ..Proof::default()
    };
    // The proof's row gone, the rule unchanged: lost, but no new version voided it.
    let (review, _) = review_of(&with_proof(proven), &tree(SPEC, LIB));
    assert_eq!(kinds(&review), [Kind::CoverageDown], "{review:?}");
    let message = &review.problems[0].message;
    assert!(message.contains("proven"), "{message}");
    assert!(!message.contains("its proof was of"), "{message}");
    // The implementation's annotation gone, none left at an older version: no stale advice.
    let lib = LIB.replace("// r[impl demo.alpha]\n", "");
    let (review, _) = review_of(&tree(SPEC, LIB), &tree(SPEC, &lib));
    let message = &review.problems.last().expect("a problem").message;
    assert!(message.contains("implemented"), "{review:?}");
    assert!(!message.contains("older version"), "{message}");
}

// i[verify spec-check.review.items+2]
#[test]
fn a_moved_annotation_counts_as_a_change_of_its_side() {
    let lib = LIB.replace("// r[impl demo.beta]\npub fn beta() {}\n", "");
    let mut head = tree(SPEC, &lib);
    head.insert("src/beta.rs", "// r[impl demo.beta]\npub fn beta() {}\n");
    let (review, _) = review_of(&tree(SPEC, LIB), &head);
    assert_eq!(review.touched.len(), 1, "{:?}", review.touched);
    assert_eq!(review.touched[0].rule, "r[demo.beta]");
    assert_eq!(review.touched[0].changed, Changed::ImplOnly);
    assert_eq!(review.touched[0].impl_items, ["src/beta.rs: fn beta"]);
}

// i[verify spec-check.review.rules+2]
#[test]
fn a_lowered_version_is_a_problem_naming_a_version_above_both() {
    let base = SPEC.replace("r[demo.beta]", "r[demo.beta+3]");
    let base_lib = LIB.replace("demo.beta]", "demo.beta+3]");
    let head = SPEC.replace("r[demo.beta]", "r[demo.beta+2]");
    let head_lib = LIB.replace("demo.beta]", "demo.beta+2]");
    let (review, _) = review_of(&tree(&base, &base_lib), &tree(&head, &head_lib));
    assert_eq!(kinds(&review), [Kind::TextChangedWithoutBump], "{review:?}");
    let unbumped: Vec<&str> = review.unbumped.iter().map(|r| r.rule.as_str()).collect();
    assert_eq!(unbumped, ["r[demo.beta+2]"]);
    assert!(review.bumped.is_empty(), "{:?}", review.bumped);
    // The message says the version went down, not that the text changed (it did not).
    assert_eq!(
        review.problems[0].message,
        "the version of r[demo.beta+2] went down from r[demo.beta+3]: make it r[demo.beta+4] \
         and update its references"
    );
    // Text changed at the same version: the version to bump to is above both, and the message
    // says the text changed, not that the version went down.
    let changed = base.replace("Beta holds.", "Beta holds, always.");
    let (review, _) = review_of(&tree(&base, &base_lib), &tree(&changed, &base_lib));
    assert_eq!(kinds(&review), [Kind::TextChangedWithoutBump], "{review:?}");
    assert_eq!(
        review.problems[0].message,
        "the text of r[demo.beta+3] changed but its version did not: make it r[demo.beta+4] \
         and update its references, or restore the text"
    );
}

// A level is an attribute of the marker, not part of the id nor of the text: the rule is the
// same one, kept, and the review lists it among the rules whose level changed, and only it.
// i[verify spec-check.review.rules+2]
// i[verify spec-check.levels]
#[test]
fn a_rule_whose_level_changed_is_kept_and_listed_from_and_to() {
    let spec = SPEC.replace("> r[demo.beta]", "> r[demo.beta level=should]");
    let (review, _) = review_of(&tree(SPEC, LIB), &tree(&spec, LIB));
    assert!(
        review.added.is_empty() && review.removed.is_empty() && review.unbumped.is_empty(),
        "{review:?}"
    );
    let levelled: Vec<(&str, &str, &str)> = review
        .levelled
        .iter()
        .map(|l| (l.rule.rule.as_str(), l.from, l.to))
        .collect();
    assert_eq!(levelled, [("r[demo.beta]", "must", "should")]);
    assert!(review.passes(), "{:?}", review.problems);
    // An unchanged tree has no rule whose level changed.
    let (review, _) = review_of(&tree(&spec, LIB), &tree(&spec, LIB));
    assert!(review.levelled.is_empty(), "{:?}", review.levelled);
}

// A base rule that a head rule names as its previous id is neither removed nor is its successor
// added: it is renamed, its text compared without the note.
// i[verify spec-check.review.rules+2]
// i[verify spec-check.review.rename]
#[test]
fn a_rule_named_as_a_previous_id_is_not_removed_and_its_text_is_compared() {
    let spec = SPEC.replace(
        "> r[demo.beta]\n> Beta holds.",
        "> r[demo.bravo]\n> Bravo holds. (was demo.beta)",
    );
    let (review, _) = review_of(&tree(SPEC, LIB), &tree(&spec, LIB));
    assert!(
        review.added.is_empty() && review.removed.is_empty(),
        "{review:?}"
    );
    let renamed: Vec<(&str, &str, bool)> = review
        .renamed
        .iter()
        .map(|r| (r.from.as_str(), r.to.rule.as_str(), r.text_changed))
        .collect();
    assert_eq!(renamed, [("r[demo.beta]", "r[demo.bravo]", true)]);
    // Reflowed, with the note on a line of its own: the same text.
    let spec = SPEC.replace(
        "> r[demo.beta]\n> Beta holds.",
        "> r[demo.bravo]\n>   Beta\n>   holds.\n> (was demo.beta)",
    );
    let (review, _) = review_of(&tree(SPEC, LIB), &tree(&spec, LIB));
    let renamed: Vec<(&str, &str, bool)> = review
        .renamed
        .iter()
        .map(|r| (r.from.as_str(), r.to.rule.as_str(), r.text_changed))
        .collect();
    assert_eq!(renamed, [("r[demo.beta]", "r[demo.bravo]", false)]);
}

// A note naming an id the base did not define, or one the head still defines (whichever of the
// two the head reads first), continues nothing: the rule is added and no rule is removed.
// i[verify spec-check.review.rules+2]
// i[verify spec-check.review.rename]
#[test]
fn a_note_naming_an_id_the_base_lacks_or_the_head_keeps_adds_the_rule() {
    let spec = format!("{SPEC}\n> r[demo.gamma]\n> Gamma holds. (was demo.zeta)\n");
    let (review, _) = review_of(&tree(SPEC, LIB), &tree(&spec, LIB));
    assert!(review.renamed.is_empty(), "{:?}", review.renamed);
    let added: Vec<&str> = review.added.iter().map(|r| r.rule.as_str()).collect();
    assert_eq!(added, ["r[demo.gamma]"]);
    assert!(review.removed.is_empty(), "{:?}", review.removed);

    // `demo.zulu` sorts after `demo.gamma`: no rule of the head has continued it yet when
    // gamma's note is read, and the head still defining it is what keeps it.
    let base = format!("{SPEC}\n> r[demo.zulu]\n> Zulu holds.\n");
    let head = format!("{base}\n> r[demo.gamma]\n> Gamma holds. (was demo.zulu)\n");
    let (review, _) = review_of(&tree(&base, LIB), &tree(&head, LIB));
    assert!(review.renamed.is_empty(), "{:?}", review.renamed);
    let added: Vec<&str> = review.added.iter().map(|r| r.rule.as_str()).collect();
    assert_eq!(added, ["r[demo.gamma]"]);
    assert!(review.removed.is_empty(), "{:?}", review.removed);
}

// i[verify spec-check.review.rename]
#[test]
fn two_rules_naming_one_previous_id_rename_it_once() {
    let spec = SPEC.replace(
        "> r[demo.beta]\n> Beta holds.",
        "> r[demo.bravo]\n> Beta holds. (was demo.beta)\n\n> r[demo.brave]\n> Beta too. (was demo.beta)",
    );
    let (review, _) = review_of(&tree(SPEC, LIB), &tree(&spec, LIB));
    assert_eq!(review.renamed.len(), 1, "{:?}", review.renamed);
    assert_eq!(review.added.len(), 1, "{:?}", review.added);
}

// i[verify spec-check.review.rename]
#[test]
fn prose_in_parentheses_starting_with_was_is_text() {
    let spec = SPEC.replace("Beta holds.", "Beta holds (was it ever not?).");
    let changed = SPEC.replace("Beta holds.", "Beta holds (was it always?).");
    let (review, _) = review_of(&tree(&spec, LIB), &tree(&changed, LIB));
    assert_eq!(kinds(&review), [Kind::TextChangedWithoutBump], "{review:?}");
}

// i[verify spec-check.review.rename]
#[test]
fn a_was_naming_no_id_is_prose() {
    // `(was )` names no id: it is no note, so it is part of the text like any other prose.
    let spec = SPEC.replace("Beta holds.", "Beta holds. (was )");
    let (review, _) = review_of(&tree(SPEC, LIB), &tree(&spec, LIB));
    assert_eq!(kinds(&review), [Kind::TextChangedWithoutBump], "{review:?}");
    assert!(review.renamed.is_empty(), "{:?}", review.renamed);
}

// i[verify spec-check.review.output]
#[test]
fn where_a_moved_annotation_came_from_is_a_code_span_in_markdown() {
    let (mut review, outcome) = busy_review();
    review.annotations = vec![Annotation {
        rule: "r[demo.alpha]".to_owned(),
        verb: "impl",
        fate: Fate::Moved,
        at: "src/b.rs:3".to_owned(),
        item: "impl From<T>".to_owned(),
        from: Some("src/a.rs:9 (impl From<T>)".to_owned()),
    }];
    let markdown = render(&review, &outcome, Format::Markdown);
    assert!(
        markdown.contains("(from `src/a.rs:9 (impl From<T>)`)"),
        "{markdown}"
    );
}

// i[verify spec-check.review.rules+2]
#[test]
fn a_reference_following_another_rules_bump_is_no_change_of_text() {
    assert_eq!(
        crate::spec_check::rule_text::unversioned_references(
            "as `r[a.b+2]` says, not r[c.d] nor x[1+2] nor [e.f+3]"
        ),
        "as `r[a.b]` says, not r[c.d] nor x[1+2] nor [e.f+3]"
    );
    // Only a lowercase prefix, a dotted id and a version of digits make a versioned reference.
    for kept in [
        "r[a.b+]",
        "r[a.b+x]",
        "r[a.b++2]",
        "R[a.b+2]",
        "r[ab+2]",
        "r[a.b+2",
        "[a.b+2]",
    ] {
        assert_eq!(
            crate::spec_check::rule_text::unversioned_references(kept),
            kept
        );
    }
    assert_eq!(
        crate::spec_check::rule_text::unversioned_references("i[x.y+12] and r[p.q-r+3]."),
        "i[x.y] and r[p.q-r]."
    );
    let base = "# Demo\n\n> r[demo.alpha]\n> Alpha holds, as r[demo.beta] says.\n\n\
                > r[demo.beta]\n> Beta holds.\n";
    let head = base.replace("as r[demo.beta] says", "as r[demo.beta+2] says");
    let (review, _) = review_of(&tree(base, LIB), &tree(&head, LIB));
    assert!(review.problems.is_empty(), "{:?}", review.problems);
    // A real change of words is still one.
    let head = base.replace("Alpha holds", "Alpha always holds");
    let (review, _) = review_of(&tree(base, LIB), &tree(&head, LIB));
    assert_eq!(
        kinds(&review),
        [Kind::TextChangedWithoutBump],
        "{:?}",
        review.problems
    );
}

/// A kept rule's losses, as the review judges them: only what its level at the base or at the
/// head demands, and a level that changed is said.
// i[verify spec-check.levels]
#[test]
fn the_review_judges_the_losses_either_level_demands() {
    let had = Has {
        implemented: true,
        verified: true,
        proven: true,
        ..Has::default()
    };
    let unproven = Has {
        proven: false,
        ..had
    };
    let judged = |now: Has, was: Level, level: Level| super::judged_losses(had, now, was, level);
    assert_eq!(
        judged(had, Level::Must, Level::Must),
        (vec![], String::new())
    );
    assert_eq!(
        judged(unproven, Level::Must, Level::Must),
        (vec![Measure::Proven], String::new())
    );
    // SHOULD demands no proof: its loss is not judged.
    assert_eq!(
        judged(unproven, Level::Should, Level::Should),
        (vec![], String::new())
    );
    // Raised to MUST, or lowered from it: the stricter level judges, and the change is said.
    let raised = judged(unproven, Level::Should, Level::Must);
    assert_eq!(raised.0, [Measure::Proven]);
    assert!(
        raised.1.contains("its level went from should to must"),
        "{}",
        raised.1
    );
    let lowered = judged(Has::default(), Level::Must, Level::May);
    assert_eq!(
        lowered.0,
        [Measure::Implemented, Measure::Verified, Measure::Proven]
    );
    assert!(
        lowered.1.contains("its level went from must to may"),
        "{}",
        lowered.1
    );
}

// i[verify spec-check.levels]
// i[verify spec-check.review]
#[test]
fn lowering_a_rules_level_excuses_no_loss_in_the_change() {
    let spec = SPEC.replace("> r[demo.beta]", "> r[demo.beta tags=informative]");
    let lib = LIB
        .replace("// r[impl demo.beta]\n", "")
        .replace("    // r[verify demo.beta]\n", "");
    let (review, outcome) = review_of(&tree(SPEC, LIB), &tree(&spec, &lib));
    // The head's gate demands nothing of an informative rule...
    assert!(outcome.problems.is_empty(), "{:?}", outcome.problems);
    // ...but the review judges the loss by the base's level too, and says the level went down.
    assert_eq!(kinds(&review), [Kind::CoverageDown]);
    let message = &review.problems[0].message;
    assert!(message.contains("implemented, verified"), "{message}");
    assert!(
        message.contains("its level went from must to informative"),
        "{message}"
    );
    // The level change is listed, in the text and the Markdown.
    assert_eq!(review.levelled.len(), 1);
    assert_eq!(
        (review.levelled[0].from, review.levelled[0].to),
        ("must", "informative")
    );
    let text = render(&review, &outcome, Format::Text);
    assert!(
        text.contains("rules whose level changed:\n    r[demo.beta]: must → informative"),
        "{text}"
    );
    let markdown = render(&review, &outcome, Format::Markdown);
    assert!(
        markdown.contains("`r[demo.beta]`: must → **informative**"),
        "{markdown}"
    );
}

/// The fates of `rule`'s `verb` annotations in `review`, in order.
fn fates(review: &Review, verb: &str) -> Vec<Fate> {
    review
        .annotations
        .iter()
        .filter(|a| a.verb == verb)
        .map(|a| a.fate)
        .collect()
}

// An annotation of another verb is never where one of this verb moved to: not on the same item
// in another file, nor on another item in the same file.
// i[verify spec-check.review.annotations]
// i[verify spec-check.review.items+2]
#[test]
fn an_annotation_of_another_verb_is_no_move_of_this_one() {
    let lib = LIB.replace(
        "// r[impl demo.beta]\npub fn beta() {}\n",
        "pub fn beta() {}\n",
    );
    // A test of the same name in another file.
    let mut head = tree(SPEC, &lib);
    head.insert(
        "src/other.rs",
        "// r[verify demo.beta]\n#[test]\nfn beta() {\n    super::beta();\n}\n",
    );
    let (review, _) = review_of(&tree(SPEC, LIB), &head);
    assert_eq!(
        fates(&review, "impl"),
        [Fate::Dropped],
        "{:?}",
        review.annotations
    );
    assert_eq!(
        fates(&review, "verify"),
        [Fate::Added],
        "{:?}",
        review.annotations
    );
    // Another test in the same file.
    let same_file = lib.replace(
        "    // r[verify demo.beta]\n    #[test]\n    fn beta_holds() {",
        "    // r[verify demo.beta]\n    #[test]\n    fn beta_again() {\n        super::beta();\n    }\n\n    // r[verify demo.beta]\n    #[test]\n    fn beta_holds() {",
    );
    assert_ne!(same_file, lib, "the second test was added");
    let (review, _) = review_of(&tree(SPEC, LIB), &tree(SPEC, &same_file));
    assert_eq!(
        fates(&review, "impl"),
        [Fate::Dropped],
        "{:?}",
        review.annotations
    );
    assert_eq!(
        fates(&review, "verify"),
        [Fate::Added],
        "{:?}",
        review.annotations
    );
}

// An annotation on another item in another file is a drop and an addition, not a move.
// i[verify spec-check.review.annotations]
// i[verify spec-check.review.items+2]
#[test]
fn another_item_in_another_file_is_no_move() {
    let lib = LIB.replace(
        "// r[impl demo.beta]\npub fn beta() {}\n",
        "pub fn beta() {}\n",
    );
    let mut head = tree(SPEC, &lib);
    head.insert("src/other.rs", "// r[impl demo.beta]\npub fn gamma() {}\n");
    let (review, _) = review_of(&tree(SPEC, LIB), &head);
    let mut impls = fates(&review, "impl");
    impls.sort_by_key(|f| format!("{f:?}"));
    assert_eq!(
        impls,
        [Fate::Added, Fate::Dropped],
        "{:?}",
        review.annotations
    );
}
