//! The issuance module: the node's one adapter over holdfast-issuance.
//!
//! The module starts holdfast-issuance with the node's data directory, its seed for "issuance",
//! the system wall clock and the node's fault board (one fault per blocked hostname), keeps the
//! running handle where the admin API reads it (`/v1/certs`, force-retry, metrics), and stops it in
//! the `issuance` stop group. When the gateway answers TLS-ALPN-01 on its port, the module is
//! started with the node's shared challenges and binds no listener of its own. A reload may
//! replace its certificates while it runs
//! ([`holdfast_issuance::Issuance::set_certificates`]); the module's later starts then use the
//! config its [`IssuanceModule::config`] handle holds.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use holdfast_issuance::{
    AlpnChallenges, Issuance, IssuanceConfig, SystemWallClock, TlsAlpnListener, WallClock,
};
use holdfast_lifecycle::FaultBoard;

use crate::module::{Module, StartError, Started, StopGroup};
use crate::modules::hosted::spawn_hosted;
use crate::modules::off_thread::OffThreadStart;
use crate::slot::Slot;

/// The module's name.
pub const NAME: &str = "issuance";

/// The `[issuance]` section as the node runs it.
#[derive(Clone)]
pub struct IssuanceModule {
    /// holdfast-issuance's own config (the `[issuance]` section as written), read at each
    /// start; the node's reload replaces it when it takes new certificates live.
    pub config: Arc<Mutex<IssuanceConfig>>,
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
    /// Which listener answers TLS-ALPN-01 (`r[node.gateway.tls-alpn01]`).
    pub tls_alpn01: TlsAlpnListener,
    /// Its starts, on a blocking thread each, at most one of them outstanding.
    pub starts: OffThreadStart,
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
            config: Arc::new(Mutex::new(config)),
            data_dir,
            seed,
            clock: Arc::new(SystemWallClock),
            faults,
            slot,
            tls_alpn01: TlsAlpnListener::Own,
            starts: OffThreadStart::default(),
        }
    }

    /// TLS-ALPN-01 answered by the listener reading `challenges` (the gateway's), when given.
    pub fn with_tls_alpn01(mut self, challenges: Option<AlpnChallenges>) -> Self {
        self.tls_alpn01 = challenges.map_or(TlsAlpnListener::Own, TlsAlpnListener::Shared);
        self
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
        let config = this
            .config
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        // r[impl node.issuance.start-off-thread+2]
        // holdfast-issuance checks the config synchronously as it starts (owners and groups
        // looked up): on a blocking thread, the hosted task's select still sees a stop while a
        // name service hangs, where on a runtime thread the stop would wait and be cut off. A start
        // given up that way is stopped once it returns, before the next start may run.
        let runtime = tokio::runtime::Handle::current();
        let start = self.starts.run(move || {
            runtime
                .block_on(holdfast_issuance::start_with(
                    &config,
                    &this.data_dir,
                    this.seed,
                    this.clock,
                    this.faults,
                    this.tls_alpn01,
                ))
                .map_err(|e| e.to_string())
        });
        Ok(spawn_hosted(self.slot.clone(), start))
    }
}
