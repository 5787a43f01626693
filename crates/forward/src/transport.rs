//! QUIC settings both ends share.

use std::sync::Arc;
use std::time::Duration;

/// The ALPN protocol id of this crate's protocol.
pub const ALPN: &[u8] = b"holdfast-forward/1";

/// Application close codes.
pub mod close_code {
    /// The node is shutting down.
    pub const SHUTDOWN: u32 = 1;
    /// The client was refused (credential, version).
    pub const REFUSED: u32 = 2;
    /// The control stream's framing was lost.
    pub const PROTOCOL: u32 = 3;
    /// The client closed the connection.
    pub const CLIENT_DONE: u32 = 4;
}

/// The transport configuration: datagrams on, keep-alives well inside the idle timeout so a live
/// but quiet connection is never timed out, and a lost path is noticed after `idle_timeout`.
pub fn transport_config(idle_timeout: Duration) -> Arc<quinn::TransportConfig> {
    let mut transport = quinn::TransportConfig::default();
    let idle = quinn::IdleTimeout::try_from(idle_timeout)
        .unwrap_or_else(|_| quinn::IdleTimeout::from(quinn::VarInt::from_u32(30_000)));
    transport.max_idle_timeout(Some(idle));
    transport.keep_alive_interval(Some(idle_timeout / 3));
    // Room for bursts of datagrams on both ends (quinn drops the oldest when full).
    transport.datagram_receive_buffer_size(Some(4 * 1024 * 1024));
    transport.datagram_send_buffer_size(4 * 1024 * 1024);
    Arc::new(transport)
}
