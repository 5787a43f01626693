//! Shared helpers: a gateway on a loopback port, and clients that speak its protocol.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures_util::{SinkExt, StreamExt};
use holdfast_gateway::{
    Gateway, GatewayConfig, MemoryRegistry, MemoryRouting, MintClaims, RoutingMap, ServiceRegistry,
    Signer, TokenKey,
};
use tokio::net::TcpStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;

pub type Client = WebSocketStream<TcpStream>;

pub const SECRET: &[u8] = b"test secret 0123456789";

pub fn key() -> TokenKey {
    TokenKey::new(SECRET.to_vec())
}

pub fn signer() -> Signer {
    Signer::new(SECRET)
}

pub fn token(user: &str) -> String {
    signer()
        .token(user, SystemTime::now() + Duration::from_secs(3600))
        .unwrap()
}

/// Now, in Unix seconds.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A token with these claims, signed with the test secret.
pub fn token_with(claims: &MintClaims) -> String {
    signer().sign(claims).unwrap()
}

pub fn config(replica: &str) -> GatewayConfig {
    GatewayConfig::new("127.0.0.1:0".parse().unwrap(), replica, key())
}

pub struct Node {
    pub gateway: Gateway,
    pub registry: MemoryRegistry,
    pub routing: MemoryRouting,
}

pub async fn start(config: GatewayConfig) -> Node {
    let registry = MemoryRegistry::new();
    let routing = MemoryRouting::new();
    start_with(config, registry, routing).await
}

pub async fn start_with(
    config: GatewayConfig,
    registry: MemoryRegistry,
    routing: MemoryRouting,
) -> Node {
    let gateway = Gateway::start(
        config,
        Arc::new(registry.clone()),
        Arc::new(routing.clone()),
    )
    .await
    .unwrap();
    Node {
        gateway,
        registry,
        routing,
    }
}

pub async fn start_backends(
    config: GatewayConfig,
    service: Arc<dyn ServiceRegistry>,
    routing: Arc<dyn RoutingMap>,
) -> Gateway {
    Gateway::start(config, service, routing).await.unwrap()
}

pub async fn connect(gateway: &Gateway) -> Client {
    let addr = gateway.local_addr();
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (ws, _) = tokio_tungstenite::client_async(format!("ws://{addr}/"), tcp)
        .await
        .unwrap();
    ws
}

/// The next text message as pushed: a room message's position (`r[gateway.history.position]`)
/// taken off again, so tests of other rules compare what was pushed.
pub async fn next_text(ws: &mut Client) -> String {
    unframe(&next_raw(ws).await)
}

/// A room message as it was pushed: without the `room` and `pos` the gateway adds.
pub fn unframe(text: &str) -> String {
    if holdfast_gateway::history::framed_pos(text).is_none() {
        return text.to_owned();
    }
    let Ok(serde_json::Value::Object(mut map)) = serde_json::from_str(text) else {
        return text.to_owned();
    };
    map.remove("room");
    map.remove("pos");
    if map.get("type").and_then(|t| t.as_str()) == Some("message")
        && map.len() == 2
        && let Some(serde_json::Value::String(t)) = map.get("text")
    {
        return t.clone();
    }
    serde_json::Value::Object(map).to_string()
}

/// The next text message, skipping pings and pongs; panics after 5 s.
pub async fn next_raw(ws: &mut Client) -> String {
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

pub async fn send_json(ws: &mut Client, value: serde_json::Value) {
    ws.send(Message::Text(value.to_string().into()))
        .await
        .unwrap();
}

/// Connects, authenticates as `user` and joins `room`.
pub async fn member(gateway: &Gateway, user: &str, room: &str) -> Client {
    let mut ws = connect(gateway).await;
    send_json(
        &mut ws,
        serde_json::json!({"type": "auth", "token": token(user)}),
    )
    .await;
    let t = next_text(&mut ws).await;
    assert!(t.contains("authenticated"), "{t}");
    send_json(&mut ws, serde_json::json!({"type": "join", "room": room})).await;
    let t = next_text(&mut ws).await;
    assert!(t.contains("joined"), "{t}");
    ws
}

/// What a client saw at the end: the texts before the close, and the close frame (None when the
/// connection ended without one).
pub struct Ending {
    pub texts: Vec<String>,
    pub close: Option<CloseFrame>,
}

/// Reads until the connection ends (answering the close, as a well-behaved client does).
pub async fn read_to_end(ws: &mut Client, limit: Duration) -> Ending {
    let mut texts = Vec::new();
    let mut close = None;
    let _ = tokio::time::timeout(limit, async {
        while let Some(msg) = ws.next().await {
            match msg {
                Ok(Message::Text(t)) => texts.push(unframe(&t)),
                Ok(Message::Close(frame)) => close = frame,
                Ok(_) => {}
                Err(_) => break,
            }
        }
    })
    .await;
    Ending { texts, close }
}

/// Waits (polling, bounded) until `cond` holds.
pub async fn eventually(what: &str, cond: impl Fn() -> bool) {
    for _ in 0..500 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("not within 5 s: {what}");
}

/// A routing map that counts compare-and-deletes, over an in-memory one.
#[derive(Clone, Default)]
pub struct CountingRouting {
    pub inner: MemoryRouting,
    pub deletes: Arc<std::sync::atomic::AtomicUsize>,
}

impl RoutingMap for CountingRouting {
    fn set_route(
        &self,
        user: &str,
        replica: &str,
    ) -> holdfast_lifecycle::BoxFuture<Result<(), holdfast_gateway::ClusterError>> {
        self.inner.set_route(user, replica)
    }
    fn routes(
        &self,
        user: &str,
    ) -> holdfast_lifecycle::BoxFuture<Result<Vec<String>, holdfast_gateway::ClusterError>> {
        self.inner.routes(user)
    }
    fn compare_and_delete(
        &self,
        user: &str,
        replica: &str,
    ) -> holdfast_lifecycle::BoxFuture<
        Result<holdfast_gateway::CasOutcome, holdfast_gateway::ClusterError>,
    > {
        self.deletes
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inner.compare_and_delete(user, replica)
    }
    fn route_entries(
        &self,
        user: &str,
    ) -> holdfast_lifecycle::BoxFuture<Result<Vec<(String, u64)>, holdfast_gateway::ClusterError>>
    {
        self.inner.route_entries(user)
    }
    fn delete_entry(
        &self,
        user: &str,
        replica: &str,
        version: u64,
    ) -> holdfast_lifecycle::BoxFuture<
        Result<holdfast_gateway::CasOutcome, holdfast_gateway::ClusterError>,
    > {
        self.deletes
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inner.delete_entry(user, replica, version)
    }
}
