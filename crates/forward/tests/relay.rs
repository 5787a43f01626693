//! Real quinn connections on loopback: echo, flows, oversize, ICMP refused, refusals, loss.

mod common;

use std::time::Duration;

use common::*;
use holdfast_forward::client::{self, ClientEvent};
use holdfast_forward::control::{EndReason, Refusal};
use holdfast_forward::{Credential, Fingerprint};
use holdfast_test_support::fault_proxy::{UdpFaultProxy, UdpMode};

// i[verify forward.relay.resilience]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payloads_of_0_1_1162_and_the_maximum_arrive_intact_both_ways() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = server(dir.path()).await;
    let target = echo().await;
    let mut client = client::spawn(client_config(&server, &[target.addr]))
        .await
        .expect("client");
    opened(&mut client, 1).await;
    let local = client.local_addrs()[0];
    let peer = peer().await;
    // Path MTU discovery grows the maximum past the initial 1200-byte packets within a few RTTs.
    eventually("room for 1162 bytes", || {
        client.max_payload().is_some_and(|m| m >= 1162)
    })
    .await;
    let max = client.max_payload().expect("connected");
    for len in [0usize, 1, 1162, max] {
        let payload: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        // The node's own view of the path may lag the client's: the reply to the maximum is
        // retried until both ends have discovered it.
        let reply = round_trip(&peer, local, &payload).await;
        assert_eq!(reply, payload, "{len} bytes");
    }
    // The node counts after its send returns, which may be after the reply already arrived.
    eventually("the node counted four datagrams each way", || {
        let stats = &server.forwards()[0].stats;
        stats.to_target_datagrams >= 4 && stats.from_target_datagrams >= 4
    })
    .await;
    // The client too counts after its send to the peer returns, which may be after the peer has
    // the reply.
    eventually("the client counted the replies' bytes", || {
        client.stats()[0].from_target_bytes >= (1163 + max) as u64
    })
    .await;
}

// r[verify forward.flows+2]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_local_peers_on_one_forward_get_their_own_replies() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = server(dir.path()).await;
    let target = echo().await;
    let mut client = client::spawn(client_config(&server, &[target.addr]))
        .await
        .expect("client");
    opened(&mut client, 1).await;
    let local = client.local_addrs()[0];
    let (a, b) = (peer().await, peer().await);
    for round in 0..3 {
        let from_a = format!("a{round}");
        let from_b = format!("b{round}");
        a.send_to(from_a.as_bytes(), local).await.expect("send a");
        b.send_to(from_b.as_bytes(), local).await.expect("send b");
        let mut buf = [0u8; 64];
        let (n, _) = tokio::time::timeout(WAIT, a.recv_from(&mut buf))
            .await
            .expect("a reply")
            .expect("a recv");
        assert_eq!(&buf[..n], from_a.as_bytes());
        let (n, _) = tokio::time::timeout(WAIT, b.recv_from(&mut buf))
            .await
            .expect("b reply")
            .expect("b recv");
        assert_eq!(&buf[..n], from_b.as_bytes());
    }
    let listed = server.forwards();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        listed[0].flows, 2,
        "one flow (and one connected socket) per local peer"
    );
}

// r[verify forward.flows+2]
// r[verify forward.batch]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_peers_interleaved_in_one_batch_each_get_only_their_own_replies() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = server(dir.path()).await;
    let target = echo().await;
    let mut client = client::spawn(client_config(&server, &[target.addr]))
        .await
        .expect("client");
    opened(&mut client, 1).await;
    let local = client.local_addrs()[0];
    let peers = [peer().await, peer().await];
    // Both flows exist before the burst, so the burst is relayed, not spent opening sockets.
    for (tag, p) in [b'a', b'b'].into_iter().zip(&peers) {
        round_trip(p, local, &[tag; 32]).await;
    }
    // Equal sizes, alternating peers, back to back: each end's batches hold both flows, the
    // case where a run's cached flow or peer must not carry the other's datagrams.
    const EACH: usize = 150;
    for i in 0..EACH {
        for (tag, p) in [b'a', b'b'].into_iter().zip(&peers) {
            let mut payload = [tag; 32];
            payload[1..9].copy_from_slice(&(i as u64).to_le_bytes());
            p.send_to(&payload, local).await.expect("send");
        }
        if i % 25 == 24 {
            // Paced a little so no socket buffer overflows on a loaded machine.
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    for (tag, p) in [b'a', b'b'].into_iter().zip(&peers) {
        let mut buf = [0u8; 64];
        let mut got = 0;
        while let Ok(Ok((n, _))) =
            tokio::time::timeout(Duration::from_millis(500), p.recv_from(&mut buf)).await
        {
            assert_eq!(n, 32);
            assert_eq!(
                buf[0], tag,
                "peer {} got the other peer's reply",
                tag as char
            );
            got += 1;
        }
        // UDP may lose a datagram under load; what arrives is the peer's own.
        assert!(
            got >= EACH * 9 / 10,
            "peer {}: {got} of {EACH}",
            tag as char
        );
    }
}

// r[verify forward.flows+2]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_node_s_flow_bound_an_idle_flow_gives_way_to_a_new_peer() {
    let dir = tempfile::tempdir().expect("tempdir");
    an_idle_flow_gives_way(dir.path(), |_| {}).await;
}

// r[verify forward.limits.flow-sockets+3]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_that_gives_way_at_its_forward_s_bound_gives_its_socket_to_the_new_peer() {
    let dir = tempfile::tempdir().expect("tempdir");
    // One socket for the whole node: the new peer's flow can only have the evicted one's.
    an_idle_flow_gives_way(dir.path(), |node| node.max_flow_sockets = 1).await;
}

/// On a node bounded to one flow per forward (and as `node` adjusts it), where every flow counts
/// as idle at once: peers a, b, then a again each have their datagram relayed, each new flow
/// taking the place (and the socket) of the last without a datagram dropped at the bound.
#[allow(clippy::expect_used)]
async fn an_idle_flow_gives_way(
    dir: &std::path::Path,
    node: impl FnOnce(&mut holdfast_forward::ServerConfig),
) {
    let mut config = server_config(dir, loopback());
    config.max_flows = 1;
    // Every flow counts as idle at once, so the test needs no clock: only the bound matters.
    config.flow_idle = Duration::ZERO;
    node(&mut config);
    let server = holdfast_forward::start(config).await.expect("server");
    let target = echo().await;
    let mut client = client::spawn(client_config(&server, &[target.addr]))
        .await
        .expect("client");
    opened(&mut client, 1).await;
    let local = client.local_addrs()[0];
    let (a, b) = (peer().await, peer().await);
    assert_eq!(round_trip(&a, local, b"a1").await, b"a1");
    assert_eq!(
        round_trip(&b, local, b"b1").await,
        b"b1",
        "b is not locked out"
    );
    assert_eq!(round_trip(&a, local, b"a2").await, b"a2");
    let listed = server.forwards();
    assert_eq!(listed[0].flows, 1, "still within the bound");
    // The idle flow gave way to the datagram that found it: none was dropped at the bound (the
    // retries of `round_trip` alone would hide a first datagram dropped at each eviction).
    assert_eq!(
        listed[0].stats.dropped.flow_limit, 0,
        "{:?}",
        listed[0].stats
    );
    assert_eq!(
        server.flow_sockets(),
        1,
        "the evicted flows' sockets were given back"
    );
}

// r[verify forward.flows+2]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_node_s_flow_bound_a_new_peer_is_dropped_and_counted_while_the_flow_is_in_use() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = server_config(dir.path(), loopback());
    // The client's own bound (256) is far above the node's: the node must hold its own.
    config.max_flows = 1;
    // Far longer than the test: the one flow is never idle long enough to give way.
    config.flow_idle = Duration::from_secs(3600);
    let server = holdfast_forward::start(config).await.expect("server");
    let target = echo().await;
    let mut client = client::spawn(client_config(&server, &[target.addr]))
        .await
        .expect("client");
    opened(&mut client, 1).await;
    let local = client.local_addrs()[0];
    let (a, b) = (peer().await, peer().await);
    assert_eq!(round_trip(&a, local, b"a1").await, b"a1");
    assert_eq!(
        try_round_trip(&b, local, b"b1", 3).await,
        None,
        "b is not let past the bound"
    );
    let over = || server.forwards()[0].stats.dropped.flow_limit;
    eventually("the node counted b's datagrams", || over() >= 1).await;
    assert!(over() <= 3, "one drop per datagram b sent: {}", over());
    let listed = server.forwards();
    assert_eq!(listed[0].flows, 1, "b got no flow");
    assert_eq!(round_trip(&a, local, b"a2").await, b"a2", "a goes on");
}

// r[verify forward.oversize]
// r[verify forward.stats]
// i[verify forward.relay.resilience]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversize_datagram_is_dropped_and_counted_at_each_end_and_the_next_flows() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = server(dir.path()).await;
    let target = echo().await;
    let mut client = client::spawn(client_config(&server, &[target.addr]))
        .await
        .expect("client");
    opened(&mut client, 1).await;
    let local = client.local_addrs()[0];
    let peer = peer().await;
    assert_eq!(round_trip(&peer, local, b"first").await, b"first");

    // Client end: a local datagram too large for the connection.
    let too_big = vec![7u8; 4000];
    peer.send_to(&too_big, local).await.expect("send");
    eventually("client oversize drop counted", || {
        client.stats()[0].dropped.oversize == 1
    })
    .await;
    assert_eq!(round_trip(&peer, local, b"next").await, b"next");

    // Node end: a reply from the target too large for the connection.
    peer.send_to(b"big:5000", local).await.expect("send");
    eventually("node oversize drop counted", || {
        server.forwards()[0].stats.dropped.oversize >= 1
    })
    .await;
    assert_eq!(round_trip(&peer, local, b"after").await, b"after");
    let stats = &server.forwards()[0].stats;
    assert!(
        stats
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("too large"))
    );
    assert!(
        client.stats()[0]
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("too large"))
    );
    assert_eq!(server.forwards().len(), 1, "the forward is still active");
}

// i[verify forward.relay.resilience]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_target_is_reported_and_relaying_continues_once_it_listens() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = server(dir.path()).await;
    // A port that nothing listens on (bound, then released).
    let closed = {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        s.local_addr().expect("addr")
    };
    let mut client = client::spawn(client_config(&server, &[closed]))
        .await
        .expect("client");
    opened(&mut client, 1).await;
    let local = client.local_addrs()[0];
    let peer = peer().await;
    for _ in 0..3 {
        peer.send_to(b"anyone?", local).await.expect("send");
    }
    let status = expect(&mut client, "a refusal reported by the node", |e| {
        matches!(
            e,
            ClientEvent::Status {
                from_node: true,
                ..
            }
        )
    })
    .await;
    assert!(
        status.to_string().to_lowercase().contains("refused"),
        "{status}"
    );
    let stats = server.forwards()[0].stats.clone();
    assert!(stats.transient_errors >= 1);
    assert!(
        stats
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("refused"))
    );

    let _target = echo_on(closed).await;
    // Datagrams still on their way when the target started are echoed too; then ours.
    let mut reply = round_trip(&peer, local, b"now?").await;
    for _ in 0..10 {
        if reply != b"anyone?" {
            break;
        }
        reply = round_trip(&peer, local, b"now?").await;
    }
    assert_eq!(reply, b"now?");
    assert_eq!(
        server.forwards().len(),
        1,
        "the forward outlived the refusals"
    );
}

// r[verify forward.allow+2]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_outside_the_allow_list_is_refused_with_its_reason() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = server(dir.path()).await;
    let outside = "127.0.0.1:53".parse().expect("addr");
    let inside = echo().await;
    let mut client = client::spawn(client_config(&server, &[outside, inside.addr]))
        .await
        .expect("client");
    let refused = expect(&mut client, "Refused", |e| {
        matches!(e, ClientEvent::Refused { .. })
    })
    .await;
    let ClientEvent::Refused {
        forward,
        refusal,
        message,
    } = refused
    else {
        unreachable!()
    };
    assert_eq!((forward, refusal), (1, Refusal::NotAllowed));
    assert!(
        message.contains("127.0.0.1:53") && message.contains("allow-list"),
        "{message}"
    );
    expect(&mut client, "the allowed forward", |e| {
        matches!(e, ClientEvent::Opened { forward: 2, .. })
    })
    .await;
    let listed = server.forwards();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].target, inside.addr);
}

// r[verify forward.auth]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_credential_is_refused_as_such() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = server(dir.path()).await;
    let target = echo().await;
    let mut config = client_config(&server, &[target.addr]);
    config.credential = Credential::new("not-the-token");
    let mut client = client::spawn(config).await.expect("client");
    let failed = expect(&mut client, "ConnectFailed", |e| {
        matches!(e, ClientEvent::ConnectFailed { .. })
    })
    .await;
    let ClientEvent::ConnectFailed {
        error,
        bad_credential,
        pin_mismatch,
    } = failed
    else {
        unreachable!()
    };
    assert!(bad_credential && !pin_mismatch, "{error}");
    assert!(error.contains("credential"), "{error}");
    assert!(!error.contains("not-the-token"));
    assert!(server.forwards().is_empty());
}

// r[verify forward.limits.per-credential+2]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_past_its_tokens_bound_says_the_node_holds_its_maximum_for_this_token() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server_config = server_config(dir.path(), loopback());
    server_config.max_per_credential = 1;
    let server = holdfast_forward::start(server_config)
        .await
        .expect("server");
    let target = echo().await;
    let mut first = client::spawn(client_config(&server, &[target.addr]))
        .await
        .expect("client");
    opened(&mut first, 1).await;
    let mut second = client::spawn(client_config(&server, &[target.addr]))
        .await
        .expect("client");
    let failed = expect(&mut second, "ConnectFailed", |e| {
        matches!(e, ClientEvent::ConnectFailed { .. })
    })
    .await;
    let ClientEvent::ConnectFailed {
        error,
        bad_credential,
        ..
    } = failed
    else {
        unreachable!()
    };
    assert!(!bad_credential, "{error}");
    assert!(
        error.contains("the node holds its maximum of connections for this token"),
        "{error}"
    );
    second.stop().await;
    first.stop().await;
}

// r[verify forward.pin]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_another_identity_is_refused_by_the_pin() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = server(dir.path()).await;
    let target = echo().await;
    let mut config = client_config(&server, &[target.addr]);
    let wrong: Fingerprint =
        "sha256:0000000000000000000000000000000000000000000000000000000000000000"
            .parse()
            .expect("fingerprint");
    config.pin = wrong;
    let mut client = client::spawn(config).await.expect("client");
    let failed = expect(&mut client, "ConnectFailed", |e| {
        matches!(e, ClientEvent::ConnectFailed { .. })
    })
    .await;
    let ClientEvent::ConnectFailed {
        error,
        pin_mismatch,
        bad_credential,
    } = failed
    else {
        unreachable!()
    };
    assert!(pin_mismatch && !bad_credential, "{error}");
    assert!(error.contains(&server.fingerprint().to_string()), "{error}");
    assert!(server.forwards().is_empty());
}

// r[verify forward.end+2]
// r[verify forward.stop]
// r[verify forward.reconnect]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_node_ends_the_relay_and_the_client_reconnects_to_its_successor() {
    let dir = tempfile::tempdir().expect("tempdir");
    let first = server(dir.path()).await;
    let addr = first.local_addr().expect("addr");
    let target = echo().await;
    let mut client = client::spawn(client_config(&first, &[target.addr]))
        .await
        .expect("client");
    opened(&mut client, 1).await;
    let local = client.local_addrs()[0];
    let peer = peer().await;
    assert_eq!(round_trip(&peer, local, b"one").await, b"one");
    assert_eq!(first.forwards().len(), 1);

    let started = tokio::time::Instant::now();
    first
        .stop(started + Duration::from_secs(3))
        .await
        .expect("clean stop");
    assert!(started.elapsed() <= Duration::from_secs(3));
    let ended = expect(&mut client, "Ended", |e| {
        matches!(e, ClientEvent::Ended { .. })
    })
    .await;
    assert!(
        matches!(
            ended,
            ClientEvent::Ended {
                forward: 1,
                reason: EndReason::ShuttingDown,
                ..
            }
        ),
        "{ended:?}"
    );
    expect(&mut client, "Disconnected", |e| {
        matches!(e, ClientEvent::Disconnected { .. })
    })
    .await;
    expect(&mut client, "Reconnecting", |e| {
        matches!(e, ClientEvent::Reconnecting { .. })
    })
    .await;

    // The successor: same identity (so the same pin), same address.
    let second = start_on(dir.path(), addr).await;
    assert_eq!(second.fingerprint(), first_fingerprint(dir.path()));
    expect(&mut client, "Connected", |e| {
        matches!(e, ClientEvent::Connected { .. })
    })
    .await;
    opened(&mut client, 1).await;
    assert_eq!(round_trip(&peer, local, b"two").await, b"two");
    assert_eq!(second.forwards().len(), 1);
}

/// Starts a node on `addr`, retrying while quinn's driver of the previous one still holds the
/// socket (it releases it asynchronously, after the endpoint went idle).
async fn start_on(dir: &std::path::Path, addr: std::net::SocketAddr) -> holdfast_forward::Server {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match holdfast_forward::start(server_config(dir, addr)).await {
            Ok(server) => return server,
            Err(err) => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "successor starts: {err}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

fn first_fingerprint(dir: &std::path::Path) -> Fingerprint {
    holdfast_forward::Identity::load_or_create(dir)
        .map(|identity| identity.fingerprint())
        .unwrap_or_else(|err| panic!("identity: {err}"))
}

// r[verify forward.end+2]
// r[verify forward.reconnect]
// i[verify forward.relay.resilience]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_path_ends_the_relay_and_the_client_backs_off_until_it_heals() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = server(dir.path()).await;
    let proxy = UdpFaultProxy::start(server.local_addr().expect("addr"))
        .await
        .expect("proxy");
    let target = echo().await;
    let mut config = client_config(&server, &[target.addr]);
    config.node = proxy.addr();
    let mut client = client::spawn(config).await.expect("client");
    opened(&mut client, 1).await;
    let local = client.local_addrs()[0];
    let peer = peer().await;
    assert_eq!(round_trip(&peer, local, b"up").await, b"up");

    proxy.set_mode(UdpMode::Drop);
    let ended = expect(&mut client, "Ended", |e| {
        matches!(e, ClientEvent::Ended { .. })
    })
    .await;
    assert!(
        matches!(
            ended,
            ClientEvent::Ended {
                reason: EndReason::ConnectionLost,
                ..
            }
        ),
        "{ended:?}"
    );
    assert!(ended.to_string().contains("lost"), "{ended}");
    eventually("the node unlisted the forward", || {
        server.forwards().is_empty()
    })
    .await;

    // While the path is cut, attempts fail and the waits grow.
    let mut waits = Vec::new();
    while waits.len() < 3 {
        if let ClientEvent::Reconnecting { in_ms, failures } =
            expect(&mut client, "Reconnecting", |e| {
                matches!(e, ClientEvent::Reconnecting { .. })
            })
            .await
        {
            waits.push((failures, in_ms));
        }
    }
    assert!(
        waits
            .windows(2)
            .all(|w| w[1].0 > w[0].0 && w[1].1 >= w[0].1),
        "{waits:?}"
    );

    proxy.set_mode(UdpMode::Forward);
    expect(&mut client, "Connected", |e| {
        matches!(e, ClientEvent::Connected { .. })
    })
    .await;
    opened(&mut client, 1).await;
    assert_eq!(round_trip(&peer, local, b"again").await, b"again");
    assert_eq!(server.forwards().len(), 1);
}

// r[verify forward.stop]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_stopper_tells_clients_the_node_restarts_and_returns_by_its_deadline() {
    use holdfast_lifecycle::{StopReason, StopRequest, Stopper};

    let dir = tempfile::tempdir().expect("tempdir");
    let server = server(dir.path()).await;
    let target = echo().await;
    let mut client = client::spawn(client_config(&server, &[target.addr]))
        .await
        .expect("client");
    opened(&mut client, 1).await;
    let stopper: Box<dyn Stopper> = Box::new(server);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    stopper
        .stop(StopRequest {
            deadline,
            reason: StopReason::Restart,
        })
        .await
        .expect("clean stop");
    assert!(tokio::time::Instant::now() <= deadline);
    let ended = expect(&mut client, "Ended", |e| {
        matches!(e, ClientEvent::Ended { .. })
    })
    .await;
    let ClientEvent::Ended {
        reason, message, ..
    } = ended
    else {
        unreachable!()
    };
    assert_eq!(reason, EndReason::ShuttingDown);
    assert_eq!(message, "node restarting");
}

// r[verify forward.limits.flow-sockets+3]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beyond_the_node_s_flow_socket_bound_a_new_flow_is_dropped_and_counted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = server_config(dir.path(), loopback());
    config.max_flow_sockets = 2;
    let server = holdfast_forward::start(config).await.expect("server");
    let (one, two) = (echo().await, echo().await);
    // Two forwards on one connection, so the bound is the node's, not one forward's.
    let mut client = client::spawn(client_config(&server, &[one.addr, two.addr]))
        .await
        .expect("client");
    opened(&mut client, 2).await;
    let (first, second) = (client.local_addrs()[0], client.local_addrs()[1]);
    let (a, b, c) = (peer().await, peer().await, peer().await);
    assert_eq!(round_trip(&a, first, b"a").await, b"a");
    assert_eq!(round_trip(&b, second, b"b").await, b"b");
    assert_eq!(server.flow_sockets(), 2);
    // A third flow finds no socket left: dropped, counted, and the others go on.
    assert_eq!(try_round_trip(&c, second, b"c", 2).await, None);
    let over = || {
        server
            .forwards()
            .iter()
            .map(|f| f.stats.dropped.flow_limit)
            .sum::<u64>()
    };
    assert!(over() >= 1, "{:?}", server.forwards());
    assert_eq!(round_trip(&a, first, b"a2").await, b"a2");
    // A forward that ends gives its flows' sockets back.
    drop(client);
    eventually("flow sockets given back", || server.flow_sockets() == 0).await;
}

// r[verify forward.batch]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_datagrams_of_mixed_sizes_arrives_whole_in_order_and_counted() {
    let Warmed {
        dir: _dir,
        server,
        target,
        client: _client,
        local,
        peer,
        ..
    } = warmed_forward_to_a_silent_target().await;
    let mut buf = vec![0u8; 65_536];
    // Runs of equal sizes (gathered into one send) broken by other sizes and empty datagrams,
    // sent back to back so several wait at once at each end.
    let sizes: Vec<usize> = (0..300)
        .map(|i| match i % 10 {
            0..=5 => 100,
            6 => 0,
            7 | 8 => 1162,
            _ => 1 + i % 7,
        })
        .collect();
    let datagram =
        |i: usize, size: usize| -> Vec<u8> { (0..size).map(|j| (i + j) as u8).collect() };
    // The target reads while the burst is sent, so its own buffer does not overflow.
    let expected = sizes.len();
    let reader = tokio::spawn(async move {
        let mut received = Vec::new();
        while received.len() < expected {
            match tokio::time::timeout(Duration::from_secs(2), target.recv_from(&mut buf)).await {
                Ok(Ok((n, _))) => received.push(buf[..n].to_vec()),
                _ => break,
            }
        }
        received
    });
    for (i, &size) in sizes.iter().enumerate() {
        peer.send_to(&datagram(i, size), local).await.expect("send");
        if i % 50 == 49 {
            // Paced a little so no socket buffer overflows on a loaded machine.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let received = reader.await.expect("reader");
    // UDP may lose a datagram under load; what arrives is whole, in order, and counted.
    assert!(
        received.len() >= sizes.len() * 9 / 10,
        "{} of {}",
        received.len(),
        sizes.len()
    );
    let mut next = 0;
    for got in &received {
        let i = (next..sizes.len())
            .find(|&i| datagram(i, sizes[i]) == *got)
            .unwrap_or_else(|| panic!("{} bytes out of order or altered", got.len()));
        next = i + 1;
    }
    let node = &server.forwards()[0].stats;
    assert_eq!(node.to_target_datagrams, 1 + received.len() as u64);
    let bytes: usize = received.iter().map(Vec::len).sum();
    assert_eq!(node.to_target_bytes, 4 + bytes as u64);
}

// r[verify forward.batch]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversize_datagram_in_a_burst_costs_only_itself_and_the_client_counts_the_rest() {
    let Warmed {
        dir: _dir,
        server: _server,
        target,
        client,
        local,
        peer,
        ..
    } = warmed_forward_to_a_silent_target().await;
    let mut buf = vec![0u8; 65_536];
    // Back to back, so they wait together in the local socket and one wakeup takes them; one in
    // the middle is too large for the connection, as one by one it is lost alone. It is the
    // largest a UDP datagram over IPv4 can be: the batch's buffers must hold it too.
    let burst: Vec<Vec<u8>> = (0..12)
        .map(|i| {
            if i == 4 {
                vec![7u8; 65_507]
            } else {
                vec![i as u8; 10 + i]
            }
        })
        .collect();
    for datagram in &burst {
        peer.send_to(datagram, local).await.expect("send");
    }
    let relayed: Vec<Vec<u8>> = burst.iter().filter(|d| d.len() < 65_507).cloned().collect();
    let mut received = Vec::new();
    while received.len() < relayed.len() {
        match tokio::time::timeout(WAIT, target.recv_from(&mut buf)).await {
            Ok(Ok((n, _))) => received.push(buf[..n].to_vec()),
            _ => break,
        }
    }
    assert_eq!(
        received, relayed,
        "the datagrams after the oversize one too"
    );
    // The client counts a buffer's datagrams once it has handed them all to the connection.
    let count = 1 + relayed.len() as u64;
    eventually("the client counts what it relayed", || {
        client.stats()[0].to_target_datagrams == count
    })
    .await;
    let stats = &client.stats()[0];
    let bytes: usize = relayed.iter().map(Vec::len).sum();
    assert_eq!(stats.to_target_bytes, 4 + bytes as u64);
    assert_eq!(stats.dropped.oversize, 1);
}

// A current-thread runtime, so the target's replies all wait in the node's flow socket before
// its reply task runs: it takes them a batch of buffers at a time, and the client a run of equal
// sizes at a time.
// r[verify forward.batch]
#[tokio::test]
async fn a_burst_of_replies_of_mixed_sizes_arrives_whole_in_order_and_counted() {
    let Warmed {
        dir: _dir,
        server,
        target,
        client,
        peer,
        flow,
        ..
    } = warmed_forward_to_a_silent_target().await;
    // Sizes that differ from one reply to the next, with runs of equal ones and empty ones.
    let sizes = [10usize, 300, 0, 7, 7, 7, 512, 1, 1, 100, 0, 64];
    let replies: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &size)| (0..size).map(|j| (31 * i + j) as u8).collect())
        .collect();
    for reply in &replies {
        // Not awaited: no task of the relay runs before all of them wait at the node.
        target.try_send_to(reply, flow).expect("reply");
    }
    let mut buf = vec![0u8; 65_536];
    let mut received = Vec::new();
    while received.len() < replies.len() {
        match tokio::time::timeout(WAIT, peer.recv_from(&mut buf)).await {
            Ok(Ok((n, _))) => received.push(buf[..n].to_vec()),
            _ => break,
        }
    }
    assert_eq!(received, replies, "every reply, whole and in order");
    let counted = (replies.len() as u64, sizes.iter().sum::<usize>() as u64);
    let replies_of = |stats: &holdfast_forward::ForwardStats| {
        (stats.from_target_datagrams, stats.from_target_bytes)
    };
    eventually("the node counted the replies", || {
        replies_of(&server.forwards()[0].stats) == counted
    })
    .await;
    eventually("the client counted the replies", || {
        replies_of(&client.stats()[0]) == counted
    })
    .await;
}

// A current-thread runtime, so the two datagrams below travel together: both wait in the
// client's local socket before its relay task runs, that task hands both to the connection
// before its driver runs, so they leave in one QUIC packet, and the node's relay takes both in
// one wakeup: the batch in which the second peer's new flow evicts the first's.
// r[verify forward.flows+2]
#[tokio::test]
async fn a_datagram_gathered_for_a_flow_that_an_eviction_ends_in_the_same_batch_still_leaves() {
    a_gathered_datagram_leaves_before_its_flow_gives_way(|_| {}).await;
}

// The same batch on a node with one flow socket: the new peer's flow takes the socket of the
// flow that gave way, and only once what that flow had gathered has left through it.
// r[verify forward.limits.flow-sockets+3]
#[tokio::test]
async fn a_flow_socket_handed_on_within_a_batch_first_sends_what_its_flow_gathered() {
    a_gathered_datagram_leaves_before_its_flow_gives_way(|node| node.max_flow_sockets = 1).await;
}

/// On a node bounded to one flow per forward (and as `node` adjusts it), where every flow counts
/// as idle at once: peer a's datagram and peer b's arrive in one batch, b's new flow evicting a's,
/// and both reach the target, a's first, none dropped, and one socket is held at the end.
#[allow(clippy::expect_used)]
async fn a_gathered_datagram_leaves_before_its_flow_gives_way(
    node: impl FnOnce(&mut holdfast_forward::ServerConfig),
) {
    let Warmed {
        dir: _dir,
        server,
        target,
        client: _client,
        local,
        peer: _warm,
        ..
    } = warmed_forward_to_a_silent_target_with(|config| {
        config.max_flows = 1;
        config.flow_idle = Duration::ZERO;
        node(config);
    })
    .await;
    // Blocking sockets: both sends are done before any task of the runtime runs again.
    let (a, b) = (std_peer(), std_peer());
    a.send_to(b"from a", local).expect("send a");
    b.send_to(b"from b", local).expect("send b");
    let mut buf = vec![0u8; 65_536];
    // a's first: gathered before b's new flow evicted a's flow, it must leave before that.
    for sent in [&b"from a"[..], b"from b"] {
        let (n, _) = tokio::time::timeout(WAIT, target.recv_from(&mut buf))
            .await
            .expect("a datagram in time")
            .expect("recv");
        assert_eq!(&buf[..n], sent);
    }
    eventually("the node counted the warm-up, a's and b's", || {
        server.forwards()[0].stats.to_target_datagrams == 3
    })
    .await;
    assert_eq!(server.forwards()[0].stats.dropped.flow_limit, 0);
    assert_eq!(
        server.flow_sockets(),
        1,
        "the evicted flows' sockets were given back"
    );
}

#[allow(clippy::expect_used)]
fn std_peer() -> std::net::UdpSocket {
    std::net::UdpSocket::bind(loopback()).expect("bind peer")
}

/// A forward to a target that reads but never answers, with one `warm` datagram already relayed
/// through it and read at the target, so the flow exists before a test's burst.
struct Warmed {
    dir: tempfile::TempDir,
    server: holdfast_forward::Server,
    target: tokio::net::UdpSocket,
    client: client::Forwarding,
    local: std::net::SocketAddr,
    peer: tokio::net::UdpSocket,
    /// The node's socket of `peer`'s flow, as the target sees it: where a reply goes.
    flow: std::net::SocketAddr,
}

async fn warmed_forward_to_a_silent_target() -> Warmed {
    warmed_forward_to_a_silent_target_with(|_| {}).await
}

/// The same, on a node whose configuration `node` has adjusted.
#[allow(clippy::expect_used)]
async fn warmed_forward_to_a_silent_target_with(
    node: impl FnOnce(&mut holdfast_forward::ServerConfig),
) -> Warmed {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = server_config(dir.path(), loopback());
    node(&mut config);
    let server = holdfast_forward::start(config)
        .await
        .expect("server starts");
    let target = tokio::net::UdpSocket::bind(loopback())
        .await
        .expect("target");
    let mut client = client::spawn(client_config(
        &server,
        &[target.local_addr().expect("addr")],
    ))
    .await
    .expect("client");
    opened(&mut client, 1).await;
    let local = client.local_addrs()[0];
    let peer = peer().await;
    assert_eq!(
        try_round_trip(&peer, local, b"warm", 1).await,
        None,
        "the target does not answer"
    );
    let mut buf = vec![0u8; 65_536];
    let (n, flow) = tokio::time::timeout(WAIT, target.recv_from(&mut buf))
        .await
        .expect("warm-up arrives")
        .expect("recv");
    assert_eq!(&buf[..n], b"warm");
    Warmed {
        dir,
        server,
        target,
        client,
        local,
        peer,
        flow,
    }
}
