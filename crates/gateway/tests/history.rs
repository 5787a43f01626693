//! Room history and recovery on one replica: a client that comes back with `since` gets what
//! it missed, in order and once, or is told the history no longer reaches back.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use holdfast_gateway::{Gateway, Pos};
use serde_json::{Value, json};
use std::sync::Arc;

/// Reads the next message as JSON.
async fn next_json(ws: &mut Client) -> Value {
    serde_json::from_str(&next_raw(ws).await).unwrap()
}

/// A room message's text and position.
fn message(v: &Value) -> (String, Pos) {
    (
        v["text"].as_str().expect("a pushed text").to_owned(),
        v["pos"].as_str().expect("a position").parse().unwrap(),
    )
}

/// Connects and authenticates as `user`.
async fn authed(gateway: &Gateway, user: &str) -> Client {
    let mut ws = connect(gateway).await;
    send_json(&mut ws, json!({"type": "auth", "token": token(user)})).await;
    assert_eq!(next_json(&mut ws).await["type"], "authenticated");
    ws
}

fn any_room_config(replica: &str, size: usize) -> holdfast_gateway::GatewayConfig {
    let mut c = config(replica);
    c.history.size = size;
    c
}

// r[verify gateway.history.position]
// r[verify gateway.history.recover]
#[tokio::test]
async fn a_client_that_rejoins_with_since_gets_what_it_missed_in_order_and_once() {
    let node = start(any_room_config("a", 100)).await;
    let g = &node.gateway;
    let mut ann = authed(g, "ann").await;
    send_json(&mut ann, json!({"type": "join", "room": "lobby"})).await;
    assert_eq!(
        next_json(&mut ann).await,
        json!({"type": "joined", "room": "lobby"})
    );
    let d = g.push_room("lobby", "m0").await;
    let got = next_json(&mut ann).await;
    assert_eq!(got["room"], "lobby");
    let (text, seen) = message(&got);
    assert_eq!((text.as_str(), Some(seen)), ("m0", d.pos));
    ann.close(None).await.unwrap();
    drop(ann);

    let mut missed = Vec::new();
    for i in 1..=3 {
        missed.push(g.push_room("lobby", &format!("m{i}")).await.pos.unwrap());
    }
    let mut ann = authed(g, "ann").await;
    send_json(
        &mut ann,
        json!({"type": "join", "room": "lobby", "since": seen.to_string()}),
    )
    .await;
    for (i, pos) in missed.iter().enumerate() {
        assert_eq!(
            message(&next_json(&mut ann).await),
            (format!("m{}", i + 1), *pos)
        );
    }
    assert_eq!(
        next_json(&mut ann).await,
        json!({"type": "joined", "room": "lobby", "recovered": 3})
    );
    // Live again, and nothing twice.
    let live = g.push_room("lobby", r#"{"seq":4}"#).await.pos.unwrap();
    assert_eq!(
        next_raw(&mut ann).await,
        format!(r#"{{"room":"lobby","pos":"{live}","seq":4}}"#)
    );
    g.push_room("lobby", "m5").await;
    assert_eq!(message(&next_json(&mut ann).await).0, "m5");
}

// r[verify gateway.history.recover]
// r[verify gateway.history.bounds+2]
#[tokio::test]
async fn a_client_away_longer_than_the_history_is_told_of_the_gap() {
    let node = start(any_room_config("a", 2)).await;
    let g = &node.gateway;
    let seen = g.push_room("lobby", "seen").await.pos.unwrap();
    for i in 0..3 {
        g.push_room("lobby", &format!("m{i}")).await;
    }
    let mut ann = authed(g, "ann").await;
    send_json(
        &mut ann,
        json!({"type": "join", "room": "lobby", "since": seen.to_string()}),
    )
    .await;
    assert_eq!(
        next_json(&mut ann).await,
        json!({"type": "joined", "room": "lobby", "gap": true})
    );
    // Joined all the same: live messages arrive.
    g.push_room("lobby", "live").await;
    assert_eq!(message(&next_json(&mut ann).await).0, "live");
}

// r[verify gateway.history.recover]
#[tokio::test]
async fn a_bad_or_future_position_is_an_error_to_that_client_only() {
    let node = start(any_room_config("a", 10)).await;
    let g = &node.gateway;
    let mut bob = authed(g, "bob").await;
    send_json(&mut bob, json!({"type": "join", "room": "lobby"})).await;
    next_json(&mut bob).await;
    let last = g.push_room("lobby", "x").await.pos.unwrap();
    next_json(&mut bob).await;

    let mut ann = authed(g, "ann").await;
    for (since, reason) in [
        ("garbage".to_owned(), "bad position"),
        ("1-2-3".to_owned(), "bad position"),
        (
            Pos {
                hi: last.hi,
                lo: last.lo + 1,
            }
            .to_string(),
            "position from the future",
        ),
    ] {
        send_json(
            &mut ann,
            json!({"type": "join", "room": "lobby", "since": since}),
        )
        .await;
        assert_eq!(
            next_json(&mut ann).await,
            json!({"type": "error", "op": "join", "reason": reason, "room": "lobby"})
        );
    }
    // Not joined by the refusals; the connection and the bystander are fine.
    assert_eq!(g.push_room("lobby", "y").await.queued, 1);
    assert_eq!(message(&next_json(&mut bob).await).0, "y");
    send_json(
        &mut ann,
        json!({"type": "join", "room": "lobby", "since": last.to_string()}),
    )
    .await;
    assert_eq!(message(&next_json(&mut ann).await).0, "y");
    assert_eq!(
        next_json(&mut ann).await,
        json!({"type": "joined", "room": "lobby", "recovered": 1})
    );
}

// r[verify gateway.history.recover]
#[tokio::test]
async fn a_join_with_since_is_subject_to_the_room_permissions() {
    let node = start(config("a")).await;
    let g = &node.gateway;
    let seen = g.push_room("private", "x").await.pos.unwrap();
    let mut ann = connect(g).await;
    let only_lobby = token_with(&holdfast_gateway::MintClaims {
        sub: "ann".into(),
        exp: unix_now() + 3600,
        rooms: Some(vec!["lobby".into()]),
        ..Default::default()
    });
    send_json(&mut ann, json!({"type": "auth", "token": only_lobby})).await;
    assert_eq!(next_json(&mut ann).await["type"], "authenticated");
    send_json(
        &mut ann,
        json!({"type": "join", "room": "private", "since": seen.to_string()}),
    )
    .await;
    assert_eq!(
        next_json(&mut ann).await,
        json!({"type": "error", "op": "join", "reason": "not permitted", "room": "private"})
    );
}

/// A history whose read waits until the test lets it go.
struct Gate {
    inner: Arc<holdfast_gateway::MemoryHistory>,
    reading: Arc<tokio::sync::Notify>,
    go: Arc<tokio::sync::Notify>,
}

impl holdfast_gateway::History for Gate {
    fn append(
        &self,
        room: &str,
        text: &str,
        c: &holdfast_gateway::HistoryConfig,
    ) -> holdfast_lifecycle::BoxFuture<Result<Pos, holdfast_gateway::ClusterError>> {
        self.inner.append(room, text, c)
    }
    fn since(
        &self,
        room: &str,
        since: Pos,
        c: &holdfast_gateway::HistoryConfig,
    ) -> holdfast_lifecycle::BoxFuture<
        Result<holdfast_gateway::Recovery, holdfast_gateway::ClusterError>,
    > {
        let (inner, reading, go) = (self.inner.clone(), self.reading.clone(), self.go.clone());
        let (room, c) = (room.to_owned(), *c);
        Box::pin(async move {
            reading.notify_one();
            go.notified().await;
            inner.since(&room, since, &c).await
        })
    }
}

// r[verify gateway.history.recover]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rv_a_message_pushed_between_join_and_history_read_arrives_once() {
    let gate = Arc::new(Gate {
        inner: Arc::new(holdfast_gateway::MemoryHistory::new()),
        reading: Arc::new(tokio::sync::Notify::new()),
        go: Arc::new(tokio::sync::Notify::new()),
    });
    let cluster = holdfast_gateway::Cluster {
        registry: Arc::new(holdfast_gateway::MemoryRegistry::new()),
        routing: Arc::new(holdfast_gateway::MemoryRouting::new()),
        bus: Arc::new(holdfast_gateway::MemoryBus::new()),
        seed: None,
        history: Some(gate.clone()),
    };
    let g = Gateway::start_cluster(any_room_config("a", 100), cluster)
        .await
        .unwrap();
    let seen = g.push_room("lobby", "m0").await.pos.unwrap();
    g.push_room("lobby", "m1").await;
    let mut ann = authed(&g, "ann").await;
    send_json(
        &mut ann,
        json!({"type": "join", "room": "lobby", "since": seen.to_string()}),
    )
    .await;
    gate.reading.notified().await;
    g.push_room("lobby", "race").await; // queued live: ann is already a member
    gate.go.notify_one();
    let mut texts = Vec::new();
    loop {
        let v = next_json(&mut ann).await;
        if v["type"] == "joined" {
            break;
        }
        texts.push(v["text"].as_str().unwrap().to_owned());
    }
    g.push_room("lobby", "after").await;
    loop {
        let v = next_json(&mut ann).await;
        let t = v["text"].as_str().unwrap().to_owned();
        let done = t == "after";
        texts.push(t);
        if done {
            break;
        }
    }
    assert_eq!(texts, ["m1", "race", "after"]);
}

// r[verify gateway.history.recover]
#[tokio::test]
async fn rv_a_refused_since_join_on_a_room_already_joined_keeps_the_membership() {
    let node = start(any_room_config("a", 10)).await;
    let g = &node.gateway;
    let mut ann = authed(g, "ann").await;
    send_json(&mut ann, json!({"type": "join", "room": "lobby"})).await;
    next_json(&mut ann).await;
    let last = g.push_room("lobby", "x").await.pos.unwrap();
    next_json(&mut ann).await;
    for since in [
        Pos {
            hi: last.hi,
            lo: last.lo + 5,
        },
        last,
    ] {
        send_json(
            &mut ann,
            json!({"type": "join", "room": "lobby", "since": since.to_string()}),
        )
        .await;
        let v = next_json(&mut ann).await;
        assert_eq!(v["type"], "error", "{v}");
        assert_eq!(v["reason"], "already joined", "{v}");
    }
    assert_eq!(
        g.push_room("lobby", "y").await.queued,
        1,
        "ann was a member before the refused join"
    );
    assert_eq!(message(&next_json(&mut ann).await).0, "y");
}

// r[verify gateway.history.recover]
#[tokio::test]
async fn rv_a_numeric_since_is_a_bad_position_and_the_connection_stays() {
    let node = start(any_room_config("a", 10)).await;
    let g = &node.gateway;
    let mut ann = authed(g, "ann").await;
    send_json(
        &mut ann,
        json!({"type": "join", "room": "lobby", "since": 5}),
    )
    .await;
    let v = next_json(&mut ann).await;
    assert_eq!(v["type"], "error", "{v}");
    assert_eq!(v["reason"], "bad position", "{v}");
    send_json(&mut ann, json!({"type": "join", "room": "lobby"})).await;
    assert_eq!(
        next_json(&mut ann).await,
        json!({"type": "joined", "room": "lobby"})
    );
}

// r[verify gateway.history.order+3]
/// On one replica, concurrent pushes to one room reach a member in position order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_pushes_to_a_room_reach_a_member_in_position_order() {
    let mut c = any_room_config("a", 1000);
    c.send_queue = 1000;
    let node = start(c).await;
    let g = node.gateway.clone();
    let mut ann = authed(&g, "ann").await;
    send_json(&mut ann, json!({"type": "join", "room": "lobby"})).await;
    next_json(&mut ann).await;
    let tasks: Vec<_> = (0..200)
        .map(|i| {
            let g = g.clone();
            tokio::spawn(async move { g.push_room("lobby", &format!("m{i}")).await })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let mut got = Vec::new();
    for _ in 0..200 {
        got.push(message(&next_json(&mut ann).await).1);
    }
    let inversions = got.windows(2).filter(|w| w[1] < w[0]).count();
    assert_eq!(
        inversions, 0,
        "live positions out of order {inversions} times"
    );
}

// r[verify gateway.rooms.publish-name+2]
/// A room push to a name longer than any join allows is refused under the same limit: kept in no
/// history, forwarded nowhere, counted; a name at the limit goes through, and a live change of
/// the limit applies to pushes as it does to joins.
#[tokio::test]
async fn a_push_to_a_room_name_longer_than_any_join_allows_is_refused_and_counted() {
    let mut c = any_room_config("a", 10);
    c.max_room_name = 8;
    let node = start(c).await;
    let g = &node.gateway;
    let long = g.push_room("a-long-room", "m").await;
    assert!(long.room_name_too_long, "{long:?}");
    assert_eq!((long.queued, long.pos), (0, None), "{long:?}");
    assert_eq!(long.forwarded, holdfast_gateway::Forward::NotNeeded);
    assert_eq!(g.stats().pushes_refused_room_name, 1);
    let at = g.push_room("8-bytes!", "m").await;
    assert!(!at.room_name_too_long && at.pos.is_some(), "{at:?}");
    // The refusal says so in the publish API's answer, and only then.
    let v = serde_json::to_value(long).unwrap();
    assert_eq!(v["room_name_too_long"], true, "{v}");
    assert!(
        serde_json::to_value(at)
            .unwrap()
            .get("room_name_too_long")
            .is_none()
    );
    // 0 disables the limit, for pushes as for joins.
    let mut limits = g.live_limits();
    limits.max_room_name = 0;
    g.update_limits(limits);
    assert!(g.push_room("a-long-room", "m").await.pos.is_some());
    assert_eq!(g.stats().pushes_refused_room_name, 1);
}

// r[verify gateway.rooms.publish-name+2]
/// A live lowering of the room name limit keeps a long-named room heard while a member who
/// joined it before is connected here; once none is, pushes to it are refused and counted.
#[tokio::test]
async fn lowering_the_room_name_limit_keeps_a_joined_room_heard_until_its_members_leave() {
    let mut c = any_room_config("a", 10);
    c.max_room_name = 32;
    let node = start(c).await;
    let g = &node.gateway;
    let mut ann = member(g, "ann", "a-rather-long-room").await;
    assert_eq!(g.push_room("a-rather-long-room", "one").await.queued, 1);
    assert_eq!(message(&next_json(&mut ann).await).0, "one");
    let mut limits = g.live_limits();
    limits.max_room_name = 8;
    g.update_limits(limits);
    let d = g.push_room("a-rather-long-room", "two").await;
    assert!(!d.room_name_too_long && d.queued == 1, "{d:?}");
    assert_eq!(message(&next_json(&mut ann).await).0, "two");
    assert_eq!(g.stats().pushes_refused_room_name, 0);
    // With its member gone, the room is one no connection could join: refused and counted.
    drop(ann);
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let d = g.push_room("a-rather-long-room", "three").await;
        if d.room_name_too_long {
            assert_eq!(d.queued, 0, "{d:?}");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the room was never refused: {d:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(g.stats().pushes_refused_room_name, 1);
}

// r[verify gateway.history.bounds+2]
/// A push larger than the message size limit is refused and counted: sent to nobody, kept in no
/// history.
#[tokio::test]
async fn a_push_over_the_message_size_limit_is_refused_and_kept_nowhere() {
    let mut c = any_room_config("a", 10);
    c.max_message_size = 1024;
    let node = start(c).await;
    let g = &node.gateway;
    let mut ann = authed(g, "ann").await;
    send_json(&mut ann, json!({"type": "join", "room": "lobby"})).await;
    next_json(&mut ann).await;
    let seen = g.push_room("lobby", "m0").await.pos.unwrap();
    next_json(&mut ann).await;
    let big = g.push_room("lobby", &"x".repeat(1025)).await;
    assert!(big.too_large, "{big:?}");
    assert_eq!((big.queued, big.pos), (0, None));
    assert!(g.push_user("ann", &"x".repeat(1025)).await.too_large);
    // Both refusals are counted (room and user pushes alike); the push at the limit is not.
    assert_eq!(g.stats().pushes_refused_too_large, 2);
    let ok = g.push_room("lobby", &"y".repeat(1024)).await;
    assert!(!ok.too_large && ok.queued == 1, "{ok:?}");
    assert_eq!(message(&next_json(&mut ann).await).0, "y".repeat(1024));
    assert_eq!(g.stats().pushes_refused_too_large, 2);
    let mut bob = authed(g, "bob").await;
    send_json(
        &mut bob,
        json!({"type": "join", "room": "lobby", "since": seen.to_string()}),
    )
    .await;
    assert_eq!(message(&next_json(&mut bob).await).0, "y".repeat(1024));
    assert_eq!(next_json(&mut bob).await["recovered"], 1);
}

// r[verify gateway.history.recover]
// r[verify gateway.drain.flush]
/// The drain's flush drops a queued live message the recovery backlog already held: a message
/// pushed between the join and the history read, then a drain before the connection reads its
/// queue again, reaches the client once, before the close frame.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_flush_after_a_recovery_sends_a_racing_message_once() {
    let gate = Arc::new(Gate {
        inner: Arc::new(holdfast_gateway::MemoryHistory::new()),
        reading: Arc::new(tokio::sync::Notify::new()),
        go: Arc::new(tokio::sync::Notify::new()),
    });
    let cluster = holdfast_gateway::Cluster {
        registry: Arc::new(holdfast_gateway::MemoryRegistry::new()),
        routing: Arc::new(holdfast_gateway::MemoryRouting::new()),
        bus: Arc::new(holdfast_gateway::MemoryBus::new()),
        seed: None,
        history: Some(gate.clone()),
    };
    let g = Gateway::start_cluster(any_room_config("a", 100), cluster)
        .await
        .unwrap();
    let seen = g.push_room("lobby", "m0").await.pos.unwrap();
    g.push_room("lobby", "m1").await;
    let mut ann = authed(&g, "ann").await;
    send_json(
        &mut ann,
        json!({"type": "join", "room": "lobby", "since": seen.to_string()}),
    )
    .await;
    gate.reading.notified().await;
    g.push_room("lobby", "race").await; // queued live: ann is already a member
    let drainer = g.clone();
    let drain = tokio::spawn(async move {
        drainer
            .drain(holdfast_lifecycle::StopReason::Restart, None)
            .await
    });
    eventually("the drain began", || !g.is_ready()).await;
    // Step 2's signal follows the (in-memory, immediate) deregistration.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    gate.go.notify_one();
    let end = read_to_end(&mut ann, std::time::Duration::from_secs(5)).await;
    drain.await.unwrap();
    // Room messages come unframed (common::unframe); the joined reply as sent.
    let joined = json!({"type": "joined", "room": "lobby", "recovered": 2}).to_string();
    assert_eq!(end.texts, ["m1", "race", joined.as_str()]);
    assert_eq!(
        end.close.map(|c| u16::from(c.code)),
        Some(1012),
        "the drain's close frame follows"
    );
}
