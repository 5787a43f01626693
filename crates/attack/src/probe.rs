//! The real client of each edge: one whole exchange a probe, timed; anything but the right answer
//! within the timeout is a failure.

use std::io::{Read as _, Write as _};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use futures_util::{SinkExt as _, StreamExt as _};
use holdfast_forward::control::{self, FrameDecoder, Message};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message as WsMessage;

use crate::latency::Sample;
use crate::node::Edges;
use crate::plan::Edge;

/// How long a probe may take before it counts as not served: longer than the forward's 5 s for
/// a handshake and its credential, so the node, not the probe, ends a slow one (a client that
/// gives up mid-handshake is a failure the node paces its source for).
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// The probes' shared state: one QUIC client endpoint for the forward's probes.
pub struct Prober {
    edges: Edges,
    quic: quinn::Endpoint,
    quic_config: quinn::ClientConfig,
}

impl Prober {
    /// A prober of `edges`, its QUIC endpoint on 127.0.0.1 (the attackers use 127.0.0.2 and up).
    pub fn new(edges: Edges) -> anyhow::Result<Prober> {
        let (quic_config, _) =
            holdfast_forward::client::quinn_client_config(edges.pin, Duration::from_secs(10))?;
        let quic = quinn::Endpoint::client("127.0.0.1:0".parse()?)?;
        Ok(Prober {
            edges,
            quic,
            quic_config,
        })
    }

    /// One probe of `edge`.
    pub async fn probe(&self, edge: Edge) -> Sample {
        let start = Instant::now();
        let served = tokio::time::timeout(TIMEOUT, async {
            match edge {
                Edge::Admin => http_status(self.edges.admin, "/v1/status", None).await == Some(200),
                Edge::Http01 => {
                    http_status(
                        self.edges.http01,
                        "/.well-known/acme-challenge/probe",
                        Some("attack.holdfast.test"),
                    )
                    .await
                        == Some(404)
                }
                Edge::Forward => self.forward().await.is_ok(),
                Edge::Gateway => self.gateway().await.is_ok(),
            }
        })
        .await;
        match served {
            Ok(true) => Sample::Served(start.elapsed()),
            _ => Sample::Failed,
        }
    }

    // i[impl attack.latency+2]
    /// Connect, authenticate, be welcomed, open a forward to the echo, have a datagram relayed
    /// there and back, leave.
    async fn forward(&self) -> anyhow::Result<()> {
        let conn = self
            .quic
            .connect_with(
                self.quic_config.clone(),
                self.edges.forward,
                holdfast_forward::identity::SERVER_NAME,
            )?
            .await?;
        let (mut send, mut recv) = conn.open_bi().await?;
        send.write_all(&control::encode(&Message::Hello {
            credential: self.edges.forward_token.as_bytes().to_vec(),
        }))
        .await?;
        let mut decoder = FrameDecoder::new();
        let answer = next_message(&mut recv, &mut decoder).await?;
        anyhow::ensure!(answer == Message::Welcome, "answered {answer:?}");
        send.write_all(&control::encode(&Message::Open {
            forward: 1,
            target: self.edges.echo,
        }))
        .await?;
        let answer = next_message(&mut recv, &mut decoder).await?;
        anyhow::ensure!(
            answer == Message::Opened { forward: 1 },
            "answered {answer:?}"
        );
        let relayed = relay_once(&conn).await;
        conn.close(
            quinn::VarInt::from_u32(holdfast_forward::transport::close_code::CLIENT_DONE),
            b"probe done",
        );
        relayed
    }

    /// Upgrade, authenticate, ping, be ponged, leave.
    async fn gateway(&self) -> anyhow::Result<()> {
        let stream = TcpStream::connect(self.edges.gateway).await?;
        let url = format!("ws://{}/", self.edges.gateway);
        let (mut ws, _) = tokio_tungstenite::client_async(url, stream).await?;
        let token = holdfast_gateway::Signer::new(&self.edges.gateway_key)
            .token("probe", SystemTime::now() + Duration::from_secs(300))?;
        let auth = serde_json::json!({"type": "auth", "token": token}).to_string();
        ws.send(WsMessage::text(auth)).await?;
        ws.send(WsMessage::Ping(b"probe".to_vec().into())).await?;
        while let Some(msg) = ws.next().await {
            match msg? {
                WsMessage::Pong(_) => {
                    let _ = ws.close(None).await;
                    return Ok(());
                }
                WsMessage::Close(frame) => anyhow::bail!("closed: {frame:?}"),
                _ => {}
            }
        }
        anyhow::bail!("the connection ended before the pong")
    }
}

/// The next control message on `recv`.
async fn next_message(
    recv: &mut quinn::RecvStream,
    decoder: &mut FrameDecoder,
) -> anyhow::Result<Message> {
    let mut buf = [0u8; 1024];
    loop {
        if let Some(m) = decoder.next_message() {
            return Ok(m?);
        }
        let n = recv
            .read(&mut buf)
            .await?
            .ok_or_else(|| anyhow::anyhow!("the node closed the control stream"))?;
        decoder.push(&buf[..n]);
    }
}

/// How often the probe's datagram is sent again while no echo came back (a datagram may be
/// dropped; a flow socket may be waiting for its fair share of the pool).
const RESEND: Duration = Duration::from_millis(100);

/// A datagram on forward 1 to the echo and back.
async fn relay_once(conn: &quinn::Connection) -> anyhow::Result<()> {
    use holdfast_forward::wire::{FlowId, decode_datagram, encode_datagram};
    let id = FlowId {
        forward: 1,
        flow: 0,
    };
    let payload = b"probe through the forward";
    let datagram = bytes::Bytes::from(encode_datagram(id, payload));
    loop {
        conn.send_datagram(datagram.clone())?;
        if let Ok(back) = tokio::time::timeout(RESEND, conn.read_datagram()).await {
            let back = back?;
            let (from, echoed) =
                decode_datagram(&back).map_err(|e| anyhow::anyhow!("a datagram back: {e:?}"))?;
            if from == id && echoed == payload {
                return Ok(());
            }
        }
    }
}

/// The body of `GET path` on `addr` (status 200 only).
pub async fn http_body(addr: SocketAddr, path: &str) -> Option<String> {
    let mut stream = TcpStream::connect(addr).await.ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut answer = Vec::new();
    tokio::time::timeout(TIMEOUT, stream.read_to_end(&mut answer))
        .await
        .ok()?
        .ok()?;
    if status_of(&answer) != Some(200) {
        return None;
    }
    let text = String::from_utf8_lossy(&answer);
    let (_, body) = text.split_once("\r\n\r\n")?;
    Some(body.to_owned())
}

/// The status code of `GET path` on `addr` (`Host` the address itself unless given), reading
/// the whole answer; `None` when none came.
pub async fn http_status(addr: SocketAddr, path: &str, host: Option<&str>) -> Option<u16> {
    let mut stream = TcpStream::connect(addr).await.ok()?;
    let host = host.map_or_else(|| addr.to_string(), str::to_owned);
    let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.ok()?;
    status_of(&answer)
}

/// The same, blocking, for the readiness wait before the runtime's work begins.
pub fn blocking_status(addr: SocketAddr, path: &str) -> Option<u16> {
    let mut stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).ok()?;
    status_of(&answer)
}

fn status_of(answer: &[u8]) -> Option<u16> {
    let text = std::str::from_utf8(answer.get(..answer.len().min(64))?).ok()?;
    text.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()
}

/// Probes every edge every `every` until `stop` says so, and returns each edge's samples.
pub async fn watch(
    prober: Arc<Prober>,
    every: Duration,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Vec<(Edge, Vec<Sample>)> {
    let mut tasks = Vec::new();
    for edge in Edge::ALL {
        let prober = prober.clone();
        let mut stop = stop.clone();
        tasks.push(tokio::spawn(async move {
            let mut samples = Vec::new();
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => samples.push(prober.probe(edge).await),
                    _ = stop.changed() => break,
                }
                if *stop.borrow() {
                    break;
                }
            }
            (edge, samples)
        }));
    }
    let mut out = Vec::new();
    for t in tasks {
        if let Ok(r) = t.await {
            out.push(r);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_line_gives_its_code_and_anything_else_none() {
        assert_eq!(status_of(b"HTTP/1.1 200 OK\r\n\r\n"), Some(200));
        assert_eq!(status_of(b"HTTP/1.1 404 Not Found\r\n"), Some(404));
        assert_eq!(status_of(b""), None);
        assert_eq!(status_of(b"SSH-2.0-x"), None);
    }
}
