//! Live updates of the node's credentials and allow-lists (`Server::update_access`): what they end
//! on open connections, what they let open, and what they leave alone.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use holdfast_forward::client::{self, ClientEvent};
use holdfast_forward::control::{EndReason, Message, Refusal};
use holdfast_forward::transport::close_code;
use holdfast_forward::wire::{FlowId, decode_datagram, encode_datagram};
use holdfast_forward::{Access, AccessStats, AllowList, Credential, Server};

const OTHER: &str = "other-token-91c4-d2e8-77ab";

fn only(targets: &[SocketAddr]) -> AllowList {
    let entries: Vec<String> = targets.iter().map(ToString::to_string).collect();
    AllowList::parse(entries.iter().map(String::as_str)).expect("allow-list")
}

fn access(tokens: &[&str], allow: &[SocketAddr]) -> Access {
    Access {
        credentials: tokens.iter().map(|t| Credential::new(*t)).collect(),
        allow: only(allow),
        scoped: Vec::new(),
    }
}

async fn started(tokens: &[&str], allow: &[SocketAddr]) -> (tempfile::TempDir, Server) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = server_config(dir.path(), loopback());
    let Access {
        credentials,
        allow,
        scoped,
    } = access(tokens, allow);
    (config.credentials, config.allow, config.scoped) = (credentials, allow, scoped);
    let server = holdfast_forward::start(config)
        .await
        .expect("server starts");
    (dir, server)
}

// Test harness code: a broken setup should stop the test loudly.
impl Raw {
    /// Opens `forward` to `target`: the node's answer.
    async fn open(&mut self, forward: u32, target: SocketAddr) -> Message {
        self.request(Message::Open { forward, target }).await;
        self.next().await
    }

    /// Sends `payload` on `forward` once and waits for its echo: a datagram lost anywhere fails
    /// the test.
    async fn echoed_once(&self, forward: u32, payload: &[u8]) {
        let id = FlowId { forward, flow: 1 };
        self.conn
            .send_datagram(Bytes::from(encode_datagram(id, payload)))
            .expect("send datagram");
        let reply = tokio::time::timeout(WAIT, self.conn.read_datagram())
            .await
            .unwrap_or_else(|_| panic!("datagram {payload:?} lost"))
            .expect("connection open");
        let (from, echoed) = decode_datagram(&reply).expect("a well-formed datagram");
        assert_eq!((from, echoed), (id, payload));
    }

    /// Sends `payload` on `forward` until the echo comes back (UDP may lose one); whether it did.
    async fn round_trip(&self, forward: u32, payload: &[u8]) -> bool {
        let id = FlowId { forward, flow: 1 };
        for _ in 0..20 {
            self.conn
                .send_datagram(Bytes::from(encode_datagram(id, payload)))
                .expect("send datagram");
            let reply =
                tokio::time::timeout(Duration::from_millis(250), self.conn.read_datagram()).await;
            if let Ok(Ok(reply)) = reply {
                let (from, echoed) = decode_datagram(&reply).expect("a well-formed datagram");
                assert_eq!((from, echoed), (id, payload));
                return true;
            }
        }
        false
    }
}

// r[verify forward.access.recheck]
// r[verify forward.end+2]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forward_whose_target_is_no_longer_allowed_ends_and_the_other_keeps_relaying() {
    let (removed, kept) = (echo().await, echo().await);
    let (_dir, server) = started(&[TOKEN], &[removed.addr, kept.addr]).await;
    let mut client = client::spawn(client_config(&server, &[removed.addr, kept.addr]))
        .await
        .expect("client");
    opened(&mut client, 2).await;
    let locals = client.local_addrs().to_vec();
    let peer = peer().await;
    assert_eq!(round_trip(&peer, locals[0], b"one").await, b"one");
    assert_eq!(round_trip(&peer, locals[1], b"two").await, b"two");
    let connection = server.forwards()[0].connection;

    server.update_access(access(&[TOKEN], &[kept.addr]));

    let ClientEvent::Ended {
        forward,
        reason,
        message,
    } = expect(&mut client, "Ended", |e| {
        matches!(e, ClientEvent::Ended { .. })
    })
    .await
    else {
        unreachable!()
    };
    assert_eq!((forward, reason), (1, EndReason::NotAllowed), "{message}");
    assert!(message.contains(&removed.addr.to_string()), "{message}");
    // The other forward relays on, on the same connection.
    assert_eq!(round_trip(&peer, locals[1], b"still").await, b"still");
    let listed: Vec<_> = server
        .forwards()
        .iter()
        .map(|f| (f.connection, f.forward, f.target))
        .collect();
    assert_eq!(listed, vec![(connection, 2, kept.addr)]);
    assert_eq!(
        server.access_stats(),
        AccessStats {
            updates: 1,
            forwards_ended: 1,
            connections_ended: 0,
        }
    );
    client.stop().await;
}

// r[verify forward.access.update]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_an_update_allows_opens_on_the_same_connection() {
    let (old, new) = (echo().await, echo().await);
    let (_dir, server) = started(&[TOKEN], &[old.addr]).await;
    let mut raw = Raw::authenticated(&server).await;
    match raw.open(1, new.addr).await {
        Message::Refused {
            forward: 1,
            refusal: Refusal::NotAllowed,
            ..
        } => {}
        other => panic!("expected a refusal, got {other:?}"),
    }

    server.update_access(access(&[TOKEN], &[old.addr, new.addr]));

    assert_eq!(
        raw.open(2, new.addr).await,
        Message::Opened { forward: 2 },
        "decided by the new list as soon as the update returned"
    );
    assert!(raw.round_trip(2, b"through").await, "relayed to the target");
    assert_eq!(server.connections().authenticated, 1, "no new connection");
    assert_eq!(
        server.refused_targets(),
        1,
        "the count goes on across updates"
    );
}

// r[verify forward.access.revoked]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_whose_token_was_removed_ends_and_is_refused_when_it_reconnects() {
    let target = echo().await;
    let (_dir, server) = started(&[TOKEN, OTHER], &[target.addr]).await;
    let mut removed = client::spawn(client_config(&server, &[target.addr]))
        .await
        .expect("client");
    let mut other = client_config(&server, &[target.addr]);
    other.credential = Credential::new(OTHER);
    let mut other = client::spawn(other).await.expect("client");
    opened(&mut removed, 1).await;
    opened(&mut other, 1).await;
    let peer = peer().await;
    assert_eq!(
        round_trip(&peer, other.local_addrs()[0], b"before").await,
        b"before"
    );

    server.update_access(access(&[OTHER], &[target.addr]));

    let ClientEvent::Ended {
        reason, message, ..
    } = expect(&mut removed, "Ended", |e| {
        matches!(e, ClientEvent::Ended { .. })
    })
    .await
    else {
        unreachable!()
    };
    assert_eq!(reason, EndReason::NotAllowed, "{message}");
    assert!(message.contains("credential"), "{message}");
    expect(&mut removed, "the connection's end", |e| {
        matches!(e, ClientEvent::Disconnected { .. })
    })
    .await;
    expect(&mut removed, "a refused reconnect", |e| {
        matches!(
            e,
            ClientEvent::ConnectFailed {
                bad_credential: true,
                ..
            }
        )
    })
    .await;
    // The other token's connection is untouched.
    assert_eq!(
        round_trip(&peer, other.local_addrs()[0], b"after").await,
        b"after"
    );
    assert_eq!(server.forwards().len(), 1);
    assert_eq!(
        server.access_stats(),
        AccessStats {
            updates: 1,
            forwards_ended: 0,
            connections_ended: 1,
        }
    );
    removed.stop().await;
    other.stop().await;
}

// What the node itself says to a revoked connection, on the wire: each forward's end, then the
// revoked close with the reason.
// r[verify forward.access.revoked]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_connection_is_told_each_end_and_closed_with_the_revoked_code() {
    let target = echo().await;
    let (_dir, server) = started(&[TOKEN, OTHER], &[target.addr]).await;
    let mut raw = Raw::authenticated(&server).await;
    assert_eq!(
        raw.open(1, target.addr).await,
        Message::Opened { forward: 1 }
    );

    server.update_access(access(&[OTHER], &[target.addr]));

    match raw.next().await {
        Message::Ended {
            forward: 1,
            reason: EndReason::NotAllowed,
            message,
        } => assert!(message.contains("credential"), "{message}"),
        other => panic!("expected the forward's end, got {other:?}"),
    }
    let closed = tokio::time::timeout(WAIT, raw.conn.closed())
        .await
        .expect("closed in time");
    match closed {
        quinn::ConnectionError::ApplicationClosed(close) => {
            assert_eq!(
                close.error_code,
                quinn::VarInt::from_u32(close_code::REVOKED),
                "{close:?}"
            );
            assert_eq!(
                &close.reason[..],
                b"the credential is no longer allowed by this node"
            );
        }
        other => panic!("expected the node's close, got {other:?}"),
    }
    assert_eq!(server.access_stats().connections_ended, 1);
}

// r[verify forward.access.update]
// r[verify forward.access.recheck]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_that_changes_nothing_disturbs_nothing() {
    let (target, outside) = (echo().await, echo().await);
    let (_dir, server) = started(&[TOKEN], &[target.addr]).await;
    let mut raw = Raw::authenticated(&server).await;
    assert_eq!(
        raw.open(1, target.addr).await,
        Message::Opened { forward: 1 }
    );
    // Each datagram is sent once, so one an update dropped (anywhere) is seen.
    raw.echoed_once(1, b"before").await;
    let same = access(&[TOKEN], &[target.addr]);
    for i in 0..3u8 {
        server.update_access(same.clone());
        for j in 0..10u8 {
            raw.echoed_once(1, &[b'x', i, j]).await;
        }
    }
    let sent = 1 + 3 * 10;
    // Updates are seen before the next request, so the answer to this one comes after anything
    // they made the node say: no `Ended` comes first.
    match raw.open(2, outside.addr).await {
        Message::Refused {
            forward: 2,
            refusal: Refusal::NotAllowed,
            ..
        } => {}
        other => panic!("expected only the refusal, got {other:?}"),
    }
    let listed = server.forwards();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].forward, 1);
    assert_eq!(
        listed[0].stats.dropped,
        Default::default(),
        "nothing dropped"
    );
    assert_eq!(listed[0].stats.last_error, None);
    assert_eq!(
        (
            listed[0].stats.to_target_datagrams,
            listed[0].stats.from_target_datagrams
        ),
        (sent, sent),
        "every datagram relayed each way, once"
    );
    assert_eq!(
        server.access_stats(),
        AccessStats {
            updates: 3,
            forwards_ended: 0,
            connections_ended: 0,
        }
    );
}

// A credential's own list is re-checked as the node's is: narrowing it ends that credential's
// forward, and a forward of the node's list is untouched.
// r[verify forward.access.recheck]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn narrowing_a_credentials_own_list_ends_only_its_forward() {
    let (global, own) = (echo().await, echo().await);
    let (_dir, server) = started(&[TOKEN], &[global.addr]).await;
    let scoped_access = |list: &[SocketAddr]| Access {
        scoped: vec![(Credential::new(OTHER), only(list))],
        ..access(&[TOKEN], &[global.addr])
    };
    server.update_access(scoped_access(&[own.addr]));
    let mut plain = client::spawn(client_config(&server, &[global.addr]))
        .await
        .expect("client");
    let mut scoped = client_config(&server, &[own.addr]);
    scoped.credential = Credential::new(OTHER);
    let mut scoped = client::spawn(scoped).await.expect("client");
    opened(&mut plain, 1).await;
    opened(&mut scoped, 1).await;

    server.update_access(scoped_access(&[]));

    let ended = expect(&mut scoped, "Ended", |e| {
        matches!(e, ClientEvent::Ended { .. })
    })
    .await;
    assert!(
        matches!(
            ended,
            ClientEvent::Ended {
                reason: EndReason::NotAllowed,
                ..
            }
        ),
        "{ended:?}"
    );
    let peer = peer().await;
    assert_eq!(
        round_trip(&peer, plain.local_addrs()[0], b"plain").await,
        b"plain"
    );
    let targets: Vec<_> = server.forwards().iter().map(|f| f.target).collect();
    assert_eq!(targets, vec![global.addr]);
    assert_eq!(server.access_stats().forwards_ended, 1);
    plain.stop().await;
    scoped.stop().await;
}

// Sessions are counted by the credential itself (its digest), not by its place in the list: an
// update that reorders the tokens charges no connection to another token, and one that removes a
// token frees its places once its connection has ended.
// r[verify forward.access.update]
// r[verify forward.limits.per-credential+2]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_per_credential_bound_follows_each_token_across_a_reorder_and_a_removal() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = server_config(dir.path(), loopback());
    config.credentials = vec![Credential::new(TOKEN), Credential::new(OTHER)];
    config.max_per_credential = 1;
    let server = holdfast_forward::start(config)
        .await
        .expect("server starts");
    let (first, answer) = Raw::hello(&server, TOKEN).await;
    assert_eq!(answer, Message::Welcome);

    server.update_access(access(&[OTHER, TOKEN], &[]));

    let (_second, answer) = Raw::hello(&server, TOKEN).await;
    assert!(
        matches!(
            answer,
            Message::Refused {
                refusal: Refusal::TooManyConnections,
                ..
            }
        ),
        "still one place for the token, now second in the list: {answer:?}"
    );
    let (_other, answer) = Raw::hello(&server, OTHER).await;
    assert_eq!(
        answer,
        Message::Welcome,
        "the other token, now first, is not charged the first token's connection"
    );

    server.update_access(access(&[OTHER], &[]));
    let closed = tokio::time::timeout(WAIT, first.conn.closed())
        .await
        .expect("the removed token's connection ends");
    assert!(
        matches!(&closed, quinn::ConnectionError::ApplicationClosed(close)
            if close.error_code == quinn::VarInt::from_u32(close_code::REVOKED)),
        "{closed:?}"
    );
    eventually("the removed token's place freed", || {
        server.connections().authenticated == 1
    })
    .await;

    server.update_access(access(&[OTHER, TOKEN], &[]));
    let (_again, answer) = Raw::hello(&server, TOKEN).await;
    assert_eq!(answer, Message::Welcome, "re-added, it has its place back");
}
