//! holdfast-workload: the node's containers run and kept running, with the retry discipline.
//!
//! Split the way holdfast-pull is: [`Reconciler`] is the synchronous core that owns every
//! decision — desired workloads against the containers labelled `holdfast.workload=NAME`, create
//! and start once the image is present ([`Images`]), adopt after a node restart, replace on a spec
//! change, remove the unconfigured, restart through one holdfast-retry gate per workload with a
//! minimum run time, crash loops as one fault on the node's board — tested by calling it with an
//! injected clock. [`Supervisor`] is the thin tokio shell that performs the core's actions against
//! the Docker Engine API and feeds it the daemon's event stream (reconnected with back-off,
//! resynced by listing). Config is [`WorkloadConfig`] (one `[[workload]]`) and [`ModuleConfig`];
//! the operator's view is [`WorkloadStatus`]. A workload may mount certificates the node deploys
//! ([`CertificateMount`]) and be restarted or signalled when one is renewed ([`CertRenew`],
//! [`Reconciler::cert_renewed`]).
//!
//! The README follows.
//!
#![doc = include_str!("../README.md")]

pub mod certs;
pub mod config;
pub mod docker;
pub mod images;
mod network;
pub mod owner;
mod probe;
pub mod reconciler;
pub mod shape;
pub mod state;
pub mod supervisor;

pub use certs::{CERTS_DIR, CertRenew, CertificateMount};
pub use config::{
    ModuleConfig, NODE_NETWORK, RestartPolicy, WorkloadConfig, WorkloadConfigError, validate_all,
};
pub use images::{ImagePresence, Images};
pub use probe::Prober;
pub use reconciler::{
    Action, AttemptId, Completion, ContainerEvent, ContainerSpec, MODULE, Observed, Reconciler,
    SPEC_LABEL, Shape, StartCause, StartError, Started, WORKLOAD_LABEL, container_name,
};
pub use shape::{
    ByteSize, Cpus, EnvFileError, HealthCheck, HttpProbe, LogConfig, NodeProbe, PortSpec, Protocol,
    ShapeError, TcpProbe, VolumeSource, VolumeSpec, parse_env_file,
};
pub use state::{Counters, HealthStatus, LastExit, WorkloadState, WorkloadStatus};
pub use supervisor::{Supervisor, SupervisorError};
