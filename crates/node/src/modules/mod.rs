//! The modules the node composes. Each talks to its domain crate through one adapter file here.

pub mod pull;
#[cfg(feature = "testing-modules")]
pub mod testing;
