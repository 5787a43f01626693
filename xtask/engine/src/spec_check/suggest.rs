//! "Did you mean": the known rule ids closest to a mistyped one, by edit distance.

use tracey_core::RuleId;

/// Up to three known ids within a small edit distance of `wanted`'s base id, closest first.
pub fn similar<'a>(
    wanted: &RuleId,
    known: impl IntoIterator<Item = &'a RuleId>,
) -> Vec<&'a RuleId> {
    let target = wanted.base.as_str();
    // Allow roughly one typo per four characters, and always at least two.
    let limit = (target.chars().count() / 4).max(2);
    let mut scored: Vec<(usize, &RuleId)> = known
        .into_iter()
        .map(|id| (edit_distance(target, &id.base), id))
        .filter(|(distance, _)| *distance <= limit)
        .collect();
    scored.sort_by(|(da, a), (db, b)| da.cmp(db).then_with(|| a.cmp(b)));
    scored.dedup_by(|(_, a), (_, b)| a.base == b.base);
    scored.into_iter().take(3).map(|(_, id)| id).collect()
}

/// Levenshtein distance over characters.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    let mut current = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        current[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != *cb);
            current[j + 1] = substitution.min(previous[j + 1] + 1).min(current[j] + 1);
        }
        std::mem::swap(&mut previous, &mut current);
    }
    previous[b.len()]
}
