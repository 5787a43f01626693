//! The `rfc2136` DNS-01 provider: RFC 2136 dynamic updates signed with TSIG (RFC 8945), built and
//! signed with hickory-proto and sent over UDP here, so the answer's RCODE and its TSIG error
//! (BADKEY, BADSIG, BADTIME) are read before its signature is verified: a server refusing the key
//! answers unsigned, and hickory-net's client would report only that the MAC did not verify.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use hickory_proto::op::{ResponseCode, update_message};
use hickory_proto::rr::rdata::TXT;
use hickory_proto::rr::rdata::tsig::{TsigAlgorithm, TsigError};
use hickory_proto::rr::{Name, RData, Record, RecordSet, TSigner};

use crate::dns01::DnsProvider;
use crate::dns01_error::Dns01Error;
use crate::source::BoxFuture;

/// How many times an update answered SERVFAIL is sent in all.
const SERVFAIL_TRIES: u32 = 3;
/// The pause before the second try; it doubles before each later one.
const SERVFAIL_PAUSE: Duration = Duration::from_millis(250);

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

    /// One signed update, tried again after a SERVFAIL: a server may fail a whole batch of
    /// updates for one client's bad update (Knot does), so another client's is not at fault.
    // r[impl issue.dns01.servfail]
    async fn update(&self, fqdn_text: &str, value: &str, add: bool) -> Result<(), Dns01Error> {
        let mut tries = 1;
        loop {
            match self.update_once(fqdn_text, value, add, tries).await {
                Err(Dns01Error::ServerFailure { .. }) if tries < SERVFAIL_TRIES => {
                    tokio::time::sleep(SERVFAIL_PAUSE * (1 << (tries - 1))).await;
                    tries += 1;
                }
                outcome => return outcome,
            }
        }
    }

    /// One signed update: add `value` at `fqdn`, or delete exactly it. `tries` counts this one.
    // r[impl issue.dns01.rfc2136]
    async fn update_once(
        &self,
        fqdn_text: &str,
        value: &str,
        add: bool,
        tries: u32,
    ) -> Result<(), Dns01Error> {
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
        let ttl = if add { self.ttl } else { 0 };
        let record = Record::from_rdata(name, ttl, RData::TXT(TXT::new(vec![value.to_owned()])));
        let rrset = RecordSet::from(record);
        let mut message = if add {
            update_message::append(rrset, self.zone.clone(), false, false)
        } else {
            update_message::delete_by_rdata(rrset, self.zone.clone(), false)
        };
        message.metadata.id = rand::random();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let verifier = message
            .finalize(&self.signer, now)
            .map_err(|e| unreachable(format!("signing the update: {e}")))?;
        let request = message
            .to_vec()
            .map_err(|e| unreachable(format!("encoding the update: {e}")))?;
        let answer = tokio::time::timeout(
            self.timeout,
            crate::dns_udp::exchange(self.server, &request, message.id),
        )
        .await
        .map_err(|_| unreachable(format!("no answer within {:?}", self.timeout)))?
        .map_err(|e| unreachable(e.to_string()))?;
        let response = answer.message;
        let rcode = response.metadata.response_code;
        let unauthenticated = |message: String| Dns01Error::Unauthenticated {
            name: fqdn_text.to_owned(),
            server: self.server.to_string(),
            message,
        };
        // The TSIG error first: BADKEY and BADSIG answers are unsigned by design (RFC 8945 §5.3.2).
        if let Some(error) = response.signature().and_then(|sig| sig.data.error) {
            return Err(unauthenticated(tsig_error_name(error)));
        }
        if rcode == ResponseCode::ServFail {
            return Err(Dns01Error::ServerFailure {
                name: fqdn_text.to_owned(),
                server: self.server.to_string(),
                tries,
            });
        }
        // r[impl issue.dns01.refused+2]
        if rcode != ResponseCode::NoError {
            // A refusal (NOTAUTH for a zone the server does not serve, REFUSED by policy) need
            // not be signed; it is reported as the server's RCODE either way.
            return Err(Dns01Error::Refused {
                name: fqdn_text.to_owned(),
                server: self.server.to_string(),
                // The mnemonic (NOTAUTH, REFUSED) with hickory's text.
                rcode: format!("{} ({rcode})", format!("{rcode:?}").to_ascii_uppercase()),
            });
        }
        // Success only when the answer verifies under the key.
        match (response.signature(), verifier) {
            (Some(_), Some(mut verifier)) => verifier
                .verify(&answer.bytes)
                .map(drop)
                .map_err(|e| unauthenticated(e.to_string())),
            _ => Err(unauthenticated("the answer is not signed".to_owned())),
        }
    }
}

/// The TSIG error's RFC 8945 name.
fn tsig_error_name(error: TsigError) -> String {
    match error {
        TsigError::BadSig => "BADSIG (the secret or algorithm does not match)".to_owned(),
        TsigError::BadKey => "BADKEY (the server does not know the key name)".to_owned(),
        TsigError::BadTime => "BADTIME (the clocks differ by more than the fudge)".to_owned(),
        TsigError::BadTrunc => "BADTRUNC".to_owned(),
        TsigError::Unknown(code) => format!("TSIG error {code}"),
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

    /// How the fake server answers one update.
    #[derive(Clone, Copy)]
    enum Answer {
        /// NOTAUTH, no TSIG (a zone the server does not serve).
        NotAuthUnsigned,
        /// REFUSED, no TSIG (the server's policy).
        Refused,
        /// NOTAUTH with an unsigned TSIG carrying BADKEY.
        BadKey,
        /// NOTAUTH with an unsigned TSIG carrying BADSIG.
        BadSig,
        /// NOERROR signed with `secret`.
        Signed(&'static [u8]),
        /// NOERROR without a TSIG.
        Unsigned,
        /// SERVFAIL, no TSIG (the server failed the update's batch).
        ServFail,
    }

    /// A UDP server that answers the first update as told.
    async fn fake_server(answer: Answer) -> SocketAddr {
        fake_server_answering(vec![answer]).await.0
    }

    /// A UDP server that answers the updates it is sent with `answers`, in order, and counts them
    /// (also those sent after the last answer).
    async fn fake_server_answering(
        answers: Vec<Answer>,
    ) -> (SocketAddr, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        use hickory_proto::op::{Message, OpCode};
        use hickory_proto::rr::TSigResponseContext;
        let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = socket.local_addr().unwrap();
        let received = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = received.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            let mut answers = answers.into_iter();
            loop {
                let (n, peer) = socket.recv_from(&mut buf).await.unwrap();
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let Some(answer) = answers.next() else {
                    continue;
                };
                let request = Message::from_vec(&buf[..n]).unwrap();
                let id = request.metadata.id;
                let mut response = Message::response(id, OpCode::Update);
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_secs();
                let key = Name::from_ascii("holdfast.").unwrap();
                let signer = |secret: &[u8]| {
                    TSigner::new(secret.to_vec(), TsigAlgorithm::HmacSha256, key.clone(), 300)
                        .unwrap()
                };
                let context = match answer {
                    Answer::NotAuthUnsigned => {
                        response.metadata.response_code = ResponseCode::NotAuth;
                        None
                    }
                    Answer::Refused => {
                        response.metadata.response_code = ResponseCode::Refused;
                        None
                    }
                    Answer::ServFail => {
                        response.metadata.response_code = ResponseCode::ServFail;
                        None
                    }
                    Answer::BadKey => {
                        response.metadata.response_code = ResponseCode::NotAuth;
                        Some(TSigResponseContext::unknown_key(id, now, key.clone()))
                    }
                    Answer::BadSig => {
                        response.metadata.response_code = ResponseCode::NotAuth;
                        Some(TSigResponseContext::bad_signature(
                            id,
                            now,
                            signer(b"other"),
                        ))
                    }
                    Answer::Signed(secret) => {
                        let mac = request.signature().unwrap().data.mac.clone();
                        Some(TSigResponseContext::new(id, now, signer(secret), mac, None))
                    }
                    Answer::Unsigned => None,
                };
                if let Some(context) = context {
                    let unsigned = response.to_vec().unwrap();
                    response.set_signature(context.sign(&unsigned).unwrap());
                }
                socket
                    .send_to(&response.to_vec().unwrap(), peer)
                    .await
                    .unwrap();
            }
        });
        (addr, received)
    }

    // r[verify issue.dns01.refused+2]
    // r[verify issue.dns01.errors+2]
    #[tokio::test]
    async fn a_refused_or_notauth_update_fails_at_once_as_rejected_not_at_the_timeout() {
        for (answer, said) in [
            (Answer::Refused, "REFUSED"),
            (Answer::NotAuthUnsigned, "NOTAUTH"),
        ] {
            // A server that answers once and counts what else it is sent.
            let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
            let relay = fake_server(answer).await;
            let server = socket.local_addr().unwrap();
            let sent = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let counted = sent.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let upstream = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
                upstream.connect(relay).await.unwrap();
                let (n, peer) = socket.recv_from(&mut buf).await.unwrap();
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                upstream.send(&buf[..n]).await.unwrap();
                let m = upstream.recv(&mut buf).await.unwrap();
                socket.send_to(&buf[..m], peer).await.unwrap();
                // Anything sent after the answer is counted too.
                while let Ok((_, _)) = socket.recv_from(&mut buf).await {
                    counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
            });
            let provider = Rfc2136::new(Rfc2136Config {
                server,
                // Far longer than the test may take: a refusal must not wait for it.
                timeout: Duration::from_secs(60),
                ..config(b"secret-secret")
            })
            .unwrap();
            let began = std::time::Instant::now();
            let err = provider
                .present("_acme-challenge.a.example.test.", "v")
                .await
                .unwrap_err();
            assert!(
                began.elapsed() < Duration::from_secs(5),
                "{said}: {:?}",
                began.elapsed()
            );
            assert!(
                matches!(&err, Dns01Error::Refused { rcode, .. } if rcode.starts_with(said)),
                "{err}"
            );
            assert_eq!(err.class(), crate::ErrorClass::Rejected, "{err}");
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert_eq!(
                sent.load(std::sync::atomic::Ordering::SeqCst),
                1,
                "{said}: sent again"
            );
        }
    }

    async fn present_against(answer: Answer) -> Result<(), Dns01Error> {
        let provider = Rfc2136::new(Rfc2136Config {
            server: fake_server(answer).await,
            ..config(b"secret-secret")
        })
        .unwrap();
        provider
            .present("_acme-challenge.a.example.test.", "v")
            .await
    }

    // r[verify issue.dns01.rfc2136]
    #[tokio::test]
    async fn each_refusal_is_read_from_the_answers_rcode_and_tsig_error() {
        let err = present_against(Answer::NotAuthUnsigned).await.unwrap_err();
        assert!(
            matches!(&err, Dns01Error::Refused { rcode, .. } if rcode.starts_with("NOTAUTH")),
            "{err}"
        );
        let err = present_against(Answer::BadKey).await.unwrap_err();
        assert!(
            matches!(&err, Dns01Error::Unauthenticated { message, .. } if message.starts_with("BADKEY")),
            "{err}"
        );
        let err = present_against(Answer::BadSig).await.unwrap_err();
        assert!(
            matches!(&err, Dns01Error::Unauthenticated { message, .. } if message.starts_with("BADSIG")),
            "{err}"
        );
        // An answer must verify under the key to count as done.
        let err = present_against(Answer::Unsigned).await.unwrap_err();
        assert!(matches!(err, Dns01Error::Unauthenticated { .. }), "{err}");
        let err = present_against(Answer::Signed(b"other")).await.unwrap_err();
        assert!(matches!(err, Dns01Error::Unauthenticated { .. }), "{err}");
        present_against(Answer::Signed(b"secret-secret"))
            .await
            .unwrap();
    }

    // r[verify issue.dns01.servfail]
    // r[verify issue.dns01.errors+2]
    #[tokio::test]
    async fn a_servfail_is_tried_again_and_three_of_them_are_a_server_error() {
        let provider = |server| {
            Rfc2136::new(Rfc2136Config {
                server,
                ..config(b"secret-secret")
            })
            .unwrap()
        };
        let name = "_acme-challenge.a.example.test.";
        // Two SERVFAILs, then a signed NOERROR: the update is done, sent three times.
        let (server, sent) = fake_server_answering(vec![
            Answer::ServFail,
            Answer::ServFail,
            Answer::Signed(b"secret-secret"),
        ])
        .await;
        provider(server).present(name, "v").await.unwrap();
        assert_eq!(sent.load(std::sync::atomic::Ordering::SeqCst), 3);

        // A SERVFAIL then a refusal: the refusal ends it, as it would the first time.
        let (server, sent) =
            fake_server_answering(vec![Answer::ServFail, Answer::Refused, Answer::Unsigned]).await;
        let err = provider(server).cleanup(name, "v").await.unwrap_err();
        assert!(
            matches!(&err, Dns01Error::Refused { rcode, .. } if rcode.starts_with("REFUSED")),
            "{err}"
        );
        assert_eq!(sent.load(std::sync::atomic::Ordering::SeqCst), 2);

        // SERVFAIL to every try: a server error naming the record, the server and the tries,
        // and nothing sent after the third.
        let (server, sent) = fake_server_answering(vec![Answer::ServFail; 4]).await;
        let err = provider(server).present(name, "v").await.unwrap_err();
        assert!(
            matches!(&err, Dns01Error::ServerFailure { tries: 3, .. }),
            "{err}"
        );
        assert_eq!(err.class(), crate::ErrorClass::Server, "{err}");
        let text = err.to_string();
        assert!(
            text.contains(name) && text.contains(&server.to_string()),
            "{text}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(sent.load(std::sync::atomic::Ordering::SeqCst), 3);
    }
}
