//! The `rfc2136` DNS-01 provider: RFC 2136 dynamic updates signed with TSIG (RFC 8945), through
//! hickory-net's client (its UDP stream signs UPDATE messages with a `TSigner`).

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use hickory_net::client::{Client, ClientHandle};
use hickory_net::runtime::TokioRuntimeProvider;
use hickory_net::udp::UdpClientStream;
use hickory_net::{DnsError, NetError};
use hickory_proto::op::ResponseCode;
use hickory_proto::rr::rdata::TXT;
use hickory_proto::rr::rdata::tsig::TsigAlgorithm;
use hickory_proto::rr::{Name, RData, Record, TSigner};

use crate::dns01::DnsProvider;
use crate::dns01_error::Dns01Error;
use crate::source::BoxFuture;

/// A TSIG algorithm holdfast signs with.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
pub enum TsigAlgo {
    /// `hmac-sha256` (the default).
    #[default]
    #[serde(rename = "hmac-sha256")]
    HmacSha256,
    /// `hmac-sha384`.
    #[serde(rename = "hmac-sha384")]
    HmacSha384,
    /// `hmac-sha512`.
    #[serde(rename = "hmac-sha512")]
    HmacSha512,
}

impl TsigAlgo {
    fn hickory(self) -> TsigAlgorithm {
        match self {
            TsigAlgo::HmacSha256 => TsigAlgorithm::HmacSha256,
            TsigAlgo::HmacSha384 => TsigAlgorithm::HmacSha384,
            TsigAlgo::HmacSha512 => TsigAlgorithm::HmacSha512,
        }
    }
}

/// Why an `rfc2136` provider cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum Rfc2136Error {
    /// The secret file cannot be read.
    #[error("tsig_secret_file: {source}")]
    SecretFile {
        /// The file.
        path: String,
        /// Why: unreadable, a symlink, not a regular file, or readable by group or others.
        #[source]
        source: holdfast_keyfile::SecretFileError,
    },
    /// The secret is not base64 (the text itself is never shown).
    #[error("tsig_secret_file {path}: not base64")]
    SecretNotBase64 {
        /// The file.
        path: String,
    },
    /// The zone or key name is not a DNS name.
    #[error("{key}: {name:?} is not a DNS name")]
    BadName {
        /// The setting.
        key: &'static str,
        /// The name.
        name: String,
    },
    /// hickory refused the key (an algorithm it cannot sign with).
    #[error("tsig: {0}")]
    Signer(String),
}

/// The `rfc2136` provider's settings, the secret already read.
#[derive(Clone)]
pub struct Rfc2136Config {
    /// The primary server, `IP:PORT`.
    pub server: SocketAddr,
    /// The zone updated.
    pub zone: String,
    /// The TSIG key's name, as the server knows it.
    pub tsig_key_name: String,
    /// The TSIG algorithm.
    pub tsig_algorithm: TsigAlgo,
    /// The TSIG secret (raw bytes).
    pub tsig_secret: Vec<u8>,
    /// The records' TTL.
    pub ttl: u32,
    /// How long one update may wait for its answer.
    pub timeout: Duration,
}

// The secret is never printed.
impl std::fmt::Debug for Rfc2136Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rfc2136Config")
            .field("server", &self.server)
            .field("zone", &self.zone)
            .field("tsig_key_name", &self.tsig_key_name)
            .field("tsig_algorithm", &self.tsig_algorithm)
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

/// Reads a TSIG secret: base64 (standard alphabet, as `tsig-keygen`/`keymgr` print it),
/// surrounding whitespace ignored, from a file only its owner may read: a regular file, not a
/// symlink, no group or other permission bits (`holdfast_keyfile::read_secret_file`).
// r[impl issue.dns01.rfc2136]
pub fn read_secret(path: &Path) -> Result<Vec<u8>, Rfc2136Error> {
    use base64::Engine as _;
    let shown = path.display().to_string();
    let text =
        holdfast_keyfile::read_secret_file(path).map_err(|source| Rfc2136Error::SecretFile {
            path: shown.clone(),
            source,
        })?;
    base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .map_err(|_| Rfc2136Error::SecretNotBase64 { path: shown })
}

/// The `rfc2136` provider.
#[derive(Clone)]
pub struct Rfc2136 {
    server: SocketAddr,
    zone: Name,
    signer: TSigner,
    ttl: u32,
    timeout: Duration,
}

impl std::fmt::Debug for Rfc2136 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rfc2136")
            .field("server", &self.server)
            .field("zone", &self.zone.to_string())
            .field("key", &self.signer.signer_name().to_string())
            .finish_non_exhaustive()
    }
}

fn fqdn(key: &'static str, text: &str) -> Result<Name, Rfc2136Error> {
    let mut name = Name::from_ascii(text).map_err(|_| Rfc2136Error::BadName {
        key,
        name: text.to_owned(),
    })?;
    name.set_fqdn(true);
    Ok(name)
}

impl Rfc2136 {
    /// The provider for `config`.
    // r[impl issue.dns01.rfc2136]
    pub fn new(config: Rfc2136Config) -> Result<Self, Rfc2136Error> {
        let zone = fqdn("zone", &config.zone)?;
        let key = fqdn("tsig_key_name", &config.tsig_key_name)?;
        // 300 s of clock skew allowed, RFC 8945 §10's recommendation.
        let signer = TSigner::new(
            config.tsig_secret,
            config.tsig_algorithm.hickory(),
            key,
            300,
        )
        .map_err(|e| Rfc2136Error::Signer(e.to_string()))?;
        Ok(Self {
            server: config.server,
            zone,
            signer,
            ttl: config.ttl,
            timeout: config.timeout,
        })
    }

    /// One signed update: add `value` at `fqdn`, or delete exactly it.
    // r[impl issue.dns01.rfc2136]
    async fn update(&self, fqdn_text: &str, value: &str, add: bool) -> Result<(), Dns01Error> {
        let bad = |message: String| Dns01Error::BadName {
            name: fqdn_text.to_owned(),
            message,
        };
        let mut name = Name::from_ascii(fqdn_text).map_err(|e| bad(e.to_string()))?;
        name.set_fqdn(true);
        if !self.zone.zone_of(&name) {
            return Err(Dns01Error::NotInZone {
                name: fqdn_text.to_owned(),
                zone: self.zone.to_string(),
            });
        }
        let unreachable = |message: String| Dns01Error::Unreachable {
            name: fqdn_text.to_owned(),
            server: self.server.to_string(),
            message,
        };
        let stream = UdpClientStream::builder(self.server, TokioRuntimeProvider::default())
            .with_timeout(Some(self.timeout))
            .with_signer(Some(self.signer.clone()))
            .build();
        let (mut client, background) = Client::<TokioRuntimeProvider>::from_sender(stream);
        let background = AbortOnDrop(tokio::spawn(background));
        let ttl = if add { self.ttl } else { 0 };
        let record = Record::from_rdata(name, ttl, RData::TXT(TXT::new(vec![value.to_owned()])));
        let answer = if add {
            client.append(record, self.zone.clone(), false).await
        } else {
            client.delete_by_rdata(record, self.zone.clone()).await
        };
        drop(background);
        let refused = |code: ResponseCode| Dns01Error::Refused {
            name: fqdn_text.to_owned(),
            server: self.server.to_string(),
            rcode: code.to_string(),
        };
        match answer {
            Ok(response) if response.metadata.response_code == ResponseCode::NoError => Ok(()),
            Ok(response) => Err(refused(response.metadata.response_code)),
            Err(NetError::Dns(DnsError::ResponseCode(code))) => Err(refused(code)),
            // hickory verifies the answer's TSIG before anything else, and an answer to a bad key
            // or signature carries an empty MAC: that is a refusal, not an unreachable server.
            Err(NetError::Proto(e)) if is_tsig_failure(&e.to_string()) => {
                Err(Dns01Error::Unauthenticated {
                    name: fqdn_text.to_owned(),
                    server: self.server.to_string(),
                    message: e.to_string(),
                })
            }
            Err(e) => Err(unreachable(e.to_string())),
        }
    }
}

/// Whether a hickory protocol error is the answer's TSIG failing to verify (hickory 0.26 has no
/// variant of its own for it: its texts name TSIG or the HMAC).
fn is_tsig_failure(text: &str) -> bool {
    let text = text.to_ascii_lowercase();
    text.contains("tsig") || text.contains("hmac")
}

/// The client's background task, never left running after an update.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl DnsProvider for Rfc2136 {
    fn present<'a>(
        &'a self,
        fqdn: &'a str,
        value: &'a str,
    ) -> BoxFuture<'a, Result<(), Dns01Error>> {
        Box::pin(self.update(fqdn, value, true))
    }

    fn cleanup<'a>(
        &'a self,
        fqdn: &'a str,
        value: &'a str,
    ) -> BoxFuture<'a, Result<(), Dns01Error>> {
        Box::pin(self.update(fqdn, value, false))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(secret: &[u8]) -> Rfc2136Config {
        Rfc2136Config {
            server: "127.0.0.1:9".parse().unwrap(),
            zone: "example.test".into(),
            tsig_key_name: "holdfast".into(),
            tsig_algorithm: TsigAlgo::default(),
            tsig_secret: secret.to_vec(),
            ttl: 60,
            timeout: Duration::from_millis(200),
        }
    }

    // r[verify issue.dns01.rfc2136]
    #[test]
    fn the_secret_is_read_as_base64_and_never_printed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tsig.key");
        std::fs::write(&path, "c2VjcmV0LXNlY3JldA==\n").unwrap();
        // Readable by others: refused, its text not shown.
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o644))
            .unwrap();
        let err = read_secret(&path).unwrap_err().to_string();
        assert!(err.contains("0644") && err.contains("chmod 600"), "{err}");
        assert!(!err.contains("c2VjcmV0"), "{err}");
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        assert_eq!(read_secret(&path).unwrap(), b"secret-secret");
        std::fs::write(&path, "not base64 at all!").unwrap();
        let err = read_secret(&path).unwrap_err().to_string();
        assert!(!err.contains("not base64 at all"), "{err}");
        assert!(matches!(
            read_secret(&dir.path().join("missing")),
            Err(Rfc2136Error::SecretFile { .. })
        ));
        let provider = Rfc2136::new(config(b"secret-secret")).unwrap();
        for text in [
            format!("{provider:?}"),
            format!("{:?}", config(b"secret-secret")),
        ] {
            assert!(!text.contains("secret-secret"), "{text}");
            assert!(!text.contains("c2VjcmV0"), "{text}");
        }
    }

    // r[verify issue.dns01.rfc2136]
    #[tokio::test]
    async fn a_name_outside_the_zone_and_a_silent_server_are_typed_errors() {
        let provider = Rfc2136::new(config(b"k")).unwrap();
        let err = provider
            .present("_acme-challenge.other.test.", "v")
            .await
            .unwrap_err();
        assert!(matches!(err, Dns01Error::NotInZone { .. }), "{err}");
        // A UDP socket that never answers.
        let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let provider = Rfc2136::new(Rfc2136Config {
            server: silent.local_addr().unwrap(),
            ..config(b"k")
        })
        .unwrap();
        let err = provider
            .present("_acme-challenge.a.example.test.", "v")
            .await
            .unwrap_err();
        assert!(matches!(err, Dns01Error::Unreachable { .. }), "{err}");
        assert!(
            err.to_string().contains("_acme-challenge.a.example.test."),
            "{err}"
        );
    }
}
