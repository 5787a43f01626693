//! The crash-loop detector: N crashes within a window trips it, once, with a report.
//!
//! A supervisor that restarts a process records each exit. Clean exits and restarts the
//! supervisor forced do not count. When the threshold is reached inside the window the detector
//! leaves a one-shot report: the next paced attempt takes it (to mark that attempt as following a
//! crash loop), while status pages can peek at it without consuming it.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::policy::{MAX_POLICY_DURATION, PolicyError};

/// How a supervised process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// It failed on its own (non-zero exit, signal, panic): counts toward a crash loop.
    Crashed,
    /// It exited cleanly: does not count.
    Clean,
    /// The supervisor stopped it (restart, shutdown): does not count.
    Forced,
}

/// What tripped the detector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CrashLoopReport {
    /// Crashes inside the window when it tripped.
    pub crashes: u32,
    /// The window.
    pub window: Duration,
    /// The oldest crash counted.
    pub first: Instant,
    /// The crash that tripped it.
    pub last: Instant,
}

/// Counts crashes in a sliding window.
///
/// A supervisor paces restarts with a gate and marks the restart that follows a crash loop:
///
/// ```
/// use std::time::{Duration, Instant};
/// use holdfast_retry::{CrashLoopDetector, Exit, KeyedGate, Policy};
///
/// let mut gate = KeyedGate::new(Policy::default());
/// let mut crashes = CrashLoopDetector::default(); // 3 crashes within 60 s
/// let mut now = Instant::now();
/// let mut marked = 0;
/// for _ in 0..4 {
///     let Ok(token) = gate.begin(&"worker", now) else { unreachable!("we wait below") };
///     if let Some(report) = crashes.take_report() {
///         marked += 1; // log "restarting after {report.crashes} crashes in {report.window:?}"
///         assert_eq!(report.crashes, 3);
///     }
///     // ... the process runs, then crashes:
///     crashes.record(Exit::Crashed, now);
///     let failed = gate.fail(token, now, None);
///     if let Some(report) = crashes.peek_report() {
///         assert!(report.last == now); // a status page can show it without consuming it
///     }
///     now = failed.next_attempt_at.expect("paced");
/// }
/// assert_eq!(marked, 1, "the report is consumed by exactly one paced attempt");
/// ```
#[derive(Debug, Clone)]
pub struct CrashLoopDetector {
    threshold: u32,
    window: Duration,
    crashes: VecDeque<Instant>,
    report: Option<CrashLoopReport>,
}

impl Default for CrashLoopDetector {
    /// 3 crashes within 60 seconds.
    fn default() -> Self {
        Self {
            threshold: 3,
            window: Duration::from_secs(60),
            crashes: VecDeque::new(),
            report: None,
        }
    }
}

impl CrashLoopDetector {
    /// Trip on `threshold` crashes within `window`.
    pub fn new(threshold: u32, window: Duration) -> Result<Self, PolicyError> {
        if threshold == 0 {
            return Err(PolicyError::Zero("threshold"));
        }
        if window.is_zero() {
            return Err(PolicyError::Zero("window"));
        }
        if window > MAX_POLICY_DURATION {
            return Err(PolicyError::TooLong {
                field: "window",
                value: window,
            });
        }
        Ok(Self {
            threshold,
            window,
            ..Self::default()
        })
    }

    /// Record an exit at `now`. Returns the report when this exit trips the detector.
    ///
    /// After a trip the count starts again, so a loop that keeps crashing trips again after
    /// another `threshold` crashes rather than on every crash.
    // r[impl retry.crash-loop]
    pub fn record(&mut self, exit: Exit, now: Instant) -> Option<CrashLoopReport> {
        if exit != Exit::Crashed {
            return None;
        }
        // Prune crashes older than the window; memory stays at most `threshold` entries.
        while let Some(first) = self.crashes.front() {
            if now.saturating_duration_since(*first) > self.window {
                self.crashes.pop_front();
            } else {
                break;
            }
        }
        self.crashes.push_back(now);
        let count = u32::try_from(self.crashes.len()).unwrap_or(u32::MAX);
        if count < self.threshold {
            return None;
        }
        let report = CrashLoopReport {
            crashes: count,
            window: self.window,
            first: self.crashes.front().copied().unwrap_or(now),
            last: now,
        };
        self.crashes.clear();
        self.report = Some(report);
        Some(report)
    }

    /// Take the pending report, once: the next paced attempt calls this.
    // r[impl retry.crash-loop.report]
    pub fn take_report(&mut self) -> Option<CrashLoopReport> {
        self.report.take()
    }

    /// Look at the pending report without consuming it.
    pub fn peek_report(&self) -> Option<&CrashLoopReport> {
        self.report.as_ref()
    }

    /// Crashes currently inside the window (as of the last recorded exit).
    pub fn recent_crashes(&self) -> usize {
        self.crashes.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // r[verify retry.crash-loop]
    #[test]
    fn trips_on_the_third_crash_in_the_window() {
        let mut d = CrashLoopDetector::default();
        let t0 = Instant::now();
        let s = Duration::from_secs;
        assert_eq!(d.record(Exit::Crashed, t0), None);
        assert_eq!(d.record(Exit::Crashed, t0 + s(20)), None);
        let report = d
            .record(Exit::Crashed, t0 + s(60))
            .expect("third crash within 60 s trips");
        assert_eq!(
            report,
            CrashLoopReport {
                crashes: 3,
                window: s(60),
                first: t0,
                last: t0 + s(60)
            }
        );
    }

    // r[verify retry.crash-loop]
    #[test]
    fn crashes_spread_wider_than_the_window_do_not_trip() {
        let mut d = CrashLoopDetector::default();
        let t0 = Instant::now();
        for i in 0..20 {
            assert_eq!(
                d.record(Exit::Crashed, t0 + Duration::from_secs(31 * i)),
                None,
                "crash {i}"
            );
            assert!(d.recent_crashes() <= 2, "old crashes are pruned");
        }
        // At the edge: the third crash a nanosecond past the window from the first does not trip.
        let mut d = CrashLoopDetector::default();
        d.record(Exit::Crashed, t0);
        d.record(Exit::Crashed, t0 + Duration::from_secs(30));
        let just_past = t0 + Duration::from_secs(60) + Duration::from_nanos(1);
        assert_eq!(d.record(Exit::Crashed, just_past), None);
        assert_eq!(d.recent_crashes(), 2);
        assert!(d.peek_report().is_none());
    }

    // r[verify retry.crash-loop]
    #[test]
    fn clean_exits_and_forced_restarts_do_not_count() {
        let mut d = CrashLoopDetector::default();
        let t0 = Instant::now();
        for i in 0..10 {
            let exit = if i % 2 == 0 {
                Exit::Clean
            } else {
                Exit::Forced
            };
            assert_eq!(d.record(exit, t0 + Duration::from_secs(i)), None);
        }
        assert_eq!(d.recent_crashes(), 0);
        assert!(d.peek_report().is_none());
    }

    // r[verify retry.crash-loop.report]
    #[test]
    fn the_report_is_consumed_once_and_peeking_does_not_consume() {
        let mut d = CrashLoopDetector::new(2, Duration::from_secs(10)).unwrap();
        let t0 = Instant::now();
        d.record(Exit::Crashed, t0);
        d.record(Exit::Crashed, t0 + Duration::from_secs(1));
        assert_eq!(d.peek_report().map(|r| r.crashes), Some(2));
        assert_eq!(d.peek_report().map(|r| r.crashes), Some(2));
        assert_eq!(d.take_report().map(|r| r.crashes), Some(2));
        assert_eq!(d.take_report(), None);
        assert_eq!(d.peek_report(), None);
        // The count started again after the trip.
        assert_eq!(d.record(Exit::Crashed, t0 + Duration::from_secs(2)), None);
        assert!(CrashLoopDetector::new(0, Duration::from_secs(1)).is_err());
    }
}
