//! `gateway_bench bare`: the baseline — a bare tokio-tungstenite broadcast server, written the
//! plain way. Each connection answers every text message with a short text (so the clients'
//! auth/join exchange works unchanged), joins the broadcast set on its second message, and gets a
//! bounded queue of the same depth as the gateway's (a full queue drops the message for that
//! connection). It uses the same tungstenite buffer sizes as the gateway, so the comparison
//! measures the gateway's own work. Commands as `gateway_server`, without `drain`.

use std::sync::{Arc, Mutex};

use futures_util::{SinkExt, StreamExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

use crate::control::{answer, stdin_lines};

type Members = Arc<Mutex<Vec<mpsc::Sender<Message>>>>;

/// The broadcast message (the same bytes on both servers).
pub fn payload() -> String {
    format!("{{\"type\":\"bench\",\"pad\":\"{}\"}}", "x".repeat(40))
}

pub async fn run() -> Result<(), String> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let members: Members = Arc::default();
    let accepting = members.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(connection(stream, accepting.clone()));
        }
    });
    answer(&format!("listen {addr}"));
    let message = Message::Text(payload().into());
    let mut lines = stdin_lines();
    let (mut queued, mut slow, mut push_us) = (0usize, 0usize, 0u128);
    while let Some(line) = lines.recv().await {
        let mut words = line.split_whitespace();
        match words.next() {
            Some("push") => {
                let n: usize = words.next().and_then(|w| w.parse().ok()).unwrap_or(1);
                let t0 = std::time::Instant::now();
                for _ in 0..n {
                    let mut m = members.lock().unwrap_or_else(|p| p.into_inner());
                    m.retain(|tx| match tx.try_send(message.clone()) {
                        Ok(()) => {
                            queued += 1;
                            true
                        }
                        Err(mpsc::error::TrySendError::Full(_)) => {
                            slow += 1;
                            true
                        }
                        Err(mpsc::error::TrySendError::Closed(_)) => false,
                    });
                }
                push_us += t0.elapsed().as_micros();
                answer(&format!("pushed {queued} {slow} {push_us}"));
            }
            Some("quit") => break,
            _ => answer(&format!("error unknown command {line:?}")),
        }
    }
    Ok(())
}

async fn connection(stream: tokio::net::TcpStream, members: Members) {
    let config = WebSocketConfig::default()
        .read_buffer_size(crate::READ_BUFFER)
        .write_buffer_size(0);
    let Ok(mut ws) = tokio_tungstenite::accept_async_with_config(stream, Some(config)).await else {
        return;
    };
    let (tx, mut rx) = mpsc::channel(crate::SEND_QUEUE);
    let mut tx = Some(tx);
    let mut seen = 0;
    loop {
        tokio::select! {
            out = rx.recv(), if tx.is_none() => match out {
                Some(m) => if ws.send(m).await.is_err() { return },
                None => return,
            },
            incoming = ws.next() => match incoming {
                Some(Ok(Message::Text(_))) => {
                    seen += 1;
                    if ws.send(Message::Text("{\"type\":\"ok\"}".into())).await.is_err() {
                        return;
                    }
                    // The second message is the join.
                    if seen == 2 {
                        if let Some(tx) = tx.take() {
                            members.lock().unwrap_or_else(|p| p.into_inner()).push(tx);
                        }
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(_)) | None => return,
            },
        }
    }
}
