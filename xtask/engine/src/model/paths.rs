//! Where the engine's own files live: the audit findings, the checked-in proof summary, the
//! justified mutation survivors and the default test results. Each is a root-relative path from
//! the `[workspace.metadata.spec-engine]` table of the root's `Cargo.toml`, defaulting to
//! holdfast's layout. Cargo ignores `workspace.metadata`, and tracey's own config
//! (`.config/tracey/config.styx`) stays exactly what tracey 1.3.0 accepts.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use serde::Deserialize;

use super::tree::Tree;

/// The table, as a maintainer writes its header.
pub const TABLE: &str = "[workspace.metadata.spec-engine]";
/// Default of `findings`: the audit findings (`cargo xtask trace`, the gate's findings check).
pub const DEFAULT_FINDINGS: &str = "docs/audit/findings.md";
/// Default of `proof`: the summary `cargo xtask prove --summary` writes.
pub const DEFAULT_PROOF: &str = "docs/audit/proof.md";
/// Default of `survivors`: the mutation survivors justified by hand.
pub const DEFAULT_SURVIVORS: &str = "docs/audit/survivors.toml";
/// Default of `results`: nextest's JUnit of the `ci` profile, read when `--results` is not given.
pub const DEFAULT_RESULTS: &str = "target/nextest/ci/junit.xml";

/// Why the paths table cannot be used; each names the manifest (and the table) it is about.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The root's `Cargo.toml` exists but cannot be read.
    #[error("Cargo.toml: cannot read: {0}")]
    Read(#[source] std::io::Error),
    /// The manifest is not TOML, or the table has an unknown key or a value of the wrong type.
    #[error("Cargo.toml: {TABLE}: {}{message}", line.map(|l| format!("line {l}: ")).unwrap_or_default())]
    Parse {
        /// 1-based line of the error, when the parser knows it.
        line: Option<usize>,
        /// The parser's message.
        message: String,
    },
    /// A value is empty, absolute or leaves the root.
    #[error(
        "Cargo.toml: {TABLE}: `{key} = {value:?}` must be a non-empty path relative to the root, \
         without `..`"
    )]
    Invalid {
        /// The key.
        key: &'static str,
        /// Its value.
        value: String,
    },
}

/// The engine's file paths, relative to the root, `/`-separated as written.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Paths {
    /// The audit findings.
    pub findings: String,
    /// The checked-in proof summary.
    pub proof: String,
    /// The justified mutation survivors.
    pub survivors: String,
    /// The test results read by default.
    pub results: String,
}

impl Default for Paths {
    fn default() -> Self {
        Self {
            findings: DEFAULT_FINDINGS.to_owned(),
            proof: DEFAULT_PROOF.to_owned(),
            survivors: DEFAULT_SURVIVORS.to_owned(),
            results: DEFAULT_RESULTS.to_owned(),
        }
    }
}

#[derive(Deserialize)]
struct Manifest {
    workspace: Option<Workspace>,
}

#[derive(Deserialize)]
struct Workspace {
    metadata: Option<Metadata>,
}

#[derive(Deserialize)]
struct Metadata {
    #[serde(rename = "spec-engine")]
    spec_engine: Option<Paths>,
}

/// Reads the paths from the tree's root `Cargo.toml`: the defaults when there is no manifest or no table; an
/// error naming the manifest for an unreadable or unparsable one, an unknown key, or a value that
/// is not a non-empty relative path staying under the root.
// i[impl xtask.paths]
pub fn load(tree: &dyn Tree) -> Result<Paths, Error> {
    let manifest = tree.root().join("Cargo.toml");
    let text = match tree.read(&manifest) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Paths::default()),
        Err(err) => return Err(Error::Read(err)),
    };
    parse(&text)
}

/// [`load`] on a manifest's text.
fn parse(text: &str) -> Result<Paths, Error> {
    let manifest: Manifest = toml::from_str(text).map_err(|err| Error::Parse {
        line: err.span().map(|span| {
            text.get(..span.start)
                .map_or(0, |before| before.matches('\n').count())
                + 1
        }),
        message: err.message().to_owned(),
    })?;
    let paths = manifest
        .workspace
        .and_then(|w| w.metadata)
        .and_then(|m| m.spec_engine)
        .unwrap_or_default();
    for (key, value) in [
        ("findings", &paths.findings),
        ("proof", &paths.proof),
        ("survivors", &paths.survivors),
        ("results", &paths.results),
    ] {
        let path = Path::new(value);
        let under_root = path
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
        if value.is_empty() || !under_root {
            return Err(Error::Invalid {
                key,
                value: value.clone(),
            });
        }
    }
    Ok(paths)
}

/// The paths for the tree, read once per process; the defaults when they cannot be read (each
/// command reports that error itself through [`load`] before it judges anything).
pub fn of(tree: &dyn Tree) -> Paths {
    static CACHE: OnceLock<Mutex<BTreeMap<PathBuf, Paths>>> = OnceLock::new();
    let mut cache = CACHE
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    cache
        .entry(tree.root().to_path_buf())
        .or_insert_with(|| load(tree).unwrap_or_default())
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No manifest is the defaults; a manifest that cannot be read is an error, not the defaults.
    // i[verify xtask.paths]
    #[test]
    fn no_manifest_is_the_defaults_and_an_unreadable_one_an_error() {
        let empty = crate::model::tree::Memory::new([("README.md", "")]);
        assert_eq!(load(&empty).ok(), Some(Paths::default()));
        // `/dev/null/Cargo.toml` cannot be read (not a directory), and is not "not found".
        let unreadable = crate::model::tree::Disk::new("/dev/null");
        assert!(
            matches!(load(&unreadable), Err(Error::Read(_))),
            "{:?}",
            load(&unreadable)
        );
    }

    // i[verify xtask.paths]
    #[test]
    fn the_table_overrides_each_default_and_rejects_what_it_cannot_use() {
        assert_eq!(
            parse("[package]\nname = \"x\"\n").ok(),
            Some(Paths::default())
        );
        assert_eq!(parse("[workspace]\n").ok(), Some(Paths::default()));
        let paths = parse(
            "[workspace]\n[workspace.metadata.spec-engine]\nfindings = \"audit/findings.md\"\n\
             results = \"target/nextest/default/junit.xml\"\n",
        );
        assert_eq!(
            paths.ok(),
            Some(Paths {
                findings: "audit/findings.md".into(),
                results: "target/nextest/default/junit.xml".into(),
                ..Paths::default()
            })
        );
        let error = |text: &str| parse(text).expect_err(text).to_string();
        assert!(
            error("[workspace.metadata.spec-engine]\nfinding = \"a.md\"\n").starts_with(
                "Cargo.toml: [workspace.metadata.spec-engine]: line 2: unknown field `finding`"
            )
        );
        assert_eq!(
            error("[workspace.metadata.spec-engine]\nproof = 3\n"),
            "Cargo.toml: [workspace.metadata.spec-engine]: line 2: invalid type: integer `3`, \
             expected a string"
        );
        for bad in ["", "/etc/proof.md", "../proof.md"] {
            let text = format!("[workspace.metadata.spec-engine]\nsurvivors = {bad:?}\n");
            assert!(
                matches!(
                    parse(&text),
                    Err(Error::Invalid {
                        key: "survivors",
                        ..
                    })
                ),
                "{text}"
            );
            assert!(error(&text).contains("`survivors = "), "{text}");
        }
        assert!(parse("[workspace").is_err());
    }
}
