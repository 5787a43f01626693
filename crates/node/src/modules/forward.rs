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

use holdfast_forward::{Access, Server, ServerConfig};

use crate::config::{AccessSpec, Bounds, ForwardSettings};
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
    /// Who may connect and where their forwards may go, read at each start, and what the
    /// running server was last given (shared with the node's reload, which may replace it live
    /// and compares the token files it reads again with what was given).
    pub access: SharedAccess,
    /// The connection bounds `[forward]` sets; `None`: holdfast-forward's default.
    pub bounds: Bounds,
    /// Where the running server is published.
    pub slot: Slot<Server>,
    /// The node's fault board, whose token-file fault a start that read the files clears
    /// ([`ForwardModule::reporting`]); `None`: none kept.
    faults: Option<holdfast_lifecycle::FaultBoard>,
}

/// The fault subject of the forward's token files that a reload could not read
/// (`r[node.reload.forward-files+3]`).
pub fn token_files_subject() -> holdfast_lifecycle::Subject {
    holdfast_lifecycle::Subject::new(NAME, "token files")
}

impl std::fmt::Debug for ForwardModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // No credential in any output.
        f.debug_struct("ForwardModule")
            .field("listen", &self.listen)
            .field("access", &lock(&self.access).spec)
            .field("bounds", &self.bounds)
            .finish_non_exhaustive()
    }
}

/// The access the module starts from and what the running server was last given, under one
/// lock: a reload's live update and a start that finishes are ordered by it, so the newest
/// access reaches the server whichever of the two ends last (`r[node.reload.forward-race]`).
#[derive(Debug, Default)]
pub struct AccessState {
    /// The access each start reads (its token files read then).
    pub spec: AccessSpec,
    /// One more at each replace of `spec`: a start that read an older one gives its server the
    /// newer `given` instead of what it read.
    pub generation: u64,
    /// The access, token files read, that the running server was last given (`None`: not
    /// started, or not since the spec was set).
    pub given: Option<Access>,
}

/// The module's [`AccessState`], shared with the node's reload.
pub type SharedAccess = Arc<Mutex<AccessState>>;

// r[impl node.reload.live-forward]
// r[impl node.reload.forward-race]
/// A reload's live update: `spec` is what later starts read, `access` (its token files read) is
/// given to the running server now, or, to one whose start is under way, when that start ends.
/// Returns whether a running server took it now.
pub fn give_access(
    shared: &SharedAccess,
    slot: &Slot<Server>,
    spec: AccessSpec,
    access: Access,
) -> bool {
    let mut state = lock(shared);
    state.spec = spec;
    state.generation += 1;
    state.given = Some(access.clone());
    // Under the access lock: a start that ends now waits for it, then sees the new generation.
    slot.with(|server| server.update_access(access)).is_ok()
}

/// What the running server was last given.
pub fn given_access(shared: &SharedAccess) -> Option<Access> {
    lock(shared).given.clone()
}
// r[impl node.reload.forward-files+3]
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

fn lock(access: &SharedAccess) -> std::sync::MutexGuard<'_, AccessState> {
    access.lock().unwrap_or_else(PoisonError::into_inner)
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
            access: Arc::new(Mutex::new(AccessState {
                spec: access,
                generation: 0,
                given: None,
            })),
            bounds,
            slot,
            faults: None,
        }
    }

    /// The module clearing its token-file fault on `faults` when a start publishes its server:
    /// that start read the files itself.
    pub fn reporting(mut self, faults: &holdfast_lifecycle::FaultBoard) -> Self {
        self.faults = Some(faults.clone());
        self
    }

    /// The module with its access held in `shared` (set to this section's now): a reload that
    /// replaces what `shared` holds makes the module's later starts use it, and reads there what
    /// the running server was last given.
    pub fn sharing(mut self, shared: &SharedAccess) -> Self {
        let own = std::mem::take(&mut lock(&self.access).spec);
        {
            let mut state = lock(shared);
            state.spec = own;
            state.generation += 1;
            // What an earlier module's server was given is not this one's.
            state.given = None;
        }
        self.access = Arc::clone(shared);
        self
    }

    /// holdfast-forward's configuration for a start: the credentials read now (the token files
    /// again), the allow-lists and the connection bounds.
    pub fn server_config(&self) -> Result<ServerConfig, String> {
        self.server_config_of(&lock(&self.access).spec.clone())
    }

    /// [`ForwardModule::server_config`] from `spec` (read outside the lock: the token files may
    /// be slow, and the reload may be replacing the spec).
    fn server_config_of(&self, spec: &AccessSpec) -> Result<ServerConfig, String> {
        let mut config = ServerConfig::new(self.listen, identity_dir(&self.data_dir));
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
        let (spec, generation) = {
            let state = lock(&self.access);
            (state.spec.clone(), state.generation)
        };
        let config = self.server_config_of(&spec).map_err(StartError)?;
        let read = config.access();
        let (shared, slot) = (Arc::clone(&self.access), self.slot.clone());
        let faults = self.faults.clone();
        Ok(spawn_hosted(Slot::default(), async move {
            let server = holdfast_forward::start(config)
                .await
                .map_err(|e| e.to_string())?;
            publish(&shared, &slot, server, generation, read);
            // r[impl node.reload.forward-files+3]
            // This start read the token files: what a reload could not read is over.
            if let Some(faults) = faults {
                faults.clear(&token_files_subject());
            }
            Ok(RunningForward { slot })
        }))
    }
}

// r[impl node.reload.forward-race]
/// Publishes a started server in `slot`, under the access lock a reload's live update takes
/// ([`give_access`]): when a reload replaced the access after this start read it (`generation`
/// is older), the server is given the reload's access before anyone sees it, else what the
/// start read (`read`) is recorded as given. Either way the newest access wins.
fn publish(
    shared: &SharedAccess,
    slot: &Slot<Server>,
    server: Server,
    generation: u64,
    read: Access,
) {
    let mut state = lock(shared);
    if state.generation == generation {
        state.given = Some(read);
    } else if let Some(newer) = state.given.clone() {
        server.update_access(newer);
    }
    slot.put(server);
}

/// The running server as the module's task holds it: the start put the server in the node's
/// slot itself ([`publish`]); the stop takes it out of there and stops it.
struct RunningForward {
    slot: Slot<Server>,
}

impl holdfast_lifecycle::Stopper for RunningForward {
    fn stop(
        self: Box<Self>,
        request: holdfast_lifecycle::StopRequest,
    ) -> holdfast_lifecycle::BoxFuture<Result<(), holdfast_lifecycle::StopError>> {
        Box::pin(async move {
            match self.slot.take() {
                Some(server) => Box::new(server).stop(request).await,
                None => Ok(()),
            }
        })
    }
}

impl Drop for RunningForward {
    // The task ended without a stop (it panicked, or was aborted): the admin API must not read
    // a server that no longer runs. After a stop the slot is already empty.
    fn drop(&mut self) {
        drop(self.slot.take());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use holdfast_forward::{AllowList, Credential};

    // r[verify node.reload.forward-files+3]
    #[test]
    fn tokens_reordered_grant_the_same_access() {
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
        lock(&shared).spec = AccessSpec::of(section(NEW, "10.0.0.2:53").get_ref());
        let server = module.server_config().expect("config");
        assert_eq!(server.credentials, vec![Credential::new(NEW)]);
        assert_eq!(
            server.allow,
            AllowList::parse(["10.0.0.2:53"]).expect("parses")
        );
    }

    /// The module of a `[forward]` section granting `token` to `allow`.
    fn module_granting(token: &str, allow: &str, dir: &std::path::Path) -> ForwardModule {
        let text = format!(
            "[node]\n[forward]\nlisten = \"127.0.0.1:0\"\ntokens = [\"{token}\"]\n\
             allow = [\"{allow}\"]\n"
        );
        let config = crate::config::Config::parse("c.toml", &text).expect("valid");
        let section = config.forward.expect("[forward]");
        ForwardModule::new(section.get_ref(), dir.into(), Slot::default())
    }

    /// Waits for the module's server to be published, then stops it.
    async fn published(module: &ForwardModule) -> (u64, Option<Access>) {
        for _ in 0..500 {
            if let Ok(updates) = module.slot.with(|s| s.access_stats().updates) {
                return (updates, given_access(&module.access));
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("the server never started");
    }

    // A token-file fault a reload filed (the files could not be read) is over once a start of
    // the module (its supervisor restarting it) reads them and publishes its server.
    // r[verify node.reload.forward-files+3]
    #[tokio::test]
    async fn a_start_that_reads_the_token_files_clears_their_fault() {
        use holdfast_lifecycle::{StopReason, StopRequest};
        let dir = tempfile::tempdir().expect("tempdir");
        let faults = holdfast_lifecycle::FaultBoard::new();
        let module = module_granting(
            "forward-fault-token-4a7d2c19e65b0f83",
            "10.0.0.1:53",
            dir.path(),
        )
        .reporting(&faults);
        faults.file(
            token_files_subject(),
            "token_file_unreadable",
            "cannot read /tokens: gone",
            1,
            std::time::SystemTime::now(),
        );
        let started = module.start().expect("starts");
        published(&module).await;
        assert_eq!(
            faults.get(&token_files_subject()),
            None,
            "the fault outlived the restart"
        );
        started
            .stopper
            .stop(StopRequest {
                deadline: tokio::time::Instant::now() + std::time::Duration::from_secs(5),
                reason: StopReason::Restart,
            })
            .await
            .expect("stops");
    }

    // A reload's live update that meets a start under way (the start read the old access, the
    // server is not up yet): once the start ends, the server has the reload's access, and the
    // reload's is what it was last given. Interleaved explicitly: on this one-thread runtime the
    // module's task does not run until the test awaits.
    // r[verify node.reload.forward-race]
    #[tokio::test]
    async fn a_live_update_during_a_start_is_what_the_started_server_has() {
        use holdfast_lifecycle::{StopReason, StopRequest};
        const OLD: &str = "forward-race-old-token-7c41e0a95b2d3f68";
        const NEW: &str = "forward-race-new-token-3b9f02d6e18c47a5";
        let dir = tempfile::tempdir().expect("tempdir");
        let module = module_granting(OLD, "10.0.0.1:53", dir.path());
        let newer = module_granting(NEW, "10.0.0.2:53", dir.path());
        let spec = lock(&newer.access).spec.clone();
        let access = spec.read().expect("inline tokens");

        let started = module.start().expect("starts");
        // The start read OLD; the reload gives NEW before the server is up.
        assert!(!give_access(
            &module.access,
            &module.slot,
            spec.clone(),
            access.clone()
        ));
        let (updates, given) = published(&module).await;
        assert_eq!(
            updates, 1,
            "the started server was not given the reload's access"
        );
        assert!(same_access(&given.expect("given"), &access));
        // A later start reads the new access itself.
        let stop = |started: Started| async move {
            started
                .stopper
                .stop(StopRequest {
                    deadline: tokio::time::Instant::now() + std::time::Duration::from_secs(5),
                    reason: StopReason::Restart,
                })
                .await
                .expect("stops");
        };
        stop(started).await;
        let again = module.start().expect("starts");
        let (updates, given) = published(&module).await;
        assert_eq!(updates, 0);
        assert!(same_access(&given.expect("given"), &access));
        // And an update once it runs reaches it at once.
        let old = module_granting(OLD, "10.0.0.1:53", dir.path());
        let back = lock(&old.access).spec.clone();
        let read = back.read().expect("inline tokens");
        assert!(give_access(
            &module.access,
            &module.slot,
            back,
            read.clone()
        ));
        assert_eq!(module.slot.with(|s| s.access_stats().updates), Ok(1));
        assert!(same_access(
            &given_access(&module.access).expect("given"),
            &read
        ));
        stop(again).await;
        assert!(
            module.slot.with(|_| ()).is_err(),
            "the stopped server is still published"
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
