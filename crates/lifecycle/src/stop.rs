//! What a started module hands back: a [`Stopper`], and what it is told when asked to stop.

use std::future::Future;
use std::pin::Pin;

/// A boxed, sendable future: what a [`Stopper`] returns.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// Why modules are being stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The node is restarting and will be back (gateway: close 1012 with a reconnect hint).
    Restart,
    /// The node is leaving for good (gateway: close 1001).
    Shutdown,
}

/// What a stopper is handed: the time by which it must have returned, and why.
#[derive(Debug, Clone, Copy)]
pub struct StopRequest {
    /// The stopper must have returned by then; the plan cuts it off at this instant if not.
    pub deadline: tokio::time::Instant,
    /// Why the node is stopping its modules.
    pub reason: StopReason,
}

/// A stopper's own failure (it returned in time but could not finish cleanly).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct StopError(pub String);

/// What a started module hands back. `stop` must return by `request.deadline`; the plan cuts it
/// off at the deadline if it does not.
pub trait Stopper: Send + 'static {
    /// Stops the module: stop accepting, tell peers why, release shared state, then return.
    fn stop(self: Box<Self>, request: StopRequest) -> BoxFuture<Result<(), StopError>>;
}

/// A [`Stopper`] made from a closure.
struct FnStopper<F>(F);

impl<F, Fut> Stopper for FnStopper<F>
where
    F: FnOnce(StopRequest) -> Fut + Send + 'static,
    Fut: Future<Output = Result<(), StopError>> + Send + 'static,
{
    fn stop(self: Box<Self>, request: StopRequest) -> BoxFuture<Result<(), StopError>> {
        Box::pin((self.0)(request))
    }
}

/// A stopper from a closure.
///
/// ```
/// use holdfast_lifecycle::{stopper_fn, StopError};
/// let stopper = stopper_fn(|request| async move {
///     let _must_be_done_by = request.deadline;
///     Ok::<(), StopError>(())
/// });
/// # drop(stopper);
/// ```
pub fn stopper_fn<F, Fut>(f: F) -> Box<dyn Stopper>
where
    F: FnOnce(StopRequest) -> Fut + Send + 'static,
    Fut: Future<Output = Result<(), StopError>> + Send + 'static,
{
    Box::new(FnStopper(f))
}
