//! The gateway in the node, through the binary: a WebSocket client authenticates, receives what is
//! pushed through the admin API, and is closed with the code for the node's stop reason while
//! `/readyz` says 503.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::{Duration, SystemTime};

use common::{Node, start_in};
use futures_util::SinkExt;
use holdfast::admin::client::{ClientError, Target, call, call_json};
use holdfast::admin::token;
use holdfast_gateway::TokenKey;
use nix::sys::signal::Signal;
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;

const KEY: &str = "gateway-test-key-0123456789";

use common::ws::{close_frame, next_text};

/// A node with a `[gateway]` section (replica `gw-a`, port picked by the system).
fn start_gateway(drain: &str) -> Node {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("gateway.key");
    std::fs::write(&key, format!("{KEY}\n")).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let extra = format!(
        "[gateway]\nlisten = \"127.0.0.1:0\"\nreplica_id = \"gw-a\"\ntoken_key_file = \"{}\"\n\n\
         [gateway.drain]\n{drain}\n",
        key.display()
    );
    start_in(dir, &extra, "10s", None)
}

async fn json_get(node: &Node, path: &str) -> Value {
    serde_json::from_str(&node.get(path).await.unwrap()).unwrap()
}

fn socket(node: &Node) -> Target {
    Target::Unix(node.dir.path().join("admin.sock"))
}

fn cli(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_holdfast"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

// r[verify node.gateway.module+2]
// r[verify node.gateway.stop]
// r[verify node.gateway.stop-reason+2]
// r[verify node.gateway.readyz]
// r[verify node.gateway.metrics+4]
// i[verify node.gateway.show+2]
// i[verify node.gateway.push+2]
// i[verify node.gateway.cli+2]
// i[verify node.gateway.status]
#[tokio::test]
async fn a_pushed_message_reaches_the_client_and_a_restart_drain_closes_it_with_1012() {
    let node = start_gateway("total = \"3s\"");
    node.until_ready().await;
    let shown = json_get(&node, "/v1/gateway").await;
    assert_eq!(shown["replica"]["id"], "gw-a", "{shown}");
    assert_eq!(shown["ready"], true, "{shown}");
    assert_eq!(shown["draining"], false, "{shown}");
    assert_eq!(shown["last_drain"], Value::Null, "{shown}");
    assert_eq!(shown["key_fault"], Value::Null, "{shown}");
    let addr = shown["replica"]["address"].as_str().unwrap().to_owned();

    let mut ws = common::ws::member(&addr, KEY, "ann", "lobby").await;
    let shown = json_get(&node, "/v1/gateway").await;
    assert_eq!(
        (&shown["connections"], &shown["authenticated"]),
        (&json!(1), &json!(1))
    );

    // A push is a mutating call: refused over TCP without the token, sending nothing.
    let body = json!({"room": "lobby", "text": "hello lobby"});
    let refused = call_json(
        &node.admin,
        hyper::Method::POST,
        "/v1/gateway/push",
        None,
        &body,
    )
    .await
    .unwrap_err();
    assert!(
        matches!(refused, ClientError::Refused { status: 401, .. }),
        "{refused}"
    );
    let bad = call_json(
        &node.admin,
        hyper::Method::POST,
        "/v1/gateway/push",
        Some(&token::read(&node.dir.path().join("token")).unwrap()),
        &json!({"room": "lobby", "user": "ann", "text": "both"}),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(bad, ClientError::Refused { status: 400, .. }),
        "{bad}"
    );
    let delivered = call_json(
        &node.admin,
        hyper::Method::POST,
        "/v1/gateway/push",
        Some(&token::read(&node.dir.path().join("token")).unwrap()),
        &body,
    )
    .await
    .unwrap();
    let delivered: Value = serde_json::from_str(&delivered).unwrap();
    assert_eq!(
        (&delivered["queued"], &delivered["slow_consumers"]),
        (&json!(1), &json!(0)),
        "{delivered}"
    );
    // The room message carries its room and position (gateway.history.position).
    let got: Value = serde_json::from_str(&next_text(&mut ws).await).unwrap();
    assert_eq!(
        got,
        json!({"room": "lobby", "pos": delivered["pos"], "type": "message", "text": "hello lobby"})
    );

    // The CLI pushes to a user over the Unix socket.
    let sock = socket(&node).to_string();
    let (code, out) = cli(&[
        "gateway", "push", "--user", "ann", "hi ann", "--admin", &sock,
    ]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("pushed to user ann: queued for 1"), "{out}");
    assert_eq!(next_text(&mut ws).await, "hi ann");

    let metrics = node.get("/metrics").await.unwrap();
    for series in [
        "holdfast_gateway_connections{state=\"authenticated\"} 1",
        "holdfast_gateway_connections{state=\"unauthenticated\"} 0",
        "holdfast_gateway_messages_total{direction=\"in\"} 2",
        "holdfast_gateway_slow_consumer_drops_total 0",
    ] {
        assert!(metrics.contains(series), "{series} missing:\n{metrics}");
    }
    assert!(
        metrics.contains("holdfast_gateway_messages_total{direction=\"out\"}"),
        "{metrics}"
    );
    // The supervisor knows the module by its name, in the metrics and in the module list.
    assert!(
        metrics.contains("holdfast_module_starts_total{module=\"gateway\"} "),
        "{metrics}"
    );
    let modules: Value = json_get(&node, "/v1/modules").await;
    let module = modules
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "gateway");
    assert_eq!(
        module.map(|m| m["group"].clone()),
        Some(json!("gateway")),
        "{modules}"
    );
    let (code, out) = cli(&["status", "--admin", &sock]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("gateway gw-a at ") && out.contains("ready  connections 1 (1 authenticated)"),
        "{out}"
    );
    let (code, out) = cli(&["gateway", "--admin", &sock]);
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("gateway gw-a at "), "{out}");

    // A restart drain. The client does not read yet, so the drain waits for its close handshake:
    // meanwhile the node is not ready and the gateway says it drains.
    let (code, out) = cli(&["drain", "--restart", "--admin", &sock]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("draining (restart)"), "{out}");
    let mut saw_draining = false;
    for _ in 0..100 {
        match call(&node.admin, hyper::Method::GET, "/readyz", None).await {
            Err(ClientError::Refused {
                status: 503, body, ..
            }) => {
                assert_eq!(body, "draining");
                saw_draining = true;
                break;
            }
            Ok(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            Err(other) => panic!("{other}"),
        }
    }
    assert!(saw_draining, "/readyz never said 503 during the drain");
    let shown = json_get(&node, "/v1/gateway").await;
    assert_eq!(
        (&shown["ready"], &shown["draining"]),
        (&json!(false), &json!(true)),
        "{shown}"
    );
    let frame = close_frame(&mut ws, Duration::from_secs(5))
        .await
        .expect("a close frame");
    assert_eq!(u16::from(frame.code), 1012, "{frame:?}");
    assert!(frame.reason.contains("reconnect_in_ms"), "{frame:?}");
    let (code, _, log) = node.wait(Duration::from_secs(15));
    assert_eq!(code, 0, "{log}");
    assert!(log.contains("gateway drained"), "{log}");
    assert!(!log.contains(KEY), "the token key was logged");
}

// r[verify node.gateway.stop-reason+2]
// r[verify node.gateway.stop]
// The reader must run while this thread waits for the node's exit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_is_a_restart_and_the_client_gets_1012_well_inside_the_budget() {
    let node = start_gateway("total = \"3s\"");
    node.until_ready().await;
    let shown = json_get(&node, "/v1/gateway").await;
    let addr = shown["replica"]["address"].as_str().unwrap().to_owned();
    let mut ws = common::ws::member(&addr, KEY, "bob", "lobby").await;
    // A client that reads (and so answers the close at once).
    let reader = tokio::spawn(async move { close_frame(&mut ws, Duration::from_secs(10)).await });
    node.signal(Signal::SIGTERM);
    let (code, took, log) = node.wait(Duration::from_secs(15));
    assert_eq!(code, 0, "{log}");
    let frame = reader.await.unwrap().expect("a close frame");
    // systemd's stop and restart both send SIGTERM: the clients are told to come back.
    assert_eq!(u16::from(frame.code), 1012, "{frame:?}");
    assert!(frame.reason.contains("reconnect_in_ms"), "{frame:?}");
    // The client answered: the drain did not wait for its handshake deadline.
    assert!(took < Duration::from_secs(2), "took {took:?}");
}

// r[verify node.gateway.stop-reason+2]
// i[verify node.gateway.cli+2]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_drain_is_a_shutdown_and_the_client_gets_1001() {
    let node = start_gateway("total = \"3s\"");
    node.until_ready().await;
    let shown = json_get(&node, "/v1/gateway").await;
    let addr = shown["replica"]["address"].as_str().unwrap().to_owned();
    let mut ws = common::ws::member(&addr, KEY, "cy", "lobby").await;
    let reader = tokio::spawn(async move { close_frame(&mut ws, Duration::from_secs(10)).await });
    let sock = socket(&node).to_string();
    let (code, out) = cli(&["drain", "--json", "--admin", &sock]);
    assert_eq!(code, 0, "{out}");
    let answer: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(answer["reason"], "shutdown", "{answer}");
    let (code, _, log) = node.wait(Duration::from_secs(15));
    assert_eq!(code, 0, "{log}");
    let frame = reader.await.unwrap().expect("a close frame");
    // The node leaves for good: no reconnect hint.
    assert_eq!(u16::from(frame.code), 1001, "{frame:?}");
    assert!(!frame.reason.contains("reconnect_in_ms"), "{frame:?}");
}

// r[verify node.gateway.module+2]
#[tokio::test]
async fn without_a_gateway_section_the_api_says_so() {
    let node = common::start("", "5s");
    node.until_ready().await;
    let err = node.get("/v1/gateway").await.unwrap_err();
    assert!(
        matches!(err, ClientError::Refused { status: 404, .. }),
        "{err}"
    );
    let status: Value = json_get(&node, "/v1/status").await;
    assert!(status.get("gateway").is_none(), "{status}");
    let err = call_json(
        &socket(&node),
        hyper::Method::POST,
        "/v1/gateway/push",
        None,
        &json!({"room": "r", "text": "t"}),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(err, ClientError::Refused { status: 404, .. }),
        "{err}"
    );
    node.signal(Signal::SIGTERM);
    let (code, _, _) = node.wait(Duration::from_secs(10));
    assert_eq!(code, 0);
}

// r[verify node.gateway.module+2]
// The issuance store keeps one bundle per hostname (key, then chain), replaced by a rename at
// each renewal: the gateway takes that one file as both its chain and its key, fails its start
// while the certificate is not issued yet, and serves the renewed one.
#[tokio::test]
async fn from_issuance_serves_the_issuance_stores_bundle_and_follows_its_renewal() {
    use holdfast::config::Config;
    use holdfast_gateway::{Gateway, MemoryRegistry, MemoryRouting, TlsReload};
    use holdfast_issuance::cert::testing::leaf;
    use holdfast_issuance::{CertStore, CertifiedPair};
    use std::sync::Arc;

    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("gateway.key");
    std::fs::write(&key, format!("{KEY}\n")).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let text = format!(
        "[node]\n[gateway]\nlisten = \"127.0.0.1:0\"\ntoken_key_file = \"{}\"\n\
         [gateway.tls]\nfrom_issuance = \"app.example\"\n\
         [issuance]\n[issuance.local]\nendpoint = {{ tcp = \"127.0.0.1:8099\" }}\n\
         [[issuance.hostname]]\nname = \"app.example\"\nsource = \"local\"\n",
        key.display()
    );
    let config = Config::parse("tls.toml", &text).unwrap();
    let section = config.gateway.unwrap();
    let data_dir = dir.path().join("data");
    let gateway_config = |k: &str| {
        section.get_ref().gateway_config(
            "n",
            TokenKey::new(k.as_bytes().to_vec()),
            data_dir.as_path(),
        )
    };
    let start = || async {
        Gateway::start(
            gateway_config(KEY),
            Arc::new(MemoryRegistry::new()),
            Arc::new(MemoryRouting::new()),
        )
        .await
    };
    // Not issued yet: the start fails (the supervisor retries it).
    assert!(start().await.is_err(), "started without a certificate");

    // The issuance module's own store writes the bundle.
    let store = CertStore::new(&data_dir.join("issuance").join("certs")).unwrap();
    let issue = || {
        let now = SystemTime::now();
        let (chain, key) = leaf(
            "app.example",
            now - Duration::from_secs(3600),
            Duration::from_secs(90 * 86400),
        );
        store
            .replace(
                "app.example",
                CertifiedPair::parse("app.example", &chain, &key).unwrap(),
                now,
            )
            .unwrap();
    };
    issue();
    let gateway = start().await.expect("the bundle is both chain and key");
    assert!(matches!(gateway.reload_tls(), TlsReload::Unchanged));
    // A renewal replaces the file by a rename: the new pair is served.
    issue();
    let reload = gateway.reload_tls();
    assert!(matches!(reload, TlsReload::Reloaded), "{reload:?}");
    assert_eq!(gateway.stats().tls_reloads, 1);
    gateway
        .drain(holdfast_lifecycle::StopReason::Restart, None)
        .await;
}

// i[verify node.gateway.config+4]
// r[verify node.gateway.metrics+4]
// r[verify node.gateway.metrics.counters]
// r[verify gateway.rooms.publish-name+2]
#[tokio::test]
async fn the_room_and_per_source_limits_of_the_config_are_enforced_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("gateway.key");
    std::fs::write(&key, format!("{KEY}\n")).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let extra = format!(
        "[gateway]\nlisten = \"127.0.0.1:0\"\ntoken_key_file = \"{}\"\n\
         unauthenticated_per_ip_limit = 1\nmax_rooms_per_connection = 1\nmax_room_name = 8\n",
        key.display()
    );
    let node = start_in(dir, &extra, "10s", None);
    node.until_ready().await;
    let shown = json_get(&node, "/v1/gateway").await;
    let addr = shown["replica"]["address"].as_str().unwrap().to_owned();

    // In its one room already: a second room is refused, the connection stays served.
    let mut ann = common::ws::member(&addr, KEY, "ann", "lobby").await;
    let join = json!({"type": "join", "room": "second"}).to_string();
    ann.send(Message::Text(join.into())).await.unwrap();
    let refused = next_text(&mut ann).await;
    assert!(refused.contains("too many rooms"), "{refused}");
    // A name of 9 bytes, one over the limit: refused.
    let mut bob = common::ws::member(&addr, KEY, "bob", "123456789").await;
    // An exactly 8-byte name is a room.
    let join = json!({"type": "join", "room": "12345678"}).to_string();
    bob.send(Message::Text(join.into())).await.unwrap();
    let joined = next_text(&mut bob).await;
    assert!(!joined.contains("error"), "{joined}");

    // One connection from 127.0.0.1 not yet authenticated holds the source's one place: a
    // second is refused before its upgrade.
    let tcp = TcpStream::connect(&addr).await.unwrap();
    let (_waiting, _) = tokio_tungstenite::client_async(format!("ws://{addr}/"), tcp)
        .await
        .unwrap();
    let tcp = TcpStream::connect(&addr).await.unwrap();
    let over = tokio_tungstenite::client_async(format!("ws://{addr}/"), tcp).await;
    assert!(
        over.is_err(),
        "a second unauthenticated connection was upgraded"
    );

    // A push to a room no join allows: refused under the same limit, said so, counted.
    let answer = call_json(
        &node.admin,
        hyper::Method::POST,
        "/v1/gateway/push",
        Some(&token::read(&node.dir.path().join("token")).unwrap()),
        &json!({"room": "123456789", "text": "nobody can be there"}),
    )
    .await
    .unwrap();
    let answer: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer["room_name_too_long"], true, "{answer}");
    assert!(answer.get("pos").is_none(), "{answer}");

    let metrics = node.get("/metrics").await.unwrap();
    for series in [
        "holdfast_gateway_pushes_refused_total{reason=\"max_room_name\"} 1",
        "holdfast_gateway_room_gaps_total{result=\"lost\"} 0",
        "holdfast_gateway_room_echo_timeouts_total 0",
        "holdfast_gateway_room_bus_dropped_total 0",
        "holdfast_gateway_joins_refused_total{reason=\"max_rooms_per_connection\"} 1",
        "holdfast_gateway_joins_refused_total{reason=\"max_room_name\"} 1",
        "holdfast_gateway_refused_total{reason=\"unauthenticated_per_ip_limit\"} 1",
        "holdfast_gateway_refused_total{reason=\"per_ip_limit\"} 0",
        "holdfast_gateway_refused_total{reason=\"unauthenticated_limit\"} 0",
        "holdfast_gateway_refused_total{reason=\"draining\"} 0",
    ] {
        assert!(metrics.contains(series), "{series} missing:\n{metrics}");
    }
    // The refusals disturbed nobody: ann is still served.
    let body = json!({"room": "lobby", "text": "still here"});
    call_json(
        &node.admin,
        hyper::Method::POST,
        "/v1/gateway/push",
        Some(&token::read(&node.dir.path().join("token")).unwrap()),
        &body,
    )
    .await
    .unwrap();
    let got: Value = serde_json::from_str(&next_text(&mut ann).await).unwrap();
    assert_eq!(got["text"], "still here");
}

// i[verify node.gateway.token]
#[test]
fn gateway_token_mints_what_the_configured_gateway_accepts_and_refuses_without_a_secret() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("gateway.key");
    std::fs::write(&key, format!("{KEY}\n")).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let cfg = dir.path().join("node.toml");
    std::fs::write(
        &cfg,
        format!(
            "[node]\n[gateway]\nlisten = \"127.0.0.1:0\"\ntoken_key_file = \"{}\"\n\
             [gateway.auth]\naudience = [\"chat\"]\nissuer = \"https://a.example\"\n",
            key.display()
        ),
    )
    .unwrap();
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_holdfast"))
            .args(args)
            .output()
            .unwrap()
    };
    let cfg_arg = cfg.to_str().unwrap();
    let out = run(&[
        "gateway",
        "token",
        "-c",
        cfg_arg,
        "--user",
        "ann",
        "--rooms",
        "lobby,chat:*",
        "--ttl",
        "10m",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let token = String::from_utf8(out.stdout).unwrap();
    assert!(!token.contains(KEY));
    let config = holdfast::config::Config::load(&cfg).unwrap();
    let verifier = config
        .gateway
        .unwrap()
        .get_ref()
        .token_key_sources()
        .load()
        .unwrap();
    let claims = verifier
        .verify_auth(token.trim(), SystemTime::now())
        .unwrap();
    assert_eq!(claims.user, "ann");
    assert_eq!(
        claims.rooms,
        Some(vec!["lobby".to_owned(), "chat:*".to_owned()])
    );
    // Ten minutes, not more.
    assert!(
        verifier
            .verify_auth(
                token.trim(),
                SystemTime::now() + Duration::from_secs(11 * 60 + 30)
            )
            .is_err()
    );

    // An empty room name or a zero lifetime: refused, not minted.
    for bad in [["--rooms", ""], ["--ttl", "0s"]] {
        let out = run(&[
            "gateway", "token", "-c", cfg_arg, "--user", "ann", bad[0], bad[1],
        ]);
        assert_eq!(out.status.code(), Some(1), "{bad:?}");
        assert!(out.stdout.is_empty(), "{bad:?}");
    }

    // Only a public key configured: no secret to sign with, said so.
    let pem = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../gateway/tests/fixtures/keys/ed.pub");
    let public_only = dir.path().join("public.toml");
    std::fs::write(
        &public_only,
        format!(
            "[node]\n[gateway]\nlisten = \"127.0.0.1:0\"\n[gateway.auth]\npublic_keys = [\"{}\"]\n",
            pem.display()
        ),
    )
    .unwrap();
    let out = run(&[
        "gateway",
        "token",
        "-c",
        public_only.to_str().unwrap(),
        "--user",
        "ann",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no HS256 secret"), "{err}");
    // No [gateway] section.
    let bare = dir.path().join("bare.toml");
    std::fs::write(&bare, "[node]\n").unwrap();
    let out = run(&[
        "gateway",
        "token",
        "-c",
        bare.to_str().unwrap(),
        "--user",
        "ann",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no [gateway] section"));
}

/// Pushes `text` to `room` through the admin API; the position it got.
async fn push_room(node: &Node, room: &str, text: &str) -> String {
    let answer = call_json(
        &node.admin,
        hyper::Method::POST,
        "/v1/gateway/push",
        Some(&token::read(&node.dir.path().join("token")).unwrap()),
        &json!({"room": room, "text": text}),
    )
    .await
    .unwrap();
    let answer: Value = serde_json::from_str(&answer).unwrap();
    answer["pos"].as_str().expect("a position").to_owned()
}

/// Connects, authenticates as `user` and joins `room` with `since`.
async fn rejoin(addr: &str, user: &str, room: &str, since: &str) -> common::ws::Client {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut ws, _) = tokio_tungstenite::client_async(format!("ws://{addr}/"), tcp)
        .await
        .unwrap();
    let token = holdfast_gateway::Signer::new(KEY.as_bytes())
        .token(user, SystemTime::now() + Duration::from_secs(3600))
        .unwrap();
    let auth = json!({"type": "auth", "token": token}).to_string();
    ws.send(Message::Text(auth.into())).await.unwrap();
    assert!(next_text(&mut ws).await.contains("authenticated"));
    let join = json!({"type": "join", "room": room, "since": since}).to_string();
    ws.send(Message::Text(join.into())).await.unwrap();
    ws
}

// r[verify gateway.history.recover]
// r[verify gateway.history.bounds+2]
// i[verify node.gateway.config+4]
#[tokio::test]
async fn messages_missed_while_away_arrive_on_rejoin_in_order_and_once_or_as_a_gap() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("gateway.key");
    std::fs::write(&key, format!("{KEY}\n")).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let extra = format!(
        "[gateway]\nlisten = \"127.0.0.1:0\"\ntoken_key_file = \"{}\"\nhistory_size = 3\n",
        key.display()
    );
    let node = start_in(dir, &extra, "10s", None);
    node.until_ready().await;
    let shown = json_get(&node, "/v1/gateway").await;
    let addr = shown["replica"]["address"].as_str().unwrap().to_owned();

    let mut ann = common::ws::member(&addr, KEY, "ann", "lobby").await;
    let seen = push_room(&node, "lobby", "m0").await;
    let got: Value = serde_json::from_str(&next_text(&mut ann).await).unwrap();
    assert_eq!(got["pos"], seen.as_str());
    drop(ann);

    let mut missed = Vec::new();
    for i in 1..=3 {
        missed.push(push_room(&node, "lobby", &format!("m{i}")).await);
    }
    let mut ann = rejoin(&addr, "ann", "lobby", &seen).await;
    for (i, pos) in missed.iter().enumerate() {
        let got: Value = serde_json::from_str(&next_text(&mut ann).await).unwrap();
        assert_eq!(
            (&got["text"], &got["pos"]),
            (&json!(format!("m{}", i + 1)), &json!(pos))
        );
    }
    let joined: Value = serde_json::from_str(&next_text(&mut ann).await).unwrap();
    assert_eq!(
        joined,
        json!({"type": "joined", "room": "lobby", "recovered": 3})
    );
    let live = push_room(&node, "lobby", "live").await;
    let got: Value = serde_json::from_str(&next_text(&mut ann).await).unwrap();
    assert_eq!((&got["text"], &got["pos"]), (&json!("live"), &json!(live)));
    drop(ann);

    // Away for longer than the room's 3 messages reach back: told so, to reload.
    for i in 0..4 {
        push_room(&node, "lobby", &format!("n{i}")).await;
    }
    let mut ann = rejoin(&addr, "ann", "lobby", &live).await;
    let joined: Value = serde_json::from_str(&next_text(&mut ann).await).unwrap();
    assert_eq!(
        joined,
        json!({"type": "joined", "room": "lobby", "gap": true})
    );
}

// i[verify node.gateway.publish]
#[tokio::test]
async fn backends_publish_batches_with_their_own_key_which_cannot_drain() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("gateway.key");
    std::fs::write(&key, format!("{KEY}\n")).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let publish = dir.path().join("publish.token");
    std::fs::write(&publish, "publish-token-0123456789\n").unwrap();
    std::fs::set_permissions(&publish, std::fs::Permissions::from_mode(0o600)).unwrap();
    let extra = format!(
        "[gateway]\nlisten = \"127.0.0.1:0\"\ntoken_key_file = \"{}\"\npublish_token_file = \"{}\"\n",
        key.display(),
        publish.display()
    );
    let node = start_in(dir, &extra, "10s", None);
    node.until_ready().await;
    let shown = json_get(&node, "/v1/gateway").await;
    let addr = shown["replica"]["address"].as_str().unwrap().to_owned();
    let mut ann = common::ws::member(&addr, KEY, "ann", "lobby").await;
    let publish_token = token::read(&publish).unwrap();
    let admin_token = token::read(&node.dir.path().join("token")).unwrap();
    let batch = json!({"messages": [
        {"room": "lobby", "text": "one"},
        {"user": "ann", "text": "two"},
        {"room": "empty", "text": "three"},
    ]});

    // The admin token does not publish; no token, or a wrong one, neither.
    for t in [Some(&admin_token), None] {
        let refused = call_json(&node.admin, hyper::Method::POST, "/v1/publish", t, &batch)
            .await
            .unwrap_err();
        assert!(
            matches!(refused, ClientError::Refused { status: 401, .. }),
            "{refused}"
        );
    }
    // The publish token does not drain.
    let refused = call_json(
        &node.admin,
        hyper::Method::POST,
        "/v1/drain",
        Some(&publish_token),
        &json!({}),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(refused, ClientError::Refused { status: 401, .. }),
        "{refused}"
    );
    let bad = call_json(
        &node.admin,
        hyper::Method::POST,
        "/v1/publish",
        Some(&publish_token),
        &json!({"messages": [{"room": "lobby", "text": "x"}, {"text": "no one"}]}),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(bad, ClientError::Refused { status: 400, .. }),
        "{bad}"
    );
    // A text over gateway.max_message_size (64 KiB by default): 400, nothing published.
    let big = "x".repeat(64 * 1024 + 1);
    let too_big = call_json(
        &node.admin,
        hyper::Method::POST,
        "/v1/publish",
        Some(&publish_token),
        &json!({"messages": [{"room": "lobby", "text": "x"}, {"room": "lobby", "text": big}]}),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&too_big, ClientError::Refused { status: 400, .. }),
        "{too_big}"
    );
    assert!(
        too_big.to_string().contains("messages[1].text"),
        "{too_big}"
    );

    let answer = call_json(
        &node.admin,
        hyper::Method::POST,
        "/v1/publish",
        Some(&publish_token),
        &batch,
    )
    .await
    .unwrap();
    let answer: Value = serde_json::from_str(&answer).unwrap();
    let results = answer["results"].as_array().unwrap();
    assert_eq!(results.len(), 3, "{answer}");
    assert_eq!(
        (
            &results[0]["room"],
            &results[0]["queued"],
            &results[0]["forwarded"]
        ),
        (&json!("lobby"), &json!(1), &json!("published")),
        "{answer}"
    );
    assert!(results[0]["pos"].is_string(), "{answer}");
    assert_eq!(
        (&results[1]["user"], &results[1]["queued"]),
        (&json!("ann"), &json!(1)),
        "{answer}"
    );
    assert_eq!(results[2]["queued"], 0, "{answer}");
    // Delivered in the batch's order.
    let first: Value = serde_json::from_str(&next_text(&mut ann).await).unwrap();
    assert_eq!(
        (&first["text"], &first["pos"]),
        (&json!("one"), &results[0]["pos"])
    );
    assert_eq!(next_text(&mut ann).await, "two");
}

// i[verify node.gateway.publish]
/// Without `gateway.publish_token_file`, publishing over TCP is refused with 403 whatever the
/// token, the admin token included.
#[tokio::test]
async fn without_a_publish_key_publishing_over_tcp_is_forbidden() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("gateway.key");
    std::fs::write(&key, format!("{KEY}\n")).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let extra = format!(
        "[gateway]\nlisten = \"127.0.0.1:0\"\ntoken_key_file = \"{}\"\n",
        key.display()
    );
    let node = start_in(dir, &extra, "10s", None);
    node.until_ready().await;
    let admin_token = token::read(&node.dir.path().join("token")).unwrap();
    let batch = json!({"messages": [{"room": "lobby", "text": "one"}]});
    for t in [Some(&admin_token), None] {
        let refused = call_json(&node.admin, hyper::Method::POST, "/v1/publish", t, &batch)
            .await
            .unwrap_err();
        assert!(
            matches!(refused, ClientError::Refused { status: 403, .. }),
            "{refused}"
        );
    }
}
