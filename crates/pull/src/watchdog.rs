//! The progress watchdog: ends a pull that has made no progress for a bounded time.
//!
//! bollard's request timeout covers only the wait for response headers; once the daemon has
//! answered 200, a pull stream that stops moving (a registry that accepts and never answers, or
//! stops mid-blob) would be awaited forever. The watchdog holds a deadline that every advance
//! pushes back; when the deadline passes with no advance, the attempt is abandoned and counted as
//! a transient failure. Time comes from `tokio::time`, so tests drive it with tokio's paused clock
//! instead of sleeping.

use std::time::Duration;

use futures_util::{Stream, StreamExt};
use tokio::time::Instant;

/// Default time a pull may go without progress before it is abandoned.
pub const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(60);

/// The deadline arithmetic, separate from any timer so it can be tested with plain instants.
#[derive(Debug, Clone, Copy)]
pub struct Watchdog {
    timeout: Duration,
    /// `None` when the bound is too large for the clock to represent: no deadline at all.
    deadline: Option<Instant>,
}

impl Watchdog {
    /// A watchdog armed at `now`: the first advance must come within `timeout`.
    pub fn new(timeout: Duration, now: Instant) -> Self {
        Watchdog {
            timeout,
            deadline: now.checked_add(timeout),
        }
    }

    /// Records an advance at `now`: the next one must come within `timeout` of it.
    pub fn progressed(&mut self, now: Instant) {
        self.deadline = now.checked_add(self.timeout);
    }

    /// When the attempt is abandoned unless it advances first (`None`: the configured bound is
    /// beyond what the clock can represent, so never).
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Whether the deadline has passed at `now`.
    pub fn expired(&self, now: Instant) -> bool {
        self.deadline.is_some_and(|deadline| now >= deadline)
    }

    /// The configured bound.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }
}

/// How a watched stream ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Watched<E> {
    /// The stream ended by itself with no error.
    Completed,
    /// The stream yielded an error; the stream is dropped.
    Failed(E),
    /// No advance within the bound; the stream is dropped (which abandons the request).
    Stalled {
        /// The bound that was exceeded.
        idle: Duration,
    },
}

// r[impl actuate.image.watchdog+3]
/// Drives `stream` to its end under a watchdog. `advanced` is called with each item and says
/// whether it moved the pull forward; only advances push the deadline back. The deadline is
/// armed before the first poll, so a daemon that never even sends response headers is covered
/// too.
pub async fn drive<S, T, E, F>(stream: S, timeout: Duration, mut advanced: F) -> Watched<E>
where
    S: Stream<Item = Result<T, E>>,
    F: FnMut(&T) -> bool,
{
    let mut stream = std::pin::pin!(stream);
    let mut watchdog = Watchdog::new(timeout, Instant::now());
    loop {
        let next = match watchdog.deadline() {
            Some(deadline) => tokio::time::timeout_at(deadline, stream.next()).await,
            None => Ok(stream.next().await),
        };
        match next {
            Err(_elapsed) => return Watched::Stalled { idle: timeout },
            Ok(None) => return Watched::Completed,
            Ok(Some(Err(err))) => return Watched::Failed(err),
            Ok(Some(Ok(item))) => {
                if advanced(&item) {
                    watchdog.progressed(Instant::now());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use futures_util::stream;
    use tokio::sync::mpsc;

    use super::*;

    // r[verify actuate.image.watchdog+3]
    #[test]
    fn deadline_moves_only_with_progress() {
        let t0 = Instant::now();
        let mut wd = Watchdog::new(Duration::from_secs(60), t0);
        assert!(!wd.expired(t0 + Duration::from_secs(59)));
        assert!(wd.expired(t0 + Duration::from_secs(60)));
        wd.progressed(t0 + Duration::from_secs(50));
        assert!(!wd.expired(t0 + Duration::from_secs(109)));
        assert!(wd.expired(t0 + Duration::from_secs(110)));
        assert_eq!(wd.deadline(), Some(t0 + Duration::from_secs(110)));
    }

    // r[verify actuate.image.watchdog+3]
    #[tokio::test(start_paused = true)]
    async fn a_bound_beyond_the_clock_is_no_deadline_not_a_panic() {
        let t0 = Instant::now();
        let mut wd = Watchdog::new(Duration::MAX, t0);
        assert_eq!(wd.deadline(), None);
        assert!(!wd.expired(t0 + Duration::from_secs(1_000_000)));
        wd.progressed(t0 + Duration::from_secs(1));
        assert_eq!(wd.deadline(), None);
        let ok = stream::iter(vec![Ok::<bool, String>(true), Ok(false)]);
        assert_eq!(drive(ok, Duration::MAX, |a| *a).await, Watched::Completed);
    }

    /// Sends items at given offsets on tokio's (paused) clock, then holds the stream open.
    fn timed_stream(items: Vec<(u64, bool)>) -> impl Stream<Item = Result<bool, String>> {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            for (at, advance) in items {
                tokio::time::sleep(Duration::from_secs(at)).await;
                if tx.send(Ok(advance)).is_err() {
                    return;
                }
            }
            // Hold the stream open forever, like a stalled registry.
            std::future::pending::<()>().await;
            drop(tx);
        });
        tokio_stream_from(rx)
    }

    fn tokio_stream_from<T>(mut rx: mpsc::UnboundedReceiver<T>) -> impl Stream<Item = T> {
        stream::poll_fn(move |cx| rx.poll_recv(cx))
    }

    // r[verify actuate.image.watchdog+3]
    #[tokio::test(start_paused = true)]
    async fn a_stream_that_stops_advancing_is_abandoned_after_the_bound() {
        let start = Instant::now();
        // Advances every 30 s three times, then only non-advancing noise, then silence.
        let s = timed_stream(vec![
            (30, true),
            (30, true),
            (30, true),
            (30, false),
            (20, false),
        ]);
        let out = drive(s, Duration::from_secs(60), |advance| *advance).await;
        assert_eq!(
            out,
            Watched::Stalled {
                idle: Duration::from_secs(60)
            }
        );
        // Last advance at 90 s, so abandoned at 150 s even though noise arrived at 120 and 140.
        assert_eq!(Instant::now() - start, Duration::from_secs(150));
    }

    // r[verify actuate.image.watchdog+3]
    #[tokio::test(start_paused = true)]
    async fn a_stream_that_never_answers_is_abandoned() {
        let start = Instant::now();
        let s = timed_stream(vec![]);
        let out = drive(s, Duration::from_secs(5), |advance| *advance).await;
        assert_eq!(
            out,
            Watched::Stalled {
                idle: Duration::from_secs(5)
            }
        );
        assert_eq!(Instant::now() - start, Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn completion_and_errors_pass_through() {
        let ok = stream::iter(vec![Ok::<bool, String>(true), Ok(true)]);
        assert_eq!(
            drive(ok, Duration::from_secs(1), |a| *a).await,
            Watched::Completed
        );
        let failing = stream::iter(vec![Ok(true), Err("unknown blob".to_owned())]);
        assert_eq!(
            drive(failing, Duration::from_secs(1), |a| *a).await,
            Watched::Failed("unknown blob".to_owned())
        );
    }
}
