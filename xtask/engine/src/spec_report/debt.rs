//! Spec debt, or reverse coverage (tracey's `unmapped`): the code of the crates' `src/` that no
//! rule names. A public item, or a function of at least [`LONG_FN`] lines, that no `impl`
//! annotation covers is debt, as is a surviving mutant that lies in no annotated item. One list,
//! largest first.
//!
//! An `impl` annotation covers the items `cargo xtask prove` mutates for it (the innermost item
//! holding it and, for a struct or enum, its impl blocks in the same file:
//! [`crate::spec_check::items::covered_items`], as the evidence fingerprints read them too) and
//! everything inside them; one in no item (a file's head) covers the whole file. Dev-only crates (a
//! test-support crate) are scanned like any other: their code is code too. Test code (`#[cfg(test)]`,
//! test files) is not debt, nor are modules and impl blocks themselves (they are containers: their
//! items are judged one by one).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde::Serialize;

use crate::model::tree::Tree as Source;
use crate::spec_check::Tree;
use crate::spec_check::crate_layout;
use crate::spec_check::rust_layout::RustLayout;

/// A function this long or longer (its lines, doc comments and attributes included) is debt when
/// no rule covers it, public or not: a long private function is behaviour no rule states.
pub const LONG_FN: usize = 40;

/// The kinds of item a public one may be debt as (modules and impl blocks are containers).
const PUBLIC_KINDS: [&str; 7] = ["fn", "struct", "enum", "trait", "const", "static", "type"];

/// Why an entry is debt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Why {
    /// A `pub` item no rule covers.
    Public,
    /// A function of at least [`LONG_FN`] lines no rule covers.
    LongFn,
    /// A mutant that survived in code no rule covers.
    Survivor,
}

impl Why {
    /// As printed.
    pub fn name(self) -> &'static str {
        match self {
            Why::Public => "public",
            Why::LongFn => "long-fn",
            Why::Survivor => "survivor",
        }
    }
}

/// One piece of code no rule names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Debt {
    /// The package of the file (`(no package)` when none is found).
    #[serde(rename = "crate")]
    pub krate: String,
    /// The file, root-relative.
    pub file: String,
    /// 1-based first line (of the item, or of the mutant).
    pub line: usize,
    /// The item (`fn alpha`), or the mutation of a survivor.
    pub item: String,
    /// Its size in lines (a survivor: its enclosing item's, else 1).
    pub size: usize,
    /// Why it is debt.
    pub why: Why,
}

/// Whether `path` (root-relative, `/`-separated) lies in a crate's `src/`.
fn in_src(relative: &str) -> bool {
    relative.starts_with("src/") || relative.contains("/src/")
}

/// Line spans `impl` annotations cover in one file; a `None` span covers the whole file.
type Spans = Vec<Option<(usize, usize)>>;

/// The line spans `impl` annotations cover in each file.
fn covered(tree: &Tree) -> HashMap<&Path, Spans> {
    // Hashed by path, each file's layout looked up once: a large tree has tens of thousands of
    // sites in a few thousand files.
    let mut spans: HashMap<&Path, (Option<&RustLayout>, Spans)> = HashMap::new();
    for analysis in tree.analyses() {
        for coverage in &analysis.rules {
            for site in &coverage.impl_sites {
                let (layout, entry) = spans.entry(site.path.as_path()).or_insert_with(|| {
                    let layout = tree.parsed.get(&site.path).and_then(|f| f.layout.as_ref());
                    (layout, Vec::new())
                });
                match layout {
                    // In no item (a file's head): the whole file.
                    Some(layout) => {
                        match crate::spec_check::items::covered_items(layout, site.line).as_slice()
                        {
                            [] => entry.push(None),
                            items => entry.extend(items.iter().map(|i| Some((i.start, i.end)))),
                        }
                    }
                    // Not Rust: the annotation covers its line only (no Rust item is judged there).
                    None => entry.push(Some((site.line, site.line))),
                }
            }
        }
    }
    spans
        .into_iter()
        .map(|(path, (_, spans))| (path, spans))
        .collect()
}

fn is_covered(spans: Option<&Spans>, start: usize, end: usize) -> bool {
    spans.is_some_and(|spans| {
        spans.iter().any(|span| match span {
            None => true,
            Some((from, to)) => *from <= start && end <= *to,
        })
    })
}

/// Whether the item spanning `start..=end` of `content` is declared `pub` (unrestricted): its
/// first line that is no comment or attribute starts with `pub ` (or `pub unsafe`, `pub async`…).
fn is_pub(content: &str, start: usize, end: usize) -> bool {
    let mut in_attribute = 0i32;
    for line in content
        .lines()
        .skip(start.saturating_sub(1))
        .take(end + 1 - start.max(1))
    {
        let trimmed = line.trim_start();
        if in_attribute > 0 || trimmed.starts_with("#[") {
            in_attribute += bracket_depth(trimmed);
            continue;
        }
        if trimmed.is_empty() || trimmed.starts_with("//") || trimmed.starts_with("/*") {
            continue;
        }
        if trimmed.starts_with('*') {
            continue;
        }
        return trimmed.starts_with("pub ");
    }
    false
}

/// The attributes heading the item spanning `start..=end` of `lines`, each without whitespace.
fn attributes(lines: &[&str], start: usize, end: usize) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut depth = 0i32;
    for line in lines
        .iter()
        .skip(start.saturating_sub(1))
        .take(end + 1 - start.max(1))
    {
        let trimmed = line.trim();
        let squeezed: String = trimmed.chars().filter(|c| !c.is_whitespace()).collect();
        if depth > 0 {
            if let Some(last) = out.last_mut() {
                last.push_str(&squeezed);
            }
            depth += bracket_depth(trimmed);
            continue;
        }
        if trimmed.starts_with("#[") {
            out.push(squeezed);
            depth += bracket_depth(trimmed);
            continue;
        }
        if trimmed.is_empty() || trimmed.starts_with("//") || trimmed.starts_with("/*") {
            continue;
        }
        if trimmed.starts_with('*') {
            continue;
        }
        break;
    }
    out
}

/// Whether the item at `item` of `layout` is compiled for tests only: it or an item enclosing it
/// carries `#[cfg(test)]` (or `#[cfg(all(test, …))]`). `#[cfg(any(test, …))]` is not test-only:
/// a feature may build it too.
fn test_only(lines: &[&str], layout: &RustLayout, start: usize, end: usize) -> bool {
    layout
        .items()
        .iter()
        .filter(|i| i.start <= start && end <= i.end)
        .any(|i| {
            attributes(lines, i.start, i.end)
                .iter()
                .any(|a| a == "#[cfg(test)]" || a.starts_with("#[cfg(all(test,"))
        })
}

/// Whether the item spanning `start..=end` is reachable as public: declared `pub` and in no
/// module that is not.
fn is_public(content: &str, layout: &RustLayout, start: usize, end: usize) -> bool {
    is_pub(content, start, end)
        && layout
            .items()
            .iter()
            .filter(|m| m.kind == "mod" && m.start < start && end <= m.end)
            .all(|m| is_pub(content, m.start, m.end))
}

/// `[` minus `]` on a line: how far an attribute opened on it is still open.
fn bracket_depth(line: &str) -> i32 {
    line.bytes().fold(0, |depth, b| match b {
        b'[' => depth + 1,
        b']' => depth - 1,
        _ => depth,
    })
}

/// Where the child modules files declare as `mod NAME;` in test code (`#[cfg(test)]`, or inside
/// a `#[cfg(test)]` module) live: `DIR/NAME` (its `.rs` file, or the directory of its `mod.rs` and
/// submodules), `DIR` being the file's module directory joined with the inline modules enclosing
/// the declaration; or the file its `#[path = "…"]` names.
fn test_modules(tree: &Tree) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for (path, file) in tree.parsed.iter() {
        let Some(layout) = &file.layout else {
            continue;
        };
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default();
        let Some(parent) = path.parent() else {
            continue;
        };
        // `lib.rs`, `main.rs` and `mod.rs` hold their children beside them; `foo.rs` in `foo/`.
        let dir = if matches!(stem, "lib" | "main" | "mod") {
            parent.to_path_buf()
        } else {
            parent.join(stem)
        };
        let mods: Vec<_> = layout.items().iter().filter(|i| i.kind == "mod").collect();
        // Most files declare no module: their lines are not needed.
        if mods.is_empty() {
            continue;
        }
        let lines: Vec<&str> = file.content.lines().collect();
        let text = |start: usize, end: usize| {
            lines
                .get(start.saturating_sub(1)..end.min(lines.len()))
                .map(|l| l.join("\n"))
                .unwrap_or_default()
        };
        for decl in &mods {
            let decl_text = text(decl.start, decl.end);
            let inline = decl_text.trim_end().ends_with('}');
            if inline || !test_only(&lines, layout, decl.start, decl.end) {
                continue;
            }
            let enclosing: Vec<&str> = mods
                .iter()
                .filter(|m| m.start < decl.start && decl.end <= m.end)
                .filter(|m| text(m.start, m.end).trim_end().ends_with('}'))
                .map(|m| m.name.as_str())
                .collect();
            let module_path =
                |base: std::path::PathBuf| enclosing.iter().fold(base, |dir, name| dir.join(name));
            out.push(match path_attribute(&decl_text) {
                // A top-level `#[path]` is read from the file's own directory.
                Some(file) if enclosing.is_empty() => parent.join(file).with_extension(""),
                Some(file) => module_path(dir.clone()).join(file).with_extension(""),
                None => module_path(dir.clone()).join(&decl.name),
            });
        }
    }
    out
}

/// The file a `#[path = "FILE"]` attribute in `text` names.
fn path_attribute(text: &str) -> Option<&str> {
    let after = text.split("#[path").nth(1)?;
    let after = after.trim_start().strip_prefix('=')?.trim_start();
    let after = after.strip_prefix('"')?;
    after.split('"').next()
}

fn is_test_module(path: &Path, test_modules: &[std::path::PathBuf]) -> bool {
    test_modules
        .iter()
        .any(|module| path.with_extension("") == *module || path.starts_with(module))
}

/// The survivors recorded anywhere the engine reads: each rule's recorded proof (missed, not
/// justified) and a whole-tree cargo-mutants run's `mutants.out/missed.txt`, when present.
fn survivors(source: &dyn Source, tree: &Tree) -> Vec<String> {
    let mut all: Vec<String> = tree
        .rules()
        .iter()
        .filter_map(|rule| crate::model::proof::recorded(source, &rule.id))
        .flat_map(|proof| proof.survivors)
        .collect();
    if let Ok(text) = source.read(&source.root().join("mutants.out/missed.txt")) {
        all.extend(text.lines().map(str::to_owned));
    }
    all.sort();
    all.dedup();
    all
}

/// The spec debt of `tree`, largest first (then by crate, file and line).
// i[impl spec-report.debt]
pub fn debt(source: &dyn Source, tree: &Tree) -> Vec<Debt> {
    // Two passes over the whole tree, independent of each other: side by side on the pool.
    let (spans, test_modules) =
        crate::spec_check::pool::join(|| covered(tree), || test_modules(tree));
    let package = |path: &Path| {
        crate_layout::package_of(source, path)
            .map_or_else(|| "(no package)".to_owned(), |(name, _)| name)
    };
    // Each file's items are judged apart from every other file's: on the parse pool, the
    // files' order kept.
    let files: Vec<_> = tree.parsed.iter().collect();
    let mut out: Vec<Debt> = crate::spec_check::pool::map(files, |(path, file)| {
        let mut debts = Vec::new();
        let Some(layout) = &file.layout else {
            return debts;
        };
        if !in_src(&file.relative) || is_test_module(path, &test_modules) {
            return debts;
        }
        let krate = package(path);
        let lines: Vec<&str> = file.content.lines().collect();
        for item in layout.items() {
            if test_only(&lines, layout, item.start, item.end) {
                continue;
            }
            let size = item.end + 1 - item.start;
            let why = if item.kind == "fn" && size >= LONG_FN {
                Why::LongFn
            } else if PUBLIC_KINDS.contains(&item.kind)
                && is_public(&file.content, layout, item.start, item.end)
            {
                Why::Public
            } else {
                continue;
            };
            if is_covered(spans.get(path), item.start, item.end) {
                continue;
            }
            debts.push(Debt {
                krate: krate.clone(),
                file: file.relative.clone(),
                line: item.start,
                item: item.describe(),
                size,
                why,
            });
        }
        debts
    })
    .into_iter()
    .flatten()
    .collect();
    for survivor in survivors(source, tree) {
        let Some((file, line, mutation)) = crate::model::proof::survivor_at(&survivor) else {
            continue;
        };
        let path = source.root().join(file);
        if is_covered(spans.get(path.as_path()), line, line) {
            continue;
        }
        let layout: Option<&RustLayout> = tree.parsed.get(&path).and_then(|f| f.layout.as_ref());
        let size = layout
            .and_then(|l| l.item_at(line))
            .map_or(1, |item| item.end + 1 - item.start);
        out.push(Debt {
            krate: package(&path),
            file: file.to_owned(),
            line,
            item: mutation.to_owned(),
            size,
            why: Why::Survivor,
        });
    }
    out.sort_by(|a, b| {
        (b.size, &a.krate, &a.file, a.line, a.why).cmp(&(a.size, &b.krate, &b.file, b.line, b.why))
    });
    out
}

/// Per crate: entries and lines of debt, largest first.
pub fn per_crate(debt: &[Debt]) -> Vec<(String, usize, usize)> {
    let mut crates: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for entry in debt {
        let totals = crates.entry(&entry.krate).or_default();
        totals.0 += 1;
        totals.1 += entry.size;
    }
    let mut out: Vec<(String, usize, usize)> = crates
        .into_iter()
        .map(|(name, (count, lines))| (name.to_owned(), count, lines))
        .collect();
    out.sort_by(|a, b| (b.2, &a.0).cmp(&(a.2, &b.0)));
    out
}

/// The top `n` entries as text lines, `SIZE  CRATE  FILE:LINE  ITEM (WHY)`.
pub fn top(debt: &[Debt], n: usize) -> String {
    debt.iter()
        .take(n)
        .map(|d| {
            format!(
                "{:>5}  {}  {}:{}  {} ({})\n",
                d.size,
                d.krate,
                d.file,
                d.line,
                d.item,
                d.why.name()
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Memory;

    const CONFIG: &str = "specs (\n  {\n    name demo\n    include (docs/spec.md)\n    impls (\n      {\n        name rust\n        include (crates/**/*.rs)\n        test_include (crates/*/tests/**/*.rs)\n      }\n    )\n  }\n)\n";

    const SPEC: &str = "# Demo\n\n> r[demo.alpha]\n> Alpha holds.\n";

    fn long_fn(name: &str, lines: usize) -> String {
        let body: String = (0..lines - 2)
            .map(|i| format!("    let _x{i} = {i};\n"))
            .collect();
        format!("fn {name}() {{\n{body}}}\n")
    }

    fn debt_of(lib: &str, extra: &[(&str, &str)]) -> Vec<Debt> {
        let mut files = vec![
            (".config/tracey/config.styx", CONFIG.to_owned()),
            ("docs/spec.md", SPEC.to_owned()),
            (
                "crates/demo/Cargo.toml",
                "[package]\nname = \"demo\"\nversion = \"0.1.0\"\n".to_owned(),
            ),
            ("crates/demo/src/lib.rs", lib.to_owned()),
        ];
        files.extend(extra.iter().map(|(p, t)| (*p, (*t).to_owned())));
        let memory = Memory::new(files);
        let Ok((_, tree)) = crate::spec_check::read(&memory) else {
            panic!("read");
        };
        debt(&memory, &tree)
    }

    fn items(debt: &[Debt]) -> Vec<(String, usize, Why)> {
        debt.iter()
            .map(|d| (d.item.clone(), d.size, d.why))
            .collect()
    }

    // i[verify spec-report.debt]
    #[test]
    fn uncovered_public_items_and_long_functions_are_debt_largest_first() {
        let lib = format!(
            "// r[impl demo.alpha]\npub fn alpha() {{}}\n\n/// Doc.\n#[derive(Debug)]\npub struct Open {{\n    x: u32,\n}}\n\npub(crate) fn private_short() {{}}\n\nfn private_short2() {{}}\n\n{}\n{}\n// r[impl demo.alpha]\n{}\n#[cfg(test)]\nmod tests {{\n    pub fn helper() {{}}\n{}}}\n",
            long_fn("long_one", LONG_FN),
            long_fn("almost", LONG_FN - 1),
            long_fn("long_covered", LONG_FN + 5),
            long_fn("long_test_helper", LONG_FN + 9),
        );
        let found = debt_of(&lib, &[]);
        assert_eq!(
            items(&found),
            [
                ("fn long_one".to_owned(), LONG_FN, Why::LongFn),
                ("struct Open".to_owned(), 5, Why::Public),
            ]
        );
        assert_eq!(found[0].krate, "demo");
        assert_eq!(found[1].file, "crates/demo/src/lib.rs");
        assert_eq!(found[1].line, 4);
        assert_eq!(per_crate(&found), [("demo".to_owned(), 2, LONG_FN + 5)]);
        assert!(
            top(&found, 1).contains("fn long_one (long-fn)"),
            "{}",
            top(&found, 1)
        );
    }

    // i[verify spec-report.debt]
    #[test]
    fn an_annotation_covers_its_item_its_inner_items_or_its_whole_file() {
        let lib = "// r[impl demo.alpha]\nimpl Open {\n    pub fn get(&self) {}\n}\n\npub mod inner {\n    pub fn loose() {}\n}\n\npub struct Open;\n";
        assert_eq!(
            items(&debt_of(lib, &[])),
            [
                ("fn loose".to_owned(), 1, Why::Public),
                ("struct Open".to_owned(), 1, Why::Public),
            ]
        );
        // At the file's head, before any item: the whole file.
        let headed = format!("//! The module.\n// r[impl demo.alpha]\n\nuse std::fmt;\n\n{lib}");
        assert_eq!(items(&debt_of(&headed, &[])), []);
        // Test files and files outside a src/ are not debt.
        let found = debt_of(
            "// r[impl demo.alpha]\npub fn alpha() {}\n\n#[cfg(test)]\nmod tests;\n",
            &[
                ("crates/demo/src/tests.rs", "pub fn unit_helper() {}\n"),
                ("crates/demo/tests/it.rs", "pub fn helper() {}\n"),
                ("crates/demo/benches/b.rs", "pub fn bench() {}\n"),
            ],
        );
        assert_eq!(items(&found), []);
    }

    // i[verify spec-report.debt]
    #[test]
    fn a_survivor_in_code_no_rule_covers_is_debt() {
        let lib = "// r[impl demo.alpha]\npub fn alpha() -> u32 {\n    1\n}\n\nfn helper() -> u32 {\n    2\n}\n";
        let missed = "crates/demo/src/lib.rs:7:5: replace helper -> u32 with 0\ncrates/demo/src/lib.rs:3:5: replace alpha -> u32 with 0\n";
        let found = debt_of(lib, &[("mutants.out/missed.txt", missed)]);
        assert_eq!(
            items(&found),
            [("replace helper -> u32 with 0".to_owned(), 3, Why::Survivor)]
        );
        assert_eq!(found[0].line, 7);
    }

    // i[verify spec-report.debt]
    #[test]
    fn a_methods_type_annotation_covers_it() {
        let lib = "// r[impl demo.alpha]\npub struct Open(pub u32);\n\nimpl Open {\n    pub fn get(&self) -> u32 {\n        self.0\n    }\n}\n";
        assert_eq!(items(&debt_of(lib, &[])), []);
    }

    // i[verify spec-report.debt]
    #[test]
    fn test_modules_in_inline_modules_or_at_a_path_are_not_debt() {
        let lib = "// r[impl demo.alpha]\npub fn alpha() {}\n\npub mod inner {\n    // r[impl demo.alpha]\n    pub fn covered() {}\n\n    #[cfg(test)]\n    mod tests;\n}\n\n#[cfg(test)]\n#[path = \"lib_tests.rs\"]\nmod tests;\n";
        let found = debt_of(
            lib,
            &[
                (
                    "crates/demo/src/inner/tests.rs",
                    "pub fn inner_helper() {}\n",
                ),
                ("crates/demo/src/lib_tests.rs", "pub fn lib_helper() {}\n"),
                ("crates/demo/src/tests.rs", "pub fn not_a_test() {}\n"),
            ],
        );
        // `src/tests.rs` is no test module here (the `tests` declared live elsewhere).
        assert_eq!(
            items(&found),
            [("fn not_a_test".to_owned(), 1, Why::Public)]
        );
    }

    // i[verify spec-report.debt]
    #[test]
    fn only_test_only_code_is_left_out_and_a_private_modules_items_are_not_public() {
        let lib = "#[cfg(any(test, feature = \"fake\"))]\npub fn fake() {}\n\n#[cfg(all(test, unix))]\npub fn unix_test() {}\n\nmod private {\n    pub fn hidden() {}\n}\n\npub mod open {\n    pub fn shown() {}\n}\n";
        assert_eq!(
            items(&debt_of(lib, &[])),
            [
                ("fn fake".to_owned(), 2, Why::Public),
                ("fn shown".to_owned(), 1, Why::Public),
            ]
        );
    }
}
