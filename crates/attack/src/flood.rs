//! The attackers: each flood opens its connections from several loopback addresses, holds them
//! (or repeats its attempt) until its deadline, and counts what the node did with them. Every
//! loop ends at the deadline; nothing outlives the flood.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::{SinkExt as _, StreamExt as _};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message as WsMessage;

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
    ended_by_node: AtomicUsize,
    held_at_end: AtomicUsize,
}

impl Counts {
    fn bump(counter: &AtomicUsize) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn snapshot(&self) -> Attackers {
        Attackers {
            attempted: self.attempted.load(Ordering::Relaxed),
            accepted: self.accepted.load(Ordering::Relaxed),
            ended_by_node: self.ended_by_node.load(Ordering::Relaxed),
            held_at_end: self.held_at_end.load(Ordering::Relaxed),
        }
    }
}

/// The `i`th attacker's source address: 127.0.0.2 and up, `sources` of them.
fn source(i: usize, sources: u8) -> IpAddr {
    let n = u8::try_from(i % usize::from(sources.max(1))).unwrap_or(0);
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2 + n))
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
                let from = source(i, flood.sources);
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
                let bind = SocketAddr::new(source(usize::from(s), flood.sources), 0);
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
                let from = source(i, flood.sources);
                tasks.spawn(ws_unauthenticated(to, from, deadline, counts));
                pace(i).await;
            }
        }
        Attack::WsHostile { workers, sends } => {
            for i in 0..workers {
                let counts = counts.clone();
                let from = source(i, flood.sources);
                tasks.spawn(ws_hostile(to, from, sends, deadline, counts));
            }
        }
        Attack::QuicBadTokens { workers } => {
            let Ok((config, _)) =
                holdfast_forward::client::quinn_client_config(edges.pin, Duration::from_secs(10))
            else {
                return counts.snapshot();
            };
            for i in 0..workers {
                let bind = SocketAddr::new(source(i, flood.sources), 0);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attackers_spread_over_their_sources_and_never_use_the_probes_address() {
        let seen: std::collections::BTreeSet<IpAddr> = (0..100).map(|i| source(i, 8)).collect();
        assert_eq!(seen.len(), 8);
        assert!(!seen.contains(&IpAddr::V4(Ipv4Addr::LOCALHOST)));
        assert_eq!(source(0, 8), IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)));
        assert_eq!(source(7, 8), IpAddr::V4(Ipv4Addr::new(127, 0, 0, 9)));
        assert_eq!(source(8, 8), source(0, 8));
    }
}
