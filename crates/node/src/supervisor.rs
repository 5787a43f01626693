//! One supervisor per module: the seed's start gate applied to modules.
//!
//! Starts and restarts go through a holdfast-retry gate (never a tight loop, never given up). A
//! start counts as a success only once the module has reported itself ready and then stayed up
//! for `must_last` (holdfast-retry's `succeed_provisionally` / `confirm` / `ended`): until then
//! the attempt stays in flight, so a module that comes up degraded or dies soon after starting
//! never resets the gate. Every end of the module's task (an error, a
//! panic, a return) is recorded with the crash-loop detector; a crash loop becomes one fault on the node's
//! board, and restarts continue at the gate's pace.
//!
//! Time is tokio's clock (`tokio::time::Instant`), so tests run it paused.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use holdfast_lifecycle::{Health, StopError, StopRequest, Stopper, Subject};
use holdfast_retry::{
    AttemptToken, CrashLoopDetector, Exit, KeyedGate, Lasting, Policy, Transition,
};
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::metrics;
use crate::module::{Module, ModuleError, StartError, Started};
use crate::notify::Heartbeat;
use crate::state::{ModuleStatus, NodeState, SupervisorState};

/// How a supervisor paces its module.
#[derive(Debug, Clone, Copy)]
pub struct SuperviseConfig {
    /// Start pacing. Its stale timeout is raised to the maximum: the supervisor holds its attempt
    /// for as long as a module runs unconfirmed (degraded), and only it finishes that attempt.
    pub policy: Policy,
    /// How long a start must stay up (and ready) to count as a success.
    pub must_last: Duration,
    /// Crashes within `crash_loop_window` that make a crash loop.
    pub crash_loop_threshold: u32,
    /// The crash-loop window.
    pub crash_loop_window: Duration,
}

/// The fault subject of a module's supervisor: one per module, for failed starts and crash
/// loops alike.
pub fn subject(module: &str) -> Subject {
    Subject::new(module, "supervisor")
}

/// How long after the stop deadline the supervisor gives up on a stopper itself.
const STOPPER_GRACE: Duration = Duration::from_millis(10);

type StopMessage = (StopRequest, oneshot::Sender<Result<(), StopError>>);

/// The stop plan's handle on a supervised module: stops the running instance (if any) and the
/// supervisor with it.
pub struct SupervisorStopper {
    tx: oneshot::Sender<StopMessage>,
}

// r[impl node.supervise.stop+2]
impl Stopper for SupervisorStopper {
    fn stop(
        self: Box<Self>,
        request: StopRequest,
    ) -> holdfast_lifecycle::BoxFuture<Result<(), StopError>> {
        Box::pin(async move {
            let (reply, answer) = oneshot::channel();
            // A supervisor that is gone without having been stopped ended on its own (a bug):
            // say so rather than report a clean stop.
            if self.tx.send((request, reply)).is_err() {
                return Err(StopError(
                    "the module's supervisor had ended on its own before the stop".into(),
                ));
            }
            answer.await.unwrap_or_else(|_| {
                Err(StopError(
                    "the module's supervisor ended without answering the stop".into(),
                ))
            })
        })
    }
}

/// A supervisor that has been spawned.
pub struct Supervised {
    /// Stops it.
    pub stopper: SupervisorStopper,
    /// Resolves once the supervisor's first start attempt has been made (success or not).
    pub first_start: oneshot::Receiver<()>,
    /// The supervisor's own task.
    pub task: tokio::task::JoinHandle<()>,
}

/// Spawns the supervisor of `module` on the current runtime.
pub fn spawn(module: Arc<dyn Module>, config: SuperviseConfig, node: NodeState) -> Supervised {
    spawn_with_heartbeat(module, config, node, Heartbeat::off())
}

// r[impl node.systemd.watchdog]
/// Spawns the supervisor of `module` on the current runtime, its loop beating on `heartbeat` (the
/// service manager's watchdog) on every turn, and at least every heartbeat period.
pub fn spawn_with_heartbeat(
    module: Arc<dyn Module>,
    config: SuperviseConfig,
    node: NodeState,
    heartbeat: Heartbeat,
) -> Supervised {
    let (tx, rx) = oneshot::channel();
    let (first_tx, first_rx) = oneshot::channel();
    let policy = Policy::builder()
        .base(config.policy.base())
        .cap(config.policy.cap())
        .escalate_after(config.policy.escalate_after())
        .jitter(config.policy.jitter())
        .hint_cap(config.policy.hint_cap())
        .seed(config.policy.seed())
        .stale_after(Duration::from_secs(365 * 24 * 3600))
        .build()
        .unwrap_or(config.policy);
    let crashes = CrashLoopDetector::new(config.crash_loop_threshold, config.crash_loop_window)
        .unwrap_or_default();
    let name = module.name().to_owned();
    let status = ModuleStatus {
        name: name.clone(),
        group: module.group(),
        supervisor: SupervisorState::Pending,
        health: Health::Starting,
        starts: 0,
        restarts: 0,
        failures: 0,
        crash_loop: false,
        last_error: None,
    };
    node.update_module(status.clone(), None);
    let supervisor = Supervisor {
        module,
        gate: KeyedGate::new(policy),
        crashes,
        must_last: config.must_last,
        node,
        status,
        name,
        first_start: Some(first_tx),
        heartbeat,
    };
    supervisor.heartbeat.beat(&supervisor.name);
    let task = tokio::spawn(supervisor.run(rx));
    Supervised {
        stopper: SupervisorStopper { tx },
        first_start: first_rx,
        task,
    }
}

struct Supervisor {
    module: Arc<dyn Module>,
    gate: KeyedGate<()>,
    crashes: CrashLoopDetector,
    must_last: Duration,
    node: NodeState,
    status: ModuleStatus,
    name: String,
    first_start: Option<oneshot::Sender<()>>,
    heartbeat: Heartbeat,
}

/// Where a running instance's start attempt stands.
enum Attempt {
    /// Granted, not yet judged (the module is starting or degraded).
    Held(AttemptToken<()>),
    /// A provisional success, confirmed once it lasted.
    Lasting {
        lasting: Lasting<()>,
        confirmed: bool,
    },
}

async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

enum Outcome {
    Ended(Result<Result<(), ModuleError>, tokio::task::JoinError>),
    Stop(StopMessage),
}

/// Takes a stop message that is already waiting, answering nothing yet.
fn take_stop(
    stop: &mut oneshot::Receiver<StopMessage>,
) -> Option<oneshot::Sender<Result<(), StopError>>> {
    stop.try_recv().ok().map(|(_, reply)| reply)
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

fn now() -> std::time::Instant {
    Instant::now().into_std()
}

impl Supervisor {
    fn publish(&self) {
        self.node.update_module(self.status.clone(), None);
    }

    fn record(&mut self, t: &Transition<()>, message: &str) {
        self.node.metrics.transition(&self.name, t);
        self.status.failures = t.failures;
        let kind = if self.status.crash_loop {
            "crash_loop"
        } else {
            "start_failed"
        };
        self.node
            .faults
            .apply(subject(&self.name), t, kind, message, SystemTime::now());
        if t.escalation == Some(holdfast_retry::Escalation::Recovered) || t.failures == 0 {
            self.status.crash_loop = false;
        }
    }

    fn first_start_done(&mut self) {
        if let Some(tx) = self.first_start.take() {
            let _ = tx.send(());
        }
    }

    // r[impl node.supervise.start+2]
    // r[impl node.supervise.crash-loop+2]
    async fn run(mut self, mut stop: oneshot::Receiver<StopMessage>) {
        loop {
            // Wait until the gate grants a start.
            let token = loop {
                match self.gate.begin(&(), now()) {
                    Ok(token) => break token,
                    Err(not_yet) => {
                        let until = Instant::from_std(not_yet.until);
                        self.status.supervisor = SupervisorState::Waiting {
                            next_start_in_secs: until
                                .saturating_duration_since(Instant::now())
                                .as_secs_f64(),
                        };
                        self.publish();
                        self.heartbeat.beat(&self.name);
                        let heartbeat = self.heartbeat.clone();
                        // Biased: a stop that is already waiting wins over a back-off that
                        // has just run out, so no start happens after a stop.
                        tokio::select! {
                            biased;
                            message = &mut stop => {
                                let reply = message.ok().map(|(_, reply)| reply);
                                return self.stopped(reply, Ok(()));
                            }
                            () = tokio::time::sleep_until(until) => {}
                            () = heartbeat.tick() => {}
                        }
                    }
                }
            };
            // A stop may have arrived while the gate granted at once.
            if let Some(reply) = take_stop(&mut stop) {
                return self.stopped(Some(reply), Ok(()));
            }
            if let Some(report) = self.crashes.take_report() {
                tracing::warn!(module = %self.name, crashes = report.crashes, window = ?report.window,
                    "restarting a crash-looping module (paced)");
            }
            self.status.starts += 1;
            self.node
                .metrics
                .module_starts
                .get_or_create(&metrics::module(&self.name))
                .inc();
            // A panic in `start` is a failed start (paced, faulted), not the end of the
            // supervisor.
            let started =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.module.start()))
                    .unwrap_or_else(|panic| {
                        Err(StartError(format!(
                            "start panicked: {}",
                            panic_message(&*panic)
                        )))
                    });
            self.first_start_done();
            let Started {
                stopper,
                health,
                mut task,
            } = match started {
                Ok(started) => started,
                Err(err) => {
                    let message = format!("start failed: {err}");
                    tracing::warn!(module = %self.name, error = %err, "module start failed");
                    self.node
                        .metrics
                        .module_start_failures
                        .get_or_create(&metrics::module(&self.name))
                        .inc();
                    self.status.last_error = Some(message.clone());
                    let t = self.gate.fail(token, now(), None);
                    self.record(&t, &message);
                    continue;
                }
            };
            self.status.supervisor = SupervisorState::Running { confirmed: false };
            self.node
                .update_module(self.status.clone(), Some(health.clone()));
            match self.watch(token, health, &mut task, &mut stop).await {
                Outcome::Stop((request, reply)) => {
                    // Told to stop: the stop's deadline bounds it now, not the watchdog.
                    self.heartbeat.leave(&self.name);
                    let result = self.stop_instance(stopper, request, task).await;
                    return self.stopped(Some(reply), result);
                }
                Outcome::Ended(_) => drop(stopper),
            }
        }
    }

    // r[impl node.supervise.degraded+2]
    /// Watches one running instance until its task ends or the node stops it. The start's
    /// attempt stays held while the module is starting or degraded; once it reports ready the
    /// start is a provisional success (holdfast-retry's "success that must last"), confirmed when
    /// it has stayed up `must_last` and is ready then; an end before that fails the same streak.
    async fn watch(
        &mut self,
        token: AttemptToken<()>,
        mut health: holdfast_lifecycle::HealthWatch,
        task: &mut tokio::task::JoinHandle<Result<(), ModuleError>>,
        stop: &mut oneshot::Receiver<StopMessage>,
    ) -> Outcome {
        let mut attempt = Attempt::Held(token);
        let mut health_open = true;
        let heartbeat = self.heartbeat.clone();
        let outcome = loop {
            heartbeat.beat(&self.name);
            let ready = health.get() == Health::Ready;
            attempt = self.advance(attempt, ready);
            // The timer runs only while the module is ready: a module that went degraded before
            // `must_last` is confirmed on its next report of ready (a timer left armed with a
            // past deadline would fire on every turn of this loop).
            let lasts_at = match &attempt {
                Attempt::Lasting {
                    lasting,
                    confirmed: false,
                } if ready => Some(Instant::from_std(lasting.started() + lasting.must_last())),
                _ => None,
            };
            tokio::select! {
                result = &mut *task => break Outcome::Ended(result),
                () = sleep_until_some(lasts_at), if lasts_at.is_some() => {}
                changed = health.changed(), if health_open => {
                    if changed.is_none() { health_open = false; }
                    let ready = i64::from(health.get() == Health::Ready);
                    self.node.metrics.module_ready.get_or_create(&metrics::module(&self.name)).set(ready);
                }
                () = heartbeat.tick() => {}
                message = &mut *stop => match message {
                    Ok(message) => break Outcome::Stop(message),
                    // The node dropped the stopper without stopping: keep supervising.
                    Err(_) => return self.keep_running(attempt, task).await,
                },
            }
        };
        if let Outcome::Ended(result) = &outcome {
            self.ended(attempt, result);
        }
        outcome
    }

    /// Moves the start's attempt along: held → lasting once ready → confirmed once it lasted
    /// (and is ready at that moment).
    fn advance(&mut self, attempt: Attempt, ready: bool) -> Attempt {
        match attempt {
            Attempt::Held(token) if ready => {
                let lasting = self
                    .gate
                    .succeed_provisionally(token, now(), self.must_last);
                self.advance(
                    Attempt::Lasting {
                        lasting,
                        confirmed: false,
                    },
                    ready,
                )
            }
            Attempt::Lasting {
                mut lasting,
                confirmed: false,
            } if ready => {
                let confirmed = match self.gate.confirm(&mut lasting, now()) {
                    Some(t) => {
                        self.record(&t, "");
                        self.node.faults.clear(&subject(&self.name));
                        self.status.crash_loop = false;
                        self.status.last_error = None;
                        self.status.supervisor = SupervisorState::Running { confirmed: true };
                        self.publish();
                        tracing::info!(module = %self.name, "module start confirmed");
                        true
                    }
                    None => false,
                };
                Attempt::Lasting { lasting, confirmed }
            }
            other => other,
        }
    }

    /// The node let go of the stopper: supervise until the task ends, then end too.
    async fn keep_running(
        &mut self,
        attempt: Attempt,
        task: &mut tokio::task::JoinHandle<Result<(), ModuleError>>,
    ) -> Outcome {
        // Nobody can stop this loop any more: it no longer holds the watchdog's pings.
        self.heartbeat.leave(&self.name);
        let result = task.await;
        self.ended(attempt, &result);
        std::future::pending().await
    }

    fn ended(
        &mut self,
        attempt: Attempt,
        result: &Result<Result<(), ModuleError>, tokio::task::JoinError>,
    ) {
        let (exit, message) = match result {
            // While the node runs nobody asked it to end, so a return is a crash too.
            Ok(Ok(())) => (Exit::Crashed, "module task returned".to_owned()),
            Ok(Err(err)) => (Exit::Crashed, format!("module failed: {err}")),
            Err(err) if err.is_panic() => (Exit::Crashed, "module panicked".to_owned()),
            Err(_) => (Exit::Crashed, "module task was cancelled".to_owned()),
        };
        tracing::warn!(module = %self.name, reason = %message, "module ended; restarting (paced)");
        self.status.restarts += 1;
        self.status.last_error = Some(message.clone());
        self.node
            .metrics
            .module_restarts
            .get_or_create(&metrics::module(&self.name))
            .inc();
        self.node.clear_health(&self.name, Health::Stopped);
        let at = now();
        if let Some(report) = self.crashes.record(exit, at) {
            self.status.crash_loop = true;
            self.node
                .metrics
                .module_crash_loops
                .get_or_create(&metrics::module(&self.name))
                .inc();
            let message = format!(
                "crash loop: {} crashes within {:?}; restarts continue at the back-off's pace (latest: {message})",
                report.crashes, report.window
            );
            tracing::error!(module = %self.name, "{message}");
            self.node.faults.file(
                subject(&self.name),
                "crash_loop",
                &message,
                self.status.failures.saturating_add(1),
                SystemTime::now(),
            );
        }
        // An end before the start was confirmed fails that start's attempt (the same streak); an
        // end after it is the first failure of a new streak.
        let t = match attempt {
            Attempt::Held(token) => Some(self.gate.fail(token, at, None)),
            Attempt::Lasting {
                lasting,
                confirmed: false,
            } => Some(self.gate.ended(lasting, at, None)),
            Attempt::Lasting {
                lasting,
                confirmed: true,
            } => {
                self.gate.ended(lasting, at, None);
                self.gate
                    .begin(&(), at)
                    .ok()
                    .map(|token| self.gate.fail(token, at, None))
            }
        };
        if let Some(t) = t {
            self.record(&t, &message);
        }
        self.publish();
    }

    /// Stops the running instance: its stopper, then its task, both by the request's deadline.
    /// A task still running then is aborted and the stop is reported as failed.
    async fn stop_instance(
        &self,
        stopper: Box<dyn Stopper>,
        request: StopRequest,
        mut task: tokio::task::JoinHandle<Result<(), ModuleError>>,
    ) -> Result<(), StopError> {
        let deadline = request.deadline;
        // The plan cuts a late stopper off at the deadline (and reports it so); this bound, a
        // moment later, only makes sure a hanging stopper does not leave the task unaborted.
        let stopped = tokio::time::timeout_at(deadline + STOPPER_GRACE, stopper.stop(request))
            .await
            .unwrap_or_else(|_| {
                Err(StopError(format!(
                    "{}: the stopper had not returned at the stop deadline",
                    self.name
                )))
            });
        let ended = tokio::time::timeout_at(deadline, &mut task).await;
        if ended.is_err() {
            task.abort();
            tracing::warn!(module = %self.name, "module task still running at the stop deadline; aborted");
        }
        stopped?;
        ended.map(drop).map_err(|_| {
            StopError(format!(
                "{}: the module's task was still running at the stop deadline (aborted)",
                self.name
            ))
        })
    }

    /// Publishes the module as stopped, then answers the stop: whoever stopped it (a reload
    /// forgetting the module) sees the last status already published.
    fn stopped(
        mut self,
        reply: Option<oneshot::Sender<Result<(), StopError>>>,
        result: Result<(), StopError>,
    ) {
        self.heartbeat.leave(&self.name);
        self.status.supervisor = SupervisorState::Stopped;
        self.node.clear_health(&self.name, Health::Stopped);
        self.node.update_module(self.status.clone(), None);
        // A stopped module is not ready (a reload may remove it, and nothing sets it again).
        self.node
            .metrics
            .module_ready
            .get_or_create(&metrics::module(&self.name))
            .set(0);
        if let Some(reply) = reply {
            let _ = reply.send(result);
        }
    }
}
