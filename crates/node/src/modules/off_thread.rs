//! A module start that runs on a blocking thread because it may hang in a synchronous call (a name
//! service that never answers), and that a stop may give up on.
//!
//! The hosted task awaits [`OffThreadStart::run`]'s future beside its stop message; a stop drops
//! the future at once. The blocking thread cannot be cancelled, so whatever it later starts is
//! handed to a detached task that stops it within [`ABANDONED_STOP`]. One start may be outstanding
//! at a time: while a given-up start still runs, the next one fails at once (the supervisor
//! retries it through the module's gate), so two instances never overlap and hung starts never
//! pile up one thread per restart.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use holdfast_lifecycle::{StopReason, StopRequest, Stopper};
use tokio::task::JoinHandle;

/// The error of a start refused because the last one still runs on its thread.
pub const STILL_RUNNING: &str = "the last start is still running";

/// How long an instance started by a given-up start has to stop.
pub const ABANDONED_STOP: Duration = Duration::from_secs(2);

/// The starts of one module, shared by its clones (the supervisor starts the same module again).
#[derive(Clone, Default)]
pub struct OffThreadStart {
    /// A start's thread is busy (running, or given up and not yet stopped).
    outstanding: Arc<AtomicBool>,
}

// r[impl node.issuance.start-off-thread+2]
impl OffThreadStart {
    /// The start future: `start` on a blocking thread, or [`STILL_RUNNING`] at once while the
    /// last start's thread is still busy.
    pub fn run<T, F>(
        &self,
        start: F,
    ) -> impl Future<Output = Result<T, String>> + Send + 'static + use<T, F>
    where
        T: Stopper + Send + 'static,
        F: FnOnce() -> Result<T, String> + Send + 'static,
    {
        let outstanding = Arc::clone(&self.outstanding);
        async move {
            if outstanding.swap(true, Ordering::SeqCst) {
                return Err(STILL_RUNNING.to_owned());
            }
            Pending {
                handle: Some(tokio::task::spawn_blocking(start)),
                outstanding,
            }
            .finish()
            .await
        }
    }
}

/// A start on its thread. Dropped before it finished (its future given up by a stop), it hands
/// the thread's handle to a detached task that stops what the start returns.
struct Pending<T: Stopper> {
    handle: Option<JoinHandle<Result<T, String>>>,
    outstanding: Arc<AtomicBool>,
}

// r[impl node.issuance.start-off-thread+2]
impl<T: Stopper> Pending<T> {
    async fn finish(mut self) -> Result<T, String> {
        let Some(handle) = self.handle.as_mut() else {
            return Err("the start has no thread".to_owned());
        };
        let ended = handle.await;
        // Finished: dropping `self` now only frees the slot for the next start.
        self.handle = None;
        ended.map_err(|e| format!("its start ended: {e}"))?
    }
}

// r[impl node.issuance.start-off-thread+2]
impl<T: Stopper> Drop for Pending<T> {
    fn drop(&mut self) {
        let Some(handle) = self.handle.take() else {
            self.outstanding.store(false, Ordering::SeqCst);
            return;
        };
        let outstanding = Arc::clone(&self.outstanding);
        // Without a runtime the node is gone and nothing the start made can run; the slot then
        // stays taken, which refuses nothing more.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Ok(Ok(started)) = handle.await {
                    tracing::warn!("a start given up by a stop finished: stopping what it started");
                    let request = StopRequest {
                        deadline: tokio::time::Instant::now() + ABANDONED_STOP,
                        reason: StopReason::Restart,
                    };
                    if let Err(error) = Box::new(started).stop(request).await {
                        tracing::warn!(%error, "stopping what a given-up start started");
                    }
                }
                outstanding.store(false, Ordering::SeqCst);
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::modules::hosted::spawn_hosted;
    use crate::slot::Slot;
    use holdfast_lifecycle::{BoxFuture, Health, StopError};
    use tokio::sync::mpsc;

    /// An instance that reports its stop.
    struct Instance(mpsc::UnboundedSender<StopRequest>);

    impl Stopper for Instance {
        fn stop(self: Box<Self>, request: StopRequest) -> BoxFuture<Result<(), StopError>> {
            let _ = self.0.send(request);
            Box::pin(async { Ok(()) })
        }
    }

    // r[verify node.issuance.start-off-thread+2]
    #[tokio::test(start_paused = true)]
    async fn a_stop_gives_up_a_hung_start_and_what_it_later_starts_is_stopped_before_the_next() {
        let starts = OffThreadStart::default();
        let (stops_tx, mut stops) = mpsc::unbounded_channel();
        let (answer, hung) = std::sync::mpsc::channel::<()>();
        let (entered_tx, entered) = tokio::sync::oneshot::channel();
        let instance = Instance(stops_tx.clone());
        let started = spawn_hosted(
            Slot::default(),
            starts.run(move || {
                let _ = entered_tx.send(());
                // The name service answers only when the test says so.
                hung.recv().map_err(|e| e.to_string())?;
                Ok(instance)
            }),
        );
        let health = started.health.clone();
        entered.await.unwrap();
        let stop = started.stopper.stop(StopRequest {
            deadline: tokio::time::Instant::now() + Duration::from_secs(1),
            reason: StopReason::Restart,
        });
        // The stop ends the module at once, while its start still hangs.
        assert!(stop.await.is_ok());
        assert!(started.task.await.is_ok_and(|ended| ended.is_ok()));
        assert_eq!(health.get(), Health::Stopped);

        // At most one hung start: the next fails at once.
        let again = Instance(stops_tx.clone());
        let refused = starts.run(move || Ok(again)).await;
        assert_eq!(refused.err().as_deref(), Some(STILL_RUNNING));

        // The name service answers: what the given-up start made is stopped, then starts resume.
        answer.send(()).unwrap();
        let request = stops.recv().await.unwrap();
        assert!(request.deadline <= tokio::time::Instant::now() + ABANDONED_STOP);
        assert!(
            request.deadline > tokio::time::Instant::now(),
            "the given-up instance is given time to stop"
        );
        let next = Instance(stops_tx);
        assert!(starts.run(move || Ok(next)).await.is_ok());
        assert!(
            stops.try_recv().is_err(),
            "only the given-up instance stopped"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_start_that_finishes_frees_the_next() {
        let starts = OffThreadStart::default();
        let (stops_tx, mut stops) = mpsc::unbounded_channel();
        for _ in 0..2 {
            let instance = Instance(stops_tx.clone());
            assert!(starts.run(move || Ok(instance)).await.is_ok());
        }
        let failing = starts.run(|| Err::<Instance, _>("no".to_owned())).await;
        assert_eq!(failing.err().as_deref(), Some("no"));
        let instance = Instance(stops_tx);
        assert!(starts.run(move || Ok(instance)).await.is_ok());
        // Instances returned to their caller are the caller's to stop.
        assert!(stops.try_recv().is_err());
    }
}
