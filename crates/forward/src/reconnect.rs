//! The client's reconnect pacing: holdfast-retry's gate on one key (the node), with a success that
//! must last — a connection that is accepted and then dropped at once is a failure of the same
//! streak, so a node that accepts and drops at once is not hammered.

use std::time::{Duration, Instant};

use holdfast_retry::{AttemptToken, KeyedGate, Policy, Transition};

/// The reconnect gate of one client.
#[derive(Debug)]
pub struct Reconnect {
    gate: KeyedGate<()>,
    must_last: Duration,
    attempt: Option<AttemptToken<()>>,
    connected_at: Option<Instant>,
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
            connected_at: None,
        }
    }

    /// Begins an attempt if the back-off allows one now.
    pub fn begin(&mut self, now: Instant) -> Pace {
        if self.attempt.is_some() {
            // An attempt (or a connection) is already under way.
            return Pace::Until(now + self.must_last);
        }
        match self.gate.begin(&(), now) {
            Ok(token) => {
                self.attempt = Some(token);
                self.connected_at = None;
                Pace::Now
            }
            Err(not_yet) => Pace::Until(not_yet.until),
        }
    }

    /// The attempt failed before connecting.
    pub fn failed(&mut self, now: Instant) -> Option<Transition<()>> {
        let token = self.attempt.take()?;
        self.connected_at = None;
        Some(self.gate.fail(token, now, None))
    }

    /// The attempt connected at `now`: provisionally a success, until it has lasted.
    pub fn connected(&mut self, now: Instant) {
        if self.attempt.is_some() {
            self.connected_at = Some(now);
        }
    }

    /// When the current connection will have lasted long enough to count, if one is up and has
    /// not yet counted.
    pub fn lasts_at(&self) -> Option<Instant> {
        self.connected_at.map(|at| at + self.must_last)
    }

    /// Call while connected: once the connection has lasted, the success counts (the streak is
    /// reset) and its transition is returned, once.
    // r[impl forward.reconnect]
    pub fn confirm(&mut self, now: Instant) -> Option<Transition<()>> {
        let lasts_at = self.lasts_at()?;
        if now < lasts_at {
            return None;
        }
        let token = self.attempt.take()?;
        self.connected_at = None;
        Some(self.gate.succeed(token, now))
    }

    /// The connection ended at `now`. Before it lasted, it is a failure of the same streak; after,
    /// the success already counted.
    // r[impl forward.reconnect]
    pub fn ended(&mut self, now: Instant) -> Option<Transition<()>> {
        if let Some(transition) = self.confirm(now) {
            return Some(transition);
        }
        self.failed(now)
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
        assert_eq!(gate.ended(clock.now()), None);
        assert_eq!(gate.failures(), 0);
        assert_eq!(gate.begin(clock.now()), Pace::Now);
    }
}
