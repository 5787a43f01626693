//! holdfast-pull: keeps the images a node's workloads need present, through the Docker Engine API.
//!
//! It is split the way quinn-proto and quinn are: [`Reconciler`] is the synchronous core that
//! owns every decision (pacing, single flight, attempt tokens, the daemon's condition, faults) and
//! answers `ensure(reference, now)` with an [`ImageState`] and the [`Action`]s to perform;
//! [`Actuator`] is the thin tokio shell that performs them (spawns and joins attempts, cancels
//! superseded ones) and is the entry point: a tick-driven `ensure(reference, now)` that answers at
//! once. Pacing goes through holdfast-retry ([`pacing`]), failures are classified from the
//! daemon's status and message ([`classify`]), stalled pulls are ended by a progress watchdog
//! ([`watchdog`]), progress is folded into layers and bytes ([`progress`]), the daemon is reached
//! like the Docker CLI reaches it ([`client`], [`fetcher`]), image references are read by Docker's
//! grammar ([`reference`]), tags are checked on an interval ([`tag`]) or before each start
//! ([`fresh`]), and escalations become
//! operator-visible faults ([`fault`]); images no workload uses are collected when the disk fills
//! ([`gc`]).
//!
//! The README follows.
//!
#![doc = include_str!("../README.md")]

pub mod actuator;
pub mod classify;
pub mod client;
pub mod config;
pub mod credentials;
pub mod daemon_wait;
pub mod fault;
pub mod fetcher;
pub mod fresh;
pub mod gc;
pub mod pacing;
pub mod progress;
pub mod reconciler;
pub mod reference;
pub mod state;
pub mod tag;
pub mod watchdog;

pub use actuator::{Actuator, NoRuntime};
pub use classify::{FaultPolicy, PullError, PullErrorKind};
pub use client::{DaemonEndpoint, Fetched};
pub use config::{DEFAULT_PULL_STALE_AFTER, PullConfig, PullConfigBuilder, PullConfigError};
pub use credentials::{
    CredentialError, Credentials, RegistryAuth, check_password_file, check_password_file_owner,
    registry_host, registry_name,
};
pub use fault::{FaultSubject, MODULE, PullFaults};
pub use fetcher::{BoxFuture, DockerFetcher, Fetcher};
pub use fresh::StartChecks;
pub use gc::{
    DEFAULT_GC_GRACE, DEFAULT_GC_HIGH_PERCENT, DEFAULT_GC_INTERVAL, DEFAULT_GC_LOW_PERCENT, Disk,
    DiskUsage, GcError, GcPolicy, GcPolicyError, GcRun, ImageGc, LocalImage, Plan, Removal,
    Statvfs, collect, plan, remove_listed,
};
pub use progress::PullProgress;
pub use reconciler::{Action, AttemptId, Completion, Reconciler};
pub use reference::{ImageReference, ReferenceError};
pub use state::ImageState;
pub use tag::{DEFAULT_DIGEST_INTERVAL, DigestChecks, TagCheck, tag_moved};
