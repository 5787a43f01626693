//! Reads the audit findings (`docs/audit/findings.md` unless configured, [`super::paths`]): one
//! `## Hn: title` section per finding, a description, a `**Closed by:**` paragraph naming rule
//! markers in backticks, and an optional `**Still open:**` paragraph. Any other `##` heading ends a
//! finding's section. A malformed finding is an error naming its line, never a finding quietly
//! dropped.

use tracey_core::{RuleId, parse_rule_id};

/// A rule a finding names, as written there.
#[derive(Debug, Clone)]
pub struct NamedRule {
    /// The marker prefix, e.g. `r`.
    pub prefix: String,
    /// The id with its version.
    pub id: RuleId,
}

impl NamedRule {
    /// The marker as written, e.g. `r[retry.schedule]`.
    pub fn marker(&self) -> String {
        format!("{}[{}]", self.prefix, self.id)
    }
}

/// One audit finding.
#[derive(Debug, Clone)]
pub struct Finding {
    /// Its stable id, e.g. `H3`.
    pub id: String,
    /// The heading's title.
    pub title: String,
    /// 1-based line of its heading.
    pub line: usize,
    /// The defect, in words (paragraphs joined by blank lines, lines unwrapped).
    pub description: String,
    /// The rules that close it, in the order written.
    pub rules: Vec<NamedRule>,
    /// 1-based line of its `**Closed by:**` paragraph.
    pub closed_by_line: usize,
    /// What is not built yet, when the file says so.
    pub still_open: Option<String>,
}

/// Why the findings file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// It cannot be read.
    #[error("{file}: cannot read the findings: {source}")]
    Read {
        /// Its root-relative path.
        file: String,
        /// Why.
        source: std::io::Error,
    },
    /// It does not parse: each error at its 1-based line.
    #[error("the findings file is malformed:\n{}", malformed(file, errors))]
    Malformed {
        /// Its root-relative path.
        file: String,
        /// Each error with its line.
        errors: Vec<(usize, String)>,
    },
}

/// One `FILE:LINE: message` line per error.
fn malformed(file: &str, errors: &[(usize, String)]) -> String {
    errors
        .iter()
        .map(|(line, message)| format!("{file}:{line}: {message}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Reads and parses the tree's findings file (at its configured path, [`super::paths`]).
pub fn load(tree: &dyn super::tree::Tree) -> Result<Vec<Finding>, Error> {
    let file = super::paths::of(tree).findings;
    let text = tree
        .read(&tree.root().join(&file))
        .map_err(|source| Error::Read {
            file: file.clone(),
            source,
        })?;
    parse(&text).map_err(|errors| Error::Malformed { file, errors })
}

const CLOSED_BY: &str = "**Closed by:**";
const STILL_OPEN: &str = "**Still open:**";

/// Parses the findings; every error comes with its 1-based line.
// i[impl trace.findings-file]
pub fn parse(text: &str) -> Result<Vec<Finding>, Vec<(usize, String)>> {
    let mut findings: Vec<Finding> = Vec::new();
    let mut errors = Vec::new();
    // The open finding and its paragraphs (first line number, text).
    let mut current: Option<(Finding, Vec<(usize, String)>)> = None;
    let mut in_fence = false;
    // Whether the last line read was blank, a heading or a fence: the next text line opens a
    // paragraph.
    let mut after_blank = true;

    let close = |current: &mut Option<(Finding, Vec<(usize, String)>)>,
                 findings: &mut Vec<Finding>,
                 errors: &mut Vec<(usize, String)>| {
        if let Some((finding, paragraphs)) = current.take() {
            match finish(finding, &paragraphs) {
                Ok(finding) => findings.push(finding),
                Err(error) => errors.push(error),
            }
        }
    };

    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        if line.trim_start().starts_with("```") {
            // A fence line is neither heading nor text, the closing one included; what follows
            // it opens a paragraph.
            in_fence = !in_fence;
            after_blank = true;
            continue;
        }
        if !in_fence && let Some(heading) = line.strip_prefix("## ") {
            close(&mut current, &mut findings, &mut errors);
            after_blank = true;
            if let Some(finding) = heading_of(heading, number, &mut errors) {
                if findings.iter().any(|f| f.id == finding.id) {
                    errors.push((number, format!("finding {} is defined twice", finding.id)));
                }
                current = Some((finding, Vec::new()));
            }
            continue;
        }
        if in_fence || line.starts_with('#') {
            // Skipped, but a sub-heading ends the paragraph before it, as a fence does.
            after_blank = true;
            continue;
        }
        let Some((_, paragraphs)) = current.as_mut() else {
            continue;
        };
        if line.trim().is_empty() {
            after_blank = true;
            continue;
        }
        // A line after a blank one (or the first) starts a paragraph at its own line number.
        match paragraphs.last_mut() {
            Some((_, paragraph)) if !after_blank => {
                paragraph.push(' ');
                paragraph.push_str(line.trim());
            }
            _ => paragraphs.push((number, line.trim().to_owned())),
        }
        after_blank = false;
    }
    close(&mut current, &mut findings, &mut errors);
    if findings.is_empty() && errors.is_empty() {
        errors.push((1, "no `## Hn: title` finding sections".to_owned()));
    }
    if errors.is_empty() {
        Ok(findings)
    } else {
        Err(errors)
    }
}

/// The finding a `## ` heading opens, if it is one. `## H<digits>: title` is a finding; a heading
/// that starts like one but is not well-formed is an error; any other heading is prose.
fn heading_of(heading: &str, line: usize, errors: &mut Vec<(usize, String)>) -> Option<Finding> {
    let heading = heading.trim();
    let looks_like_finding = heading
        .strip_prefix('H')
        .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()));
    if !looks_like_finding {
        return None;
    }
    let parsed = heading.split_once(':').and_then(|(id, title)| {
        let digits = &id[1..];
        (!digits.is_empty()
            && digits.chars().all(|c| c.is_ascii_digit())
            && !title.trim().is_empty())
        .then(|| (id.to_owned(), title.trim().to_owned()))
    });
    match parsed {
        Some((id, title)) => Some(Finding {
            id,
            title,
            line,
            description: String::new(),
            rules: Vec::new(),
            closed_by_line: line,
            still_open: None,
        }),
        None => {
            errors.push((
                line,
                format!("heading `## {heading}` is not of the form `## H<number>: title`"),
            ));
            None
        }
    }
}

/// Sorts a finding's paragraphs into description, rules and what is still open.
fn finish(
    mut finding: Finding,
    paragraphs: &[(usize, String)],
) -> Result<Finding, (usize, String)> {
    let mut description = Vec::new();
    let mut closed_by = None;
    for (line, paragraph) in paragraphs {
        if let Some(rest) = paragraph.strip_prefix(CLOSED_BY) {
            if closed_by.is_some() {
                return Err((
                    *line,
                    format!("finding {} has two `{CLOSED_BY}` lines", finding.id),
                ));
            }
            closed_by = Some((*line, rest.to_owned()));
        } else if let Some(rest) = paragraph.strip_prefix(STILL_OPEN) {
            finding.still_open = Some(rest.trim().to_owned());
        } else {
            description.push(paragraph.clone());
        }
    }
    let Some((line, closed_by)) = closed_by else {
        return Err((
            finding.line,
            format!(
                "finding {} has no `{CLOSED_BY}` line naming the rules that close it",
                finding.id
            ),
        ));
    };
    finding.rules = named_rules(&closed_by).map_err(|message| (line, message))?;
    finding.closed_by_line = line;
    if finding.rules.is_empty() {
        return Err((
            line,
            format!(
                "finding {}: `{CLOSED_BY}` names no rule (write markers in backticks, e.g. \
                 `r[retry.schedule]`)",
                finding.id
            ),
        ));
    }
    finding.description = description.join("\n\n");
    Ok(finding)
}

/// The markers in backticks, e.g. `` `r[retry.schedule]`, `i[forward.relay.resilience]` ``.
fn named_rules(text: &str) -> Result<Vec<NamedRule>, String> {
    let mut rules: Vec<NamedRule> = Vec::new();
    let mut pieces = text.split('`');
    let _before_first = pieces.next();
    while let Some(inside) = pieces.next() {
        let rule = parse_marker(inside).ok_or_else(|| {
            format!(
                "`{inside}` is not a rule marker (expected `PREFIX[rule.id]` or \
                 `PREFIX[rule.id+N]`)"
            )
        })?;
        if !rules.iter().any(|r| r.marker() == rule.marker()) {
            rules.push(rule);
        }
        let _between = pieces.next();
    }
    Ok(rules)
}

fn parse_marker(text: &str) -> Option<NamedRule> {
    let (prefix, rest) = text.trim().split_once('[')?;
    let inner = rest.strip_suffix(']')?;
    let prefix_ok = !prefix.is_empty()
        && prefix
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    let id_ok = !inner.is_empty()
        && inner
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-+".contains(c));
    if !(prefix_ok && id_ok) {
        return None;
    }
    Some(NamedRule {
        prefix: prefix.to_owned(),
        id: parse_rule_id(inner)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
# Findings

Intro, with a `## H9: not a heading` in code:

```
## H8: inside a fence
```

## H1: First
One line
wrapped.

### A sub-heading is not text

```text
**Closed by:** `r[in.a.fence]`
```

Second paragraph.

**Closed by:** `r[a.b]`, `i[c.d+2]`

**Still open:** the crate.

## How to read this

Prose.

## H2: Second

Text.

**Closed by:**
`r[e.f]`
";

    // i[verify trace.findings-file]
    #[test]
    fn parses_sections_rules_and_what_is_still_open() {
        let findings = parse(TEXT).expect("parses");
        assert_eq!(findings.len(), 2);
        let first = &findings[0];
        assert_eq!((first.id.as_str(), first.title.as_str()), ("H1", "First"));
        assert_eq!(first.line, 9);
        assert_eq!(first.description, "One line wrapped.\n\nSecond paragraph.");
        assert_eq!(first.closed_by_line, 21);
        let markers: Vec<String> = first.rules.iter().map(NamedRule::marker).collect();
        assert_eq!(markers, ["r[a.b]", "i[c.d+2]"]);
        assert_eq!(first.still_open.as_deref(), Some("the crate."));
        assert_eq!(findings[1].rules[0].marker(), "r[e.f]");
        assert_eq!(
            findings[1].closed_by_line, 33,
            "a paragraph starts at its first line"
        );
        assert_eq!(findings[1].still_open, None);
    }

    // i[verify trace.findings-file]
    #[test]
    fn a_sub_heading_or_a_fence_ends_a_paragraph_without_a_blank_line() {
        let text =
            "## H1: T\nfirst\n### Sub\nsecond\n```\ncode\n```\nthird\n\n**Closed by:** `r[a.b]`\n";
        let findings = parse(text).expect("parses");
        assert_eq!(findings[0].description, "first\n\nsecond\n\nthird");
    }

    // i[verify trace.findings-file]
    #[test]
    fn malformed_findings_are_errors_with_lines() {
        let errors = |text: &str| parse(text).expect_err("malformed");
        assert_eq!(
            errors("## H1 no colon\n\n**Closed by:** `r[a.b]`\n")[0].0,
            1,
            "a heading that starts like a finding"
        );
        assert!(
            errors("## H1: T\n\nText.\n")[0]
                .1
                .contains("no `**Closed by:**`")
        );
        assert!(
            errors("## H1: T\n\n**Closed by:** `retry.schedule`\n")[0]
                .1
                .contains("not a rule marker")
        );
        assert!(
            errors("## H1: T\n\n**Closed by:** none\n")[0]
                .1
                .contains("names no rule")
        );
        let twice = "## H1: T\n\n**Closed by:** `r[a.b]`\n\n## H1: U\n\n**Closed by:** `r[a.b]`\n";
        assert_eq!(
            errors(twice)[0],
            (5, "finding H1 is defined twice".to_owned())
        );
        assert!(errors("# Nothing\n")[0].1.contains("no `## Hn: title`"));
    }
}
