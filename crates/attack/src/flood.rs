//! The attackers: each flood opens its connections from several loopback addresses, holds them
//! (or repeats its attempt) until its deadline, and counts what the node did with them. Every
//! loop ends at the deadline; nothing outlives the flood.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::{SinkExt as _, StreamExt as _};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message as WsMessage;

use holdfast_forward::control::{self, FrameDecoder, Message};
use holdfast_forward::wire::{FlowId, encode_datagram};

use crate::answer::{Answer, classify};
use crate::node::Edges;
use crate::plan::{Attack, Edge, Flood, WsPayload};
use crate::verdict::Attackers;

/// How long an attacker waits for a connection or a handshake.
const CONNECT: Duration = Duration::from_secs(5);

/// A connection still open at the deadline counts as held only when the node has not ended it
/// within this much longer: one it accepted in the flood's last instant and is about to refuse is
/// not a place the attackers hold.
const GRACE: Duration = Duration::from_secs(1);

/// How long a bad-token attacker pauses after a connection the node refused outright.
const REFUSED_PAUSE: Duration = Duration::from_millis(50);

/// Connections are opened in batches this large, a few milliseconds apart, so the flood fills the
/// node's listeners rather than the kernel's accept backlog.
const BATCH: usize = 100;

#[derive(Default)]
struct Counts {
    attempted: AtomicUsize,
    accepted: AtomicUsize,
    authenticated: AtomicUsize,
    ended_by_node: AtomicUsize,
    held_at_end: AtomicUsize,
    refused: AtomicUsize,
    overreach: AtomicUsize,
}

impl Counts {
    fn bump(counter: &AtomicUsize) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn snapshot(&self) -> Attackers {
        Attackers {
            attempted: self.attempted.load(Ordering::Relaxed),
            accepted: self.accepted.load(Ordering::Relaxed),
            authenticated: self.authenticated.load(Ordering::Relaxed),
            ended_by_node: self.ended_by_node.load(Ordering::Relaxed),
            held_at_end: self.held_at_end.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            overreach: self.overreach.load(Ordering::Relaxed),
        }
    }
}

fn target(edges: &Edges, edge: Edge) -> SocketAddr {
    match edge {
        Edge::Admin => edges.admin,
        Edge::Http01 => edges.http01,
        Edge::Forward => edges.forward,
        Edge::Gateway => edges.gateway,
    }
}

/// Runs `flood` against `edges` until `deadline`; returns what its attackers saw.
pub async fn run(flood: &Flood, edges: &Edges, deadline: Instant) -> Attackers {
    let counts = Arc::new(Counts::default());
    let to = target(edges, flood.edge);
    let mut tasks = tokio::task::JoinSet::new();
    match flood.attack {
        Attack::Slowloris { connections } => {
            for i in 0..connections {
                let counts = counts.clone();
                let from = flood.source(i);
                tasks.spawn(slowloris(to, from, deadline, counts));
                pace(i).await;
            }
        }
        Attack::QuicUnauthenticated { connections } => {
            let Ok((config, _)) =
                holdfast_forward::client::quinn_client_config(edges.pin, Duration::from_secs(60))
            else {
                return counts.snapshot();
            };
            let mut endpoints = Vec::new();
            for s in 0..flood.sources {
                let bind = SocketAddr::new(flood.source(usize::from(s)), 0);
                if let Ok(e) = quinn::Endpoint::client(bind) {
                    endpoints.push(e);
                }
            }
            if endpoints.is_empty() {
                return counts.snapshot();
            }
            for i in 0..connections {
                let endpoint = endpoints[i % endpoints.len()].clone();
                let counts = counts.clone();
                tasks.spawn(quic_unauthenticated(
                    endpoint,
                    config.clone(),
                    to,
                    deadline,
                    counts,
                ));
                pace(i).await;
            }
        }
        Attack::WsUnauthenticated { connections } => {
            for i in 0..connections {
                let counts = counts.clone();
                let from = flood.source(i);
                tasks.spawn(ws_unauthenticated(to, from, deadline, counts));
                pace(i).await;
            }
        }
        Attack::WsHostile { workers, sends } => {
            for i in 0..workers {
                let counts = counts.clone();
                let from = flood.source(i);
                tasks.spawn(ws_hostile(to, from, sends, deadline, counts));
            }
        }
        Attack::QuicStreams { connections } | Attack::FlowChurn { connections } => {
            let Ok((config, _)) =
                holdfast_forward::client::quinn_client_config(edges.pin, Duration::from_secs(60))
            else {
                return counts.snapshot();
            };
            let churn = matches!(flood.attack, Attack::FlowChurn { .. });
            for i in 0..connections {
                let bind = SocketAddr::new(flood.source(i), 0);
                let Ok(endpoint) = quinn::Endpoint::client(bind) else {
                    continue;
                };
                let attacker = Authenticated {
                    endpoint,
                    config: config.clone(),
                    to,
                    token: edges.attacker_token.clone(),
                    deadline,
                    counts: counts.clone(),
                };
                if churn {
                    tasks.spawn(attacker.churn_flows(edges.echo));
                } else {
                    tasks.spawn(attacker.flood_streams());
                }
            }
        }
        Attack::QuicUnvalidated { packets } => {
            let Some(initials) = initials(edges, INITIALS).await else {
                return counts.snapshot();
            };
            let initials = Arc::new(initials);
            let next = Arc::new(AtomicUsize::new(0));
            for i in 0..UNVALIDATED_WORKERS {
                tasks.spawn(unvalidated(
                    flood.source(i),
                    to,
                    initials.clone(),
                    next.clone(),
                    packets,
                    deadline,
                    counts.clone(),
                ));
            }
        }
        Attack::QuicBadTokens { workers } => {
            let Ok((config, _)) =
                holdfast_forward::client::quinn_client_config(edges.pin, Duration::from_secs(10))
            else {
                return counts.snapshot();
            };
            for i in 0..workers {
                let bind = SocketAddr::new(flood.source(i), 0);
                let Ok(endpoint) = quinn::Endpoint::client(bind) else {
                    continue;
                };
                let counts = counts.clone();
                tasks.spawn(quic_bad_tokens(
                    endpoint,
                    config.clone(),
                    to,
                    deadline,
                    counts,
                ));
            }
        }
    }
    // Every task ends by the deadline; the margin covers an attempt begun just before it (its
    // connect, its upgrade or handshake, and its wait for the node's close) and the grace.
    let _ = tokio::time::timeout_at(deadline + CONNECT * 3 + GRACE, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    tasks.abort_all();
    counts.snapshot()
}

async fn pace(i: usize) {
    if (i + 1) % BATCH == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn connect_from(from: IpAddr, to: SocketAddr) -> Option<TcpStream> {
    let socket = TcpSocket::new_v4().ok()?;
    socket.bind(SocketAddr::new(from, 0)).ok()?;
    tokio::time::timeout(CONNECT, socket.connect(to))
        .await
        .ok()?
        .ok()
}

/// Half a request, then one header byte a second; when the node ends the connection, another
/// after a second's pause, until the flood ends (a slowloris attacker keeps its places filled).
async fn slowloris(to: SocketAddr, from: IpAddr, deadline: Instant, counts: Arc<Counts>) {
    while Instant::now() < deadline {
        if slowloris_once(to, from, deadline, &counts).await {
            return;
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
            () = tokio::time::sleep_until(deadline) => return,
        }
    }
}

/// One slowloris connection; true when it was still held at the deadline.
async fn slowloris_once(to: SocketAddr, from: IpAddr, deadline: Instant, counts: &Counts) -> bool {
    Counts::bump(&counts.attempted);
    let Some(mut stream) = connect_from(from, to).await else {
        return false;
    };
    Counts::bump(&counts.accepted);
    let head = format!("GET /v1/status HTTP/1.1\r\nHost: {to}\r\nX-Slow: ");
    if stream.write_all(head.as_bytes()).await.is_err() {
        Counts::bump(&counts.ended_by_node);
        return false;
    }
    let mut buf = [0u8; 512];
    let mut drip = tokio::time::interval_at(
        Instant::now() + Duration::from_secs(1),
        Duration::from_secs(1),
    );
    loop {
        tokio::select! {
            read = stream.read(&mut buf) => match read {
                // An answer (408, 400) is read and the wait for the close goes on.
                Ok(n) if n > 0 => {}
                _ => {
                    Counts::bump(&counts.ended_by_node);
                    return false;
                }
            },
            _ = drip.tick() => {
                if stream.write_all(b"a").await.is_err() {
                    Counts::bump(&counts.ended_by_node);
                    return false;
                }
            }
            () = tokio::time::sleep_until(deadline) => {
                let ended = tokio::time::timeout(GRACE, async {
                    while let Ok(n) = stream.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                    }
                })
                .await;
                match ended {
                    Ok(()) => Counts::bump(&counts.ended_by_node),
                    Err(_) => Counts::bump(&counts.held_at_end),
                }
                return true;
            }
        }
    }
}

/// A finished handshake, then silence: no stream, no credential.
async fn quic_unauthenticated(
    endpoint: quinn::Endpoint,
    config: quinn::ClientConfig,
    to: SocketAddr,
    deadline: Instant,
    counts: Arc<Counts>,
) {
    Counts::bump(&counts.attempted);
    let Ok(connecting) = endpoint.connect_with(config, to, holdfast_forward::identity::SERVER_NAME)
    else {
        return;
    };
    let Ok(Ok(conn)) = tokio::time::timeout(CONNECT, connecting).await else {
        return;
    };
    Counts::bump(&counts.accepted);
    let ended = tokio::time::timeout_at(deadline + GRACE, conn.closed()).await;
    match ended {
        Ok(_) => Counts::bump(&counts.ended_by_node),
        Err(_) => {
            Counts::bump(&counts.held_at_end);
            conn.close(0u32.into(), b"flood over");
        }
    }
}

/// An upgraded WebSocket that never sends its token.
async fn ws_unauthenticated(to: SocketAddr, from: IpAddr, deadline: Instant, counts: Arc<Counts>) {
    Counts::bump(&counts.attempted);
    let Some(stream) = connect_from(from, to).await else {
        return;
    };
    let url = format!("ws://{to}/");
    let Ok(Ok((mut ws, _))) =
        tokio::time::timeout(CONNECT, tokio_tungstenite::client_async(url, stream)).await
    else {
        return;
    };
    Counts::bump(&counts.accepted);
    loop {
        tokio::select! {
            msg = ws.next() => match msg {
                Some(Ok(WsMessage::Close(_)) | Err(_)) | None => {
                    Counts::bump(&counts.ended_by_node);
                    return;
                }
                Some(Ok(_)) => {}
            },
            () = tokio::time::sleep_until(deadline + GRACE) => {
                Counts::bump(&counts.held_at_end);
                return;
            }
        }
    }
}

/// Upgrade, send something hostile, wait for the close; again until the deadline.
async fn ws_hostile(
    to: SocketAddr,
    from: IpAddr,
    sends: WsPayload,
    deadline: Instant,
    counts: Arc<Counts>,
) {
    let url = format!("ws://{to}/");
    let auth = serde_json::json!({"type": "auth", "token": "not-a-token.AAAA"}).to_string();
    let oversized = "x".repeat(1 << 20);
    while Instant::now() < deadline {
        Counts::bump(&counts.attempted);
        let Some(stream) = connect_from(from, to).await else {
            tokio::time::sleep(REFUSED_PAUSE).await;
            continue;
        };
        let Ok(Ok((mut ws, _))) = tokio::time::timeout(
            CONNECT,
            tokio_tungstenite::client_async(url.as_str(), stream),
        )
        .await
        else {
            tokio::time::sleep(REFUSED_PAUSE).await;
            continue;
        };
        Counts::bump(&counts.accepted);
        let sent = match sends {
            WsPayload::BadToken => ws.send(WsMessage::text(auth.clone())).await.is_ok(),
            WsPayload::Oversized => ws.send(WsMessage::text(oversized.clone())).await.is_ok(),
            // Under the WebSocket layer: a whole frame header with every reserved bit set and a
            // reserved opcode (masked, empty), then bytes that are no frame at all.
            WsPayload::Malformed => ws
                .get_mut()
                .write_all(b"\xff\x80\x00\x00\x00\x00junk")
                .await
                .is_ok(),
        };
        if !sent {
            Counts::bump(&counts.ended_by_node);
            continue;
        }
        let ended = tokio::time::timeout(CONNECT, async {
            while let Some(msg) = ws.next().await {
                if matches!(msg, Ok(WsMessage::Close(_)) | Err(_)) {
                    break;
                }
            }
        })
        .await;
        // A connection the node did not end is one it kept for the attacker.
        match ended {
            Ok(()) => Counts::bump(&counts.ended_by_node),
            Err(_) => Counts::bump(&counts.held_at_end),
        }
    }
}

/// Handshake, present a credential that is not one, wait for the refusal; again until the
/// deadline. A source the node paces is refused before its handshake.
async fn quic_bad_tokens(
    endpoint: quinn::Endpoint,
    config: quinn::ClientConfig,
    to: SocketAddr,
    deadline: Instant,
    counts: Arc<Counts>,
) {
    let hello = holdfast_forward::control::encode(&holdfast_forward::control::Message::Hello {
        credential: b"not-the-token-not-the-token-not-the-token".to_vec(),
    });
    while Instant::now() < deadline {
        Counts::bump(&counts.attempted);
        let Ok(connecting) =
            endpoint.connect_with(config.clone(), to, holdfast_forward::identity::SERVER_NAME)
        else {
            tokio::time::sleep(REFUSED_PAUSE).await;
            continue;
        };
        let Ok(Ok(conn)) = tokio::time::timeout(CONNECT, connecting).await else {
            tokio::time::sleep(REFUSED_PAUSE).await;
            continue;
        };
        Counts::bump(&counts.accepted);
        let refused = tokio::time::timeout(CONNECT, async {
            let (mut send, _recv) = conn.open_bi().await.ok()?;
            send.write_all(&hello).await.ok()?;
            conn.closed().await;
            Some(())
        })
        .await;
        match refused {
            Ok(Some(())) => Counts::bump(&counts.ended_by_node),
            // Kept open past the wait: the node let the wrong credential hold a connection.
            Err(_) => Counts::bump(&counts.held_at_end),
            // The stream could not be opened or written: the node ended it.
            Ok(None) => Counts::bump(&counts.ended_by_node),
        }
        conn.close(0u32.into(), b"next");
    }
}

/// An authenticated attacker: its connection, its credential (the attackers' own) and its
/// deadline.
struct Authenticated {
    endpoint: quinn::Endpoint,
    config: quinn::ClientConfig,
    to: SocketAddr,
    token: String,
    deadline: Instant,
    counts: Arc<Counts>,
}

/// What came of presenting the credential.
enum Welcomed {
    /// Authenticated: the connection and its control stream.
    Yes(quinn::Connection, quinn::SendStream, quinn::RecvStream),
    /// Refused or cut off by the node (counted).
    No,
}

/// How long an attacker waits for a stream the node may not grant.
const STREAM_WAIT: Duration = Duration::from_millis(500);

/// Forwards each churning connection opens (up to the node's 64 a connection): at 256 flows a
/// forward, 16 forwards ask for the whole pool of 4,096 flow sockets.
const CHURN_FORWARDS: u32 = 16;

impl Authenticated {
    /// Connects, presents the attackers' credential, and reads the answer.
    async fn welcome(&self) -> Welcomed {
        Counts::bump(&self.counts.attempted);
        let Ok(connecting) = self.endpoint.connect_with(
            self.config.clone(),
            self.to,
            holdfast_forward::identity::SERVER_NAME,
        ) else {
            return Welcomed::No;
        };
        let Ok(Ok(conn)) = tokio::time::timeout(CONNECT, connecting).await else {
            return Welcomed::No;
        };
        Counts::bump(&self.counts.accepted);
        let answer = tokio::time::timeout(CONNECT, async {
            let (mut send, mut recv) = conn.open_bi().await.ok()?;
            send.write_all(&control::encode(&Message::Hello {
                credential: self.token.as_bytes().to_vec(),
            }))
            .await
            .ok()?;
            let mut decoder = FrameDecoder::new();
            let message = next_message(&mut recv, &mut decoder).await?;
            Some((send, recv, message))
        })
        .await;
        match answer {
            Ok(Some((send, recv, Message::Welcome))) => {
                Counts::bump(&self.counts.authenticated);
                Welcomed::Yes(conn, send, recv)
            }
            // Refused (past the credential's bound) or closed: the node ended it.
            _ => {
                Counts::bump(&self.counts.ended_by_node);
                conn.close(0u32.into(), b"refused");
                Welcomed::No
            }
        }
    }

    /// Counts the connection at the deadline: held if the node has not ended it by then.
    async fn hold(&self, conn: &quinn::Connection) {
        match tokio::time::timeout_at(self.deadline + GRACE, conn.closed()).await {
            Ok(_) => Counts::bump(&self.counts.ended_by_node),
            Err(_) => Counts::bump(&self.counts.held_at_end),
        }
        conn.close(0u32.into(), b"flood over");
    }

    /// Opens every stream it can beyond the control stream (each one the node grants is an
    /// overreach), then writes requests on the control stream without ever reading the answers,
    /// until the node stops taking them or the flood ends.
    async fn flood_streams(self) {
        let Welcomed::Yes(conn, mut send, _recv) = self.welcome().await else {
            return;
        };
        let extra = async {
            let bi = tokio::time::timeout(STREAM_WAIT, conn.open_bi()).await;
            let uni = tokio::time::timeout(STREAM_WAIT, conn.open_uni()).await;
            usize::from(matches!(bi, Ok(Ok(_)))) + usize::from(matches!(uni, Ok(Ok(_))))
        };
        let granted = extra.await;
        self.counts.overreach.fetch_add(granted, Ordering::Relaxed);
        // Requests whose answers back up: the node must stop reading them at its window.
        let chunk = control::encode(&Message::Close { forward: 9 }).repeat(400);
        let writing = async {
            loop {
                if send.write_all(&chunk).await.is_err() {
                    return;
                }
            }
        };
        tokio::select! {
            () = writing => {}
            () = tokio::time::sleep_until(self.deadline) => {}
        }
        self.hold(&conn).await;
    }

    /// Opens forwards to `target` (the node's allowed echo: every flow's target answers, the
    /// costlier case for the node) and sends each datagram from a flow never seen before, until
    /// the flood ends.
    async fn churn_flows(self, target: SocketAddr) {
        let Welcomed::Yes(conn, mut send, mut recv) = self.welcome().await else {
            return;
        };
        let mut decoder = FrameDecoder::new();
        let mut opened = Vec::new();
        for forward in 1..=CHURN_FORWARDS {
            let open = control::encode(&Message::Open { forward, target });
            if send.write_all(&open).await.is_err() {
                break;
            }
            match tokio::time::timeout(CONNECT, next_message(&mut recv, &mut decoder)).await {
                Ok(Some(Message::Opened { forward })) => opened.push(forward),
                Ok(Some(_)) => {}
                _ => break,
            }
        }
        // The answers that come later (a flow's status) are read and let go.
        let drain = tokio::spawn(async move {
            let mut buf = vec![0u8; 16 << 10];
            while let Ok(Some(_)) = recv.read(&mut buf).await {}
        });
        if !opened.is_empty() {
            let mut flow = 0u64;
            while Instant::now() < self.deadline {
                for _ in 0..CHURN_BATCH {
                    let forward = opened[usize::try_from(flow).unwrap_or(0) % opened.len()];
                    let datagram = encode_datagram(FlowId { forward, flow }, b"churn");
                    if conn.send_datagram(datagram.into()).is_err() {
                        break;
                    }
                    flow += 1;
                }
                tokio::time::sleep(CHURN_PAUSE).await;
            }
        }
        self.hold(&conn).await;
        drain.abort();
    }
}

/// Datagrams a churning connection sends between pauses (about 20,000 a second).
const CHURN_BATCH: usize = 20;
/// Its pause between batches.
const CHURN_PAUSE: Duration = Duration::from_millis(1);

/// The next control message, or `None` when the stream ended or carried something else.
async fn next_message(recv: &mut quinn::RecvStream, decoder: &mut FrameDecoder) -> Option<Message> {
    let mut buf = [0u8; 1024];
    loop {
        if let Some(m) = decoder.next_message() {
            return m.ok();
        }
        let n = recv.read(&mut buf).await.ok()??;
        decoder.push(&buf[..n]);
    }
}

/// Distinct Initials the unvalidated flood replays, in turn.
const INITIALS: usize = 64;
/// Concurrent senders of the unvalidated flood.
const UNVALIDATED_WORKERS: usize = 50;
/// How long a sender waits for the node's answer to one Initial.
const ANSWER_WAIT: Duration = Duration::from_millis(500);

/// `n` real first flights of a client to the node: each connection attempt's first datagram (a
/// padded Initial with its own connection id), caught on a socket of our own so the node never
/// sees the attempt itself.
async fn initials(edges: &Edges, n: usize) -> Option<Vec<Vec<u8>>> {
    let (config, _) =
        holdfast_forward::client::quinn_client_config(edges.pin, Duration::from_secs(10)).ok()?;
    let trap = tokio::net::UdpSocket::bind("127.0.0.1:0").await.ok()?;
    let at = trap.local_addr().ok()?;
    let endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().ok()?).ok()?;
    let mut out = Vec::with_capacity(n);
    let mut buf = vec![0u8; 2048];
    while out.len() < n {
        let connecting = endpoint
            .connect_with(config.clone(), at, holdfast_forward::identity::SERVER_NAME)
            .ok()?;
        let (len, _) = tokio::time::timeout(CONNECT, trap.recv_from(&mut buf))
            .await
            .ok()?
            .ok()?;
        drop(connecting);
        // Retransmissions of an earlier attempt carry its connection id again: one of each.
        let packet = buf[..len].to_vec();
        if !out.contains(&packet) {
            out.push(packet);
        }
    }
    endpoint.close(0u32.into(), b"caught");
    Some(out)
}

/// How long a sender waits, after an answer of Initial packets only, for more of the same flight:
/// a node going further sends its Handshake packets right after its Initial, coalesced or not.
const FLIGHT_WAIT: Duration = Duration::from_millis(50);

/// Sends Initials to the node, each from a new socket (a new source port) on `from`, and never
/// answers. Each answer is read packet by packet (`answer::classify`): a Retry is the node
/// turning the attempt away (counted as ended by the node); Initial packets only are its refusal
/// (a CONNECTION_CLOSE: its pacing of a source that failed to authenticate, counted as refused;
/// quinn drops, never answers, an Initial past its bounds on attempts); a Handshake
/// packet, or an answer that cannot be read as either, is the node taking an unvalidated attempt
/// further (an overreach).
async fn unvalidated(
    from: IpAddr,
    to: SocketAddr,
    initials: Arc<Vec<Vec<u8>>>,
    next: Arc<AtomicUsize>,
    packets: usize,
    deadline: Instant,
    counts: Arc<Counts>,
) {
    let mut buf = vec![0u8; 2048];
    while Instant::now() < deadline {
        let i = next.fetch_add(1, Ordering::Relaxed);
        if i >= packets {
            return;
        }
        let Ok(socket) = tokio::net::UdpSocket::bind(SocketAddr::new(from, 0)).await else {
            return;
        };
        Counts::bump(&counts.attempted);
        if socket
            .send_to(&initials[i % initials.len()], to)
            .await
            .is_err()
        {
            continue;
        }
        let Ok(Ok((n, _))) = tokio::time::timeout(ANSWER_WAIT, socket.recv_from(&mut buf)).await
        else {
            continue;
        };
        // Answered at all: the attempt reached the node (the flood measured something).
        Counts::bump(&counts.accepted);
        let mut answer = classify(&buf[..n]);
        while answer == Answer::Refused {
            match tokio::time::timeout(FLIGHT_WAIT, socket.recv_from(&mut buf)).await {
                Ok(Ok((n, _))) => match classify(&buf[..n]) {
                    Answer::Refused => {}
                    further => answer = further,
                },
                _ => break,
            }
        }
        match answer {
            Answer::Retry => Counts::bump(&counts.ended_by_node),
            // Answered only: neither past a bound nor through the node's address validation.
            Answer::VersionNegotiation => {}
            Answer::Refused => Counts::bump(&counts.refused),
            Answer::Handshake | Answer::Unreadable => Counts::bump(&counts.overreach),
        }
    }
}
