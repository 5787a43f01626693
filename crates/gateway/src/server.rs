//! The gateway: the accept loop, one task per connection, and pushes to users and rooms.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use futures_util::{SinkExt, StreamExt};
use holdfast_retry::Class;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::AbortHandle;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::handshake::server::Callback;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::http::StatusCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{Error as WsError, Message, Utf8Bytes};

use crate::accept::{AcceptPacer, AfterError};
use crate::cluster::{CasOutcome, Cluster, Replica, RoutingMap, ServiceRegistry};
use crate::config::{ConfigError, GatewayConfig};
use crate::history::Pos;
use crate::limits::{Admission, Limits, Refusal};
use crate::protocol::{ClientMessage, JoinRefusal, close};
use crate::registry::{ConnId, Registry};
use crate::server::drain::DrainSignal;
use crate::stats::Stats;
use crate::sync::lock;
use crate::tls::{Stream, Tls, TlsError, TlsFiles, TlsReload};

// The server's parts, each owning its state: submodules, so that only the server depends on
// them and they on it, with no cycle between the crate's modules.
pub(crate) mod delivery;
pub mod drain;
pub(crate) mod membership;

/// A client's WebSocket, over plain TCP or TLS.
pub(crate) type Ws = WebSocketStream<Stream>;

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The error.
        source: std::io::Error,
    },
    /// The TLS certificate pair is unusable (the error names the file).
    #[error("TLS: {0}")]
    Tls(#[from] TlsError),
    /// The configuration is inconsistent.
    #[error("{0}")]
    Config(#[from] ConfigError),
}

/// What the server keeps per connection.
#[derive(Clone)]
pub(crate) struct ConnHandle {
    // tungstenite's shared text: one allocation per push, a reference count per recipient.
    queue: mpsc::Sender<Utf8Bytes>,
    abort: AbortHandle,
}

impl ConnHandle {
    /// Ends the connection at once (its teardown still runs).
    pub(crate) fn force_close(&self) {
        self.abort.abort();
    }
}

pub(crate) struct Inner {
    pub(crate) config: GatewayConfig,
    pub(crate) replica: Replica,
    pub(crate) local: SocketAddr,
    pub(crate) registry: Registry<ConnHandle>,
    pub(crate) service: Arc<dyn ServiceRegistry>,
    pub(crate) routing: Arc<dyn RoutingMap>,
    /// Where the gateway stands between its start and its stop.
    pub(crate) phase: crate::phase::PhaseCell,
    pub(crate) stats: Stats,
    pub(crate) stop_accept: watch::Sender<bool>,
    pub(crate) accept_task: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The drain's own state: its signal to the connections, the close frames it sent, the
    /// routes it will clear, its report.
    pub(crate) drain: crate::server::drain::DrainState,
    pub(crate) limits: Arc<Limits>,
    pub(crate) tls: Option<Tls>,
    pub(crate) membership: crate::server::membership::Membership,
    pub(crate) history: Arc<dyn crate::history::History>,
    /// Room pushes hold their room's lock from the history append to the broadcast, so this
    /// replica's members, and the bus, see one room's messages in position order.
    pub(crate) rooms: crate::server::delivery::Rooms,
}

/// A running gateway. Cheap to clone.
#[derive(Clone)]
pub struct Gateway {
    pub(crate) inner: Arc<Inner>,
}

/// What a push reached.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Delivery {
    /// Connections the message was queued for.
    pub queued: usize,
    /// Connections disconnected as slow consumers instead.
    pub slow_consumers: usize,
    /// Whether the push went on to other replicas (always `NotNeeded` for the `_local` pushes).
    pub forwarded: crate::server::delivery::Forward,
    /// The message's position in its room's history (room pushes with history only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pos: Option<crate::history::Pos>,
    /// Refused, sent nowhere and kept in no history: the text is larger than the message size
    /// limit (`config.max_message_size`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub too_large: bool,
    /// Refused, sent nowhere and kept in no history: the room's name is longer than any join
    /// allows (the room name limit, `config.max_room_name`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub room_name_too_long: bool,
}

impl Gateway {
    /// [`Gateway::start_cluster`] on `service` and `routing`, with a bus of its own: pushes reach
    /// this replica's connections only.
    pub async fn start(
        config: GatewayConfig,
        service: Arc<dyn ServiceRegistry>,
        routing: Arc<dyn RoutingMap>,
    ) -> Result<Gateway, StartError> {
        let cluster = Cluster {
            registry: service,
            routing,
            bus: Arc::new(crate::bus::MemoryBus::new()),
            seed: None,
            history: None,
        };
        Gateway::start_cluster(config, cluster).await
    }

    /// Binds and starts accepting, registers the replica in the background (retried until it
    /// holds; not ready until then), and receives what other replicas push to it.
    pub async fn start_cluster(
        config: GatewayConfig,
        cluster: Cluster,
    ) -> Result<Gateway, StartError> {
        let Cluster {
            registry: service,
            routing,
            bus,
            seed,
            history,
        } = cluster;
        let history = history.unwrap_or_else(|| Arc::new(crate::history::MemoryHistory::new()));
        let (limits, tls) = edge(&config)?;
        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|source| StartError::Bind {
                    addr: config.listen,
                    source,
                })?;
        let local = listener.local_addr().map_err(|source| StartError::Bind {
            addr: config.listen,
            source,
        })?;
        let replica = Replica {
            id: config.replica_id.clone(),
            address: config
                .advertise
                .clone()
                .unwrap_or_else(|| local.to_string()),
        };
        let replica_id = replica.id.clone();
        let (stop_accept, stop_rx) = watch::channel(false);
        let inner = Arc::new(Inner {
            registry: Registry::new(config.shards),
            config,
            replica,
            local,
            service,
            routing,
            phase: crate::phase::PhaseCell::default(),
            stats: Stats::default(),
            stop_accept,
            accept_task: Mutex::new(None),
            drain: crate::server::drain::DrainState::new(),
            limits,
            tls,
            membership: crate::server::membership::Membership::new(
                bus,
                seed.unwrap_or_else(|| crate::backoff::replica_seed(&replica_id)),
            ),
            history,
            rooms: crate::server::delivery::Rooms::new(),
        });
        let every = inner.config.key_reload_interval;
        // Polled even without files now: a replace may give the key set files later.
        if !every.is_zero() {
            tokio::spawn(watch_keys(Arc::downgrade(&inner), every, stop_rx.clone()));
        }
        let task = tokio::spawn(accept_loop(inner.clone(), listener, stop_rx));
        *lock(&inner.accept_task) = Some(task);
        crate::server::membership::Membership::join(&inner).await;
        Ok(Gateway { inner })
    }

    /// The largest text a client may send, and a push may carry.
    pub fn max_message_size(&self) -> usize {
        self.inner.config.max_message_size
    }

    /// Whether `presented` is the configured publish key; `None` when there is none.
    pub fn publish_key_matches(&self, presented: &str) -> Option<bool> {
        self.inner
            .config
            .publish_key
            .as_ref()
            .map(|k| k.matches(presented))
    }

    /// The replica as registered.
    pub fn replica(&self) -> &Replica {
        &self.inner.replica
    }

    /// The address clients connect to.
    pub fn local_addr(&self) -> SocketAddr {
        self.inner.local
    }

    // r[impl gateway.cluster.ready]
    /// Whether the gateway is ready: registered, the registration still holding, and no drain
    /// begun.
    pub fn is_ready(&self) -> bool {
        self.inner.phase.is_ready()
            && self.inner.membership.is_registered()
            && self.inner.service.is_live()
    }

    /// Whether the replica's registration has succeeded (and no drain has begun since).
    pub fn is_registered(&self) -> bool {
        self.inner.membership.is_registered()
    }

    /// How the gateway stands in its cluster.
    pub fn cluster_health(&self) -> crate::server::membership::ClusterHealth {
        self.inner.membership.health(self.inner.service.as_ref())
    }

    /// Connections registered, authenticated or not.
    pub fn connections(&self) -> usize {
        self.inner.registry.len()
    }

    /// Connections that have authenticated.
    pub fn authenticated(&self) -> usize {
        self.inner.registry.authenticated()
    }

    /// The counters.
    pub fn stats(&self) -> crate::stats::StatsSnapshot {
        self.inner.stats.snapshot()
    }

    /// Connections admitted that have not authenticated yet.
    pub fn unauthenticated(&self) -> usize {
        self.inner.limits.unauthenticated()
    }

    /// Checks the TLS files now (instead of at the next connection after the check interval):
    /// a changed, usable pair is served to new connections from here on; open connections keep
    /// theirs. The node calls this when the issuance module renews the certificate.
    pub fn reload_tls(&self) -> TlsReload {
        match &self.inner.tls {
            None => TlsReload::Off,
            Some(tls) => tls.store.refresh(&self.inner.stats, Instant::now(), true),
        }
    }

    /// Checks the token key files now (instead of at the next poll): changed, usable keys
    /// verify tokens from here on; a broken file keeps the previous keys, with a fault.
    pub fn reload_keys(&self) -> crate::token::KeyReload {
        reload_keys(&self.inner)
    }

    /// Verifies client tokens with `keys` from now on, in place of every key in use, and polls
    /// `keys`' files from then on, every `key_reload_interval` (never when it is zero; a
    /// [`Gateway::reload_keys`] still reads them) (the node's reload, when the key files' paths
    /// changed): an
    /// authenticated connection stays, whatever key its token was signed with; a token signed
    /// only with a key left out is refused from now on (`unknown token key`). The last key
    /// fault is over. Reads nothing: [`NewKeys::read`](crate::token::NewKeys::read) did.
    // r[impl gateway.auth.key-replace]
    pub fn take_token_keys(&self, keys: crate::token::NewKeys) {
        let files: Vec<_> = keys.sources().iter().map(|s| s.path.clone()).collect();
        self.inner.config.token_key.replace(keys);
        self.inner.stats.key_reloaded(true);
        tracing::info!(replica = %self.inner.replica.id, ?files, "token key files replaced");
    }

    /// Reads `sources` and verifies client tokens with their keys from now on
    /// ([`Gateway::take_token_keys`]). Files that cannot be read or hold no usable key change
    /// nothing: the keys and files in use stay, and the error names the file. Blocking file I/O:
    /// call it off the async runtime's workers.
    // r[impl gateway.auth.key-replace]
    pub fn replace_token_keys(
        &self,
        sources: Vec<crate::token::KeySource>,
    ) -> Result<(), crate::token::KeyError> {
        let keys = crate::token::NewKeys::read(sources)?;
        self.take_token_keys(keys);
        Ok(())
    }

    /// Serves `pair` to every TLS handshake that starts from now on and watches its files from
    /// then on (the node's reload, when the pair's paths changed); connections already open
    /// keep their session and stay up. Reads nothing:
    /// [`NewTlsPair::read`](crate::tls::NewTlsPair::read) did. `false`, and nothing changes,
    /// when the gateway serves plain `ws://` (TLS is not turned on or off while it runs).
    // r[impl gateway.tls.replace+2]
    pub fn take_tls(&self, pair: crate::tls::NewTlsPair) -> bool {
        match &self.inner.tls {
            Some(tls) => {
                tls.store.replace(pair, &self.inner.stats);
                true
            }
            None => false,
        }
    }

    /// Reads the pair in `files` and serves it from now on ([`Gateway::take_tls`]). A pair that
    /// cannot be read or used changes nothing: the pair and files in use stay, and the error
    /// names the file. `Ok(false)` for a gateway serving plain `ws://`. Blocking file I/O: call
    /// it off the async runtime's workers.
    // r[impl gateway.tls.replace+2]
    pub fn replace_tls(&self, files: TlsFiles) -> Result<bool, TlsError> {
        if self.inner.tls.is_none() {
            return Ok(false);
        }
        let pair = crate::tls::NewTlsPair::read(files)?;
        Ok(self.take_tls(pair))
    }

    /// The TLS files served now (`None`: plain `ws://`).
    pub fn tls_files(&self) -> Option<TlsFiles> {
        self.inner.tls.as_ref().map(|t| t.store.files())
    }

    /// The token key files in use now.
    pub fn token_key_sources(&self) -> Vec<crate::token::KeySource> {
        self.inner.config.token_key.sources()
    }

    /// Replaces the admission and room limits while the gateway runs (the node's reload): each
    /// connection that arrives and each join from now on is held to `limits`; connections open
    /// and rooms joined already stay, nothing is closed.
    // r[impl gateway.edge.live-limits]
    pub fn update_limits(&self, limits: crate::config::LiveLimits) {
        self.inner.limits.set(limits);
        tracing::info!(replica = %self.inner.replica.id, ?limits, "gateway: limits updated");
    }

    /// The limits in force now.
    pub fn live_limits(&self) -> crate::config::LiveLimits {
        self.inner.limits.get()
    }

    /// The last failed reload of the token key files, until one succeeds.
    pub fn key_fault(&self) -> Option<crate::token::KeyError> {
        self.inner.config.token_key.fault()
    }

    /// Ends the gateway the way a killed process would: it stops accepting and drops every
    /// connection without a close frame, deregisters nothing and releases no route. This is the
    /// control arm that tests and the drain demo compare the drain against.
    pub fn abandon(&self) {
        // Already stopped (drained, or abandoned before): nothing changes.
        let _ = self.inner.phase.stop();
        let _ = self.inner.stop_accept.send(true);
        self.inner.membership.abandon();
        self.inner.service.abandon();
        for (_, handle) in self.inner.registry.snapshot() {
            if let Some(h) = handle {
                h.force_close();
            }
        }
    }

    /// Queues a text message for every connection of `user` on this replica only.
    pub fn push_user_local(&self, user: &str, text: &str) -> Delivery {
        let ids = self.inner.registry.connections_of(user);
        self.push(&ids, text)
    }

    /// Queues a text message for every connection in `room` on this replica only.
    pub fn push_room_local(&self, room: &str, text: &str) -> Delivery {
        let ids = self.inner.registry.members(room);
        self.push(&ids, text)
    }

    // r[impl gateway.send-queue.slow-consumer]
    fn push(&self, ids: &[ConnId], text: &str) -> Delivery {
        let text = Utf8Bytes::from(text);
        let mut d = Delivery::default();
        let mut slow = Vec::new();
        self.inner.registry.for_each_handle(ids, |id, h| {
            match h.queue.try_send(text.clone()) {
                Ok(()) => d.queued += 1,
                // A full queue means the client is not reading: disconnect it rather than
                // buffer without bound or stall the other recipients.
                Err(mpsc::error::TrySendError::Full(_)) => slow.push((id, h.clone())),
                // The connection is ending; its teardown is already under way.
                Err(mpsc::error::TrySendError::Closed(_)) => {}
            }
        });
        // Logged and closed once the shard locks are released: a log line is I/O, and the other
        // connections of those shards must not wait on it to authenticate, join or tear down.
        for (id, h) in slow {
            d.slow_consumers += 1;
            self.inner.stats.slow_consumer(id);
            h.force_close();
        }
        d
    }
}

// The edge's TLS, here rather than in tls.rs and acme_alpn.rs so that they need nothing of the
// server.
impl Gateway {
    /// The served certificate's notAfter while it has passed (every `wss://` handshake is then
    /// refused until renewed files replace it); `None` when it has not, or without TLS.
    pub fn tls_expired_since(&self) -> Option<SystemTime> {
        self.inner.tls.as_ref()?.store.expired_since()
    }
}

impl Gateway {
    /// Answers TLS-ALPN-01 validations on this gateway's TLS listener with `challenges` from now
    /// on (replacing any given before). `false`, and nothing changes, when the gateway serves
    /// plain `ws://`.
    // r[impl gateway.tls.alpn01]
    pub fn answer_tls_alpn01(&self, challenges: Arc<dyn crate::acme_alpn::AcmeTlsAlpn>) -> bool {
        match &self.inner.tls {
            Some(tls) => {
                tls.set_alpn(challenges);
                true
            }
            None => false,
        }
    }
}

/// The limits and the TLS acceptor, checked before anything is bound or registered.
fn edge(config: &GatewayConfig) -> Result<(Arc<Limits>, Option<Tls>), StartError> {
    config.validate()?;
    let limits = Limits::new(config.live_limits());
    let tls = match &config.tls {
        Some(files) => Some(Tls::new(files.clone(), config.tls_check_interval)?),
        None => None,
    };
    Ok((limits, tls))
}

fn reload_keys(inner: &Inner) -> crate::token::KeyReload {
    use crate::token::KeyReload;
    let before = inner.config.token_key.fault();
    let r = inner.config.token_key.reload();
    match &r {
        // The same failure as the last check's: counted and logged once per change.
        KeyReload::Failed(e) if before.as_ref() == Some(e) => {}
        KeyReload::Reloaded => {
            inner.stats.key_reloaded(true);
            tracing::info!(replica = %inner.replica.id, "token keys reloaded");
        }
        KeyReload::Failed(e) => {
            inner.stats.key_reloaded(false);
            tracing::warn!(replica = %inner.replica.id, error = %e, "token key files changed but cannot be used; keeping the previous keys");
        }
        KeyReload::Off | KeyReload::Unchanged => {}
    }
    r
}

// r[impl gateway.auth.key-reload+2]
/// Polls the token key files every `every` until the gateway stops or is dropped.
async fn watch_keys(
    inner: std::sync::Weak<Inner>,
    every: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval_at(Instant::now() + every, every);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stopped(&mut stop) => break,
            _ = tick.tick() => match inner.upgrade() {
                // File I/O off the runtime's workers: a slow or odd file cannot stall them.
                // A key set with no files (a secret given in code, until a replace gives it
                // some) has nothing to read: no blocking thread for it.
                Some(inner) if inner.config.token_key.sources().is_empty() => {}
                Some(inner) => {
                    if tokio::task::spawn_blocking(move || reload_keys(&inner)).await.is_err() {
                        break;
                    }
                }
                None => break,
            },
        }
    }
}

async fn accept_loop(inner: Arc<Inner>, listener: TcpListener, mut stop: watch::Receiver<bool>) {
    let mut pacer = AcceptPacer::new(&inner.replica.id);
    loop {
        tokio::select! {
            _ = stopped(&mut stop) => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    pacer.accepted();
                    spawn_connection(&inner, stream, peer);
                }
                Err(e) => match pacer.failed(&e) {
                    // One failed accept, or a shortage such as EMFILE: report, back off so a
                    // persistent condition does not spin, go on. A stop ends the pause.
                    AfterError::Pause(pause) => {
                        inner.stats.accept_error();
                        tracing::warn!(replica = %inner.replica.id, error = %e, ?pause, "accept failed; continuing");
                        tokio::select! {
                            _ = stopped(&mut stop) => break,
                            _ = tokio::time::sleep(pause) => {}
                        }
                    }
                    AfterError::Stop => {
                        tracing::error!(replica = %inner.replica.id, error = %e, "listener lost; no longer accepting");
                        break;
                    }
                },
            },
        }
    }
}

async fn stopped(stop: &mut watch::Receiver<bool>) {
    // A dropped sender also means stop.
    let _ = stop.wait_for(|s| *s).await;
}

fn spawn_connection(inner: &Arc<Inner>, stream: TcpStream, peer: SocketAddr) {
    inner.stats.accepted();
    let admission = inner.limits.admit(peer.ip());
    if let (Err(over), Some(_)) = (&admission, &inner.tls) {
        refuse_before_tls(inner, stream, peer, *over);
        return;
    }
    let id = inner.registry.accept();
    let (queue, queue_rx) = mpsc::channel(inner.config.send_queue.max(1));
    let (go, go_rx) = oneshot::channel();
    let task = tokio::spawn(connection(
        inner.clone(),
        id,
        stream,
        peer,
        admission,
        queue_rx,
        go_rx,
    ));
    let handle = ConnHandle {
        queue,
        abort: task.abort_handle(),
    };
    if inner.registry.set_handle(id, handle).is_ok() {
        let _ = go.send(());
    }
}

/// Closes a socket over a limit on a TLS listener at accept: a 503 could only be sent after a
/// TLS handshake, which is the expensive part (key exchange and signature) a flood past the
/// limits must not buy. The client's handshake fails at once, with no ServerHello; the socket
/// never enters the registry and holds no task, timer or buffer.
// r[impl gateway.edge.refuse-before-tls]
fn refuse_before_tls(inner: &Inner, stream: TcpStream, peer: SocketAddr, over: Refusal) {
    inner.stats.refused_limit(over);
    tracing::debug!(%peer, reason = over.reason(), "refused before the TLS handshake");
    drop(stream);
}

/// Removes the connection from the registry however its task ends (returns, or is aborted).
struct Teardown {
    inner: Arc<Inner>,
    id: ConnId,
}

impl Drop for Teardown {
    fn drop(&mut self) {
        let Some(removed) = self.inner.registry.remove(self.id) else {
            return;
        };
        let Some(user) = removed.user else { return };
        if removed.user_still_connected || !self.inner.phase.releases_routes() {
            // Another connection still needs the route, or the drain clears routes itself.
            return;
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(release_route(self.inner.clone(), user));
        }
    }
}

/// Compare-and-deletes a user's route after their last connection here ended.
async fn release_route(inner: Arc<Inner>, user: String) {
    match inner
        .routing
        .compare_and_delete(&user, &inner.replica.id)
        .await
    {
        Ok(outcome) => {
            if outcome == CasOutcome::Cleared && !inner.registry.connections_of(&user).is_empty() {
                // The user reconnected here while the delete was in flight: route them again
                // (still owned if the add fails: the map's refresh writes it later).
                if let Err(e) = inner.routing.set_route(&user, &inner.replica.id).await {
                    inner.stats.routing_error();
                    tracing::warn!(replica = %inner.replica.id, error = %e, "cannot route user here");
                }
                return;
            }
            inner.drain.route_released(&user);
        }
        Err(e) => {
            // Still owned: the drain retries it.
            tracing::warn!(replica = %inner.replica.id, error = %e, "routing cleanup failed");
        }
    }
}

enum Ending {
    /// Close with this code and reason, then wait for the client's close.
    Close(CloseCode, String),
    /// The channel is gone: nothing more can be sent.
    Gone,
}

// r[impl gateway.edge.footprint]
async fn connection(
    inner: Arc<Inner>,
    id: ConnId,
    stream: TcpStream,
    peer: SocketAddr,
    admission: Result<Admission, Refusal>,
    mut queue: mpsc::Receiver<Utf8Bytes>,
    go: oneshot::Receiver<()>,
) {
    let _teardown = Teardown {
        inner: inner.clone(),
        id,
    };
    // Declared after the teardown so it is dropped first: a connection gone from the registry
    // no longer holds its place under the limits.
    let admission = admission;
    if go.await.is_err() {
        return;
    }
    let cfg = &inner.config;
    let refused = admission.as_ref().err().copied();
    if let Some(over) = refused {
        // Counted at accept, so a refused socket that never sends its request counts too.
        inner.stats.refused_limit(over);
    }
    let gate = inner.clone();
    // The callback's signature is tungstenite's; its error type is not ours to shrink.
    #[allow(clippy::result_large_err)]
    let callback = move |_req: &Request, resp: Response| -> Result<Response, ErrorResponse> {
        if gate.phase.refuses_upgrades() {
            gate.stats.refused();
            return Err(refusal(gate.config.drain.retry_after_secs));
        }
        if let Some(over) = refused {
            return Err(limit_refusal(over, gate.config.drain.retry_after_secs));
        }
        Ok(resp)
    };
    // Boxed, here and for a client's message and the drain below: a future awaited inline makes
    // every connection's task as large as its largest step for its whole life, and these steps
    // (TLS and HTTP handshake; join with its history read; the drain's close) are rare or brief
    // beside an idle connection's wait.
    let handshake = Box::pin(upgrade(&inner, stream, callback));
    let window = match refused {
        Some(_) => cfg.handshake_timeout.min(cfg.refusal_timeout),
        None => cfg.handshake_timeout,
    };
    let mut ws = match tokio::time::timeout(window, handshake).await {
        Ok(Ok(ws)) => ws,
        Ok(Err(UpgradeError::Validated)) => {
            tracing::debug!(conn = %id, %peer, "TLS-ALPN-01 validation answered");
            return;
        }
        Ok(Err(e)) => {
            tracing::debug!(conn = %id, %peer, error = %e, "handshake failed");
            return;
        }
        Err(_) => {
            tracing::debug!(conn = %id, %peer, "handshake timed out");
            return;
        }
    };
    // Refused connections never reach this point: their upgrade was answered with 503.
    let Ok(mut admission) = admission else { return };
    let ending = serve(&inner, id, &mut ws, &mut queue, &mut admission).await;
    if let Ending::Close(code, reason) = ending {
        let _ = ws
            .send(Message::Close(Some(CloseFrame {
                code,
                reason: reason.into(),
            })))
            .await;
        // Wait for the client's close, but not for ever: a client that does not read never
        // answers.
        let _ = tokio::time::timeout(inner.config.close_timeout, async {
            while let Some(Ok(_)) = ws.next().await {}
        })
        .await;
    }
}

/// Why a connection did not complete its upgrade (logged at debug level).
#[derive(Debug, thiserror::Error)]
enum UpgradeError {
    #[error("TLS handshake: {0}")]
    Tls(std::io::Error),
    #[error("WebSocket handshake: {0}")]
    Ws(WsError),
    /// Not a failure: a TLS-ALPN-01 validation was answered and the connection closed.
    #[error("TLS-ALPN-01 validation answered")]
    Validated,
}

/// The TLS handshake (when configured), then the WebSocket upgrade with the configured buffers.
async fn upgrade<C: Callback + Unpin>(
    inner: &Arc<Inner>,
    tcp: TcpStream,
    callback: C,
) -> Result<Ws, UpgradeError> {
    let stream = match &inner.tls {
        Some(tls) => tls
            .accept(&inner.stats, tcp)
            .await
            .map_err(UpgradeError::Tls)?
            .ok_or(UpgradeError::Validated)?,
        None => Stream::Plain(tcp),
    };
    tokio_tungstenite::accept_hdr_async_with_config(
        stream,
        callback,
        Some(inner.config.websocket()),
    )
    .await
    .map_err(UpgradeError::Ws)
}

/// The 503 for a connection over a limit: refused before the upgrade, told when to retry.
// r[impl gateway.edge.limits+3]
fn limit_refusal(over: Refusal, retry_after_secs: u32) -> ErrorResponse {
    let mut resp = ErrorResponse::new(Some(over.reason().to_owned()));
    *resp.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    if let Ok(v) = retry_after_secs.to_string().parse() {
        resp.headers_mut().insert("retry-after", v);
    }
    resp
}

// r[impl gateway.drain.refuse]
fn refusal(retry_after_secs: u32) -> ErrorResponse {
    let mut resp = ErrorResponse::new(Some("draining".to_owned()));
    *resp.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    if let Ok(v) = retry_after_secs.to_string().parse() {
        resp.headers_mut().insert("retry-after", v);
    }
    resp
}

// r[impl gateway.edge.footprint]
async fn serve(
    inner: &Arc<Inner>,
    id: ConnId,
    ws: &mut Ws,
    queue: &mut mpsc::Receiver<Utf8Bytes>,
    admission: &mut Admission,
) -> Ending {
    let cfg = &inner.config;
    let mut drain = inner.drain.subscribe();
    // One future for the whole connection, not one per loop turn: re-creating `changed()` on
    // every message registered and removed a waiter on the watch shared by all connections.
    let signalled = async move { drain.wait_for(|s| s.is_some()).await.ok().and_then(|s| *s) };
    tokio::pin!(signalled);
    let mut ping = tokio::time::interval_at(Instant::now() + cfg.ping_interval, cfg.ping_interval);
    ping.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let auth_deadline = tokio::time::sleep(cfg.auth_timeout);
    tokio::pin!(auth_deadline);
    let mut session = Session::default();
    let mut last_seen = Instant::now();
    loop {
        tokio::select! {
            biased;
            signal = &mut signalled => match signal {
                Some(signal) => return Box::pin(drain_connection(inner, id, ws, queue, signal, &session.marks)).await,
                None => return Ending::Close(close::GOING_AWAY, "gateway stopped".into()),
            },
            _ = &mut auth_deadline, if !session.authed => {
                inner.stats.auth_failure();
                return Ending::Close(close::POLICY, "authentication timeout".into());
            }
            // r[impl gateway.keepalive]
            _ = ping.tick() => {
                if last_seen.elapsed() >= cfg.idle_timeout {
                    inner.stats.idle();
                    return Ending::Close(close::IDLE, "idle timeout".into());
                }
                if let Err(e) = ws.send(Message::Ping(Default::default())).await {
                    if let Some(end) = on_error(e) { return end; }
                }
            }
            out = queue.recv() => match out {
                Some(text) => {
                    // Send what is already queued behind it in the same turn (at most a queue's
                    // worth): a burst then costs one pass of this select per connection, not one
                    // per message.
                    let mut next = Some(text);
                    let mut budget = cfg.send_queue.max(1);
                    while let Some(text) = next.take() {
                        if recovered_already(&session.marks, &text) {
                            next = queue.try_recv().ok();
                            continue;
                        }
                        if let Err(e) = ws.send(Message::Text(text)).await {
                            if let Some(end) = on_error(e) { return end; }
                            break;
                        }
                        inner.stats.message_out();
                        budget -= 1;
                        if budget > 0 {
                            next = queue.try_recv().ok();
                        }
                    }
                }
                None => return Ending::Gone,
            },
            incoming = ws.next() => {
                last_seen = Instant::now();
                match incoming {
                    None => return Ending::Gone,
                    Some(Err(e)) => if let Some(end) = on_error(e) { return end; },
                    Some(Ok(msg)) => if let Some(end) = Box::pin(on_message(inner, id, ws, msg, &mut session, admission)).await { return end; },
                }
            }
        }
    }
}

// r[impl gateway.limits]
/// What a WebSocket error means for the connection: `None` to go on.
fn on_error(e: WsError) -> Option<Ending> {
    match e {
        WsError::Capacity(_) => Some(Ending::Close(close::TOO_BIG, "message too big".into())),
        // r[impl gateway.edge.buffers]
        // A pushed message larger than the write buffer cap: it cannot be sent, so the client
        // is told rather than silently missing it.
        WsError::WriteBufferFull(_) => Some(too_big_to_send()),
        WsError::Protocol(p) => Some(Ending::Close(close::PROTOCOL, p.to_string())),
        WsError::Utf8(_) => Some(Ending::Close(CloseCode::Invalid, "invalid utf-8".into())),
        WsError::Io(io) => match holdfast_retry::classify::io(&io) {
            Class::Item | Class::Transient => None,
            Class::Fatal => Some(Ending::Gone),
        },
        // Closed, or closing, by either side: nothing more can be exchanged.
        WsError::ConnectionClosed | WsError::AlreadyClosed => Some(Ending::Gone),
        other => Some(Ending::Close(close::PROTOCOL, other.to_string())),
    }
}

async fn on_message(
    inner: &Arc<Inner>,
    id: ConnId,
    ws: &mut Ws,
    msg: Message,
    session: &mut Session,
    admission: &mut Admission,
) -> Option<Ending> {
    let text = match msg {
        Message::Text(t) => t,
        Message::Binary(_) => {
            return Some(Ending::Close(
                close::UNSUPPORTED,
                "binary messages are not accepted".into(),
            ));
        }
        // Ping/pong are answered by tungstenite and only refresh the idle timer.
        Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => return None,
        // tungstenite queues the reply; the stream then ends.
        Message::Close(_) => return None,
    };
    inner.stats.message_in();
    let parsed: ClientMessage = match serde_json::from_str(text.as_str()) {
        Ok(m) => m,
        Err(_) => return Some(Ending::Close(close::POLICY, "bad message".into())),
    };
    match (parsed, session.authed) {
        (ClientMessage::Auth { token }, false) => {
            match inner
                .config
                .token_key
                .verify_auth(&token, SystemTime::now())
            {
                Ok(claims) => {
                    let user = claims.user;
                    if inner.registry.authenticate(id, &user).is_err() {
                        return Some(Ending::Gone);
                    }
                    session.authed = true;
                    session.user = user.clone();
                    session.rooms = claims.rooms;
                    admission.authenticated();
                    claim_route(inner, &user).await;
                    reply(
                        ws,
                        format!("{{\"type\":\"authenticated\",\"conn\":\"{id}\"}}"),
                    )
                    .await
                }
                Err(e) => {
                    inner.stats.token_refused(&e);
                    // The error's text is the close reason ("invalid token", "token expired",
                    // ...): it names no secret.
                    Some(Ending::Close(close::POLICY, e.to_string()))
                }
            }
        }
        (ClientMessage::Auth { .. }, true) => {
            Some(Ending::Close(close::POLICY, "already authenticated".into()))
        }
        (_, false) => Some(Ending::Close(close::POLICY, "authenticate first".into())),
        (ClientMessage::Join { room, token, since }, true) => {
            join(
                inner,
                id,
                ws,
                &room,
                token.as_deref(),
                since.as_ref(),
                session,
            )
            .await
        }
        (ClientMessage::Leave { room }, true) => {
            if inner.registry.leave(id, &room).is_err() {
                return Some(Ending::Gone);
            }
            session.marks.retain(|(r, _)| *r != room);
            reply(ws, ack("left", &room)).await
        }
    }
}

/// What a connection's authentication established.
#[derive(Debug, Default)]
struct Session {
    authed: bool,
    user: String,
    /// The rooms the auth token allows (`None`: any room, only under `RoomsDefault::Any`).
    rooms: Option<Vec<String>>,
    /// Per room recovered with `since`, the last position its backlog held: a live message at
    /// or before it was already sent with the backlog.
    marks: Vec<(String, Pos)>,
}

// r[impl gateway.history.recover]
/// Whether `text` is a room message the connection already received in a recovery backlog.
fn recovered_already(marks: &[(String, Pos)], text: &str) -> bool {
    if marks.is_empty() {
        return false;
    }
    crate::history::framed_pos(text).is_some_and(|(room, pos)| {
        marks
            .iter()
            .any(|(r, through)| *r == room && pos <= *through)
    })
}

// r[impl gateway.rooms.permissions]
/// Whether the session may join `room`: a subscription token of its user for that room, or
/// else the auth token's `rooms`.
fn permitted(inner: &Inner, session: &Session, room: &str, token: Option<&str>) -> bool {
    match token {
        Some(t) => inner
            .config
            .token_key
            .verify_subscription(t, SystemTime::now())
            .is_ok_and(|c| c.user == session.user && c.room.as_deref() == Some(room)),
        None => session
            .rooms
            .as_ref()
            .is_none_or(|r| crate::token::room_allowed(r, room)),
    }
}

/// Joins `room` if permitted and within the room limits, or tells the client why not and goes
/// on.
// r[impl gateway.rooms.limits]
async fn join(
    inner: &Arc<Inner>,
    id: ConnId,
    ws: &mut Ws,
    room: &str,
    token: Option<&str>,
    since: Option<&serde_json::Value>,
    session: &mut Session,
) -> Option<Ending> {
    if inner.limits.room_name_too_long(room) {
        return refuse_join(inner, ws, room, JoinRefusal::NameTooLong).await;
    }
    if !permitted(inner, session, room, token) {
        return refuse_join(inner, ws, room, JoinRefusal::NotPermitted).await;
    }
    let since = match since {
        None => None,
        Some(serde_json::Value::String(s)) => match s.parse::<Pos>() {
            Ok(pos) => Some(pos),
            Err(_) => return refuse_join(inner, ws, room, JoinRefusal::BadPosition).await,
        },
        Some(_) => return refuse_join(inner, ws, room, JoinRefusal::BadPosition).await,
    };
    if since.is_some() && inner.registry.is_member(id, room) {
        // Already receiving the room live: a recovery would resend its backlog for nothing
        // (and on repeat cost a history read each time); a refusal leaves the membership.
        return refuse_join(inner, ws, room, JoinRefusal::AlreadyJoined).await;
    }
    // r[impl gateway.history.order+3]
    if !inner.registry.is_member(id, room) {
        Gateway {
            inner: inner.clone(),
        }
        .seed_room(room)
        .await;
    }
    match inner
        .registry
        .join_within(id, room, inner.limits.max_rooms_per_connection())
    {
        Ok(()) => match since {
            None => reply(ws, ack("joined", room)).await,
            Some(since) => recover(inner, id, ws, room, since, session).await,
        },
        Err(crate::registry::RegistryError::TooManyRooms(..)) => {
            refuse_join(inner, ws, room, JoinRefusal::TooManyRooms).await
        }
        // The connection is no longer registered: its teardown is under way.
        Err(_) => Some(Ending::Gone),
    }
}

// r[impl gateway.history.recover]
/// The rest of a join with `since`, the connection already a member of `room` (so that what is
/// published from here on is queued for it): reads the history after `since`, sends it, and
/// marks its last position so that a live message the backlog already held is not sent twice.
async fn recover(
    inner: &Arc<Inner>,
    id: ConnId,
    ws: &mut Ws,
    room: &str,
    since: Pos,
    session: &mut Session,
) -> Option<Ending> {
    let cfg = &inner.config.history;
    let found = if cfg.size == 0 {
        Ok(crate::history::Recovery::Gap)
    } else {
        inner.history.since(room, since, cfg).await
    };
    let found = found.unwrap_or_else(|e| {
        // The client cannot be given what it missed: it is told so, as for a gap.
        tracing::warn!(replica = %inner.replica.id, error = %e, "cannot read room history");
        crate::history::Recovery::Gap
    });
    session.marks.retain(|(r, _)| r != room);
    match found {
        crate::history::Recovery::Future => {
            if inner.registry.leave(id, room).is_err() {
                return Some(Ending::Gone);
            }
            refuse_join(inner, ws, room, JoinRefusal::FuturePosition).await
        }
        crate::history::Recovery::Gap => {
            let msg = serde_json::json!({"type": "joined", "room": room, "gap": true});
            reply(ws, msg.to_string()).await
        }
        crate::history::Recovery::Messages(messages) => {
            let through = messages.last().map_or(since, |(p, _)| *p);
            let n = messages.len();
            for (pos, text) in messages {
                let framed = crate::history::frame(room, pos, &text);
                if let Err(e) = ws.send(Message::Text(framed.into())).await {
                    if let Some(end) = on_error(e) {
                        return Some(end);
                    }
                }
                inner.stats.message_out();
            }
            session.marks.push((room.to_owned(), through));
            let msg = serde_json::json!({"type": "joined", "room": room, "recovered": n});
            reply(ws, msg.to_string()).await
        }
    }
}

/// Counts a refused join and tells the client; the connection stays open. A name refused for
/// its length is not echoed back (it may be up to a message's size).
async fn refuse_join(
    inner: &Arc<Inner>,
    ws: &mut Ws,
    room: &str,
    why: JoinRefusal,
) -> Option<Ending> {
    inner.stats.join_refused(why);
    let mut msg = serde_json::json!({"type": "error", "op": "join", "reason": why.reason()});
    if why != JoinRefusal::NameTooLong {
        msg["room"] = serde_json::Value::from(room);
    }
    reply(ws, msg.to_string()).await
}

fn ack(kind: &str, room: &str) -> String {
    serde_json::json!({ "type": kind, "room": room }).to_string()
}

/// Sends an acknowledgement; `Some` when the connection must end.
async fn reply(ws: &mut Ws, text: String) -> Option<Ending> {
    match ws.send(Message::Text(text.into())).await {
        Ok(()) => None,
        Err(e) => on_error(e),
    }
}

/// Routes the user to this replica; an outage of the routing map is reported, never fatal to the
/// client (it is still reachable on this replica).
async fn claim_route(inner: &Arc<Inner>, user: &str) {
    // Owned even when the add fails: the map keeps the user and writes it at its next refresh,
    // so the drain must delete it.
    inner.drain.own_route(user);
    match inner.routing.set_route(user, &inner.replica.id).await {
        Ok(()) => {}
        Err(e) => {
            inner.stats.routing_error();
            tracing::warn!(replica = %inner.replica.id, error = %e, "cannot route user here");
        }
    }
}

/// A pushed message larger than the write buffer cap: it cannot be sent.
fn too_big_to_send() -> Ending {
    Ending::Close(close::TOO_BIG, "message too big to send".into())
}

// r[impl gateway.drain.flush]
/// Sends what is already queued, then the drain's close frame.
async fn drain_connection(
    inner: &Arc<Inner>,
    id: ConnId,
    ws: &mut Ws,
    queue: &mut mpsc::Receiver<Utf8Bytes>,
    signal: DrainSignal,
    marks: &[(String, Pos)],
) -> Ending {
    while let Ok(text) = queue.try_recv() {
        if recovered_already(marks, &text) {
            continue;
        }
        match ws.feed(Message::Text(text)).await {
            Ok(()) => inner.stats.message_out(),
            // r[impl gateway.edge.buffers]
            // The channel is fine, the message is not: its recipient is told with 1009, as
            // outside a drain, rather than dropped without any close frame.
            Err(WsError::WriteBufferFull(_)) => return too_big_to_send(),
            Err(_) => return Ending::Gone,
        }
    }
    let reason = crate::server::drain::close_reason(&inner.config.drain, signal.code, id);
    let frame = CloseFrame {
        code: signal.code,
        reason: reason.into(),
    };
    if ws.send(Message::Close(Some(frame))).await.is_ok() {
        // Recorded before the wake-up, so the drain sees it when it looks.
        inner.drain.close_sent(id);
        inner.stats.close_sent();
    }
    while let Some(Ok(_)) = ws.next().await {}
    Ending::Gone
}
