//! Raw quinn datagrams against the same load through a holdfast forward, in one run, on loopback.
//!
//! `cargo bench -p holdfast-forward --bench relay` (or `cargo xtask bench forward`, which adds
//! the targets) prints a table and writes `target/bench/forward.json` (`HOLDFAST_BENCH_OUT`
//! overrides the path; `HOLDFAST_BENCH_QUICK=1` shortens every phase for CI).
//!
//! Both paths are round trips through an echo, driven the same way from the same process:
//! - raw: a quinn client sends datagrams to a quinn server that echoes each one back;
//! - forward: a UDP socket sends to a holdfast forward's local address; the node relays to a UDP
//!   echo target, whose replies come back through the forward.
//!
//! Throughput is a closed loop with the same bounded window of datagrams in flight on both paths,
//! at 64 and 1162 payload bytes. Latency is measured under load: both paths are offered the same
//! paced rate, half of the forward's measured maximum at 64 bytes, and every echo's round trip is
//! timed from a send time carried in its payload. Each phase tags its payloads, so an echo left
//! over from an earlier phase (still queued when that phase ended) is neither counted nor timed.
//! The latency figures are percentiles of each path's round trips; "forward minus raw" is the
//! difference of those percentiles (not a percentile of a per-datagram added latency, which
//! cannot be observed), so it can come out negative when the forward's tail is the tighter one.
//! Numbers, never assertions.

// Bench harness code: a broken setup should stop the run loudly.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};

/// The tag of the next phase; tags start at 1 so an all-zero payload matches none.
static NEXT_TAG: AtomicU64 = AtomicU64::new(1);

/// A fresh tag for one phase's payloads (bytes 8..16; bytes 0..8 carry the send time).
fn next_tag() -> u64 {
    NEXT_TAG.fetch_add(1, Ordering::Relaxed)
}

/// Whether an echo of `n` bytes in `buf` belongs to the phase tagged `tag`.
fn is_ours(buf: &[u8], n: usize, tag: u64) -> bool {
    n >= 16 && buf[8..16] == tag.to_le_bytes()
}
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use holdfast_forward::client::{self, ClientConfig, ClientEvent, ForwardSpec};
use holdfast_forward::identity::{Identity, SERVER_NAME};
use holdfast_forward::server::quinn_server_config;
use holdfast_forward::{AllowList, Credential, ServerConfig};
use tokio::net::UdpSocket;

const IDLE: Duration = Duration::from_secs(10);

/// At most this many datagrams in flight (sent, not yet echoed): a closed loop that measures
/// what the path carries instead of how much a flood overflows its buffers.
const WINDOW: u64 = 256;

fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// How long each phase runs.
#[derive(Clone, Copy)]
struct Phases {
    throughput: Duration,
    latency: Duration,
}

/// One path under test: send a datagram, and a task that counts (and times) the echoes.
#[derive(Clone)]
enum Path {
    Raw(quinn::Connection),
    Forward(Arc<UdpSocket>),
}

impl Path {
    async fn send(&self, payload: &[u8]) -> bool {
        match self {
            Path::Raw(conn) => conn.send_datagram(Bytes::copy_from_slice(payload)).is_ok(),
            Path::Forward(socket) => socket.send(payload).await.is_ok(),
        }
    }

    async fn recv(&self, buf: &mut [u8]) -> Option<usize> {
        match self {
            Path::Raw(conn) => {
                let d = conn.read_datagram().await.ok()?;
                let n = d.len().min(buf.len());
                buf[..n].copy_from_slice(&d[..n]);
                Some(n)
            }
            Path::Forward(socket) => socket.recv(buf).await.ok(),
        }
    }
}

/// Echoes of one phase seen, and (when timing) their round trips.
struct Echoes {
    tag: u64,
    received: AtomicU64,
    rtts: Mutex<Vec<Duration>>,
}

impl Echoes {
    fn new() -> Self {
        Echoes {
            tag: next_tag(),
            received: AtomicU64::new(0),
            rtts: Mutex::new(Vec::new()),
        }
    }
}

fn spawn_reader(
    path: Path,
    epoch: Instant,
    echoes: Arc<Echoes>,
    timed: bool,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65_536];
        while let Some(n) = path.recv(&mut buf).await {
            if !is_ours(&buf, n, echoes.tag) {
                continue;
            }
            echoes.received.fetch_add(1, Ordering::Relaxed);
            if timed {
                let sent = u64::from_le_bytes(buf[..8].try_into().unwrap());
                let rtt = epoch.elapsed().saturating_sub(Duration::from_nanos(sent));
                echoes.rtts.lock().unwrap().push(rtt);
            }
        }
    })
}

struct Measured {
    sent: u64,
    received: u64,
    secs: f64,
    /// Sorted round trips (latency phase only).
    rtts: Vec<Duration>,
}

impl Measured {
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
            (1.0 - self.received as f64 / self.sent as f64).max(0.0)
        }
    }
    fn percentile_us(&self, p: f64) -> f64 {
        if self.rtts.is_empty() {
            return f64::NAN;
        }
        let i = ((self.rtts.len() as f64 - 1.0) * p).round() as usize;
        self.rtts[i.min(self.rtts.len() - 1)].as_secs_f64() * 1e6
    }
}

/// The closed loop: as fast as the window allows, for `run`.
async fn throughput(path: &Path, size: usize, run: Duration) -> Measured {
    let epoch = Instant::now();
    let echoes = Arc::new(Echoes::new());
    let reader = spawn_reader(path.clone(), epoch, echoes.clone(), false);
    let mut payload = vec![0u8; size.max(16)];
    payload[8..16].copy_from_slice(&echoes.tag.to_le_bytes());
    let start = Instant::now();
    let mut sent = 0u64;
    let mut stalled_since: Option<Instant> = None;
    while start.elapsed() < run {
        if sent.saturating_sub(echoes.received.load(Ordering::Relaxed)) >= WINDOW {
            // A lost datagram never comes back: after 5 ms without progress, go on regardless.
            let since = *stalled_since.get_or_insert_with(Instant::now);
            if since.elapsed() < Duration::from_millis(5) {
                tokio::task::yield_now().await;
                continue;
            }
        }
        stalled_since = None;
        if path.send(&payload).await {
            sent += 1;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_millis(200)).await;
    reader.abort();
    Measured {
        sent,
        received: echoes.received.load(Ordering::Relaxed).min(sent),
        secs,
        rtts: Vec::new(),
    }
}

/// The open loop: `rate` datagrams a second, evenly spaced, for `run`; every echo timed.
async fn paced(path: &Path, size: usize, rate: f64, run: Duration) -> Measured {
    let epoch = Instant::now();
    let echoes = Arc::new(Echoes::new());
    let reader = spawn_reader(path.clone(), epoch, echoes.clone(), true);
    let mut payload = vec![0u8; size.max(16)];
    payload[8..16].copy_from_slice(&echoes.tag.to_le_bytes());
    let start = Instant::now();
    let mut sent = 0u64;
    while start.elapsed() < run {
        let due = (start.elapsed().as_secs_f64() * rate) as u64;
        if sent >= due {
            tokio::task::yield_now().await;
            continue;
        }
        let now = epoch.elapsed().as_nanos() as u64;
        payload[..8].copy_from_slice(&now.to_le_bytes());
        if path.send(&payload).await {
            sent += 1;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_millis(200)).await;
    reader.abort();
    let mut rtts = std::mem::take(&mut *echoes.rtts.lock().unwrap());
    rtts.sort();
    Measured {
        sent,
        received: echoes.received.load(Ordering::Relaxed).min(sent),
        secs,
        rtts,
    }
}

/// Two bare quinn endpoints with the crate's own TLS and transport settings; the server side
/// echoes every datagram.
async fn raw_path(dir: &std::path::Path) -> (Path, quinn::Endpoint, tokio::task::JoinHandle<()>) {
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
    let echo = tokio::spawn(async move {
        while let Ok(d) = accepted.read_datagram().await {
            let _ = accepted.send_datagram(d);
        }
    });
    (Path::Raw(connected), client, echo)
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
    let quick = std::env::var_os("HOLDFAST_BENCH_QUICK").is_some_and(|v| v != "0");
    let phases = if quick {
        Phases {
            throughput: Duration::from_millis(600),
            latency: Duration::from_millis(600),
        }
    } else {
        Phases {
            throughput: Duration::from_secs(2),
            latency: Duration::from_secs(2),
        }
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let (raw, _raw_endpoint, raw_echo) = raw_path(dir.path()).await;

    // The forward: a node, a UDP echo target, a client with one forward to it.
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
    client_config.forwards = vec![ForwardSpec {
        local: loopback(),
        target: echo_addr,
    }];
    let mut forwarding = client::spawn(client_config).await.expect("client");
    loop {
        if let Some(ClientEvent::Opened { .. }) = forwarding.next_event().await {
            break;
        }
    }
    let app = UdpSocket::bind(loopback()).await.expect("app");
    app.connect(forwarding.local_addrs()[0])
        .await
        .expect("connect");
    let forward = Path::Forward(Arc::new(app));
    // Let path MTU discovery finish on both connections so 1162-byte payloads fit.
    tokio::time::sleep(Duration::from_millis(if quick { 300 } else { 500 })).await;

    let mut report = serde_json::Map::new();
    report.insert("quick".into(), quick.into());
    report.insert("window".into(), WINDOW.into());
    report.insert(
        "throughput_secs".into(),
        phases.throughput.as_secs_f64().into(),
    );
    println!(
        "{:<10} {:>6} {:>12} {:>10} {:>7}",
        "path", "bytes", "datagrams/s", "Mbit/s", "loss"
    );
    let mut forward_max_64 = 0.0;
    for size in [64usize, 1162] {
        let r = throughput(&raw, size, phases.throughput).await;
        let f = throughput(&forward, size, phases.throughput).await;
        for (name, t) in [("raw", &r), ("forward", &f)] {
            println!(
                "{name:<10} {size:>6} {:>12.0} {:>10.1} {:>6.2}%",
                t.per_sec(),
                t.mbit(size),
                t.loss() * 100.0
            );
        }
        let ratio = f.per_sec() / r.per_sec();
        println!("forward/raw at {size} bytes: {:.0}%", ratio * 100.0);
        if size == 64 {
            forward_max_64 = f.per_sec();
        }
        report.insert(
            format!("throughput_{size}"),
            serde_json::json!({
                "raw": {"datagrams_per_sec": r.per_sec(), "mbit_per_sec": r.mbit(size), "loss": r.loss()},
                "forward": {"datagrams_per_sec": f.per_sec(), "mbit_per_sec": f.mbit(size), "loss": f.loss()},
                "forward_over_raw": ratio,
            }),
        );
    }

    // Latency under load: the same paced rate on both paths.
    let rate = forward_max_64 / 2.0;
    let r = paced(&raw, 64, rate, phases.latency).await;
    let f = paced(&forward, 64, rate, phases.latency).await;
    let (r50, r99) = (r.percentile_us(0.5), r.percentile_us(0.99));
    let (f50, f99) = (f.percentile_us(0.5), f.percentile_us(0.99));
    println!(
        "round trip at {rate:.0} datagrams/s (half the forward's maximum), p50/p99: raw {r50:.0}/{r99:.0} µs, \
         forward {f50:.0}/{f99:.0} µs, forward minus raw (difference of the percentiles) {:.0}/{:.0} µs; loss raw {:.2}%, forward {:.2}%",
        f50 - r50,
        f99 - r99,
        r.loss() * 100.0,
        f.loss() * 100.0
    );
    report.insert(
        "latency".into(),
        serde_json::json!({
            "rate_datagrams_per_sec": rate,
            "bytes": 64,
            "secs": phases.latency.as_secs_f64(),
            "raw": {"p50_us": r50, "p99_us": r99, "loss": r.loss(), "samples": r.rtts.len()},
            "forward": {"p50_us": f50, "p99_us": f99, "loss": f.loss(), "samples": f.rtts.len()},
            // The difference of the two paths' percentiles, not a percentile of added latency.
            "forward_minus_raw": {"p50_us": f50 - r50, "p99_us": f99 - r99},
        }),
    );

    echo_task.abort();
    raw_echo.abort();
    forwarding.stop().await;
    server
        .stop(tokio::time::Instant::now() + Duration::from_secs(2))
        .await
        .ok();
    let path = std::env::var_os("HOLDFAST_BENCH_OUT")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/bench/forward.json")
        });
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).expect("bench output directory");
    }
    std::fs::write(&path, serde_json::to_string_pretty(&report).expect("json")).expect("write");
    println!("wrote {}", path.display());
}
