//! holdfast-pull: keeps the images a node's workloads need present, through the Docker Engine API.
//!
//! [`Actuator`] is the entry point: a tick-driven `ensure(reference, now)` that answers at once and
//! starts at most one paced pull per reference on the tokio runtime. Pacing goes through
//! holdfast-retry ([`pacing`]), failures are classified from the daemon's status and message
//! ([`classify`]), stalled pulls are ended by a progress watchdog ([`watchdog`]), progress is
//! folded into layers and bytes ([`progress`]), the daemon is reached like the Docker CLI reaches it
//! ([`client`]), and escalations become operator-visible faults ([`fault`]).
//!
//! The README follows.
//!
#![doc = include_str!("../README.md")]

pub mod actuator;
pub mod classify;
pub mod client;
pub mod fault;
pub mod pacing;
pub mod progress;
pub mod watchdog;

pub use actuator::{Actuator, DockerFetcher, Fetcher, ImageState, NoRuntime, PullConfig};
pub use classify::{FaultPolicy, PullError, PullErrorKind};
pub use client::{DaemonEndpoint, Fetched};
pub use fault::{Fault, FaultSubject};
pub use progress::PullProgress;
