//! `docs/audit/proof.md` (unless configured, [`super::paths`]): the checked-in summary of the last
//! proof of every rule, so a clean checkout shows which rules are proven without a local
//! `target/prove/`. `prove --summary` writes it from `target/prove/*.json` merged over its own
//! earlier rows; [`super::proof::recorded`] reads it back.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use super::proof::{Fingerprint, Proof};

const HEADER: &str = "| rule | verdict | caught | missed | unviable | timed out | justified | commit | date | fingerprint |";

/// The verdict column of a proof.
fn verdict(proof: &Proof) -> String {
    if let Some(why) = &proof.not_provable {
        return format!("not provable — {why}");
    }
    if proof.proven() {
        "proven".to_owned()
    } else if proof.caught + proof.missed + proof.timeout == 0 {
        "no viable mutant".to_owned()
    } else {
        "SURVIVORS".to_owned()
    }
}

/// `text` as one markdown code span, whatever backticks it holds.
fn code(text: &str) -> String {
    if text.contains('`') {
        format!("`` {text} ``")
    } else {
        format!("`{text}`")
    }
}

fn uncode(text: &str) -> &str {
    let text = text.trim();
    let ticks = text.len() - text.trim_start_matches('`').len();
    let inner = &text[ticks..text.len().saturating_sub(ticks).max(ticks)];
    if ticks > 1 { inner.trim() } else { inner }
}

/// The summary of `proofs` (marker, proof), in the order given.
// i[impl prove.summary]
pub fn render(proofs: &[(String, Proof)]) -> String {
    let mut out = String::from(
        "# Mutation proof\n\n\
         Written by `cargo xtask prove --summary` from the proofs under `target/prove/`, merged \
         over this file's earlier rows; do not edit it by hand. A rule is proven when its \
         `verify` tests caught every viable mutant cargo-mutants made of its `impl` items. \
         Justified survivors, with their reasons, are in `docs/audit/survivors.toml`. \
         `spec-check`, `trace` and `spec-report` read this file for a rule that `target/prove/` \
         holds no proof of. The fingerprint is `TEXT/IMPL/VERIFY`, hashes of the rule's text, \
         implementing items and verifying items when the proof ran (comments and formatting do \
         not count): when one no longer matches, the proof is shown stale.\n\n",
    );
    let proven = proofs.iter().filter(|(_, p)| p.proven()).count();
    let _ = writeln!(
        out,
        "{proven} of {} rules proven; mutants: {} caught, {} missed, {} unviable, {} timed out, {} justified.\n",
        proofs.len(),
        proofs.iter().map(|(_, p)| p.caught).sum::<usize>(),
        proofs.iter().map(|(_, p)| p.missed).sum::<usize>(),
        proofs.iter().map(|(_, p)| p.unviable).sum::<usize>(),
        proofs.iter().map(|(_, p)| p.timeout).sum::<usize>(),
        proofs.iter().map(|(_, p)| p.justified.len()).sum::<usize>(),
    );
    out.push_str(HEADER);
    out.push_str("\n|---|---|--:|--:|--:|--:|--:|---|---|---|\n");
    for (marker, proof) in proofs {
        let _ = writeln!(
            out,
            "| `{marker}` | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            verdict(proof),
            proof.caught,
            proof.missed,
            proof.unviable,
            proof.timeout,
            proof.justified.len(),
            proof.commit.as_deref().unwrap_or("-"),
            proof.date.as_deref().unwrap_or("-"),
            proof
                .fingerprint
                .as_ref()
                .map_or_else(|| "-".to_owned(), Fingerprint::render),
        );
    }
    let listed: Vec<&(String, Proof)> = proofs
        .iter()
        .filter(|(_, p)| !p.survivors.is_empty() || !p.justified.is_empty())
        .collect();
    if !listed.is_empty() {
        out.push_str("\n## Survivors\n\n");
        for (marker, proof) in listed {
            for survivor in &proof.survivors {
                let _ = writeln!(out, "- `{marker}` missed: {}", code(survivor));
            }
            for survivor in &proof.justified {
                let _ = writeln!(out, "- `{marker}` justified: {}", code(survivor));
            }
        }
    }
    out
}

/// Reads a summary back: proof per marker. A row written before fingerprints (nine cells, no
/// fingerprint column) reads as an unfingerprinted proof.
// i[impl prove.fingerprint]
pub fn parse(text: &str) -> BTreeMap<String, Proof> {
    let mut proofs: BTreeMap<String, Proof> = BTreeMap::new();
    for line in text.lines() {
        if let Some(row) = line.strip_prefix("| `") {
            let mut cells: Vec<&str> = row.trim_end_matches('|').split(" | ").collect();
            let cell = if cells.len() == 10 { cells.pop() } else { None };
            let fingerprint = cell.and_then(Fingerprint::parse);
            let malformed = cell.is_some_and(|c| c.trim() != "-") && fingerprint.is_none();
            let [
                marker,
                verdict,
                caught,
                missed,
                unviable,
                timeout,
                _justified,
                commit,
                date,
            ] = cells[..]
            else {
                continue;
            };
            let number = |cell: &str| cell.trim().parse::<usize>().unwrap_or(0);
            let known = |cell: &str| Some(cell.trim()).filter(|c| *c != "-").map(str::to_owned);
            let proof = proofs
                .entry(marker.trim_end_matches('`').to_owned())
                .or_default();
            proof.caught = number(caught);
            proof.missed = number(missed);
            proof.unviable = number(unviable);
            proof.timeout = number(timeout);
            proof.commit = known(commit);
            proof.date = known(date);
            proof.fingerprint = fingerprint;
            proof.fingerprint_malformed = malformed;
            proof.not_provable = verdict
                .strip_prefix("not provable — ")
                .map(|why| why.trim().to_owned());
        } else if let Some(item) = line.strip_prefix("- `") {
            let Some((marker, rest)) = item.split_once("` ") else {
                continue;
            };
            let proof = proofs.entry(marker.to_owned()).or_default();
            if let Some(survivor) = rest.strip_prefix("missed: ") {
                proof.survivors.push(uncode(survivor).to_owned());
            } else if let Some(survivor) = rest.strip_prefix("justified: ") {
                proof.justified.push(uncode(survivor).to_owned());
            }
        }
    }
    proofs
}

type Cache = Mutex<BTreeMap<PathBuf, Arc<BTreeMap<String, Proof>>>>;

type ByIdCache = Mutex<BTreeMap<PathBuf, Arc<HashMap<String, Proof>>>>;

/// The summary's proofs by rule id (`retry.schedule+2`, without the marker), read once per
/// process: a rule's proof is then found in constant time, not by a walk of every row (which made
/// tracing every rule quadratic). Where two markers share an id, the first in marker order wins.
pub fn by_id(tree: &dyn super::tree::Tree) -> Arc<HashMap<String, Proof>> {
    static CACHE: OnceLock<ByIdCache> = OnceLock::new();
    let cache = CACHE.get_or_init(ByIdCache::default);
    let mut cache = cache
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    cache
        .entry(tree.root().to_path_buf())
        .or_insert_with(|| {
            let mut ids = HashMap::new();
            for (marker, proof) in read(tree).iter() {
                let id = marker
                    .split_once('[')
                    .map_or(marker.as_str(), |(_, rest)| rest.trim_end_matches(']'));
                ids.entry(id.to_owned()).or_insert_with(|| proof.clone());
            }
            Arc::new(ids)
        })
        .clone()
}

/// The summary's proofs in the tree, read once per process (trace and report ask per rule).
pub fn read(tree: &dyn super::tree::Tree) -> Arc<BTreeMap<String, Proof>> {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let cache = CACHE.get_or_init(Cache::default);
    let mut cache = cache
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    cache
        .entry(tree.root().to_path_buf())
        .or_insert_with(|| {
            Arc::new(
                tree.read(&tree.root().join(super::paths::of(tree).proof))
                    .map(|text| parse(&text))
                    .unwrap_or_default(),
            )
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A rule's proof is found by its id whatever its marker, the first marker in order winning
    /// where two share an id (as the walk of every row it replaces did), and a missing id or
    /// version finds none.
    // i[verify prove.shown+2]
    #[test]
    fn proofs_are_found_by_rule_id() {
        let proofs = vec![
            (
                "i[demo.alpha]".to_owned(),
                Proof {
                    caught: 1,
                    ..Proof::default()
                },
            ),
            (
                "r[demo.alpha]".to_owned(),
                Proof {
                    caught: 2,
                    ..Proof::default()
                },
            ),
            (
                "r[demo.beta+2]".to_owned(),
                Proof {
                    caught: 3,
                    ..Proof::default()
                },
            ),
        ];
        let tree = crate::model::tree::Memory::new([("docs/audit/proof.md", render(&proofs))]);
        let caught = |id: &str| {
            let id = tracey_core::parse_rule_id(id).expect("an id");
            crate::model::proof::recorded(&tree, &id).map(|proof| proof.caught)
        };
        assert_eq!(caught("demo.alpha"), Some(1));
        assert_eq!(caught("demo.beta+2"), Some(3));
        assert_eq!(caught("demo.beta"), None);
        assert_eq!(caught("demo.gamma"), None);
    }

    // i[verify prove.summary]
    #[test]
    fn the_summary_reads_back_as_written() {
        let proofs = vec![
            (
                "r[demo.alpha]".to_owned(),
                Proof {
                    caught: 1,
                    missed: 1,
                    unviable: 2,
                    timeout: 3,
                    survivors: vec![
                        "crates/demo/src/lib.rs:3:5: replace || with && in alpha".into(),
                    ],
                    justified: vec!["crates/demo/src/lib.rs:4:5: replace `x` — why".into()],
                    commit: Some("c361102".into()),
                    date: Some("2026-12-01 14:30:00 UTC".into()),
                    fingerprint: Some(Fingerprint {
                        text: "0123456789ab".into(),
                        impls: "cdef01234567".into(),
                        verifies: "89abcdef0123".into(),
                    }),
                    ..Proof::default()
                },
            ),
            (
                "r[demo.beta+2]".to_owned(),
                Proof {
                    not_provable: Some("no `verify` annotation precedes a test".into()),
                    ..Proof::default()
                },
            ),
        ];
        let text = render(&proofs);
        assert!(text.contains("0 of 2 rules proven"), "{text}");
        let back = parse(&text);
        assert_eq!(back.len(), 2);
        assert_eq!(back["r[demo.alpha]"], proofs[0].1);
        assert_eq!(back["r[demo.beta+2]"], proofs[1].1);
    }

    /// A summary written before fingerprints (nine columns) still reads, its proofs
    /// unfingerprinted; a row with one reads it back.
    // i[verify prove.fingerprint]
    #[test]
    fn a_summary_without_the_fingerprint_column_reads_as_unfingerprinted() {
        let old = "| rule | verdict | caught | missed | unviable | timed out | justified | commit | date |\n\
                   |---|---|--:|--:|--:|--:|--:|---|---|\n\
                   | `r[demo.alpha]` | proven | 2 | 0 | 1 | 0 | 0 | 67f9a95 | 2026-12-01 17:28:56 UTC |\n";
        let back = parse(old);
        assert_eq!(back["r[demo.alpha]"].caught, 2);
        assert_eq!(back["r[demo.alpha]"].fingerprint, None);
        assert_eq!(
            back["r[demo.alpha]"].date.as_deref(),
            Some("2026-12-01 17:28:56 UTC")
        );
        let fingerprint = Fingerprint {
            text: "aaaaaaaaaaaa".into(),
            impls: "bbbbbbbbbbbb".into(),
            verifies: "cccccccccccc".into(),
        };
        let text = render(&[(
            "r[demo.alpha]".to_owned(),
            Proof {
                caught: 1,
                fingerprint: Some(fingerprint.clone()),
                ..Proof::default()
            },
        )]);
        assert!(
            text.contains("| aaaaaaaaaaaa/bbbbbbbbbbbb/cccccccccccc |"),
            "{text}"
        );
        assert_eq!(parse(&text)["r[demo.alpha]"].fingerprint, Some(fingerprint));
        // Only a cell that is neither `-` nor a fingerprint is malformed.
        assert!(!parse(&text)["r[demo.alpha]"].fingerprint_malformed);
        let dash = text.replace("aaaaaaaaaaaa/bbbbbbbbbbbb/cccccccccccc", "-");
        assert!(!parse(&dash)["r[demo.alpha]"].fingerprint_malformed);
        let upper = text.replace("aaaaaaaaaaaa", "AAAAAAAAAAAA");
        assert!(parse(&upper)["r[demo.alpha]"].fingerprint_malformed);
        // A cell that is no fingerprint is none, not an error.
        assert_eq!(Fingerprint::parse("-"), None);
        assert_eq!(Fingerprint::parse("a/b"), None);
        assert_eq!(Fingerprint::parse("a/b/c/d"), None);
        assert_eq!(Fingerprint::parse("a/b/xyz"), None);
    }

    // i[verify prove.summary]
    #[test]
    fn survivors_are_listed_for_rules_with_missed_or_justified_mutants_only() {
        let proven = |caught| Proof {
            caught,
            ..Proof::default()
        };
        let none = render(&[("r[a]".to_owned(), proven(1))]);
        assert!(!none.contains("## Survivors"), "{none}");
        let missed = Proof {
            missed: 1,
            survivors: vec!["a.rs:1:1: replace f with ()".into()],
            ..proven(1)
        };
        let justified = Proof {
            justified: vec!["b.rs:2:2: replace g with () — why".into()],
            ..proven(1)
        };
        for (marker, proof) in [("r[m]", missed), ("r[j]", justified)] {
            let text = render(&[("r[a]".to_owned(), proven(1)), (marker.to_owned(), proof)]);
            let listed = text.split_once("\n## Survivors\n\n").map(|(_, l)| l);
            assert!(
                listed.is_some_and(
                    |l| l.lines().count() == 1 && l.starts_with(&format!("- `{marker}`"))
                ),
                "{text}"
            );
        }
    }
}
