//! A revision's files, read with git into a tree the engine reads like any other.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use spec_engine::{Memory, Tree};

use crate::git::{self, GitError};
use crate::ignored::Ignored;
use crate::listing;

/// Why a revision's files could not be read. Each message starts with the revision as given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// git cannot be run at all.
    #[error("{rev}: {source}")]
    CannotRun {
        /// The revision as given.
        rev: String,
        /// What running git said.
        source: GitError,
    },
    /// git ran and the revision names no commit.
    #[error("{rev}: no such commit ({source})")]
    NoSuchCommit {
        /// The revision as given.
        rev: String,
        /// git's answer.
        source: GitError,
    },
    /// The commit's files could not be listed.
    #[error("{rev}: cannot list its files: {source}")]
    List {
        /// The revision as given.
        rev: String,
        /// git's answer.
        source: GitError,
    },
    /// The commit's files could not be read.
    #[error("{rev}: cannot read its files: {source}")]
    Read {
        /// The revision as given.
        rev: String,
        /// git's answer.
        source: GitError,
    },
}

/// The files of one commit under a workspace, as the engine reads a tree.
///
/// It is a [`Memory`] tree of the commit's text files (so it has a root of its own, never the
/// work tree's), and the commit it was read from.
#[derive(Debug)]
pub struct Revision {
    commit: String,
    files: Memory,
}

impl Revision {
    /// The full id of the commit the files were read from.
    pub fn commit(&self) -> &str {
        &self.commit
    }

    /// The files, as the memory tree they are held in.
    pub fn into_memory(self) -> Memory {
        self.files
    }
}

impl Tree for Revision {
    fn root(&self) -> &Path {
        self.files.root()
    }

    fn read(&self, path: &Path) -> io::Result<String> {
        self.files.read(path)
    }

    fn files_under(&self, dir: &Path) -> Vec<PathBuf> {
        self.files.files_under(dir)
    }

    fn is_file(&self, path: &Path) -> bool {
        self.files.is_file(path)
    }

    fn is_dir(&self, path: &Path) -> bool {
        self.files.is_dir(path)
    }

    fn modified(&self, path: &Path) -> io::Result<SystemTime> {
        self.files.modified(path)
    }

    fn canonical(&self, path: &Path) -> PathBuf {
        self.files.canonical(path)
    }
}

/// The files of the commit `rev` under `root` (its path in the repository: a workspace below a
/// repository's top reads only its own part), read as the engine walks the work tree: files its
/// `.gitignore` and `.ignore` files ignore are left out (tracked or not), a link to a file or
/// directory of the tree reads as what it links to, and submodules, paths that are not UTF-8 and
/// files that are not UTF-8 text are skipped (the engine reads nothing else).
///
/// # Errors
///
/// git cannot run, `rev` names no commit, or its files cannot be listed or read.
// i[impl spec-check.review]
pub fn read(root: &Path, rev: &str) -> Result<Revision, Error> {
    read_with(OsStr::new("git"), root, rev)
}

/// [`read`] with the git program `program`.
///
/// # Errors
///
/// As [`read`].
pub fn read_with(program: &OsStr, root: &Path, rev: &str) -> Result<Revision, Error> {
    let commit = git::output(
        program,
        root,
        &[
            "rev-parse",
            "--verify",
            "--quiet",
            "--end-of-options",
            &format!("{rev}^{{commit}}"),
        ],
    )
    .map_err(|source| match source {
        GitError::CannotRun(_) => Error::CannotRun {
            rev: rev.to_owned(),
            source,
        },
        _ => Error::NoSuchCommit {
            rev: rev.to_owned(),
            source,
        },
    })?;
    let commit = String::from_utf8_lossy(&commit).trim().to_owned();
    let listing =
        git::output(program, root, &["ls-tree", "-r", "-z", &commit]).map_err(|source| {
            Error::List {
                rev: rev.to_owned(),
                source,
            }
        })?;
    let entries = listing::entries(&listing);
    let ids: Vec<&str> = entries.iter().map(|e| e.id.as_str()).collect();
    let texts = git::blobs(program, root, &ids).map_err(|source| Error::Read {
        rev: rev.to_owned(),
        source,
    })?;
    let mut files: BTreeMap<String, String> = BTreeMap::new();
    let mut links: Vec<(String, String)> = Vec::new();
    for (entry, text) in entries.into_iter().zip(texts) {
        let Some(text) = text else { continue };
        if entry.link {
            links.push((entry.path, text));
        } else {
            files.insert(entry.path, text);
        }
    }
    Ok(Revision {
        commit,
        files: assemble(&files, links),
    })
}

/// The memory tree of `files` and `links` (path → the link's text) less what their ignore files
/// ignore, each link kept only when it leads to a file or directory of the tree.
fn assemble(files: &BTreeMap<String, String>, links: Vec<(String, String)>) -> Memory {
    let ignored = Ignored::new(files);
    let mut tree = Memory::new(
        files
            .iter()
            .filter(|(path, _)| !ignored.is_ignored(path))
            .map(|(path, text)| (path.as_str(), text.as_str())),
    );
    for (link, target) in links {
        if ignored.is_ignored(&link) {
            continue;
        }
        if let Some(target) = listing::link_target(files, &link, &target) {
            tree.link(&link, &target);
        }
    }
    tree
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ignored_files_and_links_out_of_the_tree_are_left_out() {
        let files: BTreeMap<String, String> = [
            (".gitignore", "gen.rs\n"),
            ("gen.rs", "// generated\n"),
            ("src/lib.rs", "pub fn f() {}\n"),
        ]
        .into_iter()
        .map(|(p, t)| (p.to_owned(), t.to_owned()))
        .collect();
        let links = vec![
            ("src/also.rs".to_owned(), "lib.rs".to_owned()),
            ("src/away.rs".to_owned(), "../../elsewhere.rs".to_owned()),
            ("gen2.rs".to_owned(), "src/lib.rs".to_owned()),
        ];
        let tree = assemble(&files, links);
        let root = tree.root().to_path_buf();
        let mut walked: Vec<PathBuf> = tree
            .files_under(&root)
            .into_iter()
            .map(|p| p.strip_prefix(&root).expect("under the root").to_path_buf())
            .collect();
        walked.sort();
        assert_eq!(
            walked,
            [
                PathBuf::from(".gitignore"),
                PathBuf::from("gen2.rs"),
                PathBuf::from("src/also.rs"),
                PathBuf::from("src/lib.rs")
            ]
        );
        assert_eq!(
            tree.read(&root.join("src/also.rs")).expect("linked"),
            "pub fn f() {}\n"
        );
    }
}
