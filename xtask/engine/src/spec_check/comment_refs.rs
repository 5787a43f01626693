//! The references in one source file's comments, read as tracey-core 1.3.0 reads them, from the
//! comments a parse has already found: [`super::rust_read`] parses a Rust file once for both its
//! references and its code units, where tracey-core's own functions parse it once for each.
//!
//! tracey-core's rules, restated here because its scanner is private to it: each comment node, in
//! the tree's order, first passes the `@tracey:ignore-*` directives; in what is left, a reference
//! is a lowercase-or-digit prefix (not preceded by a word character) then `[`, then either
//! `verb id` (the five verbs) or a bare `id` (an `impl`); an id must parse as a rule id whose base
//! does not end in `.`. Characters inside markdown code (inline spans, fenced blocks) are read
//! through, both within the comment's own text and within a group of consecutive `//`, `///` or
//! `//!` lines of the file read as one markdown text. Every reference in a comment carries the
//! comment's first line. The engine's test `tests/rust_read.rs` holds this to tracey-core's
//! answer on every Rust file of the workspace and of the fixture trees.
//!
//! Markdown is parsed only where it can matter: a comment, or a group of comment lines, without a
//! `[` holds no reference whatever its code spans are, and a text without a backtick or a tilde
//! has no code span or fenced block to read through.

use std::path::Path;

use pulldown_cmark::{CodeBlockKind, Event, Options, Parser, Tag, TagEnd};
use tracey_core::{RefVerb, ReqReference, SourceSpan, parse_rule_id};

/// Collects the references of one file's comments, fed in the tree's order.
pub(super) struct CommentRefs<'a> {
    path: &'a Path,
    source: &'a str,
    /// The file's comment-group code mask, made on the first comment that needs it.
    groups: Option<Vec<bool>>,
    /// `@tracey:ignore-next-line` seen on this line, for the comment on the next.
    ignore_after: Option<usize>,
    /// Between `@tracey:ignore-start` and `@tracey:ignore-end`.
    ignoring: bool,
    refs: Vec<ReqReference>,
}

impl<'a> CommentRefs<'a> {
    pub(super) fn new(path: &'a Path, source: &'a str) -> Self {
        Self {
            path,
            source,
            groups: None,
            ignore_after: None,
            ignoring: false,
            refs: Vec::new(),
        }
    }

    /// The comment spanning `start..end` of the source, which starts on 1-based `line`.
    pub(super) fn comment(&mut self, start: usize, end: usize, line: usize) {
        let Some(text) = self.source.get(start..end) else {
            return;
        };
        if !self.passes_directives(text, line) || !text.contains('[') {
            return;
        }
        let own = code_mask(text);
        let source = self.source;
        let groups = self.groups.get_or_insert_with(|| group_mask(source));
        let in_code = |at: usize| {
            own.get(at).copied().unwrap_or(false)
                || groups.get(start + at).copied().unwrap_or(false)
        };
        for found in scan(text, &in_code) {
            self.refs.push(ReqReference {
                prefix: found.prefix,
                verb: found.verb,
                req_id: found.id,
                file: self.path.to_path_buf(),
                line,
                span: SourceSpan::new(
                    start + found.start,
                    (found.end + 1).saturating_sub(found.start),
                ),
            });
        }
    }

    /// Whether the comment's references count, updating the directives' state: a directive's
    /// own comment never counts, nor one inside an ignored block or on the line after
    /// `ignore-next-line`.
    fn passes_directives(&mut self, text: &str, line: usize) -> bool {
        if text.contains("@tracey:ignore-next-line") {
            self.ignore_after = Some(line);
            return false;
        }
        if text.contains("@tracey:ignore-start") {
            self.ignoring = true;
            return false;
        }
        if text.contains("@tracey:ignore-end") {
            self.ignoring = false;
            return false;
        }
        if self.ignoring {
            return false;
        }
        // Whatever this comment is, the directive applied to it alone.
        !matches!(self.ignore_after.take(), Some(previous) if line == previous.saturating_add(1))
    }

    /// The references found, in the order their comments were fed.
    pub(super) fn finish(self) -> Vec<ReqReference> {
        self.refs
    }
}

/// One reference in a comment's text: byte indices relative to the text, `end` inclusive.
struct Found {
    prefix: String,
    verb: RefVerb,
    id: tracey_core::RuleId,
    start: usize,
    end: usize,
}

/// The references in `text`, skipping the characters `in_code` says are markdown code.
fn scan(text: &str, in_code: &dyn Fn(usize) -> bool) -> Vec<Found> {
    let mut found = Vec::new();
    let mut chars = text.char_indices().peekable();
    let mut previous: Option<char> = None;
    while let Some((start, ch)) = chars.next() {
        if in_code(start) {
            previous = Some(ch);
            continue;
        }
        if !(ch.is_ascii_lowercase() || ch.is_ascii_digit()) {
            previous = Some(ch);
            continue;
        }
        if previous.is_some_and(|p| p.is_ascii_alphanumeric() || p == '_') {
            previous = Some(ch);
            continue;
        }
        let mut prefix = String::from(ch);
        while let Some(&(_, next)) = chars.peek() {
            if next.is_ascii_lowercase() || next.is_ascii_digit() {
                prefix.push(next);
                chars.next();
            } else {
                break;
            }
        }
        // A word not followed by `[` is read past, and leaves what came before it as the
        // previous character.
        if chars.next_if(|&(_, c)| c == '[').is_none() {
            continue;
        }
        if let Some(Bracket::Reference { verb, id, end }) = bracket(&mut chars) {
            found.push(Found {
                prefix,
                verb,
                id,
                start,
                end,
            });
        }
        previous = Some(']');
    }
    found
}

/// What follows a prefix's `[`.
enum Bracket {
    Reference {
        verb: RefVerb,
        id: tracey_core::RuleId,
        /// The index of the last character read, inclusive.
        end: usize,
    },
    /// A bracket that looked like a reference but whose id is not one (tracey warns of it).
    Malformed,
}

/// Reads `verb id]` or `id]` after a `[`; `None` (leaving the offending character unread) when
/// the text is no reference at all.
fn bracket(chars: &mut std::iter::Peekable<std::str::CharIndices<'_>>) -> Option<Bracket> {
    let (_, first) = chars.next_if(|&(_, c)| c.is_ascii_lowercase())?;
    let mut word = String::from(first);
    let mut end = 0;
    while let Some(&(at, c)) = chars.peek() {
        end = at;
        if c == ']' || c == ' ' {
            break;
        }
        if !(c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '.' | '+')) {
            return None;
        }
        word.push(c);
        chars.next();
    }
    match chars.peek().map(|&(_, c)| c) {
        Some(' ') => {
            let verb = RefVerb::parse(&word)?;
            chars.next();
            let mut id = String::new();
            if let Some(&(_, c)) = chars.peek() {
                if !c.is_ascii_lowercase() {
                    return None;
                }
                id.push(c);
                chars.next();
            }
            while let Some(&(at, c)) = chars.peek() {
                end = at;
                if c == ']' {
                    chars.next();
                    break;
                }
                if !(c.is_ascii_lowercase()
                    || c.is_ascii_digit()
                    || matches!(c, '-' | '_' | '+' | '.'))
                {
                    return None;
                }
                id.push(c);
                chars.next();
            }
            Some(match rule_id(&id) {
                Some(id) => Bracket::Reference { verb, id, end },
                None => Bracket::Malformed,
            })
        }
        Some(']') => {
            chars.next();
            Some(match rule_id(&word) {
                Some(id) => Bracket::Reference {
                    verb: RefVerb::Impl,
                    id,
                    end,
                },
                None => Bracket::Malformed,
            })
        }
        _ => None,
    }
}

/// `id` as a rule id a reference may name: one that parses, its base not ending in `.`.
fn rule_id(id: &str) -> Option<tracey_core::RuleId> {
    parse_rule_id(id).filter(|parsed| !parsed.base.ends_with('.'))
}

/// Which bytes of `text` are markdown code, read with its common indentation removed: inline code
/// spans and fenced code blocks (an indented block is not code here). Empty when no byte is: a
/// code span needs a backtick and a fence backticks or tildes, so a text with neither is not
/// parsed.
fn code_mask(text: &str) -> Vec<bool> {
    if !text.contains(['`', '~']) {
        return Vec::new();
    }
    markdown_code(text)
}

/// [`code_mask`] by pulldown-cmark's reading of `text`, a byte per byte of it.
fn markdown_code(text: &str) -> Vec<bool> {
    let indent = text
        .split_inclusive('\n')
        .filter_map(|line| {
            let line = line.strip_suffix('\n').unwrap_or(line);
            (!line.trim().is_empty()).then(|| {
                line.bytes()
                    .take_while(|b| matches!(b, b' ' | b'\t'))
                    .count()
            })
        })
        .min()
        .unwrap_or(0);
    // The dedented text, and for each of its bytes the byte of `text` it came from.
    let mut dedented = String::with_capacity(text.len());
    let mut origin = Vec::with_capacity(text.len());
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        let cut = line
            .bytes()
            .take(indent)
            .take_while(|b| matches!(b, b' ' | b'\t'))
            .count();
        dedented.push_str(&line[cut..]);
        origin.extend(at + cut..at + line.len());
        at += line.len();
    }
    let mut mask = vec![false; text.len()];
    let mut fenced = false;
    for (event, range) in Parser::new_ext(&dedented, Options::all()).into_offset_iter() {
        let code = match event {
            Event::Code(_) => true,
            Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(_))) => {
                fenced = true;
                true
            }
            Event::Start(Tag::CodeBlock(CodeBlockKind::Indented)) => false,
            Event::End(TagEnd::CodeBlock) => std::mem::replace(&mut fenced, false),
            _ => fenced,
        };
        if code {
            for byte in range.filter_map(|i| origin.get(i)) {
                if let Some(slot) = mask.get_mut(*byte) {
                    *slot = true;
                }
            }
        }
    }
    mask
}

/// The kind of a line's first `//` comment, as the groups tell them apart.
#[derive(Clone, Copy, PartialEq, Eq)]
enum LineKind {
    Inner,
    Outer,
    Plain,
}

/// The first `//` on `line` (by text, wherever it is), its kind and the byte where its text
/// starts past the slashes and one space.
fn line_comment(line: &str) -> Option<(LineKind, usize)> {
    let at = line.find("//")?;
    let comment = &line[at..];
    let (kind, slashes) = if comment.starts_with("//!") {
        (LineKind::Inner, 3)
    } else if comment.starts_with("///") {
        let kind = if comment.starts_with("////") {
            LineKind::Plain
        } else {
            LineKind::Outer
        };
        (kind, 3)
    } else {
        (LineKind::Plain, 2)
    };
    let space = usize::from(comment[slashes..].starts_with(' '));
    Some((kind, at + slashes + space))
}

/// Which bytes of `source` are markdown code within a group of two or more consecutive lines whose
/// first `//` comments are of one kind, each group read as one text of the comments' bodies
/// joined by newlines. Only groups holding a `[` are read: no other can hide a reference. Empty
/// when no byte is code: a source without a backtick or a tilde has no code span or fence.
fn group_mask(source: &str) -> Vec<bool> {
    if !source.contains(['`', '~']) {
        return Vec::new();
    }
    let mut mask = vec![false; source.len()];
    let mut starts = vec![0];
    starts.extend(
        source
            .bytes()
            .enumerate()
            .filter(|&(_, b)| b == b'\n')
            .map(|(i, _)| i + 1),
    );
    let lines: Vec<&str> = source.lines().collect();
    let mut index = 0;
    while index < lines.len() {
        let Some((kind, _)) = line_comment(lines[index]) else {
            index += 1;
            continue;
        };
        let mut next = index + 1;
        while next < lines.len() && line_comment(lines[next]).is_some_and(|(k, _)| k == kind) {
            next += 1;
        }
        if next - index > 1 {
            // Each body's bytes in the source, and the joined text.
            let bodies: Vec<(usize, &str)> = (index..next)
                .filter_map(|k| {
                    let (_, body) = line_comment(lines[k])?;
                    Some((starts.get(k)? + body, &lines[k][body..]))
                })
                .collect();
            if bodies.iter().any(|(_, body)| body.contains('[')) {
                let mut joined = String::new();
                let mut origin: Vec<Option<usize>> = Vec::new();
                for (n, (start, body)) in bodies.iter().enumerate() {
                    if n > 0 {
                        joined.push('\n');
                        origin.push(None);
                    }
                    joined.push_str(body);
                    origin.extend((0..body.len()).map(|i| Some(start + i)));
                }
                for (i, code) in code_mask(&joined).into_iter().enumerate() {
                    if let (true, Some(Some(byte))) = (code, origin.get(i))
                        && let Some(slot) = mask.get_mut(*byte)
                    {
                        *slot = true;
                    }
                }
            }
        }
        index = next;
    }
    mask
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        // What lets a text without a backtick or a tilde skip the markdown parse: markdown finds
        // no code in it, whatever else it holds (brackets, quotes, lists, indented blocks).
        #[test]
        fn markdown_finds_no_code_in_a_text_without_backtick_or_tilde(
            text in "([ a-z0-9\\[\\]>*_#|.()!:<-]|\n|    ){0,80}"
        ) {
            proptest::prop_assert!(!markdown_code(&text).contains(&true), "{text:?}");
            proptest::prop_assert!(code_mask(&text).is_empty());
        }
    }

    // The premise can fail: with a backtick or a fence, markdown finds code, and the mask says so.
    #[test]
    fn a_code_span_or_a_fence_is_masked() {
        for text in ["see `r[impl a.b]` here", "~~~\nr[impl a.b]\n~~~\n"] {
            let mask = code_mask(text);
            let at = text.find("r[").expect("a reference");
            assert_eq!(mask.get(at), Some(&true), "{text:?}");
        }
    }
}
