//! The shared gate under real concurrency: single flight holds across threads.

// Test helpers outside #[test] fns: a broken setup should fail loudly.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use holdfast_retry::{Policy, Reason, SharedGate, WaitReason};

// r[verify retry.single-flight]
#[test]
fn twenty_threads_calling_begin_concurrently_get_one_grant() {
    for round in 0..50 {
        let gate = Arc::new(SharedGate::new(Policy::default()));
        let now = Instant::now();
        let barrier = Arc::new(Barrier::new(20));
        let handles: Vec<_> = (0..20)
            .map(|_| {
                let gate = Arc::clone(&gate);
                let barrier = Arc::clone(&barrier);
                thread::spawn(move || {
                    barrier.wait();
                    gate.begin(&"registry.local/app:1".to_string(), now)
                })
            })
            .collect();
        let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let grants: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
        assert_eq!(grants.len(), 1, "round {round}: {} grants", grants.len());
        for refused in results.iter().filter_map(|r| r.as_ref().err()) {
            assert_eq!(refused.reason, WaitReason::InFlight { attempt: 1 });
        }
    }
}

// r[verify retry.keys-independent]
#[test]
fn concurrent_failures_on_distinct_keys_are_counted_per_key() {
    // A long cap, so that no key becomes idle long enough to be dropped while others advance.
    let policy = Policy::builder()
        .base(Duration::from_secs(1))
        .cap(Duration::from_secs(3600))
        .build()
        .unwrap();
    let gate = Arc::new(SharedGate::with_shards(policy, 4));
    let t0 = Instant::now();
    let handles: Vec<_> = (0..8)
        .map(|worker| {
            let gate = Arc::clone(&gate);
            thread::spawn(move || {
                let mut now = t0;
                for _ in 0..worker + 1 {
                    let key = format!("key-{worker}");
                    let token = gate.begin(&key, now).expect("eligible");
                    let t = gate.fail(token, now, None);
                    assert!(matches!(t.reason, Reason::Failed { .. }));
                    now = t.next_attempt_at.unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    for worker in 0..8u32 {
        let state = gate.state(&format!("key-{worker}")).unwrap();
        assert_eq!(state.failures, worker + 1);
    }
    assert_eq!(gate.len(), 8);
    assert!(
        gate.check(&"other".to_string(), t0 + Duration::from_secs(1))
            .is_ok()
    );
}
