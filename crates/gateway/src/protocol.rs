//! What clients send (JSON text messages) and the close codes the gateway uses.

use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

/// A message from a client.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ClientMessage {
    /// Authenticate with a signed token (must be the first message).
    Auth {
        /// The token.
        token: String,
    },
    /// Join a room.
    Join {
        /// The room.
        room: String,
        /// A subscription token for this room (a JWT whose `sub` is the user and whose `room`
        /// claim names the room), for a room outside the auth token's `rooms`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        token: Option<String>,
        /// Recover from here: the position (`pos`) of the last message of this room the client
        /// received. The gateway sends every message of the room after it, then the `joined`
        /// reply with `recovered`; or, when its history no longer reaches back that far,
        /// `joined` with `"gap":true` (the client reloads its state). Any JSON value is
        /// accepted here so that one that is not a position string is answered with an error
        /// (`bad position`) rather than ending the connection.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        since: Option<serde_json::Value>,
    },
    /// Leave a room.
    Leave {
        /// The room.
        room: String,
    },
}

/// The close codes the gateway sends, and why.
pub mod close {
    use super::CloseCode;

    /// Drain for a restart: come back after the hint.
    pub const RESTART: CloseCode = CloseCode::Restart;
    /// Drain for good: this replica is leaving.
    pub const GOING_AWAY: CloseCode = CloseCode::Away;
    /// A malformed frame.
    pub const PROTOCOL: CloseCode = CloseCode::Protocol;
    /// A binary message: the gateway speaks JSON text.
    pub const UNSUPPORTED: CloseCode = CloseCode::Unsupported;
    /// A bad, unknown or unauthenticated message, a bad or expired token, no authentication in
    /// time.
    pub const POLICY: CloseCode = CloseCode::Policy;
    /// A message or frame over the size limit.
    pub const TOO_BIG: CloseCode = CloseCode::Size;
    /// Nothing arrived within the idle timeout.
    pub const IDLE: CloseCode = CloseCode::Normal;
}

/// Why a join was refused (the connection stays open).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum JoinRefusal {
    /// The connection is already in its limit of rooms.
    TooManyRooms,
    /// The room's name is longer than the limit.
    NameTooLong,
    /// Neither the token's `rooms` nor a subscription token allows the room.
    NotPermitted,
    /// The join's `since` is not a position.
    BadPosition,
    /// The join's `since` is later than anything the room's stream has assigned.
    FuturePosition,
    /// A join with `since` to a room the connection is already in.
    AlreadyJoined,
}

impl JoinRefusal {
    /// The reason the client is told.
    pub(crate) fn reason(self) -> &'static str {
        match self {
            JoinRefusal::TooManyRooms => "too many rooms",
            JoinRefusal::NameTooLong => "room name too long",
            JoinRefusal::NotPermitted => "not permitted",
            JoinRefusal::BadPosition => "bad position",
            JoinRefusal::FuturePosition => "position from the future",
            JoinRefusal::AlreadyJoined => "already joined",
        }
    }
}
