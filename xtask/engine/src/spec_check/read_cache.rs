//! A content-addressed cache of what reading one source file found: its references and, for a
//! Rust file, its layout. Parsing (tree-sitter) is most of a run's time, and
//! most files are the same from one run to the next: an entry is keyed by the engine binary that
//! wrote it, the file's extension (the only part of its path tracey-core's parse looks at) and
//! the file's bytes, so a changed file, or a rebuilt engine, is a miss and is parsed again. The
//! cache is best-effort: an entry that cannot be read, parsed or written is a miss, never an
//! error, and what a hit gives back is exactly what the parse gave.
//!
//! The engine reads no file system itself (`i[xtask.layout.engine.tree]`): the program hands it a
//! [`Store`] (xtask's keeps the entries under the target dir) and the name of the engine build, and
//! turns the cache on with [`enable`]; tests read without it unless they build a [`ReadCache`] of
//! their own.

use std::path::Path;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use tracey_core::{RefVerb, ReqReference, RuleId, SourceSpan};

use super::rust_layout::RustLayout;

/// Where entries are kept: bytes by key (64 lowercase hex digits).
pub trait Store: Send + Sync {
    /// The bytes stored under `key`, if any.
    fn get(&self, key: &str) -> Option<Vec<u8>>;
    /// Keeps `bytes` under `key`; a store that cannot keeps nothing (the next run parses again).
    fn put(&self, key: &str, bytes: &[u8]);
}

/// The cache this process reads through, once [`enable`]d.
static PROCESS: OnceLock<ReadCache> = OnceLock::new();

// i[impl spec-check.read-cache]
/// Turns `cache` on for this process; false when one was on already (it stays).
pub fn enable(cache: ReadCache) -> bool {
    PROCESS.set(cache).is_ok()
}

/// The process's cache, when on.
pub(crate) fn process() -> Option<&'static ReadCache> {
    PROCESS.get()
}

/// What reading one file found.
#[derive(Debug, Clone)]
pub struct Read {
    /// Every reference in the file's comments, as tracey-core extracts them.
    pub refs: Vec<ReqReference>,
    /// The layout of a Rust file.
    pub layout: Option<RustLayout>,
}

/// A store and the name of the engine build whose entries it holds.
pub struct ReadCache {
    store: Box<dyn Store>,
    engine: String,
}

// i[impl spec-check.read-cache]
impl ReadCache {
    /// A cache in `store` for the engine build named `engine` (a name that differs whenever the
    /// engine's code does, such as its executable's hash): entries another build wrote are never
    /// read.
    pub fn new(store: Box<dyn Store>, engine: String) -> Self {
        Self { store, engine }
    }

    /// What reading `content` (the file at `path`) finds: the entry for these bytes when there is
    /// one, else `parse`'s answer, stored for the next run. The second value says whether it was
    /// a hit.
    pub fn read(&self, path: &Path, content: &str, parse: impl FnOnce() -> Read) -> (Read, bool) {
        let key = self.key(path, content);
        if let Some(read) = self
            .store
            .get(&key)
            .and_then(|bytes| load(&bytes, path, content))
        {
            return (read, true);
        }
        let read = parse();
        if let Some(bytes) = save(&read) {
            self.store.put(&key, &bytes);
        }
        (read, false)
    }

    /// The key of these bytes at this extension, read by this engine.
    fn key(&self, path: &Path, content: &str) -> String {
        let mut hash = Sha256::new();
        for part in [
            self.engine.as_bytes(),
            path.extension().map_or(&b""[..], |e| e.as_encoded_bytes()),
            content.as_bytes(),
        ] {
            // Each part with its length, so that no two different triples hash the same bytes.
            hash.update((part.len() as u64).to_le_bytes());
            hash.update(part);
        }
        hash.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// An entry as stored: the references without their file (the reader's path is put back).
#[derive(Serialize, Deserialize)]
struct Entry {
    refs: Vec<StoredRef>,
    layout: Option<RustLayout>,
}

#[derive(Serialize, Deserialize)]
struct StoredRef {
    prefix: String,
    verb: String,
    base: String,
    version: u32,
    line: usize,
    offset: usize,
    length: usize,
}

fn verb_name(verb: RefVerb) -> &'static str {
    match verb {
        RefVerb::Define => "define",
        RefVerb::Impl => "impl",
        RefVerb::Verify => "verify",
        RefVerb::Depends => "depends",
        RefVerb::Related => "related",
    }
}

fn verb_of(name: &str) -> Option<RefVerb> {
    Some(match name {
        "define" => RefVerb::Define,
        "impl" => RefVerb::Impl,
        "verify" => RefVerb::Verify,
        "depends" => RefVerb::Depends,
        "related" => RefVerb::Related,
        _ => return None,
    })
}

/// The entry `bytes`, for the file at `path` holding `content`; `None` when it does not parse.
fn load(bytes: &[u8], path: &Path, content: &str) -> Option<Read> {
    let stored: Entry = serde_json::from_slice(bytes).ok()?;
    let refs = stored
        .refs
        .into_iter()
        .map(|r| {
            Some(ReqReference {
                prefix: r.prefix,
                verb: verb_of(&r.verb)?,
                req_id: RuleId {
                    base: r.base,
                    version: r.version,
                },
                file: path.to_path_buf(),
                line: r.line,
                span: SourceSpan::new(r.offset, r.length),
            })
        })
        .collect::<Option<Vec<_>>>()?;
    Some(Read {
        refs,
        layout: stored.layout.map(|layout| layout.with_lines(content)),
    })
}

/// `read` as an entry's bytes.
fn save(read: &Read) -> Option<Vec<u8>> {
    let stored = Entry {
        refs: read
            .refs
            .iter()
            .map(|r| StoredRef {
                prefix: r.prefix.clone(),
                verb: verb_name(r.verb).to_owned(),
                base: r.req_id.base.clone(),
                version: r.req_id.version,
                line: r.line,
                offset: r.span.offset,
                length: r.span.length,
            })
            .collect(),
        layout: read.layout.clone(),
    };
    serde_json::to_vec(&stored).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};

    /// A store in memory, shared with the test that looks into it.
    #[derive(Clone, Default)]
    struct Memory(Arc<Mutex<HashMap<String, Vec<u8>>>>);

    impl Store for Memory {
        fn get(&self, key: &str) -> Option<Vec<u8>> {
            self.0.lock().ok()?.get(key).cloned()
        }
        fn put(&self, key: &str, bytes: &[u8]) {
            if let Ok(mut map) = self.0.lock() {
                map.insert(key.to_owned(), bytes.to_vec());
            }
        }
    }

    fn parse(path: &Path, content: &str) -> Read {
        super::super::sources::read_file(path, content)
    }

    fn same(a: &Read, b: &Read) -> bool {
        format!("{:?}", a.refs) == format!("{:?}", b.refs) && a.layout == b.layout
    }

    const SOURCE: &str = "/// Adds.\n// r[impl calc.add]\npub fn add() {}\n\n#[cfg(test)]\nmod \
        tests;\n\n#[cfg(test)]\nmod inline {\n    // r[verify calc.add+2]\n    #[test]\n    fn \
        adds() {}\n}\n";

    // i[verify spec-check.read-cache]
    #[test]
    fn a_hit_gives_what_the_parse_gave_and_a_changed_file_is_read_again() {
        let store = Memory::default();
        let cache = ReadCache::new(Box::new(store.clone()), "test 1".into());
        let path = Path::new("/w/src/calc.rs");
        let parses = Cell::new(0);
        let counted = |content: &str| {
            parses.set(parses.get() + 1);
            parse(path, content)
        };
        let (cold, hit) = cache.read(path, SOURCE, || counted(SOURCE));
        assert!(!hit);
        assert_eq!(cold.refs.len(), 2);
        assert!(cold.layout.is_some());
        assert_eq!(store.0.lock().expect("lock").len(), 1);
        // The same bytes at another path: a hit, with this path in its references.
        let elsewhere = Path::new("/x/other.rs");
        let (warm, hit) = cache.read(elsewhere, SOURCE, || counted(SOURCE));
        assert!(hit);
        assert_eq!(parses.get(), 1);
        assert!(same(&warm, &parse(elsewhere, SOURCE)));
        assert!(warm.refs.iter().all(|r| r.file == elsewhere));
        let (warm, _) = cache.read(path, SOURCE, || counted(SOURCE));
        assert!(same(&warm, &cold));
        // One byte changed: a miss, and what the new bytes say.
        let changed = SOURCE.replace("calc.add+2", "calc.add+3");
        let (again, hit) = cache.read(path, &changed, || counted(&changed));
        assert!(!hit);
        assert_eq!(parses.get(), 2);
        assert_eq!(again.refs[1].req_id.version, 3);
        // Another engine never reads this one's entries, nor another extension.
        let other = ReadCache::new(Box::new(store.clone()), "test 2".into());
        assert!(!other.read(path, SOURCE, || parse(path, SOURCE)).1);
        let markdown = Path::new("/w/src/calc.md");
        let (read, hit) = cache.read(markdown, SOURCE, || parse(markdown, SOURCE));
        assert!(!hit);
        assert!(read.layout.is_none());
    }

    // i[verify spec-check.read-cache]
    #[test]
    fn a_broken_entry_is_a_miss_and_is_written_again() {
        let store = Memory::default();
        let cache = ReadCache::new(Box::new(store.clone()), "test".into());
        let path = Path::new("/w/src/calc.rs");
        let key = cache.key(path, SOURCE);
        assert_eq!(key.len(), 64);
        store.put(&key, b"{not json");
        let (read, hit) = cache.read(path, SOURCE, || parse(path, SOURCE));
        assert!(!hit);
        assert!(same(&read, &parse(path, SOURCE)));
        assert!(cache.read(path, SOURCE, || parse(path, SOURCE)).1);
        // A verb the engine does not know: a miss too.
        let text = String::from_utf8(store.get(&key).expect("an entry")).expect("utf-8");
        store.put(&key, text.replace("\"impl\"", "\"implements\"").as_bytes());
        assert!(!cache.read(path, SOURCE, || parse(path, SOURCE)).1);
    }
}
