//! The tick-driven image actuator: the thin tokio shell around the [`Reconciler`].
//!
//! A reconciler calls [`Actuator::ensure`] every tick for every reference it needs, passing its own
//! `now`. The actuator answers at once — it never blocks a tick on the daemon. Every decision is
//! the core's; the shell only performs the core's [`Action`]s: it spawns attempts on the tokio
//! runtime (in a [`JoinSet`], so every attempt is joined, a panicking one included, and dropping
//! the actuator aborts them all), cancels the ones the core superseded, and hands results back to
//! the core at the start of the next `ensure` (or in [`Actuator::settle`]) with the caller's `now`,
//! so pacing runs entirely on the caller's clock even though pulls run in real time.

use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use holdfast_lifecycle::{Fault, FaultBoard};
use tokio::sync::watch;
use tokio::task::{AbortHandle, Id, JoinError, JoinSet};

use crate::classify::{PullError, PullErrorKind};
use crate::client::DaemonEndpoint;
use crate::config::PullConfig;
use crate::fetcher::{DockerFetcher, Fetcher};
use crate::progress::PullProgress;
use crate::reconciler::{Action, AttemptId, Completion, Reconciler};
use crate::state::ImageState;

/// An attempt the shell is running.
#[derive(Debug)]
struct Running {
    task: AbortHandle,
    /// What it is, so that a panic can be reported as its failure.
    what: Attempt,
}

#[derive(Debug)]
enum Attempt {
    Pull {
        reference: String,
        progress: watch::Receiver<PullProgress>,
    },
    Probe,
}

/// Keeps images present: answers per reference every tick, pulls with pacing, files faults.
pub struct Actuator<F: Fetcher = DockerFetcher> {
    fetcher: Arc<F>,
    core: Reconciler,
    /// Every spawned attempt; dropping it (with the actuator) aborts them all.
    tasks: JoinSet<Completion>,
    running: HashMap<AttemptId, Running>,
    by_task: HashMap<Id, AttemptId>,
    runtime: tokio::runtime::Handle,
}

/// The actuator was created outside a tokio runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the image actuator must be created inside a tokio runtime (it runs pulls on it)")]
pub struct NoRuntime;

impl Actuator<DockerFetcher> {
    /// An actuator talking to the daemon the Docker CLI would use (`DOCKER_HOST`, else the
    /// default socket). Must be called inside a tokio runtime.
    pub fn from_env(config: PullConfig) -> Result<Self, NoRuntime> {
        let fetcher = DockerFetcher::new(DaemonEndpoint::from_env(), config.stall_timeout());
        Actuator::new(fetcher, config)
    }
}

impl<F: Fetcher> Actuator<F> {
    /// An actuator doing its attempts through `fetcher`. Must be called inside a tokio runtime;
    /// attempts are spawned on it.
    pub fn new(fetcher: F, config: PullConfig) -> Result<Self, NoRuntime> {
        Self::with_fault_board(fetcher, config, FaultBoard::new())
    }

    /// Like [`Actuator::new`], filing faults on `board` (the node's, shared with every module)
    /// under module "pull" instead of on a board of its own.
    pub fn with_fault_board(
        fetcher: F,
        config: PullConfig,
        board: FaultBoard,
    ) -> Result<Self, NoRuntime> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| NoRuntime)?;
        Ok(Actuator {
            fetcher: Arc::new(fetcher),
            core: Reconciler::with_fault_board(config, board),
            tasks: JoinSet::new(),
            running: HashMap::new(),
            by_task: HashMap::new(),
            runtime,
        })
    }

    /// Answers where `reference` stands at `now`, first applying any attempt results that have
    /// arrived, and starts an attempt if none is in flight and pacing allows one.
    pub fn ensure(&mut self, reference: &str, now: Instant) -> ImageState {
        self.apply_completions(now);
        let (state, actions) = self.core.ensure(reference, now);
        self.perform(actions);
        self.with_progress(reference, state)
    }

    /// Where `reference` stands, for status output: like [`Actuator::ensure`] but it starts
    /// nothing and applies no results. `None` when nothing is known about it yet.
    pub fn status(&self, reference: &str) -> Option<ImageState> {
        let state = self.core.status(reference)?;
        Some(self.with_progress(reference, state))
    }

    /// The state of every reference the actuator knows about, ordered by reference (see
    /// [`Actuator::status`]).
    pub fn statuses(&self) -> Vec<(String, ImageState)> {
        self.core
            .references()
            .into_iter()
            .filter_map(|r| {
                let state = self.status(&r)?;
                Some((r, state))
            })
            .collect()
    }

    // r[impl actuate.image.progress]
    /// The progress of the attempt in flight for `reference`, if any.
    pub fn progress(&self, reference: &str) -> Option<PullProgress> {
        let attempt = self.core.live_attempt(reference)?;
        match &self.running.get(&attempt)?.what {
            Attempt::Pull { progress, .. } => Some(progress.borrow().clone()),
            Attempt::Probe => None,
        }
    }

    fn with_progress(&self, reference: &str, state: ImageState) -> ImageState {
        match state {
            ImageState::Pulling { .. } => ImageState::Pulling {
                progress: self.progress(reference).unwrap_or_default(),
            },
            other => other,
        }
    }

    /// The length of `reference`'s own failure streak (0 when it has none). A daemon outage never
    /// adds to it: while the daemon is unreachable, [`Actuator::ensure`] reports the daemon's
    /// failures instead.
    pub fn reference_failures(&self, reference: &str) -> u32 {
        self.core.reference_failures(reference)
    }

    /// Pull's open operator-visible faults (images and the daemon), from its board.
    pub fn faults(&self) -> Vec<Fault> {
        self.core.faults()
    }

    /// Forgets that `reference` is present, so the next `ensure` checks with the daemon again
    /// (for a caller that learned the image was removed, e.g. a container create said so).
    pub fn invalidate(&mut self, reference: &str) {
        self.core.invalidate(reference);
    }

    /// Forgets `reference` entirely (no workload needs it any more): its pacing, its open fault
    /// and its in-flight attempt, which is cancelled.
    pub fn forget(&mut self, reference: &str) {
        let actions = self.core.forget(reference);
        self.perform(actions);
    }

    /// Whether any attempt this actuator considers live (not superseded) is still running.
    pub fn has_live_attempts(&self) -> bool {
        self.core.has_live_attempts()
    }

    /// How many spawned attempts have not been joined yet (live, stale or cancelled).
    pub fn running_attempts(&self) -> usize {
        self.tasks.len()
    }

    /// Waits until no live attempt is running, applying every result at `now`. Results of
    /// superseded attempts that arrive meanwhile are applied (and so ignored) too. Every attempt
    /// is joined, so one that panics ends the wait like one that fails. For callers that step a
    /// manual clock and want each step's attempts finished before the next.
    pub async fn settle(&mut self, now: Instant) {
        self.apply_completions(now);
        while self.core.has_live_attempts() {
            match self.tasks.join_next_with_id().await {
                Some(joined) => self.apply_joined(joined, now),
                None => return,
            }
        }
    }

    /// Waits for the next attempt to end, of any kind (live, stale or superseded), and applies
    /// its result at `now`. Returns at once when nothing is running.
    pub async fn next_result(&mut self, now: Instant) {
        if let Some(joined) = self.tasks.join_next_with_id().await {
            self.apply_joined(joined, now);
        }
    }

    /// The configuration in use.
    pub fn config(&self) -> &PullConfig {
        self.core.config()
    }

    /// The board this actuator files its faults on.
    pub fn fault_board(&self) -> &FaultBoard {
        self.core.fault_board()
    }

    /// The synchronous core, for callers that want its answers without the shell's.
    pub fn core(&self) -> &Reconciler {
        &self.core
    }

    fn apply_completions(&mut self, now: Instant) {
        while let Some(joined) = self.tasks.try_join_next_with_id() {
            self.apply_joined(joined, now);
        }
    }

    // r[impl actuate.image.panic]
    fn apply_joined(&mut self, joined: Result<(Id, Completion), JoinError>, now: Instant) {
        match joined {
            Ok((id, completion)) => {
                if let Some(attempt) = self.by_task.remove(&id) {
                    self.running.remove(&attempt);
                }
                self.core.on_result(completion, now);
            }
            Err(err) => {
                let Some(attempt) = self.by_task.remove(&err.id()) else {
                    return;
                };
                // Cancelled attempts were removed from `running` when they were cancelled; only
                // an attempt still running can have panicked on its own.
                let Some(running) = self.running.remove(&attempt) else {
                    return;
                };
                if !err.is_panic() {
                    return;
                }
                let message = panic_message(err.into_panic());
                tracing::error!(attempt = ?attempt, %message, "pull attempt panicked");
                let error = PullError::new(
                    PullErrorKind::Panicked,
                    format!("the attempt panicked: {message}"),
                );
                let completion = match running.what {
                    Attempt::Pull { reference, .. } => Completion::Pull {
                        reference,
                        attempt,
                        result: Err(error),
                    },
                    Attempt::Probe => Completion::Probe {
                        attempt,
                        result: Err(error),
                    },
                };
                self.core.on_result(completion, now);
            }
        }
    }

    // r[impl actuate.image.drop]
    /// Starts and cancels attempts. Each one is spawned into the actuator's own task set, never
    /// detached, so that dropping the actuator aborts every attempt still running.
    fn perform(&mut self, actions: Vec<Action>) {
        for action in actions {
            match action {
                Action::Pull { reference, attempt } => {
                    let (progress_tx, progress_rx) = watch::channel(PullProgress::default());
                    let fetcher = Arc::clone(&self.fetcher);
                    let owned = reference.clone();
                    // The fetcher is called inside the task, so that a panic while it builds its
                    // future is the attempt's (joined, counted), not a panic of the caller's tick.
                    let task = self.tasks.spawn_on(
                        async move {
                            let result = fetcher.fetch(owned.clone(), progress_tx).await;
                            Completion::Pull {
                                reference: owned,
                                attempt,
                                result,
                            }
                        },
                        &self.runtime,
                    );
                    self.track(
                        attempt,
                        task,
                        Attempt::Pull {
                            reference,
                            progress: progress_rx,
                        },
                    );
                }
                Action::Probe { attempt } => {
                    let fetcher = Arc::clone(&self.fetcher);
                    let task = self.tasks.spawn_on(
                        async move {
                            Completion::Probe {
                                attempt,
                                result: fetcher.probe().await,
                            }
                        },
                        &self.runtime,
                    );
                    self.track(attempt, task, Attempt::Probe);
                }
                // r[impl actuate.image.single-flight+3]
                Action::Cancel { attempt } => {
                    if let Some(running) = self.running.remove(&attempt) {
                        running.task.abort();
                    }
                }
            }
        }
    }

    fn track(&mut self, attempt: AttemptId, task: AbortHandle, what: Attempt) {
        self.by_task.insert(task.id(), attempt);
        self.running.insert(attempt, Running { task, what });
    }
}

/// A panic payload as text (panics carry a `&str` or a `String`; anything else is unnamed).
fn panic_message(payload: Box<dyn Any + Send>) -> String {
    match payload.downcast::<String>() {
        Ok(text) => *text,
        Err(payload) => payload
            .downcast_ref::<&str>()
            .map_or_else(|| "(no message)".to_owned(), |text| (*text).to_owned()),
    }
}

#[cfg(test)]
mod tests;
