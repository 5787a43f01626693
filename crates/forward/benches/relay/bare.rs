//! The floor under the forward: the least a UDP forward over quinn datagrams can do, to tell the
//! cost of what a forward is (four more UDP hops than raw quinn: app to client, node to target,
//! target to node, client to app) from the cost of holdfast's relay (its framing, flows, access,
//! counters and tasks). Measured after the forward in every run but a profiled one
//! (`i[bench.forward.floor]`): reported, never judged.
//!
//! One flow, no header, no authentication, no flow table: the client's side takes what the app
//! sends on one socket (recvmmsg with GRO) and queues each (non-empty) datagram on the quinn
//! connection; the node's side takes up to the forward's [`DRAIN`] datagrams quinn has queued per wakeup and
//! sends them to the target on a connected socket (GSO); the target's replies come back the same
//! way. Endpoints made as raw quinn's are (TLS, transport settings, sockets), the bench's batched
//! sockets, and the forward's own ways with them (one allocation per received batch; the CPU
//! offered to the local target after a burst): what is left out is what the forward does besides
//! moving datagrams. Being a floor, it takes quinn-udp's full batch (32 buffers) at both of its
//! receives and the bench's 4 MiB socket buffers; the forward's own choices (16 buffers at the
//! client's local socket, 2 at a flow's, a flow socket's 1 MiB) count as what the relay adds.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::BytesMut;
use holdfast_forward::DRAIN;
use holdfast_forward::server::BURST;
use tokio::runtime::Handle;
use tokio::task::JoinHandle;

use crate::batched::{Batched, RecvBufs, datagrams};
use crate::{Path, loopback, ready_now};

/// A bare relay from a local socket to `target` over `connected` (the client's side, on
/// `client_side`) and `accepted` (the node's side, on `node`); the app's path to it and its tasks.
pub fn path(
    connected: quinn::Connection,
    accepted: quinn::Connection,
    target: SocketAddr,
    node: &Handle,
    client_side: &Handle,
) -> (Path, Vec<JoinHandle<()>>) {
    let local = {
        let _enter = client_side.enter();
        Arc::new(Batched::bind(loopback(), None).expect("bare local"))
    };
    let towards = {
        let _enter = node.enter();
        Arc::new(Batched::bind(loopback(), Some(target)).expect("bare target socket"))
    };
    let local_addr = local.local_addr();
    let app_addr = Arc::new(Mutex::new(None::<SocketAddr>));
    let tasks = vec![
        client_side.spawn(up(local.clone(), connected.clone(), Some(app_addr.clone()))),
        client_side.spawn(down(connected, local, Destination::App(app_addr))),
        node.spawn(down(
            accepted.clone(),
            towards.clone(),
            Destination::Target(target),
        )),
        node.spawn(up(towards, accepted, None)),
    ];
    // The app's socket, on the app's runtime (the caller's), as the forward's app is.
    let app = Batched::bind(loopback(), Some(local_addr)).expect("bare app");
    (Path::Forward(Arc::new(app), local_addr), tasks)
}

/// Socket to connection: every datagram of every received batch, one `send_datagram` each, all
/// of a batch from one allocation (as the forward's sides do); remembers the last sender in
/// `from` (the app, on the client's side; the node's side has one target and no need).
async fn up(
    socket: Arc<Batched>,
    conn: quinn::Connection,
    from: Option<Arc<Mutex<Option<SocketAddr>>>>,
) {
    let mut bufs = RecvBufs::new();
    let mut out = BytesMut::new();
    while let Ok(filled) = socket.recv(&mut bufs).await {
        out.reserve(bufs.buffers(filled).map(|(_, _, data)| data.len()).sum());
        for (addr, stride, data) in bufs.buffers(filled) {
            if let Some(from) = &from {
                *from.lock().expect("sender") = Some(addr);
            }
            for one in datagrams(data, stride) {
                out.extend_from_slice(one);
                let _ = conn.send_datagram(out.split().freeze());
            }
        }
    }
}

/// Where a side sends what comes out of the connection.
enum Destination {
    /// The app, once it has sent something.
    App(Arc<Mutex<Option<SocketAddr>>>),
    /// The target, on this machine: after a burst (one send of [`BURST`]) the node's side gives
    /// it the CPU, as the forward does towards a local target (`r[forward.target.local]`).
    Target(SocketAddr),
}

/// Connection to socket: everything quinn has queued, runs of equal sizes gathered into one GSO
/// send each.
async fn down(conn: quinn::Connection, socket: Arc<Batched>, to: Destination) {
    let mut run: Vec<u8> = Vec::with_capacity(64 * 1024);
    let mut stride = 0;
    while let Ok(first) = conn.read_datagram().await {
        let Some(dest) = (match &to {
            Destination::App(app) => *app.lock().expect("app"),
            Destination::Target(addr) => Some(*addr),
        }) else {
            continue;
        };
        let send = async |run: &mut Vec<u8>, stride: usize| {
            let _ = socket.send(dest, run, stride).await;
            if matches!(to, Destination::Target(_)) && run.len() >= BURST {
                std::thread::yield_now();
            }
            run.clear();
        };
        let mut next = Some(first);
        let mut taken = 0;
        while let Some(d) = next.take() {
            taken += 1;
            // As many as one GSO send of the bench's sockets carries.
            let full = run.len() / stride.max(1) >= socket.per_send(stride);
            if !run.is_empty() && (d.len() != stride || full) {
                send(&mut run, stride).await;
            }
            stride = d.len();
            run.extend_from_slice(&d);
            if taken < DRAIN {
                next = ready_now(conn.read_datagram()).and_then(Result::ok);
            }
        }
        if !run.is_empty() {
            send(&mut run, stride).await;
        }
    }
}
