//! Extracts a spec's rule definitions from its markdown with marq, the renderer tracey 1.3.0 uses,
//! and checks that no id is defined twice.

use std::collections::BTreeMap;

use tracey_config::SpecConfig;
use tracey_core::{RuleId, parse_rule_id};

use super::block_on::block_on;
use super::problem::{Kind, Problem};
use super::walk::{self, Keep};
use crate::model::tree::Tree;

/// A rule definition in a spec file.
#[derive(Debug, Clone)]
pub struct Rule {
    /// The rule id with its version.
    pub id: RuleId,
    /// The marker prefix, e.g. `r`.
    pub prefix: String,
    /// The spec file, relative to the root.
    pub file: String,
    /// 1-based line of the marker.
    pub line: usize,
    /// The rule's markdown after its marker as marq read it (blockquote `>` prefixes and lazy
    /// continuation lines included): the one source of a rule's text.
    pub raw: String,
    /// The marker's attributes as marq parsed them (`level=`, `tags=`, …): the rule's level
    /// ([`super::levels::Level::of`]).
    pub metadata: marq::ReqMetadata,
}

impl Rule {
    /// The rule as written in a spec, e.g. `r[retry.schedule+2]`.
    pub fn marker(&self) -> String {
        format!("{}[{}]", self.prefix, self.id)
    }

    /// The rule's text lines: [`Rule::raw`] without blockquote `>` prefixes, each trimmed, empty
    /// ones left out.
    pub fn text_lines(&self) -> impl Iterator<Item = &str> {
        self.raw
            .lines()
            .map(|line| {
                let line = line.trim_start();
                // Nested quotes keep their text: every leading `>` goes.
                line.trim_start_matches(|c: char| c == '>' || c.is_whitespace())
            })
            .map(str::trim)
            .filter(|line| !line.is_empty())
    }

    /// The rule's text, whitespace collapsed.
    pub fn text(&self) -> String {
        self.text_lines()
            .flat_map(str::split_whitespace)
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// The rules of one spec and what went wrong reading them.
pub struct Extracted {
    /// Every rule, in file order.
    pub rules: Vec<Rule>,
    /// The spec's single marker prefix, when it has rules.
    pub prefix: Option<String>,
    /// Unparsable files, duplicate ids, mixed prefixes.
    pub problems: Vec<Problem>,
    /// Things worth saying that do not fail the gate.
    pub notes: Vec<String>,
}

/// Reads every markdown file of `spec` and collects its rules; each check on what was read is a
/// function of its own, under the rule it implements.
// i[impl spec-check.spec-parse]
pub fn extract(tree: &dyn Tree, spec: &SpecConfig) -> Extracted {
    let root = tree.root();
    let selection = walk::select(tree, &spec.include, &[], Keep::Markdown);
    let mut problems: Vec<Problem> = include_matches_nothing(spec, &selection.files)
        .into_iter()
        .collect();
    let mut notes: Vec<String> = selection
        .notes
        .into_iter()
        .map(|n| format!("spec `{}`: {n}", spec.name))
        .collect();

    let mut rules: Vec<Rule> = Vec::new();
    let mut unrecognised: Vec<(String, Marker)> = Vec::new();
    let mut merged: Vec<(String, Marker)> = Vec::new();
    // Each file is rendered (marq) and parsed (pulldown-cmark) on its own, on a thread pool; the
    // results are taken in file order.
    let read: Vec<(String, Result<FileRules, Problem>)> =
        super::pool::map(selection.files.iter().collect(), |path| {
            let file = walk::relative(root, path);
            let read = read_file(tree, path, &file, &spec.name);
            (file, read)
        });
    for (file, read) in read {
        let (file_rules, first_lines, later_lines) = match read {
            Ok(read) => read,
            Err(problem) => {
                problems.push(problem);
                continue;
            }
        };
        let in_file = |marker| (file.clone(), marker);
        unrecognised.extend(not_rules(first_lines, &file_rules).map(in_file));
        merged.extend(not_rules(later_lines, &file_rules).map(in_file));
        rules.extend(file_rules);
    }

    problems.extend(duplicate_ids(&rules, &spec.name));
    let rule_prefixes: Vec<&str> = rules.iter().map(|r| r.prefix.as_str()).collect();
    for (file, marker) in &unrecognised {
        if looks_like_rule(marker, &rule_prefixes) {
            problems.push(unrecognised_marker(file, marker, &rules, &spec.name));
        }
    }
    for (file, marker) in &merged {
        if looks_like_rule(marker, &rule_prefixes) {
            problems.push(merged_marker(file, marker, &rules, &spec.name));
        }
    }
    problems.extend(uppercase_ids(&rules, &spec.name));

    let mut prefixes: Vec<&str> = rules.iter().map(|r| r.prefix.as_str()).collect();
    prefixes.sort_unstable();
    prefixes.dedup();
    let prefix = match prefixes.as_slice() {
        [] => {
            notes.push(format!(
                "spec `{}` defines no rules yet (tracey 1.3.0 cannot infer its prefix and refuses \
                 such a spec)",
                spec.name
            ));
            None
        }
        [one] => Some((*one).to_owned()),
        many => {
            problems.push(
                Problem::new(
                    Kind::SpecParse,
                    format!(
                        "spec `{}` mixes marker prefixes ({}); use one prefix per spec",
                        spec.name,
                        many.join(", ")
                    ),
                )
                .spec(&spec.name),
            );
            None
        }
    };
    Extracted {
        rules,
        prefix,
        problems,
        notes,
    }
}

/// A spec file's rules, and its blockquote markers that open a quote and that do not.
type FileRules = (Vec<Rule>, Vec<Marker>, Vec<Marker>);

/// Reads the spec file at `path` (`file` from the root) of the spec `spec`: its rules and markers,
/// or the problem that it cannot be read or parsed.
fn read_file(
    tree: &dyn Tree,
    path: &std::path::Path,
    file: &str,
    spec: &str,
) -> Result<FileRules, Problem> {
    let text = tree.read(path).map_err(|err| {
        Problem::new(Kind::SpecParse, format!("cannot read the spec file: {err}"))
            .in_file(file)
            .spec(spec)
    })?;
    let file_rules = rules_of_file(&text, file).map_err(|err| {
        Problem::new(
            Kind::SpecParse,
            format!("cannot parse the spec file: {err}"),
        )
        .in_file(file)
        .spec(spec)
    })?;
    let (first_lines, later_lines) = blockquote_markers(&text);
    Ok((file_rules, first_lines, later_lines))
}

/// The `config` problem of a spec whose `include` globs match no markdown file.
// i[impl spec-check.config]
fn include_matches_nothing(
    spec: &SpecConfig,
    files: &std::collections::BTreeSet<std::path::PathBuf>,
) -> Option<Problem> {
    // A spec without `include` is reported by the config check; only a non-empty one is judged here.
    (files.is_empty() && !spec.include.is_empty()).then(|| {
        Problem::new(
            Kind::Config,
            format!(
                "spec `{}`: include ({}) matches no markdown file",
                spec.name,
                spec.include.join(" ")
            ),
        )
        .in_file(super::config::CONFIG_PATH)
        .spec(&spec.name)
    })
}

/// The rules marq (as tracey 1.3.0) reads from one spec file, in file order.
///
/// marq 2.0.0 never reports a repeated or invalid marker as an error: it renders such a blockquote
/// as plain text, so those are found by comparing [`blockquote_markers`] with what it returns.
// i[impl spec-check.spec-parse]
fn rules_of_file(text: &str, file: &str) -> Result<Vec<Rule>, marq::Error> {
    let doc = block_on(marq::render(text, &marq::RenderOptions::default()))?;
    Ok(doc
        .reqs
        .into_iter()
        .filter_map(|def| {
            let id = parse_rule_id(&def.id.to_string())?;
            Some(Rule {
                id,
                prefix: marker_prefix(text, def.marker_span.offset).unwrap_or_default(),
                file: file.to_owned(),
                line: def.line,
                raw: with_marker_line(text, &def),
                metadata: def.metadata,
            })
        })
        .collect())
}

/// marq's raw text of a rule, with what follows the marker on its own line: marq leaves that
/// out of a blockquote rule's `raw` (it starts at the next line), though it is the rule's text
/// (`> r[a.b] Text.`); a paragraph rule's `raw` already starts with it.
fn with_marker_line(text: &str, def: &marq::ReqDefinition) -> String {
    let marker_end = def.marker_span.offset + def.marker_span.length;
    let line_start = text[..def.marker_span.offset.min(text.len())]
        .rfind('\n')
        .map_or(0, |i| i + 1);
    let quoted = text[line_start..].trim_start().starts_with('>');
    let rest = text
        .get(marker_end..)
        .and_then(|after| after.lines().next())
        .map_or("", str::trim);
    if quoted && !rest.is_empty() {
        format!("{rest}\n{}", def.raw)
    } else {
        def.raw.clone()
    }
}

/// The markers of `markers` at no rule's line: markers that define nothing.
// i[impl spec-check.duplicate]
// i[impl spec-check.merged-rule]
// i[impl spec-check.spec-parse]
fn not_rules(markers: Vec<Marker>, rules: &[Rule]) -> impl Iterator<Item = Marker> + '_ {
    // A set of the rules' lines: one file's markers against its rules, not each against each.
    let lines: std::collections::HashSet<usize> = rules.iter().map(|rule| rule.line).collect();
    markers
        .into_iter()
        .filter(move |marker| !lines.contains(&marker.line))
}

/// Whether a marker that defines nothing was meant as a rule: it uses a prefix the spec's rules
/// use, or (in a spec with no rule) its id has a dot. Other bracketed words are prose.
// i[impl spec-check.duplicate]
// i[impl spec-check.merged-rule]
// i[impl spec-check.spec-parse]
fn looks_like_rule(marker: &Marker, rule_prefixes: &[&str]) -> bool {
    if rule_prefixes.is_empty() {
        marker.inner.contains('.')
    } else {
        rule_prefixes.contains(&marker.prefix.as_str())
    }
}

/// Across the files of one spec: the same id, or the same base id at two versions, is a duplicate
/// (tracey rejects both), reported at the later definition.
// i[impl spec-check.duplicate]
fn duplicate_ids(rules: &[Rule], spec: &str) -> Vec<Problem> {
    let mut first_by_base: BTreeMap<&str, &Rule> = BTreeMap::new();
    let mut problems = Vec::new();
    for rule in rules {
        match first_by_base.get(rule.id.base.as_str()) {
            Some(first) => problems.push(duplicate(rule, first, spec)),
            None => {
                first_by_base.insert(&rule.id.base, rule);
            }
        }
    }
    problems
}

/// The problem of a blockquote-opening marker that marq rendered as plain text: a repeated id
/// (`duplicate-rule`, naming the first definition) or an invalid marker (`spec-parse`).
// i[impl spec-check.duplicate]
// i[impl spec-check.spec-parse]
fn unrecognised_marker(file: &str, marker: &Marker, rules: &[Rule], spec: &str) -> Problem {
    let id_text = marker.inner.split_whitespace().next().unwrap_or_default();
    let first = parse_rule_id(id_text)
        .and_then(|id| rules.iter().find(|r| r.id.base == id.base).map(|r| (id, r)));
    match first {
        Some((id, first)) => duplicate(
            &Rule {
                id,
                prefix: marker.prefix.clone(),
                file: file.to_owned(),
                line: marker.line,
                raw: String::new(),
                metadata: marq::ReqMetadata::default(),
            },
            first,
            spec,
        ),
        None => Problem::new(
            Kind::SpecParse,
            format!(
                "`{}[{}]` is not a valid rule marker, so no rule is defined here (marq, and so \
                 tracey, render it as plain text); ids are lowercase dot-separated words with \
                 an optional `+N` version, and the only attributes are status=, level=, \
                 since=, until= and tags=",
                marker.prefix, marker.inner
            ),
        )
        .at(file, marker.line)
        .spec(spec),
    }
}

/// The problem of a marker on a later line of a blockquote, naming the rule of the innermost
/// blockquote holding it that defines one (none when no blockquote holding it is a rule).
// i[impl spec-check.merged-rule]
fn merged_marker(file: &str, marker: &Marker, rules: &[Rule], spec: &str) -> Problem {
    let into = marker
        .quote_lines
        .iter()
        .rev()
        .find_map(|&line| rules.iter().find(|r| r.file == file && r.line == line))
        .map_or_else(
            || ", so it defines no rule".to_owned(),
            |r| {
                format!(
                    " ({} at line {}), so it defines no rule and its text joins the rule above",
                    r.marker(),
                    r.line
                )
            },
        );
    Problem::new(
        Kind::MergedRule,
        format!(
            "`{}[{}]` continues the blockquote above{into}; put a blank line (without `>`) \
             before this line",
            marker.prefix, marker.inner
        ),
    )
    .at(file, marker.line)
    .spec(spec)
}

/// A `rule-id` problem for each rule whose id has an uppercase letter, with the id to write.
// i[impl spec-check.rule-id]
fn uppercase_ids(rules: &[Rule], spec: &str) -> Vec<Problem> {
    rules
        .iter()
        .filter(|rule| rule.id.base.chars().any(|c| c.is_ascii_uppercase()))
        .map(|rule| {
            Problem::new(
                Kind::RuleId,
                format!(
                    "rule {} has uppercase letters; ids are lowercase `area.topic` words: write \
                     `{}[{}]` and update its references",
                    rule.marker(),
                    rule.prefix,
                    rule.id.to_string().to_lowercase()
                ),
            )
            .at(&rule.file, rule.line)
            .spec(spec)
            .rule(rule.marker())
        })
        .collect()
}

/// A `duplicate-rule` problem at `rule`, naming `first`, the definition it repeats.
// i[impl spec-check.duplicate]
fn duplicate(rule: &Rule, first: &Rule, spec: &str) -> Problem {
    let what = if rule.id == first.id {
        format!("rule {} is defined twice", rule.marker())
    } else {
        format!(
            "rule {} redefines {} (same id at another version)",
            rule.marker(),
            first.marker()
        )
    };
    Problem::new(
        Kind::DuplicateRule,
        format!("{what}; first defined at {}:{}", first.file, first.line),
    )
    .at(&rule.file, rule.line)
    .spec(spec)
    .rule(rule.marker())
}

/// The prefix of the marker starting at `offset`, e.g. `r` for `r[x.y]`.
fn marker_prefix(text: &str, offset: usize) -> Option<String> {
    let rest = text.get(offset..)?;
    let bracket = rest.find('[')?;
    let prefix = rest[..bracket].trim();
    (!prefix.is_empty()).then(|| prefix.to_owned())
}

/// A `PREFIX[...]` marker in a blockquote.
struct Marker {
    line: usize,
    /// The line of the first paragraph of each blockquote holding the marker, innermost last (a
    /// rule it merges into is defined at one of them: a plain blockquote nested in a rule's is
    /// part of that rule); a blockquote that opens otherwise has none.
    quote_lines: Vec<usize>,
    prefix: String,
    inner: String,
}

/// Every blockquote whose first paragraph starts with `PREFIX[...]`, found with the markdown
/// parser marq uses (so code blocks and inline code are not mistaken for markers); second, every
/// marker that starts a later line of a blockquote, where it merged into the text above it.
fn blockquote_markers(text: &str) -> (Vec<Marker>, Vec<Marker>) {
    use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};
    let options = Options::ENABLE_TABLES
        | Options::ENABLE_FOOTNOTES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_HEADING_ATTRIBUTES
        | Options::ENABLE_YAML_STYLE_METADATA_BLOCKS
        | Options::ENABLE_PLUSES_DELIMITED_METADATA_BLOCKS;
    let mut markers = Vec::new();
    let mut merged = Vec::new();
    let mut quote_opened = false;
    // Byte offset of each line start, so a paragraph's line is a binary search, not a rescan.
    let line_starts: Vec<usize> = std::iter::once(0)
        .chain(text.match_indices('\n').map(|(i, _)| i + 1))
        .collect();
    let line_of = |offset: usize| line_starts.partition_point(|&start| start <= offset);
    // Per open blockquote, innermost last: the line of its first paragraph, if it opens with one.
    let mut quotes: Vec<Option<usize>> = Vec::new();
    for (event, range) in Parser::new_ext(text, options).into_offset_iter() {
        match event {
            Event::Start(Tag::BlockQuote(_)) => {
                quote_opened = true;
                quotes.push(None);
            }
            Event::End(TagEnd::BlockQuote(_)) => {
                quotes.pop();
            }
            Event::Start(Tag::Paragraph) if !quotes.is_empty() => {
                let first_line = text[range.start..].lines().next().unwrap_or_default();
                let line = line_of(range.start);
                let rest = text[range.clone()].lines().enumerate().skip(1);
                let later = if quote_opened {
                    if let Some(quote) = quotes.last_mut() {
                        *quote = Some(line);
                    }
                    if let Some(marker) = parse_marker(first_line) {
                        markers.push(Marker { line, ..marker });
                    }
                    None
                } else {
                    Some((0, first_line))
                };
                quote_opened = false;
                let quote_lines: Vec<usize> = quotes.iter().copied().flatten().collect();
                for (offset, raw) in later.into_iter().chain(rest) {
                    let stripped = raw.trim_start_matches(|c: char| c == '>' || c.is_whitespace());
                    if let Some(marker) = parse_marker(stripped) {
                        merged.push(Marker {
                            line: line + offset,
                            quote_lines: quote_lines.clone(),
                            ..marker
                        });
                    }
                }
            }
            Event::Start(_) => quote_opened = false,
            _ => {}
        }
    }
    (markers, merged)
}

fn parse_marker(line: &str) -> Option<Marker> {
    let bracket = line.find('[')?;
    let prefix = &line[..bracket];
    if prefix.is_empty()
        || !prefix
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
    {
        return None;
    }
    let close = line[bracket..].find(']')?;
    Some(Marker {
        line: 0,
        quote_lines: Vec::new(),
        prefix: prefix.to_owned(),
        inner: line[bracket + 1..bracket + close].to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use tracey_config::SpecConfig;

    use super::{Extracted, extract};

    /// Extracts spec `demo` (include `include`) from a memory tree holding `files`.
    fn extract_from(include: &[&str], files: &[(&str, &str)]) -> Extracted {
        let tree = crate::model::tree::Memory::new(files.iter().copied());
        let spec = SpecConfig {
            name: "demo".into(),
            prefix: None,
            source_url: None,
            include: include.iter().map(|&i| i.to_owned()).collect(),
            impls: Vec::new(),
        };
        extract(&tree, &spec)
    }

    /// The problems of spec `demo` made of `files`, as the gate prints them.
    fn problems(files: &[(&str, &str)]) -> Vec<String> {
        let extracted = extract_from(&["docs/spec/*.md"], files);
        extracted.problems.iter().map(ToString::to_string).collect()
    }

    /// The ids of the rules read, with their places.
    fn rules(files: &[(&str, &str)]) -> Vec<String> {
        let extracted = extract_from(&["docs/spec/*.md"], files);
        extracted
            .rules
            .iter()
            .map(|r| format!("{}:{} {}", r.file, r.line, r.marker()))
            .collect()
    }

    // i[verify spec-check.config]
    #[test]
    fn an_include_matching_no_markdown_is_a_config_problem() {
        let none = extract_from(&["docs/spec/*.md"], &[("docs/spec/notes.txt", "no spec")]);
        let none: Vec<String> = none.problems.iter().map(ToString::to_string).collect();
        assert_eq!(
            none,
            [
                ".config/tracey/config.styx: [config] spec `demo`: include (docs/spec/*.md) matches \
              no markdown file"
            ]
        );
        let found = extract_from(
            &["docs/spec/*.md"],
            &[("docs/spec/a.md", "> r[demo.a]\n> A.\n")],
        );
        assert!(found.problems.is_empty(), "{:?}", found.problems);
        // No include at all is the config check's to report, not a second problem here.
        let empty = extract_from(&[], &[]);
        assert!(empty.problems.is_empty(), "{:?}", empty.problems);
    }

    // Bracketed words with a prefix no rule uses are prose: neither merged rules, nor repeated
    // ids, nor invalid markers.
    // i[verify spec-check.duplicate]
    // i[verify spec-check.merged-rule]
    // i[verify spec-check.spec-parse]
    #[test]
    fn markers_with_a_prefix_no_rule_uses_are_prose() {
        let spec = "\
# Demo

> r[demo.alpha]
> Alpha must hold.
> see[demo.beta] below.

> note[demo.alpha] is prose, and so is note[Not An Id].

> r[demo.beta]
> Beta must hold.
";
        let files = [("docs/spec/demo.md", spec)];
        assert_eq!(problems(&files), Vec::<String>::new());
        assert_eq!(
            rules(&files),
            [
                "docs/spec/demo.md:3 r[demo.alpha]",
                "docs/spec/demo.md:9 r[demo.beta]"
            ]
        );
    }

    // In a spec without any rule there is no prefix to go by: a marker is meant as a rule when
    // its id has a dot.
    // i[verify spec-check.duplicate]
    // i[verify spec-check.merged-rule]
    // i[verify spec-check.spec-parse]
    #[test]
    fn without_rules_a_marker_with_a_dotted_id_is_meant_as_a_rule() {
        let spec = "\
# Demo

> r[demo.alpha status=bogus]
> Alpha.
> r[demo.beta]
> see[nodot]

> note[nodot status=bogus]
> Prose.
";
        assert_eq!(
            problems(&[("docs/spec/demo.md", spec)]),
            [
                "docs/spec/demo.md:3: [spec-parse] `r[demo.alpha status=bogus]` is not a valid \
                 rule marker, so no rule is defined here (marq, and so tracey, render it as plain \
                 text); ids are lowercase dot-separated words with an optional `+N` version, and \
                 the only attributes are status=, level=, since=, until= and tags=",
                "docs/spec/demo.md:5: [merged-rule] `r[demo.beta]` continues the blockquote \
                 above, so it defines no rule; put a blank line (without `>`) before this line",
            ]
        );
    }

    // i[verify spec-check.duplicate]
    #[test]
    fn a_redefinition_in_one_file_names_the_first_definition() {
        let spec = "\
# Demo

> r[demo.alpha]
> Alpha.

> r[demo.beta]
> Beta.

> r[demo.beta+2]
> Beta again.

> r[demo.alpha]
> Alpha again.
";
        assert_eq!(
            problems(&[("docs/spec/demo.md", spec)]),
            [
                "docs/spec/demo.md:9: [duplicate-rule] rule r[demo.beta+2] redefines \
                 r[demo.beta] (same id at another version); first defined at docs/spec/demo.md:6",
                "docs/spec/demo.md:12: [duplicate-rule] rule r[demo.alpha] is defined twice; \
                 first defined at docs/spec/demo.md:3",
            ]
        );
    }

    // i[verify spec-check.duplicate]
    #[test]
    fn a_redefinition_in_another_file_is_reported_at_the_later_one() {
        let files = [
            (
                "docs/spec/a.md",
                "# A\n\n> r[demo.alpha]\n> Alpha.\n\n> r[demo.beta]\n> B.\n",
            ),
            (
                "docs/spec/b.md",
                "# B\n\n> r[demo.gamma]\n> G.\n\n> r[demo.beta+3]\n> B.\n",
            ),
            ("docs/spec/c.md", "# C\n\n> r[demo.alpha]\n> Alpha.\n"),
        ];
        assert_eq!(
            problems(&files),
            [
                "docs/spec/b.md:6: [duplicate-rule] rule r[demo.beta+3] redefines r[demo.beta] \
                 (same id at another version); first defined at docs/spec/a.md:6",
                "docs/spec/c.md:3: [duplicate-rule] rule r[demo.alpha] is defined twice; first \
                 defined at docs/spec/a.md:3",
            ]
        );
    }

    // Each merged marker names the rule of its own blockquote, not the nearest rule above; one in
    // a blockquote that is no rule names none.
    // i[verify spec-check.merged-rule]
    #[test]
    fn a_merged_marker_names_the_rule_of_its_blockquote() {
        let a = "\
# A

> r[demo.alpha]
> Alpha.
> r[demo.gamma]
> Gamma.

> r[demo.beta]
> Beta.
>
> r[demo.delta] Delta.

> Note: a plain quote.
> r[demo.epsilon]
";
        let b = "# B\n\n> r[demo.zeta]\n> Zeta.\n\n> Plain.\n> r[demo.eta]\n";
        let joins = ", so it defines no rule and its text joins the rule above";
        let tail = "; put a blank line (without `>`) before this line";
        assert_eq!(
            problems(&[("docs/spec/a.md", a), ("docs/spec/b.md", b)]),
            [
                format!(
                    "docs/spec/a.md:5: [merged-rule] `r[demo.gamma]` continues the blockquote \
                     above (r[demo.alpha] at line 3){joins}{tail}"
                ),
                format!(
                    "docs/spec/a.md:11: [merged-rule] `r[demo.delta]` continues the blockquote \
                     above (r[demo.beta] at line 8){joins}{tail}"
                ),
                format!(
                    "docs/spec/a.md:14: [merged-rule] `r[demo.epsilon]` continues the blockquote \
                     above, so it defines no rule{tail}"
                ),
                format!(
                    "docs/spec/b.md:7: [merged-rule] `r[demo.eta]` continues the blockquote \
                     above, so it defines no rule{tail}"
                ),
            ]
        );
    }

    // A plain blockquote nested in a rule's blockquote is part of that rule's text (marq appends
    // it to the rule), so a marker merged into it names that rule; a rule nested in a plain
    // blockquote, or in another rule's, is the one named for a marker merged into it.
    // i[verify spec-check.merged-rule]
    #[test]
    fn a_merged_marker_in_a_nested_blockquote_names_the_enclosing_rule() {
        let spec = "\
# Demo

> r[demo.alpha]
> Alpha.
>
> > Note: a nested quote.
> > r[demo.beta]

> Plain.
>
> > r[demo.gamma]
> > Gamma.
> > r[demo.delta]

> r[demo.epsilon]
> Epsilon.
>
> > r[demo.zeta]
> > Zeta.
> > r[demo.eta]
";
        let joins = ", so it defines no rule and its text joins the rule above";
        let tail = "; put a blank line (without `>`) before this line";
        assert_eq!(
            problems(&[("docs/spec/demo.md", spec)]),
            [
                format!(
                    "docs/spec/demo.md:7: [merged-rule] `r[demo.beta]` continues the blockquote \
                     above (r[demo.alpha] at line 3){joins}{tail}"
                ),
                format!(
                    "docs/spec/demo.md:13: [merged-rule] `r[demo.delta]` continues the blockquote \
                     above (r[demo.gamma] at line 11){joins}{tail}"
                ),
                format!(
                    "docs/spec/demo.md:20: [merged-rule] `r[demo.eta]` continues the blockquote \
                     above (r[demo.zeta] at line 18){joins}{tail}"
                ),
            ]
        );
    }

    // i[verify spec-check.rule-id]
    #[test]
    fn only_an_id_with_an_uppercase_letter_is_a_rule_id_problem() {
        let spec =
            "# Demo\n\n> r[demo.alpha]\n> A.\n\n> r[demo.Beta+2]\n> B.\n\n> r[demo.gamma9]\n> G.\n";
        let files = [("docs/spec/demo.md", spec)];
        assert_eq!(
            problems(&files),
            [
                "docs/spec/demo.md:6: [rule-id] rule r[demo.Beta+2] has uppercase letters; ids \
                 are lowercase `area.topic` words: write `r[demo.beta+2]` and update its \
                 references"
            ]
        );
        // It still counts as a rule, as tracey counts it.
        assert_eq!(
            rules(&files),
            [
                "docs/spec/demo.md:3 r[demo.alpha]",
                "docs/spec/demo.md:6 r[demo.Beta+2]",
                "docs/spec/demo.md:9 r[demo.gamma9]"
            ]
        );
    }

    // i[verify spec-check.spec-parse]
    #[test]
    fn a_spec_mixing_prefixes_is_a_spec_parse_problem() {
        let files = [
            ("docs/spec/a.md", "# A\n\n> r[demo.alpha]\n> A.\n"),
            ("docs/spec/b.md", "# B\n\n> x[demo.beta]\n> B.\n"),
        ];
        let extracted = extract_from(&["docs/spec/*.md"], &files);
        let problems: Vec<String> = extracted.problems.iter().map(ToString::to_string).collect();
        assert_eq!(
            problems,
            ["[spec-parse] spec `demo` mixes marker prefixes (r, x); use one prefix per spec"]
        );
        assert_eq!(extracted.prefix, None);
        let one = extract_from(&["docs/spec/a.md"], &files);
        assert_eq!(one.prefix.as_deref(), Some("r"));
        assert!(one.problems.is_empty(), "{:?}", one.problems);
    }

    /// A rule's text is all of it: the marker's own line, the quoted lines, and a line that
    /// continues the blockquote without `>`.
    #[test]
    fn a_rule_text_is_its_marker_line_quoted_lines_and_lazy_continuation() {
        let text = "# S\n\n> r[a.b] Same line.\n> Next line.\nLazy line.\n\nr[a.c] Para text\nmore.\n\nProse.\n";
        let rules = super::rules_of_file(text, "docs/s.md").expect("parsed");
        let texts: Vec<String> = rules.iter().map(super::Rule::text).collect();
        assert_eq!(
            texts,
            ["Same line. Next line. Lazy line.", "Para text more."]
        );
    }
}
