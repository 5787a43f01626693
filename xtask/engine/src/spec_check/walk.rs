//! Turns the config's glob patterns into file lists the way tracey 1.3.0 does, so both see the same
//! files: each pattern is split at its first `**` (else its first `*`) into a directory to walk and
//! a glob matched relative to it; the walk follows symlinks, includes hidden files and honours
//! `.gitignore`. A pattern whose directory part does not exist selects nothing (tracey only warns;
//! the gate reports a note). Matching a path against `test_include` is a plain glob match on the
//! root-relative path, as tracey does when it decides which files are test files.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use globset::{Glob, GlobMatcher};

use crate::model::tree::Tree;

struct ScanRoot {
    dir: PathBuf,
    matcher: GlobMatcher,
}

/// Files selected by a set of patterns, plus notes about patterns that select nothing.
pub struct Selection {
    /// Canonical paths of the selected files, sorted.
    pub files: BTreeSet<PathBuf>,
    /// Patterns that could not be used, in words.
    pub notes: Vec<String>,
}

/// Which files a walk keeps.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// Every file (impl sources; unsupported extensions are reported by the caller).
    All,
    /// Only `.md` files (spec includes).
    Markdown,
}

/// The files of `tree` that `include` selects and `exclude` does not.
pub fn select(tree: &dyn Tree, include: &[String], exclude: &[String], keep: Keep) -> Selection {
    let mut notes = Vec::new();
    let roots = scan_roots(tree, include, &mut notes);
    let excludes: Vec<GlobMatcher> = exclude
        .iter()
        .filter_map(|pattern| match Glob::new(pattern) {
            Ok(glob) => Some(glob.compile_matcher()),
            Err(err) => {
                notes.push(format!(
                    "exclude pattern `{pattern}` is not a valid glob: {err}"
                ));
                None
            }
        })
        .collect();
    let mut files = BTreeSet::new();
    for scan_root in &roots {
        for path in tree.files_under(&scan_root.dir) {
            let path = path.as_path();
            if keep == Keep::Markdown && path.extension().is_none_or(|ext| ext != "md") {
                continue;
            }
            let Ok(relative) = path.strip_prefix(&scan_root.dir) else {
                continue;
            };
            if !scan_root.matcher.is_match(relative) {
                continue;
            }
            let excluded = roots.iter().any(|r| {
                path.strip_prefix(&r.dir)
                    .is_ok_and(|rel| excludes.iter().any(|m| m.is_match(rel)))
            });
            if excluded {
                continue;
            }
            files.insert(tree.canonical(path));
        }
    }
    Selection { files, notes }
}

/// Whether `relative` (to the root) matches any of `patterns` as a plain glob.
pub struct TestMatcher(Vec<GlobMatcher>);

impl TestMatcher {
    /// Compiles the `test_include` patterns; invalid ones match nothing.
    pub fn new(patterns: &[String]) -> Self {
        Self(
            patterns
                .iter()
                .filter_map(|p| Glob::new(p).ok().map(|g| g.compile_matcher()))
                .collect(),
        )
    }

    /// Whether the root-relative path is a test file.
    pub fn is_match(&self, relative: &Path) -> bool {
        self.0.iter().any(|m| m.is_match(relative))
    }
}

fn scan_roots(tree: &dyn Tree, include: &[String], notes: &mut Vec<String>) -> Vec<ScanRoot> {
    let root = tree.root();
    if include.is_empty() {
        return Glob::new("**/*")
            .map(|g| {
                vec![ScanRoot {
                    dir: root.to_path_buf(),
                    matcher: g.compile_matcher(),
                }]
            })
            .unwrap_or_default();
    }
    let mut roots = Vec::new();
    for pattern in include {
        let (base, suffix) = match pattern.find("**").or_else(|| pattern.find('*')) {
            Some(at) => (pattern[..at].trim_end_matches('/'), &pattern[at..]),
            None => (pattern.as_str(), ""),
        };
        let mut dir = if base.is_empty() {
            root.to_path_buf()
        } else {
            root.join(base)
        };
        if !base.is_empty() && !tree.exists(&dir) {
            notes.push(format!(
                "pattern `{pattern}` selects nothing: `{base}` does not exist (tracey skips it too)"
            ));
            continue;
        }
        let glob = if suffix.is_empty() && tree.is_file(&dir) {
            let Some(name) = dir.file_name().map(|n| n.to_string_lossy().into_owned()) else {
                continue;
            };
            let Some(parent) = dir.parent().map(Path::to_path_buf) else {
                continue;
            };
            dir = parent;
            name
        } else if suffix.is_empty() {
            "**/*".to_owned()
        } else {
            suffix.to_owned()
        };
        match Glob::new(&glob) {
            Ok(g) => roots.push(ScanRoot {
                dir,
                matcher: g.compile_matcher(),
            }),
            Err(err) => notes.push(format!("pattern `{pattern}` is not a valid glob: {err}")),
        }
    }
    roots
}

/// `path` relative to `root` with `/` separators, for messages.
pub fn relative(root: &Path, path: &Path) -> String {
    let rel = path.strip_prefix(root).unwrap_or(path);
    rel.components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}
