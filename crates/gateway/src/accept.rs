//! The accept loop's pacing: a failed accept is classified by holdfast-retry's I/O table, and a
//! run of them is paced on holdfast-retry's back-off, so a persistent condition (out of file
//! descriptors) neither spins nor stalls accepting for longer than the cap.

use std::time::Duration;

use holdfast_retry::{Class, Jitter, Policy};

/// The first pause after a failed accept.
pub(crate) const FIRST_PAUSE: Duration = Duration::from_millis(5);
/// The longest pause while accepts keep failing.
pub(crate) const MAX_PAUSE: Duration = Duration::from_secs(1);

/// What to do after a failed accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AfterError {
    /// Pause this long, then accept again.
    Pause(Duration),
    /// The listener is gone: stop accepting.
    Stop,
}

/// The streak of failed accepts and its schedule.
#[derive(Debug)]
pub(crate) struct AcceptPacer {
    policy: Option<Policy>,
    streak: u32,
}

impl AcceptPacer {
    /// A pacer whose jitter is seeded from the replica's identity, so replicas that run out of
    /// descriptors together do not retry in lockstep.
    pub(crate) fn new(replica_id: &str) -> Self {
        let policy = Policy::builder()
            .base(FIRST_PAUSE)
            .cap(MAX_PAUSE)
            .jitter(Jitter::Additive)
            .seed_from(replica_id)
            .build()
            .ok();
        Self { policy, streak: 0 }
    }

    /// An accept succeeded: the streak is over.
    pub(crate) fn accepted(&mut self) {
        self.streak = 0;
    }

    /// An accept failed with `err`.
    // r[impl gateway.edge.accept]
    pub(crate) fn failed(&mut self, err: &std::io::Error) -> AfterError {
        match holdfast_retry::classify::io(err) {
            Class::Fatal => AfterError::Stop,
            // One connection's failure or a shortage (EMFILE, ENOBUFS): both are paced, since
            // a listener that fails at once again would otherwise spin.
            Class::Item | Class::Transient => {
                self.streak = self.streak.saturating_add(1);
                let pause = self
                    .policy
                    .map_or(MAX_PAUSE, |p| p.jittered_delay(self.streak, 0));
                AfterError::Pause(pause)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn emfile() -> std::io::Error {
        // EMFILE ("too many open files") is 24 on every Unix the node runs on.
        std::io::Error::from_raw_os_error(24)
    }

    fn pause(a: AfterError) -> Duration {
        match a {
            AfterError::Pause(d) => d,
            AfterError::Stop => panic!("expected a pause"),
        }
    }

    // r[verify gateway.edge.accept]
    #[test]
    fn failed_accepts_back_off_to_the_cap_and_start_over_after_a_success() {
        let mut pacer = AcceptPacer::new("gw-a");
        let pauses: Vec<Duration> = (0..12).map(|_| pause(pacer.failed(&emfile()))).collect();
        for (i, p) in pauses.iter().enumerate() {
            // Doubling from the first pause to the cap, jittered upward by at most a fifth.
            let nominal = (FIRST_PAUSE * (1 << i)).min(MAX_PAUSE);
            assert!(
                *p >= nominal && *p <= nominal + nominal / 5,
                "{i}: {pauses:?}"
            );
        }
        // Twelve EMFILEs in a row take seconds, not a spin.
        assert!(pauses.iter().sum::<Duration>() >= Duration::from_secs(4));
        pacer.accepted();
        assert!(pause(pacer.failed(&emfile())) < FIRST_PAUSE * 2);
        // A reset before accept is one connection's failure: paced too, never the end.
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionAborted);
        assert!(matches!(pacer.failed(&reset), AfterError::Pause(_)));
        let gone = std::io::Error::from(std::io::ErrorKind::NotConnected);
        assert_eq!(pacer.failed(&gone), AfterError::Stop);
    }

    #[test]
    fn replicas_jitter_apart() {
        let mut a = AcceptPacer::new("gw-a");
        let mut b = AcceptPacer::new("gw-b");
        let pa: Vec<_> = (0..6).map(|_| pause(a.failed(&emfile()))).collect();
        let pb: Vec<_> = (0..6).map(|_| pause(b.failed(&emfile()))).collect();
        assert_ne!(pa, pb);
    }
}
