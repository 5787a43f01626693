//! The node's pinned identity: a self-signed certificate generated on first start, persisted with
//! mode 0600, and its fingerprint, which operators give the client to pin.

use std::fmt;
use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use sha2::{Digest, Sha256};
use thiserror::Error;

/// The SHA-256 of a certificate (DER), written `sha256:` and 64 lowercase hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint(pub [u8; 32]);

impl Fingerprint {
    /// The fingerprint of a DER certificate.
    pub fn of(cert_der: &[u8]) -> Self {
        Fingerprint(Sha256::digest(cert_der).into())
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("sha256:")?;
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// A fingerprint that did not parse.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("fingerprint {0:?}: expected sha256: followed by 64 hex digits (colons allowed)")]
pub struct FingerprintParseError(pub String);

impl FromStr for Fingerprint {
    type Err = FingerprintParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let fail = || FingerprintParseError(s.to_owned());
        let hex = s.trim();
        let hex = hex
            .strip_prefix("sha256:")
            .or_else(|| hex.strip_prefix("SHA256:"))
            .unwrap_or(hex);
        let digits: Vec<u8> = hex.bytes().filter(|b| *b != b':').collect();
        if digits.len() != 64 {
            return Err(fail());
        }
        let mut out = [0u8; 32];
        for (i, pair) in digits.chunks(2).enumerate() {
            let text = std::str::from_utf8(pair).map_err(|_| fail())?;
            out[i] = u8::from_str_radix(text, 16).map_err(|_| fail())?;
        }
        Ok(Fingerprint(out))
    }
}

/// Why the identity could not be loaded or created.
#[derive(Debug, Error)]
pub enum IdentityError {
    /// Reading or writing its files failed.
    #[error("forward identity in {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// Generating the certificate failed.
    #[error("generating the forward identity: {0}")]
    Generate(#[from] rcgen::Error),
    /// The key file is readable by others than its owner.
    #[error("forward identity key {0} is readable by group or others (mode must be 0600)")]
    KeyMode(PathBuf),
}

/// The node's certificate and key.
#[derive(Debug)]
pub struct Identity {
    cert: CertificateDer<'static>,
    key: PrivatePkcs8KeyDer<'static>,
}

/// The name the certificate carries; the client pins the fingerprint, not the name.
pub const SERVER_NAME: &str = "holdfast-forward";

const CERT_FILE: &str = "forward-identity.crt.der";
const KEY_FILE: &str = "forward-identity.key.der";

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> IdentityError + '_ {
    move |source| IdentityError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Writes `bytes` to `path` with holdfast-keyfile: mode 0600, atomically, never through a link
/// planted at its temporary path.
fn write_private(path: &Path, bytes: &[u8]) -> Result<(), IdentityError> {
    holdfast_keyfile::write_private(path, bytes).map_err(|e| IdentityError::Io {
        path: e.path,
        source: e.source,
    })
}

impl Identity {
    /// Loads the identity from `dir`, or generates and persists one there on first start.
    // r[impl forward.identity]
    pub fn load_or_create(dir: &Path) -> Result<Self, IdentityError> {
        let cert_path = dir.join(CERT_FILE);
        let key_path = dir.join(KEY_FILE);
        if cert_path.exists() && key_path.exists() {
            let mode = fs::metadata(&key_path)
                .map_err(io_err(&key_path))?
                .permissions()
                .mode();
            if mode & 0o077 != 0 {
                return Err(IdentityError::KeyMode(key_path));
            }
            let cert = fs::read(&cert_path).map_err(io_err(&cert_path))?;
            let key = fs::read(&key_path).map_err(io_err(&key_path))?;
            return Ok(Identity {
                cert: CertificateDer::from(cert),
                key: PrivatePkcs8KeyDer::from(key),
            });
        }
        fs::create_dir_all(dir).map_err(io_err(dir))?;
        let generated = rcgen::generate_simple_self_signed(vec![SERVER_NAME.to_owned()])?;
        let cert = generated.cert.der().to_vec();
        let key = generated.signing_key.serialize_der();
        // The key first: a certificate without its key on disk is never left behind as complete.
        write_private(&key_path, &key)?;
        write_private(&cert_path, &cert)?;
        Ok(Identity {
            cert: CertificateDer::from(cert),
            key: PrivatePkcs8KeyDer::from(key),
        })
    }

    /// The fingerprint clients pin.
    pub fn fingerprint(&self) -> Fingerprint {
        Fingerprint::of(&self.cert)
    }

    /// The certificate chain (one self-signed certificate).
    pub fn cert_chain(&self) -> Vec<CertificateDer<'static>> {
        vec![self.cert.clone()]
    }

    /// The private key.
    pub fn key(&self) -> PrivateKeyDer<'static> {
        PrivateKeyDer::Pkcs8(self.key.clone_key())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // r[verify forward.identity]
    #[test]
    fn generated_once_persisted_0600_and_reused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = Identity::load_or_create(dir.path()).expect("created");
        let mode = fs::metadata(dir.path().join(KEY_FILE))
            .expect("key file")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let again = Identity::load_or_create(dir.path()).expect("loaded");
        assert_eq!(first.fingerprint(), again.fingerprint());
        let printed = first.fingerprint().to_string();
        assert_eq!(printed.len(), "sha256:".len() + 64);
        assert_eq!(printed.parse::<Fingerprint>(), Ok(first.fingerprint()));

        fs::set_permissions(dir.path().join(KEY_FILE), fs::Permissions::from_mode(0o644))
            .expect("chmod");
        assert!(matches!(
            Identity::load_or_create(dir.path()),
            Err(IdentityError::KeyMode(_))
        ));
        assert!("sha256:abc".parse::<Fingerprint>().is_err());
    }

    // r[verify forward.identity]
    #[test]
    fn a_half_persisted_identity_is_generated_anew_and_then_reused() {
        // A first start cut off between writing the key and the certificate leaves one of them:
        // that is no identity yet, so the next start generates a whole one instead of failing.
        for (kept, lost) in [(KEY_FILE, CERT_FILE), (CERT_FILE, KEY_FILE)] {
            let dir = tempfile::tempdir().expect("tempdir");
            let old = Identity::load_or_create(dir.path()).expect("created");
            fs::remove_file(dir.path().join(lost)).expect("remove");
            assert!(dir.path().join(kept).exists());
            let new = Identity::load_or_create(dir.path()).expect("generated anew, not refused");
            assert_ne!(old.fingerprint(), new.fingerprint(), "kept {kept}");
            assert!(dir.path().join(lost).exists(), "{lost} written again");
            let again = Identity::load_or_create(dir.path()).expect("reused");
            assert_eq!(new.fingerprint(), again.fingerprint(), "kept {kept}");
        }
    }

    // r[verify forward.identity]
    #[test]
    fn a_leftover_readable_temporary_file_does_not_make_the_key_readable() {
        let dir = tempfile::tempdir().expect("tempdir");
        // The temporary path holdfast-keyfile writes the key through.
        let leftover = holdfast_keyfile::temp_path(&dir.path().join(KEY_FILE));
        fs::write(&leftover, b"half-written").expect("leftover");
        fs::set_permissions(&leftover, fs::Permissions::from_mode(0o644)).expect("chmod");
        let first = Identity::load_or_create(dir.path()).expect("created");
        let mode = fs::metadata(dir.path().join(KEY_FILE))
            .expect("key file")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(!leftover.exists(), "the leftover was not replaced");
        let again = Identity::load_or_create(dir.path()).expect("reused, not refused");
        assert_eq!(first.fingerprint(), again.fingerprint());
    }
}
