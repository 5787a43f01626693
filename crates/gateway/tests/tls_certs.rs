//! The certificate the gateway's `wss://` listener shows: never an expired leaf, and the
//! TLS-ALPN-01 challenge certificate to an ACME validator, against real rustls clients on loopback.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use holdfast_gateway::{ACME_TLS_ALPN, AcmeTlsAlpn, TlsFiles};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::{DigitallySignedStruct, SignatureScheme};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use tokio::io::AsyncReadExt as _;
use tokio::net::TcpStream;

/// A self-signed leaf for `localhost` valid until the first of `until`'s (year, month).
fn write_leaf(dir: &Path, until: (i32, u8)) -> (TlsFiles, Vec<u8>) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    params.not_before = rcgen::date_time_ymd(2020, 1, 1);
    params.not_after = rcgen::date_time_ymd(until.0, until.1, 1);
    let cert = params.self_signed(&key).unwrap();
    let files = TlsFiles {
        cert: dir.join("fullchain.pem"),
        key: dir.join("key.pem"),
    };
    // Replaced by renames, as a renewal writes them.
    for (path, text) in [(&files.cert, cert.pem()), (&files.key, key.serialize_pem())] {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, path).unwrap();
    }
    (files, cert.der().to_vec())
}

/// Takes any certificate: these tests look at what the server sent (and an expired one must be
/// refused by the server, not by the client's own check).
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

type ClientTls = tokio_rustls::client::TlsStream<TcpStream>;

/// A handshake naming `name` and offering `alpn`: the stream, the leaf shown and the protocol
/// agreed.
async fn shake(
    addr: SocketAddr,
    name: &str,
    alpn: &[&[u8]],
) -> std::io::Result<(ClientTls, Vec<u8>, Option<Vec<u8>>)> {
    shake_as(addr, ServerName::try_from(name.to_owned()).unwrap(), alpn).await
}

/// [`shake`] to `name` as given: an IP address sends no SNI.
async fn shake_as(
    addr: SocketAddr,
    name: ServerName<'static>,
    alpn: &[&[u8]],
) -> std::io::Result<(ClientTls, Vec<u8>, Option<Vec<u8>>)> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCert))
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = TcpStream::connect(addr).await?;
    let tls = connector.connect(name, tcp).await?;
    let conn = tls.get_ref().1;
    let leaf = conn.peer_certificates().unwrap()[0].to_vec();
    let protocol = conn.alpn_protocol().map(<[u8]>::to_vec);
    Ok((tls, leaf, protocol))
}

/// Challenges as an ACME client would keep them: a challenge certificate per pending name.
#[derive(Default)]
struct Pending(Mutex<HashMap<String, Arc<rustls::ServerConfig>>>);

impl Pending {
    /// Puts a challenge for `name` (digest all `byte`s); returns its certificate's DER.
    fn insert(&self, name: &str, byte: u8) -> Vec<u8> {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec![name.to_owned()]).unwrap();
        params.custom_extensions = vec![rcgen::CustomExtension::new_acme_identifier(&[byte; 32])];
        let cert = params.self_signed(&key).unwrap();
        let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let signing = rustls::crypto::ring::sign::any_supported_type(&der).unwrap();
        let certified = rustls::sign::CertifiedKey::new(vec![cert.der().clone()], signing);
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(rustls::sign::SingleCertAndKey::from(certified)));
        config.alpn_protocols = vec![ACME_TLS_ALPN.to_vec()];
        self.0
            .lock()
            .unwrap()
            .insert(name.to_owned(), Arc::new(config));
        cert.der().to_vec()
    }
}

impl AcmeTlsAlpn for Pending {
    fn challenge_config(&self, name: &str) -> Option<Arc<rustls::ServerConfig>> {
        self.0.lock().unwrap().get(name).cloned()
    }
}

fn tls_config(files: TlsFiles) -> holdfast_gateway::GatewayConfig {
    let mut c = config("a");
    c.tls = Some(files);
    c.tls_check_interval = Duration::ZERO;
    c
}

/// Reads until the server closes; true when it does within 5 s.
async fn closed_by_server(tls: &mut ClientTls) -> bool {
    let mut buf = [0u8; 256];
    tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match tls.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .is_ok()
}

// An rcgen leaf that expired in 2021: the gateway starts, fails every handshake with an alert
// (refused by the server: the client here takes any certificate), counts each, and serves the
// renewed leaf as soon as it lands in the files.
// r[verify gateway.tls.expired]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_leaf_fails_every_handshake_until_a_renewal_lands() {
    let dir = tempfile::tempdir().unwrap();
    let (files, _) = write_leaf(dir.path(), (2021, 1));
    let node = start(tls_config(files)).await;
    let addr = node.gateway.local_addr();
    assert!(node.gateway.tls_expired_since().is_some());
    for _ in 0..3 {
        let e = shake(addr, "localhost", &[]).await.expect_err("refused");
        assert!(e.to_string().contains("alert"), "{e}");
    }
    assert_eq!(node.gateway.stats().tls_expired_refusals, 3);

    let (_, renewed) = write_leaf(dir.path(), (4000, 1));
    let (_tls, leaf, _) = shake(addr, "localhost", &[]).await.unwrap();
    assert_eq!(leaf, renewed);
    assert_eq!(node.gateway.tls_expired_since(), None);
    assert_eq!(node.gateway.stats().tls_expired_refusals, 3);
    assert_eq!(node.gateway.stats().tls_reloads, 1);
}

// r[verify gateway.tls.alpn01]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_validation_gets_the_challenge_certificate_and_is_closed_and_others_are_served() {
    let dir = tempfile::tempdir().unwrap();
    let (files, served) = write_leaf(dir.path(), (4000, 1));
    let node = start(tls_config(files)).await;
    let addr = node.gateway.local_addr();
    let pending = Arc::new(Pending::default());
    let challenge = pending.insert("a.example.test", 7);

    // Before the hand-over, a validation is served the gateway's own leaf, as any client.
    let (before, leaf, protocol) = shake(addr, "a.example.test", &[ACME_TLS_ALPN])
        .await
        .unwrap();
    assert_eq!((leaf, protocol), (served.clone(), None));
    drop(before);

    assert!(node.gateway.answer_tls_alpn01(pending.clone()));
    let (mut tls, leaf, protocol) = shake(addr, "a.example.test", &[ACME_TLS_ALPN])
        .await
        .unwrap();
    assert_eq!(leaf, challenge);
    assert_eq!(protocol.as_deref(), Some(ACME_TLS_ALPN));
    assert!(
        closed_by_server(&mut tls).await,
        "left open after the validation"
    );
    eventually("the validation counted and gone", || {
        node.gateway.stats().tls_alpn_answered == 1 && node.gateway.connections() == 0
    })
    .await;

    // Anything else is served the gateway's leaf: acme-tls/1 beside another protocol (after it
    // or before it), for a name with no pending challenge, and no ALPN at all.
    for (name, alpn) in [
        (
            "a.example.test",
            &[b"http/1.1".as_slice(), ACME_TLS_ALPN][..],
        ),
        (
            "a.example.test",
            &[ACME_TLS_ALPN, b"http/1.1".as_slice()][..],
        ),
        ("b.example.test", &[ACME_TLS_ALPN][..]),
        ("a.example.test", &[][..]),
    ] {
        let (_tls, leaf, protocol) = shake(addr, name, alpn).await.unwrap();
        assert_eq!((leaf, protocol), (served.clone(), None), "{name} {alpn:?}");
    }
    // acme-tls/1 alone but without SNI (an IP address as the name): no identifier, no validation.
    let ip = ServerName::IpAddress(std::net::IpAddr::from([127, 0, 0, 1]).into());
    let (_tls, leaf, protocol) = shake_as(addr, ip, &[ACME_TLS_ALPN]).await.unwrap();
    assert_eq!((leaf, protocol), (served.clone(), None), "no SNI");
    assert_eq!(node.gateway.stats().tls_alpn_answered, 1);
}

// The validation that would renew an expired certificate is still answered.
// r[verify gateway.tls.alpn01]
// r[verify gateway.tls.expired]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_validation_is_answered_while_the_served_leaf_is_expired() {
    let dir = tempfile::tempdir().unwrap();
    let (files, _) = write_leaf(dir.path(), (2021, 1));
    let node = start(tls_config(files)).await;
    let pending = Arc::new(Pending::default());
    let challenge = pending.insert("a.example.test", 9);
    assert!(node.gateway.answer_tls_alpn01(pending));
    let addr = node.gateway.local_addr();
    let (_tls, leaf, _) = shake(addr, "a.example.test", &[ACME_TLS_ALPN])
        .await
        .unwrap();
    assert_eq!(leaf, challenge);
    assert!(shake(addr, "localhost", &[]).await.is_err());
    let stats = node.gateway.stats();
    assert_eq!(
        (stats.tls_alpn_answered, stats.tls_expired_refusals),
        (1, 1)
    );
}

// r[verify gateway.tls.alpn01]
#[tokio::test]
async fn a_plain_gateway_takes_no_challenges() {
    let node = start(config("a")).await;
    assert!(!node.gateway.answer_tls_alpn01(Arc::new(Pending::default())));
}

// DNS names are case-insensitive: a validator spelling the pending name in another case is
// answered all the same (rustls hands the server the SNI in lower case).
// r[verify gateway.tls.alpn01]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_validation_naming_the_pending_name_in_another_case_is_answered() {
    let dir = tempfile::tempdir().unwrap();
    let (files, _) = write_leaf(dir.path(), (4000, 1));
    let node = start(tls_config(files)).await;
    let pending = Arc::new(Pending::default());
    let challenge = pending.insert("a.example.test", 3);
    assert!(node.gateway.answer_tls_alpn01(pending));
    let addr = node.gateway.local_addr();
    let (_tls, leaf, protocol) = shake(addr, "A.Example.TEST", &[ACME_TLS_ALPN])
        .await
        .unwrap();
    assert_eq!(leaf, challenge);
    assert_eq!(protocol.as_deref(), Some(ACME_TLS_ALPN));
}
