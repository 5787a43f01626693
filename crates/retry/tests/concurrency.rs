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

/// A key whose `Hash` panics when told to, to poison a shard's mutex from inside the gate.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Touchy(&'static str);

thread_local! {
    /// Hashes left before one panics (`None`: never).
    static HASHES_BEFORE_PANIC: std::cell::Cell<Option<u32>> = const { std::cell::Cell::new(None) };
}

impl std::hash::Hash for Touchy {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        HASHES_BEFORE_PANIC.with(|left| match left.get() {
            Some(0) => {
                left.set(None);
                panic!("hash failed inside the gate");
            }
            Some(n) => left.set(Some(n - 1)),
            None => {}
        });
        self.0.hash(state);
    }
}

#[test]
fn a_panic_inside_a_shard_does_not_disable_the_gate() {
    let gate = SharedGate::with_shards(Policy::default(), 1);
    let now = Instant::now();
    let key = Touchy("registry.local/app:1");
    let token = gate.begin(&key, now).unwrap();
    let _ = gate.fail(token, now, None);
    // The first hash picks the shard; the second, under the shard's lock, panics and poisons it.
    HASHES_BEFORE_PANIC.with(|left| left.set(Some(1)));
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| gate.check(&key, now)));
    assert!(panicked.is_err());
    // The gate goes on with the state it had: still backing off after one failure.
    let state = gate.state(&key).expect("state survives the poisoned lock");
    assert_eq!(state.failures, 1);
    let refused = gate.begin(&key, now).unwrap_err();
    assert_eq!(
        refused.reason,
        WaitReason::Backoff {
            failures: 1,
            escalated: false
        }
    );
    let token = gate
        .begin(&key, state.next_attempt_at)
        .expect("eligible once the wait passed");
    assert_eq!(gate.succeed(token, now).reason, Reason::Succeeded);
    assert!(gate.is_empty());
}

// r[verify retry.memory+2]
#[test]
fn a_shared_gate_drops_idle_keys_in_shards_that_no_call_reaches() {
    let policy = Policy::default();
    let gate = SharedGate::new(policy);
    let t0 = Instant::now();
    for i in 0..1000 {
        let key = format!("image-{i}");
        let token = gate.begin(&key, t0).unwrap();
        let _ = gate.fail(token, t0, None);
    }
    assert_eq!(gate.len(), 1000);
    // Every key is eligible before t0 + 6 s, so it holds nothing from t0 + 6 s + cap on; a
    // quarter cap later, one call on one key (one shard) is enough to drop them all.
    let later = t0 + Duration::from_secs(6) + policy.cap() + policy.cap() / 4;
    let token = gate.begin(&"busy".to_string(), later).unwrap();
    assert_eq!(gate.len(), 1, "only the key in flight is left");
    assert_eq!(gate.state(&"image-0".to_string()), None);
    let _ = gate.succeed(token, later);
    assert!(gate.is_empty());
}
