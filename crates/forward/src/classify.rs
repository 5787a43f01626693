//! One classification for every error either end of a relay meets.
//!
//! The server's relay and the client's relay both turn what went wrong into a [`RelayError`] and
//! ask its [`Class`]: an item (drop this datagram or frame, count it, go on), a transient condition
//! (report it, go on) or the loss of the connection (end, and announce the end). Neither end has a
//! table of its own.

use std::io;

use holdfast_retry::{Class, Classify};
use quinn::{ConnectionError, SendDatagramError};
use thiserror::Error;

use crate::control::FrameError;
use crate::wire::WireError;

/// An error met by a relay loop, on either end.
#[derive(Debug, Error)]
pub enum RelayError {
    /// Sending a datagram on the QUIC connection failed.
    #[error("datagram not sent: {0}")]
    Send(#[from] SendDatagramError),
    /// The QUIC connection is gone.
    #[error("connection lost: {0}")]
    Connection(#[from] ConnectionError),
    /// A UDP socket (the client's local socket, or the server's socket towards a target) failed.
    #[error("socket error: {0}")]
    Socket(#[from] io::Error),
    /// A datagram could not be decoded.
    #[error("malformed datagram: {0}")]
    Wire(#[from] WireError),
    /// A control frame could not be decoded.
    #[error("{0}")]
    Frame(#[from] FrameError),
    /// The control stream ended or was reset: the connection cannot be controlled any more.
    #[error("control stream lost: {0}")]
    Control(String),
    /// A datagram names a forward that is not open.
    #[error("datagram for forward {0}, which is not open")]
    UnknownForward(u32),
    /// A datagram would open a flow beyond the forward's limit.
    #[error("flow limit of forward {0} reached")]
    FlowLimit(u32),
    /// A datagram would open a flow socket beyond the node's bound across all connections.
    #[error("the node's bound on flow sockets is reached")]
    FlowSockets,
}

/// The class of an I/O error on a UDP socket of a relay: holdfast-retry's one I/O table.
///
/// A connected UDP socket reports per-datagram conditions — ECONNREFUSED once per ICMP
/// port-unreachable, on the next send or recv; ENOBUFS; a host or network unreachable — and stays
/// usable: those are transient, so the relay reports them and goes on.
// r[impl forward.classify]
pub fn socket_class(err: &io::Error) -> Class {
    holdfast_retry::classify::io(err)
}

// r[impl forward.classify]
impl Classify for RelayError {
    fn class(&self) -> Class {
        match self {
            // r[impl forward.oversize]
            RelayError::Send(SendDatagramError::TooLarge) => Class::Item,
            // The peer or this end cannot carry datagrams at all: nothing on this connection can
            // be relayed, which is the connection's loss for a relay.
            RelayError::Send(
                SendDatagramError::UnsupportedByPeer | SendDatagramError::Disabled,
            ) => Class::Fatal,
            RelayError::Send(SendDatagramError::ConnectionLost(_)) => Class::Fatal,
            RelayError::Connection(_) => Class::Fatal,
            RelayError::Socket(err) => socket_class(err),
            RelayError::Wire(_) => Class::Item,
            RelayError::Frame(FrameError::TooLong(_)) => Class::Fatal,
            RelayError::Frame(FrameError::Version(_) | FrameError::Malformed(_)) => Class::Item,
            RelayError::Control(_) => Class::Fatal,
            RelayError::UnknownForward(_) | RelayError::FlowLimit(_) | RelayError::FlowSockets => {
                Class::Item
            }
        }
    }
}

impl RelayError {
    /// The drop counter an item error belongs to.
    pub fn drop_reason(&self) -> DropReason {
        match self {
            RelayError::Send(SendDatagramError::TooLarge) => DropReason::Oversize,
            RelayError::Wire(_) | RelayError::Frame(_) => DropReason::Malformed,
            RelayError::UnknownForward(_) => DropReason::UnknownForward,
            RelayError::FlowLimit(_) | RelayError::FlowSockets => DropReason::FlowLimit,
            _ => DropReason::Error,
        }
    }
}

/// Why a datagram was dropped (one counter each in the stats).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// Larger than the connection's current maximum datagram size.
    Oversize,
    /// Malformed (header or frame).
    Malformed,
    /// For a forward that is not open.
    UnknownForward,
    /// Would open a flow beyond the forward's limit.
    FlowLimit,
    /// Not sent because of a transient socket error.
    Error,
}

#[cfg(test)]
mod tests {
    use super::*;

    // r[verify forward.classify]
    #[test]
    fn only_the_loss_of_the_connection_ends_a_relay() {
        let refused = io::Error::from(io::ErrorKind::ConnectionRefused);
        let cases: Vec<(RelayError, Class)> = vec![
            (RelayError::Send(SendDatagramError::TooLarge), Class::Item),
            (RelayError::Socket(refused), Class::Transient),
            (
                RelayError::Socket(io::Error::from_raw_os_error(111)),
                Class::Transient,
            ),
            (
                RelayError::Socket(io::Error::from_raw_os_error(90)),
                Class::Item,
            ),
            (
                RelayError::Socket(io::Error::from_raw_os_error(105)),
                Class::Transient,
            ),
            (RelayError::Wire(WireError::Truncated), Class::Item),
            (RelayError::Frame(FrameError::Malformed("x")), Class::Item),
            (
                RelayError::Frame(FrameError::TooLong(1 << 20)),
                Class::Fatal,
            ),
            (RelayError::UnknownForward(3), Class::Item),
            (RelayError::FlowLimit(3), Class::Item),
            (
                RelayError::Connection(ConnectionError::TimedOut),
                Class::Fatal,
            ),
            (
                RelayError::Send(SendDatagramError::ConnectionLost(ConnectionError::Reset)),
                Class::Fatal,
            ),
            (RelayError::Control("reset".into()), Class::Fatal),
        ];
        for (err, class) in cases {
            assert_eq!(err.class(), class, "{err}");
        }
        assert_eq!(
            RelayError::Send(SendDatagramError::TooLarge).drop_reason(),
            DropReason::Oversize
        );
    }
}
