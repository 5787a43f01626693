//! Evidence fingerprints: hashes of what a rule's proof judged — its text, its implementing
//! items and its verifying items — so that a recorded proof whose evidence changed since is shown
//! stale without anyone bumping the rule's version. The same hashes judge a run's test results
//! ([`super::evidence`]).
//!
//! Each part is normalised before it is hashed, exactly as the spec review compares them: the
//! text as [`super::rule_text::rule_text`] reads it, each item as [`super::items`] finds and
//! normalises it (tree-sitter's item, comments and formatting dropped): for an `impl` annotation
//! the items `cargo xtask prove` mutates (a struct's impl blocks included), for a `verify` one the
//! test it judges (a test inside `proptest! {` alone, not its module). Items are
//! hashed as a set of `head` and text, so the order of annotations, the file an item sits in and
//! two annotations on one item do not count.
//!
//! A record older than fingerprints has none: it is "unfingerprinted", shown and counted, never
//! stale; the rule's next `cargo xtask prove` writes one.

use std::collections::BTreeSet;

use sha2::{Digest, Sha256};

use super::Tree;
use super::coverage::Site;
use super::rules::Rule;
use crate::model::proof::{Fingerprint, Proof};
use crate::model::tree::Tree as Source;

/// The first 12 hex digits of the SHA-256 of `parts`, each length-prefixed.
fn hash<'a>(parts: impl IntoIterator<Item = &'a str>) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update((part.len() as u64).to_le_bytes());
        hasher.update(part.as_bytes());
    }
    hasher.finalize()[..6]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The items `sites` stand for, normalised, as a sorted set: for `impl` sites the items
/// `cargo xtask prove` mutates ([`super::items::impl_items_at`]), for `verify` sites the test it
/// judges ([`super::items::verify_item_at`]).
fn items<'a>(tree: &Tree, sites: impl Iterator<Item = &'a Site>, verify: bool) -> BTreeSet<String> {
    sites
        .flat_map(|site| {
            let file = tree.parsed.get(&site.path);
            let content = file.map_or("", |f| f.content.as_str());
            let layout = file.and_then(|f| f.layout.as_ref());
            if verify {
                vec![super::items::verify_item_at(
                    &site.path, content, layout, site.line,
                )]
            } else {
                super::items::impl_items_at(&site.path, content, layout, site.line)
            }
        })
        .map(|item| format!("{}\n{}", item.head, item.text))
        .collect()
}

/// The fingerprint of `rule`'s evidence in `tree` now.
// i[impl prove.fingerprint]
pub fn of(tree: &Tree, rule: &Rule) -> Fingerprint {
    tree.fingerprint(rule, || compute(tree, rule))
}

/// [`of`], computed.
fn compute(tree: &Tree, rule: &Rule) -> Fingerprint {
    let (text, _) = super::rule_text::rule_text(rule);
    let impls = items(
        tree,
        tree.coverage_of(rule).flat_map(|c| &c.impl_sites),
        false,
    );
    let verifies = items(
        tree,
        tree.coverage_of(rule).flat_map(|c| &c.verify_sites),
        true,
    );
    Fingerprint {
        text: hash([text.as_str()]),
        impls: hash(impls.iter().map(String::as_str)),
        verifies: hash(verifies.iter().map(String::as_str)),
    }
}

/// The rules of `now` whose evidence is not `then`'s: a rule `then` does not define, defines at
/// another version, or whose fingerprint ([`of`]) differs — so a reformat, a comment or an item
/// moved with its annotation changes nothing, and a change inside an item's body changes its
/// rule wherever its annotation lies. In `now`'s order.
// i[impl prove.changed+2]
pub fn changed_between<'a>(then: &Tree, now: &'a Tree) -> Vec<&'a Rule> {
    now.rules()
        .iter()
        .filter(|rule| match then.rule(&rule.id.base) {
            Some(old) if old.prefix == rule.prefix && old.id == rule.id => {
                of(then, old) != of(now, rule)
            }
            _ => true,
        })
        .collect()
}

/// What a recorded proof says of the tree now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Freshness {
    /// Its fingerprint matches the tree.
    Fresh,
    /// It has no fingerprint (recorded before them).
    Unfingerprinted,
    /// These parts (`text`, `impl`, `tests`) changed since it ran.
    Stale(Vec<&'static str>),
}

/// Judges `proof`'s fingerprint against `now`.
// i[impl prove.fingerprint]
pub fn freshness(proof: &Proof, now: &Fingerprint) -> Freshness {
    match &proof.fingerprint {
        None => Freshness::Unfingerprinted,
        Some(then) => {
            let changed = then.changed(now);
            if changed.is_empty() {
                Freshness::Fresh
            } else {
                Freshness::Stale(changed)
            }
        }
    }
}

/// `proof stale: impl changed since 3f2a1b2` — since the proof's commit, or failing that the
/// recorded hash of the first part that changed.
pub fn stale_message(proof: &Proof, changed: &[&str]) -> String {
    let since = proof.commit.clone().unwrap_or_else(|| {
        let then = proof.fingerprint.as_ref();
        let part = changed.first().copied().unwrap_or("text");
        then.map_or_else(String::new, |f| match part {
            "impl" => f.impls.clone(),
            "tests" => f.verifies.clone(),
            _ => f.text.clone(),
        })
    });
    let what = match changed {
        [] => String::new(),
        [one] => (*one).to_owned(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    };
    format!("proof stale: {what} changed since {since}")
}

/// The recorded proof of `rule` ([`crate::model::proof::recorded`]) and how its fingerprint
/// stands against `tree`: the one judgement the gate's note and the review both show.
// i[impl prove.fingerprint]
pub fn judged(source: &dyn Source, tree: &Tree, rule: &Rule) -> Option<(Proof, Freshness)> {
    let proof = crate::model::proof::recorded(source, &rule.id)?;
    // An unfingerprinted record has nothing to compare with: the rule's items are not hashed
    // (what `freshness` would say of it without them, here without the cost).
    let freshness = if proof.fingerprint.is_some() {
        freshness(&proof, &of(tree, rule))
    } else {
        Freshness::Unfingerprinted
    };
    Some((proof, freshness))
}

/// The recorded proof of `rule` ([`judged`]), its `stale` set when its fingerprint no longer
/// matches `tree`.
// i[impl prove.fingerprint]
pub fn recorded(source: &dyn Source, tree: &Tree, rule: &Rule) -> Option<Proof> {
    let (mut proof, freshness) = judged(source, tree, rule)?;
    if let Freshness::Stale(changed) = freshness {
        proof.stale = Some(stale_message(&proof, &changed));
    }
    Some(proof)
}

/// The gate's notes on `proofs` (marker, proof read by [`recorded`]): one per stale proof, and
/// how many are stale and how many unfingerprinted.
// i[impl prove.fingerprint]
pub fn notes(proofs: &[(String, Proof)]) -> Vec<String> {
    let mut notes: Vec<String> = proofs
        .iter()
        .filter_map(|(marker, proof)| Some(format!("{marker}: {}", proof.stale.as_ref()?)))
        .collect();
    let stale = notes.len();
    let unfingerprinted = proofs
        .iter()
        .filter(|(_, p)| p.fingerprint.is_none())
        .count();
    let malformed = proofs
        .iter()
        .filter(|(_, p)| p.fingerprint_malformed)
        .count();
    let malformed = if malformed == 0 {
        String::new()
    } else {
        format!(
            "; {malformed} of them with a fingerprint cell that is no fingerprint (12 lowercase \
             hex digits per part): rewrite it with `cargo xtask prove --summary`"
        )
    };
    notes.push(format!(
        "proof fingerprints: {} of {} recorded proofs stale, {unfingerprinted} unfingerprinted \
         (recorded before fingerprints: the next `cargo xtask prove` of the rule writes one){malformed}",
        stale,
        proofs.len()
    ));
    notes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Memory;

    const CONFIG: &str = "specs (\n  {\n    name demo\n    include (docs/spec.md)\n    impls (\n      {\n        name rust\n        include (src/**/*.rs)\n      }\n    )\n  }\n)\n";

    const SPEC: &str = "# Demo\n\n> r[demo.alpha]\n> Alpha holds.\n\n> r[demo.beta]\n> Beta holds, as r[demo.alpha] says.\n";

    const LIB: &str = "// r[impl demo.alpha]\npub fn alpha() -> u32 {\n    1\n}\n\n// r[impl demo.beta]\npub fn beta() {}\n\n#[cfg(test)]\nmod tests {\n    // r[verify demo.alpha]\n    #[test]\n    fn alpha_holds() {\n        assert_eq!(super::alpha(), 1);\n    }\n\n    // r[verify demo.beta]\n    #[test]\n    fn beta_holds() {\n        super::beta();\n    }\n}\n";

    fn tree(spec: &str, lib: &str) -> Memory {
        Memory::new([
            (".config/tracey/config.styx", CONFIG),
            ("docs/spec.md", spec),
            ("src/lib.rs", lib),
        ])
    }

    /// `id`'s fingerprint in a tree of `spec` and `lib`.
    fn print(spec: &str, lib: &str, id: &str) -> Fingerprint {
        let memory = tree(spec, lib);
        let Ok((_, read)) = crate::spec_check::read(&memory) else {
            panic!("read");
        };
        of(&read, read.rule(id).expect("rule"))
    }

    fn changed(lib: &str, id: &str) -> Vec<&'static str> {
        print(SPEC, LIB, id).changed(&print(SPEC, lib, id))
    }

    // i[verify prove.fingerprint]
    #[test]
    fn each_part_changes_with_its_own_evidence_only() {
        assert_eq!(changed(LIB, "demo.alpha"), Vec::<&str>::new());
        assert_eq!(
            changed(&LIB.replace("    1\n", "    2\n"), "demo.alpha"),
            ["impl"]
        );
        assert_eq!(
            changed(&LIB.replace("    1\n", "    2\n"), "demo.beta"),
            Vec::<&str>::new()
        );
        assert_eq!(
            changed(&LIB.replace("alpha(), 1)", "alpha(), 2)"), "demo.alpha"),
            ["tests"]
        );
        let text = print(SPEC, LIB, "demo.alpha").changed(&print(
            &SPEC.replace("Alpha holds", "Alpha always holds"),
            LIB,
            "demo.alpha",
        ));
        assert_eq!(text, ["text"]);
        // A referenced rule's bump is no change of this rule's text (as in the review).
        let bumped = SPEC
            .replace("> r[demo.alpha]", "> r[demo.alpha+2]")
            .replace("as r[demo.alpha] says", "as r[demo.alpha+2] says");
        assert_eq!(
            print(SPEC, LIB, "demo.beta").changed(&print(&bumped, LIB, "demo.beta")),
            Vec::<&str>::new()
        );
    }

    // i[verify prove.fingerprint]
    #[test]
    fn comments_formatting_and_order_do_not_count() {
        let commented = LIB
            .replace("    1\n", "    // why one\n    1 /* always */\n")
            .replace("pub fn alpha() -> u32 {", "pub fn alpha()->u32{");
        assert_eq!(changed(&commented, "demo.alpha"), Vec::<&str>::new());
        // The same items in another order, one of them annotated twice.
        let reordered = "// r[impl demo.beta]\npub fn beta() {}\n\n// r[impl demo.alpha]\n// r[impl demo.alpha]\npub fn alpha() -> u32 {\n    1\n}\n"
            .to_owned()
            + &LIB[LIB.find("#[cfg(test)]").expect("tests")..];
        assert_eq!(changed(&reordered, "demo.alpha"), Vec::<&str>::new());
        let respaced = SPEC.replace("Alpha holds.", "Alpha\n> holds.");
        assert_eq!(
            print(SPEC, LIB, "demo.alpha").changed(&print(&respaced, LIB, "demo.alpha")),
            Vec::<&str>::new()
        );
    }

    // i[verify prove.fingerprint]
    #[test]
    fn a_proof_without_a_fingerprint_is_unfingerprinted_and_a_changed_one_stale() {
        let now = print(SPEC, LIB, "demo.alpha");
        let mut proof = Proof {
            caught: 1,
            commit: Some("3f2a1b2".into()),
            ..Proof::default()
        };
        assert_eq!(freshness(&proof, &now), Freshness::Unfingerprinted);
        proof.fingerprint = Some(now.clone());
        assert_eq!(freshness(&proof, &now), Freshness::Fresh);
        let later = print(SPEC, &LIB.replace("    1\n", "    2\n"), "demo.alpha");
        assert_eq!(freshness(&proof, &later), Freshness::Stale(vec!["impl"]));
        assert_eq!(
            stale_message(&proof, &["impl"]),
            "proof stale: impl changed since 3f2a1b2"
        );
        assert_eq!(
            stale_message(&proof, &["text", "impl", "tests"]),
            "proof stale: text, impl and tests changed since 3f2a1b2"
        );
        // Without a commit, the recorded hash of the first part that changed.
        proof.commit = None;
        assert_eq!(
            stale_message(&proof, &["tests"]),
            format!("proof stale: tests changed since {}", now.verifies)
        );
    }

    // i[verify prove.fingerprint]
    #[test]
    fn the_gate_notes_stale_proofs_and_counts_unfingerprinted_ones() {
        let fresh = print(SPEC, LIB, "demo.alpha");
        let proof = |fingerprint: Option<Fingerprint>| {
            let summary = crate::model::proof_summary::render(&[(
                "r[demo.alpha]".to_owned(),
                Proof {
                    caught: 1,
                    commit: Some("3f2a1b2".into()),
                    fingerprint,
                    ..Proof::default()
                },
            )]);
            let memory = Memory::new([
                (".config/tracey/config.styx", CONFIG),
                ("docs/spec.md", SPEC),
                ("src/lib.rs", &*LIB.replace("    1\n", "    2\n")),
                ("docs/audit/proof.md", &*summary),
            ]);
            let outcome = crate::spec_check::check(&memory, &[], None, &[]).expect("judged");
            outcome.notes
        };
        let notes = proof(Some(fresh));
        assert!(
            notes.contains(&"r[demo.alpha]: proof stale: impl changed since 3f2a1b2".to_owned()),
            "{notes:?}"
        );
        assert!(
            notes.iter().any(|n| n.starts_with(
                "proof fingerprints: 1 of 1 recorded proofs stale, 0 unfingerprinted"
            )),
            "{notes:?}"
        );
        let notes = proof(None);
        assert!(
            !notes.iter().any(|n| n.contains("proof stale")),
            "{notes:?}"
        );
        assert!(
            notes.iter().any(|n| n.starts_with(
                "proof fingerprints: 0 of 1 recorded proofs stale, 1 unfingerprinted"
            )),
            "{notes:?}"
        );
    }

    // i[verify prove.fingerprint]
    #[test]
    fn a_method_of_an_annotated_type_is_impl_evidence() {
        let lib = "// r[impl demo.alpha]\npub struct Open(pub u32);\n\nimpl Open {\n    pub fn get(&self) -> u32 {\n        self.0\n    }\n}\n";
        let changed = print(SPEC, lib, "demo.alpha").changed(&print(
            SPEC,
            &lib.replace("self.0\n", "self.0 + 1\n"),
            "demo.alpha",
        ));
        assert_eq!(changed, ["impl"]);
    }

    // i[verify prove.fingerprint]
    #[test]
    fn a_verify_inside_proptest_is_its_test_not_its_module() {
        let lib = "// r[impl demo.alpha]\npub fn alpha() -> u32 {\n    1\n}\n\n#[cfg(test)]\nmod tests {\n    #[test]\n    fn other() {\n        assert!(true);\n    }\n\n    proptest::proptest! {\n        // r[verify demo.alpha]\n        #[test]\n        fn any(x in 0u32..4) {\n            assert_eq!(super::alpha(), 1 + x * 0);\n        }\n    }\n}\n";
        let unrelated = lib.replace("assert!(true)", "assert!(!false)");
        assert_eq!(
            print(SPEC, lib, "demo.alpha").changed(&print(SPEC, &unrelated, "demo.alpha")),
            Vec::<&str>::new()
        );
        let own = lib.replace("1 + x * 0", "1 + x * 1");
        assert_eq!(
            print(SPEC, lib, "demo.alpha").changed(&print(SPEC, &own, "demo.alpha")),
            ["tests"]
        );
    }

    /// The markers of the rules whose evidence changed from a tree of `lib` to one of `later`
    /// (with `spec` then and `spec_later` now).
    fn changed_rules(spec: &str, lib: &str, spec_later: &str, later: &str) -> Vec<String> {
        let (then, now) = (tree(spec, lib), tree(spec_later, later));
        let (Ok((_, then)), Ok((_, now))) = (
            crate::spec_check::read(&then),
            crate::spec_check::read(&now),
        ) else {
            panic!("read");
        };
        changed_between(&then, &now)
            .into_iter()
            .map(Rule::marker)
            .collect()
    }

    /// A verifying test outside Rust: a Python test is its function (another function of the
    /// file changes nothing), and an annotation in no item (a file's head) stands for its whole
    /// file.
    // i[verify prove.fingerprint]
    #[test]
    fn a_non_rust_verifying_test_is_its_function_or_its_whole_file() {
        const PY_CONFIG: &str = "specs (\n  {\n    name demo\n    include (docs/spec.md)\n    impls (\n      {\n        name rust\n        include (src/**/*.rs)\n      }\n      {\n        name other\n        include (py/**/*.py)\n        test_include (py/tests/**/*.py)\n      }\n    )\n  }\n)\n";
        const PY: &str = "# r[verify demo.alpha]\ndef test_alpha():\n    assert True\n\n\ndef helper():\n    return 1\n";
        const SH: &str = "# r[verify demo.beta]\n\nOTHER = 1\n";
        let print = |py: &str, sh: &str, id: &str| {
            let memory = Memory::new([
                (".config/tracey/config.styx", PY_CONFIG),
                ("docs/spec.md", SPEC),
                (
                    "src/lib.rs",
                    "// r[impl demo.alpha]\npub fn alpha() {}\n// r[impl demo.beta]\npub fn beta() {}\n",
                ),
                ("py/tests/test_alpha.py", py),
                ("py/tests/test_beta.py", sh),
            ]);
            let Ok((_, read)) = crate::spec_check::read(&memory) else {
                panic!("read");
            };
            of(&read, read.rule(id).expect("rule"))
        };
        let alpha = print(PY, SH, "demo.alpha");
        assert_eq!(
            alpha.changed(&print(
                &PY.replace("assert True", "assert False"),
                SH,
                "demo.alpha"
            )),
            ["tests"]
        );
        assert_eq!(
            alpha.changed(&print(
                &PY.replace("return 1", "return 2"),
                SH,
                "demo.alpha"
            )),
            Vec::<&str>::new()
        );
        let head = |text| {
            crate::spec_check::items::verify_item_at(
                std::path::Path::new("py/tests/test_beta.py"),
                text,
                None,
                1,
            )
            .head
        };
        assert_eq!(head(SH), "(the whole file)");
        let beta = print(PY, SH, "demo.beta");
        assert_eq!(
            beta.changed(&print(
                PY,
                &SH.replace("OTHER = 1", "OTHER = 2"),
                "demo.beta"
            )),
            ["tests"]
        );
    }

    // i[verify prove.changed+2]
    #[test]
    fn a_reformat_a_comment_or_a_moved_annotation_changes_no_rule() {
        assert_eq!(changed_rules(SPEC, LIB, SPEC, LIB), Vec::<String>::new());
        // Whitespace and comments only, in code and in the spec.
        let respaced = LIB
            .replace(
                "pub fn alpha() -> u32 {\n    1\n}",
                "pub fn alpha()  ->  u32\n{\n        1\n}",
            )
            .replace("super::beta();", "super::beta(); // why\n");
        let spec = SPEC.replace("Beta holds,", "Beta\n> holds,");
        assert_eq!(
            changed_rules(SPEC, LIB, &spec, &respaced),
            Vec::<String>::new()
        );
        // beta's item and its annotation moved above alpha's, and alpha's annotation moved
        // below a doc comment: every line after moved, no evidence changed.
        let moved = "// r[impl demo.beta]\npub fn beta() {}\n\n/// The first.\n// r[impl demo.alpha]\npub fn alpha() -> u32 {\n    1\n}\n\n".to_owned()
            + &LIB[LIB.find("#[cfg(test)]").expect("tests")..];
        assert_eq!(changed_rules(SPEC, LIB, SPEC, &moved), Vec::<String>::new());
    }

    // i[verify prove.changed+2]
    #[test]
    fn a_body_text_or_version_change_selects_its_rule_alone() {
        // A line of alpha's body, far from its annotation once a long body is there.
        let long = LIB.replace(
            "    1\n",
            &format!("{}    1\n", "    let _ = 0;\n".repeat(30)),
        );
        let longer = long.replacen("let _ = 0;", "let _ = 1;", 30);
        assert_eq!(changed_rules(SPEC, &long, SPEC, &longer), ["r[demo.alpha]"]);
        // A verifying test's body: its rule only.
        assert_eq!(
            changed_rules(
                SPEC,
                LIB,
                SPEC,
                &LIB.replace("super::beta();", "let () = super::beta();")
            ),
            ["r[demo.beta]"]
        );
        // The rule's text; a bump with its text; a rule the base does not define.
        let reworded = SPEC.replace("Alpha holds.", "Alpha always holds.");
        assert_eq!(changed_rules(SPEC, LIB, &reworded, LIB), ["r[demo.alpha]"]);
        let bumped = SPEC.replace("> r[demo.alpha]", "> r[demo.alpha+2]");
        let lib = LIB.replace("demo.alpha]", "demo.alpha+2]");
        assert_eq!(changed_rules(SPEC, LIB, &bumped, &lib), ["r[demo.alpha+2]"]);
        let added = format!("{SPEC}\n> r[demo.gamma]\n> Gamma holds.\n");
        assert_eq!(changed_rules(SPEC, LIB, &added, LIB), ["r[demo.gamma]"]);
    }

    // i[verify prove.fingerprint]
    #[test]
    fn a_malformed_fingerprint_cell_is_counted_apart() {
        let print = print(SPEC, LIB, "demo.alpha");
        let summary = crate::model::proof_summary::render(&[(
            "r[demo.alpha]".to_owned(),
            Proof {
                caught: 1,
                fingerprint: Some(print.clone()),
                ..Proof::default()
            },
        )])
        .replace(&print.render(), &print.render().to_uppercase());
        let memory = Memory::new([
            (".config/tracey/config.styx", CONFIG),
            ("docs/spec.md", SPEC),
            ("src/lib.rs", LIB),
            ("docs/audit/proof.md", &*summary),
        ]);
        let notes = crate::spec_check::check(&memory, &[], None, &[])
            .expect("judged")
            .notes;
        assert!(
            notes.iter().any(|n| n.starts_with(
                "proof fingerprints: 0 of 1 recorded proofs stale, 1 unfingerprinted"
            ) && n
                .contains("1 of them with a fingerprint cell that is no fingerprint")),
            "{notes:?}"
        );
    }
}
