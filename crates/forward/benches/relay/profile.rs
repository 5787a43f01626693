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

use crate::figures::{Counts, per_datagram, perf_syscalls};
pub use crate::figures::{PerDatagram, SIDES};
const OTHER: u8 = SIDES.len() as u8;

/// Whether any thread has joined a side: until then (always, outside profile mode) the allocator
/// costs one relaxed load per allocation and counts nothing.
static ON: AtomicBool = AtomicBool::new(false);
/// Each side's counter on a cache line of its own: the sides' threads bump them concurrently.
static ALLOCS: [Padded; SIDES.len() + 1] = [const { Padded(AtomicU64::new(0)) }; SIDES.len() + 1];

#[repr(align(128))]
struct Padded(AtomicU64);
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
        ALLOCS[usize::from(side)].0.fetch_add(1, Ordering::Relaxed);
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

/// One reading of every side's counters, and a `perf stat` counting each thread's system calls
/// from the reading on.
pub struct Start {
    counts: [Counts; SIDES.len()],
    /// perf, and the file it writes (removed when dropped, a panic included).
    perf: Option<(Child, tempfile::NamedTempFile)>,
}

fn read_counts() -> [Counts; SIDES.len()] {
    let mut out = [Counts {
        allocs: 0,
        cpu_ns: Some(0),
        voluntary: Some(0),
        involuntary: Some(0),
    }; SIDES.len()];
    for (i, c) in out.iter_mut().enumerate() {
        c.allocs = ALLOCS[i].0.load(Ordering::Relaxed);
    }
    let threads = THREADS.lock().unwrap().clone();
    // A figure of a thread that cannot be read leaves its side's sum unknown (`None`), never
    // short.
    let add = |sum: &mut Option<u64>, v: Option<u64>| *sum = sum.zip(v).map(|(s, v)| s + v);
    for (tid, side) in threads {
        let dir = format!("/proc/self/task/{tid}");
        let c = &mut out[usize::from(side)];
        let cpu_ns = std::fs::read_to_string(format!("{dir}/schedstat"))
            .ok()
            .and_then(|stat| stat.split_whitespace().next()?.parse::<u64>().ok());
        add(&mut c.cpu_ns, cpu_ns);
        let status = std::fs::read_to_string(format!("{dir}/status")).unwrap_or_default();
        let value = |prefix: &str| {
            status.lines().find_map(|line| {
                line.strip_prefix(prefix)
                    .and_then(|v| v.trim().parse::<u64>().ok())
            })
        };
        add(&mut c.voluntary, value("voluntary_ctxt_switches:"));
        add(&mut c.involuntary, value("nonvoluntary_ctxt_switches:"));
    }
    out
}

/// Starts counting: a reading, and `perf stat` attached to the process (given a moment to
/// attach, during which the path is idle).
pub async fn start() -> Start {
    // A fresh file of this process's own (perf may run as root: never a predictable path).
    let Ok(out) = tempfile::NamedTempFile::new() else {
        return Start {
            counts: read_counts(),
            perf: None,
        };
    };
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
        .arg(out.path())
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

/// Stops counting and divides what each side spent by the `echoed` datagrams (received back).
pub fn finish(start: Start, echoed: u64) -> Vec<PerDatagram> {
    let end = read_counts();
    let output = start
        .perf
        .and_then(|(child, out)| stop_perf(child, out.path()));
    let sides: HashMap<i32, u8> = THREADS.lock().unwrap().iter().copied().collect();
    let syscalls = perf_syscalls(output.as_deref(), &sides);
    per_datagram(&start.counts, &end, &syscalls, echoed)
}

/// Interrupts `perf stat` (it exits 130 then) and returns what it wrote.
fn stop_perf(mut child: Child, out: &std::path::Path) -> Option<String> {
    // SAFETY: kill(2) on the child this process spawned and has not yet reaped.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    child.wait().ok()?;
    std::fs::read_to_string(out).ok()
}

/// The table's rows for one phase and path.
pub fn print(phase: &str, path: &str, rows: &[PerDatagram]) {
    for r in rows {
        let shown = |v: Option<f64>| v.map_or_else(|| "n/a".to_owned(), |v| format!("{v:.3}"));
        println!(
            "{phase:<22} {path:<8} {:<7} {:>9} {:>8.3} {:>8} {:>8} {:>8}",
            r.side,
            shown(r.syscalls),
            r.allocs,
            shown(r.voluntary),
            shown(r.involuntary),
            shown(r.cpu_us)
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
