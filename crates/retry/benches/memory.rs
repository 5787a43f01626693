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

/// The two gate shapes, for the reclaim measurements.
trait Gate {
    /// One ordinary call: begin and finish an attempt on `key` at `now`.
    fn touch(&mut self, key: u64, now: Instant);
    fn count(&self) -> usize;
}

impl Gate for KeyedGate<u64> {
    fn touch(&mut self, key: u64, now: Instant) {
        if let Ok(token) = self.begin(&key, now) {
            let _ = self.succeed(token, now);
        }
    }
    fn count(&self) -> usize {
        self.len()
    }
}

impl Gate for SharedGate<u64> {
    fn touch(&mut self, key: u64, now: Instant) {
        if let Ok(token) = self.begin(&key, now) {
            let _ = self.succeed(token, now);
        }
    }
    fn count(&self) -> usize {
        self.len()
    }
}

struct Reclaim {
    calls: u32,
    slowest: Duration,
    total: Duration,
    left: usize,
}

/// Ordinary calls on other keys, `step` apart in simulated time from `from`, until the gate is
/// empty: how many calls it took, and what the slowest one cost.
fn reclaim(gate: &mut impl Gate, from: Instant, step: Duration) -> Reclaim {
    let mut r = Reclaim {
        calls: 0,
        slowest: Duration::ZERO,
        total: Duration::ZERO,
        left: 0,
    };
    let mut now = from;
    while gate.count() > 0 && r.calls < 100_000 {
        let start = Instant::now();
        gate.touch(u64::MAX - u64::from(r.calls), now);
        let took = start.elapsed();
        r.slowest = r.slowest.max(took);
        r.total += took;
        r.calls += 1;
        now += step;
    }
    r.left = gate.count();
    r
}

fn fail_all(gate: &mut impl FnMut(u64), n: u64) {
    for key in 0..n {
        gate(key);
    }
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
    // Every key failed once at t0 (wait about 5 s); from this time on all of them are idle
    // for more than the cap and hold no information (used after a quiet spell).
    let idle = t0 + Duration::from_secs(6) + policy.cap() + Duration::from_secs(1);
    // Steady traffic: an ordinary call on some other key every 1/64 cap (4.7 s by default).
    let step = policy.cap() / 64;
    let mut rows = Vec::new();

    // KeyedGate.
    let before = live();
    let mut gate = KeyedGate::new(policy);
    fail_all(
        &mut |key| {
            let token = gate.begin(&key, t0).expect("fresh");
            let _ = gate.fail(token, t0, None);
        },
        n,
    );
    let keyed_bytes = live() - before;
    // Steady traffic from t0 on: partitions fall due one by one.
    let steady = reclaim(&mut gate, t0 + step, step);
    let keyed_after = live().saturating_sub(before);
    drop(gate);
    // A quiet spell, then one call: every partition is due at once.
    let mut gate = KeyedGate::new(policy);
    gate.touch(u64::MAX, t0);
    fail_all(
        &mut |key| {
            let token = gate.begin(&key, t0).expect("fresh");
            let _ = gate.fail(token, t0, None);
        },
        n,
    );
    let quiet = reclaim(&mut gate, idle + policy.cap(), step);
    drop(gate);
    rows.push(("keyed", keyed_bytes, keyed_after, steady, quiet));

    // SharedGate (16 shards).
    let before = live();
    let mut shared = SharedGate::new(policy);
    fail_all(
        &mut |key| {
            let token = shared.begin(&key, t0).expect("fresh");
            let _ = shared.fail(token, t0, None);
        },
        n,
    );
    let shared_bytes = live() - before;
    let steady = reclaim(&mut shared, t0 + step, step);
    let shared_after = live().saturating_sub(before);
    drop(shared);
    let mut shared = SharedGate::new(policy);
    fail_all(
        &mut |key| {
            let token = shared.begin(&key, t0).expect("fresh");
            let _ = shared.fail(token, t0, None);
        },
        n,
    );
    let quiet = reclaim(&mut shared, idle + policy.cap(), step);
    drop(shared);
    rows.push(("shared", shared_bytes, shared_after, steady, quiet));

    // governor's keyed limiter on the same keys.
    let before = live();
    let limiter = RateLimiter::keyed(Quota::per_hour(NonZeroU32::MIN));
    for k in 0..n {
        let _ = limiter.check_key(&k);
    }
    let governor_bytes = live() - before;
    drop(limiter);

    let mut fields = vec![
        format!("\"keys\":{n}"),
        format!("\"key_bytes\":{key_size}"),
        format!(
            "\"governor_bytes_per_key\":{:.1}",
            per_key(governor_bytes, n)
        ),
        format!("\"reclaim_step_ms\":{}", step.as_millis()),
    ];
    for (name, bytes, after, steady, quiet) in rows {
        fields.push(format!("\"{name}_bytes_per_key\":{:.1}", per_key(bytes, n)));
        fields.push(format!(
            "\"{name}_bytes_per_key_beyond_key\":{:.1}",
            per_key(bytes, n) - key_size
        ));
        fields.push(format!("\"{name}_bytes_left_after_reclaim\":{after}"));
        for (shape, r) in [("steady", steady), ("after_quiet", quiet)] {
            fields.push(format!("\"{name}_reclaim_{shape}_calls\":{}", r.calls));
            fields.push(format!("\"{name}_reclaim_{shape}_keys_left\":{}", r.left));
            fields.push(format!(
                "\"{name}_reclaim_{shape}_slowest_call_ms\":{:.3}",
                r.slowest.as_secs_f64() * 1e3
            ));
            fields.push(format!(
                "\"{name}_reclaim_{shape}_total_ms\":{:.3}",
                r.total.as_secs_f64() * 1e3
            ));
        }
    }
    println!("RESULT {{{}}}", fields.join(","));
}
