//! holdfast-keyfile: one way to write a secret file — mode 0600, through a temporary file created
//! with `O_EXCL | O_NOFOLLOW`, fsynced, renamed into place, the directory fsynced.
//!
//! The README follows.
//!
#![doc = include_str!("../README.md")]

use std::ffi::OsString;
use std::fmt;
use std::fs;
use std::io::{self, Write as _};
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

mod secret;

pub use secret::{SecretFileError, read_secret_file};

/// Whether a presented secret (a bearer token, a key) is `expected`, in time independent of where
/// they differ (the length may show). An empty `expected` matches nothing. The one comparison the
/// node's admin token and the gateway's publish key share.
pub fn secret_eq(expected: &str, presented: &str) -> bool {
    use subtle::ConstantTimeEq as _;
    !expected.is_empty() && bool::from(expected.as_bytes().ct_eq(presented.as_bytes()))
}

/// The mode of every file written here: read and write for the owner only.
pub const MODE: u32 = 0o600;

/// The step of [`write_private`] that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Removing a temporary file left by an interrupted run.
    RemoveStale,
    /// Creating the temporary file (it exists again: someone planted it after the removal).
    Create,
    /// Giving the temporary file its owner, group and mode (or a mode that is not permission
    /// bits).
    Permissions,
    /// Writing or fsyncing the temporary file.
    Write,
    /// Renaming it over the target.
    Rename,
    /// Fsyncing the directory.
    SyncDir,
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Step::RemoveStale => "removing the stale temporary file",
            Step::Create => "creating the temporary file",
            Step::Permissions => "setting the owner and mode",
            Step::Write => "writing",
            Step::Rename => "renaming into place",
            Step::SyncDir => "syncing the directory",
        })
    }
}

/// A secret file could not be written; the file at the target path, if any, is unchanged.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {step}: {source}")]
pub struct KeyfileError {
    /// The step that failed.
    pub step: Step,
    /// The file it concerned (the temporary file, the target or the directory).
    pub path: PathBuf,
    /// The I/O error.
    #[source]
    pub source: io::Error,
}

/// The temporary file [`write_private`] uses for `path`: `NAME.tmp` in the same directory.
pub fn temp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().map(OsString::from).unwrap_or_default();
    name.push(".tmp");
    path.with_file_name(name)
}

/// The mode and ownership [`write_with`] gives a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileOptions {
    /// Permission bits (at most `0o777`).
    pub mode: u32,
    /// The owner's uid (`None`: the writer's).
    pub owner: Option<u32>,
    /// The group's gid (`None`: the writer's).
    pub group: Option<u32>,
}

impl FileOptions {
    /// Mode 0600, the writer's owner and group: what [`write_private`] writes.
    pub const PRIVATE: FileOptions = FileOptions {
        mode: MODE,
        owner: None,
        group: None,
    };
}

/// Writes `bytes` to `path` atomically with mode 0600: a temporary file in the same directory
/// created exclusively and without following links, fsync, rename over `path`, fsync of the
/// directory. The directory must exist.
// r[impl issue.store.secret-file+2]
pub fn write_private(path: &Path, bytes: &[u8]) -> Result<(), KeyfileError> {
    write_with(path, bytes, FileOptions::PRIVATE)
}

/// [`write_private`] with another owner, group or mode: the temporary file is still created
/// 0600, then given `options`' owner and group and then its mode — all before it is written and
/// renamed into place, so the file never appears under `path` with other permissions. A mode
/// with bits beyond `0o777` (setuid, sticky) is refused before anything is created.
// r[impl issue.store.secret-file+2]
// r[impl issue.deploy]
pub fn write_with(path: &Path, bytes: &[u8], options: FileOptions) -> Result<(), KeyfileError> {
    prepare_with(path, bytes, options)?.commit()
}

/// The first half of [`write_with`]: the temporary file created, given `options`, written and
/// synced, but not yet renamed over `path` — so several files can all be prepared before any
/// replaces its target.
// r[impl issue.store.secret-file+2]
// r[impl issue.deploy]
pub fn prepare_with(
    path: &Path,
    bytes: &[u8],
    options: FileOptions,
) -> Result<Prepared, KeyfileError> {
    let tmp = temp_path(path);
    if options.mode & !0o777 != 0 {
        return Err(KeyfileError {
            step: Step::Permissions,
            path: path.to_owned(),
            source: io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("mode {:o} is not permission bits", options.mode),
            ),
        });
    }
    let fail = |step, path: &Path| {
        let path = path.to_owned();
        move |source| KeyfileError { step, path, source }
    };
    // A temporary file left by an interrupted run keeps its own mode and owner, and a symlink
    // there points wherever its planter chose: unlink removes either itself, never its target.
    match fs::remove_file(&tmp) {
        Ok(()) => {}
        Err(err) if err.kind() == io::ErrorKind::NotFound => {}
        Err(err) => return Err(fail(Step::RemoveStale, &tmp)(err)),
    }
    // O_EXCL: anything planted at `tmp` since the removal fails the open instead of being
    // written through; O_NOFOLLOW says the same for links on every kernel and filesystem.
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(MODE)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&tmp)
        .map_err(fail(Step::Create, &tmp))?;
    // Owner and group first, on the descriptor (never a path a link could redirect), while the
    // mode is still 0600; then the mode, which the umask cannot narrow this way.
    let permitted = (|| {
        if options.owner.is_some() || options.group.is_some() {
            std::os::unix::fs::fchown(&file, options.owner, options.group)?;
        }
        file.set_permissions(fs::Permissions::from_mode(options.mode))
    })()
    .map_err(fail(Step::Permissions, &tmp));
    let written = permitted.and_then(|()| {
        (|| {
            file.write_all(bytes)?;
            file.sync_all()
        })()
        .map_err(fail(Step::Write, &tmp))
    });
    drop(file);
    let prepared = Prepared {
        tmp: Some(tmp),
        path: path.to_owned(),
    };
    // On an error, dropping `prepared` removes the temporary file.
    written.map(|()| prepared)
}

/// A file written and synced under its temporary name ([`prepare_with`]), not yet renamed into
/// place: [`Prepared::commit`] does that; dropped uncommitted, the temporary file is removed and
/// the target is unchanged.
#[derive(Debug)]
pub struct Prepared {
    tmp: Option<PathBuf>,
    path: PathBuf,
}

impl Prepared {
    /// Renames the temporary file over the target and syncs the directory.
    // r[impl issue.store.secret-file+2]
    pub fn commit(mut self) -> Result<(), KeyfileError> {
        let Some(tmp) = self.tmp.take() else {
            return Ok(());
        };
        let fail = |step, path: &Path| {
            let path = path.to_owned();
            move |source| KeyfileError { step, path, source }
        };
        if let Err(err) = fs::rename(&tmp, &self.path) {
            // Best effort: the next write removes it anyway.
            let _ = fs::remove_file(&tmp);
            return Err(fail(Step::Rename, &self.path)(err));
        }
        // The rename itself is durable only once the directory is synced.
        let dir = self
            .path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(fail(Step::SyncDir, dir))
    }
}

impl Drop for Prepared {
    fn drop(&mut self) {
        if let Some(tmp) = self.tmp.take() {
            let _ = fs::remove_file(tmp);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn secrets_match_only_when_equal_and_not_empty() {
        assert!(super::secret_eq("k3y", "k3y"));
        for (a, b) in [
            ("k3y", "k3z"),
            ("k3y", "k3y "),
            ("k3y", ""),
            ("", ""),
            ("k3y", "k3"),
        ] {
            assert!(!super::secret_eq(a, b), "{a:?} {b:?}");
        }
    }

    use super::*;
    use std::os::unix::fs::symlink;

    fn mode(path: &Path) -> u32 {
        fs::symlink_metadata(path)
            .expect("metadata")
            .permissions()
            .mode()
            & 0o777
    }

    // r[verify issue.store.secret-file+2]
    #[test]
    fn written_0600_and_replaced_whole() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("key.pem");
        write_private(&path, b"first").expect("written");
        assert_eq!(fs::read(&path).expect("read"), b"first");
        assert_eq!(mode(&path), 0o600);
        // An existing target with a wider mode is replaced by a 0600 file.
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).expect("chmod");
        write_private(&path, b"second").expect("rewritten");
        assert_eq!(fs::read(&path).expect("read"), b"second");
        assert_eq!(mode(&path), 0o600);
        assert!(!temp_path(&path).exists(), "temporary file left behind");
    }

    // r[verify issue.store.secret-file+2]
    #[test]
    fn a_symlink_planted_at_the_temporary_path_is_not_followed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let victim = dir.path().join("victim");
        fs::write(&victim, b"untouched").expect("victim");
        fs::set_permissions(&victim, fs::Permissions::from_mode(0o644)).expect("chmod");
        let path = dir.path().join("key.pem");
        symlink(&victim, temp_path(&path)).expect("symlink");
        write_private(&path, b"secret").expect("written");
        assert_eq!(fs::read(&victim).expect("victim"), b"untouched");
        assert_eq!(mode(&victim), 0o644);
        assert_eq!(fs::read(&path).expect("read"), b"secret");
        assert_eq!(mode(&path), 0o600);
        assert!(
            !fs::symlink_metadata(&path)
                .expect("metadata")
                .file_type()
                .is_symlink()
        );
        // A dangling link (a file the planter hopes the node creates) is not followed either.
        let absent = dir.path().join("absent");
        symlink(&absent, temp_path(&path)).expect("symlink");
        write_private(&path, b"again").expect("written");
        assert!(!absent.exists(), "the write created the link's target");
        assert_eq!(fs::read(&path).expect("read"), b"again");
    }

    // r[verify issue.store.secret-file+2]
    #[test]
    fn a_temporary_file_left_by_a_crash_is_replaced_not_reused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("key.pem");
        let tmp = temp_path(&path);
        fs::write(
            &tmp,
            b"half written by a run that died, and much longer than the new one",
        )
        .expect("leftover");
        fs::set_permissions(&tmp, fs::Permissions::from_mode(0o666)).expect("chmod");
        write_private(&path, b"new").expect("written");
        assert_eq!(fs::read(&path).expect("read"), b"new");
        assert_eq!(mode(&path), 0o600);
        assert!(!tmp.exists());
    }

    // r[verify issue.store.secret-file+2]
    #[test]
    fn a_failed_write_names_the_file_and_leaves_the_current_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("key.pem");
        write_private(&path, b"current").expect("written");
        // The temporary path is a directory: it cannot be removed as a file nor created.
        fs::create_dir(temp_path(&path)).expect("mkdir");
        let err = write_private(&path, b"next").expect_err("a directory in the way");
        assert_eq!(err.path, temp_path(&path));
        assert!(err.to_string().contains("key.pem.tmp"), "{err}");
        assert_eq!(fs::read(&path).expect("read"), b"current");
    }

    // r[verify issue.store.secret-file+2]
    // r[verify issue.deploy]
    #[test]
    fn written_with_the_asked_owner_group_and_mode() {
        use std::os::unix::fs::MetadataExt as _;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("key.pem");
        let (uid, gid) = {
            let meta = fs::metadata(dir.path()).expect("dir");
            (meta.uid(), meta.gid())
        };
        // The current ids, given explicitly, and a group-readable mode.
        let options = FileOptions {
            mode: 0o640,
            owner: Some(uid),
            group: Some(gid),
        };
        write_with(&path, b"key", options).expect("written");
        let meta = fs::metadata(&path).expect("metadata");
        assert_eq!(meta.permissions().mode() & 0o7777, 0o640);
        assert_eq!((meta.uid(), meta.gid()), (uid, gid));
        assert_eq!(fs::read(&path).expect("read"), b"key");
        // Numeric ids of no user at all: as root, the file is given to them.
        if uid == 0 {
            let options = FileOptions {
                mode: 0o600,
                owner: Some(54321),
                group: Some(54322),
            };
            write_with(&path, b"key2", options).expect("written");
            let meta = fs::metadata(&path).expect("metadata");
            assert_eq!((meta.uid(), meta.gid()), (54321, 54322));
            assert_eq!(meta.permissions().mode() & 0o7777, 0o600);
        } else {
            eprintln!("not root: chown to another uid not tested");
        }
        // Only the group given: the owner stays.
        let cert = dir.path().join("cert.pem");
        write_with(
            &cert,
            b"cert",
            FileOptions {
                mode: 0o644,
                owner: None,
                group: Some(gid),
            },
        )
        .expect("written");
        assert_eq!(
            fs::metadata(&cert).expect("metadata").permissions().mode() & 0o7777,
            0o644
        );
        // Bits beyond the permission bits are refused, and nothing is written.
        let err = write_with(
            &dir.path().join("suid"),
            b"x",
            FileOptions {
                mode: 0o4755,
                owner: None,
                group: None,
            },
        )
        .expect_err("setuid");
        assert_eq!(err.step, Step::Permissions);
        assert!(!dir.path().join("suid").exists());
        assert!(!temp_path(&dir.path().join("suid")).exists());
        // A link planted at the temporary path is still never followed.
        let victim = dir.path().join("victim");
        fs::write(&victim, b"untouched").expect("victim");
        std::os::unix::fs::symlink(&victim, temp_path(&path)).expect("symlink");
        write_with(&path, b"key3", options).expect("written");
        assert_eq!(fs::read(&victim).expect("victim"), b"untouched");
        assert_eq!(fs::read(&path).expect("read"), b"key3");
    }

    // r[verify issue.store.secret-file+2]
    #[test]
    fn a_prepared_file_replaces_its_target_only_when_committed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("key.pem");
        write_private(&path, b"old").expect("written");
        let prepared = prepare_with(&path, b"new", FileOptions::PRIVATE).expect("prepared");
        assert_eq!(fs::read(&path).expect("read"), b"old");
        assert_eq!(fs::read(temp_path(&path)).expect("read tmp"), b"new");
        // Dropped uncommitted: the target is unchanged and nothing is left behind.
        drop(prepared);
        assert_eq!(fs::read(&path).expect("read"), b"old");
        assert!(!temp_path(&path).exists());
        prepare_with(&path, b"new", FileOptions::PRIVATE)
            .expect("prepared")
            .commit()
            .expect("committed");
        assert_eq!(fs::read(&path).expect("read"), b"new");
        assert_eq!(mode(&path), 0o600);
        assert!(!temp_path(&path).exists());
    }

    // r[verify issue.store.secret-file+2]
    // r[verify issue.deploy]
    #[test]
    fn an_owner_that_cannot_be_given_leaves_the_target_and_no_temporary_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("key.pem");
        write_private(&path, b"current").expect("written");
        // A mode that is not permission bits: refused before anything is created.
        let setuid = FileOptions {
            mode: 0o4640,
            ..FileOptions::PRIVATE
        };
        let err = write_with(&path, b"next", setuid).expect_err("setuid refused");
        assert_eq!(err.step, Step::Permissions);
        assert_eq!(fs::read(&path).expect("read"), b"current");
        assert!(!temp_path(&path).exists());
        // Giving the file to root is refused to anyone else (EPERM at fchown).
        // The directory this test created is owned by the uid it runs as.
        let me = std::os::unix::fs::MetadataExt::uid(&fs::metadata(dir.path()).expect("dir"));
        if me == 0 {
            eprintln!("root: fchown cannot fail here; the EPERM case is not tested");
            return;
        }
        let to_root = FileOptions {
            owner: Some(0),
            ..FileOptions::PRIVATE
        };
        let err = write_with(&path, b"next", to_root).expect_err("fchown to root");
        assert_eq!(err.step, Step::Permissions, "{err}");
        assert_eq!(fs::read(&path).expect("read"), b"current");
        assert!(!temp_path(&path).exists(), "temporary file left behind");
    }
}
