//! Hostile peers on loopback: connections that never authenticate, from many sources, and what a
//! real client still gets meanwhile.

mod common;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use common::*;
use holdfast_forward::client;
use holdfast_forward::identity::SERVER_NAME;

/// A peer that completes the QUIC handshake from `source` (any 127.0.0.x on Linux) and then says
/// nothing: no control stream, no credential.
#[allow(clippy::expect_used)]
async fn silent_peer(
    server: &holdfast_forward::Server,
    source: Ipv4Addr,
) -> Result<(quinn::Connection, quinn::Endpoint), quinn::ConnectionError> {
    let (config, _) = holdfast_forward::client::quinn_client_config(
        server.fingerprint(),
        Duration::from_secs(60),
    )
    .expect("client config");
    let endpoint = quinn::Endpoint::client(SocketAddr::new(IpAddr::V4(source), 0))
        .expect("endpoint on a loopback source");
    let conn = endpoint
        .connect_with(config, server.local_addr().expect("addr"), SERVER_NAME)
        .expect("connect")
        .await?;
    Ok((conn, endpoint))
}

/// Sources 127.0.0.10 and up: none is the real client's 127.0.0.1.
fn hostile_source(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, 10 + i as u8)
}

// r[verify forward.limits.unauthenticated+2]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_client_connects_and_relays_while_96_silent_peers_hold_connections_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = server_config(dir.path(), SocketAddr::from(([127, 0, 0, 1], 0)));
    // Long enough that none of the silent peers is timed out while the test runs: what is
    // measured is the bounds, not the timeout.
    config.auth_timeout = Duration::from_secs(60);
    let server = holdfast_forward::start(config).await.expect("server");
    // 12 sources, 8 silent connections each: more than the 64 places the node once had in all.
    let mut held = Vec::new();
    let mut failed = Vec::new();
    for i in 0..96 {
        match silent_peer(&server, hostile_source(i % 12)).await {
            Ok(peer) => held.push(peer),
            Err(err) => failed.push(err),
        }
    }
    let target = echo().await;
    let mut client = client::spawn(client_config(&server, &[target.addr]))
        .await
        .expect("client");
    opened(&mut client, 1).await;
    let peer = peer().await;
    let reply = round_trip(&peer, client.local_addrs()[0], b"through the flood").await;
    assert_eq!(reply, b"through the flood");
    assert!(
        failed.is_empty(),
        "{} refused: {:?}",
        failed.len(),
        failed.first()
    );
    // Every silent connection is still open: none was the price of the real client.
    for (conn, _) in &held {
        assert!(conn.close_reason().is_none(), "{:?}", conn.close_reason());
    }
    let counted = server.connections();
    assert_eq!(counted.unauthenticated, 96, "{counted:?}");
    // Each address was validated first (the real client's too).
    assert!(counted.retried >= 97, "{counted:?}");
    // A ninth from a source that holds eight is refused, and counted as such; others still get in.
    let ninth = silent_peer(&server, hostile_source(0)).await;
    assert!(
        matches!(
            ninth,
            Err(quinn::ConnectionError::ConnectionClosed(ref close))
                if close.error_code == quinn::TransportErrorCode::CONNECTION_REFUSED
        ),
        "{ninth:?}"
    );
    let counted = server.connections();
    assert_eq!(
        (counted.refused_per_source, counted.refused_unauthenticated),
        (1, 0),
        "{counted:?}"
    );
    let other = silent_peer(&server, hostile_source(12)).await;
    assert!(other.is_ok(), "{other:?}");
    client.stop().await;
}

// r[verify forward.limits.unauthenticated+2]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_completes_its_handshake_and_says_nothing_is_closed_at_the_timeout() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = server_config(dir.path(), SocketAddr::from(([127, 0, 0, 1], 0)));
    config.auth_timeout = Duration::from_millis(500);
    // Two places: one connection that times out does not fill them (which would pace it).
    config.max_unauthenticated_per_source = 2;
    let server = holdfast_forward::start(config).await.expect("server");
    let (conn, _endpoint) = silent_peer(&server, hostile_source(0))
        .await
        .expect("handshake");
    let closed = tokio::time::timeout(WAIT, conn.closed())
        .await
        .expect("closed by the node");
    assert!(closed.to_string().contains("in time"), "{closed}");
    eventually("its place given back", || {
        let counted = server.connections();
        counted.unauthenticated == 0 && counted.timed_out == 1
    })
    .await;
    // Both of the source's places are free again (a lone timeout does not pace it).
    let again = silent_peer(&server, hostile_source(0)).await;
    assert!(again.is_ok(), "{again:?}");
    let twice = silent_peer(&server, hostile_source(0)).await;
    assert!(twice.is_ok(), "{twice:?}");
}

/// A pacing that outlasts the test: a source it paces stays refused while the test looks.
#[allow(clippy::expect_used)]
fn long_pacing() -> holdfast_retry::Policy {
    holdfast_retry::Policy::builder()
        .base(Duration::from_secs(60))
        .cap(Duration::from_secs(60))
        .jitter(holdfast_retry::Jitter::None)
        .build()
        .expect("policy")
}

/// Whether `attempt` was refused before its handshake (a paced or bounded source).
fn refused(attempt: &Result<(quinn::Connection, quinn::Endpoint), quinn::ConnectionError>) -> bool {
    matches!(
        attempt,
        Err(quinn::ConnectionError::ConnectionClosed(close))
            if close.error_code == quinn::TransportErrorCode::CONNECTION_REFUSED
    )
}

// Each handshake costs the node a signature: a peer that closes once it is done, before
// authenticating, and starts again must be paced like one that presents a bad credential.
// r[verify forward.auth.pacing+3]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handshakes_closed_before_authenticating_are_counted_and_pace_their_source() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = server_config(dir.path(), SocketAddr::from(([127, 0, 0, 1], 0)));
    config.auth_pacing = long_pacing();
    let server = holdfast_forward::start(config).await.expect("server");
    let source = hostile_source(0);
    let (conn, _endpoint) = silent_peer(&server, source).await.expect("handshake");
    conn.close(0u32.into(), b"done");
    eventually("the close counted", || {
        let counted = server.connections();
        counted.closed_unauthenticated == 1 && counted.unauthenticated == 0
    })
    .await;
    // Every further round from the source is refused before its handshake, and counted.
    let mut rounds = Vec::new();
    for _ in 0..10 {
        let attempt = silent_peer(&server, source).await;
        if let Ok((conn, _)) = &attempt {
            conn.close(0u32.into(), b"done");
        }
        rounds.push(refused(&attempt));
    }
    assert!(rounds.iter().all(|r| *r), "{rounds:?}");
    let counted = server.connections();
    assert_eq!(
        (counted.closed_unauthenticated, counted.refused_paced),
        (1, 10),
        "{counted:?}"
    );
    // Another source is not paced.
    let other = silent_peer(&server, hostile_source(1)).await;
    assert!(other.is_ok(), "{other:?}");
}

// A slow client may share its address (a NAT) with good ones: running out of the
// authentication timeout is counted, but its source is not paced.
// r[verify forward.auth.pacing+3]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_runs_out_of_time_does_not_pace_its_source() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = server_config(dir.path(), SocketAddr::from(([127, 0, 0, 1], 0)));
    // Room for a handshake on a busy machine; the test waits this out twice.
    config.auth_timeout = Duration::from_secs(1);
    config.auth_pacing = long_pacing();
    let server = holdfast_forward::start(config).await.expect("server");
    let source = hostile_source(0);
    // Out of time before its control stream.
    let (silent, _a) = silent_peer(&server, source).await.expect("handshake");
    let closed = tokio::time::timeout(WAIT, silent.closed())
        .await
        .expect("closed by the node");
    assert!(closed.to_string().contains("in time"), "{closed}");
    // Out of time on its control stream, its Hello not yet whole (half a length prefix).
    let (slow, _b) = silent_peer(&server, source).await.expect("handshake");
    let (mut send, _recv) = slow.open_bi().await.expect("control stream");
    send.write_all(&[0, 0]).await.expect("written");
    let closed = tokio::time::timeout(WAIT, slow.closed())
        .await
        .expect("closed by the node");
    assert!(closed.to_string().contains("in time"), "{closed}");
    eventually("both timeouts counted", || {
        let counted = server.connections();
        counted.timed_out == 2 && counted.unauthenticated == 0
    })
    .await;
    // The source is let in at once.
    let again = silent_peer(&server, source).await;
    assert!(again.is_ok(), "{again:?}");
    let counted = server.connections();
    assert_eq!(
        (counted.refused_paced, counted.auth_failed),
        (0, 0),
        "{counted:?}"
    );
}

// A source that fills its places with connections that never authenticate and lets them run out
// of time would otherwise hold them for good, refilled at once: its timeouts pace it.
// r[verify forward.auth.pacing+3]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_whose_connections_time_out_while_holding_all_its_places_is_paced() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = server_config(dir.path(), SocketAddr::from(([127, 0, 0, 1], 0)));
    config.auth_timeout = Duration::from_secs(1);
    config.max_unauthenticated_per_source = 2;
    config.auth_pacing = long_pacing();
    let server = holdfast_forward::start(config).await.expect("server");
    let source = hostile_source(0);
    let (a, _a) = silent_peer(&server, source).await.expect("handshake");
    let (b, _b) = silent_peer(&server, source).await.expect("handshake");
    for conn in [&a, &b] {
        let closed = tokio::time::timeout(WAIT, conn.closed())
            .await
            .expect("closed by the node");
        assert!(closed.to_string().contains("in time"), "{closed}");
    }
    eventually("both timeouts counted", || {
        let counted = server.connections();
        counted.timed_out == 2 && counted.unauthenticated == 0
    })
    .await;
    let again = silent_peer(&server, source).await;
    assert!(refused(&again), "{:?}", again.as_ref().err());
    assert_eq!(server.connections().refused_paced, 1);
    // Another source is not paced.
    let other = silent_peer(&server, hostile_source(1)).await;
    assert!(other.is_ok(), "{other:?}");
}

// A peer that had the node sign its handshake flight and then closes the handshake (here: it
// rejects the node's certificate) is paced, or it could have the node sign without end.
// r[verify forward.auth.pacing+3]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_closes_during_its_handshake_is_counted_and_paced() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = server_config(dir.path(), SocketAddr::from(([127, 0, 0, 1], 0)));
    config.auth_pacing = long_pacing();
    let server = holdfast_forward::start(config).await.expect("server");
    let source = hostile_source(0);
    let wrong = holdfast_forward::identity::Fingerprint([0; 32]);
    let (client, _) = holdfast_forward::client::quinn_client_config(wrong, Duration::from_secs(60))
        .expect("client config");
    let endpoint =
        quinn::Endpoint::client(SocketAddr::new(IpAddr::V4(source), 0)).expect("endpoint");
    let attempt = endpoint
        .connect_with(client, server.local_addr().expect("addr"), SERVER_NAME)
        .expect("connect")
        .await;
    assert!(attempt.is_err(), "{attempt:?}");
    eventually("the failed handshake counted", || {
        let counted = server.connections();
        counted.handshake_failed == 1 && counted.unauthenticated == 0
    })
    .await;
    let again = silent_peer(&server, source).await;
    assert!(refused(&again), "{:?}", again.as_ref().err());
    assert_eq!(server.connections().refused_paced, 1);
}

// A peer that advertises a tiny idle timeout and goes silent loses its connection (a timeout of
// its own making: the node's idle timeout is longer than the authentication timeout) before its
// control stream: counted and paced.
// r[verify forward.auth.pacing+3]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_idles_out_before_authenticating_is_counted_and_paced() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = server_config(dir.path(), SocketAddr::from(([127, 0, 0, 1], 0)));
    config.auth_pacing = long_pacing();
    let server = holdfast_forward::start(config).await.expect("server");
    let source = hostile_source(0);
    let (mut client, _) = holdfast_forward::client::quinn_client_config(
        server.fingerprint(),
        Duration::from_secs(60),
    )
    .expect("client config");
    let mut transport = quinn::TransportConfig::default();
    transport.max_idle_timeout(Some(Duration::from_millis(1).try_into().expect("idle")));
    client.transport_config(std::sync::Arc::new(transport));
    let endpoint =
        quinn::Endpoint::client(SocketAddr::new(IpAddr::V4(source), 0)).expect("endpoint");
    let attempt = endpoint
        .connect_with(client, server.local_addr().expect("addr"), SERVER_NAME)
        .expect("connect")
        .await;
    // Whether the handshake completes before the idle timeout does is the peer's luck; either
    // way the connection is lost before authenticating.
    if let Ok(conn) = &attempt {
        let _ = tokio::time::timeout(WAIT, conn.closed()).await;
    }
    eventually("the loss counted", || {
        let counted = server.connections();
        counted.closed_unauthenticated + counted.handshake_failed == 1
            && counted.unauthenticated == 0
    })
    .await;
    let again = silent_peer(&server, source).await;
    assert!(refused(&again), "{:?}", again.as_ref().err());
    assert_eq!(server.connections().timed_out, 0);
}

// A peer that completes its handshake and then sends from another (forged) address cannot get
// that address paced: the node does not follow a migration, and a failure is charged to the
// source the connection was admitted under.
// r[verify forward.auth.pacing+3]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_moves_to_another_address_cannot_get_it_paced() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = server_config(dir.path(), SocketAddr::from(([127, 0, 0, 1], 0)));
    config.auth_timeout = Duration::from_secs(1);
    config.auth_pacing = long_pacing();
    let server = holdfast_forward::start(config).await.expect("server");
    let (conn, endpoint) = silent_peer(&server, hostile_source(0))
        .await
        .expect("handshake");
    let victim = hostile_source(1);
    let socket = std::net::UdpSocket::bind(SocketAddr::new(IpAddr::V4(victim), 0)).expect("bind");
    endpoint.rebind(socket).expect("rebind");
    // A request that is not a Hello, from the victim's address.
    if let Ok((mut send, _recv)) = conn.open_bi().await {
        let _ = send.write_all(&[0, 0, 0, 3, 0xff, 0xff, 0xff]).await;
        let _ = send.finish();
    }
    let _ = tokio::time::timeout(WAIT, conn.closed()).await;
    eventually("the connection ended", || {
        server.connections().unauthenticated == 0
    })
    .await;
    let attempt = silent_peer(&server, victim).await;
    assert!(attempt.is_ok(), "the victim was paced: {attempt:?}");
}

// r[verify forward.limits.windows]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn datagrams_sent_before_authentication_are_dropped_not_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = server(dir.path()).await;
    let (conn, _endpoint) = silent_peer(&server, hostile_source(0))
        .await
        .expect("handshake");
    for _ in 0..10 {
        conn.send_datagram(bytes::Bytes::from_static(&[0x01, 0x00, b'x']))
            .expect("datagrams are on");
    }
    // Read and dropped while the node waits for a Hello, so they do not sit in the connection's
    // datagram buffer until it authenticates or times out.
    eventually("the datagrams dropped", || {
        server.connections().dropped_unauthenticated >= 1
    })
    .await;
    assert!(server.forwards().is_empty());
}

// r[verify forward.limits.per-credential+2]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bound_of_zero_is_refused_at_start_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = server_config(dir.path(), SocketAddr::from(([127, 0, 0, 1], 0)));
    config.max_per_credential = 0;
    let err = holdfast_forward::start(config)
        .await
        .expect_err("a bound of zero");
    assert_eq!(
        err.to_string(),
        "forward configuration: max_per_credential must be greater than zero"
    );
}
