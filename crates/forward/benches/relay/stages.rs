//! Diagnostics of the paced phase, off unless `HOLDFAST_BENCH_STAGES=1`, printed beside the
//! round trips and never part of the report: how long each datagram took from the pacer to the
//! echo target (the outbound half of its round trip), the process's CPU time and context
//! switches, and each thread's time on a CPU and waiting for one (`/proc/self/task/*/schedstat`)
//! over each path's paced phase. `HOLDFAST_BENCH_PACED_ONLY=RATE` (in main.rs) runs the paced
//! phase alone at RATE, for profiling it without the throughput phase.

// getrusage(2).
#![allow(unsafe_code)]

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
/// The tag whose echoes are recorded (0: none).
pub static TAG: AtomicU64 = AtomicU64::new(0);
pub static OUTBOUND: Mutex<Vec<u64>> = Mutex::new(Vec::new());

pub fn enabled() -> bool {
    std::env::var_os("HOLDFAST_BENCH_STAGES").is_some_and(|v| v != "0")
}

/// The process-wide clock every send time is read from.
pub fn epoch() -> Instant {
    *EPOCH.get_or_init(Instant::now)
}

/// At an echo target: records the outbound time of each datagram of the recorded phase.
pub fn at_echo<'a>(echoes: impl Iterator<Item = &'a [u8]>) {
    let tag = TAG.load(Ordering::Relaxed);
    if tag == 0 {
        return;
    }
    let now = epoch().elapsed().as_nanos() as u64;
    let mut out = OUTBOUND.lock().unwrap();
    for e in echoes {
        if e.len() >= 24 && e[8..16] == tag.to_le_bytes() {
            let sent = u64::from_le_bytes(e[..8].try_into().unwrap());
            out.push(now.saturating_sub(sent));
        }
    }
}

/// The process's CPU time (µs) and context switches (voluntary, involuntary) so far.
pub fn usage() -> (f64, i64, i64) {
    // SAFETY: an all-zero rusage is a valid value of the plain C struct, which getrusage fills.
    let u = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        u
    };
    let us = |t: libc::timeval| t.tv_sec as f64 * 1e6 + t.tv_usec as f64;
    (us(u.ru_utime) + us(u.ru_stime), u.ru_nvcsw, u.ru_nivcsw)
}

/// Each thread of the process: (tid and name, ns on a CPU, ns waiting for one).
pub fn threads() -> Vec<(String, u64, u64)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
    {
        let dir = entry.path();
        let name = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        let stat = std::fs::read_to_string(dir.join("schedstat")).unwrap_or_default();
        let mut f = stat
            .split_whitespace()
            .map(|v| v.parse::<u64>().unwrap_or(0));
        let (run, wait) = (f.next().unwrap_or(0), f.next().unwrap_or(0));
        out.push((
            format!("{}:{}", entry.file_name().to_string_lossy(), name.trim()),
            run,
            wait,
        ));
    }
    out
}

/// Prints each thread's CPU and run-queue wait between two [`threads`] readings.
pub fn print_threads(label: &str, a: &[(String, u64, u64)], b: &[(String, u64, u64)]) {
    let mut line = format!("{label} threads (ms on cpu/waiting):");
    for (name, run, wait) in b {
        let (r0, w0) = a
            .iter()
            .find(|t| &t.0 == name)
            .map_or((0, 0), |t| (t.1, t.2));
        let (dr, dw) = (run - r0, wait - w0);
        if dr > 5_000_000 {
            line += &format!(" {name} {}/{}", dr / 1_000_000, dw / 1_000_000);
        }
    }
    println!("{line}");
}

/// p50/p99 of the recorded outbound times in µs, and clears them.
pub fn take() -> (f64, f64, usize) {
    TAG.store(0, Ordering::Relaxed);
    let mut v = std::mem::take(&mut *OUTBOUND.lock().unwrap());
    v.sort_unstable();
    let p = |q: f64| {
        if v.is_empty() {
            f64::NAN
        } else {
            v[((v.len() - 1) as f64 * q).round() as usize] as f64 / 1e3
        }
    };
    (p(0.5), p(0.99), v.len())
}

/// On a busy machine one stall of another process's making spoils a phase's p99; the p99 of
/// each twentieth of the phase's round trips (in arrival order), and their median, show whether
/// the tail is the path's own or a few stalls'.
pub fn windowed_p99(rtts: &[std::time::Duration]) {
    let chunk = rtts.len().div_ceil(20).max(1);
    let mut p99s: Vec<u64> = rtts
        .chunks(chunk)
        .map(|c| {
            let mut c: Vec<u64> = c.iter().map(|d| d.as_micros() as u64).collect();
            c.sort_unstable();
            c[((c.len() - 1) as f64 * 0.99).round() as usize]
        })
        .collect();
    let shown = p99s.clone();
    p99s.sort_unstable();
    println!(
        "p99 per twentieth of the phase, µs: {shown:?}; median {}",
        p99s[p99s.len() / 2]
    );
}
