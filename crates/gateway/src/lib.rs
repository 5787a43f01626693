//! holdfast-gateway: a WebSocket gateway that leaves a cluster without a hole.
//!
//! - [`Gateway`] accepts WebSocket clients (tokio-tungstenite), which authenticate with a signed
//!   JWT ([`TokenKey`]: HS256, RS256, ES256 or EdDSA keys from secret files and public key files
//!   (PEM or JWKS) of a declared kind, re-read when they change; [`Signer`] mints HS256 ones),
//!   join rooms and receive what is pushed to their user or room. Each
//!   connection has a bounded send queue; a client whose queue is full is a slow consumer and is
//!   disconnected. Messages and frames are size-limited, and tungstenite's buffers are sized for
//!   many idle connections.
//! - The [`Registry`] tracks every connection from accept to teardown, authenticated or not, in
//!   shards, keyed by connection and never by user alone.
//! - The cluster traits [`ServiceRegistry`], [`RoutingMap`] and [`ClusterBus`] have in-memory
//!   implementations (the embedded single-node default, [`Cluster::memory`]); the registry also
//!   lives in etcd (`EtcdRegistry`, feature `etcd`: a key on a lease kept alive and revoked on
//!   drain), the routing map in Redis ([`RedisRouting`], entries removed by a compare-and-delete
//!   Lua script) and the bus on Redis pub/sub ([`RedisBus`]). [`connect_cluster`] builds them
//!   from a [`ClusterConfig`]; registration and reconnects are paced by holdfast-retry.
//! - [`Gateway::drain`] (and the module's [`Gateway::stopper`]) leaves in order: readiness off,
//!   upgrades refused with 503 and Retry-After, deregistration; queued messages flushed, then a
//!   close frame (1012 with a reconnect hint, or 1001); close handshakes awaited, the rest
//!   force-closed; the routing entries it owns compare-and-deleted — all inside one cap.
//!
//! - Room history ([`MemoryHistory`] on one replica, [`RedisHistory`] in Redis Streams): each
//!   room message carries its room's stream position, and a client that rejoins with `since`
//!   gets what it missed once and in order, or is told the history no longer reaches back.
//!
//! - The edge: `wss://` from a PEM pair ([`TlsFiles`]) re-read when its files change and never
//!   served past its leaf's notAfter; TLS-ALPN-01 validations answered on the same listener with
//!   the challenges an [`AcmeTlsAlpn`] gives ([`Gateway::answer_tls_alpn01`]); limits on
//!   connections per source (an IPv4 address or an IPv6 /64), on unauthenticated ones per source
//!   and in all, enforced before the upgrade (and on `wss://` before the TLS handshake); and an
//!   accept loop paced on holdfast-retry's back-off.
//!
//! Every behaviour is a rule under `gateway.*` in `docs/spec/runtime.md`. The README follows.
//!
#![doc = include_str!("../README.md")]

mod accept;
mod acme_alpn;
pub mod backoff;
pub mod bus;
pub mod cluster;
pub mod cluster_config;
pub mod config;
mod error;
#[cfg(feature = "etcd")]
pub mod etcd_registry;
pub mod history;
mod limits;
mod phase;
pub mod protocol;
pub mod redis_bus;
mod redis_conn;
mod redis_history;
pub mod redis_routing;
pub mod registry;
mod server;
pub use server::drain;
pub mod stats;
mod sync;
pub mod tls;
pub mod token;

pub use acme_alpn::{ACME_TLS_ALPN, AcmeTlsAlpn};
pub use bus::{BusMessage, BusStats, BusSubscription, ClusterBus, MemoryBus};
pub use cluster::{
    CasOutcome, Cluster, ClusterError, MemoryRegistry, MemoryRouting, RegistryStats, Replica,
    RoutingMap, ServiceRegistry,
};
/// Whether this build has the etcd service registry (`EtcdRegistry`, cargo feature `etcd`):
/// a caller that maps configuration onto [`ClusterConfig`] can refuse etcd endpoints up front,
/// whichever crate turned the feature on.
pub const ETCD_SUPPORTED: bool = cfg!(feature = "etcd");

pub use cluster_config::{ClusterConfig, connect_cluster};
pub use config::{
    CloseChoice, ConfigError, DEFAULT_MAX_ROOM_NAME, DEFAULT_MAX_ROOMS,
    DEFAULT_UNAUTHENTICATED_PER_IP, DrainConfig, GatewayConfig, LiveLimits, PublishKey,
};
#[cfg(feature = "etcd")]
pub use etcd_registry::{EtcdConfig, EtcdRegistry};
pub use history::{
    Appended, BadPos, DEFAULT_HISTORY_MAX_BYTES, DEFAULT_HISTORY_SIZE, DEFAULT_HISTORY_TTL,
    History, HistoryConfig, MemoryHistory, Pos, Recovery, RoomAnnounce, StreamPlace,
};
pub use protocol::ClientMessage;
pub use redis_bus::RedisBus;
pub use redis_history::RedisHistory;
pub use redis_routing::RedisRouting;
pub use registry::{ConnId, Registry, Removed};
pub use server::delivery::Forward;
pub use server::drain::{Cleanup, DrainReport, RouteCleanup, Step, StepReport};
pub use server::membership::ClusterHealth;
pub use server::{Delivery, Gateway, StartError};
pub use stats::StatsSnapshot;
pub use tls::{TlsError, TlsFiles, TlsReload};
pub use token::{
    AuthSettings, Claims, DEFAULT_KEY_RELOAD, DEFAULT_LEEWAY, KeyError, KeyKind, KeyReload,
    KeySource, MAX_KEY_FILE, MIN_SECRET_LEN, MintClaims, RoomsDefault, SignError, Signer,
    TokenError, TokenKey, read_key_file, read_secret, room_allowed,
};
