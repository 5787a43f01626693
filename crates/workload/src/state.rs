//! What the operator sees per workload (`/v1/workloads`, `holdfast workloads`), and the counters
//! the node exports as metrics.

use std::time::Duration;

/// A workload's state at one moment.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum WorkloadState {
    /// Its container runs.
    Running {
        /// The container id.
        container: String,
        /// How long it has run (since holdfast started or adopted it).
        #[serde(rename = "running_for_secs", serialize_with = "secs")]
        running_for: Duration,
        /// The run has lasted the minimum run time (or was adopted): it counts as a success.
        lasted: bool,
    },
    /// A create and start is in flight.
    Starting {
        /// The attempt's number in the current streak.
        attempt: u32,
    },
    /// Backing off before the next start.
    Restarting {
        /// Time until the next start may be made.
        #[serde(rename = "in_secs", serialize_with = "secs")]
        restarting_in: Duration,
        /// The failures in the current streak (the next start is attempt `failures + 1`).
        failures: u32,
        /// The last exit code, if the last failure was an exit.
        exit_code: Option<i64>,
    },
    /// Backing off, and the crash-loop detector tripped: an operator-visible fault is open.
    CrashLooping {
        /// Time until the next start may be made.
        #[serde(rename = "in_secs", serialize_with = "secs")]
        restarting_in: Duration,
        /// The failures in the current streak.
        failures: u32,
        /// The last exit code.
        exit_code: Option<i64>,
    },
    /// Ready to start, but its image is not present yet.
    WaitingForImage {
        /// What the pull module says.
        detail: String,
    },
    /// Ready to start but for its dependencies, which are not ready yet.
    WaitingForDependencies {
        /// The dependencies not ready, by name.
        waiting_on: Vec<String>,
    },
    /// Ready to start: the next tick asks for its image and starts it.
    Pending,
    /// Waiting for the daemon's container list before deciding anything (after holdfast started,
    /// or after the event stream was lost).
    Syncing,
    /// Exited and left stopped by `restart = "never"`.
    StoppedByPolicy {
        /// The exit code it stopped with.
        exit_code: Option<i64>,
    },
    /// Exited 0 after a run that lasted, under `restart = "on-failure"`.
    Completed,
}

// r[impl workload.health.status]
/// A running container's health, as the daemon's health check reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HealthStatus {
    /// Checked, not yet healthy.
    Starting,
    /// The last probe passed.
    Healthy,
    /// `retries` probes in a row failed.
    Unhealthy,
}

impl HealthStatus {
    /// As the daemon and the operator write it.
    pub fn as_str(self) -> &'static str {
        match self {
            HealthStatus::Starting => "starting",
            HealthStatus::Healthy => "healthy",
            HealthStatus::Unhealthy => "unhealthy",
        }
    }
}

/// One workload as the operator sees it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct WorkloadStatus {
    /// The workload's name.
    pub name: String,
    /// Its image.
    pub image: String,
    /// Its state.
    #[serde(flatten)]
    pub state: WorkloadState,
    /// Its running container's health (`None`, left out: no check, or no running container).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health: Option<HealthStatus>,
    /// Its counters.
    pub counters: Counters,
    /// The last exit, if it has exited since holdfast started.
    pub last_exit: Option<LastExit>,
}

/// Plain counters for the node's metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counters {
    /// Containers created and started (first starts and restarts).
    pub starts: u64,
    /// Starts that followed an exit or a failed start.
    pub restarts: u64,
    /// Failed creates or starts.
    pub start_failures: u64,
    /// Times the crash-loop detector tripped.
    pub crash_loops: u64,
    /// Starts refused because the node's network is someone else's (`workload.network.foreign`):
    /// not counted as starts or failures (left out of the report while zero).
    #[serde(skip_serializing_if = "is_zero")]
    pub network_refusals: u64,
    /// Containers restarted or signalled because a certificate they mount was renewed (left
    /// out of the report while zero, as most workloads mount none).
    #[serde(skip_serializing_if = "is_zero")]
    pub cert_renewals: u64,
    /// Renewal signals the daemon did not deliver (left out while zero).
    #[serde(skip_serializing_if = "is_zero")]
    pub cert_renew_failures: u64,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// How the last run ended.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LastExit {
    /// The exit code (`None`: the container vanished without one).
    pub exit_code: Option<i64>,
    /// How long it ran.
    #[serde(rename = "ran_secs", serialize_with = "secs")]
    pub ran: Duration,
    /// Whether the run lasted the minimum run time.
    pub lasted: bool,
    /// The last lines of its log.
    pub log_tail: Vec<String>,
}

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(d.as_secs())
}
