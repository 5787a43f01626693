//! `gateway_bench clients`: a fleet of WebSocket clients in one process. Each one connects from a
//! loopback source address of its own block (so neither ephemeral ports nor a per-address limit
//! run short), authenticates, joins the room, and then either counts the text frames it receives
//! or, for every Kth client, never reads again. Answers `connected TOTAL READING`, then serves:
//!
//! - `wait T` → waits (at most 60 s) until the reading clients have received T text frames in all,
//!   answers `received C`;
//! - `closes MS` → waits at most MS ms for every reading client's connection to end, answers
//!   `closes {"reading":R,"silent":S,"ended":E,"codes":{"1012":N,...}}`;
//! - `quit` → exits.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use futures_util::{SinkExt, StreamExt};
use holdfast_gateway::Signer;
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

use crate::Opts;
use crate::control::{answer, stdin_lines};

/// Connections set up at once.
const IN_FLIGHT: usize = 128;

/// The loopback source address of client `i`: block `base` (256 addresses each) of 127.0.0.0/8,
/// `per_source` clients per address, skipping .0 and .1 of the first block.
pub fn source_addr(base: u32, per_source: usize, i: usize) -> Ipv4Addr {
    let offset = 2 + (i / per_source.max(1)) as u32;
    Ipv4Addr::from(u32::from(Ipv4Addr::new(127, 0, 0, 0)) + (base << 8) + offset)
}

struct Counter {
    received: AtomicU64,
    /// The count a `wait` is waiting for (u64::MAX when none): readers wake it only then, not
    /// on every frame.
    target: AtomicU64,
    changed: Notify,
}

pub async fn run(opts: Opts) -> Result<(), String> {
    let addr = opts.addr.ok_or("clients need --addr")?;
    let key = Signer::new(crate::SECRET);
    let counter = Arc::new(Counter {
        received: AtomicU64::new(0),
        target: AtomicU64::new(u64::MAX),
        changed: Notify::new(),
    });
    let connected: Vec<Result<(usize, WebSocketStream<TcpStream>), String>> =
        futures_util::stream::iter(0..opts.connections)
            .map(|i| {
                let key = key.clone();
                let opts = opts.clone();
                async move { connect(&key, &opts, addr, i).await.map(|ws| (i, ws)) }
            })
            .buffer_unordered(IN_FLIGHT)
            .collect()
            .await;
    let mut readers: Vec<JoinHandle<Option<u16>>> = Vec::new();
    let mut silent = Vec::new();
    for c in connected {
        let (i, ws) = c?;
        if opts.silent_every > 0 && i % opts.silent_every == opts.silent_every - 1 {
            silent.push(ws);
        } else {
            readers.push(tokio::spawn(read(ws, counter.clone())));
        }
    }
    answer(&format!(
        "connected {} {}",
        readers.len() + silent.len(),
        readers.len()
    ));
    let mut lines = stdin_lines();
    while let Some(line) = lines.recv().await {
        let mut words = line.split_whitespace();
        match words.next() {
            Some("wait") => {
                let target: u64 = words.next().and_then(|w| w.parse().ok()).unwrap_or(0);
                counter.target.store(target, Ordering::SeqCst);
                let _ = tokio::time::timeout(Duration::from_secs(60), async {
                    loop {
                        let changed = counter.changed.notified();
                        tokio::pin!(changed);
                        changed.as_mut().enable();
                        if counter.received.load(Ordering::SeqCst) >= target {
                            break;
                        }
                        changed.await;
                    }
                })
                .await;
                counter.target.store(u64::MAX, Ordering::SeqCst);
                answer(&format!(
                    "received {}",
                    counter.received.load(Ordering::Relaxed)
                ));
            }
            Some("closes") => {
                let ms: u64 = words.next().and_then(|w| w.parse().ok()).unwrap_or(10_000);
                let deadline = tokio::time::Instant::now() + Duration::from_millis(ms);
                let mut codes: BTreeMap<String, usize> = BTreeMap::new();
                let mut ended = 0;
                let reading = readers.len();
                for r in readers.drain(..) {
                    let abort = r.abort_handle();
                    match tokio::time::timeout_at(deadline, r).await {
                        Ok(Ok(code)) => {
                            ended += 1;
                            let key = code.map_or("none".to_owned(), |c| c.to_string());
                            *codes.entry(key).or_default() += 1;
                        }
                        Ok(Err(_)) => {}
                        Err(_) => abort.abort(),
                    }
                }
                let v = serde_json::json!({
                    "reading": reading,
                    "silent": silent.len(),
                    "ended": ended,
                    "codes": codes,
                });
                answer(&format!("closes {v}"));
            }
            Some("quit") => break,
            _ => answer(&format!("error unknown command {line:?}")),
        }
    }
    Ok(())
}

async fn connect(
    key: &Signer,
    opts: &Opts,
    addr: SocketAddr,
    i: usize,
) -> Result<WebSocketStream<TcpStream>, String> {
    let source = source_addr(opts.source_base, opts.per_source, i);
    let step = async {
        let socket = TcpSocket::new_v4().map_err(|e| format!("socket: {e}"))?;
        socket
            .bind(SocketAddr::new(source.into(), 0))
            .map_err(|e| format!("bind {source}: {e}"))?;
        let tcp = socket
            .connect(addr)
            .await
            .map_err(|e| format!("connect from {source}: {e}"))?;
        let config = WebSocketConfig::default()
            .read_buffer_size(crate::READ_BUFFER)
            .write_buffer_size(0);
        let (mut ws, _) =
            tokio_tungstenite::client_async_with_config(format!("ws://{addr}/"), tcp, Some(config))
                .await
                .map_err(|e| format!("upgrade: {e}"))?;
        let token = key
            .token(
                &format!("u{i}"),
                SystemTime::now() + Duration::from_secs(3600),
            )
            .map_err(|e| e.to_string())?;
        for m in [
            serde_json::json!({"type": "auth", "token": token}),
            serde_json::json!({"type": "join", "room": crate::ROOM}),
        ] {
            ws.send(Message::Text(m.to_string().into()))
                .await
                .map_err(|e| format!("send: {e}"))?;
            match ws.next().await {
                Some(Ok(Message::Text(_))) => {}
                other => return Err(format!("client {i}: expected an ack, got {other:?}")),
            }
        }
        Ok::<_, String>(ws)
    };
    tokio::time::timeout(Duration::from_secs(60), step)
        .await
        .map_err(|_| format!("client {i}: no session within 60 s"))?
}

/// Counts text frames until the connection ends; the close code received, if any.
async fn read(mut ws: WebSocketStream<TcpStream>, counter: Arc<Counter>) -> Option<u16> {
    let mut close = None;
    while let Some(Ok(msg)) = ws.next().await {
        match msg {
            Message::Text(_) => {
                let n = counter.received.fetch_add(1, Ordering::SeqCst) + 1;
                if n >= counter.target.load(Ordering::SeqCst) {
                    counter.changed.notify_waiters();
                }
            }
            Message::Close(frame) => close = frame.map(|f| u16::from(f.code)),
            _ => {}
        }
    }
    close
}
