//! Deploy: copies of a certificate where other services read them — `cert.pem`, `chain.pem`,
//! `fullchain.pem` and `key.pem` in a directory of the operator's choice, with an owner, a group
//! and modes (the key never wider than 0640), each written atomically through holdfast-keyfile.

use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};

use holdfast_keyfile::FileOptions;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject as _;

use crate::cert::CertifiedPair;

/// The widest mode a deployed key may have.
pub const MAX_KEY_MODE: u32 = 0o640;
/// The widest mode the deployed certificate files may have.
pub const MAX_CERT_MODE: u32 = 0o644;

/// A user or a group: a name, or a numeric id (`owner = 0`, `group = "ssl-cert"`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(untagged)]
pub enum Id {
    /// A numeric id, used as it is.
    Number(u32),
    /// A name, looked up in the system's user or group database.
    Name(String),
}

impl std::fmt::Display for Id {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Id::Number(n) => write!(f, "{n}"),
            Id::Name(name) => write!(f, "{name:?}"),
        }
    }
}

/// A mode that is not what a deployed file may have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModeError {
    /// Not octal permission bits written as text.
    #[error("{0:?} is not a mode: write octal permission bits as text, e.g. \"0640\"")]
    NotOctal(String),
    /// Wider than the file may be.
    #[error("mode {mode:04o} is wider than {max:04o}, the widest this file may have")]
    TooWide {
        /// The mode asked.
        mode: u32,
        /// The widest allowed.
        max: u32,
    },
}

/// Parses octal text (`"0640"`, `"640"`, `"0o640"`) into permission bits no wider than `max`.
// r[impl issue.deploy]
pub fn parse_mode(text: &str, max: u32) -> Result<u32, ModeError> {
    let digits = text.strip_prefix("0o").unwrap_or(text);
    let not_octal = || ModeError::NotOctal(text.to_owned());
    if digits.is_empty() || digits.len() > 4 || !digits.bytes().all(|b| (b'0'..=b'7').contains(&b))
    {
        return Err(not_octal());
    }
    let mode = u32::from_str_radix(digits, 8).map_err(|_| not_octal())?;
    if mode & !max != 0 {
        return Err(ModeError::TooWide { mode, max });
    }
    Ok(mode)
}

/// The deployed key's mode: octal text, at most 0640 (default 0600).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(try_from = "String")]
pub struct KeyMode(pub u32);

impl Default for KeyMode {
    fn default() -> Self {
        KeyMode(0o600)
    }
}

impl TryFrom<String> for KeyMode {
    type Error = ModeError;
    fn try_from(text: String) -> Result<Self, ModeError> {
        parse_mode(&text, MAX_KEY_MODE).map(KeyMode)
    }
}

/// The deployed certificate files' mode: octal text, at most 0644 (default 0644).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(try_from = "String")]
pub struct CertMode(pub u32);

impl Default for CertMode {
    fn default() -> Self {
        CertMode(0o644)
    }
}

impl TryFrom<String> for CertMode {
    type Error = ModeError;
    fn try_from(text: String) -> Result<Self, ModeError> {
        parse_mode(&text, MAX_CERT_MODE).map(CertMode)
    }
}

/// `[issuance.deploy]`, or a certificate's own `deploy`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeployConfig {
    /// The directory: in `[issuance.deploy]`, each certificate gets `DIR/NAME/` (NAME its first
    /// name); in a certificate's own `deploy`, the files go in `DIR` itself.
    pub dir: PathBuf,
    /// The files' owner (unset: the node's user).
    #[serde(default)]
    pub owner: Option<Id>,
    /// The files' group (unset: the node's group).
    #[serde(default)]
    pub group: Option<Id>,
    /// The key's mode (default `"0600"`, at most `"0640"`).
    #[serde(default)]
    pub mode: KeyMode,
    /// The mode of `cert.pem`, `chain.pem` and `fullchain.pem` (default `"0644"`).
    #[serde(default)]
    pub cert_mode: CertMode,
}

/// Who the node runs as: whom it may give its files to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Running {
    /// The effective uid.
    pub uid: u32,
    /// The effective gid and the supplementary groups.
    pub gids: Vec<u32>,
}

impl Running {
    /// This process.
    pub fn current() -> Self {
        let mut gids = vec![nix::unistd::getegid().as_raw()];
        gids.extend(
            nix::unistd::getgroups()
                .unwrap_or_default()
                .into_iter()
                .map(|g| g.as_raw()),
        );
        Running {
            uid: nix::unistd::geteuid().as_raw(),
            gids,
        }
    }
}

/// A deploy that cannot be set up or written.
#[derive(Debug, thiserror::Error)]
pub enum DeployError {
    /// The owner names no user.
    #[error("no user {0}")]
    NoUser(Id),
    /// The group names no group.
    #[error("no group {0}")]
    NoGroup(Id),
    /// 4294967295: chown reads it as -1, "leave unchanged", not as an id.
    #[error("{id} is not a usable id (chown reads it as -1, \"leave unchanged\")")]
    NotAnId {
        /// `owner` or `group`.
        key: &'static str,
        /// The number given.
        id: u32,
    },
    /// The node is not root and the owner is not its user, or the group not one of its groups.
    #[error("the node runs as uid {uid}, not root: it cannot give files to {key} {id}")]
    NotPermitted {
        /// `owner` or `group`.
        key: &'static str,
        /// The id asked.
        id: u32,
        /// The node's uid.
        uid: u32,
    },
    /// The user or group database could not be read.
    #[error("looking up {id}: {message}")]
    Lookup {
        /// `owner` or `group`.
        key: &'static str,
        /// What was looked up.
        id: Id,
        /// Why it failed.
        message: String,
    },
    /// The directory is not an absolute path.
    #[error("{} is not an absolute path", .0.display())]
    Relative(PathBuf),
    /// The directory could not be created.
    #[error("{}: {source}", path.display())]
    Dir {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The directory, or one above it, could be changed by someone other than root and the
    /// node's user (or `DIR/NAME` is a link): writing a key there would hand it to them.
    #[error(
        "{}: {why}; a deploy directory and every directory above it must be owned by root or the node's user and writable by no one else",
        path.display()
    )]
    Unsafe {
        /// The directory.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// Two certificates would write the same files.
    #[error(
        "{} is where both {first} and {second} deploy: give each certificate its own directory",
        dir.display()
    )]
    Duplicate {
        /// The directory both resolve to.
        dir: PathBuf,
        /// The entry that named it first.
        first: String,
        /// The entry that names it again.
        second: String,
    },
    /// The chain is not PEM certificates.
    #[error("the chain cannot be read: {0}")]
    Pem(String),
    /// A file could not be written (the one named is unchanged).
    #[error(transparent)]
    Write(#[from] holdfast_keyfile::KeyfileError),
}

impl DeployError {
    /// The config key the error is about, when it is about one.
    pub fn key(&self) -> Option<&'static str> {
        match self {
            DeployError::NoUser(_) => Some("owner"),
            DeployError::NoGroup(_) => Some("group"),
            DeployError::Lookup { key, .. }
            | DeployError::NotAnId { key, .. }
            | DeployError::NotPermitted { key, .. } => Some(key),
            DeployError::Relative(_)
            | DeployError::Unsafe { .. }
            | DeployError::Duplicate { .. } => Some("dir"),
            _ => None,
        }
    }
}

/// The uid of `id` (a number as it is, a name looked up).
// r[impl issue.deploy]
pub fn uid_of(id: &Id) -> Result<u32, DeployError> {
    match id {
        Id::Number(u32::MAX) => Err(DeployError::NotAnId {
            key: "owner",
            id: u32::MAX,
        }),
        Id::Number(n) => Ok(*n),
        Id::Name(name) => match nix::unistd::User::from_name(name) {
            Ok(Some(user)) => Ok(user.uid.as_raw()),
            Ok(None) => Err(DeployError::NoUser(id.clone())),
            Err(e) => Err(DeployError::Lookup {
                key: "owner",
                id: id.clone(),
                message: e.to_string(),
            }),
        },
    }
}

/// The gid of `id` (a number as it is, a name looked up).
// r[impl issue.deploy]
pub fn gid_of(id: &Id) -> Result<u32, DeployError> {
    match id {
        Id::Number(u32::MAX) => Err(DeployError::NotAnId {
            key: "group",
            id: u32::MAX,
        }),
        Id::Number(n) => Ok(*n),
        Id::Name(name) => match nix::unistd::Group::from_name(name) {
            Ok(Some(group)) => Ok(group.gid.as_raw()),
            Ok(None) => Err(DeployError::NoGroup(id.clone())),
            Err(e) => Err(DeployError::Lookup {
                key: "group",
                id: id.clone(),
                message: e.to_string(),
            }),
        },
    }
}

impl DeployConfig {
    /// Checks what the types alone cannot: an absolute directory (a relative one would depend
    /// on the node's working directory) that no one else can change, an owner and a group that
    /// exist and that the node, as it runs, may give files to.
    pub fn check(&self) -> Result<(), DeployError> {
        self.check_for(&Running::current())
    }

    /// [`DeployConfig::check`] for a node running as `running`.
    // r[impl issue.deploy]
    pub fn check_for(&self, running: &Running) -> Result<(), DeployError> {
        if !self.dir.is_absolute() {
            return Err(DeployError::Relative(self.dir.clone()));
        }
        let owner = self.owner.as_ref().map(uid_of).transpose()?;
        let group = self.group.as_ref().map(gid_of).transpose()?;
        // chown(2) lets only root give a file away, and a non-root owner only to its own groups:
        // refused here rather than as a fault at every tick.
        if running.uid != 0 {
            let refuse = |key, id| DeployError::NotPermitted {
                key,
                id,
                uid: running.uid,
            };
            if let Some(id) = owner.filter(|id| *id != running.uid) {
                return Err(refuse("owner", id));
            }
            if let Some(id) = group.filter(|id| !running.gids.contains(id)) {
                return Err(refuse("group", id));
            }
        }
        check_safe(&self.dir)
    }

    /// The directory certificate `name`'s files are written in: its own under `dir` when the
    /// deploy is shared (`[issuance.deploy]`), else `dir` itself (a certificate's own deploy).
    pub fn dir_of(&self, name: &str, shared: bool) -> PathBuf {
        if shared {
            self.dir.join(name)
        } else {
            self.dir.clone()
        }
    }

    /// Where one certificate's files go, its ids resolved: `dir` as it is (`shared`: false) or
    /// `dir/NAME` (`shared`: true, the section that serves every certificate).
    pub fn target(&self, name: &str, shared: bool) -> Result<DeployTarget, DeployError> {
        let owner = self.owner.as_ref().map(uid_of).transpose()?;
        let group = self.group.as_ref().map(gid_of).transpose()?;
        let dir = self.dir_of(name, shared);
        Ok(DeployTarget {
            base: self.dir.clone(),
            dir,
            key: FileOptions {
                mode: self.mode.0,
                owner,
                group,
            },
            cert: FileOptions {
                mode: self.cert_mode.0,
                owner,
                group,
            },
        })
    }
}

/// The files of one deployed certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeployedPaths {
    /// The directory.
    pub dir: PathBuf,
    /// `cert.pem`: the leaf.
    pub cert: PathBuf,
    /// `chain.pem`: the chain after the leaf.
    pub chain: PathBuf,
    /// `fullchain.pem`: the leaf and the chain.
    pub fullchain: PathBuf,
    /// `key.pem`: the private key.
    pub key: PathBuf,
}

/// Where and how one certificate is deployed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeployTarget {
    /// The configured directory (`dir`'s parent when shared, else `dir` itself).
    base: PathBuf,
    dir: PathBuf,
    key: FileOptions,
    cert: FileOptions,
}

impl DeployTarget {
    /// The files it writes.
    pub fn paths(&self) -> DeployedPaths {
        let at = |file: &str| self.dir.join(file);
        DeployedPaths {
            dir: self.dir.clone(),
            cert: at("cert.pem"),
            chain: at("chain.pem"),
            fullchain: at("fullchain.pem"),
            key: at("key.pem"),
        }
    }

    /// Writes `pair`'s four files, each atomically with its owner, group and mode; the
    /// directories are created (0755) when missing. Right before writing, the directory and every
    /// one above it are checked as [`DeployConfig::check`] does and `DIR/NAME` must be a real
    /// directory, not a link: since then no one but root and the node's user can change any of
    /// them, nothing can redirect the writes between the check and the rename.
    /// All four are written under temporary names first and only then renamed into place, so a
    /// failure leaves the old set whole.
    // r[impl issue.deploy]
    pub fn write(&self, pair: &CertifiedPair) -> Result<DeployedPaths, DeployError> {
        let dir_error = |path: &Path| {
            let path = path.to_owned();
            move |source| DeployError::Dir { path, source }
        };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(&self.base)
            .map_err(dir_error(&self.base))?;
        check_safe(&self.base)?;
        if self.dir != self.base {
            // `mkdir` never follows a link at NAME: one there is an error, then refused below.
            match std::fs::DirBuilder::new().mode(0o755).create(&self.dir) {
                Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                    return Err(dir_error(&self.dir)(e));
                }
                _ => {}
            }
            let meta = std::fs::symlink_metadata(&self.dir).map_err(dir_error(&self.dir))?;
            if !meta.is_dir() {
                return Err(DeployError::Unsafe {
                    path: self.dir.clone(),
                    why: "it is a link or not a directory".into(),
                });
            }
            check_one(&self.dir, &meta, false)?;
        }
        let paths = self.paths();
        let (leaf, chain, fullchain) = split_leaf(&pair.chain_pem)?;
        // All four are written under their temporary names before any is renamed: a failure
        // leaves the old set whole, and a reader sees a mix only for the four renames.
        let prepared = [
            holdfast_keyfile::prepare_with(&paths.key, pair.key_pem.as_bytes(), self.key)?,
            holdfast_keyfile::prepare_with(&paths.cert, leaf.as_bytes(), self.cert)?,
            holdfast_keyfile::prepare_with(&paths.chain, chain.as_bytes(), self.cert)?,
            holdfast_keyfile::prepare_with(&paths.fullchain, fullchain.as_bytes(), self.cert)?,
        ];
        for file in prepared {
            file.commit()?;
        }
        Ok(paths)
    }
}

/// Refuses `dir` when it, or any directory above it, is owned by other than root or the node's
/// user, or is writable by its group or others (an ancestor with the sticky bit, such as
/// `/tmp`, may be: no one else can rename what is in it). Links are resolved first and the real
/// directories checked; the part of `dir` not yet created is not checked (it will be the
/// node's, 0755).
// r[impl issue.deploy]
fn check_safe(dir: &Path) -> Result<(), DeployError> {
    let mut existing = dir;
    let real = loop {
        match std::fs::canonicalize(existing) {
            Ok(real) => break real,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => match existing.parent() {
                Some(parent) => existing = parent,
                None => return Ok(()),
            },
            Err(source) => {
                return Err(DeployError::Dir {
                    path: existing.to_owned(),
                    source,
                });
            }
        }
    };
    let whole = existing == dir;
    for (at, path) in real.ancestors().enumerate() {
        let meta = std::fs::metadata(path).map_err(|source| DeployError::Dir {
            path: path.to_owned(),
            source,
        })?;
        check_one(path, &meta, !(whole && at == 0))?;
    }
    Ok(())
}

/// One directory of [`check_safe`]: `above` when it is an ancestor of the deploy directory.
fn check_one(path: &Path, meta: &std::fs::Metadata, above: bool) -> Result<(), DeployError> {
    let unsafe_ = |why: String| DeployError::Unsafe {
        path: path.to_owned(),
        why,
    };
    let me = nix::unistd::Uid::effective().as_raw();
    if meta.uid() != 0 && meta.uid() != me {
        return Err(unsafe_(format!("it is owned by uid {}", meta.uid())));
    }
    let mode = meta.mode();
    let sticky = mode & 0o1000 != 0;
    if mode & 0o022 != 0 && !(above && sticky) {
        return Err(unsafe_(format!(
            "its mode {:04o} lets others write in it",
            mode & 0o7777
        )));
    }
    Ok(())
}

/// The certificates of `chain` (the PEM CERTIFICATE blocks, read by rustls-pki-types), encoded
/// again (by the `pem` crate): the leaf, the rest, and both — the third always the first two
/// joined.
fn split_leaf(chain: &str) -> Result<(String, String, String), DeployError> {
    let ders = CertificateDer::pem_slice_iter(chain.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| DeployError::Pem(e.to_string()))?;
    let config = pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF);
    let mut blocks = ders
        .iter()
        .map(|der| pem::encode_config(&pem::Pem::new("CERTIFICATE", der.as_ref()), config));
    let leaf = blocks
        .next()
        .ok_or_else(|| DeployError::Pem("no certificate".into()))?;
    let rest: String = blocks.collect();
    Ok((leaf.clone(), rest.clone(), leaf + &rest))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;
    use std::path::Path;
    use std::time::{Duration, SystemTime};

    fn pair() -> CertifiedPair {
        let (chain, key) = crate::cert::testing::leaf_for(
            &["a.example", "www.a.example"],
            SystemTime::now() - Duration::from_secs(60),
            Duration::from_secs(86400),
        );
        CertifiedPair::parse("a.example", &chain, &key).unwrap()
    }

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
    }

    // r[verify issue.deploy]
    #[test]
    fn modes_are_octal_text_and_the_key_is_never_wider_than_0640() {
        assert_eq!(parse_mode("0640", MAX_KEY_MODE), Ok(0o640));
        assert_eq!(parse_mode("600", MAX_KEY_MODE), Ok(0o600));
        assert_eq!(parse_mode("0o400", MAX_KEY_MODE), Ok(0o400));
        assert_eq!(
            parse_mode("0644", MAX_KEY_MODE),
            Err(ModeError::TooWide {
                mode: 0o644,
                max: 0o640
            })
        );
        assert_eq!(
            parse_mode("0660", MAX_KEY_MODE).unwrap_err().to_string(),
            "mode 0660 is wider than 0640, the widest this file may have"
        );
        for bad in ["", "0x640", "rw-r-----", "0648", "06400", "-640", " 640"] {
            assert!(
                matches!(parse_mode(bad, MAX_KEY_MODE), Err(ModeError::NotOctal(_))),
                "{bad:?}"
            );
        }
        assert!(matches!(
            parse_mode("4644", MAX_CERT_MODE),
            Err(ModeError::TooWide { .. })
        ));
        let config: DeployConfig = serde_json::from_value(serde_json::json!({
            "dir": "/etc/certs", "owner": 0, "group": "root", "mode": "0640",
        }))
        .unwrap();
        assert_eq!(config.mode, KeyMode(0o640));
        assert_eq!(config.cert_mode, CertMode(0o644));
        assert_eq!(config.owner, Some(Id::Number(0)));
        assert_eq!(config.group, Some(Id::Name("root".into())));
        let wide = serde_json::from_value::<DeployConfig>(serde_json::json!({
            "dir": "/etc/certs", "mode": "0644",
        }))
        .unwrap_err();
        assert!(wide.to_string().contains("wider than 0640"), "{wide}");
        // A number is refused: 640 would not be the mode it looks like.
        assert!(
            serde_json::from_value::<DeployConfig>(serde_json::json!({
                "dir": "/etc/certs", "mode": 640,
            }))
            .is_err()
        );
    }

    // r[verify issue.deploy]
    #[test]
    fn the_four_files_are_written_with_the_asked_owner_group_and_modes() {
        let dir = tempfile::tempdir().unwrap();
        let meta = std::fs::metadata(dir.path()).unwrap();
        let (uid, gid) = (meta.uid(), meta.gid());
        let config = DeployConfig {
            dir: dir.path().to_owned(),
            owner: Some(Id::Number(uid)),
            group: Some(Id::Number(gid)),
            mode: KeyMode(0o640),
            cert_mode: CertMode(0o644),
        };
        let pair = pair();
        let paths = config
            .target("a.example", true)
            .unwrap()
            .write(&pair)
            .unwrap();
        assert_eq!(paths.dir, dir.path().join("a.example"));
        assert_eq!(mode(&paths.key), 0o640);
        for file in [&paths.cert, &paths.chain, &paths.fullchain] {
            assert_eq!(mode(file), 0o644, "{}", file.display());
        }
        for file in [&paths.key, &paths.cert, &paths.chain, &paths.fullchain] {
            let m = std::fs::metadata(file).unwrap();
            assert_eq!((m.uid(), m.gid()), (uid, gid));
        }
        let read = |p: &Path| std::fs::read_to_string(p).unwrap();
        assert_eq!(read(&paths.key), pair.key_pem);
        assert_eq!(read(&paths.fullchain), pair.chain_pem);
        assert_eq!(
            format!("{}{}", read(&paths.cert), read(&paths.chain)),
            pair.chain_pem
        );
        assert_eq!(read(&paths.cert).matches("BEGIN CERTIFICATE").count(), 1);
        // The leaf alone is the certificate of both names.
        let again = CertifiedPair::parse_for(
            &["a.example".to_owned(), "www.a.example".to_owned()],
            &read(&paths.cert),
            &read(&paths.key),
        );
        assert!(again.is_ok(), "{again:?}");
        // A certificate's own deploy writes in its directory as given.
        let own = dir.path().join("own");
        let target = DeployConfig {
            dir: own.clone(),
            ..config.clone()
        }
        .target("a.example", false)
        .unwrap();
        assert_eq!(target.write(&pair).unwrap().key, own.join("key.pem"));
        // Names are looked up: root is 0 everywhere; a missing user is an error naming the key.
        let named = DeployConfig {
            owner: Some(Id::Name("root".into())),
            group: Some(Id::Name("root".into())),
            ..config.clone()
        };
        assert_eq!(named.target("a.example", true).unwrap().key.owner, Some(0));
        let missing = DeployConfig {
            owner: Some(Id::Name("no-such-user-holdfast".into())),
            ..config.clone()
        };
        let err = missing.check().unwrap_err();
        assert_eq!(err.key(), Some("owner"));
        assert!(err.to_string().contains("no-such-user-holdfast"), "{err}");
        let missing = DeployConfig {
            group: Some(Id::Name("no-such-group-holdfast".into())),
            ..config
        };
        assert_eq!(missing.check().unwrap_err().key(), Some("group"));
        let relative = DeployConfig {
            dir: "certs".into(),
            ..named
        };
        assert_eq!(relative.check().unwrap_err().key(), Some("dir"));
    }

    // r[verify issue.deploy]
    #[test]
    fn as_root_the_files_are_given_to_another_numeric_owner() {
        if !nix::unistd::Uid::effective().is_root() {
            eprintln!("not root: chown to another uid not tested");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let config = DeployConfig {
            dir: dir.path().to_owned(),
            owner: Some(Id::Number(4242)),
            group: Some(Id::Number(4343)),
            mode: KeyMode(0o640),
            cert_mode: CertMode(0o640),
        };
        let paths = config
            .target("a.example", false)
            .unwrap()
            .write(&pair())
            .unwrap();
        for file in [&paths.key, &paths.cert, &paths.chain, &paths.fullchain] {
            let m = std::fs::metadata(file).unwrap();
            assert_eq!((m.uid(), m.gid()), (4242, 4343));
            assert_eq!(m.permissions().mode() & 0o7777, 0o640);
        }
    }

    fn deploy_in(dir: &Path) -> DeployConfig {
        DeployConfig {
            dir: dir.to_owned(),
            owner: None,
            group: None,
            mode: KeyMode(0o600),
            cert_mode: CertMode(0o644),
        }
    }

    fn chmod(path: &Path, mode: u32) {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    // r[verify issue.deploy]
    #[test]
    fn a_deploy_dir_others_can_write_is_refused_at_check_and_before_writing() {
        let dir = tempfile::tempdir().unwrap();
        let shared = dir.path().join("deploy");
        std::fs::create_dir(&shared).unwrap();
        let config = deploy_in(&shared);
        // Not yet there below a safe directory: fine (it will be created 0755).
        assert!(deploy_in(&shared.join("later/certs")).check().is_ok());
        config.check().unwrap();
        for wide in [0o777, 0o775, 0o757, 0o1777] {
            chmod(&shared, wide);
            let err = config.check().unwrap_err();
            assert_eq!(err.key(), Some("dir"), "{err}");
            assert!(err.to_string().contains("lets others write"), "{err}");
            // A directory below it is refused for its parent, unless that parent is sticky
            // (like /tmp): no one else can then move the node's directory in it.
            let below = deploy_in(&shared.join("sub")).check();
            if wide & 0o1000 == 0 {
                assert!(
                    matches!(below, Err(DeployError::Unsafe { .. })),
                    "{wide:o}: {below:?}"
                );
            } else {
                assert!(below.is_ok(), "{below:?}");
            }
        }
        // Checked again right before writing: nothing is written.
        chmod(&shared, 0o777);
        let target = config.target("a.example", true).unwrap();
        assert!(matches!(
            target.write(&pair()),
            Err(DeployError::Unsafe { .. })
        ));
        assert!(!shared.join("a.example").exists());
        chmod(&shared, 0o755);
        target.write(&pair()).unwrap();
        // A group- or world-writable NAME directory is refused too.
        chmod(&shared.join("a.example"), 0o770);
        assert!(matches!(
            target.write(&pair()),
            Err(DeployError::Unsafe { .. })
        ));
        // Through a link, the real directories are the ones checked.
        let open = dir.path().join("open");
        std::fs::create_dir(&open).unwrap();
        chmod(&open, 0o777);
        std::os::unix::fs::symlink(&open, dir.path().join("link")).unwrap();
        assert!(matches!(
            deploy_in(&dir.path().join("link")).check(),
            Err(DeployError::Unsafe { .. })
        ));
    }

    // r[verify issue.deploy]
    #[test]
    fn a_deploy_dir_owned_by_another_user_is_refused() {
        if !nix::unistd::Uid::effective().is_root() {
            eprintln!("not root: a directory of another owner not tested");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let theirs = dir.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        std::os::unix::fs::chown(&theirs, Some(4242), None).unwrap();
        let err = deploy_in(&theirs).check().unwrap_err();
        assert!(err.to_string().contains("owned by uid 4242"), "{err}");
        assert!(matches!(
            deploy_in(&theirs.join("certs")).check(),
            Err(DeployError::Unsafe { .. })
        ));
        // A NAME directory planted by another user is refused before anything is written in it.
        let shared = dir.path().join("deploy");
        std::fs::create_dir(&shared).unwrap();
        std::fs::create_dir(shared.join("a.example")).unwrap();
        std::os::unix::fs::chown(shared.join("a.example"), Some(4242), None).unwrap();
        let target = deploy_in(&shared).target("a.example", true).unwrap();
        assert!(matches!(
            target.write(&pair()),
            Err(DeployError::Unsafe { .. })
        ));
        assert!(!shared.join("a.example/key.pem").exists());
    }

    // r[verify issue.deploy]
    #[test]
    fn a_linked_name_dir_is_never_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let shared = dir.path().join("deploy");
        std::fs::create_dir(&shared).unwrap();
        let elsewhere = dir.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, shared.join("a.example")).unwrap();
        let target = deploy_in(&shared).target("a.example", true).unwrap();
        let err = target.write(&pair()).unwrap_err();
        assert!(err.to_string().contains("is a link"), "{err}");
        assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
    }

    // r[verify issue.deploy]
    #[test]
    fn an_owner_or_group_of_u32_max_is_refused() {
        // chown(2) reads -1 as "leave unchanged": it would silently keep the node's own.
        let config = DeployConfig {
            owner: Some(Id::Number(u32::MAX)),
            ..deploy_in(Path::new("/srv/holdfast-certs"))
        };
        let err = config.check().unwrap_err();
        assert_eq!(err.key(), Some("owner"), "{err}");
        assert!(err.to_string().contains("4294967295"), "{err}");
        let config = DeployConfig {
            group: Some(Id::Number(u32::MAX)),
            ..deploy_in(Path::new("/srv/holdfast-certs"))
        };
        assert_eq!(config.check().unwrap_err().key(), Some("group"));
        assert!(config.target("a.example", true).is_err());
    }

    // r[verify issue.deploy]
    #[test]
    fn a_deploy_failing_midway_leaves_the_old_set_whole() {
        let dir = tempfile::tempdir().unwrap();
        let target = deploy_in(dir.path()).target("a.example", true).unwrap();
        let old = pair();
        let paths = target.write(&old).unwrap();
        // The third file cannot be written: its temporary path is a directory.
        std::fs::create_dir(holdfast_keyfile::temp_path(&paths.chain)).unwrap();
        let new = pair();
        assert_ne!(new.key_pem, old.key_pem);
        assert!(target.write(&new).is_err());
        let read = |p: &Path| std::fs::read_to_string(p).unwrap();
        assert_eq!(read(&paths.key), old.key_pem, "the new key went out alone");
        assert_eq!(read(&paths.fullchain), old.chain_pem);
        for file in [&paths.key, &paths.cert, &paths.fullchain] {
            assert!(
                !holdfast_keyfile::temp_path(file).exists(),
                "{}",
                file.display()
            );
        }
        // Once it can be written, the whole new set is.
        std::fs::remove_dir(holdfast_keyfile::temp_path(&paths.chain)).unwrap();
        target.write(&new).unwrap();
        assert_eq!(read(&paths.key), new.key_pem);
        assert_eq!(read(&paths.fullchain), new.chain_pem);
    }

    // r[verify issue.deploy]
    #[test]
    fn a_node_not_root_cannot_be_asked_to_give_files_away() {
        let config = DeployConfig {
            owner: Some(Id::Number(4242)),
            ..deploy_in(Path::new("/srv/holdfast-certs"))
        };
        let as_user = Running {
            uid: 1000,
            gids: vec![1000, 27],
        };
        let err = config.check_for(&as_user).unwrap_err();
        assert_eq!(err.key(), Some("owner"), "{err}");
        assert!(err.to_string().contains("not root"), "{err}");
        // Its own uid, or a group it is in, are fine; root may give files to anyone.
        let own = DeployConfig {
            owner: Some(Id::Number(1000)),
            group: Some(Id::Number(27)),
            ..config.clone()
        };
        assert!(own.check_for(&as_user).is_ok());
        let other_group = DeployConfig {
            group: Some(Id::Number(4343)),
            ..own.clone()
        };
        assert_eq!(
            other_group.check_for(&as_user).unwrap_err().key(),
            Some("group")
        );
        let root = Running {
            uid: 0,
            gids: vec![0],
        };
        assert!(config.check_for(&root).is_ok());
        assert!(other_group.check_for(&root).is_ok());
    }

    #[test]
    fn the_leaf_is_split_from_the_chain() {
        let pair = pair();
        let (leaf, rest, full) = split_leaf(&pair.chain_pem).unwrap();
        assert_eq!(full, format!("{leaf}{rest}"));
        assert_eq!(leaf.matches("BEGIN CERTIFICATE").count(), 1);
        assert_eq!(rest.matches("BEGIN CERTIFICATE").count(), 1);
        // The same certificates as the chain, in order, whatever its spacing or line endings.
        let der = |text: &str| {
            CertificateDer::pem_slice_iter(text.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .unwrap()
        };
        assert_eq!(der(&full), der(&pair.chain_pem));
        let spaced = format!(
            "junk before\r\n{}\n\n",
            pair.chain_pem.replace('\n', "\r\n")
        );
        assert_eq!(split_leaf(&spaced).unwrap().2, full);
        assert!(matches!(split_leaf("junk"), Err(DeployError::Pem(_))));
    }
}
