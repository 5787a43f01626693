//! The admin Unix socket: bound so that it is never connectable by anyone but the node's user,
//! and never by taking over a live node's socket or deleting something that is not a socket.

use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;

use super::AdminError;

/// The (device, inode) of the socket at `path`, if one is there.
pub(super) fn identity(path: &Path) -> Option<(u64, u64)> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    meta.file_type()
        .is_socket()
        .then(|| (meta.dev(), meta.ino()))
}

// i[impl node.admin.socket+2]
/// The directory the socket at `path` is bound in: a bare name (`node.sock`) is in the working
/// directory, whose parent `Path::parent` gives as the empty path.
fn parent_dir(path: &Path) -> std::path::PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => std::path::PathBuf::from("."),
    }
}

// i[impl node.admin.socket+2]
/// Binds the socket at `path` with mode 0600 from the moment it is connectable: it is bound in
/// a fresh 0700 directory beside `path`, given its mode there, then renamed into place. A
/// socket already at `path` is replaced only if no node answers on it; anything else there is
/// refused.
pub(super) fn bind(path: &Path) -> Result<(tokio::net::UnixListener, (u64, u64)), AdminError> {
    let err = |source| AdminError::Unix {
        path: path.to_owned(),
        source,
    };
    let parent = parent_dir(path);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&parent)
        .map_err(err)?;
    check_existing(path)?;
    let name = path
        .file_name()
        .ok_or_else(|| err(std::io::Error::new(ErrorKind::InvalidInput, "no file name")))?;
    let staging = parent.join(format!(
        ".{}.{}.bind",
        name.to_string_lossy(),
        std::process::id()
    ));
    // mkdir's mode can only lose bits to the umask: 0700 or tighter, whoever's umask it is.
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&staging)
        .map_err(err)?;
    let staged = staging.join("s");
    let result = (|| {
        let listener = tokio::net::UnixListener::bind(&staged)?;
        std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o600))?;
        std::fs::rename(&staged, path)?;
        Ok(listener)
    })();
    let _ = std::fs::remove_file(&staged);
    let _ = std::fs::remove_dir(&staging);
    let listener = result.map_err(err)?;
    let id = identity(path).ok_or_else(|| {
        err(std::io::Error::new(
            ErrorKind::NotFound,
            "the socket vanished after it was bound",
        ))
    })?;
    Ok((listener, id))
}

/// Refuses a path that holds a non-socket or a socket a node answers on; a stale socket (no
/// one listening) is left for the rename to replace.
fn check_existing(path: &Path) -> Result<(), AdminError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(AdminError::Unix {
                path: path.to_owned(),
                source,
            });
        }
    };
    if !meta.file_type().is_socket() {
        return Err(AdminError::NotASocket {
            path: path.to_owned(),
        });
    }
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_) => Err(AdminError::SocketInUse {
            path: path.to_owned(),
        }),
        Err(e) if e.kind() == ErrorKind::ConnectionRefused => Ok(()),
        Err(source) => Err(AdminError::Unix {
            path: path.to_owned(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // i[verify node.admin.socket+2]
    #[test]
    fn a_bare_socket_name_is_bound_in_the_working_directory() {
        assert_eq!(parent_dir(Path::new("node.sock")), Path::new("."));
        assert_eq!(parent_dir(Path::new("./node.sock")), Path::new("."));
        assert_eq!(parent_dir(Path::new("run/node.sock")), Path::new("run"));
        assert_eq!(
            parent_dir(Path::new("/run/holdfast/admin.sock")),
            Path::new("/run/holdfast")
        );
    }
}
