//! A rule's text as the review and the evidence fingerprints compare it: whitespace collapsed,
//! its `(was …)` notes apart, and the versions of the rules it references dropped.

use super::rules::Rule;

/// A rule's text (as marq read it, lazy continuation lines included), whitespace collapsed, and
/// the previous ids its `(was ID)` notes name; the notes are not part of the text.
// i[impl spec-check.review.rename]
pub fn rule_text(rule: &Rule) -> (String, Vec<String>) {
    let mut text = rule.text();
    let mut was = Vec::new();
    let mut from = 0;
    while let Some(found) = text[from..].find("(was ") {
        let start = from + found;
        let Some(len) = text[start..].find(')') else {
            break;
        };
        // A note only when every word names a rule id (dotted, as the specs' ids are); any
        // other parenthesis starting with "was" is prose, and part of the text.
        let ids: Option<Vec<String>> = text[start + 5..start + len]
            .split([',', ' '])
            .filter(|s| !s.is_empty())
            .map(|s| {
                // A previous id may be written as a marker, `r[old.id]`, or bare.
                let s = s.split_once('[').map_or(s, |(_, id)| id);
                let s = s.trim_matches(|c| c == ']' || c == '`');
                (s.contains('.') && tracey_core::parse_rule_id(s).is_some()).then(|| s.to_owned())
            })
            .collect();
        match ids {
            Some(ids) if !ids.is_empty() => {
                was.extend(ids);
                text.replace_range(start..start + len + 1, " ");
                from = start;
            }
            _ => from = start + 1,
        }
    }
    let text = unversioned_references(&text.split_whitespace().collect::<Vec<_>>().join(" "));
    (text, was)
}

/// `text` with the version dropped from each rule reference in it (`r[other.rule+2]` read as
/// `r[other.rule]`): a rule that only follows another rule's bump says nothing new.
// i[impl spec-check.review.rules+2]
pub(crate) fn unversioned_references(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find('[') {
        let (before, after) = rest.split_at(open);
        out.push_str(before);
        let prefixed = before
            .chars()
            .next_back()
            .is_some_and(|c| c.is_ascii_lowercase());
        let inner = after[1..].split_once(']').map(|(inner, _)| inner);
        match inner.and_then(|inner| inner.rsplit_once('+').map(|(id, n)| (inner, id, n))) {
            Some((inner, id, n))
                if prefixed
                    && !n.is_empty()
                    && n.bytes().all(|b| b.is_ascii_digit())
                    && id.contains('.')
                    && tracey_core::parse_rule_id(id).is_some() =>
            {
                out.push('[');
                out.push_str(id);
                out.push(']');
                rest = &after[1 + inner.len() + 1..];
            }
            _ => {
                out.push('[');
                rest = &after[1..];
            }
        }
    }
    out.push_str(rest);
    out
}
