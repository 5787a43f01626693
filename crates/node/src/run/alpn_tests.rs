//! The node's TLS-ALPN-01 wiring as composed (`r[node.gateway.tls-alpn01]`): kept out of
//! run.rs's own tests, which change often.

use std::sync::Arc;
use std::time::Duration;

use holdfast_lifecycle::{FaultBoard, NodeIdentity};

use super::{Live, compose};
use crate::config::Config;
use crate::metrics::Metrics;
use crate::state::NodeState;

/// Any certificate will do: the test asserts which one was shown.
#[derive(Debug)]
struct AnyCert(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCert {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        // webpki refuses the challenge certificate's critical acmeIdentifier extension.
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }
    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        // webpki refuses the challenge certificate's critical acmeIdentifier extension.
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A blocking handshake to `addr` naming `name` and offering only `acme-tls/1`: the leaf
/// shown and the protocol agreed.
fn validate(addr: std::net::SocketAddr, name: &str) -> (Vec<u8>, Option<Vec<u8>>) {
    use std::io::Write as _;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCert(provider)))
        .with_no_client_auth();
    config.alpn_protocols = vec![holdfast_gateway::ACME_TLS_ALPN.to_vec()];
    let name = rustls::pki_types::ServerName::try_from(name.to_owned()).unwrap();
    let mut conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let mut tcp = std::net::TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    while conn.is_handshaking() {
        conn.complete_io(&mut tcp).unwrap();
    }
    let _ = conn.writer().flush();
    let leaf = conn.peer_certificates().unwrap()[0].to_vec();
    (leaf, conn.alpn_protocol().map(<[u8]>::to_vec))
}

/// A token key, the gateway's own pair and a free port, in a directory kept while it lives.
struct Fixture {
    dir: tempfile::TempDir,
    own: Vec<u8>,
    port: u16,
}

impl Fixture {
    fn new() -> Self {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token.key");
        std::fs::write(&token, [7u8; 64]).unwrap();
        std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let own = rcgen::CertificateParams::new(vec!["gw.example".to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        std::fs::write(dir.path().join("gw.pem"), own.pem()).unwrap();
        std::fs::write(dir.path().join("gw.key"), key.serialize_pem()).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        Self {
            dir,
            own: own.der().to_vec(),
            port,
        }
    }

    /// The config: one ACME certificate for `a.example` with `challenge`, TLS-ALPN-01 bound on
    /// the fixture's port, and the gateway's `wss://` on `gateway_port`.
    fn config(&self, challenge: &str, gateway_port: u16) -> Config {
        let dir = self.dir.path();
        let text = format!(
            "[node]\ndata_dir = \"{data}\"\n[pull]\nenabled = false\n\
             [issuance]\ntick = \"1h\"\n\
             [[issuance.certificate]]\nnames = [\"a.example\"]\nsource = \"acme\"\n\
             challenge = \"{challenge}\"\n\
             [issuance.acme]\ndirectory = \"https://127.0.0.1:9/dir\"\n\
             tls_alpn01_bind = \"127.0.0.1:{port}\"\n\
             [gateway]\nlisten = \"127.0.0.1:{gateway_port}\"\ntoken_key_file = \"{token}\"\n\
             [gateway.tls]\ncert = \"{cert}\"\nkey = \"{key}\"\n",
            data = dir.join("data").display(),
            port = self.port,
            token = dir.join("token.key").display(),
            cert = dir.join("gw.pem").display(),
            key = dir.join("gw.key").display(),
        );
        Config::parse("alpn.toml", &text).unwrap()
    }
}

/// Composes `config` and starts the modules `names`, until each is published.
async fn start(config: &Config, names: &[&str]) -> (NodeState, Vec<crate::module::Started>) {
    let identity = NodeIdentity::resolve(Some("alpn-node")).unwrap();
    let node = NodeState::new(identity.id(), FaultBoard::new(), Metrics::new());
    let live = Live {
        desired: crate::modules::workload::desired(Vec::new()),
        ..Live::default()
    };
    let modules = compose(config, &identity, &node, &live);
    let started = names
        .iter()
        .map(|name| {
            let module = modules.iter().find(|m| m.name() == *name).unwrap();
            module.start().unwrap()
        })
        .collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let up = |name: &str| match name {
        "gateway" => node.gateway.current().is_ok(),
        _ => node.issuance.with(|_| ()).is_ok(),
    };
    while !names.iter().all(|name| up(name)) {
        assert!(std::time::Instant::now() < deadline, "modules not started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (node, started)
}

/// Puts a challenge for `a.example` in the node's set and validates it at the gateway: whether
/// the challenge certificate (its digest) came back with `acme-tls/1`, and not `own`.
async fn gateway_answers(node: &NodeState, own: &[u8]) -> bool {
    node.gateway
        .tls_alpn01_challenges()
        .insert("a.example", &[5u8; 32])
        .unwrap();
    let addr = node.gateway.current().unwrap().local_addr();
    let (leaf, protocol) = tokio::task::spawn_blocking(move || validate(addr, "a.example"))
        .await
        .unwrap();
    // The challenge certificate carries the key authorization's digest (RFC 8737 §3).
    let answered = protocol.as_deref() == Some(holdfast_gateway::ACME_TLS_ALPN)
        && leaf.windows(32).any(|w| w == [5u8; 32]);
    assert!(answered || leaf == own, "neither certificate");
    answered
}

// The node's wiring: with the gateway's TLS listener on the port of `tls_alpn01_bind`, the
// composed gateway answers a validation with the challenge the node keeps, and the composed
// issuance module binds no listener of its own.
// r[verify node.gateway.tls-alpn01]
// r[verify node.gateway.metrics+4]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_composed_gateway_on_the_tls_alpn01_port_answers_the_nodes_challenges() {
    let f = Fixture::new();
    let (node, _started) = start(&f.config("tls-alpn-01", f.port), &["gateway", "issuance"]).await;
    assert_eq!(node.issuance.with(|i| i.tls_alpn01_addr()), Ok(None));
    assert!(gateway_answers(&node, &f.own).await);
    // Counted where the node reads the gateway's figures (`r[node.gateway.metrics+4]`).
    let answered = || node.gateway.totals().map(|t| t.tls_alpn_answered);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while answered() != Some(1) {
        assert!(std::time::Instant::now() < deadline, "{:?}", answered());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    node.refresh_module_metrics();
    let text = node.metrics.render();
    assert!(
        text.contains("holdfast_gateway_tls_alpn01_answered_total 1"),
        "{text}"
    );
}

// A gateway composed before any certificate asks for TLS-ALPN-01 answers the node's set all the
// same: a reload that adds such a certificate restarts only the issuance module (now putting
// its challenges there), and the running gateway must answer them.
// r[verify node.gateway.tls-alpn01]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_serving_tls_answers_the_nodes_set_whatever_the_certificates_ask() {
    let f = Fixture::new();
    let (node, _started) = start(&f.config("http-01", f.port), &["gateway"]).await;
    assert!(gateway_answers(&node, &f.own).await);
}

// Which listener answers TLS-ALPN-01 is part of what the issuance module is built from: moving
// only the gateway onto or off the bind port restarts issuance on reload.
// r[verify node.gateway.tls-alpn01]
#[test]
fn moving_the_gateway_on_or_off_the_bind_port_changes_the_issuance_modules_inputs() {
    let f = Fixture::new();
    let inputs = |config: &Config| crate::reload::module_inputs("issuance", config);
    let on = f.config("tls-alpn-01", f.port);
    let off = f.config("tls-alpn-01", f.port.wrapping_add(1).max(1));
    assert_ne!(inputs(&on), inputs(&off));
    assert_eq!(inputs(&on), inputs(&f.config("tls-alpn-01", f.port)));
}

// A gateway serving an expired leaf refuses every wss:// client: a fault on the node's board
// says so while it lasts, and the module's stop clears it.
// r[verify node.gateway.tls-expired-fault]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_gateway_certificate_is_a_fault_while_it_is_served() {
    let f = Fixture::new();
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["gw.example".to_owned()]).unwrap();
    params.not_before = rcgen::date_time_ymd(2020, 1, 1);
    params.not_after = rcgen::date_time_ymd(2021, 1, 1);
    let expired = params.self_signed(&key).unwrap();
    std::fs::write(f.dir.path().join("gw.pem"), expired.pem()).unwrap();
    std::fs::write(f.dir.path().join("gw.key"), key.serialize_pem()).unwrap();
    let (node, mut started) = start(&f.config("http-01", f.port), &["gateway"]).await;
    let fault = || {
        node.faults
            .of_module("gateway")
            .into_iter()
            .find(|f| f.kind == "certificate_expired")
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while fault().is_none() {
        assert!(std::time::Instant::now() < deadline, "no fault filed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let filed = fault().unwrap();
    assert!(filed.message.contains("2021-01-01"), "{}", filed.message);
    let gateway = started.pop().unwrap();
    let request = holdfast_lifecycle::StopRequest {
        deadline: tokio::time::Instant::now() + Duration::from_secs(5),
        reason: holdfast_lifecycle::StopReason::Shutdown,
    };
    let _ = gateway.stopper.stop(request).await;
    assert!(fault().is_none(), "left after the stop");
}
