//! Raw quinn datagrams against the same load through a holdfast forward, in one run, on loopback.
//!
//! `cargo bench -p holdfast-forward --bench relay` prints a table and writes
//! `target/bench/forward.json`. Throughput is one-way (sender to receiver) for a fixed time at 64
//! and 1162 payload bytes, with a bounded window of datagrams in flight on both paths; latency is a
//! ping-pong round trip, raw against through the forward.
//! Numbers, never assertions.

// Bench harness code: a broken setup should stop the run loudly.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use holdfast_forward::client::{self, ClientConfig, ClientEvent, ForwardSpec};
use holdfast_forward::identity::{Identity, SERVER_NAME};
use holdfast_forward::server::quinn_server_config;
use holdfast_forward::{AllowList, Credential, ServerConfig};
use tokio::net::UdpSocket;

const RUN: Duration = Duration::from_secs(2);
const PINGS: usize = 2000;
const IDLE: Duration = Duration::from_secs(10);

fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

struct Throughput {
    sent: u64,
    received: u64,
    secs: f64,
}

impl Throughput {
    fn per_sec(&self) -> f64 {
        self.received as f64 / self.secs
    }
    fn mbit(&self, size: usize) -> f64 {
        self.per_sec() * size as f64 * 8.0 / 1e6
    }
    fn loss(&self) -> f64 {
        if self.sent == 0 {
            0.0
        } else {
            1.0 - self.received as f64 / self.sent as f64
        }
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Two bare quinn endpoints with the crate's own TLS and transport settings.
async fn raw_pair(
    dir: &std::path::Path,
) -> (quinn::Endpoint, quinn::Connection, quinn::Connection) {
    let identity = Identity::load_or_create(dir).expect("identity");
    let server = quinn::Endpoint::server(
        quinn_server_config(&identity, IDLE).expect("server config"),
        loopback(),
    )
    .expect("server endpoint");
    let addr = server.local_addr().expect("addr");
    let (config, _) = client::quinn_client_config(identity.fingerprint(), IDLE).expect("client");
    let client = quinn::Endpoint::client(loopback()).expect("client endpoint");
    let connecting = client
        .connect_with(config, addr, SERVER_NAME)
        .expect("connect");
    let (accepted, connected) = tokio::join!(
        async {
            server
                .accept()
                .await
                .expect("incoming")
                .await
                .expect("accepted")
        },
        async { connecting.await.expect("connected") }
    );
    drop(server);
    (client, connected, accepted)
}

/// At most this many datagrams in flight (sent, not yet received): a closed loop that measures
/// what the path carries instead of how much a flood overflows its buffers.
const WINDOW: u64 = 256;

async fn windowed(received: &AtomicU64, mut send: impl AsyncFnMut() -> bool) -> Throughput {
    let start = Instant::now();
    let mut sent = 0u64;
    let mut stalled_since: Option<Instant> = None;
    while start.elapsed() < RUN {
        if sent.saturating_sub(received.load(Ordering::Relaxed)) >= WINDOW {
            // A lost datagram never comes back: after 5 ms without progress, go on regardless.
            let since = *stalled_since.get_or_insert_with(Instant::now);
            if since.elapsed() < Duration::from_millis(5) {
                tokio::task::yield_now().await;
                continue;
            }
        }
        stalled_since = None;
        if send().await {
            sent += 1;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_millis(200)).await;
    Throughput {
        sent,
        received: received.load(Ordering::Relaxed),
        secs,
    }
}

async fn raw_throughput(tx: &quinn::Connection, rx: &quinn::Connection, size: usize) -> Throughput {
    let received = Arc::new(AtomicU64::new(0));
    let counter = received.clone();
    let rx = rx.clone();
    let reader = tokio::spawn(async move {
        while rx.read_datagram().await.is_ok() {
            counter.fetch_add(1, Ordering::Relaxed);
        }
    });
    let payload = Bytes::from(vec![0u8; size]);
    let result = windowed(&received, async || {
        tx.send_datagram(payload.clone()).is_ok()
    })
    .await;
    reader.abort();
    result
}

async fn raw_latency(tx: &quinn::Connection, rx: &quinn::Connection) -> Vec<Duration> {
    let echo_conn = rx.clone();
    let echo = tokio::spawn(async move {
        while let Ok(d) = echo_conn.read_datagram().await {
            let _ = echo_conn.send_datagram(d);
        }
    });
    let mut rtts = Vec::with_capacity(PINGS);
    for _ in 0..PINGS {
        let start = Instant::now();
        if tx.send_datagram(Bytes::from_static(b"ping")).is_err() {
            continue;
        }
        if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_secs(1), tx.read_datagram()).await {
            rtts.push(start.elapsed());
        }
    }
    echo.abort();
    rtts.sort();
    rtts
}

async fn forward_throughput(local: SocketAddr, sink: Arc<UdpSocket>, size: usize) -> Throughput {
    let received = Arc::new(AtomicU64::new(0));
    let counter = received.clone();
    let reader = tokio::spawn(async move {
        let mut buf = vec![0u8; 65_536];
        while sink.recv(&mut buf).await.is_ok() {
            counter.fetch_add(1, Ordering::Relaxed);
        }
    });
    let sender = UdpSocket::bind(loopback()).await.expect("sender");
    sender.connect(local).await.expect("connect");
    let payload = vec![0u8; size];
    let result = windowed(&received, async || sender.send(&payload).await.is_ok()).await;
    reader.abort();
    result
}

async fn forward_latency(local: SocketAddr) -> Vec<Duration> {
    let peer = UdpSocket::bind(loopback()).await.expect("peer");
    peer.connect(local).await.expect("connect");
    let mut buf = [0u8; 64];
    let mut rtts = Vec::with_capacity(PINGS);
    for _ in 0..PINGS {
        let start = Instant::now();
        if peer.send(b"ping").await.is_err() {
            continue;
        }
        if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_secs(1), peer.recv(&mut buf)).await {
            rtts.push(start.elapsed());
        }
    }
    rtts.sort();
    rtts
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(run());
}

async fn run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut report = serde_json::Map::new();
    let (_raw_endpoint, raw_tx, raw_rx) = raw_pair(dir.path()).await;
    // Let path MTU discovery finish so 1162-byte payloads fit.
    tokio::time::sleep(Duration::from_millis(500)).await;

    // The forward: node, a sink target for throughput, an echo target for latency.
    let sink = Arc::new(UdpSocket::bind(loopback()).await.expect("sink"));
    let echo = UdpSocket::bind(loopback()).await.expect("echo");
    let echo_addr = echo.local_addr().expect("echo addr");
    let echo_task = tokio::spawn(async move {
        let mut buf = vec![0u8; 65_536];
        while let Ok((n, from)) = echo.recv_from(&mut buf).await {
            let _ = echo.send_to(&buf[..n], from).await;
        }
    });
    let mut config = ServerConfig::new(loopback(), dir.path().join("node"));
    config.credentials = vec![Credential::new("bench")];
    config.allow = AllowList::parse(["127.0.0.1:*"]).expect("allow");
    let server = holdfast_forward::start(config).await.expect("node");
    let mut client_config = ClientConfig::new(
        server.local_addr().expect("addr"),
        server.fingerprint(),
        Credential::new("bench"),
    );
    client_config.forwards = vec![
        ForwardSpec {
            local: loopback(),
            target: sink.local_addr().expect("sink addr"),
        },
        ForwardSpec {
            local: loopback(),
            target: echo_addr,
        },
    ];
    let mut forwarding = client::spawn(client_config).await.expect("client");
    let mut open = 0;
    while open < 2 {
        if let Some(ClientEvent::Opened { .. }) = forwarding.next_event().await {
            open += 1;
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (sink_local, echo_local) = (forwarding.local_addrs()[0], forwarding.local_addrs()[1]);

    println!(
        "{:<10} {:>6} {:>12} {:>10} {:>7}",
        "path", "bytes", "datagrams/s", "Mbit/s", "loss"
    );
    for size in [64usize, 1162] {
        let raw = raw_throughput(&raw_tx, &raw_rx, size).await;
        let fwd = forward_throughput(sink_local, sink.clone(), size).await;
        for (name, t) in [("raw", &raw), ("forward", &fwd)] {
            println!(
                "{name:<10} {size:>6} {:>12.0} {:>10.1} {:>6.2}%",
                t.per_sec(),
                t.mbit(size),
                t.loss() * 100.0
            );
        }
        let ratio = fwd.per_sec() / raw.per_sec();
        println!("forward/raw at {size} bytes: {:.0}%", ratio * 100.0);
        report.insert(
            format!("throughput_{size}"),
            serde_json::json!({
                "raw": {"datagrams_per_sec": raw.per_sec(), "mbit_per_sec": raw.mbit(size), "loss": raw.loss()},
                "forward": {"datagrams_per_sec": fwd.per_sec(), "mbit_per_sec": fwd.mbit(size), "loss": fwd.loss()},
                "forward_over_raw": ratio,
            }),
        );
    }
    let raw = raw_latency(&raw_tx, &raw_rx).await;
    let fwd = forward_latency(echo_local).await;
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let (raw50, raw99) = (percentile(&raw, 0.5), percentile(&raw, 0.99));
    let (fwd50, fwd99) = (percentile(&fwd, 0.5), percentile(&fwd, 0.99));
    println!(
        "round trip p50/p99: raw {:.0}/{:.0} µs, forward {:.0}/{:.0} µs, added {:.0}/{:.0} µs",
        us(raw50),
        us(raw99),
        us(fwd50),
        us(fwd99),
        us(fwd50.saturating_sub(raw50)),
        us(fwd99.saturating_sub(raw99))
    );
    report.insert(
        "round_trip_us".into(),
        serde_json::json!({
            "raw": {"p50": us(raw50), "p99": us(raw99)},
            "forward": {"p50": us(fwd50), "p99": us(fwd99)},
            "added": {"p50": us(fwd50.saturating_sub(raw50)), "p99": us(fwd99.saturating_sub(raw99))},
        }),
    );
    echo_task.abort();
    forwarding.stop().await;
    server
        .stop(tokio::time::Instant::now() + Duration::from_secs(2))
        .await
        .ok();
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/bench");
    std::fs::create_dir_all(&out).expect("target/bench");
    let path = out.join("forward.json");
    std::fs::write(&path, serde_json::to_string_pretty(&report).expect("json")).expect("write");
    println!("wrote {}", path.display());
}
