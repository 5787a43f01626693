#![doc = include_str!("../README.md")]

mod admission;
pub mod allow;
pub mod auth;
mod buffers;
pub mod classify;
pub mod client;
mod control_io;
mod flows;
#[cfg(any(target_os = "linux", target_os = "android"))]
mod fragmentation;
pub mod identity;
pub mod pin;
mod ready;
pub mod reconnect;
mod reply_buffers;
mod report;
pub mod server;
pub mod stats;
pub mod transport;
mod udp_io;

// The codecs live in holdfast-forward-wire (the fuzz targets build them alone); their paths here
// are unchanged.
pub use holdfast_forward_wire::{control, wire};

pub use admission::{
    DEFAULT_MAX_UNAUTHENTICATED, DEFAULT_MAX_UNAUTHENTICATED_PER_SOURCE, DEFAULT_VALIDATE_ABOVE,
};
pub use allow::{AllowList, AllowRule, Grants};
pub use auth::Credential;
pub use classify::RelayError;
pub use identity::{Fingerprint, Identity};
#[doc(hidden)]
pub use ready::DRAIN;
pub use server::{
    Access, DEFAULT_AUTH_TIMEOUT, DEFAULT_MAX_AUTHENTICATED, DEFAULT_MAX_PER_CREDENTIAL, Server,
    ServerConfig, start,
};
pub use stats::{AccessStats, ConnectionStats, ForwardStats};
#[doc(hidden)]
pub use udp_io::batch_limit;
