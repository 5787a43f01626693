//! The gateway's settings, with the defaults the node embeds.

use std::net::SocketAddr;
use std::time::Duration;

use crate::token::TokenKey;

/// Which close code a drain sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CloseChoice {
    /// From the stop's reason: 1012 (Service Restart) for a restart, 1001 (Going Away) for a
    /// shutdown.
    #[default]
    FromReason,
    /// Always 1012 with a reconnect hint.
    Restart,
    /// Always 1001.
    GoingAway,
}

/// How a drain spends its time.
#[derive(Debug, Clone)]
pub struct DrainConfig {
    /// The cap on the whole drain (default 5 s).
    pub total: Duration,
    /// Shares of `total`, in order: stop-accepting (readiness, refusal, deregistration), flush and
    /// close frames, close handshakes, routing cleanup. Each step ends by its cumulative share, so
    /// time an early step does not use passes on to the next.
    pub shares: [u32; 4],
    /// The Retry-After (seconds) sent with a 503 to upgrades refused while draining.
    pub retry_after_secs: u32,
    /// The shortest reconnect hint sent with 1012.
    pub reconnect_min: Duration,
    /// Reconnect hints are spread over `[reconnect_min, reconnect_min + reconnect_spread)` so
    /// that clients do not all come back at one instant.
    pub reconnect_spread: Duration,
    /// Which close code to send.
    pub close: CloseChoice,
}

impl Default for DrainConfig {
    fn default() -> Self {
        Self {
            total: Duration::from_secs(5),
            shares: [20, 20, 30, 30],
            retry_after_secs: 2,
            reconnect_min: Duration::from_millis(500),
            reconnect_spread: Duration::from_millis(2000),
            close: CloseChoice::FromReason,
        }
    }
}

/// Everything the gateway needs to run.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// Where to listen.
    pub listen: SocketAddr,
    /// This replica's id in the cluster.
    pub replica_id: String,
    /// The address the service registry advertises (defaults to the bound address).
    pub advertise: Option<String>,
    /// The key client tokens are signed with.
    pub token_key: TokenKey,
    /// The largest message a client may send (bytes).
    pub max_message_size: usize,
    /// The largest frame a client may send (bytes).
    pub max_frame_size: usize,
    /// Messages queued per connection before it counts as a slow consumer.
    pub send_queue: usize,
    /// tungstenite's read buffer per connection (its 128 KiB default is far too much for many
    /// idle connections).
    pub read_buffer: usize,
    /// tungstenite's write buffer target per connection.
    pub write_buffer: usize,
    /// How long a client has to complete the upgrade.
    pub handshake_timeout: Duration,
    /// How long a client has to authenticate after the upgrade.
    pub auth_timeout: Duration,
    /// How often the server pings.
    pub ping_interval: Duration,
    /// A connection from which nothing arrived for this long is closed.
    pub idle_timeout: Duration,
    /// How long a connection the gateway closed (outside a drain) may take to answer the close
    /// before it is dropped.
    pub close_timeout: Duration,
    /// Registry shards.
    pub shards: usize,
    /// The drain.
    pub drain: DrainConfig,
}

impl GatewayConfig {
    /// The defaults, for a replica id and a token key.
    pub fn new(listen: SocketAddr, replica_id: impl Into<String>, token_key: TokenKey) -> Self {
        Self {
            listen,
            replica_id: replica_id.into(),
            advertise: None,
            token_key,
            max_message_size: 64 * 1024,
            max_frame_size: 64 * 1024,
            send_queue: 64,
            read_buffer: 4 * 1024,
            write_buffer: 0,
            handshake_timeout: Duration::from_secs(10),
            auth_timeout: Duration::from_secs(10),
            ping_interval: Duration::from_secs(20),
            idle_timeout: Duration::from_secs(60),
            close_timeout: Duration::from_secs(2),
            shards: 16,
            drain: DrainConfig::default(),
        }
    }
}
