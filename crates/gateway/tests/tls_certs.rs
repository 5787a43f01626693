//! The certificate the gateway's `wss://` listener shows: never an expired leaf, and the
//! TLS-ALPN-01 challenge certificate to an ACME validator, against real rustls clients on loopback.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use holdfast_gateway::TlsFiles;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::{DigitallySignedStruct, SignatureScheme};
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
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
    let tls = connector
        .connect(ServerName::try_from(name.to_owned()).unwrap(), tcp)
        .await?;
    let conn = tls.get_ref().1;
    let leaf = conn.peer_certificates().unwrap()[0].to_vec();
    let protocol = conn.alpn_protocol().map(<[u8]>::to_vec);
    Ok((tls, leaf, protocol))
}

fn tls_config(files: TlsFiles) -> holdfast_gateway::GatewayConfig {
    let mut c = config("a");
    c.tls = Some(files);
    c.tls_check_interval = Duration::ZERO;
    c
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
