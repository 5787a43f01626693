//! JWT authentication against a running gateway: key files re-read while it runs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, SystemTime};

use common::*;
use holdfast_gateway::{AuthSettings, KeySource, MintClaims, RoomsDefault, Signer, TokenKey};

// r[verify gateway.auth.key-reload+2]
#[tokio::test(start_paused = true)]
async fn a_rotated_key_file_is_picked_up_on_the_next_poll_and_a_broken_one_keeps_the_keys() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("secret");
    std::fs::write(&path, "first-secret-0123456789\n").unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let key =
        TokenKey::from_sources(vec![KeySource::secret(&path)], AuthSettings::default()).unwrap();
    let mut c = config("a");
    c.token_key = key.clone();
    c.key_reload_interval = Duration::from_secs(5);
    let node = start(c).await;
    let tok = |s: &str| {
        Signer::new(s.as_bytes())
            .token("ann", SystemTime::now() + Duration::from_secs(60))
            .unwrap()
    };
    let ok = |s: &str| key.verify_auth(&tok(s), SystemTime::now()).is_ok();
    assert!(ok("first-secret-0123456789"));

    std::fs::write(&path, "second-secret-0123456789\n").unwrap();
    // Not before the poll.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(ok("first-secret-0123456789") && !ok("second-secret-0123456789"));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(ok("second-secret-0123456789") && !ok("first-secret-0123456789"));
    assert_eq!(node.gateway.stats().key_reloads, 1);

    // A broken file: the previous keys stay, with a fault, counted once.
    std::fs::write(&path, "short").unwrap();
    tokio::time::sleep(Duration::from_secs(16)).await;
    assert!(ok("second-secret-0123456789"));
    assert!(node.gateway.key_fault().is_some());
    assert_eq!(node.gateway.stats().key_reload_failures, 1);
    std::fs::write(&path, "third-secret-0123456789").unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(ok("third-secret-0123456789"));
    assert!(node.gateway.key_fault().is_none());
    assert_eq!(node.gateway.stats().key_reloads, 2);
}

/// Authenticates with a token carrying `rooms` and answers the first reply.
async fn with_rooms(node: &Node, user: &str, rooms: Option<Vec<&str>>) -> Client {
    let mut ws = connect(&node.gateway).await;
    let t = token_with(&MintClaims {
        sub: user.into(),
        exp: unix_now() + 3600,
        rooms: rooms.map(|r| r.into_iter().map(str::to_owned).collect()),
        ..MintClaims::default()
    });
    send_json(&mut ws, serde_json::json!({"type": "auth", "token": t})).await;
    next_text(&mut ws).await;
    ws
}

async fn join(ws: &mut Client, msg: serde_json::Value) -> serde_json::Value {
    send_json(ws, msg).await;
    serde_json::from_str(&next_text(ws).await).unwrap()
}

fn subscription(user: &str, room: &str) -> String {
    token_with(&MintClaims {
        sub: user.into(),
        exp: unix_now() + 3600,
        room: Some(room.into()),
        ..MintClaims::default()
    })
}

// r[verify gateway.rooms.permissions]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_s_rooms_bound_its_joins_and_a_subscription_token_opens_one_more() {
    let node = start(config("a")).await;
    let mut ann = with_rooms(&node, "ann", Some(vec!["lobby", "chat:*"])).await;
    for room in ["lobby", "chat:1", "chat:"] {
        let a = join(&mut ann, serde_json::json!({"type": "join", "room": room})).await;
        assert_eq!(a, serde_json::json!({"type": "joined", "room": room}));
    }
    let refused = serde_json::json!({"type": "error", "op": "join", "reason": "not permitted", "room": "bob-private"});
    // Outside the token's rooms: refused, and the connection stays.
    for room in ["bob-private", "chat", "lobby2"] {
        let mut want = refused.clone();
        want["room"] = room.into();
        assert_eq!(
            join(&mut ann, serde_json::json!({"type": "join", "room": room})).await,
            want
        );
    }
    // A subscription token of another user, or for another room, or not verifying: refused.
    for t in [
        subscription("bob", "bob-private"),
        subscription("ann", "other"),
        Signer::new(b"another secret 0123456789")
            .sign(&MintClaims {
                sub: "ann".into(),
                exp: unix_now() + 3600,
                room: Some("bob-private".into()),
                ..MintClaims::default()
            })
            .unwrap(),
        "not a token".into(),
    ] {
        let a = join(
            &mut ann,
            serde_json::json!({"type": "join", "room": "bob-private", "token": t}),
        )
        .await;
        assert_eq!(a, refused);
    }
    // Ann's own subscription token for the room: joined.
    let a = join(
        &mut ann,
        serde_json::json!({"type": "join", "room": "bob-private", "token": subscription("ann", "bob-private")}),
    )
    .await;
    assert_eq!(
        a,
        serde_json::json!({"type": "joined", "room": "bob-private"})
    );
    assert_eq!(node.gateway.stats().joins_refused_permission, 7);
    // Still served: pushes to her rooms arrive.
    assert_eq!(node.gateway.push_room("bob-private", "hi").await.queued, 1);
    assert_eq!(next_text(&mut ann).await, "hi");
    // A token without rooms joins no room by default; one with an empty list none.
    let mut zed = with_rooms(&node, "zed", None).await;
    let a = join(
        &mut zed,
        serde_json::json!({"type": "join", "room": "anything"}),
    )
    .await;
    assert_eq!(a["reason"], "not permitted");
    let mut nobody = with_rooms(&node, "nobody", Some(vec![])).await;
    let a = join(
        &mut nobody,
        serde_json::json!({"type": "join", "room": "lobby"}),
    )
    .await;
    assert_eq!(a["reason"], "not permitted");
}

// r[verify gateway.rooms.permissions]
// r[verify gateway.auth.refusal-reasons]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_token_does_not_authenticate_and_rooms_default_can_be_any() {
    let mut c = config("a");
    c.token_key = TokenKey::with_secret(
        SECRET.to_vec(),
        AuthSettings {
            rooms_default: RoomsDefault::Any,
            ..AuthSettings::default()
        },
    );
    let node = start(c).await;
    // {sub, room} given as the auth token: closed 1008, counted under its reason.
    let mut ws = connect(&node.gateway).await;
    send_json(
        &mut ws,
        serde_json::json!({"type": "auth", "token": subscription("ann", "support:ann")}),
    )
    .await;
    let end = read_to_end(&mut ws, Duration::from_secs(5)).await;
    let close = end.close.expect("a close frame");
    assert_eq!(u16::from(close.code), 1008);
    assert_eq!(close.reason.as_str(), "token of the wrong kind");
    let stats = node.gateway.stats();
    assert_eq!(stats.token_refused[11], 1);
    assert_eq!(holdfast_gateway::TokenError::REASONS[11], "wrong_kind");
    // Under rooms_default = any, a token without rooms joins any room.
    let mut zed = with_rooms(&node, "zed", None).await;
    let a = join(
        &mut zed,
        serde_json::json!({"type": "join", "room": "admin:secret"}),
    )
    .await;
    assert_eq!(a["type"], "joined");
    // An auth token given as a subscription token: refused.
    let mut bob = with_rooms(&node, "bob", Some(vec![])).await;
    let auth = token_with(&MintClaims {
        sub: "bob".into(),
        exp: unix_now() + 3600,
        rooms: Some(vec!["x".into()]),
        room: Some("x".into()),
        ..MintClaims::default()
    });
    let a = join(
        &mut bob,
        serde_json::json!({"type": "join", "room": "x", "token": auth}),
    )
    .await;
    assert_eq!(a["reason"], "not permitted");
}

// r[verify gateway.rooms.permissions]
// r[verify gateway.rooms.limits]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permitted_joins_still_meet_the_room_limits() {
    let mut c = config("a");
    c.max_rooms_per_connection = 1;
    c.max_room_name = 8;
    let node = start(c).await;
    let mut ann = with_rooms(&node, "ann", Some(vec!["chat:*"])).await;
    let a = join(
        &mut ann,
        serde_json::json!({"type": "join", "room": "chat:a"}),
    )
    .await;
    assert_eq!(a["type"], "joined");
    let a = join(
        &mut ann,
        serde_json::json!({"type": "join", "room": "chat:b"}),
    )
    .await;
    assert_eq!(a["reason"], "too many rooms");
    // Too long is said before not permitted, and without the name.
    let a = join(
        &mut ann,
        serde_json::json!({"type": "join", "room": "x".repeat(9)}),
    )
    .await;
    assert_eq!(
        a,
        serde_json::json!({"type": "error", "op": "join", "reason": "room name too long"})
    );
}
