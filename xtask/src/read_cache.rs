//! The spec engine's read cache on disk (`i[spec-check.read-cache]`): the engine keys and encodes
//! the entries, this keeps them as files, one per key, under the target dir.

use std::path::PathBuf;

use spec_engine::spec_check::read_cache::{ReadCache, Store};

/// Entries as files: `DIR/ab/cdef….json` for key `abcdef…`.
struct Disk {
    dir: PathBuf,
}

impl Disk {
    fn path(&self, key: &str) -> Option<PathBuf> {
        let (shard, rest) = (key.get(..2)?, key.get(2..)?);
        Some(self.dir.join(shard).join(format!("{rest}.json")))
    }
}

impl Store for Disk {
    fn get(&self, key: &str) -> Option<Vec<u8>> {
        std::fs::read(self.path(key)?).ok()
    }

    /// Written to a file of this process and thread, then renamed into place: a reader never
    /// sees half an entry, and a failure leaves no entry at all.
    fn put(&self, key: &str, bytes: &[u8]) {
        let Some(path) = self.path(key) else {
            return;
        };
        if path
            .parent()
            .is_none_or(|dir| std::fs::create_dir_all(dir).is_err())
        {
            return;
        }
        let temporary = path.with_extension(format!(
            "tmp.{}.{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        if std::fs::write(&temporary, bytes).is_err() || std::fs::rename(&temporary, &path).is_err()
        {
            let _ = std::fs::remove_file(&temporary);
        }
    }
}

/// This build's name for the cache's keys: its version, and its executable's size and time, so
/// that a rebuilt engine never reads entries an older one wrote. `None` when the executable
/// cannot be found (then there is no cache).
fn engine() -> Option<String> {
    let exe = std::env::current_exe().ok()?;
    let meta = std::fs::metadata(exe).ok()?;
    let modified = meta
        .modified()
        .ok()?
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?;
    Some(format!(
        "{} {} {}",
        env!("CARGO_PKG_VERSION"),
        meta.len(),
        modified.as_nanos()
    ))
}

/// Where the cache is: `$HOLDFAST_SPEC_CACHE`, `None` when it is `off`, else `spec-read-cache/`
/// under the target dir of the checkout above the current directory.
fn dir(variable: Option<std::ffi::OsString>) -> Option<PathBuf> {
    match variable {
        Some(value) if value == "off" => None,
        Some(dir) if !dir.is_empty() => Some(PathBuf::from(dir)),
        _ => crate::root::find(None)
            .ok()
            .map(|workspace| crate::root::target_dir(&workspace).join("spec-read-cache")),
    }
}

// i[impl spec-check.read-cache]
/// Turns the engine's read cache on for this run, where [`dir`] says.
pub fn enable() {
    if let (Some(dir), Some(engine)) = (dir(std::env::var_os("HOLDFAST_SPEC_CACHE")), engine()) {
        spec_engine::spec_check::read_cache::enable(ReadCache::new(Box::new(Disk { dir }), engine));
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
        assert_eq!(dir(Some("off".into())), None);
        assert_eq!(dir(Some("/c".into())), Some(PathBuf::from("/c")));
        assert!(engine().is_some());
    }
}
