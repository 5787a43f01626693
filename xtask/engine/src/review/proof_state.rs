//! Whether a touched rule's recorded proof still matches the head: the gate's fingerprint
//! judgement ([`fingerprint::judged`]) of the head's recorded proof, so the review and the
//! gate's note never disagree. Shown, never judged.

use serde::Serialize;

use super::Side;
use crate::spec_check::fingerprint::{self, Freshness};
use crate::spec_check::rules::Rule;

/// What the head's recorded proof of a rule says of the head.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum ProofState {
    /// Its fingerprint matches the head.
    Fresh,
    /// Its fingerprint no longer matches.
    Stale {
        /// The parts that changed since it ran (`text`, `impl`, `tests`).
        changed: Vec<&'static str>,
        /// The gate's words for it: `proof stale: impl changed since 3f2a1b2`.
        note: String,
    },
    /// Recorded before fingerprints: it cannot say.
    Unfingerprinted,
    /// No proof of the rule at its head version.
    #[serde(rename = "none")]
    NoneRecorded,
}

impl ProofState {
    /// As the text and the Markdown say it.
    pub fn describe(&self) -> String {
        match self {
            ProofState::Fresh => "proof fresh".to_owned(),
            ProofState::Stale { note, .. } => note.clone(),
            // Recorded before fingerprints, or with a malformed cell (the gate's note says which).
            ProofState::Unfingerprinted => "proof unfingerprinted".to_owned(),
            ProofState::NoneRecorded => "no proof recorded".to_owned(),
        }
    }
}

/// The state of `rule`'s recorded proof on `head` (the proof `trace` and the gate show:
/// `target/prove/`, else the proof summary).
// i[impl spec-check.review.items+2]
pub fn of(head: Side<'_>, rule: &Rule) -> ProofState {
    let Some((proof, freshness)) = fingerprint::judged(head.source, head.tree, rule) else {
        return ProofState::NoneRecorded;
    };
    match freshness {
        Freshness::Fresh => ProofState::Fresh,
        Freshness::Unfingerprinted => ProofState::Unfingerprinted,
        Freshness::Stale(changed) => ProofState::Stale {
            note: fingerprint::stale_message(&proof, &changed),
            changed,
        },
    }
}
