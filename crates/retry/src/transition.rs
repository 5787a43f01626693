//! What gates hand back: attempt tokens, refusals and transitions, as plain values.
//!
//! A transition is what a caller logs, counts, or turns into an operator-visible fault. The core
//! does no I/O; [`Transition::trace`] (feature `tracing`) emits one as a `tracing` event.

use std::fmt;
use std::time::Instant;

/// Permission to make one attempt on a key. Finish it with the gate's `succeed` or `fail`, or end
/// it without an outcome with `release`.
///
/// A token that the gate has since superseded (its attempt went stale and a newer one began)
/// finishes without effect.
#[must_use = "finish the attempt with succeed(), fail() or release(), or it stays in flight until stale"]
#[derive(Debug, PartialEq, Eq)]
pub struct AttemptToken<K> {
    pub(crate) key: K,
    pub(crate) generation: u32,
    pub(crate) attempt: u32,
    pub(crate) began: Instant,
    /// The key's idle state when the attempt began (when it was eligible from, and its streak),
    /// restored by a release; `None` for a key the gate held nothing about.
    pub(crate) prior: Option<(Instant, u32)>,
    /// The stale attempt this one superseded, recorded as a failure (see [`Reason::Expired`]).
    pub expired: Option<Transition<()>>,
}

impl<K> AttemptToken<K> {
    /// The key being attempted.
    pub fn key(&self) -> &K {
        &self.key
    }
    /// The attempt's number within its streak (1 for the first attempt after a success).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }
    /// When the attempt was granted.
    pub fn began(&self) -> Instant {
        self.began
    }
}

/// Why a key may not be attempted yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitReason {
    /// Backing off after this many consecutive failures.
    Backoff {
        /// The streak length.
        failures: u32,
        /// The key is escalated.
        escalated: bool,
    },
    /// An attempt is in flight (single flight); it may be superseded once stale.
    InFlight {
        /// That attempt's number within its streak.
        attempt: u32,
    },
    /// The key's own wait has passed, but the gate's global retry budget is spent.
    Budget,
}

/// A refusal: no attempt before `until`. `T` is the caller's time type: `Instant` for the gates,
/// whatever a [`crate::History`] is kept in for persisted history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotYet<T = Instant> {
    /// The earliest time the key may be attempted (for the in-flight case: when the attempt in
    /// flight becomes stale).
    pub until: T,
    /// Why.
    pub reason: WaitReason,
    /// A stale attempt that this call recorded as failed (see [`Reason::Expired`]). Boxed: it is
    /// rare, and a small refusal keeps the hot path of a check short.
    pub expired: Option<Box<Transition<(), T>>>,
}

/// What caused a transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The attempt succeeded; the key is fresh again.
    Succeeded,
    /// The attempt failed.
    Failed {
        /// A server hint (Retry-After) made the wait longer than the backoff alone.
        hint_applied: bool,
    },
    /// The attempt stayed in flight past the stale timeout; it was counted as failed when the
    /// key was next asked about, and may be superseded.
    Expired,
    /// The token had been superseded: the outcome was ignored and nothing changed.
    Superseded,
    /// The attempt ended without an outcome: the key is as it was before the attempt began.
    Released,
}

/// Escalation events: once per escalation, never a terminal state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Escalation {
    /// The streak reached the policy's threshold: file an operator-visible fault (once).
    Escalated,
    /// The first success after an escalation: clear the fault.
    Recovered,
}

/// One change of a key's state, for a `tracing` event or a caller's hook. `T` is the caller's
/// time type (`Instant` for the gates; a [`crate::History`]'s own for persisted history).
// r[impl retry.observe+2]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition<K, T = Instant> {
    /// The key.
    pub key: K,
    /// The finished attempt's number within its streak.
    pub attempt: u32,
    /// What happened.
    pub reason: Reason,
    /// The streak length after the transition (0 after a success).
    pub failures: u32,
    /// The earliest next attempt (`None`: any time).
    pub next_attempt_at: Option<T>,
    /// Set when this transition escalates or recovers the key.
    pub escalation: Option<Escalation>,
}

impl<K, T> Transition<K, T> {
    /// The same transition about another key value (e.g. attach the key to an expiry report).
    pub fn with_key<K2>(self, key: K2) -> Transition<K2, T> {
        Transition {
            key,
            attempt: self.attempt,
            reason: self.reason,
            failures: self.failures,
            next_attempt_at: self.next_attempt_at,
            escalation: self.escalation,
        }
    }
}

impl<K: fmt::Debug> Transition<K> {
    /// Emit this transition as a `tracing` event: `warn` when escalated, `info` when recovered,
    /// `debug` otherwise. `now` is the caller's clock (the one its `now` arguments come from), so
    /// `next_in`, the wait until the next attempt, is measured on that clock.
    // r[impl retry.observe+2]
    #[cfg(feature = "tracing")]
    pub fn trace(&self, now: Instant) {
        let wait = self.next_attempt_in(now);
        match self.escalation {
            Some(Escalation::Escalated) => {
                tracing::warn!(key = ?self.key, attempt = self.attempt, failures = self.failures, reason = ?self.reason, next_in = ?wait, "retry escalated")
            }
            Some(Escalation::Recovered) => {
                tracing::info!(key = ?self.key, attempt = self.attempt, reason = ?self.reason, "retry recovered")
            }
            None => {
                tracing::debug!(key = ?self.key, attempt = self.attempt, failures = self.failures, reason = ?self.reason, next_in = ?wait, "retry transition")
            }
        }
    }
}

impl<K> Transition<K> {
    /// The wait from the caller's `now` until the next attempt (`None`: any time).
    pub fn next_attempt_in(&self, now: Instant) -> Option<std::time::Duration> {
        self.next_attempt_at
            .map(|t| t.saturating_duration_since(now))
    }
}

impl<K: fmt::Display, T> fmt::Display for Transition<K, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} attempt {}: ", self.key, self.attempt)?;
        match self.reason {
            Reason::Succeeded => f.write_str("succeeded")?,
            Reason::Failed { .. } => write!(f, "failed ({} in a row)", self.failures)?,
            Reason::Expired => write!(f, "stale, counted as failed ({} in a row)", self.failures)?,
            Reason::Superseded => f.write_str("superseded, ignored")?,
            Reason::Released => write!(f, "released, no outcome ({} in a row)", self.failures)?,
        }
        match self.escalation {
            Some(Escalation::Escalated) => f.write_str(", escalated"),
            Some(Escalation::Recovered) => f.write_str(", recovered"),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn escalated(next_attempt_at: Instant) -> Transition<&'static str> {
        Transition {
            key: "registry.local/app:1",
            attempt: 5,
            reason: Reason::Failed {
                hint_applied: false,
            },
            failures: 5,
            next_attempt_at: Some(next_attempt_at),
            escalation: Some(Escalation::Escalated),
        }
    }

    // r[verify retry.observe+2]
    #[test]
    fn the_wait_is_measured_on_the_callers_clock() {
        // A caller's clock far from the process's: an hour ahead.
        let now = Instant::now() + Duration::from_secs(3600);
        let t = escalated(now + Duration::from_secs(30));
        assert_eq!(t.next_attempt_in(now), Some(Duration::from_secs(30)));
        assert_eq!(
            t.next_attempt_in(now + Duration::from_secs(60)),
            Some(Duration::ZERO)
        );
        assert_eq!(
            t.to_string(),
            "registry.local/app:1 attempt 5: failed (5 in a row), escalated"
        );
    }

    /// Collects what the fmt subscriber writes.
    #[cfg(feature = "tracing")]
    #[derive(Clone, Default)]
    struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    #[cfg(feature = "tracing")]
    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    // r[verify retry.observe+2]
    #[cfg(feature = "tracing")]
    #[test]
    fn a_traced_transition_reports_its_wait_on_the_callers_clock() {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .without_time()
            .with_writer(move || writer.clone())
            .finish();
        let now = Instant::now() + Duration::from_secs(3600);
        tracing::subscriber::with_default(subscriber, || {
            escalated(now + Duration::from_secs(30)).trace(now);
            let mut recovered = escalated(now);
            recovered.escalation = Some(Escalation::Recovered);
            recovered.reason = Reason::Succeeded;
            recovered.next_attempt_at = None;
            recovered.trace(now);
        });
        let out = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 2, "{out}");
        assert!(lines[0].starts_with(" WARN"), "{out}");
        assert!(lines[0].contains("retry escalated"), "{out}");
        assert!(lines[0].contains("next_in=Some(30s)"), "{out}");
        assert!(
            lines[1].starts_with(" INFO") && lines[1].contains("retry recovered"),
            "{out}"
        );
    }
}
