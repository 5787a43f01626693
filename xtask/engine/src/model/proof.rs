//! One rule's mutation proof as `cargo xtask prove` records it, and where the last one is found:
//! `target/prove/ID.json`, else the rule's row of `docs/audit/proof.md` ([`super::proof_summary`]).

use super::tree::Tree;

use serde::{Deserialize, Serialize};

use super::proof_summary;

/// What became of one rule's mutants.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Proof {
    /// Mutants the rule's tests caught.
    pub caught: usize,
    /// Mutants that survived them.
    pub missed: usize,
    /// Mutants that did not build.
    pub unviable: usize,
    /// Mutants whose tests timed out (counted as caught by cargo-mutants; listed apart here).
    pub timeout: usize,
    /// Each survivor: `file:line:col: mutation`.
    pub survivors: Vec<String>,
    /// Why the rule could not be proven, when it could not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_provable: Option<String>,
    /// Survivors `docs/audit/survivors.toml` justifies: `file:line:col: mutation — reason`, with
    /// ` (survivors.toml has it at FILE:LINE)` before the reason when the entry's line differs.
    /// They are not counted in `missed`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub justified: Vec<String>,
    /// The commit the proof ran on (`-dirty` when the tree had uncommitted changes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// When the proof ran (UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub date: Option<String>,
    /// What the proof judged, hashed when it ran: none in a record older than fingerprints
    /// ("unfingerprinted": shown and counted, never stale; the rule's next proof writes one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<Fingerprint>,
    /// Set when read against a tree: why the record no longer matches it
    /// (`proof stale: impl changed since 3f2a1b2`). Never written.
    #[serde(skip)]
    pub stale: Option<String>,
    /// Set when read from a summary whose fingerprint cell is neither `-` nor a fingerprint: the
    /// proof reads as unfingerprinted, and the gate's note counts it apart. Never written.
    #[serde(skip)]
    pub fingerprint_malformed: bool,
}

/// Hashes of a rule's evidence when its proof ran: its text, its implementing items and its
/// verifying items, each normalised so that formatting and comments do not count. Each is the
/// first 12 hex digits of a SHA-256.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fingerprint {
    /// The rule's text.
    pub text: String,
    /// Its implementing items.
    #[serde(rename = "impl")]
    pub impls: String,
    /// Its verifying items (its tests).
    #[serde(rename = "verify")]
    pub verifies: String,
}

impl Fingerprint {
    /// `TEXT/IMPL/VERIFY`, as the proof summary's column holds it.
    pub fn render(&self) -> String {
        format!("{}/{}/{}", self.text, self.impls, self.verifies)
    }

    /// Reads [`Fingerprint::render`]'s form back; anything else is none.
    pub fn parse(cell: &str) -> Option<Self> {
        let mut parts = cell.trim().split('/');
        let (text, impls, verifies) = (parts.next()?, parts.next()?, parts.next()?);
        // Exactly what `render` writes: 12 lowercase hex digits each.
        let hex = |part: &str| {
            part.len() == 12 && part.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        };
        (parts.next().is_none() && hex(text) && hex(impls) && hex(verifies)).then(|| Self {
            text: text.to_owned(),
            impls: impls.to_owned(),
            verifies: verifies.to_owned(),
        })
    }

    /// What differs between this (recorded) fingerprint and `now`'s: `text`, `impl`, `tests`.
    pub fn changed(&self, now: &Self) -> Vec<&'static str> {
        [
            (self.text != now.text, "text"),
            (self.impls != now.impls, "impl"),
            (self.verifies != now.verifies, "tests"),
        ]
        .into_iter()
        .filter_map(|(changed, what)| changed.then_some(what))
        .collect()
    }
}

/// A survivor as cargo-mutants and the proofs write it, `file:line:col: mutation`, read as its
/// file, line and mutation (trimmed). The one reader of that form, for the justified survivors and
/// the spec debt alike.
pub fn survivor_at(text: &str) -> Option<(&str, usize, &str)> {
    let (place, mutation) = text.split_once(": ")?;
    let mut parts = place.rsplitn(3, ':');
    let _col = parts.next()?;
    let line = parts.next()?.parse().ok()?;
    let file = parts.next()?;
    Some((file, line, mutation.trim()))
}

impl Proof {
    /// Mutants judged, whatever became of them.
    pub fn tried(&self) -> usize {
        self.caught + self.missed + self.unviable + self.timeout
    }

    /// Proven: at least one viable mutant, and every viable one caught.
    pub fn proven(&self) -> bool {
        self.not_provable.is_none() && self.missed == 0 && self.caught + self.timeout > 0
    }

    /// One line for the terminal.
    pub fn line(&self, rule: &str) -> String {
        if let Some(why) = &self.not_provable {
            return format!("{rule}: not provable — {why}");
        }
        let verdict = if self.proven() {
            "proven"
        } else if self.caught + self.missed + self.timeout == 0 {
            "no viable mutant"
        } else {
            "SURVIVORS"
        };
        let mut line = format!(
            "{rule}: {verdict} — {} caught, {} missed, {} unviable, {} timed out",
            self.caught, self.missed, self.unviable, self.timeout
        );
        if !self.justified.is_empty() {
            line.push_str(&format!(", {} justified", self.justified.len()));
        }
        if let (Some(commit), Some(date)) = (&self.commit, &self.date) {
            line.push_str(&format!(" (at {commit}, {date})"));
        }
        if let Some(stale) = &self.stale {
            line.push_str(&format!("; {stale}"));
        }
        for survivor in &self.survivors {
            line.push_str(&format!("\n    missed: {survivor}"));
        }
        for survivor in &self.justified {
            line.push_str(&format!("\n    justified: {survivor}"));
        }
        line
    }
}

/// The last recorded proof of the rule `id` in the tree, if `prove` ran on this version of it:
/// `target/prove/ID.json`, else the rule's row in the checked-in `docs/audit/proof.md`.
// i[impl prove.shown+2]
pub fn recorded(tree: &dyn Tree, id: &tracey_core::RuleId) -> Option<Proof> {
    let id = id.to_string();
    local(tree, &id).or_else(|| proof_summary::by_id(tree).get(&id).cloned())
}

/// `target/prove/ID.json`, if a proof of that rule version ran here.
pub fn local(tree: &dyn Tree, id: &str) -> Option<Proof> {
    let text = tree
        .read(&tree.root().join("target/prove").join(format!("{id}.json")))
        .ok()?;
    serde_json::from_str(&text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    // i[verify prove.fingerprint]
    #[test]
    fn a_fingerprint_cell_is_three_parts_of_twelve_lowercase_hex_digits() {
        let print = Fingerprint {
            text: "0123456789ab".into(),
            impls: "cdef01234567".into(),
            verifies: "89abcdef0123".into(),
        };
        assert_eq!(Fingerprint::parse(&print.render()), Some(print));
        for bad in [
            "0123456789AB/cdef01234567/89abcdef0123",
            "0123456789a/cdef01234567/89abcdef0123",
            "0123456789ab/cdef01234567",
            "0123456789ab/cdef01234567/89abcdef0123/0123456789ab",
            "",
        ] {
            assert_eq!(Fingerprint::parse(bad), None, "{bad}");
        }
    }

    // i[verify prove.justified+2]
    // i[verify spec-report.debt]
    #[test]
    fn a_survivor_reads_as_file_line_and_mutation() {
        assert_eq!(
            survivor_at("a/b.rs:3:5: replace x with y "),
            Some(("a/b.rs", 3, "replace x with y"))
        );
        assert_eq!(survivor_at("a/b.rs:x:5: replace"), None);
        assert_eq!(survivor_at("nonsense"), None);
    }

    proptest::proptest! {
        /// Any rendered fingerprint reads back; any cell that reads is in rendered form.
        // i[verify prove.fingerprint]
        #[test]
        fn fingerprints_read_back_and_nothing_else_reads(
            parts in proptest::array::uniform3("[0-9a-f]{12}"),
            cell in "\\PC*",
        ) {
            let [text, impls, verifies] = parts;
            let print = Fingerprint { text, impls, verifies };
            proptest::prop_assert_eq!(Fingerprint::parse(&print.render()), Some(print));
            if let Some(read) = Fingerprint::parse(&cell) {
                proptest::prop_assert_eq!(read.render(), cell.trim());
            }
        }

        /// Any survivor written as cargo-mutants writes it reads back; any text is read safely.
        // i[verify prove.justified+2]
        // i[verify spec-report.debt]
        #[test]
        fn survivors_read_back(
            file in "[a-zA-Z0-9_./:-]{1,30}",
            line in 0usize..100_000,
            col in 0usize..500,
            mutation in "[a-zA-Z0-9_>: -]{0,40}",
            text in "\\PC*",
        ) {
            let _ = survivor_at(&text);
            let written = format!("{file}:{line}:{col}: {mutation}");
            proptest::prop_assert_eq!(
                survivor_at(&written),
                Some((file.as_str(), line, mutation.trim()))
            );
        }
    }
}
