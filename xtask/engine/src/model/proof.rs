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
        let hex = |part: &str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_hexdigit());
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
