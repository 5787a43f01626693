//! holdfast-gateway: a WebSocket gateway that leaves a cluster without a hole.
//!
//! - [`Gateway`] accepts WebSocket clients (tokio-tungstenite), which authenticate with a signed
//!   token ([`TokenKey`]), join rooms and receive what is pushed to their user or room. Each
//!   connection has a bounded send queue; a client whose queue is full is a slow consumer and is
//!   disconnected. Messages and frames are size-limited, and tungstenite's buffers are sized for
//!   many idle connections.
//! - The [`Registry`] tracks every connection from accept to teardown, authenticated or not, in
//!   shards, keyed by connection and never by user alone.
//! - The cluster traits [`ServiceRegistry`] and [`RoutingMap`] have in-memory implementations
//!   (the embedded single-node default); the routing map also lives in Redis ([`RedisRouting`]),
//!   where the entry is removed by a compare-and-delete Lua script.
//! - [`Gateway::drain`] (and the module's [`Gateway::stopper`]) leaves in order: readiness off,
//!   upgrades refused with 503 and Retry-After, deregistration; queued messages flushed, then a
//!   close frame (1012 with a reconnect hint, or 1001); close handshakes awaited, the rest
//!   force-closed; the routing entries it owns compare-and-deleted — all inside one cap.
//!
//! Every behaviour is a rule under `gateway.*` in `docs/spec/runtime.md`. The README follows.
//!
#![doc = include_str!("../README.md")]

pub mod backoff;
pub mod bus;
pub mod cluster;
pub mod cluster_config;
pub mod config;
mod delivery;
pub mod drain;
#[cfg(feature = "etcd")]
pub mod etcd_registry;
mod membership;
pub mod protocol;
pub mod redis_bus;
mod redis_conn;
pub mod redis_routing;
pub mod registry;
mod server;
pub mod stats;
pub mod token;

pub use bus::{BusMessage, BusStats, BusSubscription, ClusterBus, MemoryBus};
pub use cluster::{
    CasOutcome, Cluster, ClusterError, MemoryRegistry, MemoryRouting, Replica, RoutingMap,
    ServiceRegistry,
};
pub use cluster_config::{ClusterConfig, connect_cluster};
pub use config::{CloseChoice, DrainConfig, GatewayConfig};
pub use delivery::Forward;
pub use drain::{Cleanup, DrainReport, RouteCleanup, Step, StepReport};
#[cfg(feature = "etcd")]
pub use etcd_registry::{EtcdConfig, EtcdRegistry};
pub use membership::ClusterHealth;
pub use protocol::ClientMessage;
pub use redis_bus::RedisBus;
pub use redis_routing::RedisRouting;
pub use registry::{ConnId, Registry, Removed};
pub use server::{Delivery, Gateway, StartError};
pub use stats::StatsSnapshot;
pub use token::{TokenError, TokenKey};
