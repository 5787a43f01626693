//! The node's flow sockets against a connection that churns or hogs them: idle flows are swept
//! everywhere, and a connection gives back what it holds beyond its share while another waits.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::*;
use holdfast_forward::client;

/// A node with two flow sockets in all, sweeping every `sweep`, and one client's forward holding
/// both (peers `a1`, `a2`); returns the node, the client, its peers, its target.
async fn two_sockets_held(
    dir: &std::path::Path,
    sweep: Duration,
) -> (
    holdfast_forward::Server,
    client::Forwarding,
    [tokio::net::UdpSocket; 2],
    Echo,
) {
    let mut config = server_config(dir, loopback());
    config.max_flow_sockets = 2;
    config.flow_idle = Duration::from_secs(1);
    config.flow_sweep = sweep;
    let server = holdfast_forward::start(config).await.expect("server");
    let target = echo().await;
    let mut hog = client::spawn(client_config(&server, &[target.addr]))
        .await
        .expect("client");
    opened(&mut hog, 1).await;
    let local = hog.local_addrs()[0];
    let peers = [peer().await, peer().await];
    for (i, peer) in peers.iter().enumerate() {
        let payload = format!("a{i}");
        assert_eq!(
            round_trip(peer, local, payload.as_bytes()).await,
            payload.as_bytes()
        );
    }
    assert_eq!(server.flow_sockets(), 2);
    (server, hog, peers, target)
}

/// Keeps `peers`' flows through the forward at `local` busy (a datagram each every 50 ms) until
/// the returned task is aborted.
fn keep_busy(
    peers: [tokio::net::UdpSocket; 2],
    local: std::net::SocketAddr,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            for peer in &peers {
                let _ = peer.send_to(b"busy", local).await;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
}

// r[verify forward.flows.sweep]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_flows_of_one_connection_give_their_sockets_to_another() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (server, _hog, _peers, target) = two_sockets_held(dir.path(), Duration::from_secs(1)).await;
    let hog = server.forwards()[0].connection;
    // The first connection's flows go idle, well within its forward's flow bound, and nobody
    // waits for a socket: the sweep alone ends them and gives the node's sockets back.
    eventually("the idle flows swept", || {
        server.flow_sockets() == 0
            && server
                .forwards()
                .iter()
                .filter(|f| f.connection == hog)
                .all(|f| f.flows == 0)
    })
    .await;
    // ... so a second connection's peer is relayed.
    let mut other = client::spawn(client_config(&server, &[target.addr]))
        .await
        .expect("client");
    opened(&mut other, 1).await;
    let b = peer().await;
    let reply = try_round_trip(&b, other.local_addrs()[0], b"b", 20).await;
    assert_eq!(reply.as_deref(), Some(&b"b"[..]), "{:?}", server.forwards());
}

// r[verify forward.limits.flow-sockets+3]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_connection_gives_back_its_sockets_beyond_its_share_to_one_that_waits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (server, hog, peers, target) = two_sockets_held(dir.path(), Duration::from_secs(1)).await;
    // The first connection keeps both its flows busy.
    let local = hog.local_addrs()[0];
    let busy = keep_busy(peers, local);
    let mut other = client::spawn(client_config(&server, &[target.addr]))
        .await
        .expect("client");
    opened(&mut other, 1).await;
    let b = peer().await;
    let reply = try_round_trip(&b, other.local_addrs()[0], b"b", 20).await;
    busy.abort();
    assert_eq!(reply.as_deref(), Some(&b"b"[..]), "{:?}", server.forwards());
    let flows: Vec<_> = server.forwards().iter().map(|f| f.flows).collect();
    assert!(
        flows.iter().all(|f| *f >= 1),
        "each has its share: {flows:?}"
    );
    assert!(server.flow_sockets() <= 2);
}

// r[verify forward.limits.flow-sockets+3]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_starts_waiting_gets_its_share_without_waiting_for_a_sweep() {
    let dir = tempfile::tempdir().expect("tempdir");
    // No sweep inside the test: only the wake-up of a connection that starts waiting can make
    // the busy one give back.
    let (server, hog, peers, target) =
        two_sockets_held(dir.path(), Duration::from_secs(3600)).await;
    let local = hog.local_addrs()[0];
    let busy = keep_busy(peers, local);
    let mut other = client::spawn(client_config(&server, &[target.addr]))
        .await
        .expect("client");
    opened(&mut other, 1).await;
    let b = peer().await;
    let reply = try_round_trip(&b, other.local_addrs()[0], b"b", 20).await;
    busy.abort();
    assert_eq!(reply.as_deref(), Some(&b"b"[..]), "{:?}", server.forwards());
    assert!(server.flow_sockets() <= 2);
}

// r[verify forward.flows.reply-buffers]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_answering_flows_share_a_few_reply_buffers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = holdfast_forward::start(server_config(dir.path(), loopback()))
        .await
        .expect("server");
    let target = echo().await;
    let mut client = client::spawn(client_config(&server, &[target.addr]))
        .await
        .expect("client");
    opened(&mut client, 1).await;
    let local = client.local_addrs()[0];
    // 200 flows, each answered by its target: each used to keep its own 128 KiB for its life.
    let mut peers = Vec::new();
    for i in 0..200 {
        let p = peer().await;
        let payload = format!("flow {i}");
        let reply = try_round_trip(&p, local, payload.as_bytes(), 20).await;
        assert_eq!(reply.as_deref(), Some(payload.as_bytes()), "flow {i}");
        peers.push(p);
    }
    assert_eq!(
        server.forwards().iter().map(|f| f.flows).sum::<usize>(),
        200
    );
    let allocated = server.reply_buffers_allocated();
    assert!(
        (1..=8).contains(&allocated),
        "{allocated} reply buffers for 200 answering flows"
    );
}
