//! The datagram codec: every QUIC datagram is `varint(forward) varint(flow) payload`.
//!
//! The variable-length integer is QUIC's own (RFC 9000 §16): two high bits give the length (1, 2,
//! 4 or 8 bytes), so the ids of the first 64 forwards and flows cost one byte each.

use thiserror::Error;

/// The largest value a varint can carry (2^62 - 1).
pub const VARINT_MAX: u64 = (1 << 62) - 1;

/// Why a datagram could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum WireError {
    /// The datagram ended inside its header.
    #[error("datagram truncated inside its header")]
    Truncated,
    /// A forward id does not fit the 32 bits forwards are numbered with.
    #[error("forward id out of range")]
    ForwardOutOfRange,
}

/// The header of one datagram: which forward, and which flow (local peer) within it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowId {
    /// The forward, as numbered by the client when it opened it.
    pub forward: u32,
    /// The flow within the forward: one per local peer of the client.
    pub flow: u64,
}

/// The encoded length of `value` as a varint (values above [`VARINT_MAX`] are clamped to it).
pub fn varint_len(value: u64) -> usize {
    match value {
        0..=63 => 1,
        64..=16_383 => 2,
        16_384..=1_073_741_823 => 4,
        _ => 8,
    }
}

/// Appends `value` as a varint (values above [`VARINT_MAX`] are clamped to it).
pub fn put_varint(out: &mut Vec<u8>, value: u64) {
    let value = value.min(VARINT_MAX);
    match varint_len(value) {
        1 => out.push(value as u8),
        2 => out.extend_from_slice(&((value as u16) | 0x4000).to_be_bytes()),
        4 => out.extend_from_slice(&((value as u32) | 0x8000_0000).to_be_bytes()),
        _ => out.extend_from_slice(&(value | 0xc000_0000_0000_0000).to_be_bytes()),
    }
}

/// Reads a varint from the front of `input`; returns it and the bytes it used.
pub fn get_varint(input: &[u8]) -> Option<(u64, usize)> {
    let first = *input.first()?;
    let len = 1usize << (first >> 6);
    let bytes = input.get(..len)?;
    let mut value = u64::from(first & 0x3f);
    for byte in &bytes[1..] {
        value = (value << 8) | u64::from(*byte);
    }
    Some((value, len))
}

impl FlowId {
    /// The header bytes of this flow's datagrams.
    pub fn header(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.header_len());
        put_varint(&mut out, u64::from(self.forward));
        put_varint(&mut out, self.flow);
        out
    }

    /// The length of [`FlowId::header`].
    pub fn header_len(&self) -> usize {
        varint_len(u64::from(self.forward)) + varint_len(self.flow)
    }
}

/// Encodes one datagram.
pub fn encode_datagram(id: FlowId, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(id.header_len() + payload.len());
    put_varint(&mut out, u64::from(id.forward));
    put_varint(&mut out, id.flow);
    out.extend_from_slice(payload);
    out
}

/// Decodes one datagram into its flow and payload (which may be empty: a zero-length UDP datagram
/// is legal and is relayed).
// r[impl forward.codec.malformed]
pub fn decode_datagram(datagram: &[u8]) -> Result<(FlowId, &[u8]), WireError> {
    let (forward, used) = get_varint(datagram).ok_or(WireError::Truncated)?;
    let rest = &datagram[used..];
    let (flow, used) = get_varint(rest).ok_or(WireError::Truncated)?;
    let forward = u32::try_from(forward).map_err(|_| WireError::ForwardOutOfRange)?;
    Ok((FlowId { forward, flow }, &rest[used..]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        // r[verify forward.codec.malformed]
        #[test]
        fn datagrams_round_trip(forward in any::<u32>(), flow in 0..=VARINT_MAX,
                                payload in proptest::collection::vec(any::<u8>(), 0..1500)) {
            let id = FlowId { forward, flow };
            let encoded = encode_datagram(id, &payload);
            prop_assert_eq!(encoded.len(), id.header_len() + payload.len());
            let (decoded, body) = decode_datagram(&encoded).expect("decodes");
            prop_assert_eq!(decoded, id);
            prop_assert_eq!(body, &payload[..]);
        }

        // r[verify forward.codec.malformed]
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            // A sender may use longer varints than needed; the payload is what follows them.
            if let Ok((id, body)) = decode_datagram(&bytes) {
                prop_assert!(bytes.ends_with(body));
                prop_assert!(id.header_len() + body.len() <= bytes.len());
            }
        }
    }

    // r[verify forward.codec.malformed]
    #[test]
    fn truncated_and_out_of_range_headers_are_errors() {
        assert_eq!(decode_datagram(&[]), Err(WireError::Truncated));
        assert_eq!(decode_datagram(&[0x01]), Err(WireError::Truncated));
        assert_eq!(decode_datagram(&[0x40]), Err(WireError::Truncated));
        let mut big = Vec::new();
        put_varint(&mut big, u64::from(u32::MAX) + 1);
        put_varint(&mut big, 0);
        assert_eq!(decode_datagram(&big), Err(WireError::ForwardOutOfRange));
        assert_eq!(decode_datagram(&[0x01, 0x02]).map(|(_, b)| b.len()), Ok(0));
    }
}
