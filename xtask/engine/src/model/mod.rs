//! The traceability engine's shared model: the files and records that the spec gate
//! (`spec_check`), `trace`, `prove` and `spec-report` all read — where those files live
//! ([`paths`]), audit findings, recorded mutation proofs and their checked-in summary, and UTC
//! timestamps.
//!
//! A leaf: nothing here imports another module of this crate, so the engine's imports point one
//! way, `model` ← `spec_check` ← `trace` ← `spec_report` (the test below checks it); `prove`
//! (in xtask) sits on top of the engine crate and cannot be imported by it.

pub mod findings;
pub mod paths;
pub mod proof;
pub mod proof_summary;
pub mod timestamp;
pub mod tree;

#[cfg(test)]
// These tests read the engine's own sources from the disk.
#[allow(clippy::disallowed_methods)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::Path;

    /// The engine's modules (each `src/NAME.rs` or `src/NAME/`), leaf first.
    const ENGINE: [&str; 10] = [
        "model",
        "spec_check",
        "shapes",
        "trace",
        "spec_report",
        "review",
        "export",
        "ratchet",
        "gate",
        "sarif",
    ];

    /// Every `.rs` file of the engine module `name`, with its module path from the crate root
    /// (`spec_check/walk.rs` is `["spec_check", "walk"]`, `model/mod.rs` is `["model"]`).
    fn sources(name: &str) -> Vec<(Vec<String>, String)> {
        all_sources()
            .into_iter()
            .filter(|(file, _)| {
                file.starts_with(&format!("{name}/")) || *file == format!("{name}.rs")
            })
            .map(|(file, text)| {
                let mut path: Vec<String> = file
                    .trim_end_matches(".rs")
                    .split('/')
                    .map(str::to_owned)
                    .collect();
                if path.last().is_some_and(|last| last == "mod") {
                    path.pop();
                }
                (path, text)
            })
            .collect()
    }

    /// The top-level module of the crate each path `text` names from the crate's root — after
    /// `crate::`, or after a chain of `super::` and `self::` resolved from `here`, the module path
    /// of the file (and of each inline module in it): each `use` tree parsed with syn, grouped
    /// (`use crate::{trace::x, model}`), renamed or glob, at any depth of the file (fn bodies,
    /// inline modules); every other path in the code (`crate::X::f(..)`, `super::super::X`); and,
    /// since a doc link also needs the module it links to, every `crate::X` in the text.
    fn crate_modules(text: &str, here: &[String]) -> BTreeSet<String> {
        use syn::visit::Visit;

        struct Named {
            named: BTreeSet<String>,
            /// The module path of the code being visited.
            here: Vec<String>,
        }

        impl Named {
            /// Where `segment` leads from `at` (`None`: not yet anchored to the crate), naming
            /// the top-level module it reaches.
            fn step(&mut self, at: Option<&[String]>, segment: &syn::Ident) -> Option<Vec<String>> {
                let next = match at {
                    None if segment == "crate" => Vec::new(),
                    None if segment == "self" => self.here.clone(),
                    None if segment == "super" => {
                        self.here[..self.here.len().saturating_sub(1)].to_vec()
                    }
                    None => return None,
                    Some(at) if segment == "super" => at[..at.len().saturating_sub(1)].to_vec(),
                    Some(at) if segment == "self" => at.to_vec(),
                    Some(at) => {
                        let mut next = at.to_vec();
                        next.push(segment.to_string());
                        next
                    }
                };
                if let Some(top) = next.first() {
                    self.named.insert(top.clone());
                }
                Some(next)
            }

            fn tree(&mut self, tree: &syn::UseTree, at: Option<&[String]>) {
                match tree {
                    syn::UseTree::Path(path) => {
                        if let Some(next) = self.step(at, &path.ident) {
                            self.tree(&path.tree, Some(&next));
                        }
                    }
                    syn::UseTree::Name(syn::UseName { ident })
                    | syn::UseTree::Rename(syn::UseRename { ident, .. }) => {
                        if at.is_some() {
                            self.step(at, ident);
                        }
                    }
                    syn::UseTree::Glob(_) => {}
                    syn::UseTree::Group(group) => {
                        for item in &group.items {
                            self.tree(item, at);
                        }
                    }
                }
            }
        }

        impl<'ast> Visit<'ast> for Named {
            fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
                self.tree(&item.tree, None);
            }

            fn visit_item_mod(&mut self, module: &'ast syn::ItemMod) {
                self.here.push(module.ident.to_string());
                syn::visit::visit_item_mod(self, module);
                self.here.pop();
            }

            fn visit_path(&mut self, path: &'ast syn::Path) {
                let mut at: Option<Vec<String>> = None;
                for segment in &path.segments {
                    let anchored = at.is_some();
                    at = self.step(at.as_deref(), &segment.ident);
                    // Past the first named module the rest of the path adds nothing.
                    if at.is_none() || (anchored && segment.ident != "super") {
                        break;
                    }
                }
                syn::visit::visit_path(self, path);
            }
        }

        let file = syn::parse_file(text).expect("an engine source parses");
        let mut named = Named {
            named: BTreeSet::new(),
            here: here.to_vec(),
        };
        named.visit_file(&file);
        // Doc comments and links: `crate::X` followed by a character that ends an identifier.
        for (at, _) in text.match_indices("crate::") {
            let rest = &text[at + "crate::".len()..];
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            if end > 0 {
                named.named.insert(rest[..end].to_owned());
            }
        }
        named.named
    }

    /// Which engine modules each engine module names (code, docs and all).
    fn imports() -> BTreeMap<&'static str, BTreeSet<&'static str>> {
        ENGINE
            .iter()
            .map(|&module| {
                let texts = sources(module);
                assert!(!texts.is_empty(), "no sources for module {module}");
                let named: BTreeSet<String> = texts
                    .iter()
                    .flat_map(|(here, text)| crate_modules(text, here))
                    .collect();
                let named = ENGINE
                    .iter()
                    .copied()
                    .filter(|&other| other != module && named.contains(other))
                    .collect();
                (module, named)
            })
            .collect()
    }

    /// A grouped import names its modules without spelling `crate::` before each: the old textual check
    /// missed it.
    // i[verify xtask.layout.engine]
    #[test]
    fn grouped_nested_and_renamed_imports_name_their_modules() {
        // Spelt `CRATE` here so that this module's own text names none of them.
        let text = "\
use CRATE::{model::paths, trace::{self, rule_report}};
use CRATE::spec_report as report;

fn f() {
    use CRATE::{spec_check};
    let _ = CRATE::model::paths::DEFAULT_PROOF;
}
"
        .replace("CRATE", "crate");
        let named = crate_modules(&text, &[]);
        assert_eq!(
            named,
            ["model", "spec_check", "spec_report", "trace"]
                .map(str::to_owned)
                .into()
        );
        assert!(
            !text.contains(&format!("{}::trace", "crate")),
            "the text never spells it"
        );
    }

    /// A chain of `super::` (or `self::`) reaches a module from the file's place: the old test
    /// followed only `crate::`, so `use super::super::trace::..` in `spec_check/walk.rs` made a
    /// cycle it did not see.
    // i[verify xtask.layout.engine]
    #[test]
    fn super_chains_name_the_module_they_reach() {
        let text = "\
use super::super::trace::rule_trace as _cycle;
use super::{super::spec_report, sibling};
use self::inner::f;

mod inner {
    pub fn f() {
        let _ = super::super::super::model::paths::DEFAULT_PROOF;
    }
}
";
        let here = ["spec_check".to_owned(), "walk".to_owned()];
        assert_eq!(
            crate_modules(text, &here),
            ["model", "spec_check", "spec_report", "trace"]
                .map(str::to_owned)
                .into()
        );
        // From a top-level module's own file (`trace/mod.rs`), one `super` is the crate root.
        let text = "use super::model::paths;\nfn f() { super::spec_check::check(); }\n";
        assert_eq!(
            crate_modules(text, &["trace".to_owned()]),
            ["model", "spec_check"].map(str::to_owned).into()
        );
    }

    /// Every `.rs` file under `src`, with its path relative to `src`.
    fn all_sources() -> Vec<(String, String)> {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut out = Vec::new();
        let mut dirs = vec![src.clone()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).expect("read dir").flatten() {
                let path = entry.path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    let relative = path.strip_prefix(&src).expect("under src");
                    let text = std::fs::read_to_string(&path).expect("read source");
                    out.push((relative.display().to_string(), text));
                }
            }
        }
        out
    }

    /// Whether `attrs` hold `#[cfg(test)]` (or a `cfg` naming `test` among others).
    fn is_cfg_test(attrs: &[syn::Attribute]) -> bool {
        attrs.iter().any(|attr| {
            attr.path().is_ident("cfg")
                && attr.meta.require_list().is_ok_and(|list| {
                    list.tokens
                        .clone()
                        .into_iter()
                        .any(|token| token.to_string() == "test")
                })
        })
    }

    /// The attributes of an item, for the kinds that can carry `#[cfg(test)]`.
    fn item_attrs(item: &syn::Item) -> &[syn::Attribute] {
        match item {
            syn::Item::Const(i) => &i.attrs,
            syn::Item::Enum(i) => &i.attrs,
            syn::Item::Fn(i) => &i.attrs,
            syn::Item::Impl(i) => &i.attrs,
            syn::Item::Macro(i) => &i.attrs,
            syn::Item::Mod(i) => &i.attrs,
            syn::Item::Static(i) => &i.attrs,
            syn::Item::Struct(i) => &i.attrs,
            syn::Item::Trait(i) => &i.attrs,
            syn::Item::Type(i) => &i.attrs,
            syn::Item::Use(i) => &i.attrs,
            _ => &[],
        }
    }

    /// What in `text`, outside its `#[cfg(test)]` items, touches the file system: a path into
    /// `std::fs` or `ignore` (in a `use` tree or in the code), a `Path` method that asks the
    /// disk (called without arguments, unlike the `Tree` trait's), or an `allow`/`expect` of
    /// the clippy lints that ban them. Parsed with syn, so comments and strings do not count.
    fn touching(text: &str) -> Vec<String> {
        use syn::visit::Visit;

        const METHODS: [&str; 10] = [
            "exists",
            "try_exists",
            "is_file",
            "is_dir",
            "is_symlink",
            "metadata",
            "symlink_metadata",
            "canonicalize",
            "read_dir",
            "read_link",
        ];

        fn banned(path: &[String]) -> bool {
            matches!(path, [std, fs, ..] if std == "std" && fs == "fs")
                || matches!(path, [ignore, ..] if ignore == "ignore")
        }

        #[derive(Default)]
        struct Scan(Vec<String>);

        impl Scan {
            fn tree(&mut self, tree: &syn::UseTree, prefix: &mut Vec<String>) {
                match tree {
                    syn::UseTree::Path(path) => {
                        prefix.push(path.ident.to_string());
                        self.tree(&path.tree, prefix);
                        prefix.pop();
                    }
                    syn::UseTree::Group(group) => {
                        for item in &group.items {
                            self.tree(item, prefix);
                        }
                    }
                    syn::UseTree::Name(syn::UseName { ident })
                    | syn::UseTree::Rename(syn::UseRename { ident, .. }) => {
                        prefix.push(ident.to_string());
                        if banned(prefix) {
                            self.0.push(prefix.join("::"));
                        }
                        prefix.pop();
                    }
                    syn::UseTree::Glob(_) => {
                        if banned(prefix) {
                            self.0.push(format!("{}::*", prefix.join("::")));
                        }
                    }
                }
            }
        }

        impl<'ast> Visit<'ast> for Scan {
            fn visit_item(&mut self, item: &'ast syn::Item) {
                if !is_cfg_test(item_attrs(item)) {
                    syn::visit::visit_item(self, item);
                }
            }

            fn visit_impl_item_fn(&mut self, item: &'ast syn::ImplItemFn) {
                if !is_cfg_test(&item.attrs) {
                    syn::visit::visit_impl_item_fn(self, item);
                }
            }

            fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
                self.tree(&item.tree, &mut Vec::new());
            }

            fn visit_path(&mut self, path: &'ast syn::Path) {
                let segments: Vec<String> =
                    path.segments.iter().map(|s| s.ident.to_string()).collect();
                if banned(&segments) {
                    self.0.push(segments.join("::"));
                }
                syn::visit::visit_path(self, path);
            }

            fn visit_expr_method_call(&mut self, call: &'ast syn::ExprMethodCall) {
                let method = call.method.to_string();
                if call.args.is_empty() && METHODS.contains(&method.as_str()) {
                    self.0.push(format!(".{method}()"));
                }
                syn::visit::visit_expr_method_call(self, call);
            }

            fn visit_attribute(&mut self, attr: &'ast syn::Attribute) {
                let lint = attr.path().is_ident("allow") || attr.path().is_ident("expect");
                if let (true, Ok(list)) = (lint, attr.meta.require_list()) {
                    let tokens = list.tokens.to_string().replace(' ', "");
                    if tokens.contains("clippy::disallowed_") {
                        let name = attr.path().get_ident().map(ToString::to_string);
                        self.0
                            .push(format!("{}({tokens})", name.unwrap_or_default()));
                    }
                }
                syn::visit::visit_attribute(self, attr);
            }
        }

        let file = syn::parse_file(text).expect("an engine source parses");
        let mut scan = Scan::default();
        scan.visit_file(&file);
        scan.0
    }

    /// The files of test-only modules (`#[cfg(test)] mod x;`) that `text`, the file at
    /// `relative` under `src`, declares.
    fn test_only_modules(relative: &str, text: &str) -> Vec<String> {
        let dir = match relative.rsplit_once('/') {
            Some((dir, "mod.rs")) => format!("{dir}/"),
            None if relative == "lib.rs" || relative == "mod.rs" => String::new(),
            _ => format!("{}/", relative.trim_end_matches(".rs")),
        };
        let file = syn::parse_file(text).expect("an engine source parses");
        file.items
            .iter()
            .filter_map(|item| match item {
                syn::Item::Mod(module)
                    if module.content.is_none() && is_cfg_test(&module.attrs) =>
                {
                    Some(format!("{dir}{}.rs", module.ident))
                }
                _ => None,
            })
            .collect()
    }

    /// The scan reads the whole file as Rust: a doc comment naming `#[cfg(test)]` does not end
    /// it, a grouped `use` and a call on a path are seen, and only `#[cfg(test)]` items are
    /// skipped (the old textual scan stopped at the first mention).
    // i[verify xtask.layout.engine.tree]
    #[test]
    fn the_file_system_scan_reads_past_a_mention_of_cfg_test() {
        let text = "\
//! Its tests are under #[cfg(test)].
use std::{fs::File, path::Path};

fn f(p: &Path) -> bool {
    File::open(p).is_ok() || p.try_exists().is_ok() || p.read_dir().is_ok()
}

fn g(tree: &dyn Tree, p: &Path) -> bool {
    tree.exists(p) || tree.is_file(p)
}

#[allow(clippy::disallowed_methods)]
fn h() {}

#[cfg(test)]
mod tests {
    fn t() {
        let _ = std::fs::read(\"x\");
    }
}
";
        assert_eq!(
            touching(text),
            [
                "std::fs::File",
                ".try_exists()",
                ".read_dir()",
                "allow(clippy::disallowed_methods)",
            ]
            .map(str::to_owned)
        );
    }

    /// Outside its tests, only the disk tree (`model/tree.rs`) reads the file system: every other
    /// part reads through the `Tree` trait, so a memory tree is read exactly as the disk is.
    /// clippy enforces it with `xtask/engine/clippy.toml`; this scan holds without clippy, and
    /// checks that nothing else allows those lints.
    // i[verify xtask.layout.engine.tree]
    #[test]
    fn only_the_disk_tree_touches_the_file_system() {
        let sources = all_sources();
        let test_only: Vec<String> = sources
            .iter()
            .flat_map(|(file, text)| test_only_modules(file, text))
            .collect();
        assert!(test_only.contains(&"tests.rs".to_owned()), "{test_only:?}");
        let mut touches = Vec::new();
        for (file, text) in sources {
            if file == "model/tree.rs" || test_only.contains(&file) {
                continue;
            }
            touches.extend(touching(&text).into_iter().map(|t| format!("{file}: {t}")));
        }
        assert_eq!(touches, Vec::<String>::new());
        let clippy = include_str!("../../clippy.toml");
        for banned in [
            "\"std::fs::read_to_string\"",
            "\"std::fs::File\"",
            "\"std::path::Path::exists\"",
            "\"std::path::Path::canonicalize\"",
            "\"ignore::WalkBuilder\"",
        ] {
            assert!(clippy.contains(banned), "clippy.toml bans {banned}");
        }
    }

    /// Issue 32 splits the engine into crates; crates cannot import each other in a circle, so
    /// neither may these modules: the model imports none of them, and no chain of imports leads
    /// from a module back to itself.
    // i[verify xtask.layout.engine]
    #[test]
    fn the_engines_modules_import_each_other_one_way() {
        let imports = imports();
        assert_eq!(imports["model"], BTreeSet::new(), "the model is a leaf");
        // Each module may only import modules listed before it in ENGINE (a topological order);
        // failing that, name the cycle's edge.
        for (rank, module) in ENGINE.iter().enumerate() {
            for imported in &imports[module] {
                let imported_rank = ENGINE.iter().position(|m| m == imported).unwrap_or(0);
                assert!(
                    imported_rank < rank,
                    "{module} imports {imported}, which does not come before it: {imports:?}"
                );
            }
        }
        // The order is not vacuous: these edges exist.
        assert!(imports["trace"].contains("spec_check"));
        assert!(imports["spec_report"].contains("trace"));
        // The review compares two read trees: the README says it imports only these two, and
        // its place last in ENGINE alone would allow anything.
        assert_eq!(
            imports["review"],
            BTreeSet::from(["model", "spec_check"]),
            "{imports:?}"
        );
    }
}
