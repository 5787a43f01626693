//! The gateway's settings, with the defaults the node embeds.

use std::net::SocketAddr;
use std::time::Duration;

use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

use crate::tls::TlsFiles;
use crate::token::TokenKey;

/// The default cap on one source's unauthenticated connections: a thirty-second of the default
/// pool (1024), so it takes 32 sources to fill it, and more than a browser or a NAT's worth of
/// clients authenticating at one instant.
pub const DEFAULT_UNAUTHENTICATED_PER_IP: usize = 32;

/// The default cap on the rooms one connection may be in at once.
pub const DEFAULT_MAX_ROOMS: usize = 64;

/// The default cap on a room name's length, in bytes.
pub const DEFAULT_MAX_ROOM_NAME: usize = 128;

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

/// The limits a running gateway takes live ([`crate::Gateway::update_limits`]): admission at
/// accept and the room limits at join (0: no limit, as in [`GatewayConfig`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveLimits {
    /// [`GatewayConfig::per_ip_limit`].
    pub per_ip_limit: usize,
    /// [`GatewayConfig::unauthenticated_limit`].
    pub unauthenticated_limit: usize,
    /// [`GatewayConfig::unauthenticated_per_ip_limit`].
    pub unauthenticated_per_ip_limit: usize,
    /// [`GatewayConfig::max_rooms_per_connection`].
    pub max_rooms_per_connection: usize,
    /// [`GatewayConfig::max_room_name`].
    pub max_room_name: usize,
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
    /// The keys client tokens (JWTs) are verified with, and the claims checked.
    pub token_key: TokenKey,
    /// How often the token key files are checked for a change (zero: never).
    pub key_reload_interval: Duration,
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
    /// How long a push to a room not seen here yet (in a cluster whose history publishes room
    /// messages) waits for its own copy from the bus, so it follows what was published before
    /// it, before it is delivered here regardless (`r[gateway.history.order+3]`).
    pub room_echo_wait: Duration,
    /// tungstenite's cap on a connection's write buffer: a frame that would grow it past this
    /// cannot be sent (must be greater than `write_buffer`).
    pub max_write_buffer: usize,
    /// Serve `wss://` with this certificate chain and key (PEM files, re-read when they change);
    /// `None` serves plain `ws://`.
    pub tls: Option<TlsFiles>,
    /// The shortest time between two checks of the TLS files for a change; a check runs when a
    /// connection arrives and this long has passed since the last one (zero: on every
    /// connection).
    pub tls_check_interval: Duration,
    /// Open connections allowed per source (an IPv4 address, or an IPv6 /64), authenticated or
    /// not (0: no limit).
    pub per_ip_limit: usize,
    /// Connections allowed in total that have not yet authenticated (0: no limit).
    pub unauthenticated_limit: usize,
    /// Connections allowed per source (an IPv4 address, or an IPv6 /64) that have not yet
    /// authenticated (0: no limit). Far below `unauthenticated_limit`, so that one source cannot
    /// take the unauthenticated pool from everyone else.
    pub unauthenticated_per_ip_limit: usize,
    /// How long a connection refused for a limit has to send its upgrade request and take the
    /// 503 before it is dropped (capped by `handshake_timeout`): a flood past the limits does not
    /// hold sockets for the whole handshake timeout.
    pub refusal_timeout: Duration,
    /// Rooms one connection may be in at once (0: no limit): each costs the registry an entry in
    /// the room's index and the connection's own set, so an authenticated client cannot make
    /// the replica hold an unbounded number of them.
    pub max_rooms_per_connection: usize,
    /// The longest room name a client may join, in bytes (0: no limit), so a room name cannot
    /// cost up to a whole message's size in each index that holds it.
    pub max_room_name: usize,
    /// How much history each room keeps for clients that rejoin with `since`.
    pub history: crate::history::HistoryConfig,
    /// The key application backends publish with (the node's `POST /v1/publish`), distinct from
    /// any key that may drain; `None`: no such key.
    pub publish_key: Option<PublishKey>,
}

/// A bearer key for publishing. Its `Debug` hides it.
#[derive(Clone, PartialEq, Eq)]
pub struct PublishKey(String);

impl std::fmt::Debug for PublishKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PublishKey(<redacted>)")
    }
}

impl PublishKey {
    /// A key (its text trimmed of surrounding whitespace).
    pub fn new(key: &str) -> Self {
        Self(key.trim().to_owned())
    }

    /// Compares a presented key in time independent of where they differ.
    pub fn matches(&self, presented: &str) -> bool {
        holdfast_keyfile::secret_eq(&self.0, presented)
    }
}

impl GatewayConfig {
    /// The limits of this config a running gateway takes live.
    pub fn live_limits(&self) -> LiveLimits {
        LiveLimits {
            per_ip_limit: self.per_ip_limit,
            unauthenticated_limit: self.unauthenticated_limit,
            unauthenticated_per_ip_limit: self.unauthenticated_per_ip_limit,
            max_rooms_per_connection: self.max_rooms_per_connection,
            max_room_name: self.max_room_name,
        }
    }

    /// The defaults, for a replica id and a token key.
    pub fn new(listen: SocketAddr, replica_id: impl Into<String>, token_key: TokenKey) -> Self {
        Self {
            listen,
            replica_id: replica_id.into(),
            advertise: None,
            token_key,
            key_reload_interval: crate::token::DEFAULT_KEY_RELOAD,
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
            max_write_buffer: 1024 * 1024,
            room_echo_wait: Duration::from_secs(1),
            tls: None,
            tls_check_interval: Duration::from_secs(1),
            per_ip_limit: 256,
            unauthenticated_limit: 1024,
            unauthenticated_per_ip_limit: DEFAULT_UNAUTHENTICATED_PER_IP,
            refusal_timeout: Duration::from_secs(1),
            max_rooms_per_connection: DEFAULT_MAX_ROOMS,
            max_room_name: DEFAULT_MAX_ROOM_NAME,
            history: crate::history::HistoryConfig::default(),
            publish_key: None,
        }
    }
}

/// A configuration the gateway cannot run with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// tungstenite needs room for at least one frame beyond its write buffer target.
    #[error("max_write_buffer ({max}) must be greater than write_buffer ({target})")]
    WriteBuffer {
        /// `max_write_buffer`.
        max: usize,
        /// `write_buffer`.
        target: usize,
    },
}

impl GatewayConfig {
    /// Rejects settings tungstenite would panic on.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.max_write_buffer <= self.write_buffer {
            return Err(ConfigError::WriteBuffer {
                max: self.max_write_buffer,
                target: self.write_buffer,
            });
        }
        Ok(())
    }

    /// tungstenite's settings for each connection: the buffers and size limits configured here,
    /// never its defaults (a 128 KiB read buffer per idle connection, an unbounded write buffer).
    // r[impl gateway.edge.buffers]
    pub(crate) fn websocket(&self) -> WebSocketConfig {
        WebSocketConfig::default()
            .read_buffer_size(self.read_buffer)
            .write_buffer_size(self.write_buffer)
            .max_write_buffer_size(self.max_write_buffer)
            .max_message_size(Some(self.max_message_size))
            .max_frame_size(Some(self.max_frame_size))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> GatewayConfig {
        GatewayConfig::new(
            std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
            "a",
            TokenKey::new(b"k".to_vec()),
        )
    }

    #[test]
    fn a_publish_key_matches_only_itself_and_never_shows() {
        let k = PublishKey::new(" pub-key-0123456789\n");
        assert!(k.matches("pub-key-0123456789"));
        for wrong in [
            "",
            "pub-key-012345678",
            "pub-key-01234567890",
            "Pub-key-0123456789",
        ] {
            assert!(!k.matches(wrong), "{wrong}");
        }
        assert!(!PublishKey::new("").matches(""));
        assert!(!format!("{k:?}").contains("0123"));
    }

    // r[verify gateway.edge.buffers]
    #[test]
    fn tungstenite_gets_the_configured_buffers_not_its_defaults() {
        let mut c = config();
        c.read_buffer = 2048;
        c.write_buffer = 512;
        c.max_write_buffer = 256 * 1024;
        c.max_message_size = 10_000;
        c.max_frame_size = 5_000;
        let ws = c.websocket();
        assert_eq!(ws.read_buffer_size, 2048);
        assert_eq!(ws.write_buffer_size, 512);
        assert_eq!(ws.max_write_buffer_size, 256 * 1024);
        assert_eq!(ws.max_message_size, Some(10_000));
        assert_eq!(ws.max_frame_size, Some(5_000));
        // The defaults are sized for many idle connections.
        let d = config().websocket();
        let tungstenite = WebSocketConfig::default();
        assert!(d.read_buffer_size <= 4096 && d.read_buffer_size < tungstenite.read_buffer_size);
        assert!(d.max_write_buffer_size < tungstenite.max_write_buffer_size);
        assert_eq!(config().validate(), Ok(()));
        c.max_write_buffer = 512;
        assert_eq!(
            c.validate(),
            Err(ConfigError::WriteBuffer {
                max: 512,
                target: 512
            })
        );
    }
}
