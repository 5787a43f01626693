//! Measures one drain: N clients on one gateway (by default a tenth of them never read), a room message
//! stream, then a drain under the default 5 s cap. Prints the share of reading clients that got
//! the close frame, the messages they lost, and the drain's report.
//!
//! `cargo run --release -p holdfast-gateway --example drain_measure -- 1000 [SILENT_EVERY]`
//! (every SILENT_EVERY-th client never reads; default 10, 0 for none).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures_util::{SinkExt, StreamExt};
use holdfast_gateway::{Gateway, GatewayConfig, MemoryRegistry, MemoryRouting, Signer, TokenKey};
use holdfast_lifecycle::StopReason;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;

#[tokio::main]
async fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1000);
    // Every `silent_every`-th client never reads (0: all read).
    let silent_every: usize = std::env::args()
        .nth(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10);
    const SECRET: &[u8] = b"measure 0123456789";
    let key = Signer::new(SECRET);
    let mut config = GatewayConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        "a",
        TokenKey::new(SECRET.to_vec()),
    );
    // Every client comes from 127.0.0.1: the per-address limit would refuse all but 256.
    config.per_ip_limit = 0;
    config.unauthenticated_limit = 0;
    config.unauthenticated_per_ip_limit = 0;
    let gateway = Gateway::start(
        config,
        Arc::new(MemoryRegistry::new()),
        Arc::new(MemoryRouting::new()),
    )
    .await
    .unwrap();
    let addr = gateway.local_addr();
    let mut readers = Vec::new();
    let mut silent = Vec::new();
    for i in 0..n {
        let tcp = TcpStream::connect(addr).await.unwrap();
        let (mut ws, _) = tokio_tungstenite::client_async(format!("ws://{addr}/"), tcp)
            .await
            .unwrap();
        let token = key
            .token(
                &format!("u{i}"),
                SystemTime::now() + Duration::from_secs(600),
            )
            .unwrap();
        for m in [
            serde_json::json!({"type":"auth","token":token}),
            serde_json::json!({"type":"join","room":"lobby"}),
        ] {
            ws.send(Message::Text(m.to_string().into())).await.unwrap();
            let _ack = ws.next().await;
        }
        if silent_every > 0 && i % silent_every == silent_every - 1 {
            silent.push(ws);
        } else {
            readers.push(tokio::spawn(async move {
                let mut texts = 0u64;
                let mut close = None;
                while let Some(Ok(msg)) = ws.next().await {
                    match msg {
                        Message::Text(_) => texts += 1,
                        Message::Close(f) => close = f.map(|f| u16::from(f.code)),
                        _ => {}
                    }
                }
                (texts, close)
            }));
        }
    }
    // A message stream until the stop.
    let sent = 50u64;
    for i in 0..sent {
        gateway
            .push_room("lobby", &format!("{{\"seq\":{i}}}"))
            .await;
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let started = Instant::now();
    let report = gateway.drain(StopReason::Restart, None).await;
    let took = started.elapsed();
    let reading = readers.len();
    let mut closed = 0;
    let mut lost = 0;
    for r in readers {
        let (texts, close) = r.await.unwrap();
        if close == Some(1012) {
            closed += 1;
        }
        lost += sent.saturating_sub(texts);
    }
    println!(
        "clients {n} ({reading} reading, {} silent); close 1012 received by {closed}/{reading} reading clients ({:.1} %); messages lost by reading clients {lost}; drain {took:?} (cap 5 s); force-closed {}",
        silent.len(),
        100.0 * closed as f64 / reading.max(1) as f64,
        report.force_closed,
    );
    println!("{}", serde_json::to_string_pretty(&report).unwrap());
}
