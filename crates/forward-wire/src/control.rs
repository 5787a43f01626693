//! The control stream's codec: length-prefixed frames, each `u32 length | version | type | body`.
//!
//! The client opens one bidirectional stream per connection and speaks first (`Hello`); the server
//! answers, then both sides exchange messages for the life of the connection. The length prefix
//! delimits every frame, so a frame whose body is malformed is dropped on its own and the stream
//! stays in step; only a length above [`MAX_FRAME`] loses the framing.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use thiserror::Error;

/// The protocol version this crate speaks (the first byte of every frame body).
pub const VERSION: u8 = 1;
/// The largest frame body accepted (messages are small; this bounds a hostile length prefix).
pub const MAX_FRAME: usize = 16 * 1024;
/// The longest text (a reason, a credential) a message carries.
pub const MAX_TEXT: usize = 4 * 1024;

/// Why a request was refused. Each refusal has its own code so the client can say which it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Refusal {
    /// The credential is not one the node allows.
    BadCredential,
    /// A request came before the client authenticated.
    NotAuthenticated,
    /// The target is outside the node's allow-list.
    NotAllowed,
    /// The forward id is already open on this connection.
    Duplicate,
    /// The connection already has as many forwards as the node allows.
    TooManyForwards,
    /// The client speaks a protocol version the node does not.
    Version,
    /// The node is shutting down.
    ShuttingDown,
    /// The node already holds as many authenticated connections as it allows, in all or for
    /// this credential.
    TooManyConnections,
}

/// Why a forward ended.
///
/// Non-exhaustive: a later node may end forwards for reasons this one does not name, which decode
/// as [`Unknown`](EndReason::Unknown) (`r[forward.codec.end-codes]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum EndReason {
    /// The client closed it.
    Closed,
    /// The node is shutting down.
    ShuttingDown,
    /// The connection carrying it was lost.
    ConnectionLost,
    /// The node's allow-lists, after a live update, no longer allow its target, or its
    /// connection's credential is no longer allowed.
    NotAllowed,
    /// A reason code this build does not know (from a later node); the forward has ended all the
    /// same, and the node's text says why.
    Unknown(u8),
}

/// One control message. Its `Debug` never shows a credential, so logging a message cannot leak
/// one.
#[derive(Clone, PartialEq, Eq)]
pub enum Message {
    /// Client → node, first: the client's credential.
    Hello {
        /// The credential (never logged).
        credential: Vec<u8>,
    },
    /// Node → client: authenticated.
    Welcome,
    /// Client → node: relay forward `forward` to `target`.
    Open {
        /// The forward's id (chosen by the client, unique on the connection).
        forward: u32,
        /// Where the node sends the forward's datagrams.
        target: SocketAddr,
    },
    /// Node → client: the forward is open.
    Opened {
        /// The forward.
        forward: u32,
    },
    /// Client → node: close a forward.
    Close {
        /// The forward.
        forward: u32,
    },
    /// Node → client: a request was refused (`forward` 0: the connection's own request, Hello).
    Refused {
        /// The forward the refusal concerns (0 for Hello).
        forward: u32,
        /// Which refusal.
        refusal: Refusal,
        /// A human-readable reason.
        message: String,
    },
    /// Node → client: a forward ended.
    Ended {
        /// The forward.
        forward: u32,
        /// Why.
        reason: EndReason,
        /// A human-readable reason.
        message: String,
    },
    /// Node → client: a transient error on a forward (e.g. the target refused a datagram); the
    /// forward goes on.
    Status {
        /// The forward.
        forward: u32,
        /// What happened.
        message: String,
    },
}

// r[impl forward.auth]
impl fmt::Debug for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Message::Hello { .. } => f
                .debug_struct("Hello")
                .field("credential", &format_args!("<redacted>"))
                .finish(),
            Message::Welcome => f.write_str("Welcome"),
            Message::Open { forward, target } => f
                .debug_struct("Open")
                .field("forward", forward)
                .field("target", target)
                .finish(),
            Message::Opened { forward } => {
                f.debug_struct("Opened").field("forward", forward).finish()
            }
            Message::Close { forward } => {
                f.debug_struct("Close").field("forward", forward).finish()
            }
            Message::Refused {
                forward,
                refusal,
                message,
            } => f
                .debug_struct("Refused")
                .field("forward", forward)
                .field("refusal", refusal)
                .field("message", message)
                .finish(),
            Message::Ended {
                forward,
                reason,
                message,
            } => f
                .debug_struct("Ended")
                .field("forward", forward)
                .field("reason", reason)
                .field("message", message)
                .finish(),
            Message::Status { forward, message } => f
                .debug_struct("Status")
                .field("forward", forward)
                .field("message", message)
                .finish(),
        }
    }
}

/// Why a frame could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FrameError {
    /// The length prefix is over [`MAX_FRAME`]: the stream's framing is lost.
    #[error("control frame of {0} bytes is over the limit")]
    TooLong(usize),
    /// The frame is for another protocol version; it was skipped.
    #[error("control frame of version {0}, expected {VERSION}")]
    Version(u8),
    /// The frame's body is malformed; it was skipped.
    #[error("malformed control frame: {0}")]
    Malformed(&'static str),
}

const HELLO: u8 = 0x01;
const OPEN: u8 = 0x02;
const CLOSE: u8 = 0x03;
const WELCOME: u8 = 0x81;
const OPENED: u8 = 0x82;
const REFUSED: u8 = 0x83;
const ENDED: u8 = 0x84;
const STATUS: u8 = 0x85;

impl Refusal {
    fn code(self) -> u8 {
        match self {
            Refusal::BadCredential => 1,
            Refusal::NotAuthenticated => 2,
            Refusal::NotAllowed => 3,
            Refusal::Duplicate => 4,
            Refusal::TooManyForwards => 5,
            Refusal::Version => 6,
            Refusal::ShuttingDown => 7,
            Refusal::TooManyConnections => 8,
        }
    }

    fn from_code(code: u8) -> Option<Self> {
        Some(match code {
            1 => Refusal::BadCredential,
            2 => Refusal::NotAuthenticated,
            3 => Refusal::NotAllowed,
            4 => Refusal::Duplicate,
            5 => Refusal::TooManyForwards,
            6 => Refusal::Version,
            7 => Refusal::ShuttingDown,
            8 => Refusal::TooManyConnections,
            _ => return None,
        })
    }
}

impl EndReason {
    /// Every reason this build names, with its wire code: the one list both directions of the
    /// codec (and its tests) are derived from.
    const ALL: [(EndReason, u8); 4] = [
        (EndReason::Closed, 1),
        (EndReason::ShuttingDown, 2),
        (EndReason::ConnectionLost, 3),
        (EndReason::NotAllowed, 4),
    ];

    // Exhaustive, so a new reason cannot be added without its code; the test
    // `every_named_end_reason_is_in_the_one_list` keeps `ALL` in step with it.
    fn code(self) -> u8 {
        match self {
            EndReason::Closed => 1,
            EndReason::ShuttingDown => 2,
            EndReason::ConnectionLost => 3,
            EndReason::NotAllowed => 4,
            EndReason::Unknown(code) => code,
        }
    }

    // r[impl forward.codec.end-codes]
    // Total: an unknown code still ends the forward, where dropping the frame as malformed would
    // leave the client holding a forward the node has ended.
    fn from_code(code: u8) -> Self {
        Self::ALL
            .iter()
            .find(|(_, c)| *c == code)
            .map_or(EndReason::Unknown(code), |(reason, _)| *reason)
    }
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    let bytes = &bytes[..bytes.len().min(MAX_TEXT)];
    out.extend_from_slice(&(bytes.len() as u16).to_be_bytes());
    out.extend_from_slice(bytes);
}

fn put_text(out: &mut Vec<u8>, text: &str) {
    // Longer text is cut at the last character boundary that fits.
    let mut end = text.len().min(MAX_TEXT);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    put_bytes(out, &text.as_bytes()[..end]);
}

fn put_addr(out: &mut Vec<u8>, addr: &SocketAddr) {
    match addr.ip() {
        IpAddr::V4(ip) => {
            out.push(4);
            out.extend_from_slice(&ip.octets());
        }
        IpAddr::V6(ip) => {
            out.push(6);
            out.extend_from_slice(&ip.octets());
        }
    }
    out.extend_from_slice(&addr.port().to_be_bytes());
}

/// Encodes one message as a complete frame (length prefix included).
pub fn encode(message: &Message) -> Vec<u8> {
    let mut body = vec![0, 0, 0, 0, VERSION];
    match message {
        Message::Hello { credential } => {
            body.push(HELLO);
            put_bytes(&mut body, credential);
        }
        Message::Welcome => body.push(WELCOME),
        Message::Open { forward, target } => {
            body.push(OPEN);
            body.extend_from_slice(&forward.to_be_bytes());
            put_addr(&mut body, target);
        }
        Message::Opened { forward } => {
            body.push(OPENED);
            body.extend_from_slice(&forward.to_be_bytes());
        }
        Message::Close { forward } => {
            body.push(CLOSE);
            body.extend_from_slice(&forward.to_be_bytes());
        }
        Message::Refused {
            forward,
            refusal,
            message,
        } => {
            body.push(REFUSED);
            body.extend_from_slice(&forward.to_be_bytes());
            body.push(refusal.code());
            put_text(&mut body, message);
        }
        Message::Ended {
            forward,
            reason,
            message,
        } => {
            body.push(ENDED);
            body.extend_from_slice(&forward.to_be_bytes());
            body.push(reason.code());
            put_text(&mut body, message);
        }
        Message::Status { forward, message } => {
            body.push(STATUS);
            body.extend_from_slice(&forward.to_be_bytes());
            put_text(&mut body, message);
        }
    }
    let len = (body.len() - 4) as u32;
    body[..4].copy_from_slice(&len.to_be_bytes());
    body
}

/// A cursor over one frame's body.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], FrameError> {
        if self.0.len() < n {
            return Err(FrameError::Malformed("truncated"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, FrameError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, FrameError> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Result<u32, FrameError> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn bytes(&mut self) -> Result<&'a [u8], FrameError> {
        let len = usize::from(self.u16()?);
        if len > MAX_TEXT {
            return Err(FrameError::Malformed("text too long"));
        }
        self.take(len)
    }

    fn text(&mut self) -> Result<String, FrameError> {
        String::from_utf8(self.bytes()?.to_vec())
            .map_err(|_| FrameError::Malformed("text not UTF-8"))
    }

    fn addr(&mut self) -> Result<SocketAddr, FrameError> {
        let ip = match self.u8()? {
            4 => {
                let b = self.take(4)?;
                IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3]))
            }
            6 => {
                let mut octets = [0u8; 16];
                octets.copy_from_slice(self.take(16)?);
                IpAddr::V6(Ipv6Addr::from(octets))
            }
            _ => return Err(FrameError::Malformed("unknown address family")),
        };
        Ok(SocketAddr::new(ip, self.u16()?))
    }

    fn end(&self) -> Result<(), FrameError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(FrameError::Malformed("trailing bytes"))
        }
    }
}

/// Decodes one frame body (what follows the length prefix).
// r[impl forward.codec.malformed]
pub fn decode_body(body: &[u8]) -> Result<Message, FrameError> {
    let mut r = Reader(body);
    let version = r.u8()?;
    if version != VERSION {
        return Err(FrameError::Version(version));
    }
    let message = match r.u8()? {
        HELLO => Message::Hello {
            credential: r.bytes()?.to_vec(),
        },
        WELCOME => Message::Welcome,
        OPEN => Message::Open {
            forward: r.u32()?,
            target: r.addr()?,
        },
        OPENED => Message::Opened { forward: r.u32()? },
        CLOSE => Message::Close { forward: r.u32()? },
        REFUSED => Message::Refused {
            forward: r.u32()?,
            refusal: Refusal::from_code(r.u8()?).ok_or(FrameError::Malformed("refusal code"))?,
            message: r.text()?,
        },
        ENDED => Message::Ended {
            forward: r.u32()?,
            reason: EndReason::from_code(r.u8()?),
            message: r.text()?,
        },
        STATUS => Message::Status {
            forward: r.u32()?,
            message: r.text()?,
        },
        _ => return Err(FrameError::Malformed("unknown message type")),
    };
    r.end()?;
    Ok(message)
}

/// Splits a byte stream into frames: feed it what the stream delivers, take messages out.
#[derive(Debug, Default)]
pub struct FrameDecoder {
    buf: Vec<u8>,
}

impl FrameDecoder {
    /// An empty decoder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends bytes read from the stream.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete frame: `None` until one is complete; an error for a frame that was
    /// skipped (decode the next one after it) or, for [`FrameError::TooLong`], for a stream that
    /// must be abandoned.
    pub fn next_message(&mut self) -> Option<Result<Message, FrameError>> {
        let prefix = self.buf.get(..4)?;
        let len = u32::from_be_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]) as usize;
        if len > MAX_FRAME {
            return Some(Err(FrameError::TooLong(len)));
        }
        if self.buf.len() < 4 + len {
            return None;
        }
        let result = decode_body(&self.buf[4..4 + len]);
        self.buf.drain(..4 + len);
        Some(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn addr() -> impl Strategy<Value = SocketAddr> {
        prop_oneof![
            (any::<[u8; 4]>(), any::<u16>()).prop_map(|(ip, port)| SocketAddr::from((ip, port))),
            (any::<[u8; 16]>(), any::<u16>()).prop_map(|(ip, port)| SocketAddr::from((ip, port))),
        ]
    }

    fn refusal() -> impl Strategy<Value = Refusal> {
        (1u8..=8).prop_map(|c| Refusal::from_code(c).expect("valid code"))
    }

    fn end_reason() -> impl Strategy<Value = EndReason> {
        let known: Vec<EndReason> = EndReason::ALL.iter().map(|(reason, _)| *reason).collect();
        prop_oneof![
            proptest::sample::select(known),
            any::<u8>()
                .prop_filter("a code no reason names", |c| {
                    EndReason::ALL.iter().all(|(_, code)| code != c)
                })
                .prop_map(EndReason::Unknown),
        ]
    }

    fn message() -> impl Strategy<Value = Message> {
        let text = "[ -~]{0,64}";
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..64)
                .prop_map(|credential| Message::Hello { credential }),
            Just(Message::Welcome),
            (any::<u32>(), addr()).prop_map(|(forward, target)| Message::Open { forward, target }),
            any::<u32>().prop_map(|forward| Message::Opened { forward }),
            any::<u32>().prop_map(|forward| Message::Close { forward }),
            (any::<u32>(), refusal(), text).prop_map(|(forward, refusal, message)| {
                Message::Refused {
                    forward,
                    refusal,
                    message,
                }
            }),
            (any::<u32>(), end_reason(), text).prop_map(|(forward, reason, message)| {
                Message::Ended {
                    forward,
                    reason,
                    message,
                }
            }),
            (any::<u32>(), text)
                .prop_map(|(forward, message)| Message::Status { forward, message }),
        ]
    }

    proptest! {
        // r[verify forward.codec.malformed]
        #[test]
        fn messages_round_trip_through_any_split(messages in proptest::collection::vec(message(), 1..8),
                                                 split in 1usize..32) {
            let stream: Vec<u8> = messages.iter().flat_map(encode).collect();
            let mut decoder = FrameDecoder::new();
            let mut decoded = Vec::new();
            for chunk in stream.chunks(split) {
                decoder.push(chunk);
                while let Some(next) = decoder.next_message() {
                    decoded.push(next.expect("well-formed"));
                }
            }
            prop_assert_eq!(decoded, messages);
        }

        // r[verify forward.codec.malformed]
        #[test]
        fn arbitrary_bodies_never_panic(body in proptest::collection::vec(any::<u8>(), 0..80)) {
            let _ = decode_body(&body);
            let mut decoder = FrameDecoder::new();
            decoder.push(&body);
            while let Some(Ok(_) | Err(FrameError::Version(_) | FrameError::Malformed(_))) =
                decoder.next_message() {}
        }
    }

    // r[verify forward.auth]
    #[test]
    fn a_hello_never_shows_its_credential() {
        let hello = Message::Hello {
            credential: b"s3cret".to_vec(),
        };
        let shown = format!("{hello:?} {hello:#?}");
        assert!(shown.contains("<redacted>"), "{shown}");
        assert!(
            !shown.contains("115") && !shown.contains("s3cret"),
            "{shown}"
        );
        assert_eq!(
            format!("{:?}", Message::Opened { forward: 3 }),
            "Opened { forward: 3 }"
        );
    }

    // r[verify forward.codec.end-codes]
    #[test]
    fn every_named_end_reason_is_in_the_one_list() {
        for (reason, code) in EndReason::ALL {
            assert_eq!(reason.code(), code, "{reason:?}");
            assert_eq!(EndReason::from_code(code), reason);
        }
        // Listing each reason in a match without a wildcard fails to build when one is added,
        // pointing here to add it to `ALL` too.
        let named = |r: EndReason| match r {
            EndReason::Closed
            | EndReason::ShuttingDown
            | EndReason::ConnectionLost
            | EndReason::NotAllowed => true,
            EndReason::Unknown(_) => false,
        };
        assert_eq!(EndReason::ALL.iter().filter(|(r, _)| named(*r)).count(), 4);
    }

    // r[verify forward.codec.end-codes]
    #[test]
    fn an_end_with_a_code_this_decoder_does_not_know_still_ends_its_forward() {
        let mut frame = encode(&Message::Ended {
            forward: 7,
            reason: EndReason::NotAllowed,
            message: "a later reason".to_owned(),
        });
        // length(4) | version | type | forward(4) | code
        assert_eq!(frame[10], 4, "the end code's place");
        frame[10] = 0xee;
        let decoded = decode_body(&frame[4..]);
        assert!(
            matches!(&decoded, Ok(Message::Ended { forward: 7, message, .. }) if message == "a later reason"),
            "{decoded:?}"
        );
        assert!(
            matches!(
                decoded,
                Ok(Message::Ended {
                    reason: EndReason::Unknown(0xee),
                    ..
                })
            ),
            "{decoded:?}"
        );
        // The code survives a re-encoding.
        let Ok(decoded) = decoded else { unreachable!() };
        assert_eq!(encode(&decoded), frame);
    }

    // r[verify forward.codec.malformed]
    #[test]
    fn a_malformed_frame_is_skipped_and_the_next_decodes() {
        let mut decoder = FrameDecoder::new();
        decoder.push(&[0, 0, 0, 2, VERSION, 0x7f]);
        decoder.push(&[0, 0, 0, 2, 9, HELLO]);
        decoder.push(&encode(&Message::Welcome));
        assert_eq!(
            decoder.next_message(),
            Some(Err(FrameError::Malformed("unknown message type")))
        );
        assert_eq!(decoder.next_message(), Some(Err(FrameError::Version(9))));
        assert_eq!(decoder.next_message(), Some(Ok(Message::Welcome)));
        assert_eq!(decoder.next_message(), None);
        decoder.push(&[0xff, 0xff, 0xff, 0xff]);
        assert_eq!(
            decoder.next_message(),
            Some(Err(FrameError::TooLong(0xffff_ffff)))
        );
    }
}
