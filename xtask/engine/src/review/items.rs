//! The item an annotation stands for, and its text normalised so that formatting and comments do
//! not count: what the review compares between two revisions.
//!
//! An annotation sits on the line right before its item (attributes and other comments may come
//! between). The item runs to the end of its first balanced `{ … }` block, or to a `;` outside any
//! bracket, whichever comes first; strings, character literals and comments are skipped so a
//! brace inside them does not count. An annotation at the head of a file (before any item) stands
//! for the whole file. Python has no braces: its item is the indented block after the `def` or
//! `class` line.

/// The item after the annotation on 1-based `line` of `content`: its head (the first code line,
/// normalised, naming the item) and its whole text normalised.
pub fn item_after(content: &str, line: usize, python: bool) -> Item {
    let lines: Vec<&str> = content.lines().collect();
    // The first line after the annotation that is code: not blank, not a comment, not an attribute.
    let start = (line..lines.len()).find(|&index| {
        let trimmed = lines[index].trim_start();
        !(trimmed.is_empty()
            || trimmed.starts_with("//")
            || trimmed.starts_with('#')
            || trimmed.starts_with("/*")
            || trimmed.starts_with('*')
            || trimmed.starts_with('@'))
    });
    let Some(start) = start else {
        return Item {
            head: String::new(),
            text: normalise(content),
        };
    };
    // An annotation among the file's leading comments (before any code) stands for the file.
    let file_head = lines[..line.saturating_sub(1).min(lines.len())]
        .iter()
        .all(|l| l.trim().is_empty() || is_comment(l))
        && is_file_head_comment(&lines, line);
    if file_head {
        return Item {
            head: "(the whole file)".to_owned(),
            text: normalise(content),
        };
    }
    let rest = lines[start..].join("\n");
    let body = if python {
        python_block(&lines[start..])
    } else {
        let end = item_end(&rest);
        rest[..end].to_owned()
    };
    // The head as written, cut before its block and any comment, whitespace collapsed.
    let line = lines[start];
    let line = line.split_once("//").map_or(line, |(code, _)| code);
    let line = line.split_once('{').map_or(line, |(code, _)| code);
    let head = line.split_whitespace().collect::<Vec<_>>().join(" ");
    Item {
        head,
        text: normalise(&body),
    }
}

/// Whether the annotation on 1-based `line` opens the file's head: only comments and blank lines
/// before it, and a blank line (or the end of the comments) between it and the first item.
fn is_file_head_comment(lines: &[&str], line: usize) -> bool {
    // A comment block directly followed by code is that code's annotation; a head annotation is
    // separated from the first item by a blank line.
    let after = lines.get(line..).unwrap_or_default();
    after
        .iter()
        .find(|l| !is_comment(l))
        .is_some_and(|l| l.trim().is_empty())
}

/// A comment line (`//…`, or `#…` that is not an attribute `#[…]`/`#![…]`).
fn is_comment(line: &str) -> bool {
    let t = line.trim_start();
    t.starts_with("//") || (t.starts_with('#') && !t.starts_with("#[") && !t.starts_with("#!["))
}

/// An item found after an annotation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    /// Its first code line, cut before `{`, whitespace collapsed (`pub fn alpha()`): the item's
    /// name.
    pub head: String,
    /// Its whole text, normalised.
    pub text: String,
}

/// The lines of a Python block: the first line and every following line indented deeper (blank
/// lines included).
fn python_block(lines: &[&str]) -> String {
    let indent = |l: &str| l.len() - l.trim_start().len();
    let Some(first) = lines.first() else {
        return String::new();
    };
    let base = indent(first);
    let mut out = vec![*first];
    out.extend(
        lines[1..]
            .iter()
            .take_while(|l| l.trim().is_empty() || indent(l) > base),
    );
    out.join("\n")
}

/// The byte offset where the item starting at the beginning of `text` ends.
fn item_end(text: &str) -> usize {
    let bytes = text.as_bytes();
    let mut depth = 0usize;
    let mut opened_brace = false;
    let mut index = 0;
    while index < bytes.len() {
        match bytes[index] {
            b'/' if bytes.get(index + 1) == Some(&b'/') => {
                index = skip_line(bytes, index);
                continue;
            }
            b'/' if bytes.get(index + 1) == Some(&b'*') => {
                index = skip_block_comment(bytes, index);
                continue;
            }
            b'"' => {
                index = skip_string(bytes, index);
                continue;
            }
            b'r' if raw_string_start(bytes, index).is_some() => {
                index = skip_raw_string(bytes, index);
                continue;
            }
            b'\'' => {
                index = skip_char(bytes, index);
                continue;
            }
            b'{' | b'(' | b'[' => {
                if bytes[index] == b'{' && depth == 0 {
                    opened_brace = true;
                }
                depth += 1;
            }
            b'}' | b')' | b']' => {
                depth = depth.saturating_sub(1);
                if depth == 0 && bytes[index] == b'}' && opened_brace {
                    return index + 1;
                }
            }
            b';' if depth == 0 => return index + 1,
            _ => {}
        }
        index += 1;
    }
    bytes.len()
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

fn skip_string(bytes: &[u8], from: usize) -> usize {
    let mut index = from + 1;
    while index < bytes.len() {
        match bytes[index] {
            b'\\' => index += 2,
            b'"' => return index + 1,
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
pub fn normalise(text: &str) -> String {
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
            b'/' if bytes.get(index + 1) == Some(&b'/') => (skip_line(bytes, index), false),
            b'/' if bytes.get(index + 1) == Some(&b'*') => {
                (skip_block_comment(bytes, index), false)
            }
            b'"' => (skip_string(bytes, index), true),
            b'r' if word_start.is_none() && raw_string_start(bytes, index).is_some() => {
                (skip_raw_string(bytes, index), true)
            }
            b'\'' => (skip_char(bytes, index), true),
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

    // i[verify spec-check.review.items]
    #[test]
    fn formatting_and_comments_do_not_change_an_item() {
        let a = "fn alpha(x: u32) -> u32 {\n    // why\n    x + 1 /* more */\n}\n";
        let b = "fn alpha(x:u32)->u32{x+1}";
        assert_eq!(normalise(a), normalise(b));
        assert_ne!(normalise(a), normalise("fn alpha(x: u32) -> u32 { x + 2 }"));
        // Inside a string, spaces count.
        assert_ne!(normalise("f(\"a b\")"), normalise("f(\"ab\")"));
        assert_eq!(normalise("pub fn f()"), "pub fn f()");
    }

    // i[verify spec-check.review.items]
    #[test]
    fn the_item_runs_to_its_closing_brace_or_its_semicolon() {
        let src = "use x;\n\n// r[impl a.b]\n#[inline]\npub fn alpha() {\n    let s = \"}\";\n    let c = '}';\n    if true { 1 } else { 2 };\n}\n\nfn beta() {}\n";
        let item = item_after(src, 3, false);
        assert_eq!(item.head, "pub fn alpha()");
        assert!(item.text.ends_with("else{2};}"), "{}", item.text);
        assert!(!item.text.contains("beta"));
        let src = "// r[impl a.b]\nconst X: [u8; 2] = [1, 2];\nfn other() {}\n";
        let item = item_after(src, 1, false);
        assert_eq!(item.text, "const X:[u8;2]=[1,2];");
        let src = "def helper():\n    pass\n\n# r[verify a.b]\ndef test_x():\n    assert 1\n\n    assert 2\ndef after():\n    pass\n";
        let item = item_after(src, 4, true);
        assert_eq!(item.head, "def test_x():");
        assert!(item.text.contains("assert 2") && !item.text.contains("after"));
    }

    proptest::proptest! {
        /// Any text, any line: the reader never panics (byte offsets stay on char boundaries),
        /// and extra whitespace between tokens changes no item.
        // i[verify spec-check.review.items]
        #[test]
        fn any_text_is_read_and_whitespace_never_counts(
            text in "(\\PC|[{}()\\[\\];'\"#/*\n\\\\r])*",
            line in 0usize..40,
            code in "[a-z0-9_ {}();:+,\n]*",
        ) {
            let _ = item_after(&text, line, false);
            let _ = item_after(&text, line, true);
            let _ = normalise(&text);
            proptest::prop_assert_eq!(normalise(&code), normalise(&code.replace(' ', "  \n\t")));
        }
    }

    // i[verify spec-check.review.items]
    #[test]
    fn an_annotation_heading_a_file_stands_for_the_file() {
        let src = "//! Tests.\n// r[verify a.b]\n\nuse x;\n\n#[test]\nfn t() {}\n";
        let item = item_after(src, 2, false);
        assert_eq!(item.head, "(the whole file)");
        assert_eq!(item.text, normalise(src));
        // Right above an item, it is that item's.
        let src = "// r[verify a.b]\n#[test]\nfn t() {}\n";
        assert_eq!(item_after(src, 1, false).head, "fn t()");
    }
}
