//! The per-stage profile (`HOLDFAST_BENCH_PROFILE=1`, `cargo xtask bench forward --profile`):
//! what each datagram costs each side of the path, for raw quinn and for the forward in the same
//! run, per datagram rather than per second; batch sizes, hence these figures, still move with
//! scheduling, so a loaded machine changes them too.
//!
//! The run gives each side a runtime of one worker of its own, so a thread belongs to one side:
//! - app: the load generator (the pacer's thread, the reader of echoes, the main thread);
//! - client: the raw quinn client's endpoint and connection, or the holdfast client;
//! - node: the raw quinn server and its echo, or the holdfast node and the UDP echo target.
//!
//! Per datagram echoed, per side: system calls (`perf stat`'s `raw_syscalls:sys_enter` per
//! thread: needs perf and the permission to trace, else "not measured"), heap allocations (a
//! counting global allocator), context switches (voluntary and involuntary, from
//! `/proc/self/task/*/status`) and CPU time (`/proc/self/task/*/schedstat`); CPU µs per datagram
//! is also CPU seconds per million datagrams.

// The counting allocator is a GlobalAlloc, an unsafe trait.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// The sides of the path, in the order the table shows them.
pub const SIDES: [&str; 3] = ["app", "client", "node"];
const OTHER: u8 = SIDES.len() as u8;

static ON: AtomicBool = AtomicBool::new(false);
static ALLOCS: [AtomicU64; SIDES.len() + 1] = [const { AtomicU64::new(0) }; SIDES.len() + 1];
/// Each thread of a side: (tid, side).
static THREADS: Mutex<Vec<(i32, u8)>> = Mutex::new(Vec::new());

thread_local! {
    static SIDE: Cell<u8> = const { Cell::new(OTHER) };
}

pub fn enabled() -> bool {
    std::env::var_os("HOLDFAST_BENCH_PROFILE").is_some_and(|v| v != "0")
}

/// Counts every allocation (and reallocation) by the side of the thread making it.
pub struct Counting;

// SAFETY: every call is passed on to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

fn count() {
    if ON.load(Ordering::Relaxed) {
        let side = SIDE.try_with(Cell::get).unwrap_or(OTHER);
        ALLOCS[usize::from(side)].fetch_add(1, Ordering::Relaxed);
    }
}

/// Marks the calling thread as one of `side`'s (a runtime's `on_thread_start`).
pub fn join(side: usize) {
    ON.store(true, Ordering::Relaxed);
    SIDE.with(|s| s.set(side as u8));
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    THREADS.lock().unwrap().push((tid, side as u8));
}

/// Per side: allocations, CPU ns, voluntary and involuntary switches.
#[derive(Clone, Copy, Default)]
struct Counts {
    allocs: u64,
    cpu_ns: u64,
    voluntary: u64,
    involuntary: u64,
}

/// One reading of every side's counters, and a `perf stat` counting each thread's system calls
/// from the reading on.
pub struct Start {
    counts: [Counts; SIDES.len()],
    perf: Option<(Child, std::path::PathBuf)>,
}

fn read_counts() -> [Counts; SIDES.len()] {
    let mut out = [Counts::default(); SIDES.len()];
    for (i, c) in out.iter_mut().enumerate() {
        c.allocs = ALLOCS[i].load(Ordering::Relaxed);
    }
    let threads = THREADS.lock().unwrap().clone();
    for (tid, side) in threads {
        let dir = format!("/proc/self/task/{tid}");
        let Ok(stat) = std::fs::read_to_string(format!("{dir}/schedstat")) else {
            continue;
        };
        let c = &mut out[usize::from(side)];
        c.cpu_ns += stat
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        let status = std::fs::read_to_string(format!("{dir}/status")).unwrap_or_default();
        for line in status.lines() {
            let value = |prefix: &str| {
                line.strip_prefix(prefix)
                    .and_then(|v| v.trim().parse::<u64>().ok())
            };
            if let Some(v) = value("voluntary_ctxt_switches:") {
                c.voluntary += v;
            } else if let Some(v) = value("nonvoluntary_ctxt_switches:") {
                c.involuntary += v;
            }
        }
    }
    out
}

/// Starts counting: a reading, and `perf stat` attached to the process (given a moment to
/// attach, during which the path is idle).
pub async fn start() -> Start {
    let out = std::env::temp_dir().join(format!("holdfast-bench-perf-{}", std::process::id()));
    let perf = Command::new("perf")
        .args([
            "stat",
            "-x",
            ";",
            "--per-thread",
            "-e",
            "raw_syscalls:sys_enter",
        ])
        .arg("-p")
        .arg(std::process::id().to_string())
        .arg("-o")
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()
        .map(|child| (child, out));
    if perf.is_some() {
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    Start {
        counts: read_counts(),
        perf,
    }
}

/// One side's cost per datagram over a phase.
pub struct PerDatagram {
    pub side: &'static str,
    pub syscalls: Option<f64>,
    pub allocs: f64,
    pub voluntary: f64,
    pub involuntary: f64,
    pub cpu_us: f64,
}

/// Stops counting and divides what each side spent by the `datagrams` echoed.
pub fn finish(start: Start, datagrams: u64) -> Vec<PerDatagram> {
    let end = read_counts();
    let syscalls = start.perf.and_then(|(child, out)| stop_perf(child, &out));
    let n = datagrams.max(1) as f64;
    SIDES
        .iter()
        .enumerate()
        .map(|(i, side)| {
            let (a, b) = (start.counts[i], end[i]);
            let d = |f: fn(&Counts) -> u64| f(&b).saturating_sub(f(&a)) as f64 / n;
            PerDatagram {
                side,
                syscalls: syscalls.as_ref().map(|per_side| per_side[i] as f64 / n),
                allocs: d(|c| c.allocs),
                voluntary: d(|c| c.voluntary),
                involuntary: d(|c| c.involuntary),
                cpu_us: d(|c| c.cpu_ns) / 1e3,
            }
        })
        .collect()
}

/// Interrupts `perf stat` and sums its per-thread counts by side.
fn stop_perf(mut child: Child, out: &std::path::Path) -> Option<[u64; SIDES.len()]> {
    // SAFETY: kill(2) on the child this process spawned and has not yet reaped.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().ok()?;
    let text = std::fs::read_to_string(out).ok()?;
    let _ = std::fs::remove_file(out);
    if !status.success() && !text.contains("raw_syscalls") {
        return None;
    }
    let sides: HashMap<i32, u8> = THREADS.lock().unwrap().iter().copied().collect();
    let mut per_side = [0u64; SIDES.len()];
    let mut seen = false;
    // Lines of `comm-tid;count;unit;event;...`.
    for line in text.lines() {
        let mut fields = line.split(';');
        let (Some(thread), Some(count)) = (fields.next(), fields.next()) else {
            continue;
        };
        let Some(tid) = thread
            .rsplit_once('-')
            .and_then(|(_, t)| t.trim().parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(count) = count.trim().parse::<u64>() else {
            continue;
        };
        seen = true;
        if let Some(&side) = sides.get(&tid) {
            per_side[usize::from(side)] += count;
        }
    }
    seen.then_some(per_side)
}

/// The table's rows for one phase and path.
pub fn print(phase: &str, path: &str, rows: &[PerDatagram]) {
    for r in rows {
        let syscalls = r
            .syscalls
            .map_or_else(|| "n/a".to_owned(), |s| format!("{s:.3}"));
        println!(
            "{phase:<22} {path:<8} {:<7} {syscalls:>9} {:>8.3} {:>8.3} {:>8.3} {:>8.3}",
            r.side, r.allocs, r.voluntary, r.involuntary, r.cpu_us
        );
    }
}

/// The table's header.
pub fn header() {
    println!(
        "profile, per datagram echoed (CPU µs per datagram = CPU s per million):\n{:<22} {:<8} {:<7} {:>9} {:>8} {:>8} {:>8} {:>8}",
        "phase", "path", "side", "syscalls", "allocs", "vol-cs", "invol-cs", "cpu µs"
    );
}

/// The same rows for the report.
pub fn json(phase: &str, path: &str, rows: &[PerDatagram]) -> Vec<serde_json::Value> {
    rows.iter()
        .map(|r| {
            serde_json::json!({
                "phase": phase,
                "path": path,
                "side": r.side,
                "syscalls_per_datagram": r.syscalls,
                "allocs_per_datagram": r.allocs,
                "voluntary_switches_per_datagram": r.voluntary,
                "involuntary_switches_per_datagram": r.involuntary,
                "cpu_us_per_datagram": r.cpu_us,
            })
        })
        .collect()
}
