//! A revision's `.gitignore` and `.ignore` files, matched as the engine's walk of the disk
//! matches them, so a revision reads as its work tree would.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ignore::gitignore::{Gitignore, GitignoreBuilder};

/// The ignore files of a tree, per directory: a deeper file's rule wins, and `.ignore` wins over
/// `.gitignore`.
pub(crate) struct Ignored {
    /// Directory ("" for the top) → its matchers, strongest first.
    by_dir: BTreeMap<String, Vec<Gitignore>>,
}

impl Ignored {
    /// The ignore files among `files` (path from the top → text).
    pub(crate) fn new(files: &BTreeMap<String, String>) -> Self {
        let mut by_dir: BTreeMap<String, Vec<Gitignore>> = BTreeMap::new();
        for name in [".ignore", ".gitignore"] {
            for (path, text) in files {
                let dir = match path.rsplit_once('/') {
                    Some((dir, file)) if file == name => dir,
                    None if path == name => "",
                    _ => continue,
                };
                let mut builder = GitignoreBuilder::new(Self::at(dir));
                for line in text.lines() {
                    // A line that is no valid pattern is skipped, as the walk skips it.
                    let _ = builder.add_line(None, line);
                }
                if let Ok(matcher) = builder.build() {
                    by_dir.entry(dir.to_owned()).or_default().push(matcher);
                }
            }
        }
        Self { by_dir }
    }

    /// A path from the top as the absolute path the matchers are rooted under.
    fn at(path: &str) -> PathBuf {
        Path::new("/").join(path)
    }

    /// Whether the walk leaves `path` out: it, or a directory above it, is ignored.
    pub(crate) fn is_ignored(&self, path: &str) -> bool {
        if self.by_dir.is_empty() {
            return false;
        }
        let parts: Vec<&str> = path.split('/').collect();
        (1..=parts.len()).any(|depth| {
            let candidate = parts[..depth].join("/");
            let is_dir = depth < parts.len();
            // The directories whose files rule on it, deepest first.
            (0..depth).rev().find_map(|up| {
                let matchers = self.by_dir.get(&parts[..up].join("/"))?;
                matchers.iter().find_map(|m| {
                    let matched = m.matched(Self::at(&candidate), is_dir);
                    (!matched.is_none()).then(|| matched.is_ignore())
                })
            }) == Some(true)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ignored(files: &[(&str, &str)]) -> Ignored {
        Ignored::new(
            &files
                .iter()
                .map(|(p, t)| ((*p).to_owned(), (*t).to_owned()))
                .collect(),
        )
    }

    #[test]
    fn a_deeper_file_wins_and_a_directory_hides_what_is_under_it() {
        let rules = ignored(&[
            (".gitignore", "*.gen.rs\ntarget/\n"),
            ("src/.gitignore", "!keep.gen.rs\n"),
        ]);
        assert!(rules.is_ignored("lib.gen.rs"));
        assert!(rules.is_ignored("src/other.gen.rs"));
        assert!(!rules.is_ignored("src/keep.gen.rs"));
        assert!(rules.is_ignored("target/debug/x.rs"));
        assert!(!rules.is_ignored("src/lib.rs"));
    }

    #[test]
    fn dot_ignore_wins_over_gitignore_in_the_same_directory() {
        let rules = ignored(&[(".gitignore", "notes.md\n"), (".ignore", "!notes.md\n")]);
        assert!(!rules.is_ignored("notes.md"));
        assert!(!ignored(&[]).is_ignored("anything"));
    }
}
