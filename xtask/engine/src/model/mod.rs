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
mod tests {
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::Path;

    /// The engine's modules (each `src/NAME.rs` or `src/NAME/`), leaf first.
    const ENGINE: [&str; 4] = ["model", "spec_check", "trace", "spec_report"];

    /// Every `.rs` file of module `name` under `src`.
    fn sources(src: &Path, name: &str) -> Vec<String> {
        fn walk(dir: &Path, out: &mut Vec<String>) {
            for entry in std::fs::read_dir(dir).expect("read dir").flatten() {
                let path = entry.path();
                if path.is_dir() {
                    walk(&path, out);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    out.push(std::fs::read_to_string(&path).expect("read source"));
                }
            }
        }
        let mut out = Vec::new();
        let dir = src.join(name);
        if dir.is_dir() {
            walk(&dir, &mut out);
        }
        if let Ok(text) = std::fs::read_to_string(src.join(format!("{name}.rs"))) {
            out.push(text);
        }
        out
    }

    /// The first segment after `crate::` of every path `text` names: each `use` tree parsed with
    /// syn, grouped (`use crate::{trace::x, model}`), renamed or glob, at any depth of the file
    /// (fn bodies, inline modules); every other path in the code (`crate::X::f(..)`); and, since a
    /// doc link also needs the module it links to, every `crate::X` in the text.
    fn crate_modules(text: &str) -> BTreeSet<String> {
        use syn::visit::Visit;

        #[derive(Default)]
        struct Named(BTreeSet<String>);

        impl Named {
            fn tree(&mut self, tree: &syn::UseTree, in_crate: bool) {
                match tree {
                    syn::UseTree::Path(path) if !in_crate && path.ident == "crate" => {
                        self.tree(&path.tree, true);
                    }
                    syn::UseTree::Path(path) if in_crate => {
                        self.0.insert(path.ident.to_string());
                    }
                    syn::UseTree::Name(name) if in_crate => {
                        self.0.insert(name.ident.to_string());
                    }
                    syn::UseTree::Rename(rename) if in_crate => {
                        self.0.insert(rename.ident.to_string());
                    }
                    syn::UseTree::Group(group) => {
                        for item in &group.items {
                            self.tree(item, in_crate);
                        }
                    }
                    _ => {}
                }
            }
        }

        impl<'ast> Visit<'ast> for Named {
            fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
                self.tree(&item.tree, false);
            }

            fn visit_path(&mut self, path: &'ast syn::Path) {
                let mut segments = path.segments.iter();
                if segments.next().is_some_and(|s| s.ident == "crate")
                    && let Some(module) = segments.next()
                {
                    self.0.insert(module.ident.to_string());
                }
                syn::visit::visit_path(self, path);
            }
        }

        let file = syn::parse_file(text).expect("an engine source parses");
        let mut named = Named::default();
        named.visit_file(&file);
        // Doc comments and links: `crate::X` followed by a character that ends an identifier.
        for (at, _) in text.match_indices("crate::") {
            let rest = &text[at + "crate::".len()..];
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            if end > 0 {
                named.0.insert(rest[..end].to_owned());
            }
        }
        named.0
    }

    /// Which engine modules each engine module names (code, docs and all).
    fn imports() -> BTreeMap<&'static str, BTreeSet<&'static str>> {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        ENGINE
            .iter()
            .map(|&module| {
                let texts = sources(&src, module);
                assert!(!texts.is_empty(), "no sources for module {module}");
                let named: BTreeSet<String> =
                    texts.iter().flat_map(|text| crate_modules(text)).collect();
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
        let named = crate_modules(&text);
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

    /// Outside its tests, only the disk tree (`model/tree.rs`) reads the file system: every other
    /// part reads through the `Tree` trait, so a memory tree is read exactly as the disk is.
    // i[verify xtask.layout.engine.tree]
    #[test]
    fn only_the_disk_tree_touches_the_file_system() {
        let mut touching = Vec::new();
        for (file, text) in all_sources() {
            if file == "model/tree.rs" || file == "tests.rs" {
                continue;
            }
            let code = text.split("#[cfg(test)]").next().unwrap_or_default();
            for needle in [
                "std::fs",
                "fs::read",
                "ignore::Walk",
                ".canonicalize()",
                ".metadata(",
                ".exists()",
                ".is_file()",
                ".is_dir()",
            ] {
                if code.contains(needle) {
                    touching.push(format!("{file}: {needle}"));
                }
            }
        }
        assert_eq!(touching, Vec::<String>::new());
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
    }
}
