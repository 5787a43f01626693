//! The operator's side: local UDP listeners whose datagrams travel to the node over one QUIC
//! connection, with reconnects paced by holdfast-retry.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::io::IoSliceMut;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::BytesMut;
use holdfast_retry::{Class, Classify, Jitter, Policy};
use quinn::Connection;
use quinn::udp::RecvMeta;
use thiserror::Error;
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::auth::Credential;
use crate::classify::{DropReason, RelayError};
use crate::control::{EndReason, Message, Refusal};
use crate::control_io::{spawn_reader, spawn_writer};
use crate::flows::evictable;
use crate::identity::{Fingerprint, SERVER_NAME};
use crate::pin::PinnedVerifier;
use crate::ready::{Drain, ready_now};
use crate::reconnect::{Pace, Reconnect};
use crate::report::{Handed, Reporter};
use crate::stats::{Counters, ForwardStats};
use crate::transport::{ALPN, close_code, endpoint, endpoint_socket, transport_config};
use crate::udp_io::{Gather, LOCAL_BUFFER, MAX_DATAGRAM, UdpIo, framed_capacity, segments};
use crate::wire::{FlowId, decode_datagram};

/// One forward: a local UDP address and the target the node relays to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForwardSpec {
    /// The local address to listen on (port 0: any free port).
    pub local: SocketAddr,
    /// The target, as the node sees it.
    pub target: SocketAddr,
}

/// The client's configuration.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The node's forward endpoint.
    pub node: SocketAddr,
    /// The node's pinned identity.
    pub pin: Fingerprint,
    /// The credential to present.
    pub credential: Credential,
    /// The forwards to open.
    pub forwards: Vec<ForwardSpec>,
    /// Reconnect pacing.
    pub reconnect: Policy,
    /// A connection counts as a success (resetting the back-off) once it has lasted this long.
    pub must_last: Duration,
    /// How long a silent connection lasts (keep-alives go every third of it).
    pub idle_timeout: Duration,
    /// How long a connection attempt (handshake, authentication, opening forwards) may take.
    pub connect_timeout: Duration,
    /// Flows (local peers) one forward may hold.
    pub max_flows: usize,
    /// At the flow bound, a local peer idle this long gives way to a new one.
    pub flow_idle: Duration,
    /// At most one local transient error per forward is announced per interval.
    pub report_interval: Duration,
}

/// The default reconnect policy: 1 s doubling to 60 s, escalated after 5 failures.
pub fn default_reconnect_policy() -> Policy {
    Policy::builder()
        .base(Duration::from_secs(1))
        .cap(Duration::from_secs(60))
        .escalate_after(5)
        .jitter(Jitter::default())
        .build()
        .unwrap_or_default()
}

impl ClientConfig {
    /// Defaults: no forwards yet, [`default_reconnect_policy`], a connection must last 10 s,
    /// 15 s idle timeout, 10 s to connect, 256 flows a forward (one idle for 60 s gives way to a
    /// new one), one report a second.
    pub fn new(node: SocketAddr, pin: Fingerprint, credential: Credential) -> Self {
        ClientConfig {
            node,
            pin,
            credential,
            forwards: Vec::new(),
            reconnect: default_reconnect_policy(),
            must_last: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(15),
            connect_timeout: Duration::from_secs(10),
            max_flows: 256,
            flow_idle: Duration::from_secs(60),
            report_interval: Duration::from_secs(1),
        }
    }
}

/// Why a connection attempt failed. Each refusal is its own variant.
#[derive(Debug, Error)]
pub enum ConnectError {
    /// The node presented another identity than the pinned one.
    #[error("the node's identity {presented} is not the pinned {pinned}")]
    PinMismatch {
        /// The pin.
        pinned: Fingerprint,
        /// What the node presented.
        presented: Fingerprint,
    },
    /// The node refused the credential.
    #[error("the node refused the credential: {0}")]
    BadCredential(String),
    /// The node holds as many connections as it allows for this credential (or in all); a later
    /// attempt may get in. The node's reason says which bound.
    #[error("too many connections: {0}")]
    TooManyConnections(String),
    /// The node refused the connection for another reason.
    #[error("the node refused the connection ({refusal:?}): {message}")]
    Refused {
        /// Which refusal.
        refusal: Refusal,
        /// The node's reason.
        message: String,
    },
    /// The node could not be reached, or the handshake failed.
    #[error("connecting to the node: {0}")]
    Connection(String),
    /// The attempt took longer than the connect timeout.
    #[error("no answer from the node within {0:?}")]
    Timeout(Duration),
    /// The node broke the protocol.
    #[error("protocol error: {0}")]
    Protocol(String),
}

/// A forward the node refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenRefused {
    /// Which refusal.
    pub refusal: Refusal,
    /// The node's reason.
    pub message: String,
}

/// What happens to the forwarding, for a status line or `--json` events.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum ClientEvent {
    /// Connected and authenticated.
    Connected {
        /// The node.
        node: SocketAddr,
    },
    /// A connection attempt failed.
    ConnectFailed {
        /// Why.
        error: String,
        /// The pin did not match.
        pin_mismatch: bool,
        /// The credential was refused.
        bad_credential: bool,
    },
    /// The next attempt comes after this wait.
    Reconnecting {
        /// The wait, in milliseconds.
        in_ms: u64,
        /// Consecutive failed attempts so far.
        failures: u32,
    },
    /// A forward is open.
    Opened {
        /// The forward.
        forward: u32,
        /// Its local address.
        local: SocketAddr,
        /// Its target.
        target: SocketAddr,
    },
    /// The node refused a forward.
    Refused {
        /// The forward.
        forward: u32,
        /// Which refusal.
        refusal: Refusal,
        /// The node's reason.
        message: String,
    },
    /// A transient error on a forward; it goes on.
    Status {
        /// The forward.
        forward: u32,
        /// Reported by the node (else by this client).
        from_node: bool,
        /// What happened.
        message: String,
    },
    /// A forward's relay ended (it is re-opened on the next connection unless stopped).
    Ended {
        /// The forward.
        forward: u32,
        /// Why.
        reason: EndReason,
        /// Details.
        message: String,
    },
    /// The connection ended.
    Disconnected {
        /// Why.
        error: String,
    },
    /// A forward's local socket failed for good: that forward relays nothing more until the
    /// client is started again (the other forwards go on).
    LocalFailed {
        /// The forward.
        forward: u32,
        /// Its local address.
        local: SocketAddr,
        /// What failed.
        error: String,
    },
}

impl fmt::Display for ClientEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientEvent::Connected { node } => write!(f, "connected to {node}"),
            ClientEvent::ConnectFailed { error, .. } => write!(f, "connect failed: {error}"),
            ClientEvent::Reconnecting { in_ms, failures } => write!(
                f,
                "reconnecting in {:.1} s ({failures} failed attempts)",
                *in_ms as f64 / 1000.0
            ),
            ClientEvent::Opened {
                forward,
                local,
                target,
            } => write!(f, "forward {forward}: {local} -> {target} open"),
            ClientEvent::Refused {
                forward, message, ..
            } => write!(f, "forward {forward} refused: {message}"),
            ClientEvent::Status {
                forward,
                from_node,
                message,
            } => write!(
                f,
                "forward {forward}: {message} ({}; relaying continues)",
                if *from_node { "at the node" } else { "locally" }
            ),
            ClientEvent::Ended {
                forward, message, ..
            } => write!(f, "forward {forward} ended because {message}"),
            ClientEvent::Disconnected { error } => write!(f, "disconnected: {error}"),
            ClientEvent::LocalFailed {
                forward,
                local,
                error,
            } => write!(
                f,
                "forward {forward}: the local socket {local} failed ({error}); this forward relays nothing more"
            ),
        }
    }
}

/// Which local peer each flow id stands for (kept across reconnects).
#[derive(Debug, Default)]
struct Peers {
    by_addr: HashMap<SocketAddr, u64>,
    /// Each flow's peer and when it last carried a datagram (either way).
    by_flow: HashMap<u64, (SocketAddr, Instant)>,
    next: u64,
}

struct LocalForward {
    id: u32,
    spec: ForwardSpec,
    socket: UdpIo,
    peers: Mutex<Peers>,
    reporter: Reporter,
    max_flows: usize,
    flow_idle: Duration,
    /// The local socket failed for good (announced once).
    failed: AtomicBool,
}

impl LocalForward {
    /// The flow of a datagram from `peer` at `now`: its own, or a new one (a flow id is never
    /// reused, so a late reply to a flow that gave way cannot reach the new peer).
    // r[impl forward.flows+2]
    fn flow_of(&self, peer: SocketAddr, now: Instant) -> Option<u64> {
        let mut peers = lock(&self.peers);
        let peers = &mut *peers;
        if let Some(flow) = peers.by_addr.get(&peer) {
            if let Some(entry) = peers.by_flow.get_mut(flow) {
                entry.1 = now;
            }
            return Some(*flow);
        }
        if peers.by_addr.len() >= self.max_flows {
            let flows = peers.by_flow.iter().map(|(flow, (_, last))| (*flow, *last));
            let old = evictable(flows, now, self.flow_idle)?;
            if let Some((old_peer, _)) = peers.by_flow.remove(&old) {
                peers.by_addr.remove(&old_peer);
            }
        }
        let flow = peers.next;
        peers.next += 1;
        peers.by_addr.insert(peer, flow);
        peers.by_flow.insert(flow, (peer, now));
        Some(flow)
    }

    /// Counts and reports an error of the local socket; whether relaying on it goes on. A socket
    /// that is itself gone is announced to the user, once.
    // r[impl forward.local.failure]
    fn local_socket_error(
        &self,
        err: &RelayError,
        events: &mpsc::UnboundedSender<ClientEvent>,
    ) -> bool {
        match err.class() {
            Class::Item => {
                self.reporter.dropped(err);
                true
            }
            Class::Transient => {
                self.reporter.transient(err);
                true
            }
            Class::Fatal => {
                let text = err.to_string();
                self.reporter.stats().set_last_error(&text);
                if !self.failed.swap(true, Ordering::Relaxed) {
                    tracing::error!(forward = self.id, error = %text, "forward: local socket failed");
                    let _ = events.send(ClientEvent::LocalFailed {
                        forward: self.id,
                        local: self.socket.local_addr().unwrap_or(self.spec.local),
                        error: text,
                    });
                }
                false
            }
        }
    }

    /// Counts the `lost` replies a send to a local peer failed with `err` and reports it. A local
    /// socket that cannot send is this forward's problem only: the datagrams are dropped and the
    /// relay goes on; one that is gone is announced.
    // i[impl forward.relay.resilience]
    fn replies_not_sent(
        &self,
        err: &RelayError,
        lost: usize,
        events: &mpsc::UnboundedSender<ClientEvent>,
    ) {
        if err.class() == Class::Item {
            // Each datagram the error cost is one drop (`local_socket_error` would count one
            // more for an item).
            for _ in 0..lost {
                self.reporter.dropped(err);
            }
            return;
        }
        for _ in 0..lost {
            self.reporter.stats().dropped(err.drop_reason());
        }
        self.local_socket_error(err, events);
    }

    /// The peer a reply of `flow` goes to, at `now`.
    fn peer_of(&self, flow: u64, now: Instant) -> Option<SocketAddr> {
        let mut peers = lock(&self.peers);
        let entry = peers.by_flow.get_mut(&flow)?;
        entry.1 = now;
        Some(entry.0)
    }
}

/// The connection in use, if any.
type Current = Arc<Mutex<Option<Connection>>>;

/// A running client. Dropping it stops it.
pub struct Forwarding {
    locals: Vec<SocketAddr>,
    forwards: Vec<Arc<LocalForward>>,
    unattributed: Arc<Counters>,
    current: Current,
    events: mpsc::UnboundedReceiver<ClientEvent>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl fmt::Debug for Forwarding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Forwarding")
            .field("locals", &self.locals)
            .finish_non_exhaustive()
    }
}

impl Drop for Forwarding {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Forwarding {
    /// The local addresses, one per forward in the order configured.
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.locals
    }

    /// Each forward's counters (as seen by this client), in the order configured.
    pub fn stats(&self) -> Vec<ForwardStats> {
        self.forwards
            .iter()
            .map(|f| f.reporter.stats().snapshot())
            .collect()
    }

    /// Datagrams from the node no forward could be charged with (malformed, unknown flow).
    pub fn unattributed(&self) -> ForwardStats {
        self.unattributed.snapshot()
    }

    /// The largest payload a datagram of the first forward can carry on the current connection
    /// right now (it grows as path MTU discovery finds room); `None` while disconnected.
    pub fn max_payload(&self) -> Option<usize> {
        let current = self
            .current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let max = current.as_ref()?.max_datagram_size()?;
        // Forward ids and the first 64 flows of a forward take one byte each.
        Some(max.saturating_sub(2))
    }

    /// The next event; `None` once the client has stopped.
    pub async fn next_event(&mut self) -> Option<ClientEvent> {
        self.events.recv().await
    }

    /// Closes the connection (the node ends its forwards) and stops.
    pub async fn stop(mut self) {
        let _ = self.stop.send(true);
        let _ = (&mut self.task).await;
    }
}

/// Binds the local addresses and starts forwarding in the background: connects, opens every
/// forward, relays, and reconnects with back-off whenever the connection is lost.
pub async fn spawn(config: ClientConfig) -> std::io::Result<Forwarding> {
    let (events_tx, events) = mpsc::unbounded_channel();
    let mut forwards = Vec::new();
    let mut locals = Vec::new();
    for (i, spec) in config.forwards.iter().enumerate() {
        let socket = UdpIo::new(UdpSocket::bind(spec.local).await?, LOCAL_BUFFER)?;
        locals.push(socket.local_addr()?);
        let id = i as u32 + 1;
        let events = events_tx.clone();
        let sink: crate::report::Sink = Box::new(move |forward, message| {
            let _ = events.send(ClientEvent::Status {
                forward,
                from_node: false,
                message,
            });
        });
        forwards.push(Arc::new(LocalForward {
            id,
            spec: *spec,
            socket,
            peers: Mutex::new(Peers::default()),
            reporter: Reporter::new(
                id,
                Arc::new(Counters::default()),
                sink,
                config.report_interval,
            ),
            max_flows: config.max_flows,
            flow_idle: config.flow_idle,
            failed: AtomicBool::new(false),
        }));
    }
    let endpoint = endpoint(
        endpoint_socket(SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)))?,
        None,
    )?;
    let unattributed = Arc::new(Counters::default());
    let current = Current::default();
    let (stop, stop_rx) = watch::channel(false);
    let task = tokio::spawn(supervise(
        config,
        endpoint,
        forwards.clone(),
        Shared {
            unattributed: unattributed.clone(),
            current: current.clone(),
            events: events_tx,
        },
        stop_rx,
    ));
    Ok(Forwarding {
        locals,
        forwards,
        unattributed,
        current,
        events,
        stop,
        task,
    })
}

fn client_crypto(
    config: &ClientConfig,
) -> Result<(quinn::ClientConfig, Arc<PinnedVerifier>), ConnectError> {
    quinn_client_config(config.pin, config.idle_timeout)
}

/// The quinn client configuration the client connects with: TLS 1.3 with the pinned verifier,
/// this crate's ALPN and transport settings. Public so a benchmark or a test can open a bare
/// connection to a node the same way.
pub fn quinn_client_config(
    pin: Fingerprint,
    idle_timeout: Duration,
) -> Result<(quinn::ClientConfig, Arc<PinnedVerifier>), ConnectError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = PinnedVerifier::new(pin, &provider);
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| ConnectError::Protocol(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(verifier.clone())
        .with_no_client_auth();
    tls.alpn_protocols = vec![ALPN.to_vec()];
    let quic = quinn::crypto::rustls::QuicClientConfig::try_from(tls)
        .map_err(|e| ConnectError::Protocol(e.to_string()))?;
    let mut client = quinn::ClientConfig::new(Arc::new(quic));
    client.transport_config(transport_config(idle_timeout));
    Ok((client, verifier))
}

/// An authenticated connection with its control stream.
struct Session {
    conn: Connection,
    writer: mpsc::Sender<Message>,
    writer_task: JoinHandle<()>,
    control: mpsc::Receiver<Result<Message, RelayError>>,
}

/// Connects to the node, checks its pinned identity, and authenticates.
// r[impl forward.pin]
async fn connect(
    config: &ClientConfig,
    endpoint: &quinn::Endpoint,
) -> Result<Session, ConnectError> {
    let (client, verifier) = client_crypto(config)?;
    let connecting = endpoint
        .connect_with(client, config.node, SERVER_NAME)
        .map_err(|e| ConnectError::Connection(e.to_string()))?;
    let conn = match connecting.await {
        Ok(conn) => conn,
        Err(err) => {
            return Err(match verifier.mismatch() {
                Some(presented) => ConnectError::PinMismatch {
                    pinned: config.pin,
                    presented,
                },
                None => ConnectError::Connection(err.to_string()),
            });
        }
    };
    let (send, recv) = conn
        .open_bi()
        .await
        .map_err(|e| ConnectError::Connection(e.to_string()))?;
    let mut control = spawn_reader(recv);
    let (writer, writer_task) = spawn_writer(send, Duration::from_secs(1));
    let hello = Message::Hello {
        credential: config.credential.expose().to_vec(),
    };
    if writer.send(hello).await.is_err() {
        return Err(ConnectError::Connection("control stream closed".into()));
    }
    let answer = control.recv().await;
    match answer {
        Some(Ok(Message::Welcome)) => Ok(Session {
            conn,
            writer,
            writer_task,
            control,
        }),
        Some(Ok(Message::Refused {
            refusal, message, ..
        })) => {
            conn.close(close_code::CLIENT_DONE.into(), b"refused");
            Err(match refusal {
                Refusal::BadCredential => ConnectError::BadCredential(message),
                Refusal::TooManyConnections => ConnectError::TooManyConnections(message),
                refusal => ConnectError::Refused { refusal, message },
            })
        }
        Some(Ok(other)) => Err(ConnectError::Protocol(format!(
            "expected Welcome, got {other:?}"
        ))),
        Some(Err(err)) => Err(ConnectError::Connection(err.to_string())),
        None => Err(ConnectError::Connection("control stream closed".into())),
    }
}

/// Opens every forward on the session; returns those the node opened.
async fn open_forwards(
    session: &mut Session,
    forwards: &[Arc<LocalForward>],
    events: &mpsc::UnboundedSender<ClientEvent>,
) -> Result<Vec<Arc<LocalForward>>, ConnectError> {
    for forward in forwards {
        let open = Message::Open {
            forward: forward.id,
            target: forward.spec.target,
        };
        if session.writer.send(open).await.is_err() {
            return Err(ConnectError::Connection("control stream closed".into()));
        }
    }
    let mut opened = Vec::new();
    // r[impl forward.open.answers]
    // Only an answer naming a forward still awaited settles it: a refusal about the connection
    // (forward 0) or a repeated answer must not leave a forward unawaited.
    let mut pending: HashSet<u32> = forwards.iter().map(|f| f.id).collect();
    while !pending.is_empty() {
        match session.control.recv().await {
            Some(Ok(Message::Opened { forward })) => {
                if !pending.remove(&forward) {
                    continue;
                }
                if let Some(f) = forwards.iter().find(|f| f.id == forward) {
                    opened.push(f.clone());
                    let _ = events.send(ClientEvent::Opened {
                        forward,
                        local: f.socket.local_addr().unwrap_or(f.spec.local),
                        target: f.spec.target,
                    });
                }
            }
            Some(Ok(Message::Refused {
                forward,
                refusal,
                message,
            })) => {
                pending.remove(&forward);
                if let Some(f) = forwards.iter().find(|f| f.id == forward) {
                    f.reporter.stats().set_last_error(&message);
                }
                let _ = events.send(ClientEvent::Refused {
                    forward,
                    refusal,
                    message,
                });
            }
            Some(Ok(Message::Status { forward, message })) => {
                let _ = events.send(ClientEvent::Status {
                    forward,
                    from_node: true,
                    message,
                });
            }
            Some(Ok(_)) => {}
            Some(Err(err)) => match err.class() {
                Class::Item | Class::Transient => {}
                Class::Fatal => return Err(ConnectError::Connection(err.to_string())),
            },
            None => return Err(ConnectError::Connection("control stream closed".into())),
        }
    }
    Ok(opened)
}

/// What the supervisor shares with the handle.
struct Shared {
    unattributed: Arc<Counters>,
    current: Current,
    events: mpsc::UnboundedSender<ClientEvent>,
}

// r[impl forward.reconnect]
async fn supervise(
    config: ClientConfig,
    endpoint: quinn::Endpoint,
    forwards: Vec<Arc<LocalForward>>,
    shared: Shared,
    mut stop: watch::Receiver<bool>,
) {
    let events = &shared.events;
    let mut reconnect = Reconnect::new(config.reconnect, config.must_last);
    loop {
        if *stop.borrow() {
            break;
        }
        let now = std::time::Instant::now();
        if let Pace::Until(at) = reconnect.begin(now) {
            let wait = at.saturating_duration_since(now);
            let _ = events.send(ClientEvent::Reconnecting {
                in_ms: wait.as_millis() as u64,
                failures: reconnect.failures(),
            });
            tokio::select! {
                _ = tokio::time::sleep(wait) => continue,
                _ = stop.changed() => break,
            }
        }
        let attempt = async {
            let mut session = connect(&config, &endpoint).await?;
            let _ = events.send(ClientEvent::Connected { node: config.node });
            let opened = open_forwards(&mut session, &forwards, events).await?;
            Ok::<_, ConnectError>((session, opened))
        };
        let outcome = tokio::select! {
            outcome = tokio::time::timeout(config.connect_timeout, attempt) => outcome,
            _ = stop.changed() => break,
        };
        let (session, opened) = match outcome {
            Ok(Ok(connected)) => connected,
            Ok(Err(err)) => {
                connect_failed(events, &err);
                reconnect.failed(std::time::Instant::now());
                continue;
            }
            Err(_) => {
                connect_failed(events, &ConnectError::Timeout(config.connect_timeout));
                reconnect.failed(std::time::Instant::now());
                continue;
            }
        };
        reconnect.connected(std::time::Instant::now());
        *lock(&shared.current) = Some(session.conn.clone());
        let stopped = relay(session, opened, &shared, &mut reconnect, &mut stop).await;
        *lock(&shared.current) = None;
        reconnect.ended(std::time::Instant::now());
        if stopped {
            break;
        }
    }
    endpoint.close(close_code::CLIENT_DONE.into(), b"client stopped");
    let _ = tokio::time::timeout(Duration::from_secs(1), endpoint.wait_idle()).await;
}

fn connect_failed(events: &mpsc::UnboundedSender<ClientEvent>, err: &ConnectError) {
    tracing::warn!(error = %err, "forward: connect failed");
    let _ = events.send(ClientEvent::ConnectFailed {
        error: err.to_string(),
        pin_mismatch: matches!(err, ConnectError::PinMismatch { .. }),
        bad_credential: matches!(err, ConnectError::BadCredential(_)),
    });
}

/// Relays over one session until the connection ends (false) or the client is stopped (true).
// r[impl forward.end+2]
async fn relay(
    session: Session,
    opened: Vec<Arc<LocalForward>>,
    shared: &Shared,
    reconnect: &mut Reconnect,
    stop: &mut watch::Receiver<bool>,
) -> bool {
    let (unattributed, events) = (&shared.unattributed, &shared.events);
    let Session {
        conn,
        writer,
        writer_task,
        mut control,
    } = session;
    let mut tasks: Vec<(u32, JoinHandle<()>)> = opened
        .iter()
        .map(|f| {
            let task = local_to_node(f.clone(), conn.clone(), events.clone());
            (f.id, tokio::spawn(task))
        })
        .collect();
    let by_id: HashMap<u32, Arc<LocalForward>> = opened.iter().map(|f| (f.id, f.clone())).collect();
    let reader = tokio::spawn(node_to_local(
        by_id,
        conn.clone(),
        unattributed.clone(),
        events.clone(),
    ));
    let mut open: Vec<u32> = opened.iter().map(|f| f.id).collect();
    let (stopped, error, closed_by) = loop {
        let lasts = reconnect.lasts_at();
        tokio::select! {
            _ = stop.changed() => break (true, "client stopped".to_owned(), None),
            _ = async {
                match lasts {
                    Some(at) => tokio::time::sleep_until(Instant::from_std(at)).await,
                    None => std::future::pending().await,
                }
            } => {
                reconnect.confirm(std::time::Instant::now());
            }
            message = control.recv() => match message {
                Some(Ok(Message::Ended { forward, reason, message })) => {
                    open.retain(|f| *f != forward);
                    if let Some(pos) = tasks.iter().position(|(id, _)| *id == forward) {
                        tasks.swap_remove(pos).1.abort();
                    }
                    let _ = events.send(ClientEvent::Ended { forward, reason, message });
                }
                Some(Ok(Message::Status { forward, message })) => {
                    let _ = events.send(ClientEvent::Status { forward, from_node: true, message });
                }
                Some(Ok(Message::Refused { forward, refusal, message })) => {
                    let _ = events.send(ClientEvent::Refused { forward, refusal, message });
                }
                // Nothing else is expected once forwards are open; a stray message is dropped.
                Some(Ok(_)) => unattributed.dropped(DropReason::Malformed),
                Some(Err(err)) => match err.class() {
                    Class::Item => unattributed.dropped(err.drop_reason()),
                    Class::Transient => tracing::warn!(error = %err, "forward: control stream"),
                    Class::Fatal => {
                        // Let the connection say why it ended, if it did.
                        match tokio::time::timeout(Duration::from_millis(200), conn.closed()).await {
                            Ok(closed) => break (false, RelayError::from(closed.clone()).to_string(), Some(closed)),
                            Err(_) => break (false, err.to_string(), None),
                        }
                    }
                },
                None => break (false, "control stream ended".to_owned(), None),
            },
            closed = conn.closed() => break (false, RelayError::from(closed.clone()).to_string(), Some(closed)),
        }
    };
    for (_, task) in tasks {
        task.abort();
    }
    reader.abort();
    // A node that closed the connection because it is shutting down, or because its credential
    // is no longer allowed, said so in its close, even when its `Ended` messages did not arrive
    // first (a full queue, or the close overtaking them on the way to this loop).
    let said = closed_by.as_ref().and_then(node_close);
    for forward in open {
        let (reason, message) = match (&said, stopped) {
            (_, true) => (EndReason::Closed, "the client stopped".to_owned()),
            (Some((reason, why)), false) => (*reason, why.clone()),
            (None, false) => (
                EndReason::ConnectionLost,
                format!("the connection was lost: {error}"),
            ),
        };
        if let Some(f) = opened.iter().find(|f| f.id == forward) {
            f.reporter.stats().set_last_error(&message);
        }
        let _ = events.send(ClientEvent::Ended {
            forward,
            reason,
            message,
        });
    }
    drop(writer);
    writer_task.abort();
    conn.close(close_code::CLIENT_DONE.into(), b"client done");
    if !stopped {
        let _ = events.send(ClientEvent::Disconnected { error });
    }
    stopped
}

/// How the node's close ends the forwards still open, with the node's reason, when its close says
/// why: it is shutting down, or the connection's credential is no longer allowed.
// r[impl forward.end+2]
// r[impl forward.access.revoked]
fn node_close(closed: &quinn::ConnectionError) -> Option<(EndReason, String)> {
    let quinn::ConnectionError::ApplicationClosed(close) = closed else {
        return None;
    };
    let reason = if close.error_code == quinn::VarInt::from_u32(close_code::SHUTDOWN) {
        EndReason::ShuttingDown
    } else if close.error_code == quinn::VarInt::from_u32(close_code::REVOKED) {
        EndReason::NotAllowed
    } else {
        return None;
    };
    Some((reason, String::from_utf8_lossy(&close.reason).into_owned()))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Receive buffers per wakeup of a forward's local socket (each holds one datagram, or several
/// the kernel coalesced).
const LOCAL_BATCH: usize = 16;

/// Datagrams from local peers to the node: every datagram of a receive batch, with one
/// allocation for all of them.
// r[impl forward.batch]
async fn local_to_node(
    forward: Arc<LocalForward>,
    conn: Connection,
    events: mpsc::UnboundedSender<ClientEvent>,
) {
    let mut bufs = vec![0u8; LOCAL_BATCH * MAX_DATAGRAM];
    let mut meta = [RecvMeta::default(); LOCAL_BATCH];
    let mut out = BytesMut::new();
    // The last flow's header, kept: consecutive datagrams are mostly from one peer.
    let mut header: Option<(u64, Vec<u8>)> = None;
    loop {
        let received = {
            let mut chunks = bufs.chunks_mut(MAX_DATAGRAM);
            let mut slices: [IoSliceMut<'_>; LOCAL_BATCH] =
                std::array::from_fn(|_| IoSliceMut::new(chunks.next().unwrap_or(&mut [])));
            forward.socket.recv(&mut slices, &mut meta).await
        };
        let filled = match received {
            Ok(filled) => filled,
            Err(err) => {
                if forward.local_socket_error(&RelayError::Socket(err), &events) {
                    continue;
                }
                return;
            }
        };
        let now = Instant::now();
        // A header is at most 16 bytes (two QUIC varints), whichever flow the datagram is of.
        out.reserve(framed_capacity(&meta[..filled], 16));
        for (i, m) in meta[..filled].iter().enumerate() {
            let buf = &bufs[i * MAX_DATAGRAM..(i + 1) * MAX_DATAGRAM];
            let Some(flow) = forward.flow_of(m.addr, now) else {
                for _ in segments(buf, m) {
                    forward.reporter.dropped(&RelayError::FlowLimit(forward.id));
                }
                continue;
            };
            if header.as_ref().is_none_or(|(f, _)| *f != flow) {
                let id = FlowId {
                    forward: forward.id,
                    flow,
                };
                header = Some((flow, id.header()));
            }
            let Some((_, bytes)) = &header else {
                continue;
            };
            // Counted once per buffer, not per datagram.
            let (mut relayed, mut relayed_bytes) = (0, 0);
            for payload in segments(buf, m) {
                out.extend_from_slice(bytes);
                out.extend_from_slice(payload);
                match forward.reporter.send_datagram(&conn, out.split().freeze()) {
                    Handed::Sent => {
                        relayed += 1;
                        relayed_bytes += payload.len();
                    }
                    Handed::Dropped => {}
                    // The connection is gone: the session loop sees it and announces the end.
                    Handed::Lost => {
                        forward
                            .reporter
                            .stats()
                            .to_target_many(relayed, relayed_bytes);
                        return;
                    }
                }
            }
            forward
                .reporter
                .stats()
                .to_target_many(relayed, relayed_bytes);
        }
    }
}

/// Datagrams from the node to local peers: every datagram already queued is taken per wakeup,
/// and a run of equal-sized ones to one peer leaves in one send.
// r[impl forward.batch]
async fn node_to_local(
    forwards: HashMap<u32, Arc<LocalForward>>,
    conn: Connection,
    unattributed: Arc<Counters>,
    events: mpsc::UnboundedSender<ClientEvent>,
) {
    let mut gather: Gather<u32> = Gather::default();
    loop {
        let first = match conn.read_datagram().await {
            Ok(datagram) => datagram,
            Err(err) => {
                let err = RelayError::from(err);
                match err.class() {
                    Class::Item => unattributed.dropped(err.drop_reason()),
                    Class::Transient => tracing::warn!(error = %err, "forward: datagram"),
                    Class::Fatal => return,
                }
                continue;
            }
        };
        let now = Instant::now();
        let mut next = Some(first);
        let mut drain = Drain::default();
        // The last flow's peer in this wakeup: most of a batch is one flow's, and looking it up
        // (a lock) once per run of it is enough to keep the flow active.
        let mut last: Option<(FlowId, SocketAddr, usize)> = None;
        while let Some(datagram) = next {
            match decode_datagram(&datagram) {
                Ok((id, payload)) => {
                    let found = match last {
                        Some((seen, peer, max)) if seen == id => Some((peer, max)),
                        _ => match forwards.get(&id.forward) {
                            None => {
                                unattributed.dropped(DropReason::UnknownForward);
                                None
                            }
                            Some(local) => match local.peer_of(id.flow, now) {
                                None => {
                                    local.reporter.stats().dropped(DropReason::UnknownForward);
                                    None
                                }
                                Some(peer) => {
                                    let max = local.socket.max_segments();
                                    last = Some((id, peer, max));
                                    Some((peer, max))
                                }
                            },
                        },
                    };
                    if let Some((peer, max)) = found
                        && !gather.push(id.forward, peer, payload, max)
                    {
                        flush_local(&mut gather, &forwards, &events).await;
                        gather.push(id.forward, peer, payload, max);
                    }
                }
                Err(err) => unattributed.dropped(RelayError::from(err).drop_reason()),
            }
            // A connection error is left for the next read to see.
            next = drain.more(|| ready_now(conn.read_datagram()).and_then(Result::ok));
        }
        flush_local(&mut gather, &forwards, &events).await;
    }
}

/// Sends what was gathered to its local peer, counted as one by one would count it.
// r[impl forward.batch]
async fn flush_local(
    gather: &mut Gather<u32>,
    forwards: &HashMap<u32, Arc<LocalForward>>,
    events: &mpsc::UnboundedSender<ClientEvent>,
) {
    let Some(gathered) = gather.take() else {
        return;
    };
    let Some(local) = forwards.get(&gathered.key) else {
        return;
    };
    let (sent, err) = gathered.send(&local.socket).await;
    // A run is of equal-sized datagrams.
    local
        .reporter
        .stats()
        .from_target_many(sent, sent * gathered.segment);
    if let Some(err) = err {
        local.replies_not_sent(&RelayError::Socket(err), gathered.count - sent, events);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::udp_io::tests::{refusal_pending, towards_closed_port};

    async fn local_forward(max_flows: usize, flow_idle: Duration) -> LocalForward {
        let socket = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
        local_forward_on(
            UdpIo::new(socket, LOCAL_BUFFER).expect("udp io"),
            max_flows,
            flow_idle,
        )
    }

    /// Forward 1, relaying through `socket`.
    fn local_forward_on(socket: UdpIo, max_flows: usize, flow_idle: Duration) -> LocalForward {
        LocalForward {
            id: 1,
            spec: ForwardSpec {
                local: socket.local_addr().expect("addr"),
                target: "127.0.0.1:9".parse().expect("addr"),
            },
            socket,
            peers: Mutex::new(Peers::default()),
            reporter: Reporter::new(
                1,
                Arc::new(Counters::default()),
                Box::new(|_, _| {}),
                Duration::ZERO,
            ),
            max_flows,
            flow_idle,
            failed: AtomicBool::new(false),
        }
    }

    // r[verify forward.flows+2]
    #[tokio::test(start_paused = true)]
    async fn at_the_bound_an_idle_peer_gives_way_and_a_busy_one_does_not() {
        let forward = local_forward(2, Duration::from_secs(60)).await;
        let peer = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));
        let t0 = Instant::now();
        assert_eq!(forward.flow_of(peer(1), t0), Some(0));
        assert_eq!(forward.flow_of(peer(2), t0), Some(1));
        assert_eq!(
            forward.flow_of(peer(1), t0),
            Some(0),
            "a peer keeps its flow"
        );
        // Full, and both peers were active within the idle time: the newcomer is refused.
        assert_eq!(forward.flow_of(peer(3), t0 + Duration::from_secs(59)), None);
        // A reply keeps peer 2 busy; peer 1 has been idle for 60 s and gives way.
        assert_eq!(
            forward.peer_of(1, t0 + Duration::from_secs(30)),
            Some(peer(2))
        );
        let t1 = t0 + Duration::from_secs(60);
        assert_eq!(forward.flow_of(peer(3), t1), Some(2), "a fresh flow id");
        assert_eq!(
            forward.peer_of(0, t1),
            None,
            "late replies to flow 0 go nowhere"
        );
        assert_eq!(forward.peer_of(1, t1), Some(peer(2)));
        // Peer 1 comes back: at the bound again, and nothing has been idle long enough.
        assert_eq!(forward.flow_of(peer(1), t1), None);
    }

    // r[verify forward.batch]
    #[tokio::test]
    async fn a_reply_the_local_socket_cannot_send_is_one_drop() {
        let forward = Arc::new(local_forward(4, Duration::from_secs(60)).await);
        let forwards = HashMap::from([(1, forward.clone())]);
        let (events, _announced) = mpsc::unbounded_channel();
        // An IPv6 peer on an IPv4 socket: EAFNOSUPPORT, an item error of this datagram only.
        let peer: SocketAddr = "[::1]:9".parse().expect("addr");
        let mut gather = Gather::default();
        assert!(gather.push(1, peer, b"reply", 64));
        flush_local(&mut gather, &forwards, &events).await;
        let snapshot = forward.reporter.stats().snapshot();
        assert_eq!(snapshot.dropped.error, 1, "one datagram, one drop");
        assert_eq!(
            (snapshot.from_target_datagrams, snapshot.from_target_bytes),
            (0, 0)
        );
    }

    // A local socket is not connected; one connected to a closed port is how a test has a send
    // error cost one datagram of a run: a pending refusal cuts the run's first reply, as it
    // would alone, and the rest leave.
    // r[verify forward.batch]
    // i[verify forward.relay.resilience]
    #[tokio::test]
    async fn a_refusal_that_cuts_a_run_of_replies_short_costs_one_reply_and_is_reported() {
        let (socket, closed) = towards_closed_port().await;
        refusal_pending(&socket, closed).await;
        let forward = Arc::new(local_forward_on(socket, 4, Duration::from_secs(60)));
        let forwards = HashMap::from([(1, forward.clone())]);
        let (events, mut announced) = mpsc::unbounded_channel();
        let peer = UdpSocket::bind(closed).await.expect("the peer listens now");
        let mut gather = Gather::default();
        for payload in [b"aa", b"bb"] {
            assert!(gather.push(1, closed, payload, 64));
        }
        flush_local(&mut gather, &forwards, &events).await;
        let mut buf = [0u8; 16];
        let n = tokio::time::timeout(Duration::from_secs(5), peer.recv(&mut buf))
            .await
            .expect("delivered")
            .expect("recv");
        assert_eq!(&buf[..n], b"bb");
        let snapshot = forward.reporter.stats().snapshot();
        assert_eq!(
            (snapshot.from_target_datagrams, snapshot.from_target_bytes),
            (1, 2),
            "the reply that left"
        );
        assert_eq!(snapshot.dropped.error, 1, "the one the refusal cost");
        assert_eq!(snapshot.transient_errors, 1, "the refusal is reported");
        assert!(
            snapshot
                .last_error
                .as_deref()
                .is_some_and(|e| e.contains("refused"))
        );
        // Relaying goes on: the local socket is not failed, and nothing says so.
        assert!(!forward.failed.load(Ordering::Relaxed));
        assert!(announced.try_recv().is_err());
    }

    // r[verify forward.local.failure]
    #[tokio::test]
    async fn a_local_socket_that_is_gone_is_announced_once_and_a_transient_error_is_not() {
        let forward = local_forward(4, Duration::from_secs(60)).await;
        let (events, mut announced) = mpsc::unbounded_channel();
        let refused = RelayError::Socket(std::io::Error::from_raw_os_error(111));
        assert!(
            forward.local_socket_error(&refused, &events),
            "ECONNREFUSED: relaying goes on"
        );
        let too_big = RelayError::Socket(std::io::Error::from_raw_os_error(90));
        assert!(
            forward.local_socket_error(&too_big, &events),
            "EMSGSIZE: one datagram"
        );
        assert_eq!(forward.reporter.stats().snapshot().dropped.error, 1);
        // Only the transient error's own report so far, no failure.
        while let Ok(event) = announced.try_recv() {
            assert!(
                !matches!(event, ClientEvent::LocalFailed { .. }),
                "{event:?}"
            );
        }

        let gone = RelayError::Socket(std::io::Error::from_raw_os_error(9));
        assert!(
            !forward.local_socket_error(&gone, &events),
            "EBADF: the socket is gone"
        );
        let local = forward.socket.local_addr().expect("addr");
        match announced.try_recv() {
            Ok(ClientEvent::LocalFailed {
                forward: 1,
                local: at,
                error,
            }) => {
                assert_eq!(at, local);
                assert!(error.contains("Bad file descriptor"), "{error}");
            }
            other => panic!("expected LocalFailed, got {other:?}"),
        }
        assert!(!forward.local_socket_error(&gone, &events));
        assert!(announced.try_recv().is_err(), "announced once");
        assert!(
            forward
                .reporter
                .stats()
                .snapshot()
                .last_error
                .is_some_and(|e| e.contains("Bad file descriptor"))
        );
    }
}
