//! The forward module: the node's one adapter over holdfast-forward's server.
//!
//! The module reads its credentials at each start (the token file, so a rotated file is picked
//! up by a restart, and any inline tokens), starts the QUIC endpoint with its identity under
//! `DATA_DIR/forward`, keeps the running server where the admin API lists its forwards, and stops
//! it in the `forward` stop group (clients are told why their forwards end).

use std::net::SocketAddr;
use std::path::PathBuf;

use holdfast_forward::{AllowList, Credential, Server, ServerConfig};

use crate::module::{Module, StartError, Started, StopGroup};
use crate::modules::hosted::spawn_hosted;
use crate::slot::Slot;

/// The module's name.
pub const NAME: &str = "forward";

/// Where the node keeps its forward identity, under its data directory.
pub fn identity_dir(data_dir: &std::path::Path) -> PathBuf {
    data_dir.join("forward")
}

/// The `[forward]` section as the node runs it.
#[derive(Clone)]
pub struct ForwardModule {
    /// The UDP address the QUIC endpoint listens on.
    pub listen: SocketAddr,
    /// The node's data directory.
    pub data_dir: PathBuf,
    /// A token file (one token a line, mode 0600), read at each start.
    pub token_file: Option<PathBuf>,
    /// Inline tokens.
    pub tokens: Vec<Credential>,
    /// The targets forwards may reach.
    pub allow: AllowList,
    /// Where the running server is published.
    pub slot: Slot<Server>,
}

impl std::fmt::Debug for ForwardModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // No credential in any output.
        f.debug_struct("ForwardModule")
            .field("listen", &self.listen)
            .field("token_file", &self.token_file)
            .field("tokens", &self.tokens.len())
            .finish_non_exhaustive()
    }
}

impl ForwardModule {
    /// The module for a validated `[forward]` section.
    pub fn new(
        section: &crate::config::ForwardSection,
        data_dir: PathBuf,
        slot: Slot<Server>,
    ) -> Self {
        slot.configure();
        ForwardModule {
            listen: *section.listen.get_ref(),
            data_dir,
            token_file: section.token_file.as_ref().map(|f| f.get_ref().clone()),
            tokens: section
                .tokens
                .iter()
                .filter(|t| !t.expose().is_empty())
                .map(|t| Credential::new(t.expose().to_owned()))
                .collect(),
            // Validated when the config was parsed.
            allow: AllowList::parse(section.allow.get_ref().iter().map(String::as_str))
                .unwrap_or_default(),
            slot,
        }
    }

    fn server_config(&self) -> Result<ServerConfig, String> {
        let mut config = ServerConfig::new(self.listen, identity_dir(&self.data_dir));
        let mut credentials = self.tokens.clone();
        if let Some(path) = &self.token_file {
            credentials.extend(crate::forward_client::read_tokens(path)?);
        }
        if credentials.is_empty() {
            return Err("no forward credentials: every client would be refused".to_owned());
        }
        config.credentials = credentials;
        config.allow = self.allow.clone();
        Ok(config)
    }
}

// r[impl node.forward.module]
impl Module for ForwardModule {
    fn name(&self) -> &str {
        NAME
    }

    fn group(&self) -> StopGroup {
        StopGroup::Forward
    }

    fn start(&self) -> Result<Started, StartError> {
        let config = self.server_config().map_err(StartError)?;
        Ok(spawn_hosted(self.slot.clone(), async move {
            holdfast_forward::start(config)
                .await
                .map_err(|e| e.to_string())
        }))
    }
}
