//! The item an annotation stands for, and its text normalised so that formatting and comments do
//! not count: what the review compares between two revisions.
//!
//! The item comes from the parse the gate already has: a Rust file's [`RustLayout`] (tracey-core's
//! tree-sitter code units), and for other languages tracey-core's code units directly. It is the
//! innermost item whose span (its leading comments and attributes included) holds the annotation's
//! line; an annotation in no item (a file's head, say) stands for the whole file. An item is known
//! by its kind and name (`fn alpha`), so a changed signature is a changed item, not another one.

use std::path::Path;

use tracey_core::code_units;

use crate::spec_check::rust_layout::{Item as RustItem, RustLayout};

/// An item found for an annotation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    /// Its kind and name (`fn alpha`, `impl Retry`), or `(the whole file)`: the item's identity.
    pub head: String,
    /// Its whole text (leading comments and attributes included), normalised.
    pub text: String,
}

/// The item the annotation on 1-based `line` of the file at `path` (its `content`, and its
/// `layout` when it is Rust) stands for.
pub fn item_at(path: &Path, content: &str, layout: Option<&RustLayout>, line: usize) -> Item {
    let comments = Comments::of(path);
    let found = match layout {
        Some(layout) => layout.item_at(line).and_then(|item| {
            Some((
                item.describe(),
                lines_of(content, Some(layout), item.start, item.end)?,
            ))
        }),
        None => code_units::extract(path, content)
            .units
            .into_iter()
            .filter(|unit| unit.start_line <= line && line <= unit.end_line)
            .min_by_key(|unit| unit.end_line - unit.start_line)
            .map(|unit| {
                let name = unit.name.unwrap_or_default();
                (
                    format!("{} {name}", unit.kind.as_str()),
                    unit.start_byte..unit.end_byte,
                )
            }),
    };
    match found.and_then(|(head, range)| Some((head, content.get(range)?))) {
        Some((head, text)) => Item {
            head,
            text: normalise(text, comments),
        },
        None => Item {
            head: "(the whole file)".to_owned(),
            text: normalise(content, comments),
        },
    }
}

/// The Rust items an `impl` annotation on 1-based `line` covers, as `cargo xtask prove` mutates
/// them: the item holding it and, when that is a struct or enum, every impl block (inherent or of
/// a trait) of that type in the same file outside test code — a type's behaviour lies in its
/// methods. One helper, so the proof, the evidence fingerprint and the spec debt agree.
// i[impl prove.plan+4]
pub fn covered_items(layout: &RustLayout, line: usize) -> Vec<&RustItem> {
    let Some(item) = layout.item_at(line) else {
        return Vec::new();
    };
    let mut out = vec![item];
    if matches!(item.kind, "struct" | "enum") {
        out.extend(
            layout
                .items()
                .iter()
                .filter(|i| i.kind == "impl" && self_type(&i.name) == item.name)
                .filter(|i| !layout.in_cfg_test(i.start)),
        );
    }
    out
}

/// The type an impl block is for, as its name gives it: `Gather` of `Gather<K>`, `a::B` or `&B`.
// i[impl prove.plan+4]
pub fn self_type(name: &str) -> &str {
    let name = name.trim_start_matches('&').trim_start();
    let name = name.strip_prefix("mut ").unwrap_or(name);
    let path = name.split('<').next().unwrap_or(name);
    path.rsplit("::").next().unwrap_or(path).trim()
}

/// The items an `impl` annotation on `line` stands for, normalised: [`covered_items`] for Rust,
/// else [`item_at`]'s one item.
pub fn impl_items_at(
    path: &Path,
    content: &str,
    layout: Option<&RustLayout>,
    line: usize,
) -> Vec<Item> {
    let first = item_at(path, content, layout, line);
    let Some(layout) = layout else {
        return vec![first];
    };
    let comments = Comments::of(path);
    let mut out = vec![first];
    out.extend(
        covered_items(layout, line)
            .into_iter()
            .skip(1)
            .filter_map(|item| {
                let text = content.get(lines_of(content, Some(layout), item.start, item.end)?)?;
                Some(Item {
                    head: item.describe(),
                    text: normalise(text, comments),
                })
            }),
    );
    out
}

/// The item a `verify` annotation on `line` stands for: the test function `cargo xtask prove`
/// judges for it (the next `fn`, read through attributes and test macros such as `proptest! {`),
/// else [`item_at`]'s item. A test inside a macro is no tree-sitter item, so its text is read from
/// its `fn` line to its body's closing brace; hashing the enclosing module instead would make every
/// other test of that module count.
pub fn verify_item_at(
    path: &Path,
    content: &str,
    layout: Option<&RustLayout>,
    line: usize,
) -> Item {
    let Some(function) = layout.and_then(|layout| Some((layout, layout.function_after(line)?)))
    else {
        return item_at(path, content, layout, line);
    };
    let (layout, function) = function;
    let is_item = layout
        .item_at(function.line)
        .is_some_and(|item| item.kind == "fn" && item.name == function.name);
    if is_item {
        return item_at(path, content, Some(layout), function.line);
    }
    match fn_body(content, function.line) {
        Some(text) => Item {
            head: format!("fn {}", function.name),
            text: normalise(text, Comments::of(path)),
        },
        None => item_at(path, content, Some(layout), line),
    }
}

/// The text of `content` from 1-based `line` to the brace closing the first `{` opened after it
/// (strings, characters and comments skipped).
fn fn_body(content: &str, line: usize) -> Option<&str> {
    let from = line_range(content, line, line)?.start;
    let bytes = content.as_bytes();
    let mut depth = 0usize;
    let mut index = from;
    while index < bytes.len() {
        index = match bytes[index] {
            b'/' if bytes.get(index + 1) == Some(&b'/') => skip_line(bytes, index),
            b'/' if bytes.get(index + 1) == Some(&b'*') => skip_block_comment(bytes, index),
            b'"' => skip_string(bytes, index, b'"'),
            b'\'' => skip_char(bytes, index),
            b'{' => {
                depth += 1;
                index + 1
            }
            b'}' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return content.get(from..index + 1);
                }
                index + 1
            }
            _ => index + 1,
        };
    }
    None
}

/// [`line_range`] from `layout`'s line table when it is `content`'s, without a scan of the text.
fn lines_of(
    content: &str,
    layout: Option<&RustLayout>,
    start: usize,
    end: usize,
) -> Option<std::ops::Range<usize>> {
    match layout {
        Some(layout) if layout.fits(content) => layout.line_range(start, end),
        _ => line_range(content, start, end),
    }
}

/// The byte range of 1-based lines `start..=end` of `content`.
pub(super) fn line_range(
    content: &str,
    start: usize,
    end: usize,
) -> Option<std::ops::Range<usize>> {
    let mut starts = std::iter::once(0).chain(content.match_indices('\n').map(|(i, _)| i + 1));
    let from = starts.nth(start.checked_sub(1)?)?;
    let to = starts.nth(end.checked_sub(start)?).unwrap_or(content.len());
    Some(from..to.max(from))
}

/// A language's comment syntax, as far as normalising needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Comments {
    /// `//` and nesting `/* */`, `'` opens a character literal or a lifetime (Rust, C, Go, …).
    Slashes,
    /// `#` to the end of the line, `'` opens a string (Python, Ruby, shell, …).
    Hash,
}

impl Comments {
    /// The syntax of the file at `path`, by its extension.
    pub fn of(path: &Path) -> Self {
        match path.extension().and_then(|e| e.to_str()) {
            Some("py" | "rb" | "sh" | "bash" | "zsh" | "pl" | "pm" | "r" | "R" | "jl" | "ps1") => {
                Comments::Hash
            }
            _ => Comments::Slashes,
        }
    }
}

fn skip_line(bytes: &[u8], from: usize) -> usize {
    bytes[from..]
        .iter()
        .position(|&b| b == b'\n')
        .map_or(bytes.len(), |p| from + p + 1)
}

fn skip_block_comment(bytes: &[u8], from: usize) -> usize {
    // Rust block comments nest.
    let mut depth = 0usize;
    let mut index = from;
    while index + 1 < bytes.len() {
        match (bytes[index], bytes[index + 1]) {
            (b'/', b'*') => {
                depth += 1;
                index += 2;
            }
            (b'*', b'/') => {
                depth -= 1;
                index += 2;
                if depth == 0 {
                    return index;
                }
            }
            _ => index += 1,
        }
    }
    bytes.len()
}

fn skip_string(bytes: &[u8], from: usize, quote: u8) -> usize {
    let mut index = from + 1;
    while index < bytes.len() {
        match bytes[index] {
            b'\\' => index += 2,
            b if b == quote => return index + 1,
            _ => index += 1,
        }
    }
    bytes.len()
}

/// The number of `#` of a raw string starting at `from` (`r"`, `r#"`, `br"` is caught at its `r`),
/// when one starts there and `r` does not end an identifier.
fn raw_string_start(bytes: &[u8], from: usize) -> Option<usize> {
    if from > 0 && (bytes[from - 1].is_ascii_alphanumeric() && bytes[from - 1] != b'b') {
        return None;
    }
    let hashes = bytes[from + 1..].iter().take_while(|&&b| b == b'#').count();
    (bytes.get(from + 1 + hashes) == Some(&b'"')).then_some(hashes)
}

fn skip_raw_string(bytes: &[u8], from: usize) -> usize {
    let hashes = raw_string_start(bytes, from).unwrap_or(0);
    let mut index = from + 2 + hashes;
    while index < bytes.len() {
        let closes = bytes
            .get(index + 1..index + 1 + hashes)
            .is_some_and(|h| h.iter().all(|&b| b == b'#'));
        if bytes[index] == b'"' && closes {
            return index + 1 + hashes;
        }
        index += 1;
    }
    bytes.len()
}

/// A character literal (`'{'`, `'\''`) is skipped whole; a lifetime (`'a`) only its quote.
fn skip_char(bytes: &[u8], from: usize) -> usize {
    match (
        bytes.get(from + 1),
        bytes.get(from + 2),
        bytes.get(from + 3),
    ) {
        (Some(b'\\'), _, _) => bytes[from + 2..]
            .iter()
            .position(|&b| b == b'\'')
            .map_or(bytes.len(), |p| from + 2 + p + 1),
        (Some(_), Some(b'\''), _) => from + 3,
        _ => {
            // A multi-byte character literal ends at the next quote within four bytes.
            let window = &bytes[from + 1..bytes.len().min(from + 6)];
            match window.iter().position(|&b| b == b'\'') {
                Some(p) if p > 1 && !window[..p].is_ascii() => from + 1 + p + 1,
                _ => from + 1,
            }
        }
    }
}

/// `text` without comments and with every run of whitespace outside strings made one space (and
/// none next to punctuation), so reformatting or re-commenting an item does not change it.
pub fn normalise(text: &str, comments: Comments) -> String {
    // A checkout with CRLF line ends must not change a multi-line string literal's text.
    if text.contains('\r') {
        return normalise_lf(&text.replace("\r\n", "\n"), comments);
    }
    normalise_lf(text, comments)
}

fn normalise_lf(text: &str, comments: Comments) -> String {
    let slashes = comments == Comments::Slashes;
    let bytes = text.as_bytes();
    let mut tokens: Vec<&str> = Vec::new();
    let mut index = 0;
    let mut word_start: Option<usize> = None;
    fn flush<'t>(text: &'t str, tokens: &mut Vec<&'t str>, start: &mut Option<usize>, end: usize) {
        if let Some(s) = start.take() {
            tokens.push(&text[s..end]);
        }
    }
    while index < bytes.len() {
        let b = bytes[index];
        let (next, token) = match b {
            b'/' if slashes && bytes.get(index + 1) == Some(&b'/') => {
                (skip_line(bytes, index), false)
            }
            b'/' if slashes && bytes.get(index + 1) == Some(&b'*') => {
                (skip_block_comment(bytes, index), false)
            }
            b'#' if !slashes => (skip_line(bytes, index), false),
            b'"' => (skip_string(bytes, index, b'"'), true),
            b'r' if slashes && word_start.is_none() && raw_string_start(bytes, index).is_some() => {
                (skip_raw_string(bytes, index), true)
            }
            b'\'' if slashes => (skip_char(bytes, index), true),
            b'\'' => (skip_string(bytes, index, b'\''), true),
            _ if b.is_ascii_whitespace() => (index + 1, false),
            _ if b.is_ascii_alphanumeric() || b == b'_' || b >= 0x80 => {
                if word_start.is_none() {
                    word_start = Some(index);
                }
                index += 1;
                continue;
            }
            _ => (index + 1, true),
        };
        flush(text, &mut tokens, &mut word_start, index);
        if token {
            tokens.push(&text[index..next.min(bytes.len())]);
        }
        index = next;
    }
    flush(text, &mut tokens, &mut word_start, bytes.len());
    // One space only between two words, so `a+b` and `a + b` read alike but `pub fn` stays two.
    let mut out = String::new();
    let mut last_word = false;
    for token in tokens {
        let word = token
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_' || b >= 0x80);
        if word && last_word {
            out.push(' ');
        }
        out.push_str(token);
        last_word = word;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The item for the annotation on `line` of `src` read as the file `path`.
    fn at(src: &str, line: usize, path: &str) -> Item {
        let path = Path::new(path);
        let layout =
            (path.extension().is_some_and(|e| e == "rs")).then(|| RustLayout::parse(path, src));
        item_at(path, src, layout.as_ref(), line)
    }

    fn rust(text: &str) -> String {
        normalise(text, Comments::Slashes)
    }

    // i[verify spec-check.review.items+2]
    #[test]
    fn formatting_and_comments_do_not_change_an_item() {
        let a = "fn alpha(x: u32) -> u32 {\n    // why\n    x + 1 /* more */\n}\n";
        let b = "fn alpha(x:u32)->u32{x+1}";
        assert_eq!(rust(a), rust(b));
        assert_ne!(rust(a), rust("fn alpha(x: u32) -> u32 { x + 2 }"));
        // Inside a string, spaces count; CRLF line ends do not.
        assert_ne!(rust("f(\"a b\")"), rust("f(\"ab\")"));
        let multi = "fn f() {\n    g(\"a\n b\");\n}\n";
        assert_eq!(rust(multi), rust(&multi.replace('\n', "\r\n")));
        assert_eq!(rust("pub fn f()"), "pub fn f()");
    }

    // i[verify spec-check.review.items+2]
    #[test]
    fn the_item_is_the_innermost_one_holding_the_annotation() {
        let src = "use x;\n\n// r[impl a.b]\n#[inline]\npub fn alpha() {\n    let s = \"}\";\n    let c = '}';\n    if true { 1 } else { 2 };\n}\n\nfn beta() {}\n";
        let item = at(src, 3, "src/lib.rs");
        assert_eq!(item.head, "fn alpha");
        assert!(item.text.ends_with("else{2};}"), "{}", item.text);
        assert!(!item.text.contains("beta"));
        let src = "// r[impl a.b]\nconst X: [u8; 2] = [1, 2];\nfn other() {}\n";
        let item = at(src, 1, "src/lib.rs");
        assert_eq!(item.text, "const X:[u8;2]=[1,2];");
        let src = "def helper():\n    pass\n\n# r[verify a.b]\ndef test_x():\n    assert 1\n\n    assert 2\ndef after():\n    pass\n";
        let item = at(src, 4, "t.py");
        assert_eq!(item.head, "function test_x");
        assert!(item.text.contains("assert 2") && !item.text.contains("after"));
    }

    // i[verify spec-check.review.items+2]
    #[test]
    fn a_multi_line_attribute_is_not_the_item() {
        let src = "// r[impl a.b]\n#[cfg_attr(\n    feature = \"serde\",\n    derive(Debug)\n)]\npub struct PolicyConfig {\n    x: u32,\n}\n";
        let item = at(src, 1, "src/lib.rs");
        assert_eq!(item.head, "struct PolicyConfig");
        assert!(item.text.contains("x:u32"), "{}", item.text);
    }

    // i[verify spec-check.review.items+2]
    #[test]
    fn python_comments_are_hash_comments_and_slashes_are_code() {
        let src = "# r[verify a.b]\ndef test_x():\n    return 7 // 2\n";
        let other = src.replace("// 2", "// 3");
        assert_ne!(at(src, 1, "t.py").text, at(&other, 1, "t.py").text);
        let commented = src.replace("    return", "    # why\n    return");
        assert_eq!(at(src, 1, "t.py").text, at(&commented, 1, "t.py").text);
        assert_eq!(at(src, 1, "t.py").head, "function test_x");
    }

    // i[verify spec-check.review.items+2]
    #[test]
    fn an_annotation_before_a_closing_brace_stays_in_its_item() {
        let src = "mod m {\n    fn a() {}\n    // r[impl a.b]\n}\n\nfn next() {}\n";
        let item = at(src, 3, "src/lib.rs");
        assert_eq!(item.head, "mod m");
        assert!(!item.text.contains("next"), "{}", item.text);
    }

    proptest::proptest! {
        /// Any text, any line: the reader never panics (byte offsets stay on char boundaries),
        /// and extra whitespace between tokens changes no item.
        // i[verify spec-check.review.items+2]
        #[test]
        fn any_text_is_read_and_whitespace_never_counts(
            text in "(\\PC|[{}()\\[\\];'\"#/*\n\\\\r])*",
            line in 0usize..40,
            code in "[a-z0-9_ {}();:+,\n]*",
        ) {
            let _ = at(&text, line, "src/lib.rs");
            let _ = at(&text, line, "t.py");
            let _ = rust(&text);
            let _ = normalise(&text, Comments::Hash);
            proptest::prop_assert_eq!(rust(&code), rust(&code.replace(' ', "  \n\t")));
        }
    }

    // i[verify spec-check.review.items+2]
    #[test]
    fn an_annotation_in_no_item_stands_for_the_file() {
        let src = "//! Tests.\n// r[verify a.b]\n\nuse x;\n\n#[test]\nfn t() {}\n";
        let item = at(src, 2, "tests/t.rs");
        assert_eq!(item.head, "(the whole file)");
        assert_eq!(item.text, rust(src));
        // Right above an item, it is that item's.
        let src = "// r[verify a.b]\n#[test]\nfn t() {}\n";
        assert_eq!(at(src, 1, "tests/t.rs").head, "fn t");
    }
}
