//! The modules the node composes. Each talks to its domain crate through one adapter file here.

pub mod forward;
pub mod gateway;
pub mod hosted;
pub mod issuance;
pub mod off_thread;
pub mod pull;
#[cfg(feature = "testing-modules")]
pub mod testing;
pub mod workload;
