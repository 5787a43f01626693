//! Room history and recovery on one replica: a client that comes back with `since` gets what
//! it missed, in order and once, or is told the history no longer reaches back.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use holdfast_gateway::{Gateway, Pos};
use serde_json::{Value, json};

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
// r[verify gateway.history.bounds]
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
