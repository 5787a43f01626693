//! A running gateway given other key files and another TLS pair (the node's reload, when their
//! paths changed): new tokens and handshakes use them, open connections stay, and files that
//! cannot be used change nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use common::*;
use futures_util::{SinkExt, StreamExt};
use holdfast_gateway::token::{AuthSettings, KeyError, KeySource};
use holdfast_gateway::{Signer, TlsError, TlsFiles, TlsReload, TokenKey};
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;

/// A secret file of mode 0600 holding `secret`.
fn secret_file(dir: &Path, name: &str, secret: &str) -> KeySource {
    let path = dir.join(name);
    std::fs::write(&path, format!("{secret}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    KeySource::secret(path)
}

fn token_of(secret: &str, user: &str) -> String {
    Signer::new(secret.as_bytes())
        .token(user, SystemTime::now() + Duration::from_secs(3600))
        .unwrap()
}

/// Connects and presents `token`: the gateway's first answer (authenticated, or the close
/// frame's reason).
async fn auth_answer(addr: SocketAddr, token: &str) -> String {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut ws, _) = tokio_tungstenite::client_async(format!("ws://{addr}/"), tcp)
        .await
        .unwrap();
    let auth = serde_json::json!({"type": "auth", "token": token});
    ws.send(Message::Text(auth.to_string().into()))
        .await
        .unwrap();
    loop {
        match tokio::time::timeout(Duration::from_secs(5), ws.next())
            .await
            .expect("an answer within 5 s")
        {
            Some(Ok(Message::Text(t))) => return t.to_string(),
            Some(Ok(Message::Close(Some(frame)))) => return format!("closed: {}", frame.reason),
            Some(Ok(Message::Close(None))) | None => return "closed".into(),
            Some(Ok(_)) => {}
            Some(Err(e)) => return format!("error: {e}"),
        }
    }
}

// r[verify gateway.auth.key-replace]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_key_files_verify_from_then_on_and_the_old_key_no_longer_does() {
    const OLD: &str = "live-paths-old-secret-0123456789";
    const NEW: &str = "live-paths-new-secret-9876543210";
    const ROTATED: &str = "live-paths-rotated-secret-13572468";
    let dir = tempfile::tempdir().unwrap();
    let old = secret_file(dir.path(), "old.key", OLD);
    let new = secret_file(dir.path(), "new.key", NEW);
    let mut c = config("a");
    c.token_key = TokenKey::from_sources(vec![old.clone()], AuthSettings::default()).unwrap();
    let node = start(c).await;
    let g = &node.gateway;
    let addr = g.local_addr();

    // Authenticated with the old key before the replace.
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut ann, _) = tokio_tungstenite::client_async(format!("ws://{addr}/"), tcp)
        .await
        .unwrap();
    send_json(
        &mut ann,
        serde_json::json!({"type": "auth", "token": token_of(OLD, "ann")}),
    )
    .await;
    assert!(next_text(&mut ann).await.contains("authenticated"));

    // Files that cannot be used change nothing, and the error names the file.
    let missing = dir.path().join("missing.key");
    match g.replace_token_keys(vec![new.clone(), KeySource::secret(&missing)]) {
        Err(KeyError::Read { path, .. }) => assert_eq!(path, missing),
        other => panic!("expected a read error naming the file, got {other:?}"),
    }
    assert_eq!(g.token_key_sources(), vec![old.clone()]);
    assert!(
        auth_answer(addr, &token_of(OLD, "bob"))
            .await
            .contains("authenticated")
    );

    g.replace_token_keys(vec![new.clone()]).unwrap();
    assert_eq!(g.token_key_sources(), vec![new.clone()]);
    assert!(
        auth_answer(addr, &token_of(NEW, "bob"))
            .await
            .contains("authenticated")
    );
    let refused = auth_answer(addr, &token_of(OLD, "eve")).await;
    assert!(refused.starts_with("closed"), "{refused}");
    // The connection authenticated with the old key stays, and is served.
    assert_eq!(g.push_user_local("ann", "after the replace").queued, 1);
    assert_eq!(next_text(&mut ann).await, "after the replace");

    // The new file is the one watched from now on: rotated in place, it is taken.
    std::fs::write(&new.path, format!("{ROTATED}\n")).unwrap();
    assert_eq!(g.reload_keys(), holdfast_gateway::KeyReload::Reloaded);
    assert!(
        auth_answer(addr, &token_of(ROTATED, "cy"))
            .await
            .contains("authenticated")
    );
    // The old file, rewritten, is not looked at any more.
    std::fs::write(&old.path, "live-paths-another-secret-24681357\n").unwrap();
    assert_eq!(g.reload_keys(), holdfast_gateway::KeyReload::Unchanged);
    assert_eq!(g.key_fault(), None);
}

/// A test CA that issues leaves for `localhost`.
struct Ca {
    cert: rcgen::Certificate,
    params: rcgen::CertificateParams,
    key: rcgen::KeyPair,
}

impl Ca {
    fn new() -> Self {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).unwrap();
        Self { cert, params, key }
    }

    /// A leaf for `localhost` written as a pair under `dir`; its DER (what a client sees).
    fn leaf_in(&self, dir: &Path) -> (TlsFiles, Vec<u8>) {
        let issuer = rcgen::Issuer::from_params(&self.params, &self.key);
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        let cert = params.signed_by(&key, &issuer).unwrap();
        std::fs::create_dir_all(dir).unwrap();
        let files = TlsFiles {
            cert: dir.join("fullchain.pem"),
            key: dir.join("key.pem"),
        };
        std::fs::write(&files.cert, format!("{}{}", cert.pem(), self.cert.pem())).unwrap();
        std::fs::write(&files.key, key.serialize_pem()).unwrap();
        (files, cert.der().to_vec())
    }

    fn client(&self) -> tokio_rustls::TlsConnector {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from(self.cert.der().to_vec()))
            .unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        tokio_rustls::TlsConnector::from(Arc::new(config))
    }
}

type Wss = WebSocketStream<TlsStream<TcpStream>>;

/// Connects over TLS trusting `ca`, upgrades and authenticates as `user`; returns the socket
/// and the leaf it was shown.
async fn wss_member(ca: &Ca, addr: SocketAddr, user: &str) -> (Wss, Vec<u8>) {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let tls = ca.client().connect(name, tcp).await.unwrap();
    let leaf = tls.get_ref().1.peer_certificates().unwrap()[0].to_vec();
    let (mut ws, _) = tokio_tungstenite::client_async("wss://localhost/", tls)
        .await
        .unwrap();
    let auth = serde_json::json!({"type": "auth", "token": token(user)});
    ws.send(Message::Text(auth.to_string().into()))
        .await
        .unwrap();
    assert!(next_text_of(&mut ws).await.contains("authenticated"));
    (ws, leaf)
}

async fn next_text_of(ws: &mut Wss) -> String {
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(5), ws.next())
            .await
            .expect("a message within 5 s")
            .expect("stream open")
            .expect("no error");
        match msg {
            Message::Text(t) => return t.to_string(),
            Message::Ping(_) | Message::Pong(_) => continue,
            other => panic!("expected text, got {other:?}"),
        }
    }
}

// r[verify gateway.tls.replace+2]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_pair_is_served_to_new_handshakes_while_open_ones_stay() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new();
    let (first, first_der) = ca.leaf_in(&dir.path().join("a"));
    let mut c = config("a");
    c.tls = Some(first.clone());
    // Checked at each connection: a replace must not be undone by a check of the old files.
    c.tls_check_interval = Duration::ZERO;
    let node = start(c).await;
    let g = &node.gateway;
    let addr = g.local_addr();
    let (mut old, seen) = wss_member(&ca, addr, "ann").await;
    assert_eq!(seen, first_der);

    // A pair that cannot be read changes nothing, and the error names the file.
    let missing = TlsFiles {
        cert: dir.path().join("none/fullchain.pem"),
        key: dir.path().join("none/key.pem"),
    };
    match g.replace_tls(missing.clone()) {
        Err(TlsError::Read { path, .. }) => assert_eq!(path, missing.cert),
        other => panic!("expected a read error naming the file, got {other:?}"),
    }
    assert_eq!(g.tls_files(), Some(first.clone()));
    let (_ws, seen) = wss_member(&ca, addr, "bob").await;
    assert_eq!(seen, first_der);

    let (second, second_der) = ca.leaf_in(&dir.path().join("b"));
    assert!(g.replace_tls(second.clone()).unwrap());
    assert_eq!(g.tls_files(), Some(second.clone()));
    let (mut new, seen) = wss_member(&ca, addr, "cy").await;
    assert_eq!(seen, second_der);
    // The connection opened before the replace keeps its session and is served.
    assert_eq!(g.push_user_local("ann", "after the replace").queued, 1);
    assert_eq!(next_text_of(&mut old).await, "after the replace");
    assert_eq!(g.push_user_local("cy", "to the new one").queued, 1);
    assert_eq!(next_text_of(&mut new).await, "to the new one");

    // The new files are the ones watched: renewed in place, the renewal is served; the old
    // files, rewritten, are not looked at.
    let (_, third_der) = ca.leaf_in(&dir.path().join("b"));
    ca.leaf_in(&dir.path().join("a"));
    assert!(matches!(g.reload_tls(), TlsReload::Reloaded));
    let (_ws, seen) = wss_member(&ca, addr, "dee").await;
    assert_eq!(seen, third_der);
    assert!(matches!(g.reload_tls(), TlsReload::Unchanged));
}

// r[verify gateway.tls.replace+2]
#[tokio::test]
async fn a_plain_gateway_is_given_no_pair() {
    let dir = tempfile::tempdir().unwrap();
    let (files, _) = Ca::new().leaf_in(dir.path());
    let node = start(config("a")).await;
    assert!(!node.gateway.replace_tls(files).unwrap());
    assert_eq!(node.gateway.tls_files(), None);
}

// A forced check (the reload's blocking `reload_tls`) of a served cert file turned into a named
// pipe no longer hangs, and never holds up `take_tls` (called by the reload's apply with the
// node's running set locked): the review's reproduction of issue 29's blocker.
// r[verify gateway.tls.replace+2]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn take_tls_never_waits_behind_a_check_of_a_named_pipe() {
    fn pair(dir: &Path) -> TlsFiles {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        std::fs::create_dir_all(dir).unwrap();
        let files = TlsFiles {
            cert: dir.join("cert.pem"),
            key: dir.join("key.pem"),
        };
        std::fs::write(&files.cert, cert.pem()).unwrap();
        std::fs::write(&files.key, key.serialize_pem()).unwrap();
        files
    }
    let dir = tempfile::tempdir().unwrap();
    let first = pair(&dir.path().join("a"));
    let second = pair(&dir.path().join("b"));
    let mut c = config("a");
    c.tls = Some(first.clone());
    c.tls_check_interval = Duration::from_secs(3600);
    let node = start(c).await;
    let g = node.gateway.clone();
    std::fs::remove_file(&first.cert).unwrap();
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&first.cert)
            .status()
            .unwrap()
            .success()
    );
    let (checked_tx, checked_rx) = std::sync::mpsc::channel();
    let g1 = g.clone();
    std::thread::spawn(move || checked_tx.send(g1.reload_tls()).unwrap());
    std::thread::sleep(Duration::from_millis(300));
    let pair = holdfast_gateway::tls::NewTlsPair::read(second.clone()).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let g2 = g.clone();
    std::thread::spawn(move || {
        tx.send(g2.take_tls(pair)).unwrap();
    });
    let taken = rx.recv_timeout(Duration::from_secs(3));
    let checked = checked_rx.recv_timeout(Duration::from_millis(10));
    if taken.is_err() || checked.is_err() {
        // Unblock a hung read before failing.
        drop(std::fs::OpenOptions::new().write(true).open(&first.cert));
    }
    assert!(
        taken.is_ok(),
        "take_tls blocked for 3 s behind a check hung on the old cert file"
    );
    assert!(
        matches!(checked, Ok(TlsReload::Rejected(TlsError::Read { .. }))),
        "{checked:?}"
    );
    assert_eq!(g.tls_files(), Some(second));
}
