//! QUIC settings both ends share.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use quinn::udp::{UdpSockRef, UdpSocketState};

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
    /// An update no longer allows the connection's credential (`r[forward.access.revoked]`); a
    /// code of its own, because [`REFUSED`] also closes clients refused before authenticating.
    pub const REVOKED: u32 = 5;
}

/// What a peer may send on the stream it opens (the control stream) before the other end has read
/// it: four of the largest control frames ([`MAX_FRAME`](crate::control::MAX_FRAME)).
pub const STREAM_RECEIVE_WINDOW: u32 = 64 << 10;

/// What a peer may send across all streams before the other end has read it: the one stream's
/// window, since the protocol has one stream.
pub const RECEIVE_WINDOW: u32 = STREAM_RECEIVE_WINDOW;

/// What one end keeps of its own stream writes until they are acknowledged (quinn's default is
/// 10 MB): a peer that stops acknowledging holds at most this much of the node's memory.
pub const SEND_WINDOW: u64 = 256 << 10;

/// What each end buffers of received datagrams not yet relayed (quinn drops the oldest when it
/// is full).
pub const DATAGRAM_RECEIVE_BUFFER: usize = 4 << 20;

/// The transport configuration of the client's end: the settings both ends share, and no stream
/// the node may open (it never does).
pub fn transport_config(idle_timeout: Duration) -> Arc<quinn::TransportConfig> {
    Arc::new(shared_transport(idle_timeout, 0))
}

/// The transport configuration of the node's end: the settings both ends share, and exactly the
/// one bidirectional stream the client opens (its control stream); no unidirectional one.
pub fn server_transport_config(idle_timeout: Duration) -> Arc<quinn::TransportConfig> {
    Arc::new(shared_transport(idle_timeout, 1))
}

/// Datagrams on, keep-alives well inside the idle timeout so a live but quiet connection is never
/// timed out, a lost path noticed after `idle_timeout`, `bidi` streams the peer may open, and
/// stream windows sized to the control stream, so a peer can make the other end hold little more
/// than its datagram buffer.
// r[impl forward.limits.streams]
// r[impl forward.limits.windows]
fn shared_transport(idle_timeout: Duration, bidi: u32) -> quinn::TransportConfig {
    let mut transport = quinn::TransportConfig::default();
    transport.max_concurrent_bidi_streams(bidi.into());
    transport.max_concurrent_uni_streams(0u32.into());
    transport.stream_receive_window(STREAM_RECEIVE_WINDOW.into());
    transport.receive_window(RECEIVE_WINDOW.into());
    transport.send_window(SEND_WINDOW);
    let idle = quinn::IdleTimeout::try_from(idle_timeout)
        .unwrap_or_else(|_| quinn::IdleTimeout::from(quinn::VarInt::from_u32(30_000)));
    transport.max_idle_timeout(Some(idle));
    transport.keep_alive_interval(Some(idle_timeout / 3));
    // Room for bursts of datagrams on both ends (quinn drops the oldest when full).
    transport.datagram_receive_buffer_size(Some(DATAGRAM_RECEIVE_BUFFER));
    transport.datagram_send_buffer_size(4 * 1024 * 1024);
    transport
}

/// The send and receive buffers a QUIC endpoint's UDP socket asks for, each way: every datagram of
/// every forward on the connection passes there, so it gets the room quinn's own datagram
/// buffers have.
pub const ENDPOINT_BUFFER: usize = 4 << 20;

/// A UDP socket bound to `addr` for a QUIC endpoint, with [`ENDPOINT_BUFFER`] send and receive
/// buffers (as far as the kernel allows): the kernel's default (about 200 KiB) is a few
/// milliseconds of packets at full rate, and a busy endpoint driver loses what overflows it.
/// Public so a benchmark's bare quinn endpoints get the same.
/// A kernel that gives less than asked is logged, never an error: only binding can fail.
// r[impl forward.buffers+2]
pub fn endpoint_socket(addr: SocketAddr) -> std::io::Result<std::net::UdpSocket> {
    let socket = std::net::UdpSocket::bind(addr)?;
    let state = UdpSocketState::new(UdpSockRef::from(&socket))?;
    crate::buffers::ask(&socket, &state, ENDPOINT_BUFFER);
    Ok(socket)
}

/// A quinn endpoint on `socket` (from [`endpoint_socket`]), a server when `server` is given.
/// Needs a tokio runtime.
pub fn endpoint(
    socket: std::net::UdpSocket,
    server: Option<quinn::ServerConfig>,
) -> std::io::Result<quinn::Endpoint> {
    quinn::Endpoint::new(
        quinn::EndpointConfig::default(),
        server,
        socket,
        Arc::new(quinn::TokioRuntime),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    // r[verify forward.buffers+2]
    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[tokio::test]
    async fn an_endpoint_socket_gets_the_buffers_it_asks_for_up_to_the_kernels_maximum() {
        use crate::buffers::kernel_max;
        use crate::fragmentation::get;
        use std::os::fd::AsFd;
        let socket = endpoint_socket("127.0.0.1:0".parse().expect("addr")).expect("socket");
        // Linux reports twice what was set (the rest is its bookkeeping).
        let rcv = get(socket.as_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF).expect("get") as usize;
        let snd = get(socket.as_fd(), libc::SOL_SOCKET, libc::SO_SNDBUF).expect("get") as usize;
        assert_eq!(rcv / 2, ENDPOINT_BUFFER.min(kernel_max("rmem_max")));
        assert_eq!(snd / 2, ENDPOINT_BUFFER.min(kernel_max("wmem_max")));
        // And a quinn endpoint runs on it.
        let endpoint = endpoint(socket, None).expect("endpoint");
        assert!(endpoint.local_addr().expect("addr").port() > 0);
    }
}
