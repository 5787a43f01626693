//! Which test binary a source file is compiled into, and at which module path — so a function can
//! be found among nextest's JUnit test cases (`<testsuite name="BINARY-ID">` with
//! `<testcase name="module::path::fn">`). nextest names binaries `PACKAGE` (library unit tests),
//! `PACKAGE::bin/NAME` (a binary's unit tests), `PACKAGE::NAME` (`tests/NAME.rs`) and
//! `PACKAGE::bench/NAME`. Cargo's conventional layout is assumed; files it cannot place (shared
//! `tests/common/mod.rs`, `#[path]` modules) fall back to matching by function name.

use std::path::{Component, Path};

use crate::model::tree::Tree;

/// A test binary and the module path of a file inside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestTarget {
    /// The package that owns the file.
    pub package: String,
    /// nextest's binary id, the JUnit `testsuite` name.
    pub suite: String,
    /// Module path of the file inside the binary (empty for the crate root).
    pub modules: Vec<String>,
}

/// The package whose manifest is the nearest above `path` (stopping at the tree's root), and its
/// directory.
pub fn package_of<'a>(tree: &dyn Tree, path: &'a Path) -> Option<(String, &'a Path)> {
    let root = tree.root();
    for dir in path.ancestors().skip(1) {
        if let Some(name) = package_name(tree, &dir.join("Cargo.toml")) {
            return Some((name, dir));
        }
        if dir == root {
            break;
        }
    }
    None
}

/// Places `path` in its test binary, if cargo's conventional layout says where.
pub fn locate(tree: &dyn Tree, path: &Path) -> Option<TestTarget> {
    let (package, dir) = package_of(tree, path)?;
    let parts: Vec<String> = path
        .strip_prefix(dir)
        .ok()?
        .components()
        .filter_map(|c| match c {
            Component::Normal(part) => Some(part.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect();
    let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
    let target = |suite: String, modules: &[&str]| TestTarget {
        package: package.clone(),
        suite,
        modules: module_path(modules),
    };
    match parts.as_slice() {
        ["src", "lib.rs"] => Some(target(package.clone(), &[])),
        ["src", "main.rs"] => Some(target(format!("{package}::bin/{package}"), &[])),
        ["src", "bin", file] => Some(target(format!("{package}::bin/{}", stem(file)), &[])),
        ["src", "bin", name, rest @ ..] => Some(target(format!("{package}::bin/{name}"), rest)),
        ["src", rest @ ..] => {
            let suite = if tree.is_file(&dir.join("src/lib.rs")) {
                package.clone()
            } else {
                format!("{package}::bin/{package}")
            };
            Some(target(suite, rest))
        }
        ["tests", file] => Some(target(format!("{package}::{}", stem(file)), &[])),
        ["tests", name, rest @ ..]
            if tree.is_file(&dir.join("tests").join(name).join("main.rs")) =>
        {
            Some(target(format!("{package}::{name}"), rest))
        }
        ["benches", file] => Some(target(format!("{package}::bench/{}", stem(file)), &[])),
        _ => None,
    }
}

/// The executable name (without cargo's hash) of a nextest binary id, as the skip ledger records
/// it: `holdfast_pull` for `holdfast-pull`, `smoke` for `holdfast-pull::smoke`.
pub fn executable_of_suite(suite: &str) -> String {
    let name = match suite.split_once("::") {
        Some((_, binary)) => binary
            .strip_prefix("bin/")
            .or_else(|| binary.strip_prefix("bench/"))
            .unwrap_or(binary),
        None => suite,
    };
    normalize_executable(name)
}

/// Cargo writes test executables with `-` replaced by `_`; compare names that way.
pub fn normalize_executable(name: &str) -> String {
    name.replace('-', "_")
}

fn stem(file: &str) -> &str {
    file.strip_suffix(".rs").unwrap_or(file)
}

/// `["a", "b.rs"]` → `a::b`; `["a", "mod.rs"]` → `a`; `["main.rs"]` → crate root.
fn module_path(parts: &[&str]) -> Vec<String> {
    let mut modules: Vec<String> = parts.iter().map(|p| stem(p).to_owned()).collect();
    if matches!(
        modules.last().map(String::as_str),
        Some("mod" | "main" | "lib")
    ) {
        modules.pop();
    }
    modules
}

/// `name` from the `[package]` table of a manifest, read line by line (a workspace-only manifest
/// has none).
fn package_name(tree: &dyn Tree, manifest: &Path) -> Option<String> {
    // Asked once per source file and per test site: remember each manifest's answer.
    static SEEN: std::sync::OnceLock<
        std::sync::Mutex<std::collections::HashMap<std::path::PathBuf, Option<String>>>,
    > = std::sync::OnceLock::new();
    let seen = SEEN.get_or_init(Default::default);
    if let Some(known) = seen.lock().ok().and_then(|m| m.get(manifest).cloned()) {
        return known;
    }
    let name = read_package_name(tree, manifest);
    if let Ok(mut map) = seen.lock() {
        map.insert(manifest.to_path_buf(), name.clone());
    }
    name
}

fn read_package_name(tree: &dyn Tree, manifest: &Path) -> Option<String> {
    let text = tree.read(manifest).ok()?;
    let mut in_package = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_package = line == "[package]";
            continue;
        }
        if !in_package {
            continue;
        }
        if let Some((key, value)) = line.split_once('=')
            && key.trim() == "name"
        {
            return Some(value.trim().trim_matches('"').to_owned());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tree::Memory;

    /// A workspace of one package, `holdfast-pull`, with a library, plus `extra` files.
    fn workspace(extra: &[&str]) -> Memory {
        let mut tree = Memory::new([
            ("Cargo.toml", "[workspace]\nmembers = [\"crates/*\"]\n"),
            (
                "crates/pull/Cargo.toml",
                "[package]\nname = \"holdfast-pull\"\nversion = \"0.1.0\"\n\n[dependencies]\nname = \"x\"\n",
            ),
            ("crates/pull/src/lib.rs", ""),
        ]);
        for file in extra {
            tree.insert(file, "");
        }
        tree
    }

    fn place(tree: &Memory, file: &str) -> Option<(String, String)> {
        let path = tree.root().join(file);
        locate(tree, &path).map(|t| (t.suite, t.modules.join("::")))
    }

    // i[verify spec-check.test-backed]
    #[test]
    fn files_map_to_nextest_binary_ids_and_module_paths() {
        let root = &workspace(&[]);
        let cases = [
            ("crates/pull/src/lib.rs", Some(("holdfast-pull", ""))),
            (
                "crates/pull/src/actuate/retry.rs",
                Some(("holdfast-pull", "actuate::retry")),
            ),
            (
                "crates/pull/src/actuate/mod.rs",
                Some(("holdfast-pull", "actuate")),
            ),
            (
                "crates/pull/src/bin/tool.rs",
                Some(("holdfast-pull::bin/tool", "")),
            ),
            (
                "crates/pull/tests/smoke.rs",
                Some(("holdfast-pull::smoke", "")),
            ),
            (
                "crates/pull/benches/speed.rs",
                Some(("holdfast-pull::bench/speed", "")),
            ),
            ("crates/pull/tests/common/mod.rs", None),
        ];
        for (file, expected) in cases {
            let expected = expected.map(|(s, m)| (s.to_owned(), m.to_owned()));
            assert_eq!(place(root, file), expected, "{file}");
        }
        assert_eq!(place(root, "crates/pull/tests/multi/part.rs"), None);
        let root = &workspace(&["crates/pull/tests/multi/main.rs"]);
        assert_eq!(
            place(root, "crates/pull/tests/multi/part.rs"),
            Some(("holdfast-pull::multi".to_owned(), "part".to_owned()))
        );
    }

    #[test]
    fn suites_map_to_the_executables_the_skip_ledger_names() {
        assert_eq!(executable_of_suite("holdfast-pull"), "holdfast_pull");
        assert_eq!(executable_of_suite("holdfast-pull::smoke"), "smoke");
        assert_eq!(executable_of_suite("holdfast::bin/holdfast"), "holdfast");
    }
}
