//! The spec engine's read cache on disk (`i[spec-check.read-cache]`): the engine keys and encodes
//! the entries, this keeps them as files under the target dir, one directory per engine build.
//!
//! The cache directory must be private to its user (it is made mode 0700): an entry someone else
//! could write would be read as what a file says.

use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};
use spec_engine::spec_check::read_cache::{ReadCache, Store};

/// The layout of the cache directory and its entries; a change makes every old entry unreachable.
const CACHE_FORMAT: u32 = 1;

/// The file, in the cache directory, that remembers the last executable's hash by its metadata,
/// so that an engine is hashed once per build rather than once per run.
const IDENTITY_FILE: &str = "engine-identity";

/// The prefix of each engine build's directory (the only directories [`prune`] deletes).
const ENGINE_DIR_PREFIX: &str = "engine-";

/// Entries as files: `DIR/ab/cdef….json` for key `abcdef…`, `DIR` being this engine's directory.
struct Disk {
    dir: PathBuf,
}

impl Disk {
    fn path(&self, key: &str) -> Option<PathBuf> {
        let (shard, rest) = (key.get(..2)?, key.get(2..)?);
        Some(self.dir.join(shard).join(format!("{rest}.json")))
    }
}

// i[impl spec-check.read-cache]
impl Store for Disk {
    fn get(&self, key: &str) -> Option<Vec<u8>> {
        std::fs::read(self.path(key)?).ok()
    }

    /// Written to a temporary file beside it, then renamed into place: a reader never sees half
    /// an entry, and a failure leaves no entry at all.
    fn put(&self, key: &str, bytes: &[u8]) {
        let Some(path) = self.path(key) else {
            return;
        };
        let Some(shard) = path.parent() else {
            return;
        };
        if std::fs::create_dir_all(shard).is_err() {
            return;
        }
        let Ok(mut temporary) = tempfile::NamedTempFile::new_in(shard) else {
            return;
        };
        if temporary.write_all(bytes).is_ok() {
            // A failed persist drops (deletes) the temporary file.
            let _ = temporary.persist(&path);
        }
    }
}

// i[impl spec-check.read-cache]
/// This build's name for the cache: the cache format and the SHA-256 of its executable, so that
/// any rebuilt engine (even one of the same size and time) never reads entries another wrote.
/// The hash is remembered in `cache`'s [`IDENTITY_FILE`] by the executable's device, inode,
/// size, modification and change times (the change time cannot be set back, unlike `cp -p`'s
/// modification time). `None` when the executable cannot be read (then there is no cache).
fn engine(exe: &Path, cache: &Path) -> Option<String> {
    let meta = std::fs::metadata(exe).ok()?;
    let stamp = format!(
        "{} {} {} {}.{} {}.{}",
        meta.dev(),
        meta.ino(),
        meta.len(),
        meta.mtime(),
        meta.mtime_nsec(),
        meta.ctime(),
        meta.ctime_nsec()
    );
    let memo = cache.join(IDENTITY_FILE);
    let remembered = std::fs::read_to_string(&memo).ok().and_then(|text| {
        let (line, hash) = text.split_once('\n')?;
        (line == stamp && hash.len() == 64).then(|| hash.to_owned())
    });
    let hash = match remembered {
        Some(hash) => hash,
        None => {
            let hash = sha256_of(exe)?;
            // Best-effort, replaced whole: a reader sees the old memo or the new one.
            if let Ok(mut temporary) = tempfile::NamedTempFile::new_in(cache)
                && temporary
                    .write_all(format!("{stamp}\n{hash}").as_bytes())
                    .is_ok()
            {
                let _ = temporary.persist(&memo);
            }
            hash
        }
    };
    Some(format!("format {CACHE_FORMAT} sha256 {hash}"))
}

// i[impl spec-check.read-cache]
/// The SHA-256 of the file at `path`, in hex: by coreutils' `sha256sum` when there is one (a
/// debug xtask's own unoptimised SHA-256 takes seconds over its 100+ MB executable), else here.
fn sha256_of(path: &Path) -> Option<String> {
    let tool = std::process::Command::new("sha256sum")
        .arg("--")
        .arg(path)
        .stderr(std::process::Stdio::null())
        .output()
        .ok()
        .filter(|out| out.status.success())
        .and_then(|out| {
            let hash = out.stdout.get(..64)?;
            hash.iter()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
                .then(|| String::from_utf8_lossy(hash).into_owned())
        });
    if tool.is_some() {
        return tool;
    }
    let mut file = std::fs::File::open(path).ok()?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher).ok()?;
    Some(hex(&hasher.finalize()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The directory of the engine named `engine` in `cache`.
fn engine_dir(cache: &Path, engine: &str) -> PathBuf {
    let hash = Sha256::digest(engine.as_bytes());
    let short = hex(&hash[..8]);
    cache.join(format!("{ENGINE_DIR_PREFIX}{short}"))
}

// i[impl spec-check.read-cache]
/// Deletes every engine directory in `cache` but `keep`: entries an older build wrote are never
/// read again, so the cache holds one build's (or, while builds run side by side, a few).
fn prune(cache: &Path, keep: &Path) {
    let Ok(entries) = std::fs::read_dir(cache) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        // Also the shards the first layout kept at the top (`ab/`), never read since.
        let is_engine_dir = entry.file_name().to_str().is_some_and(|name| {
            name.starts_with(ENGINE_DIR_PREFIX)
                || (name.len() == 2 && name.bytes().all(|b| b.is_ascii_hexdigit()))
        }) && entry.file_type().is_ok_and(|t| t.is_dir());
        if is_engine_dir && path != keep {
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}

// i[impl spec-check.read-cache]
/// Where the cache is: `$HOLDFAST_SPEC_CACHE`, `None` when it is `off` (in any case, or `0`,
/// `false`, `no`), else `spec-read-cache/` under the target dir of the checkout above the
/// current directory. A relative directory is an error (it would land wherever the command
/// runs).
fn dir(variable: Option<std::ffi::OsString>) -> Result<Option<PathBuf>, String> {
    match variable {
        Some(value)
            if value.to_str().is_some_and(|v| {
                ["off", "0", "false", "no"].contains(&v.to_ascii_lowercase().as_str())
            }) =>
        {
            Ok(None)
        }
        Some(dir) if !dir.is_empty() => {
            let dir = PathBuf::from(dir);
            if dir.is_relative() {
                return Err(format!(
                    "HOLDFAST_SPEC_CACHE={} is relative: give an absolute directory or `off`",
                    dir.display()
                ));
            }
            Ok(Some(dir))
        }
        _ => Ok(crate::root::find(None)
            .ok()
            .map(|workspace| crate::root::target_dir(&workspace).join("spec-read-cache"))),
    }
}

// i[impl spec-check.read-cache]
/// The cache in `cache` for the executable `exe`: its engine directory made (private) and its
/// siblings deleted. An error says why there is none.
fn open(cache: &Path, exe: &Path) -> Result<ReadCache, String> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(cache)
        .map_err(|e| format!("cannot make {}: {e}", cache.display()))?;
    let engine = engine(exe, cache).ok_or_else(|| format!("cannot read {}", exe.display()))?;
    let dir = engine_dir(cache, &engine);
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
    prune(cache, &dir);
    Ok(ReadCache::new(Box::new(Disk { dir }), engine))
}

// i[impl spec-check.read-cache]
/// Turns the engine's read cache on for this run, where [`dir`] says; when it cannot, says why in
/// one line on stderr and runs without it.
pub fn enable() {
    let cache = match dir(std::env::var_os("HOLDFAST_SPEC_CACHE")) {
        Ok(Some(cache)) => cache,
        Ok(None) => return,
        Err(why) => {
            eprintln!("xtask: no spec read cache: {why}");
            return;
        }
    };
    let opened = std::env::current_exe()
        .map_err(|e| format!("cannot find this executable: {e}"))
        .and_then(|exe| open(&cache, &exe));
    match opened {
        Ok(read_cache) => {
            spec_engine::spec_check::read_cache::enable(read_cache);
        }
        Err(why) => eprintln!("xtask: no spec read cache: {why}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // i[verify spec-check.read-cache]
    #[test]
    fn entries_are_files_under_the_cache_dir_and_off_turns_it_off() {
        let root = tempfile::tempdir().expect("tempdir");
        let disk = Disk {
            dir: root.path().join("cache"),
        };
        let key = "ab".to_owned() + &"0".repeat(62);
        assert_eq!(disk.get(&key), None);
        disk.put(&key, b"{}");
        assert_eq!(disk.get(&key).as_deref(), Some(&b"{}"[..]));
        let file = root.path().join("cache/ab").join("0".repeat(62) + ".json");
        assert!(file.is_file());
        // Nothing but the entry is left behind.
        let names: Vec<_> = std::fs::read_dir(root.path().join("cache/ab"))
            .expect("dir")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names.len(), 1);
        assert_eq!(disk.path("a"), None);
        for off in ["off", "OFF", "Off", "0", "false", "no"] {
            assert_eq!(dir(Some(off.into())), Ok(None), "{off}");
        }
        assert_eq!(dir(Some("/c".into())), Ok(Some(PathBuf::from("/c"))));
        assert!(dir(Some("false/x".into())).is_err());
        // Set but empty is as unset: the default place, not a relative directory.
        assert_eq!(dir(Some("".into())), dir(None));
    }

    // i[verify spec-check.read-cache]
    #[test]
    fn an_engine_is_named_by_its_bytes_not_its_size_and_time() {
        let root = tempfile::tempdir().expect("tempdir");
        let cache = root.path().join("cache");
        std::fs::create_dir(&cache).expect("cache");
        let exe = root.path().join("engine");
        std::fs::write(&exe, b"build one").expect("write");
        let time = std::fs::metadata(&exe)
            .expect("meta")
            .modified()
            .expect("mtime");
        let first = engine(&exe, &cache).expect("engine");
        assert_eq!(
            engine(&exe, &cache).as_ref(),
            Some(&first),
            "the memo answers"
        );
        // The memo is what answers: the same stamp with another hash gives that hash.
        let memo = std::fs::read_to_string(cache.join(IDENTITY_FILE)).expect("memo");
        let (stamp, _) = memo.split_once('\n').expect("stamp line");
        let other = "f".repeat(64);
        std::fs::write(cache.join(IDENTITY_FILE), format!("{stamp}\n{other}")).expect("write");
        assert_eq!(
            engine(&exe, &cache),
            Some(format!("format {CACHE_FORMAT} sha256 {other}"))
        );
        // A hash of the wrong length is not believed.
        std::fs::write(cache.join(IDENTITY_FILE), format!("{stamp}\nabc")).expect("write");
        assert_eq!(engine(&exe, &cache).as_ref(), Some(&first));
        // Another build of the same size, its time set back to the first's (as `cp -p` or
        // SOURCE_DATE_EPOCH would): a different engine.
        std::fs::write(&exe, b"build two").expect("write");
        std::fs::File::options()
            .write(true)
            .open(&exe)
            .expect("open")
            .set_modified(time)
            .expect("set time");
        let second = engine(&exe, &cache).expect("engine");
        assert_ne!(first, second);
        assert!(first.starts_with(&format!("format {CACHE_FORMAT} sha256 ")));
    }

    // i[verify spec-check.read-cache]
    #[test]
    fn a_file_hashes_to_its_sha256() {
        let root = tempfile::tempdir().expect("tempdir");
        let file = root.path().join("a file");
        std::fs::write(&file, b"abc").expect("write");
        assert_eq!(
            sha256_of(&file).as_deref(),
            Some("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        );
        assert_eq!(sha256_of(&root.path().join("none")), None);
    }

    // i[verify spec-check.read-cache]
    #[test]
    fn a_new_engine_deletes_the_entries_of_the_others_and_nothing_else() {
        let root = tempfile::tempdir().expect("tempdir");
        let cache = root.path().join("cache");
        let exe = root.path().join("engine");
        std::fs::write(&exe, b"build one").expect("write");
        let one = open(&cache, &exe).expect("cache");
        let key = "ab".to_owned() + &"0".repeat(62);
        // An entry written through the first build's store.
        let first_dirs = engine_dirs(&cache);
        assert_eq!(first_dirs.len(), 1);
        Disk {
            dir: first_dirs[0].clone(),
        }
        .put(&key, b"{}");
        drop(one);
        std::fs::write(cache.join("unrelated"), b"kept").expect("write");
        // Only directories named as an engine's or as the first layout's shards go: not another
        // directory, not a file with an engine's name, not two letters that are not hex, not
        // more hex than a shard's two.
        for kept in ["notes", "zz", "abc"] {
            std::fs::create_dir(cache.join(kept)).expect("dir");
        }
        std::fs::write(cache.join(format!("{ENGINE_DIR_PREFIX}file")), b"kept").expect("write");
        std::fs::create_dir(cache.join("ab")).expect("first layout's shard");
        std::fs::write(&exe, b"build two, relinked").expect("write");
        open(&cache, &exe).expect("cache");
        let dirs = engine_dirs(&cache);
        assert_eq!(dirs.len(), 1);
        assert_ne!(dirs, first_dirs);
        assert!(cache.join("unrelated").is_file());
        for kept in ["notes", "zz", "abc"] {
            assert!(cache.join(kept).is_dir(), "{kept}");
        }
        assert!(cache.join(format!("{ENGINE_DIR_PREFIX}file")).is_file());
        assert!(!cache.join("ab").exists(), "the first layout's shard goes");
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&cache)
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
    }

    fn engine_dirs(cache: &Path) -> Vec<PathBuf> {
        let mut dirs: Vec<_> = std::fs::read_dir(cache)
            .expect("cache")
            .map(|e| e.expect("entry").path())
            .filter(|p| {
                p.is_dir()
                    && p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with(ENGINE_DIR_PREFIX))
            })
            .collect();
        dirs.sort();
        dirs
    }
}
