//! Reading a secret file (a TSIG key, a token) that only its owner may read.

use std::io::{self, Read as _};
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::Path;

/// Why a secret file was not read. Its text never appears here.
#[derive(Debug, thiserror::Error)]
pub enum SecretFileError {
    /// The path is a symlink (refused, never followed).
    #[error("{path} is a symlink; point the config at the file itself")]
    Symlink {
        /// The file.
        path: String,
    },
    /// It could not be opened, inspected or read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// Not a regular file.
    #[error("{path} is not a regular file")]
    NotRegular {
        /// The file.
        path: String,
    },
    /// Its mode lets the group or others read or write it.
    #[error(
        "{path} has mode {mode:04o}; it must not be readable by group or others (chmod 600 {path})"
    )]
    Mode {
        /// The file.
        path: String,
        /// Its permission bits.
        mode: u32,
    },
}

/// Opens a secret file once, without following a symlink, and checks the open file itself (so
/// nothing can be swapped in between the check and the read): a regular file whose mode lets no
/// one but its owner read or write it. Returns its text.
pub fn read_secret_file(path: &Path) -> Result<String, SecretFileError> {
    let shown = || path.display().to_string();
    let io = |source| SecretFileError::Io {
        path: shown(),
        source,
    };
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        // std opens every file with O_CLOEXEC already; a symlink must fail to open.
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                SecretFileError::Symlink { path: shown() }
            } else {
                io(e)
            }
        })?;
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() {
        return Err(SecretFileError::NotRegular { path: shown() });
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(SecretFileError::Mode {
            path: shown(),
            mode,
        });
    }
    let mut text = String::new();
    file.read_to_string(&mut text).map_err(io)?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_owner_only_regular_file_is_read_and_its_text_never_shown() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        std::fs::write(&path, "hunter2").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = read_secret_file(&path).unwrap_err();
        assert!(
            matches!(err, SecretFileError::Mode { mode: 0o644, .. }),
            "{err}"
        );
        assert!(!err.to_string().contains("hunter2"), "{err}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read_secret_file(&path).unwrap(), "hunter2");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert!(matches!(
            read_secret_file(&link),
            Err(SecretFileError::Symlink { .. })
        ));
        assert!(matches!(
            read_secret_file(dir.path()),
            Err(SecretFileError::NotRegular { .. }) | Err(SecretFileError::Io { .. })
        ));
        assert!(matches!(
            read_secret_file(&dir.path().join("missing")),
            Err(SecretFileError::Io { .. })
        ));
    }
}
