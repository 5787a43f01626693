//! The pacing of a cluster backend's retries (registration, keep-alive, subscriber reconnects):
//! holdfast-retry's gate with one key, its jitter seeded from the replica's identity so replicas
//! failing against one backend do not come back in lockstep.

use std::time::Duration;

use holdfast_retry::{AttemptToken, KeyedGate, Lasting, Policy};
use tokio::time::Instant;

/// The first pause after a backend failure.
pub const BACKOFF_BASE: Duration = Duration::from_millis(100);
/// The longest pause between two attempts while a backend stays down.
pub const BACKOFF_CAP: Duration = Duration::from_secs(5);

/// One loop's attempts against a backend, paced by a holdfast-retry gate.
pub(crate) struct Backoff {
    gate: KeyedGate<String>,
    key: &'static str,
}

impl Backoff {
    /// A pacer for the loop `key` (the gate's key and jitter key), seeded with `seed`.
    pub(crate) fn new(key: &'static str, seed: u64) -> Self {
        Self::with_policy(key, policy(seed))
    }

    pub(crate) fn with_policy(key: &'static str, policy: Policy) -> Self {
        Self {
            gate: KeyedGate::new(policy),
            key,
        }
    }

    /// Waits until the gate grants the next attempt.
    pub(crate) async fn ready(&mut self) -> AttemptToken<String> {
        loop {
            match self.gate.begin(self.key, Instant::now().into_std()) {
                Ok(token) => return token,
                Err(not_yet) => tokio::time::sleep_until(Instant::from_std(not_yet.until)).await,
            }
        }
    }

    /// The attempt worked: the streak ends.
    pub(crate) fn succeed(&mut self, token: AttemptToken<String>) {
        self.gate.succeed(token, Instant::now().into_std());
    }

    /// The attempt failed: the streak grows, and the next attempt waits longer.
    pub(crate) fn fail(&mut self, token: AttemptToken<String>) {
        self.gate.fail(token, Instant::now().into_std(), None);
    }

    /// The attempt connected, but ends the streak only if it stays up for `must_last`; a
    /// connection that drops at once keeps the back-off growing.
    pub(crate) fn succeed_provisionally(
        &mut self,
        token: AttemptToken<String>,
        must_last: Duration,
    ) -> Lasting<String> {
        self.gate
            .succeed_provisionally(token, Instant::now().into_std(), must_last)
    }

    /// What [`Backoff::succeed_provisionally`] started has ended.
    pub(crate) fn ended(&mut self, lasting: Lasting<String>) {
        self.gate.ended(lasting, Instant::now().into_std(), None);
    }

    /// Consecutive failures so far.
    pub(crate) fn failures(&self) -> u32 {
        self.gate.state(self.key).map_or(0, |s| s.failures)
    }
}

/// The cluster backends' policy: [`BACKOFF_BASE`] doubling to [`BACKOFF_CAP`], additive jitter
/// from `seed`.
// r[impl gateway.cluster.jitter-seed]
pub fn policy(seed: u64) -> Policy {
    Policy::builder()
        .base(BACKOFF_BASE)
        .cap(BACKOFF_CAP)
        .seed(seed)
        .build()
        .unwrap_or_default()
}

/// The default jitter seed of a replica: a stable hash of its id (the node passes
/// `NodeIdentity::seed("gateway")` instead).
pub fn replica_seed(replica_id: &str) -> u64 {
    holdfast_retry::stable_hash(&("gateway", replica_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    // r[verify gateway.cluster.jitter-seed]
    #[test]
    fn replicas_with_different_ids_wait_differently_after_the_same_failures() {
        let a = policy(replica_seed("gw-a"));
        let b = policy(replica_seed("gw-b"));
        let key = holdfast_retry::stable_hash("register");
        let waits = |p: &Policy| {
            (1..8)
                .map(|n| p.wait_after(n, key, None))
                .collect::<Vec<_>>()
        };
        assert_ne!(waits(&a), waits(&b), "seeded per replica");
        assert_eq!(waits(&a), waits(&policy(replica_seed("gw-a"))), "stable");
        for (n, w) in (1..8).zip(waits(&a)) {
            let nominal = a.nominal_delay(n);
            assert!(w >= nominal && w <= nominal + nominal / 5, "{n}: {w:?}");
        }
        assert_eq!(a.nominal_delay(20), BACKOFF_CAP);
    }

    #[tokio::test(start_paused = true)]
    async fn the_gate_paces_a_failing_loop() {
        let mut b = Backoff::new("register", 7);
        let start = Instant::now();
        for _ in 0..4 {
            let t = b.ready().await;
            b.fail(t);
        }
        let t = b.ready().await;
        // 100 + 200 + 400 + 800 ms at least (jitter only adds).
        assert!(
            start.elapsed() >= Duration::from_millis(1500),
            "{:?}",
            start.elapsed()
        );
        assert_eq!(b.failures(), 4);
        b.succeed(t);
        assert_eq!(b.failures(), 0);
    }
}
