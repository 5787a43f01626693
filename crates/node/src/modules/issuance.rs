//! The issuance module: the node's one adapter over holdfast-issuance.
//!
//! The module starts holdfast-issuance with the node's data directory, its seed for "issuance",
//! the system wall clock and the node's fault board (one fault per blocked hostname), keeps the
//! running handle where the admin API reads it (`/v1/certs`, force-retry, metrics), and stops it in
//! the `issuance` stop group.

use std::path::PathBuf;
use std::sync::Arc;

use holdfast_issuance::{Issuance, IssuanceConfig, SystemWallClock, WallClock};
use holdfast_lifecycle::FaultBoard;

use crate::module::{Module, StartError, Started, StopGroup};
use crate::modules::hosted::spawn_hosted;
use crate::slot::Slot;

/// The module's name.
pub const NAME: &str = "issuance";

/// The `[issuance]` section as the node runs it.
#[derive(Clone)]
pub struct IssuanceModule {
    /// holdfast-issuance's own config (the `[issuance]` section as written).
    pub config: IssuanceConfig,
    /// The node's data directory (the module keeps its state under `issuance/`).
    pub data_dir: PathBuf,
    /// `NodeIdentity::seed("issuance")`.
    pub seed: u64,
    /// The wall clock certificates are judged by.
    pub clock: Arc<dyn WallClock>,
    /// The node's fault board.
    pub faults: FaultBoard,
    /// Where the running handle is published.
    pub slot: Slot<Issuance>,
}

impl IssuanceModule {
    /// The module over the system clock.
    pub fn new(
        config: IssuanceConfig,
        data_dir: PathBuf,
        seed: u64,
        faults: FaultBoard,
        slot: Slot<Issuance>,
    ) -> Self {
        slot.configure();
        IssuanceModule {
            config,
            data_dir,
            seed,
            clock: Arc::new(SystemWallClock),
            faults,
            slot,
        }
    }
}

// r[impl node.issuance.module]
impl Module for IssuanceModule {
    fn name(&self) -> &str {
        NAME
    }

    fn group(&self) -> StopGroup {
        StopGroup::Issuance
    }

    fn start(&self) -> Result<Started, StartError> {
        let this = self.clone();
        Ok(spawn_hosted(self.slot.clone(), async move {
            holdfast_issuance::start(
                &this.config,
                &this.data_dir,
                this.seed,
                this.clock,
                this.faults,
            )
            .await
            .map_err(|e| e.to_string())
        }))
    }
}
