//! Which tracey runs: the one given, else `$TRACEY`, else `tracey` on `PATH`, made absolute.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// The tracey binary: `given` (`--tracey`), else `env` (`$TRACEY`, when not empty), else
/// `tracey` found on `path_var`, [resolved](resolve) from `cwd`; `None` when there is no such
/// file.
pub fn find(
    given: Option<&Path>,
    env: Option<&OsStr>,
    cwd: &Path,
    path_var: Option<&OsStr>,
) -> Option<PathBuf> {
    let named = given
        .map(Path::to_path_buf)
        .or_else(|| env.filter(|p| !p.is_empty()).map(PathBuf::from));
    resolve(
        named.as_deref().unwrap_or(Path::new("tracey")),
        cwd,
        path_var,
    )
}

/// The path `path` names, absolute: relative to `cwd` when it has a directory part, else found on
/// `path_var` (as a shell finds a command); `None` when no such file exists.
pub fn resolve(path: &Path, cwd: &Path, path_var: Option<&OsStr>) -> Option<PathBuf> {
    let found = if path.components().count() > 1 || path.is_absolute() {
        cwd.join(path)
    } else {
        std::env::split_paths(path_var?)
            .map(|dir| dir.join(path))
            .find(|candidate| candidate.is_file())?
    };
    // `query status` runs in each tree's directory, where a relative path names another file.
    found.canonicalize().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    // i[verify spec-check.parity+2]
    #[test]
    fn a_tracey_path_is_made_absolute_and_a_bare_name_found_on_path() {
        let dir = tempfile::tempdir().expect("temp dir");
        let bin = dir.path().canonicalize().expect("dir").join("bin");
        std::fs::create_dir_all(&bin).expect("mkdir");
        std::fs::write(bin.join("tracey"), "").expect("write");
        assert_eq!(
            resolve(Path::new("bin/tracey"), dir.path(), None),
            Some(bin.join("tracey"))
        );
        assert_eq!(
            resolve(Path::new("./bin/tracey"), dir.path(), None),
            Some(bin.join("tracey"))
        );
        assert_eq!(
            resolve(Path::new("tracey"), dir.path(), Some(bin.as_os_str())),
            Some(bin.join("tracey"))
        );
        assert_eq!(resolve(Path::new("tracey"), dir.path(), None), None);
        assert_eq!(resolve(Path::new("bin/missing"), dir.path(), None), None);
    }

    #[test]
    fn the_flag_wins_over_the_variable_which_wins_over_path_and_an_empty_variable_is_none() {
        let dir = tempfile::tempdir().expect("temp dir");
        let top = dir.path().canonicalize().expect("dir");
        for name in ["given", "env", "tracey"] {
            std::fs::write(top.join(name), "").expect("write");
        }
        let path_var = Some(top.as_os_str());
        let found = |given: Option<&str>, env: Option<&str>| {
            find(given.map(Path::new), env.map(OsStr::new), &top, path_var)
        };
        assert_eq!(
            found(Some("./given"), Some("./env")),
            Some(top.join("given"))
        );
        assert_eq!(found(None, Some("./env")), Some(top.join("env")));
        assert_eq!(found(None, Some("")), Some(top.join("tracey")));
        assert_eq!(found(None, None), Some(top.join("tracey")));
        assert_eq!(found(Some("./none"), None), None);
    }
}
