//! holdfast-harness: running real services and processes for holdfast's tests and drivers.
//!
//! `cargo xtask test` (the test runner, holdfast-test-runner in `xtask/runner`) and the drain demo
//! (`xtask/drivers/drain-demo`) both start real services on loopback; this crate is the code they
//! share, so neither needs the other, xtask needs neither driver's dependencies, and the drivers
//! build none of the spec engine the runner judges a run with.
//!
//! Layout: [`root`] (which checkout a command works on, and the cargo a command runs) and
//! [`output`] (printing without a panic on a closed pipe) are the commands' common ground,
//! re-exported from holdfast-command (`xtask/command`), which holdfast-dist and spec-parity use alone;
//! [`packages`] (what is needed and from which Debian package), [`layout`] (directories and
//! ports), [`process`] (supervision: process groups, stopping, sweeping leftovers) and [`probe`]
//! (readiness) are the machinery, with [`limits`] (the descriptor limit a large run needs); [`docker`],
//! [`registry`], [`pebble`], [`knot`], [`etcd`] and [`redis`] start one service each. [`stand_in`] writes
//! the stand-in programs (cargo, a bench example) that the drivers', the runner's and xtask's tests run instead
//! of the real ones.

pub mod docker;
pub mod etcd;
pub mod knot;
pub mod layout;
pub mod limits;
pub mod packages;
pub mod pebble;
pub mod probe;
pub mod process;
pub mod redis;
pub mod registry;
pub mod stand_in;

// Every command's common ground, from the leaf crate the drivers that start no service use alone.
pub use holdfast_command::{exit, output, root};

#[cfg(test)]
mod testing;
