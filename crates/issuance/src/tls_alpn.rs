//! The node's own TLS-ALPN-01 responder (RFC 8737): a TLS listener that answers a handshake
//! offering `acme-tls/1` for an identifier in progress with a self-signed certificate carrying the
//! acmeIdentifier extension, and refuses (and counts) every other handshake.
//!
//! Like the HTTP-01 [`crate::responder`], any peer can reach it: [`AlpnLimits`] bounds the
//! connections in all and per source and the time a handshake may take, and
//! [`TlsAlpnResponder::stop`] ends every connection still open.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rustls::ServerConfig;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::io::AsyncWriteExt as _;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

use crate::responder::{
    DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_CONNECTIONS_PER_ADDRESS, Shared, duration_text,
};

/// The ALPN protocol of TLS-ALPN-01 (RFC 8737 §6.2); the only one the listener accepts.
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

/// Default of [`AlpnLimits::handshake_timeout`]: a validator sends its ClientHello at once.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Limits of the TLS-ALPN-01 listener (`[issuance.acme.tls_alpn01_limits]`; durations written
/// `"10s"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(try_from = "RawAlpnLimits")]
pub struct AlpnLimits {
    /// Connections open at once from all peers; one more is closed as soon as it is accepted
    /// (default [`DEFAULT_MAX_CONNECTIONS`]).
    pub max_connections: usize,
    /// Connections open at once from one source (as the HTTP-01 responder counts it); one more
    /// is closed as soon as it is accepted (default [`DEFAULT_MAX_CONNECTIONS_PER_ADDRESS`]).
    pub max_connections_per_address: usize,
    /// Time a connection's handshake may take from its start (default
    /// [`DEFAULT_HANDSHAKE_TIMEOUT`]).
    pub handshake_timeout: Duration,
}

impl Default for AlpnLimits {
    fn default() -> Self {
        Self {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_per_address: DEFAULT_MAX_CONNECTIONS_PER_ADDRESS,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
        }
    }
}

/// [`AlpnLimits`] as written (durations as text, missing keys defaulted).
#[derive(serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
struct RawAlpnLimits {
    max_connections: usize,
    max_connections_per_address: usize,
    #[serde(deserialize_with = "duration_text")]
    handshake_timeout: Duration,
}

impl Default for RawAlpnLimits {
    fn default() -> Self {
        let d = AlpnLimits::default();
        Self {
            max_connections: d.max_connections,
            max_connections_per_address: d.max_connections_per_address,
            handshake_timeout: d.handshake_timeout,
        }
    }
}

impl TryFrom<RawAlpnLimits> for AlpnLimits {
    type Error = AlpnLimitsError;

    fn try_from(raw: RawAlpnLimits) -> Result<Self, Self::Error> {
        AlpnLimits {
            max_connections: raw.max_connections,
            max_connections_per_address: raw.max_connections_per_address,
            handshake_timeout: raw.handshake_timeout,
        }
        .validate()
    }
}

/// An [`AlpnLimits`] setting that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}: must be more than zero")]
pub struct AlpnLimitsError(pub &'static str);

impl AlpnLimits {
    /// Every limit must be more than zero (a zero would refuse every validator); the error names
    /// the setting.
    // r[impl issue.acme.tls-alpn01.limits]
    pub fn validate(self) -> Result<Self, AlpnLimitsError> {
        if self.max_connections == 0 {
            return Err(AlpnLimitsError("max_connections"));
        }
        if self.max_connections_per_address == 0 {
            return Err(AlpnLimitsError("max_connections_per_address"));
        }
        if self.handshake_timeout.is_zero() {
            return Err(AlpnLimitsError("handshake_timeout"));
        }
        Ok(self)
    }
}

/// What the listener has turned away or cut off, since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AlpnStats {
    /// Connections open now.
    pub open: usize,
    /// Connections closed at accept because [`AlpnLimits::max_connections`] were open.
    pub refused_over_total: u64,
    /// Connections closed at accept because their source had
    /// [`AlpnLimits::max_connections_per_address`] open.
    pub refused_over_address: u64,
    /// Connections closed because their handshake did not finish in time.
    pub handshake_timeouts: u64,
    /// Handshakes refused because they did not offer `acme-tls/1`.
    pub refused_protocol: u64,
    /// Handshakes refused because they named no identifier in progress (or none at all).
    pub refused_name: u64,
    /// Connections closed because they sent no parsable ClientHello (garbage, plain HTTP, or
    /// closed before one).
    pub refused_malformed: u64,
    /// Handshakes answered with a challenge certificate.
    pub answered: u64,
}

/// Why a challenge certificate could not be made.
#[derive(Debug, thiserror::Error)]
pub enum AlpnError {
    /// The key authorization's digest is not a SHA-256 digest.
    #[error("tls-alpn-01: the key authorization digest has {0} bytes, not 32")]
    Digest(usize),
    /// rcgen could not make the key or the certificate.
    #[error("tls-alpn-01 certificate for {name}: {source}")]
    Certificate {
        /// The identifier.
        name: String,
        /// Why.
        #[source]
        source: rcgen::Error,
    },
    /// rustls refused the certificate or key.
    #[error("tls-alpn-01 certificate for {name}: {source}")]
    Tls {
        /// The identifier.
        name: String,
        /// Why.
        #[source]
        source: rustls::Error,
    },
}

/// A self-signed certificate for `identifier` alone with the critical acmeIdentifier extension
/// holding `digest` (the SHA-256 of the key authorization), and its key (RFC 8737 §3).
// r[impl issue.acme.tls-alpn01+3]
pub fn challenge_certificate(
    identifier: &str,
    digest: &[u8],
) -> Result<(CertificateDer<'static>, PrivateKeyDer<'static>), AlpnError> {
    // rcgen asserts the length; a wrong one is an error here, never a panic.
    if digest.len() != 32 {
        return Err(AlpnError::Digest(digest.len()));
    }
    let failed = |source| AlpnError::Certificate {
        name: identifier.to_owned(),
        source,
    };
    let key = rcgen::KeyPair::generate().map_err(failed)?;
    let mut params = rcgen::CertificateParams::new(vec![identifier.to_owned()]).map_err(failed)?;
    params.custom_extensions = vec![rcgen::CustomExtension::new_acme_identifier(digest)];
    let cert = params.self_signed(&key).map_err(failed)?;
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    Ok((cert.der().clone(), key))
}

/// One identifier's answer: its certificate and key, ready for a handshake.
#[derive(Debug)]
struct Answer {
    config: Arc<ServerConfig>,
}

/// Identifiers being answered, shared with the ACME source (keyed on the lowercased name).
#[derive(Debug, Clone, Default)]
pub struct AlpnChallenges(Arc<Mutex<HashMap<String, Arc<Answer>>>>);

impl AlpnChallenges {
    /// Answers handshakes for `identifier` with a challenge certificate for `digest` until
    /// removed.
    pub fn insert(&self, identifier: &str, digest: &[u8]) -> Result<(), AlpnError> {
        let (cert, key) = challenge_certificate(identifier, digest)?;
        let failed = |source| AlpnError::Tls {
            name: identifier.to_owned(),
            source,
        };
        let signing = rustls::crypto::ring::sign::any_supported_type(&key).map_err(failed)?;
        // Served as is: `with_single_cert` would check it as a web PKI leaf and refuse the
        // critical acmeIdentifier extension the validator needs.
        let certified = rustls::sign::CertifiedKey::new(vec![cert], signing);
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = ServerConfig::builder_with_provider(provider)
            // RFC 8737 §4: TLS 1.2 or later; rustls offers only those.
            .with_safe_default_protocol_versions()
            .map_err(failed)?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(rustls::sign::SingleCertAndKey::from(certified)));
        config.alpn_protocols = vec![ACME_TLS_ALPN.to_vec()];
        let answer = Arc::new(Answer {
            config: Arc::new(config),
        });
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(identifier.to_ascii_lowercase(), answer);
        Ok(())
    }

    /// Stops answering `identifier`.
    pub fn remove(&self, identifier: &str) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&identifier.to_ascii_lowercase());
    }

    fn get(&self, name: &str) -> Option<Arc<Answer>> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&name.to_ascii_lowercase())
            .cloned()
    }

    /// The server config that answers a validation of `identifier` (its challenge certificate,
    /// `acme-tls/1` as the only protocol) while it is being answered: for a TLS listener other
    /// than [`TlsAlpnResponder`] (the gateway's) that answers the challenges.
    // r[impl issue.acme.tls-alpn01+3]
    pub fn server_config(&self, identifier: &str) -> Option<Arc<ServerConfig>> {
        self.get(identifier).map(|answer| answer.config.clone())
    }

    /// Whether `identifier` is being answered.
    pub fn contains(&self, identifier: &str) -> bool {
        self.get(identifier).is_some()
    }
}

#[derive(Debug, Default)]
struct AlpnCounters {
    refused_protocol: AtomicU64,
    refused_name: AtomicU64,
    refused_malformed: AtomicU64,
    handshake_timeouts: AtomicU64,
    answered: AtomicU64,
}

/// A running TLS-ALPN-01 listener; stops, with every connection it holds, when dropped or
/// [`TlsAlpnResponder::stop`]ped.
#[derive(Debug)]
pub struct TlsAlpnResponder {
    addr: SocketAddr,
    challenges: AlpnChallenges,
    shared: Arc<Shared>,
    counters: Arc<AlpnCounters>,
    task: JoinHandle<()>,
}

impl TlsAlpnResponder {
    /// Binds `addr` and starts answering under `limits`.
    // r[impl issue.acme.tls-alpn01+3]
    // r[impl issue.acme.tls-alpn01.limits]
    pub async fn bind(addr: SocketAddr, limits: AlpnLimits) -> io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let challenges = AlpnChallenges::default();
        let shared = Arc::new(Shared::default());
        let counters = Arc::new(AlpnCounters::default());
        let task = tokio::spawn(accept_loop(
            listener,
            challenges.clone(),
            limits,
            shared.clone(),
            counters.clone(),
        ));
        Ok(Self {
            addr,
            challenges,
            shared,
            counters,
            task,
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The identifiers it answers.
    pub fn challenges(&self) -> &AlpnChallenges {
        &self.challenges
    }

    /// The connections open now and those refused, cut off or answered so far.
    pub fn stats(&self) -> AlpnStats {
        let c = &self.shared.counters;
        AlpnStats {
            open: self.shared.open(),
            refused_over_total: c.refused_over_total.load(Ordering::Relaxed),
            refused_over_address: c.refused_over_address.load(Ordering::Relaxed),
            handshake_timeouts: self.counters.handshake_timeouts.load(Ordering::Relaxed),
            refused_protocol: self.counters.refused_protocol.load(Ordering::Relaxed),
            refused_name: self.counters.refused_name.load(Ordering::Relaxed),
            refused_malformed: self.counters.refused_malformed.load(Ordering::Relaxed),
            answered: self.counters.answered.load(Ordering::Relaxed),
        }
    }

    /// Stops listening and ends every connection still open.
    pub fn stop(&self) {
        // The accept loop owns the connections' JoinSet: aborting it aborts every connection.
        self.task.abort();
    }
}

impl Drop for TlsAlpnResponder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn accept_loop(
    listener: TcpListener,
    challenges: AlpnChallenges,
    limits: AlpnLimits,
    shared: Arc<Shared>,
    counters: Arc<AlpnCounters>,
) {
    let mut connections = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            // Reap finished connections so the set does not grow.
            _ = connections.join_next(), if !connections.is_empty() => continue,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            // A failed accept (EMFILE, a reset before accept) is transient.
            Err(err) => {
                tracing::warn!(%err, "tls-alpn-01 responder: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Some(slot) = shared.admit(
            peer.ip(),
            limits.max_connections,
            limits.max_connections_per_address,
        ) else {
            tracing::debug!(%peer, "tls-alpn-01 responder: connection cap reached; closed");
            continue;
        };
        let challenges = challenges.clone();
        let counters = counters.clone();
        connections.spawn(async move {
            let shake = handshake(stream, &challenges, &counters);
            match tokio::time::timeout(limits.handshake_timeout, shake).await {
                Err(_) => {
                    counters.handshake_timeouts.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(%peer, "tls-alpn-01 responder: handshake timed out");
                }
                // The validator needs nothing after the handshake (RFC 8737 §3): close, bounded
                // on its own so a slow close is not counted as a handshake timeout.
                Ok(Some(mut tls)) => {
                    let _ = tokio::time::timeout(limits.handshake_timeout, tls.shutdown()).await;
                }
                Ok(None) => {}
            }
            drop(slot);
        });
    }
}

/// One connection: read its ClientHello, refuse it unless it offers `acme-tls/1` for an
/// identifier in progress, else finish the handshake with that identifier's certificate and
/// return the stream for the caller to close.
// r[impl issue.acme.tls-alpn01+3]
async fn handshake(
    stream: TcpStream,
    challenges: &AlpnChallenges,
    counters: &AlpnCounters,
) -> Option<tokio_rustls::server::TlsStream<TcpStream>> {
    let acceptor =
        tokio_rustls::LazyConfigAcceptor::new(rustls::server::Acceptor::default(), stream);
    let start = match acceptor.await {
        Ok(start) => start,
        Err(err) => {
            counters.refused_malformed.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(%err, "tls-alpn-01 responder: no ClientHello");
            return None;
        }
    };
    let hello = start.client_hello();
    // acme-tls/1 and no other (RFC 8737 §3: what a validator offers), as the gateway's
    // listener judges one (`r[gateway.tls.alpn01]`).
    let offers_acme = hello.alpn().is_some_and(|mut protocols| {
        protocols.next() == Some(ACME_TLS_ALPN) && protocols.next().is_none()
    });
    if !offers_acme {
        // Plain HTTPS (or anything else) is not this listener's: dropping closes the connection.
        counters.refused_protocol.fetch_add(1, Ordering::Relaxed);
        tracing::debug!("tls-alpn-01 responder: handshake without acme-tls/1 refused");
        return None;
    }
    let Some(answer) = hello.server_name().and_then(|name| challenges.get(name)) else {
        counters.refused_name.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(
            name = ?hello.server_name(),
            "tls-alpn-01 responder: no challenge in progress for the name; refused"
        );
        return None;
    };
    match start.into_stream(answer.config.clone()).await {
        Ok(tls) => {
            counters.answered.fetch_add(1, Ordering::Relaxed);
            Some(tls)
        }
        Err(err) => {
            tracing::debug!(%err, "tls-alpn-01 responder: handshake failed");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
    use rustls::pki_types::{ServerName, UnixTime};
    use rustls::{DigitallySignedStruct, SignatureScheme};
    use tokio::io::AsyncReadExt as _;

    /// Takes any certificate: the tests read what the listener sent, they do not trust it.
    #[derive(Debug)]
    struct AnyCert;

    impl ServerCertVerifier for AnyCert {
        fn verify_server_cert(
            &self,
            _: &CertificateDer<'_>,
            _: &[CertificateDer<'_>],
            _: &ServerName<'_>,
            _: &[u8],
            _: UnixTime,
        ) -> Result<ServerCertVerified, rustls::Error> {
            Ok(ServerCertVerified::assertion())
        }
        fn verify_tls12_signature(
            &self,
            _: &[u8],
            _: &CertificateDer<'_>,
            _: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            Ok(HandshakeSignatureValid::assertion())
        }
        fn verify_tls13_signature(
            &self,
            _: &[u8],
            _: &CertificateDer<'_>,
            _: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            Ok(HandshakeSignatureValid::assertion())
        }
        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            rustls::crypto::ring::default_provider()
                .signature_verification_algorithms
                .supported_schemes()
        }
    }

    /// A handshake to `addr` naming `name` and offering `alpn`: the certificate and protocol the
    /// listener answered with, or the handshake's error.
    async fn shake(
        addr: SocketAddr,
        name: &str,
        alpn: &[&[u8]],
    ) -> Result<(CertificateDer<'static>, Option<Vec<u8>>), io::Error> {
        shake_sni(addr, name, alpn, true).await
    }

    async fn shake_sni(
        addr: SocketAddr,
        name: &str,
        alpn: &[&[u8]],
        sni: bool,
    ) -> Result<(CertificateDer<'static>, Option<Vec<u8>>), io::Error> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCert))
            .with_no_client_auth();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        config.enable_sni = sni;
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let tcp = TcpStream::connect(addr).await?;
        let server_name = ServerName::try_from(name.to_owned()).unwrap();
        let tls = connector.connect(server_name, tcp).await?;
        let (_, conn) = tls.get_ref();
        let cert = conn.peer_certificates().unwrap()[0].clone().into_owned();
        Ok((cert, conn.alpn_protocol().map(<[u8]>::to_vec)))
    }

    fn acme_identifier(cert: &CertificateDer<'_>) -> (Vec<String>, bool, Vec<u8>) {
        let (_, x509) = x509_parser::parse_x509_certificate(cert).unwrap();
        let names = x509
            .subject_alternative_name()
            .unwrap()
            .unwrap()
            .value
            .general_names
            .iter()
            .map(|n| format!("{n}"))
            .collect();
        // id-pe-acmeIdentifier, 1.3.6.1.5.5.7.1.31 (RFC 8737 §6.1).
        let ext = x509
            .extensions()
            .iter()
            .find(|e| e.oid.to_id_string() == "1.3.6.1.5.5.7.1.31")
            .expect("the acmeIdentifier extension");
        (names, ext.critical, ext.value.to_vec())
    }

    async fn listener(limits: AlpnLimits) -> TlsAlpnResponder {
        TlsAlpnResponder::bind("127.0.0.1:0".parse().unwrap(), limits)
            .await
            .unwrap()
    }

    // r[verify issue.acme.tls-alpn01+3]
    #[tokio::test]
    async fn an_identifier_in_progress_is_answered_with_its_acme_identifier_over_acme_tls() {
        let r = listener(AlpnLimits::default()).await;
        let digest = [7u8; 32];
        r.challenges().insert("A.Example.test", &digest).unwrap();
        let (cert, protocol) = shake(r.addr(), "a.example.test", &[ACME_TLS_ALPN])
            .await
            .unwrap();
        assert_eq!(protocol.as_deref(), Some(ACME_TLS_ALPN));
        let (names, critical, value) = acme_identifier(&cert);
        assert_eq!(names, ["DNSName(A.Example.test)"]);
        assert!(critical, "the acmeIdentifier extension is critical");
        // DER OCTET STRING of the 32-byte digest.
        let mut expected = vec![0x04, 32];
        expected.extend_from_slice(&digest);
        assert_eq!(value, expected);
        // The client may finish before the listener has read its Finished.
        until(&r, |s| s.answered == 1).await;

        // Once the attempt ends, the name is refused.
        r.challenges().remove("a.example.test");
        assert!(
            shake(r.addr(), "a.example.test", &[ACME_TLS_ALPN])
                .await
                .is_err()
        );
        assert_eq!(r.stats().refused_name, 1, "{:?}", r.stats());
    }

    // r[verify issue.acme.tls-alpn01+3]
    #[tokio::test]
    async fn a_handshake_without_acme_tls_or_for_another_name_is_refused_and_counted() {
        let r = listener(AlpnLimits::default()).await;
        r.challenges().insert("a.example.test", &[1u8; 32]).unwrap();
        // Plain HTTPS: no ALPN at all, and another protocol only.
        assert!(shake(r.addr(), "a.example.test", &[]).await.is_err());
        assert!(shake(r.addr(), "a.example.test", &[b"h2"]).await.is_err());
        // acme-tls/1 beside another protocol, in either order: not a validator (RFC 8737 §3:
        // it offers acme-tls/1 alone), as the gateway's listener judges it.
        for alpn in [[ACME_TLS_ALPN, b"h2"], [b"h2", ACME_TLS_ALPN]] {
            assert!(shake(r.addr(), "a.example.test", &alpn).await.is_err());
        }
        assert_eq!(r.stats().refused_protocol, 4, "{:?}", r.stats());
        // acme-tls/1 for a name with no challenge in progress.
        assert!(
            shake(r.addr(), "b.example.test", &[ACME_TLS_ALPN])
                .await
                .is_err()
        );
        assert_eq!(r.stats().refused_name, 1, "{:?}", r.stats());
        // acme-tls/1 naming no server at all (no SNI): refused as naming no identifier.
        assert!(
            shake_sni(r.addr(), "a.example.test", &[ACME_TLS_ALPN], false)
                .await
                .is_err()
        );
        assert_eq!(r.stats().refused_name, 2, "{:?}", r.stats());
        assert_eq!(r.stats().answered, 0, "{:?}", r.stats());
    }

    // r[verify issue.acme.tls-alpn01+3]
    #[tokio::test]
    async fn a_connection_without_a_client_hello_is_closed_and_counted_as_malformed() {
        let r = listener(AlpnLimits::default()).await;
        // Plain HTTP, and a bogus handshake record.
        for bytes in [
            b"GET / HTTP/1.1\r\nHost: a.example.test\r\n\r\n".to_vec(),
            [&[0x16u8, 0x03, 0x01, 0x00, 0x05][..], &[0xff; 5]].concat(),
        ] {
            let mut s = TcpStream::connect(r.addr()).await.unwrap();
            s.write_all(&bytes).await.unwrap();
            assert!(closed(&mut s).await);
        }
        // Connected, then closed before any ClientHello.
        drop(TcpStream::connect(r.addr()).await.unwrap());
        until(&r, |s| s.refused_malformed == 3 && s.open == 0).await;
        let stats = r.stats();
        assert_eq!(stats.handshake_timeouts, 0, "{stats:?}");
        assert_eq!(stats.refused_protocol + stats.refused_name, 0, "{stats:?}");
    }

    #[test]
    fn a_digest_that_is_not_sha256_is_an_error_not_a_panic() {
        assert!(matches!(
            challenge_certificate("a.example.test", &[0u8; 31]),
            Err(AlpnError::Digest(31))
        ));
    }

    async fn closed(s: &mut TcpStream) -> bool {
        let mut buf = [0u8; 512];
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return true,
                Ok(_) => {}
            }
        }
    }

    /// Waits (bounded) until the listener's stats satisfy `ok`.
    async fn until(r: &TlsAlpnResponder, ok: impl Fn(&AlpnStats) -> bool) {
        tokio::time::timeout(Duration::from_secs(10), async {
            while !ok(&r.stats()) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("never reached: {:?}", r.stats()));
    }

    async fn until_open(r: &TlsAlpnResponder, n: usize) {
        until(r, |s| s.open == n).await;
    }

    // r[verify issue.acme.tls-alpn01.limits]
    #[tokio::test(start_paused = true)]
    async fn a_silent_connection_is_closed_at_the_handshake_timeout() {
        let r = listener(AlpnLimits::default()).await;
        let mut s = TcpStream::connect(r.addr()).await.unwrap();
        let start = tokio::time::Instant::now();
        let early = DEFAULT_HANDSHAKE_TIMEOUT - Duration::from_secs(1);
        assert!(
            tokio::time::timeout(early, closed(&mut s)).await.is_err(),
            "closed before the handshake timeout"
        );
        let cut = tokio::time::timeout(Duration::from_secs(60), closed(&mut s)).await;
        assert_eq!(cut, Ok(true), "still open a minute later");
        assert!(start.elapsed() >= DEFAULT_HANDSHAKE_TIMEOUT);
        until_open(&r, 0).await;
        assert_eq!(r.stats().handshake_timeouts, 1, "{:?}", r.stats());
    }

    // r[verify issue.acme.tls-alpn01.limits]
    #[tokio::test]
    async fn past_the_caps_a_connection_is_closed_at_accept_and_counted() {
        let r = listener(AlpnLimits {
            max_connections: 3,
            max_connections_per_address: 2,
            ..AlpnLimits::default()
        })
        .await;
        let to = r.addr();
        let connect_from = |from: [u8; 4]| async move {
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.bind(SocketAddr::from((from, 0))).unwrap();
            socket.connect(to).await.unwrap()
        };
        let mut held = vec![
            connect_from([127, 0, 0, 3]).await,
            connect_from([127, 0, 0, 3]).await,
        ];
        until_open(&r, 2).await;
        let mut third = connect_from([127, 0, 0, 3]).await;
        let refused = tokio::time::timeout(Duration::from_secs(5), closed(&mut third)).await;
        assert_eq!(refused, Ok(true), "past the per-source cap stayed open");
        assert_eq!(r.stats().refused_over_address, 1, "{:?}", r.stats());
        held.push(connect_from([127, 0, 0, 4]).await);
        until_open(&r, 3).await;
        let mut fourth = connect_from([127, 0, 0, 5]).await;
        let refused = tokio::time::timeout(Duration::from_secs(5), closed(&mut fourth)).await;
        assert_eq!(refused, Ok(true), "past the total cap stayed open");
        assert_eq!(r.stats().refused_over_total, 1, "{:?}", r.stats());
    }

    // r[verify issue.acme.tls-alpn01.limits]
    #[test]
    fn a_zero_limit_is_refused_naming_its_key() {
        let parse = |json| serde_json::from_value::<AlpnLimits>(json);
        assert_eq!(parse(serde_json::json!({})).unwrap(), AlpnLimits::default());
        let e = parse(serde_json::json!({ "handshake_timeout": "0s" })).unwrap_err();
        assert!(e.to_string().contains("handshake_timeout"), "{e}");
        let e = parse(serde_json::json!({ "max_connections_per_address": 0 })).unwrap_err();
        assert!(e.to_string().contains("max_connections_per_address"), "{e}");
        let ok = parse(serde_json::json!({ "handshake_timeout": "3s" })).unwrap();
        assert_eq!(ok.handshake_timeout, Duration::from_secs(3));
    }
}
