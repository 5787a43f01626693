//! The gateway's edge against real clients on loopback: `wss://` with a certificate that is
//! renewed under open connections, and the per-address and unauthenticated limits under a flood.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use futures_util::{SinkExt, StreamExt};
use holdfast_gateway::{Gateway, StartError, TlsError, TlsFiles, TlsReload};
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::net::{TcpSocket, TcpStream};
use tokio_rustls::client::TlsStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

/// A test CA that issues leaves for `localhost`.
struct Ca {
    cert: rcgen::Certificate,
    params: rcgen::CertificateParams,
    key: rcgen::KeyPair,
}

/// A leaf: its PEM chain and key, and its DER (what a client sees).
struct Leaf {
    chain_pem: String,
    key_pem: String,
    der: Vec<u8>,
}

impl Ca {
    fn new() -> Self {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).unwrap();
        Self { cert, params, key }
    }

    fn leaf(&self) -> Leaf {
        let issuer = rcgen::Issuer::from_params(&self.params, &self.key);
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        let cert = params.signed_by(&key, &issuer).unwrap();
        Leaf {
            chain_pem: format!("{}{}", cert.pem(), self.cert.pem()),
            key_pem: key.serialize_pem(),
            der: cert.der().to_vec(),
        }
    }

    fn client(&self) -> tokio_rustls::TlsConnector {
        tokio_rustls::TlsConnector::from(self.client_config())
    }

    fn client_config(&self) -> Arc<rustls::ClientConfig> {
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
        Arc::new(config)
    }
}

/// Writes the pair the way a renewal does: each file replaced by a rename, never half-written.
fn install(dir: &Path, leaf: &Leaf) -> TlsFiles {
    let files = TlsFiles {
        cert: dir.join("fullchain.pem"),
        key: dir.join("key.pem"),
    };
    for (path, text) in [(&files.cert, &leaf.chain_pem), (&files.key, &leaf.key_pem)] {
        let tmp: PathBuf = path.with_extension("tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, path).unwrap();
    }
    files
}

type Wss = WebSocketStream<TlsStream<TcpStream>>;

/// Connects over TLS trusting `ca` and upgrades; returns the socket and the leaf it was shown.
async fn connect_wss(ca: &Ca, addr: SocketAddr) -> Result<(Wss, Vec<u8>), std::io::Error> {
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from("localhost").unwrap();
    let tls = ca.client().connect(name, tcp).await?;
    let leaf = tls.get_ref().1.peer_certificates().unwrap()[0].to_vec();
    let (ws, _) = tokio_tungstenite::client_async("wss://localhost/", tls)
        .await
        .unwrap();
    Ok((ws, leaf))
}

async fn next_text_of<S>(ws: &mut WebSocketStream<S>) -> String
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
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

async fn join<S>(ws: &mut WebSocketStream<S>, user: &str, room: &str)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let auth = serde_json::json!({"type": "auth", "token": token(user)});
    ws.send(Message::Text(auth.to_string().into()))
        .await
        .unwrap();
    assert!(next_text_of(ws).await.contains("authenticated"));
    let j = serde_json::json!({"type": "join", "room": room});
    ws.send(Message::Text(j.to_string().into())).await.unwrap();
    assert!(next_text_of(ws).await.contains("joined"));
}

fn tls_config(files: TlsFiles, check: Duration) -> holdfast_gateway::GatewayConfig {
    let mut c = config("a");
    c.tls = Some(files);
    c.tls_check_interval = check;
    c
}

// r[verify gateway.tls.serve]
// r[verify gateway.tls.reload]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_reaches_new_connections_while_open_ones_keep_receiving() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new();
    let first = ca.leaf();
    let files = install(dir.path(), &first);
    let node = start(tls_config(files.clone(), Duration::ZERO)).await;
    let addr = node.gateway.local_addr();

    let (mut old, seen) = connect_wss(&ca, addr).await.unwrap();
    assert_eq!(seen, first.der);
    join(&mut old, "ann", "lobby").await;
    // A client that does not trust the issuing root is refused by its own TLS check.
    assert!(connect_wss(&Ca::new(), addr).await.is_err());

    // The renewal: both files replaced. The next connection is shown the new leaf.
    let second = ca.leaf();
    install(dir.path(), &second);
    let (mut new, seen) = connect_wss(&ca, addr).await.unwrap();
    assert_eq!(seen, second.der);
    join(&mut new, "bob", "lobby").await;
    assert_eq!(node.gateway.stats().tls_reloads, 1);

    // The connection opened before the renewal is still up and still served.
    assert_eq!(
        node.gateway
            .push_room_local("lobby", "after renewal")
            .queued,
        2
    );
    assert_eq!(next_text_of(&mut old).await, "after renewal");
    assert_eq!(next_text_of(&mut new).await, "after renewal");

    // A bad new pair (the key is not a key) is rejected: the previous leaf is still served, and
    // the rejection is counted once for the change, however many connections arrive after it.
    std::fs::write(&files.key, "not a key").unwrap();
    for _ in 0..3 {
        let (_ws, seen) = connect_wss(&ca, addr).await.unwrap();
        assert_eq!(seen, second.der);
    }
    assert_eq!(node.gateway.stats().tls_reload_failures, 1);
    // A key that is not the certificate's is rejected too, naming both files.
    std::fs::write(&files.key, ca.leaf().key_pem).unwrap();
    match node.gateway.reload_tls() {
        TlsReload::Rejected(TlsError::Mismatch { cert, key }) => {
            assert_eq!((cert, key), (files.cert.clone(), files.key.clone()));
        }
        other => panic!("expected a mismatch, got {other:?}"),
    }
    let (_ws, seen) = connect_wss(&ca, addr).await.unwrap();
    assert_eq!(seen, second.der);
    assert_eq!(node.gateway.stats().tls_reload_failures, 2);
    assert_eq!(node.gateway.push_user_local("ann", "still here").queued, 1);
    assert_eq!(next_text_of(&mut old).await, "still here");

    // Fixing the files is picked up again.
    let third = ca.leaf();
    install(dir.path(), &third);
    let (_ws, seen) = connect_wss(&ca, addr).await.unwrap();
    assert_eq!(seen, third.der);
    assert_eq!(node.gateway.stats().tls_reloads, 2);
}

// r[verify gateway.tls.reload]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_files_are_checked_at_the_interval_or_when_told() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new();
    let first = ca.leaf();
    let files = install(dir.path(), &first);
    let node = start(tls_config(files, Duration::from_secs(3600))).await;
    let addr = node.gateway.local_addr();
    assert!(matches!(node.gateway.reload_tls(), TlsReload::Unchanged));

    let second = ca.leaf();
    install(dir.path(), &second);
    // Within the interval a connection does not look at the files.
    let (_ws, seen) = connect_wss(&ca, addr).await.unwrap();
    assert_eq!(seen, first.der);
    // The explicit trigger (the node calls it when issuance renews) looks at once.
    assert!(matches!(node.gateway.reload_tls(), TlsReload::Reloaded));
    let (_ws, seen) = connect_wss(&ca, addr).await.unwrap();
    assert_eq!(seen, second.der);
    assert!(matches!(node.gateway.reload_tls(), TlsReload::Unchanged));

    // Without TLS there is nothing to reload.
    let plain = start(config("b")).await;
    assert!(matches!(plain.gateway.reload_tls(), TlsReload::Off));
}

// r[verify gateway.tls.serve]
#[tokio::test]
async fn an_unusable_pair_at_start_is_an_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new();
    let files = install(dir.path(), &ca.leaf());
    let start_err = |files: TlsFiles| async move {
        let registry = holdfast_gateway::MemoryRegistry::new();
        let r = Gateway::start(
            tls_config(files, Duration::ZERO),
            Arc::new(registry.clone()),
            Arc::new(holdfast_gateway::MemoryRouting::new()),
        )
        .await;
        // Nothing was registered for a gateway that did not start.
        assert!(!registry.is_registered("a"));
        match r {
            Err(e) => e,
            Ok(_) => panic!("started with an unusable pair"),
        }
    };

    let missing = TlsFiles {
        cert: dir.path().join("absent.pem"),
        key: files.key.clone(),
    };
    let e = start_err(missing.clone()).await;
    assert!(matches!(e, StartError::Tls(TlsError::Read { .. })), "{e}");
    assert!(e.to_string().contains("absent.pem"), "{e}");

    let wrong_key = dir.path().join("other-key.pem");
    std::fs::write(&wrong_key, ca.leaf().key_pem).unwrap();
    let e = start_err(TlsFiles {
        cert: files.cert.clone(),
        key: wrong_key,
    })
    .await;
    assert!(
        matches!(e, StartError::Tls(TlsError::Mismatch { .. })),
        "{e}"
    );
    assert!(e.to_string().contains("other-key.pem"), "{e}");

    let no_cert = dir.path().join("empty.pem");
    std::fs::write(&no_cert, "").unwrap();
    let e = start_err(TlsFiles {
        cert: no_cert,
        key: files.key.clone(),
    })
    .await;
    assert!(
        matches!(e, StartError::Tls(TlsError::NoCertificate { .. })),
        "{e}"
    );
    assert!(e.to_string().contains("empty.pem"), "{e}");
}

/// Connects from `source` (any 127.0.0.0/8 address is loopback) and upgrades; `Err` carries the
/// HTTP status and Retry-After of a refused upgrade.
async fn connect_from(
    source: &str,
    gateway: &Gateway,
) -> Result<Client, (u16, Option<String>, String)> {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(format!("{source}:0").parse().unwrap()).unwrap();
    let addr = gateway.local_addr();
    let tcp = socket.connect(addr).await.unwrap();
    match tokio_tungstenite::client_async(format!("ws://{addr}/"), tcp).await {
        Ok((ws, _)) => Ok(ws),
        Err(WsError::Http(resp)) => {
            let retry = resp
                .headers()
                .get("retry-after")
                .map(|v| v.to_str().unwrap().to_owned());
            let body = String::from_utf8_lossy(resp.body().as_deref().unwrap_or_default());
            Err((resp.status().as_u16(), retry, body.into_owned()))
        }
        Err(e) => panic!("unexpected handshake error {e}"),
    }
}

/// The client keeps only the part of the body that arrived with the headers: what it has must be
/// the reason's beginning (the counters tell the two refusals apart in any case).
fn assert_reason(body: &str, reason: &str) {
    assert!(
        reason.starts_with(body),
        "{body:?} is not part of {reason:?}"
    );
}

/// Sends an upgrade request from `source` on a raw socket and reads the whole answer, up to the
/// gateway closing the socket: the status line, the headers and the complete body.
async fn raw_refusal(source: &str, gateway: &Gateway) -> (String, Option<String>, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(format!("{source}:0").parse().unwrap()).unwrap();
    let addr = gateway.local_addr();
    let mut tcp = socket.connect(addr).await.unwrap();
    let request = format!(
        "GET / HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), tcp.read_to_end(&mut answer))
        .await
        .expect("the gateway ends a refused connection")
        .unwrap();
    let answer = String::from_utf8(answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").expect("a complete head");
    let mut lines = head.lines();
    let status = lines.next().unwrap().to_owned();
    let retry = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("retry-after"))
        .map(|(_, v)| v.trim().to_owned());
    (status, retry, body.to_owned())
}

// r[verify gateway.edge.limits+3]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_from_one_address_is_refused_past_its_limit_and_nobody_else_notices() {
    let mut c = config("a");
    c.per_ip_limit = 10;
    let node = start(c).await;
    // An authenticated client on the flooding address holds one of its ten places.
    let mut ann = member(&node.gateway, "ann", "lobby").await;
    let mut flood = Vec::new();
    for _ in 0..9 {
        flood.push(connect_from("127.0.0.1", &node.gateway).await.unwrap());
    }
    for _ in 0..40 {
        let (status, retry, body) = connect_from("127.0.0.1", &node.gateway).await.unwrap_err();
        assert_eq!((status, retry.as_deref()), (503, Some("2")));
        assert_reason(&body, "too many connections from this address");
    }
    // Read to the end, the answer names the limit in full.
    let (status, retry, body) = raw_refusal("127.0.0.1", &node.gateway).await;
    assert!(status.starts_with("HTTP/1.1 503"), "{status}");
    assert_eq!(retry.as_deref(), Some("2"));
    assert_eq!(body, "too many connections from this address");
    assert_eq!(node.gateway.stats().refused_per_ip, 41);
    assert_eq!(node.gateway.stats().refused_unauthenticated, 0);
    // Another address is not affected, and the member kept receiving throughout.
    let mut other = connect_from("127.0.0.2", &node.gateway).await.unwrap();
    assert_eq!(
        node.gateway
            .push_user_local("ann", "through the flood")
            .queued,
        1
    );
    assert_eq!(next_text(&mut ann).await, "through the flood");
    // The admitted part of the flood is unharmed too: it may still authenticate.
    send_json(
        &mut flood[0],
        serde_json::json!({"type":"auth","token":token("fay")}),
    )
    .await;
    assert!(next_text(&mut flood[0]).await.contains("authenticated"));
    send_json(
        &mut other,
        serde_json::json!({"type":"auth","token":token("oz")}),
    )
    .await;
    assert!(next_text(&mut other).await.contains("authenticated"));

    // Places are given back as connections end.
    flood.truncate(5);
    eventually("the dropped half torn down", || {
        node.gateway.connections() == 1 + 5 + 1
    })
    .await;
    for _ in 0..4 {
        flood.push(connect_from("127.0.0.1", &node.gateway).await.unwrap());
    }
    assert!(connect_from("127.0.0.1", &node.gateway).await.is_err());
}

// r[verify gateway.edge.limits+3]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthenticated_connections_are_capped_in_total_and_authenticating_frees_a_place() {
    let mut c = config("a");
    c.per_ip_limit = 0;
    c.unauthenticated_limit = 5;
    let node = start(c).await;
    let mut ann = member(&node.gateway, "ann", "lobby").await;
    let mut waiting = Vec::new();
    for i in 0..5 {
        waiting.push(
            connect_from(&format!("127.0.0.{}", 10 + i), &node.gateway)
                .await
                .unwrap(),
        );
    }
    assert_eq!(node.gateway.unauthenticated(), 5);
    for i in 0..20 {
        let (status, retry, body) = connect_from(&format!("127.0.1.{i}"), &node.gateway)
            .await
            .unwrap_err();
        assert_eq!((status, retry.as_deref()), (503, Some("2")));
        assert_reason(&body, "too many unauthenticated connections");
    }
    let (status, retry, body) = raw_refusal("127.0.1.99", &node.gateway).await;
    assert!(status.starts_with("HTTP/1.1 503"), "{status}");
    assert_eq!(retry.as_deref(), Some("2"));
    assert_eq!(body, "too many unauthenticated connections");
    assert_eq!(node.gateway.stats().refused_unauthenticated, 21);
    assert_eq!(
        node.gateway.push_room_local("lobby", "unbothered").queued,
        1
    );
    assert_eq!(next_text(&mut ann).await, "unbothered");

    // One of them authenticates: its place is free for a newcomer.
    send_json(
        &mut waiting[0],
        serde_json::json!({"type":"auth","token":token("bob")}),
    )
    .await;
    assert!(next_text(&mut waiting[0]).await.contains("authenticated"));
    assert_eq!(node.gateway.unauthenticated(), 4);
    let _newcomer = connect_from("127.0.2.1", &node.gateway).await.unwrap();
    assert!(connect_from("127.0.2.2", &node.gateway).await.is_err());
    // A refused connection does not linger in the registry.
    eventually("refused connections torn down", || {
        node.gateway.connections() == 1 + 5 + 1
    })
    .await;
}

// r[verify gateway.edge.unauthenticated-per-source]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_source_at_its_unauthenticated_cap_is_refused_while_another_authenticates() {
    let mut c = config("a");
    c.unauthenticated_per_ip_limit = 3;
    let node = start(c).await;
    assert_eq!(
        config("b").unauthenticated_per_ip_limit,
        holdfast_gateway::DEFAULT_UNAUTHENTICATED_PER_IP
    );
    // Source A holds three silent, unauthenticated connections: its cap.
    let mut a = Vec::new();
    for _ in 0..3 {
        a.push(connect_from("127.0.0.3", &node.gateway).await.unwrap());
    }
    for _ in 0..10 {
        let (status, retry, body) = connect_from("127.0.0.3", &node.gateway).await.unwrap_err();
        assert_eq!((status, retry.as_deref()), (503, Some("2")));
        assert_reason(
            &body,
            "too many unauthenticated connections from this address",
        );
    }
    let (status, _, body) = raw_refusal("127.0.0.3", &node.gateway).await;
    assert!(status.starts_with("HTTP/1.1 503"), "{status}");
    assert_eq!(
        body,
        "too many unauthenticated connections from this address"
    );
    let stats = node.gateway.stats();
    assert_eq!(stats.refused_unauthenticated_per_ip, 11);
    assert_eq!(
        (stats.refused_per_ip, stats.refused_unauthenticated),
        (0, 0)
    );
    // Source B is not affected: it connects and authenticates.
    let mut b = connect_from("127.0.0.4", &node.gateway).await.unwrap();
    send_json(
        &mut b,
        serde_json::json!({"type":"auth","token":token("bea")}),
    )
    .await;
    assert!(next_text(&mut b).await.contains("authenticated"));
    // One of A's connections authenticates: A has a place again, and only one.
    send_json(
        &mut a[0],
        serde_json::json!({"type":"auth","token":token("al")}),
    )
    .await;
    assert!(next_text(&mut a[0]).await.contains("authenticated"));
    a.push(connect_from("127.0.0.3", &node.gateway).await.unwrap());
    assert!(connect_from("127.0.0.3", &node.gateway).await.is_err());
    assert_eq!(node.gateway.unauthenticated(), 3);
}

/// Sends a TLS ClientHello from `source` on a raw socket and returns the first bytes the gateway
/// answers with (none when it closes or resets the socket first), and how long that took.
async fn hello_answer(ca: &Ca, source: &str, addr: SocketAddr) -> (Vec<u8>, Duration) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(format!("{source}:0").parse().unwrap()).unwrap();
    let mut tcp = socket.connect(addr).await.unwrap();
    let started = std::time::Instant::now();
    let name = ServerName::try_from("localhost").unwrap();
    let mut client = rustls::ClientConnection::new(ca.client_config(), name).unwrap();
    let mut hello = Vec::new();
    client.write_tls(&mut hello).unwrap();
    // The gateway may have closed already: a failed write is part of the answer.
    let _ = tcp.write_all(&hello).await;
    let mut buf = [0u8; 4096];
    // The first read is enough: a ServerHello, or the end of the socket (EOF or a reset).
    let n = tokio::time::timeout(Duration::from_secs(10), tcp.read(&mut buf))
        .await
        .expect("the gateway answers or ends the socket")
        .unwrap_or(0);
    (buf[..n].to_vec(), started.elapsed())
}

// r[verify gateway.edge.refuse-before-tls]
// r[verify gateway.registry.track+2]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_a_limit_a_tls_client_is_closed_without_a_server_hello() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new();
    let leaf = ca.leaf();
    let mut c = tls_config(install(dir.path(), &leaf), Duration::from_secs(3600));
    c.per_ip_limit = 2;
    c.unauthenticated_per_ip_limit = 1;
    // Far beyond what the test waits: a close at once is the refusal, not a timeout.
    c.refusal_timeout = Duration::from_secs(30);
    c.handshake_timeout = Duration::from_secs(30);
    let node = start(c).await;
    let addr = node.gateway.local_addr();
    // Under the limits a ClientHello is answered with a ServerHello (a TLS handshake record).
    let (answer, _) = hello_answer(&ca, "127.0.0.5", addr).await;
    assert_eq!(answer.first(), Some(&0x16), "{answer:?}");
    // 127.0.0.6 takes its one unauthenticated place with a real session and keeps it.
    let tcp = TcpSocket::new_v4().unwrap();
    tcp.bind("127.0.0.6:0".parse().unwrap()).unwrap();
    let tcp = tcp.connect(addr).await.unwrap();
    let tls = ca
        .client()
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    let (mut held, _) = tokio_tungstenite::client_async("wss://localhost/", tls)
        .await
        .unwrap();
    // Past the cap, a ClientHello gets nothing back: the socket is closed at once.
    for _ in 0..5 {
        let (answer, took) = hello_answer(&ca, "127.0.0.6", addr).await;
        assert!(
            answer.is_empty(),
            "a refused socket was answered: {answer:?}"
        );
        assert!(took < Duration::from_secs(2), "{took:?}");
    }
    // A TLS client sees its handshake fail at once.
    let tcp = TcpSocket::new_v4().unwrap();
    tcp.bind("127.0.0.6:0".parse().unwrap()).unwrap();
    let tcp = tcp.connect(addr).await.unwrap();
    let started = std::time::Instant::now();
    let r = ca
        .client()
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await;
    assert!(r.is_err(), "a handshake past the cap completed");
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(node.gateway.stats().refused_unauthenticated_per_ip, 6);
    // The refused sockets hold nothing; the held session still authenticates.
    eventually("refused sockets gone", || node.gateway.connections() == 1).await;
    held.send(Message::Text(
        serde_json::json!({"type":"auth","token":token("hal")})
            .to_string()
            .into(),
    ))
    .await
    .unwrap();
    assert!(next_text_of(&mut held).await.contains("authenticated"));
}

// r[verify gateway.edge.buffers]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_too_large_for_the_write_buffer_cap_closes_only_its_recipient_with_1009() {
    let mut c = config("a");
    c.max_write_buffer = 2048;
    let node = start(c).await;
    let mut big = member(&node.gateway, "ann", "big").await;
    let mut small = member(&node.gateway, "bob", "small").await;
    let fits = "x".repeat(1024);
    assert_eq!(node.gateway.push_room_local("big", &fits).queued, 1);
    assert_eq!(next_text(&mut big).await, fits);
    node.gateway.push_room_local("big", &"y".repeat(4096));
    let end = read_to_end(&mut big, Duration::from_secs(5)).await;
    let close = end.close.expect("a close frame");
    assert_eq!(
        (u16::from(close.code), close.reason.as_str()),
        (1009, "message too big to send")
    );
    assert_eq!(node.gateway.push_room_local("small", "fine").queued, 1);
    assert_eq!(next_text(&mut small).await, "fine");

    // A cap that leaves no room beyond the write buffer target is refused at start.
    let mut bad = config("b");
    bad.write_buffer = 4096;
    bad.max_write_buffer = 4096;
    let r = Gateway::start(
        bad,
        Arc::new(holdfast_gateway::MemoryRegistry::new()),
        Arc::new(holdfast_gateway::MemoryRouting::new()),
    )
    .await;
    assert!(matches!(r, Err(StartError::Config(_))));
}

// r[verify gateway.edge.limits+3]
// On tokio's paused clock: the refusal timeout is measured, not slept through.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_refused_socket_that_sends_nothing_is_dropped_at_the_refusal_timeout() {
    let mut c = config("a");
    c.per_ip_limit = 1;
    // The paused clock jumps to the next timer whenever the runtime idles: the admitted socket's
    // handshake timeout must lie far beyond anything this test waits for.
    c.handshake_timeout = Duration::from_secs(24 * 3600);
    c.refusal_timeout = Duration::from_millis(200);
    let node = start(c).await;
    let addr = node.gateway.local_addr();
    // Both sockets stay silent: the first is admitted, the second is over the limit.
    let _admitted = TcpStream::connect(addr).await.unwrap();
    eventually("admitted", || node.gateway.connections() == 1).await;
    let mut refused = TcpStream::connect(addr).await.unwrap();
    eventually("the refused socket registered", || {
        node.gateway.connections() == 2
    })
    .await;
    let registered = tokio::time::Instant::now();
    // The gateway closes the refused socket on its own at the refusal timeout, not before (it
    // had that long to send its request and take the 503) and not at the handshake timeout.
    let mut buf = [0u8; 16];
    let read = tokio::time::timeout(
        Duration::from_secs(5),
        tokio::io::AsyncReadExt::read(&mut refused, &mut buf),
    )
    .await
    .expect("closed within 5 s");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    let waited = registered.elapsed();
    assert!(
        waited >= Duration::from_millis(180) && waited < Duration::from_secs(1),
        "{waited:?}"
    );
    eventually("refused socket torn down", || {
        node.gateway.connections() == 1
    })
    .await;
    assert_eq!(node.gateway.stats().refused_per_ip, 1);
    // The admitted one, just as silent, is still there well past the refusal timeout.
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(node.gateway.connections(), 1);
}

// r[verify gateway.edge.buffers]
// One thread: both pushes are queued before the connections' tasks run again, so the drain's
// flush, not the serving loop, is what meets the oversize message.
#[tokio::test(flavor = "current_thread")]
async fn a_push_too_large_for_the_write_buffer_cap_met_by_the_drain_closes_with_1009() {
    let mut c = config("a");
    c.max_write_buffer = 2048;
    let node = start(c).await;
    let mut big = member(&node.gateway, "ann", "big").await;
    let mut small = member(&node.gateway, "bob", "small").await;
    assert_eq!(
        node.gateway
            .push_room_local("big", &"y".repeat(4096))
            .queued,
        1
    );
    assert_eq!(node.gateway.push_room_local("small", "fine").queued, 1);
    let (_report, big_end, small_end) = tokio::join!(
        node.gateway
            .drain(holdfast_lifecycle::StopReason::Restart, None),
        read_to_end(&mut big, Duration::from_secs(5)),
        read_to_end(&mut small, Duration::from_secs(5)),
    );
    let close = big_end.close.expect("a close frame for the oversize push");
    assert_eq!(
        (u16::from(close.code), close.reason.as_str()),
        (1009, "message too big to send")
    );
    // Its neighbour gets what was queued and the drain's own close.
    assert_eq!(small_end.texts, ["fine"]);
    assert_eq!(small_end.close.map(|c| u16::from(c.code)), Some(1012));
}

// r[verify gateway.edge.live-limits]
#[tokio::test]
async fn the_limits_in_force_are_the_configs_until_replaced() {
    let mut c = config("a");
    c.per_ip_limit = 7;
    c.max_room_name = 12;
    let started = c.live_limits();
    let node = start(c).await;
    assert_eq!(node.gateway.live_limits(), started);
    let lowered = holdfast_gateway::LiveLimits {
        per_ip_limit: 1,
        unauthenticated_limit: 2,
        unauthenticated_per_ip_limit: 1,
        max_rooms_per_connection: 3,
        max_room_name: 4,
    };
    node.gateway.update_limits(lowered);
    assert_eq!(node.gateway.live_limits(), lowered);
}
