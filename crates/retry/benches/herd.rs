//! A herd simulation: N clients contend for one row with optimistic concurrency, backing off with
//! each jitter strategy (base 5 ms, cap 2 s, as in the AWS "Exponential Backoff and Jitter"
//! simulator). Prints one JSON object on a line starting with `RESULT `.
//!
//! Model: every client starts at t = 0. An attempt reads the row at t and commits at t + L (L = 1 ms
//! and 10 ms, reported separately); the
//! commit succeeds if no other commit succeeded after its read. A client that loses backs off by
//! `Policy::jittered_delay` (streak = its failures so far, jitter key = its id, seed = the run)
//! and tries again; it is done after its first success. Simulated time only; nothing sleeps.

// Bench harness code: a broken setup should stop the run loudly.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use holdfast_retry::{Jitter, Policy};

const CLIENTS: u64 = 100;
const RUNS: u64 = 20;
/// How long one attempt holds its read before committing: light and heavy contention.
const LATENCIES_MS: [u64; 2] = [1, 10];

#[derive(Clone, Copy)]
enum Strategy {
    Crate(Jitter),
    /// Additive jitter clamped to the cap: not offered by the crate, shown for comparison.
    AdditiveClamped,
}

impl Strategy {
    fn name(self) -> &'static str {
        match self {
            Strategy::Crate(Jitter::None) => "none",
            Strategy::Crate(Jitter::Additive) => "additive",
            Strategy::Crate(Jitter::Full) => "full",
            Strategy::Crate(Jitter::Equal) => "equal",
            Strategy::Crate(Jitter::Decorrelated) => "decorrelated",
            Strategy::AdditiveClamped => "additive-clamped-at-cap",
        }
    }

    fn policy(self, seed: u64) -> Policy {
        let jitter = match self {
            Strategy::Crate(j) => j,
            Strategy::AdditiveClamped => Jitter::Additive,
        };
        Policy::builder()
            .base(Duration::from_millis(5))
            .cap(Duration::from_secs(2))
            .jitter(jitter)
            .seed(seed)
            .build()
            .expect("valid policy")
    }

    fn wait(self, policy: &Policy, failures: u32, client: u64) -> Duration {
        let d = policy.jittered_delay(failures, client);
        match self {
            Strategy::AdditiveClamped => d.min(policy.cap()),
            Strategy::Crate(_) => d,
        }
    }
}

struct Outcome {
    completion: Duration,
    calls: u64,
    early_retries: u64,
    retries: u64,
}

fn simulate(strategy: Strategy, seed: u64, latency: Duration) -> Outcome {
    let policy = strategy.policy(seed);
    // (commit time, client, read time)
    let mut pending: BinaryHeap<Reverse<(Duration, u64, Duration)>> = (0..CLIENTS)
        .map(|c| Reverse((latency, c, Duration::ZERO)))
        .collect();
    let mut failures = vec![0u32; CLIENTS as usize];
    let mut last_success: Option<Duration> = None;
    let mut out = Outcome {
        completion: Duration::ZERO,
        calls: 0,
        early_retries: 0,
        retries: 0,
    };
    while let Some(Reverse((commit, client, read))) = pending.pop() {
        out.calls += 1;
        if last_success.is_none_or(|s| s <= read) {
            last_success = Some(commit);
            out.completion = out.completion.max(commit);
            continue;
        }
        let n = &mut failures[client as usize];
        *n += 1;
        let wait = strategy.wait(&policy, *n, client);
        out.retries += 1;
        if wait < policy.nominal_delay(*n) {
            out.early_retries += 1;
        }
        let next = commit + wait;
        pending.push(Reverse((next + latency, client, next)));
    }
    out
}

fn main() {
    let strategies = [
        Strategy::Crate(Jitter::Full),
        Strategy::Crate(Jitter::Decorrelated),
        Strategy::Crate(Jitter::Equal),
        Strategy::Crate(Jitter::Additive),
        Strategy::AdditiveClamped,
        Strategy::Crate(Jitter::None),
    ];
    let mut scenarios = Vec::new();
    for latency_ms in LATENCIES_MS {
        let latency = Duration::from_millis(latency_ms);
        let mut rows = Vec::new();
        for strategy in strategies {
            let (mut completion, mut calls, mut early, mut retries) = (0.0, 0u64, 0u64, 0u64);
            for seed in 0..RUNS {
                let o = simulate(strategy, seed, latency);
                completion += o.completion.as_secs_f64();
                calls += o.calls;
                early += o.early_retries;
                retries += o.retries;
            }
            rows.push(format!(
                "{{\"strategy\":\"{}\",\"completion_s\":{:.2},\"calls\":{:.0},\"retries_shorter_than_nominal\":{:.3}}}",
                strategy.name(),
                completion / RUNS as f64,
                calls as f64 / RUNS as f64,
                early as f64 / retries.max(1) as f64,
            ));
        }
        scenarios.push(format!(
            "{{\"latency_ms\":{latency_ms},\"strategies\":[{}]}}",
            rows.join(",")
        ));
    }
    println!(
        "RESULT {{\"clients\":{CLIENTS},\"runs\":{RUNS},\"base_ms\":5,\"cap_ms\":2000,\"scenarios\":[{}]}}",
        scenarios.join(",")
    );
}
