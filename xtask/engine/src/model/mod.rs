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

    /// Which engine modules each engine module names as `crate::OTHER` (code, docs and all).
    fn imports() -> BTreeMap<&'static str, BTreeSet<&'static str>> {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        ENGINE
            .iter()
            .map(|&module| {
                let texts = sources(&src, module);
                assert!(!texts.is_empty(), "no sources for module {module}");
                let named = ENGINE
                    .iter()
                    .copied()
                    .filter(|&other| other != module)
                    .filter(|other| {
                        let path = format!("crate::{other}");
                        texts.iter().any(|text| {
                            text.match_indices(&path).any(|(at, _)| {
                                // The whole module name, not a prefix of a longer one.
                                text[at + path.len()..]
                                    .chars()
                                    .next()
                                    .is_none_or(|c| !(c.is_alphanumeric() || c == '_'))
                            })
                        })
                    })
                    .collect();
                (module, named)
            })
            .collect()
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
