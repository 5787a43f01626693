//! Reporting transient errors: always counted, announced to the client and logged at most once
//! per interval per forward so an error storm cannot flood the log or the control stream.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use holdfast_retry::{Class, Classify};
use tokio::time::Instant;

use crate::classify::RelayError;
use crate::stats::Counters;

/// Where announced reports go: the client (as a `Status` message) or the local user (an event).
pub type Sink = Box<dyn Fn(u32, String) + Send + Sync>;

/// One forward's reporter.
pub struct Reporter {
    forward: u32,
    stats: Arc<Counters>,
    sink: Sink,
    interval: Duration,
    last: Mutex<Option<Instant>>,
}

impl Reporter {
    /// A reporter for `forward`; announced reports also go to `sink`.
    pub fn new(forward: u32, stats: Arc<Counters>, sink: Sink, interval: Duration) -> Self {
        Reporter {
            forward,
            stats,
            sink,
            interval,
            last: Mutex::new(None),
        }
    }

    /// The forward's counters.
    pub fn stats(&self) -> &Arc<Counters> {
        &self.stats
    }

    /// A transient error: counted; logged and announced unless one was within the interval.
    /// Returns whether it was announced.
    pub fn transient(&self, err: &RelayError) -> bool {
        let text = err.to_string();
        self.stats.transient(&text);
        let now = Instant::now();
        let mut last = self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if last.is_some_and(|at| now.duration_since(at) < self.interval) {
            return false;
        }
        *last = Some(now);
        drop(last);
        tracing::warn!(forward = self.forward, error = %text, "forward: transient error, relaying continues");
        (self.sink)(self.forward, text);
        true
    }

    /// An item dropped because of `err` (counted by reason, remembered as the last error).
    pub fn dropped(&self, err: &RelayError) {
        self.stats.dropped(err.drop_reason());
        self.stats.set_last_error(&err.to_string());
    }

    /// A datagram `send_datagram` refused with `err`: the datagram is lost either way, so an item
    /// or a transient error is one drop (a transient one is also reported); whether relaying
    /// goes on (`false`: the connection is gone, and its relay loop announces the end).
    // r[impl forward.stats]
    // r[impl forward.classify]
    // i[impl forward.relay.resilience]
    pub fn datagram_not_sent(&self, err: &RelayError) -> bool {
        match err.class() {
            Class::Item => {
                self.dropped(err);
                true
            }
            Class::Transient => {
                self.transient(err);
                self.stats.dropped(err.drop_reason());
                true
            }
            Class::Fatal => false,
        }
    }

    /// Hands one framed datagram to the connection: sent (the caller counts it, once per
    /// batch), or refused and accounted for by [`Self::datagram_not_sent`].
    // i[impl forward.relay.resilience]
    #[inline]
    pub(crate) fn send_datagram(&self, conn: &quinn::Connection, datagram: Bytes) -> Handed {
        match conn.send_datagram(datagram) {
            Ok(()) => Handed::Sent,
            Err(err) => {
                if self.datagram_not_sent(&RelayError::from(err)) {
                    Handed::Dropped
                } else {
                    Handed::Lost
                }
            }
        }
    }
}

/// What became of a datagram handed to the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Handed {
    /// The connection took it.
    Sent,
    /// Refused and counted as a drop (and reported, if transient): relaying goes on.
    Dropped,
    /// The connection is gone: the relay ends, and its relay loop announces the end.
    Lost,
}

impl std::fmt::Debug for Reporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reporter")
            .field("forward", &self.forward)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;
    use std::sync::atomic::{AtomicU64, Ordering};

    // r[verify forward.stats]
    // r[verify forward.classify]
    // i[verify forward.relay.resilience]
    #[tokio::test(start_paused = true)]
    async fn a_datagram_the_connection_did_not_take_is_one_drop_and_only_its_loss_ends_the_relay() {
        let stats = Arc::new(Counters::default());
        let announced = Arc::new(AtomicU64::new(0));
        let seen = announced.clone();
        let reporter = Reporter::new(
            1,
            stats.clone(),
            Box::new(move |_, _| {
                seen.fetch_add(1, Ordering::SeqCst);
            }),
            Duration::from_secs(1),
        );
        // Transient (ENOBUFS): reported and counted as a transient error, and the datagram it
        // cost is a drop.
        let transient = RelayError::Socket(io::Error::from_raw_os_error(105));
        assert!(reporter.datagram_not_sent(&transient));
        let snapshot = stats.snapshot();
        assert_eq!(snapshot.transient_errors, 1);
        assert_eq!(snapshot.dropped.error, 1, "the datagram is lost: one drop");
        assert_eq!(announced.load(Ordering::SeqCst), 1);
        // An item (oversize): one drop of its own reason, nothing announced.
        let oversize = RelayError::Send(quinn::SendDatagramError::TooLarge);
        assert!(reporter.datagram_not_sent(&oversize));
        let snapshot = stats.snapshot();
        assert_eq!(snapshot.dropped.oversize, 1);
        assert_eq!(snapshot.dropped.error, 1);
        assert_eq!(snapshot.transient_errors, 1);
        // The connection gone: the relay ends, no drop counted for it.
        let lost = RelayError::Send(quinn::SendDatagramError::ConnectionLost(
            quinn::ConnectionError::TimedOut,
        ));
        assert!(!reporter.datagram_not_sent(&lost));
        let snapshot = stats.snapshot();
        assert_eq!(snapshot.dropped.oversize + snapshot.dropped.error, 2);
    }

    // r[verify forward.classify]
    #[tokio::test(start_paused = true)]
    async fn a_storm_of_transient_errors_is_counted_in_full_and_announced_once_per_interval() {
        let stats = Arc::new(Counters::default());
        let announced = Arc::new(AtomicU64::new(0));
        let seen = announced.clone();
        let reporter = Reporter::new(
            7,
            stats.clone(),
            Box::new(move |forward, _| {
                assert_eq!(forward, 7);
                seen.fetch_add(1, Ordering::SeqCst);
            }),
            Duration::from_secs(1),
        );
        let refused = || RelayError::Socket(io::Error::from(io::ErrorKind::ConnectionRefused));
        assert!(reporter.transient(&refused()));
        for _ in 0..99 {
            assert!(!reporter.transient(&refused()));
        }
        tokio::time::advance(Duration::from_millis(999)).await;
        assert!(!reporter.transient(&refused()));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(reporter.transient(&refused()));
        assert_eq!(announced.load(Ordering::SeqCst), 2);
        let snapshot = stats.snapshot();
        assert_eq!(snapshot.transient_errors, 102);
        assert!(snapshot.last_error.is_some_and(|e| e.contains("refused")));
    }
}
