//! The thin tokio shell around the [`Reconciler`]: performs its actions against the Docker
//! Engine API, feeds it the daemon's event stream, and hands back a stopper.
//!
//! Every decision is the core's. The shell spawns each action in a [`JoinSet`] (a panicking one
//! is reported as that action's failure; dropping the supervisor aborts them all), runs the event
//! stream in a task of its own that lists the labelled containers and then follows their `die`
//! and `destroy` events, and reconnects that stream through a holdfast-retry gate when it ends. A
//! stream counts as up only once it has stayed up for a while, so a daemon that accepts and drops
//! it at once is reconnected with a growing back-off, never in a tight loop. Results and events
//! are applied on the caller's clock in [`Supervisor::step`], so tests drive it with a manual
//! clock while the containers run in real time; [`Supervisor::start`] runs it on the real one.
//! A running container whose check the node makes (`health.http`, `health.tcp`) has a probe task
//! of its own (see `probe`), whose verdicts arrive as the daemon's health events do.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures_util::{FutureExt, StreamExt};
use holdfast_lifecycle::{FaultBoard, StopError, StopRequest, Stopper, stopper_fn};
use holdfast_retry::{AttemptToken, KeyedGate, Lasting};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use crate::config::{ModuleConfig, WorkloadConfig};
use crate::docker;
use crate::images::Images;
use crate::reconciler::{
    Action, Completion, ContainerEvent, Observed, Reconciler, StartCause, StartError,
};
use crate::state::WorkloadStatus;

/// How long an event stream must stay up before its connect counts as a success.
pub const STREAM_MIN_UP: Duration = Duration::from_secs(10);
/// The fault subject name for the daemon itself (module "workload").
pub const DAEMON_FAULT: &str = "docker daemon";
/// How often the running supervisor ticks when nothing wakes it sooner (the image checks).
pub const DEFAULT_TICK: Duration = Duration::from_secs(5);

/// The supervisor could not be created.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SupervisorError {
    /// Not inside a tokio runtime.
    #[error("the workload supervisor must be created inside a tokio runtime")]
    NoRuntime,
    /// A workload's configuration is invalid.
    #[error(transparent)]
    Config(#[from] crate::config::WorkloadConfigError),
}

/// What the event stream task reports, tagged with the stream's generation.
#[derive(Debug)]
enum StreamInput {
    Listing(u64, Vec<Observed>),
    Event(u64, ContainerEvent),
    Ended(u64, String),
    /// A verdict of the node's own probe (`health.http`, `health.tcp`): not the stream's, so
    /// not tagged with its generation.
    Probe(ContainerEvent),
}

#[derive(Debug)]
struct Stream {
    generation: u64,
    task: tokio::task::JoinHandle<()>,
    /// The connect attempt, until its listing arrives.
    token: Option<AttemptToken<()>>,
    /// Then a provisional success, until the stream has stayed up for [`STREAM_MIN_UP`].
    lasting: Option<Lasting<()>>,
    up_since: Option<Instant>,
}

/// Keeps the node's workloads running: the core plus the I/O.
pub struct Supervisor<I: Images> {
    host: String,
    core: Reconciler,
    images: I,
    tasks: JoinSet<Completion>,
    inputs_tx: mpsc::UnboundedSender<StreamInput>,
    inputs: mpsc::UnboundedReceiver<StreamInput>,
    stream: Option<Stream>,
    stream_gate: KeyedGate<()>,
    generation: u64,
    /// Stream connects made (for tests and metrics).
    stream_connects: u64,
    /// The node's own probes, by container id.
    probes: std::collections::HashMap<String, tokio::task::JoinHandle<()>>,
    runtime: tokio::runtime::Handle,
}

impl<I: Images> Drop for Supervisor<I> {
    fn drop(&mut self) {
        if let Some(stream) = &self.stream {
            stream.task.abort();
        }
        for probe in self.probes.values() {
            probe.abort();
        }
    }
}

impl<I: Images> Supervisor<I> {
    /// A supervisor for the daemon at `host` (a `DOCKER_HOST`-style URL), filing faults on
    /// `board`. Must be called inside a tokio runtime. Nothing is started before the daemon's
    /// container list has been read.
    pub fn new(
        host: impl Into<String>,
        config: ModuleConfig,
        board: FaultBoard,
        images: I,
    ) -> Result<Self, SupervisorError> {
        let runtime =
            tokio::runtime::Handle::try_current().map_err(|_| SupervisorError::NoRuntime)?;
        let (inputs_tx, inputs) = mpsc::unbounded_channel();
        Ok(Supervisor {
            host: host.into(),
            stream_gate: KeyedGate::new(config.stream_policy),
            core: Reconciler::new(config, board),
            images,
            tasks: JoinSet::new(),
            inputs_tx,
            inputs,
            stream: None,
            generation: 0,
            stream_connects: 0,
            probes: std::collections::HashMap::new(),
            runtime,
        })
    }

    /// The image `reference` moved: replaces the containers of `workloads` running it, one at
    /// a time (see [`Reconciler::image_moved`]).
    pub fn image_moved(&mut self, reference: &str, workloads: &[String]) {
        let actions = self.core.image_moved(reference, workloads);
        self.perform(actions);
    }

    /// The certificate `certificate` was renewed: its workloads are restarted or signalled as
    /// they ask (see [`Reconciler::cert_renewed`]).
    pub fn cert_renewed(&mut self, certificate: &str) {
        let actions = self.core.cert_renewed(certificate);
        self.perform(actions);
    }

    /// Sets the configured workloads (validated here), performing what the change requires.
    pub fn set_desired(&mut self, workloads: Vec<WorkloadConfig>) -> Result<(), SupervisorError> {
        crate::config::validate_all(&workloads)?;
        let actions = self.core.set_desired(workloads);
        self.perform(actions);
        Ok(())
    }

    /// The core, for its answers.
    pub fn core(&self) -> &Reconciler {
        &self.core
    }

    /// Each workload's state at `now`.
    pub fn status(&self, now: Instant) -> Vec<WorkloadStatus> {
        self.core.status(now)
    }

    /// How many times the event stream has been connected.
    pub fn stream_connects(&self) -> u64 {
        self.stream_connects
    }

    /// Whether the event stream is up and its container list applied.
    pub fn stream_up(&self) -> bool {
        self.stream.as_ref().is_some_and(|s| s.up_since.is_some())
    }

    /// Whether an event stream task exists (connecting, listing or following).
    pub fn stream_active(&self) -> bool {
        self.stream.is_some()
    }

    /// When the event stream may next be reconnected, while it is down and backing off.
    pub fn stream_next_attempt_at(&self) -> Option<Instant> {
        self.stream_gate
            .state(&())
            .filter(|s| !s.in_flight && s.failures > 0)
            .map(|s| s.next_attempt_at)
    }

    /// How many actions are running.
    pub fn running_actions(&self) -> usize {
        self.tasks.len()
    }

    // r[impl workload.events]
    /// One step at `now`: applies every result and stream input that has arrived, reconnects the
    /// event stream if it is down and its gate allows, and performs what the core decides.
    pub fn step(&mut self, now: Instant) {
        self.apply_arrived(now);
        self.tend_stream(now);
        let actions = self.core.tick(now, &mut self.images);
        self.perform(actions);
    }

    /// Waits until no action is running, applying every result (and performing what follows
    /// from it) at `now`.
    pub async fn settle(&mut self, now: Instant) {
        self.apply_arrived(now);
        while let Some(joined) = self.tasks.join_next().await {
            self.apply_joined(joined, now);
            self.apply_inputs(now);
        }
    }

    /// Waits (at most `limit`, real time) for the next result or stream input and applies it at
    /// `now`; returns whether anything arrived.
    pub async fn wait_input(&mut self, now: Instant, limit: Duration) -> bool {
        self.wait_input_with(limit, || now).await
    }

    /// Like [`Supervisor::wait_input`], applying what arrives at `clock()` read on its arrival,
    /// so a run's start and end are timed when they are learned, not when the wait began.
    async fn wait_input_with(&mut self, limit: Duration, clock: impl Fn() -> Instant) -> bool {
        let next = async {
            tokio::select! {
                Some(joined) = self.tasks.join_next(), if !self.tasks.is_empty() => {
                    Some(Err(joined))
                }
                input = self.inputs.recv() => input.map(Ok),
            }
        };
        match tokio::time::timeout(limit, next).await {
            Ok(Some(Err(joined))) => {
                self.apply_joined(joined, clock());
                true
            }
            Ok(Some(Ok(input))) => {
                self.apply_input(input, clock());
                true
            }
            _ => false,
        }
    }

    fn apply_arrived(&mut self, now: Instant) {
        while let Some(joined) = self.tasks.try_join_next() {
            self.apply_joined(joined, now);
        }
        self.apply_inputs(now);
    }

    fn apply_inputs(&mut self, now: Instant) {
        while let Ok(input) = self.inputs.try_recv() {
            self.apply_input(input, now);
        }
    }

    fn apply_joined(&mut self, joined: Result<Completion, tokio::task::JoinError>, now: Instant) {
        // Panics are caught inside the task and arrive as failures; a JoinError here is an
        // abort, which only dropping the supervisor does.
        if let Ok(completion) = joined {
            let actions = self.core.on_result(completion, now);
            self.perform(actions);
        }
    }

    fn apply_input(&mut self, input: StreamInput, now: Instant) {
        let current = self.stream.as_ref().map(|s| s.generation);
        match input {
            StreamInput::Listing(generation, listing) if Some(generation) == current => {
                if let Some(stream) = &mut self.stream {
                    stream.up_since = Some(now);
                    if let Some(token) = stream.token.take() {
                        stream.lasting = Some(self.stream_gate.succeed_provisionally(
                            token,
                            now,
                            STREAM_MIN_UP,
                        ));
                    }
                }
                let actions = self.core.resync(listing, now);
                self.perform(actions);
            }
            StreamInput::Event(generation, event) if Some(generation) == current => {
                let actions = self.core.on_event(event, now);
                self.perform(actions);
            }
            StreamInput::Ended(generation, error) if Some(generation) == current => {
                tracing::warn!(%error, "docker event stream ended; reconnecting with back-off");
                if let Some(stream) = self.stream.take() {
                    // Never listed, or not up for long: a failure of the connect streak.
                    let transition = match (stream.token, stream.lasting) {
                        (Some(token), _) => Some(self.stream_gate.fail(token, now, None)),
                        (None, Some(lasting)) => Some(self.stream_gate.ended(lasting, now, None)),
                        (None, None) => None,
                    };
                    if let Some(t) = transition {
                        self.daemon_fault(&t, &error);
                    }
                }
                self.core.stream_lost();
            }
            StreamInput::Probe(event) => {
                let actions = self.core.on_event(event, now);
                self.perform(actions);
            }
            // From a stream already replaced: changes nothing.
            _ => {}
        }
    }

    // r[impl workload.daemon]
    /// The daemon's own fault (subject `workload/docker daemon`): filed when the stream's
    /// reconnects escalate, refreshed while they fail, cleared once a stream has stayed up.
    fn daemon_fault<K>(&self, t: &holdfast_retry::Transition<K>, error: &str) {
        let message = format!(
            "the daemon's event stream cannot be kept up ({} consecutive failures): {error}",
            t.failures
        );
        self.core.fault_board().apply(
            holdfast_lifecycle::Subject::new(crate::reconciler::MODULE, DAEMON_FAULT),
            t,
            "unreachable",
            &message,
            std::time::SystemTime::now(),
        );
    }

    fn tend_stream(&mut self, now: Instant) {
        // Inputs were drained just before: a stream task that finished without announcing its
        // end panicked. It ended all the same.
        if self.stream.as_ref().is_some_and(|s| s.task.is_finished()) {
            let generation = self.generation;
            self.apply_input(
                StreamInput::Ended(generation, "the event stream task panicked".to_owned()),
                now,
            );
        }
        if let Some(stream) = &mut self.stream {
            if let Some(lasting) = &mut stream.lasting {
                if !lasting.is_confirmed() {
                    if let Some(t) = self.stream_gate.confirm(lasting, now) {
                        self.daemon_fault(&t, "the event stream is up again");
                    }
                }
            }
            return;
        }
        let Ok(token) = self.stream_gate.begin(&(), now) else {
            return;
        };
        self.generation += 1;
        self.stream_connects += 1;
        let generation = self.generation;
        let host = self.host.clone();
        let tx = self.inputs_tx.clone();
        let tail = self.core.config().log_tail_lines;
        let owner = self.core.config().owner.clone();
        let task = self
            .runtime
            .spawn(follow(host, owner, generation, tail, tx));
        self.stream = Some(Stream {
            generation,
            task,
            token: Some(token),
            lasting: None,
            up_since: None,
        });
    }

    /// How many containers the node is probing.
    pub fn probing(&self) -> usize {
        self.probes.len()
    }

    // r[impl workload.health.probe]
    /// Keeps one probe task for each running container whose check the node makes, and none
    /// for any other: a container replaced, exited or removed is no longer probed.
    fn tend_probes(&mut self) {
        let wanted = self.core.node_probes();
        self.probes.retain(|id, task| {
            let keep = wanted.iter().any(|(w, _, _)| w == id) && !task.is_finished();
            if !keep {
                task.abort();
            }
            keep
        });
        for (container, check, network) in wanted {
            if self.probes.contains_key(&container) {
                continue;
            }
            let task = self.runtime.spawn(crate::probe::run(
                self.host.clone(),
                container.clone(),
                network,
                check,
                Instant::now(),
                self.inputs_tx.clone(),
                StreamInput::Probe,
            ));
            self.probes.insert(container, task);
        }
    }

    fn perform(&mut self, actions: Vec<Action>) {
        self.perform_actions(actions);
        self.tend_probes();
    }

    fn perform_actions(&mut self, actions: Vec<Action>) {
        for action in actions {
            let host = self.host.clone();
            match action {
                Action::Start { attempt, spec } => {
                    let workload = spec.workload.clone();
                    let (spec, _) = self.core.config().on_node_network(*spec);
                    let node_network = self.core.config().node_network_name();
                    let work = async move {
                        let docker = docker::connect(&host).await.map_err(|e| StartError {
                            cause: StartCause::Failed,
                            container: None,
                            message: format!("connect: {e}"),
                        })?;
                        docker::ensure_network_and_start(&docker, &spec, &node_network).await
                    };
                    self.tasks.spawn_on(
                        async move {
                            let result = AssertUnwindSafe(work)
                                .catch_unwind()
                                .await
                                .unwrap_or_else(|_| {
                                    Err(StartError {
                                        cause: StartCause::Failed,
                                        container: None,
                                        message: "the start task panicked".to_owned(),
                                    })
                                });
                            Completion::Started {
                                workload,
                                attempt,
                                result,
                            }
                        },
                        &self.runtime,
                    );
                }
                Action::Remove {
                    container,
                    stop_timeout,
                    ..
                } => {
                    let id = container.clone();
                    let work = async move {
                        let docker = docker::connect(&host).await?;
                        docker::remove(&docker, &id, stop_timeout).await
                    };
                    self.tasks.spawn_on(
                        async move {
                            let result = match AssertUnwindSafe(work).catch_unwind().await {
                                Ok(r) => r.map_err(|e| e.to_string()),
                                Err(_) => Err("the remove task panicked".to_owned()),
                            };
                            Completion::Removed { container, result }
                        },
                        &self.runtime,
                    );
                }
                Action::Signal {
                    workload,
                    container,
                    signal,
                } => {
                    let id = container.clone();
                    let work = async move {
                        let docker = docker::connect(&host).await?;
                        docker::signal(&docker, &id, &signal).await
                    };
                    self.tasks.spawn_on(
                        async move {
                            let result = match AssertUnwindSafe(work).catch_unwind().await {
                                Ok(r) => r.map_err(|e| e.to_string()),
                                Err(_) => Err("the signal task panicked".to_owned()),
                            };
                            Completion::Signalled {
                                workload,
                                container,
                                result,
                            }
                        },
                        &self.runtime,
                    );
                }
            }
        }
    }

    // r[impl workload.stop]
    /// Runs the supervisor on the real clock until stopped. Returns a handle for status and
    /// config changes, and the module's stopper: by default stopping holdfast leaves the
    /// containers running (the next start adopts them); with `stop_on_exit` the stopper stops
    /// every running container inside the stop request's deadline.
    pub fn start(mut self, tick: Duration) -> (WorkloadsHandle, Box<dyn Stopper>)
    where
        I: Send + 'static,
    {
        let (status_tx, status_rx) = watch::channel(Vec::new());
        let (config_tx, mut config_rx) = mpsc::unbounded_channel::<Vec<WorkloadConfig>>();
        let (moved_tx, mut moved_rx) = mpsc::unbounded_channel::<(String, Vec<String>)>();
        let (renewed_tx, mut renewed_rx) = mpsc::unbounded_channel::<String>();
        let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
        let tick = tick.max(Duration::from_millis(10));
        let runtime = self.runtime.clone();
        let task = runtime.spawn(async move {
            loop {
                let now = Instant::now();
                self.step(now);
                let _ = status_tx.send(self.status(now));
                let wake = self
                    .core
                    .next_wake()
                    .map_or(tick, |w| w.saturating_duration_since(now).min(tick));
                tokio::select! {
                    _ = &mut stop_rx => break,
                    Some(workloads) = config_rx.recv() => {
                        if let Err(error) = self.set_desired(workloads) {
                            tracing::warn!(%error, "workload configuration rejected");
                        }
                    }
                    Some((reference, workloads)) = moved_rx.recv() => {
                        self.image_moved(&reference, &workloads);
                    }
                    Some(certificate) = renewed_rx.recv() => {
                        self.cert_renewed(&certificate);
                    }
                    _ = self.wait_input_with(wake, Instant::now) => {}
                }
            }
            let stop_on_exit = self.core.config().stop_on_exit;
            let running = self.core.running_containers();
            (self.host.clone(), stop_on_exit, running)
        });
        let keep = Arc::new(AtomicBool::new(false));
        let keeping = Arc::clone(&keep);
        let stopper = stopper_fn(move |request: StopRequest| async move {
            let _ = stop_tx.send(());
            let remaining = || {
                request
                    .deadline
                    .saturating_duration_since(tokio::time::Instant::now())
            };
            let (host, stop_on_exit, running) = match tokio::time::timeout(remaining(), task).await
            {
                Ok(Ok(done)) => done,
                Ok(Err(e)) => return Err(StopError(format!("workload loop ended badly: {e}"))),
                Err(_) => return Err(StopError("workload loop did not stop in time".into())),
            };
            if !stop_on_exit || keeping.load(Ordering::SeqCst) {
                tracing::info!(
                    containers = running.len(),
                    "holdfast stops; workload containers keep running"
                );
                return Ok(());
            }
            stop_all(&host, running, remaining()).await
        });
        (
            WorkloadsHandle {
                status: status_rx,
                config: config_tx,
                keep,
                moved: moved_tx,
                renewed: renewed_tx,
            },
            stopper,
        )
    }
}

/// Stops every container concurrently, each within its stop timeout and all within `budget`.
async fn stop_all(
    host: &str,
    running: Vec<(String, String, Duration)>,
    budget: Duration,
) -> Result<(), StopError> {
    let docker = docker::connect(host)
        .await
        .map_err(|e| StopError(format!("cannot reach the daemon to stop workloads: {e}")))?;
    // Leave a second of the budget for the daemon's own answer after the SIGKILL.
    let grace = budget.saturating_sub(Duration::from_secs(1));
    let mut stops = JoinSet::new();
    for (workload, container, stop_timeout) in running {
        let docker = docker.clone();
        let timeout = stop_timeout.min(grace);
        stops.spawn(async move { (workload, docker::stop(&docker, &container, timeout).await) });
    }
    let mut failed = Vec::new();
    let all = async {
        while let Some(joined) = stops.join_next().await {
            match joined {
                Ok((_, Ok(()))) => {}
                Ok((workload, Err(e))) => failed.push(format!("{workload}: {e}")),
                Err(e) => failed.push(e.to_string()),
            }
        }
    };
    if tokio::time::timeout(budget, all).await.is_err() {
        return Err(StopError(
            "workload containers did not stop within the budget".into(),
        ));
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(StopError(format!("could not stop: {}", failed.join("; "))))
    }
}

/// The running supervisor's status and configuration, for the node's admin API.
#[derive(Debug, Clone)]
pub struct WorkloadsHandle {
    status: watch::Receiver<Vec<WorkloadStatus>>,
    config: mpsc::UnboundedSender<Vec<WorkloadConfig>>,
    keep: Arc<AtomicBool>,
    moved: mpsc::UnboundedSender<(String, Vec<String>)>,
    renewed: mpsc::UnboundedSender<String>,
}

impl WorkloadsHandle {
    /// Each workload's state as of the supervisor's last step.
    pub fn status(&self) -> Vec<WorkloadStatus> {
        self.status.borrow().clone()
    }

    /// Tells the stopper that this stop is a restart of the module (a config reload): the
    /// containers keep running even with `stop_on_exit`, and the next instance adopts them.
    pub fn keep_containers_on_stop(&self) {
        self.keep.store(true, Ordering::SeqCst);
    }

    /// Replaces the configured workloads (a config reload); false once the supervisor stopped.
    pub fn set_desired(&self, workloads: Vec<WorkloadConfig>) -> bool {
        self.config.send(workloads).is_ok()
    }

    /// The image `reference` was pulled again with new content: those of `workloads` running
    /// it get new containers, one at a time (see [`Reconciler::image_moved`]). False once the
    /// supervisor stopped.
    pub fn image_moved(&self, reference: &str, workloads: Vec<String>) -> bool {
        self.moved.send((reference.to_owned(), workloads)).is_ok()
    }

    /// The certificate `certificate` was renewed and its files deployed: its workloads are
    /// restarted or signalled as they ask (see [`Reconciler::cert_renewed`]). False once the
    /// supervisor stopped.
    pub fn cert_renewed(&self, certificate: &str) -> bool {
        self.renewed.send(certificate.to_owned()).is_ok()
    }
}

// r[impl workload.events]
/// The event stream task: connect, list the labelled containers, then follow their events from
/// just before the list (so an exit between the two is seen at least once; the core ignores a
/// repeat). Ends — and says why — when the connection or the stream ends.
async fn follow(
    host: String,
    owner: Option<String>,
    generation: u64,
    tail: usize,
    tx: mpsc::UnboundedSender<StreamInput>,
) {
    let ended = |e: String| StreamInput::Ended(generation, e);
    let docker = match docker::connect(&host).await {
        Ok(docker) => docker,
        Err(e) => {
            let _ = tx.send(ended(format!("connect: {e}")));
            return;
        }
    };
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs().saturating_sub(1));
    let listing = match docker::list(&docker, owner.as_deref(), tail).await {
        Ok(listing) => listing,
        Err(e) => {
            let _ = tx.send(ended(format!("list: {e}")));
            return;
        }
    };
    if tx.send(StreamInput::Listing(generation, listing)).is_err() {
        return;
    }
    let mut events = Box::pin(docker::events_since(&docker, owner.as_deref(), since));
    loop {
        match events.next().await {
            Some(Ok(message)) => {
                // An event we do not follow is one item: dropped, the stream goes on.
                let Some(mut event) = docker::container_event(&message) else {
                    continue;
                };
                if let ContainerEvent::Health { id, output, status } = &mut event {
                    if *status == crate::state::HealthStatus::Unhealthy {
                        *output = docker::health_output(&docker, id).await;
                    }
                }
                if let ContainerEvent::Died { id, log_tail, .. } = &mut event {
                    *log_tail = docker::log_tail(&docker, id, tail).await;
                }
                if tx.send(StreamInput::Event(generation, event)).is_err() {
                    return;
                }
            }
            // The stream itself is gone: end and announce it.
            Some(Err(e)) => {
                let _ = tx.send(ended(format!("events: {e}")));
                return;
            }
            None => {
                let _ = tx.send(ended("events: the daemon closed the stream".to_owned()));
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::images::ImagePresence;

    // r[verify workload.daemon]
    #[tokio::test]
    async fn a_missing_daemon_is_paced_and_becomes_one_fault() {
        let dir = tempfile::tempdir().unwrap();
        let host = format!("unix://{}/none.sock", dir.path().display());
        let board = FaultBoard::new();
        let images = |_: &str, _: Instant| ImagePresence::Present;
        let mut sup = Supervisor::new(host, ModuleConfig::new(1), board.clone(), images).unwrap();
        sup.set_desired(vec![WorkloadConfig::new("web", "busybox")])
            .unwrap();
        let t0 = Instant::now();
        let mut now = t0;
        // 120 simulated seconds, one step a second; each connect fails at once.
        while now <= t0 + Duration::from_secs(120) {
            sup.step(now);
            while sup.stream.is_some() {
                sup.wait_input(now, Duration::from_secs(5)).await;
            }
            now += Duration::from_secs(1);
        }
        // Base 1 s doubling to the 30 s cap, additive jitter: 1 + 2 + 4 + 8 + 16 + 30 + 30 ... s.
        let connects = sup.stream_connects();
        assert!(
            (6..=9).contains(&connects),
            "paced: {connects} connects in 120 s"
        );
        let faults = board.of_module("workload");
        assert_eq!(faults.len(), 1, "{faults:?}");
        assert_eq!(faults[0].subject.name, DAEMON_FAULT);
        assert_eq!(faults[0].kind, "unreachable");
        assert!(
            faults[0].message.contains("connect"),
            "{}",
            faults[0].message
        );
        assert!(matches!(
            sup.status(now)[0].state,
            crate::state::WorkloadState::Syncing
        ));
        assert_eq!(sup.core().counters().starts, 0, "nothing started blind");
    }

    // r[verify workload.stop]
    #[tokio::test]
    async fn the_default_stopper_leaves_the_daemon_alone_and_returns_inside_the_deadline() {
        let dir = tempfile::tempdir().unwrap();
        // No daemon at all: the default stop must not need one.
        let host = format!("unix://{}/none.sock", dir.path().display());
        let images = |_: &str, _: Instant| ImagePresence::Present;
        let mut sup =
            Supervisor::new(host, ModuleConfig::new(1), FaultBoard::new(), images).unwrap();
        sup.set_desired(vec![WorkloadConfig::new("web", "busybox")])
            .unwrap();
        let (handle, stopper) = sup.start(Duration::from_millis(20));
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(matches!(
            handle.status()[0].state,
            crate::state::WorkloadState::Syncing
        ));
        let started = tokio::time::Instant::now();
        let request = StopRequest {
            deadline: started + Duration::from_secs(2),
            reason: holdfast_lifecycle::StopReason::Restart,
        };
        stopper.stop(request).await.unwrap();
        assert!(started.elapsed() < Duration::from_secs(2));
        assert!(!handle.set_desired(vec![]), "the loop has ended");
    }
}
