//! A gateway client for the subprocess suites: connect, authenticate, join, read, close.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, SystemTime};

use futures_util::{SinkExt, StreamExt};
use serde_json::json;
use tokio::net::TcpStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;

/// A client of the node's gateway.
pub type Client = WebSocketStream<TcpStream>;

/// The next text message (pings and pongs skipped), within 5 s.
pub async fn next_text(ws: &mut Client) -> String {
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(5), ws.next())
            .await
            .expect("a message within 5 s")
            .expect("stream open")
            .expect("no error");
        match msg {
            Message::Text(t) => return t.to_string(),
            Message::Ping(_) | Message::Pong(_) => continue,
            other => panic!("expected text, got {other:?}"),
        }
    }
}

/// Connects to the gateway at `addr`, authenticates as `user` with a token signed by `key` and
/// joins `room`.
pub async fn member(addr: &str, key: &str, user: &str, room: &str) -> Client {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut ws, _) = tokio_tungstenite::client_async(format!("ws://{addr}/"), tcp)
        .await
        .unwrap();
    let token = holdfast_gateway::Signer::new(key.as_bytes())
        .token(user, SystemTime::now() + Duration::from_secs(3600))
        .unwrap();
    for message in [
        json!({"type": "auth", "token": token}),
        json!({"type": "join", "room": room}),
    ] {
        ws.send(Message::Text(message.to_string().into()))
            .await
            .unwrap();
        next_text(&mut ws).await;
    }
    ws
}

/// The close frame the client receives (answering it), if any, within `limit`.
pub async fn close_frame(ws: &mut Client, limit: Duration) -> Option<CloseFrame> {
    let mut close = None;
    let _ = tokio::time::timeout(limit, async {
        while let Some(msg) = ws.next().await {
            match msg {
                Ok(Message::Close(frame)) => close = frame,
                Ok(_) => {}
                Err(_) => break,
            }
        }
    })
    .await;
    close
}
