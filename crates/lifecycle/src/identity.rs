//! The node's identity, from which every module's jitter seed is derived.
//!
//! Jitter is a pure function of (seed, key, streak): nodes that shared a seed would retry a
//! recovering server at the same instants. The identity is stable across restarts, so decisions
//! recomputed from persisted history agree with the ones taken before the restart.

use std::path::Path;

use holdfast_retry::stable_hash;

/// Where the machine id is read from.
pub const MACHINE_ID_PATH: &str = "/etc/machine-id";

/// What systemd writes into `/etc/machine-id` until the first boot has committed a real id
/// (machine-id(5)): a value every machine booted from that image shares, so it is no identity.
const MACHINE_ID_PLACEHOLDER: &str = "uninitialized";

/// The node's identity, from which every module's jitter seed is derived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeIdentity {
    id: String,
    source: IdentitySource,
}

/// Where a [`NodeIdentity`] came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IdentitySource {
    /// The config's `node.id`.
    Config,
    /// `/etc/machine-id`.
    MachineId,
    /// The host name.
    Hostname,
}

/// Why no identity could be found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    /// `node.id` was given but is empty or only whitespace.
    #[error("node.id: must not be empty")]
    EmptyConfigured,
    /// No `node.id`, no usable machine id and no host name.
    #[error("no node identity: set node.id (no usable {machine_id} and no host name)")]
    Unavailable {
        /// The machine-id path that was tried.
        machine_id: String,
    },
}

/// The trimmed value, unless it is empty.
fn usable(value: &str) -> Option<String> {
    let trimmed = value.trim();
    (!trimmed.is_empty()).then(|| trimmed.to_owned())
}

/// The host name as the kernel has it, else as `/etc/hostname` says.
fn system_hostname() -> Option<String> {
    ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .find_map(|path| {
            std::fs::read_to_string(path)
                .ok()
                .as_deref()
                .and_then(usable)
        })
}

impl NodeIdentity {
    /// `node.id` from config if given (must be non-empty after trim), else /etc/machine-id, else
    /// the hostname.
    pub fn resolve(configured: Option<&str>) -> Result<Self, IdentityError> {
        Self::resolve_with(configured, Path::new(MACHINE_ID_PATH), system_hostname)
    }

    /// Same, with the machine-id path and hostname source injected (for tests). Empty or
    /// whitespace-only values are skipped, as are a machine-id file that cannot be read and
    /// systemd's "uninitialized" placeholder.
    // r[impl lifecycle.identity+2]
    pub fn resolve_with(
        configured: Option<&str>,
        machine_id_path: &Path,
        hostname: impl FnOnce() -> Option<String>,
    ) -> Result<Self, IdentityError> {
        if let Some(configured) = configured {
            let id = usable(configured).ok_or(IdentityError::EmptyConfigured)?;
            return Ok(Self {
                id,
                source: IdentitySource::Config,
            });
        }
        match std::fs::read_to_string(machine_id_path) {
            Ok(contents) => match usable(&contents) {
                Some(id) if id == MACHINE_ID_PLACEHOLDER => {
                    tracing::debug!(path = %machine_id_path.display(),
                        "machine id not yet initialised; trying the host name");
                }
                Some(id) => {
                    return Ok(Self {
                        id,
                        source: IdentitySource::MachineId,
                    });
                }
                None => {}
            },
            Err(err) => {
                tracing::debug!(path = %machine_id_path.display(), error = %err,
                    "no machine id; trying the host name");
            }
        }
        if let Some(id) = hostname().as_deref().and_then(usable) {
            return Ok(Self {
                id,
                source: IdentitySource::Hostname,
            });
        }
        Err(IdentityError::Unavailable {
            machine_id: machine_id_path.display().to_string(),
        })
    }

    /// The identity (trimmed).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Where it came from.
    pub fn source(&self) -> IdentitySource {
        self.source
    }

    /// The jitter seed for one module: a stable function of (identity, module) — the same across
    /// restarts, builds and platforms (pinned by a test), different for different nodes or modules.
    // r[impl lifecycle.identity.seed]
    pub fn seed(&self, module: &str) -> u64 {
        // A tuple of strs hashes each one's bytes followed by a 0xff terminator, so ("ab", "c")
        // and ("a", "bc") differ, and nothing in it depends on byte order.
        stable_hash(&(self.id.as_str(), module))
    }
}
