//! Keyed gate with 1,000,000 failing keys: the cost of an eligibility check and of recording a
//! failure, against governor 0.10's keyed rate limiter on the same keys.
//!
//! Run through `cargo xtask bench retry`, which collects the medians into target/bench/retry.json.
//! `HOLDFAST_BENCH_KEYS` overrides the number of keys.

// Bench harness code: a broken setup should stop the run loudly.
#![allow(clippy::expect_used, clippy::unwrap_used)]
// criterion_group! generates an undocumented public function.
#![allow(missing_docs)]

use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use governor::{Quota, RateLimiter};
use holdfast_retry::{KeyedGate, Policy, SharedGate};

fn keys() -> u64 {
    std::env::var("HOLDFAST_BENCH_KEYS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000)
}

/// A gate in which every key has failed once at `t0`.
fn failing_gate(n: u64, t0: Instant) -> KeyedGate<u64> {
    let mut gate = KeyedGate::new(Policy::default());
    for key in 0..n {
        let token = gate.begin(&key, t0).expect("fresh key");
        let _ = gate.fail(token, t0, None);
    }
    gate
}

fn shared_failing_gate(n: u64, t0: Instant) -> SharedGate<u64> {
    let gate = SharedGate::new(Policy::default());
    for key in 0..n {
        let token = gate.begin(&key, t0).expect("fresh key");
        let _ = gate.fail(token, t0, None);
    }
    gate
}

fn check(c: &mut Criterion) {
    check_with(c, "check", keys());
    // A working set that fits in cache: the CPU cost of a check without the memory stalls.
    check_with(c, "check-10k", 10_000);
}

fn check_with(c: &mut Criterion, name: &str, n: u64) {
    let t0 = Instant::now();
    let mut group = c.benchmark_group(name);

    // The reconciler shape: one tick time for a pass over all keys.
    let gate = failing_gate(n, t0);
    let tick = t0 + Duration::from_secs(1);
    let mut key = 0u64;
    group.bench_function("holdfast-keyed", |b| {
        b.iter(|| {
            key = if key + 1 == n { 0 } else { key + 1 };
            black_box(gate.check(black_box(&key), tick).is_ok())
        })
    });
    // The same, reading the clock on every call as governor does.
    group.bench_function("holdfast-keyed-clock-per-call", |b| {
        b.iter(|| {
            key = if key + 1 == n { 0 } else { key + 1 };
            black_box(gate.check(black_box(&key), Instant::now()).is_ok())
        })
    });
    drop(gate);

    let shared = shared_failing_gate(n, t0);
    group.bench_function("holdfast-shared", |b| {
        b.iter(|| {
            key = if key + 1 == n { 0 } else { key + 1 };
            black_box(shared.check(black_box(&key), tick).is_ok())
        })
    });
    drop(shared);

    // The floor: a bare hashbrown lookup of a 16-byte value on the same keys (what any keyed
    // store pays before doing anything).
    let bare: hashbrown::HashMap<u64, [u64; 2]> = (0..n).map(|k| (k, [k, k])).collect();
    group.bench_function("hashbrown-get-floor", |b| {
        b.iter(|| {
            key = if key + 1 == n { 0 } else { key + 1 };
            black_box(bare.get(black_box(&key)).map(|v| v[0]))
        })
    });
    drop(bare);

    // governor: one cell per hour per key, each key already spent, so every check is refused.
    let quota = Quota::per_hour(NonZeroU32::MIN);
    let limiter = RateLimiter::keyed(quota);
    for k in 0..n {
        let _ = limiter.check_key(&k);
    }
    group.bench_function("governor-keyed", |b| {
        b.iter(|| {
            key = if key + 1 == n { 0 } else { key + 1 };
            black_box(limiter.check_key(black_box(&key)).is_ok())
        })
    });
    group.finish();
}

fn record_failure(c: &mut Criterion) {
    let n = keys();
    let t0 = Instant::now();
    let mut gate = failing_gate(n, t0);
    // Every key failed once at t0: all are eligible once the longest first wait has passed.
    let mut now = t0 + Policy::default().base() * 6 / 5;
    let mut key = 0u64;
    let mut group = c.benchmark_group("fail");
    // Tokens are taken untimed; only `fail` is timed. When the pass over all keys wraps, time
    // moves to the latest deadline of the previous pass: every key is eligible again, none has
    // been quiet for a cap, so keys climb their streaks to the cap and stay there, failing.
    let mut latest = now;
    group.bench_function("holdfast-keyed", |b| {
        b.iter_custom(|iters| {
            let mut tokens = Vec::with_capacity(iters as usize);
            for _ in 0..iters {
                key += 1;
                if key == n {
                    key = 0;
                    now = now.max(latest);
                }
                if let Ok(token) = gate.begin(&key, now) {
                    tokens.push(token);
                }
            }
            let count = tokens.len().max(1) as u32;
            let start = Instant::now();
            for token in tokens {
                let t = gate.fail(token, now, None);
                if let Some(next) = t.next_attempt_at {
                    latest = latest.max(next);
                }
                black_box(t);
            }
            // Scale to the requested iterations (begin may refuse a key mid-pass; rare).
            start.elapsed() * (iters as u32) / count
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default();
    targets = check, record_failure
}
criterion_main!(benches);
