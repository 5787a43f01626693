//! `docs/audit/survivors.toml` (unless configured, [`spec_engine::model::paths`]): surviving mutants a
//! maintainer has judged harmless, each with its rule, place, mutation and reason. `prove` moves a
//! matching survivor out of `missed` into the proof's `justified` list, so a justified rule is
//! proven and the reason travels with the proof.

use serde::Deserialize;

use spec_engine::model::proof::{Proof, survivor_at};

/// One justified survivor.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Justified {
    /// The rule id, without marker or version (`retry.schedule`).
    pub rule: String,
    /// `file:line` of the mutant when it was judged; the line is for the reader (it moves with
    /// every edit above it), only the file is matched.
    pub at: String,
    /// The mutation as cargo-mutants names it after `file:line:col: ` (`replace < with <= in f`).
    pub mutation: String,
    /// Why no test should catch it.
    pub reason: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    survivor: Vec<Justified>,
}

/// Reads the tree's justified survivors (none when the file does not exist).
pub fn load(tree: &dyn spec_engine::Tree) -> Result<Vec<Justified>, String> {
    let file = spec_engine::model::paths::of(tree).survivors;
    let text = match tree.read(&tree.root().join(&file)) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(err) => return Err(format!("reading {file}: {err}")),
    };
    let list: File = toml::from_str(&text).map_err(|err| format!("{file}: {err}"))?;
    for entry in &list.survivor {
        if entry.reason.trim().is_empty() {
            return Err(format!(
                "{file}: the survivor `{}` of `{}` has no reason",
                entry.mutation, entry.rule
            ));
        }
    }
    Ok(list.survivor)
}

/// What a justified survivor is recorded as: cargo-mutants' place and mutation, the entry's `at`
/// when the line has moved from it, and the reason.
// i[impl prove.justified+2]
fn record(survivor: &str, line: &str, entry: &Justified) -> String {
    let reason = entry.reason.trim();
    match entry.at.split_once(':') {
        Some((_, at_line)) if at_line.trim() == line => format!("{survivor} — {reason}"),
        _ => format!(
            "{survivor} (survivors.toml has it at {}) — {reason}",
            entry.at.trim()
        ),
    }
}

/// Moves the survivors of rule `id` (with or without version) that `list` justifies from
/// `proof.survivors` into `proof.justified`, adjusting `missed`.
// i[impl prove.justified+2]
pub fn apply(proof: &mut Proof, id: &str, list: &[Justified]) {
    let base = id.split('+').next().unwrap_or(id);
    let mut kept = Vec::new();
    for survivor in std::mem::take(&mut proof.survivors) {
        let justified = survivor_at(&survivor).and_then(|(file, line, mutation)| {
            list.iter()
                .find(|j| {
                    j.rule.split('+').next() == Some(base)
                        && j.at.split(':').next() == Some(file)
                        && j.mutation == mutation
                })
                .map(|j| record(&survivor, &line.to_string(), j))
        });
        match justified {
            Some(justified) => {
                proof.missed = proof.missed.saturating_sub(1);
                proof.justified.push(justified);
            }
            None => kept.push(survivor),
        }
    }
    proof.survivors = kept;
}

#[cfg(test)]
mod tests {
    use super::*;

    // i[verify prove.justified+2]
    #[test]
    fn a_justified_survivor_leaves_missed_and_keeps_its_reason() {
        let list: Vec<Justified> = toml::from_str::<File>(
            r#"
[[survivor]]
rule = "demo.alpha"
at = "crates/demo/src/lib.rs:2"
mutation = "replace alpha -> u32 with 1"
reason = "alpha's result is only logged"
"#,
        )
        .expect("parses")
        .survivor;
        let mut proof = Proof {
            caught: 3,
            missed: 2,
            survivors: vec![
                // The line moved since it was judged: still the same mutant.
                "crates/demo/src/lib.rs:7:5: replace alpha -> u32 with 1".to_owned(),
                "crates/demo/src/lib.rs:8:5: replace + with - in alpha".to_owned(),
            ],
            ..Proof::default()
        };
        let unjustified = proof.clone();
        apply(&mut proof, "demo.beta", &list);
        assert_eq!(
            proof, unjustified,
            "another rule's justification does not apply"
        );
        apply(&mut proof, "demo.alpha+2", &list);
        assert_eq!(proof.missed, 1);
        assert_eq!(
            proof.survivors,
            ["crates/demo/src/lib.rs:8:5: replace + with - in alpha"]
        );
        assert_eq!(
            proof.justified,
            [
                "crates/demo/src/lib.rs:7:5: replace alpha -> u32 with 1 (survivors.toml has it at \
                 crates/demo/src/lib.rs:2) — alpha's result is only logged"
            ],
            "cargo-mutants' line is shown, and the entry's `at` it has moved from"
        );
        assert!(!proof.proven(), "one unjustified survivor remains");
        let mut other_file = unjustified.clone();
        other_file.survivors[0] =
            "crates/demo/src/other.rs:7:5: replace alpha -> u32 with 1".into();
        apply(&mut other_file, "demo.alpha", &list);
        assert_eq!(other_file.missed, 2, "the file must match");
        let mut in_place = unjustified.clone();
        in_place.survivors[0] = "crates/demo/src/lib.rs:2:5: replace alpha -> u32 with 1".into();
        apply(&mut in_place, "demo.alpha", &list);
        assert_eq!(
            in_place.justified,
            [
                "crates/demo/src/lib.rs:2:5: replace alpha -> u32 with 1 — alpha's result is only logged"
            ],
            "an `at` that still holds is not repeated"
        );
    }

    #[test]
    fn a_survivor_without_reason_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("docs/audit")).expect("mkdir");
        std::fs::write(
            dir.path()
                .join(spec_engine::model::paths::DEFAULT_SURVIVORS),
            "[[survivor]]\nrule = \"a.b\"\nat = \"x.rs:1\"\nmutation = \"m\"\nreason = \" \"\n",
        )
        .expect("write");
        assert!(load(&spec_engine::Disk::new(dir.path())).is_err());
        std::fs::remove_file(
            dir.path()
                .join(spec_engine::model::paths::DEFAULT_SURVIVORS),
        )
        .expect("rm");
        assert_eq!(
            load(&spec_engine::Disk::new(dir.path())),
            Ok(Vec::new()),
            "no file, no justification"
        );
    }
}
