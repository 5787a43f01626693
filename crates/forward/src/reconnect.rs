//! The client's reconnect pacing: holdfast-retry's gate on one key (the node), with a success that
//! must last — a connection that is accepted and then dropped at once is a failure of the same
//! streak, so a node that accepts and drops at once is not hammered.

use std::time::{Duration, Instant};

use holdfast_retry::{AttemptToken, KeyedGate, Lasting, Policy, Transition};

/// The reconnect gate of one client.
#[derive(Debug)]
pub struct Reconnect {
    gate: KeyedGate<()>,
    must_last: Duration,
    attempt: Option<AttemptToken<()>>,
    lasting: Option<Lasting<()>>,
}

/// Where the reconnect pacing stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pace {
    /// Attempt now.
    Now,
    /// Wait until then.
    Until(Instant),
}

impl Reconnect {
    /// A gate on `policy`; a connection counts as a success once it has lasted `must_last`.
    pub fn new(policy: Policy, must_last: Duration) -> Self {
        Reconnect {
            gate: KeyedGate::new(policy),
            must_last,
            attempt: None,
            lasting: None,
        }
    }

    /// Begins an attempt if the back-off allows one now.
    pub fn begin(&mut self, now: Instant) -> Pace {
        if self.attempt.is_some() || self.lasting.is_some() {
            // An attempt (or a connection) is already under way.
            return Pace::Until(now + self.must_last);
        }
        match self.gate.begin(&(), now) {
            Ok(token) => {
                self.attempt = Some(token);
                Pace::Now
            }
            Err(not_yet) => Pace::Until(not_yet.until),
        }
    }

    /// The attempt failed before connecting.
    pub fn failed(&mut self, now: Instant) -> Option<Transition<()>> {
        let token = self.attempt.take()?;
        Some(self.gate.fail(token, now, None))
    }

    /// The attempt connected at `now`: a success only once it has lasted (holdfast-retry's
    /// success that must last).
    pub fn connected(&mut self, now: Instant) {
        if let Some(token) = self.attempt.take() {
            self.lasting = Some(self.gate.succeed_provisionally(token, now, self.must_last));
        }
    }

    /// When the current connection will have lasted long enough to count, if one is up and has
    /// not yet counted.
    pub fn lasts_at(&self) -> Option<Instant> {
        self.lasting
            .as_ref()
            .filter(|l| !l.is_confirmed())
            .map(Lasting::lasts_at)
    }

    /// Call while connected: once the connection has lasted, the success counts (the streak is
    /// reset) and its transition is returned, once.
    // r[impl forward.reconnect]
    pub fn confirm(&mut self, now: Instant) -> Option<Transition<()>> {
        let lasting = self.lasting.as_mut()?;
        self.gate.confirm(lasting, now)
    }

    /// The connection ended at `now`. Before it lasted, it is a failure of the same streak; after,
    /// the success stands.
    // r[impl forward.reconnect]
    pub fn ended(&mut self, now: Instant) -> Option<Transition<()>> {
        let lasting = self.lasting.take()?;
        Some(self.gate.ended(lasting, now, None))
    }

    /// The current streak of failed attempts.
    pub fn failures(&self) -> u32 {
        self.gate.state(&()).map_or(0, |s| s.failures)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use holdfast_retry::{Clock, Jitter, ManualClock};

    fn gate() -> Reconnect {
        let policy = Policy::builder()
            .base(Duration::from_secs(1))
            .cap(Duration::from_secs(60))
            .jitter(Jitter::None)
            .build()
            .expect("policy");
        Reconnect::new(policy, Duration::from_secs(10))
    }

    fn wait(gate: &mut Reconnect, clock: &ManualClock) -> Duration {
        match gate.begin(clock.now()) {
            Pace::Now => Duration::ZERO,
            Pace::Until(at) => at - clock.now(),
        }
    }

    // r[verify forward.reconnect]
    #[test]
    fn a_connection_dropped_at_once_does_not_reset_the_back_off() {
        let clock = ManualClock::new();
        let mut gate = gate();
        assert_eq!(gate.begin(clock.now()), Pace::Now);
        gate.failed(clock.now());
        assert_eq!(wait(&mut gate, &clock), Duration::from_secs(1));
        clock.advance(Duration::from_secs(1));
        assert_eq!(gate.begin(clock.now()), Pace::Now);
        gate.failed(clock.now());
        assert_eq!(wait(&mut gate, &clock), Duration::from_secs(2));
        clock.advance(Duration::from_secs(2));
        // Accepted, then dropped after 100 ms: the third failure of the streak.
        assert_eq!(gate.begin(clock.now()), Pace::Now);
        gate.connected(clock.now());
        clock.advance(Duration::from_millis(100));
        assert_eq!(gate.confirm(clock.now()), None);
        gate.ended(clock.now());
        assert_eq!(gate.failures(), 3);
        assert_eq!(wait(&mut gate, &clock), Duration::from_secs(4));
    }

    // r[verify forward.reconnect]
    #[test]
    fn a_connection_that_lasts_resets_the_back_off() {
        let clock = ManualClock::new();
        let mut gate = gate();
        for _ in 0..3 {
            while gate.begin(clock.now()) != Pace::Now {
                clock.advance(Duration::from_secs(1));
            }
            gate.failed(clock.now());
        }
        assert_eq!(gate.failures(), 3);
        while gate.begin(clock.now()) != Pace::Now {
            clock.advance(Duration::from_secs(1));
        }
        gate.connected(clock.now());
        // While connected, nothing else is attempted.
        assert!(matches!(gate.begin(clock.now()), Pace::Until(_)));
        clock.advance(Duration::from_secs(10));
        let confirmed = gate.confirm(clock.now()).expect("lasted");
        assert_eq!(confirmed.failures, 0);
        assert_eq!(gate.confirm(clock.now()), None);
        clock.advance(Duration::from_secs(100));
        let ended = gate.ended(clock.now()).expect("ended");
        assert_eq!(ended.failures, 0, "the success that lasted stands");
        assert_eq!(gate.failures(), 0);
        assert_eq!(gate.begin(clock.now()), Pace::Now);
    }
}
