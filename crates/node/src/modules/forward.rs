//! The forward module: the node's one adapter over holdfast-forward's server.
//!
//! The module reads its credentials at each start (the token file and any inline tokens), starts
//! the QUIC endpoint with its identity under `DATA_DIR/forward`, keeps the running server where
//! the admin API lists its forwards, and stops it in the `forward` stop group (clients are told
//! why their forwards end). Its access (tokens and allow-lists) is shared with the node's reload,
//! which may replace it while the server runs ([`ForwardModule::sharing`], [`AccessSpec::read`]),
//! and so is what the server was last given ([`ForwardModule::recording`]): the reload reads the
//! token files again and gives the server a file rotated in place.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use holdfast_forward::{Access, AllowList, Credential, Server, ServerConfig};

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
    /// Who may connect and where their forwards may go, read at each start (shared with the
    /// node's reload, which may replace it live).
    pub access: SharedAccess,
    /// The connection bounds `[forward]` sets; `None`: holdfast-forward's default.
    pub bounds: Bounds,
    /// Where the running server is published.
    pub slot: Slot<Server>,
    /// The access the running server was last given (read at each start; shared with the node's
    /// reload, which compares the token files it reads again with it).
    pub given: GivenAccess,
}

impl std::fmt::Debug for ForwardModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // No credential in any output.
        f.debug_struct("ForwardModule")
            .field("listen", &self.listen)
            .field("access", &*lock(&self.access))
            .field("bounds", &self.bounds)
            .finish_non_exhaustive()
    }
}

/// The access part of `[forward]`: `token_file`, `tokens`, `allow` and `[[forward.client]]`, as
/// written (the token files not read yet).
#[derive(Clone, Default, PartialEq)]
pub struct AccessSpec {
    /// A token file (one token a line, mode 0600), read at each start and each live update.
    pub token_file: Option<PathBuf>,
    /// Inline tokens.
    pub tokens: Vec<Credential>,
    /// The targets forwards may reach.
    pub allow: AllowList,
    /// Clients with their own allow-list (`[[forward.client]]`).
    pub clients: Vec<ClientGrant>,
}

impl std::fmt::Debug for AccessSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // No credential in any output.
        f.debug_struct("AccessSpec")
            .field("token_file", &self.token_file)
            .field("tokens", &self.tokens.len())
            .field("allow", &self.allow.rules().len())
            .field("clients", &self.clients)
            .finish()
    }
}

/// The access the running module starts from; the node's reload replaces what it holds.
pub type SharedAccess = Arc<Mutex<AccessSpec>>;

/// The access, token files read, that the running server was last given (`None`: not started).
pub type GivenAccess = Arc<Mutex<Option<Access>>>;

// r[impl node.reload.forward-files]
/// Whether `a` and `b` grant the same: the same credentials, allow-list and clients, the
/// credentials and clients in any order (tokens reordered in a file grant nothing else).
pub fn same_access(a: &Access, b: &Access) -> bool {
    same_set(&a.credentials, &b.credentials) && a.allow == b.allow && same_set(&a.scoped, &b.scoped)
}

/// Whether `a` and `b` hold the same elements, in any order (credentials have no order to sort
/// by; the lists are short).
fn same_set<T: PartialEq>(a: &[T], b: &[T]) -> bool {
    a.iter().all(|x| b.contains(x)) && b.iter().all(|x| a.contains(x))
}

fn lock(access: &SharedAccess) -> std::sync::MutexGuard<'_, AccessSpec> {
    access.lock().unwrap_or_else(PoisonError::into_inner)
}

impl AccessSpec {
    /// The access of a validated `[forward]` section.
    pub fn of(section: &crate::config::ForwardSection) -> Self {
        AccessSpec {
            token_file: section.token_file.as_ref().map(|f| f.get_ref().clone()),
            tokens: credentials(&section.tokens),
            allow: allow_list(section.allow.get_ref()),
            clients: section
                .client
                .iter()
                .map(|client| {
                    let client = client.get_ref();
                    ClientGrant {
                        token_file: client.token_file.as_ref().map(|f| f.get_ref().clone()),
                        tokens: credentials(&client.tokens),
                        allow: allow_list(client.allow.get_ref()),
                    }
                })
                .collect(),
        }
    }

    // r[impl node.forward.module+2]
    // r[impl node.reload.live-forward]
    /// holdfast-forward's access: the credentials read now (the token files again), the
    /// node-wide allow-list and each client's own. No credential at all is an error (every
    /// client would be refused).
    pub fn read(&self) -> Result<Access, String> {
        let mut credentials = self.tokens.clone();
        if let Some(path) = &self.token_file {
            credentials.extend(crate::config::read_forward_tokens(path)?);
        }
        let mut scoped = Vec::new();
        for client in &self.clients {
            let mut tokens = client.tokens.clone();
            if let Some(path) = &client.token_file {
                tokens.extend(crate::config::read_forward_tokens(path)?);
            }
            scoped.extend(tokens.into_iter().map(|t| (t, client.allow.clone())));
        }
        if credentials.is_empty() && scoped.is_empty() {
            return Err("no forward credentials: every client would be refused".to_owned());
        }
        Ok(Access {
            credentials,
            allow: self.allow.clone(),
            scoped,
        })
    }
}

/// The connection bounds of `[forward]` (validated: none is 0); each unset one keeps
/// holdfast-forward's default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Bounds {
    /// `max_connections`: authenticated connections in all.
    pub max_connections: Option<usize>,
    /// `max_connections_per_token`: authenticated connections of one token.
    pub max_connections_per_token: Option<usize>,
    /// `max_unauthenticated`: connections not yet authenticated, in all.
    pub max_unauthenticated: Option<usize>,
    /// `max_unauthenticated_per_source`: the same, from one source.
    pub max_unauthenticated_per_source: Option<usize>,
}

impl Bounds {
    /// Sets on `config` the bounds that are set.
    // r[impl node.forward.config+3]
    fn apply(&self, config: &mut ServerConfig) {
        let fields = [
            (self.max_connections, &mut config.max_authenticated),
            (
                self.max_connections_per_token,
                &mut config.max_per_credential,
            ),
            (self.max_unauthenticated, &mut config.max_unauthenticated),
            (
                self.max_unauthenticated_per_source,
                &mut config.max_unauthenticated_per_source,
            ),
        ];
        for (set, field) in fields {
            if let Some(value) = set {
                *field = value;
            }
        }
    }
}

/// A `[[forward.client]]` as the node runs it: its tokens reach only its own targets.
#[derive(Clone, PartialEq)]
pub struct ClientGrant {
    /// A token file (one token a line, mode 0600), read at each start.
    pub token_file: Option<PathBuf>,
    /// Inline tokens.
    pub tokens: Vec<Credential>,
    /// The only targets this client's tokens reach.
    pub allow: AllowList,
}

impl std::fmt::Debug for ClientGrant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // No credential in any output.
        f.debug_struct("ClientGrant")
            .field("token_file", &self.token_file)
            .field("tokens", &self.tokens.len())
            .field("allow", &self.allow.rules().len())
            .finish()
    }
}

/// The inline tokens of a section, as credentials.
fn credentials(tokens: &[crate::config::Secret]) -> Vec<Credential> {
    tokens
        .iter()
        .filter(|t| !t.expose().is_empty())
        .map(|t| Credential::new(t.expose().to_owned()))
        .collect()
}

/// A validated allow-list (validated when the config was parsed).
fn allow_list(entries: &[String]) -> AllowList {
    AllowList::parse(entries.iter().map(String::as_str)).unwrap_or_default()
}

// r[impl node.reload.diff+4]
/// `[forward]` converted, its token files not read: what the module is built from, and what a
/// reload compares (two are equal exactly when the module would be built the same).
#[derive(Debug, Clone, PartialEq)]
pub struct ForwardSettings {
    /// The UDP address the QUIC endpoint listens on.
    pub listen: SocketAddr,
    /// Who may connect and where their forwards may go.
    pub access: AccessSpec,
    /// The connection bounds.
    pub bounds: Bounds,
}

impl ForwardSettings {
    /// The settings of a validated `[forward]` section.
    pub fn of(section: &crate::config::ForwardSection) -> Self {
        ForwardSettings {
            listen: *section.listen.get_ref(),
            access: AccessSpec::of(section),
            // Each unset one as holdfast-forward's default: a default written out is the same.
            bounds: Bounds {
                max_connections: Some(
                    section
                        .max_connections
                        .as_ref()
                        .map_or(holdfast_forward::DEFAULT_MAX_AUTHENTICATED, |b| {
                            *b.get_ref()
                        }),
                ),
                max_connections_per_token: Some(
                    section
                        .max_connections_per_token
                        .as_ref()
                        .map_or(holdfast_forward::DEFAULT_MAX_PER_CREDENTIAL, |b| {
                            *b.get_ref()
                        }),
                ),
                max_unauthenticated: Some(
                    section
                        .max_unauthenticated
                        .as_ref()
                        .map_or(holdfast_forward::DEFAULT_MAX_UNAUTHENTICATED, |b| {
                            *b.get_ref()
                        }),
                ),
                max_unauthenticated_per_source: Some(
                    section.max_unauthenticated_per_source.as_ref().map_or(
                        holdfast_forward::DEFAULT_MAX_UNAUTHENTICATED_PER_SOURCE,
                        |b| *b.get_ref(),
                    ),
                ),
            },
        }
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
        // One conversion for the module and the reload's comparison (`reload::module_inputs`).
        let ForwardSettings {
            listen,
            access,
            bounds,
        } = ForwardSettings::of(section);
        ForwardModule {
            listen,
            data_dir,
            access: Arc::new(Mutex::new(access)),
            bounds,
            slot,
            given: GivenAccess::default(),
        }
    }

    /// The module recording in `given` the access each start gives the server.
    pub fn recording(mut self, given: &GivenAccess) -> Self {
        self.given = Arc::clone(given);
        self
    }

    /// The module with its access held in `shared` (set to this section's now): a reload that
    /// replaces what `shared` holds makes the module's later starts use it.
    pub fn sharing(mut self, shared: &SharedAccess) -> Self {
        let own = std::mem::take(&mut *lock(&self.access));
        *lock(shared) = own;
        self.access = Arc::clone(shared);
        self
    }

    /// holdfast-forward's configuration for a start: the credentials read now (the token files
    /// again), the allow-lists and the connection bounds.
    pub fn server_config(&self) -> Result<ServerConfig, String> {
        let mut config = ServerConfig::new(self.listen, identity_dir(&self.data_dir));
        // Read outside the lock: the reload may be replacing it.
        let spec = lock(&self.access).clone();
        let Access {
            credentials,
            allow,
            scoped,
        } = spec.read()?;
        config.credentials = credentials;
        config.allow = allow;
        config.scoped = scoped;
        self.bounds.apply(&mut config);
        Ok(config)
    }
}

// r[impl node.forward.module+2]
impl Module for ForwardModule {
    fn name(&self) -> &str {
        NAME
    }

    fn group(&self) -> StopGroup {
        StopGroup::Forward
    }

    fn start(&self) -> Result<Started, StartError> {
        let config = self.server_config().map_err(StartError)?;
        *self.given.lock().unwrap_or_else(PoisonError::into_inner) = Some(config.access());
        Ok(spawn_hosted(self.slot.clone(), async move {
            holdfast_forward::start(config)
                .await
                .map_err(|e| e.to_string())
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // r[verify node.reload.forward-files]
    #[test]
    fn tokens_reordered_grant_the_same_access() {
        use holdfast_forward::{AllowList, Credential};
        let access = |tokens: &[&str], scoped: &[&str]| Access {
            credentials: tokens.iter().map(|t| Credential::new(*t)).collect(),
            allow: AllowList::parse(["10.0.0.1:53"]).unwrap(),
            scoped: scoped
                .iter()
                .map(|t| {
                    (
                        Credential::new(*t),
                        AllowList::parse(["10.0.0.2:53"]).unwrap(),
                    )
                })
                .collect(),
        };
        assert!(same_access(
            &access(&["a-token", "b-token"], &["c-token", "d-token"]),
            &access(&["b-token", "a-token"], &["d-token", "c-token"]),
        ));
        assert!(!same_access(
            &access(&["a-token", "b-token"], &[]),
            &access(&["a-token"], &[]),
        ));
        assert!(!same_access(
            &access(&["a-token"], &["c-token"]),
            &access(&["a-token"], &["e-token"]),
        ));
    }

    // r[verify node.forward.module+2]
    #[test]
    fn a_clients_tokens_reach_only_its_own_targets() {
        const WIDE: &str = "node-wide-7c41e0a95b2d3f68a1c0e4d7";
        const ONE: &str = "client-one-3b9f02d6e18c47a5b0f2c4";
        const TWO: &str = "client-two-58e1a7c30d4b92f6e7a1d0";
        let text = format!(
            "[node]\n[forward]\nlisten = \"127.0.0.1:0\"\ntokens = [\"{WIDE}\"]\n\
             allow = [\"10.0.0.1:53\"]\n[[forward.client]]\ntokens = [\"{ONE}\", \"{TWO}\"]\n\
             allow = [\"10.0.0.2:53\"]\n"
        );
        let config = crate::config::Config::parse("c.toml", &text).expect("valid");
        let section = config.forward.expect("[forward]");
        let dir = tempfile::tempdir().expect("tempdir");
        let module = ForwardModule::new(section.get_ref(), dir.path().into(), Slot::default());
        let shown = format!("{module:?}");
        assert!(
            ![WIDE, ONE, TWO].iter().any(|t| shown.contains(t)),
            "{shown}"
        );
        let server = module.server_config().expect("config");
        assert_eq!(server.credentials, vec![Credential::new(WIDE)]);
        assert_eq!(
            server.allow,
            AllowList::parse(["10.0.0.1:53"]).expect("parses")
        );
        let own = AllowList::parse(["10.0.0.2:53"]).expect("parses");
        assert_eq!(
            server.scoped,
            vec![
                (Credential::new(ONE), own.clone()),
                (Credential::new(TWO), own)
            ]
        );
    }

    // r[verify node.reload.live-forward]
    #[test]
    fn a_start_after_a_live_update_uses_the_shared_access() {
        const OLD: &str = "forward-old-token-7c41e0a95b2d3f68a1";
        const NEW: &str = "forward-new-token-3b9f02d6e18c47a5b0";
        let section = |token: &str, allow: &str| {
            let text = format!(
                "[node]\n[forward]\nlisten = \"127.0.0.1:0\"\ntokens = [\"{token}\"]\n\
                 allow = [\"{allow}\"]\n"
            );
            let config = crate::config::Config::parse("c.toml", &text).expect("valid");
            config.forward.expect("[forward]")
        };
        let dir = tempfile::tempdir().expect("tempdir");
        let shared = SharedAccess::default();
        let module = ForwardModule::new(
            section(OLD, "10.0.0.1:53").get_ref(),
            dir.path().into(),
            Slot::default(),
        )
        .sharing(&shared);
        // The module's own access is what it shares.
        let server = module.server_config().expect("config");
        assert_eq!(server.credentials, vec![Credential::new(OLD)]);
        // The reload replaces the shared access: the next start uses it.
        *lock(&shared) = AccessSpec::of(section(NEW, "10.0.0.2:53").get_ref());
        let server = module.server_config().expect("config");
        assert_eq!(server.credentials, vec![Credential::new(NEW)]);
        assert_eq!(
            server.allow,
            AllowList::parse(["10.0.0.2:53"]).expect("parses")
        );
    }

    // r[verify node.forward.config+3]
    #[test]
    fn a_token_file_read_at_a_start_is_held_to_the_minimum_length() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("tokens");
        let write = |text: &str| {
            std::fs::write(&file, text).expect("write");
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        };
        write("forward-token-at-validation-0123456789\n");
        let text = format!(
            "[node]\n[forward]\nlisten = \"127.0.0.1:0\"\ntoken_file = \"{}\"\n\
             allow = [\"10.0.0.1:53\"]\n",
            file.display()
        );
        let config = crate::config::Config::parse("c.toml", &text).expect("valid");
        let section = config.forward.expect("[forward]");
        let module = ForwardModule::new(section.get_ref(), dir.path().into(), Slot::default());
        assert_eq!(module.server_config().expect("config").credentials.len(), 1);
        // Rotated to a short token: the start fails, naming the line and not the token.
        write("# rotated\nshort-token\n");
        let err = module.server_config().expect_err("a short token");
        assert!(
            err.contains("line 2") && err.contains("at least 32"),
            "{err}"
        );
        assert!(!err.contains("short-token"), "{err}");
    }
}
