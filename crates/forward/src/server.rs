//! The node's side: a QUIC endpoint that authenticates clients and relays their forwards to the
//! targets its allow-list permits, over one connected UDP socket per flow.

use std::collections::{BTreeMap, HashMap};
use std::io::IoSliceMut;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use holdfast_retry::{Class, Classify};
use quinn::Connection;
use quinn::udp::RecvMeta;
use thiserror::Error;
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

use crate::admission::{
    Admission, AdmissionLimits, DEFAULT_MAX_UNAUTHENTICATED,
    DEFAULT_MAX_UNAUTHENTICATED_PER_SOURCE, DEFAULT_VALIDATE_ABOVE, Decision, Refused,
    SessionRefused, Sessions,
};
use crate::allow::{AllowList, Grants};
use crate::auth::{AuthPacer, Credential, CredentialDigest, Credentials, default_auth_pacing};
use crate::classify::RelayError;
use crate::control::{EndReason, FrameError, Message, Refusal};
use crate::control_io::{finish, spawn_reader, spawn_writer, write};
use crate::flows::{
    Activity, FLOW_SWEEP, FlowPool, PoolPermit, evictable, idle_flows, least_recent,
};
use crate::identity::{Fingerprint, Identity, IdentityError};
use crate::ready::{Drain, ready_now};
use crate::reply_buffers::ReplyBuffers;
use crate::report::{Handed, Reporter};
use crate::stats::{
    AccessCounters, AccessStats, ConnectionCounters, ConnectionStats, Counters, ForwardStats,
    Turned,
};
use crate::transport::{ALPN, close_code, endpoint, endpoint_socket, server_transport_config};
use crate::udp_io::{
    FLOW_BUFFER, Gather, Gathered, MAX_DATAGRAM, UdpIo, framed_capacity, segments,
};
use crate::wire::{FlowId, decode_datagram};

/// The server's configuration.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The UDP address the QUIC endpoint listens on.
    pub listen: SocketAddr,
    /// Where the identity (certificate and key) is kept.
    pub identity_dir: PathBuf,
    /// The credentials clients may present.
    pub credentials: Vec<Credential>,
    /// The targets forwards may reach. Empty: none.
    pub allow: AllowList,
    /// Credentials with their own allow-list (allowed as well as `credentials`): each reaches
    /// only its own targets, not `allow`'s.
    pub scoped: Vec<(Credential, AllowList)>,
    /// Forwards one connection may hold open.
    pub max_forwards: usize,
    /// Flows (local peers) one forward may hold.
    pub max_flows: usize,
    /// At the flow bound, a flow idle this long gives way to a new one.
    pub flow_idle: Duration,
    /// Flow sockets the node holds at once, across every connection and forward.
    pub max_flow_sockets: usize,
    /// How often each connection sweeps its flows (idle ones ended, sockets beyond its share given
    /// back); a connection that starts waiting for a socket also wakes the sweeps at once.
    pub flow_sweep: Duration,
    /// Connections in their handshake or not yet authenticated, at once; a new one beyond this
    /// is refused before its handshake.
    pub max_unauthenticated: usize,
    /// The same, from one source (an IPv4 address or an IPv6 /64).
    pub max_unauthenticated_per_source: usize,
    /// While at least this many connections are unauthenticated, a new one must first validate
    /// its address with a QUIC Retry (0: every one must).
    pub validate_addresses_above: usize,
    /// Authenticated connections, in all; one more is refused after its Hello.
    pub max_authenticated: usize,
    /// Authenticated connections of one credential; one more is refused after its Hello.
    pub max_per_credential: usize,
    /// How long new connections from a source are refused after one of its connections failed to
    /// authenticate: a wait that starts at the policy's base and doubles with each further
    /// failure up to its cap.
    pub auth_pacing: holdfast_retry::Policy,
    /// How long a new connection has, from its first packet, to complete its handshake, open its
    /// control stream and authenticate.
    pub auth_timeout: Duration,
    /// How long a silent connection lasts (keep-alives go every third of it).
    pub idle_timeout: Duration,
    /// At most one transient error per forward is logged and announced per interval.
    pub report_interval: Duration,
}

impl ServerConfig {
    /// Refuses bounds and timeouts that would refuse every client.
    fn check(&self) -> Result<(), StartError> {
        let zero = [
            ("max_unauthenticated", self.max_unauthenticated == 0),
            (
                "max_unauthenticated_per_source",
                self.max_unauthenticated_per_source == 0,
            ),
            ("max_authenticated", self.max_authenticated == 0),
            ("max_per_credential", self.max_per_credential == 0),
            ("auth_timeout", self.auth_timeout.is_zero()),
        ];
        match zero.into_iter().find(|(_, is_zero)| *is_zero) {
            Some((field, _)) => Err(StartError::Zero(field)),
            None => Ok(()),
        }
    }

    /// Defaults: 64 forwards a connection, 256 flows a forward (one idle for 60 s gives way to a
    /// new one), 4096 flow sockets in all, 256 connections not yet authenticated and 8 from one
    /// source, every address validated by a Retry, 5 s from the first packet to authentication,
    /// 64 authenticated connections and 16 per credential, a source refused for 1 s after a failed
    /// authentication (doubling up to 60 s), 15 s idle timeout, one report a second per forward.
    pub fn new(listen: SocketAddr, identity_dir: impl Into<PathBuf>) -> Self {
        ServerConfig {
            listen,
            identity_dir: identity_dir.into(),
            credentials: Vec::new(),
            allow: AllowList::default(),
            scoped: Vec::new(),
            max_forwards: 64,
            max_flows: 256,
            flow_idle: Duration::from_secs(60),
            max_flow_sockets: 4096,
            flow_sweep: FLOW_SWEEP,
            max_unauthenticated: DEFAULT_MAX_UNAUTHENTICATED,
            max_unauthenticated_per_source: DEFAULT_MAX_UNAUTHENTICATED_PER_SOURCE,
            validate_addresses_above: DEFAULT_VALIDATE_ABOVE,
            max_authenticated: DEFAULT_MAX_AUTHENTICATED,
            max_per_credential: DEFAULT_MAX_PER_CREDENTIAL,
            auth_pacing: default_auth_pacing(),
            auth_timeout: DEFAULT_AUTH_TIMEOUT,
            idle_timeout: Duration::from_secs(15),
            report_interval: Duration::from_secs(1),
        }
    }

    /// Its credentials and allow-lists: what [`Server::update_access`] takes, so a node that
    /// reloads its configuration builds the new [`ServerConfig`] and hands over this part of it.
    pub fn access(&self) -> Access {
        Access {
            credentials: self.credentials.clone(),
            allow: self.allow.clone(),
            scoped: self.scoped.clone(),
        }
    }
}

/// Who may connect and where their forwards may reach: the part of a [`ServerConfig`] a running
/// server takes again, whole, with [`Server::update_access`].
#[derive(Debug, Clone, Default)]
pub struct Access {
    /// The credentials clients may present ([`ServerConfig::credentials`]).
    pub credentials: Vec<Credential>,
    /// The targets their forwards may reach ([`ServerConfig::allow`]).
    pub allow: AllowList,
    /// Credentials with their own allow-list ([`ServerConfig::scoped`]).
    pub scoped: Vec<(Credential, AllowList)>,
}

/// [`Access`] as the server checks it: every credential that may authenticate, and the list each
/// reaches. Swapped whole on an update, so a decision never mixes two of them.
struct Granted {
    credentials: Credentials,
    grants: Grants,
}

impl Granted {
    fn new(access: &Access) -> Self {
        Granted {
            credentials: Credentials::new(
                access
                    .credentials
                    .iter()
                    .chain(access.scoped.iter().map(|(credential, _)| credential)),
            ),
            grants: Grants::new(
                access.allow.clone(),
                access
                    .scoped
                    .iter()
                    .map(|(credential, list)| (credential, list)),
            ),
        }
    }
}

/// Connection attempts the endpoint holds before the accept loop has decided on them; more are
/// refused by quinn itself.
pub const MAX_INCOMING: usize = 4096;

/// Bytes the endpoint buffers for one undecided attempt (beyond its first packet).
pub const INCOMING_BUFFER: u64 = 64 << 10;

/// Bytes the endpoint buffers for all undecided attempts together.
pub const INCOMING_BUFFER_TOTAL: u64 = 16 << 20;

/// Default bound on authenticated connections in all.
pub const DEFAULT_MAX_AUTHENTICATED: usize = 64;

/// Default bound on authenticated connections of one credential: a token is commonly shared by a
/// fleet of clients, and a client that reconnects while the node still holds its lost connection
/// (until the idle timeout) is not refused.
pub const DEFAULT_MAX_PER_CREDENTIAL: usize = 16;

/// Default time a new connection has, from its first packet, to complete its handshake and
/// authenticate: all an unauthenticated peer can hold a place for.
pub const DEFAULT_AUTH_TIMEOUT: Duration = Duration::from_secs(5);

/// Why the server did not start.
#[derive(Debug, Error)]
pub enum StartError {
    /// The identity could not be loaded or created.
    #[error(transparent)]
    Identity(#[from] IdentityError),
    /// The TLS configuration was refused.
    #[error("forward TLS configuration: {0}")]
    Tls(String),
    /// A bound or timeout of the configuration cannot work (zero would refuse every client).
    #[error("forward configuration: {0} must be greater than zero")]
    Zero(&'static str),
    /// The endpoint could not listen.
    #[error("forward endpoint on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// The error.
        source: std::io::Error,
    },
}

/// Why a stop did not finish cleanly.
#[derive(Debug, Error)]
#[error("forward server: {0}")]
pub struct ServerStopError(pub String);

/// An active forward, as listed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ForwardInfo {
    /// The connection (a number unique within this server's life).
    pub connection: u64,
    /// The forward's id on its connection.
    pub forward: u32,
    /// The client's address.
    pub client: SocketAddr,
    /// The target.
    pub target: SocketAddr,
    /// Flows (local peers) open now.
    pub flows: usize,
    /// Its counters.
    pub stats: ForwardStats,
}

struct Listed {
    client: SocketAddr,
    target: SocketAddr,
    flows: Arc<AtomicU64>,
    stats: Arc<Counters>,
}

struct Shared {
    /// The credentials and allow-lists now; each connection is told when they are replaced.
    // r[impl forward.access.update]
    access: watch::Sender<Arc<Granted>>,
    /// What the updates of `access` did.
    access_counters: AccessCounters,
    max_forwards: usize,
    max_flows: usize,
    flow_idle: Duration,
    auth_timeout: Duration,
    report_interval: Duration,
    listing: Mutex<BTreeMap<(u64, u32), Listed>>,
    /// Datagrams that could not be attributed to a forward (malformed, unknown forward).
    unattributed: Counters,
    next_connection: AtomicU64,
    /// The flow sockets the node may hold, shared between connections.
    flow_pool: Arc<FlowPool>,
    /// The receive buffers every flow borrows for its target's replies.
    reply_buffers: Arc<ReplyBuffers>,
    /// [`ServerConfig::flow_sweep`].
    flow_sweep: Duration,
    /// The connections in their handshake or authenticating, by source.
    admission: Mutex<Admission>,
    /// The authenticated connections, by credential.
    sessions: Mutex<Sessions<CredentialDigest>>,
    /// Sources that failed to authenticate, and how long they wait.
    pacer: Mutex<AuthPacer>,
    /// Who was let in, who was not, and why.
    connections: ConnectionCounters,
    /// Lets the threads waiting for the relay's CPU run (a local target's among them): the OS
    /// thread's yield, [`std::thread::yield_now`]; a test counts the calls instead.
    give_way: Box<dyn Fn() + Send + Sync>,
}

impl Shared {
    /// The state every connection of a server started with `config` shares.
    fn new(config: &ServerConfig) -> Self {
        let (access, _) = watch::channel(Arc::new(Granted::new(&config.access())));
        Shared {
            access,
            access_counters: AccessCounters::default(),
            max_forwards: config.max_forwards,
            max_flows: config.max_flows,
            flow_idle: config.flow_idle,
            auth_timeout: config.auth_timeout,
            report_interval: config.report_interval,
            listing: Mutex::new(BTreeMap::new()),
            unattributed: Counters::default(),
            next_connection: AtomicU64::new(1),
            flow_pool: FlowPool::new(config.max_flow_sockets),
            reply_buffers: ReplyBuffers::new(REPLY_BATCH * MAX_DATAGRAM),
            flow_sweep: config.flow_sweep.max(Duration::from_millis(10)),
            admission: Mutex::new(Admission::new(AdmissionLimits {
                max_unauthenticated: config.max_unauthenticated,
                max_per_source: config.max_unauthenticated_per_source,
                validate_above: config.validate_addresses_above,
            })),
            pacer: Mutex::new(AuthPacer::new(config.auth_pacing)),
            sessions: Mutex::new(Sessions::new(
                config.max_authenticated,
                config.max_per_credential,
            )),
            connections: ConnectionCounters::default(),
            // The OS thread's yield, not the task's: a local target is another process or
            // thread, which tokio's yield would not let run.
            give_way: Box::new(std::thread::yield_now),
        }
    }

    /// The credentials and allow-lists now (one read, then no lock is held).
    fn access(&self) -> Arc<Granted> {
        self.access.borrow().clone()
    }

    fn listing(&self) -> std::sync::MutexGuard<'_, BTreeMap<(u64, u32), Listed>> {
        self.listing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn pacer(&self) -> std::sync::MutexGuard<'_, AuthPacer> {
        self.pacer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A connection admitted from `source` (now at `remote`) failed to authenticate (`reason`):
    /// counted as `turned`, its source paced, and logged once per burst (the failure that starts
    /// or lengthens the source's wait).
    // r[impl forward.auth.pacing+3]
    fn auth_failed(&self, source: IpAddr, remote: SocketAddr, turned: Turned, reason: &str) {
        // Paced before it is counted: whoever reads the count finds the source paced. The source
        // is the one admitted (its address validated by a Retry), never where later packets
        // claim to come from.
        let burst = self.pacer().failed(source, Instant::now().into_std());
        self.connections.count(turned);
        if let Some(burst) = burst {
            tracing::warn!(
                client = %remote,
                failures = burst.failures,
                paced_for = ?burst.paced_for,
                reason,
                "forward: authentication failed; new connections from this source are refused for a while"
            );
        }
    }

    fn sessions(&self) -> std::sync::MutexGuard<'_, Sessions<CredentialDigest>> {
        self.sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn admission(&self) -> std::sync::MutexGuard<'_, Admission> {
        self.admission
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A connection's place among the unauthenticated ones, given back when it authenticates or
/// ends (dropped).
struct Place {
    shared: Arc<Shared>,
    /// The source it was admitted under: what a failure of this connection is charged to.
    ip: IpAddr,
    /// Whether its address was validated (a Retry) when it was admitted.
    validated: bool,
}

impl Place {
    /// A timeout of this connection, counted and, when its source held its whole cap of
    /// unauthenticated places (filling them, not a lone slow client behind a NAT), paced.
    // r[impl forward.auth.pacing+3]
    fn timed_out(&self, remote: SocketAddr) {
        let filling = self.shared.admission().at_cap(self.ip);
        if filling {
            self.shared.auth_failed(
                self.ip,
                remote,
                Turned::TimedOut,
                "out of time while holding every place of its source",
            );
        } else {
            self.shared.connections.count(Turned::TimedOut);
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.shared.admission().release(self.ip);
    }
}

/// An authenticated connection's place among those of its credential, given back when it ends
/// (dropped).
struct Session {
    shared: Arc<Shared>,
    credential: CredentialDigest,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.shared.sessions().release(&self.credential);
    }
}

/// Decides on a new connection attempt before any handshake work: a Retry, a refusal (each a
/// single stateless packet, counted), or a place among the unauthenticated connections.
// r[impl forward.limits.unauthenticated+2]
fn admit(shared: &Arc<Shared>, incoming: quinn::Incoming) -> Option<(Place, quinn::Incoming)> {
    let remote = incoming.remote_address();
    let validated = incoming.remote_address_validated();
    // r[impl forward.auth.pacing+3]
    // A source that failed to authenticate waits before its next handshake. Only a completed
    // handshake can fail, so a forged source cannot get another host paced.
    if shared.pacer().paced(remote.ip(), Instant::now().into_std()) {
        shared.connections.count(Turned::RefusedPaced);
        incoming.refuse();
        return None;
    }
    let decision = shared.admission().decide(remote.ip(), validated);
    match decision {
        Decision::Admit => Some((
            Place {
                shared: shared.clone(),
                ip: remote.ip(),
                validated,
            },
            incoming,
        )),
        Decision::Retry => {
            shared.connections.count(Turned::Retried);
            // Only an attempt that already carries a Retry token cannot be retried, and that one
            // is validated; refused all the same rather than trusted.
            if let Err(err) = incoming.retry() {
                err.into_incoming().refuse();
            }
            None
        }
        Decision::Refuse(why) => {
            shared.connections.count(match why {
                Refused::Total => Turned::RefusedUnauthenticated,
                Refused::PerSource => Turned::RefusedPerSource,
            });
            tracing::debug!(%remote, ?why, "forward: too many unauthenticated connections, refused");
            incoming.refuse();
            None
        }
    }
}

/// The running server. Stop it with [`Server::stop`] (the node's stopper).
pub struct Server {
    endpoint: quinn::Endpoint,
    fingerprint: Fingerprint,
    shared: Arc<Shared>,
    shutdown: watch::Sender<Option<Shutdown>>,
    accept: JoinHandle<()>,
}

/// A stop in progress: by when, and what the clients are told.
#[derive(Debug, Clone, Copy)]
struct Shutdown {
    deadline: Instant,
    message: &'static str,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("fingerprint", &self.fingerprint)
            .finish_non_exhaustive()
    }
}

/// Starts the server: loads (or creates) the identity, listens, and accepts clients until
/// stopped. Needs a tokio runtime.
pub async fn start(config: ServerConfig) -> Result<Server, StartError> {
    config.check()?;
    let identity = Identity::load_or_create(&config.identity_dir)?;
    let fingerprint = identity.fingerprint();
    let server_config = quinn_server_config(&identity, config.idle_timeout)?;
    let endpoint = endpoint_socket(config.listen)
        .and_then(|socket| endpoint(socket, Some(server_config)))
        .map_err(|source| StartError::Listen {
            addr: config.listen,
            source,
        })?;
    let shared = Arc::new(Shared::new(&config));
    let (shutdown, shutdown_rx) = watch::channel(None);
    let accept = tokio::spawn(accept_loop(endpoint.clone(), shared.clone(), shutdown_rx));
    tracing::info!(listen = %config.listen, %fingerprint, "forward: listening");
    Ok(Server {
        endpoint,
        fingerprint,
        shared,
        shutdown,
        accept,
    })
}

/// The quinn server configuration the node listens with: TLS 1.3 with `identity`, this crate's
/// ALPN and transport settings. Public so a benchmark can run a bare endpoint the same way.
pub fn quinn_server_config(
    identity: &Identity,
    idle_timeout: Duration,
) -> Result<quinn::ServerConfig, StartError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| StartError::Tls(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(identity.cert_chain(), identity.key())
        .map_err(|e| StartError::Tls(e.to_string()))?;
    tls.alpn_protocols = vec![ALPN.to_vec()];
    let quic = quinn::crypto::rustls::QuicServerConfig::try_from(tls)
        .map_err(|e| StartError::Tls(e.to_string()))?;
    let mut server_config = quinn::ServerConfig::with_crypto(Arc::new(quic));
    server_config.transport_config(server_transport_config(idle_timeout));
    // r[impl forward.limits.windows]
    // What the endpoint buffers for attempts not yet decided on (quinn: 65 536 of them, 10 MB
    // each, 100 MB in all); the accept loop decides at once, so these only bound a flood.
    server_config
        .max_incoming(MAX_INCOMING)
        .incoming_buffer_size(INCOMING_BUFFER)
        .incoming_buffer_size_total(INCOMING_BUFFER_TOTAL);
    // r[impl forward.auth.pacing+3]
    // No migration: a peer could otherwise send one packet from a forged address and have that
    // address answered (and charged). A client whose path changes loses its connection and
    // reconnects (reconnect.rs paces that), which it must already do for a node restart.
    server_config.migration(false);
    Ok(server_config)
}

impl Server {
    /// The address the endpoint is bound to.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.endpoint.local_addr()
    }

    /// The identity's fingerprint (what clients pin).
    pub fn fingerprint(&self) -> Fingerprint {
        self.fingerprint
    }

    /// The forwards active now, by connection and forward id. A forward is listed from the moment
    /// it is opened until it ends, whatever ended it.
    // r[impl forward.end+2]
    pub fn forwards(&self) -> Vec<ForwardInfo> {
        self.shared
            .listing()
            .iter()
            .map(|(&(connection, forward), listed)| ForwardInfo {
                connection,
                forward,
                client: listed.client,
                target: listed.target,
                flows: listed.flows.load(Ordering::Relaxed) as usize,
                stats: listed.stats.snapshot(),
            })
            .collect()
    }

    /// Datagrams no forward could be charged with (malformed headers, unknown forwards).
    pub fn unattributed(&self) -> ForwardStats {
        self.shared.unattributed.snapshot()
    }

    /// Connections refused before their handshake because the bound on connections not yet
    /// authenticated, in all, was reached.
    pub fn refused_unauthenticated(&self) -> u64 {
        self.connections().refused_unauthenticated
    }

    /// The node's connection counters: unauthenticated connections now, Retries, refusals by
    /// bound, failed handshakes and timeouts.
    pub fn connections(&self) -> ConnectionStats {
        let unauthenticated = self.shared.admission().unauthenticated();
        let authenticated = self.shared.sessions().authenticated();
        self.shared
            .connections
            .snapshot(unauthenticated, authenticated)
    }

    /// Forwards refused because their target was outside the credential's allow-list.
    pub fn refused_targets(&self) -> u64 {
        self.shared.access().grants.refused()
    }

    /// Replaces the credentials and allow-lists, all together, while the server runs: every
    /// connection that authenticates and every forward opened once this returns is decided by
    /// `access`. Each connection then re-checks itself: a forward whose target its credential no
    /// longer reaches ends (the client is told it ended as
    /// [`NotAllowed`](crate::control::EndReason::NotAllowed), naming the target), and a
    /// connection whose credential is no longer allowed ends with each of its forwards. Whatever
    /// `access` still allows is not disturbed, so an update that changes nothing changes
    /// nothing. Returns at once (the re-checks follow on each connection's task);
    /// [`Server::access_stats`] counts what they ended.
    // r[impl forward.access.update]
    pub fn update_access(&self, access: Access) {
        let granted = Granted::new(&access);
        self.shared.access.send_modify(|current| {
            // The count of refused targets goes on across updates.
            *current = Arc::new(Granted {
                credentials: granted.credentials,
                grants: granted.grants.replacing(&current.grants),
            });
        });
        self.shared
            .access_counters
            .updates
            .fetch_add(1, Ordering::Relaxed);
        tracing::info!(
            credentials = access.credentials.len() + access.scoped.len(),
            "forward: credentials and allow-lists updated"
        );
    }

    /// What the updates of the credentials and allow-lists have done: how many there were, and
    /// the forwards and connections they ended.
    pub fn access_stats(&self) -> AccessStats {
        self.shared.access_counters.snapshot()
    }

    /// Reply buffers (`REPLY_BATCH` × 64 KiB each) allocated since the server started: as many
    /// as threads relayed replies at once, however many flows it has.
    pub fn reply_buffers_allocated(&self) -> usize {
        self.shared.reply_buffers.allocated()
    }

    /// Flow sockets open now, across every connection.
    pub fn flow_sockets(&self) -> usize {
        self.shared.flow_pool.in_use()
    }

    /// Stops: no new connection is accepted; every open forward is told it ends because the node
    /// is shutting down; connections are closed; returns by `deadline`.
    // r[impl forward.stop]
    pub async fn stop(self, deadline: Instant) -> Result<(), ServerStopError> {
        self.stop_telling(deadline, "node shutting down").await
    }

    async fn stop_telling(
        self,
        deadline: Instant,
        message: &'static str,
    ) -> Result<(), ServerStopError> {
        let _ = self.shutdown.send(Some(Shutdown { deadline, message }));
        let mut accept = self.accept;
        let announced = tokio::time::timeout_at(deadline, &mut accept).await.is_ok();
        if !announced {
            accept.abort();
        }
        self.endpoint
            .close(close_code::SHUTDOWN.into(), message.as_bytes());
        let idle = tokio::time::timeout_at(deadline, self.endpoint.wait_idle())
            .await
            .is_ok();
        self.shared.listing().clear();
        match (announced, idle) {
            (true, true) => Ok(()),
            (false, _) => Err(ServerStopError(
                "connections did not finish announcing the shutdown in time".into(),
            )),
            (true, false) => Err(ServerStopError(
                "the endpoint was not idle by the deadline".into(),
            )),
        }
    }
}

// The node's stopper: the stop plan hands over its deadline and why the node stops.
// r[impl forward.stop]
impl holdfast_lifecycle::Stopper for Server {
    fn stop(
        self: Box<Self>,
        request: holdfast_lifecycle::StopRequest,
    ) -> holdfast_lifecycle::BoxFuture<Result<(), holdfast_lifecycle::StopError>> {
        let message = match request.reason {
            holdfast_lifecycle::StopReason::Restart => "node restarting",
            holdfast_lifecycle::StopReason::Shutdown => "node shutting down",
        };
        Box::pin(async move {
            self.stop_telling(request.deadline, message)
                .await
                .map_err(|err| holdfast_lifecycle::StopError(err.to_string()))
        })
    }
}

async fn accept_loop(
    endpoint: quinn::Endpoint,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<Option<Shutdown>>,
) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = shutdown.changed() => break,
            incoming = endpoint.accept() => match incoming {
                Some(incoming) => {
                    // Bounded before any handshake work: a flood of new connections costs a
                    // Retry or a refusal packet each, never a handshake or an authentication
                    // timer.
                    let Some((place, incoming)) = admit(&shared, incoming) else {
                        continue;
                    };
                    let shared = shared.clone();
                    let shutdown = shutdown.clone();
                    let remote = incoming.remote_address();
                    connections.spawn(async move {
                        // r[impl forward.limits.unauthenticated+2]
                        // One deadline from the first packet: a slow handshake leaves less time
                        // to authenticate, it does not buy more.
                        let deadline = Instant::now() + shared.auth_timeout;
                        // A stop does not wait for handshakes still under way.
                        let mut stopping = shutdown.clone();
                        let handshake = tokio::select! {
                            handshake = tokio::time::timeout_at(deadline, incoming.into_future()) => handshake,
                            _ = stopping.wait_for(Option::is_some) => return,
                        };
                        match handshake {
                            Ok(Ok(conn)) => serve(conn, shared, shutdown, place, deadline).await,
                            Ok(Err(err)) => {
                                tracing::debug!(error = %err, "forward: handshake failed");
                                // r[impl forward.auth.pacing+3]
                                // A peer at a validated address that closes (or lets its idle
                                // timeout lapse) mid-handshake has had the node sign: paced, or
                                // it could have the node sign without end. An unvalidated one
                                // may be forged, and the node's own close is not the peer's.
                                if place.validated
                                    && !matches!(err, quinn::ConnectionError::LocallyClosed)
                                {
                                    shared.auth_failed(
                                        place.ip,
                                        remote,
                                        Turned::HandshakeFailed,
                                        "handshake failed",
                                    );
                                } else {
                                    shared.connections.count(Turned::HandshakeFailed);
                                }
                            }
                            // Dropping the handshake closes the connection.
                            Err(_) => {
                                place.timed_out(remote);
                                tracing::debug!("forward: handshake not done in time");
                            }
                        }
                    });
                }
                // The endpoint was closed.
                None => break,
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    // Stop accepting first (refuse handshakes), then let each connection announce and close.
    endpoint.set_server_config(None);
    while connections.join_next().await.is_some() {}
}

struct Flow {
    socket: Arc<UdpIo>,
    /// Whether its target is on the node's own machine ([`FlowSocket::local`]).
    local: bool,
    activity: Arc<Activity>,
    replies: JoinHandle<()>,
    /// Its place among the node's flow sockets, given back when the flow is dropped.
    _permit: PoolPermit,
}

struct ServerForward {
    target: SocketAddr,
    flows: HashMap<u64, Flow>,
    flow_count: Arc<AtomicU64>,
    reporter: Arc<Reporter>,
}

impl ServerForward {
    /// Makes room for a new flow by ending the longest idle one, if it has been idle for `idle`;
    /// whether it did.
    // r[impl forward.flows+2]
    fn evict_idle(&mut self, now: Instant, idle: Duration) -> bool {
        let flows = self
            .flows
            .iter()
            .map(|(flow, state)| (*flow, state.activity.last()));
        let Some(flow) = evictable(flows, now, idle) else {
            return false;
        };
        if let Some(state) = self.flows.remove(&flow) {
            state.replies.abort();
        }
        true
    }

    /// Ends each of `flows`.
    fn end_flows(&mut self, flows: impl IntoIterator<Item = u64>) {
        for flow in flows {
            if let Some(state) = self.flows.remove(&flow) {
                state.replies.abort();
            }
        }
        self.flow_count
            .store(self.flows.len() as u64, Ordering::Relaxed);
    }

    fn end(self) {
        for flow in self.flows.into_values() {
            flow.replies.abort();
        }
    }
}

fn linger_until(shutdown: Option<Shutdown>, fallback: Duration) -> Duration {
    shutdown.map_or(fallback, |s| {
        s.deadline
            .saturating_duration_since(Instant::now())
            .min(fallback)
    })
}

/// Refuses the connection's request with `refusal`, delivers the refusal, and closes.
async fn refuse(conn: &Connection, mut send: quinn::SendStream, refusal: Refusal, message: &str) {
    // Each refusal is counted; a failed authentication is logged once per burst of its source.
    tracing::debug!(client = %conn.remote_address(), ?refusal, reason = message, "forward: client refused");
    let _ = write(
        &mut send,
        &Message::Refused {
            forward: 0,
            refusal,
            message: message.to_owned(),
        },
    )
    .await;
    finish(&mut send, Duration::from_secs(2)).await;
    conn.close(close_code::REFUSED.into(), message.as_bytes());
}

/// Authenticates the connection, with the digest of the credential it presented (what the
/// allow-list it reaches is found by); `None` when it was refused (and closed).
// r[impl forward.auth]
async fn authenticate(
    conn: &Connection,
    shared: &Shared,
    place: &Place,
    deadline: Instant,
) -> Option<(
    quinn::SendStream,
    mpsc::Receiver<Result<Message, RelayError>>,
    CredentialDigest,
    watch::Receiver<Arc<Granted>>,
)> {
    // One deadline for the whole of it (from the first packet): opening the stream late does not
    // buy a second timeout.
    let (send, recv) = match tokio::time::timeout_at(deadline, conn.accept_bi()).await {
        Ok(Ok(streams)) => streams,
        Ok(Err(err)) => {
            match err {
                // The node's own doing (a stop): not the peer's.
                quinn::ConnectionError::LocallyClosed => {
                    tracing::debug!(error = %err, "forward: connection closed before its control stream");
                }
                // r[impl forward.auth.pacing+3]
                // The peer had its handshake (a signature of the node's) and closed, or let the
                // connection idle out (the node's own idle timeout is longer than the
                // authentication timeout, so a timeout before it is the peer's short one): paced
                // like a bad credential, or one source could have the node sign without end.
                _ => shared.auth_failed(
                    place.ip,
                    conn.remote_address(),
                    Turned::ClosedUnauthenticated,
                    "closed before authenticating",
                ),
            }
            return None;
        }
        // r[impl forward.auth.pacing+3]
        // Paced only when its source fills its places: a slow client may share its address (a
        // NAT) with good ones.
        Err(_) => {
            place.timed_out(conn.remote_address());
            conn.close(close_code::REFUSED.into(), b"no control stream in time");
            return None;
        }
    };
    let mut control = spawn_reader(recv);
    let first = tokio::time::timeout_at(deadline, control.recv()).await;
    // How the failure is counted, and whether it paces the source (`None`: a timeout, counted
    // only).
    let (refusal, message, paced) = match first {
        Ok(Some(Ok(Message::Hello { credential }))) => {
            let digest = CredentialDigest::of(&credential);
            if let Some(updates) = hello_admitted(&shared.access, &digest) {
                shared.pacer().succeeded(place.ip);
                return Some((send, control, digest, updates));
            }
            (
                Refusal::BadCredential,
                "credential not allowed by this node",
                Some(Turned::AuthFailed),
            )
        }
        Ok(Some(Err(RelayError::Frame(FrameError::Version(_))))) => (
            Refusal::Version,
            "unsupported protocol version",
            Some(Turned::AuthFailed),
        ),
        // r[impl forward.auth.pacing+3]
        // The node closed the connection itself (a stop): not the peer's doing, not charged.
        Ok(Some(Err(RelayError::Connection(quinn::ConnectionError::LocallyClosed)))) => {
            tracing::debug!("forward: connection closed by the node before authenticating");
            return None;
        }
        // The control stream (or the connection) ended before a Hello.
        Ok(Some(Err(RelayError::Control(_) | RelayError::Connection(_))) | None) => (
            Refusal::NotAuthenticated,
            "closed before authenticating",
            Some(Turned::ClosedUnauthenticated),
        ),
        Ok(Some(Ok(_) | Err(_))) => (
            Refusal::NotAuthenticated,
            "the first request must authenticate (Hello)",
            Some(Turned::AuthFailed),
        ),
        Err(_) => (Refusal::NotAuthenticated, "no authentication in time", None),
    };
    // r[impl forward.auth.pacing+3]
    match paced {
        Some(turned) => shared.auth_failed(place.ip, conn.remote_address(), turned, message),
        None => place.timed_out(conn.remote_address()),
    }
    refuse(conn, send, refusal, message).await;
    None
}

async fn serve(
    conn: Connection,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<Option<Shutdown>>,
    unauthenticated: Place,
    deadline: Instant,
) {
    // r[impl forward.stop]
    // A stop does not wait out the authentication timeout of a client that has not authenticated:
    // it has no forward to announce, so it is closed with the reason at once.
    let mut stopping = shutdown.clone();
    // r[impl forward.limits.windows]
    // Datagrams before authentication are read and dropped, so an unauthenticated peer cannot
    // keep the connection's datagram buffer full.
    let drain = async {
        while conn.read_datagram().await.is_ok() {
            shared.connections.count(Turned::DroppedUnauthenticated);
        }
        std::future::pending::<()>().await;
    };
    let authenticated = tokio::select! {
        authenticated = authenticate(&conn, &shared, &unauthenticated, deadline) => authenticated,
        () = drain => None,
        stop = stopping.wait_for(Option::is_some) => {
            let message = stop.ok().and_then(|s| *s).map_or("node shutting down", |s| s.message);
            conn.close(close_code::SHUTDOWN.into(), message.as_bytes());
            return;
        }
    };
    // r[impl forward.limits.unauthenticated+2]
    drop(unauthenticated);
    let Some((send, mut control, credential, access_updates)) = authenticated else {
        return;
    };
    // r[impl forward.limits.per-credential+2]
    let admitted = shared.sessions().admit(credential);
    let _session = match admitted {
        Ok(()) => Session {
            shared: shared.clone(),
            credential,
        },
        Err(why) => {
            let (turned, message) = match why {
                SessionRefused::Total => (
                    Turned::RefusedAuthenticated,
                    "the node holds its maximum of connections in all",
                ),
                SessionRefused::PerCredential => (
                    Turned::RefusedPerCredential,
                    "the node holds its maximum of connections for this token",
                ),
            };
            shared.connections.count(turned);
            refuse(&conn, send, Refusal::TooManyConnections, message).await;
            return;
        }
    };
    let id = shared.next_connection.fetch_add(1, Ordering::Relaxed);
    let client = conn.remote_address();
    let (writer, writer_task) = spawn_writer(send, Duration::from_secs(2));
    let _ = writer.send(Message::Welcome).await;
    tracing::info!(connection = id, %client, "forward: client authenticated");
    let mut relay = Relay {
        id,
        client,
        conn: conn.clone(),
        shared: shared.clone(),
        writer: writer.clone(),
        shutdown: shutdown.clone(),
        credential,
        forwards: HashMap::new(),
        gather: Gather::default(),
        gather_max: 1,
    };
    // r[impl forward.flows.sweep]
    // r[impl forward.limits.flow-sockets+3]
    let every = shared.flow_sweep;
    let mut sweep = tokio::time::interval_at(Instant::now() + every, every);
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut wakeups = shared.flow_pool.wakeups();
    // One wait for the next update, kept across the loop's turns rather than made anew on each,
    // so the datagram path pays no more than one poll of it per batch.
    let mut access_changed = std::pin::pin!(access_update(access_updates));
    let ended: Ending = loop {
        tokio::select! {
            biased;
            changed = shutdown.changed() => {
                // A dropped sender is the server itself going away: the same as a shutdown.
                let deadline = if changed.is_ok() { *shutdown.borrow() } else { None };
                break Ending::Stopped(deadline);
            }
            // r[impl forward.access.recheck]
            // Before control messages: a request read after an update is answered by the new
            // lists, and a connection whose credential was removed opens nothing more.
            updates = &mut access_changed => {
                access_changed.set(access_update(updates));
                if !relay.recheck().await {
                    break Ending::Revoked;
                }
            }
            message = control.recv() => match message {
                Some(Ok(message)) => relay.control(message).await,
                Some(Err(err)) => match err.class() {
                    Class::Item => {
                        shared.unattributed.dropped(err.drop_reason());
                        tracing::debug!(connection = id, error = %err, "forward: control frame dropped");
                    }
                    Class::Transient => {
                        tracing::warn!(connection = id, error = %err, "forward: control stream");
                    }
                    Class::Fatal => break Ending::Lost(err),
                },
                None => break Ending::Lost(RelayError::Control("reader ended".into())),
            },
            // Before datagrams: a flood of them must not keep the sweep from running.
            _ = sweep.tick() => relay.sweep(Instant::now()),
            // A connection started waiting for a flow socket: give back beyond the share now.
            // (The pool outlives every relay, so the sender is never dropped while this runs.)
            Ok(()) = wakeups.changed() => relay.sweep(Instant::now()),
            datagram = conn.read_datagram() => match datagram {
                Ok(datagram) => relay.datagrams(datagram).await,
                Err(err) => {
                    let err = RelayError::from(err);
                    match err.class() {
                        Class::Item | Class::Transient => {
                            tracing::debug!(connection = id, error = %err, "forward: datagram");
                        }
                        Class::Fatal => break Ending::Lost(err),
                    }
                }
            },
        }
    };
    let open: Vec<u32> = relay.forwards.keys().copied().collect();
    let reason = match &ended {
        Ending::Stopped(_) => EndReason::ShuttingDown,
        Ending::Revoked => EndReason::NotAllowed,
        Ending::Lost(_) => EndReason::ConnectionLost,
    };
    let text = match &ended {
        Ending::Stopped(shutdown) => shutdown
            .map_or("node shutting down", |s| s.message)
            .to_owned(),
        Ending::Revoked => REVOKED.to_owned(),
        Ending::Lost(err) => err.to_string(),
    };
    for forward in open {
        relay.end_forward(forward, &text);
        // The client is told why (when the connection can still carry it).
        let _ = writer.try_send(Message::Ended {
            forward,
            reason,
            message: text.clone(),
        });
    }
    drop(relay);
    drop(writer);
    match ended {
        Ending::Stopped(deadline) => {
            let _ =
                tokio::time::timeout(linger_until(deadline, Duration::from_secs(2)), writer_task)
                    .await;
            conn.close(close_code::SHUTDOWN.into(), text.as_bytes());
        }
        // r[impl forward.access.revoked]
        Ending::Revoked => {
            shared
                .access_counters
                .connections_ended
                .fetch_add(1, Ordering::Relaxed);
            tracing::info!(connection = id, %client, "forward: connection ended, its credential is no longer allowed");
            // The `Ended` answers go out first (a stop's deadline cuts the wait short).
            let stopping = *shutdown.borrow();
            let _ =
                tokio::time::timeout(linger_until(stopping, Duration::from_secs(2)), writer_task)
                    .await;
            conn.close(close_code::REVOKED.into(), text.as_bytes());
        }
        Ending::Lost(err) => {
            tracing::info!(connection = id, %client, error = %err, "forward: connection ended");
            writer_task.abort();
            conn.close(close_code::PROTOCOL.into(), b"connection ended");
        }
    }
}

/// Why a connection's relay loop ended.
enum Ending {
    /// The node is stopping (by this deadline, with this message), or went away.
    Stopped(Option<Shutdown>),
    /// An update no longer allows the connection's credential.
    Revoked,
    /// The connection, or its control stream, was lost.
    Lost(RelayError),
}

/// What a connection whose credential was removed, and each of its forwards, is told.
const REVOKED: &str = "the credential is no longer allowed by this node";

/// Whether `digest` may authenticate by the credentials of the moment; if so, the subscription to
/// later updates its connection re-checks itself by.
///
/// Decided by the very value the subscription has marked seen, so any update made after the
/// decision (while the connection is still being let in, before its relay loop runs) is one the
/// subscription reports as changed: a credential removed a moment after its Hello was accepted
/// still ends its connection.
// r[impl forward.access.update]
// r[impl forward.access.revoked]
fn hello_admitted(
    access: &watch::Sender<Arc<Granted>>,
    digest: &CredentialDigest,
) -> Option<watch::Receiver<Arc<Granted>>> {
    let mut updates = access.subscribe();
    let allowed = updates
        .borrow_and_update()
        .credentials
        .matching_digest(digest)
        .is_some();
    allowed.then_some(updates)
}

/// Waits for the next update of the node's credentials and allow-lists, and gives the receiver
/// back for the wait after it.
// r[impl forward.access.recheck]
async fn access_update(
    mut updates: watch::Receiver<Arc<Granted>>,
) -> watch::Receiver<Arc<Granted>> {
    if updates.changed().await.is_err() {
        // The server (which holds the sender) is gone; its stop ends this connection.
        std::future::pending::<()>().await;
    }
    updates
}

struct Relay {
    id: u64,
    client: SocketAddr,
    conn: Connection,
    shared: Arc<Shared>,
    writer: mpsc::Sender<Message>,
    shutdown: watch::Receiver<Option<Shutdown>>,
    /// The credential it authenticated with (hashed): the allow-list it reaches is looked up with
    /// it, in the node's lists of the moment.
    credential: CredentialDigest,
    forwards: HashMap<u32, ServerForward>,
    /// Datagrams of one flow waiting to leave in one send.
    gather: Gather<(u32, u64)>,
    /// How many datagrams one send of the run under way may carry.
    gather_max: usize,
}

impl Relay {
    /// Ends `forward` on the node, if it is open: out of the listing of active forwards, `why`
    /// kept as its last error, its flows stopped. Telling the client is the caller's, which knows
    /// whether it may wait on the control stream.
    // r[impl forward.end+2]
    fn end_forward(&mut self, forward: u32, why: &str) {
        if let Some(state) = self.forwards.remove(&forward) {
            self.shared.listing().remove(&(self.id, forward));
            state.reporter.stats().set_last_error(why);
            state.end();
        }
    }

    /// Queues an answer for the client. A client that does not read its control stream fills the
    /// queue; waiting for room must not keep the relay from seeing a stop, so once the node is
    /// stopping the answer is dropped (the stop's own announcement follows).
    // r[impl forward.stop]
    async fn reply(&self, message: Message) {
        let mut stopping = self.shutdown.clone();
        tokio::select! {
            _ = self.writer.send(message) => {}
            _ = stopping.wait_for(Option::is_some) => {}
        }
    }

    async fn control(&mut self, message: Message) {
        match message {
            Message::Open { forward, target } => self.open(forward, target).await,
            Message::Close { forward } => {
                let message = "closed by the client";
                self.end_forward(forward, message);
                self.reply(Message::Ended {
                    forward,
                    reason: EndReason::Closed,
                    message: message.into(),
                })
                .await;
            }
            Message::Hello { .. } => {
                self.reply(Message::Refused {
                    forward: 0,
                    refusal: Refusal::Duplicate,
                    message: "already authenticated".into(),
                })
                .await;
            }
            // Messages only the node sends: a confused or hostile client; dropped and counted.
            Message::Welcome
            | Message::Opened { .. }
            | Message::Refused { .. }
            | Message::Ended { .. }
            | Message::Status { .. } => {
                self.shared
                    .unattributed
                    .dropped(crate::classify::DropReason::Malformed);
            }
        }
    }

    /// Whether a forward to `target` may open under the node's lists now (a refusal is
    /// counted): the list the connection's credential reaches, nothing once the credential is no
    /// longer allowed.
    // r[impl forward.allow.credential]
    // r[impl forward.access.update]
    fn admits(&self, target: &SocketAddr) -> bool {
        let access = self.shared.access();
        let list = match access.credentials.matching_digest(&self.credential) {
            Some(_) => access.grants.list_for_digest(&self.credential),
            // Its connection ends on its next re-check; until then it reaches nothing.
            None => Arc::new(AllowList::default()),
        };
        access.grants.admits(&list, target)
    }

    /// Re-checks the connection against the node's lists now: ends (and announces) each open
    /// forward whose target its credential no longer reaches. `false`: the credential itself is
    /// no longer allowed, and the connection must end.
    // r[impl forward.access.recheck]
    async fn recheck(&mut self) -> bool {
        let access = self.shared.access();
        if access
            .credentials
            .matching_digest(&self.credential)
            .is_none()
        {
            return false;
        }
        let list = access.grants.list_for_digest(&self.credential);
        let ended: Vec<(u32, SocketAddr)> = self
            .forwards
            .iter()
            .filter(|(_, state)| !list.allows(&state.target))
            .map(|(forward, state)| (*forward, state.target))
            .collect();
        for (forward, target) in ended {
            let message = format!("target {target} is no longer in this node's allow-list");
            self.end_forward(forward, &message);
            self.shared
                .access_counters
                .forwards_ended
                .fetch_add(1, Ordering::Relaxed);
            tracing::info!(connection = self.id, forward, reason = %message, "forward: ended by an update");
            self.reply(Message::Ended {
                forward,
                reason: EndReason::NotAllowed,
                message,
            })
            .await;
        }
        true
    }

    // r[impl forward.allow+2]
    // r[impl forward.allow.credential]
    async fn open(&mut self, forward: u32, target: SocketAddr) {
        let refusal = if forward == 0 {
            Some((Refusal::Duplicate, "forward id 0 is reserved".to_owned()))
        } else if self.forwards.contains_key(&forward) {
            Some((
                Refusal::Duplicate,
                format!("forward {forward} is already open"),
            ))
        } else if self.forwards.len() >= self.shared.max_forwards {
            Some((
                Refusal::TooManyForwards,
                format!(
                    "this connection already has {} forwards open",
                    self.forwards.len()
                ),
            ))
        } else if !self.admits(&target) {
            Some((
                Refusal::NotAllowed,
                format!("target {target} is not in this node's allow-list"),
            ))
        } else {
            None
        };
        if let Some((refusal, message)) = refusal {
            tracing::info!(connection = self.id, forward, %target, ?refusal, reason = %message, "forward: open refused");
            self.reply(Message::Refused {
                forward,
                refusal,
                message,
            })
            .await;
            return;
        }
        let stats = Arc::new(Counters::default());
        let flow_count = Arc::new(AtomicU64::new(0));
        let writer = self.writer.clone();
        let sink: crate::report::Sink = Box::new(move |forward, message| {
            // A full control queue drops the report; the counters still have it.
            let _ = writer.try_send(Message::Status { forward, message });
        });
        let reporter = Arc::new(Reporter::new(
            forward,
            stats.clone(),
            sink,
            self.shared.report_interval,
        ));
        self.forwards.insert(
            forward,
            ServerForward {
                target,
                flows: HashMap::new(),
                flow_count: flow_count.clone(),
                reporter,
            },
        );
        self.shared.listing().insert(
            (self.id, forward),
            Listed {
                client: self.client,
                target,
                flows: flow_count,
                stats,
            },
        );
        tracing::info!(connection = self.id, forward, %target, "forward: opened");
        self.reply(Message::Opened { forward }).await;
    }

    /// Ends the connection's flows that have been idle for the flow idle time, whatever their
    /// forward's bound, and, while another connection waits for a flow socket, its least
    /// recently active flows beyond its share of them.
    // r[impl forward.flows.sweep]
    // r[impl forward.limits.flow-sockets+3]
    fn sweep(&mut self, now: Instant) {
        let idle = self.shared.flow_idle;
        for state in self.forwards.values_mut() {
            let ended = idle_flows(
                state
                    .flows
                    .iter()
                    .map(|(flow, f)| (*flow, f.activity.last())),
                now,
                idle,
            );
            state.end_flows(ended);
        }
        let excess = self.shared.flow_pool.excess(self.id, now);
        if excess == 0 {
            return;
        }
        let flows = self.forwards.iter().flat_map(|(forward, state)| {
            state
                .flows
                .iter()
                .map(|(flow, f)| ((*forward, *flow), f.activity.last()))
        });
        let given_back = least_recent(flows, excess);
        tracing::debug!(
            connection = self.id,
            flows = given_back.len(),
            "forward: flows beyond the connection's share of flow sockets given back"
        );
        for (forward, flow) in given_back {
            if let Some(state) = self.forwards.get_mut(&forward) {
                state.end_flows([flow]);
            }
        }
    }

    /// Relays `first` and every datagram already queued behind it (at most
    /// [`DRAIN`](crate::ready::DRAIN), so control messages and a stop are still seen), gathering
    /// each flow's run of equal-sized datagrams into one send towards its target.
    // r[impl forward.batch]
    async fn datagrams(&mut self, first: Bytes) {
        let now = Instant::now();
        let mut next = Some(first);
        let mut drain = Drain::default();
        while let Some(datagram) = next {
            self.datagram(&datagram, now).await;
            // A connection error is left for the relay loop's next read to see.
            next = drain.more(|| ready_now(self.conn.read_datagram()).and_then(Result::ok));
        }
        self.flush().await;
    }

    // r[impl forward.flows+2]
    async fn datagram(&mut self, datagram: &[u8], now: Instant) {
        let (id, payload) = match decode_datagram(datagram) {
            Ok(decoded) => decoded,
            Err(err) => {
                self.shared
                    .unattributed
                    .dropped(RelayError::from(err).drop_reason());
                return;
            }
        };
        // Most of a batch continues the run under way: its flow is open (the run's flow was
        // looked up, and touched, when the run began), so no lookup is needed.
        if self
            .gather
            .push_same((id.forward, id.flow), payload, self.gather_max)
        {
            return;
        }
        // A new flow may evict another: what was gathered for that one goes out first.
        let known = self
            .forwards
            .get(&id.forward)
            .map(|state| state.flows.contains_key(&id.flow));
        if known == Some(false) {
            self.flush().await;
        }
        let Some(state) = self.forwards.get_mut(&id.forward) else {
            self.shared
                .unattributed
                .dropped(RelayError::UnknownForward(id.forward).drop_reason());
            return;
        };
        let existing = state.flows.get(&id.flow).map(|flow| {
            flow.activity.touch(now);
            flow.socket.clone()
        });
        let socket = match existing {
            Some(socket) => socket,
            None if state.flows.len() >= self.shared.max_flows
                && !state.evict_idle(now, self.shared.flow_idle) =>
            {
                state.reporter.dropped(&RelayError::FlowLimit(id.forward));
                return;
            }
            None => {
                // r[impl forward.limits.flow-sockets+3]
                let Some(permit) = self.shared.flow_pool.acquire(self.id, now) else {
                    state.reporter.dropped(&RelayError::FlowSockets);
                    return;
                };
                match open_flow(state.target).await {
                    Ok(FlowSocket { io: socket, local }) => {
                        let activity = Arc::new(Activity::new(now));
                        let replies = tokio::spawn(relay_replies(
                            socket.clone(),
                            self.conn.clone(),
                            id,
                            state.reporter.clone(),
                            activity.clone(),
                            self.shared.reply_buffers.clone(),
                        ));
                        state.flows.insert(
                            id.flow,
                            Flow {
                                socket: socket.clone(),
                                local,
                                activity,
                                replies,
                                _permit: permit,
                            },
                        );
                        state
                            .flow_count
                            .store(state.flows.len() as u64, Ordering::Relaxed);
                        socket
                    }
                    Err(err) => {
                        let err = RelayError::Socket(err);
                        state.reporter.transient(&err);
                        state.reporter.dropped(&err);
                        return;
                    }
                }
            }
        };
        let key = (id.forward, id.flow);
        let target = state.target;
        let max = socket.max_segments();
        if !self.gather.push(key, target, payload, max) {
            self.flush().await;
            self.gather.push(key, target, payload, max);
        }
        self.gather_max = max;
    }

    /// Sends what was gathered to its flow's target.
    async fn flush(&mut self) {
        let Some(gathered) = self.gather.take() else {
            return;
        };
        let (forward, flow) = gathered.key;
        let Some(state) = self.forwards.get_mut(&forward) else {
            return;
        };
        let Some((socket, local)) = state.flows.get(&flow).map(|f| (f.socket.clone(), f.local))
        else {
            return;
        };
        if send_to_target(&socket, &gathered, &state.reporter).await == Sent::FlowEnded {
            // The flow's socket is unusable: end that flow only; the next datagram of the same
            // peer opens a fresh one. (Nothing reached its target: no burst to read.)
            if let Some(flow) = state.flows.remove(&flow) {
                flow.replies.abort();
            }
            state
                .flow_count
                .store(state.flows.len() as u64, Ordering::Relaxed);
        } else if gives_way(local, gathered.contents.len()) {
            // r[impl forward.target.local]
            // A local target woken on this CPU reads only once the relay gives the CPU up: after
            // a burst it does, before it sends more (the rest of a drained backlog waits).
            (self.shared.give_way)();
        }
    }
}

/// Receive buffers per wakeup of a flow's reply task.
const REPLY_BATCH: usize = 2;

/// What became of datagrams sent towards the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sent {
    /// Sent (and counted).
    Delivered,
    /// Not all sent; the error was counted and reported, the flow goes on.
    Dropped,
    /// Not all sent, and the flow's socket cannot be used again.
    FlowEnded,
}

/// Sends gathered datagrams on a flow's connected socket, counted as one by one would count
/// them.
// r[impl forward.batch]
async fn send_to_target<K>(
    socket: &UdpIo,
    gathered: &Gathered<'_, K>,
    reporter: &Reporter,
) -> Sent {
    let (sent, err) = gathered.send(socket).await;
    // A run is of equal-sized datagrams.
    reporter
        .stats()
        .to_target_many(sent, sent * gathered.segment);
    let Some(err) = err else {
        return Sent::Delivered;
    };
    target_send_failed(&RelayError::Socket(err), gathered.count - sent, reporter)
}

/// Counts the `lost` datagrams a send towards the target failed with `err` and reports it;
/// what becomes of the flow. A pending ICMP error (ECONNREFUSED) surfaces here as well as on the
/// receive side; either way it is reported and the socket stays in use.
// i[impl forward.relay.resilience]
fn target_send_failed(err: &RelayError, lost: usize, reporter: &Reporter) -> Sent {
    match err.class() {
        Class::Item => {
            for _ in 0..lost {
                reporter.dropped(err);
            }
            Sent::Dropped
        }
        Class::Transient => {
            reporter.transient(err);
            for _ in 0..lost {
                reporter.stats().dropped(err.drop_reason());
            }
            Sent::Dropped
        }
        Class::Fatal => {
            reporter.transient(err);
            Sent::FlowEnded
        }
    }
}

/// A flow's socket, connected to its target.
struct FlowSocket {
    io: Arc<UdpIo>,
    /// Whether the target is on the node's own machine ([`on_this_machine`]), decided once when
    /// the socket is opened.
    local: bool,
}

/// A UDP socket connected to `target`, so the kernel filters replies to that target and reports
/// its ICMP errors on this socket.
async fn open_flow(target: SocketAddr) -> std::io::Result<FlowSocket> {
    let any: SocketAddr = if target.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let socket = UdpSocket::bind(any).await?;
    socket.connect(target).await?;
    // r[impl forward.target.local]
    // Connected, the socket has the source address the kernel picked for the target. An address
    // it cannot tell (never seen on a connected socket) is taken as remote: no yield.
    let local = socket
        .local_addr()
        .is_ok_and(|source| on_this_machine(target, source));
    Ok(FlowSocket {
        io: Arc::new(UdpIo::new(socket, FLOW_BUFFER)?),
        local,
    })
}

/// Whether `target` is on the node's own machine, given `source`, the address a socket connected
/// to it sends from: a loopback (or the unspecified) address, which the kernel delivers to the
/// host itself, or one of the host's own addresses, which the kernel sends to from that very
/// address.
// r[impl forward.target.local]
fn on_this_machine(target: SocketAddr, source: SocketAddr) -> bool {
    let target = target.ip().to_canonical();
    target.is_loopback() || target.is_unspecified() || target == source.ip().to_canonical()
}

/// A send of at least this many bytes towards a local target is followed by a yield of the
/// relay's thread ([`gives_way`]): 15 datagrams of 1,162 bytes (a full run of 64-byte datagrams,
/// 64 of them in one send, stays below it), and a few such sends fill a receive buffer of the
/// kernel's default size (208 KiB: about 90 datagrams of 1,162 bytes as the kernel charges them).
// Public (hidden) for the relay bench's floor, which gives way as the node does.
#[doc(hidden)]
pub const BURST: usize = 16 << 10;

/// Whether the relay gives its CPU up after sending `sent` bytes at once to a flow's target,
/// `local` when that target is on the node's own machine: after a burst ([`BURST`]) towards a
/// local target only (towards a remote one a yield is pure cost).
// r[impl forward.target.local]
fn gives_way(local: bool, sent: usize) -> bool {
    local && sent >= BURST
}

/// Counts and reports an error of receiving on a flow's socket; whether receiving on it goes
/// on (a pending ICMP refusal, say, is reported and the socket stays in use).
// i[impl forward.relay.resilience]
fn flow_recv_failed(err: &RelayError, reporter: &Reporter) -> bool {
    match err.class() {
        Class::Item => {
            reporter.dropped(err);
            true
        }
        Class::Transient => {
            reporter.transient(err);
            true
        }
        // The socket cannot be used again: the flow's replies end here.
        Class::Fatal => false,
    }
}

/// Relays one flow's replies from the target back to the client: every datagram of a receive
/// (several, when the kernel coalesced them) with one allocation for all of them.
// r[impl forward.batch]
// r[impl forward.flows.reply-buffers]
async fn relay_replies(
    socket: Arc<UdpIo>,
    conn: Connection,
    id: FlowId,
    reporter: Arc<Reporter>,
    activity: Arc<Activity>,
    buffers: Arc<ReplyBuffers>,
) {
    let header = id.header();
    let mut meta = [RecvMeta::default(); REPLY_BATCH];
    let mut out = BytesMut::new();
    loop {
        // Waiting, the flow holds no buffer: a flow whose target is silent, or only refuses,
        // costs its socket and its task, and the node's buffers do not grow with its flows.
        // An error alone (the target refused a datagram) is taken without a buffer; otherwise a
        // datagram waits (or readiness failed, which the receive reports).
        if let Ok(false) = socket.readable().await {
            let err = match socket.take_error() {
                Ok(Some(err)) | Err(err) => err,
                Ok(None) => continue,
            };
            if flow_recv_failed(&RelayError::Socket(err), &reporter) {
                continue;
            }
            return;
        }
        // Two buffers' worth, borrowed for this receive and its relay only, both done without
        // waiting: the usual receive fills one (the target's burst, coalesced), and a batch that
        // leaves one empty ends the wakeup without one more receive (`UdpIo::recv`).
        let mut buf = buffers.lease();
        let received = {
            let mut chunks = buf.chunks_mut(MAX_DATAGRAM);
            let mut slices: [IoSliceMut<'_>; REPLY_BATCH] =
                std::array::from_fn(|_| IoSliceMut::new(chunks.next().unwrap_or(&mut [])));
            // Readiness that was not (a spurious wakeup) is cleared by the receive, which would
            // then wait: the flow goes back to waiting without its buffer instead.
            ready_now(socket.recv(&mut slices, &mut meta))
        };
        let filled = match received {
            None => continue,
            Some(Ok(filled)) => &meta[..filled.min(REPLY_BATCH)],
            Some(Err(err)) => {
                if flow_recv_failed(&RelayError::Socket(err), &reporter) {
                    continue;
                }
                return;
            }
        };
        out.reserve(framed_capacity(filled, header.len()));
        // Counted once per receive, not per datagram.
        let (mut relayed, mut bytes) = (0, 0);
        for (i, m) in filled.iter().enumerate() {
            for payload in segments(&buf[i * MAX_DATAGRAM..], m) {
                out.extend_from_slice(&header);
                out.extend_from_slice(payload);
                match reporter.send_datagram(&conn, out.split().freeze()) {
                    Handed::Sent => {
                        relayed += 1;
                        bytes += payload.len();
                    }
                    Handed::Dropped => {}
                    // The connection is gone; its relay loop ends the forward and announces it.
                    Handed::Lost => {
                        reporter.stats().from_target_many(relayed, bytes);
                        return;
                    }
                }
            }
        }
        reporter.stats().from_target_many(relayed, bytes);
        activity.touch(Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::udp_io::tests::{refusal_pending, towards_closed_port};

    fn granted(tokens: &[&str]) -> Arc<Granted> {
        Arc::new(Granted::new(&Access {
            credentials: tokens.iter().map(|t| Credential::new(*t)).collect(),
            ..Access::default()
        }))
    }

    // The window the relay loop cannot see for itself: between a Hello's acceptance and the
    // loop's first wait, an update that removes the credential must still reach the connection.
    // r[verify forward.access.revoked]
    #[test]
    fn an_update_made_after_a_hello_is_accepted_is_one_its_connection_sees() {
        let (access, _) = watch::channel(granted(&["a-token", "b-token"]));
        let digest = CredentialDigest::of(b"a-token");
        let updates = hello_admitted(&access, &digest).expect("admitted");
        assert!(
            !updates.has_changed().expect("open"),
            "nothing to re-check yet"
        );
        access.send_replace(granted(&["b-token"]));
        assert!(
            updates.has_changed().expect("open"),
            "the removal is seen by the connection's first wait"
        );
        assert!(
            updates
                .borrow()
                .credentials
                .matching_digest(&digest)
                .is_none(),
            "and its re-check finds the credential gone"
        );
    }

    // r[verify forward.access.update]
    #[test]
    fn a_hello_after_an_update_is_decided_by_it() {
        let (access, _) = watch::channel(granted(&["a-token"]));
        access.send_replace(granted(&["b-token"]));
        assert!(hello_admitted(&access, &CredentialDigest::of(b"a-token")).is_none());
        let updates = hello_admitted(&access, &CredentialDigest::of(b"b-token")).expect("admitted");
        assert!(
            !updates.has_changed().expect("open"),
            "the update it was decided by is not re-checked again"
        );
    }

    async fn send_one(socket: &UdpIo, payload: &[u8], reporter: &Reporter) -> Sent {
        let mut gather = Gather::default();
        assert!(gather.push((), closed_target(socket), payload, 1));
        let gathered = gather.take().expect("gathered");
        send_to_target(socket, &gathered, reporter).await
    }

    fn closed_target(socket: &UdpIo) -> SocketAddr {
        socket.peer_addr().expect("connected")
    }

    /// A reporter of forward 1 that announces every report, with its counters and the count of
    /// reports announced.
    fn counting_reporter() -> (Reporter, Arc<Counters>, Arc<AtomicU64>) {
        let stats = Arc::new(Counters::default());
        let reported = Arc::new(AtomicU64::new(0));
        let seen = reported.clone();
        let reporter = Reporter::new(
            1,
            stats.clone(),
            Box::new(move |_, _| {
                seen.fetch_add(1, Ordering::SeqCst);
            }),
            Duration::ZERO,
        );
        (reporter, stats, reported)
    }

    // i[verify forward.relay.resilience]
    #[tokio::test]
    async fn a_refusal_discovered_on_send_is_reported_and_the_socket_keeps_working() {
        let closed = std::net::UdpSocket::bind("127.0.0.1:0")
            .and_then(|s| s.local_addr())
            .expect("free port");
        let socket = open_flow(closed).await.expect("flow socket").io;
        let (reporter, stats, reported) = counting_reporter();
        // Nothing receives on this socket, so the ICMP port-unreachable of one send surfaces as
        // ECONNREFUSED on a later send.
        let mut outcomes = Vec::new();
        for _ in 0..50 {
            let sent = send_one(&socket, b"x", &reporter).await;
            outcomes.push(sent);
            if sent == Sent::Dropped {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(outcomes.first(), Some(&Sent::Delivered));
        assert_eq!(outcomes.last(), Some(&Sent::Dropped), "{outcomes:?}");
        let snapshot = stats.snapshot();
        assert_eq!(snapshot.transient_errors, 1);
        assert_eq!(snapshot.dropped.error, 1);
        assert!(
            snapshot
                .last_error
                .as_deref()
                .is_some_and(|e| e.contains("refused"))
        );
        assert_eq!(reported.load(Ordering::SeqCst), 1);

        let target = UdpSocket::bind(closed).await.expect("target listens");
        assert_eq!(
            send_one(&socket, b"hello", &reporter).await,
            Sent::Delivered
        );
        let mut buf = [0u8; 16];
        let n = tokio::time::timeout(Duration::from_secs(5), target.recv(&mut buf))
            .await
            .expect("delivered")
            .expect("recv");
        assert_eq!(&buf[..n], b"hello");
    }

    // A refusal pending on the flow socket cuts the first datagram of a run, as it would alone.
    // r[verify forward.batch]
    #[tokio::test]
    async fn a_run_a_refusal_cuts_short_is_counted_as_one_by_one() {
        let (socket, closed) = towards_closed_port().await;
        refusal_pending(&socket, closed).await;
        let target = UdpSocket::bind(closed).await.expect("target listens");
        let (reporter, stats, _) = counting_reporter();
        let mut gather = Gather::default();
        for payload in [b"aa", b"bb"] {
            assert!(gather.push((), closed, payload, 64));
        }
        let gathered = gather.take().expect("gathered");
        assert_eq!(
            send_to_target(&socket, &gathered, &reporter).await,
            Sent::Dropped
        );
        let mut buf = [0u8; 16];
        let n = tokio::time::timeout(Duration::from_secs(5), target.recv(&mut buf))
            .await
            .expect("delivered")
            .expect("recv");
        assert_eq!(&buf[..n], b"bb");
        let snapshot = stats.snapshot();
        assert_eq!(
            (snapshot.to_target_datagrams, snapshot.to_target_bytes),
            (1, 2),
            "the datagram that left"
        );
        assert_eq!(snapshot.dropped.error, 1, "the one the refusal cost");
        assert_eq!(snapshot.transient_errors, 1);
    }

    fn at(addr: &str) -> SocketAddr {
        addr.parse().expect("address")
    }

    // r[verify forward.target.local]
    #[test]
    fn a_target_is_local_at_a_loopback_address_or_at_the_address_its_socket_sends_from() {
        let local = [
            // Loopback, whatever the source.
            ("127.0.0.1:5001", "127.0.0.1:40000"),
            ("127.0.0.53:53", "127.0.0.1:40000"),
            ("[::1]:5001", "[::1]:40000"),
            ("[::ffff:127.0.0.1]:5001", "[::ffff:127.0.0.1]:40000"),
            // The unspecified address, which the kernel delivers to the host itself.
            ("0.0.0.0:5001", "127.0.0.1:40000"),
            ("[::]:5001", "[::1]:40000"),
            // An address of the host's own that is not loopback: the kernel sends from it.
            ("192.0.2.7:5001", "192.0.2.7:40000"),
            ("[2001:db8::7]:5001", "[2001:db8::7]:40000"),
            ("[::ffff:192.0.2.7]:5001", "[::ffff:192.0.2.7]:40000"),
            // A link-local address of the host's own, scope and all.
            ("[fe80::7%2]:5001", "[fe80::7%2]:40000"),
        ];
        let remote = [
            ("198.51.100.1:5001", "192.0.2.7:40000"),
            ("[2001:db8::1]:5001", "[2001:db8::7]:40000"),
            ("[::ffff:198.51.100.1]:5001", "[::ffff:192.0.2.7]:40000"),
            // The same port is no match: only the address tells.
            ("198.51.100.1:40000", "192.0.2.7:40000"),
            // A neighbour on the same link.
            ("[fe80::1%2]:5001", "[fe80::7%2]:40000"),
        ];
        for (pairs, expected) in [(&local[..], true), (&remote[..], false)] {
            for (target, source) in pairs {
                assert_eq!(
                    on_this_machine(at(target), at(source)),
                    expected,
                    "{target} from {source}"
                );
            }
        }
    }

    // r[verify forward.target.local]
    #[test]
    fn the_relay_gives_way_after_a_burst_to_a_local_target_only() {
        // 15 and 14 datagrams of 1,162 bytes: a burst, and a run just short of one.
        assert!(gives_way(true, 15 * 1162));
        assert!(!gives_way(true, 14 * 1162));
        assert!(!gives_way(false, 15 * 1162), "a remote target: never");
        assert!(!gives_way(false, 14 * 1162));
        // The edge: 16 KiB exactly is a burst, a byte less is not.
        assert!(gives_way(true, 16 << 10));
        assert!(!gives_way(true, (16 << 10) - 1));
        assert!(!gives_way(false, 16 << 10));
        assert!(!gives_way(false, usize::MAX));
    }

    /// A relay as the node runs one of its connections (over loopback, from a peer that sends
    /// nothing), its forward 1 open towards `target`, whose `give_way` counts its calls instead
    /// of yielding; with the handles that keep the connection open.
    struct Relayed {
        relay: Relay,
        gave_way: Arc<AtomicU64>,
        stats: Arc<Counters>,
        _keep: (
            quinn::Endpoint,
            quinn::Endpoint,
            quinn::Connection,
            mpsc::Receiver<Message>,
            watch::Sender<Option<Shutdown>>,
            tempfile::TempDir,
        ),
    }

    async fn relay_towards(target: SocketAddr) -> Relayed {
        let dir = tempfile::tempdir().expect("tempdir");
        let identity = Identity::load_or_create(dir.path()).expect("identity");
        let config = ServerConfig::new(at("127.0.0.1:0"), dir.path());
        let node = endpoint(
            endpoint_socket(config.listen).expect("socket"),
            Some(quinn_server_config(&identity, config.idle_timeout).expect("server config")),
        )
        .expect("node");
        let (client_config, _) =
            crate::client::quinn_client_config(identity.fingerprint(), config.idle_timeout)
                .expect("client config");
        let peer =
            endpoint(endpoint_socket(at("127.0.0.1:0")).expect("socket"), None).expect("peer");
        let connecting = peer
            .connect_with(
                client_config,
                node.local_addr().expect("addr"),
                crate::identity::SERVER_NAME,
            )
            .expect("connect");
        let incoming = node.accept().await.expect("incoming");
        let (conn, theirs) = tokio::join!(incoming, connecting);
        let (conn, theirs) = (conn.expect("accepted"), theirs.expect("connected"));

        let gave_way = Arc::new(AtomicU64::new(0));
        let counted = gave_way.clone();
        let mut shared = Shared::new(&config);
        shared.give_way = Box::new(move || {
            counted.fetch_add(1, Ordering::SeqCst);
        });
        let (reporter, stats, _) = counting_reporter();
        let (writer, written) = mpsc::channel(16);
        let (stop, shutdown) = watch::channel(None);
        let forward = ServerForward {
            target,
            flows: HashMap::new(),
            flow_count: Arc::new(AtomicU64::new(0)),
            reporter: Arc::new(reporter),
        };
        let relay = Relay {
            id: 1,
            client: conn.remote_address(),
            conn,
            shared: Arc::new(shared),
            writer,
            shutdown,
            credential: CredentialDigest::of(b"a-token"),
            forwards: HashMap::from([(1, forward)]),
            gather: Gather::default(),
            gather_max: 1,
        };
        Relayed {
            relay,
            gave_way,
            stats,
            _keep: (node, peer, theirs, written, stop, dir),
        }
    }

    /// Relays `count` datagrams of 1,162 bytes of forward 1's flow 1 as one run, then sends
    /// what the relay gathered.
    async fn relay_run(relay: &mut Relay, count: usize) {
        let datagram = crate::wire::encode_datagram(
            FlowId {
                forward: 1,
                flow: 1,
            },
            &[7u8; 1162],
        );
        let now = Instant::now();
        for _ in 0..count {
            relay.datagram(&datagram, now).await;
        }
        relay.flush().await;
    }

    /// Forward 1's flow 1.
    fn flow(relay: &mut Relay) -> &mut Flow {
        relay
            .forwards
            .get_mut(&1)
            .and_then(|forward| forward.flows.get_mut(&1))
            .expect("flow 1 open")
    }

    // The relay's own sends, to a target on loopback: its burst is followed by a yield, a run
    // short of one is not, and nothing is towards a flow that is not local. The runs are the
    // relay's own (no batching of the kernel's or quinn's decides them).
    // r[verify forward.target.local]
    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[tokio::test]
    async fn the_relay_gives_way_after_a_burst_it_sent_a_local_target_and_not_otherwise() {
        let target = UdpSocket::bind("127.0.0.1:0").await.expect("target");
        let mut relayed = relay_towards(target.local_addr().expect("addr")).await;
        let relay = &mut relayed.relay;

        relay_run(relay, 14).await;
        assert!(flow(relay).local, "a loopback target is local");
        if flow(relay).socket.max_segments() < 15 {
            // Without segmentation offload every send is one datagram: no send is a burst.
            eprintln!(
                "SKIPPED: this kernel sends no run of 15 datagrams at once (no UDP GSO); the \
                 relay's bursts cannot be checked here"
            );
            return;
        }
        assert_eq!(
            relayed.gave_way.load(Ordering::SeqCst),
            0,
            "14 datagrams (16,268 bytes) are no burst"
        );

        relay_run(relay, 15).await;
        assert_eq!(
            relayed.gave_way.load(Ordering::SeqCst),
            1,
            "15 datagrams (17,430 bytes) are: the relay gave way after sending them"
        );

        flow(relay).local = false;
        relay_run(relay, 15).await;
        assert_eq!(
            relayed.gave_way.load(Ordering::SeqCst),
            1,
            "towards a target that is not local, never"
        );

        // Every datagram reached the target, in the three sends the counts were taken after.
        assert_eq!(relayed.stats.snapshot().to_target_datagrams, 14 + 15 + 15);
        let mut buf = vec![0u8; MAX_DATAGRAM];
        for n in 0..14 + 15 + 15 {
            let len = tokio::time::timeout(Duration::from_secs(5), target.recv(&mut buf))
                .await
                .unwrap_or_else(|_| panic!("datagram {n} in time"))
                .expect("recv");
            assert_eq!(len, 1162);
        }
    }

    // What `open_flow` decides for a real socket: a loopback target is local, one on another
    // machine is not (towards it the node keeps its CPU).
    // r[verify forward.target.local]
    #[tokio::test]
    async fn a_flow_towards_loopback_is_local_and_one_towards_another_machine_is_not() {
        let target = UdpSocket::bind("127.0.0.1:0").await.expect("target");
        let flow = open_flow(target.local_addr().expect("addr"))
            .await
            .expect("flow");
        assert!(flow.local, "a loopback target is local");
        // TEST-NET-3 is never an address of this machine, and connecting a UDP socket sends
        // nothing; a machine with no route at all cannot connect towards it.
        match open_flow(at("203.0.113.1:9")).await {
            Ok(flow) => assert!(!flow.local, "a target on another machine is not local"),
            Err(err) => eprintln!(
                "SKIPPED the remote half: no route towards 203.0.113.1 on this machine ({err})"
            ),
        }
    }

    // i[verify forward.relay.resilience]
    #[tokio::test]
    async fn a_refusal_received_on_a_flow_socket_is_reported_and_the_next_reply_is_received() {
        let (socket, closed) = towards_closed_port().await;
        refusal_pending(&socket, closed).await;
        let (reporter, stats, reported) = counting_reporter();
        let mut buf = vec![0u8; MAX_DATAGRAM];
        let mut meta = [RecvMeta::default()];
        let refused = socket
            .recv(&mut [IoSliceMut::new(&mut buf)], &mut meta)
            .await
            .expect_err("the refusal");
        assert!(
            flow_recv_failed(&RelayError::Socket(refused), &reporter),
            "a refusal: receiving goes on"
        );
        let snapshot = stats.snapshot();
        assert_eq!(snapshot.transient_errors, 1);
        assert_eq!(snapshot.dropped.error, 0, "no datagram was lost");
        assert!(
            snapshot
                .last_error
                .as_deref()
                .is_some_and(|e| e.contains("refused"))
        );
        assert_eq!(reported.load(Ordering::SeqCst), 1);

        // The socket is still the flow's: the target's reply arrives on it.
        let target = UdpSocket::bind(closed).await.expect("target listens");
        target
            .send_to(b"reply", socket.local_addr().expect("addr"))
            .await
            .expect("reply");
        let filled = tokio::time::timeout(
            Duration::from_secs(5),
            socket.recv(&mut [IoSliceMut::new(&mut buf)], &mut meta),
        )
        .await
        .expect("the reply in time")
        .expect("recv");
        assert_eq!((filled, &buf[..meta[0].len]), (1, &b"reply"[..]));

        // A socket that is gone ends the flow's replies.
        let gone = RelayError::Socket(std::io::Error::from_raw_os_error(9));
        assert!(
            !flow_recv_failed(&gone, &reporter),
            "EBADF: the socket is gone"
        );
    }
}
