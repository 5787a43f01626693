//! Everything the engine reads — the tracey config, the walk of the files under the include and
//! exclude patterns, each file's text, the findings, proof, survivors and results files — goes
//! through one trait, [`Tree`], so the checks, the trace and the rendering are functions over a
//! read tree, whatever holds it: [`Disk`] for the command lines, [`Memory`] (paths to text) for
//! tests and for callers that hold a workspace in memory.
//!
//! Paths are absolute, under [`Tree::root`] for the files of the tree; a results or skip file given
//! on a command line may lie outside it (the disk reads it; a memory tree holds only its own).

use std::collections::BTreeMap;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::SystemTime;

/// A workspace the engine reads.
// i[impl xtask.layout.engine.tree]
pub trait Tree: Sync {
    /// The workspace root: every path of the tree's own files starts with it.
    fn root(&self) -> &Path;

    /// The text of the file at `path`.
    ///
    /// # Errors
    ///
    /// The file cannot be read (`NotFound` when it does not exist).
    fn read(&self, path: &Path) -> io::Result<String>;

    /// Every file under the directory `dir`, recursively, as the walk of tracey 1.3.0 sees them
    /// (links followed, hidden files included, `.gitignore` honoured where the tree has one), in
    /// no particular order.
    fn files_under(&self, dir: &Path) -> Vec<PathBuf>;

    /// Whether `path` is a file.
    fn is_file(&self, path: &Path) -> bool;

    /// Whether `path` is a directory (a memory tree's directories are its files' ancestors).
    fn is_dir(&self, path: &Path) -> bool;

    /// Whether `path` is a file or a directory.
    fn exists(&self, path: &Path) -> bool {
        self.is_file(path) || self.is_dir(path)
    }

    /// When the file at `path` was last written.
    ///
    /// # Errors
    ///
    /// The file does not exist or has no modification time.
    fn modified(&self, path: &Path) -> io::Result<SystemTime>;

    /// The path the tree knows `path` by (the disk resolves links; a memory tree only joins a
    /// relative path to its root and drops `.` components).
    fn canonical(&self, path: &Path) -> PathBuf;
}

/// The tree on the disk under a root directory.
#[derive(Debug, Clone)]
pub struct Disk {
    root: PathBuf,
}

impl Disk {
    /// The disk tree under `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }
}

// The one place the engine touches the file system (xtask/engine/clippy.toml bans it elsewhere).
#[allow(clippy::disallowed_methods, clippy::disallowed_types)]
impl Tree for Disk {
    fn root(&self) -> &Path {
        &self.root
    }

    fn read(&self, path: &Path) -> io::Result<String> {
        std::fs::read_to_string(path)
    }

    fn files_under(&self, dir: &Path) -> Vec<PathBuf> {
        ignore::WalkBuilder::new(dir)
            .follow_links(true)
            .hidden(false)
            .git_ignore(true)
            .build()
            .flatten()
            .filter(|entry| entry.file_type().is_some_and(|t| t.is_file()))
            .map(ignore::DirEntry::into_path)
            .collect()
    }

    fn is_file(&self, path: &Path) -> bool {
        path.is_file()
    }

    fn is_dir(&self, path: &Path) -> bool {
        path.is_dir()
    }

    fn modified(&self, path: &Path) -> io::Result<SystemTime> {
        std::fs::metadata(path).and_then(|m| m.modified())
    }

    fn canonical(&self, path: &Path) -> PathBuf {
        path.canonicalize().unwrap_or_else(|_| path.to_path_buf())
    }
}

/// A tree held in memory: root-relative paths (`/`-separated) to text, all written at one instant.
///
/// Each memory tree gets a root of its own (`/in-memory/N`), because the engine remembers a few
/// things per root for the life of the process (the engine's paths table, spec texts, package
/// names) and two trees must never share them: a clone, and a tree after [`Memory::insert`], is
/// another tree with another root (paths taken from [`Tree::root`] before belong to the old
/// one). It has no `.gitignore` semantics: every file is walked. It may hold links
/// ([`Memory::link`]), resolved as the disk resolves them.
#[derive(Debug)]
pub struct Memory {
    root: PathBuf,
    files: BTreeMap<PathBuf, String>,
    /// Root-relative link path → root-relative target (a file or a directory of the tree).
    links: BTreeMap<PathBuf, PathBuf>,
    written: SystemTime,
}

/// A root no memory tree has had.
fn fresh_root() -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    PathBuf::from(format!(
        "/in-memory/{}",
        NEXT.fetch_add(1, Ordering::Relaxed)
    ))
}

impl Clone for Memory {
    fn clone(&self) -> Self {
        let mut copy = Self {
            root: self.root.clone(),
            files: self.files.clone(),
            links: self.links.clone(),
            written: self.written,
        };
        copy.move_to_fresh_root();
        copy
    }
}

impl Memory {
    /// A tree of `files` (root-relative path, text).
    pub fn new<P: AsRef<str>, T: Into<String>>(files: impl IntoIterator<Item = (P, T)>) -> Self {
        let mut tree = Self {
            root: fresh_root(),
            files: BTreeMap::new(),
            links: BTreeMap::new(),
            written: SystemTime::UNIX_EPOCH,
        };
        for (path, text) in files {
            tree.put(path.as_ref(), text.into());
        }
        tree
    }

    /// Adds or replaces the file at the root-relative `path`. The edited tree is another tree:
    /// it moves to a root of its own, so nothing remembered of it before is used again.
    pub fn insert(&mut self, path: &str, text: impl Into<String>) {
        self.move_to_fresh_root();
        self.put(path, text.into());
    }

    /// Adds a link at the root-relative `path` to the root-relative `target`, a file or a
    /// directory of the tree: the walk lists what it links to under its path, and
    /// [`Tree::canonical`] resolves it to the target, as the disk does with a symbolic link.
    pub fn link(&mut self, path: &str, target: &str) {
        self.move_to_fresh_root();
        self.links
            .insert(PathBuf::from(path), PathBuf::from(target));
    }

    fn put(&mut self, path: &str, text: String) {
        let path = self.canonical(Path::new(path));
        self.files.insert(path, text);
    }

    /// Moves every file to a root no tree has had.
    fn move_to_fresh_root(&mut self) {
        let root = fresh_root();
        self.files = std::mem::take(&mut self.files)
            .into_iter()
            .map(|(path, text)| {
                let moved = path
                    .strip_prefix(&self.root)
                    .map_or_else(|_| path.clone(), |relative| root.join(relative));
                (moved, text)
            })
            .collect();
        self.root = root;
    }

    /// The same tree with every file written at `written` (the epoch by default).
    #[must_use]
    pub fn written_at(mut self, written: SystemTime) -> Self {
        self.move_to_fresh_root();
        self.written = written;
        self
    }
}

impl Tree for Memory {
    fn root(&self) -> &Path {
        &self.root
    }

    fn read(&self, path: &Path) -> io::Result<String> {
        self.files
            .get(&self.canonical(path))
            .cloned()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "not in the memory tree"))
    }

    fn files_under(&self, dir: &Path) -> Vec<PathBuf> {
        let dir = self.canonical(dir);
        let mut files: Vec<PathBuf> = self
            .files
            .keys()
            .filter(|path| path.starts_with(&dir) && **path != dir)
            .cloned()
            .collect();
        // A link under `dir` lists what it links to under its own path, as a walk following
        // links does (one level: a link inside a linked directory is not followed again).
        for (link, target) in &self.links {
            let (link, target) = (self.root.join(link), self.root.join(target));
            if !link.starts_with(&dir) {
                continue;
            }
            files.extend(self.files.keys().filter_map(|path| {
                if *path == target {
                    Some(link.clone())
                } else {
                    path.strip_prefix(&target).ok().map(|rest| link.join(rest))
                }
            }));
        }
        files
    }

    fn is_file(&self, path: &Path) -> bool {
        self.files.contains_key(&self.canonical(path))
    }

    fn is_dir(&self, path: &Path) -> bool {
        let dir = self.canonical(path);
        dir == self.root
            || self
                .files
                .keys()
                .any(|file| file.starts_with(&dir) && *file != dir)
    }

    fn modified(&self, path: &Path) -> io::Result<SystemTime> {
        if self.is_file(path) {
            Ok(self.written)
        } else {
            Err(io::Error::new(
                io::ErrorKind::NotFound,
                "not in the memory tree",
            ))
        }
    }

    fn canonical(&self, path: &Path) -> PathBuf {
        let joined = if path.is_absolute() {
            path.to_path_buf()
        } else {
            self.root.join(path)
        };
        let mut out = PathBuf::new();
        for component in joined.components() {
            match component {
                Component::CurDir => {}
                Component::ParentDir => {
                    out.pop();
                }
                other => out.push(other),
            }
        }
        // A path through a link is the path through its target (links to links are followed a
        // few times, never in a loop).
        for _ in 0..8 {
            let Ok(relative) = out.strip_prefix(&self.root) else {
                break;
            };
            let through = self.links.iter().find_map(|(link, target)| {
                let rest = relative.strip_prefix(link).ok()?;
                Some(self.root.join(target).join(rest))
            });
            match through {
                Some(resolved) => out = resolved,
                None => break,
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The engine remembers a few things per root: a copy or an edit of a tree is another tree,
    /// never answered from what was remembered of the first.
    // i[verify xtask.layout.engine.tree]
    #[test]
    fn a_copied_or_edited_memory_tree_is_read_afresh() {
        use crate::model::paths;

        let tree = Memory::new([("Cargo.toml", "[workspace]\n")]);
        let default = paths::Paths::default().findings;
        assert_eq!(paths::of(&tree).findings, default);
        let edited = "[workspace]\n[workspace.metadata.spec-engine]\nfindings = \"audit/f.md\"\n";
        let mut copy = tree.clone();
        copy.insert("Cargo.toml", edited);
        assert_eq!(paths::of(&copy).findings, "audit/f.md");
        assert_eq!(
            paths::of(&tree).findings,
            default,
            "the original is unchanged"
        );
        let mut tree = tree;
        tree.insert("Cargo.toml", edited);
        assert_eq!(paths::of(&tree).findings, "audit/f.md");
        assert_eq!(
            tree.read(&tree.root().join("Cargo.toml")).ok().as_deref(),
            Some(edited)
        );
    }

    // i[verify xtask.layout.engine.tree]
    #[test]
    fn a_memory_tree_reads_walks_and_knows_its_directories() {
        let tree = Memory::new([("a/b.rs", "b"), ("a/c/d.md", "d"), ("e.txt", "e")]);
        let root = tree.root().to_path_buf();
        assert_eq!(tree.read(&root.join("a/b.rs")).ok().as_deref(), Some("b"));
        assert_eq!(
            tree.read(Path::new("a/./c/d.md")).ok().as_deref(),
            Some("d")
        );
        assert_eq!(
            tree.read(&root.join("nope")).map_err(|e| e.kind()),
            Err(io::ErrorKind::NotFound)
        );
        let mut under = tree.files_under(&root.join("a"));
        under.sort();
        assert_eq!(under, [root.join("a/b.rs"), root.join("a/c/d.md")]);
        assert!(tree.is_dir(&root.join("a/c")) && tree.is_dir(&root));
        assert!(!tree.is_dir(&root.join("a/b.rs")) && tree.is_file(&root.join("a/b.rs")));
        assert!(!tree.exists(&root.join("a/x")));
        assert!(tree.exists(&root.join("a/b.rs")) && tree.exists(&root.join("a/c")));
        assert_ne!(Memory::new([("x", "")]).root(), tree.root(), "roots differ");
    }

    /// A memory link reads as a symbolic link on the disk: the walk lists what it links to under
    /// its path, and its canonical path is its target's.
    // i[verify xtask.layout.engine.tree]
    #[test]
    fn a_memory_link_is_walked_and_resolved_like_a_disk_link() {
        let mut tree = Memory::new([("other/a.rs", "a"), ("dir/b.rs", "b")]);
        tree.link("src/a.rs", "other/a.rs");
        tree.link("src/d", "dir");
        let root = tree.root().to_path_buf();
        let mut under = tree.files_under(&root.join("src"));
        under.sort();
        assert_eq!(under, [root.join("src/a.rs"), root.join("src/d/b.rs")]);
        assert_eq!(
            tree.canonical(Path::new("src/d/b.rs")),
            root.join("dir/b.rs")
        );
        assert_eq!(tree.read(&root.join("src/a.rs")).ok().as_deref(), Some("a"));
        assert!(tree.is_file(&root.join("src/d/b.rs")));
    }
}
