//! Memory per failing key (counted by a global allocator), and what reclaiming 1,000,000 idle
//! keys costs. Prints one JSON object on a line starting with `RESULT `.

// A counting allocator needs `unsafe impl GlobalAlloc`; it only forwards to the system allocator.
#![allow(unsafe_code)]
// Bench harness code: a broken setup should stop the run loudly.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use governor::{Quota, RateLimiter};
use holdfast_retry::{KeyedGate, Policy, SharedGate};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call forwards to `System` with the caller's layout, and only adds bookkeeping.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded unchanged.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded unchanged.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size, Ordering::Relaxed);
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live() -> usize {
    LIVE.load(Ordering::Relaxed)
}

fn per_key(bytes: usize, n: u64) -> f64 {
    bytes as f64 / n as f64
}

fn main() {
    // `cargo bench` passes `--bench`; nothing to parse.
    let n: u64 = std::env::var("HOLDFAST_BENCH_KEYS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let key_size = std::mem::size_of::<u64>() as f64;
    let policy = Policy::default();
    let t0 = Instant::now();

    // KeyedGate.
    let before = live();
    let mut gate = KeyedGate::new(policy);
    for key in 0..n {
        let token = gate.begin(&key, t0).expect("fresh");
        let _ = gate.fail(token, t0, None);
    }
    let keyed_bytes = live() - before;
    // Reclaim: all keys idle past the cap; one ordinary call on another key later sweeps them.
    let later = t0 + policy.max_wait() + policy.cap() + policy.cap() / 4 + Duration::from_secs(1);
    let start = Instant::now();
    let token = gate.begin(&u64::MAX, later).expect("fresh");
    let reclaim_call = start.elapsed();
    let _ = gate.succeed(token, later);
    let keyed_after = live().saturating_sub(before);
    let keyed_left = gate.len();
    drop(gate);

    // SharedGate (16 shards): a call sweeps only its own shard.
    let before = live();
    let shared = SharedGate::new(policy);
    for key in 0..n {
        let token = shared.begin(&key, t0).expect("fresh");
        let _ = shared.fail(token, t0, None);
    }
    let shared_bytes = live() - before;
    let start = Instant::now();
    let mut probe = u64::MAX;
    let mut calls = 0u32;
    let mut slowest = Duration::ZERO;
    while !shared.is_empty() && calls < 10_000 {
        let call = Instant::now();
        if let Ok(token) = shared.begin(&probe, later) {
            let _ = shared.succeed(token, later);
        }
        slowest = slowest.max(call.elapsed());
        probe -= 1;
        calls += 1;
    }
    let shared_reclaim = start.elapsed();
    let shared_after = live().saturating_sub(before);
    drop(shared);

    // governor's keyed limiter on the same keys.
    let before = live();
    let limiter = RateLimiter::keyed(Quota::per_hour(NonZeroU32::MIN));
    for k in 0..n {
        let _ = limiter.check_key(&k);
    }
    let governor_bytes = live() - before;
    drop(limiter);

    let result = format!(
        concat!(
            "{{\"keys\":{},\"key_bytes\":{},",
            "\"keyed_bytes_per_key\":{:.1},\"keyed_bytes_per_key_beyond_key\":{:.1},",
            "\"shared_bytes_per_key\":{:.1},\"shared_bytes_per_key_beyond_key\":{:.1},",
            "\"governor_bytes_per_key\":{:.1},",
            "\"keyed_reclaim_call_ms\":{:.3},\"keyed_keys_left_after_reclaim\":{},",
            "\"keyed_bytes_left_after_reclaim\":{},",
            "\"shared_reclaim_calls\":{},\"shared_reclaim_total_ms\":{:.3},",
            "\"shared_reclaim_slowest_call_ms\":{:.3},\"shared_bytes_left_after_reclaim\":{}}}"
        ),
        n,
        key_size,
        per_key(keyed_bytes, n),
        per_key(keyed_bytes, n) - key_size,
        per_key(shared_bytes, n),
        per_key(shared_bytes, n) - key_size,
        per_key(governor_bytes, n),
        reclaim_call.as_secs_f64() * 1e3,
        keyed_left,
        keyed_after,
        calls,
        shared_reclaim.as_secs_f64() * 1e3,
        slowest.as_secs_f64() * 1e3,
        shared_after,
    );
    println!("RESULT {result}");
}
