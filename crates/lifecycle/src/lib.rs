//! holdfast-lifecycle: the pieces every holdfast module shares with the node.
//!
//! - **Leaving.** A started module hands back a [`Stopper`]. The node puts every stopper in a
//!   [`StopPlan`]: ordered groups, concurrent within a group, each group a share of one total
//!   budget, a stopper that overruns cut off and reported, a second signal aborting at once. The
//!   plan returns a [`StopReport`].
//! - **Faults.** One [`FaultBoard`] for the node: modules file a [`Fault`] per [`Subject`] when a
//!   retry gate escalates and clear it when it recovers ([`FaultBoard::apply`]); the admin API
//!   lists them. Fault messages are logged and served as given: callers never put secrets in them.
//! - **Health.** Each module reports its [`Health`] on a [`health_channel`].
//! - **Identity.** A [`NodeIdentity`] (config `node.id`, else `/etc/machine-id`, else the host
//!   name) gives every module its own stable jitter seed ([`NodeIdentity::seed`]).
//!
//! Every behaviour is a rule under `lifecycle.*` in `docs/spec/runtime.md`. The README follows.
//!
#![doc = include_str!("../README.md")]

mod fault;
mod health;
mod identity;
mod plan;
mod stop;

pub use fault::{Fault, FaultBoard, Subject};
pub use health::{Health, HealthReporter, HealthWatch, health_channel};
pub use identity::{IdentityError, IdentitySource, MACHINE_ID_PATH, NodeIdentity};
pub use plan::{GroupId, MAX_TOTAL, ModuleStop, StopOutcome, StopPlan, StopReport};
pub use stop::{BoxFuture, StopError, StopReason, StopRequest, Stopper, stopper_fn};
