//! What the node knows about itself, shared by the supervisors, the modules and the admin API.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use holdfast_lifecycle::{FaultBoard, Health, HealthWatch, StopReason};
use serde::Serialize;
use tokio::sync::watch;

use crate::metrics::Metrics;
use crate::module::StopGroup;
use crate::slot::Slot;

/// Where the node is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Modules are being started for the first time.
    Starting,
    /// Every module has had its first start.
    Running,
    /// The stop plan runs.
    Draining,
}

/// What the supervisor is doing with a module.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum SupervisorState {
    /// Not started yet.
    Pending,
    /// Waiting to (re)start, after `failures` failures.
    Waiting {
        /// Seconds until the next start (0: now).
        next_start_in_secs: f64,
    },
    /// Running; the start counts as a success once `confirmed`.
    Running {
        /// The start lasted long enough (and the module reported ready).
        confirmed: bool,
    },
    /// Stopped by the stop plan.
    Stopped,
}

/// One module's status, as `/v1/modules` answers it.
#[derive(Debug, Clone, Serialize)]
pub struct ModuleStatus {
    /// The module.
    pub name: String,
    /// Its stop group.
    pub group: StopGroup,
    /// What its supervisor is doing.
    pub supervisor: SupervisorState,
    /// What it says about itself.
    pub health: Health,
    /// Starts attempted.
    pub starts: u32,
    /// Restarts after its task ended.
    pub restarts: u32,
    /// The current failure streak.
    pub failures: u32,
    /// A crash loop was detected and not yet cleared by a start that lasted.
    pub crash_loop: bool,
    /// The latest failure.
    pub last_error: Option<String>,
}

/// One workload's status, as `/v1/workloads` answers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WorkloadStatus {
    /// The workload.
    pub name: String,
    /// Its image.
    pub image: String,
    /// Where its image stands: `present`, `pulling`, `waiting`, `escalated`, `daemon_unreachable`,
    /// `unknown` (the pull module has not looked yet).
    pub image_state: String,
    /// Detail (progress, next attempt, last error).
    pub detail: Option<String>,
    /// What the workload module says of it (running, restarting, crash-looping, waiting for its
    /// image, stopped by policy); absent while the workload module is not running.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run: Option<holdfast_workload::WorkloadStatus>,
}

struct ModuleEntry {
    status: ModuleStatus,
    health: Option<HealthWatch>,
}

/// The node's shared state. Cheap to clone.
#[derive(Clone)]
pub struct NodeState {
    /// The node's identity.
    pub node_id: String,
    /// The fault board every module files on.
    pub faults: FaultBoard,
    /// The metrics registry.
    pub metrics: Metrics,
    /// The running issuance module (certificates, force-retry).
    pub issuance: Slot<holdfast_issuance::Issuance>,
    /// The running forward server (its forwards and their stats).
    pub forward: Slot<holdfast_forward::Server>,
    /// The running workload supervisor (each workload's state).
    pub workload: Slot<crate::modules::workload::RunningWorkloads>,
    /// The running gateway (its connections, pushes, readiness and last drain).
    pub gateway: crate::modules::gateway::GatewayView,
    /// The tag checks `pull_policy = "always"` workloads ask for before each start, answered by
    /// the pull module (`r[workload.image.always]`).
    pub start_checks: Arc<Mutex<holdfast_pull::StartChecks>>,
    phase: Arc<watch::Sender<Phase>>,
    modules: Arc<Mutex<BTreeMap<String, ModuleEntry>>>,
    workloads: Arc<Mutex<BTreeMap<String, WorkloadStatus>>>,
    drain: Arc<tokio::sync::Notify>,
    drain_reason: Arc<Mutex<StopReason>>,
    started: SystemTime,
    config: Arc<Mutex<crate::reload::Generation>>,
    reloads: Arc<Mutex<Option<ReloadSender>>>,
}

/// Reloads that may wait for the one under way (all of them are then answered by the next one);
/// one more is refused at once.
pub const MAX_WAITING_RELOADS: usize = 16;

/// A reload asked for, and where its outcome goes.
pub type ReloadAsk = tokio::sync::oneshot::Sender<crate::reload::Outcome>;
type ReloadSender = tokio::sync::mpsc::Sender<ReloadAsk>;

impl std::fmt::Debug for NodeState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeState")
            .field("node_id", &self.node_id)
            .field("phase", &self.phase())
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl NodeState {
    /// A node that is starting.
    pub fn new(node_id: impl Into<String>, faults: FaultBoard, metrics: Metrics) -> Self {
        NodeState {
            node_id: node_id.into(),
            faults: faults.clone(),
            metrics,
            issuance: Slot::default(),
            forward: Slot::default(),
            workload: Slot::default(),
            gateway: crate::modules::gateway::GatewayView::with_faults(faults.clone()),
            start_checks: Arc::default(),
            phase: Arc::new(watch::channel(Phase::Starting).0),
            modules: Arc::default(),
            workloads: Arc::default(),
            drain: Arc::default(),
            drain_reason: Arc::new(Mutex::new(StopReason::Restart)),
            started: SystemTime::now(),
            config: Arc::default(),
            reloads: Arc::default(),
        }
    }

    /// The phase.
    pub fn phase(&self) -> Phase {
        *self.phase.borrow()
    }

    /// Moves to `phase`, in one step, and never out of `Draining`: a first start that completes
    /// just as the stop begins must not make the node ready again.
    pub fn set_phase(&self, phase: Phase) {
        let draining = &self.metrics.draining;
        self.phase.send_if_modified(|current| {
            if *current == Phase::Draining || *current == phase {
                return false;
            }
            *current = phase;
            draining.set(i64::from(phase == Phase::Draining));
            true
        });
    }

    /// Resolves once the node's phase is [`Phase::Draining`] (at once if it already is).
    pub async fn draining(&self) {
        let mut phase = self.phase.subscribe();
        let _ = phase.wait_for(|p| *p == Phase::Draining).await;
    }

    /// When the node started.
    pub fn started(&self) -> SystemTime {
        self.started
    }

    // r[impl node.gateway.stop-reason+2]
    /// Asks the node to drain and stop for `reason` (the admin API's `POST /v1/drain`).
    pub fn request_drain(&self, reason: StopReason) {
        *lock(&self.drain_reason) = reason;
        self.drain.notify_one();
    }

    /// Resolves when a drain was requested, with the reason of the latest request.
    pub async fn drain_requested(&self) -> StopReason {
        self.drain.notified().await;
        *lock(&self.drain_reason)
    }

    // r[impl node.reload.generation]
    /// The running config's generation and when it was loaded.
    pub fn config_generation(&self) -> crate::reload::Generation {
        *lock(&self.config)
    }

    /// Sets the running config's generation.
    pub fn set_config_generation(&self, generation: crate::reload::Generation) {
        *lock(&self.config) = generation;
    }

    /// Makes the caller the one that takes reloads ([`NodeState::request_reload`]), one at a
    /// time, in the order they were asked for.
    pub fn take_reloads(&self) -> tokio::sync::mpsc::Receiver<ReloadAsk> {
        let (tx, rx) = tokio::sync::mpsc::channel(MAX_WAITING_RELOADS);
        *lock(&self.reloads) = Some(tx);
        rx
    }

    // r[impl node.reload.serial]
    /// Asks for a reload and waits for its outcome (after any reload asked for earlier).
    pub async fn request_reload(&self) -> crate::reload::Outcome {
        let (reply, outcome) = tokio::sync::oneshot::channel();
        let sent = lock(&self.reloads).as_ref().map(|tx| tx.try_send(reply));
        match sent {
            Some(Ok(())) => {}
            Some(Err(tokio::sync::mpsc::error::TrySendError::Full(_))) => {
                return Err(crate::reload::ReloadError::Busy);
            }
            Some(Err(tokio::sync::mpsc::error::TrySendError::Closed(_))) | None => {
                return Err(crate::reload::ReloadError::Unavailable);
            }
        }
        outcome
            .await
            .unwrap_or(Err(crate::reload::ReloadError::Unavailable))
    }

    /// Forgets a module (a reload stopped it for good).
    pub fn remove_module(&self, name: &str) {
        lock(&self.modules).remove(name);
    }

    /// Registers or updates a module's status (keeping its health watch unless a new one is
    /// given).
    pub fn update_module(&self, status: ModuleStatus, health: Option<HealthWatch>) {
        let mut modules = lock(&self.modules);
        let entry = modules
            .entry(status.name.clone())
            .or_insert_with(|| ModuleEntry {
                status: status.clone(),
                health: None,
            });
        entry.status = status;
        if health.is_some() {
            entry.health = health;
        }
    }

    /// Drops a module's health watch (its instance ended).
    pub fn clear_health(&self, module: &str, health: Health) {
        if let Some(entry) = lock(&self.modules).get_mut(module) {
            entry.health = None;
            entry.status.health = health;
        }
    }

    /// Every module's status, with its live health.
    pub fn modules(&self) -> Vec<ModuleStatus> {
        let modules = lock(&self.modules);
        modules
            .values()
            .map(|entry| {
                let mut status = entry.status.clone();
                if let Some(health) = &entry.health {
                    status.health = health.get();
                }
                status
            })
            .collect()
    }

    /// Sets the workloads' statuses (the pull module's view every tick).
    pub fn set_workloads(&self, workloads: impl IntoIterator<Item = WorkloadStatus>) {
        let mut map = lock(&self.workloads);
        map.clear();
        for w in workloads {
            map.insert(w.name.clone(), w);
        }
    }

    // r[impl node.workload.status]
    /// Every workload's status: the pull module's view of its image, and the workload module's
    /// view of its container beside it.
    pub fn workloads(&self) -> Vec<WorkloadStatus> {
        let mut map = lock(&self.workloads).clone();
        let running = self
            .workload
            .with(|r| r.handle.status())
            .unwrap_or_default();
        for run in running {
            let (name, image) = (run.name.clone(), run.image.clone());
            map.entry(name.clone())
                .or_insert_with(|| WorkloadStatus {
                    name,
                    image,
                    image_state: "unknown".to_owned(),
                    detail: None,
                    run: None,
                })
                .run = Some(run);
        }
        map.into_values().collect()
    }

    /// Reads the running modules' own figures into the metrics (before each scrape); a module that
    /// is not running exports nothing of its own.
    pub fn refresh_module_metrics(&self) {
        match self.issuance.with(|i| i.issuer().metrics()) {
            Ok(Ok(figures)) => self.metrics.set_issuance(&figures),
            Ok(Err(err)) => tracing::warn!(%err, "issuance metrics unavailable"),
            Err(_) => self.metrics.set_issuance(&Default::default()),
        }
        let http01 = self.issuance.with(|i| i.http01_stats()).ok().flatten();
        self.metrics.set_http01(http01);
        let tls_alpn01 = self.issuance.with(|i| i.tls_alpn01_stats()).ok().flatten();
        self.metrics.set_tls_alpn01(tls_alpn01);
        let forwards = self.forward.with(|s| s.forwards()).unwrap_or_default();
        self.metrics.set_forwards(&forwards);
        let server = self
            .forward
            .with(crate::metrics::ForwardServerFigures::of)
            .ok();
        self.metrics.set_forward_server(server.as_ref());
        self.metrics.set_runtime_tasks();
        let workloads = self
            .workload
            .with(|r| r.handle.status())
            .unwrap_or_default();
        self.metrics.set_workloads(&workloads);
        let running = self.gateway.current().ok();
        self.metrics.set_gateway(
            running
                .as_ref()
                .map(|g| (g.authenticated(), g.unauthenticated())),
            self.gateway.totals(),
            self.gateway.last_drain().as_ref(),
        );
    }

    /// Whether every module has had its first start and the node is not draining.
    pub fn ready(&self) -> bool {
        self.phase() == Phase::Running
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // r[verify node.reload.serial]
    #[tokio::test]
    async fn reloads_past_the_bound_of_waiting_ones_are_refused_at_once() {
        let node = NodeState::new("n", FaultBoard::new(), Metrics::new());
        // Nobody takes them: each waits in the queue.
        let _asks = node.take_reloads();
        let mut waiting = Vec::new();
        for _ in 0..MAX_WAITING_RELOADS {
            let node = node.clone();
            waiting.push(tokio::spawn(async move { node.request_reload().await }));
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let refused =
            tokio::time::timeout(std::time::Duration::from_secs(1), node.request_reload()).await;
        assert_eq!(refused, Ok(Err(crate::reload::ReloadError::Busy)));
        for task in waiting {
            task.abort();
        }
    }
}
