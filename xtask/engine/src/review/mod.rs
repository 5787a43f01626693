//! A change's spec review: what a change did to the rules, their code, their tests and their
//! coverage, from the tree read at a base revision and the tree read now ([`compare`]).
//!
//! Both sides are read and checked by [`crate::spec_check`] exactly as the gate reads and checks
//! one tree; this module only compares what was read, so it is a pure function of two read trees
//! (in memory in the tests, the disk and a git revision in `cargo xtask spec-check --base`).
//!
//! - Rules are matched by spec marker prefix and base id (`r[a.b]` and `r[a.b+2]` are one rule).
//!   A rule whose text says `(was OLD.ID)` and whose base had `OLD.ID` (and no longer has it) was
//!   renamed. A kept rule whose text changed at the same version is a problem.
//! - Each `impl`/`verify` annotation stands for the innermost item holding it ([`items`]), known
//!   by kind and name; an item is compared by its text normalised (whitespace and comments do not
//!   count); each rule whose items changed says whether its recorded proof still matches the
//!   head ([`proof_state`], the gate's fingerprint comparison).
//! - Coverage counts per spec/impl row, before and after; a rule kept by the change that loses
//!   its implementation, verification or proof is a problem.

pub use crate::spec_check::items;
pub mod proof_state;
mod render;

use crate::spec_check::levels::{Level, Measure};
use crate::spec_check::measures::Has;
use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::model::tree::Tree;
use crate::spec_check::Tree as ReadTree;
use crate::spec_check::coverage::Site;
use crate::spec_check::report::Outcome;
use crate::spec_check::rules::Rule;

pub use crate::spec_check::rule_text::rule_text;
pub use proof_state::ProofState;
pub use render::render;

/// One side of the comparison: a tree, what [`crate::spec_check::read`] read of it, and what the
/// gate's checks made of it.
#[derive(Clone, Copy)]
pub struct Side<'a> {
    /// The tree itself (rule texts and proofs are read from it).
    pub source: &'a dyn Tree,
    /// Its rules, references and scanned files.
    pub tree: &'a ReadTree,
    /// The gate's outcome on it (the coverage rows).
    pub outcome: &'a Outcome,
}

/// What a change did, from `base` to `head`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Review {
    /// What the base is (a revision as given), for the title.
    pub base: String,
    /// Rules only the head defines (and no renamed one).
    pub added: Vec<RuleAt>,
    /// Rules only the base defined (and no rule names as its previous id).
    pub removed: Vec<RuleAt>,
    /// Rules whose text names their previous id, and that id.
    pub renamed: Vec<Renamed>,
    /// Rules whose version went up (their text may have changed).
    pub bumped: Vec<Renamed>,
    /// Rules whose text changed at the same version: a problem.
    pub unbumped: Vec<RuleAt>,
    /// Rules whose level changed (`level=`, `tags=informative`): what the gate demands of them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub levelled: Vec<Levelled>,
    /// Rules whose implementing or verifying items changed, and which side.
    pub touched: Vec<Touched>,
    /// Annotations added, dropped or moved to another item.
    pub annotations: Vec<Annotation>,
    /// Coverage per spec/impl row, before and after.
    pub coverage: Vec<CoverageRow>,
    /// What fails the review.
    pub problems: Vec<Problem>,
}

impl Review {
    /// Whether the review found nothing that fails it.
    pub fn passes(&self) -> bool {
        self.problems.is_empty()
    }
}

/// A rule and where it is defined (on the side it is named from).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RuleAt {
    /// The marker with its version, e.g. `r[retry.schedule+2]`.
    pub rule: String,
    /// The spec file, root-relative.
    pub file: String,
    /// 1-based line of the marker.
    pub line: usize,
}

/// A rule at the head and the marker it had at the base.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Renamed {
    /// The base's marker.
    pub from: String,
    /// The head's rule.
    pub to: RuleAt,
    /// Whether its text changed (the `(was …)` note aside).
    pub text_changed: bool,
}

/// A rule whose level changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Levelled {
    /// The head's rule.
    pub rule: RuleAt,
    /// The base's level (`must`, `should`, `may`, `informative`).
    pub from: &'static str,
    /// The head's.
    pub to: &'static str,
}

/// Which side of a rule a change touched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Changed {
    /// Only implementing items changed: its tests did not follow.
    ImplOnly,
    /// Only verifying items changed.
    VerifyOnly,
    /// Both.
    Both,
}

/// A rule whose implementing or verifying items changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Touched {
    /// The head's marker.
    pub rule: String,
    /// Which side changed.
    pub changed: Changed,
    /// The implementing items whose text changed, added or dropped (`file: head`).
    pub impl_items: Vec<String>,
    /// The verifying items likewise.
    pub verify_items: Vec<String>,
    /// Whether its recorded proof still matches the head.
    pub proof: ProofState,
}

/// What happened to one annotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fate {
    /// Only the head has it.
    Added,
    /// Only the base had it.
    Dropped,
    /// The same item carries it in another file, or another item of the same rule does.
    Moved,
}

/// One annotation added, dropped or moved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Annotation {
    /// The rule's marker (the head's when it has one).
    pub rule: String,
    /// `impl` or `verify`.
    pub verb: &'static str,
    /// What happened.
    pub fate: Fate,
    /// Where it is now (`file:line`; where it was, when dropped).
    pub at: String,
    /// The item it stands for.
    pub item: String,
    /// Moved: where it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
}

/// The counts of one spec/impl row.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Rules defined.
    pub total: usize,
    /// Rules implemented (as the gate counts).
    pub implemented: usize,
    /// Rules verified.
    pub verified: usize,
    /// Rules with a verifying test that ran and passed (test-backed mode only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tested: Option<usize>,
    /// Rules with a recorded proof that holds.
    pub proven: usize,
}

/// A spec/impl row's counts before and after.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CoverageRow {
    /// The row's name.
    pub name: String,
    /// At the base (none: the row is new).
    pub before: Option<Counts>,
    /// At the head (none: the row is gone).
    pub after: Option<Counts>,
}

/// Kinds of review problems.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// A rule's text changed and its version did not.
    TextChangedWithoutBump,
    /// A rule the change kept lost its implementation, verification, test or proof.
    CoverageDown,
}

impl Kind {
    /// The kind as printed.
    pub fn name(self) -> &'static str {
        match self {
            Kind::TextChangedWithoutBump => "text-changed-without-bump",
            Kind::CoverageDown => "coverage-down",
        }
    }
}

/// A reason the review fails, at a place of the head.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// What kind.
    pub kind: Kind,
    /// The rule.
    pub rule: String,
    /// The spec file, root-relative.
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// What to do about it.
    pub message: String,
    /// For `coverage-down` on a rule: what it lost (`implemented`, `verified`, `proven`), which
    /// a waiver may cover (not printed: the message says it).
    #[serde(skip)]
    pub lost: Vec<&'static str>,
}

/// Compares `base` with `head`; `base_name` names the base in the review.
// i[impl spec-check.review]
pub fn compare(base_name: &str, base: Side<'_>, head: Side<'_>) -> Review {
    let mut review = Review {
        base: base_name.to_owned(),
        ..Review::default()
    };
    let base_rules = rules_by_key(base);
    let head_rules = rules_by_key(head);
    // The head's key → the base's key it continues (itself, or the id its `(was …)` names).
    let mut continues: BTreeMap<String, String> = BTreeMap::new();
    rules_and_texts(&mut review, &base_rules, &head_rules, &mut continues);
    items_and_annotations(&mut review, base, head, &head_rules, &continues);
    coverage(
        &mut review,
        base,
        head,
        &base_rules,
        &head_rules,
        &continues,
    );
    review.problems.sort_by(|a, b| {
        (a.kind, &a.file, a.line, &a.rule).cmp(&(b.kind, &b.file, b.line, &b.rule))
    });
    review
}

/// A rule with its text as read on one side.
struct Read<'a> {
    rule: &'a Rule,
    /// The text, normalised, without its `(was …)` notes.
    text: String,
    /// The ids its `(was …)` notes name.
    was: Vec<String>,
}

/// A rule's key: its prefix and base id (`r:a.b`), the same at every version.
fn key(prefix: &str, base: &str) -> String {
    format!("{prefix}:{base}")
}

fn rules_by_key<'a>(side: Side<'a>) -> BTreeMap<String, Read<'a>> {
    side.tree
        .rules()
        .iter()
        .map(|rule| {
            let (text, was) = rule_text(rule);
            (key(&rule.prefix, &rule.id.base), Read { rule, text, was })
        })
        .collect()
}

fn at(rule: &Rule) -> RuleAt {
    RuleAt {
        rule: rule.marker(),
        file: rule.file.clone(),
        line: rule.line,
    }
}

/// Matches the head's rules with the base's: kept (and bumped, or changed without a bump),
/// renamed, added; what the head no longer continues is removed.
// i[impl spec-check.review.rules+2]
fn rules_and_texts(
    review: &mut Review,
    base: &BTreeMap<String, Read<'_>>,
    head: &BTreeMap<String, Read<'_>>,
    continues: &mut BTreeMap<String, String>,
) {
    let mut claimed: BTreeSet<String> = BTreeSet::new();
    for (k, now) in head {
        if let Some(before) = base.get(k) {
            continues.insert(k.clone(), k.clone());
            claimed.insert(k.clone());
            kept(review, before, now);
        } else if let Some(old_key) = renamed_from(now, base, head, &claimed) {
            let before = &base[&old_key];
            review.renamed.push(Renamed {
                from: before.rule.marker(),
                to: at(now.rule),
                text_changed: now.text != before.text,
            });
            continues.insert(k.clone(), old_key.clone());
            claimed.insert(old_key);
        } else {
            review.added.push(at(now.rule));
        }
    }
    review.removed = base
        .iter()
        .filter(|(k, _)| !claimed.contains(*k))
        .map(|(_, r)| at(r.rule))
        .collect();
}

/// A rule both sides define: its level change, its bump, or its text changed without one.
// i[impl spec-check.review.rules+2]
fn kept(review: &mut Review, before: &Read<'_>, now: &Read<'_>) {
    let (was_level, level) = (Level::of(before.rule), Level::of(now.rule));
    if was_level != level {
        review.levelled.push(Levelled {
            rule: at(now.rule),
            from: was_level.name(),
            to: level.name(),
        });
    }
    let (then, now_version) = (before.rule.id.version, now.rule.id.version);
    // The version to bump to is above both sides'.
    let next = format!(
        "{}[{}+{}]",
        now.rule.prefix,
        now.rule.id.base,
        then.max(now_version) + 1
    );
    if now_version > then {
        review.bumped.push(Renamed {
            from: before.rule.marker(),
            to: at(now.rule),
            text_changed: now.text != before.text,
        });
    } else if now_version < then || now.text != before.text {
        let message = if now_version < then {
            format!(
                "the version of {} went down from {}: make it {next} and update its references",
                now.rule.marker(),
                before.rule.marker()
            )
        } else {
            format!(
                "the text of {} changed but its version did not: make it {next} and update its \
                 references, or restore the text",
                now.rule.marker()
            )
        };
        review.unbumped.push(at(now.rule));
        review.problems.push(Problem {
            kind: Kind::TextChangedWithoutBump,
            rule: now.rule.marker(),
            file: now.rule.file.clone(),
            line: now.rule.line,
            message,
            lost: Vec::new(),
        });
    }
}

/// The base's key a head rule the base did not define continues: the first id its `(was …)`
/// notes name that the base had, the head no longer has, and no other head rule already
/// continues (`claimed`).
// i[impl spec-check.review.rename]
fn renamed_from(
    now: &Read<'_>,
    base: &BTreeMap<String, Read<'_>>,
    head: &BTreeMap<String, Read<'_>>,
    claimed: &BTreeSet<String>,
) -> Option<String> {
    now.was.iter().find_map(|old| {
        let id = tracey_core::parse_rule_id(old)?;
        let old_key = key(&now.rule.prefix, &id.base);
        (base.contains_key(&old_key) && !head.contains_key(&old_key) && !claimed.contains(&old_key))
            .then_some(old_key)
    })
}

/// One annotation as read on one side.
#[derive(Debug, Clone)]
struct Seen {
    verb: &'static str,
    file: String,
    line: usize,
    item: items::Item,
}

/// The sites of every rule on `side` by rule key, per analysis merged (a file scanned for
/// several impls counts once), gathered in one pass over the analyses rather than one per rule.
fn sites_by_key<'a>(side: Side<'a>) -> BTreeMap<String, Vec<(&'static str, &'a Site)>> {
    let mut seen = BTreeSet::new();
    let mut out: BTreeMap<String, Vec<(&'static str, &'a Site)>> = BTreeMap::new();
    for analysis in side.tree.analyses() {
        for coverage in &analysis.rules {
            let k = key(&coverage.rule.prefix, &coverage.rule.id.base);
            let sites = coverage
                .impl_sites
                .iter()
                .map(|s| ("impl", s))
                .chain(coverage.verify_sites.iter().map(|s| ("verify", s)));
            for (verb, site) in sites {
                if seen.insert((k.clone(), verb, &site.file, site.line)) {
                    out.entry(k.clone()).or_default().push((verb, site));
                }
            }
        }
    }
    out
}

/// Every annotation of the rule `k` among `sites`, with its item read from `side`.
fn annotations_of(
    side: Side<'_>,
    sites: &BTreeMap<String, Vec<(&'static str, &Site)>>,
    k: &str,
) -> Vec<Seen> {
    sites.get(k).map_or_else(Vec::new, |sites| {
        sites
            .iter()
            .map(|&(verb, site)| read_site(side, verb, site))
            .collect()
    })
}

fn read_site(side: Side<'_>, verb: &'static str, site: &Site) -> Seen {
    let file = side.tree.parsed.get(&site.path);
    Seen {
        verb,
        file: site.file.clone(),
        line: site.line,
        item: items::item_at(
            &site.path,
            file.map_or("", |f| f.content.as_str()),
            file.and_then(|f| f.layout.as_ref()),
            site.line,
        ),
    }
}

// i[impl spec-check.review.items+2]
// i[impl spec-check.review.annotations]
fn items_and_annotations(
    review: &mut Review,
    base: Side<'_>,
    head: Side<'_>,
    head_rules: &BTreeMap<String, Read<'_>>,
    continues: &BTreeMap<String, String>,
) {
    // Only rules on both sides (kept, bumped, renamed) are compared item by item: an added or
    // removed rule's annotations come and go with it, and its addition or removal says so.
    let (base_sites, head_sites) = (sites_by_key(base), sites_by_key(head));
    for (head_key, read) in head_rules {
        let Some(base_key) = continues.get(head_key) else {
            continue;
        };
        let marker = read.rule.marker();
        let before = annotations_of(base, &base_sites, base_key);
        let after = annotations_of(head, &head_sites, head_key);
        let mut changed = BTreeMap::from([("impl", Vec::new()), ("verify", Vec::new())]);
        let mut left_before: Vec<&Seen> = Vec::new();
        let mut left_after: Vec<&Seen> = after.iter().collect();
        // Same verb, file and item: the same annotation; its item's text may have changed.
        for old in &before {
            let found = left_after.iter().position(|new| {
                new.verb == old.verb && new.file == old.file && new.item.head == old.item.head
            });
            match found {
                Some(index) => {
                    let new = left_after.remove(index);
                    if new.item.text != old.item.text {
                        changed
                            .entry(new.verb)
                            .or_default()
                            .push(format!("{}: {}", new.file, new.item.head));
                    }
                }
                None => left_before.push(old),
            }
        }
        // Same verb and item elsewhere, or same verb in the same file on another item: moved.
        let mut moved = Vec::new();
        left_before.retain(|old| {
            let found = left_after
                .iter()
                .position(|new| new.verb == old.verb && new.item.head == old.item.head)
                .or_else(|| {
                    left_after
                        .iter()
                        .position(|new| new.verb == old.verb && new.file == old.file)
                });
            match found {
                Some(index) => {
                    let new = left_after.remove(index);
                    // A move is a change of its side, whether or not the item's text changed.
                    changed
                        .entry(new.verb)
                        .or_default()
                        .push(format!("{}: {}", new.file, new.item.head));
                    moved.push(Annotation {
                        rule: marker.clone(),
                        verb: new.verb,
                        fate: Fate::Moved,
                        at: format!("{}:{}", new.file, new.line),
                        item: new.item.head.clone(),
                        from: Some(format!("{}:{} ({})", old.file, old.line, old.item.head)),
                    });
                    false
                }
                None => true,
            }
        });
        for (fate, sites) in [(Fate::Dropped, left_before), (Fate::Added, left_after)] {
            for site in sites {
                changed
                    .entry(site.verb)
                    .or_default()
                    .push(format!("{}: {}", site.file, site.item.head));
                review.annotations.push(Annotation {
                    rule: marker.clone(),
                    verb: site.verb,
                    fate,
                    at: format!("{}:{}", site.file, site.line),
                    item: site.item.head.clone(),
                    from: None,
                });
            }
        }
        review.annotations.extend(moved);
        let impl_items = changed.remove("impl").unwrap_or_default();
        let verify_items = changed.remove("verify").unwrap_or_default();
        let side = match (impl_items.is_empty(), verify_items.is_empty()) {
            (true, true) => continue,
            (false, true) => Changed::ImplOnly,
            (true, false) => Changed::VerifyOnly,
            (false, false) => Changed::Both,
        };
        review.touched.push(Touched {
            rule: marker,
            changed: side,
            impl_items,
            verify_items,
            proof: proof_state::of(head, read.rule),
        });
    }
}

/// Per rule of one row: what it has (the same measures the ratchet reads).
type Flags = BTreeMap<String, Has>;

fn row_counts(side: Side<'_>) -> BTreeMap<String, (Counts, Flags)> {
    let mut rows = BTreeMap::new();
    for row in crate::spec_check::measures::rows(side.source, side.tree, side.outcome) {
        let flags: Flags = row
            .rules
            .iter()
            .map(|(coverage, has)| (key(&coverage.rule.prefix, &coverage.rule.id.base), *has))
            .collect();
        let proven = row.rules.iter().filter(|(_, has)| has.proven).count();
        // The gate's row (with its test-backed count) when the outcome has it.
        let summary = side
            .outcome
            .specs
            .iter()
            .find(|s| s.name == row.name)
            .or_else(|| {
                side.tree
                    .analyses()
                    .iter()
                    .map(|a| &a.summary)
                    .find(|s| s.name == row.name)
            });
        let Some(summary) = summary else {
            continue;
        };
        let counts = Counts {
            total: summary.total,
            implemented: summary.implemented,
            verified: summary.verified,
            tested: summary.tested,
            proven,
        };
        rows.insert(row.name, (counts, flags));
    }
    rows
}

// i[impl spec-check.review.coverage]
fn coverage(
    review: &mut Review,
    base: Side<'_>,
    head: Side<'_>,
    base_rules: &BTreeMap<String, Read<'_>>,
    head_rules: &BTreeMap<String, Read<'_>>,
    continues: &BTreeMap<String, String>,
) {
    let before = row_counts(base);
    let after = row_counts(head);
    let names: BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    for name in names {
        let was = before.get(name);
        let now = after.get(name);
        review.coverage.push(CoverageRow {
            name: name.clone(),
            before: was.map(|(c, _)| *c),
            after: now.map(|(c, _)| *c),
        });
        let (Some((_, was_flags)), Some((_, now_flags))) = (was, now) else {
            continue;
        };
        // A kept rule that lost what it had; a removed rule's loss is its removal, said above.
        for (k, flags) in now_flags {
            let Some(old_key) = continues.get(k) else {
                continue;
            };
            let Some(old) = was_flags.get(old_key) else {
                continue;
            };
            let Some(rule) = head_rules.get(k) else {
                continue;
            };
            let marker = rule.rule.marker();
            let was_marker = base_rules
                .get(old_key)
                .map_or_else(|| marker.clone(), |r| r.rule.marker());
            let level = Level::of(rule.rule);
            let was_level = base_rules.get(old_key).map_or(level, |r| Level::of(r.rule));
            let (lost_measures, lowered) = judged_losses(*old, *flags, was_level, level);
            let lost: Vec<String> = lost_measures
                .iter()
                .map(|what| (*what, what.word()))
                .map(|(what, word)| match what {
                    Measure::Implemented if flags.stale => format!(
                        "{word} (an annotation of it names an older version: make it {marker})"
                    ),
                    Measure::Proven if was_marker != marker => format!(
                        "{word} (its proof was of {was_marker}; a new version or id voids it: \
                         run `cargo xtask prove {}` and `cargo xtask prove --summary`)",
                        rule.rule.id
                    ),
                    _ => word.to_owned(),
                })
                .collect();
            if lost.is_empty() {
                continue;
            }
            // The measures lost, by name, for the waivers that may cover them.
            let lost_measures: Vec<&'static str> =
                lost_measures.iter().map(|what| what.word()).collect();
            review.problems.push(Problem {
                kind: Kind::CoverageDown,
                rule: marker.clone(),
                file: rule.rule.file.clone(),
                line: rule.rule.line,
                message: format!(
                    "{marker} ({name}) was {} at {} and is no longer{lowered}",
                    lost.join(", "),
                    review.base
                ),
                lost: lost_measures,
            });
        }
    }
}

/// The losses the review judges of a kept rule that had `old` at the base and has `now` at the
/// head: only what its level demands, at the base (`was`) or at the head (`level`), so lowering
/// a rule's level in the change excuses no loss; and, when its level changed, the words that say
/// so.
// i[impl spec-check.levels]
fn judged_losses(old: Has, now: Has, was: Level, level: Level) -> (Vec<Measure>, String) {
    let demands = level.demands().or(was.demands());
    let lost = [Measure::Implemented, Measure::Verified, Measure::Proven]
        .into_iter()
        .filter(|&what| old.of(what) && !now.of(what) && demands.of(what))
        .collect();
    let lowered = if was == level {
        String::new()
    } else {
        format!(
            " (its level went from {} to {}, which excuses no loss the change makes)",
            was.name(),
            level.name()
        )
    };
    (lost, lowered)
}

#[cfg(test)]
mod tests;
