//! What an idle connection costs the gateway: the heap it holds on the serving thread once it is
//! authenticated and in a room (as the bench's clients are), through the public API only. That
//! heap includes the connection's spawned task, and so its future: the future's size is counted
//! there, not measured apart. Counted by a global allocator that tallies, per thread, the bytes
//! live, so the clients (on a thread of their own) do not count. A test binary of its own: the
//! allocator replaces the global one for every test in the binary.

// A counting allocator is unsafe code by its trait's definition; it is test-only.
#![allow(unsafe_code)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::{Duration, SystemTime};

use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;

use holdfast_gateway::{Gateway, GatewayConfig, MemoryRegistry, MemoryRouting, Signer, TokenKey};

struct Counting;

thread_local! {
    /// Bytes allocated minus bytes freed on this thread (signed: a block freed here may have
    /// been allocated elsewhere).
    static LIVE: Cell<i64> = const { Cell::new(0) };
    static BY_SIZE: [Cell<i32>; 2048] = const { [const { Cell::new(0) }; 2048] };
}

fn add(n: usize, sign: i64) {
    // `try_with`: a thread's allocations after its locals are gone are not counted.
    let _ = LIVE.try_with(|l| l.set(l.get() + sign * n as i64));
    let _ = BY_SIZE.try_with(|b| {
        let c = &b[(n / 8).min(2047)];
        c.set(c.get() + sign as i32);
    });
}

fn by_size() -> Vec<i32> {
    BY_SIZE.with(|b| b.iter().map(Cell::get).collect())
}

// SAFETY: every call is passed on to the system allocator unchanged; only a thread-local counter
// (const-initialised, so it never allocates) is touched besides.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        add(layout.size(), 1);
        // SAFETY: the caller's contract is System's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        add(layout.size(), 1);
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        add(layout.size(), -1);
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        add(layout.size(), -1);
        add(new_size, 1);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

fn live() -> i64 {
    LIVE.with(Cell::get)
}

const SECRET: &[u8] = b"footprint";
const CLIENTS: usize = 200;

/// Connects `n` clients (on a thread and runtime of their own) that authenticate and join
/// one room, as the bench's do; keeps them open until `hold` is dropped.
fn clients(
    addr: std::net::SocketAddr,
    n: usize,
) -> (
    std::sync::mpsc::Receiver<()>,
    std::sync::mpsc::Sender<()>,
    std::thread::JoinHandle<()>,
) {
    let (ready_tx, ready) = std::sync::mpsc::channel();
    let (hold, release) = std::sync::mpsc::channel::<()>();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let signer = Signer::new(SECRET);
            let mut open = Vec::new();
            for i in 0..n {
                let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
                let (mut ws, _) = tokio_tungstenite::client_async(format!("ws://{addr}/"), tcp)
                    .await
                    .unwrap();
                let token = signer
                    .token(
                        &format!("u{n}-{i}"),
                        SystemTime::now() + Duration::from_secs(600),
                    )
                    .unwrap();
                for m in [
                    serde_json::json!({"type": "auth", "token": token}),
                    serde_json::json!({"type": "join", "room": "bench"}),
                ] {
                    ws.send(Message::Text(m.to_string().into())).await.unwrap();
                    match ws.next().await {
                        Some(Ok(Message::Text(_))) => {}
                        other => panic!("client {i}: expected an ack, got {other:?}"),
                    }
                }
                open.push(ws);
            }
            ready_tx.send(()).unwrap();
            tokio::task::spawn_blocking(move || release.recv())
                .await
                .unwrap()
                .ok();
            drop(open);
        });
    });
    (ready, hold, thread)
}

/// Heap bytes the serving thread holds per idle connection, authenticated and in a room.
fn heap_per_idle_connection() -> i64 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut config = GatewayConfig::new(
            "127.0.0.1:0".parse().unwrap(),
            "footprint",
            TokenKey::new(SECRET.to_vec()),
        );
        // The bench's settings (gateway_bench's gateway_server.rs).
        config.send_queue = 64;
        config.read_buffer = 4 * 1024;
        config.unauthenticated_per_ip_limit = 0;
        let gateway = Gateway::start(
            config,
            std::sync::Arc::new(MemoryRegistry::new()),
            std::sync::Arc::new(MemoryRouting::new()),
        )
        .await
        .unwrap();
        // One connection first, so that what every connection shares (the room's index entry,
        // the maps' first growth, the runtime's timer wheel) is not counted against them.
        let (ready, hold, thread) = clients(gateway.local_addr(), 1);
        wait(&ready).await;
        let before = live();
        let sizes_before = by_size();
        let (ready_n, hold_n, thread_n) = clients(gateway.local_addr(), CLIENTS);
        wait(&ready_n).await;
        // Let the connection tasks settle into their idle state.
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let per = (live() - before) / CLIENTS as i64;
        for (i, (a, b)) in by_size().iter().zip(&sizes_before).enumerate() {
            let n = a - b;
            if n.abs() >= CLIENTS as i32 / 2 {
                eprintln!(
                    "size {}..{}: {n} live ({} per connection)",
                    i * 8,
                    i * 8 + 8,
                    n as f64 / CLIENTS as f64
                );
            }
        }
        assert_eq!(gateway.authenticated(), CLIENTS + 1);
        drop((hold, hold_n));
        thread.join().unwrap();
        thread_n.join().unwrap();
        per
    })
}

async fn wait(ready: &std::sync::mpsc::Receiver<()>) {
    loop {
        if ready.try_recv().is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The heap an idle connection holds on the serving thread, in this (unoptimised) test build.
/// Of it, 4,096 bytes are the read buffer and about 1,600 the send queue's channel and first
/// block; the task's future was 3,792 bytes before its rare steps were boxed, and the room,
/// user and route records some 680 bytes in all before they were sized to what they hold
/// (11,303 bytes in all then). The bench measures the release build's resident memory.
const HEAP_PER_IDLE_CONNECTION_MAX: i64 = 8_800;

// r[verify gateway.edge.footprint]
#[test]
fn an_idle_connection_holds_a_bounded_heap() {
    let per = heap_per_idle_connection();
    eprintln!("heap per idle connection: {per} B");
    assert!(
        per <= HEAP_PER_IDLE_CONNECTION_MAX,
        "{per} B per idle connection (at most {HEAP_PER_IDLE_CONNECTION_MAX})"
    );
}
