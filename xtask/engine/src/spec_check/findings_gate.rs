//! The audit findings inside the gate: `docs/audit/findings.md` must parse, and every rule a
//! finding names must be the spec's rule as written — not an older version, not another prefix, not
//! a near-miss of an existing id. An id no spec defines, that no existing id resembles and whose
//! area (`node` in `r[node.supervise.start]`) has no rule under its prefix yet, is a rule *planned*
//! for a crate not written yet: allowed (the findings file says so), and listed in the output so
//! the allowance is never silent. Once the crate's rules land, the allowance ends by itself.

use crate::model::tree::Tree;

use crate::model::{findings, paths};

use super::problem::{Kind, Problem};
use super::rules::Rule;
use super::suggest;

/// What the findings file adds to the gate.
#[derive(Default)]
pub struct Checked {
    /// Malformed findings and wrongly named rules (each fails the gate).
    pub problems: Vec<Problem>,
    /// Planned ids, as `marker (finding ids)`, in file order.
    pub planned: Vec<String>,
}

/// Checks the tree's findings file against `rules`.
// i[impl spec-check.findings+2]
pub fn check(tree: &dyn Tree, rules: &[Rule]) -> Checked {
    let file = paths::of(tree).findings;
    let text = match tree.read(&tree.root().join(&file)) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Checked::default(),
        Err(err) => {
            return Checked {
                problems: vec![
                    Problem::new(Kind::Findings, format!("cannot read the findings: {err}"))
                        .in_file(&file),
                ],
                planned: Vec::new(),
            };
        }
    };
    let mut checked = Checked::default();
    let parsed = match findings::parse(&text) {
        Ok(parsed) => parsed,
        Err(errors) => {
            checked.problems = errors
                .into_iter()
                .map(|(line, message)| Problem::new(Kind::Findings, message).at(&file, line))
                .collect();
            return checked;
        }
    };
    // The first rule of each base id, as a search of `rules` from the top finds it: hashed, since
    // every finding names a few rules and a large tree has thousands.
    let mut by_base: std::collections::HashMap<&str, &Rule> = std::collections::HashMap::new();
    for rule in rules {
        by_base.entry(rule.id.base.as_str()).or_insert(rule);
    }
    let mut planned: Vec<(String, Vec<String>)> = Vec::new();
    for finding in &parsed {
        for named in &finding.rules {
            let problem = |message: String| {
                Problem::new(
                    Kind::Findings,
                    format!("finding {} names {}: {message}", finding.id, named.marker()),
                )
                .at(&file, finding.closed_by_line)
                .rule(named.marker())
            };
            match by_base.get(named.id.base.as_str()).copied() {
                Some(rule) if rule.prefix != named.prefix => {
                    checked.problems.push(problem(format!(
                        "the spec defines it as {} ({}:{}); write that marker",
                        rule.marker(),
                        rule.file,
                        rule.line
                    )))
                }
                Some(rule) if rule.id != named.id => checked.problems.push(problem(format!(
                    "stale: the spec defines {} ({}:{}); check the finding still holds under the \
                     new text, then write that marker",
                    rule.marker(),
                    rule.file,
                    rule.line
                ))),
                Some(_) => {}
                None => {
                    let similar: Vec<String> =
                        suggest::similar(&named.id, rules.iter().map(|r| &r.id))
                            .into_iter()
                            .filter_map(|id| rules.iter().find(|r| &r.id == id))
                            .map(Rule::marker)
                            .collect();
                    let area = named.id.base.split('.').next().unwrap_or_default();
                    let area_exists = rules.iter().any(|r| {
                        r.prefix == named.prefix && r.id.base.split('.').next() == Some(area)
                    });
                    if similar.is_empty() && area_exists {
                        checked.problems.push(problem(format!(
                            "no spec defines it, yet `{}[{area}.*]` rules exist (its crate is \
                             written, so it is no longer a planned id): define the rule, or name \
                             the rule that closes the finding",
                            named.prefix
                        )));
                    } else if similar.is_empty() {
                        match planned.iter_mut().find(|(m, _)| *m == named.marker()) {
                            Some((_, ids)) => ids.push(finding.id.clone()),
                            None => planned.push((named.marker(), vec![finding.id.clone()])),
                        }
                    } else {
                        checked.problems.push(problem(format!(
                            "no spec defines it (did you mean {}?); a rule planned for a crate \
                             not written yet must not resemble an existing id",
                            similar.join(", ")
                        )));
                    }
                }
            }
        }
    }
    checked.planned = planned
        .into_iter()
        .map(|(marker, ids)| format!("{marker} ({})", ids.join(", ")))
        .collect();
    checked
}
