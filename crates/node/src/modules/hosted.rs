//! The shape shared by modules whose domain crate starts asynchronously and hands back a handle
//! that is itself the stopper (issuance, forward): the node's `Module::start` must return at once,
//! so the domain start runs inside the module's task, and the handle waits in a [`Slot`] where the
//! admin API reads it until the stop plan takes it out and stops it.

use std::future::Future;

use holdfast_lifecycle::{
    Health, StopError, StopReason, StopRequest, Stopper, health_channel, stopper_fn,
};
use tokio::sync::oneshot;

use crate::module::{ModuleError, Started};
use crate::slot::Slot;

type StopMessage = (StopRequest, oneshot::Sender<Result<(), StopError>>);

/// Takes the handle out of the slot when the task ends however it ends (a panic included), so the
/// admin API never reads an instance that no longer runs.
struct Vacate<T>(Slot<T>);

impl<T> Drop for Vacate<T> {
    fn drop(&mut self) {
        drop(self.0.take());
    }
}

/// Spawns a module's task: runs `start`; a start error ends the task with that error (the
/// supervisor retries through its gate); else the handle goes into `slot`, the module reports
/// ready, and the stopper takes it out and stops it within the request's deadline.
pub fn spawn_hosted<T, F>(slot: Slot<T>, start: F) -> Started
where
    T: Stopper + Send + 'static,
    F: Future<Output = Result<T, String>> + Send + 'static,
{
    let (reporter, health) = health_channel();
    let (stop_tx, mut stop_rx) = oneshot::channel::<StopMessage>();
    let task = tokio::spawn(async move {
        let vacate = Vacate(slot.clone());
        let handle = tokio::select! {
            started = start => started.map_err(ModuleError)?,
            message = &mut stop_rx => {
                // Stopped while still starting: nothing to stop yet.
                if let Ok((_, reply)) = message {
                    let _ = reply.send(Ok(()));
                }
                reporter.set(Health::Stopped);
                return Ok(());
            }
        };
        slot.put(handle);
        reporter.set(Health::Ready);
        let (request, reply) = match stop_rx.await {
            Ok((request, reply)) => (request, Some(reply)),
            // The supervisor dropped the stopper without stopping: stop promptly all the same.
            Err(_) => (
                StopRequest {
                    deadline: tokio::time::Instant::now() + std::time::Duration::from_secs(1),
                    reason: StopReason::Restart,
                },
                None,
            ),
        };
        let result = match slot.take() {
            Some(handle) => Box::new(handle).stop(request).await,
            None => Ok(()),
        };
        drop(vacate);
        reporter.set(Health::Stopped);
        if let Some(reply) = reply {
            let _ = reply.send(result);
        }
        Ok::<(), ModuleError>(())
    });
    let stopper = stopper_fn(move |request| async move {
        let (reply, answer) = oneshot::channel();
        if stop_tx.send((request, reply)).is_err() {
            return Ok(()); // the task has ended: nothing runs
        }
        answer.await.unwrap_or(Ok(()))
    });
    Started {
        stopper,
        health,
        task,
    }
}
