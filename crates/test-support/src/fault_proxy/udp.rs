//! The UDP side of the fault proxy: forwards datagrams per client, counts them, or drops them.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::net::UdpSocket;
use tokio::sync::Notify;
use tokio::task::{JoinHandle, JoinSet};

/// How the UDP proxy treats datagrams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UdpMode {
    /// Relay client datagrams to the upstream and its replies back to that client.
    Forward,
    /// Drop datagrams in both directions (counted as dropped), like a black-holed path.
    Drop,
}

/// Datagram counts so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UdpStats {
    /// Datagrams received from clients (in any mode).
    pub from_clients: u64,
    /// Client datagrams sent on to the upstream.
    pub forwarded: u64,
    /// Upstream replies delivered back to their client.
    pub replies: u64,
    /// Datagrams dropped, in either direction (by `Drop` mode or a failed send).
    pub dropped: u64,
}

#[derive(Default)]
struct Counters {
    from_clients: AtomicU64,
    forwarded: AtomicU64,
    replies: AtomicU64,
    dropped: AtomicU64,
    dropping: AtomicBool,
    counted: Notify,
}

impl Counters {
    fn bump(&self, counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::SeqCst);
        self.counted.notify_waiters();
    }

    fn stats(&self) -> UdpStats {
        UdpStats {
            from_clients: self.from_clients.load(Ordering::SeqCst),
            forwarded: self.forwarded.load(Ordering::SeqCst),
            replies: self.replies.load(Ordering::SeqCst),
            dropped: self.dropped.load(Ordering::SeqCst),
        }
    }
}

/// A UDP fault proxy in front of one upstream address; each client address gets its own upstream
/// socket so replies find their way back. Dropping it stops relaying.
pub struct UdpFaultProxy {
    addr: SocketAddr,
    upstream: SocketAddr,
    counters: Arc<Counters>,
    task: JoinHandle<()>,
}

impl std::fmt::Debug for UdpFaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdpFaultProxy")
            .field("addr", &self.addr)
            .field("upstream", &self.upstream)
            .field("stats", &self.stats())
            .finish()
    }
}

impl UdpFaultProxy {
    /// Starts a proxy on a free loopback port, relaying to `upstream`. Needs a tokio runtime.
    pub async fn start(upstream: SocketAddr) -> io::Result<Self> {
        let front = Arc::new(UdpSocket::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?);
        let addr = front.local_addr()?;
        let counters = Arc::new(Counters::default());
        let task = tokio::spawn(relay(front, upstream, counters.clone()));
        Ok(UdpFaultProxy {
            addr,
            upstream,
            counters,
            task,
        })
    }

    /// The proxy's own address: give this to the code under test.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Switches the mode; datagrams handled after this returns see the new mode.
    // i[impl harness.fault-proxy.udp]
    pub fn set_mode(&self, mode: UdpMode) {
        self.counters
            .dropping
            .store(mode == UdpMode::Drop, Ordering::SeqCst);
    }

    /// The counts so far.
    pub fn stats(&self) -> UdpStats {
        self.counters.stats()
    }

    /// Waits until `done(stats)` holds or `timeout` passes; returns the stats at that point.
    pub async fn wait_until(
        &self,
        timeout: Duration,
        done: impl Fn(&UdpStats) -> bool,
    ) -> UdpStats {
        let wait = async {
            loop {
                let notified = self.counters.counted.notified();
                if done(&self.stats()) {
                    return;
                }
                notified.await;
            }
        };
        let _ = tokio::time::timeout(timeout, wait).await;
        self.stats()
    }
}

impl Drop for UdpFaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn relay(front: Arc<UdpSocket>, upstream: SocketAddr, counters: Arc<Counters>) {
    let mut sessions: HashMap<SocketAddr, Arc<UdpSocket>> = HashMap::new();
    let mut replies = JoinSet::new();
    let mut buf = vec![0u8; 65_536];
    loop {
        let (n, peer) = match front.recv_from(&mut buf).await {
            Ok(received) => received,
            // A receive error concerns one datagram (or an ICMP report); the relay goes on.
            Err(_) => continue,
        };
        counters.bump(&counters.from_clients);
        if counters.dropping.load(Ordering::SeqCst) {
            counters.bump(&counters.dropped);
            continue;
        }
        let session = match sessions.get(&peer) {
            Some(session) => session.clone(),
            None => match open_session(upstream).await {
                Ok(session) => {
                    let session = Arc::new(session);
                    sessions.insert(peer, session.clone());
                    replies.spawn(relay_replies(
                        session.clone(),
                        front.clone(),
                        peer,
                        counters.clone(),
                    ));
                    session
                }
                Err(_) => {
                    counters.bump(&counters.dropped);
                    continue;
                }
            },
        };
        match session.send(&buf[..n]).await {
            Ok(_) => counters.bump(&counters.forwarded),
            Err(_) => counters.bump(&counters.dropped),
        }
    }
}

async fn open_session(upstream: SocketAddr) -> io::Result<UdpSocket> {
    let socket = UdpSocket::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    socket.connect(upstream).await?;
    Ok(socket)
}

async fn relay_replies(
    session: Arc<UdpSocket>,
    front: Arc<UdpSocket>,
    peer: SocketAddr,
    counters: Arc<Counters>,
) {
    let mut buf = vec![0u8; 65_536];
    loop {
        let n = match session.recv(&mut buf).await {
            Ok(n) => n,
            // ECONNREFUSED from an ICMP port-unreachable is reported once; the socket stays usable.
            Err(_) => continue,
        };
        if counters.dropping.load(Ordering::SeqCst) {
            counters.bump(&counters.dropped);
            continue;
        }
        match front.send_to(&buf[..n], peer).await {
            Ok(_) => counters.bump(&counters.replies),
            Err(_) => counters.bump(&counters.dropped),
        }
    }
}
