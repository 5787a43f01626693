//! The tick-driven image actuator.
//!
//! A reconciler calls [`Actuator::ensure`] every tick for every reference it needs, passing its own
//! `now`. The actuator answers at once — it never blocks a tick on the daemon — and starts at most
//! one attempt per reference on the tokio runtime when the reference's pacing allows. Attempts
//! report back with the token their gate granted; results are applied at the start of the next
//! `ensure` (or by [`Actuator::settle`]) with the caller's `now`, so pacing runs entirely on the
//! caller's clock even though pulls run in real time.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bollard::Docker;
use holdfast_retry::Policy;
use tokio::sync::{Mutex, mpsc, watch};
use tokio::task::AbortHandle;

use crate::classify::{FaultPolicy, PullError, PullErrorKind};
use crate::client::{DaemonEndpoint, Fetched, fetch, within};
use crate::fault::{Fault, FaultBoard, FaultSubject};
use crate::pacing::{Failed, Finished, Pacer, Permit, Token};
use crate::progress::PullProgress;
use crate::watchdog::DEFAULT_STALL_TIMEOUT;

/// A boxed future, so that [`Fetcher`] stays object-safe.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// What does the real work of an attempt. [`DockerFetcher`] is the one that talks to a daemon;
/// tests of the actuator's bookkeeping may supply their own to control when attempts finish.
pub trait Fetcher: Send + Sync + 'static {
    /// Makes `reference` present (inspect, then pull if absent), publishing progress.
    fn fetch(
        &self,
        reference: String,
        progress: watch::Sender<PullProgress>,
    ) -> BoxFuture<Result<Fetched, PullError>>;

    /// Checks that the daemon answers (used while it is known to be unreachable).
    fn probe(&self) -> BoxFuture<Result<(), PullError>>;
}

/// A [`Fetcher`] over a Docker Engine API endpoint. Connects lazily, and reconnects (renegotiating
/// the API version) after the daemon was unreachable.
#[derive(Clone)]
pub struct DockerFetcher {
    inner: Arc<DockerFetcherInner>,
}

struct DockerFetcherInner {
    endpoint: DaemonEndpoint,
    stall_timeout: Duration,
    connection: Mutex<Option<Docker>>,
}

impl DockerFetcher {
    /// A fetcher for `endpoint` whose pulls are abandoned after `stall_timeout` without progress.
    pub fn new(endpoint: DaemonEndpoint, stall_timeout: Duration) -> Self {
        DockerFetcher {
            inner: Arc::new(DockerFetcherInner {
                endpoint,
                stall_timeout,
                connection: Mutex::new(None),
            }),
        }
    }

    /// The endpoint this fetcher talks to.
    pub fn endpoint(&self) -> &DaemonEndpoint {
        &self.inner.endpoint
    }
}

impl DockerFetcherInner {
    async fn docker(&self) -> Result<Docker, PullError> {
        if let Some(docker) = self.connection.lock().await.as_ref() {
            return Ok(docker.clone());
        }
        // Connect without holding the lock, so a daemon that never answers holds up only this
        // attempt (for at most the stall bound), not every other attempt waiting for the lock.
        let docker = within(
            self.stall_timeout,
            "connect and version negotiation",
            self.endpoint.connect(),
        )
        .await?;
        Ok(self.connection.lock().await.get_or_insert(docker).clone())
    }

    async fn forget_connection_after(&self, err: &PullError) {
        if err.kind == PullErrorKind::DaemonUnreachable {
            *self.connection.lock().await = None;
        }
    }
}

impl Fetcher for DockerFetcher {
    fn fetch(
        &self,
        reference: String,
        progress: watch::Sender<PullProgress>,
    ) -> BoxFuture<Result<Fetched, PullError>> {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move {
            let result = match inner.docker().await {
                Ok(docker) => fetch(&docker, &reference, inner.stall_timeout, &progress).await,
                Err(err) => Err(err),
            };
            if let Err(err) = &result {
                inner.forget_connection_after(err).await;
            }
            result
        })
    }

    fn probe(&self) -> BoxFuture<Result<(), PullError>> {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move {
            *inner.connection.lock().await = None;
            inner.docker().await.map(|_| ())
        })
    }
}

/// How long an image pull may stay in flight before its gate counts it as stale and lets a new
/// attempt supersede it (6 h). The progress watchdog is what ends a pull that stops moving; this
/// bound only catches an attempt that somehow never reports, so it sits far above any watchdog
/// bound, and a slow but healthy pull is never counted as stale.
pub const DEFAULT_PULL_STALE_AFTER: Duration = Duration::from_secs(6 * 60 * 60);

/// Configuration of an [`Actuator`].
#[derive(Debug, Clone, Copy)]
pub struct PullConfig {
    /// Pacing per image reference (default: base 5 s, cap 300 s, escalation after 5 failures,
    /// attempts stale after [`DEFAULT_PULL_STALE_AFTER`]).
    pub image_policy: Policy,
    /// Pacing of the daemon while it is unreachable (default: the same numbers).
    pub daemon_policy: Policy,
    /// How long a pull may go without progress before it is abandoned (default 60 s).
    pub stall_timeout: Duration,
}

impl Default for PullConfig {
    fn default() -> Self {
        // r[impl actuate.image.single-flight+2]
        // The builder only rejects zero or over-a-year durations, so this never falls back.
        let image_policy = Policy::builder()
            .stale_after(DEFAULT_PULL_STALE_AFTER)
            .build()
            .unwrap_or_default();
        PullConfig {
            image_policy,
            daemon_policy: Policy::default(),
            stall_timeout: DEFAULT_STALL_TIMEOUT,
        }
    }
}

/// What [`Actuator::ensure`] answers for a reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageState {
    /// The image is in the daemon's store.
    Present,
    /// An attempt is in flight.
    Pulling {
        /// Its progress so far.
        progress: PullProgress,
    },
    /// The last attempt failed; the next one is allowed at `until`.
    Waiting {
        /// When the next attempt is allowed (caller's clock).
        until: Instant,
        /// Consecutive failures of this reference.
        failures: u32,
        /// The latest failure, classified.
        last_error: PullError,
    },
    /// Like `Waiting`, with an open operator-visible fault. Attempts continue at the same pace.
    Escalated {
        /// When the next attempt is allowed (caller's clock).
        until: Instant,
        /// Consecutive failures of this reference.
        failures: u32,
        /// The latest failure, classified.
        last_error: PullError,
    },
    /// The daemon cannot be reached; no pull is started until it answers again.
    DaemonUnreachable {
        /// When the daemon is next probed (caller's clock).
        until: Instant,
        /// Consecutive failures to reach the daemon.
        failures: u32,
        /// The latest failure to reach it.
        last_error: PullError,
    },
}

/// Per-reference bookkeeping besides the gate's.
#[derive(Debug, Default)]
struct Reference {
    present: bool,
    live: Option<LiveAttempt>,
    /// An attempt the gate counted as stale that no newer attempt has superseded yet: no longer
    /// reported as in flight, but its result still counts, and it is cancelled when superseded.
    stale: Option<LiveAttempt>,
    last_error: Option<PullError>,
}

#[derive(Debug)]
struct LiveAttempt {
    token: Token,
    progress: watch::Receiver<PullProgress>,
    /// Cancels the spawned attempt (and with it the request to the daemon).
    task: AbortHandle,
}

#[derive(Debug, Default)]
struct Daemon {
    /// Set when an attempt found the daemon unreachable; cleared by a successful probe or pull.
    down: Option<DaemonDown>,
    probe: Option<Token>,
}

#[derive(Debug)]
struct DaemonDown {
    failures: u32,
    until: Instant,
    last_error: PullError,
}

enum Completion {
    Image {
        reference: String,
        token: Token,
        result: Result<Fetched, PullError>,
    },
    Probe {
        token: Token,
        result: Result<(), PullError>,
    },
}

/// Keeps images present: answers per reference every tick, pulls with pacing, files faults.
pub struct Actuator<F: Fetcher = DockerFetcher> {
    fetcher: Arc<F>,
    config: PullConfig,
    images: Pacer<String>,
    daemon_gate: Pacer<()>,
    references: HashMap<String, Reference>,
    daemon: Daemon,
    faults: FaultBoard,
    runtime: tokio::runtime::Handle,
    done_tx: mpsc::UnboundedSender<Completion>,
    done_rx: mpsc::UnboundedReceiver<Completion>,
}

/// The actuator was created outside a tokio runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the image actuator must be created inside a tokio runtime (it runs pulls on it)")]
pub struct NoRuntime;

impl Actuator<DockerFetcher> {
    /// An actuator talking to the daemon the Docker CLI would use (`DOCKER_HOST`, else the
    /// default socket). Must be called inside a tokio runtime.
    pub fn from_env(config: PullConfig) -> Result<Self, NoRuntime> {
        let fetcher = DockerFetcher::new(DaemonEndpoint::from_env(), config.stall_timeout);
        Actuator::new(fetcher, config)
    }
}

impl<F: Fetcher> Actuator<F> {
    /// An actuator doing its attempts through `fetcher`. Must be called inside a tokio runtime;
    /// attempts are spawned on it.
    pub fn new(fetcher: F, config: PullConfig) -> Result<Self, NoRuntime> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| NoRuntime)?;
        let (done_tx, done_rx) = mpsc::unbounded_channel();
        Ok(Actuator {
            fetcher: Arc::new(fetcher),
            config,
            images: Pacer::new(config.image_policy),
            daemon_gate: Pacer::new(config.daemon_policy),
            references: HashMap::new(),
            daemon: Daemon::default(),
            faults: FaultBoard::new(),
            runtime,
            done_tx,
            done_rx,
        })
    }

    // r[impl actuate.image.ensure]
    /// Answers where `reference` stands at `now`, first applying any attempt results that have
    /// arrived, and starts an attempt if none is in flight and pacing allows one.
    pub fn ensure(&mut self, reference: &str, now: Instant) -> ImageState {
        self.apply_completions(now);
        let entry = self.references.entry(reference.to_owned()).or_default();
        if entry.present {
            return ImageState::Present;
        }
        if let Some(down) = &self.daemon.down {
            let state = ImageState::DaemonUnreachable {
                until: down.until,
                failures: down.failures,
                last_error: down.last_error.clone(),
            };
            self.probe_daemon(now);
            return state;
        }
        // r[impl actuate.image.single-flight+2]
        match self.images.begin(reference.to_owned(), now) {
            Permit::Granted { token, expired } => {
                if let Some(expired) = expired {
                    self.record_expired(reference, expired, now);
                }
                self.start_attempt(reference, token);
                ImageState::Pulling {
                    progress: PullProgress::default(),
                }
            }
            Permit::InFlight => ImageState::Pulling {
                progress: self.progress(reference).unwrap_or_default(),
            },
            Permit::Wait {
                until,
                failures,
                expired,
            } => {
                if let Some(expired) = expired {
                    // The attempt in flight went stale and this refusal counted it: it is a
                    // stalled failure now, no longer reported as a pull in flight.
                    self.record_expired(reference, expired, now);
                    if let Some(entry) = self.references.get_mut(reference) {
                        entry.stale = entry.live.take().or(entry.stale.take());
                    }
                }
                self.waiting_state(reference, until, failures)
            }
        }
    }

    fn waiting_state(&self, reference: &str, until: Instant, failures: u32) -> ImageState {
        let last_error = self
            .references
            .get(reference)
            .and_then(|e| e.last_error.clone())
            .unwrap_or_else(|| {
                PullError::new(PullErrorKind::Daemon, "waiting on the retry budget")
            });
        let subject = FaultSubject::Image(reference.to_owned());
        if self.faults.get(&subject).is_some() {
            ImageState::Escalated {
                until,
                failures,
                last_error,
            }
        } else {
            ImageState::Waiting {
                until,
                failures,
                last_error,
            }
        }
    }

    /// The gate superseded an attempt that stayed in flight past its stale timeout and counted it
    /// as failed; record it like any stalled attempt.
    fn record_expired(&mut self, reference: &str, expired: Failed, now: Instant) {
        let err = PullError::new(
            PullErrorKind::Stalled,
            "attempt still in flight past the stale timeout; superseded",
        );
        if let Some(entry) = self.references.get_mut(reference) {
            entry.last_error = Some(err.clone());
        }
        let subject = FaultSubject::Image(reference.to_owned());
        if expired.escalated {
            self.faults.file(subject, &err, expired.failures, now);
        } else {
            self.faults.refresh(&subject, &err, expired.failures);
        }
    }

    fn start_attempt(&mut self, reference: &str, token: Token) {
        // r[impl actuate.image.single-flight+2]
        // The gate granted a new attempt, so any older one still running was superseded: cancel
        // it rather than let it go on pulling beside its successor.
        if let Some(entry) = self.references.get_mut(reference) {
            for old in [entry.live.take(), entry.stale.take()]
                .into_iter()
                .flatten()
            {
                old.task.abort();
                self.images.discard(old.token);
                tracing::debug!(reference, "superseded pull attempt cancelled");
            }
        }
        let (progress_tx, progress_rx) = watch::channel(PullProgress::default());
        let fetch = self.fetcher.fetch(reference.to_owned(), progress_tx);
        let done = self.done_tx.clone();
        let owned = reference.to_owned();
        tracing::debug!(reference, "image pull attempt started");
        let task = self
            .runtime
            .spawn(async move {
                let result = fetch.await;
                // The receiver only goes away with the actuator, and then nobody needs the result.
                let _ = done.send(Completion::Image {
                    reference: owned,
                    token,
                    result,
                });
            })
            .abort_handle();
        if let Some(entry) = self.references.get_mut(reference) {
            entry.live = Some(LiveAttempt {
                token,
                progress: progress_rx,
                task,
            });
        }
    }

    fn probe_daemon(&mut self, now: Instant) {
        if let Permit::Granted { token, .. } = self.daemon_gate.begin((), now) {
            self.daemon.probe = Some(token);
            let probe = self.fetcher.probe();
            let done = self.done_tx.clone();
            self.runtime.spawn(async move {
                let result = probe.await;
                let _ = done.send(Completion::Probe { token, result });
            });
        }
    }

    /// Where `reference` stands, for status output: like [`Actuator::ensure`] but it
    /// starts nothing and applies no results. `None` when nothing is known about it yet (never
    /// ensured, or fresh and not yet attempted).
    pub fn status(&self, reference: &str) -> Option<ImageState> {
        let entry = self.references.get(reference)?;
        if entry.present {
            return Some(ImageState::Present);
        }
        if let Some(down) = &self.daemon.down {
            return Some(ImageState::DaemonUnreachable {
                until: down.until,
                failures: down.failures,
                last_error: down.last_error.clone(),
            });
        }
        if let Some(live) = &entry.live {
            return Some(ImageState::Pulling {
                progress: live.progress.borrow().clone(),
            });
        }
        let key = self.images.state(&reference.to_owned())?;
        if key.failures == 0 {
            return None;
        }
        Some(self.waiting_state(reference, key.next_attempt_at, key.failures))
    }

    /// The state of every reference the actuator knows about, ordered by reference (see
    /// [`Actuator::status`]).
    pub fn statuses(&self) -> Vec<(String, ImageState)> {
        let mut all: Vec<(String, ImageState)> = self
            .references
            .keys()
            .filter_map(|r| Some((r.clone(), self.status(r)?)))
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    /// The progress of the attempt in flight for `reference`, if any.
    pub fn progress(&self, reference: &str) -> Option<PullProgress> {
        self.references
            .get(reference)?
            .live
            .as_ref()
            .map(|live| live.progress.borrow().clone())
    }

    /// The length of `reference`'s own failure streak (0 when it has none). A daemon outage never
    /// adds to it: while the daemon is unreachable, [`Actuator::ensure`] reports the daemon's
    /// failures instead.
    pub fn reference_failures(&self, reference: &str) -> u32 {
        self.images
            .state(&reference.to_owned())
            .map_or(0, |state| state.failures)
    }

    /// The open operator-visible faults (images and the daemon).
    pub fn faults(&self) -> Vec<Fault> {
        self.faults.list()
    }

    /// Forgets that `reference` is present, so the next `ensure` checks with the daemon again
    /// (for a caller that learned the image was removed, e.g. a container create said so).
    pub fn invalidate(&mut self, reference: &str) {
        if let Some(entry) = self.references.get_mut(reference) {
            entry.present = false;
        }
    }

    /// Forgets `reference` entirely (no workload needs it any more): its pacing, its open fault
    /// and its in-flight attempt, whose result will then be ignored.
    pub fn forget(&mut self, reference: &str) {
        if let Some(entry) = self.references.remove(reference) {
            // Nobody needs the image any more: stop pulling it.
            for attempt in [entry.live, entry.stale].into_iter().flatten() {
                attempt.task.abort();
            }
        }
        self.images.forget(&reference.to_owned());
        self.faults
            .clear(&FaultSubject::Image(reference.to_owned()));
    }

    /// Whether any attempt this actuator considers live (not superseded) is still running.
    pub fn has_live_attempts(&self) -> bool {
        self.daemon.probe.is_some() || self.references.values().any(|r| r.live.is_some())
    }

    /// Waits until no live attempt is running, applying every result at `now`. Results of
    /// superseded attempts that arrive meanwhile are applied (and so ignored) too. For callers
    /// that step a manual clock and want each step's attempts finished before the next.
    pub async fn settle(&mut self, now: Instant) {
        self.apply_completions(now);
        while self.has_live_attempts() {
            match self.done_rx.recv().await {
                Some(done) => self.apply(done, now),
                None => return,
            }
        }
    }

    /// Waits for the next attempt result of any kind (live or superseded) and applies it at `now`.
    pub async fn next_result(&mut self, now: Instant) {
        if let Some(done) = self.done_rx.recv().await {
            self.apply(done, now);
        }
    }

    fn apply_completions(&mut self, now: Instant) {
        while let Ok(done) = self.done_rx.try_recv() {
            self.apply(done, now);
        }
    }

    fn apply(&mut self, done: Completion, now: Instant) {
        match done {
            Completion::Image {
                reference,
                token,
                result,
            } => self.apply_image(&reference, token, result, now),
            Completion::Probe { token, result } => self.apply_probe(token, result, now),
        }
    }

    // r[impl actuate.image.attempt-token]
    fn apply_image(
        &mut self,
        reference: &str,
        token: Token,
        result: Result<Fetched, PullError>,
        now: Instant,
    ) {
        // The gate decides whether the token is still the live one; a superseded token's result
        // changes nothing, here or there.
        let subject = FaultSubject::Image(reference.to_owned());
        match result {
            Ok(fetched) => {
                if self.images.succeed(token, now) == Finished::Superseded {
                    tracing::debug!(reference, "late success of a superseded attempt ignored");
                    self.attempt_ended(reference, token);
                    return;
                }
                self.attempt_ended(reference, token);
                let entry = self.references.entry(reference.to_owned()).or_default();
                entry.present = true;
                entry.last_error = None;
                tracing::info!(reference, ?fetched, "image present");
                // r[impl actuate.image.fault]
                self.faults.clear(&subject);
                self.daemon_answered();
            }
            Err(err) => {
                // r[impl actuate.image.daemon+2]
                // An unreachable daemon says nothing about the image: the attempt ends without an
                // outcome for the reference and counts on the daemon's gate instead.
                let finished = if err.kind.is_daemon_condition() {
                    self.images.release(token, now)
                } else {
                    self.images.fail(token, now, err.retry_after)
                };
                let failed = match finished {
                    Finished::Failed(failed) => failed,
                    Finished::Released => {
                        self.attempt_ended(reference, token);
                        tracing::debug!(reference, error = %err, "attempt released: the daemon is unreachable");
                        self.daemon_failed(err, now);
                        return;
                    }
                    Finished::Superseded | Finished::Succeeded { .. } => {
                        tracing::debug!(reference, error = %err, "late failure of a superseded attempt ignored");
                        self.attempt_ended(reference, token);
                        return;
                    }
                };
                self.attempt_ended(reference, token);
                let entry = self.references.entry(reference.to_owned()).or_default();
                entry.last_error = Some(err.clone());
                tracing::warn!(
                    reference,
                    kind = %err.kind,
                    failures = failed.failures,
                    error = %err.message,
                    "image pull failed"
                );
                let file_now =
                    failed.escalated || err.kind.fault_policy() == FaultPolicy::Immediately;
                if file_now {
                    self.faults.file(subject, &err, failed.failures, now);
                } else {
                    self.faults.refresh(&subject, &err, failed.failures);
                }
                if err.kind.is_daemon_condition() {
                    self.daemon_failed(err, now);
                } else if err.kind != PullErrorKind::Stalled {
                    // A stall is the absence of an answer, so it says nothing about the daemon.
                    self.daemon_answered();
                }
            }
        }
    }

    /// The attempt `token` has ended: if it is the reference's live (or stale, not yet superseded)
    /// attempt, nothing of it is running any more.
    fn attempt_ended(&mut self, reference: &str, token: Token) {
        if let Some(entry) = self.references.get_mut(reference) {
            if entry.live.as_ref().is_some_and(|live| live.token == token) {
                entry.live = None;
            }
            if entry
                .stale
                .as_ref()
                .is_some_and(|stale| stale.token == token)
            {
                entry.stale = None;
            }
        }
    }

    // r[impl actuate.image.daemon+2]
    /// Records a failure to reach the daemon on the daemon's own gate, and from then on starts no
    /// image attempt until a probe gets an answer.
    fn daemon_failed(&mut self, err: PullError, now: Instant) {
        let token = match self.daemon.probe.take() {
            Some(token) => Some(token),
            None => match self.daemon_gate.begin((), now) {
                Permit::Granted { token, .. } => Some(token),
                Permit::Wait {
                    until, failures, ..
                } => {
                    // Already counted within this wait (several attempts found it down at once).
                    let down = self.daemon.down.get_or_insert(DaemonDown {
                        failures,
                        until,
                        last_error: err.clone(),
                    });
                    down.last_error = err;
                    return;
                }
                Permit::InFlight => None,
            },
        };
        let Some(token) = token else {
            if let Some(down) = &mut self.daemon.down {
                down.last_error = err;
            }
            return;
        };
        if let Finished::Failed(failed) = self.daemon_gate.fail(token, now, None) {
            tracing::warn!(failures = failed.failures, error = %err.message, "docker daemon unreachable");
            if failed.escalated {
                self.faults
                    .file(FaultSubject::Daemon, &err, failed.failures, now);
            } else {
                self.faults
                    .refresh(&FaultSubject::Daemon, &err, failed.failures);
            }
            self.daemon.down = Some(DaemonDown {
                failures: failed.failures,
                until: failed.until,
                last_error: err,
            });
        }
    }

    fn apply_probe(&mut self, token: Token, result: Result<(), PullError>, now: Instant) {
        if self.daemon.probe != Some(token) {
            return;
        }
        match result {
            Ok(()) => {
                self.daemon.probe = None;
                if self.daemon_gate.succeed(token, now) == Finished::Superseded {
                    return;
                }
                tracing::info!("docker daemon answers again");
                self.daemon.down = None;
                self.faults.clear(&FaultSubject::Daemon);
            }
            Err(err) => self.daemon_failed(err, now),
        }
    }

    // r[impl actuate.image.daemon+2]
    /// An attempt got an answer from the daemon, so it is up: the daemon is as fresh as after a
    /// successful probe (its streak and escalation reset, any probe in flight no longer needed),
    /// so its next outage escalates and files its fault again.
    fn daemon_answered(&mut self) {
        if self.daemon.down.take().is_some() {
            self.faults.clear(&FaultSubject::Daemon);
        }
        self.daemon.probe = None;
        self.daemon_gate.forget(&());
    }

    /// The configuration in use.
    pub fn config(&self) -> &PullConfig {
        &self.config
    }
}

#[cfg(test)]
mod tests {
    //! The actuator's bookkeeping, with a fetcher whose attempts finish when the test says so and
    //! a caller's clock that only moves when the test moves it. Real pulls against dockerd are in
    //! `tests/dockerd.rs`.

    use std::collections::VecDeque;
    use std::sync::Mutex as StdMutex;

    use holdfast_retry::Jitter;
    use tokio::sync::oneshot;

    use super::*;

    type Reply = oneshot::Sender<Result<Fetched, PullError>>;

    #[derive(Clone, Default)]
    struct Scripted {
        calls: Arc<StdMutex<VecDeque<(String, Reply)>>>,
        probes: Arc<StdMutex<Vec<Result<(), PullError>>>>,
        probe_calls: Arc<StdMutex<u32>>,
    }

    impl Scripted {
        fn pending(&self) -> usize {
            self.calls.lock().unwrap().len()
        }
        fn next_call(&self) -> (String, Reply) {
            self.calls
                .lock()
                .unwrap()
                .pop_front()
                .expect("an attempt was started")
        }
        fn probes_answer(&self, answer: Result<(), PullError>) {
            self.probes.lock().unwrap().push(answer);
        }
        fn probe_calls(&self) -> u32 {
            *self.probe_calls.lock().unwrap()
        }
    }

    impl Fetcher for Scripted {
        fn fetch(
            &self,
            reference: String,
            progress: watch::Sender<PullProgress>,
        ) -> BoxFuture<Result<Fetched, PullError>> {
            let (tx, rx) = oneshot::channel();
            self.calls.lock().unwrap().push_back((reference, tx));
            Box::pin(async move {
                progress.send_replace(PullProgress {
                    layers: 1,
                    ..Default::default()
                });
                rx.await
                    .unwrap_or_else(|_| Err(PullError::new(PullErrorKind::Daemon, "dropped")))
            })
        }

        fn probe(&self) -> BoxFuture<Result<(), PullError>> {
            *self.probe_calls.lock().unwrap() += 1;
            let answer = self
                .probes
                .lock()
                .unwrap()
                .last()
                .cloned()
                .unwrap_or(Ok(()));
            Box::pin(async move { answer })
        }
    }

    fn config(stale_after: Duration) -> PullConfig {
        let policy = Policy::builder()
            .base(Duration::from_secs(5))
            .cap(Duration::from_secs(300))
            .escalate_after(5)
            .jitter(Jitter::None)
            .stale_after(stale_after)
            .build()
            .unwrap();
        PullConfig {
            image_policy: policy,
            daemon_policy: policy,
            stall_timeout: Duration::from_secs(60),
        }
    }

    // r[verify actuate.image.watchdog]
    #[tokio::test(start_paused = true)]
    async fn a_daemon_that_accepts_and_never_answers_stalls_the_probe_within_the_bound() {
        let dir = std::env::temp_dir().join(format!("holdfast-pull-mute-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("docker.sock");
        let listener = tokio::net::UnixListener::bind(&socket).unwrap();
        // Accepts connections and never answers on them.
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                held.push(stream);
            }
        });
        let fetcher = DockerFetcher::new(
            DaemonEndpoint::from_docker_host(Some(&format!("unix://{}", socket.display()))),
            Duration::from_secs(5),
        );
        let start = tokio::time::Instant::now();
        let err = fetcher.probe().await.expect_err("the daemon never answers");
        assert_eq!(err.kind, PullErrorKind::Stalled, "{err}");
        assert_eq!(
            start.elapsed(),
            Duration::from_secs(5),
            "the stall bound, not bollard's 120 s"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn unreachable() -> PullError {
        PullError::new(
            PullErrorKind::RegistryUnreachable,
            "Get \"http://127.0.0.1:5099/v2/\": dial tcp 127.0.0.1:5099: connect: connection refused",
        )
    }

    const IMG: &str = "127.0.0.1:5000/holdfast/busybox:latest";

    // r[verify actuate.image.single-flight+2]
    #[tokio::test]
    async fn a_healthy_long_pull_is_not_stale_and_a_superseded_one_is_cancelled() {
        assert_eq!(
            PullConfig::default().image_policy.stale_after(),
            DEFAULT_PULL_STALE_AFTER
        );
        assert!(DEFAULT_PULL_STALE_AFTER >= 100 * DEFAULT_STALL_TIMEOUT);
        let fetcher = Scripted::default();
        let mut act = Actuator::new(fetcher.clone(), PullConfig::default()).unwrap();
        let t0 = Instant::now();
        act.ensure(IMG, t0);
        let (_, a) = fetcher.next_call();
        // An hour in, the pull is still the one in flight: not stale, nothing new started.
        let hour = t0 + Duration::from_secs(3600);
        assert!(matches!(act.ensure(IMG, hour), ImageState::Pulling { .. }));
        assert_eq!(fetcher.pending(), 0);
        assert!(!a.is_closed(), "the healthy pull keeps running");
        // Past the stale timeout (and its back-off) a successor supersedes it and it is cancelled.
        let mut now = t0 + DEFAULT_PULL_STALE_AFTER;
        while fetcher.pending() == 0 {
            act.ensure(IMG, now);
            now += Duration::from_secs(1);
            assert!(now < t0 + DEFAULT_PULL_STALE_AFTER + Duration::from_secs(60));
        }
        assert!(cancelled(&a).await, "the superseded attempt was cancelled");
        let (_, b) = fetcher.next_call();
        assert!(!b.is_closed(), "its successor runs");
    }

    // r[verify actuate.image.single-flight+2]
    // r[verify actuate.image.ensure]
    #[tokio::test]
    async fn one_attempt_per_reference_then_present() {
        let fetcher = Scripted::default();
        let mut act = Actuator::new(fetcher.clone(), config(Duration::from_secs(600))).unwrap();
        let t0 = Instant::now();
        assert!(matches!(act.ensure(IMG, t0), ImageState::Pulling { .. }));
        for s in 1..20 {
            assert!(matches!(
                act.ensure(IMG, t0 + Duration::from_secs(s)),
                ImageState::Pulling { .. }
            ));
        }
        assert_eq!(fetcher.pending(), 1, "single flight");
        // Progress of the live attempt is observable.
        tokio::task::yield_now().await;
        let (reference, reply) = fetcher.next_call();
        assert_eq!(reference, IMG);
        reply.send(Ok(Fetched::Pulled)).unwrap();
        act.settle(t0 + Duration::from_secs(20)).await;
        assert_eq!(
            act.ensure(IMG, t0 + Duration::from_secs(21)),
            ImageState::Present
        );
        assert_eq!(fetcher.pending(), 0);
        assert!(act.faults().is_empty());
    }

    // r[verify actuate.image.retry]
    // r[verify actuate.image.fault]
    #[tokio::test]
    async fn failures_are_paced_escalate_once_and_a_success_recovers() {
        let fetcher = Scripted::default();
        let mut act = Actuator::new(fetcher.clone(), config(Duration::from_secs(600))).unwrap();
        let t0 = Instant::now();
        let mut attempts = Vec::new();
        let mut fault_since = None;
        for s in 0..=1000u64 {
            let now = t0 + Duration::from_secs(s);
            let state = act.ensure(IMG, now);
            if fetcher.pending() == 0 {
                continue;
            }
            assert!(matches!(state, ImageState::Pulling { .. }));
            attempts.push(s);
            fetcher.next_call().1.send(Err(unreachable())).unwrap();
            act.settle(now).await;
            let faults = act.faults();
            if attempts.len() < 5 {
                assert!(faults.is_empty(), "no fault before the threshold");
                assert!(matches!(act.ensure(IMG, now), ImageState::Waiting { .. }));
            } else {
                assert_eq!(faults.len(), 1, "one fault per reference");
                let since = faults[0].since;
                assert_eq!(*fault_since.get_or_insert(since), since, "filed once");
                match act.ensure(IMG, now) {
                    ImageState::Escalated {
                        failures,
                        last_error,
                        until,
                    } => {
                        assert_eq!(failures as usize, attempts.len());
                        assert_eq!(last_error.kind, PullErrorKind::RegistryUnreachable);
                        assert!(until > now, "escalated is still paced, not terminal");
                    }
                    other => panic!("expected escalated, got {other:?}"),
                }
            }
        }
        let gaps: Vec<u64> = attempts.windows(2).map(|w| w[1] - w[0]).collect();
        assert_eq!(
            gaps,
            vec![5, 10, 20, 40, 80, 160, 300, 300],
            "attempts at {attempts:?}"
        );
        // The registry is back: the next attempt succeeds and clears the fault; nothing else needed.
        let mut s = 1001;
        while fetcher.pending() == 0 {
            act.ensure(IMG, t0 + Duration::from_secs(s));
            s += 1;
        }
        assert!(
            s - 1 - attempts[attempts.len() - 1] <= 300,
            "within one cap interval"
        );
        fetcher.next_call().1.send(Ok(Fetched::Pulled)).unwrap();
        act.settle(t0 + Duration::from_secs(s)).await;
        assert_eq!(
            act.ensure(IMG, t0 + Duration::from_secs(s)),
            ImageState::Present
        );
        assert!(act.faults().is_empty(), "fault cleared by the success");
        // Success reset the reference: after invalidation it starts fresh, with no fault.
        act.invalidate(IMG);
        act.ensure(IMG, t0 + Duration::from_secs(s + 1));
        fetcher.next_call().1.send(Err(unreachable())).unwrap();
        act.settle(t0 + Duration::from_secs(s + 1)).await;
        match act.ensure(IMG, t0 + Duration::from_secs(s + 1)) {
            ImageState::Waiting {
                failures, until, ..
            } => {
                assert_eq!(failures, 1);
                assert_eq!(until, t0 + Duration::from_secs(s + 1 + 5));
            }
            other => panic!("expected a fresh streak, got {other:?}"),
        }
    }

    // r[verify actuate.image.progress]
    #[tokio::test]
    async fn status_reports_without_starting_anything() {
        let fetcher = Scripted::default();
        let mut act = Actuator::new(fetcher.clone(), config(Duration::from_secs(600))).unwrap();
        let t0 = Instant::now();
        assert_eq!(act.status(IMG), None);
        act.ensure(IMG, t0);
        // The scripted attempt publishes one layer of progress once it runs.
        let mut progress = PullProgress::default();
        for _ in 0..100 {
            tokio::task::yield_now().await;
            if let Some(ImageState::Pulling { progress: p }) = act.status(IMG) {
                if p.layers == 1 {
                    progress = p;
                    break;
                }
            }
        }
        assert_eq!(
            progress.layers, 1,
            "progress of the live attempt is visible"
        );
        fetcher.next_call().1.send(Err(unreachable())).unwrap();
        act.settle(t0).await;
        match act.status(IMG) {
            Some(ImageState::Waiting {
                failures: 1, until, ..
            }) => {
                assert_eq!(until, t0 + Duration::from_secs(5));
            }
            other => panic!("expected waiting, got {other:?}"),
        }
        assert_eq!(
            fetcher.pending(),
            0,
            "status started nothing though an attempt is due"
        );
        assert_eq!(act.statuses().len(), 1);
    }

    // r[verify actuate.image.classify.policy]
    #[tokio::test]
    async fn not_found_files_its_fault_at_once_and_is_still_retried() {
        let fetcher = Scripted::default();
        let mut act = Actuator::new(fetcher.clone(), config(Duration::from_secs(600))).unwrap();
        let t0 = Instant::now();
        act.ensure(IMG, t0);
        let not_found = PullError {
            kind: PullErrorKind::NotFound,
            status: holdfast_retry::http::StatusCode::new(404),
            message: "manifest unknown".into(),
            retry_after: None,
        };
        fetcher.next_call().1.send(Err(not_found)).unwrap();
        act.settle(t0).await;
        assert!(matches!(
            act.ensure(IMG, t0),
            ImageState::Escalated { failures: 1, .. }
        ));
        assert_eq!(act.faults().len(), 1);
        assert_eq!(act.faults()[0].kind, PullErrorKind::NotFound);
        // Not terminal: the next attempt comes on schedule.
        act.ensure(IMG, t0 + Duration::from_secs(5));
        assert_eq!(fetcher.pending(), 1);
    }

    // r[verify actuate.image.classify.policy]
    #[tokio::test]
    async fn a_typed_retry_after_hint_lengthens_the_wait() {
        let fetcher = Scripted::default();
        let mut act = Actuator::new(fetcher.clone(), config(Duration::from_secs(600))).unwrap();
        let t0 = Instant::now();
        act.ensure(IMG, t0);
        let limited = PullError {
            kind: PullErrorKind::RateLimited,
            status: holdfast_retry::http::StatusCode::new(500),
            message: "toomanyrequests: slow down".into(),
            retry_after: Some(Duration::from_secs(120)),
        };
        fetcher.next_call().1.send(Err(limited)).unwrap();
        act.settle(t0).await;
        match act.ensure(IMG, t0) {
            ImageState::Waiting {
                until, last_error, ..
            } => {
                assert!(until >= t0 + Duration::from_secs(120), "hint honoured");
                assert_eq!(last_error.kind, PullErrorKind::RateLimited);
            }
            other => panic!("expected waiting, got {other:?}"),
        }
    }

    /// The token of `reference`'s live attempt.
    fn live_token(act: &Actuator<Scripted>, reference: &str) -> Token {
        act.references[reference]
            .live
            .as_ref()
            .expect("an attempt is live")
            .token
    }

    /// Lets the runtime run until `reply`'s attempt has been dropped (cancelled).
    async fn cancelled(reply: &Reply) -> bool {
        for _ in 0..100 {
            if reply.is_closed() {
                return true;
            }
            tokio::task::yield_now().await;
        }
        false
    }

    /// Delivers a result for attempt `token` as one that raced its cancellation would arrive,
    /// and applies it at `now`.
    async fn late_result(
        act: &mut Actuator<Scripted>,
        token: Token,
        result: Result<Fetched, PullError>,
        now: Instant,
    ) {
        act.done_tx
            .send(Completion::Image {
                reference: IMG.to_owned(),
                token,
                result,
            })
            .unwrap();
        act.next_result(now).await;
    }

    /// Starts attempt A, lets it go stale, and returns once attempt B superseded it, with A's
    /// token.
    async fn supersede(
        act: &mut Actuator<Scripted>,
        fetcher: &Scripted,
        t0: Instant,
    ) -> (Reply, Token, Reply, Instant) {
        act.ensure(IMG, t0);
        let a_token = live_token(act, IMG);
        let (_, a) = fetcher.next_call();
        let mut s = 1;
        let now = loop {
            let now = t0 + Duration::from_secs(s);
            act.ensure(IMG, now);
            if fetcher.pending() > 0 {
                break now;
            }
            s += 1;
            assert!(s < 1000, "the stale attempt was never superseded");
        };
        let (_, b) = fetcher.next_call();
        (a, a_token, b, now)
    }

    // r[verify actuate.image.attempt-token]
    #[tokio::test]
    async fn a_superseded_attempt_failing_late_does_not_disturb_the_live_one() {
        let fetcher = Scripted::default();
        let mut act = Actuator::new(fetcher.clone(), config(Duration::from_secs(30))).unwrap();
        let t0 = Instant::now();
        let (a, a_token, b, now) = supersede(&mut act, &fetcher, t0).await;
        // The stale attempt A was counted once (as stalled) when B superseded it, and cancelled.
        assert!(cancelled(&a).await, "A no longer runs beside B");
        // A failure of A that raced its cancellation changes nothing.
        late_result(&mut act, a_token, Err(unreachable()), now).await;
        assert!(
            matches!(act.ensure(IMG, now), ImageState::Pulling { .. }),
            "B is still in flight"
        );
        assert_eq!(fetcher.pending(), 0, "and no third attempt started");
        b.send(Ok(Fetched::Pulled)).unwrap();
        act.settle(now).await;
        assert_eq!(act.ensure(IMG, now), ImageState::Present);
    }

    // r[verify actuate.image.attempt-token]
    #[tokio::test]
    async fn a_superseded_attempt_succeeding_late_does_not_resurrect_stale_state() {
        let fetcher = Scripted::default();
        let mut act = Actuator::new(fetcher.clone(), config(Duration::from_secs(30))).unwrap();
        let t0 = Instant::now();
        let (a, a_token, b, now) = supersede(&mut act, &fetcher, t0).await;
        assert!(cancelled(&a).await, "A no longer runs beside B");
        b.send(Err(unreachable())).unwrap();
        act.settle(now).await;
        let before = act.ensure(IMG, now);
        let ImageState::Waiting { failures, .. } = &before else {
            panic!("expected waiting after B failed, got {before:?}");
        };
        assert_eq!(*failures, 2, "A counted as stale, B as failed");
        late_result(&mut act, a_token, Ok(Fetched::Pulled), now).await;
        assert_eq!(
            act.ensure(IMG, now),
            before,
            "A's late success changed nothing"
        );
    }

    // r[verify actuate.image.attempt-token]
    #[tokio::test]
    async fn a_stale_attempt_ending_before_a_successor_leaves_nothing_in_flight() {
        let fetcher = Scripted::default();
        let mut act = Actuator::new(fetcher.clone(), config(Duration::from_secs(30))).unwrap();
        let t0 = Instant::now();
        act.ensure(IMG, t0);
        let (_, a) = fetcher.next_call();
        // Stale at 30 s: counted as failed then, next attempt due 5 s later.
        let now = t0 + Duration::from_secs(31);
        assert!(matches!(
            act.ensure(IMG, now),
            ImageState::Waiting { failures: 1, .. }
        ));
        a.send(Err(unreachable())).unwrap();
        act.next_result(now).await;
        assert!(!act.has_live_attempts(), "the stale attempt has ended");
        act.settle(now).await; // returns at once rather than waiting for a result that never comes
        // Its late failure adds nothing to the failure counted at the stale moment.
        assert!(matches!(
            act.ensure(IMG, now),
            ImageState::Waiting { failures: 1, .. }
        ));
        assert!(matches!(
            act.ensure(IMG, t0 + Duration::from_secs(35)),
            ImageState::Pulling { .. }
        ));
        assert_eq!(fetcher.pending(), 1);
    }

    // r[verify actuate.image.attempt-token]
    // r[verify actuate.image.fault]
    #[tokio::test]
    async fn an_attempt_that_goes_stale_while_refused_is_a_stalled_failure_and_may_escalate() {
        let fetcher = Scripted::default();
        let mut cfg = config(Duration::from_secs(30));
        cfg.image_policy = Policy::builder()
            .base(Duration::from_secs(5))
            .cap(Duration::from_secs(300))
            .escalate_after(1)
            .jitter(Jitter::None)
            .stale_after(Duration::from_secs(30))
            .build()
            .unwrap();
        let mut act = Actuator::new(fetcher.clone(), cfg).unwrap();
        let t0 = Instant::now();
        act.ensure(IMG, t0);
        let (_, _hung) = fetcher.next_call();
        // At 30 s the gate counts the hung attempt and refuses a new one until 35 s.
        let now = t0 + Duration::from_secs(30);
        let state = act.ensure(IMG, now);
        match &state {
            ImageState::Escalated {
                failures: 1,
                until,
                last_error,
            } => {
                assert_eq!(*until, t0 + Duration::from_secs(35));
                assert_eq!(last_error.kind, PullErrorKind::Stalled);
            }
            other => panic!("expected the stale attempt to escalate, got {other:?}"),
        }
        assert_eq!(act.status(IMG).as_ref(), Some(&state), "no longer Pulling");
        assert!(!act.has_live_attempts());
        let faults = act.faults();
        assert_eq!(
            faults.len(),
            1,
            "the escalation files the fault: {faults:?}"
        );
        assert_eq!(faults[0].kind, PullErrorKind::Stalled);
        assert_eq!(fetcher.pending(), 0, "nothing new started before 35 s");
    }

    // r[verify actuate.image.attempt-token]
    #[tokio::test]
    async fn a_stale_attempt_succeeding_before_a_successor_began_makes_the_image_present() {
        let fetcher = Scripted::default();
        let mut act = Actuator::new(fetcher.clone(), config(Duration::from_secs(30))).unwrap();
        let t0 = Instant::now();
        act.ensure(IMG, t0);
        let (_, a) = fetcher.next_call();
        let now = t0 + Duration::from_secs(31);
        assert!(matches!(
            act.ensure(IMG, now),
            ImageState::Waiting { failures: 1, .. }
        ));
        // No newer attempt began, so its token is not superseded: its late success still resets
        // the reference (the retry in-flight expiry rule); the image is there.
        a.send(Ok(Fetched::Pulled)).unwrap();
        act.next_result(now).await;
        assert!(!act.has_live_attempts());
        assert_eq!(act.ensure(IMG, now), ImageState::Present);
        assert_eq!(fetcher.pending(), 0, "nothing more to pull");
        assert!(act.faults().is_empty());
    }

    // r[verify actuate.image.attempt-token]
    #[tokio::test]
    async fn a_forgotten_reference_ignores_its_late_result() {
        let fetcher = Scripted::default();
        let mut act = Actuator::new(fetcher.clone(), config(Duration::from_secs(600))).unwrap();
        let t0 = Instant::now();
        act.ensure(IMG, t0);
        let old_token = live_token(&act, IMG);
        let (_, old) = fetcher.next_call();
        act.forget(IMG);
        assert!(
            cancelled(&old).await,
            "a forgotten reference's pull is cancelled"
        );
        late_result(&mut act, old_token, Err(unreachable()), t0).await;
        assert!(act.faults().is_empty());
        // Asked for again, it is a fresh reference: an attempt starts at once.
        assert!(matches!(act.ensure(IMG, t0), ImageState::Pulling { .. }));
        assert_eq!(fetcher.pending(), 1);
    }

    // r[verify actuate.image.daemon+2]
    #[tokio::test]
    async fn daemon_unreachable_is_its_own_paced_condition() {
        let fetcher = Scripted::default();
        let mut act = Actuator::new(fetcher.clone(), config(Duration::from_secs(600))).unwrap();
        let t0 = Instant::now();
        let other = "127.0.0.1:5000/holdfast/other:1";
        act.ensure(IMG, t0);
        let down = PullError::new(PullErrorKind::DaemonUnreachable, "daemon socket not found");
        fetcher.probes_answer(Err(down.clone()));
        fetcher.next_call().1.send(Err(down)).unwrap();
        act.settle(t0).await;
        // The attempt that found the daemon down counted on the daemon, not on the image.
        assert_eq!(act.reference_failures(IMG), 0);
        let mut probes_at = Vec::new();
        for s in 0..=700u64 {
            let now = t0 + Duration::from_secs(s);
            let before = fetcher.probe_calls();
            for reference in [IMG, other] {
                assert!(matches!(
                    act.ensure(reference, now),
                    ImageState::DaemonUnreachable { .. }
                ));
                assert_eq!(
                    act.reference_failures(reference),
                    0,
                    "a daemon outage grows no reference's streak"
                );
            }
            if fetcher.probe_calls() > before {
                probes_at.push(s);
            }
            act.settle(now).await;
            assert_eq!(
                fetcher.pending(),
                0,
                "no pull starts while the daemon is down"
            );
        }
        let gaps: Vec<u64> = probes_at.windows(2).map(|w| w[1] - w[0]).collect();
        assert_eq!(probes_at[0], 5);
        assert_eq!(
            gaps,
            vec![10, 20, 40, 80, 160, 300],
            "probes at {probes_at:?}"
        );
        let faults = act.faults();
        assert!(
            faults.iter().any(|f| f.subject == FaultSubject::Daemon),
            "daemon fault filed: {faults:?}"
        );
        assert!(
            !faults
                .iter()
                .any(|f| matches!(f.subject, FaultSubject::Image(_))),
            "no image has a fault of its own: {faults:?}"
        );
        // The daemon comes back: the next probe succeeds, pulls resume, the daemon fault clears.
        fetcher.probes_answer(Ok(()));
        let mut s = 701;
        loop {
            let now = t0 + Duration::from_secs(s);
            act.ensure(IMG, now);
            act.settle(now).await;
            if !act
                .faults()
                .iter()
                .any(|f| f.subject == FaultSubject::Daemon)
            {
                break;
            }
            s += 1;
            assert!(s < 1100, "daemon never recovered");
        }
        // At once, as for a reference that never failed.
        let now = t0 + Duration::from_secs(s);
        assert!(matches!(act.ensure(IMG, now), ImageState::Pulling { .. }));
        assert_eq!(act.reference_failures(IMG), 0);
        fetcher.next_call().1.send(Ok(Fetched::Pulled)).unwrap();
        act.settle(now).await;
        assert_eq!(act.ensure(IMG, now), ImageState::Present);
    }

    // r[verify actuate.image.daemon+2]
    #[tokio::test]
    async fn a_daemon_that_answers_an_image_attempt_escalates_afresh_in_its_next_outage() {
        let fetcher = Scripted::default();
        let mut act = Actuator::new(fetcher.clone(), config(Duration::from_secs(600))).unwrap();
        let t0 = Instant::now();
        let other = "127.0.0.1:5000/holdfast/other:1";
        // Two attempts in flight; the first finds the daemon down.
        act.ensure(IMG, t0);
        act.ensure(other, t0);
        let (_, img) = fetcher.next_call();
        let (_, late) = fetcher.next_call();
        let down = PullError::new(PullErrorKind::DaemonUnreachable, "daemon socket not found");
        fetcher.probes_answer(Err(down.clone()));
        img.send(Err(down.clone())).unwrap();
        act.next_result(t0).await;
        // Probes fail until the daemon escalates (5 failures: at 0, 5, 15, 35, 75 s).
        let mut s = 0;
        while !act
            .faults()
            .iter()
            .any(|f| f.subject == FaultSubject::Daemon)
        {
            s += 1;
            assert!(s < 200, "the daemon never escalated");
            let now = t0 + Duration::from_secs(s);
            act.ensure(IMG, now);
            act.apply_completions(now);
            tokio::task::yield_now().await;
            act.apply_completions(now);
        }
        // The attempt that was still in flight gets the daemon's answer (a registry failure):
        // the daemon is up, its fault clears, and it is fresh again.
        let now = t0 + Duration::from_secs(s);
        late.send(Err(unreachable())).unwrap();
        act.next_result(now).await;
        assert!(
            act.faults()
                .iter()
                .all(|f| f.subject != FaultSubject::Daemon)
        );
        assert!(!act.has_live_attempts(), "no probe left in flight");
        // The next outage starts a new daemon streak and escalates (and files) again.
        assert!(matches!(act.ensure(IMG, now), ImageState::Pulling { .. }));
        fetcher.next_call().1.send(Err(down)).unwrap();
        act.next_result(now).await;
        assert!(matches!(
            act.ensure(IMG, now),
            ImageState::DaemonUnreachable { failures: 1, .. }
        ));
        let outage = s;
        while !act
            .faults()
            .iter()
            .any(|f| f.subject == FaultSubject::Daemon)
        {
            s += 1;
            assert!(
                s < outage + 200,
                "the second outage never filed the daemon fault"
            );
            let now = t0 + Duration::from_secs(s);
            act.ensure(IMG, now);
            act.apply_completions(now);
            tokio::task::yield_now().await;
            act.apply_completions(now);
        }
    }

    // r[verify actuate.image.daemon+2]
    #[tokio::test]
    async fn a_stall_is_no_answer_from_the_daemon() {
        let fetcher = Scripted::default();
        let mut act = Actuator::new(fetcher.clone(), config(Duration::from_secs(600))).unwrap();
        let t0 = Instant::now();
        let other = "127.0.0.1:5000/holdfast/other:1";
        act.ensure(IMG, t0);
        act.ensure(other, t0);
        let (_, img) = fetcher.next_call();
        let (_, stalled) = fetcher.next_call();
        let down = PullError::new(PullErrorKind::DaemonUnreachable, "daemon socket not found");
        fetcher.probes_answer(Err(down.clone()));
        img.send(Err(down)).unwrap();
        act.next_result(t0).await;
        stalled
            .send(Err(PullError::new(
                PullErrorKind::Stalled,
                "no answer within 60s",
            )))
            .unwrap();
        act.next_result(t0).await;
        assert!(
            matches!(
                act.ensure(IMG, t0),
                ImageState::DaemonUnreachable { failures: 1, .. }
            ),
            "a stall does not count as the daemon answering"
        );
    }

    // r[verify actuate.image.daemon+2]
    #[tokio::test]
    async fn a_daemon_outage_keeps_a_failing_references_streak_and_wait() {
        let fetcher = Scripted::default();
        let mut act = Actuator::new(fetcher.clone(), config(Duration::from_secs(600))).unwrap();
        let t0 = Instant::now();
        // Two registry failures: the reference waits 10 s after the second (at 5 s).
        act.ensure(IMG, t0);
        fetcher.next_call().1.send(Err(unreachable())).unwrap();
        act.settle(t0).await;
        let t5 = t0 + Duration::from_secs(5);
        assert!(matches!(act.ensure(IMG, t5), ImageState::Pulling { .. }));
        fetcher.next_call().1.send(Err(unreachable())).unwrap();
        act.settle(t5).await;
        assert_eq!(act.reference_failures(IMG), 2);
        // Its third attempt finds the daemon down: the streak stays at 2.
        let t15 = t0 + Duration::from_secs(15);
        assert!(matches!(act.ensure(IMG, t15), ImageState::Pulling { .. }));
        let down = PullError::new(PullErrorKind::DaemonUnreachable, "daemon socket not found");
        fetcher.probes_answer(Err(down.clone()));
        fetcher.next_call().1.send(Err(down)).unwrap();
        act.settle(t15).await;
        assert_eq!(act.reference_failures(IMG), 2);
        assert!(matches!(
            act.ensure(IMG, t15),
            ImageState::DaemonUnreachable { failures: 1, .. }
        ));
        assert!(
            act.faults()
                .iter()
                .all(|f| f.subject == FaultSubject::Daemon)
        );
        // The daemon answers its first probe (at 20 s): the reference is eligible as before (its
        // wait ended at 15 s), and its next failure is its third, not its fourth.
        fetcher.probes_answer(Ok(()));
        let t20 = t0 + Duration::from_secs(20);
        act.ensure(IMG, t20);
        act.settle(t20).await;
        assert!(act.faults().is_empty(), "{:?}", act.faults());
        assert!(matches!(act.ensure(IMG, t20), ImageState::Pulling { .. }));
        fetcher.next_call().1.send(Err(unreachable())).unwrap();
        act.settle(t20).await;
        assert_eq!(act.reference_failures(IMG), 3);
        match act.ensure(IMG, t20) {
            ImageState::Waiting {
                failures, until, ..
            } => {
                assert_eq!(failures, 3);
                assert_eq!(until, t20 + Duration::from_secs(20));
            }
            other => panic!("expected waiting, got {other:?}"),
        }
    }
}
