//! Connections against real WebSocket clients on loopback: registration from accept, bad input,
//! authentication, slow consumers, and route release by connection.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, SystemTime};

use common::*;
use futures_util::SinkExt;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;

async fn close_code_of(ws: &mut Client) -> (u16, String) {
    let end = read_to_end(ws, Duration::from_secs(5)).await;
    let close = end.close.expect("a close frame");
    (u16::from(close.code), close.reason.to_string())
}

// r[verify gateway.registry.track+2]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_are_registered_from_accept_authenticated_or_not() {
    let node = start(config("a")).await;
    // A TCP connection that has not even sent its upgrade request is already tracked.
    let _raw = TcpStream::connect(node.gateway.local_addr()).await.unwrap();
    eventually("raw accept registered", || node.gateway.connections() == 1).await;
    let _unauth = connect(&node.gateway).await;
    eventually("upgraded, unauthenticated", || {
        node.gateway.connections() == 2
    })
    .await;
    assert_eq!(node.gateway.authenticated(), 0);
    let ann = member(&node.gateway, "ann", "lobby").await;
    assert_eq!(node.gateway.connections(), 3);
    assert_eq!(node.gateway.authenticated(), 1);
    drop(ann);
    eventually("teardown removes it", || node.gateway.connections() == 2).await;
}

// r[verify gateway.auth.token+2]
// r[verify gateway.auth.refusal-reasons]
// r[verify gateway.limits]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_closes_only_the_sender_with_the_right_code() {
    let mut c = config("a");
    c.max_message_size = 1024;
    c.max_frame_size = 1024;
    let node = start(c).await;
    let mut bystander = member(&node.gateway, "zed", "lobby").await;

    // Past the 30 s leeway.
    let expired = token_with(&holdfast_gateway::MintClaims {
        sub: "ann".into(),
        exp: unix_now() - 3600,
        ..Default::default()
    });
    let forged = holdfast_gateway::Signer::new(b"wrong secret 0123456789")
        .token("ann", SystemTime::now() + Duration::from_secs(60))
        .unwrap();
    let cases: Vec<(Message, u16, &str)> = vec![
        (
            Message::Text(
                serde_json::json!({"type":"auth","token":expired})
                    .to_string()
                    .into(),
            ),
            1008,
            "token expired",
        ),
        (
            Message::Text(
                serde_json::json!({"type":"auth","token":forged})
                    .to_string()
                    .into(),
            ),
            1008,
            "invalid token signature",
        ),
        (
            Message::Text(
                serde_json::json!({"type":"join","room":"lobby"})
                    .to_string()
                    .into(),
            ),
            1008,
            "authenticate first",
        ),
        (Message::Text("not json".into()), 1008, "bad message"),
        (Message::Binary(vec![1, 2, 3].into()), 1003, ""),
        (Message::Text("x".repeat(4096).into()), 1009, ""),
    ];
    for (msg, code, reason) in cases {
        let mut ws = connect(&node.gateway).await;
        ws.send(msg).await.unwrap();
        let (got, why) = close_code_of(&mut ws).await;
        assert_eq!(got, code, "{why}");
        assert!(why.contains(reason), "{why} should contain {reason}");
    }
    // A malformed frame: reserved bits set, written straight onto an upgraded socket.
    let mut ws = connect(&node.gateway).await;
    ws.get_mut()
        .write_all(&[0xF1, 0x80, 0, 0, 0, 0])
        .await
        .unwrap();
    let (got, _) = close_code_of(&mut ws).await;
    assert_eq!(got, 1002);
    // An authenticated client sending an unknown message.
    let mut ann = member(&node.gateway, "ann", "lobby").await;
    send_json(&mut ann, serde_json::json!({"type":"shout"})).await;
    assert_eq!(close_code_of(&mut ann).await.0, 1008);

    // Nothing else was disturbed.
    assert_eq!(
        node.gateway.push_room("lobby", "still here").await.queued,
        1
    );
    assert_eq!(next_text(&mut bystander).await, "still here");
    assert_eq!(node.gateway.authenticated(), 1);
    assert_eq!(node.gateway.stats().auth_failures, 2);
    // Each refusal counted under its reason.
    let counted: Vec<_> = node
        .gateway
        .stats()
        .token_refusals()
        .filter(|(_, n)| *n > 0)
        .collect();
    assert_eq!(counted, vec![("signature", 1), ("expired", 1)]);
}

// r[verify gateway.auth.token+2]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_unauthenticated_connections_is_closed_at_the_auth_timeout() {
    let mut c = config("a");
    c.auth_timeout = Duration::from_millis(300);
    // All fifty come from 127.0.0.1: this is about the timeout, not the per-source cap.
    c.unauthenticated_per_ip_limit = 0;
    let node = start(c).await;
    let mut member_ws = member(&node.gateway, "ann", "lobby").await;
    let mut flood = Vec::new();
    for _ in 0..50 {
        flood.push(connect(&node.gateway).await);
    }
    for mut ws in flood {
        let (code, why) = close_code_of(&mut ws).await;
        assert_eq!((code, why.as_str()), (1008, "authentication timeout"));
    }
    eventually("flood torn down", || node.gateway.connections() == 1).await;
    node.gateway.push_user("ann", "hi").await;
    assert_eq!(next_text(&mut member_ws).await, "hi");
}

// r[verify gateway.send-queue.slow-consumer]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_consumer_is_disconnected_and_the_others_get_every_message() {
    let mut c = config("a");
    c.send_queue = 4;
    let node = start(c).await;
    let mut fast = member(&node.gateway, "fast", "lobby").await;
    let _slow = member(&node.gateway, "slow", "lobby").await; // never reads from here on
    let big = "y".repeat(32 * 1024);
    let mut dropped_at = None;
    for i in 0..4000 {
        let text = format!("{i}:{big}");
        let d = node.gateway.push_room("lobby", &text).await;
        assert!(d.queued >= 1, "the fast client always has room");
        // Lockstep with the fast client, so only the slow one falls behind.
        assert_eq!(next_text(&mut fast).await, text);
        if d.slow_consumers == 1 {
            dropped_at = Some(i);
            break;
        }
    }
    let i = dropped_at.expect("the slow consumer was disconnected");
    assert!(i > 4, "a few messages fit in its queue and socket first");
    eventually("slow consumer gone", || node.gateway.connections() == 1).await;
    assert_eq!(node.gateway.stats().slow_consumer_drops, 1);
    // The fast client is still there and still served.
    assert_eq!(node.gateway.push_room("lobby", "after").await.queued, 1);
    assert_eq!(next_text(&mut fast).await, "after");
}

// r[verify gateway.registry.by-connection]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_connection_closing_keeps_the_users_route_and_newer_connection() {
    let routing = CountingRouting::default();
    let gateway = start_backends(
        config("a"),
        std::sync::Arc::new(holdfast_gateway::MemoryRegistry::new()),
        std::sync::Arc::new(routing.clone()),
    )
    .await;
    let deletes = || routing.deletes.load(std::sync::atomic::Ordering::SeqCst);
    let old = member(&gateway, "ann", "lobby").await;
    let mut new = member(&gateway, "ann", "lobby").await;
    drop(old);
    eventually("old torn down", || gateway.connections() == 1).await;
    // Give a wrongly spawned route release time to run before checking it did not.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(deletes(), 0, "the older connection never touches the route");
    assert_eq!(routing.inner.get("ann"), ["a"]);
    assert_eq!(gateway.push_user("ann", "to new").await.queued, 1);
    assert_eq!(next_text(&mut new).await, "to new");
    drop(new);
    eventually("last connection releases the route", || {
        routing.inner.get("ann").is_empty()
    })
    .await;
    assert_eq!(deletes(), 1);
}

// r[verify gateway.keepalive]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quiet_clients_that_answer_pings_stay_and_silent_ones_are_closed() {
    let keepalive = |close_timeout_ms| {
        let mut c = config("a");
        c.ping_interval = Duration::from_millis(100);
        c.idle_timeout = Duration::from_millis(300);
        c.close_timeout = Duration::from_millis(close_timeout_ms);
        c
    };
    // A client that never reads answers neither pings nor the close: it is dropped.
    let node = start(keepalive(200)).await;
    let mut answering = member(&node.gateway, "ann", "lobby").await;
    let _silent = member(&node.gateway, "bob", "lobby").await;
    // Reading is what makes tungstenite answer pings; the answering client sends nothing else.
    let reader = tokio::spawn(async move {
        let end = read_to_end(&mut answering, Duration::from_millis(1200)).await;
        (end, answering)
    });
    eventually("the silent client is dropped", || {
        node.gateway.connections() == 1
    })
    .await;
    let (end, _answering) = reader.await.unwrap();
    assert!(end.close.is_none(), "the answering client was never closed");
    assert_eq!(
        node.gateway.connections(),
        1,
        "still connected after 1.2 s of quiet"
    );
    assert_eq!(node.gateway.push_user("bob", "gone").await.queued, 0);
    assert_eq!(node.gateway.stats().idle_closed, 1);

    // What the silent client is sent, read once the server has closed it.
    let node = start(keepalive(10_000)).await;
    let mut silent = member(&node.gateway, "cat", "lobby").await;
    eventually("idle close sent", || node.gateway.stats().idle_closed == 1).await;
    let (code, why) = close_code_of(&mut silent).await;
    assert_eq!((code, why.as_str()), (1000, "idle timeout"));
}

// r[verify gateway.keepalive]
// On tokio's paused clock: the first ping comes one ping interval after the connection, not at
// once, and the next one interval later.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn pings_come_at_the_ping_interval_from_the_connection_on() {
    use futures_util::StreamExt;
    let mut c = config("a");
    let interval = Duration::from_secs(10);
    c.ping_interval = interval;
    // The paused clock jumps to the next timer whenever the runtime idles: every other timeout
    // lies far beyond what this test waits for.
    c.idle_timeout = Duration::from_secs(24 * 3600);
    c.auth_timeout = Duration::from_secs(24 * 3600);
    c.handshake_timeout = Duration::from_secs(24 * 3600);
    let node = start(c).await;
    let connected = tokio::time::Instant::now();
    let mut ws = connect(&node.gateway).await;
    let mut pings = Vec::new();
    while pings.len() < 2 {
        match ws.next().await.expect("open").expect("no error") {
            Message::Ping(_) => pings.push(connected.elapsed()),
            other => panic!("expected a ping, got {other:?}"),
        }
    }
    assert!(
        pings[0] >= interval && pings[0] < interval + Duration::from_secs(1),
        "first ping at {pings:?}"
    );
    assert_eq!(pings[1] - pings[0], interval, "{pings:?}");
}

/// A subscriber that, on each event, asks another thread to count the gateway's connections
/// (which takes every registry shard lock) and records whether that count was kept waiting:
/// an event logged while the pushing thread holds a shard lock.
struct LockProbe {
    gateway: holdfast_gateway::Gateway,
    events: std::sync::atomic::AtomicUsize,
    blocked: std::sync::atomic::AtomicUsize,
}

impl tracing::Subscriber for LockProbe {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, _: &tracing::Event<'_>) {
        use std::sync::atomic::Ordering::SeqCst;
        self.events.fetch_add(1, SeqCst);
        let gateway = self.gateway.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        // Another thread, so a held lock delays it rather than deadlocking this one.
        std::thread::spawn(move || {
            let _ = tx.send(gateway.connections());
        });
        if rx.recv_timeout(Duration::from_millis(500)).is_err() {
            self.blocked.fetch_add(1, SeqCst);
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

// r[verify gateway.send-queue.slow-consumer]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_consumer_is_reported_and_closed_with_no_registry_lock_held() {
    use std::sync::Arc;
    use std::sync::atomic::Ordering::SeqCst;
    let mut c = config("a");
    c.send_queue = 1;
    let node = start(c).await;
    let _slow = member(&node.gateway, "slow", "lobby").await; // never reads
    let probe = Arc::new(LockProbe {
        gateway: node.gateway.clone(),
        events: Default::default(),
        blocked: Default::default(),
    });
    let gateway = node.gateway.clone();
    let on_thread = probe.clone();
    // The pushes run on a thread of their own, whose events alone go to the probe.
    let slow = std::thread::spawn(move || {
        let _guard = tracing::subscriber::set_default(ArcSubscriber(on_thread));
        let big = "y".repeat(64 * 1024);
        (0..4000)
            .map(|_| gateway.push_room_local("lobby", &big).slow_consumers)
            .find(|s| *s > 0)
    })
    .join()
    .unwrap();
    assert_eq!(slow, Some(1), "the silent member became a slow consumer");
    assert!(probe.events.load(SeqCst) >= 1, "the disconnect was logged");
    assert_eq!(
        probe.blocked.load(SeqCst),
        0,
        "the slow consumer was logged while a registry lock was held"
    );
    eventually("slow consumer gone", || node.gateway.connections() == 0).await;
}

/// Lends an `Arc`'d subscriber to `set_default`, which wants it by value.
struct ArcSubscriber(std::sync::Arc<LockProbe>);

impl tracing::Subscriber for ArcSubscriber {
    fn enabled(&self, m: &tracing::Metadata<'_>) -> bool {
        self.0.enabled(m)
    }
    fn new_span(&self, a: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        self.0.new_span(a)
    }
    fn record(&self, s: &tracing::span::Id, r: &tracing::span::Record<'_>) {
        self.0.record(s, r)
    }
    fn record_follows_from(&self, s: &tracing::span::Id, f: &tracing::span::Id) {
        self.0.record_follows_from(s, f)
    }
    fn event(&self, e: &tracing::Event<'_>) {
        self.0.event(e)
    }
    fn enter(&self, s: &tracing::span::Id) {
        self.0.enter(s)
    }
    fn exit(&self, s: &tracing::span::Id) {
        self.0.exit(s)
    }
}

// r[verify gateway.auth.expiry-range+2]
// r[verify gateway.auth.refusal-reasons]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_token_with_an_absurd_expiry_is_refused_and_the_gateway_serves_on() {
    let node = start(config("a")).await;
    let mut bystander = member(&node.gateway, "zed", "lobby").await;
    for secs in [u64::MAX, u64::MAX - 1, 1 << 63] {
        let mut ws = connect(&node.gateway).await;
        let absurd = token_with(&holdfast_gateway::MintClaims {
            sub: "ann".into(),
            exp: secs,
            ..Default::default()
        });
        send_json(&mut ws, serde_json::json!({"type":"auth","token":absurd})).await;
        // A close with the reason, not a connection task that died on it.
        let (code, why) = close_code_of(&mut ws).await;
        assert_eq!((code, why.as_str()), (1008, "token expiry out of range"));
    }
    assert_eq!(node.gateway.stats().auth_failures, 3);
    assert!(
        node.gateway
            .stats()
            .token_refusals()
            .any(|(reason, n)| reason == "expiry_out_of_range" && n == 3)
    );
    eventually("refused ones torn down", || node.gateway.connections() == 1).await;
    assert_eq!(node.gateway.push_user_local("zed", "on").queued, 1);
    assert_eq!(next_text(&mut bystander).await, "on");
}

/// Sends a join and returns the answer.
async fn join_answer(ws: &mut Client, room: &str) -> serde_json::Value {
    send_json(ws, serde_json::json!({"type":"join","room":room})).await;
    serde_json::from_str(&next_text(ws).await).unwrap()
}

// r[verify gateway.rooms.limits]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joins_past_the_room_limits_are_refused_and_the_connection_stays() {
    let defaults = config("d");
    assert_eq!(
        (defaults.max_rooms_per_connection, defaults.max_room_name),
        (64, 128)
    );
    let mut c = config("a");
    c.max_rooms_per_connection = 3;
    c.max_room_name = 8;
    let node = start(c).await;
    let mut ann = member(&node.gateway, "ann", "r1").await;
    let mut bystander = member(&node.gateway, "zed", "r1").await;
    for room in ["r2", "r3"] {
        assert_eq!(join_answer(&mut ann, room).await["type"], "joined");
    }
    // A fourth room is refused with an error message, not a close.
    let refused = join_answer(&mut ann, "r4").await;
    assert_eq!(
        refused,
        serde_json::json!({"type":"error","op":"join","room":"r4","reason":"too many rooms"})
    );
    assert!(node.gateway.push_room_local("r4", "x").queued == 0);
    // Joining a room it is already in is no new room: still fine.
    assert_eq!(join_answer(&mut ann, "r2").await["type"], "joined");
    // A name over eight bytes (here four two-byte characters and one more) is refused, and not
    // echoed back; eight bytes are fine once a place is free.
    let refused = join_answer(&mut ann, "ééééx").await;
    assert_eq!(
        refused,
        serde_json::json!({"type":"error","op":"join","reason":"room name too long"})
    );
    send_json(&mut ann, serde_json::json!({"type":"leave","room":"r3"})).await;
    let left: serde_json::Value = serde_json::from_str(&next_text(&mut ann).await).unwrap();
    assert_eq!(left, serde_json::json!({"type":"left","room":"r3"}));
    assert_eq!(join_answer(&mut ann, "éééé").await["type"], "joined");
    let stats = node.gateway.stats();
    assert_eq!(
        (stats.joins_refused_rooms, stats.joins_refused_name),
        (1, 1)
    );
    // The connection is open and served, and so is everyone else.
    assert_eq!(node.gateway.push_room_local("r1", "still").queued, 2);
    assert_eq!(next_text(&mut ann).await, "still");
    assert_eq!(next_text(&mut bystander).await, "still");
    assert_eq!(node.gateway.push_room_local("éééé", "new").queued, 1);
    assert_eq!(next_text(&mut ann).await, "new");
    assert_eq!(node.gateway.connections(), 2);
}
