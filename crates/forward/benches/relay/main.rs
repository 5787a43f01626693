//! Raw quinn datagrams against the same load through a holdfast forward, in one run, on loopback.
//!
//! `cargo bench -p holdfast-forward --bench relay` (or `cargo xtask bench forward`, which adds
//! the targets) prints a table and writes `target/bench/forward.json` (`HOLDFAST_BENCH_OUT`
//! overrides the path; `HOLDFAST_BENCH_QUICK=1` shortens every phase for CI).
//!
//! Every path is a round trip through an echo, driven the same way from the same process:
//! everything runs on one runtime of two workers, for every path. (`HOLDFAST_BENCH_SPLIT_RUNTIMES=1`
//! gives the client's side and the node's side a runtime of one worker each instead, as two
//! processes would have, for every path alike: a diagnostic, not the measurement.
//! `HOLDFAST_BENCH_PROFILE=1`, `cargo xtask bench forward --profile`, gives the app, the client's
//! side and the node's side three runtimes of one worker each and counts what each spends per
//! datagram (`profile.rs`); neither is the measurement either, so a profiled run skips the tail
//! at fixed shares and writes `target/bench/forward-profile.json`, leaving `forward.json` as it
//! was.)
//! - raw: a quinn client sends datagrams to a quinn server that echoes each one back (both on the
//!   forward's own endpoint sockets and settings: `transport::endpoint_socket`, the crate's TLS
//!   and transport configuration);
//! - forward: a UDP socket (the app) sends to a holdfast forward's local address; the node relays
//!   to a UDP echo target, whose replies come back through the forward;
//! - bare, the floor (`bare.rs`, `i[bench.forward.floor]`): the same app and echo target through
//!   the least a forward over quinn can do (one flow, no header, no access, no counters) on a
//!   quinn connection of its own, measured after the forward in the throughput phases and at the
//!   paced rate, one phase each, in the order raw, forward, bare: what the forward's four extra
//!   UDP hops cost, told apart from what holdfast's relay adds. Reported, never judged; not set
//!   up in profile mode, nor measured in the paced diagnostics (`HOLDFAST_BENCH_STAGES`,
//!   `HOLDFAST_BENCH_PACED_ONLY`); the window sweep includes it.
//!
//! The load generator batches on every path, so what is measured is the path, not the bench:
//! - sends go in bursts. Raw: one `send_datagram` per datagram (quinn's own packets carry many)
//!   from one allocation per burst. Forward: the app sends each burst with GSO, one system call
//!   per up to 64 datagrams (`batched.rs`).
//! - receives take everything ready. Raw: every datagram quinn has queued per wakeup. Forward:
//!   the app and the echo target receive with recvmmsg and GRO (32 buffers a call, each
//!   holding one datagram or a run of them), and the echo target returns each buffer with one
//!   GSO send. One clock read per received batch times every echo in it.
//!
//! Throughput is a closed loop with the same bounded window of datagrams in flight on every path,
//! at 64 and 1162 payload bytes: the sender fills the window, then waits (without spinning) for
//! echoes. Each datagram carries a sequence number, and an echo settles every datagram sent
//! before it — one path, in order, on loopback: one that has not come back by then is lost — so a
//! loss frees its place in the window at once; a lost tail, with nothing after it to show it, is
//! given up after 50 ms without an echo (longer than the machine's scheduling stalls, so a
//! window that is merely late is not sent again on top of itself). Latency is measured
//! under load: every path is offered the same paced rate, half of the forward's measured maximum
//! at 64 bytes, by the same pacer (`pacer.rs`: a thread of its own sleeping to absolute deadlines
//! every 100 µs and sending the datagrams owed by then, so pacing does not take a core from the
//! path); every echo's round trip is timed from a send time carried in its payload. Each phase
//! tags its payloads, so an echo left over from an earlier phase (still queued when that phase
//! ended) is neither counted nor timed. The latency figures are percentiles of each path's round
//! trips; "forward minus raw" is the difference of those percentiles (not a percentile of a
//! per-datagram added latency, which cannot be observed), so it can come out negative when the
//! forward's tail is the tighter one. The tail is also measured at a quarter, half and three
//! quarters of the forward's maximum, p50/p99/p99.9 of each path at each (`latency_tail`), each
//! rate five times in the full run for the run-to-run spread, once with `--quick`. Numbers, never
//! assertions (the arithmetic behind them, `figures.rs`, is tested from `tests/bench_figures.rs`).
//! Diagnostics of the paced phase
//! (`HOLDFAST_BENCH_STAGES=1`, `HOLDFAST_BENCH_PACED_ONLY=RATE`) are described in `stages.rs`.
//!
//! The window. A closed loop's rate is window / round trip, so a window too small to fill the
//! path would make the throughput figure a latency figure. `HOLDFAST_BENCH_WINDOW_SWEEP=64,128,...`
//! (a diagnostic: no report written) runs the closed loop alone at each window, every path and
//! both sizes, with the mean round trip the window implies and the process's CPU time per
//! echoed datagram. Two sweeps (`HOLDFAST_BENCH_WINDOW_SWEEP=64,128,256,512,1024,2048,4096` on
//! the bench binary, 2 s phases, on a 2-core machine other builds kept at load average 4.3-5.7
//! in the first and 6.2-8.0 in the second), thousands of datagrams/s raw | forward (share), then
//! the second sweep's:
//!
//! | window | 64 B, first      | 64 B, second       | 1162 B, first | 1162 B, second |
//! |-------:|------------------|--------------------|---------------|----------------|
//! |     64 |   619 | 509 (82 %) |   924 |   635 (69 %) | 129 | 109 (84 %) | 178 | 169 (95 %) |
//! |    128 |   710 | 564 (79 %) | 1,009 |   690 (68 %) | 134 | 119 (89 %) | 203 | 164 (80 %) |
//! |    256 | 1,021 | 814 (80 %) | 1,082 |   638 (59 %) | 143 | 126 (88 %) | 158 | 126 (80 %) |
//! |    512 |   827 | 603 (73 %) | 1,315 | 1,173 (89 %) | 158 | 117 (74 %) | 189 | 164 (87 %) |
//! |   1024 |   848 | 672 (79 %) | 1,718 | 1,014 (59 %) | 143 | 110 (77 %) | 177 | 141 (80 %) |
//! |   2048 | 1,049 | 718 (68 %) | 1,174 | 1,119 (95 %) | 107 | 114 (106 %) | 215 | 100 (46 %) |
//! |   4096 |   978 | 701 (72 %) | 1,146 |   791 (69 %) | 111 | 79 (71 %) | 154 | 118 (77 %) |
//!
//! (At 1162 B and 2048 in flight the forward lost 1.0 % and 1.1 %; at 4096 both paths lost
//! 4-14 %: beyond about 1024 a window only fills buffers.) On this machine the rates move by
//! tens of percent from one phase to the next, and the forward's share moves with them, with no
//! trend in the window: no window makes the forward's share larger or smaller, so the bench's
//! [`WINDOW`] of 256 stays and what it measures does not change. What holds in every row is the
//! cost: CPU per echoed datagram (the whole process, both ends), 64 B raw 0.53-1.18 µs, forward
//! 0.77-1.55 µs (1.05-1.6 × raw's); 1162 B raw 4.1-6.8 µs, forward 5.1-8.4 µs (1.0-1.8 ×): with
//! the machine's cores contended, the forward's extra hops cost CPU, not only round trip.

// Bench harness code: a broken setup should stop the run loudly.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod bare;
mod batched;
mod figures;
mod pacer;
mod profile;
mod stages;

/// Counts allocations per side of the path, once `HOLDFAST_BENCH_PROFILE` marks the sides.
#[global_allocator]
static ALLOCATOR: profile::Counting = profile::Counting;

use std::future::Future;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use batched::{Batched, RecvBufs, datagrams};
use bytes::BytesMut;
use holdfast_forward::client::{self, ClientConfig, ClientEvent, ForwardSpec};
use holdfast_forward::identity::{Identity, SERVER_NAME};
use holdfast_forward::server::quinn_server_config;
use holdfast_forward::transport;
use holdfast_forward::{AllowList, Credential, ServerConfig};
use tokio::runtime::Handle;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

/// The tag of the next phase; tags start at 1 so an all-zero payload matches none.
static NEXT_TAG: AtomicU64 = AtomicU64::new(1);

/// A fresh tag for one phase's payloads (bytes 8..16; bytes 0..8 carry the send time, 16..24 the
/// datagram's sequence number within the phase).
fn next_tag() -> u64 {
    NEXT_TAG.fetch_add(1, Ordering::Relaxed)
}

/// Whether an echo in `buf` belongs to the phase tagged `tag`.
fn is_ours(buf: &[u8], tag: u64) -> bool {
    buf.len() >= HEADER && buf[8..16] == tag.to_le_bytes()
}

const IDLE: Duration = Duration::from_secs(10);

/// At most this many datagrams in flight (sent, not yet echoed): a closed loop that measures
/// what the path carries instead of how much a flood overflows its buffers.
const WINDOW: u64 = 256;

/// How long the closed loop waits for an echo before it gives up on what is in flight (a lost
/// tail: nothing sent after it came back to show it lost). Longer than the machine's scheduling
/// stalls, so a window that is only late is not sent a second time on top of itself.
const TAIL_LOST: Duration = Duration::from_millis(50);

/// At most this many datagrams a quinn connection has queued are taken per wakeup of the raw
/// path's reader (the forward's reader takes at most 32 buffers a call).
const RAW_DRAIN: usize = 1024;

fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// The output of `future` if it is ready now (the raw reader's "take what is queued").
fn ready_now<F: Future>(future: F) -> Option<F::Output> {
    let mut future = pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(output) => Some(output),
        Poll::Pending => None,
    }
}

/// How long each phase runs.
#[derive(Clone, Copy)]
struct Phases {
    throughput: Duration,
    latency: Duration,
}

/// The bench's own bytes at the start of every payload: send time, phase tag, sequence number.
const HEADER: usize = 24;

/// One phase's payloads: up to a window of datagrams of one size, each tagged.
struct Burst {
    size: usize,
    buf: Vec<u8>,
}

impl Burst {
    /// Room for `capacity` datagrams of `size` bytes.
    fn new(size: usize, tag: u64, capacity: u64) -> Self {
        let size = size.max(HEADER);
        let mut buf = vec![0u8; size * capacity as usize];
        for one in buf.chunks_mut(size) {
            one[8..16].copy_from_slice(&tag.to_le_bytes());
        }
        Burst { size, buf }
    }

    /// The first `count` datagrams, stamped with the send time `now_ns` and numbered from `seq`.
    fn stamped(&mut self, count: usize, now_ns: u64, seq: u64) -> &[u8] {
        let end = (count * self.size).min(self.buf.len());
        let bytes = &mut self.buf[..end];
        for (i, one) in bytes.chunks_mut(self.size).enumerate() {
            one[..8].copy_from_slice(&now_ns.to_le_bytes());
            one[16..24].copy_from_slice(&(seq + i as u64).to_le_bytes());
        }
        bytes
    }
}

/// One path under test.
#[derive(Clone)]
enum Path {
    Raw(quinn::Connection),
    Forward(Arc<Batched>, SocketAddr),
}

impl Path {
    /// Sends `count` datagrams of the burst from a runtime task; how many went.
    async fn send(&self, burst: &mut Burst, count: usize, now_ns: u64, seq: u64) -> u64 {
        let size = burst.size;
        let bytes = burst.stamped(count, now_ns, seq);
        match self {
            Path::Raw(conn) => raw_send(conn, bytes, size),
            Path::Forward(socket, to) => {
                let mut sent = 0;
                for chunk in bytes.chunks(size * socket.per_send(size)) {
                    if socket.send(*to, chunk, size).await.is_ok() {
                        sent += chunk.len().div_ceil(size) as u64;
                    }
                }
                sent
            }
        }
    }

    /// The same from the pacer's thread.
    fn send_blocking(&self, burst: &mut Burst, count: usize, now_ns: u64, seq: u64) -> u64 {
        let size = burst.size;
        let bytes = burst.stamped(count, now_ns, seq);
        match self {
            Path::Raw(conn) => raw_send(conn, bytes, size),
            Path::Forward(socket, to) => {
                let mut sent = 0;
                for chunk in bytes.chunks(size * socket.per_send(size)) {
                    if socket.send_blocking(*to, chunk, size).is_ok() {
                        sent += chunk.len().div_ceil(size) as u64;
                    }
                }
                sent
            }
        }
    }

    /// Waits for echoes and hands each one of the batch that arrived to `each`; `None` once the
    /// path is gone.
    async fn recv(&self, bufs: &mut RecvBufs, mut each: impl FnMut(&[u8])) -> Option<()> {
        match self {
            Path::Raw(conn) => {
                // The batch is taken whole before any echo is handed on, so the reader's one
                // clock read comes after every echo in it arrived, as recvmmsg's does.
                let mut batch = vec![conn.read_datagram().await.ok()?];
                while batch.len() < RAW_DRAIN {
                    match ready_now(conn.read_datagram()) {
                        Some(Ok(d)) => batch.push(d),
                        _ => break,
                    }
                }
                batch.iter().for_each(|d| each(d));
            }
            Path::Forward(socket, _) => {
                let filled = socket.recv(bufs).await.ok()?;
                for (_, stride, data) in bufs.buffers(filled) {
                    datagrams(data, stride).for_each(&mut each);
                }
            }
        }
        Some(())
    }
}

/// Queues each datagram of `bytes` on the connection, all from one allocation.
fn raw_send(conn: &quinn::Connection, bytes: &[u8], size: usize) -> u64 {
    let mut out = BytesMut::from(bytes);
    let mut sent = 0;
    while !out.is_empty() {
        let one = out.split_to(size.min(out.len())).freeze();
        if conn.send_datagram(one).is_ok() {
            sent += 1;
        }
    }
    sent
}

/// Echoes of one phase seen so far, and a wakeup for a sender waiting for them.
struct Echoes {
    tag: u64,
    received: AtomicU64,
    /// One past the highest sequence number echoed: every datagram before it has come back or
    /// is lost (one path, in order, on loopback).
    resolved: AtomicU64,
    progress: Notify,
}

impl Echoes {
    fn new() -> Self {
        Echoes {
            tag: next_tag(),
            received: AtomicU64::new(0),
            resolved: AtomicU64::new(0),
            progress: Notify::new(),
        }
    }
}

/// Counts (and when `timed`, times) the phase's echoes until `stop`; returns the round trips.
fn spawn_reader(
    path: Path,
    epoch: Instant,
    echoes: Arc<Echoes>,
    timed: bool,
    mut stop: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<Vec<Duration>> {
    tokio::spawn(async move {
        let mut bufs = RecvBufs::new();
        let mut rtts = Vec::new();
        let mut received = 0u64;
        let mut resolved = 0u64;
        loop {
            // One clock read per batch: every echo in it had arrived by then.
            let mut now = None;
            let got = tokio::select! {
                biased;
                _ = stop.changed() => break,
                got = path.recv(&mut bufs, |echo| {
                    if !is_ours(echo, echoes.tag) {
                        return;
                    }
                    received += 1;
                    let seq = u64::from_le_bytes(echo[16..24].try_into().unwrap());
                    resolved = resolved.max(seq + 1);
                    if timed {
                        let at = *now.get_or_insert_with(|| epoch.elapsed());
                        let sent = u64::from_le_bytes(echo[..8].try_into().unwrap());
                        rtts.push(at.saturating_sub(Duration::from_nanos(sent)));
                    }
                }) => got,
            };
            if got.is_none() {
                break;
            }
            echoes.received.store(received, Ordering::Relaxed);
            echoes.resolved.store(resolved, Ordering::Relaxed);
            echoes.progress.notify_one();
        }
        rtts
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
        figures::percentile_us(&self.rtts, p)
    }
}

/// The shares of the forward's maximum (64 B) the tail is measured at.
const TAIL_SHARES: [f64; 3] = [0.25, 0.5, 0.75];

/// One path's round-trip tail in one paced phase.
struct Tail {
    /// p50, p99, p99.9 in µs.
    us: [f64; 3],
    loss: f64,
    samples: usize,
}

impl Tail {
    fn of(m: &Measured) -> Self {
        Tail {
            us: [0.5, 0.99, 0.999].map(|p| m.percentile_us(p)),
            loss: m.loss(),
            samples: m.rtts.len(),
        }
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "p50_us": self.us[0], "p99_us": self.us[1], "p999_us": self.us[2],
            "loss": self.loss, "samples": self.samples,
        })
    }

    /// Per percentile, [min, median, max] over the runs (a run without echoes left out).
    fn spread<'a>(runs: impl Iterator<Item = &'a Tail>) -> figures::Spread {
        let runs: Vec<[f64; 3]> = runs.map(|t| t.us).collect();
        figures::spread(&runs)
    }

    fn spread_json(s: &figures::Spread) -> serde_json::Value {
        serde_json::json!({
            "p50_us": s.us[0], "p99_us": s.us[1], "p999_us": s.us[2], "runs_counted": s.counted,
        })
    }
}

/// Lets the phase's last echoes arrive, stops its reader and gathers what it saw.
async fn finish(
    sent: u64,
    secs: f64,
    echoes: &Echoes,
    stop: watch::Sender<bool>,
    reader: tokio::task::JoinHandle<Vec<Duration>>,
) -> Measured {
    tokio::time::sleep(Duration::from_millis(200)).await;
    let _ = stop.send(true);
    let mut rtts = reader.await.expect("reader");
    if stages::enabled() && !rtts.is_empty() {
        stages::windowed_p99(&rtts);
    }
    rtts.sort();
    Measured {
        sent,
        received: echoes.received.load(Ordering::Relaxed).min(sent),
        secs,
        rtts,
    }
}

/// The closed loop: as fast as a window of `window` datagrams in flight allows, for `run`.
async fn throughput(path: &Path, size: usize, window: u64, run: Duration) -> Measured {
    let epoch = Instant::now();
    let echoes = Arc::new(Echoes::new());
    let (stop, stopped) = watch::channel(false);
    let reader = spawn_reader(path.clone(), epoch, echoes.clone(), false, stopped);
    let mut burst = Burst::new(size, echoes.tag, window);
    let start = Instant::now();
    let mut sent = 0u64;
    // The sequence number of the next datagram: it counts every datagram handed to the path,
    // sent or refused, so numbers are never reused and an echo never settles beyond it (a
    // refused send is a loss, as a datagram the path drops is).
    let mut next = 0u64;
    // Every datagram before this one has come back or is lost.
    let mut resolved = 0u64;
    while start.elapsed() < run {
        let progress = echoes.progress.notified();
        resolved = resolved.max(echoes.resolved.load(Ordering::Relaxed));
        let in_flight = next - resolved;
        if in_flight >= window {
            // A lost tail is never followed by an echo: after 50 ms without one, it is given up.
            if tokio::time::timeout(TAIL_LOST, progress).await.is_err()
                && echoes.resolved.load(Ordering::Relaxed) <= resolved
            {
                resolved = next;
            }
            continue;
        }
        let count = window - in_flight;
        sent += path.send(&mut burst, count as usize, 0, next).await;
        next += count;
    }
    let secs = start.elapsed().as_secs_f64();
    finish(sent, secs, &echoes, stop, reader).await
}

/// The closed loop at each of `windows`, every path (raw first), both sizes: each path's rate,
/// the mean round trip the window implies (window / rate, Little's law), the process's CPU time
/// per echoed datagram, which tells a path that costs more from one that only takes longer to
/// come back, and each path's share of raw's rate.
async fn window_sweep(paths: &[(&str, &Path)], windows: &[u64], run: Duration) {
    let mut heading = format!("{:>6} {:>6}", "bytes", "window");
    for (name, _) in paths {
        heading += &format!(
            " {:>12} {:>7} {:>9} {:>8} {:>6}",
            format!("{name}/s"),
            "loss",
            "rtt µs",
            "cpu µs",
            "share"
        );
    }
    println!("{heading}");
    for size in [64, 1162] {
        for &window in windows {
            let mut row = format!("{size:>6} {window:>6}");
            let mut raw_rate = None;
            for (_, path) in paths {
                let u0 = stages::usage();
                let m = throughput(path, size, window, run).await;
                let u1 = stages::usage();
                let rate = m.per_sec();
                let raw = *raw_rate.get_or_insert(rate);
                row += &format!(
                    " {rate:>12.0} {:>6.2}% {:>9.0} {:>8.2} {:>5.0}%",
                    m.loss() * 100.0,
                    window as f64 / rate.max(1.0) * 1e6,
                    (u1.0 - u0.0) / m.received.max(1) as f64,
                    rate / raw.max(1.0) * 100.0
                );
            }
            println!("{row}");
        }
    }
}

/// The open loop: `rate` datagrams a second from the pacer's thread, for `run`; every echo timed.
async fn paced(path: &Path, size: usize, rate: f64, run: Duration) -> Measured {
    let epoch = stages::epoch();
    let echoes = Arc::new(Echoes::new());
    if stages::enabled() {
        stages::TAG.store(echoes.tag, Ordering::Relaxed);
    }
    let (stop, stopped) = watch::channel(false);
    let reader = spawn_reader(path.clone(), epoch, echoes.clone(), true, stopped);
    let mut burst = Burst::new(size, echoes.tag, WINDOW);
    let sender = path.clone();
    let start = Instant::now();
    let sent = tokio::task::spawn_blocking(move || {
        let mut seq = 0u64;
        pacer::pace(rate, run, |owed| {
            let now = epoch.elapsed().as_nanos() as u64;
            let mut sent = 0;
            let mut owed = owed as usize;
            while owed > 0 {
                let n = owed.min(WINDOW as usize);
                sent += sender.send_blocking(&mut burst, n, now, seq);
                seq += n as u64;
                owed -= n;
            }
            sent
        })
    })
    .await
    .expect("pacer");
    let secs = start.elapsed().as_secs_f64();
    finish(sent, secs, &echoes, stop, reader).await
}

/// One phase's profile rows: (phase, path, each side's cost per datagram).
type Profiles = Vec<(String, &'static str, Vec<profile::PerDatagram>)>;

/// Runs a phase; when profiling, counts what each side spent on it.
async fn profiled(
    profiles: &mut Option<Profiles>,
    phase: &str,
    path: &'static str,
    run: impl Future<Output = Measured>,
) -> Measured {
    let Some(profiles) = profiles else {
        return run.await;
    };
    let start = profile::start().await;
    let measured = run.await;
    profiles.push((
        phase.to_owned(),
        path,
        profile::finish(start, measured.received),
    ));
    measured
}

/// Two bare quinn endpoints with the crate's own TLS and transport settings; the server side
/// (on the node's runtime) echoes every datagram.
async fn raw_path(
    dir: &std::path::Path,
    node: &Handle,
    client_side: &Handle,
) -> (Path, quinn::Endpoint, tokio::task::JoinHandle<()>) {
    let (connected, accepted, client) = quinn_pair(dir, node, client_side).await;
    let echo = node.spawn(async move {
        while let Ok(d) = accepted.read_datagram().await {
            stages::at_echo(std::iter::once(&d[..]));
            let _ = accepted.send_datagram(d);
        }
    });
    (Path::Raw(connected), client, echo)
}

/// A quinn connection between two endpoints with the forward's own sockets, TLS and transport
/// settings: the client's end (its drivers on `client_side`), the server's (on `node`), and the
/// client's endpoint.
async fn quinn_pair(
    dir: &std::path::Path,
    node: &Handle,
    client_side: &Handle,
) -> (quinn::Connection, quinn::Connection, quinn::Endpoint) {
    let identity = Identity::load_or_create(dir).expect("identity");
    // The same endpoint sockets (and buffers) as the forward's own endpoints.
    let server = {
        let _node = node.enter();
        transport::endpoint(
            transport::endpoint_socket(loopback()).expect("server socket"),
            Some(quinn_server_config(&identity, IDLE).expect("server config")),
        )
        .expect("server endpoint")
    };
    let addr = server.local_addr().expect("addr");
    let (config, _) = client::quinn_client_config(identity.fingerprint(), IDLE).expect("client");
    // The client's endpoint and connection drivers run on the client's side.
    let client_side = client_side.enter();
    let client = transport::endpoint(
        transport::endpoint_socket(loopback()).expect("client socket"),
        None,
    )
    .expect("client endpoint");
    let connecting = client
        .connect_with(config, addr, SERVER_NAME)
        .expect("connect");
    drop(client_side);
    // Accepted on the node's runtime, so its connection's driver runs there.
    let accepting = node.spawn(async move {
        server
            .accept()
            .await
            .expect("incoming")
            .await
            .expect("accepted")
    });
    let connected = connecting.await.expect("connected");
    let accepted = accepting.await.expect("accept task");
    (connected, accepted, client)
}

/// Ends the floor's relay tasks, if it was set up.
fn abort_all(bare: &Option<(Path, Vec<JoinHandle<()>>)>) {
    for task in bare.iter().flat_map(|(_, tasks)| tasks) {
        task.abort();
    }
}

/// One runtime of two workers for everything; with `HOLDFAST_BENCH_SPLIT_RUNTIMES=1`, the
/// client's side (the app's reader, the holdfast client, the raw quinn client, or the bare
/// relay's client end) and the node's side (the holdfast node and the echo target, the raw quinn
/// server and its echo, or the bare relay's node end) on a
/// runtime of one worker each; with `HOLDFAST_BENCH_PROFILE=1`, three runtimes of one worker
/// each, the app's (the load generator), the client's and the node's, whose threads join their
/// side for the profile's counts.
fn main() {
    let runtime = |workers, side: Option<usize>| {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        builder.worker_threads(workers).enable_all();
        if let Some(side) = side {
            builder
                .thread_name(profile::SIDES[side])
                .on_thread_start(move || profile::join(side))
                // The pacer's thread is counted from before a phase to its end: it stays.
                .thread_keep_alive(Duration::from_secs(3600));
        }
        builder.build().expect("runtime")
    };
    if profile::enabled() {
        let [app, client, node] = [0, 1, 2].map(|side| runtime(1, Some(side)));
        profile::join(0);
        app.block_on(run(node.handle().clone(), client.handle().clone()));
    } else if std::env::var_os("HOLDFAST_BENCH_SPLIT_RUNTIMES").is_some_and(|v| v != "0") {
        let client = runtime(1, None);
        let node = runtime(1, None);
        client.block_on(run(node.handle().clone(), client.handle().clone()));
    } else {
        let shared = runtime(2, None);
        let node = shared.handle().clone();
        shared.block_on(run(node.clone(), node));
    }
}

/// `node` runs the node's side, `client_side` the client's (raw quinn's or holdfast's); the app
/// (the load generator) runs on the current runtime.
async fn run(node: Handle, client_side: Handle) {
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
    let (raw, _raw_endpoint, raw_echo) = raw_path(dir.path(), &node, &client_side).await;

    // The forward: a node, a UDP echo target, a client with one forward to it.
    let echo = {
        let _node = node.enter();
        Batched::bind(loopback(), None).expect("echo")
    };
    let echo_addr = echo.local_addr();
    let echo_task = node.spawn(async move {
        let mut bufs = RecvBufs::new();
        while let Ok(filled) = echo.recv(&mut bufs).await {
            for (from, stride, data) in bufs.buffers(filled) {
                stages::at_echo(datagrams(data, stride));
                let _ = echo.send(from, data, stride).await;
            }
        }
    });
    let mut config = ServerConfig::new(loopback(), dir.path().join("node"));
    config.credentials = vec![Credential::new("bench")];
    config.allow = AllowList::parse(["127.0.0.1:*"]).expect("allow");
    let server = node
        .spawn(holdfast_forward::start(config))
        .await
        .expect("node task")
        .expect("node");
    let mut client_config = ClientConfig::new(
        server.local_addr().expect("addr"),
        server.fingerprint(),
        Credential::new("bench"),
    );
    client_config.forwards = vec![ForwardSpec {
        local: loopback(),
        target: echo_addr,
    }];
    let mut forwarding = client_side
        .spawn(client::spawn(client_config))
        .await
        .expect("client task")
        .expect("client");
    loop {
        if let Some(ClientEvent::Opened { .. }) = forwarding.next_event().await {
            break;
        }
    }
    let local = forwarding.local_addrs()[0];
    let app = Batched::bind(loopback(), Some(local)).expect("app");
    let forward = Path::Forward(Arc::new(app), local);
    // The floor under any forward (`bare.rs`): a bare relay over a quinn connection of its own,
    // to the same echo target. Not in profile mode: an idle connection's keep-alives would join
    // the sides' counts.
    let (bare, _bare_endpoint) = if profile::enabled() {
        (None, None)
    } else {
        let (connected, accepted, endpoint) = quinn_pair(dir.path(), &node, &client_side).await;
        let relay = bare::path(connected, accepted, echo_addr, &node, &client_side);
        (Some(relay), Some(endpoint))
    };
    // Let path MTU discovery finish on every connection so 1162-byte payloads fit.
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
    // The per-stage profile, when asked for: the pacer's thread is started now, so the system
    // call counts attached before each phase see it.
    let mut profiles = profile::enabled().then(Vec::new);
    if profiles.is_some() {
        tokio::task::spawn_blocking(|| ())
            .await
            .expect("pacer thread");
    }
    // Diagnostics: `HOLDFAST_BENCH_WINDOW_SWEEP=64,128,...` runs the closed loop alone at each
    // window, every path, both sizes.
    if let Ok(windows) = std::env::var("HOLDFAST_BENCH_WINDOW_SWEEP") {
        let windows: Vec<u64> = windows.split(',').filter_map(|w| w.parse().ok()).collect();
        let mut paths = vec![("raw", &raw), ("forward", &forward)];
        if let Some((bare, _)) = &bare {
            paths.push(("bare", bare));
        }
        window_sweep(&paths, &windows, phases.throughput).await;
        abort_all(&bare);
        echo_task.abort();
        raw_echo.abort();
        forwarding.stop().await;
        println!("HOLDFAST_BENCH_WINDOW_SWEEP: a diagnostic run, no report written");
        return;
    }
    // Diagnostics: `HOLDFAST_BENCH_PACED_ONLY=RATE` runs the paced phase alone at RATE, to
    // profile it without the throughput phase.
    let paced_only: Option<f64> = std::env::var("HOLDFAST_BENCH_PACED_ONLY")
        .ok()
        .and_then(|v| v.parse().ok());
    // The floor, when measured: never in profile mode (`bare` is `None`) nor in the paced
    // diagnostics, which measure the other two alone, so a report has all of it or none.
    let floor = bare
        .as_ref()
        .map(|(path, _)| path)
        .filter(|_| paced_only.is_none() && !stages::enabled());
    let sizes: &[usize] = if paced_only.is_some() {
        &[]
    } else {
        &[64, 1162]
    };
    for &size in sizes {
        let phase = format!("throughput {size} B");
        let r = profiled(
            &mut profiles,
            &phase,
            "raw",
            throughput(&raw, size, WINDOW, phases.throughput),
        )
        .await;
        let f = profiled(
            &mut profiles,
            &phase,
            "forward",
            throughput(&forward, size, WINDOW, phases.throughput),
        )
        .await;
        // The floor, after the forward.
        let b = match floor {
            Some(bare) => Some(throughput(bare, size, WINDOW, phases.throughput).await),
            None => None,
        };
        for (name, t) in [
            ("raw", Some(&r)),
            ("forward", Some(&f)),
            ("bare", b.as_ref()),
        ] {
            let Some(t) = t else { continue };
            println!(
                "{name:<10} {size:>6} {:>12.0} {:>10.1} {:>6.2}%",
                t.per_sec(),
                t.mbit(size),
                t.loss() * 100.0
            );
        }
        let ratio = f.per_sec() / r.per_sec();
        println!("forward/raw at {size} bytes: {:.0}%", ratio * 100.0);
        if let Some(b) = &b {
            println!(
                "bare/raw at {size} bytes: {:.0}%, forward/bare {:.0}%",
                b.per_sec() / r.per_sec() * 100.0,
                f.per_sec() / b.per_sec() * 100.0
            );
        }
        if size == 64 {
            forward_max_64 = f.per_sec();
        }
        let rates = |m: &Measured| serde_json::json!({"datagrams_per_sec": m.per_sec(), "mbit_per_sec": m.mbit(size), "loss": m.loss()});
        let mut row = serde_json::json!({
            "raw": rates(&r),
            "forward": rates(&f),
            "forward_over_raw": ratio,
        });
        if let Some(b) = &b {
            row["bare"] = rates(b);
            row["bare_over_raw"] = (b.per_sec() / r.per_sec()).into();
            row["forward_over_bare"] = (f.per_sec() / b.per_sec()).into();
        }
        report.insert(format!("throughput_{size}"), row);
    }

    // Latency under load: the same paced rate on every path.
    let rate = paced_only.unwrap_or(forward_max_64 / 2.0);
    let u0 = stages::usage();
    let t0 = stages::threads();
    let phase = format!("paced 64 B {rate:.0}/s");
    let r = profiled(
        &mut profiles,
        &phase,
        "raw",
        paced(&raw, 64, rate, phases.latency),
    )
    .await;
    let raw_out = stages::take();
    let u1 = stages::usage();
    let t1 = stages::threads();
    let f = profiled(
        &mut profiles,
        &phase,
        "forward",
        paced(&forward, 64, rate, phases.latency),
    )
    .await;
    let fwd_out = stages::take();
    let u2 = stages::usage();
    let t2 = stages::threads();
    if stages::enabled() {
        stages::print_threads("raw", &t0, &t1);
        stages::print_threads("forward", &t1, &t2);
    }
    if stages::enabled() {
        let per = |a: (f64, i64, i64), b: (f64, i64, i64), m: &Measured| {
            let n = m.sent.max(1) as f64;
            let periods = phases.latency.as_secs_f64() / pacer::PERIOD.as_secs_f64();
            (
                (b.0 - a.0) / n,
                (b.1 - a.1) as f64 / periods,
                (b.2 - a.2) as f64 / periods,
            )
        };
        let (rc, rv, ri) = per(u0, u1, &r);
        let (fc, fv, fi) = per(u1, u2, &f);
        println!(
            "cpu µs/datagram, voluntary/involuntary switches per pacer period: raw {rc:.2}, {rv:.1}/{ri:.2}; forward {fc:.2}, {fv:.1}/{fi:.2}"
        );
        println!(
            "outbound (pacer to echo) p50/p99 µs: raw {:.0}/{:.0} ({} samples), forward {:.0}/{:.0} ({} samples)",
            raw_out.0, raw_out.1, raw_out.2, fwd_out.0, fwd_out.1, fwd_out.2
        );
    }
    // The floor at the same rate, after the forward.
    let b = match floor {
        Some(bare) => Some(paced(bare, 64, rate, phases.latency).await),
        None => None,
    };
    let (r50, r99) = (r.percentile_us(0.5), r.percentile_us(0.99));
    let (f50, f99) = (f.percentile_us(0.5), f.percentile_us(0.99));
    println!(
        "round trip at {rate:.0} datagrams/s ({}), p50/p99: raw {r50:.0}/{r99:.0} µs, \
         forward {f50:.0}/{f99:.0} µs, forward minus raw (difference of the percentiles) {:.0}/{:.0} µs; loss raw {:.2}%, forward {:.2}%",
        if paced_only.is_some() {
            "HOLDFAST_BENCH_PACED_ONLY"
        } else {
            "half the forward's maximum"
        },
        f50 - r50,
        f99 - r99,
        r.loss() * 100.0,
        f.loss() * 100.0
    );
    let mut latency = serde_json::json!({
        "rate_datagrams_per_sec": rate,
        "bytes": 64,
        "secs": phases.latency.as_secs_f64(),
        "raw": Tail::of(&r).json(),
        "forward": Tail::of(&f).json(),
        // The difference of the two paths' percentiles, not a percentile of added latency.
        "forward_minus_raw": {"p50_us": f50 - r50, "p99_us": f99 - r99},
    });
    if let Some(b) = &b {
        let (b50, b99) = (b.percentile_us(0.5), b.percentile_us(0.99));
        println!(
            "the floor (a bare relay) at the same rate, p50/p99: {b50:.0}/{b99:.0} µs, minus raw {:.0}/{:.0} µs, forward minus it {:.0}/{:.0} µs; loss {:.2}%",
            b50 - r50,
            b99 - r99,
            f50 - b50,
            f99 - b99,
            b.loss() * 100.0
        );
        latency["bare"] = Tail::of(b).json();
        latency["bare_minus_raw"] = serde_json::json!({"p50_us": b50 - r50, "p99_us": b99 - r99});
        latency["forward_minus_bare"] =
            serde_json::json!({"p50_us": f50 - b50, "p99_us": f99 - b99});
    }
    report.insert("latency".into(), latency);

    if let Some(profiles) = &profiles {
        profile::header();
        let mut rows = Vec::new();
        for (phase, path, per) in profiles {
            profile::print(phase, path, per);
            rows.extend(profile::json(phase, path, per));
        }
        report.insert("profile".into(), rows.into());
    }

    // The tail as a property of the path: fixed shares of the forward's maximum, raw beside the
    // forward at each, every rate measured `runs` times for the run-to-run spread (the phase at
    // half the maximum above is the first run at a half).
    // Not in profile mode: its figures are not the measurement, and perf is attached to the
    // phases above only.
    if paced_only.is_none() && profiles.is_none() {
        let runs = if quick { 1 } else { 5 };
        println!(
            "round trips at fixed shares of the forward's maximum, 64 B, µs p50/p99/p99.9{}:",
            if runs > 1 {
                " (median of the runs, p99 min-max)"
            } else {
                ""
            }
        );
        let mut rates = Vec::new();
        for share in TAIL_SHARES {
            let at = forward_max_64 * share;
            let mut per_run = Vec::new();
            for i in 0..runs {
                if share == 0.5 && i == 0 {
                    per_run.push((Tail::of(&r), Tail::of(&f)));
                    continue;
                }
                let r = paced(&raw, 64, at, phases.latency).await;
                let f = paced(&forward, 64, at, phases.latency).await;
                per_run.push((Tail::of(&r), Tail::of(&f)));
            }
            let raw_spread = Tail::spread(per_run.iter().map(|(r, _)| r));
            let fwd_spread = Tail::spread(per_run.iter().map(|(_, f)| f));
            for (name, s) in [("raw", &raw_spread), ("forward", &fwd_spread)] {
                // A range of one run says nothing; a run without echoes is not counted.
                let range = if s.counted > 1 {
                    format!(
                        " (p99 {:.0}-{:.0}, {} runs)",
                        s.us[1][0], s.us[1][2], s.counted
                    )
                } else {
                    String::new()
                };
                println!(
                    "{:>4.0}% {at:>10.0}/s {name:<8} {:.0}/{:.0}/{:.0}{range}",
                    share * 100.0,
                    s.us[0][1],
                    s.us[1][1],
                    s.us[2][1],
                );
            }
            rates.push(serde_json::json!({
                "share": share,
                "rate_datagrams_per_sec": at,
                "runs": per_run
                    .iter()
                    .map(|(r, f)| serde_json::json!({"raw": r.json(), "forward": f.json()}))
                    .collect::<Vec<_>>(),
                "spread": {"raw": Tail::spread_json(&raw_spread), "forward": Tail::spread_json(&fwd_spread)},
            }));
        }
        report.insert(
            "latency_tail".into(),
            serde_json::json!({
                "bytes": 64,
                "secs": phases.latency.as_secs_f64(),
                "runs": runs,
                "rates": rates,
            }),
        );
    }

    echo_task.abort();
    raw_echo.abort();
    abort_all(&bare);
    forwarding.stop().await;
    node.spawn(async move {
        server
            .stop(tokio::time::Instant::now() + Duration::from_secs(2))
            .await
            .ok()
    })
    .await
    .ok();
    // A diagnostic run measured something else than the report's figures: it leaves the last
    // report as it was.
    if paced_only.is_some() {
        println!("HOLDFAST_BENCH_PACED_ONLY: a diagnostic run, no report written");
        return;
    }
    let path = std::env::var_os("HOLDFAST_BENCH_OUT")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            // A profiled run's figures are not the measurement: beside the last report.
            let name = if profiles.is_some() {
                "forward-profile.json"
            } else {
                "forward.json"
            };
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../target/bench")
                .join(name)
        });
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).expect("bench output directory");
    }
    std::fs::write(&path, serde_json::to_string_pretty(&report).expect("json")).expect("write");
    println!("wrote {}", path.display());
}
