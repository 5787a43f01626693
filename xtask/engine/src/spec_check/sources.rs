//! Scans an impl's sources for references as tracey-core's lexer finds them (tree-sitter, comments
//! only — the extraction tracey 1.3.0 itself runs; a Rust file's from the one parse that also gives
//! its code units, [`super::rust_read`]), over the same files tracey scans: `include` plus
//! `test_include`, minus `exclude`. Each file is parsed once even when several specs include it,
//! on a thread pool with deep stacks (the results are kept in path order), or not at all when the
//! read cache holds what an earlier run found in the same bytes ([`super::read_cache`]).

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use tracey_config::Impl;
use tracey_core::{ReqReference, Reqs, is_supported_extension};

use super::crate_layout::{self, TestTarget};
use super::problem::{Kind, Problem};
use super::read_cache::{self, Read};
use super::rust_layout::RustLayout;
use super::rust_read;
use super::walk::{self, Keep, TestMatcher};
use crate::model::tree::Tree;

/// One scanned source file.
pub struct ParsedFile {
    /// Path relative to the root, `/`-separated.
    pub relative: String,
    /// The file's text.
    pub content: String,
    /// Every reference in the file's comments.
    pub refs: Vec<ReqReference>,
    /// Structure of a Rust file (test code, functions, modules).
    pub layout: Option<RustLayout>,
    /// Its test binary and module path, once asked ([`ParsedFiles::locate`]).
    target: OnceLock<Option<TestTarget>>,
}

/// All files parsed so far, by canonical path: hashed, since the gate, the trace and the report
/// look a file up per annotation (a path-ordered map compares paths component by component at
/// every step of a search), and listed in path order.
#[derive(Default)]
pub struct ParsedFiles {
    /// Parsed files by canonical path.
    files: HashMap<PathBuf, ParsedFile>,
    /// The same paths, in order.
    order: BTreeSet<PathBuf>,
}

impl ParsedFiles {
    /// The file parsed at canonical `path`.
    pub fn get(&self, path: &Path) -> Option<&ParsedFile> {
        self.files.get(path)
    }

    /// Every parsed file with its canonical path, in path order.
    pub fn iter(&self) -> impl Iterator<Item = (&Path, &ParsedFile)> {
        self.order
            .iter()
            .filter_map(|path| Some((path.as_path(), self.files.get(path)?)))
    }

    /// Every parsed file, in path order.
    pub fn values(&self) -> impl Iterator<Item = &ParsedFile> {
        self.iter().map(|(_, file)| file)
    }

    /// The test binary and module path of the file at `path` ([`crate_layout::locate`] in
    /// `tree`, the tree the files were read from): worked out once per parsed file, since every
    /// `verify` site in it asks.
    pub fn locate(&self, tree: &dyn Tree, path: &Path) -> Option<TestTarget> {
        match self.files.get(path) {
            Some(file) => file
                .target
                .get_or_init(|| crate_layout::locate(tree, path))
                .clone(),
            None => crate_layout::locate(tree, path),
        }
    }

    /// How many files were parsed.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// Whether no file was parsed.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// Adds `parsed` files; a path already there keeps its first file.
    fn extend(&mut self, parsed: Vec<(PathBuf, ParsedFile)>) {
        let mut paths = Vec::with_capacity(parsed.len());
        for (path, file) in parsed {
            if let std::collections::hash_map::Entry::Vacant(entry) = self.files.entry(path) {
                paths.push(entry.key().clone());
                entry.insert(file);
            }
        }
        // The first impl's files, in path order, are built into the set at once (a comparison
        // per path) rather than inserted one by one (a search of the set per path).
        if self.order.is_empty() {
            self.order = paths.into_iter().collect();
        } else {
            self.order.extend(paths);
        }
    }
}

/// The files one impl covers.
pub struct Scanned {
    /// Every file scanned for this impl (include ∪ test_include, minus exclude).
    pub files: BTreeSet<PathBuf>,
    /// Those among them that match `test_include`: tracey's notion of a test file.
    pub test_files: BTreeSet<PathBuf>,
    /// Files the config includes that cannot be scanned.
    pub problems: Vec<Problem>,
    /// Patterns that select nothing.
    pub notes: Vec<String>,
}

/// The files one impl covers, before any is read.
pub struct Selected {
    /// include ∪ test_include, minus exclude.
    files: BTreeSet<PathBuf>,
    /// Patterns that select nothing.
    notes: Vec<String>,
}

/// Selects `implementation`'s files in `tree` (a walk of the file system, no file read).
pub fn select(tree: &dyn Tree, implementation: &Impl) -> Selected {
    let include = if implementation.include.is_empty() {
        vec!["**/*.rs".to_owned()]
    } else {
        implementation.include.clone()
    };
    let mut notes = Vec::new();
    let mut files = BTreeSet::new();
    for patterns in [&include, &implementation.test_include] {
        if patterns.is_empty() {
            continue;
        }
        let selection = walk::select(tree, patterns, &implementation.exclude, Keep::All);
        notes.extend(
            selection
                .notes
                .into_iter()
                .map(|n| format!("impl `{}`: {n}", implementation.name)),
        );
        // The first selection is taken whole rather than inserted one path at a time.
        if files.is_empty() {
            files = selection.files;
        } else {
            files.extend(selection.files);
        }
    }
    Selected { files, notes }
}

/// Scans `implementation`'s `selected` files in `tree`, parsing new ones into `parsed`.
pub fn scan(
    tree: &dyn Tree,
    implementation: &Impl,
    selected: Selected,
    parsed: &mut ParsedFiles,
) -> Scanned {
    let root = tree.root();
    let Selected { files, notes } = selected;
    let tests = TestMatcher::new(&implementation.test_include);
    let mut test_files = BTreeSet::new();
    let mut fresh = Vec::new();
    for path in &files {
        let relative = walk::relative(root, path);
        if tests.is_match(Path::new(&relative)) {
            test_files.insert(path.clone());
        }
        if parsed.get(path).is_none() {
            fresh.push((path, relative));
        }
    }
    // Parsing (tree-sitter, once per file) is most of a run's time and each file's is its
    // own: the files are parsed on a thread pool, and the results kept in path order.
    let read: Vec<(&PathBuf, Result<ParsedFile, Problem>)> =
        super::pool::map(fresh, |(path, relative)| {
            (path, parse(tree, path, relative))
        });
    let mut problems = Vec::new();
    let mut new_files = Vec::with_capacity(read.len());
    for (path, file) in read {
        match file {
            Ok(file) => new_files.push((path.clone(), file)),
            Err(problem) => problems.push(problem),
        }
    }
    parsed.extend(new_files);
    Scanned {
        files,
        test_files,
        problems,
        notes,
    }
}

/// Reads and parses the file at `path` (`relative` to the root): its references, and the layout
/// of a Rust file.
fn parse(tree: &dyn Tree, path: &Path, relative: String) -> Result<ParsedFile, Problem> {
    if !path.extension().is_some_and(is_supported_extension) {
        return Err(Problem::new(
            Kind::Unscannable,
            "the config includes this file but tracey cannot scan its type; narrow the include \
             patterns",
        )
        .in_file(&relative));
    }
    let content = tree.read(path).map_err(|err| {
        Problem::new(Kind::Unscannable, format!("cannot read: {err}")).in_file(&relative)
    })?;
    // A file unchanged since a run that cached it is not parsed again.
    let Read { refs, layout } = match read_cache::process() {
        Some(cache) => cache.read(path, &content, || read_file(path, &content)).0,
        None => read_file(path, &content),
    };
    Ok(ParsedFile {
        relative,
        content,
        refs,
        layout,
        target: OnceLock::new(),
    })
}

/// What reading `content` (the file at `path`) finds: its references, and the layout of a Rust
/// file. A Rust file is parsed once for both ([`rust_read`]); another language's references come
/// from tracey-core's own parse.
pub(crate) fn read_file(path: &Path, content: &str) -> Read {
    if path.extension().is_some_and(|e| e == "rs") {
        let read = rust_read::read(path, content);
        return Read {
            refs: read.refs,
            layout: Some(RustLayout::from_units(content, read.units)),
        };
    }
    Read {
        refs: Reqs::extract_from_content(path, content).references,
        layout: None,
    }
}

impl ParsedFile {
    /// Whether `line` is inside a `#[cfg(test)]` item of this (Rust) file.
    pub fn in_cfg_test_item(&self, line: usize) -> bool {
        self.layout.as_ref().is_some_and(|l| l.in_cfg_test(line))
    }
}

/// Whether a parent module file declares `path` with `#[cfg(test)] mod name;`, or `path` is a
/// module of a file that is itself test code that way; the parsed files are looked up by `file`
/// (such as [`ParsedFiles::get`]).
pub(crate) fn declared_as_test_module<'a>(
    path: &Path,
    file: &dyn Fn(&Path) -> Option<&'a ParsedFile>,
) -> bool {
    let Some(stem) = path.file_stem().and_then(|s| s.to_str()) else {
        return false;
    };
    let Some(dir) = path.parent() else {
        return false;
    };
    if stem == "lib" || stem == "main" {
        return false; // crate roots have no parent module
    }
    // `d/name.rs` and `d/name/mod.rs` are declared by `d/mod.rs`, `d/lib.rs`, `d/main.rs` or
    // `d.rs` next to `d`. Every candidate lies higher up, so the recursion ends.
    let (name, module_dir) = if stem == "mod" {
        match (dir.file_name().and_then(|n| n.to_str()), dir.parent()) {
            (Some(name), Some(parent_dir)) => (name, parent_dir),
            _ => return false,
        }
    } else {
        (stem, dir)
    };
    let mut parents = vec![
        module_dir.join("mod.rs"),
        module_dir.join("lib.rs"),
        module_dir.join("main.rs"),
    ];
    if let (Some(up), Some(dir_name)) = (module_dir.parent(), module_dir.file_name()) {
        parents.push(up.join(format!("{}.rs", dir_name.to_string_lossy())));
    }
    parents.iter().any(|parent| {
        let Some(parsed) = file(parent) else {
            return false;
        };
        parsed
            .layout
            .as_ref()
            .is_some_and(|l| l.test_child_modules().iter().any(|m| m == name))
            || declared_as_test_module(parent, file)
    })
}
