//! The `[gateway]` section as written (the low layer): its serde structs with their spans, and
//! the bounds its validation checks. `gateway_validate` checks it, `gateway_convert` maps it onto
//! holdfast-gateway's `GatewayConfig`.
//!
//! Client tokens are JWTs. Their keys come from files of a declared kind: `token_key_file` and
//! `[gateway.auth] secrets` (HS256 secrets: regular files private to their owner, not symlinks)
//! and `[gateway.auth] public_keys` (PEM public keys or JWKS files, never read as secrets). Every
//! file is read by holdfast-gateway's one reader, at validation, at each start of the module and
//! at each reload of the running gateway; no key appears in any output.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use holdfast_gateway::{CloseChoice, RoomsDefault};
use serde::Deserialize;
use toml::Spanned;

use crate::duration::ConfigDuration;

/// The shortest token key accepted (bytes): a shorter HMAC secret is guessable.
pub const MIN_TOKEN_KEY_LEN: usize = holdfast_gateway::MIN_SECRET_LEN;

/// `[gateway]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewaySection {
    /// The TCP address clients connect to (port 0 picks one; `/v1/gateway` names it).
    pub listen: Spanned<SocketAddr>,
    /// This replica's id in the cluster (default: the node id).
    #[serde(default)]
    pub replica_id: Option<Spanned<String>>,
    /// The address the service registry advertises (default: the bound address).
    #[serde(default)]
    pub advertise: Option<Spanned<String>>,
    /// A file holding an HS256 secret client tokens (JWTs) may be signed with (mode 0600 or
    /// stricter); required unless `[gateway.auth]` names a secret or a public key.
    #[serde(default)]
    pub token_key_file: Option<Spanned<PathBuf>>,
    /// A file holding the bearer token application backends publish with (`POST /v1/publish`),
    /// readable by its owner only; distinct from `admin.token_file`, so a backend that can
    /// publish cannot drain or reload (default: none, `/v1/publish` only over the Unix socket).
    #[serde(default)]
    pub publish_token_file: Option<Spanned<PathBuf>>,
    /// `[gateway.auth]`: more token keys and the claims checked.
    #[serde(default)]
    pub auth: AuthSection,
    /// The largest message (and frame) a client may send, in bytes (default 65536).
    #[serde(default)]
    pub max_message_size: Option<Spanned<usize>>,
    /// Messages queued per connection before it counts as a slow consumer (default 64).
    #[serde(default)]
    pub send_queue: Option<Spanned<usize>>,
    /// How often the server pings (default 20 s).
    #[serde(default)]
    pub ping_interval: Option<Spanned<ConfigDuration>>,
    /// A connection from which nothing arrived for this long is closed (default 60 s).
    #[serde(default)]
    pub idle_timeout: Option<Spanned<ConfigDuration>>,
    /// Open connections allowed per source IP, authenticated or not (default 256; 0: no limit).
    #[serde(default)]
    pub per_ip_limit: Option<Spanned<usize>>,
    /// Connections allowed not yet authenticated, in all (default 1024; 0: no limit).
    #[serde(default)]
    pub unauthenticated_limit: Option<Spanned<usize>>,
    /// Connections allowed not yet authenticated per source IP (an IPv4 address or an IPv6 /64),
    /// so one source cannot take the unauthenticated places from every other (default 32; 0: no
    /// limit).
    #[serde(default)]
    pub unauthenticated_per_ip_limit: Option<Spanned<usize>>,
    /// Rooms one connection may be in at once (default 64; 0: no limit).
    #[serde(default)]
    pub max_rooms_per_connection: Option<Spanned<usize>>,
    /// The longest room name a client may join, in bytes (default 128; 0: no limit).
    #[serde(default)]
    pub max_room_name: Option<Spanned<usize>>,
    /// Messages each room keeps for clients that rejoin with `since` (default 100, at most
    /// 100000; 0: no history, such a rejoin is told of a gap).
    #[serde(default)]
    pub history_size: Option<Spanned<usize>>,
    /// The age after which a message leaves its room's history (default 5 m, at most 24 h).
    #[serde(default)]
    pub history_ttl: Option<Spanned<ConfigDuration>>,
    /// The bytes of message text all rooms' histories hold together on one node (default
    /// 64 MiB, at least 1; in a cluster Redis holds the history, bound by `history_size`).
    #[serde(default)]
    pub history_max_bytes: Option<Spanned<usize>>,
    /// `[gateway.drain]`.
    #[serde(default)]
    pub drain: DrainSection,
    /// `[gateway.tls]`: serve `wss://` (absent: plain `ws://`).
    #[serde(default)]
    pub tls: Option<Spanned<TlsSection>>,
    /// `[gateway.cluster]`: etcd and Redis (absent: the single-node memory backends).
    #[serde(default)]
    pub cluster: Option<Spanned<ClusterSection>>,
}

/// `[gateway.auth]`: how client tokens (JWTs) are verified.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthSection {
    /// HS256 secret files, checked as `token_key_file` is (default: none). All keys are used at
    /// once, so a new key can be added before the old one goes.
    #[serde(default)]
    pub secrets: Option<Spanned<Vec<PathBuf>>>,
    /// Public key files, each a PEM public key (RSA for RS256, EC P-256 for ES256, Ed25519 for
    /// EdDSA) or a JWKS (`{"keys": [...]}`, chosen by the token's `kid`); never read as a
    /// secret (default: none).
    #[serde(default)]
    pub public_keys: Option<Spanned<Vec<PathBuf>>>,
    /// What an auth token without a `rooms` claim may join: `"none"` (default) or `"any"`.
    #[serde(default)]
    pub rooms_default: Option<Spanned<RoomsDefaultSetting>>,
    /// Accepted audiences: when given, a token's `aud` must name one (default: not checked).
    #[serde(default)]
    pub audience: Option<Spanned<Vec<String>>>,
    /// When given, a token's `iss` must be this (default: not checked).
    #[serde(default)]
    pub issuer: Option<Spanned<String>>,
    /// Clock skew allowed on `exp`, `nbf` and `iat` (default 30 s, at most 5 m).
    #[serde(default)]
    pub leeway: Option<Spanned<ConfigDuration>>,
    /// How often the key files are checked for a change (default 5 s).
    #[serde(default)]
    pub reload_interval: Option<Spanned<ConfigDuration>>,
}

/// `gateway.auth.rooms_default`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RoomsDefaultSetting {
    /// No room: such a token joins only the rooms its subscription tokens open.
    #[default]
    None,
    /// Any room.
    Any,
}

impl From<RoomsDefaultSetting> for RoomsDefault {
    fn from(r: RoomsDefaultSetting) -> Self {
        match r {
            RoomsDefaultSetting::None => RoomsDefault::None,
            RoomsDefaultSetting::Any => RoomsDefault::Any,
        }
    }
}

/// The longest `gateway.auth.leeway` accepted.
pub const MAX_LEEWAY: Duration = Duration::from_secs(300);

/// `[gateway.tls]`: a PEM pair, or the issuance module's certificate for a hostname.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsSection {
    /// The certificate chain (PEM).
    #[serde(default)]
    pub cert: Option<PathBuf>,
    /// The private key (PEM).
    #[serde(default)]
    pub key: Option<PathBuf>,
    /// A hostname of the `[issuance]` section: its key and chain in the issuance store.
    #[serde(default)]
    pub from_issuance: Option<String>,
}

/// `[gateway.cluster]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterSection {
    /// etcd endpoints (`http://HOST:PORT`); empty keeps the service registry in memory.
    #[serde(default)]
    pub etcd: Option<Spanned<Vec<String>>>,
    /// The etcd key prefix (default `/holdfast/gateway`).
    #[serde(default)]
    pub etcd_prefix: Option<String>,
    /// The registration lease's time to live (default 10 s).
    #[serde(default)]
    pub lease_ttl: Option<Spanned<ConfigDuration>>,
    /// The Redis URL (`redis://HOST:PORT`); absent keeps the routing map and the bus in memory.
    #[serde(default)]
    pub redis: Option<Spanned<String>>,
    /// The Redis key and channel prefix (default `holdfast:gateway`).
    #[serde(default)]
    pub redis_prefix: Option<String>,
    /// The bound on every backend call (default 2 s).
    #[serde(default)]
    pub timeout: Option<Spanned<ConfigDuration>>,
}

/// Where the issuance module keeps `hostname`'s key and chain (one PEM bundle), under the node's
/// data directory.
pub fn issuance_bundle(data_dir: &Path, hostname: &str) -> PathBuf {
    data_dir
        .join("issuance")
        .join("certs")
        .join(format!("{hostname}.pem"))
}

/// `[gateway.drain]`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DrainSection {
    /// The cap on the whole drain (default 5 s; the stop plan's share for the gateway group caps
    /// it too).
    #[serde(default)]
    pub total: Option<Spanned<ConfigDuration>>,
    /// Which close code the drain sends (default `"from-reason"`).
    #[serde(default)]
    pub close: Option<Spanned<CloseSetting>>,
    /// The Retry-After sent with a 503 to upgrades refused while draining (default 2 s; whole
    /// seconds, rounded up).
    #[serde(default)]
    pub retry_after: Option<Spanned<ConfigDuration>>,
}

/// `gateway.drain.close`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CloseSetting {
    /// 1012 when the node restarts (SIGTERM, SIGINT, `holdfast drain --restart`), 1001 when it
    /// leaves for good (`holdfast drain`).
    #[default]
    FromReason,
    /// Always 1012 (Service Restart) with a reconnect hint.
    Restart,
    /// Always 1001 (Going Away).
    GoingAway,
}

impl From<CloseSetting> for CloseChoice {
    fn from(c: CloseSetting) -> Self {
        match c {
            CloseSetting::FromReason => CloseChoice::FromReason,
            CloseSetting::Restart => CloseChoice::Restart,
            CloseSetting::GoingAway => CloseChoice::GoingAway,
        }
    }
}

/// The largest `max_message_size` accepted (bytes).
pub const MAX_MESSAGE_SIZE: usize = 64 * 1024 * 1024;
/// The largest `send_queue` accepted.
pub const MAX_SEND_QUEUE: usize = 65_536;
/// The largest `history_size` accepted.
pub const MAX_HISTORY_SIZE: usize = 100_000;
/// The longest `history_ttl` accepted.
pub const MAX_HISTORY_TTL: Duration = Duration::from_secs(24 * 3600);

/// Whether the gateway listening on `listen` holds the TLS-ALPN-01 bind `bind`: the same port
/// (not 0) on addresses that overlap (the same, or either unspecified), so the two could not
/// both bind it (`r[node.gateway.tls-alpn01]`).
pub fn holds_tls_alpn01_bind(listen: std::net::SocketAddr, bind: std::net::SocketAddr) -> bool {
    bind.port() != 0
        && listen.port() == bind.port()
        && (listen.ip() == bind.ip() || listen.ip().is_unspecified() || bind.ip().is_unspecified())
}
