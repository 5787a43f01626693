//! What the node runs: modules that start without blocking and hand back how to stop them.

use holdfast_lifecycle::{HealthWatch, Stopper};
use tokio::task::JoinHandle;

/// Where a module is stopped in the node's stop plan. Groups stop in this order (gateway drain
/// first, image pulls last), each group's modules concurrently.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopGroup {
    /// The WebSocket gateway (drained first: it tells clients to go elsewhere).
    Gateway,
    /// UDP forwards.
    Forward,
    /// Workload containers.
    Workload,
    /// Certificate issuance.
    Issuance,
    /// Image actuation.
    Pull,
}

impl StopGroup {
    /// Every group, in stop order.
    pub const ORDER: [StopGroup; 5] = [
        StopGroup::Gateway,
        StopGroup::Forward,
        StopGroup::Workload,
        StopGroup::Issuance,
        StopGroup::Pull,
    ];

    /// The group's name in the stop report.
    pub fn name(self) -> &'static str {
        match self {
            StopGroup::Gateway => "gateway",
            StopGroup::Forward => "forward",
            StopGroup::Workload => "workload",
            StopGroup::Issuance => "issuance",
            StopGroup::Pull => "pull",
        }
    }

    /// The group's weight in the stop budget: the gateway's drain has the most to do.
    pub fn share(self) -> u32 {
        match self {
            StopGroup::Gateway => 3,
            _ => 1,
        }
    }
}

/// Why a module's task ended while the node was running.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ModuleError(pub String);

/// A module that has started: how to stop it, how it says it is, and its task (whose end, with
/// an error, a panic or even `Ok`, means the module is no longer running).
pub struct Started {
    /// Stops the module within the request's deadline.
    pub stopper: Box<dyn Stopper>,
    /// The module's health.
    pub health: HealthWatch,
    /// The module's main task.
    pub task: JoinHandle<Result<(), ModuleError>>,
}

impl std::fmt::Debug for Started {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Started")
            .field("health", &self.health.get())
            .finish_non_exhaustive()
    }
}

/// A start that failed (address in use, a backend refusing): retried through the supervisor's
/// gate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct StartError(pub String);

// r[impl node.module.start]
/// One module of the node. `start` must not block, install a signal handler or dial a backend
/// inline: it spawns the module's work on the runtime and returns at once. The supervisor calls it
/// again (paced) after a failed start or an end of the task.
pub trait Module: Send + Sync + 'static {
    /// The module's name (in faults, status and metrics).
    fn name(&self) -> &str;
    /// Where it stops in the stop plan.
    fn group(&self) -> StopGroup;
    /// Starts one instance.
    fn start(&self) -> Result<Started, StartError>;
}
