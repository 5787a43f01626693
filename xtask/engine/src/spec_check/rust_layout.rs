//! What the gate needs to know about a Rust file beyond its annotations: which lines are
//! `#[cfg(test)]` code, which inline modules enclose a line, and which function a `verify`
//! annotation belongs to. Items are tracey-core's tree-sitter code units (read by
//! [`super::rust_read`] from the parse that also gives the references); attributes are read from
//! the lines each unit starts with.

use std::path::Path;

use serde::{Deserialize, Serialize};
use tracey_core::code_units::{self, CodeUnitKind};

/// An inline module (`mod name { ... }`) and the lines it spans, attributes included.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct InlineModule {
    name: String,
    start: usize,
    end: usize,
}

/// A function item and the lines it spans, leading comments and attributes included.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Function {
    name: String,
    start: usize,
    end: usize,
}

/// The test-relevant structure of one Rust file.
/// Serializable for the read cache ([`super::read_cache`]), without its lines: the file's own text
/// gives them back ([`RustLayout::with_lines`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RustLayout {
    /// Line ranges of items under `#[cfg(test)]`.
    test_ranges: Vec<(usize, usize)>,
    modules: Vec<InlineModule>,
    functions: Vec<Function>,
    /// `#[cfg(test)] mod name;` — child files that are test code as a whole.
    test_child_modules: Vec<String>,
    /// Every named item (function, struct, impl, …) and the lines it spans.
    #[serde(deserialize_with = "items_read_back")]
    items: Vec<Item>,
    #[serde(skip)]
    lines: Lines,
}

/// A file's text and the byte each of its lines starts at: its lines as `str::lines` gives them,
/// without a `String` per line, and a line range's bytes without a scan of the text.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Lines {
    text: String,
    /// 0, then the byte after each `\n`.
    starts: Vec<usize>,
}

impl Lines {
    fn new(text: &str) -> Self {
        let mut starts = vec![0];
        starts.extend(text.match_indices('\n').map(|(at, _)| at + 1));
        Self {
            text: text.to_owned(),
            starts,
        }
    }

    /// How many lines `str::lines` gives: none after a final `\n`.
    fn len(&self) -> usize {
        if self.text.is_empty() {
            0
        } else if self.text.ends_with('\n') {
            self.starts.len() - 1
        } else {
            self.starts.len()
        }
    }

    /// The line at 0-based `index`, as `str::lines` gives it (without its `\n` or `\r\n`).
    fn get(&self, index: usize) -> Option<&str> {
        if index >= self.len() {
            return None;
        }
        let start = self.starts[index];
        match self.starts.get(index + 1) {
            Some(&next) => {
                let line = &self.text[start..next - 1];
                Some(line.strip_suffix('\r').unwrap_or(line))
            }
            None => Some(&self.text[start..]),
        }
    }

    /// The lines at 0-based indices `from..to` (cut to the lines there are).
    fn range(
        &self,
        from: usize,
        to: usize,
    ) -> impl DoubleEndedIterator<Item = &str> + ExactSizeIterator {
        let to = to.min(self.len());
        (from.min(to)..to).map(|index| self.get(index).unwrap_or_default())
    }
}

/// A named item of a Rust file, leading comments and attributes included in its span.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Item {
    /// `fn`, `struct`, `enum`, `trait`, `impl`, `mod`, `const`, `static`, `type` or `macro`.
    pub kind: &'static str,
    /// Its name (for an impl block, the type).
    pub name: String,
    /// First line, 1-based, comments and attributes included.
    pub start: usize,
    /// Last line, 1-based.
    pub end: usize,
}

impl Item {
    /// `fn name`, `impl Type`, …
    pub fn describe(&self) -> String {
        format!("{} {}", self.kind, self.name)
    }
}

/// The function a `verify` annotation is attributed to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttributedFn {
    /// The function's name.
    pub name: String,
    /// A line of the function's item: its `fn NAME` line, or its first line when the annotation
    /// sits in its body.
    pub line: usize,
    /// Inline modules enclosing it in this file, outermost first.
    pub modules: Vec<String>,
    /// Whether it is a test: it carries a test attribute (`#[test]`, `#[tokio::test]`, …) or sits
    /// in a test macro such as `proptest! {`.
    pub is_test: bool,
}

/// The tests of a file or inline module whose head carries a `verify` annotation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestScope {
    /// Inline modules enclosing the scope in this file, outermost first (empty: the whole file).
    pub modules: Vec<String>,
    /// The test functions in it, in source order.
    pub tests: Vec<AttributedFn>,
}

impl RustLayout {
    /// Parses `content` (the file at `path`) with tracey-core's own code-unit parse.
    pub fn parse(path: &Path, content: &str) -> Self {
        Self::from_units(content, code_units::extract_rust(path, content).units)
    }

    /// The layout of `content` from its code units, as tracey-core's code-unit parse gives them
    /// (or [`super::rust_read`]'s one parse).
    pub fn from_units(content: &str, units: Vec<code_units::CodeUnit>) -> Self {
        let mut layout = RustLayout {
            lines: Lines::new(content),
            ..RustLayout::default()
        };
        for unit in units {
            let Some(name) = unit.name.clone() else {
                continue;
            };
            let is_test = layout.cfg_test_attribute(unit.start_line, unit.end_line);
            layout.items.push(Item {
                kind: item_kind(unit.kind),
                name: name.clone(),
                start: unit.start_line,
                end: unit.end_line,
            });
            match unit.kind {
                CodeUnitKind::Module => {
                    let inline = content
                        .get(unit.start_byte..unit.end_byte)
                        .is_some_and(|text| text.trim_end().ends_with('}'));
                    if inline {
                        layout.modules.push(InlineModule {
                            name,
                            start: unit.start_line,
                            end: unit.end_line,
                        });
                    } else if is_test {
                        layout.test_child_modules.push(name);
                    }
                }
                CodeUnitKind::Function => layout.functions.push(Function {
                    name,
                    start: unit.start_line,
                    end: unit.end_line,
                }),
                _ => {}
            }
            if is_test {
                layout.test_ranges.push((unit.start_line, unit.end_line));
            }
        }
        layout.modules.sort_by_key(|m| m.start);
        layout
    }

    /// This layout with the lines of `content`, the file it was parsed from (the read cache
    /// stores a layout without them).
    pub fn with_lines(mut self, content: &str) -> Self {
        self.lines = Lines::new(content);
        self
    }

    /// The bytes of lines `start..=end` (1-based) of the file, through the end of line `end`
    /// (its `\n` included); `None` when the file has no line `start` or `end` comes before it.
    pub fn line_range(&self, start: usize, end: usize) -> Option<std::ops::Range<usize>> {
        let from = *self.lines.starts.get(start.checked_sub(1)?)?;
        end.checked_sub(start)?;
        let to = self
            .lines
            .starts
            .get(end)
            .copied()
            .unwrap_or(self.lines.text.len());
        Some(from..to.max(from))
    }

    /// Whether this layout may have been read from `content`: a text of the same length (a
    /// caller passes a file's layout with that file's text; this only keeps another text from
    /// being cut at this one's lines).
    pub fn fits(&self, content: &str) -> bool {
        self.lines.text.len() == content.len()
    }

    /// Whether `line` lies inside a `#[cfg(test)]` item.
    pub fn in_cfg_test(&self, line: usize) -> bool {
        self.test_ranges
            .iter()
            .any(|&(start, end)| start <= line && line <= end)
    }

    /// The innermost item whose span (comments and attributes included) holds `line`: the item an
    /// annotation on that line belongs to, or the one it sits in.
    pub fn item_at(&self, line: usize) -> Option<&Item> {
        self.items
            .iter()
            .filter(|item| item.start <= line && line <= item.end)
            .min_by_key(|item| item.end - item.start)
    }

    /// Every named item of the file, in source order.
    pub fn items(&self) -> &[Item] {
        &self.items
    }

    /// Modules this file declares as `#[cfg(test)] mod name;` (their files are test code).
    pub fn test_child_modules(&self) -> &[String] {
        &self.test_child_modules
    }

    /// The function the annotation on `line` belongs to: the next `fn NAME` after it, reading
    /// through comments, attributes and macro openers such as `proptest! {`; failing that, the
    /// innermost function whose body contains the line.
    pub fn function_after(&self, line: usize) -> Option<AttributedFn> {
        let (name, fn_line, is_test) = self.next_fn(line).or_else(|| {
            self.enclosing_fn(line).map(|f| {
                let is_test = self.test_attribute_in(f.start, f.end);
                (f.name.clone(), f.start, is_test)
            })
        })?;
        let modules = self
            .modules
            .iter()
            .filter(|m| m.start <= fn_line && fn_line <= m.end)
            .map(|m| m.name.clone())
            .collect();
        Some(AttributedFn {
            name,
            line: fn_line,
            modules,
            is_test,
        })
    }

    /// Whether the attribute lines at the top of the item spanning `start..=end` include a test
    /// attribute, or the item sits inside a test macro.
    fn test_attribute_in(&self, start: usize, end: usize) -> bool {
        let in_test_macro = self.lines.range(0, start.saturating_sub(1)).rev().any(|l| {
            let trimmed = l.trim();
            is_macro_opener(trimmed) && is_test_macro(trimmed)
        });
        in_test_macro
            || self
                .lines
                .range(
                    start.saturating_sub(1),
                    start.saturating_sub(1) + (end + 1 - start.max(1)),
                )
                .map(|l| l.trim())
                .take_while(|t| fn_name(t).is_none() || t.starts_with("#["))
                .any(is_test_attribute)
    }

    fn enclosing_fn(&self, line: usize) -> Option<&Function> {
        self.functions
            .iter()
            .filter(|f| f.start <= line && line <= f.end)
            .min_by_key(|f| f.end - f.start)
    }

    fn next_fn(&self, line: usize) -> Option<(String, usize, bool)> {
        let mut attribute_depth: i32 = 0;
        let mut is_test = false;
        // `line` is 1-based, so index `line` is the line after it.
        for (index, text) in self.lines.range(line, usize::MAX).enumerate() {
            let index = index + line;
            let trimmed = text.trim();
            if attribute_depth > 0 {
                attribute_depth += bracket_balance(trimmed);
                continue;
            }
            if trimmed.is_empty()
                || trimmed.starts_with("//")
                || trimmed.starts_with("/*")
                || trimmed.starts_with('*')
            {
                continue;
            }
            if trimmed.starts_with("#[") || trimmed.starts_with("#![") {
                is_test |= is_test_attribute(trimmed);
                attribute_depth = bracket_balance(trimmed);
                continue;
            }
            if is_macro_opener(trimmed) {
                is_test |= is_test_macro(trimmed);
                continue;
            }
            let name = fn_name(trimmed)?;
            let fn_line = index + 1;
            // A test attribute may sit above the annotation (`#[test]`, then the comment, then
            // the fn): read every attribute of the function's item, not only those below.
            is_test |= self
                .functions
                .iter()
                .filter(|f| f.name == name && f.start <= fn_line && fn_line <= f.end)
                .min_by_key(|f| f.end - f.start)
                .is_some_and(|f| self.attributes_mark_test(f.start, fn_line));
            return Some((name, fn_line, is_test));
        }
        None
    }

    /// Whether the attribute lines from `start` (a function item's first line, comments
    /// included) up to its `fn` line include a test attribute; comments and doc comments between
    /// them are read through.
    // i[impl spec-check.placement.between-attributes]
    fn attributes_mark_test(&self, start: usize, fn_line: usize) -> bool {
        self.lines
            .range(start.saturating_sub(1), fn_line.saturating_sub(1))
            .map(|l| l.trim())
            .any(is_test_attribute)
    }

    /// The tests a `verify` annotation on `line` stands for when it heads a file or an inline
    /// module: only comments, blank lines and inner attributes (`#![..]`) come before it in that
    /// file or module body, and it precedes no function (it is followed by `use` items, other
    /// items, then tests). `None` when the annotation is not at such a head.
    // i[impl spec-check.placement.file-head]
    pub fn scope_headed_at(&self, line: usize) -> Option<TestScope> {
        if line == 0 || self.function_after(line).is_some() {
            return None;
        }
        let innermost = self
            .modules
            .iter()
            .filter(|m| m.start <= line && line <= m.end)
            .min_by_key(|m| m.end - m.start);
        // The annotation's own line too: code before the comment on it is code before it.
        let before = self.lines.range(0, line).enumerate().rev();
        for (index, text) in before {
            let text = if index + 1 == line {
                code_before_comment(text)
            } else {
                text
            };
            let trimmed = text.trim();
            if trimmed.is_empty()
                || trimmed.starts_with("//")
                || trimmed.starts_with("/*")
                || trimmed.starts_with('*')
                || trimmed.starts_with("#![")
            {
                continue;
            }
            // Code before the annotation: it heads only the module this line opens.
            let module =
                innermost.filter(|m| m.start <= index + 1 && is_module_opener(trimmed, &m.name))?;
            return Some(self.scope(module.start, module.end));
        }
        // Nothing but comments above it: the head of the file (a file-level module is never
        // enclosed by an inline one, so the loop above already met its opener if there was one).
        Some(self.scope(1, self.lines.len()))
    }

    /// The tests among the functions within lines `start..=end`, with the modules enclosing the
    /// scope itself.
    fn scope(&self, start: usize, end: usize) -> TestScope {
        let modules_at = |line: usize| -> Vec<String> {
            self.modules
                .iter()
                .filter(|m| m.start <= line && line <= m.end)
                .map(|m| m.name.clone())
                .collect()
        };
        let modules = self
            .modules
            .iter()
            .filter(|m| m.start <= start && end <= m.end)
            .map(|m| m.name.clone())
            .collect();
        let mut found: Vec<(String, usize)> = self
            .functions
            .iter()
            .filter(|f| start <= f.start && f.end <= end)
            .filter_map(|f| {
                let fn_line = self.fn_line(f)?;
                self.attributes_mark_test(f.start, fn_line)
                    .then(|| (f.name.clone(), fn_line))
            })
            .collect();
        // Functions inside `proptest! { .. }` are no code units of their own.
        found.extend(self.macro_tests(start, end));
        found.sort_by_key(|&(_, line)| line);
        found.dedup();
        let tests = found
            .into_iter()
            .map(|(name, line)| AttributedFn {
                name,
                line,
                modules: modules_at(line),
                is_test: true,
            })
            .collect();
        TestScope { modules, tests }
    }

    /// The functions declared inside test macros (`proptest! {`) within lines `start..=end`.
    fn macro_tests(&self, start: usize, end: usize) -> Vec<(String, usize)> {
        let mut found = Vec::new();
        let mut depth: i32 = 0;
        for line in start..=end {
            let Some(text) = self.lines.get(line.saturating_sub(1)) else {
                break;
            };
            let trimmed = text.trim();
            if depth > 0 {
                if !trimmed.starts_with("//") {
                    if let Some(name) = fn_name(trimmed) {
                        found.push((name, line));
                    }
                }
                depth += brace_balance(trimmed);
            } else if is_macro_opener(trimmed) && is_test_macro(trimmed) {
                depth = brace_balance(trimmed);
            }
        }
        found
    }

    /// The line of `function`'s `fn NAME` (after its comments and attributes).
    fn fn_line(&self, function: &Function) -> Option<usize> {
        (function.start..=function.end).find(|&line| {
            self.lines.get(line.saturating_sub(1)).is_some_and(|text| {
                let trimmed = text.trim();
                !trimmed.starts_with("//")
                    && !trimmed.starts_with("#[")
                    && fn_name(trimmed).as_deref() == Some(function.name.as_str())
            })
        })
    }

    /// Whether the attribute lines at the top of an item (lines `start..=end`) include
    /// `#[cfg(test)]` (or a `cfg(all(test, ..))`/`cfg(any(test, ..))`).
    fn cfg_test_attribute(&self, start: usize, end: usize) -> bool {
        let mut depth: i32 = 0;
        for text in self.lines.range(
            start.saturating_sub(1),
            start.saturating_sub(1) + (end + 1 - start.max(1)),
        ) {
            let trimmed = text.trim();
            let is_attribute_line = depth > 0 || trimmed.starts_with("#[");
            if is_attribute_line {
                let squeezed: String = trimmed.chars().filter(|c| !c.is_whitespace()).collect();
                if squeezed.contains("cfg(test)")
                    || squeezed.contains("cfg(all(test")
                    || squeezed.contains("cfg(any(test")
                {
                    return true;
                }
                depth += bracket_balance(trimmed);
                continue;
            }
            if trimmed.is_empty() || trimmed.starts_with("//") {
                continue;
            }
            return false;
        }
        false
    }
}

/// Every kind [`item_kind`] names.
const ITEM_KINDS: [&str; 10] = [
    "fn", "struct", "enum", "trait", "impl", "mod", "const", "static", "type", "macro",
];

/// An [`Item`] as the read cache stores it: its kind as text, since a `&'static str` cannot be
/// read from a buffer.
#[derive(Deserialize)]
struct StoredItem {
    kind: String,
    name: String,
    start: usize,
    end: usize,
}

/// Items read back, each kind one of [`ITEM_KINDS`]; another is an error (the cache entry is then
/// a miss).
fn items_read_back<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<Item>, D::Error> {
    Vec::<StoredItem>::deserialize(deserializer)?
        .into_iter()
        .map(|stored| {
            let kind = ITEM_KINDS
                .into_iter()
                .find(|k| *k == stored.kind)
                .ok_or_else(|| {
                    serde::de::Error::custom(format!("unknown item kind `{}`", stored.kind))
                })?;
            Ok(Item {
                kind,
                name: stored.name,
                start: stored.start,
                end: stored.end,
            })
        })
        .collect()
}

fn item_kind(kind: CodeUnitKind) -> &'static str {
    match kind {
        CodeUnitKind::Function => "fn",
        CodeUnitKind::Struct => "struct",
        CodeUnitKind::Enum => "enum",
        CodeUnitKind::Trait => "trait",
        CodeUnitKind::Impl => "impl",
        CodeUnitKind::Module => "mod",
        CodeUnitKind::Const => "const",
        CodeUnitKind::Static => "static",
        CodeUnitKind::TypeAlias => "type",
        CodeUnitKind::Macro => "macro",
    }
}

fn bracket_balance(text: &str) -> i32 {
    text.chars().fold(0, |depth, c| match c {
        '[' => depth + 1,
        ']' => depth - 1,
        _ => depth,
    })
}

/// Braces opened minus braces closed on a line (a macro body's depth).
fn brace_balance(text: &str) -> i32 {
    text.chars().fold(0, |depth, c| match c {
        '{' => depth + 1,
        '}' => depth - 1,
        _ => depth,
    })
}

/// `name! {` or `name!{` alone on a line (e.g. `proptest! {`), whose body holds the test fns.
fn is_macro_opener(trimmed: &str) -> bool {
    let Some(body) = trimmed.strip_suffix('{') else {
        return false;
    };
    let body = body.trim_end();
    body.strip_suffix('!').is_some_and(|name| {
        !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    })
}

/// `mod NAME {` (with any visibility), the line that opens the inline module `name`.
/// The part of `text` before its first comment (`//` or `/*`); all of it when it has none. A
/// comment marker inside a string literal is taken for one: on a line that also carries an
/// annotation, that only makes the line's code shorter.
fn code_before_comment(text: &str) -> &str {
    let at = [text.find("//"), text.find("/*")]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(text.len());
    &text[..at]
}

fn is_module_opener(trimmed: &str, name: &str) -> bool {
    trimmed.ends_with('{') && {
        let mut words = trimmed.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'));
        words.any(|w| w == "mod") && words.any(|w| w == name)
    }
}

/// `#[test]`, `#[tokio::test]`, `#[tokio::test(start_paused = true)]`, `#[rstest]`,
/// `#[test_case(..)]`, `#[proptest]`, … — an attribute that makes the function a test.
fn is_test_attribute(trimmed: &str) -> bool {
    let Some(inner) = trimmed.strip_prefix("#[") else {
        return false;
    };
    let path: String = inner
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
        .collect();
    let last = path.rsplit("::").next().unwrap_or_default();
    matches!(
        last,
        "test" | "rstest" | "test_case" | "proptest" | "quickcheck" | "test_log"
    )
}

/// `proptest! {` and the like: a macro whose body's functions are tests.
fn is_test_macro(trimmed: &str) -> bool {
    let name = trimmed.split('!').next().unwrap_or_default();
    let last = name.rsplit("::").next().unwrap_or_default();
    matches!(last, "proptest" | "quickcheck")
}

/// The name in `... fn NAME(` / `fn NAME<`, if the line declares a function.
fn fn_name(line: &str) -> Option<String> {
    let mut words = line.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'));
    while let Some(word) = words.next() {
        if word == "fn" {
            let name = words.find(|w| !w.is_empty())?;
            return Some(name.to_owned());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(source: &str) -> RustLayout {
        RustLayout::parse(Path::new("lib.rs"), source)
    }

    /// 1-based line of the first line containing `needle`.
    fn line_of(source: &str, needle: &str) -> usize {
        source
            .lines()
            .position(|l| l.contains(needle))
            .expect("needle")
            + 1
    }

    const SOURCE: &str = "\
pub fn plain() {}

#[cfg(test)]
mod tests {
    // MARK-A
    #[test]
    #[should_panic(
        expected = \"boom\"
    )]
    fn through_attributes() {}

    mod nested {
        proptest::proptest! {
            // MARK-B
            #[test]
            fn property(x in 0u8..3) {}
        }
    }

    #[test]
    fn inside() {
        // MARK-C
        assert!(true);
    }
}

// MARK-D
pub struct NotAFunction;

#[cfg(test)]
mod helpers;
";

    // i[verify spec-check.test-backed]
    #[test]
    fn attributes_the_next_function_through_attributes() {
        let layout = layout(SOURCE);
        let found = layout.function_after(line_of(SOURCE, "MARK-A"));
        assert_eq!(
            found,
            Some(AttributedFn {
                name: "through_attributes".into(),
                line: line_of(SOURCE, "fn through_attributes"),
                modules: vec!["tests".into()],
                is_test: true,
            })
        );
    }

    // i[verify spec-check.test-backed]
    #[test]
    fn attributes_through_a_macro_opener_into_nested_modules() {
        let layout = layout(SOURCE);
        let found = layout.function_after(line_of(SOURCE, "MARK-B"));
        assert_eq!(
            found,
            Some(AttributedFn {
                name: "property".into(),
                line: line_of(SOURCE, "fn property"),
                modules: vec!["tests".into(), "nested".into()],
                is_test: true,
            })
        );
    }

    #[test]
    fn an_annotation_inside_a_body_belongs_to_that_function() {
        let layout = layout(SOURCE);
        let found = layout.function_after(line_of(SOURCE, "MARK-C"));
        assert_eq!(found.map(|f| f.name), Some("inside".to_owned()));
    }

    // i[verify spec-check.verify-on-test+2]
    #[test]
    fn a_helper_in_test_code_is_not_a_test() {
        let source = "\
#[cfg(test)]
mod tests {
    // MARK-H
    fn helper() -> u32 { 1 }

    // MARK-T
    #[tokio::test(start_paused = true)]
    async fn paced() {}
}
";
        let layout = layout(source);
        let helper = layout.function_after(line_of(source, "MARK-H"));
        assert_eq!(
            helper.map(|f| (f.name, f.is_test)),
            Some(("helper".into(), false))
        );
        let paced = layout.function_after(line_of(source, "MARK-T"));
        assert_eq!(
            paced.map(|f| (f.name, f.is_test)),
            Some(("paced".into(), true))
        );
    }

    #[test]
    fn an_annotation_before_a_non_function_is_not_attributed() {
        let layout = layout(SOURCE);
        assert_eq!(layout.function_after(line_of(SOURCE, "MARK-D")), None);
    }

    // i[verify spec-check.placement]
    #[test]
    fn cfg_test_items_and_declared_test_modules_are_test_code() {
        let layout = layout(SOURCE);
        assert!(!layout.in_cfg_test(line_of(SOURCE, "pub fn plain")));
        assert!(layout.in_cfg_test(line_of(SOURCE, "MARK-A")));
        assert!(layout.in_cfg_test(line_of(SOURCE, "MARK-C")));
        assert!(!layout.in_cfg_test(line_of(SOURCE, "MARK-D")));
        assert_eq!(layout.test_child_modules(), ["helpers".to_owned()]);
    }
    // i[verify spec-check.placement.between-attributes]
    #[test]
    fn an_annotation_after_the_test_attribute_is_on_that_test() {
        let source = "\
#[cfg(test)]
mod tests {
    #[test]
    // MARK-1
    fn after_test() {}

    /// Docs.
    #[tokio::test(start_paused = true)]
    /// More docs.
    // MARK-2
    #[allow(unused)]
    async fn after_tokio() {}

    #[test_case(1 ; \"one\")]
    #[test_case(2 ; \"two\")]
    // MARK-3
    fn after_cases(n: u32) {}

    #[allow(unused)]
    // MARK-4
    fn helper() {}
}
";
        let layout = layout(source);
        let at = |mark| {
            layout
                .function_after(line_of(source, mark))
                .map(|f| (f.name, f.is_test))
        };
        assert_eq!(at("MARK-1"), Some(("after_test".into(), true)));
        assert_eq!(at("MARK-2"), Some(("after_tokio".into(), true)));
        assert_eq!(at("MARK-3"), Some(("after_cases".into(), true)));
        assert_eq!(at("MARK-4"), Some(("helper".into(), false)));
    }

    // i[verify spec-check.placement.file-head]
    #[test]
    fn an_annotation_heading_a_file_or_module_stands_for_its_tests() {
        let file = "\
//! Golden tests.
#![allow(unused)]
// MARK-HEAD

use std::fmt;

fn helper() {}

#[test]
fn golden() {}

mod inner {
    // MARK-INNER
    use super::*;

    #[tokio::test]
    async fn nested() {}

    fn helper() {}
}

// MARK-LATE
use std::io;
";
        let layout = layout(file);
        let test = |name: &str, modules: &[&str]| AttributedFn {
            name: name.into(),
            line: line_of(file, &format!("fn {name}")),
            modules: modules.iter().map(|m| (*m).to_owned()).collect(),
            is_test: true,
        };
        assert_eq!(
            layout.scope_headed_at(line_of(file, "MARK-HEAD")),
            Some(TestScope {
                modules: vec![],
                tests: vec![test("golden", &[]), test("nested", &["inner"])],
            })
        );
        assert_eq!(
            layout.scope_headed_at(line_of(file, "MARK-INNER")),
            Some(TestScope {
                modules: vec!["inner".into()],
                tests: vec![test("nested", &["inner"])],
            })
        );
        let props =
            "// MARK-P\nuse x;\n\nproptest! {\n    #[test]\n    fn prop(x in 0u8..3) {}\n}\n";
        assert_eq!(
            self::layout(props).scope_headed_at(1).map(|s| s
                .tests
                .into_iter()
                .map(|t| t.name)
                .collect::<Vec<_>>()),
            Some(vec!["prop".to_owned()])
        );
        // After code, an annotation heads nothing; before a fn, it is that fn's.
        assert_eq!(layout.scope_headed_at(line_of(file, "MARK-LATE")), None);
        let before_fn = "// MARK-FN\n#[test]\nfn first() {}\n";
        assert_eq!(
            self::layout(before_fn).scope_headed_at(line_of(before_fn, "MARK-FN")),
            None
        );
    }

    /// Which module an annotation heads, among modules nested in one another; what a block
    /// comment above it is; code inside a module before it.
    // i[verify spec-check.placement.file-head]
    #[test]
    fn an_annotation_heads_the_innermost_module_it_opens_and_a_block_comment_is_a_comment() {
        // The inner module spans lines 11 to 17 inside the outer one (lines 10 to 18): the
        // annotation heads the inner one only. Their spans differ (6 and 8) where other measures
        // of them would not (17 / 11 and 18 / 10 are both 1).
        let nested = "\
const A: u8 = 0;
const B: u8 = 0;
const C: u8 = 0;
const D: u8 = 0;
const E: u8 = 0;
const F: u8 = 0;
const G: u8 = 0;
const H: u8 = 0;

mod outer {
    mod inner {
        // MARK-NESTED
        use super::*;

        #[test]
        fn deep() {}
    }
}
";
        let layout = self::layout(nested);
        assert_eq!(line_of(nested, "mod outer"), 10);
        assert_eq!(line_of(nested, "mod inner"), 11);
        assert_eq!(
            layout
                .scope_headed_at(line_of(nested, "MARK-NESTED"))
                .map(|s| (s.modules, s.tests.len())),
            Some((vec!["outer".to_owned(), "inner".to_owned()], 1))
        );
        // A block comment above the annotation is a comment: the annotation heads the file.
        let block =
            "/*\n * Golden tests.\n */\n// MARK-BLOCK\nuse std::fmt;\n\n#[test]\nfn golden() {}\n";
        assert_eq!(
            self::layout(block)
                .scope_headed_at(line_of(block, "MARK-BLOCK"))
                .map(|s| s.tests.len()),
            Some(1)
        );
        // On its own line, code before the annotation is code before it; after a module's
        // opener, the annotation heads that module.
        let trailing = "use std::fmt; // MARK-TRAIL\n\n#[test]\nfn t() {}\n";
        assert_eq!(
            self::layout(trailing).scope_headed_at(line_of(trailing, "MARK-TRAIL")),
            None
        );
        let opener = "use std::fmt;\n\nmod tests { // MARK-OPENER\n    use super::*;\n\n    #[test]\n    fn t() {}\n}\n";
        assert_eq!(
            self::layout(opener)
                .scope_headed_at(line_of(opener, "MARK-OPENER"))
                .map(|s| (s.modules, s.tests.len())),
            Some((vec!["tests".to_owned()], 1))
        );
        // Code inside a module before the annotation: it heads nothing.
        let late = "mod tests {\n    use super::*;\n    // MARK-LATE\n    use std::io;\n\n    #[test]\n    fn t() {}\n}\n";
        assert_eq!(
            self::layout(late).scope_headed_at(line_of(late, "MARK-LATE")),
            None
        );
    }
}

#[cfg(test)]
mod cache_tests {
    use super::*;

    // Every kind an item can have is one the read cache can read back.
    // i[verify spec-check.read-cache]
    #[test]
    fn every_item_kind_reads_back_from_the_cache() {
        for kind in [
            CodeUnitKind::Function,
            CodeUnitKind::Struct,
            CodeUnitKind::Enum,
            CodeUnitKind::Trait,
            CodeUnitKind::Impl,
            CodeUnitKind::Module,
            CodeUnitKind::Const,
            CodeUnitKind::Static,
            CodeUnitKind::TypeAlias,
            CodeUnitKind::Macro,
        ] {
            assert!(ITEM_KINDS.contains(&item_kind(kind)), "{kind:?}");
        }
        let stored = r#"{"test_ranges":[],"modules":[],"functions":[],"test_child_modules":[],
            "items":[{"kind":"fn","name":"f","start":1,"end":2}]}"#;
        let layout: RustLayout = serde_json::from_str(stored).expect("a layout");
        assert_eq!(layout.items()[0].kind, "fn");
        let unknown = stored.replace(r#""fn""#, r#""function""#);
        assert!(serde_json::from_str::<RustLayout>(&unknown).is_err());
    }

    proptest::proptest! {
        // The line table gives a text's lines as `str::lines` does, and a line range's bytes as
        // a scan of the text does (`items`), carriage returns and a missing last newline included.
        #[test]
        fn the_line_table_reads_lines_as_a_scan_of_the_text_does(text in "[a\r\n ]{0,30}") {
            let lines = Lines::new(&text);
            let expected: Vec<&str> = text.lines().collect();
            proptest::prop_assert_eq!(lines.len(), expected.len());
            let count = expected.len();
            for from in 0..=count + 1 {
                for to in 0..=count + 1 {
                    let read: Vec<&str> = lines.range(from, to).collect();
                    let want = expected
                        .get(from.min(count)..to.min(count).max(from.min(count)))
                        .unwrap_or_default();
                    proptest::prop_assert_eq!(read.as_slice(), want, "{}..{}", from, to);
                }
            }
            let layout = RustLayout::default().with_lines(&text);
            for start in 0..=count + 2 {
                for end in 0..=count + 2 {
                    proptest::prop_assert_eq!(
                        layout.line_range(start, end),
                        crate::spec_check::items::line_range(&text, start, end),
                        "{}..={}", start, end
                    );
                }
            }
        }
    }
}
