//! A commit's listing (`git ls-tree -r -z`): its blobs and links, and where a link leads.

use std::collections::BTreeMap;

/// One blob or link of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    /// The blob's object id.
    pub id: String,
    /// Its path from the top of the listing.
    pub path: String,
    /// Whether it is a symbolic link (mode 120000): its blob is the link's target.
    pub link: bool,
}

/// The blobs and links of `git ls-tree -r -z` output; other entries (submodules) and paths that
/// are not UTF-8 are skipped.
pub(crate) fn entries(listing: &[u8]) -> Vec<Entry> {
    listing
        .split(|&b| b == 0)
        .filter_map(|entry| {
            let tab = entry.iter().position(|&b| b == b'\t')?;
            let meta = std::str::from_utf8(&entry[..tab]).ok()?;
            let path = std::str::from_utf8(&entry[tab + 1..]).ok()?;
            let mut fields = meta.split(' ');
            let (mode, kind, id) = (fields.next()?, fields.next()?, fields.next()?);
            (kind == "blob").then(|| Entry {
                id: id.to_owned(),
                path: path.to_owned(),
                link: mode == "120000",
            })
        })
        .collect()
}

/// The path the link at `link` (its text `target`) names, when it is a file or a directory of
/// `files` (a link out of the tree reads as nothing).
pub(crate) fn link_target(
    files: &BTreeMap<String, String>,
    link: &str,
    target: &str,
) -> Option<String> {
    if target.starts_with('/') {
        return None;
    }
    let mut resolved: Vec<&str> = link.split('/').collect();
    resolved.pop();
    for part in target.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                resolved.pop()?;
            }
            part => resolved.push(part),
        }
    }
    let resolved = resolved.join("/");
    let prefix = format!("{resolved}/");
    let exists = files.contains_key(&resolved)
        || files
            .range(prefix.clone()..)
            .next()
            .is_some_and(|(path, _)| path.starts_with(&prefix));
    exists.then_some(resolved)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_keeps_blobs_and_links_and_skips_submodules_and_non_utf8_paths() {
        let listing = b"100644 blob aaa\tsrc/lib.rs\0\
                        120000 blob bbb\tsrc/extra.rs\0\
                        160000 commit ccc\tvendor/sub\0\
                        100644 blob ddd\tnotes/caf\xe9.txt\0";
        assert_eq!(
            entries(listing),
            [
                Entry {
                    id: "aaa".into(),
                    path: "src/lib.rs".into(),
                    link: false
                },
                Entry {
                    id: "bbb".into(),
                    path: "src/extra.rs".into(),
                    link: true
                },
            ]
        );
    }

    #[test]
    fn a_link_resolves_to_a_file_or_directory_of_the_tree_and_nothing_else() {
        let files: BTreeMap<String, String> = [("other/extra.rs", ""), ("docs/a/b.md", "")]
            .into_iter()
            .map(|(p, t)| (p.to_owned(), t.to_owned()))
            .collect();
        assert_eq!(
            link_target(&files, "src/extra.rs", "../other/extra.rs").as_deref(),
            Some("other/extra.rs")
        );
        assert_eq!(
            link_target(&files, "spec", "./docs/a").as_deref(),
            Some("docs/a")
        );
        // Absent, absolute, or above the top: nothing.
        assert_eq!(link_target(&files, "src/x.rs", "../other/none.rs"), None);
        assert_eq!(link_target(&files, "src/x.rs", "/etc/passwd"), None);
        assert_eq!(link_target(&files, "x.rs", "../../other/extra.rs"), None);
        // A prefix of a directory's name is not that directory.
        assert_eq!(link_target(&files, "d", "docs/"), Some("docs".to_owned()));
        assert_eq!(link_target(&files, "d", "doc"), None);
    }
}
